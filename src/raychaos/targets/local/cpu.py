"""A pod's share of the CPU, as a Kubernetes CPU request gives it: a cgroup per pod.

On Kubernetes the kubelet puts each pod in a cgroup whose weight comes from its CPU request
(``cpu.shares = millicores * 1024 / 1000`` on cgroup v1), and the head usually has a node of
its own. On one small machine every process of every "pod" competes with every other: a task
storm's dozen worker processes outweigh a restarting head, whose dashboard agent then misses
the raylet's fixed 15 s wait for its port files and the head crash-loops — a failure of the box,
not of Ray. Per-process ``nice`` cannot fix that (ten busy workers at nice 5 still outweigh one
agent at nice -5); a group per pod can: the whole pod weighs what its request says, however many
processes it runs.

So each local pod gets ``raychaos-<cluster>--<node>`` in the CPU controller, the pod's first
process joins it before it execs anything (every process of the pod inherits it), and ``down``
removes it. The groups sit side by side at the top, not under one group of the cluster: a
parent's weight counts in full against the processes outside it however few of its children
are busy, so with the head down (its group empty) the workers would have had the head's weight
too, and the supervisor's image pull for the new head — outside every pod, like a kubelet's —
waited 25 s to start and crawled at a quarter of its throttle. The head weighs most (see
:data:`raychaos.targets.local.plan.HEAD_CPU_REQUEST`): a head has a node of its own.

The same group is what the SUT's CPU is counted by (:class:`CpuUsage`, for the host-noise
sensor): on cgroup v1 the ``cpuacct`` controller may be a hierarchy of its own
(``/sys/fs/cgroup/cpuacct``, as on this machine), so the pod's first process joins the
same-named group there too, in the same command, and ``remove`` removes both.

cgroup v1 (``/sys/fs/cgroup/cpu``, ``cpu.shares``) is what this machine has and what the tests
run on; on a cgroup v2 host the same groups are made under ``/sys/fs/cgroup`` with
``cpu.weight`` converted from the shares as the kubelet converts them. Where neither can be
written (not root, no CPU controller), or with ``RAYCHAOS_CPU_GROUPS=off`` in the environment,
pods run ungrouped and workers keep a lower ``nice``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CpuGroups", "CpuUsage", "cluster_prefix", "cpu_groups", "in_cpu_group", "pod_group",
           "shares_for"]

V1_ROOT = Path("/sys/fs/cgroup/cpu")
V1_ACCT_ROOT = Path("/sys/fs/cgroup/cpuacct")
V2_ROOT = Path("/sys/fs/cgroup")
PREFIX = "raychaos-"


def cluster_prefix(cluster: str) -> str:
    """What the names of a local cluster's pod groups start with."""
    return f"{PREFIX}{cluster}--"


def pod_group(cluster: str, node: str) -> str:
    return f"{cluster_prefix(cluster)}{node}"


def shares_for(cpus: float) -> int:
    """cgroup v1 ``cpu.shares`` for a request of ``cpus`` (the kubelet's rule, minimum 2)."""
    return max(2, int(cpus * 1024))


def in_cpu_group(pid: int, prefix: str) -> bool:
    """Is process ``pid`` in a CPU group whose top-level name starts with ``prefix`` (the v1
    ``cpu`` hierarchy's line, or the v2 line)? False when it is gone."""
    try:
        text = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return False
    for line in text.splitlines():
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if (controllers == "" or "cpu" in controllers.split(",")) and \
                path.lstrip("/").startswith(prefix):
            return True
    return False


def weight_for(shares: int) -> int:
    """cgroup v2 ``cpu.weight`` for v1 shares (the kubelet's conversion)."""
    return 1 + ((max(2, min(shares, 262144)) - 2) * 9999) // 262142


@dataclass(frozen=True)
class CpuGroups:
    """The CPU controller of this machine: where groups live and how a weight is written."""

    root: Path
    version: int  # 1 or 2
    acct_root: Path | None = None  # v1: a separate cpuacct hierarchy the pods join as well

    def _roots(self) -> list[Path]:
        return [self.root] + ([self.acct_root] if self.acct_root is not None else [])

    def path(self, *names: str) -> Path:
        return self.root.joinpath(*names)

    def ensure(self, name: str, shares: int) -> Path:
        """Make (or re-weigh) group ``name`` (a relative path, nested with ``/``)."""
        path = self.root / name
        path.mkdir(parents=True, exist_ok=True)
        if self.acct_root is not None:
            (self.acct_root / name).mkdir(parents=True, exist_ok=True)
        if self.version == 1:
            (path / "cpu.shares").write_text(str(shares))
        else:
            (path / "cpu.weight").write_text(str(weight_for(shares)))
        return path

    def join_command(self, name: str, cmd: list[str]) -> list[str]:
        """``cmd`` preceded by a shell that moves itself into group ``name`` and then execs
        it: the pod's first process is in the group before it can start anything."""
        procs = self.root / name / "cgroup.procs"
        if self.acct_root is None:
            return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(procs), *cmd]
        acct = self.acct_root / name / "cgroup.procs"
        return ["/bin/sh", "-c", 'echo $$ > "$0" && echo $$ > "$1" && shift && exec "$@"',
                str(procs), str(acct), *cmd]

    def remove(self, name: str) -> list[str]:
        """Remove group ``name`` and the groups under it, deepest first; what could not be
        removed (a process still in it) is returned (in both hierarchies on v1)."""
        left = []
        for root in self._roots():
            left += self._remove(root / name)
        return left

    @staticmethod
    def _remove(top: Path) -> list[str]:
        if not top.exists():
            return []
        left = []
        for path in sorted((p for p in top.rglob("*") if p.is_dir()),
                           key=lambda p: len(p.parts), reverse=True) + [top]:
            try:
                path.rmdir()
            except OSError:
                left.append(str(path))
        return left

    def existing(self, prefix: str) -> list[str]:
        """The top-level groups whose name starts with ``prefix`` (in either hierarchy)."""
        names: set[str] = set()
        for root in self._roots():
            try:
                names |= {p.name for p in root.iterdir()
                          if p.is_dir() and p.name.startswith(prefix)}
            except OSError:
                pass
        return sorted(names)

    def usage_seconds(self, name: str) -> float | None:
        """CPU seconds group ``name`` used so far (v1 ``cpuacct.usage``, v2 ``cpu.stat``
        ``usage_usec``); None when it cannot be read (no cpuacct group: a pod started before
        pods joined one)."""
        try:
            if self.version == 2:
                for line in (self.root / name / "cpu.stat").read_text().splitlines():
                    key, _, value = line.partition(" ")
                    if key == "usage_usec":
                        return int(value) / 1e6
                return None
            acct = self.acct_root or self.root
            return int((acct / name / "cpuacct.usage").read_text()) / 1e9
        except (OSError, ValueError):
            return None


class CpuUsage:
    """Cumulative CPU seconds of one cluster's pod groups that never goes backwards: each
    group's counter is followed on its own, a counter that restarts (the group removed and
    made again) adds from zero, and a group that goes keeps what it added."""

    def __init__(self, groups: CpuGroups, prefix: str) -> None:
        self.groups = groups
        self.prefix = prefix
        self.last: dict[str, float] = {}
        self.total = 0.0

    def read(self) -> float | None:
        """The total so far; None when the cluster has no group here or one cannot be read."""
        names = self.groups.existing(self.prefix)
        now = {name: self.groups.usage_seconds(name) for name in names}
        if not now or any(v is None for v in now.values()):
            return None
        for name, value in now.items():
            assert value is not None
            before = self.last.get(name, 0.0)
            self.total += value - before if value >= before else value
        self.last = {k: v for k, v in now.items() if v is not None}
        return self.total


def _acct_root(v1_root: Path, acct_root: Path) -> Path | None:
    """Where v1 pods are counted: None when ``cpuacct`` is mounted with ``cpu``."""
    if (v1_root / "cpuacct.usage").exists():
        return None
    if (acct_root / "cpuacct.usage").exists() and os.access(acct_root, os.W_OK):
        return acct_root
    return None


def cpu_groups(v1_root: Path = V1_ROOT, v2_root: Path = V2_ROOT,
               acct_root: Path = V1_ACCT_ROOT) -> CpuGroups | None:
    """The machine's CPU controller when this process may make groups in it, else None."""
    if os.geteuid() != 0 or os.environ.get("RAYCHAOS_CPU_GROUPS", "").lower() == "off":
        return None
    if (v1_root / "cpu.shares").exists() and os.access(v1_root, os.W_OK):
        return CpuGroups(v1_root, 1, _acct_root(v1_root, acct_root))
    controllers = v2_root / "cgroup.controllers"
    if controllers.exists() and "cpu" in controllers.read_text().split():
        control = v2_root / "cgroup.subtree_control"
        try:
            if "cpu" not in control.read_text().split():
                control.write_text("+cpu")
        except OSError:
            return None
        return CpuGroups(v2_root, 2)
    return None
