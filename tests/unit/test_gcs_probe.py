"""GcsProbe without a cluster: silent and closed ports, a fake GCS on Ray's generated servicers
(restarted with a new cluster ID on the same port), the report tracking, a half-open connection.
"""

from __future__ import annotations

import socket
import threading
import time
from concurrent import futures

import grpc
import pytest

from raychaos.targets.gcs_probe import GcsProbe, _auth_token
from tests._sched import SchedulerLag

pb = pytest.importorskip("ray.core.generated.gcs_service_pb2")
pbg = pytest.importorskip("ray.core.generated.gcs_service_pb2_grpc")

SLACK_S = 0.5  # "a few ms" on an idle box; this much on a loaded 2-core one (the bound tested
#                is "never seconds", as the old rebuilt GcsClient was), plus what the process
#                waited for a CPU meanwhile, as tests/_sched.SchedulerLag saw it


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FakeGcs:
    """NodeInfo + NodeResourceInfo services that behave like Ray 2.60's GCS where it matters:
    a call whose ``ray_cluster_id`` header names another cluster is refused (UNAUTHENTICATED);
    a call without one is served."""

    def __init__(self, port: int, cluster_id: bytes = b"\x01" * 28, nodes: int = 2):
        self.port = port
        self.cluster_id = cluster_id
        self.metadata: list[dict[str, str]] = []
        self.loaded = {bytes([i + 1]) * 28 for i in range(nodes)}  # pulled load: reported
        self.node_ids = [bytes([i + 1]) * 28 for i in range(nodes)]
        self.dead = bytes([0xDD]) * 28
        self.hang = 0.0  # seconds each GetAllNodeInfo waits before answering
        self.cid_hang = 0.0  # seconds each GetClusterId waits before answering
        fake = self

        class Nodes(pbg.NodeInfoGcsServiceServicer):
            def GetAllNodeInfo(self, request, context):  # noqa: N802
                fake._check(context)
                if fake.hang:
                    time.sleep(fake.hang)
                reply = pb.GetAllNodeInfoReply()
                for i, nid in enumerate(fake.node_ids):
                    n = reply.node_info_list.add()
                    n.node_id = nid
                    n.node_manager_address = "127.0.0.2"
                    n.node_manager_port = 7410 + i
                    n.is_head_node = i == 0
                    n.start_time_ms = 1000 + i
                    n.resources_total["CPU"] = 0.0 if i == 0 else 2.0
                    n.resources_total["GPU"] = 0.0 if i == 0 else 1.0
                    n.labels["raychaos.io/node-group"] = "gpu"
                    n.state_snapshot.state = 1  # IDLE
                    n.state_snapshot.idle_duration_ms = 1234
                d = reply.node_info_list.add()
                d.node_id = fake.dead
                d.state = 1  # DEAD
                d.end_time_ms = 5000
                d.death_info.reason = 2  # UNEXPECTED_TERMINATION
                d.death_info.reason_message = "health check failed"
                return reply

            def GetClusterId(self, request, context):  # noqa: N802
                fake.metadata.append(dict(context.invocation_metadata()))
                if fake.cid_hang:
                    time.sleep(fake.cid_hang)
                return pb.GetClusterIdReply(cluster_id=fake.cluster_id)

        class Resources(pbg.NodeResourceInfoGcsServiceServicer):
            def GetAllResourceUsage(self, request, context):  # noqa: N802
                fake._check(context)
                reply = pb.GetAllResourceUsageReply()
                for nid in [*fake.node_ids, fake.dead]:
                    b = reply.resource_usage_data.batch.add()
                    b.node_id = nid
                    b.resources_total["CPU"] = 1.0  # every view filled: relayed views are
                    if nid in fake.loaded:
                        b.resource_load_by_shape.SetInParent()
                return reply

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pbg.add_NodeInfoGcsServiceServicer_to_server(Nodes(), self.server)
        pbg.add_NodeResourceInfoGcsServiceServicer_to_server(Resources(), self.server)
        self.server.add_insecure_port(f"127.0.0.1:{port}")
        self.server.start()

    def _check(self, context) -> None:
        md = dict(context.invocation_metadata())
        self.metadata.append(md)
        if "ray_cluster_id" in md and md["ray_cluster_id"] != self.cluster_id.hex():
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "WrongClusterID")

    def stop(self) -> None:
        self.server.stop(grace=0).wait(5)


@pytest.fixture
def fake():
    servers: list[FakeGcs] = []

    def start(port: int | None = None, **kw) -> FakeGcs:
        server = FakeGcs(port or _free_port(), **kw)
        servers.append(server)
        return server

    yield start
    for s in servers:
        s.stop()


@pytest.fixture
def silent_port():
    """A TCP port that accepts connections and never says a word."""
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        lsock.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = lsock.accept()
                held.append(conn)
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield lsock.getsockname()[1]
    stop.set()
    thread.join(2)
    for c in held:
        c.close()
    lsock.close()


def test_deadline_honoured_against_a_port_that_never_answers(silent_port):
    with GcsProbe(f"127.0.0.1:{silent_port}") as probe, SchedulerLag() as lag:
        for deadline in (0.1, 0.05, 0.2):
            t0 = time.monotonic()
            answer = probe.ask(deadline, reports=True)
            t1 = time.monotonic()
            took = t1 - t0
            assert not answer.up and answer.error.startswith("DEADLINE_EXCEEDED")
            allowed = deadline + SLACK_S + lag.late(t0, t1)
            assert took <= allowed, (took, allowed)
            assert answer.latency_s <= allowed


def test_closed_port_fails_fast_and_keeps_failing_fast():
    port = _free_port()  # bound then closed: connection refused
    with GcsProbe(f"127.0.0.1:{port}") as probe, SchedulerLag() as lag:
        for _ in range(20):
            t0 = time.monotonic()
            answer = probe.ask(0.5)
            t1 = time.monotonic()
            assert t1 - t0 < 0.5 + SLACK_S + lag.late(t0, t1)
            assert not answer.up and answer.error.startswith(("UNAVAILABLE", "DEADLINE"))
        # refused connects are UNAVAILABLE, failing at once, not after the 0.5 s deadline
        t0 = time.monotonic()
        quick = [probe.ask(0.5) for _ in range(5)]
        t1 = time.monotonic()
        assert all(a.error.startswith("UNAVAILABLE") for a in quick)
        assert max(a.latency_s for a in quick) < 0.1 + lag.late(t0, t1)


def test_sampling_a_dead_gcs_never_blocks_a_question_past_its_deadline():
    # the property, not a timing: every question to a dead GCS comes back (down) about when its
    # deadline says, never seconds later as a rebuilt GcsClient did; the slack covers a loaded
    # 2-core box (the gap figures are measured in bench/gcs_probe_accuracy.py)
    interval = 0.05
    with GcsProbe(f"127.0.0.1:{_free_port()}") as probe:
        answers = [probe.ask(interval) for _ in range(30)]
    assert not any(a.up for a in answers)
    assert max(a.latency_s for a in answers) <= interval + 0.5


def test_answer_carries_the_node_table_and_cluster_id(fake):
    gcs = fake()
    with GcsProbe(f"127.0.0.1:{gcs.port}") as probe:
        a = probe.ask(1.0)
    assert a.up and a.error is None and a.latency_s < 1.0
    assert a.cluster_id == (b"\x01" * 28).hex()
    by_id = {n.node_id: n for n in a.nodes}
    head, worker = by_id[(b"\x01" * 28).hex()], by_id[(b"\x02" * 28).hex()]
    assert head.is_head and head.state == "ALIVE" and head.cpus == 0.0
    assert not worker.is_head and worker.cpus == 2.0 and worker.gpus == 1.0
    assert worker.labels == {"raychaos.io/node-group": "gpu"}
    assert worker.address == "127.0.0.2" and worker.port == 7411
    assert worker.start_time_ms == 1001 and worker.snapshot_state == "IDLE"
    dead = by_id[(b"\xdd" * 28).hex()]
    assert dead.state == "DEAD" and dead.end_time_ms == 5000
    assert dead.death_reason == "UNEXPECTED_TERMINATION"
    assert dead.death_message == "health check failed"
    assert [n.node_id for n in a.alive] == [head.node_id, worker.node_id]


def test_never_sends_a_cluster_id_and_sends_a_token_only_when_asked(fake, monkeypatch):
    gcs = fake()
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    with GcsProbe(f"127.0.0.1:{gcs.port}") as probe:
        probe.ask(1.0, reports=True)
        probe.ask(1.0, reports=True)
    assert gcs.metadata and all("ray_cluster_id" not in md for md in gcs.metadata)
    assert all("authorization" not in md for md in gcs.metadata)
    gcs.metadata.clear()
    with GcsProbe(f"127.0.0.1:{gcs.port}", token="s3cret") as probe:
        assert probe.ask(1.0).up
    assert all(md.get("authorization") == "Bearer s3cret" for md in gcs.metadata)


def test_token_lookup_order(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    for var in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(var, raising=False)
    assert _auth_token(None) is None
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("home-token\n")
    assert _auth_token(None) == "home-token"  # Ray turns token auth on when this file exists
    (tmp_path / "tok").write_text("path-token")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "tok"))
    assert _auth_token(None) == "path-token"
    monkeypatch.setenv("RAY_AUTH_TOKEN", "env-token")
    assert _auth_token(None) == "env-token"
    assert _auth_token("given") == "given"
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    assert _auth_token(None) is None


def _wait_up(probe: GcsProbe, within: float, interval: float = 0.05, cid: bool = False,
             reports: bool = False):
    """The first answer (with ``cid``: the first carrying the cluster ID — a 0.1 s deadline on
    a busy box may leave the first answer no time for GetClusterId; with ``reports``: the first
    carrying the resource view, for the same reason)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        a = probe.ask(0.1, reports=True)
        if a.up and (a.cluster_id or not cid) and (a.reported is not None or not reports):
            return a
        time.sleep(interval)
    raise AssertionError(f"no answer within {within}s")


def test_same_channel_across_a_restart_with_a_new_cluster_id(fake):
    port = _free_port()
    old = fake(port, cluster_id=b"\x01" * 28)
    probe = GcsProbe(f"127.0.0.1:{port}")
    channel = probe.channel
    try:
        first = probe.ask(1.0)
        assert first.up and first.incarnation == 1
        old.stop()
        down = probe.ask(0.1)
        assert not down.up
        killed_at = time.time()
        with SchedulerLag() as lag:
            new = fake(port, cluster_id=b"\x02" * 28)  # no persistence: a new cluster ID
            t0 = time.monotonic()
            back = _wait_up(probe, 30.0)
            t1 = time.monotonic()
            # reconnect backoff is at most 100 ms: seen within a few samples
            assert t1 - t0 < 1.0 + lag.late(t0, t1)
        assert back.cluster_id in (None, (b"\x02" * 28).hex())  # never the old GCS's
        back = _wait_up(probe, 30.0, cid=True)
        assert back.cluster_id == (b"\x02" * 28).hex() and back.incarnation == 2
        assert probe.channel is channel, "the channel is never rebuilt"
        assert all("ray_cluster_id" not in md for md in new.metadata)
        assert back.at > killed_at
    finally:
        probe.close()


def test_a_new_cluster_id_one_answer_late_is_the_same_new_gcs(fake):
    """A busy box's first answer after a restart may have no time left for GetClusterId: the
    refusal already counted the new GCS, so its ID arriving with the next answer is not a
    second restart (CI: incarnation 3 after one restart)."""
    port = _free_port()
    old = fake(port, cluster_id=b"\x01" * 28)
    with GcsProbe(f"127.0.0.1:{port}") as probe:
        assert probe.ask(1.0).incarnation == 1
        old.stop()
        assert not probe.ask(0.1).up
        new = fake(port, cluster_id=b"\x02" * 28)
        new.cid_hang = 0.5
        first = _wait_up(probe, 30.0)
        assert first.cluster_id is None and first.incarnation == 2
        # and a missed deadline before the ID comes (what CI's busy box did: incarnation 3)
        new.hang, new.cid_hang = 0.5, 0.0
        time.sleep(0.5)  # the hung GetClusterId returns
        assert not probe.ask(0.1).up
        new.hang = 0.0
        time.sleep(0.5)  # the hung GetAllNodeInfo returns
        back = _wait_up(probe, 30.0, cid=True)
        assert back.cluster_id == (b"\x02" * 28).hex() and back.incarnation == 2

        # the control: once the ID is known, another one after a missed deadline (a GCS
        # without fault tolerance replaced behind a forward that never refuses) is a new GCS
        new.hang = 0.5
        assert not probe.ask(0.1).up
        new.cluster_id = b"\x03" * 28
        new.hang = 0.0
        time.sleep(0.5)
        again = _wait_up(probe, 30.0, cid=True)
        assert again.cluster_id == (b"\x03" * 28).hex() and again.incarnation == 3


def _missed_deadlines(gcs, probe: GcsProbe, head: bytes | None = None):  # noqa: ANN001
    """One question that misses its deadline (the GCS hangs), then — listing ``head`` as its
    head node when given — the GCS answers again; that answer."""
    gcs.hang = 0.5
    assert not probe.ask(0.1).up
    if head is not None:
        gcs.node_ids[0] = head
    gcs.hang = 0.0
    time.sleep(0.5)  # the hung handler returns
    return probe.ask(1.0, reports=True)


def test_a_new_head_after_missed_deadlines_is_a_new_gcs_and_a_busy_one_is_not(fake):
    """Behind a port-forward a deleted head pod is never refused (the stream hangs), and GCS FT
    keeps the cluster ID: the replacement shows as an ALIVE head node never seen before. The
    probe numbered it as the old GCS, so its workers never "re-registered" (CI, head-kill-pod)."""
    port = _free_port()
    gcs = fake(port, nodes=3)
    probe = GcsProbe(f"127.0.0.1:{port}")
    try:
        assert probe.ask(1.0, reports=True).incarnation == 1
        # busy: the questions miss their deadline, the same GCS answers after
        assert _missed_deadlines(gcs, probe).incarnation == 1, "a busy GCS is the same process"
        # gone behind the forward; the new GCS lists the new head raylet
        back = _missed_deadlines(gcs, probe, b"\x0e" * 28)
        assert back.incarnation == 2 and probe.incarnation_at == back.at
        # answers without a failure in between are the same process, whatever they list
        gcs.node_ids[0] = b"\x0f" * 28
        assert probe.ask(1.0, reports=True).incarnation == 2
        # a head restarted in place: refused (a new GCS), answering before its raylet
        # registered, missing deadlines while it restores, then its new head: the same GCS
        gcs.stop()
        assert not probe.ask(0.1).up
        gcs = fake(port, nodes=3)
        gcs.node_ids[0] = b"\x0f" * 28
        assert _wait_up(probe, 30.0).incarnation == 3
        assert _missed_deadlines(gcs, probe, b"\x10" * 28).incarnation == 3
        # and the next head replaced behind a silent outage is a new GCS again
        assert _missed_deadlines(gcs, probe, b"\x11" * 28).incarnation == 4
    finally:
        probe.close()


def test_node_reports_tell_a_fresh_pull_from_a_restored_placeholder(fake):
    port = _free_port()
    gcs = fake(port, nodes=3)
    probe = GcsProbe(f"127.0.0.1:{port}")
    ids = [n.hex() for n in gcs.node_ids]
    try:
        before = probe.ask(1.0, reports=True)
        assert before.reported == {ids[0]: True, ids[1]: True, ids[2]: True,
                                   (b"\xdd" * 28).hex(): False}
        # a view for the dead node is there too: views are no evidence of anything
        assert before.views[(b"\xdd" * 28).hex()] is True
        reps = probe.node_reports(after=time.time() - 60)
        assert not any(r.fresh for r in reps.values()), "nothing known before the first answer"
        gcs.stop()
        killed_at = time.time()
        assert not probe.ask(0.1).up
        time.sleep(0.05)
        # restored from its store: all listed ALIVE, only node 1 pulled so far
        gcs = fake(port, nodes=3)
        gcs.loaded = {gcs.node_ids[1]}
        _wait_up(probe, 30.0, reports=True)
        reps = probe.node_reports(after=killed_at)
        assert reps[ids[1]].reported and reps[ids[1]].fresh
        assert reps[ids[1]].not_before >= killed_at
        assert not reps[ids[2]].reported and not reps[ids[2]].fresh
        time.sleep(0.1)
        # deadlines far above the fake's answer time (a bound, not a wait): at nice 19 on a
        # busy box a 0.2 s deadline once left the resource view unasked (reported None)
        assert probe.ask(5.0, reports=True).reported is not None  # node 2 still not pulled:
        gcs.loaded.add(gcs.node_ids[2])  # its floor moved up
        mark = time.time()
        a = probe.ask(5.0, reports=True)
        assert a.reported is not None
        assert a.reported[ids[2]]
        rep = probe.node_reports(after=killed_at)[ids[2]]
        assert rep.fresh and rep.seen_at == a.at
        assert killed_at < rep.not_before <= mark <= rep.seen_at + 0.01
        assert probe.node_reports()[ids[2]].fresh  # relative to this incarnation
        assert not probe.node_reports(after=time.time())[ids[2]].fresh
    finally:
        probe.close()


class _FreezableProxy:
    """TCP proxy to a backend; ``freeze()`` stops forwarding on every open connection while
    keeping the sockets open (a half-open peer), new connections still forward."""

    def __init__(self, backend_port: int):
        self.backend = backend_port
        self.lsock = socket.socket()
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(16)
        self.port = self.lsock.getsockname()[1]
        self.frozen: set[int] = set()
        self.conns: list[tuple[socket.socket, socket.socket]] = []
        self.stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        self.lsock.settimeout(0.1)
        while not self.stop.is_set():
            try:
                client, _ = self.lsock.accept()
            except OSError:
                continue
            upstream = socket.create_connection(("127.0.0.1", self.backend))
            idx = len(self.conns)
            self.conns.append((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(idx, a, b), daemon=True).start()

    def _pump(self, idx: int, src: socket.socket, dst: socket.socket) -> None:
        src.settimeout(0.1)
        while not self.stop.is_set():
            if idx in self.frozen:
                time.sleep(0.05)  # hold the bytes: the peer hears nothing, and no FIN
                continue
            try:
                data = src.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            if not data:
                return
            if idx in self.frozen:
                continue  # swallowed: the peer hears nothing, and no FIN
            try:
                dst.sendall(data)
            except OSError:
                return

    def freeze(self) -> None:
        self.frozen = set(range(len(self.conns)))

    def close(self) -> None:
        self.stop.set()
        for a, b in self.conns:
            a.close()
            b.close()
        self.lsock.close()


def test_a_half_open_connection_is_dropped_within_seconds_and_replaced(fake):
    gcs = fake()
    proxy = _FreezableProxy(gcs.port)
    probe = GcsProbe(f"127.0.0.1:{proxy.port}")
    try:
        with SchedulerLag() as lag:
            assert probe.ask(1.0).up
            proxy.freeze()
            time.sleep(0.2)  # every pump has seen the freeze
            t0 = time.monotonic()
            answers = []
            while time.monotonic() - t0 < 10 + lag.late(t0, time.monotonic()):
                t = time.monotonic()
                a = probe.ask(0.1)
                t1 = time.monotonic()
                assert t1 - t <= 0.1 + SLACK_S + lag.late(t, t1)
                answers.append(a)
                if a.up:
                    break
                time.sleep(0.05)
            t1 = time.monotonic()
            assert answers[-1].up, "an unanswered ping (2 s) should have replaced the dead one"
            assert not answers[0].up and answers[0].error.startswith("DEADLINE_EXCEEDED")
            assert t1 - t0 < 6 + lag.late(t0, t1)
    finally:
        probe.close()
        proxy.close()
