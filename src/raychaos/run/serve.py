"""The Serve application a load needs: deployed once per cluster, reused while it is the same.

Deploying Serve is the slowest step of a run's set-up on a small box (a job, a controller, a
proxy per node, three deployments: ~18 s). A cluster that is kept warm between runs (a game day,
trials, the test suite) keeps the application too, and the next run that needs the *same*
application finds it and skips the deployment. "The same" is decided by its name: the harness
names the application after what it deploys — the ``module:attr`` and the bytes of the module
and of ``serve_deploy.py`` — and asks a Serve proxy's ``/-/routes`` which application serves
``/`` (one HTTP request, no job). A different application is replaced; a run that needs none
removes a ``raychaos*`` application a previous run left.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import urllib.request
from pathlib import Path
from typing import Any

from raychaos.catalog import loads_dir
from raychaos.errors import RaychaosError, TargetUnavailable
from raychaos.probes.jobs import run_job
from raychaos.targets.base import Target

__all__ = ["app_name", "deployed_apps", "ensure_serve", "retire_serve"]

PREFIX = "raychaos"


def app_name(app: str, folder: Path | None = None) -> str:
    """``raychaos-<hash>`` of the application ``module:attr`` and the code that deploys it."""
    base = folder or loads_dir()
    module = app.partition(":")[0]
    digest = hashlib.sha256(app.encode())
    for path in (base / Path(*module.split("."))).with_suffix(".py"), base / "serve_deploy.py":
        try:
            digest.update(path.read_bytes())
        except OSError:
            digest.update(b"missing")
    return f"{PREFIX}-{digest.hexdigest()[:12]}"


def _get(url: str, timeout: float) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:
            return int(reply.status), reply.read()
    except OSError:  # refused, timed out, HTTP errors (URLError/HTTPError are OSErrors)
        return 0, b""


def deployed_apps(target: Target, timeout: float = 2.0) -> dict[str, str]:
    """Route prefix -> application name, as a Serve proxy of the cluster reports it; ``{}``
    when no proxy answers (no Serve on the cluster)."""
    try:
        base = target.serve_url()
    except RaychaosError:
        return {}
    code, body = _get(f"{base}/-/routes", timeout)
    if code != 200:
        return {}
    try:
        routes = json.loads(body)
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in routes.items()} if isinstance(routes, dict) else {}


def ensure_serve(target: Target, app: str) -> dict[str, Any]:
    """Have ``app`` serve ``/``; ``{"app", "name", "reused": bool, "deployed": bool}``.

    Reused when a proxy already routes ``/`` to this very application and its ``/healthz``
    answers; otherwise deployed (replacing an earlier ``raychaos*`` application)."""
    name = app_name(app)
    if deployed_apps(target).get("/") == name and \
            _get(f"{target.serve_url()}/healthz", 5.0)[0] == 200:
        return {"app": app, "name": name, "reused": True, "deployed": False}
    status, lines = run_job(target, f"python serve_deploy.py --app {shlex.quote(app)} "
                                    f"--name {shlex.quote(name)}", timeout=300,
                            until="RAYCHAOS_SERVE")
    if status != "SUCCEEDED":
        raise TargetUnavailable(f"the Serve application {app} did not become ready "
                                f"(job {status}): {' | '.join(lines[-3:])}")
    ready = next((line.split("RAYCHAOS_SERVE ", 1)[1] for line in reversed(lines)
                  if "RAYCHAOS_SERVE " in line), "{}")
    try:
        took = json.loads(ready).get("took")
    except ValueError:
        took = None
    return {"app": app, "name": name, "reused": False, "deployed": True, "took": took}


def retire_serve(target: Target) -> bool:
    """Remove Serve when a ``raychaos*`` application is deployed; True when it removed one."""
    if not any(name.startswith(PREFIX) for name in deployed_apps(target).values()):
        return False
    status, lines = run_job(target, "python serve_deploy.py --shutdown", timeout=60)
    if status != "SUCCEEDED":
        raise TargetUnavailable(f"removing the Serve application failed (job {status}): "
                                f"{' | '.join(lines[-3:])}")
    return True
