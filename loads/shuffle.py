"""Shuffle: an all-to-all map -> reduce over numpy blocks, with every byte checked end to end.

Why: a shuffle is where lost objects, failed reconstruction and corrupted transfers between nodes
show up. Each round, ``--partitions`` map tasks each build a ``--block-mb`` block of uint64s and
split it into one part per reducer; each part's checksum (sum mod 2**64) travels beside it as a
separate small object. Each reducer checks every part it receives against its checksum, then the
driver checks the reducer's output checksum against the sum of the map-side checksums. A mismatch
is a ``checksum_errors`` count in the stats line; an output that cannot be fetched (an input part
lost and not reconstructed, a reducer that failed) is a ``lost_outputs`` count — and a failure.
Either makes the run exit 1, so data loss can never pass silently (the
``blocks_lost_or_corrupted`` metric adds the two up).

Rounds run back to back, taking every CPU they can; ``--interval S`` starts one at most every S
seconds instead, a steady load that leaves the host headroom (on the embedded cluster, nodes
sharing 2 cores: a shuffle taking them all made a task storm's recovery after a head kill
measure how fast the box restarts Ray's worker processes, 0.2 to over 18 s, not the cluster).

``--corrupt-one`` flips one element of one part *after* its checksum was taken (round 0, map 0,
reducer 0); ``--lose-one`` makes one map task (round 0, map 0) crash its worker process, with no
retry — what a node loss does to a task whose outputs lived there — so every output of that
round is really lost (``WorkerCrashedError`` on fetch): the test hooks that prove detection
works. Stats (see ``_stats.py``): ``count`` is reducer outputs verified per second, latency is
round start to verified output, plus ``bytes``, ``rounds``, ``checksum_errors`` and
``lost_outputs``. Run as a Ray job or by hand::

    python shuffle.py --duration 30 --partitions 4 --block-mb 2
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import ray  # noqa: E402
from _stats import SecondStats  # noqa: E402

MASK = (1 << 64) - 1


def checksum(arr: np.ndarray) -> int:
    """Sum of the uint64 values mod 2**64 (additive, so reducer outputs can be checked too)."""
    return int(np.sum(arr, dtype=np.uint64))


@ray.remote(max_retries=3)
def map_block(round_no: int, map_no: int, partitions: int, elements: int, corrupt: bool,
              crash: bool = False):
    if crash:
        os._exit(1)  # the worker process dies with the task: its outputs are lost
    rng = np.random.default_rng([round_no, map_no])
    block = rng.integers(0, 1 << 62, size=elements, dtype=np.uint64)
    parts = [np.ascontiguousarray(p) for p in np.array_split(block, partitions)]
    sums = [checksum(p) for p in parts]
    if corrupt:
        parts[0] = parts[0].copy()
        parts[0][0] ^= np.uint64(1)  # a bit flip the checksum does not know about
    return (*parts, sums)


@ray.remote(max_retries=3)
def reduce_parts(reducer: int, expected: list[int], *parts: np.ndarray):
    bad = sum(1 for part, want in zip(parts, expected, strict=True) if checksum(part) != want)
    out = np.concatenate(parts)
    return bad, checksum(out), int(out.nbytes)


def run_round(round_no: int, args, stats: SecondStats) -> tuple[int, int]:
    """One map -> reduce round; returns (checksum_errors, failures)."""
    p = args.partitions
    elements = max(p, int(args.block_mb * 1024 * 1024 / 8))
    t0 = time.monotonic()
    lose = args.lose_one and round_no == 0
    maps = [
        map_block.options(num_returns=p + 1, num_cpus=args.task_cpus,
                          max_retries=0 if lose and m == 0 else 3).remote(
            round_no, m, p, elements, args.corrupt_one and round_no == 0 and m == 0,
            lose and m == 0,
        )
        for m in range(p)
    ]
    try:
        sums = ray.get([refs[p] for refs in maps], timeout=args.timeout)
    except Exception:  # a map whose checksums are lost: every reducer of the round fails
        for _ in range(p):
            stats.fail()
        stats.add("lost_outputs", p)
        return 0, p
    reducers = [
        reduce_parts.options(num_cpus=args.task_cpus).remote(
            r, [sums[m][r] for m in range(p)], *[maps[m][r] for m in range(p)]
        )
        for r in range(p)
    ]
    errors = failures = 0
    for r, ref in enumerate(reducers):
        try:
            bad, out_sum, nbytes = ray.get(ref, timeout=args.timeout)
        except Exception:
            stats.fail()
            stats.add("lost_outputs", 1)
            failures += 1
            continue
        want = sum(sums[m][r] for m in range(p)) & MASK
        bad += int(out_sum != want)
        if bad:
            stats.add("checksum_errors", bad)
            errors += bad
            stats.fail()
        else:
            stats.ok(time.monotonic() - t0)
        stats.add("bytes", nbytes)
    stats.add("rounds", 1)
    return errors, failures


def flush(stats: SecondStats) -> None:
    """Emit the last, partial second (wait for its end so the line is complete)."""
    time.sleep(max(0.0, math.floor(time.time()) + 1.01 - time.time()))
    stats.tick()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=600.0, help="seconds to run (cap)")
    parser.add_argument("--partitions", type=int, default=4, help="map tasks = reduce tasks")
    parser.add_argument("--block-mb", type=float, default=1.0, help="MB per map block")
    parser.add_argument("--rounds", type=int, default=0, help="rounds to run; 0 = until duration")
    parser.add_argument("--interval", type=float, default=0.0,
                        help="start a round at most every this many seconds (a steady load "
                             "that leaves the host headroom); 0 = back to back")
    parser.add_argument("--task-cpus", type=float, default=0.25, help="num_cpus per task")
    parser.add_argument("--timeout", type=float, default=60.0, help="a slower get is a failure")
    parser.add_argument("--corrupt-one", action="store_true", help="test hook: corrupt one part")
    parser.add_argument("--lose-one", action="store_true",
                        help="test hook: one map task crashes, its outputs are lost")
    parser.add_argument("--name", default="shuffle", help="load name in the stats lines")
    args = parser.parse_args(argv)

    if not ray.is_initialized():
        ray.init(address=os.environ.get("RAY_ADDRESS", "auto"), log_to_driver=False)
    stats = SecondStats(args.name, extra={"checksum_errors": 0, "lost_outputs": 0})
    start = time.monotonic()
    errors = failures = rounds = 0
    next_at = start
    while time.monotonic() - start < args.duration and (args.rounds <= 0 or rounds < args.rounds):
        while time.monotonic() < next_at:  # the pace: a stalled round is not made up
            time.sleep(max(0.0, min(0.2, next_at - time.monotonic())))
            stats.tick()
        if time.monotonic() - start >= args.duration:
            break
        next_at = time.monotonic() + args.interval
        e, f = run_round(rounds, args, stats)
        errors, failures, rounds = errors + e, failures + f, rounds + 1
        stats.tick()
    flush(stats)
    if errors or failures:
        print(f"shuffle: {errors} checksum errors, {failures} lost outputs in {rounds} rounds",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
