"""``raychaos schedule``: Kubernetes manifests that run a game day on a schedule, in the cluster.

:func:`schedule_manifests` returns a CronJob running ``raychaos gameday PLAN`` with results on a
PVC, plus the ServiceAccount/Role/RoleBinding it needs — plain dicts (no Kubernetes client
import here), rendered by :func:`render_yaml` for ``kubectl apply -f -``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from raychaos.config.gameday import load_gameday
from raychaos.config.schema import Problems, describe
from raychaos.run.schedule_rbac import rbac_manifests

__all__ = ["render_yaml", "schedule_manifests"]

_CRON_FIELD = re.compile(r"^[\d*/,\-A-Za-z?]+$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def _name_for(plan_name: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", plan_name.lower()).strip("-") or "gameday"
    return f"raychaos-gameday-{slug}"[:52].rstrip("-")  # CronJob names: at most 52 chars


def schedule_manifests(plan_path: str | Path, cron: str, namespace: str, image: str, *,
                       plan_in_image: str | None = None, workdir: str = "/app",
                       pvc_name: str = "raychaos-results", name: str | None = None,
                       time_zone: str | None = None, target_namespace: str | None = None,
                       network: bool = False, deadline_s: int = 4 * 3600
                       ) -> list[dict[str, Any]]:
    """Kubernetes manifests that run the game day on a schedule.

    Returns ``[ServiceAccount, Role, RoleBinding, ClusterRole, ClusterRoleBinding,
    (network Role, RoleBinding,) CronJob]`` as plain dicts (see :func:`render_yaml`; the rules:
    :mod:`raychaos.run.schedule_rbac`). The plan is validated first (ConfigError on problems).

    - ``target_namespace``: the RayCluster's namespace, where the Role goes (default
      ``namespace``); ``network``: also the opt-in Role for network and registry faults
      (privileged DaemonSets and pods — node root); ``deadline_s``: the Job's
      ``activeDeadlineSeconds``, so a hung game day cannot block every later schedule
      (``concurrencyPolicy: Forbid``).
    - In the pod, ``RAYCHAOS_DASHBOARD=service-dns`` makes the Kubernetes target reach the
      dashboard at ``http://<head Service>.<namespace>.svc:8265`` instead of a port-forward.

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
    if not isinstance(deadline_s, int) or deadline_s < 60:
        problems.add("deadline_s", f"expected whole seconds, at least 60, got "
                                   f"{describe(deadline_s)}")
    problems.raise_if_any()
    name = name or _name_for(plan.name)
    labels = {"app.kubernetes.io/name": "raychaos", "app.kubernetes.io/component": "gameday",
              "raychaos.io/gameday": _name_for(plan.name)[len("raychaos-gameday-"):] or "gameday"}
    meta = {"name": name, "namespace": namespace, "labels": labels}
    container = {
        "name": "gameday", "image": image, "imagePullPolicy": "IfNotPresent",
        "workingDir": workdir, "command": ["raychaos"], "args": ["gameday", plan_in_image],
        "env": [{"name": "PYTHONUNBUFFERED", "value": "1"},
                {"name": "RAYCHAOS_DASHBOARD", "value": "service-dns"}],
        "volumeMounts": [{"name": "results", "mountPath": f"{workdir.rstrip('/')}/results"}],
    }
    cron_spec: dict[str, Any] = {
        "schedule": cron, "concurrencyPolicy": "Forbid", "startingDeadlineSeconds": 600,
        "successfulJobsHistoryLimit": 3, "failedJobsHistoryLimit": 3,
        "jobTemplate": {"metadata": {"labels": labels}, "spec": {
            "backoffLimit": 0, "activeDeadlineSeconds": deadline_s,
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
        *rbac_manifests(name, namespace, target_namespace or namespace, labels, network),
        {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": meta, "spec": cron_spec},
    ]
    # Independent copies: no dict shared between manifests (and no YAML &anchors when dumped).
    copies: list[dict[str, Any]] = json.loads(json.dumps(manifests))
    return copies


def render_yaml(manifests: list[dict[str, Any]]) -> str:
    """The manifests as one multi-document YAML string, ready for ``kubectl apply -f -``."""
    return yaml.dump_all(manifests, Dumper=_PlainDumper, sort_keys=False,
                         default_flow_style=False)


class _PlainDumper(yaml.SafeDumper):
    """SafeDumper that never writes &anchors/*aliases (kubectl users read these files)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True
