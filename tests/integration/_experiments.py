"""Copies of catalog experiments pointed at a test's own cluster and folders."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]


def variant(src: str, dest: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    data = yaml.safe_load((REPO / src).read_text())
    edit(data)
    dest.write_text(yaml.safe_dump(data, sort_keys=False))
    return dest


def raychaos_block(data: dict[str, Any]) -> dict[str, Any]:
    return next(e for e in data["extensions"] if e.get("name") == "raychaos")


def method_args(data: dict[str, Any], func: str) -> dict[str, Any]:
    act = next(a for a in data["method"] if a["provider"]["func"] == func)
    return act["provider"].setdefault("arguments", {})


def run_on_warm(name: str, cluster: tuple[Any, Path], tmp_path: Path, *, slo: str | None = None,
                change: Callable[[dict[str, Any]], None] | None = None,
                recovery_window_s: float = 10) -> tuple[int, dict[str, Any], Path]:
    """Run ``experiments/NAME.yaml`` on the shared warm cluster with the integration tier's
    monitor windows (``change`` edits it further); (exit code, summary, run folder)."""
    import json

    from raychaos.run.runner import run_experiment_file

    _target, root = cluster

    def edit(data: dict[str, Any]) -> None:
        block = raychaos_block(data)
        block["target"] = {"kind": "local", "local": {"name": WARM, "head_restart_delay_s": 1}}
        block["monitor"] = {"interval_s": 0.2, "settle_s": 3,
                            "recovery_window_s": recovery_window_s}
        if change:
            change(data)

    exp = variant(f"experiments/{name}.yaml", tmp_path / f"{name}.yaml", edit)
    code = run_experiment_file(exp, slo=slo, results_root=str(tmp_path / "results"),
                               state_root=str(root), quiet=True)
    [run_dir] = list((tmp_path / "results").iterdir())
    return code, json.loads((run_dir / "summary.json").read_text()), run_dir


NOTHING_LEFT = {"processes": [], "namespaces": [], "links": [], "cgroups": [], "state_dir": []}
WARM = "itwarm"  # the one local cluster the integration modules share (conftest.warm_cluster)


def module_cluster(warm: tuple[Any, Path], keep_serve: bool = False
                   ) -> Iterator[tuple[Any, Path]]:
    """A module's view of the shared warm cluster: restored and proven clean before the module
    (what a run does before it reuses a cluster), and proven clean after it — no fault left,
    every node ALIVE with its totals, no job running — without restoring anything, so a module
    that leaves something behind fails here instead of passing it on. A Serve application an
    earlier module left is removed unless the module wants it (``keep_serve``: it reuses it)."""
    from raychaos.run.serve import retire_serve
    from raychaos.targets.local import warm as warm_cluster

    target, root = warm
    target.ensure_up(lambda _msg: None)
    target.run_lock().release()  # the module's runs take it themselves
    if not keep_serve:
        retire_serve(target)
    yield target, root
    warm_cluster.prove_clean(target.cluster, target.jobs, timeout=120)


def own_cluster(tmp_path_factory: Any, name: str, **spec: Any) -> Iterator[tuple[Any, Path]]:
    """A module's own local cluster, for settings the shared warm one does not have (``spec``:
    more LocalClusterSpec settings); always torn down, and the teardown proves nothing is left
    (processes, namespaces, links, folders)."""
    from raychaos.config.settings import LocalClusterSpec
    from raychaos.targets.local.target import LocalTarget

    root = tmp_path_factory.mktemp("state")
    target = LocalTarget(LocalClusterSpec(name=name, head_restart_delay_s=1, **spec),
                         state_root=root)
    try:
        target.up()
        yield target, root
    finally:
        target.down()
        assert target.leftovers() == NOTHING_LEFT


def why_failed(code: int, summary: dict[str, Any]) -> str:
    """One line saying why a run did not pass: its exit code and verdict, then every check that
    did not pass (SLOs with value and bound, probes, the run's own checks) and the errors.
    First in an assertion's message, so pytest's one-line summary (and CI's digest of
    failures) carries the reason."""
    parts = [f"exit {code}, verdict {summary.get('verdict')}"]
    # a check's message already says it all (an SLO's: metric, value, bound)
    parts += [f"{c.get('kind')} {c.get('verdict')}: {str(c.get('message') or '')[:240]}"
              for c in summary.get("checks") or [] if c.get("verdict") != "pass"]
    parts += [f"error: {str(e)[:200]}" for e in summary.get("errors") or []]
    return "; ".join(parts)


#: what an inconclusive check's reason names: the data, never the system under test
#: an inconclusive check's reason is about the data when it names one of these: the host, too
#: few samples, a window too short to hold them ("held only": the backlog drained after the
#: window a test shortened to 3 s had ended), an interval across the bound, a load at capacity
DATA_REASONS = ("host busy", "host noise", "samples in", "too short", "held only", "interval",
                "at its capacity")


def assert_healthy(code: int, summary: dict[str, Any], context: str = "") -> bool:
    """A run of a healthy system: a pass (exit 0), or — on a host the test suite itself loads
    (the other lane's tests share these 2 cores) — inconclusive (exit 3), where every check
    that did not pass is inconclusive for a reason about the data (host noise, too few samples,
    an interval that reaches back inside its bound) and none failed or errored. Never a fail: a
    verdict of a healthy cluster that depends on the machine is the bug this guards against.
    Returns whether the run was inconclusive."""
    detail = why_failed(code, summary) + ("\n" + context if context else "")
    assert code in (0, 3), detail
    assert summary.get("verdict") == {0: "pass", 3: "inconclusive"}[code], detail
    open_checks = [c for c in summary.get("checks") or []
                   if c.get("verdict") not in ("pass", "n/a")]
    for c in open_checks:
        assert c.get("verdict") == "inconclusive", detail
        assert any(w in str(c.get("message")) for w in DATA_REASONS), (c, detail)
    return bool(open_checks)
