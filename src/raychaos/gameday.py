"""Game days: a plan of experiments run back to back, on demand or on a Kubernetes schedule.

A game day is how a team rehearses failure on purpose: *kill the head, cool down, drain a GPU
node, cool down, saturate the network*, then read one index page. This module owns

- the plan file (``experiments/gamedays/*.yaml``) as frozen dataclasses built by
  :func:`raychaos.schema.build`, so every problem is reported at once as
  ``<file>: <key.path>: <what is wrong>``, and experiment paths are resolved against the plan
  file's directory and checked to exist;
- :func:`schedule_manifests`: a CronJob running ``raychaos gameday PLAN`` with results on a
  PVC, plus the ServiceAccount/Role/RoleBinding it needs — plain dicts, rendered by
  :func:`render_yaml` (no Kubernetes client import here);
- :func:`build_gameday_report`: ``index.html`` listing each run's verdict and linking its report.

Plan format::

    name: weekly-head-and-gpu
    target: {kind: kubernetes, kubernetes: {cluster: raycluster-gpu, namespace: ml}}  # optional
    cooldown_s: 120            # between experiments (default 60)
    on_failure: stop           # stop | continue (default stop)
    experiments:
      - path: ../head-kill.yaml
      - {path: ../gpu-drain.yaml, cooldown_s: 300}
"""

from __future__ import annotations

import dataclasses
import html
import json
import os
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

import yaml

from raychaos.config import TargetSpec
from raychaos.schema import Problems, build, describe, load_yaml

__all__ = ["GameDayExperiment", "GameDayPlan", "build_gameday_report", "load_gameday",
           "render_yaml", "schedule_manifests"]


@dataclass(frozen=True)
class GameDayExperiment:
    """One step of a game day. After loading, ``path`` is absolute."""

    path: str = field(metadata={"nonempty": True})
    cooldown_s: float | None = field(default=None, metadata={"min": 0, "max": 86400})


@dataclass(frozen=True)
class GameDayPlan:
    """A game-day plan; ``target``, when set, overrides each experiment's own target."""

    name: str = field(metadata={"nonempty": True})
    experiments: list[GameDayExperiment]
    target: TargetSpec | None = None
    cooldown_s: float = field(default=60.0, metadata={"min": 0, "max": 86400})
    on_failure: Literal["stop", "continue"] = "stop"

    def cooldown_after(self, index: int) -> float:
        """Seconds to wait after experiment ``index`` (its own value, else the plan's)."""
        own = self.experiments[index].cooldown_s
        return self.cooldown_s if own is None else own


def load_gameday(path: str | Path) -> GameDayPlan:
    """Load and validate a game-day plan; raise ConfigError listing every problem.

    Relative experiment paths are resolved against the plan file's directory; missing
    experiment files are reported as ``<plan>: experiments[i].path: no such experiment file
    '<as written>' (looked for <absolute path>)``.
    """
    plan_path = Path(path)
    data = load_yaml(plan_path, "game-day plan")
    problems = Problems(str(plan_path))
    base = plan_path.resolve().parent
    plan = build(GameDayPlan, data, problems)
    resolved: dict[int, str] = {}
    items = data.get("experiments") if isinstance(data, dict) else None
    if isinstance(items, list):
        if not items:
            problems.add("experiments", "must list at least one experiment")
        for i, item in enumerate(items):
            raw = item.get("path") if isinstance(item, dict) else None
            if not isinstance(raw, str) or not raw.strip():
                continue  # the schema reports it
            full = (base / os.path.expanduser(raw)).resolve()
            if not full.is_file():
                problems.add(f"experiments[{i}].path",
                             f"no such experiment file {describe(raw)} (looked for {full})")
            resolved[i] = str(full)
    problems.raise_if_any()
    assert plan is not None
    steps = [dataclasses.replace(e, path=resolved[i]) for i, e in enumerate(plan.experiments)]
    return dataclasses.replace(plan, experiments=steps)


_CRON_FIELD = re.compile(r"^[\d*/,\-A-Za-z?]+$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def _name_for(plan_name: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", plan_name.lower()).strip("-") or "gameday"
    return f"raychaos-gameday-{slug}"[:52].rstrip("-")  # CronJob names: at most 52 chars


def schedule_manifests(plan_path: str | Path, cron: str, namespace: str, image: str, *,
                       plan_in_image: str | None = None, workdir: str = "/app",
                       pvc_name: str = "raychaos-results", name: str | None = None,
                       time_zone: str | None = None) -> list[dict[str, Any]]:
    """Kubernetes manifests that run the game day on a schedule.

    Returns ``[ServiceAccount, Role, RoleBinding, CronJob]`` as plain dicts (see
    :func:`render_yaml`). The plan is validated first (ConfigError on problems).

    - ``cron``: five-field schedule, e.g. ``"0 3 * * 1"``; ``time_zone`` e.g. ``"Etc/UTC"``.
    - ``image``: an image with raychaos installed and the repository (plan and experiments) at
      ``workdir``; the container runs ``raychaos gameday <plan_in_image>`` there.
    - ``plan_in_image``: the plan's path inside the image; default: ``plan_path`` as given
      when relative, else relative to the current directory.
    - ``pvc_name``: an existing PersistentVolumeClaim mounted at ``<workdir>/results``, where
      runs write their results folders by default.
    - ``name``: resource name (default ``raychaos-gameday-<plan name>``).

    The CronJob never overlaps runs (``concurrencyPolicy: Forbid``) and never retries a failed
    game day (``backoffLimit: 0``): a second chaos run on a half-recovered cluster proves nothing.
    """
    plan = load_gameday(plan_path)
    problems = Problems("schedule")
    fields = cron.split()
    if len(fields) != 5 or not all(_CRON_FIELD.match(f) for f in fields):
        problems.add("cron", f"expected five cron fields like '0 3 * * 1', got {describe(cron)}")
    if not _DNS_LABEL.match(namespace) or len(namespace) > 63:
        problems.add("namespace", f"expected a DNS label (a-z, 0-9, -), got {describe(namespace)}")
    if not image.strip():
        problems.add("image", "must not be empty")
    if plan_in_image is None:
        p = Path(plan_path)
        if not p.is_absolute():
            plan_in_image = p.as_posix()
        else:
            try:
                plan_in_image = p.resolve().relative_to(Path.cwd().resolve()).as_posix()
            except ValueError:
                problems.add("plan_in_image", f"{p} is outside the current directory; say where "
                                              "the plan is inside the image")
    problems.raise_if_any()
    name = name or _name_for(plan.name)
    labels = {"app.kubernetes.io/name": "raychaos", "app.kubernetes.io/component": "gameday",
              "raychaos.io/gameday": _name_for(plan.name)[len("raychaos-gameday-"):] or "gameday"}
    meta = {"name": name, "namespace": namespace, "labels": labels}
    rules = [
        # Kill/restart head and worker pods, read their logs, exec tc/ip inside them.
        {"apiGroups": [""], "resources": ["pods"],
         "verbs": ["get", "list", "watch", "delete", "patch"]},
        {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create", "get"]},
        {"apiGroups": [""], "resources": ["services", "endpoints", "events"],
         "verbs": ["get", "list", "watch"]},
        # Scale and inspect KubeRay resources.
        {"apiGroups": ["ray.io"], "resources": ["rayclusters", "rayjobs", "rayservices"],
         "verbs": ["get", "list", "watch", "patch", "update"]},
        # Network partitions.
        {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"],
         "verbs": ["get", "list", "create", "delete", "patch"]},
    ]
    container = {
        "name": "gameday", "image": image, "imagePullPolicy": "IfNotPresent",
        "workingDir": workdir, "command": ["raychaos"], "args": ["gameday", plan_in_image],
        "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}],
        "volumeMounts": [{"name": "results", "mountPath": f"{workdir.rstrip('/')}/results"}],
    }
    cron_spec: dict[str, Any] = {
        "schedule": cron, "concurrencyPolicy": "Forbid", "startingDeadlineSeconds": 600,
        "successfulJobsHistoryLimit": 3, "failedJobsHistoryLimit": 3,
        "jobTemplate": {"metadata": {"labels": labels}, "spec": {
            "backoffLimit": 0,
            "template": {"metadata": {"labels": labels}, "spec": {
                "serviceAccountName": name, "restartPolicy": "Never",
                "containers": [container],
                "volumes": [{"name": "results",
                             "persistentVolumeClaim": {"claimName": pvc_name}}]}}}},
    }
    if time_zone:
        cron_spec["timeZone"] = time_zone
    manifests = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta,
         "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta,
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]},
        {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": meta, "spec": cron_spec},
    ]
    # Independent copies: no dict shared between manifests (and no YAML &anchors when dumped).
    return json.loads(json.dumps(manifests))


def render_yaml(manifests: list[dict[str, Any]]) -> str:
    """The manifests as one multi-document YAML string, ready for ``kubectl apply -f -``."""
    return yaml.dump_all(manifests, Dumper=_PlainDumper, sort_keys=False,
                         default_flow_style=False)


class _PlainDumper(yaml.SafeDumper):
    """SafeDumper that never writes &anchors/*aliases (kubectl users read these files)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def build_gameday_report(gameday_dir: str | Path, run_dirs: list[str | Path], *,
                         title: str | None = None, build_missing: bool = True) -> Path:
    """Write ``<gameday_dir>/index.html``: each run's experiment, status, verdict and failing
    SLOs, linked (relatively) to its ``report.html``; return the index path.

    ``build_missing`` builds a run's report.html first when it is absent. The overall verdict
    is ``error`` if any run errored (or did not finish), else ``fail`` if any failed.
    """
    from raychaos.report import CSS, badge, build_report, esc, fmt_num, load_run

    out_dir = Path(gameday_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows, verdicts = [], []
    for run in map(Path, run_dirs):
        report = run / "report.html"
        if build_missing and run.is_dir() and not report.exists():
            build_report(run)
        view = load_run(run)
        s = view.summary
        verdicts.append(s.get("verdict"))
        failing = [str(x.get("name")) for x in (s.get("slos") or []) + (s.get("probes") or [])
                   if x.get("verdict") in ("fail", "error")]
        link = os.path.relpath(report, out_dir).replace(os.sep, "/")
        name = esc(s.get("experiment") or run.name)
        cell = f'<a href="{esc(link)}">{name}</a>' if report.exists() else name
        rows.append(f"<tr><td>{cell}</td><td>{esc(s.get('status'))}</td>"
                    f"<td>{badge(s.get('verdict'))}</td><td>{fmt_num(s.get('duration_s'))}</td>"
                    f"<td>{esc(', '.join(failing)) or '—'}</td></tr>")
    overall = "error" if "error" in verdicts or any(v not in ("pass", "fail") for v in verdicts) \
        else "fail" if "fail" in verdicts else "pass"
    if not verdicts:
        overall = "n/a"
    heading = title or out_dir.name
    built = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>raychaos game day: {esc(heading)}</title>
<style>{CSS}</style></head><body>
<h1>Game day: {esc(heading)} {badge(overall)}</h1>
<p>{len(verdicts)} run(s): {verdicts.count('pass')} passed, {verdicts.count('fail')} failed,
{len(verdicts) - verdicts.count('pass') - verdicts.count('fail')} errored or unfinished.</p>
<table><tr><th>experiment</th><th>status</th><th>verdict</th><th>duration (s)</th>
<th>failing SLOs / probes</th></tr>{''.join(rows)}</table>
<p><small>raychaos game-day report, built {html.escape(built)}</small></p>
</body></html>
"""
    index = out_dir / "index.html"
    index.write_text(page, encoding="utf-8")
    return index
