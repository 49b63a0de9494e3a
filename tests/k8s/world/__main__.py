"""``python -m tests.k8s.world up|down|status`` — the world by hand, as a daemon.

``up [--rayjob | --rayservice]`` starts ``serve`` in the background (its own session; state,
log and PID in ``/tmp/raychaos-world/<name>/``), waits until the RayCluster is Ready and prints,
as its last line, ``KUBECONFIG=<path> NAMESPACE=<ns> CLUSTER=<name>`` (``CLUSTER=rayjob/<name>``
or ``rayservice/<name>`` with ``--rayjob``/``--rayservice``: the object, whose RayCluster the
operator made). ``down`` stops the daemon by its recorded PID (SIGTERM, then SIGKILL), then
removes whatever is left — processes by their ``RAYCHAOS_WORLD`` marker, network namespaces,
links, routes, /etc/netns entries, the folder —
and proves nothing is left (exit 1 and a list if something is).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from raychaos.testbed.node.runtime import MARKER
from tests.k8s.world.world import STATE_ROOT, World, cleanup


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tests.k8s.world")
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("up", "serve", "down", "status"):
        s = sub.add_parser(name)
        s.add_argument("--name", default="raychaos", help="world name (several can coexist)")
        s.add_argument("--state-root", default=str(STATE_ROOT))
        if name in ("up", "serve"):
            s.add_argument("--namespace", default="ray")
            s.add_argument("--cluster", default="demo")
            kind = s.add_mutually_exclusive_group()
            kind.add_argument("--rayjob", action="store_true",
                              help="a RayJob named --cluster; the operator makes its RayCluster")
            kind.add_argument("--rayservice", action="store_true",
                              help="a RayService named --cluster (Serve app, serve Service)")
            s.add_argument("--submission-mode", default="K8sJobMode",
                           choices=["K8sJobMode", "HTTPMode"], help="the RayJob's")
            s.add_argument("--no-gcs-ft", action="store_true",
                           help="no GCS fault tolerance (the negative control)")
            s.add_argument("--replacement-delay", type=float, default=0.0)
            s.add_argument("--head-restart-policy", choices=["Always", "Never"], default=None)
            s.add_argument("--image-mb", type=float, default=16.0)
            s.add_argument("--port", type=int, default=0, help="API server port (0: any)")
            s.add_argument("--timeout", type=float, default=600.0)
            s.add_argument("--chaos-mesh", action="store_true",
                           help="serve the NetworkChaos CRD and act on it (a minimal Chaos Mesh)")
    return p.parse_args(argv)


def _folder(a: argparse.Namespace) -> Path:
    return Path(a.state_root) / a.name


def serve(a: argparse.Namespace) -> int:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    folder = _folder(a)
    world = World(name=a.name, namespace=a.namespace, cluster=a.cluster,
                  gcs_ft=not a.no_gcs_ft, state_root=a.state_root,
                  replacement_delay_s=a.replacement_delay,
                  head_restart_policy=a.head_restart_policy, image_mb=a.image_mb, port=a.port,
                  keep_state=True, workload=_kind(a), submission_mode=a.submission_mode,
                  chaos_mesh=a.chaos_mesh)
    try:
        world.start()
        (folder / "daemon.pid").write_text(str(os.getpid()))
        seconds = world.wait_ready(timeout=a.timeout)
        (folder / "ready.json").write_text(json.dumps({
            "kubeconfig": world.kubeconfig, "namespace": a.namespace,
            "cluster": f"{_kind(a)}/{a.cluster}" if _kind(a) else a.cluster,
            "raycluster": world.cluster,
            "url": world.url, "dashboard": world.proxy_url(), "ready_s": round(seconds, 1),
            "pid": os.getpid()}))
        print(f"ready in {seconds:.1f}s", flush=True)
        while not stop.wait(1.0):
            pass
        return 0
    except Exception as exc:  # noqa: BLE001 - the reason goes where `up` reads it
        (folder / "error.txt").write_text(f"{type(exc).__name__}: {exc}")
        raise
    finally:
        left = world.stop()
        print(f"stopped; left: {left}", flush=True)


def up(a: argparse.Namespace) -> int:
    folder = _folder(a)
    pid_file = folder / "daemon.pid"
    if pid_file.exists() and _alive(int(pid_file.read_text() or 0)):
        print(f"world {a.name} is already up (pid {pid_file.read_text()}); "
              f"`python -m tests.k8s.world down --name {a.name}` first", file=sys.stderr)
        return 1
    cleanup(a.name, a.state_root)
    folder.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "tests.k8s.world", "serve", "--name", a.name, "--state-root",
            a.state_root, "--namespace", a.namespace, "--cluster", a.cluster,
            "--replacement-delay", str(a.replacement_delay), "--image-mb", str(a.image_mb),
            "--port", str(a.port), "--timeout", str(a.timeout)]
    if a.no_gcs_ft:
        argv.append("--no-gcs-ft")
    if a.chaos_mesh:
        argv.append("--chaos-mesh")
    if _kind(a):
        argv += [f"--{_kind(a)}", "--submission-mode", a.submission_mode]
    if a.head_restart_policy:
        argv += ["--head-restart-policy", a.head_restart_policy]
    log = open(folder / "daemon.log", "ab")  # noqa: SIM115 - the daemon's
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True, env=dict(os.environ,
                                                             **{MARKER: f"{a.name}/daemon"}))
    log.close()
    (folder / "daemon.pid").write_text(str(proc.pid))
    print(f"world {a.name}: starting (pid {proc.pid}, log {folder / 'daemon.log'})", flush=True)
    t0 = time.monotonic()
    while time.monotonic() - t0 < a.timeout + 30:
        if (folder / "ready.json").exists():
            info = json.loads((folder / "ready.json").read_text())
            print(f"world {a.name}: ready in {info['ready_s']}s; API {info['url']}; dashboard "
                  f"{info['dashboard']}")
            print(f"KUBECONFIG={info['kubeconfig']} NAMESPACE={a.namespace} "
                  f"CLUSTER={info['cluster']}")
            return 0
        if proc.poll() is not None:
            err = folder / "error.txt"
            print(f"world {a.name} failed: {err.read_text() if err.exists() else 'see log'}",
                  file=sys.stderr)
            cleanup(a.name, a.state_root)
            return 1
        time.sleep(0.5)
    print(f"world {a.name}: not ready after {a.timeout:.0f}s", file=sys.stderr)
    return 1


def down(a: argparse.Namespace) -> int:
    folder = _folder(a)
    pid_file = folder / "daemon.pid"
    if pid_file.exists():
        pid = int(pid_file.read_text() or 0)
        if _alive(pid):
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 90
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.3)
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
    left = cleanup(a.name, a.state_root)
    if left:
        print(f"world {a.name}: NOT clean, left: {left}", file=sys.stderr)
        return 1
    print(f"world {a.name}: down; nothing left (no processes, namespaces, links, routes or "
          f"folder)")
    return 0


def status(a: argparse.Namespace) -> int:
    ready = _folder(a) / "ready.json"
    if not ready.exists():
        print(f"world {a.name}: not up")
        return 1
    print(ready.read_text())
    return 0


def _kind(a: argparse.Namespace) -> str | None:
    """rayjob | rayservice | None (a bare RayCluster)."""
    return "rayjob" if a.rayjob else "rayservice" if a.rayservice else None


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except OSError:
        return False


def main(argv: list[str] | None = None) -> int:
    a = _args(argv)
    return {"up": up, "serve": serve, "down": down, "status": status}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
