"""The world with real Ray behind its pods (one world for the module; run under
``flock /tmp/raychaos-cluster.lock``): the RayCluster becomes Ready with 3 ALIVE Ray nodes, a job
runs, exec works over the WebSocket channel protocol (exit codes on channel 3), a GCS kill
restarts the head container in place, a deleted head pod comes back as a new pod, an eviction
under a budget moves the GPU worker to the other GPU node, and with both GPU nodes cordoned its
replacement stays Pending. Teardown proves nothing is left.
"""

from __future__ import annotations

import json
import os
import socket
import time
import urllib.request

import pytest
from kubernetes import client, config
from kubernetes.stream import portforward, stream

from tests.k8s.world import World

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="real pods need root (netns)")
MEASURED: dict[str, float] = {}


@pytest.fixture(scope="module")
def world():
    w = World(name="t-ray", state_root="/tmp/raychaos-world-tests")
    w.start()
    try:
        MEASURED["startup_s"] = w.wait_ready(timeout=600)
    except BaseException:
        w.stop()
        raise
    yield w
    left = w.stop()
    print(f"\nworld measurements: {json.dumps({k: round(v, 2) for k, v in MEASURED.items()})}")
    assert left == [], left


@pytest.fixture(scope="module")
def api(world):
    cfg = client.Configuration()
    config.load_kube_config(world.kubeconfig, client_configuration=cfg)
    return client.CoreV1Api(client.ApiClient(cfg))


def wait(pred, timeout: float, what: str):  # noqa: ANN001
    t0 = time.monotonic()
    last = None
    while time.monotonic() - t0 < timeout:
        try:
            last = pred()
        except (OSError, ValueError, KeyError, TypeError):
            last = None
        if last:
            return last
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


#: one line per GCS start in gcs_server.out: what the harness's log counts must follow across a
#: container restarted in place (new logs) and a new head pod (new logs again)
GCS_STARTED = "GcsServer server started"
LOG_COUNTS: list[int] = []


@pytest.fixture(scope="module")
def harness(world):
    """raychaos's own Kubernetes target, connected once for the module (its cumulative log
    counts must survive the head's restarts)."""
    from raychaos.config.settings import KubernetesSpec
    from raychaos.targets.kubernetes.target import KubernetesTarget

    t = KubernetesTarget(KubernetesSpec(cluster="demo", namespace="ray",
                                        kubeconfig=world.kubeconfig), run_id="tworldray")
    t.connect()
    yield t
    t.close()


def gcs_starts(harness) -> int:  # noqa: ANN001
    counts = harness.ray_log_counts(["head"], [GCS_STARTED])
    LOG_COUNTS.append(counts["head"][GCS_STARTED])
    return LOG_COUNTS[-1]


def dashboard(world: World, path: str, timeout: float = 10) -> dict:
    with urllib.request.urlopen(world.proxy_url() + path, timeout=timeout) as resp:
        return json.loads(resp.read())


def alive_nodes(world: World) -> dict[str, str]:
    """Ray's own view (the state API, read from the GCS): node id → IP of every ALIVE node."""
    data = dashboard(world, "/api/v0/nodes?limit=100")["data"]["result"]
    rows = data["result"] if isinstance(data, dict) else data
    return {n["node_id"]: n["node_ip"] for n in rows if n["state"] == "ALIVE"}


def gcs_answers(world: World) -> bool:
    try:
        with urllib.request.urlopen(world.proxy_url() + "/api/gcs_healthz", timeout=5) as r:
            return r.status == 200
    except OSError:
        return False


def ready(pod: dict | None) -> bool:
    return bool(pod) and any(c["type"] == "Ready" and c["status"] == "True"
                             for c in pod["status"].get("conditions") or [])


def test_ready_with_three_alive_ray_nodes(world, api, harness):
    nodes = wait(lambda: len(alive_nodes(world)) == 3 and alive_nodes(world), 120, "3 nodes")
    assert gcs_starts(harness) == 1, "the head's GCS started once, read from its own logs"
    # each node's logical resources, total and free, from the dashboard's load report
    def reported():  # noqa: ANN202
        nodes = harness.node_resources()
        return len(nodes) == 3 and all(n.available is not None for n in nodes) and nodes

    gpu = next(n for n in wait(reported, 60, "3 nodes in the load report") if n.gpus == 1)
    assert gpu.resources["GPU"] == 1 and gpu.available is not None
    assert gpu.resources["memory"] == 2**30 and "object_store_memory" in gpu.available
    ips = {p["status"]["podIP"] for p in world.ray_pods()}
    assert set(nodes.values()) == ips
    rc = world.store.get("rayclusters", "ray", "demo")
    assert rc["status"]["state"] == "ready" and rc["status"]["readyWorkerReplicas"] == 2
    head = world.head_pod()
    pf = portforward(api.connect_get_namespaced_pod_portforward, head["metadata"]["name"], "ray",
                     ports="8265")
    sock = pf.socket(8265)
    sock.settimeout(10)
    sock.sendall(b"GET /api/version HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    sock.close()
    assert data.startswith(b"HTTP/1.1 200") and b"ray_version" in data


def test_a_blackout_cuts_a_worker_pod_while_its_raylet_runs_and_is_given_back(world):
    """raychaos's blackout mechanics on real pods (no Chaos Mesh here: the iptables DaemonSet):
    the head can no longer reach the worker's raylet, which still runs (the evidence of a false
    death, by exec through the kubelet); restored, it is reachable again."""
    from raychaos.config.settings import KubernetesSpec
    from raychaos.targets.kubernetes.streams import exec_in
    from raychaos.targets.kubernetes.target import KubernetesTarget

    t = KubernetesTarget(KubernetesSpec(cluster="demo", namespace="ray",
                                        kubeconfig=world.kubeconfig), run_id="wbo")
    t.connect()
    try:
        ids = wait(lambda: len(alive_nodes(world)) == 3 and alive_nodes(world), 120, "3 nodes")
        worker = t.handle.pod_named("worker-2")
        ip = worker["status"]["podIP"]
        [node_id] = [i for i, a in ids.items() if a == ip]
        head = t.handle.head_pod()

        def reach() -> int | None:
            return exec_in(t._api(), "ray", head["metadata"]["name"],
                           head["spec"]["containers"][0]["name"],
                           ["python", "-c", f"import socket; socket.create_connection(('{ip}', "
                                            f"{52365}), 2)"], timeout=20).code

        assert reach() == 0
        record: dict = {}
        t0 = time.monotonic()
        ev = t.cut_network(nodes=["worker-2"], record=record)
        assert ev["via"] == "iptables daemonset" and ev["pods"] == [worker["metadata"]["name"]]
        try:
            wait(lambda: reach() not in (0, None), 90, "the worker cut off")
            MEASURED["blackout_daemonset_cut_s"] = time.monotonic() - t0
            assert t.raylet_alive([node_id, "ff" * 28]) == {node_id: True, "ff" * 28: None}
        finally:
            t.undo(record)
        wait(lambda: reach() == 0, 90, "the worker reachable again")
    finally:
        t.cleanup_run()
        t.close()


def test_job_runs_on_the_driver_worker(world, tmp_path):
    """Ray's own JobSubmissionClient through the API server's service proxy, with a working_dir
    (a zip upload through the proxy) and the driver placed on the raychaos_driver worker."""
    from ray.job_submission import JobStatus, JobSubmissionClient
    (tmp_path / "job.py").write_text(
        "import ray\nray.init()\nprint('answer', ray.get(ray.remote(lambda: 6 * 7).remote()))\n")
    jobs = JobSubmissionClient(world.proxy_url())
    job = jobs.submit_job(entrypoint="python job.py", runtime_env={"working_dir": str(tmp_path)},
                          entrypoint_resources={"raychaos_driver": 1})
    status = wait(lambda: (s := jobs.get_job_status(job)) in (JobStatus.SUCCEEDED,
                                                              JobStatus.FAILED) and s,
                  180, "the job")
    assert status == JobStatus.SUCCEEDED, jobs.get_job_logs(job)
    assert "answer 42" in jobs.get_job_logs(job)


def test_exec_exit_codes_and_round_trip(world, api):
    name = world.head_pod()["metadata"]["name"]
    t0 = time.monotonic()
    out = stream(api.connect_get_namespaced_pod_exec, name, "ray", container="ray-head",
                 command=["sh", "-c", "echo $HOSTNAME"], stderr=True, stdout=True, stdin=False,
                 tty=False)
    MEASURED["exec_round_trip_s"] = time.monotonic() - t0
    assert out.strip() == name
    resp = stream(api.connect_get_namespaced_pod_exec, name, "ray", container="ray-head",
                  command=["sh", "-c", "echo oops >&2; exit 7"], stderr=True, stdout=True,
                  stdin=False, tty=False, _preload_content=False)
    resp.run_forever(timeout=20)
    assert resp.returncode == 7
    assert "oops" in resp.read_stderr()


def test_gcs_kill_restarts_the_head_container_in_place(world, api, harness):
    head = world.head_pod()
    uid, restarts = head["metadata"]["uid"], head["status"]["containerStatuses"][0][
        "restartCount"]
    workers_before = {k for k, ip in alive_nodes(world).items() if ip != head["status"]["podIP"]}
    assert len(workers_before) == 2
    t0 = time.monotonic()
    stream(api.connect_get_namespaced_pod_exec, head["metadata"]["name"], "ray",
           container="ray-head", command=["pkill", "-KILL", "gcs_server"], stderr=True,
           stdout=True, stdin=False, tty=False)
    back = wait(lambda: (p := world.store.get("pods", "ray", head["metadata"]["name"])) and
                p["status"]["containerStatuses"][0]["restartCount"] > restarts and ready(p)
                and p, 240, "the head container restarted and Ready")
    MEASURED["gcs_kill_to_ready_s"] = time.monotonic() - t0
    assert back["metadata"]["uid"] == uid
    wait(lambda: gcs_answers(world), 60, "the GCS to answer")
    after = wait(lambda: workers_before <= set(alive_nodes(world)) and alive_nodes(world), 120,
                 "the same workers ALIVE (GCS FT)")
    assert workers_before <= set(after)
    # the restarted container writes new logs; the count goes on from the old ones
    assert wait(lambda: gcs_starts(harness) == 2, 30, "a second GCS start counted")
    # what the harness reads of a container gone between two looks: ``ray start --block``
    # printed the dead process's log tail as it ended, kept as the previous container's log
    # (its last 200 lines: the start, long scrolled out here, is counted once from the files)
    prev = api.read_namespaced_pod_log(head["metadata"]["name"], "ray", container="ray-head",
                                       previous=True)
    assert "BEGIN gcs_server.out tail" in prev and "(gcs_server) gcs_" in prev, prev[-2000:]


def test_the_harness_kills_the_whole_head_container_and_sees_it_back(world, harness):
    """raychaos's own ``kill_head(mode="head")`` (exec ``kill -KILL -1``) and its watch-based
    ``wait_head_back``, unchanged, against the world: the same pod, restartCount up."""
    from raychaos.targets.kubernetes import head as k8s_head
    from raychaos.targets.kubernetes.client import ApiSession
    session = ApiSession.connect(world.kubeconfig, None)
    try:
        t0 = time.monotonic()
        ev = k8s_head.kill_head(session, "ray", "demo", "head", {})
        back = k8s_head.wait_head_back(session, "ray", "demo", ev["old"], timeout=240)
        MEASURED["head_container_kill_to_ready_s"] = time.monotonic() - t0
    finally:
        session.close()
    assert back["recovered"] and not back["uid_changed"], back
    assert back["restart_count"] > ev["old"]["restart_count"]
    wait(lambda: len(alive_nodes(world)) >= 3, 120, "3 ALIVE nodes again")
    # the third container's logs are counted while it runs (a container that came and went
    # between two asks is not: its files went with it, as on a real node)
    assert wait(lambda: gcs_starts(harness) == 3, 30, "a third GCS start counted")


def test_head_pod_delete_makes_a_new_head_pod(world, api):
    head = world.head_pod()
    workers_before = {k for k, ip in alive_nodes(world).items() if ip != head["status"]["podIP"]}
    t0 = time.monotonic()
    api.delete_namespaced_pod(head["metadata"]["name"], "ray",
                              body=client.V1DeleteOptions(grace_period_seconds=0))
    new = wait(lambda: (p := world.head_pod()) and p["metadata"]["uid"] != head["metadata"][
        "uid"] and ready(p) and p, 300, "a new Ready head pod")
    MEASURED["head_delete_to_ready_s"] = time.monotonic() - t0
    assert new["metadata"]["name"] != head["metadata"]["name"]
    wait(lambda: len(alive_nodes(world)) >= 3, 180, "3 ALIVE nodes after the new head")
    # GCS FT on a store that outlives the pod: the workers' Ray nodes are the same ones
    MEASURED["head_delete_kept_worker_ids"] = float(workers_before <= set(alive_nodes(world)))


def test_log_counts_follow_the_head_through_a_new_pod(world, harness):
    """After the in-place restarts (the GCS kill, the whole container) and the new head pod,
    the harness has counted every GCS start, each container's logs once."""
    assert wait(lambda: gcs_starts(harness) == 4, 30,
                f"four GCS starts counted (counted before this wait: {LOG_COUNTS})")


def test_eviction_moves_the_gpu_worker_and_cordons_strand_it(world, api):
    policy = client.PolicyV1Api(api.api_client)
    policy.create_namespaced_pod_disruption_budget("ray", {
        "metadata": {"name": "workers"}, "spec": {"minAvailable": 1, "selector": {
            "matchLabels": {"ray.io/cluster": "demo", "ray.io/node-type": "worker"}}}})
    wait(lambda: (world.store.get("poddisruptionbudgets", "ray", "workers") or {}).get(
        "status", {}).get("disruptionsAllowed") == 1, 30, "the budget to allow one")
    gpu = [p for p in world.ray_pods("worker") if p["metadata"]["labels"]["ray.io/group"] ==
           "gpu"][0]
    api.create_namespaced_pod_eviction(gpu["metadata"]["name"], "ray", {
        "metadata": {"name": gpu["metadata"]["name"], "namespace": "ray"}})
    evicted = world.store.get("pods", "ray", gpu["metadata"]["name"])
    assert evicted["metadata"]["deletionTimestamp"]
    assert any(c["type"] == "DisruptionTarget" for c in evicted["status"]["conditions"])
    repl = wait(lambda: [p for p in world.ray_pods("worker")
                         if p["metadata"]["labels"]["ray.io/group"] == "gpu"
                         and p["metadata"]["uid"] != gpu["metadata"]["uid"]
                         and p["spec"].get("nodeName")], 30, "the replacement scheduled")[0]
    assert repl["spec"]["nodeName"] != gpu["spec"]["nodeName"]
    cpu = [p for p in world.ray_pods("worker") if p["metadata"]["labels"]["ray.io/group"] ==
           "cpu"][0]
    with pytest.raises(client.ApiException) as exc:  # the replacement is not Ready yet
        api.create_namespaced_pod_eviction(cpu["metadata"]["name"], "ray", {
            "metadata": {"name": cpu["metadata"]["name"]}})
    assert exc.value.status == 429
    wait(lambda: ready(world.store.get("pods", "ray", repl["metadata"]["name"])), 240,
         "the replacement Ready")
    for n in ("gpu-a", "gpu-b"):
        api.patch_node(n, {"spec": {"unschedulable": True}})
    try:
        api.delete_namespaced_pod(repl["metadata"]["name"], "ray",
                                  body=client.V1DeleteOptions(grace_period_seconds=0))
        stuck = wait(lambda: [p for p in world.ray_pods("worker")
                              if p["metadata"]["labels"]["ray.io/group"] == "gpu"
                              and p["metadata"]["uid"] != repl["metadata"]["uid"]
                              and any(c.get("reason") == "Unschedulable"
                                      for c in p["status"].get("conditions") or [])], 30,
                     "an Unschedulable replacement")[0]
        time.sleep(2)
        stuck = world.store.get("pods", "ray", stuck["metadata"]["name"])
        assert stuck["status"]["phase"] == "Pending" and not stuck["spec"].get("nodeName")
    finally:
        for n in ("gpu-a", "gpu-b"):
            api.patch_node(n, {"spec": {"unschedulable": None}})


def test_addresses_stay_in_the_world_range(world):
    ips = [p["status"]["podIP"] for p in world.ray_pods() if p["status"].get("podIP")]
    assert ips
    for ip in ips + [world.store.get("services", "ray", "demo-head-svc")["spec"]["clusterIP"]]:
        assert ip.startswith("198.19.")
        socket.inet_aton(ip)
