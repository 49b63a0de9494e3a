"""A GCS probe that never goes blind: one gRPC channel, a hard deadline on every question.

Why (issue 13)
--------------
The monitor used to sample through ``ray._raylet.GcsClient``, rebuilt after every failure;
building one connects *before* any deadline applies, so against a dead head the sampler went
blind for seconds exactly during the outage it measured (8.5 s in a demo run), and a client
bound to one cluster ID never accepts a GCS restarted without persistence.

What this does instead
----------------------
``GcsProbe(address)`` makes ONE ``grpc`` channel and keeps it: gRPC channels reconnect by
themselves, so nothing is rebuilt per sample. Every question is a plain blocking unary call on
Ray's own generated stubs (``NodeInfoGcsService.GetAllNodeInfo``, ``GetClusterId``,
``NodeResourceInfoGcsService.GetAllResourceUsage``) with ``timeout=`` what is left of
``deadline_s`` and ``wait_for_ready=False``, so ``ask`` returns within its deadline (plus a few
ms of parsing) whatever the GCS is doing:

- GCS gone (connection refused): the call fails at once with UNAVAILABLE; reconnect backoff
  50-100 ms (gRPC's default: 1 s doubling to 120 s), so a GCS that is back is seen at once;
- GCS silent (half-open connection): the call ends at its deadline; a ping unanswered for 2 s
  closes the dead connection so the next question gets a fresh one;
- no retries inside a deadline, no HTTP proxy (see :func:`channel_options`).

What Ray 2.60's GCS needs from a client: no ``ray_cluster_id`` header (a GCS restarted without
persistence would refuse the old one: sending none keeps one channel working across it), the
``authorization: Bearer`` token when the cluster uses token auth, 512 MiB messages. The details,
read in Ray's source and checked against a live GCS, are in ``bench/gcs_probe_accuracy.py``.

Re-registration after a head restart: ``node_reports``
-----------------------------------------------------
A GCS restored from its store (GCS FT) lists the old workers ALIVE at once, from its table, and
raylets do not register again (the GCS sends each one ``NotifyGCSRestart`` and health-checks it;
marking a dead one DEAD takes initial delay + 5 failed checks, ~20 s). What tells a raylet really
answered the NEW GCS is the GCS's own pull of its resource load: every second
(``gcs_pull_resource_loads_period_milliseconds``) it calls ``GetResourceLoad`` on each ALIVE
raylet and stores the reply (``GcsResourceManager::UpdateResourceLoads``). The entry the restored
GCS makes for each node (``OnNodeAdd``) has no ``resource_load_by_shape``; only such a reply sets
it. So in ``GetAllResourceUsage`` a node whose ``ResourcesData`` HAS ``resource_load_by_shape``
answered this GCS incarnation, one without has not (yet). The GCS keeps no time of it: the probe
brackets the moment between the last sample that showed the placeholder (or the last failed
sample before the GCS answered) and the first that showed the pull (``NodeReport.not_before``,
``seen_at``); a sampler calling ``ask(reports=True)`` keeps the bracket one interval wide.

What was rejected as a re-registration signal, and the measurements behind every figure
here, are in ``bench/gcs_probe_accuracy.py``'s docstring (the bench that measures them).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# gRPC's fork handlers abort the interpreter at exit when a process that imported grpc later
# forks (every subprocess the harness starts) — seen as exit 134 after a Kubernetes dry run,
# which imports this module to ask the local target's refusals. The probe never forks with a
# channel open, so it needs none of that support; a user's explicit setting still wins.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import grpc  # noqa: E402 - after the fork-support setting above, which grpc reads at import

from raychaos.targets.gcs_incarnation import Incarnations  # noqa: E402

__all__ = ["GcsProbe", "GcsAnswer", "GcsNode", "NodeReport", "channel_options"]

MAX_MESSAGE_BYTES = 512 * 1024 * 1024  # Ray's max_grpc_message_size


def channel_options(max_backoff_ms: int = 100) -> list[tuple[str, Any]]:
    """The channel arguments: fast reconnect, no hidden retries, keepalive Ray accepts."""
    return [
        # after a refused connect, try again in 50 ms, then at most every ``max_backoff_ms``
        # (gRPC's default: 1 s doubling to 120 s, the probe would see a restarted GCS late)
        ("grpc.initial_reconnect_backoff_ms", 50),
        ("grpc.max_reconnect_backoff_ms", max_backoff_ms),
        # despite its name, the shortest time a connect attempt may take before it is given
        # up (default 20 s): long enough for a slow handshake, and the calls' own deadlines
        # bound every question anyway
        ("grpc.min_reconnect_backoff_ms", 1000),
        ("grpc.enable_retries", 0),
        ("grpc.enable_http_proxy", 0),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        # a half-open connection (peer silent, no FIN) must not outlive a GCS restart: a ping
        # unanswered for 2 s closes it (default 60 s), and a keepalive ping goes out after 2 s
        # without a byte from the server while a call is in flight. Never without calls: Ray's
        # server (permit_without_calls=0, 60 s minimum) would answer those with GOAWAY.
        ("grpc.http2.ping_timeout_ms", 2000),
        ("grpc.keepalive_time_ms", 2000),
        ("grpc.keepalive_timeout_ms", 2000),
        ("grpc.keepalive_permit_without_calls", 0),
        ("grpc.http2.max_pings_without_data", 0),
    ]


@dataclass(frozen=True)
class GcsNode:
    """One row of the GCS node table."""

    node_id: str  # hex
    state: str  # ALIVE | DEAD
    is_head: bool
    address: str
    port: int
    name: str
    resources: dict[str, float]
    cpus: float
    gpus: float
    labels: dict[str, str]
    start_time_ms: int  # set by the raylet when it registered (not touched by a GCS restart)
    end_time_ms: int  # when the GCS marked it dead (0 while alive)
    death_reason: str | None  # e.g. UNEXPECTED_TERMINATION, EXPECTED_TERMINATION
    death_message: str | None
    snapshot_state: str  # NodeSnapshot state; a restored GCS returns the stored one (ACTIVE)
    idle_ms: int

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class GcsAnswer:
    """One sample: did the GCS answer within the deadline, and what it said."""

    up: bool
    at: float  # wall-clock time the question was asked (time.time())
    latency_s: float
    nodes: tuple[GcsNode, ...] = ()
    # hex, from a GetClusterId answered since the GCS last failed to answer; None until then
    # (the first answer after an outage may have had no time left for that call: the ID it
    # would carry is the old GCS's, and a GCS restarted without FT has a new one)
    cluster_id: str | None = None
    error: str | None = None  # gRPC status name (UNAVAILABLE, DEADLINE_EXCEEDED, ...) + detail
    incarnation: int = 0  # bumped when the probe sees the GCS come back as a new process
    # with ask(reports=True): node id -> the GCS got this raylet's own report (node_reports)
    reported: dict[str, bool] | None = None
    # node id -> the GCS holds a syncer resource view for it. NOT evidence of the node: any
    # raylet that reconnects relays the views of every node it knew, dead ones included
    views: dict[str, bool] | None = None

    @property
    def alive(self) -> list[GcsNode]:
        return [n for n in self.nodes if n.state == "ALIVE"]


@dataclass
class NodeReport:
    """Evidence that a node's raylet has reported to the current GCS incarnation."""

    node_id: str
    state: str
    is_head: bool
    reported: bool  # the current GCS holds a resource report from this raylet
    not_before: float | None  # the report was sent after this wall time ...
    seen_at: float | None  # ... and by this one (the first sample that showed it)
    incarnation: int
    fresh: bool = False  # reported, and provably after the moment asked about
    evidence: str = ("GetAllResourceUsage: resource_load_by_shape present = the GCS's own "
                     "GetResourceLoad pull of this raylet answered")

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class _Track:
    reported: bool = False
    last_unreported_at: float | None = None
    seen_at: float | None = None
    not_before: float | None = None
    incarnation: int = 0


def _auth_token(token: str | None) -> str | None:
    if token:
        return token
    if os.environ.get("RAY_AUTH_MODE", "").lower() == "disabled":
        return None
    if os.environ.get("RAY_AUTH_TOKEN"):
        return os.environ["RAY_AUTH_TOKEN"].strip()
    paths = [os.environ.get("RAY_AUTH_TOKEN_PATH"), str(Path.home() / ".ray" / "auth_token")]
    for path in paths:
        if path:
            try:
                text = Path(path).read_text().strip()
            except OSError:
                continue
            if text:
                return text
    return None


class GcsProbe:
    """Asks one GCS, on one long-lived channel, with a hard deadline per question.

    Thread-safe for one sampling thread plus readers of ``node_reports``/``last``.
    """

    @staticmethod
    def load_protos() -> None:
        """Import Ray's generated GCS protos now, on the calling thread: a first import from the
        monitor's thread while the main thread imports Ray's job client deadlocks on Python's
        module lock for ``ray.core.generated`` (seen on the KubeRay world)."""
        from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc  # noqa: F401

    def __init__(self, address: str, *, token: str | None = None,
                 credentials: grpc.ChannelCredentials | None = None,
                 options: list[tuple[str, Any]] | None = None):
        from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

        self.address = address
        self._pb = gcs_service_pb2
        opts = options if options is not None else channel_options()
        self.channel = (grpc.secure_channel(address, credentials, options=opts) if credentials
                        else grpc.insecure_channel(address, options=opts))
        self._nodes_stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(self.channel)
        self._res_stub = gcs_service_pb2_grpc.NodeResourceInfoGcsServiceStub(self.channel)
        tok = _auth_token(token)
        self._metadata = (("authorization", f"Bearer {tok}"),) if tok else ()
        self._lock = threading.Lock()
        self.gcs = Incarnations()  # which GCS process answered (gcs_incarnation.py)
        self.last: GcsAnswer | None = None
        self._want_cid = True  # ask GetClusterId: first answer, and after every failure
        self._tracks: dict[str, _Track] = {}
        self.samples = 0

    # --- the one question --------------------------------------------------------------------
    def ask(self, deadline_s: float = 0.1, reports: bool = False) -> GcsAnswer:
        """Ask for the node table (and, with ``reports``, the resource view, see
        ``node_reports``); never blocks longer than ``deadline_s`` plus a few ms.

        The calls run one after the other on the one channel, each with what is left of the
        deadline: the node table first (it decides ``up``), then the cluster ID (only when the
        GCS was not answering before, or never was), then the resource view. Blocking calls,
        not futures: a third less CPU per sample."""
        at = time.time()
        t0 = time.monotonic()
        pb = self._pb
        calls = [("nodes", self._nodes_stub.GetAllNodeInfo, pb.GetAllNodeInfoRequest())]
        if self._want_cid:
            calls.append(("cid", self._nodes_stub.GetClusterId, pb.GetClusterIdRequest()))
        if reports:
            calls.append(("usage", self._res_stub.GetAllResourceUsage,
                          pb.GetAllResourceUsageRequest()))
        results: dict[str, Any] = {}
        error: str | None = None
        code: grpc.StatusCode | None = None
        for key, method, request in calls:
            left = deadline_s - (time.monotonic() - t0)
            if left <= 0.001:
                if key == "nodes":
                    error, code = "DEADLINE_EXCEEDED: no time left", \
                        grpc.StatusCode.DEADLINE_EXCEEDED
                break
            try:
                reply = method(request, timeout=left, metadata=self._metadata,
                               wait_for_ready=False)
            except grpc.RpcError as exc:
                if key == "nodes":
                    code = exc.code()
                    error = f"{code.name if code else 'UNKNOWN'}: {exc.details()}"
                    break
                continue
            status = getattr(reply, "status", None)
            if status is not None and status.code != 0:  # a GcsStatus inside an OK reply
                if key == "nodes":
                    error = f"GCS_STATUS_{status.code}: {status.message}"
                    break
                continue
            results[key] = reply
        latency = time.monotonic() - t0
        with self._lock:
            return self._record(at, latency, results, error, code)

    @property
    def incarnation(self) -> int:
        return self.gcs.number

    @property
    def incarnation_at(self) -> float | None:  # first answer of the current incarnation
        return self.gcs.since

    @property
    def cluster_id(self) -> str | None:
        return self.gcs.cluster_id

    def _record(self, at: float, latency: float, results: dict[str, Any], error: str | None,
                code: grpc.StatusCode | None) -> GcsAnswer:
        self.samples += 1
        if "nodes" not in results:
            self.gcs.failed(at, refused=code == grpc.StatusCode.UNAVAILABLE)
            self._want_cid = True
            answer = GcsAnswer(up=False, at=at, latency_s=latency, cluster_id=self.cluster_id,
                               error=error, incarnation=self.incarnation)
            self.last = answer
            return answer
        nodes = tuple(_node(n) for n in results["nodes"].node_info_list)
        new_id = None
        if "cid" in results:
            new_id = results["cid"].cluster_id.hex() or None
            self._want_cid = new_id is None
        if self.gcs.answered(at, nodes, new_id):
            for track in self._tracks.values():
                track.reported = False
                track.seen_at = None
                track.last_unreported_at = self.gcs.floor
                track.incarnation = self.incarnation
        reported = views = None
        if "usage" in results:
            reported, views = self._update_reports(at, nodes, results["usage"])
        answer = GcsAnswer(up=True, at=at, latency_s=latency, nodes=nodes,
                           cluster_id=None if self._want_cid else self.cluster_id,
                           incarnation=self.incarnation,
                           reported=reported, views=views)
        self.last = answer
        return answer

    def _update_reports(self, at: float, nodes: tuple[GcsNode, ...], usage: Any
                        ) -> tuple[dict[str, bool], dict[str, bool]]:
        filled, views = {}, {}
        for data in usage.resource_usage_data.batch:
            nid = data.node_id.hex()
            # present only once the GCS's own GetResourceLoad pull got this raylet's answer;
            # the restored placeholder never has it, a relayed syncer view never sets it
            filled[nid] = data.HasField("resource_load_by_shape")
            views[nid] = bool(len(data.resources_total) or len(data.resources_available))
        out = {}
        for node in nodes:
            track = self._tracks.get(node.node_id)
            if track is None:
                # first sight (a node that joined, or the probe's first answer): whatever
                # report this GCS holds came after the incarnation's floor
                track = self._tracks[node.node_id] = _Track(
                    incarnation=self.incarnation, last_unreported_at=self.gcs.floor)
            has = node.state == "ALIVE" and filled.get(node.node_id, False)
            if has and not track.reported:
                track.reported = True
                track.seen_at = at
                track.not_before = track.last_unreported_at
            elif not has:
                track.reported = False
                track.seen_at = None
                track.last_unreported_at = at
            out[node.node_id] = has
        return out, views

    # --- re-registration ---------------------------------------------------------------------
    def node_reports(self, after: float | None = None, deadline_s: float = 0.2
                     ) -> dict[str, NodeReport]:
        """Per node: has its raylet reported to the current GCS incarnation, and when.

        ``fresh`` means the report provably came after ``after`` (a wall time, e.g. the moment
        of a kill): the probe saw the GCS without it at or after that time (or saw the GCS
        come back as a new process after it). With no ``after``, fresh is relative to the
        start of the current incarnation. Asks the GCS once if the last sample carried no
        resource view; a sampler calling ``ask(reports=True)`` keeps the times tight.
        """
        if self.last is None or self.last.reported is None or not self.last.up:
            self.ask(deadline_s=deadline_s, reports=True)
        with self._lock:
            last = self.last
            if last is None or not last.up:
                return {}
            out = {}
            for node in last.nodes:
                track = self._tracks.get(node.node_id, _Track())
                floor = track.not_before
                if after is None:
                    fresh = track.reported and track.incarnation == self.incarnation
                else:
                    fresh = track.reported and floor is not None and floor >= after
                out[node.node_id] = NodeReport(
                    node_id=node.node_id, state=node.state, is_head=node.is_head,
                    reported=track.reported, not_before=floor if track.reported else None,
                    seen_at=track.seen_at,
                    incarnation=track.incarnation, fresh=fresh)
            return out

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> GcsProbe:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


_STATES = {0: "ALIVE", 1: "DEAD"}


def _node(info: Any) -> GcsNode:
    resources = {k: float(v) for k, v in info.resources_total.items()}
    death_reason = death_message = None
    if info.HasField("death_info"):
        death_reason = type(info.death_info).Reason.Name(info.death_info.reason)
        death_message = info.death_info.reason_message or None
    snap = info.state_snapshot
    return GcsNode(
        node_id=info.node_id.hex(), state=_STATES.get(int(info.state), str(info.state)),
        is_head=bool(info.is_head_node), address=info.node_manager_address,
        port=int(info.node_manager_port), name=info.node_name, resources=resources,
        cpus=resources.get("CPU", 0.0), gpus=resources.get("GPU", 0.0),
        labels=dict(info.labels.items()), start_time_ms=int(info.start_time_ms),
        end_time_ms=int(info.end_time_ms), death_reason=death_reason,
        death_message=death_message, snapshot_state=type(snap).State.Name(snap.state),
        idle_ms=int(snap.idle_duration_ms))
