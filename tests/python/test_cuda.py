"""hvd.torch on CUDA tensors: every collective, DistributedOptimizer on a GPU model against one
process on the whole batch, Compression.fp16 on the device, the object and model functions,
SyncBatchNorm and join, in jobs started without hvdrun (cuda_jobs.py):

  np1              one rank
  np2_shared_gpu   two ranks on GPU 0 (the runtime stages their tensors through host memory)
  np2              two ranks on GPUs 0 and 1 (NCCL), where two GPUs are visible

Each scenario of cuda_worker.py in each job is one test. Without a usable GPU every test is
skipped, saying why; also inside a job started by hvdrun (they start their own ranks). ctest:
python_torch_cuda (label gpu), through run_gpu_tests.py.
"""
import pytest

from cuda_jobs import SCENARIOS, WHY, check, jobs

pytestmark = pytest.mark.skipif(WHY is not None, reason=str(WHY))


@pytest.mark.parametrize("job,np,env", jobs(), ids=[j[0] for j in jobs()])
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_cuda(job, np, env, scenario):
    problem = check(job, np, env, scenario)
    assert problem is None, problem
