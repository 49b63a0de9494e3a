"""``raychaos run X --dry-run`` against Kubernetes: the exact API calls a run would make.

The method's fault actions run for real — their own argument checks, node and pod selection,
safety refusals — against a target whose mutation gate records every create, patch, delete,
eviction and exec instead of sending it. Reads do happen (that is how selection is checked);
nothing that changes the cluster does. The preflight resilience review of the RayCluster
(:func:`~raychaos.run.resources.preflight_review`) is printed first, as a run would record it.
"""

from __future__ import annotations

import importlib
import json
import tempfile
from dataclasses import replace
from pathlib import Path

from raychaos.config.experiment import Experiment
from raychaos.context import Run, activate, deactivate
from raychaos.errors import RaychaosError
from raychaos.results.store import Clock, Ledger, Timeline
from raychaos.run.resources import preflight_review

__all__ = ["kubernetes_plan"]


def kubernetes_plan(exp: Experiment) -> str:
    from raychaos.targets.kubernetes.target import KubernetesTarget

    spec = replace(exp.settings.target.kubernetes, dry_run=True)
    target = KubernetesTarget(spec, run_id="dry-run")
    target.connect()
    lines = [f"dry run against RayCluster {target.cluster!r} in namespace {target.ns}: "
             "mutating calls are recorded, not sent"]
    preflight_review(target, lambda message, essential=False, phase=False: lines.append(message))
    with tempfile.TemporaryDirectory() as tmp:
        clock = Clock()
        timeline = Timeline(Path(tmp) / "timeline.jsonl", clock)
        run = Run(run_id="dry-run", run_dir=Path(tmp), settings=exp.settings, target=target,
                  clock=clock, timeline=timeline,
                  ledger=Ledger(Path(tmp) / "ledger.json", "dry-run", {"kind": "kubernetes"}))
        activate(run)
        try:
            for act in exp.data.get("method", []):
                prov = act.get("provider") or {}
                if not str(prov.get("module", "")).startswith("raychaos.faults"):
                    continue
                before = len(target.planned_calls())
                func = getattr(importlib.import_module(prov["module"]), prov["func"])
                note = None
                try:
                    result = func(**(prov.get("arguments") or {}))
                    outcome = ""
                    note = result.get("note") if isinstance(result, dict) else None
                except RaychaosError as exc:
                    outcome = f"  (would fail: {exc})"
                lines.append(f"{act.get('name')}: {prov['func']}{outcome}")
                if note:
                    lines.append(f"  note: {note}")
                for call in target.planned_calls()[before:]:
                    body = json.dumps(call["body"], sort_keys=True) if call["body"] else ""
                    lines.append(f"  {call['method']} {call['path']} {body[:300]}")
        finally:
            deactivate()
            timeline.close()
    lines.append("dry run: nothing that changes the cluster was sent.")
    return "\n".join(lines)
