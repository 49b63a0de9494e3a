"""Ray's own fault flags, pinned to Ray 2.60.0: what ``RAY_testing_rpc_failure`` and
``RAY_testing_asio_delay_us`` accept, checked completely before any node sees them.

Why here and so strict: Ray reads both variables once, at process start, and a malformed value
does not fail a call — it kills the process (``RAY_LOG(FATAL)`` / ``RAY_CHECK`` in
``src/ray/rpc/rpc_chaos.cc``, ``_Exit(1)`` in ``src/ray/common/asio/asio_chaos.cc``), i.e. a
raylet or GCS that crash-loops. An unknown method name is worse: Ray ignores it, and the fault
"lands" without any effect. So the formats and the method names are taken from the Ray 2.60.0
sources and binaries (``strings`` of ``_raylet.so``, ``raylet`` and ``gcs_server``) and every
spec is checked against them; another Ray version is refused, not guessed at.

Formats (Ray 2.60.0):

- ``RAY_testing_rpc_failure`` — JSON ``{"<call name>" | "*": {"num_failures": N,
  "req_failure_prob": P, "resp_failure_prob": P, "in_flight_failure_prob": P,
  "num_lower_bound_req_failures": N, ...}}``. Call names are the *client* side of a gRPC method,
  as the client macros spell them: ``NodeManagerService.grpc_client.RequestWorkerLease``, and for
  the GCS's services with their C++ namespace, ``ray::rpc::NodeInfoGcsService.grpc_client.
  GetAllNodeInfo``. Probabilities are whole percents (0..100) summing to at most 100;
  ``num_failures`` -1 means unlimited; ``*`` applies to every call and overrides every other
  entry. Each injected failure is logged by the calling process (:data:`INJECTED_LOG_LINES`).
- ``RAY_testing_asio_delay_us`` — ``name=min_us:max_us[,name=...]``: every event posted to an
  ``instrumented_io_context`` under ``name`` runs that many microseconds later (``min_us <=
  max_us``). A GCS request handler is posted as ``<Service>.grpc_server.<Method>
  .HandleRequestImpl``; ``*`` would delay every event of every process on the node, so it is
  not offered.

raychaos's own spec (what an experiment writes) uses probabilities in [0, 1] instead of
percents; :func:`rpc_failure_problems` checks it and :func:`rpc_failure_env` renders Ray's.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from typing import Any

__all__ = ["ASIO_DELAY_ENV", "CLIENT_METHODS", "FAULT_ENV", "GCS_HANDLERS",
           "HEALTH_CHECK_ENV", "HEALTH_CHECK_FAILED_LINE", "INJECTED_LOG_LINES", "MARKED_DEAD_LINE",
           "RAY_VERSION", "RPC_FAILURE_ENV", "asio_delay_env", "asio_delay_problems",
           "parse_rpc_spec", "rpc_failure_env", "rpc_failure_problems"]

RAY_VERSION = "2.60.0"
RPC_FAILURE_ENV = "RAY_testing_rpc_failure"
ASIO_DELAY_ENV = "RAY_testing_asio_delay_us"
FAULT_ENV = (RPC_FAILURE_ENV, ASIO_DELAY_ENV)
#: the GCS's health checks of each raylet (read by gcs_server): target settings -> variables
HEALTH_CHECK_ENV = {"health_check_period_ms": "RAY_health_check_period_ms",
                    "health_check_timeout_ms": "RAY_health_check_timeout_ms",
                    "health_check_failure_threshold": "RAY_health_check_failure_threshold",
                    "health_check_initial_delay_ms": "RAY_health_check_initial_delay_ms"}
#: what the calling process logs for each failure it injects (RAY_LOG(INFO), rpc/grpc_client.h)
INJECTED_LOG_LINES = ("Inject RPC request failure for ", "Inject RPC response failure for ",
                      "Inject RPC response failure while request in flight for ")
#: the GCS's log line for one failed health check of a raylet (gcs_health_check_manager.cc)
HEALTH_CHECK_FAILED_LINE = "Health check failed for node "
#: what a raylet logs when it finds out the GCS marked it dead (raylet/node_manager.cc), then exits
MARKED_DEAD_LINE = "mistakenly been marked as dead by the GCS"

_GCS_SERVICES: dict[str, tuple[str, ...]] = {
    "ActorInfoGcsService": ("CreateActor", "GetActorInfo", "GetAllActorInfo",
                            "GetNamedActorInfo", "KillActorViaGcs", "ListNamedActors",
                            "RegisterActor", "ReportActorOutOfScope",
                            "RestartActorForLineageReconstruction"),
    "ControlPlanePubSubGcsService": ("GcsPublish", "GcsSubscriberCommandBatch",
                                     "GcsSubscriberPoll"),
    "InternalKVGcsService": ("GetInternalConfig", "InternalKVDel", "InternalKVExists",
                             "InternalKVGet", "InternalKVKeys", "InternalKVMultiGet",
                             "InternalKVPut"),
    "JobInfoGcsService": ("AddJob", "GetAllJobInfo", "GetNextJobID", "MarkJobFinished"),
    "NodeInfoGcsService": ("CheckAlive", "DrainNode", "GetAllNodeAddressAndLiveness",
                           "GetAllNodeInfo", "GetClusterId", "RegisterNode", "UnregisterNode"),
    "NodeResourceInfoGcsService": ("GetAllAvailableResources", "GetAllResourceUsage",
                                   "GetAllTotalResources", "GetDrainingNodes"),
    "ObservabilityPubSubService": ("GcsPublish", "GcsSubscriberCommandBatch",
                                   "GcsSubscriberPoll", "ReportJobError"),
    "PlacementGroupInfoGcsService": ("CreatePlacementGroup", "GetAllPlacementGroup",
                                     "GetNamedPlacementGroup", "GetPlacementGroup",
                                     "RemovePlacementGroup", "WaitPlacementGroupUntilReady"),
    "RayEventExportGcsService": ("AddEvents",),
    "RuntimeEnvGcsService": ("PinRuntimeEnvURI",),
    "TaskInfoGcsService": ("AddTaskEventData", "GetTaskEvents"),
    "WorkerInfoGcsService": ("AddWorkerInfo", "GetAllWorkerInfo", "GetWorkerInfo",
                             "ReportWorkerFailure", "UpdateWorkerDebuggerPort",
                             "UpdateWorkerNumPausedThreads"),
    "AutoscalerStateService": ("DrainNode", "GetClusterResourceState", "GetClusterStatus",
                               "ReportAutoscalingState", "ReportClusterConfig",
                               "RequestClusterResourceConstraint",
                               "ResizeRayletResourceInstances"),
}
#: Clients whose calls the GCS-side macros name with their namespace (``ray::rpc::``...).
_GCS_CLIENT_CALLS = {
    **{s: m for s, m in _GCS_SERVICES.items()
       if s not in ("AutoscalerStateService", "ControlPlanePubSubGcsService",
                    "ObservabilityPubSubService", "RuntimeEnvGcsService")},
    "ControlPlanePubSubGcsService": ("GcsSubscriberCommandBatch", "GcsSubscriberPoll"),
    "ObservabilityPubSubService": ("GcsPublish", "ReportJobError"),
    "RuntimeEnvGcsService": ("PinRuntimeEnvURI",),
}
_NODE_CALLS: dict[str, tuple[str, ...]] = {
    "NodeManagerService": (
        "CancelLeasesWithResourceShapes", "CancelLocalTask", "CancelWorkerLease",
        "CommitBundleResources", "DrainRaylet", "FormatGlobalMemoryInfo", "FreeLocalObjects",
        "GetAgentPIDs", "GetNodeStats", "GetObjectsInfo", "GetResourceLoad", "GetSystemConfig",
        "GetWorkerFailureCause", "GetWorkerPIDs", "GlobalGC", "IsLocalWorkerDead",
        "KillLocalActor", "NotifyGCSRestart", "PinObjectIDs", "PrepareBundleResources",
        "PrestartWorkers", "PushMutableObject", "RegisterMutableObject",
        "ReleaseUnusedActorWorkers", "ReleaseUnusedBundles", "RemovePlacementGroupBundles",
        "ReportWorkerBacklog", "RequestWorkerLease", "ResizeLocalResourceInstances",
        "ReturnWorkerLease", "ShutdownRaylet"),
    "CoreWorkerService": (
        "ActorCallArgWaitComplete", "CancelTask", "DeleteSpilledObjects", "Exit",
        "GetCoreWorkerStats", "GetObjectLocationsOwner", "GetObjectStatus", "KillActor",
        "LocalGC", "NumPendingTasks", "PlasmaObjectReady", "PubsubCommandBatch",
        "PubsubLongPolling", "PushTask", "RayletNotifyGCSRestart", "RegisterMutableObjectReader",
        "ReportGeneratorItemReturns", "RequestOwnerToCancelTask", "RestoreSpilledObjects",
        "SpillObjects", "UpdateGeneratorBackpressureConsumed", "UpdateObjectLocationBatch",
        "WaitForActorRefDeleted"),
    "ObjectManagerService": ("Pull", "Push"),
}

#: Every client call name ``RAY_testing_rpc_failure`` can fail in Ray 2.60.0.
CLIENT_METHODS: frozenset[str] = frozenset(
    [f"ray::rpc::{s}.grpc_client.{m}" for s, ms in _GCS_CLIENT_CALLS.items() for m in ms]
    + [f"ray::rpc::autoscaler::AutoscalerStateService.grpc_client.{m}"
       for m in _GCS_SERVICES["AutoscalerStateService"]]
    + [f"{s}.grpc_client.{m}" for s, ms in _NODE_CALLS.items() for m in ms])
#: Every GCS request handler ``slow_gcs`` can delay, as ``Service.Method``.
GCS_HANDLERS: tuple[str, ...] = tuple(sorted(f"{s}.{m}" for s, ms in _GCS_SERVICES.items()
                                             for m in ms))

RPC_PROBS = ("req_failure_prob", "resp_failure_prob", "in_flight_failure_prob")
RPC_COUNTS = ("num_lower_bound_req_failures", "num_lower_bound_resp_failures",
              "num_lower_bound_in_flight_failures")
RPC_KEYS = ("num_failures", *RPC_PROBS, *RPC_COUNTS)

Problem = tuple[str, str]  # (key path below the argument, message)
CLIENT_HINT = (" (client call names look like 'NodeManagerService.grpc_client.RequestWorkerLease'"
               " or 'ray::rpc::NodeInfoGcsService.grpc_client.GetAllNodeInfo')")
HANDLER_HINT = " (GCS handlers look like 'NodeInfoGcsService.GetAllNodeInfo')"


def _suggest(name: str, known: list[str] | tuple[str, ...] | frozenset[str]) -> str:
    short = {k.rsplit(".", 1)[-1]: k for k in known}
    close = [short[m] for m in difflib.get_close_matches(name.rsplit(".", 1)[-1], short, 1)]
    close = close or difflib.get_close_matches(name, list(known), 1, 0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def parse_rpc_spec(spec: Any) -> tuple[dict[str, Any] | None, list[Problem]]:
    """The spec as a mapping (a JSON string is parsed), or the one problem why not."""
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except json.JSONDecodeError as exc:
            return None, [("", f"is not valid JSON ({exc.msg} at character {exc.pos})")]
    if not isinstance(spec, dict):
        return None, [("", f"expected a mapping of RPC method -> failures, got "
                           f"{type(spec).__name__} {spec!r}"[:160])]
    return spec, []


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _one_method(method: str, config: Any) -> list[Problem]:
    where = method
    if not isinstance(config, dict):
        return [(where, f"expected a mapping of {', '.join(RPC_KEYS)}, got {config!r}"[:160])]
    out: list[Problem] = []
    for key in config:
        if key not in RPC_KEYS:
            out.append((f"{where}.{key}", f"unknown key for Ray {RAY_VERSION}'s "
                                          f"{RPC_FAILURE_ENV} (expected one of: "
                                          f"{', '.join(RPC_KEYS)})"))
    num = config.get("num_failures", 0)
    if not _is_int(num):
        out.append((f"{where}.num_failures", f"expected a whole number, got {num!r}"))
    elif num == 0 or num < -1:
        out.append((f"{where}.num_failures", f"must be -1 (unlimited) or at least 1, got "
                                             f"{num!r}" + (" (Ray's default 0 fails nothing)"
                                                           if num == 0 else "")))
    total = 0.0
    for key in RPC_PROBS:
        value = config.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            out.append((f"{where}.{key}", f"expected a probability in [0, 1], got {value!r}"))
            continue
        if not 0 <= value <= 1:
            hint = (f" (a probability, not Ray's percent: {value:g}% is {value / 100:g})"
                    if 1 < value <= 100 and float(value).is_integer() else "")
            out.append((f"{where}.{key}", f"must be in [0, 1], got {value!r}{hint}"))
            continue
        if abs(value * 100 - round(value * 100)) > 1e-9:
            out.append((f"{where}.{key}", f"Ray {RAY_VERSION} takes whole percents: "
                                          f"{value!r} is not a multiple of 0.01"))
            continue
        total += value
    if total > 1 + 1e-9:
        out.append((where, f"{' + '.join(RPC_PROBS)} = {total:g} exceeds 1 (Ray aborts the "
                           "process when they add up to more than 100%)"))
    for key in RPC_COUNTS:
        value = config.get(key, 0)
        if not _is_int(value) or value < 0:
            out.append((f"{where}.{key}", f"expected a whole number >= 0, got {value!r}"))
    if not out and total == 0 and not any(config.get(k) for k in RPC_COUNTS):
        out.append((where, "every failure probability and lower bound is 0: nothing would "
                           "fail"))
    return out


def rpc_failure_problems(spec: Any) -> list[Problem]:
    """Every problem of a raychaos RPC failure spec (see the module docstring)."""
    parsed, problems = parse_rpc_spec(spec)
    if parsed is None:
        return problems
    if not parsed:
        return [("", "is empty: name at least one RPC method (or '*')")]
    out: list[Problem] = []
    if "*" in parsed and len(parsed) > 1:
        out.append(("*", f"the wildcard overrides every other method in Ray {RAY_VERSION}: "
                         f"give '*' alone or name methods ({sorted(parsed)[:3]})"))
    for method, config in parsed.items():
        if method != "*" and method not in CLIENT_METHODS:
            out.append((method, f"unknown RPC method for Ray {RAY_VERSION}"
                                f"{_suggest(method, CLIENT_METHODS) or CLIENT_HINT}"))
            continue
        out += _one_method(method, config)
    return out


def rpc_failure_env(spec: Any) -> dict[str, str]:
    """``{RAY_testing_rpc_failure: <Ray's JSON>}`` for a spec without problems."""
    parsed, _ = parse_rpc_spec(spec)
    assert parsed is not None and not rpc_failure_problems(parsed), "validate the spec first"
    ray: dict[str, dict[str, int]] = {}
    for method, config in sorted(parsed.items()):
        ray[method] = {"num_failures": int(config.get("num_failures", 0))}
        for key in RPC_PROBS:
            if config.get(key):
                ray[method][key] = int(round(float(config[key]) * 100))
        for key in RPC_COUNTS:
            if config.get(key):
                ray[method][key] = int(config[key])
    return {RPC_FAILURE_ENV: json.dumps(ray, separators=(",", ":"), sort_keys=True)}


def asio_delay_problems(methods: list[str] | None, min_ms: float, max_ms: float
                        ) -> list[Problem]:
    """Problems of a ``slow_gcs`` request, keyed by argument (``methods[1]``, ``max_ms``)."""
    out: list[Problem] = []
    for i, name in enumerate(methods or []):
        if name == "*":
            out.append((f"methods[{i}]", "'*' would delay every event handler of every process "
                                         "on the head, not only GCS requests: name GCS "
                                         "handlers, or leave methods out for all of them"))
        elif name not in GCS_HANDLERS:
            hint = _suggest(name, GCS_HANDLERS) or HANDLER_HINT
            out.append((f"methods[{i}]", f"unknown GCS request handler {name!r} for Ray "
                                         f"{RAY_VERSION}{hint}"))
    if methods is not None and not methods:
        out.append(("methods", "is empty: name at least one GCS handler, or leave it out for "
                               "all of them"))
    if methods and len(set(methods)) != len(methods):
        out.append(("methods", f"names a handler twice: {methods!r}"))
    if min_ms > max_ms:
        out.append(("min_ms", f"is above max_ms ({min_ms:g} > {max_ms:g}): Ray exits on a "
                              "delay range whose minimum is bigger than its maximum"))
    elif max_ms <= 0:
        out.append(("max_ms", "is 0: nothing would be delayed"))
    for name, value in (("min_ms", min_ms), ("max_ms", max_ms)):
        if abs(value * 1000 - round(value * 1000)) > 1e-6:
            out.append((name, f"Ray {RAY_VERSION} takes whole microseconds: {value!r} ms is "
                              "finer than 0.001"))
    return out


def asio_delay_env(methods: list[str] | None, min_ms: float, max_ms: float) -> dict[str, str]:
    """``{RAY_testing_asio_delay_us: "<handler>=min:max,..."}`` for a request without problems."""
    assert not asio_delay_problems(methods, min_ms, max_ms), "validate the request first"
    lo, hi = int(round(min_ms * 1000)), int(round(max_ms * 1000))
    items = [f"{s}.grpc_server.{m}.HandleRequestImpl={lo}:{hi}"
             for s, m in (name.split(".", 1) for name in (methods or GCS_HANDLERS))]
    return {ASIO_DELAY_ENV: ",".join(items)}


def ray_names(spec: Mapping[str, Any]) -> list[str]:
    """The call names a valid RPC spec fails (``*`` as is)."""
    return sorted(spec)
