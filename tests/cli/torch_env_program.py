"""A torch.distributed program written for torchrun, run by hvdrun in the tests of torchrun's
contract (tests/cli/hvdrun_torchrun_test.cc, tests/cluster/torchrun_cluster_test.cc).

It does what such a program does (init_process_group("gloo") with the default env:// method,
an all_reduce), and checks every variable of the contract (control/worker_env.h) against hvd's
own and against what the test expects, on every rank; then rank 0 checks that all ranks agree.
Any mismatch exits 1 with the variable named.

  --hosts N            GROUP_WORLD_SIZE expected
  --master-addr A      MASTER_ADDR expected
  --max-restarts K     TORCHELASTIC_MAX_RESTARTS expected
  --fail-rank R        rank R prints a line without flushing and exits 3 after the all_reduce
                       (on the first attempt only with --fail-first-attempt-only); the others
                       block in a barrier until hvd ends them
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist


def check(name, got, want):
    if str(got) != str(want):
        print(f"rank {os.environ.get('RANK')}: {name} is {got!r}, expected {want!r}",
              file=sys.stderr, flush=True)
        sys.exit(1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--hosts", type=int, default=1)
    p.add_argument("--master-addr", default="127.0.0.1")
    p.add_argument("--max-restarts", type=int, default=0)
    p.add_argument("--fail-rank", type=int, default=-1)
    p.add_argument("--fail-first-attempt-only", action="store_true")
    a = p.parse_args()
    env = os.environ

    rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
    local_rank, local_world = int(env["LOCAL_RANK"]), int(env["LOCAL_WORLD_SIZE"])
    check("RANK", rank, env["HVD_RANK"])
    check("WORLD_SIZE", world, env["HVD_SIZE"])
    check("LOCAL_RANK", local_rank, env["HVD_LOCAL_RANK"])
    check("LOCAL_WORLD_SIZE", local_world, env["HVD_LOCAL_SIZE"])
    check("GROUP_WORLD_SIZE", env["GROUP_WORLD_SIZE"], a.hosts)
    # Host-major placement with the same ranks on every host: torchrun's numbering.
    check("RANK from GROUP_RANK", rank, int(env["GROUP_RANK"]) * local_world + local_rank)
    check("ROLE_RANK", env["ROLE_RANK"], rank)
    check("ROLE_WORLD_SIZE", env["ROLE_WORLD_SIZE"], world)
    check("ROLE_NAME", env["ROLE_NAME"], "default")
    check("MASTER_ADDR", env["MASTER_ADDR"], a.master_addr)
    port = int(env["MASTER_PORT"])
    check("MASTER_PORT in range", 0 < port < 65536, True)
    check("TORCHELASTIC_RUN_ID", env["TORCHELASTIC_RUN_ID"], env["HVD_JOB_ID"])
    check("TORCHELASTIC_RESTART_COUNT", env["TORCHELASTIC_RESTART_COUNT"], env["HVD_ATTEMPT"])
    check("TORCHELASTIC_MAX_RESTARTS", env["TORCHELASTIC_MAX_RESTARTS"], a.max_restarts)
    check("TORCHELASTIC_USE_AGENT_STORE", env["TORCHELASTIC_USE_AGENT_STORE"], "False")
    check("PYTHONUNBUFFERED", env.get("PYTHONUNBUFFERED"), "1")

    dist.init_process_group("gloo")  # env://, as under torchrun
    check("dist.get_rank()", dist.get_rank(), rank)
    check("dist.get_world_size()", dist.get_world_size(), world)
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    check("all_reduce sum", t.item(), world * (world + 1) / 2)

    names = ["MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID", "GROUP_RANK", "HVD_HOSTNAME"]
    views = [None] * world
    dist.all_gather_object(views, {n: env[n] for n in names})
    if rank == 0:
        for r, v in enumerate(views):
            for n in ["MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID"]:
                check(f"rank {r}'s {n}", v[n], env[n])
        hosts = {}
        for v in views:
            hosts.setdefault(v["GROUP_RANK"], set()).add(v["HVD_HOSTNAME"])
        check("hosts per GROUP_RANK", sorted(len(h) for h in hosts.values()), [1] * a.hosts)

    attempt = int(env["TORCHELASTIC_RESTART_COUNT"])
    if rank == a.fail_rank and not (a.fail_first_attempt_only and attempt > 0):
        # Not flushed: only PYTHONUNBUFFERED gets it out before os._exit.
        print(f"rank {rank} fails on attempt {attempt}")
        os._exit(3)
    dist.barrier()
    print(f"rank {rank}/{world} ok: local {local_rank}/{local_world}, group "
          f"{env['GROUP_RANK']}/{env['GROUP_WORLD_SIZE']}, master {env['MASTER_ADDR']}:{port}, "
          f"restart {attempt}/{env['TORCHELASTIC_MAX_RESTARTS']}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
