"""Deploy a Serve application on the cluster the job runs in, then exit (the app stays).

    python serve_deploy.py --app serve_app:app [--name raychaos-ab12] [--port 8000] [--timeout 180]

Serve runs a proxy on every node (``location: EveryNode``) as a RayService does behind its
serve Service, so load can reach the app through a worker while the head is down — which is what
GCS fault tolerance for RayService promises. Prints ``RAYCHAOS_SERVE {"ready": true, ...}``
with the seconds each step took (``took``: connect, Serve start, deploy, healthy).

The application is named ``--name`` (the harness names it after what it deploys, so it can tell
from the proxy's ``/-/routes`` whether a cluster already serves this very app and reuse it); an
earlier ``raychaos*`` application on the cluster is deleted first, since both want route ``/``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import ray  # noqa: E402
from ray import serve  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--app", default="serve_app:app", help="module:attribute of the application")
    ap.add_argument("--name", default="raychaos", help="the Serve application's name")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--timeout", type=float, default=180.0)
    ap.add_argument("--shutdown", action="store_true", help="remove Serve from the cluster")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    took: dict[str, float] = {}
    ray.init(address=os.environ.get("RAY_ADDRESS", "auto"), log_to_driver=False)
    took["init_s"] = round(time.monotonic() - t0, 2)
    if args.shutdown:
        serve.shutdown()
        return 0
    module_name, attr = args.app.split(":")
    app = getattr(importlib.import_module(module_name), attr)
    serve.start(http_options={"host": "0.0.0.0", "port": args.port, "location": "EveryNode"})
    took["start_s"] = round(time.monotonic() - t0 - sum(took.values()), 2)
    for other in serve.status().applications:
        if other.startswith("raychaos") and other != args.name:
            serve.delete(other)
    serve.run(app, name=args.name, route_prefix="/", blocking=False)
    took["run_s"] = round(time.monotonic() - t0 - sum(took.values()), 2)
    deadline = time.monotonic() + args.timeout
    url = f"http://{ray.util.get_node_ip_address()}:{args.port}/healthz"
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as reply:
                if reply.status == 200:
                    took["healthy_s"] = round(time.monotonic() - t0 - sum(took.values()), 2)
                    print("RAYCHAOS_SERVE " + json.dumps({"ready": True, "url": url,
                                                          "took": took}), flush=True)
                    return 0
        except OSError:
            pass
        time.sleep(0.25)
    print("RAYCHAOS_SERVE " + json.dumps({"ready": False, "url": url}), flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())
