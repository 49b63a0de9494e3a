"""Readiness probes, as the kubelet runs them: ``httpGet`` and ``tcpSocket`` from the host to
the pod's address, ``exec`` inside the container; ``initialDelaySeconds``, ``periodSeconds``,
``timeoutSeconds``, ``successThreshold``, ``failureThreshold``. A container without a probe is
Ready once running. The pod is Ready when all its containers are.

Why a module: KubeRay's readiness (the head's ``/api/gcs_healthz`` on 8265, a worker's
``/api/local_raylet_healthz`` on 52365) is what makes "the RayCluster is ready" mean that Ray
answers, not just that a process exists.
"""

from __future__ import annotations

import time
from typing import Any

from raychaos.testbed.node.objects import set_condition

__all__ = ["ProbeLoop"]


def _port(c: dict[str, Any], port: Any) -> int:
    if isinstance(port, int) or str(port).isdigit():
        return int(port)
    for p in c.get("ports") or []:
        if p.get("name") == port:
            return int(p["containerPort"])
    raise ValueError(f"no container port named {port!r}")


class ProbeLoop:
    def __init__(self, worker: Any):
        self.w = worker
        self.next: dict[str, float] = {}
        self.ok: dict[str, int] = {}
        self.bad: dict[str, int] = {}

    def _probe(self, c: dict[str, Any], probe: dict[str, Any]) -> bool:
        from raychaos.testbed.node.kubelet import http_status, tcp_ok
        timeout = float(probe.get("timeoutSeconds", 1))
        if "httpGet" in probe:
            g = probe["httpGet"]
            status = http_status(self.w.ip, _port(c, g["port"]), g.get("path", "/"), timeout)
            if status is not None:
                # the server answers, healthy or not: the container has started, so it no
                # longer holds the kubelet's one-start-at-a-time gate (a head whose slow GCS
                # fails its readiness for minutes would hold every other start otherwise)
                self.w.k.starting.pop(self.w.uid, None)
            return status is not None and 200 <= status < 400
        if "tcpSocket" in probe:
            return tcp_ok(self.w.ip, _port(c, probe["tcpSocket"]["port"]), timeout)
        if "exec" in probe:
            cont = self.w.containers.get(c["name"])
            proc = cont.exec(list(probe["exec"].get("command") or [])) if cont else None
            if proc is None:
                return False
            try:
                proc.communicate(timeout=timeout)
            except Exception:  # noqa: BLE001 - a hung probe is a failed probe
                proc.kill()
                proc.communicate()
                return False
            return bool(proc.returncode == 0)
        return True

    def tick(self, pod: dict[str, Any]) -> None:
        w = self.w
        changed = False
        for c in pod["spec"]["containers"]:
            name = c["name"]
            st = w.state.get(name, {})
            cont = w.containers.get(name)
            running = cont is not None and cont.exit_code() is None
            if not running:
                if st.get("ready"):
                    st["ready"], changed = False, True
                self.next.pop(name, None)
                continue
            probe = c.get("readinessProbe")
            if not probe:
                if not st.get("ready"):
                    st["ready"], changed = True, True
                continue
            t = time.monotonic()
            due = self.next.setdefault(name, t + float(probe.get("initialDelaySeconds", 0)))
            if t < due:
                continue
            self.next[name] = t + float(probe.get("periodSeconds", 10))
            if self._probe(c, probe):
                self.bad[name] = 0
                self.ok[name] = self.ok.get(name, 0) + 1
                if not st.get("ready") and self.ok[name] >= int(probe.get("successThreshold", 1)):
                    st["ready"], changed = True, True
            else:
                self.ok[name] = 0
                self.bad[name] = self.bad.get(name, 0) + 1
                if st.get("ready") and self.bad[name] >= int(probe.get("failureThreshold", 3)):
                    st["ready"], changed = False, True
        if changed:
            self._write(pod)

    def _write(self, pod: dict[str, Any]) -> None:
        w = self.w
        all_ready = all(w.state.get(c["name"], {}).get("ready") for c in pod["spec"]["containers"])
        if all_ready:
            w.k.starting.pop(w.uid, None)

        def fn(p: dict[str, Any]) -> None:
            for s in p["status"].get("containerStatuses") or []:
                s["ready"] = bool(w.state.get(s["name"], {}).get("ready"))
            unready = [c["name"] for c in p["spec"]["containers"]
                       if not w.state.get(c["name"], {}).get("ready")]
            if all_ready:
                set_condition(p, "ContainersReady", "True")
                set_condition(p, "Ready", "True")
            else:
                msg = f"containers with unready status: [{' '.join(unready)}]"
                set_condition(p, "ContainersReady", "False", "ContainersNotReady", msg)
                set_condition(p, "Ready", "False", "ContainersNotReady", msg)
        w.patch_status(fn)
