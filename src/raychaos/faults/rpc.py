"""Ray-native RPC faults: failing gRPC calls and a slow GCS, with Ray's own test flags.

Generic chaos tools stop at the packet; Ray fails *calls*. Ray's release tests inject them with
two variables it reads at process start (pinned formats: :mod:`raychaos.config.rayflags`):

- :func:`inject_rpc_failures` — ``RAY_testing_rpc_failure``: calls a node's processes make fail
  before the request is sent, after the reply came, or while in flight, with given
  probabilities — what a flaky network or an overloaded peer looks like to Ray's retry logic;
- :func:`slow_gcs` — ``RAY_testing_asio_delay_us`` on the head: the GCS's request handlers run
  late, a GCS that is slow rather than dead.

Both restart the chosen node(s) with the variable (locally through the supervisor; on KubeRay
by patching the container env of the group's template and recreating the pod — the plan and the
dry run say so), and the undo restarts them without it. Evidence: the variable as the live
processes carry it, and the effect — injected failures counted from Ray's own log lines, GCS
latency measured before and after.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping
from typing import Annotated, Any

from raychaos.config.arguments import Problem, Range, fault_action
from raychaos.config.rayflags import (
    ASIO_DELAY_ENV,
    INJECTED_LOG_LINES,
    RAY_VERSION,
    RPC_FAILURE_ENV,
    asio_delay_env,
    asio_delay_problems,
    parse_rpc_spec,
    rpc_failure_env,
    rpc_failure_problems,
)
from raychaos.context import current
from raychaos.errors import FaultFailed
from raychaos.faults.network import node_names

__all__ = ["RESTARTS", "inject_rpc_failures", "slow_gcs"]

#: what the plan (``--dry-run``) says about these faults: they restart nodes
RESTARTS = {
    "inject_rpc_failures": "restarts the nodes with RAY_testing_rpc_failure (on Kubernetes: "
                           "patches their group's container env and recreates the pods), and "
                           "the undo restarts them without it",
    "slow_gcs": "restarts the head with RAY_testing_asio_delay_us (on Kubernetes: patches the "
                "head group's container env and recreates the head pod; without GCS fault "
                "tolerance the workers are lost; a GCS slower than 100 ms a request keeps the "
                "KubeRay head unready while it lasts: Ray's /api/gcs_healthz gives it 0.1 s), "
                "and the undo restarts it without it",
}


def _spec(args: Mapping[str, Any]) -> list[Problem]:
    return [(f"spec.{where}" if where else "spec", message)
            for where, message in rpc_failure_problems(args.get("spec"))]


def _delays(args: Mapping[str, Any]) -> list[Problem]:
    return asio_delay_problems(args.get("methods"), float(args["min_ms"]),
                               float(args["max_ms"]))


def _injected(run: Any, nodes: list[str], methods: list[str]) -> dict[str, dict[str, int]]:
    needles = [prefix + method for prefix in INJECTED_LOG_LINES for method in methods] \
        if "*" not in methods else list(INJECTED_LOG_LINES)
    counts = run.target.ray_log_counts(nodes, needles)
    return {node: {k: v for k, v in per.items() if v} for node, per in counts.items()}


@fault_action(rules=[_spec, node_names("nodes", required=True)])
def inject_rpc_failures(spec: dict[str, Any] | str,
                        nodes: list[str] | None = None,
                        observe_s: Annotated[float, Range(0, 3600)] = 0.0,
                        wait_s: Annotated[float, Range(10, 3600)] = 180.0) -> dict[str, Any]:
    """Restart ``nodes`` with ``RAY_testing_rpc_failure`` so their processes' calls fail.

    :param spec: per client call name (``NodeManagerService.grpc_client.RequestWorkerLease``,
        ``ray::rpc::NodeInfoGcsService.grpc_client.GetAllNodeInfo``) or ``*``: ``num_failures``
        (-1 = unlimited), ``req_failure_prob``, ``resp_failure_prob``, ``in_flight_failure_prob``
        (probabilities in [0, 1], whole percents, at most 1 together) and optionally
        ``num_lower_bound_req_failures`` etc.; a mapping or its JSON text.
    :param nodes: the nodes to restart with it, e.g. ``["worker-1"]`` (the default).
    :param observe_s: seconds to watch after the restart, counting the failures Ray injects;
        none in that time fails the fault (it matched no call).
    :param wait_s: how long each node may take to be ALIVE again after its restart.
    :returns: evidence: the variable as the live processes carry it, node IDs before/after,
        failures injected per node (Ray's log lines) when ``observe_s`` is set.
    """
    nodes = ["worker-1"] if nodes is None else nodes
    parsed, _ = parse_rpc_spec(spec)
    assert parsed is not None
    env = rpc_failure_env(parsed)
    run = current()
    args = {"spec": parsed, "nodes": nodes, "observe_s": observe_s, "wait_s": wait_s,
            "ray_version": RAY_VERSION, "env": env}
    with run.fault("inject_rpc_failures", args) as record:
        evidence = run.target.restart_with_env(nodes=nodes, env=env, wait_s=wait_s,
                                               record=record)
        evidence["ray_value"] = env[RPC_FAILURE_ENV]
        run.ledger.update(record, evidence=evidence)
        if observe_s and not evidence.get("dry_run"):
            run.wait(observe_s)
            injected = _injected(run, nodes, sorted(parsed))
            evidence["injected"] = injected
            evidence["injected_total"] = sum(sum(v.values()) for v in injected.values())
            run.ledger.update(record, evidence=evidence)
            if not evidence["injected_total"] and not run.stopping.is_set():
                raise FaultFailed(f"inject_rpc_failures: Ray injected no failure on {nodes} in "
                                  f"{observe_s:g} s: no process there made one of "
                                  f"{sorted(parsed)[:3]}")
    return evidence


def _latency_ms(run: Any, samples: int = 5) -> float | None:
    values = [v for v in (run.target.gcs_call_ms(timeout=5.0) for _ in range(samples))
              if v is not None]
    return round(statistics.median(values), 2) if values else None


@fault_action(rules=[_delays])
def slow_gcs(methods: list[str] | None = None,
             min_ms: Annotated[float, Range(0, 60_000)] = 200.0,
             max_ms: Annotated[float, Range(0, 60_000)] = 400.0,
             wait_s: Annotated[float, Range(10, 3600)] = 180.0) -> dict[str, Any]:
    """Restart the head with ``RAY_testing_asio_delay_us``: GCS requests are handled late.

    :param methods: GCS request handlers as ``Service.Method``, e.g.
        ``["NodeInfoGcsService.GetAllNodeInfo", "ActorInfoGcsService.CreateActor"]``; default:
        every GCS request handler of Ray 2.60.
    :param min_ms: the shortest delay added to each request, in ms.
    :param max_ms: the longest delay (each request gets a random one in [min_ms, max_ms)).
    :param wait_s: how long the head may take to be back (with every worker) after its restart.
    :returns: evidence: the variable as the live GCS carries it, GCS round trip (the node table)
        before and after, head restart seconds.
    """
    env = asio_delay_env(methods, min_ms, max_ms)
    run = current()
    args = {"methods": methods, "min_ms": min_ms, "max_ms": max_ms, "wait_s": wait_s,
            "ray_version": RAY_VERSION}
    with run.fault("slow_gcs", args) as record:
        before = _latency_ms(run)
        t0 = time.monotonic()
        evidence = run.target.restart_with_env(nodes=["head"], env=env, wait_s=wait_s,
                                               record=record)
        evidence["restart_s"] = evidence.get("restart_s", round(time.monotonic() - t0, 2))
        after = None if evidence.get("dry_run") else _latency_ms(run)
        evidence.update(gcs_call_ms_before=before, gcs_call_ms_after=after,
                        ray_value_chars=len(env[ASIO_DELAY_ENV]))
        run.ledger.update(record, evidence=evidence)
        node_table = methods is None or "NodeInfoGcsService.GetAllNodeInfo" in methods
        if node_table and before is not None and after is not None and after < min_ms:
            raise FaultFailed(f"slow_gcs: the node table still answers in {after:g} ms after "
                              f"the restart (asked for {min_ms:g}-{max_ms:g} ms)")
    return evidence
