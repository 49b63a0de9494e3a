"""Roll back what a crashed or interrupted run left applied, from its ledger alone.

The ledger names the target (kind, cluster name, state folder); that is enough to reconnect and
call each outstanding record's undo. Idempotent: running it twice undoes nothing the second time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from raychaos.errors import ConfigError
from raychaos.faults.rollback import undo_ledger
from raychaos.results.store import Ledger
from raychaos.targets.base import Target

__all__ = ["rollback_results_dir", "rollback_all", "target_from_description"]


def target_from_description(desc: dict[str, Any]) -> Target:
    kind = desc.get("kind")
    if kind == "local":
        from raychaos.config.settings import LocalClusterSpec
        from raychaos.targets.local.target import LocalTarget

        state_dir = Path(desc["state_dir"])
        return LocalTarget(LocalClusterSpec(name=desc["name"]), state_root=state_dir.parent)
    if kind == "kubernetes":
        from raychaos.config.settings import KubernetesSpec
        from raychaos.targets.kubernetes.target import KubernetesTarget

        fields = {k: desc[k] for k in ("cluster", "namespace", "context", "kubeconfig")
                  if desc.get(k)}
        target = KubernetesTarget(KubernetesSpec(**fields))
        target.connect()
        return target
    raise ConfigError(f"ledger names an unknown target kind {kind!r}")


def rollback_results_dir(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "ledger.json"
    if not path.exists():
        raise ConfigError(f"{run_dir}: no ledger.json here (is this a raychaos results folder?)")
    ledger = Ledger.open_existing(path)
    if not ledger.outstanding():
        return {"undone": []}
    target = target_from_description(ledger.data["target"])
    try:
        result = undo_ledger(ledger, target)
        # the crashed run's lock goes too: nothing left behind
        result["lock_cleared"] = target.run_lock().clear_stale(ledger.data.get("run_id", ""))
        return result
    finally:  # its watch, port-forwards and connections (rollback_all makes one per folder)
        target.close()


def rollback_all(root: Path) -> dict[str, Any]:
    """Roll back every results folder under ``root`` whose ledger still has outstanding records.

    For the morning after a crashed CI box: one command instead of reading every folder. A
    folder that fails is reported and the others are still rolled back.
    """
    done: dict[str, list[str]] = {}
    failed: dict[str, str] = {}
    for ledger_path in sorted(Path(root).glob("*/ledger.json")):
        try:
            if not Ledger.open_existing(ledger_path).outstanding():
                continue
            done[ledger_path.parent.name] = rollback_results_dir(ledger_path.parent)["undone"]
        except Exception as exc:  # keep going: the others may still be applied
            failed[ledger_path.parent.name] = str(exc)
    return {"undone": done, "failed": failed}
