"""A minimal Chaos Mesh for the world: the ``networkchaos.chaos-mesh.org`` CRD and a controller
that applies ``bandwidth`` (tc tbf on the pod's eth0), ``partition`` and ``loss`` (nftables in
the pod's network namespace — this kernel has no netem) to the selected pods on real nodes,
reports ``AllInjected``/``AllRecovered`` conditions, recovers after ``duration``, and undoes
everything before the object goes (a finalizer, as Chaos Mesh's records are).

Why: raychaos's ``saturate_network`` creates a NetworkChaos when the CRD exists; with this it
really slows the Ray pods instead of landing in an object nobody acts on. Off unless
``World(chaos_mesh=True)``.
"""

from __future__ import annotations

import copy
import logging
import subprocess
import time
from typing import Any

from raychaos.testbed.node.chaos import apply_commands, recover_commands, seconds, status_body
from tests.k8s.world.api import Api
from tests.k8s.world.store import selector_dict_match

__all__ = ["ChaosMesh", "NETWORKCHAOS_CRD"]

log = logging.getLogger("world.chaosmesh")
FINALIZER = "chaos-mesh/records"
NETWORKCHAOS_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "networkchaos.chaos-mesh.org"},
    "spec": {"group": "chaos-mesh.org", "scope": "Namespaced",
             "names": {"plural": "networkchaos", "singular": "networkchaos",
                       "kind": "NetworkChaos", "listKind": "NetworkChaosList"},
             "versions": [{"name": "v1alpha1", "served": True, "storage": True,
                           "subresources": {"status": {}}}]}}


def _sh(netns: str, *cmd: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", "netns", "exec", netns, *cmd], input=stdin, text=True,
                          capture_output=True, check=False, timeout=30)


class ChaosMesh:
    def __init__(self, api: Api, kubelet: Any):
        self.api, self.kubelet = api, kubelet
        self.injected: dict[str, list[tuple[str, str]]] = {}  # chaos uid -> [(pod, netns)]
        self.started: dict[str, float] = {}

    def _res(self) -> Any:
        return self.api.resolve("chaos-mesh.org", "v1alpha1", "networkchaos")

    def reconcile(self) -> None:
        res = self._res()
        if res is None:
            return
        for chaos in self.api.store.list("networkchaos"):
            meta = chaos["metadata"]
            uid = meta["uid"]
            try:
                if meta.get("deletionTimestamp"):
                    self._recover(uid)
                    self.api.update(res, meta["namespace"], meta["name"], {"metadata": {
                        "finalizers": [f for f in meta.get("finalizers") or []
                                       if f != FINALIZER]}},
                        patch_type="application/merge-patch+json")
                    continue
                if FINALIZER not in (meta.get("finalizers") or []):
                    self.api.update(res, meta["namespace"], meta["name"], {"metadata": {
                        "finalizers": [*(meta.get("finalizers") or []), FINALIZER]}},
                        patch_type="application/merge-patch+json")
                dur = seconds(chaos["spec"].get("duration"))
                if uid not in self.injected and uid not in self.started:
                    self._inject(chaos)
                    self.started[uid] = time.monotonic()
                    self._status(res, chaos, injected=True)
                elif dur and uid in self.injected and \
                        time.monotonic() - self.started[uid] >= dur:
                    self._recover(uid)
                    self._status(res, chaos, injected=False)
            except Exception:  # noqa: BLE001 - one bad object must not stop the others
                log.exception("networkchaos %s/%s", meta["namespace"], meta["name"])

    def _targets(self, chaos: dict, selector: dict | None) -> list[Any]:
        sel = selector or {}
        namespaces = sel.get("namespaces") or [chaos["metadata"]["namespace"]]
        labels = {"matchLabels": sel.get("labelSelectors") or {}}
        by_name = sel.get("pods")  # {namespace: [pod names]}: exactly those pods
        out = []
        for wk in list(self.kubelet.workers.values()):
            pod = wk.pod()
            if not (pod and wk.netns and wk.netns != self.kubelet.net.nodes[wk.node].netns):
                continue
            if by_name is not None:
                if wk.name in (by_name.get(wk.ns) or []):
                    out.append(wk)
            elif wk.ns in namespaces and selector_dict_match(labels,
                                                              pod["metadata"].get("labels")):
                out.append(wk)
        if chaos["spec"].get("mode") == "one":
            out = out[:1]
        return out

    def _inject(self, chaos: dict) -> None:
        spec = chaos["spec"]
        victims = self._targets(chaos, spec.get("selector"))
        peers = [w.ip for w in self._targets(chaos, (spec.get("target") or {}).get("selector"))] \
            if spec.get("target") else []
        done = []
        for wk in victims:
            for argv, stdin in apply_commands(spec, peers):
                _sh(wk.netns, *argv, stdin=stdin)
            done.append((wk.name, wk.netns))
        self.injected[chaos["metadata"]["uid"]] = done

    def _recover(self, uid: str) -> None:
        for _, netns in self.injected.pop(uid, []):
            for argv in recover_commands():
                _sh(netns, *argv)

    def _status(self, res: Any, chaos: dict, injected: bool) -> None:
        st = status_body(chaos["metadata"]["namespace"],
                         [p for p, _ in self.injected.get(chaos["metadata"]["uid"], [])],
                         injected)
        cur = self.api.store.get("networkchaos", chaos["metadata"]["namespace"],
                                 chaos["metadata"]["name"])
        if cur is not None:
            self.api.update(res, cur["metadata"]["namespace"], cur["metadata"]["name"],
                            {**copy.deepcopy(cur), "status": st}, sub="status")
