"""targets.py: the goals of issues 6 and 17 checked against compare.py's measurements, each
printed as met or MISSED with the ratio measured (medians over rounds, and the rounds themselves
where a goal says "every round")."""
import os

K, M = 1 << 10, 1 << 20


def human(n):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def iec(n):
    """4096 -> '4 KiB', as the issues name sizes."""
    h = human(n)
    return f"{h[:-1]} {h[-1]}iB" if h[-1] in "KMG" else f"{n} B"


def verdict(ok, text):
    return f"  [{'met' if ok else 'MISSED'}] {text}"


def time_ratio(res, a, p, np_, b):
    """a's median time / p's at np_ ranks and b bytes; None unless both ran."""
    ua, up = res.median_us(a, np_, b), res.median_us(p, np_, b)
    return ua / up if ua and up else None


def per_round(xs):
    return "; per round " + " ".join(f"{x:.2f}" for x in xs)


def spread_of(res, impl, np_, b):
    """The worst round's time over the best round's, or None (fewer than 2 rounds, a 0 us one)."""
    v = res.us.get((impl, np_, b), {})
    if len(v) < 2 or min(v.values()) <= 0:
        return None
    return max(v.values()) / min(v.values())


def print_targets_6(args, impls, res, launch, fusion):
    print("\n## targets (issue 6), from the medians above")
    lines = []

    def ratio(a, p, np_, b):  # a's speed over p's
        return time_ratio(res, p, a, np_, b)

    def rounds(a, p, np_, b):
        return per_round(res.round_ratios(a, p, np_, b))

    if 2 in args.np and 64 * M in args.sizes:
        for peer, want in (("mpi-shm", 2.0), ("gloo", 4.0)):
            x = ratio("hvd-shm", peer, 2, 64 * M)
            if x is not None:
                lines.append(verdict(x >= want, f"2 ranks, 64 MiB: hvd-shm busbw {x:.2f}x {peer}'s "
                                     f"(want >= {want}x)" + rounds("hvd-shm", peer, 2, 64 * M)))
        bw, rd = res.busbw("hvd-shm", 2, 64 * M), res.ref_gbs(64 * M, "reduce2t")
        if bw and rd:
            lines.append(verdict(bw >= rd / 2, f"2 ranks, 64 MiB: hvd-shm busbw {bw:.2f} GB/s = "
                                 f"{bw / rd:.2f} of the 2-thread reduce's {rd:.2f} GB/s (want >= 0.5)"
                                 + per_round(res.round_ref_ratios("hvd-shm", 2, 64 * M,
                                                                  "reduce2t"))))
    if 2 in args.np:
        mid = [b for b in args.sizes if 64 << 10 <= b <= 16 * M]
        xs = [(b, ratio("hvd-shm", "mpi-shm", 2, b)) for b in mid]
        xs = [(b, x) for b, x in xs if x is not None]
        if xs:
            worst = min(xs, key=lambda t: t[1])
            lines.append(verdict(worst[1] >= 1.0, "2 ranks, 64 KiB-16 MiB: hvd-shm / mpi-shm "
                                 f"at least 1x at every size: lowest {worst[1]:.2f}x at "
                                 f"{human(worst[0])}"))
    if 4 << 10 in args.sizes:
        for np_ in args.np:
            x = ratio("hvd-shm", "mpi-shm", np_, 4 << 10)
            if x is not None:
                lines.append(verdict(x >= 0.5, f"{np_} ranks, 4 KiB: hvd-shm time {1 / x:.2f}x "
                                     "mpi-shm's (want <= 2x)"))
            x = ratio("hvd-shm", "gloo", np_, 4 << 10)
            if x is not None:
                lines.append(verdict(x >= 20, f"{np_} ranks, 4 KiB: hvd-shm {x:.1f}x faster "
                                     "than gloo (want >= 20x)"))
    for np_ in args.np:
        for b in (16 * M, 64 * M):
            x = ratio("hvd-tcp", "mpi-tcp", np_, b)
            if b in args.sizes and x is not None:
                lines.append(verdict(x >= 1.5, f"{np_} ranks, {human(b)}: hvd-tcp {x:.2f}x "
                                     "mpi-tcp (want >= 1.5x)" + rounds("hvd-tcp", "mpi-tcp", np_, b)))
    if fusion is not None:
        lines.append(verdict(fusion >= 1.65, f"fusion, ResNet-50 step, 2 ranks: fused {fusion:.2f}x "
                             "faster than unfused (want >= 1.65x)"))
    if "hvdrun" in launch and "mpirun" in launch:
        x = launch["hvdrun"] / launch["mpirun"]
        lines.append(verdict(x <= 0.5, f"launch -np 4: hvdrun takes {x:.2f} of mpirun's time "
                             "(want <= 0.5)"))
    if "hvdrun" in launch and "torchrun" in launch:
        x = launch["torchrun"] / launch["hvdrun"]
        lines.append(verdict(x >= 20, f"launch -np 4: hvdrun {x:.1f}x faster than torchrun "
                             "(want >= 20x)"))
    print("\n".join(lines) if lines else "  (none measured)")


def print_targets_17(args, res, fusion):
    """Issue 17: the path users take (hvd::Allreduce, hvd.torch) against the peers under it."""
    print("\n## targets (issue 17), from the same run")
    lines = []

    def times(a, p, np_, b):  # a's time / p's time in each round both ran (a 0 us round: none)
        return [1 / r for r in res.round_ratios(a, p, np_, b) if r]

    for np_ in args.np:
        tag = f"{np_} ranks" + (f" (oversubscribed: {os.cpu_count()} CPUs)"
                                   if np_ > (os.cpu_count() or np_) else "")
        x = time_ratio(res, "hvd-api", "mpi-shm", np_, 4 * K)
        if x is not None:
            lines.append(verdict(x <= 1.5, f"{tag}, 4 KiB: hvd-api time {x:.2f}x mpi-shm's "
                                 "(want <= 1.5x)" + per_round(
                                     times("hvd-api", "mpi-shm", np_, 4 * K))))
        worst = None  # (speed, size) of the worst round at 64 KiB-256 MiB
        for b in [b for b in args.sizes if 64 * K <= b <= 256 * M]:
            for r in res.round_ratios("hvd-api", "mpi-shm", np_, b):
                if worst is None or r < worst[0]:
                    worst = (r, b)
        if worst is not None:
            lines.append(verdict(worst[0] >= 1.0, f"{tag}, 64 KiB-256 MiB: hvd-api at least "
                                 "mpi-shm's speed in every round: the worst round "
                                 f"{worst[0]:.2f}x, at {iec(worst[1])}"))
        if 64 * M in args.sizes:
            x = time_ratio(res, "gloo", "hvd-api", np_, 64 * M)
            if x is not None:
                lines.append(verdict(x >= 2, f"{tag}, 64 MiB: hvd-api {x:.2f}x gloo's speed "
                                     "(want >= 2x)"))
            bw, rd = res.busbw("hvd-api", np_, 64 * M), res.ref_gbs(64 * M, "reduce2t")
            if bw and rd:
                # Per round as well: the reference ran beside the allreduce in each round, so a
                # round's ratio is free of the machine's phase changes between rounds.
                lines.append(verdict(bw >= rd / 2, f"{tag}, 64 MiB: hvd-api busbw {bw:.2f} GB/s "
                                     f"= {bw / rd:.2f} of the 2-thread reduce's {rd:.2f} GB/s "
                                     "(want >= 0.5)" + per_round(res.round_ref_ratios(
                                         "hvd-api", np_, 64 * M, "reduce2t"))))
        for b, want in ((4 * K, 2.0), (64 * M, 1.05)):
            x = time_ratio(res, "hvd-torch", "hvd-api-oop", np_, b)
            if b in args.sizes and x is not None:
                lines.append(verdict(x <= want, f"{tag}, {iec(b)}: hvd.torch.allreduce time "
                                     f"{x:.2f}x hvd::Allreduce's out of place (want <= {want}x)"
                                     + per_round(times("hvd-torch", "hvd-api-oop", np_, b))))
        for b in (4 * K, 16 * M):
            spread = spread_of(res, "hvd-api", np_, b)
            if b in args.sizes and spread is not None:
                # Open MPI's and the collective layer's spread in the same rounds say how quiet
                # the machine was.
                others = [f"{p} {x:.2f}x" for p in ("mpi-shm", "hvd-shm")
                          for x in [spread_of(res, p, np_, b)] if x is not None]
                lines.append(verdict(spread <= 2, f"{tag}, {iec(b)}: hvd-api's worst round "
                                     f"{spread:.2f}x its best (want <= 2x, on a quiet machine)"
                                     + (f"; the same for {', '.join(others)}" if others else "")))
    if fusion is not None:
        lines.append(verdict(fusion >= 1.0, f"fusion, ResNet-50 step, 2 ranks, one host: fused "
                             f"{fusion:.2f}x unfused's speed (want: never slower)"))
    print("\n".join(lines) if lines else "  (none measured)")


def print_targets(args, impls, res, launch, fusion):
    print_targets_6(args, impls, res, launch, fusion)
    print_targets_17(args, res, fusion)
