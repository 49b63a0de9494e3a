"""A test bed's CPU, for the host-noise sensor: on the bed, KubeRay, Kubernetes and the pods
run on the harness's own machine and are the system under test, not unrelated noise."""

from __future__ import annotations

import json
from collections.abc import Callable

from raychaos.testbed.bed import state_root

__all__ = ["local_sut"]


class _BedCpu:
    """Cumulative CPU seconds of a bed on this machine — its CPU groups (its pods', and its
    control plane's where it made one) and its own processes outside them (etcd, the API
    server, controller-manager, scheduler, node agent, kubelet, operator): on the bed, KubeRay
    and Kubernetes are part of the system under test, and the host-noise sensor must not take
    their work for unrelated noise (a head kill beside them read "unrelated work took 0.93
    CPUs"). Never goes backwards: a process that exits keeps what it used."""

    def __init__(self, name: str, pids: dict[str, int]) -> None:
        from raychaos.targets.local.cpu import CpuUsage, cpu_groups
        from raychaos.testbed.node.agent import world_name
        from raychaos.testbed.node.kubelet import world_cpu_prefix

        groups = cpu_groups()
        self.prefix = world_cpu_prefix(world_name(name))
        self.pods = None if groups is None else CpuUsage(groups, self.prefix)
        self.pids = pids
        self.seen: dict[int, float] = {}
        self.grouped: set[int] = set()

    def read(self) -> float | None:
        import psutil

        from raychaos.targets.local.cpu import in_cpu_group

        for pid in self.pids.values():
            if pid in self.grouped or in_cpu_group(pid, self.prefix):
                self.grouped.add(pid)  # a bed process never leaves the control plane's group
                continue  # counted with the groups below
            try:
                t = psutil.Process(pid).cpu_times()
                self.seen[pid] = max(self.seen.get(pid, 0.0), float(t.user + t.system))
            except psutil.Error:
                continue
        pods = self.pods.read() if self.pods is not None else None
        return None if pods is None else pods + sum(self.seen.values())


def local_sut(server: str) -> Callable[[], float | None] | None:
    """For an API server that is a test bed's on this machine, a reader of the bed's CPU
    seconds (:class:`_BedCpu`); None for any other API server."""
    base = state_root()
    for path in sorted(base.glob("*/bed.json")) if base.exists() else []:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if data.get("server") == server.rstrip("/"):
            return _BedCpu(str(data["name"]), {k: int(v) for k, v in data["pids"].items()}).read
    return None
