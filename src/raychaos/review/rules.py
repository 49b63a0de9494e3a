"""The resilience rules: what in a RayCluster's spec makes a fault worse than it has to be.

Each rule reads one :class:`~raychaos.review.model.ClusterView` and returns findings; each
finding is one sentence, has a severity (``error``: a fault will do damage the cluster could
have avoided; ``warning``: likely; ``info``: what was checked) and names the catalog experiment
that demonstrates the failure, so a reader can watch it happen instead of taking our word.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Literal

from raychaos.review.model import ClusterView, Group, bytes_of, pod_labels, selector_matches

__all__ = ["RULES", "Finding", "Options", "Rule"]

Severity = Literal["error", "warning", "info"]
#: Ray's own default: without --object-store-memory the store takes 30% of the memory it sees
DEFAULT_STORE_FRACTION = 0.3
RAY_RECONNECT_DEFAULT_S = 60.0  # RAY_gcs_rpc_server_reconnect_timeout_s in Ray
KUBERAY_FT_RECONNECT_S = 600.0  # what KubeRay sets on workers when GCS FT is on
BIG_IMAGE = re.compile(r"(ray-ml|ray-llm|rayproject/ray|-gpu|gpu-|cuda|cu1[0-9]{2}|pytorch|torch|"
                       r"tensorflow|vllm|triton|nemo|jax)", re.IGNORECASE)


@dataclass(frozen=True)
class Options:
    """What the review assumes about the world around the manifest."""

    head_restart_s: float = 60.0  # a head pod rescheduled, pulled and started again


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: Severity
    subject: str  # "RayCluster ray/gpu-pool"
    where: str  # key path in the object
    message: str
    experiment: str  # the catalog experiment that shows it

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    experiment: str
    check: Callable[[ClusterView, Options], list[tuple[Severity, str, str]]]


def _mb(n: float) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


# --- GCS fault tolerance -------------------------------------------------------------------------
def gcs_ft(view: ClusterView, opts: Options) -> list[tuple[Severity, str, str]]:
    ft = view.spec.get("gcsFaultToleranceOptions")
    head = view.head
    annotated = view.annotations.get("ray.io/ft-enabled", "").lower() == "true"
    where = f"{view.path}.gcsFaultToleranceOptions"
    if not ft and not annotated:
        severity: Severity = "warning" if view.kind == "RayJob" else "error"
        return [(severity, where, "GCS fault tolerance is not configured: when the head pod "
                 "dies the new GCS starts empty, every worker exits and detached actors, jobs "
                 "and Serve applications are gone")]
    if view.annotations.get("raychaos.io/gcs-storage") == "rocksdb":  # the local target
        return [("info", where, "GCS fault tolerance on Ray's embedded rocksdb store, on the "
                 "head's own disk: it survives a gcs_server kill and a head restart in place, "
                 "not the loss of the head's node")]
    address = (ft or {}).get("redisAddress") if isinstance(ft, dict) else None
    if not address and head is not None:
        address = head.env("RAY_REDIS_ADDRESS")
    if not address:
        return [("error", where, "GCS fault tolerance is switched on but no Redis address is "
                 "set (gcsFaultToleranceOptions.redisAddress or RAY_REDIS_ADDRESS on the head): "
                 "the GCS has nowhere to keep its state")]
    host = str(address).split("://")[-1].rsplit("@", 1)[-1].rsplit(":", 1)[0]
    if host in ("localhost", "127.0.0.1", "::1", "0.0.0.0"):
        return [("error", where, f"GCS fault tolerance keeps its state in a Redis at "
                 f"{host}, inside the head pod: it dies with the head and the state with it")]
    external = (ft or {}).get("externalStorageNamespace") if isinstance(ft, dict) else None
    return [("info", where, f"GCS fault tolerance on Redis at {host}"
             + (f" (namespace {external})" if external else "") + ": a new head recovers "
             "actors, jobs and node registrations from it")]


# --- the head does no work -----------------------------------------------------------------------
def head_num_cpus(view: ClusterView, opts: Options) -> list[tuple[Severity, str, str]]:
    head = view.head
    if head is None:
        return [("error", f"{view.path}.headGroupSpec", "the cluster has no headGroupSpec")]
    out: list[tuple[Severity, str, str]] = []
    where = f"{head.path}.rayStartParams"
    if head.params.get("num-cpus") not in ("0", "0.0"):
        out.append(("warning", f"{where}.num-cpus", "the head advertises CPUs "
                    f"(num-cpus: {head.params.get('num-cpus', 'from its CPU limit')}): tasks "
                    "and actors land on it and compete with the GCS, which every scheduling "
                    "decision and heartbeat goes through; set num-cpus: '0'"))
    if head.gpus() and head.params.get("num-gpus") not in ("0", "0.0"):
        out.append(("warning", f"{where}.num-gpus", "the head pod requests GPUs and does not "
                    "set num-gpus: '0': GPU work can land next to the GCS and the head then "
                    "dies or stalls with the GPU job"))
    return out


# --- /dev/shm vs the object store ----------------------------------------------------------------
def _shm_of(group: Group, view: ClusterView) -> tuple[str, float | None, str]:
    """(how /dev/shm is provided, its size limit in bytes or None = unbounded, where)."""
    container, spec = group.container, group.pod_spec
    volumes = {v.get("name"): v for v in spec.get("volumes") or [] if isinstance(v, dict)}
    for mount in container.get("volumeMounts") or []:
        if isinstance(mount, dict) and mount.get("mountPath") == "/dev/shm":
            vol = volumes.get(mount.get("name")) or {}
            where = f"{group.path}.template.spec.volumes[{mount.get('name')}]"
            empty = vol.get("emptyDir")
            if isinstance(empty, dict):
                if empty.get("medium") != "Memory":
                    return "disk", None, where
                return "memory", bytes_of(empty.get("sizeLimit")), where
            return "other", None, where
    where = f"{group.path}.template.spec.volumes"
    # none mounted: KubeRay adds the `shared-mem` emptyDir (medium Memory) sized like the
    # container's memory request, else its limit; on a live pod it is there to read
    for pod in view.pods:
        if pod_labels(pod).get("ray.io/group") == group.labels(None)["ray.io/group"]:
            for vol in (pod.get("spec") or {}).get("volumes") or []:
                if vol.get("name") == "shared-mem" and isinstance(vol.get("emptyDir"), dict):
                    return "memory", bytes_of(vol["emptyDir"].get("sizeLimit")), where
    size = group.memory("requests") or group.memory("limits")
    return "kuberay", size, where


def dev_shm(view: ClusterView, opts: Options) -> list[tuple[Severity, str, str]]:
    out: list[tuple[Severity, str, str]] = []
    for group in view.groups:
        store = bytes_of(group.params.get("object-store-memory"))
        limit = group.memory("limits")
        source = "object-store-memory"
        if store is None and limit:
            store, source = limit * DEFAULT_STORE_FRACTION, "Ray's default, 30% of the memory limit"
        kind, size, where = _shm_of(group, view)
        name = f"group {group.name}"
        if kind == "disk":
            out.append(("error", where, f"{name}: /dev/shm is an emptyDir on disk, not "
                        "medium: Memory: the object store is a file on the node's disk"))
        elif kind == "other":
            out.append(("info", where, f"{name}: /dev/shm comes from a volume that is not an "
                        "emptyDir; its size could not be checked"))
        elif store is None:
            out.append(("warning", f"{group.path}.rayStartParams", f"{name}: neither "
                        "object-store-memory nor a memory limit is set: the object store takes "
                        "30% of the node's memory, whatever /dev/shm holds"))
        elif size is not None and size < store:
            how = "KubeRay's shared-mem volume (sized like the memory request)" \
                if kind == "kuberay" else "its sizeLimit"
            out.append(("error", where, f"{name}: /dev/shm is {_mb(size)} ({how}) but the "
                        f"object store is {_mb(store)} ({source}): Ray puts the object store "
                        "on disk in /tmp instead, or the kubelet evicts the pod once shared "
                        "memory passes the limit"))
        elif size is None:
            out.append(("warning", where, f"{name}: /dev/shm is an emptyDir in memory with no "
                        f"sizeLimit: shared memory counts against the pod's memory and an "
                        f"object store of {_mb(store)} can get the pod OOM-killed without "
                        "showing in its working set; set sizeLimit to object-store-memory"))
        else:
            out.append(("info", where, f"{name}: /dev/shm {_mb(size)} holds the "
                        f"{_mb(store)} object store"))
    return out


# --- PodDisruptionBudgets over KubeRay pods ------------------------------------------------------
def pdb(view: ClusterView, opts: Options) -> list[tuple[Severity, str, str]]:
    label_sets = ([pod_labels(p) for p in view.pods] if view.pods
                  else [g.labels(view.cluster_name) for g in view.groups])
    wildcard = () if view.pods or view.kind == "RayCluster" else ("ray.io/cluster",)
    out: list[tuple[Severity, str, str]] = []
    for budget in view.pdbs:
        spec = budget.get("spec") or {}
        name = (budget.get("metadata") or {}).get("name", "?")
        if not any(selector_matches(spec.get("selector"), labels, wildcard)
                   for labels in label_sets):
            continue
        where = f"PodDisruptionBudget {view.namespace}/{name}"
        max_unavailable, min_available = spec.get("maxUnavailable"), spec.get("minAvailable")
        if max_unavailable is not None or (isinstance(min_available, str)
                                           and min_available.endswith("%")):
            what = (f"maxUnavailable: {max_unavailable}" if max_unavailable is not None
                    else f"minAvailable: {min_available}")
            out.append(("error", where, f"{what} over KubeRay pods never allows an eviction: "
                        "the disruption controller needs the owner's scale subresource, which "
                        "RayCluster lacks, so disruptionsAllowed stays 0 and every drain is "
                        "refused with 429 (KubeRay #2662); use an integer minAvailable"))
        else:
            out.append(("info", where, f"minAvailable: {min_available} over Ray pods: "
                        "evictions wait for healthy replacements, as intended"))
    return out


# --- workers outliving a GCS outage --------------------------------------------------------------
def _ft_on(view: ClusterView) -> bool:
    return bool(view.spec.get("gcsFaultToleranceOptions")) or \
        view.annotations.get("ray.io/ft-enabled", "").lower() == "true"


def worker_reconnect(view: ClusterView, opts: Options) -> list[tuple[Severity, str, str]]:
    out: list[tuple[Severity, str, str]] = []
    for group in view.workers:
        raw = group.env("RAY_gcs_rpc_server_reconnect_timeout_s")
        timeout = bytes_of(raw)
        source = "its env"
        if timeout is None:
            timeout, source = ((KUBERAY_FT_RECONNECT_S, "KubeRay's default with GCS FT")
                               if _ft_on(view) else (RAY_RECONNECT_DEFAULT_S, "Ray's default"))
        where = f"{group.path}.template.spec.containers[0].env"
        if timeout < opts.head_restart_s:
            out.append(("error", where, f"group {group.name}: workers exit after "
                        f"{timeout:g} s without a GCS ({source}, "
                        f"RAY_gcs_rpc_server_reconnect_timeout_s) but a head restart is "
                        f"expected to take {opts.head_restart_s:g} s: every worker dies with "
                        "the head"))
    return out


def _probe_window(probe: dict[str, Any]) -> float:
    """Seconds of consecutive failures after which the kubelet restarts the container."""
    period = float(probe.get("periodSeconds") or 10)
    return period * float(probe.get("failureThreshold") or 3) + float(
        probe.get("timeoutSeconds") or 1)


def liveness(view: ClusterView, opts: Options) -> list[tuple[Severity, str, str]]:
    out: list[tuple[Severity, str, str]] = []
    for group in view.workers:
        probe = group.container.get("livenessProbe")
        if not isinstance(probe, dict):
            continue  # KubeRay's own: the local raylet only, 120 x 5 s
        text = " ".join(str(x) for x in ((probe.get("exec") or {}).get("command") or []))
        text += " " + str((probe.get("httpGet") or {}).get("path", ""))
        window = _probe_window(probe)
        where = f"{group.path}.template.spec.containers[0].livenessProbe"
        checks_gcs = "gcs" in text.lower() or "health-check" in text
        if window >= opts.head_restart_s:
            continue
        if checks_gcs:
            out.append(("error", where, f"group {group.name}: the liveness probe checks the "
                        f"GCS and restarts the worker after {window:g} s of failures, sooner "
                        f"than a {opts.head_restart_s:g} s head restart: a GCS outage kills "
                        "every worker (kuberay#634)"))
        else:
            out.append(("warning", where, f"group {group.name}: the liveness probe restarts "
                        f"the worker after {window:g} s of failures; during a GCS outage the "
                        f"raylet health check has been seen failing (ray#52480), and a head "
                        f"restart takes {opts.head_restart_s:g} s"))
    return out


# --- one Ray pod per node ------------------------------------------------------------------------
def _spread(group: Group) -> bool:
    spec = group.pod_spec
    anti = ((spec.get("affinity") or {}).get("podAntiAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution") or []
    spreads = [t for t in spec.get("topologySpreadConstraints") or []
               if t.get("whenUnsatisfiable") == "DoNotSchedule"]
    return any(t.get("topologyKey") == "kubernetes.io/hostname" for t in anti + spreads)


def pods_per_node(view: ClusterView, opts: Options) -> list[tuple[Severity, str, str]]:
    if view.pods:
        nodes = Counter(str((p.get("spec") or {}).get("nodeName")) for p in view.pods
                        if (p.get("spec") or {}).get("nodeName"))
        crowded = {n: c for n, c in nodes.items() if c > 1}
        if crowded:
            node, count = max(crowded.items(), key=lambda kv: kv[1])
            return [("warning", "pods", f"{count} Ray pods of this cluster run on node {node} "
                     f"({len(crowded)} node(s) hold more than one): each runs its own raylet "
                     "and a smaller object store, and they share one network link")]
        return []
    out: list[tuple[Severity, str, str]] = []
    for group in view.workers:
        many = max(group.replicas or 0, group.max_replicas or 0) > 1
        if many and not _spread(group):
            out.append(("info", f"{group.path}.template.spec.affinity", f"group {group.name}: "
                        "nothing keeps two of its pods off one node (no required "
                        "podAntiAffinity or DoNotSchedule spread on kubernetes.io/hostname)"))
    return out


# --- image pulls ---------------------------------------------------------------------------------
def image_pull(view: ClusterView, opts: Options) -> list[tuple[Severity, str, str]]:
    out: list[tuple[Severity, str, str]] = []
    for group in view.groups:
        image = str(group.container.get("image") or "")
        policy = group.container.get("imagePullPolicy")
        tag = image.rsplit("/", 1)[-1].partition(":")[2]
        effective = policy or ("Always" if tag in ("", "latest") else "IfNotPresent")
        if effective == "Always" and BIG_IMAGE.search(image):
            how = "imagePullPolicy: Always" if policy else f"the tag {tag or '(none)'} pulls " \
                                                           "Always"
            out.append(("warning", f"{group.path}.template.spec.containers[0].imagePullPolicy",
                        f"group {group.name}: {how} on {image}, a multi-GB image: every "
                        "restart and replacement waits on the registry, and the head's "
                        "recovery with it"))
    return out


RULES = [
    Rule("gcs-ft", "GCS fault tolerance and where its Redis is", "experiments/head-kill.yaml",
         gcs_ft),
    Rule("head-num-cpus", "the head does no work (num-cpus: 0)",
         "experiments/head-breaking-point.yaml", head_num_cpus),
    Rule("dev-shm", "/dev/shm holds the object store", "experiments/dev-shm-trap.yaml", dev_shm),
    Rule("pdb", "PodDisruptionBudgets over KubeRay pods (KubeRay #2662)",
         "experiments/gpu-node-drain.yaml", pdb),
    Rule("worker-reconnect", "workers wait long enough for a restarting head",
         "experiments/head-kill-slow-registry.yaml", worker_reconnect),
    Rule("liveness", "liveness probes that kill workers during a GCS outage (ray#52480)",
         "experiments/head-kill.yaml", liveness),
    Rule("pods-per-node", "one Ray pod per node", "experiments/network-saturation.yaml",
         pods_per_node),
    Rule("image-pull", "imagePullPolicy: Always on multi-GB images",
         "experiments/registry-throttle.yaml", image_pull),
]
