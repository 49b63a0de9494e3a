"""The world's API server against every golden exchange recorded from a real kube-apiserver 1.36
(/work/shared/k8s-golden): the same request, the same state (set up as the note says), then
status code, content type, and the body compared field by field — except uid,
resourceVersion, timestamps and managedFields, as the goldens' README says.

The world here runs only the controllers the recording had (node lifecycle, disruption,
garbage collector, namespace): no kubelet, scheduler or KubeRay.
"""

from __future__ import annotations

import copy
import http.client
import json
import os
import re
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
import websocket

from tests.k8s.world import World
from tests.k8s.world import resources as R

#: $RAYCHAOS_K8S_GOLDEN, else shared/ beside the checkout (as CI lays it out), else /work/shared
GOLDEN = next((p for p in (Path(os.environ.get("RAYCHAOS_K8S_GOLDEN", "/nonexistent")),
                           Path(__file__).resolve().parents[3] / "shared" / "k8s-golden",
                           Path("/work/shared/k8s-golden")) if p.is_dir()),
              Path("/work/shared/k8s-golden"))
pytestmark = pytest.mark.skipif(not GOLDEN.is_dir(), reason=f"no goldens at {GOLDEN}")

IGNORED = {"uid", "resourceVersion", "creationTimestamp", "managedFields", "lastTransitionTime",
           "deletionTimestamp", "timeAdded", "firstTimestamp", "lastTimestamp", "startTime",
           "startedAt"}
RV_IN_MESSAGE = re.compile(r"(resource version: |current: |\()\d+")
NAME_SUFFIX = re.compile(r"^(kube-api-access-)[a-z0-9]{5}$")


def load(name: str) -> dict:
    return json.loads((GOLDEN / name).read_text())


def normalize(obj: Any) -> Any:
    """Drop what legitimately differs: OpenShift's extra CA configMap, generated suffixes."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if k == "sources" and isinstance(v, list):
                v = [s for s in v if (s.get("configMap") or {}).get("name")
                     != "openshift-service-ca.crt"]
            if k == "message" and isinstance(v, str):
                v = RV_IN_MESSAGE.sub(r"\1N", v)
            if k == "name" and isinstance(v, str) and NAME_SUFFIX.match(v):
                v = NAME_SUFFIX.sub(r"\1xxxxx", v)
            out[k] = normalize(v)
        return out
    if isinstance(obj, list):
        return [normalize(x) for x in obj]
    return obj


def diff(want: Any, got: Any, path: str = "") -> list[str]:
    if isinstance(want, dict) and isinstance(got, dict):
        out = []
        for k in sorted(set(want) | set(got)):
            if k == "managedFields":
                continue
            if k not in got:
                out.append(f"{path}.{k}: missing")
            elif k not in want:
                out.append(f"{path}.{k}: unexpected {json.dumps(got[k])[:80]}")
            elif k not in IGNORED:
                out += diff(want[k], got[k], f"{path}.{k}")
        return out
    if isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            return [f"{path}: {len(got)} items, want {len(want)}"]
        pairs = enumerate(zip(want, got, strict=True))
        return [d for i, (a, b) in pairs for d in diff(a, b, f"{path}[{i}]")]
    return [] if want == got else [f"{path}: {got!r}, want {want!r}"]


@pytest.fixture(scope="module")
def world():
    w = World(name="golden", cluster=None, nodes=[], allow_privileged=False,
              controllers={"nodelifecycle", "disruption", "namespace"},
              state_root="/tmp/raychaos-world-golden").start()
    w.server.no_rv_delay_s = 3.0
    for ns in ("demo",):
        w.api.create(R.BUILTIN["namespaces"], "", {"metadata": {"name": ns}})
    yield w
    assert w.stop() == []


def send(w: World, req: dict, body: Any = "golden") -> tuple[int, str, Any, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", int(w.url.rsplit(":", 1)[1]), timeout=30)
    q = urlencode(req.get("query") or {}, doseq=True)
    data = req["body"] if body == "golden" else body
    raw = json.dumps(data).encode() if data is not None else None
    headers = {"Authorization": "Bearer t"}
    if req.get("content_type"):
        headers["Content-Type"] = req["content_type"]
    conn.request(req["method"], req["path"] + (f"?{q}" if q else ""), body=raw, headers=headers)
    resp = conn.getresponse()
    text = resp.read().decode()
    ctype = resp.getheader("Content-Type") or ""
    headers_out = {k: v for k, v in resp.getheaders()}
    conn.close()
    try:
        parsed = json.loads(text) if "json" in ctype and "watch" not in q else text
    except ValueError:
        parsed = text
    return resp.status, ctype, parsed, headers_out


def check(w: World, name: str, body: Any = "golden") -> Any:
    g = load(name)
    code, ctype, got, headers = send(w, g["request"], body)
    resp = g["response"]
    assert code == resp["status"], (name, got)
    assert ctype.split(";")[0] == (resp["content_type"] or "").split(";")[0], name
    for h in ("Retry-After",):
        if h in (resp.get("headers") or {}):
            assert headers.get(h) == resp["headers"][h], (name, headers)
    if "lines" in resp:
        lines = [json.loads(x) for x in got.splitlines() if x.strip()]
        problems = [f"{name}: {len(lines)} events, want {len(resp['lines'])}"] \
            if len(lines) != len(resp["lines"]) else []
        for i, (a, b) in enumerate(zip(resp["lines"], lines, strict=False)):
            problems += diff(normalize(a), normalize(b), f"line[{i}]")
        assert not problems, "\n".join(problems)
        return lines
    problems = diff(normalize(resp["body"]), normalize(got))
    assert not problems, f"{name}:\n" + "\n".join(problems)
    return got


def pod_from(golden_pod: dict) -> tuple[dict, dict]:
    """What a client sent to make the golden's pod: (create body, status to write)."""
    m, s = golden_pod["metadata"], golden_pod["spec"]
    body = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {k: m[k] for k in ("name", "namespace", "labels", "annotations",
                                           "ownerReferences") if k in m},
            "spec": {"containers": [{k: c[k] for k in ("name", "image", "resources",
                                                       "imagePullPolicy") if k in c}
                                    for c in s["containers"]]}}
    if s.get("nodeName"):
        body["spec"]["nodeName"] = s["nodeName"]
    return body, copy.deepcopy(golden_pod.get("status") or {})


def make_pod(w: World, golden_pod: dict, annotations: bool = True) -> dict:
    body, status = pod_from(golden_pod)
    if not annotations:
        body["metadata"].pop("annotations", None)
    ns = body["metadata"]["namespace"]
    code, pod = w.api.create(R.BUILTIN["pods"], ns, body)
    assert code == 201, pod
    if status.get("phase") != "Pending":
        code, pod = w.api.update(R.BUILTIN["pods"], ns, pod["metadata"]["name"],
                                 {**pod, "status": status}, sub="status")
    return pod


RUNNING = load("pod-get.json")["response"]["body"]


def like(name: str, labels: dict, node: str | None = "gpu-a", ready: bool = True) -> dict:
    p = copy.deepcopy(RUNNING)
    p["metadata"].update(name=name, labels=labels)
    if node:
        p["spec"]["nodeName"] = node
    if node is None:
        p["spec"].pop("nodeName")
        p["status"] = {"phase": "Pending"}
    return p


def test_pods_get_list_404_and_create_invalid(world):
    make_pod(world, RUNNING)
    check(world, "pod-get.json")
    check(world, "pod-list-label-selector.json")
    check(world, "pod-get-404.json")
    check(world, "pod-create-422-invalid.json")


def test_deletes(world):
    for f in ("pod-delete-body-grace0.json", "pod-delete-default-grace.json",
              "pod-delete-query-grace0-empty-body.json"):
        make_pod(world, load(f)["response"]["body"])
        check(world, f)
    assert world.store.get("pods", "demo", "demo-gpu-worker-d0000") is None  # gone at once
    assert world.store.get("pods", "demo", "demo-gpu-worker-d1111")["metadata"][
        "deletionGracePeriodSeconds"] == 30


def test_watch_from_list_rv(world):
    g = load("watch-pods-from-list-rv.json")
    lines = g["response"]["lines"]
    head = world.store.get("pods", "demo", "demo-head-x7k2p")
    assert head is not None
    _, _, listing, _ = send(world, {"method": "GET", "path": "/api/v1/namespaces/demo/pods",
                                    "query": {"labelSelector": g["request"]["query"][
                                        "labelSelector"]}}, None)
    req = copy.deepcopy(g["request"])
    req["query"]["resourceVersion"] = listing["metadata"]["resourceVersion"]
    req["query"]["timeoutSeconds"] = "3"
    out: dict = {}
    t = threading.Thread(target=lambda: out.update(r=send(world, req, None)))
    t.start()
    time.sleep(0.3)
    pods = R.BUILTIN["pods"]
    world.api.update(pods, "demo", "demo-head-x7k2p",
                     {"metadata": {"annotations": {"example.com/touched": "1"}}},
                     patch_type="application/merge-patch+json")
    world.api.delete(pods, "demo", "demo-head-x7k2p", {"gracePeriodSeconds": 0})
    new = copy.deepcopy(lines[3]["object"])
    new_pod = make_pod(world, new)
    world.api.update(pods, "demo", new_pod["metadata"]["name"],
                     {**new_pod, "status": lines[4]["object"]["status"]}, sub="status")
    t.join(timeout=10)
    got = [json.loads(x) for x in out["r"][2].splitlines() if x.strip()]
    assert [e["type"] for e in got] == [e["type"] for e in lines]
    problems = []
    for i, (a, b) in enumerate(zip(lines, got, strict=False)):
        problems += diff(normalize(a), normalize(b), f"line[{i}]")
    assert not problems, "\n".join(problems)


def test_watch_errors(world):
    world.store.compact()
    check(world, "watch-pods-410-too-old-rv.json")
    t0 = time.monotonic()
    lines = check(world, "watch-pods-no-rv-504.json")
    assert time.monotonic() - t0 >= 2.5 and lines[0]["object"]["code"] == 504


def test_nodes_cordon_and_taint(world):
    for f in ("node-get.json", "node-after-cordon-taint.json"):
        n = copy.deepcopy(load(f)["response"]["body"])
        n["metadata"]["labels"].pop("raychaos.io/cordoned-by", None)
        n["spec"].pop("unschedulable", None)
        n["spec"].pop("taints", None)
        world.api.create(R.BUILTIN["nodes"], "", n)
    check(world, "node-get.json")
    check(world, "node-cordon-strategic-merge-patch.json")
    time.sleep(0.6)
    check(world, "node-after-cordon-taint.json")
    check(world, "node-cordon-merge-patch.json")


def test_evictions_and_pdbs(world):
    owner = RUNNING["metadata"]["ownerReferences"]
    for n in ("ok-worker-0", "ok-worker-1", "min-worker-0", "min-worker-1", "maxun-worker-0",
              "two-worker-0"):
        group = n.split("-")[0]
        make_pod(world, like(f"demo-{n}", {"ray.io/cluster": "demo-pdb", "ray.io/group": group,
                                           "ray.io/node-type": "worker"}))
    make_pod(world, like("demo-min-worker-pending", {"ray.io/cluster": "demo-pdb",
                                                     "ray.io/group": "min",
                                                     "ray.io/node-type": "worker"}, node=None))
    assert owner
    pdbs = load("pdb-list.json")["response"]["body"]["items"]
    for p in pdbs:
        world.api.create(R.BUILTIN["poddisruptionbudgets"], "demo", {
            "metadata": {"name": p["metadata"]["name"]}, "spec": p["spec"]})
    time.sleep(0.6)
    check(world, "eviction-201.json")
    check(world, "pod-get-after-eviction.json")
    check(world, "eviction-429-pdb-minavailable.json")
    check(world, "eviction-429-pdb-maxunavailable-raycluster.json")
    check(world, "eviction-500-two-pdbs.json")
    time.sleep(0.6)
    check(world, "pdb-list.json")
    check(world, "eviction-201-pending-pod.json")
    assert world.store.get("pods", "demo", "demo-min-worker-pending") is None


def test_events_field_selector(world):
    ev = copy.deepcopy(load("events-list-reason-pulled.json")["response"]["body"]["items"][0])
    for k in ("uid", "resourceVersion", "creationTimestamp"):
        ev["metadata"].pop(k)
    world.api.create(R.BUILTIN["events"], "demo", ev)
    world.api.create(R.BUILTIN["events"], "demo", {**copy.deepcopy(ev), "metadata": {
        "name": "other.1", "namespace": "demo"}, "reason": "Pulling"})
    check(world, "events-list-reason-pulled.json")


def test_leases(world):
    check(world, "lease-create.json")
    check(world, "lease-create-409-already-exists.json")
    check(world, "lease-get.json")
    world.api.update(R.BUILTIN["leases"], "demo", "raychaos-demo",
                     {"spec": {"renewTime": "2026-12-01T07:25:03.000000Z"}},
                     patch_type="application/strategic-merge-patch+json")
    check(world, "lease-update-409-conflict-stale-rv.json")
    check(world, "lease-delete.json")


def test_rayclusters_and_unknown_group(world):
    rc = load("raycluster-get.json")["response"]["body"]
    world.api.create(world.api.resolve("ray.io", "v1", "rayclusters"), "ray", {
        "apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": rc["metadata"]["name"]}, "spec": rc["spec"]})
    check(world, "raycluster-get.json")
    check(world, "raycluster-list.json")
    check(world, "custom-object-404-group-not-served.json")


def test_forbidden_and_privileged(world):
    world.server.forbid("list", "pods", user="system:serviceaccount:demo:no-rights")
    try:
        check(world, "pod-list-403-forbidden.json")
    finally:
        world.server.forbidden.clear()
    check(world, "daemonset-create-422-privileged.json")


def test_exec_without_upgrade_and_without_kubelet(world):
    if world.store.get("pods", "demo", "demo-head-x7k2p") is None:
        make_pod(world, like("demo-head-x7k2p", RUNNING["metadata"]["labels"], node="gpu-b"))
    check(world, "exec-post-400-no-upgrade.json")
    g = load("exec-websocket-no-kubelet.json")
    q = urlencode(g["request"]["query"], doseq=True)
    ws = websocket.create_connection(
        world.url.replace("http", "ws") + g["request"]["path"] + "?" + q,
        subprotocols=["v5.channel.k8s.io", "v4.channel.k8s.io"], timeout=10)
    assert ws.getstatus() == 101
    assert ws.getsubprotocol() == "v5.channel.k8s.io"
    got = []
    while True:
        op, data = ws.recv_data(control_frame=True)
        if op == websocket.ABNF.OPCODE_CLOSE:
            got.append({"opcode": "close", "code": int.from_bytes(data[:2], "big")})
            break
        got.append({"channel": data[0], "data": data[1:].decode()})
    want = g["response"]["lines"]
    assert [x.get("channel", x.get("opcode")) for x in got] == \
        [x.get("channel", x.get("opcode")) for x in want]
    assert got[0]["data"] == "" and got[2]["code"] == 1000
    assert json.loads(got[1]["data"]) == json.loads(want[1]["data"])
