"""Game-day plans, their Kubernetes schedule, and the game-day index page."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from _runs import make_run
from kubernetes.client import ApiClient

from raychaos.config.gameday import load_gameday
from raychaos.errors import ConfigError
from raychaos.results.gameday_index import build_gameday_report
from raychaos.run.schedule import render_yaml, schedule_manifests

pytestmark = pytest.mark.unit

GOOD = """\
name: Weekly head & GPU
target: {kind: kubernetes, kubernetes: {cluster: rc, namespace: ml}}
cooldown_s: 30
on_failure: continue
experiments:
  - path: ../head-kill.yaml
  - {path: ../head-kill.yaml, cooldown_s: 5}
"""


@pytest.fixture
def plans(tmp_path: Path) -> Path:
    (tmp_path / "head-kill.yaml").write_text("title: head kill\n", encoding="utf-8")
    folder = tmp_path / "gamedays"
    folder.mkdir()
    (folder / "weekly.yaml").write_text(GOOD, encoding="utf-8")
    return folder


def test_good_plan_resolves_paths_against_the_plan_file(plans: Path) -> None:
    plan = load_gameday(plans / "weekly.yaml")
    expected = str((plans.parent / "head-kill.yaml").resolve())
    assert [e.path for e in plan.experiments] == [expected, expected]
    assert plan.on_failure == "continue"
    assert plan.target is not None and plan.target.kubernetes.cluster == "rc"
    assert (plan.cooldown_after(0), plan.cooldown_after(1)) == (30.0, 5.0)


def test_defaults(plans: Path) -> None:
    (plans / "min.yaml").write_text("name: m\nexperiments: [{path: ../head-kill.yaml}]\n",
                                    encoding="utf-8")
    plan = load_gameday(plans / "min.yaml")
    assert (plan.target, plan.cooldown_s, plan.on_failure) == (None, 60.0, "stop")


def test_bad_plan_reports_every_problem_at_once(plans: Path) -> None:
    bad = plans / "bad.yaml"
    bad.write_text("name: ''\ncooldown_s: soon\non_failure: retry\ncolour: blue\n"
                   "experiments:\n  - path: ../nope.yaml\n"
                   "  - {path: ../head-kill.yaml, cooldown_s: -1}\n  - {}\n",
                   encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_gameday(bad)
    src = str(bad)
    assert info.value.problems == [
        f"{src}: colour: unknown key (expected one of: cooldown_s, experiments, name, "
        "on_failure, target)",
        f"{src}: name: must not be empty",
        f"{src}: experiments[1].cooldown_s: must be at least 0, got -1.0",
        f"{src}: experiments[2].path: is required",
        f"{src}: cooldown_s: expected a number, got 'soon'",
        f"{src}: on_failure: expected one of 'stop', 'continue', got 'retry'",
        f"{src}: experiments[0].path: no such experiment file '../nope.yaml' "
        f"(looked for {(plans.parent / 'nope.yaml').resolve()})",
    ]


@pytest.mark.parametrize(("text", "problem"), [
    ("name: x\nexperiments: []\n", "experiments: must list at least one experiment"),
    ("name: x\n", "experiments: is required"),
    ("- just a list\n", "expected a mapping, got [just a list]"),
])
def test_bad_plan_shapes(plans: Path, text: str, problem: str) -> None:
    bad = plans / "shape.yaml"
    bad.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_gameday(bad)
    assert f"{bad}: {problem}" in info.value.problems


def test_missing_plan_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="nope.yaml: game-day plan not found"):
        load_gameday(tmp_path / "nope.yaml")


def deserialize(manifest: dict, klass: str):
    """Through the client's public deserialize(), as if the API server had answered with it;
    client-side validation rejects models missing required fields."""
    api = ApiClient()
    try:
        return api.deserialize(json.dumps(manifest), klass, "application/json")
    finally:
        api.close()


def test_schedule_manifests_deserialize_into_kubernetes_models(plans: Path) -> None:
    manifests = schedule_manifests(plans / "weekly.yaml", "0 3 * * 1", "chaos",
                                   "ghcr.io/acme/raychaos:0.1", plan_in_image="gamedays/w.yaml",
                                   time_zone="Etc/UTC")
    assert [m["kind"] for m in manifests] == ["ServiceAccount", "Role", "RoleBinding",
                                              "ClusterRole", "ClusterRoleBinding", "CronJob"]
    sa, role, binding, crole, cbinding, cron = (deserialize(m, k) for m, k in zip(
        manifests, ["V1ServiceAccount", "V1Role", "V1RoleBinding", "V1ClusterRole",
                    "V1ClusterRoleBinding", "V1CronJob"], strict=True))
    assert any("nodes" in r.resources and "patch" in r.verbs for r in crole.rules)
    assert cbinding.role_ref.name == crole.metadata.name == "raychaos-gameday-weekly-head-gpu-chaos"
    assert not any("create" in r.verbs and r.resources in (["pods"], ["daemonsets"])
                   for r in role.rules + crole.rules), "privileged rules only with --network"
    name = "raychaos-gameday-weekly-head-gpu"
    assert sa.metadata.name == name and sa.metadata.namespace == "chaos"
    assert any("pods" in r.resources and "delete" in r.verbs for r in role.rules)
    assert binding.role_ref.name == name and binding.subjects[0].name == name
    assert cron.spec.schedule == "0 3 * * 1" and cron.spec.time_zone == "Etc/UTC"
    assert cron.spec.concurrency_policy == "Forbid"
    job = cron.spec.job_template.spec
    assert job.backoff_limit == 0 and job.active_deadline_seconds == 4 * 3600
    pod = job.template.spec
    assert pod.service_account_name == name and pod.restart_policy == "Never"
    (container,) = pod.containers
    assert container.image == "ghcr.io/acme/raychaos:0.1"
    assert any(e.name == "RAYCHAOS_DASHBOARD" and e.value == "service-dns"
               for e in container.env)
    assert [container.command, container.args] == [["raychaos"], ["gameday", "gamedays/w.yaml"]]
    assert container.volume_mounts[0].mount_path == "/app/results"
    assert pod.volumes[0].persistent_volume_claim.claim_name == "raychaos-results"
    # The private deserializer agrees, and the YAML round-trips without &anchors.
    api = ApiClient()
    assert api._ApiClient__deserialize(manifests[-1], "V1CronJob").spec == cron.spec
    api.close()
    text = render_yaml(manifests)
    assert "&id" not in text and list(yaml.safe_load_all(text)) == manifests


def test_schedule_rejects_bad_inputs_all_at_once(plans: Path) -> None:
    with pytest.raises(ConfigError) as info:
        schedule_manifests(plans / "weekly.yaml", "every day", "Bad_NS", " ",
                           plan_in_image="gamedays/weekly.yaml")
    assert info.value.problems == [
        "schedule: cron: expected five cron fields like '0 3 * * 1', got 'every day'",
        "schedule: namespace: expected a DNS label (a-z, 0-9, -), got 'Bad_NS'",
        "schedule: image: must not be empty",
    ]


def test_schedule_default_plan_path_is_relative_to_cwd(plans: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(plans.parent)
    cron = schedule_manifests("gamedays/weekly.yaml", "*/30 * * * *", "ml", "img")[-1]
    assert cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"] == [
        "gameday", "gamedays/weekly.yaml"]
    monkeypatch.chdir(plans)
    assert schedule_manifests(plans / "weekly.yaml", "0 * * * *", "ml", "img")[-1]["spec"][
        "jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"][1] == "weekly.yaml"
    elsewhere = plans.parent / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    with pytest.raises(ConfigError) as info:
        schedule_manifests(plans / "weekly.yaml", "0 * * * *", "ml", "img")
    assert info.value.problems == [
        f"schedule: plan_in_image: {plans / 'weekly.yaml'} is outside the current directory; "
        "say where the plan is inside the image"]


def test_gameday_index_links_each_run(tmp_path: Path) -> None:
    runs = tmp_path / "results"
    good = make_run(runs, "good", title="Head kill", verdict="pass")
    bad = make_run(runs, "bad", title="GPU drain")
    crashed = make_run(runs, "crashed", summary=False)
    for run in (good, bad):  # already reported: kept as they are
        (run / "report.html").write_text("<html></html>", encoding="utf-8")
    index = build_gameday_report(tmp_path / "gameday", [good, bad, crashed], title="weekly")
    text = index.read_text(encoding="utf-8")
    assert '<a href="../results/good/report.html">Head kill</a>' in text
    assert '<a href="../results/bad/report.html">GPU drain</a>' in text
    assert (crashed / "report.html").exists()  # built on the way
    assert "storm-p99" in text  # failing SLO named
    assert 'Game day: weekly <span class="v fail">fail</span>' in text
    assert "http://" not in text and "https://" not in text


def test_network_faults_get_their_own_opt_in_role_in_the_rayclusters_namespace(plans: Path):
    manifests = schedule_manifests(plans / "weekly.yaml", "0 3 * * 1", "chaos", "img",
                                   plan_in_image="w.yaml", target_namespace="ray",
                                   network=True, deadline_s=3600)
    roles = [m for m in manifests if m["kind"] == "Role"]
    assert [r["metadata"]["namespace"] for r in roles] == ["ray", "ray"]
    network = roles[1]
    assert network["metadata"]["labels"]["raychaos.io/privileged"] == "true"
    assert {"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]} in network["rules"]
    bindings = [m for m in manifests if m["kind"] == "RoleBinding"]
    assert all(b["subjects"] == [{"kind": "ServiceAccount", "name": manifests[0]["metadata"][
        "name"], "namespace": "chaos"}] for b in bindings)
    cron = manifests[-1]
    assert cron["spec"]["jobTemplate"]["spec"]["activeDeadlineSeconds"] == 3600
    with pytest.raises(ConfigError, match="deadline_s: expected whole seconds, at least 60"):
        schedule_manifests(plans / "weekly.yaml", "0 3 * * 1", "chaos", "img",
                           plan_in_image="w.yaml", deadline_s=5)
