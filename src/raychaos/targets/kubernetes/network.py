"""Saturate Ray pods' network on Kubernetes; delete what a run created.

Why these objects: bandwidth is shaped by Chaos Mesh (a ``NetworkChaos`` with action
``bandwidth`` on exactly the named pods) — raychaos cannot run ``tc`` inside a pod's network
namespace itself — and "landed" is the chaos's own ``AllInjected=True`` condition, not the API
accepting the object. The flood (the noisy neighbour) and the proof are the same small
standard-library TCP probe the local target uses, run *in the Ray containers* by exec (every Ray
image has Python): a transfer from a peer pod to the victim measured before and during the
fault, and a paced flood that stops by itself after ``flood_s`` — UDP out of the victim when
its bandwidth is shaped (the direction the shaper queues), TCP into it otherwise.

Every object carries ``raychaos.io/run-id``; undo and ``cleanup_run`` delete them (404 = already
gone) and stop the flood (``pkill`` in the pods).
"""

from __future__ import annotations

import contextlib
import importlib.resources
import json
import threading
import time
from typing import Any

from raychaos.errors import FaultFailed, KubeApiError, TargetUnavailable
from raychaos.results.store import checkpoint
from raychaos.targets.kubernetes.client import ApiSession
from raychaos.targets.kubernetes.safety import object_name, run_labels
from raychaos.targets.kubernetes.streams import ExecResult, LineReader, exec_in, open_exec

__all__ = ["CHAOS_MESH", "chaos_mesh_installed", "delete_created", "delete_labelled",
           "measure_transfer", "saturate_network", "stop_floods"]

CHAOS_MESH = ("chaos-mesh.org", "v1alpha1", "networkchaos")
PROBE_PORT, FLOOD_PORT = 5201, 5202
INJECTED_WAIT_S = 30.0
MARK = "# raychaos-netprobe\n"
_open_floods: dict[str, list[tuple[Any, Any]]] = {}  # record undo id -> open exec streams


def _probe_source() -> str:
    files = importlib.resources.files("raychaos.targets.local.network")
    return MARK + files.joinpath("netprobe.py").read_text()


def _cmd(*args: Any) -> list[str]:
    return ["python3", "-c", _probe_source(), *map(str, args)]


def chaos_mesh_installed(api: ApiSession) -> bool:
    crd = api.read_or_none(api.apiext.read_custom_resource_definition,
                           "networkchaos.chaos-mesh.org")
    return crd is not None


def _name(pod: dict[str, Any]) -> str:
    return str(pod["metadata"]["name"])


def _container(pod: dict[str, Any]) -> str:
    return str(pod["spec"]["containers"][0]["name"])


def measure_transfer(api: ApiSession, ns: str, src: dict[str, Any], dst: dict[str, Any],
                     seconds: float = 1.5, port: int = PROBE_PORT) -> dict[str, Any]:
    """Bulk TCP from pod ``src`` to pod ``dst`` for ``seconds``, both ends run by exec."""
    ip = dst["status"]["podIP"]
    ws, core = open_exec(api, ns, _name(dst), _container(dst),
                         _cmd("recv", ip, port, seconds), timeout=seconds + 30)
    try:
        out = LineReader(ws)
        ready = out.readline(timeout=15)
        if "READY" not in (ready or ""):
            raise FaultFailed(f"saturate_network: the transfer probe did not start in "
                              f"{ns}/{_name(dst)}: {ready!r} {ws.read_stderr(timeout=1)!r}")
        # the sender in a thread: the receiver's stream must be read while it runs (a
        # WSClient that closes while nobody reads it drops what it had not read yet)
        sent_box: list[ExecResult] = []

        def send() -> None:
            try:
                sent_box.append(exec_in(api, ns, _name(src), _container(src),
                                        _cmd("send", ip, port, seconds), timeout=seconds + 30))
            except (KubeApiError, TargetUnavailable) as exc:
                sent_box.append(ExecResult(None, error=str(exc)))

        sender = threading.Thread(target=send, name="raychaos-netprobe-send", daemon=True)
        sender.start()
        line = out.readline(timeout=seconds + 20)
        sender.join(timeout=seconds + 35)
    finally:
        ws.close()
        core.api_client.close()
    sent = sent_box[0] if sent_box else ExecResult(None, error="the sender did not finish")
    try:
        result = json.loads(line)
    except ValueError as exc:
        raise FaultFailed(f"saturate_network: no transfer result from {ns}/{_name(dst)} "
                          f"(sender exit {sent.code}: {sent.error or sent.stderr[-200:]})"
                          ) from exc
    return {"src": _name(src), "dst": _name(dst), **result,
            "mbit_s": round(float(result.get("rate_bps", 0)) / 1e6, 2)}


def _networkchaos(api: ApiSession, ns: str, name: str, labels: dict[str, str],
                  victims: list[dict[str, Any]], rate: str, limit: int = 20971520
                  ) -> dict[str, Any]:
    group, version, plural = CHAOS_MESH
    body = {"apiVersion": f"{group}/{version}", "kind": "NetworkChaos",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {"action": "bandwidth", "mode": "all",
                     "selector": {"pods": {ns: [_name(p) for p in victims]}},
                     "bandwidth": {"rate": rate, "limit": limit, "buffer": 10000}}}
    api.write("POST", f"/apis/{group}/{version}/namespaces/{ns}/{plural}",
              api.custom.create_namespaced_custom_object, group, version, ns, plural,
              body=body)
    if api.gate.dry_run:
        return {}
    deadline = time.monotonic() + INJECTED_WAIT_S
    obj: dict[str, Any] = {}
    while time.monotonic() < deadline:
        obj = api.read(api.custom.get_namespaced_custom_object, group, version, ns, plural,
                       name)
        conds = {c.get("type"): c for c in (obj.get("status") or {}).get("conditions") or []}
        if (conds.get("AllInjected") or {}).get("status") == "True":
            return {"conditions": {k: v.get("status") for k, v in conds.items()},
                    "records": [r.get("id") for r in ((obj.get("status") or {}).get(
                        "experiment") or {}).get("containerRecords") or []]}
        time.sleep(0.2)
    raise FaultFailed(f"saturate_network: NetworkChaos {ns}/{name} was not AllInjected within "
                      f"{INJECTED_WAIT_S:g} s (status: {obj.get('status')})")


def saturate_network(api: ApiSession, ns: str, run_id: str, record: dict[str, Any], *,
                     victims: list[dict[str, Any]], peer: dict[str, Any], rate: str | None,
                     flood: bool, flood_s: float, flood_bps: float, limit: int = 20971520
                     ) -> dict[str, Any]:
    """Shape the victims' bandwidth (Chaos Mesh) and/or flood their link (with ``peer`` at the
    other end); evidence: a
    transfer measured before and during — first victim → peer when shaped (the direction a
    bandwidth action limits), peer → first victim for a flood alone."""
    labels = run_labels(run_id, **{"raychaos.io/fault": "saturate-network"})
    name = object_name("raychaos-net", run_id)
    undo: dict[str, Any] = {"kind": "saturate_network", "objects": [], "floods": [],
                            "id": record.get("id") or run_id}
    record["undo"] = undo
    if api.gate.dry_run:
        if rate:
            _networkchaos(api, ns, name, labels, victims, rate, limit)
        return {"victims": [_name(v) for v in victims], "dry_run": True}
    # a NetworkChaos bandwidth action shapes what the victims send (tbf on their interface's
    # egress): measure that direction; a flood alone competes for what the victim receives
    src, dst = (victims[0], peer) if rate else (peer, victims[0])
    before = measure_transfer(api, ns, src, dst)
    evidence: dict[str, Any] = {"victims": [_name(v) for v in victims], "peer": _name(peer),
                                "before": before, "rate": rate, "flood": flood}
    if rate:
        undo["objects"].append({"api": "networkchaos", "namespace": ns, "name": name})
        checkpoint(record)
        evidence["networkchaos"] = {"name": f"{ns}/{name}",
                                    **_networkchaos(api, ns, name, labels, victims, rate,
                                                    limit)}
    if flood:
        undo["floods"] = [{"namespace": ns, "pod": _name(p), "container": _container(p)}
                          for p in [*victims, peer]]
        checkpoint(record)
        streams = []
        for i, v in enumerate(victims):
            # shaped, the flood leaves the victim as UDP: it fills the queue the bandwidth
            # action put on the victim's egress, where everything else the victim sends (a
            # raylet's health-check replies, shuffle blocks) waits behind it, as behind a
            # saturated NIC — a TCP flow is held to a few packets in its own host's queue
            # (netprobe.py says why), and one coming in would pass an unshaped direction.
            # Alone, a TCP flood comes in.
            sink, source = (peer, v) if rate else (v, peer)
            ip, port = sink["status"]["podIP"], FLOOD_PORT + i
            proto = "udp-" if rate else ""
            streams.append(open_exec(api, ns, _name(sink), _container(sink),
                                     _cmd(f"{proto}recv", ip, port, flood_s), flood_s + 30))
            time.sleep(0.3)
            streams.append(open_exec(api, ns, _name(source), _container(source),
                                     _cmd(f"{proto}send", ip, port, flood_s, flood_bps),
                                     flood_s + 30))
        _open_floods[undo["id"]] = streams
        time.sleep(0.5)
    during = measure_transfer(api, ns, src, dst)
    evidence["during"] = during
    if during["rate_bps"] >= before["rate_bps"] * 0.8:
        raise FaultFailed(f"saturate_network: no measurable effect on {_name(victims[0])}: "
                          f"{before['mbit_s']} Mbit/s before, {during['mbit_s']} during")
    evidence["landed"] = True
    return evidence


def stop_floods(api: ApiSession, undo: dict[str, Any]) -> list[str]:
    """End a flood: close its exec streams (this process) and pkill the probes in the pods."""
    for ws, core in _open_floods.pop(str(undo.get("id")), []):
        with contextlib.suppress(Exception):
            ws.close()
            core.api_client.close()
    stopped = []
    for f in undo.get("floods") or []:
        try:
            result = exec_in(api, f["namespace"], f["pod"], f["container"],
                             ["pkill", "-f", "raychaos-netprob[e]"], timeout=15)
        except (KubeApiError, TargetUnavailable) as exc:
            if isinstance(exc, KubeApiError) and exc.status == 404:
                continue  # the pod is gone, and its flood with it
            raise
        if result.code in (0, 1):  # 1: nothing left to stop
            stopped.append(f["pod"])
    return stopped


def _delete(api: ApiSession, obj: dict[str, str]) -> bool:
    ns, name, kind = obj["namespace"], obj["name"], obj["api"]
    if kind == "daemonset":
        return api.delete_quietly(f"/apis/apps/v1/namespaces/{ns}/daemonsets/{name}",
                                  api.apps.delete_namespaced_daemon_set, name, ns)
    if kind == "pod":
        return api.delete_quietly(f"/api/v1/namespaces/{ns}/pods/{name}",
                                  api.core.delete_namespaced_pod, name, ns,
                                  body={"gracePeriodSeconds": 0})
    group, version, plural = CHAOS_MESH
    return api.delete_quietly(f"/apis/{group}/{version}/namespaces/{ns}/{plural}/{name}",
                              api.custom.delete_namespaced_custom_object, group, version, ns,
                              plural, name)


def delete_created(api: ApiSession, undo: dict[str, Any]) -> list[str]:
    """Delete the objects an undo record names; those already gone are fine."""
    return [o["name"] for o in undo.get("objects", []) if _delete(api, o)]


def delete_labelled(api: ApiSession, ns: str, selector: str) -> list[str]:
    """Find and delete leftovers carrying ``selector`` (DaemonSets, pods, NetworkChaos)."""
    found = [{"api": "daemonset", "namespace": ns, "name": d["metadata"]["name"]}
             for d in api.read(api.apps.list_namespaced_daemon_set, ns,
                               label_selector=selector)["items"]]
    found += [{"api": "pod", "namespace": ns, "name": p["metadata"]["name"]}
              for p in api.read(api.core.list_namespaced_pod, ns,
                                label_selector=selector)["items"]
              if not p["metadata"].get("ownerReferences")]
    if chaos_mesh_installed(api):
        try:
            found += [{"api": "networkchaos", "namespace": ns, "name": c["metadata"]["name"]}
                      for c in api.read(api.custom.list_namespaced_custom_object,
                                        *CHAOS_MESH[:2], ns, CHAOS_MESH[2],
                                        label_selector=selector)["items"]]
        except KubeApiError as exc:
            if exc.status != 404:
                raise
    return [o["name"] for o in found if _delete(api, o)]
