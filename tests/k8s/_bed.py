"""The test bed for the k8s tier's real-clusters lane: what each module runs on it (``bed_run``:
``raychaos run`` as a user runs it, in its own process), what a run may not leave behind
(``leftovers``), and the cluster back in shape between runs (``assert_clean``). The bed itself
is the ``bed`` fixture (``tests/k8s/bed/conftest.py``); a test that needs the demo RayCluster calls
:func:`ensure_demo` (a test before it may have deleted it)."""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from raychaos.results.store import read_timeline
from raychaos.testbed import bed as testbed
from raychaos.testbed.demo import DEMO
from raychaos.testbed.node.agent import world_name
from tests._cli import run_gracefully
from tests.integration._experiments import assert_healthy

REPO = Path(__file__).resolve().parents[2]
BED = "pytest"
NS = "ray"
RUN_ID_LABEL = "raychaos.io/run-id"
#: seconds per step, printed when the bed goes down
SECONDS: dict[str, float] = {}
#: other figures of the package's runs (API requests counted by the API server's audit log)
FIGURES: dict[str, float] = {}
#: As the local catalog test (and the shipped head-kill files): five samples a second, the most
#: the harness allows.
MONITOR_INTERVAL_S = 0.2
#: The most a run here waits for its recovery window (the shipped files' bound, 10 s at least):
#: a bound, not a wait — the window ends once the loads are back and the checks have their
#: samples. At 10 s the Serve p95 after a head kill (60 requests at 5/s, read once the
#: outage's backlog drained) was inconclusive in every bed run (55-59 of its 60): never judged.
RECOVERY_BOUND_S = 25.0


def variant(src: str, dest: Path, mode: str | None = None, edit=None) -> Path:  # noqa: ANN001
    """The shipped experiment with the local target's block and the monitor's windows
    changed; ``mode`` sets kill_head's mode."""
    data = yaml.safe_load((REPO / "experiments" / f"{src}.yaml").read_text())
    block = next(e for e in data["extensions"] if e.get("name") == "raychaos")
    block.pop("target", None)  # the command line says where
    shipped = float(block.get("monitor", {}).get("recovery_window_s", 10))
    block["monitor"] = {**block.get("monitor", {}), "interval_s": MONITOR_INTERVAL_S,
                        "settle_s": 3,
                        "recovery_window_s": min(max(shipped, 10), RECOVERY_BOUND_S)}
    if mode:
        act = next(a for a in data["method"] if a["provider"]["func"] == "kill_head")
        act["provider"].setdefault("arguments", {})["mode"] = mode
    if edit:
        edit(data)
    dest.write_text(yaml.safe_dump(data, sort_keys=False))
    return dest


def assert_healthy_run(code: int, summary: dict, out: str) -> None:
    """A healthy run on Kubernetes (:func:`assert_healthy`) whose faults each left evidence that
    they landed and were undone."""
    assert_healthy(code, summary, failure_context(summary, out))
    assert summary["target"]["kind"] == "kubernetes"
    assert summary["faults"], "a fault was applied"
    assert_faults_landed_and_undone(summary)


def failure_context(summary: dict, out: str) -> str:
    """What a failed run's assertion shows: its verdict, checks, errors and faults, what its pods
    did (:func:`pod_lifecycle`, when the run was read by :func:`run_experiment`) and the end of
    its output."""
    brief = json.dumps({k: summary.get(k) for k in ("verdict", "checks", "errors", "faults")},
                       indent=1, default=str)[:6000]
    pods = "\n".join(summary.get("_pods") or [])[-3000:]
    return f"{brief}\n--- pods (timeline) ---\n{pods}\n--- output ---\n{out[-3000:]}"


def wait_for(pred: Any, timeout: float, what: str, every: float = 2.0) -> Any:
    """``pred()``'s first truthy answer, asked every ``every`` s; AssertionError naming
    ``what`` after ``timeout`` s."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        got = pred()
        if got:
            return got
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def assert_faults_landed_and_undone(summary: dict) -> None:
    """Every fault of the run left proof that it landed, and was undone (whatever the verdict)."""
    for fault in summary["faults"]:
        assert fault["state"] == "undone", fault
        assert fault["evidence"], f"{fault['fault']} returned no proof it landed"


class _PatientClient(testbed.ApiClient):
    """The bed's API client for the tests' own reads and waits: a GET that could not reach the
    API server is asked again for up to a minute (in a whole make test a poll's TLS handshake
    timed out after 10 s while a RayJob's cluster started on the 2 busy cores: the test died of
    its own helper, not of anything it checks). Writes are never repeated."""

    def call(self, method: str, path: str, body: Any = None, timeout: float = 10.0,
             content_type: str = "application/json") -> tuple[int, Any]:
        deadline = time.monotonic() + 60
        while True:
            try:
                return super().call(method, path, body, timeout, content_type)
            except OSError:
                if method != "GET" or time.monotonic() > deadline:
                    raise
                time.sleep(1)


def api(b: testbed.Bed) -> testbed.ApiClient:
    return _PatientClient(b.server, b.token, b.ca)


def run_experiment(kubeconfig: str | Path, namespace: str, exp: Path, results: Path,
                   *which: str, env: dict[str, str] | None = None) -> tuple[int, dict, str]:
    """``raychaos run EXP --target kubernetes --kubeconfig … --namespace … WHICH…`` as a user
    runs it, in its own process; (exit code, summary, output)."""
    cmd = [sys.executable, "-m", "raychaos.cli", "run", str(exp), "--target", "kubernetes",
           "--kubeconfig", str(kubeconfig), "--namespace", namespace, *which,
           "--results", str(results)]
    proc = run_gracefully(cmd, timeout=900, cwd=REPO, env=env)
    out = proc.stdout + proc.stderr
    runs = [d for d in results.iterdir() if (d / "summary.json").exists()] \
        if results.exists() else []
    assert len(runs) == 1, f"exit {proc.returncode}, no single summary:\n{out[-4000:]}"
    summary = json.loads((runs[0] / "summary.json").read_text())
    summary["_pods"] = pod_lifecycle(runs[0] / "timeline.jsonl")
    return proc.returncode, summary, out


def pod_lifecycle(timeline: Path) -> list[str]:
    """The run's faults and what its pods did (started, exited with their code, Ready, pulled),
    one line each at run time: what a failed head kill's message needs to say why (the results
    folder is gone with the test's tmp_path; seen: a head restarted in place whose GCS came back
    80 s after the kill, in a whole make test only, and nothing left to tell why)."""
    lines: list[tuple[float, str]] = []
    for rec in read_timeline(timeline):
        ev = str(rec.get("event") or "")
        if rec.get("kind") != "event" or not (ev.startswith(("node_", "fault_", "image_"))
                                               or ev == "head_killed"):
            continue
        detail = {k: v for k, v in (rec.get("detail") or {}).items()
                  if k in ("exit_code", "restarts", "pid", "incarnation", "seconds", "id")}
        lines.append((float(rec.get("t") or 0), f"{ev} {rec.get('name', '')} {detail}"))
    return [f"{t:7.1f} {text}" for t, text in sorted(lines, key=lambda x: x[0])]


def bed_run(b: testbed.Bed, exp: Path, results: Path, *which: str) -> tuple[int, dict, str]:
    """:func:`run_experiment` on the bed's namespace, its seconds kept in :data:`SECONDS`."""
    t0 = time.monotonic()
    try:
        return run_experiment(b.kubeconfig, NS, exp, results, *which)
    finally:
        SECONDS[exp.stem] = time.monotonic() - t0


def netns_shaping(netns: str) -> list[str]:
    """Any tbf/ingress/netem qdisc or ifb device in a network namespace (what a fault would
    leave)."""
    qd = subprocess.run(["ip", "netns", "exec", netns, "tc", "qdisc", "show"],
                        capture_output=True, text=True, check=False).stdout
    left = [f"{netns}: {line.strip()}" for line in qd.splitlines()
            if " tbf " in line or "ingress" in line or " netem " in line]
    links = subprocess.run(["ip", "-n", netns, "-o", "link", "show", "type", "ifb"],
                           capture_output=True, text=True, check=False).stdout
    return left + [f"{netns}: ifb {line.split(':')[1].strip()}" for line in links.splitlines()]


def bed_netns() -> list[str]:
    prefix = "rw" + hashlib.sha1(world_name(BED).encode()).hexdigest()[:5] + "-"
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                            check=False).stdout
    return [line.split()[0] for line in listed.splitlines() if line.startswith(prefix)]


def leftovers(b: testbed.Bed) -> list[str]:
    """What a finished run left on the bed: objects with a run's label, cordoned nodes, shaping
    (qdiscs, ifb devices) in any node or pod network namespace."""
    client, left = api(b), []
    for path in (f"/api/v1/namespaces/{NS}/pods", f"/api/v1/namespaces/{NS}/configmaps",
                 f"/apis/apps/v1/namespaces/{NS}/daemonsets",
                 f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets",
                 f"/apis/batch/v1/namespaces/{NS}/jobs",
                 f"/apis/chaos-mesh.org/v1alpha1/namespaces/{NS}/networkchaos"):
        code, body = client.call("GET", f"{path}?labelSelector={RUN_ID_LABEL}")
        assert code == 200, (path, code, body)
        left += [f"{path.rsplit('/', 1)[-1]} {o['metadata']['name']}" for o in body["items"]]
    code, body = client.call("GET", "/api/v1/nodes")
    left += [f"node {n['metadata']['name']} cordoned" for n in body["items"]
             if (n.get("spec") or {}).get("unschedulable")]
    for netns in bed_netns():
        left += netns_shaping(netns)
    return left


def wait_cluster(b: testbed.Bed, name: str, timeout: float = 300, pods: int = 3) -> float:
    """Until the operator calls RayCluster ``name`` ready and every one of its ``pods`` pods is
    Ready."""
    client, t0, last = api(b), time.monotonic(), ""
    while time.monotonic() - t0 < timeout:
        code, rc = client.call("GET", f"/apis/ray.io/v1/namespaces/{NS}/rayclusters/{name}")
        _, listed = client.call("GET", f"/api/v1/namespaces/{NS}/pods?labelSelector="
                                       f"ray.io/cluster={name}")
        ready = [p for p in listed.get("items", []) if not p["metadata"].get("deletionTimestamp")
                 and any(c["type"] == "Ready" and c["status"] == "True"
                         for c in (p.get("status") or {}).get("conditions") or [])]
        state = (rc.get("status") or {}).get("state") if code == 200 else code
        if state == "ready" and len(ready) == pods and len(listed["items"]) == pods:
            return time.monotonic() - t0
        last = f"state {state}, {len(ready)} of {len(listed.get('items', []))} pods Ready"
        time.sleep(2)
    _, events = client.call("GET", f"/api/v1/namespaces/{NS}/events?fieldSelector="
                                   f"involvedObject.name={name},type=Warning")
    said = [e.get("message", "") for e in (events.get("items") or [])[-3:]]
    raise AssertionError(f"RayCluster {name} not ready in {timeout:.0f} s: {last}"
                         + (f"; the operator said: {said}" if said else ""))


def alive_ray_nodes(b: testbed.Bed, cluster: str) -> list[dict]:
    """The Ray nodes the head's dashboard calls ALIVE (through the API server's service
    proxy)."""
    code, body = api(b).call("GET", f"/api/v1/namespaces/{NS}/services/{cluster}-head-svc:8265/"
                                    "proxy/api/v0/nodes?limit=100")
    if code != 200 or not isinstance(body, dict):
        return []
    data = body["data"]["result"]
    rows = data["result"] if isinstance(data, dict) else data
    return [n for n in rows if n["state"] == "ALIVE"]


def assert_clean(b: testbed.Bed, cluster: str = "demo", timeout: float = 180) -> None:
    """Nothing of the last run left, and the cluster back in shape for the next: every pod
    Ready, and to Ray exactly 3 ALIVE nodes with the one GPU — a node of a pod the last run
    replaced (a drain, a throttle's restart) must be DEAD first, or the next run's first tasks
    go to it and fail (seen: 64 of a storm's first tasks, right after registry-throttle)."""
    assert leftovers(b) == []
    wait_cluster(b, cluster)
    t0, last = time.monotonic(), ""
    while time.monotonic() - t0 < timeout:
        alive = alive_ray_nodes(b, cluster)
        gpus = sum(float(n.get("resources_total", {}).get("GPU", 0)) for n in alive)
        if len(alive) == 3 and gpus == 1:
            return
        last = f"{len(alive)} ALIVE Ray nodes, {gpus} GPUs"
        time.sleep(2)
    raise AssertionError(f"RayCluster {cluster} not back in shape in {timeout:.0f} s: {last}")


def demo_spec() -> dict[str, Any]:
    [rc] = [d for d in yaml.safe_load_all(DEMO.read_text()) if d and d["kind"] == "RayCluster"]
    return copy.deepcopy(rc["spec"])


def delete_and_wait(b: testbed.Bed, plural: str, name: str, timeout: float = 180) -> None:
    """Delete a KubeRay object and wait until it and every pod of its clusters are gone.

    A test's clean-up, not a fault: each Ray pod the garbage collector deletes (with its 30 s
    grace) is deleted again with a grace of 1 s, as ``kubectl delete --grace-period=1`` would.
    KubeRay's Ray containers run bash as PID 1, which ignores SIGTERM (KubeRay #503), so each
    pod would otherwise take its whole 30 s, and the bed's tests swap clusters a dozen times."""
    client = api(b)
    path = f"/apis/ray.io/v1/namespaces/{NS}/{plural}/{name}"
    code, body = client.call("DELETE", path, {"propagationPolicy": "Foreground"})
    assert code in (200, 202, 404), (code, body)
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        gone = client.call("GET", path)[0] == 404
        _, pods = client.call("GET", f"/api/v1/namespaces/{NS}/pods?labelSelector=ray.io/"
                                     "node-type")
        if gone and not pods["items"]:
            return
        for pod in pods["items"]:
            meta = pod["metadata"]
            if meta.get("deletionTimestamp") and (meta.get("deletionGracePeriodSeconds")
                                                  or 0) > 1:
                client.call("DELETE", f"/api/v1/namespaces/{NS}/pods/{meta['name']}",
                            {"gracePeriodSeconds": 1,
                             "preconditions": {"uid": meta["uid"]}})
        time.sleep(2)
    raise AssertionError(f"{plural}/{name} or its pods still there after {timeout:.0f} s")


@contextlib.contextmanager
def raycluster(b: testbed.Bed, name: str, spec: dict[str, Any]) -> Iterator[None]:
    """RayCluster ``name`` with ``spec`` made on the bed for the block, then deleted with its
    pods (whatever the block raised); the block waits for it as it needs."""
    body = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": name},
            "spec": spec}
    code, made = api(b).call("POST", f"/apis/ray.io/v1/namespaces/{NS}/rayclusters", body)
    assert code == 201, made
    try:
        yield
    finally:
        delete_and_wait(b, "rayclusters", name)


def healthy_demo_run(b: testbed.Bed, name: str, tmp_path: Path) -> dict:
    """The shipped experiment ``name`` on the demo RayCluster, back in shape first; a healthy
    run's summary."""
    ensure_demo(b)
    exp = variant(name, tmp_path / f"{name}.yaml")
    code, summary, out = bed_run(b, exp, tmp_path / "results", "--cluster", "demo")
    assert_healthy_run(code, summary, out)
    return summary


def ensure_demo(b: testbed.Bed) -> None:
    """The demo RayCluster, and no other Ray cluster, back in shape (re-created when a module
    before deleted it)."""
    client = api(b)
    for plural in ("rayservices", "rayjobs", "rayclusters"):
        code, body = client.call("GET", f"/apis/ray.io/v1/namespaces/{NS}/{plural}")
        for obj in body.get("items", []) if code == 200 else []:
            if (plural, obj["metadata"]["name"]) != ("rayclusters", "demo") \
                    and not obj["metadata"].get("ownerReferences"):
                delete_and_wait(b, plural, obj["metadata"]["name"])
    if client.call("GET", f"/apis/ray.io/v1/namespaces/{NS}/rayclusters/demo")[0] == 404:
        t0 = time.monotonic()
        body = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "demo"},
                "spec": demo_spec()}
        code, made = client.call("POST", f"/apis/ray.io/v1/namespaces/{NS}/rayclusters", body)
        assert code == 201, made
        SECONDS["demo re-created"] = time.monotonic() - t0
    assert_clean(b)
