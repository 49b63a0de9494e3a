"""Image pulls are real transfers from the world registry into a node's network namespace:
a privileged hostNetwork DaemonSet running ``tc`` on the node's default-route interface (the
harness's shape; its script adapted to this kernel, see IFB_SCRIPT) measurably slows a pull
on that node — read back from the kubelet's ``Pulled`` events — and not on another node;
deleting it undoes the throttle. The Chaos Mesh stand-in: a ``bandwidth`` NetworkChaos really
slows a pod's traffic until deleted. (Run under ``flock /tmp/raychaos-cluster.lock``.)
"""

from __future__ import annotations

import os
import re
import time

import pytest
from kubernetes import client, config
from kubernetes.stream import stream

from raychaos.targets.kubernetes import network as k8s_network
from raychaos.targets.kubernetes.client import ApiSession
from tests.k8s.world import NodeSpec, World
from tests.k8s.world import resources as R

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="real nodes need root (netns)")
PULLED = re.compile(r'Successfully pulled image "([^"]+)" in (\S+) \((\S+) including waiting\)'
                    r"\. Image size: (\d+) bytes\.")


@pytest.fixture(scope="module")
def world():
    w = World(name="t-pull", cluster=None, nodes=[NodeSpec("n1"), NodeSpec("n2")],
              image_mb=8, chaos_mesh=True, state_root="/tmp/raychaos-world-tests").start()
    yield w
    assert w.stop() == []


def go_seconds(text: str) -> float:
    total = 0.0
    for num, unit in re.findall(r"([\d.]+)(ms|h|m|s)", text):
        total += float(num) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[unit]
    return total


def pull_seconds(w: World, node: str, tag: str) -> float:
    """Run a pod with imagePullPolicy Always on ``node``; the Pulled event's duration."""
    image = f"registry.raychaos.test/tools/probe:{tag}"
    name = f"pull-{tag}"
    w.api.create(R.BUILTIN["pods"], "ray", {"metadata": {"name": name}, "spec": {
        "nodeName": node, "terminationGracePeriodSeconds": 0, "containers": [
            {"name": "c", "image": image, "imagePullPolicy": "Always",
             "command": ["sleep", "600"]}]}})
    t0 = time.monotonic()
    while time.monotonic() - t0 < 120:
        for ev in w.store.list("events", "ray", fields="reason=Pulled,involvedObject.name=" + name):
            m = PULLED.search(ev["message"])
            if m and m[1] == image:
                assert int(m[4]) == 8 * 1024 * 1024
                w.api.delete(R.BUILTIN["pods"], "ray", name, {"gracePeriodSeconds": 0})
                return go_seconds(m[2])
        time.sleep(0.2)
    raise AssertionError(f"no Pulled event for {image}")


# The harness's own THROTTLE_SCRIPT (k8s_network) polices ingress with ``tc ... police``; this
# kernel has no act_police (nor act_gact), so here the DaemonSet redirects the node's ingress
# from the registry into an ifb device and shapes that with tbf — the same effect.
IFB_SCRIPT = """set -eu
IF=$(ip route show default | awk '{print $5; exit}')
clean() { tc qdisc del dev "$IF" ingress 2>/dev/null || true
  ip link del rcifb 2>/dev/null || true; }
trap 'clean; exit 0' TERM INT
clean
ip link add rcifb type ifb && ip link set rcifb up
tc qdisc add dev rcifb root tbf rate "$RATE" burst 32k latency 400ms
tc qdisc add dev "$IF" handle ffff: ingress
for host in $HOSTS; do
  for ip in $(getent ahostsv4 "$host" | awk '{print $1}' | sort -u); do
    tc filter add dev "$IF" parent ffff: protocol ip u32 match ip src "$ip"/32 \\
      action mirred egress redirect dev rcifb
  done
done
echo "throttled $HOSTS to $RATE on $IF"; sleep infinity & wait
"""


def throttle_daemonset(node: str, rate: str) -> dict:
    labels = {"raychaos.io/run-id": "run1", "raychaos.io/fault": "throttle-registry-pulls"}
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "pull-throttle", "labels": labels},
            "spec": {"selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels}, "spec": {
                    "hostNetwork": True, "tolerations": [{"operator": "Exists"}],
                    "terminationGracePeriodSeconds": 10,
                    "affinity": {"nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                            {"matchFields": [{"key": "metadata.name", "operator": "In",
                                              "values": [node]}]}]}}},
                    "containers": [{"name": "tc", "image": k8s_network.TOOL_IMAGE,
                                    "command": ["sh", "-c", IFB_SCRIPT],
                                    "env": [{"name": "RATE", "value": rate},
                                            {"name": "HOSTS", "value": "registry.raychaos.test"}],
                                    "securityContext": {"privileged": True}}]}}}}


def test_a_throttle_daemonset_slows_pulls_on_its_node_only(world):
    fast = pull_seconds(world, "n1", "before")
    cfg = client.Configuration()
    config.load_kube_config(world.kubeconfig, client_configuration=cfg)
    apps = client.AppsV1Api(client.ApiClient(cfg))
    apps.create_namespaced_daemon_set("ray", throttle_daemonset("n1", "8mbit"))
    try:
        t0, log = time.monotonic(), ""
        while time.monotonic() - t0 < 60 and "throttled" not in log:
            pods = world.store.list("pods", "ray", "raychaos.io/run-id=run1")
            log = (world.kubelet.log(pods[0], "tc", False) or "") if pods else ""
            time.sleep(0.3)
        assert pods[0]["spec"]["nodeName"] == "n1" and pods[0]["spec"]["hostNetwork"]
        assert "throttled registry.raychaos.test to 8mbit on eth0" in log, log
        slow = pull_seconds(world, "n1", "throttled")
        other = pull_seconds(world, "n2", "other-node")
    finally:
        apps.delete_namespaced_daemon_set("pull-throttle", "ray")
    t0 = time.monotonic()
    while world.store.list("pods", "ray", "raychaos.io/run-id=run1") and \
            time.monotonic() - t0 < 30:
        time.sleep(0.2)
    after = pull_seconds(world, "n1", "after")
    print(f"\npull seconds: unthrottled {fast}, throttled {slow}, other node {other}, "
          f"after the undo {after}")
    # 8 MiB at 8 Mbit/s is ~8.4 s; unthrottled it is well under a second
    assert slow > 5.0 and slow > 5 * fast, (fast, slow)
    assert other < slow / 3 and after < slow / 3, (other, after, slow)


def test_the_harness_throttle_daemonset_lands_on_its_node(world):
    """raychaos's own DaemonSet is created, scheduled by its node affinity and run privileged
    in the node's network namespace (whether its tc works depends on the kernel: see above)."""
    api = ApiSession.connect(world.kubeconfig, None)
    record: dict = {}
    try:
        k8s_network.throttle_registry_pulls(api, "ray", "run2", record, rate="8mbit",
                                            nodes=["n2"], registry_hosts=["registry-1.docker.io"])
        t0 = time.monotonic()
        while time.monotonic() - t0 < 30 and not [
                p for p in world.store.list("pods", "ray", "raychaos.io/run-id=run2")
                if p["status"].get("podIP")]:
            time.sleep(0.2)
        pod = world.store.list("pods", "ray", "raychaos.io/run-id=run2")[0]
        assert pod["spec"]["nodeName"] == "n2"
        assert pod["status"]["podIP"] == world.net.nodes["n2"].uplink_ip  # hostNetwork
    finally:
        k8s_network.delete_created(api, record["undo"])
        api.close()
    t0 = time.monotonic()
    while world.store.list("pods", "ray", "raychaos.io/run-id=run2") and \
            time.monotonic() - t0 < 30:
        time.sleep(0.2)
    assert not world.store.list("pods", "ray", "raychaos.io/run-id=run2")


def test_networkchaos_bandwidth_slows_a_pod_until_deleted(world):
    cfg = client.Configuration()
    config.load_kube_config(world.kubeconfig, client_configuration=cfg)
    api = client.CoreV1Api(client.ApiClient(cfg))
    custom = client.CustomObjectsApi(api.api_client)
    api.create_namespaced_pod("ray", {"metadata": {"name": "srv", "labels": {"app": "srv"}},
                                      "spec": {"nodeName": "n1", "containers": [{
        "name": "c", "image": "registry.raychaos.test/tools/srv:1", "command": [
            "sh", "-c", "head -c 4000000 /dev/urandom > /tmp/blob && cd /tmp && "
                        "exec python3 -m http.server 8080"],
        "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1}}]}})
    api.create_namespaced_pod("ray", {"metadata": {"name": "cli"}, "spec": {
        "nodeName": "n2", "containers": [{"name": "c", "image": "registry.raychaos.test/t:1",
                                          "command": ["sleep", "600"]}]}})
    t0 = time.monotonic()
    while time.monotonic() - t0 < 60:
        pods = {p.metadata.name: p for p in api.list_namespaced_pod("ray").items}
        if all(p in pods and any(c.type == "Ready" and c.status == "True"
                                 for c in pods[p].status.conditions or [])
               for p in ("srv", "cli")):
            break
        time.sleep(0.3)
    ip = pods["srv"].status.pod_ip

    def fetch() -> float:
        out = stream(api.connect_get_namespaced_pod_exec, "cli", "ray", command=[
            "python3", "-c", "import time,urllib.request as u; t=time.time(); "
            f"n=len(u.urlopen('http://{ip}:8080/blob', timeout=60).read()); "
            "print(n, time.time()-t)"], stderr=True, stdout=True, stdin=False, tty=False)
        n, took = out.split()
        assert int(n) == 4000000
        return float(took)

    fast = fetch()
    custom.create_namespaced_custom_object("chaos-mesh.org", "v1alpha1", "ray", "networkchaos", {
        "apiVersion": "chaos-mesh.org/v1alpha1", "kind": "NetworkChaos",
        "metadata": {"name": "slow"}, "spec": {
            "action": "bandwidth", "mode": "all", "selector": {"labelSelectors": {"app": "srv"}},
            "bandwidth": {"rate": "8mbit", "limit": 20971520, "buffer": 10000}}})
    t0 = time.monotonic()
    while time.monotonic() - t0 < 10:
        obj = custom.get_namespaced_custom_object("chaos-mesh.org", "v1alpha1", "ray",
                                                  "networkchaos", "slow")
        conds = {c["type"]: c["status"] for c in (obj.get("status") or {}).get("conditions", [])}
        if conds.get("AllInjected") == "True":
            break
        time.sleep(0.2)
    assert conds.get("AllInjected") == "True", obj
    slow = fetch()
    custom.delete_namespaced_custom_object("chaos-mesh.org", "v1alpha1", "ray", "networkchaos",
                                           "slow")
    t0 = time.monotonic()
    while world.store.get("networkchaos", "ray", "slow") and time.monotonic() - t0 < 10:
        time.sleep(0.2)
    assert world.store.get("networkchaos", "ray", "slow") is None
    after = fetch()
    print(f"\n4 MB fetch seconds: before {fast:.2f}, under NetworkChaos {slow:.2f}, "
          f"after {after:.2f}")
    # 4 MB at 8 Mbit/s is ~4 s
    assert slow > 2.5 and slow > 5 * fast and after < slow / 3, (fast, slow, after)
