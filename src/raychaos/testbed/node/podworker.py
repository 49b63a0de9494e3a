"""One pod on a real node, from sandbox to removal: the kubelet's pod worker.

Why a thread per pod: each pod's life (pull, init containers, start, restart with back-off,
probes, graceful stop) is a sequence with waits; a thread keeps it readable, and a few real
pods on a 2-core box are cheap. Everything it learns goes into the pod's status.
"""

from __future__ import annotations

import logging
import re
import shutil
import signal
import threading
import time
from typing import Any

from raychaos.testbed.node.objects import now, quantity, set_condition
from raychaos.testbed.node.runtime import Container, Mount, argv_of, base_env

__all__ = ["PodWorker", "container_env"]

log = logging.getLogger("world.kubelet")
TICK_S = 0.25


def _field_ref(pod: dict[str, Any], path: str) -> str:
    m = re.match(r"metadata\.(labels|annotations)\['(.+)'\]", path)
    if m:
        return str((pod["metadata"].get(m[1]) or {}).get(m[2], ""))
    cur: Any = pod
    for part in path.split("."):
        cur = cur.get(part) if isinstance(cur, dict) else None
    return "" if cur is None else str(cur)


def container_env(pod: dict[str, Any], c: dict[str, Any], secret: Any = None) -> dict[str, str]:
    """The container's env as the kubelet resolves it; ``secret(name, key)`` reads a Secret's
    value for ``secretKeyRef`` (None: such variables are left out)."""
    env: dict[str, str] = {}
    for e in c.get("env") or []:
        if "value" in e:
            env[e["name"]] = re.sub(r"\$\((\w+)\)", lambda m: env.get(m[1], m[0]),
                                    str(e["value"]))
        elif "fieldRef" in (e.get("valueFrom") or {}):
            env[e["name"]] = _field_ref(pod, e["valueFrom"]["fieldRef"]["fieldPath"])
        elif "secretKeyRef" in (e.get("valueFrom") or {}) and secret is not None:
            ref = e["valueFrom"]["secretKeyRef"]
            value = secret(ref.get("name", ""), ref.get("key", ""))
            if value is not None:
                env[e["name"]] = value
        elif "resourceFieldRef" in (e.get("valueFrom") or {}):
            ref = e["valueFrom"]["resourceFieldRef"]["resource"]
            kind, _, res = ref.partition(".")
            env[e["name"]] = str(int(quantity((c.get("resources") or {}).get(kind, {}).get(
                res, 0)) or 0))
    return env


class PodWorker(threading.Thread):
    def __init__(self, kubelet: Any, ns: str, name: str, uid: str, node: str):
        super().__init__(daemon=True, name=f"pod-{name}")
        self.k, self.ns, self.name, self.uid, self.node = kubelet, ns, name, uid, node
        self.dir = kubelet.state_dir / "pods" / f"{ns}_{name}_{uid[:8]}"
        self.containers: dict[str, Container] = {}
        self.state: dict[str, dict[str, Any]] = {}
        self.netns = ""
        self.ip = ""
        self.abort = False
        self.done = False

    # --- helpers -------------------------------------------------------------------------------
    def pod(self) -> dict[str, Any] | None:
        p = self.k.api.store.get("pods", self.ns, self.name)
        return p if p is not None and p["metadata"]["uid"] == self.uid else None

    def patch_status(self, fn: Any) -> None:
        def guarded(p: dict[str, Any]) -> None:
            if p["metadata"]["uid"] == self.uid:
                fn(p)
        self.k.api.store.mutate("pods", self.ns, self.name, guarded)

    def event(self, pod: dict[str, Any], reason: str, msg: str, cname: str | None = None,
              etype: str | None = None) -> None:
        self.k.events(pod, reason, msg, "kubelet", etype, host=self.node,
                     field_path=f"spec.containers{{{cname}}}" if cname else None)

    def run(self) -> None:
        try:
            self._run()
        except Exception:  # noqa: BLE001 - a pod's failure must not take the kubelet down
            log.exception("pod %s/%s failed in the kubelet", self.ns, self.name)
        finally:
            for c in self.containers.values():
                c.kill()
            if self.ip and self.netns != self.k.net.nodes[self.node].netns:
                self.k.net.remove_pod(self.node, self.uid)
            self.k.starting.pop(self.uid, None)
            self.k.remove_pod_cpu_group(self.node, self.uid)
            if not self.abort:
                self.k.api.finish_pod(self.ns, self.name, self.uid)
            shutil.rmtree(self.dir, ignore_errors=True)
            self.done = True

    def _sandbox(self, pod: dict[str, Any]) -> None:
        host = self.k.net.nodes[self.node]
        if pod["spec"].get("hostNetwork"):
            self.netns, self.ip = host.netns, host.uplink_ip
        else:
            self.netns, self.ip = self.k.net.add_pod(self.node, self.uid)
            self.k.net.write_hosts(self.k.hosts_text(self.ip, self.name), [self.netns])

        def fn(p: dict[str, Any]) -> None:
            st = p.setdefault("status", {})
            st.update(hostIP=host.uplink_ip, hostIPs=[{"ip": host.uplink_ip}], podIP=self.ip,
                      podIPs=[{"ip": self.ip}], startTime=now())
            set_condition(p, "PodReadyToStartContainers", "True")
            set_condition(p, "Initialized", "False" if p["spec"].get("initContainers") else
                          "True", "ContainersNotInitialized" if p["spec"].get("initContainers")
                          else None)
            set_condition(p, "Ready", "False", "ContainersNotReady")
            set_condition(p, "ContainersReady", "False", "ContainersNotReady")
            st["containerStatuses"] = [self._cstatus(c, {"waiting": {
                "reason": "ContainerCreating"}}) for c in p["spec"]["containers"]]
        self.patch_status(fn)

    def _cstatus(self, c: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
        s = self.state.get(c["name"], {})
        return {"name": c["name"], "state": state, "lastState": s.get("last", {}),
                "ready": bool(s.get("ready")), "restartCount": s.get("restarts", 0),
                "image": c.get("image", ""), "imageID": "",
                **({"containerID": f"world://{self.uid[:8]}-{c['name']}-{s.get('restarts', 0)}"}
                   if "running" in state or "terminated" in state else {}),
                "started": "running" in state}

    def _secret(self, name: str, key: str) -> str | None:
        import base64
        obj = self.k.api.store.get("secrets", self.ns, name)
        raw = ((obj or {}).get("data") or {}).get(key)
        return base64.b64decode(raw).decode() if raw else None

    def _make(self, pod: dict[str, Any], c: dict[str, Any]) -> Container:
        vols = {v["name"]: v for v in pod["spec"].get("volumes") or []}
        mounts = []
        for vm in c.get("volumeMounts") or []:
            v = vols.get(vm["name"], {})
            if "emptyDir" in v:
                ed = v["emptyDir"] or {}
                if ed.get("medium") == "Memory":
                    mounts.append(Mount(vm["mountPath"], tmpfs_bytes=int(quantity(
                        ed.get("sizeLimit", "1Gi")))))
                else:
                    mounts.append(Mount(vm["mountPath"], str(self.dir / "volumes" / vm["name"])))
            elif "hostPath" in v:
                mounts.append(Mount(vm["mountPath"], v["hostPath"]["path"]))
        n = self.state.get(c["name"], {}).get("restarts", 0)
        tmp = self.dir / f"{c['name']}-{n}" / "tmp"
        (tmp / "home").mkdir(parents=True, exist_ok=True)
        # HOME is /tmp/home inside: a login shell (KubeRay's bash -lc) resets PATH, and its
        # .bash_profile puts the venv's bin back in front
        (tmp / "home" / ".bash_profile").write_text('export PATH="$WORLD_PATH"\n')
        env = base_env(self.name, f"{self.k.world}/{self.uid}") | container_env(
            pod, c, self._secret)
        if env["HOME"] == "/root":
            env["HOME"] = "/tmp/home"
        env["WORLD_PATH"] = env["PATH"]
        argv = [re.sub(r"\$\((\w+)\)", lambda m: env.get(m[1], m[0]), a)
                for a in argv_of(str(c.get("image") or ""), list(c.get("command") or []),
                                 list(c.get("args") or []))]
        return Container(c["name"], self.netns, self.name, argv or ["sleep", "infinity"], env,
                         tmp, self.dir / f"{c['name']}-{n}.log",
                         mounts, self.k.nice_for(pod), self.k.pod_cpu_group(pod, self.node))

    # --- lifecycle -----------------------------------------------------------------------------
    def _run(self) -> None:
        pod = self.pod()
        if pod is None or pod["metadata"].get("deletionTimestamp"):
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        self._sandbox(pod)
        for ic in pod["spec"].get("initContainers") or []:
            if not self._run_init(pod, ic):
                return
        self.patch_status(lambda p: set_condition(p, "Initialized", "True"))
        from raychaos.testbed.node.probes import ProbeLoop
        probes = ProbeLoop(self)
        while not self.abort:
            pod = self.pod()
            if pod is None:
                return  # deleted with grace 0: the finally kills everything now
            if pod["metadata"].get("deletionTimestamp"):
                return self._terminate(pod)
            for c in pod["spec"]["containers"]:
                self._keep_running(pod, c)
            probes.tick(pod)
            time.sleep(TICK_S)

    def _run_init(self, pod: dict[str, Any], ic: dict[str, Any]) -> bool:
        while not self.abort:
            current = self.pod()
            if current is None or current["metadata"].get("deletionTimestamp"):
                return False
            try:
                self.k.pull(self.node, ic.get("image", ""), ic.get("imagePullPolicy",
                                                                   "IfNotPresent"), pod, ic["name"])
            except RuntimeError:
                time.sleep(self.k.restart_backoff_s)
                continue
            c = self._make(pod, ic)
            c.start()
            self.containers[ic["name"]] = c
            while c.exit_code() is None and not self.abort:
                current = self.pod()
                if current is None or current["metadata"].get("deletionTimestamp"):
                    return False
                time.sleep(TICK_S)
            if c.exit_code() == 0:
                self.containers.pop(ic["name"], None)
                return True
            if pod["spec"].get("restartPolicy") == "Never":
                self.patch_status(lambda p: p["status"].update(phase="Failed"))
                return False
            time.sleep(1.0)
        return False

    def _keep_running(self, pod: dict[str, Any], spec: dict[str, Any]) -> None:
        name = spec["name"]
        st = self.state.setdefault(name, {"restarts": 0, "backoff": 0.0, "next": 0.0})
        c = self.containers.get(name)
        if c is not None and c.exit_code() is None:
            return
        policy = pod["spec"].get("restartPolicy", "Always")
        if c is not None:  # it just exited
            code = c.exit_code()
            term = {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                    "startedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(c.started_at)),
                    "finishedAt": now(),  # the ID it ran under (the kubelet's, not a new one)
                    "containerID": f"world://{self.uid[:8]}-{name}-{st['restarts']}"}
            ran = time.time() - c.started_at
            c.kill()  # whatever the container left in its namespace
            self.containers.pop(name, None)
            st["ready"] = False
            restart = policy == "Always" or (policy == "OnFailure" and code != 0)
            if restart:
                st["last"] = {"terminated": term}
                st["backoff"] = 0.0 if ran > 60 or not st.get("crashed") else \
                    min(300.0, max(self.k.restart_backoff_s, st["backoff"] * 2))
                st["crashed"] = True
                st["next"] = time.monotonic() + st["backoff"]
                st["restarts"] += 1
                self._set_cstatus(spec, {"waiting": {"reason": "CrashLoopBackOff"}}
                                  if st["backoff"] else {"terminated": term})
                if st["backoff"]:
                    self.event(pod, "BackOff", "Back-off restarting failed container "
                               f"{name} in pod {self.name}_{self.ns}({self.uid})", name,
                               "Warning")
            else:
                st["finished"], st["exit"] = True, code
                self._set_cstatus(spec, {"terminated": term})
                self._maybe_finish(pod)
                return
        if st.get("finished") or time.monotonic() < st["next"]:
            return
        try:
            self.k.pull(self.node, spec.get("image", ""), spec.get("imagePullPolicy",
                                                                   "IfNotPresent"), pod, name)
        except RuntimeError:
            st["next"] = time.monotonic() + self.k.restart_backoff_s
            self._set_cstatus(spec, {"waiting": {"reason": "ImagePullBackOff"}})
            return
        self._gate(pod, name)
        c = self._make(pod, spec)
        c.start()
        self.containers[name] = c
        self.event(pod, "Created", f"Created container: {name}", name)
        self.event(pod, "Started", f"Started container {name}", name)
        started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(c.started_at))
        self._set_cstatus(spec, {"running": {"startedAt": started}}, phase="Running")

    def _gate(self, pod: dict[str, Any], name: str) -> None:
        """One Ray container starting at a time on this 2-core box (parallel starts time out):
        wait until the others that started are Ready, or 90 s passed. A first start only: a
        container restarted after it exited goes at once, as a real kubelet restarts it (the
        back-off aside). Gated, a head whose ``gcs_server`` was killed waited 77 s behind a
        RayService worker that is never Ready (no Serve replica on it), and the head kill
        measured the gate: GCS back after 81 s, Serve requests lost meanwhile."""
        if not self.k.serial_starts or (pod["metadata"].get("labels") or {}).get(
                "ray.io/is-ray-node") != "yes" or self.state.get(name, {}).get("restarts", 0):
            return
        while not self.abort:
            with self.k.start_lock:
                busy = [u for u, t in self.k.starting.items()
                        if u != self.uid and time.monotonic() - t < 90]
                if not busy:
                    self.k.starting[self.uid] = time.monotonic()
                    return
            time.sleep(0.5)

    def _set_cstatus(self, spec: dict[str, Any], state: dict[str, Any],
                     phase: str | None = None) -> None:
        def fn(p: dict[str, Any]) -> None:
            statuses = p["status"].setdefault("containerStatuses", [])
            new = self._cstatus(spec, state)
            for i, s in enumerate(statuses):
                if s["name"] == spec["name"]:
                    statuses[i] = new
                    break
            else:
                statuses.append(new)
            if phase:
                p["status"]["phase"] = phase
            if not new["ready"]:
                set_condition(p, "ContainersReady", "False", "ContainersNotReady",
                              f"containers with unready status: [{spec['name']}]")
                set_condition(p, "Ready", "False", "ContainersNotReady",
                              f"containers with unready status: [{spec['name']}]")
        self.patch_status(fn)

    def _maybe_finish(self, pod: dict[str, Any]) -> None:
        names = [c["name"] for c in pod["spec"]["containers"]]
        if all(self.state.get(n, {}).get("finished") for n in names):
            ok = all(self.state[n].get("exit") == 0 for n in names)
            self.patch_status(lambda p: p["status"].update(phase="Succeeded" if ok else "Failed"))

    def _stop_running(self, pod: dict[str, Any]) -> None:
        """SIGTERM to each container still running (the kubelet's "Killing" event each)."""
        for name, c in self.containers.items():
            if c.exit_code() is None:
                self.event(pod, "Killing", f"Stopping container {name}", name)
                c.signal_init(signal.SIGTERM)

    def _terminate(self, pod: dict[str, Any]) -> None:
        # the kubelet's floor: a grace of 0 is 1 s, SIGTERM first all the same
        grace = max(1, int(pod["metadata"].get("deletionGracePeriodSeconds", 30)))
        deadline = time.monotonic() + grace
        self._stop_running(pod)
        while time.monotonic() < deadline and not self.abort and any(
                c.exit_code() is None for c in self.containers.values()):
            current = self.pod()
            if current is None:
                break
            # deleted again with a shorter grace: the kubelet kills again with that grace,
            # counted from now (SIGTERM again, then SIGKILL when it runs out)
            shorter = max(1, int(current["metadata"].get("deletionGracePeriodSeconds", grace)))
            if shorter < grace:
                grace, deadline = shorter, min(deadline, time.monotonic() + shorter)
                self._stop_running(current)
            time.sleep(TICK_S)
