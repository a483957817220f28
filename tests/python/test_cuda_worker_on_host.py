"""cuda_worker.py's scenarios on host tensors (HVD_TEST_GPU=cpu), two ranks: the expectations of
the GPU tests are checked on every machine, CI included, so that they are known right before a GPU
runs them. Starts its own ranks: skipped under hvdrun (ctest: python_torch_cuda_worker_on_host)."""
import pytest

from cuda_jobs import SCENARIOS, check, under_launcher

pytestmark = pytest.mark.skipif(under_launcher(), reason="starts its own ranks; run outside hvdrun")


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario_on_host_tensors(scenario):
    problem = check("np2_host", 2, {"HVD_TEST_GPU": "cpu"}, scenario)
    assert problem is None, problem
