"""How the embedded cluster is laid out: one plan per node (address, ports, resources, env).

The head gets 0 CPUs (KubeRay's advice: no work on the head), the GCS store's settings and the
GCS's health-check knobs (``RAY_health_check_*``, when the target sets them);
workers get the long GCS reconnect timeout KubeRay sets, the GPU label on GPU workers, and the
``raychaos_driver`` resource on CPU workers, so job drivers and the sentinel never sit on a node
a fault is about to take away. In netns mode every node has its own address and the default
ports; in host mode they share 127.0.0.1 and get distinct ports.
"""

from __future__ import annotations

import socket
from pathlib import Path

from raychaos.config.rayflags import HEALTH_CHECK_ENV
from raychaos.config.settings import LocalClusterSpec
from raychaos.targets.local.network.pods import PodNetwork
from raychaos.targets.local.nodes import NodePlan

__all__ = ["plan_nodes", "DRIVER_RESOURCE", "GPU_LABEL", "NODE_LABEL"]

DRIVER_RESOURCE = "raychaos_driver"
GPU_LABEL = "raychaos.io/node-group"
NODE_LABEL = "raychaos.io/node"  # the pod's name: loads pin work to one node with it
#: The head pod's CPU weight, in CPUs: on Kubernetes the head has a node of its own, so a storm
#: on the workers never slows its restart; on one small machine the weight must say so. At 2
#: CPUs (the workers' 1 each) a head restarted under a storm answered its first GCS call after
#: 12 s and then none for 24 s more while a dozen dashboard processes started beside the GCS.
HEAD_CPU_REQUEST = 8.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def plan_nodes(spec: LocalClusterSpec, state_dir: Path, net: PodNetwork,
               mode: str) -> list[NodePlan]:
    """The head (index 0) and ``spec.workers`` workers, GPU workers first."""
    mb = 1024 * 1024
    plans = []
    for index in range(spec.workers + 1):
        head = index == 0
        name = "head" if head else f"worker-{index}"
        gpu = not head and index <= spec.gpu_workers
        env = {}
        if head and spec.gcs_storage == "rocksdb":
            env = {"RAY_gcs_storage": "rocksdb",
                   "RAY_gcs_storage_path": str(state_dir / "gcs")}
        elif head and spec.gcs_storage == "redis":
            env = {"RAY_REDIS_ADDRESS": spec.redis_address or "",
                   "RAY_external_storage_namespace": spec.name}
        if head:  # the GCS checks every raylet's health: the target's knobs
            env.update({var: str(getattr(spec, key)) for key, var in HEALTH_CHECK_ENV.items()
                        if getattr(spec, key, None) is not None})
        if not head:
            env["RAY_gcs_rpc_server_reconnect_timeout_s"] = str(
                int(spec.worker_reconnect_timeout_s))
            if spec.num_workers_soft_limit is not None:  # see LocalClusterSpec
                env["RAY_num_workers_soft_limit"] = str(spec.num_workers_soft_limit)
        # spill counters and the GCS's own CPU/memory every 2 s, not Ray's default 10 s: the
        # timeline needs them at the resolution of a spill burst
        env["RAY_metrics_report_interval_ms"] = "2000"
        if mode == "netns":
            ip, netns = net.address(index), net.netns(name)
            mount = f"/tmp/rc-{net.tag}"
            ports = {"gcs": 6379, "dashboard": 8265, "metrics": 8080}
        else:
            ip, netns = "127.0.0.1", None
            mount = f"/tmp/rc-{net.tag}-{index}"
            base = 20000 + (int(net.tag, 16) % 200) * 100 + index * 10
            ports = {"agent": base, "metrics": base + 1, "runtime_env": base + 2,
                     "agent_grpc": base + 3, "client": base + 4,
                     "min_worker": 30000 + index * 1000,
                     "max_worker": 30000 + index * 1000 + 999}
            if head:
                ports.update(gcs=_free_port(), dashboard=_free_port())
        plans.append(NodePlan(
            name=name, index=index, role="head" if head else "worker", ip=ip, netns=netns,
            node_dir=str(state_dir / "nodes" / name), mount_point=mount,
            cpus=spec.head_cpus if head else spec.cpus_per_worker,
            # the pod's CPU request (its weight against the other pods, :mod:`.cpu`): the
            # head has a node of its own on Kubernetes (see HEAD_CPU_REQUEST)
            cpu_request=max(HEAD_CPU_REQUEST, spec.head_cpus) if head
            else max(1.0, spec.cpus_per_worker),
            gpus=spec.gpus_per_gpu_worker if gpu else 0.0,
            memory_bytes=spec.memory_mb * mb,
            object_store_bytes=spec.object_store_mb * mb,
            labels={} if head else {GPU_LABEL: "gpu" if gpu else "cpu", NODE_LABEL: name},
            # drivers (and the sentinel) go to CPU workers when there are any: a drained or
            # preempted GPU node must not take the load's own driver with it
            resources={DRIVER_RESOURCE: float(spec.driver_slots)}
            if not head and (not gpu or spec.gpu_workers == spec.workers) else {},
            ports=ports, env=env,
            shm_bytes=(spec.shm_mb or spec.memory_mb) * mb if mode == "netns" else 0,
            spill_dir=f"{mount}/spill" if mode == "netns" and not head
            and spec.spill_disk.size_mb else ""))
    return plans

