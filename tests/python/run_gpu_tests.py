"""Runs hvd.torch's GPU tests (test_cuda.py) and says what each did:

    PYTHONPATH=build/python python3 tests/python/run_gpu_tests.py [--summary FILE] [pytest args]

prints one line per test, `name: passed`, `name: failed (first line of the error)` or
`name: skipped (reason)`, and writes the same lines to FILE (scripts/gpu-check.sh puts them in
its report). Without pytest (a GPU machine may lack it) the same tests run without it, under
the same names. Exit status: 0 when every test passed, 1 when one failed or pytest could not run
them, 77 when every test was skipped (ctest's SKIP_RETURN_CODE: python_torch_cuda then shows as
skipped, not passed, on a machine without a GPU).
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


class Collector:
    """A pytest plugin that keeps each test's outcome and, for skips and failures, why."""

    def __init__(self):
        self.results = []  # (name, outcome, reason)

    def pytest_runtest_logreport(self, report):
        if report.when == "call" or report.outcome != "passed":  # a passing setup says nothing
            reason = ""
            if report.skipped:
                longrepr = report.longrepr
                reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
                reason = reason[len("Skipped: "):] if reason.startswith("Skipped: ") else reason
            elif report.failed:
                text = str(report.longrepr)
                errors = [line[2:].strip() for line in text.splitlines() if line.startswith("E ")]
                reason = errors[0] if errors else text.strip().splitlines()[-1]
                if report.when != "call":
                    reason = "error in %s: %s" % (report.when, reason)
            self.results.append((report.nodeid.split("::", 1)[-1], report.outcome, reason))


def run_with_pytest(pytest, pytest_args):
    collector = Collector()
    code = pytest.main(["-q", "-p", "no:cacheprovider", "-rs", "-o", "faulthandler_timeout=600",
                        os.path.join(HERE, "test_cuda.py")] + pytest_args, plugins=[collector])
    if code not in (0, 1, 5):  # interrupted, internal or usage error: not a test's failure
        collector.results.append(("pytest", "failed", "pytest exited %d" % code))
    return collector.results


def run_without_pytest():
    """The same tests, named as pytest names them, for an interpreter without pytest."""
    import cuda_jobs
    results = []
    for scenario in cuda_jobs.SCENARIOS:
        for job, np, env in cuda_jobs.jobs():
            name = "test_cuda[%s-%s]" % (scenario, job)
            if cuda_jobs.WHY is not None:
                results.append((name, "skipped", cuda_jobs.WHY))
                continue
            problem = cuda_jobs.check(job, np, env, scenario)
            results.append((name, "failed" if problem else "passed",
                            problem.strip().splitlines()[-1] if problem else ""))
            if problem:
                print("%s FAILED:\n%s" % (name, problem))
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--summary", help="also write the per-test lines to this file")
    args, pytest_args = parser.parse_known_args(argv)
    sys.path.insert(0, HERE)  # conftest, cuda_jobs, local_launch
    try:
        import pytest
    except ImportError:
        print("(%s has no pytest: running the tests without it)" % sys.executable)
        results = run_without_pytest()
    else:
        results = run_with_pytest(pytest, pytest_args)
    lines = ["%s: %s%s" % (name, outcome, " (%s)" % reason if reason else "")
             for name, outcome, reason in results]
    print("\n".join(["", "hvd GPU tests:"] + lines))
    if args.summary:
        with open(args.summary, "w") as f:
            f.write("\n".join(lines) + "\n")
    outcomes = {outcome for _, outcome, _ in results}
    if "failed" in outcomes:
        return 1
    if not outcomes or outcomes == {"skipped"}:
        return 77
    return 0


if __name__ == "__main__":
    sys.exit(main())
