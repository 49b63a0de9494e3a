"""The CPU group of the light work of ``make test``: the light lane's tests and the test bed's
background build run in a group of weight :data:`LIGHT_SHARES` (what nice 19 weighs against
nice 0's 1024), so they take only the CPU the real clusters leave idle.

Nice alone does not do that here: with ``sched_autogroup_enabled`` on, nice orders processes
only inside their session's autogroup, and that autogroup competes at full weight (1024) with
each pod's CPU group. Measured on this machine: a nice-19 busy loop took 99 % of a core beside
two busy loops in a group of weight 1024, 5 % from a group of weight 15; in CI the nice-19 lane
took 0.77 CPUs in a RayService head kill's chaos window.

``python -m tests._lanes [--shares N] CMD...`` runs a command in such a group (weight N) and
removes the group after (the Makefile's background build, at weight 64: most of what the
clusters leave while the lane runs too, since both lanes end up waiting for it — at weight 2
the cold build took 28 min, at 15 over 30); :func:`join` moves the calling process in and
removes the group when it exits (an xdist worker of the light lane). Not root or no CPU
controller: nothing is moved, nice is all there is.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import sys

from raychaos.targets.local.cpu import CpuGroups, cpu_groups
from raychaos.targets.lock import pid_alive

LIGHT_SHARES = 15
PREFIX = "rc-light-"  # not ``raychaos-``: that prefix is the system under test's


def _owner_gone(name: str) -> bool:
    """The group's owner (the PID its name ends in) no longer runs (a zombie counts as gone)."""
    pid = name.rsplit("-", 1)[-1]
    return not pid.isdigit() or not pid_alive(int(pid))


def _enter(groups: CpuGroups, name: str, shares: int) -> bool:
    for stale in groups.existing(PREFIX):  # a killed run's (an empty group is removed)
        if stale != name and _owner_gone(stale):
            groups.remove(stale)
    try:
        groups.ensure(name, shares)
        (groups.path(name) / "cgroup.procs").write_text(str(os.getpid()))
    except OSError as exc:
        print(f"light work runs without a CPU group of its own: {exc}", file=sys.stderr)
        groups.remove(name)
        return False
    return True


def _leave(groups: CpuGroups, name: str) -> None:
    try:
        (groups.path() / "cgroup.procs").write_text(str(os.getpid()))
    except OSError:
        pass
    left = groups.remove(name)
    if left:
        print(f"the light CPU group still holds processes: {left}", file=sys.stderr)


def join(what: str) -> bool:
    """Move this process into ``rc-light-<what>-<pid>``; it leaves and removes it at exit."""
    groups = cpu_groups()
    if groups is None:
        return False
    name = f"{PREFIX}{what}-{os.getpid()}"
    if not _enter(groups, name, LIGHT_SHARES):
        return False
    atexit.register(_leave, groups, name)
    return True


def main(argv: list[str]) -> int:
    shares = LIGHT_SHARES
    if argv[:1] == ["--shares"] and len(argv) > 1 and argv[1].isdigit():
        shares, argv = int(argv[1]), argv[2:]
    if not argv:
        print("usage: python -m tests._lanes [--shares N] CMD [ARG...]", file=sys.stderr)
        return 2
    groups = cpu_groups()
    name = f"{PREFIX}cmd-{os.getpid()}"
    entered = groups is not None and _enter(groups, name, shares)
    try:
        return subprocess.call(argv)
    finally:
        if entered and groups is not None:
            _leave(groups, name)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
