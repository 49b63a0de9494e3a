"""What applies Chaos Mesh's NetworkChaos on the bed's nodes: ours, in the node agent.

The bed installs Chaos Mesh's real ``networkchaos.chaos-mesh.org`` CRD (from the chaos-mesh
module, :func:`raychaos.testbed.build.chaos_mesh_crds`), so the API server validates and
stores NetworkChaos objects exactly as on a cluster with Chaos Mesh. Its controller and
chaos-daemon are not run (they need a container runtime to enter pods): this does their part
for the bed's pods, which the agent runs in one network namespace each. For each NetworkChaos
it applies ``bandwidth`` (tc tbf on the pod's eth0, with the object's rate, limit and buffer),
``partition`` and ``loss`` (nftables in the pod's namespace: this kernel has no netem) to the
selected pods, reports the ``AllInjected``/``AllRecovered`` conditions and the records as
Chaos Mesh's status does, recovers after ``duration``, and undoes everything before the object
goes (a finalizer, as Chaos Mesh's records are).
"""

from __future__ import annotations

import logging
import re
import subprocess
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

__all__ = ["FINALIZER", "ChaosDaemon", "apply_commands", "recover_commands", "seconds",
           "status_body"]

log = logging.getLogger("testbed.chaos")
FINALIZER = "chaos-mesh/records"
TABLE = "bedchaos"
API = "/apis/chaos-mesh.org/v1alpha1"
MERGE = "application/merge-patch+json"


def seconds(text: str | None) -> float | None:
    """A Chaos Mesh duration (``"30s"``, ``"1m30s"``, ``"500ms"``) in seconds; None: none."""
    if not text:
        return None
    return sum(float(num) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[unit]
               for num, unit in re.findall(r"([\d.]+)(ms|h|m|s)", text))


def apply_commands(spec: dict[str, Any], peers: list[str]) -> list[tuple[list[str], str | None]]:
    """The commands (argv, stdin) run in a victim pod's namespace for the object's action;
    [] for an action this does not apply."""
    action = spec.get("action")
    if action == "bandwidth":
        bw = spec.get("bandwidth") or {}
        return [(["tc", "qdisc", "replace", "dev", "eth0", "root", "tbf",
                  "rate", str(bw.get("rate", "1mbit")), "burst", str(bw.get("buffer", 10000)),
                  "limit", str(bw.get("limit", 20971520))], None)]
    if action == "partition":
        match = [f"ip saddr {ip} drop" for ip in peers] + \
            [f"ip daddr {ip} drop" for ip in peers] if peers else \
            ["iifname != lo drop", "oifname != lo drop"]
    elif action == "loss":
        pct = int(float((spec.get("loss") or {}).get("loss", "0")))
        match = [f"numgen random mod 100 < {pct} drop"]
    else:
        return []
    body = "\n".join(f"    {m}" for m in match)
    return [(["nft", "-f", "-"],
             f"table inet {TABLE} {{\n  chain in {{ type filter hook input priority -5;\n"
             f"{body}\n  }}\n  chain out {{ type filter hook output priority -5;\n"
             f"{body}\n  }}\n}}\n")]


def recover_commands() -> list[list[str]]:
    """What undoes any action in a pod's namespace (each may find nothing to remove)."""
    return [["tc", "qdisc", "del", "dev", "eth0", "root"], ["nft", "delete", "table", "inet",
                                                              TABLE]]


def status_body(namespace: str, pods: list[str], injected: bool) -> dict[str, Any]:
    """Chaos Mesh's status for an object injected into (or recovered from) ``pods``, in the
    shape its CRD's schema requires (each record's counts included)."""
    return {"conditions": [
        {"type": "AllInjected", "status": "True" if injected else "False"},
        {"type": "AllRecovered", "status": "False" if injected else "True"},
        {"type": "Selected", "status": "True" if pods else "False"},
        {"type": "Paused", "status": "False"}],
        "experiment": {"desiredPhase": "Run" if injected else "Stop",
                       "containerRecords": [
                           {"id": f"{namespace}/{p}", "selectorKey": ".",
                            "phase": "Injected" if injected else "Not Injected",
                            "injectedCount": 1, "recoveredCount": 0 if injected else 1}
                           for p in pods]}}


def _sh(netns: str, argv: list[str], stdin: str | None = None) -> None:
    proc = subprocess.run(["ip", "netns", "exec", netns, *argv], input=stdin, text=True,
                          capture_output=True, check=False, timeout=30)
    if proc.returncode and argv[:2] not in (["tc", "qdisc"], ["nft", "delete"]):
        log.warning("%s in %s: exit %d %s", argv[0], netns, proc.returncode, proc.stderr.strip())


class ChaosDaemon:
    """Reconciles every NetworkChaos against the pods this agent runs.

    ``call(method, path, body, content_type)`` is the agent's API client; ``pods()`` gives
    (namespace, name, labels, netns, ip) for each running pod with a network namespace of its
    own."""

    def __init__(self, call: Callable[..., tuple[int, Any]],
                 pods: Callable[[], list[tuple[str, str, dict[str, str], str, str]]]) -> None:
        self.call, self.pods = call, pods
        self.injected: dict[str, list[tuple[str, str]]] = {}  # uid -> [(pod, netns)]
        self.records: dict[str, list[str]] = {}  # uid -> the pods it was injected into
        self.started: dict[str, float] = {}

    def reconcile(self) -> None:
        code, body = self.call("GET", f"{API}/networkchaos")
        if code != 200:  # no CRD: nothing to do
            return
        for chaos in body.get("items") or []:
            meta = chaos["metadata"]
            try:
                self._one(chaos, meta)
            except Exception:  # noqa: BLE001 - one bad object must not stop the others
                log.exception("networkchaos %s/%s", meta["namespace"], meta["name"])

    def _path(self, meta: dict[str, Any]) -> str:
        return f"{API}/namespaces/{meta['namespace']}/networkchaos/{quote(meta['name'])}"

    def _one(self, chaos: dict[str, Any], meta: dict[str, Any]) -> None:
        uid, finalizers = meta["uid"], meta.get("finalizers") or []
        if meta.get("deletionTimestamp"):
            self._recover(uid)
            self.records.pop(uid, None)
            self.started.pop(uid, None)
            if FINALIZER in finalizers:
                self.call("PATCH", self._path(meta), {"metadata": {
                    "finalizers": [f for f in finalizers if f != FINALIZER],
                    "resourceVersion": meta["resourceVersion"]}}, MERGE)
            return
        if FINALIZER not in finalizers:
            code, chaos = self.call("PATCH", self._path(meta), {"metadata": {
                "finalizers": [*finalizers, FINALIZER],
                "resourceVersion": meta["resourceVersion"]}}, MERGE)
            if code != 200:
                return  # changed meanwhile: the next pass sees it
            meta = chaos["metadata"]
        duration = seconds(chaos["spec"].get("duration"))
        if uid not in self.injected and uid not in self.started:
            self._inject(chaos)
            self.started[uid] = time.monotonic()
            self._status(chaos, injected=True)
        elif duration and uid in self.injected and \
                time.monotonic() - self.started[uid] >= duration:
            self._recover(uid)
            self._status(chaos, injected=False)

    def _targets(self, chaos: dict[str, Any], selector: dict[str, Any] | None
                 ) -> list[tuple[str, str, dict[str, str], str, str]]:
        sel = selector or {}
        namespaces = sel.get("namespaces") or [chaos["metadata"]["namespace"]]
        labels = sel.get("labelSelectors") or {}
        by_name = sel.get("pods")  # {namespace: [pod names]}: exactly those pods
        out = []
        for pod in sorted(self.pods()):
            ns, name, pod_labels = pod[0], pod[1], pod[2]
            if by_name is not None:
                if name in (by_name.get(ns) or []):
                    out.append(pod)
            elif ns in namespaces and all(pod_labels.get(k) == v for k, v in labels.items()):
                out.append(pod)
        return out[:1] if chaos["spec"].get("mode") == "one" else out

    def _inject(self, chaos: dict[str, Any]) -> None:
        spec = chaos["spec"]
        victims = self._targets(chaos, spec.get("selector"))
        peers = [p[4] for p in self._targets(chaos, (spec.get("target") or {}).get("selector"))
                 ] if spec.get("target") else []
        done = []
        for _ns, name, _labels, netns, _ip in victims:
            for argv, stdin in apply_commands(spec, peers):
                _sh(netns, argv, stdin)
            done.append((name, netns))
        self.injected[chaos["metadata"]["uid"]] = done
        self.records[chaos["metadata"]["uid"]] = [n for n, _ in done]
        log.info("networkchaos %s/%s: %s on %s", chaos["metadata"]["namespace"],
                 chaos["metadata"]["name"], spec.get("action"), [n for n, _ in done])

    def _recover(self, uid: str) -> None:
        for _, netns in self.injected.pop(uid, []):
            for argv in recover_commands():
                _sh(netns, argv)

    def _status(self, chaos: dict[str, Any], injected: bool) -> None:
        """Chaos Mesh's CRD has no status subresource: its controller writes the object."""
        meta = chaos["metadata"]
        for _ in range(5):  # a conflict (our finalizer, a label) is read again
            code, cur = self.call("GET", self._path(meta))
            if code != 200:
                return
            cur["status"] = status_body(meta["namespace"], self.records.get(meta["uid"], []),
                                        injected)
            if self.call("PUT", self._path(meta), cur)[0] != 409:
                return
