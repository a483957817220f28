"""The jobs behind hvd.torch's GPU tests, without pytest (run_gpu_tests.py uses them directly
where pytest is missing, as it may be on a GPU machine with no package registry; test_cuda.py is
the pytest face of the same): which jobs this machine can run, why none when it has no usable GPU,
and each job's per-scenario results. A job runs cuda_worker.py on every rank through
local_launch.py (no hvdrun: the GPU machine has no control plane), once per process.
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "cuda_worker.py")
SCENARIOS = ["allreduce", "stream_order", "grouped_allreduce", "broadcast", "allgather",
             "alltoall", "reducescatter", "compression_fp16", "distributed_optimizer",
             "distributed_optimizer_fp16", "functions", "sync_batch_norm", "join"]
JOB_TIMEOUT = float(os.environ.get("HVD_TEST_CUDA_JOB_TIMEOUT", "150"))


def under_launcher():
    """True inside a job (hvdrun sets the rank variables): these tests start their own ranks."""
    return any(v in os.environ for v in ("HVD_SIZE", "HOROVOD_SIZE", "HVD_RANK", "HOROVOD_RANK"))


def why_no_gpu():
    """None when the CUDA tests can run here, else why not (the skip reason)."""
    if under_launcher():
        return "starts its own ranks; run outside hvdrun (ctest: python_torch_cuda)"
    try:
        import torch
    except ImportError as e:
        return "%s cannot import torch (%s)" % (sys.executable, e)
    if torch.version.cuda is None:
        return "torch %s was built without CUDA (torch.version.cuda is None)" % torch.__version__
    if not torch.cuda.is_available():
        return ("torch.cuda.is_available() is False: no GPU visible to torch %s (CUDA %s; "
                "CUDA_VISIBLE_DEVICES=%s)" % (torch.__version__, torch.version.cuda,
                                              os.environ.get("CUDA_VISIBLE_DEVICES", "unset")))
    from hvd.common import basics
    if not basics.cuda_built():
        return ("this hvd build has no CUDA plugin (libhvd_cuda.so beside %s, or "
                "HVD_CUDA_PLUGIN): build it where the CUDA toolkit is" % basics.library_path)
    return None


WHY = why_no_gpu()


def jobs():
    """(job name, ranks, extra environment) of every job: one rank; two ranks sharing GPU 0 (the
    runtime stages through host memory); two ranks on two GPUs (NCCL) where two are visible."""
    out = [("np1", 1, {}), ("np2_shared_gpu", 2, {"HVD_TEST_GPU": "0"})]
    if WHY is None:
        import torch
        if torch.cuda.device_count() >= 2:
            out.append(("np2", 2, {}))
    return out


_results = {}  # job name -> ({scenario: [(rank, status, detail)]}, summary of the job)


def run_job(name, np, env):
    """The job's results, running it on first use."""
    if name not in _results:
        sys.path.insert(0, HERE)
        from local_launch import launch
        codes, outputs, timed_out = launch(np, [sys.executable, WORKER], timeout=JOB_TIMEOUT,
                                           extra_env=env)
        per_scenario = {}
        for rank, out in enumerate(outputs):
            for line in out.splitlines():
                if line.startswith("RESULT "):
                    r = json.loads(line[len("RESULT "):])
                    per_scenario.setdefault(r["name"], []).append((rank, r["status"], r["detail"]))
        tails = "\n".join("---- rank %d (last 60 lines) ----\n%s"
                          % (k, "\n".join(o.splitlines()[-60:])) for k, o in enumerate(outputs))
        summary = "ranks exited %s%s\n%s" % (
            codes, " (timed out after %.0f s)" % JOB_TIMEOUT if timed_out else "", tails)
        _results[name] = (per_scenario, summary)
    return _results[name]


def check(name, np, env, scenario):
    """None when `scenario` passed on every rank of job `name`, else what went wrong."""
    per_scenario, summary = run_job(name, np, env)
    got = per_scenario.get(scenario, [])
    failed = ["rank %d: %s" % (rank, detail) for rank, status, detail in got if status != "passed"]
    if failed:
        return "\n".join(failed)
    if len(got) != np:
        return "%d of %d ranks reported %s; %s" % (len(got), np, scenario, summary)
    return None
