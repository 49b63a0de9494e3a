"""The resilience review, one test per rule: a hardened RayCluster passes every rule, and each
rule fires on the one change that breaks it — with the severity, the key path and the catalog
experiment that demonstrates it. Plus the command's exit codes (1 on an error finding)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from raychaos.cli import main
from raychaos.review import RULES, Options, review
from raychaos.run.review import load_manifests

pytestmark = pytest.mark.unit

HERE = Path(__file__).parent
GOOD = HERE / "manifests" / "raycluster-hardened.yaml"
REPO = HERE.parents[1]


def base() -> list[dict]:
    return copy.deepcopy(load_manifests([str(GOOD)]))


def rc(objects):
    return next(o for o in objects if o["kind"] == "RayCluster")


def worker(objects):
    return rc(objects)["spec"]["workerGroupSpecs"][0]


def findings(objects, rule, options=None, live=False):
    return [f for f in review(objects, options, live=live).findings if f.rule == rule]


def only(objects, rule, severity, options=None, live=False):
    hits = [f for f in findings(objects, rule, options, live) if f.severity != "info"]
    assert [f.severity for f in hits] == [severity], [f.message for f in hits]
    return hits[0]


def test_the_hardened_cluster_has_no_error_or_warning():
    result = review(base())
    assert result.subjects == ["RayCluster ray/gpu-pool"]
    assert [f for f in result.findings if f.severity != "info"] == []
    assert {f.rule for f in result.findings} >= {"gcs-ft", "dev-shm", "pdb"}  # what it checked


def test_every_rule_names_an_experiment_of_the_catalog():
    assert len({r.id for r in RULES}) == len(RULES) == 8
    for rule in RULES:
        assert (REPO / rule.experiment).is_file(), rule


def test_gcs_ft_missing_is_an_error_and_redis_inside_the_head_too():
    objs = base()
    del rc(objs)["spec"]["gcsFaultToleranceOptions"]
    hit = only(objs, "gcs-ft", "error")
    assert "not configured" in hit.message and hit.experiment == "experiments/head-kill.yaml"
    assert hit.where == "spec.gcsFaultToleranceOptions"
    objs = base()
    rc(objs)["spec"]["gcsFaultToleranceOptions"]["redisAddress"] = "127.0.0.1:6379"
    assert "inside the head pod" in only(objs, "gcs-ft", "error").message
    info = [f for f in findings(base(), "gcs-ft") if f.severity == "info"]
    assert "redis.ray-system.svc" in info[0].message  # says where its Redis is


def test_gcs_ft_by_annotation_reads_redis_from_the_head_env():
    objs = base()
    cluster = rc(objs)
    del cluster["spec"]["gcsFaultToleranceOptions"]
    cluster["metadata"]["annotations"] = {"ray.io/ft-enabled": "true"}
    assert "no Redis address" in only(objs, "gcs-ft", "error").message
    head = cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    head["env"] = [{"name": "RAY_REDIS_ADDRESS", "value": "redis:6379"}]
    assert [f.severity for f in findings(objs, "gcs-ft")] == ["info"]


def test_head_with_cpus_is_a_warning():
    objs = base()
    del rc(objs)["spec"]["headGroupSpec"]["rayStartParams"]["num-cpus"]
    hit = only(objs, "head-num-cpus", "warning")
    assert hit.where == "spec.headGroupSpec.rayStartParams.num-cpus"
    assert hit.experiment == "experiments/head-breaking-point.yaml"


def test_dev_shm_smaller_than_the_object_store_is_an_error():
    objs = base()
    worker(objs)["template"]["spec"]["volumes"][0]["emptyDir"]["sizeLimit"] = "64Mi"
    hit = only(objs, "dev-shm", "error")
    assert "64 MiB" in hit.message and "18.6 GiB" in hit.message and "/tmp" in hit.message
    assert hit.experiment == "experiments/dev-shm-trap.yaml"


def test_dev_shm_missing_uses_kuberays_shared_mem_sized_like_the_request():
    objs = base()
    spec = worker(objs)["template"]["spec"]
    spec.pop("volumes")
    spec["containers"][0].pop("volumeMounts")
    worker(objs)["rayStartParams"]["object-store-memory"] = str(80 * 2**30)  # > 64Gi request
    assert "KubeRay's shared-mem" in only(objs, "dev-shm", "error").message
    worker(objs)["rayStartParams"]["object-store-memory"] = str(8 * 2**30)
    assert [f.severity for f in findings(objs, "dev-shm")] == ["info", "info"]


def test_dev_shm_without_size_limit_or_on_disk():
    objs = base()
    worker(objs)["template"]["spec"]["volumes"][0]["emptyDir"] = {"medium": "Memory"}
    assert "no sizeLimit" in only(objs, "dev-shm", "warning").message
    worker(objs)["template"]["spec"]["volumes"][0]["emptyDir"] = {}
    assert "on disk" in only(objs, "dev-shm", "error").message


def test_dev_shm_of_a_live_pod_is_read_from_its_shared_mem_volume():
    objs = base()
    spec = worker(objs)["template"]["spec"]
    spec.pop("volumes")
    spec["containers"][0].pop("volumeMounts")
    objs.append({"kind": "Pod", "metadata": {"name": "gpu-pool-gpu-x", "namespace": "ray",
                 "labels": {"ray.io/cluster": "gpu-pool", "ray.io/group": "gpu"}},
                 "spec": {"nodeName": "n1", "volumes": [
                     {"name": "shared-mem", "emptyDir": {"medium": "Memory",
                                                         "sizeLimit": "1Gi"}}]}})
    assert "1.0 GiB" in only(objs, "dev-shm", "error", live=True).message


def test_pdb_with_max_unavailable_over_ray_pods_is_an_error():
    objs = base()
    pdb = next(o for o in objs if o["kind"] == "PodDisruptionBudget")
    pdb["spec"] = {"maxUnavailable": 1, "selector": {"matchLabels": {"ray.io/cluster":
                                                                     "gpu-pool"}}}
    hit = only(objs, "pdb", "error")
    assert "#2662" in hit.message and hit.where == "PodDisruptionBudget ray/gpu-pool-workers"
    pdb["spec"] = {"minAvailable": "50%", "selector": {"matchExpressions": [
        {"key": "ray.io/node-type", "operator": "In", "values": ["worker"]}]}}
    assert "minAvailable: 50%" in only(objs, "pdb", "error").message
    pdb["spec"]["selector"] = {"matchLabels": {"app": "something-else"}}
    assert findings(objs, "pdb") == []  # not over Ray pods: none of our business


def test_worker_reconnect_timeout_shorter_than_a_head_restart():
    objs = base()
    container = worker(objs)["template"]["spec"]["containers"][0]
    container["env"] = [{"name": "RAY_gcs_rpc_server_reconnect_timeout_s", "value": "30"}]
    hit = only(objs, "worker-reconnect", "error")
    assert "30 s" in hit.message and "60 s" in hit.message
    assert findings(base(), "worker-reconnect") == []  # GCS FT on: KubeRay sets 600 s
    assert findings(objs, "worker-reconnect", Options(head_restart_s=20)) == []


def test_liveness_probe_that_checks_the_gcs_kills_workers_in_an_outage():
    objs = base()
    container = worker(objs)["template"]["spec"]["containers"][0]
    container["livenessProbe"] = {"exec": {"command": [
        "bash", "-c", "wget -q -O- http://localhost:52365/api/gcs_healthz | grep success"]},
        "periodSeconds": 5, "failureThreshold": 3}
    hit = only(objs, "liveness", "error")
    assert "16 s" in hit.message and hit.experiment == "experiments/head-kill.yaml"
    container["livenessProbe"]["exec"]["command"][2] = "wget localhost:52365/api/" \
                                                       "local_raylet_healthz"
    assert "ray#52480" in only(objs, "liveness", "warning").message
    container["livenessProbe"]["failureThreshold"] = 120
    assert findings(objs, "liveness") == []


def test_more_than_one_ray_pod_per_node():
    objs = base()
    for i in range(3):
        objs.append({"kind": "Pod", "metadata": {"name": f"w{i}", "namespace": "ray",
                     "labels": {"ray.io/cluster": "gpu-pool"}}, "spec": {"nodeName": "n1"}})
    assert "3 Ray pods" in only(objs, "pods-per-node", "warning", live=True).message
    objs = base()
    del worker(objs)["template"]["spec"]["affinity"]
    assert [f.severity for f in findings(objs, "pods-per-node")] == ["info"]


def test_image_pull_always_on_a_multi_gb_image():
    objs = base()
    container = worker(objs)["template"]["spec"]["containers"][0]
    container["imagePullPolicy"] = "Always"
    hit = only(objs, "image-pull", "warning")
    assert "ray-worker:2.60.0-gpu" in hit.message
    assert hit.experiment == "experiments/registry-throttle.yaml"
    container.pop("imagePullPolicy")
    container["image"] = "rayproject/ray-ml"  # no tag: Always
    assert "pulls Always" in only(objs, "image-pull", "warning").message


def test_rayjob_and_rayservice_are_reviewed_through_their_cluster_spec():
    cluster = rc(base())
    job = {"apiVersion": "ray.io/v1", "kind": "RayJob",
           "metadata": {"name": "train", "namespace": "ray"},
           "spec": {"entrypoint": "python train.py", "rayClusterSpec": cluster["spec"]}}
    service = {"apiVersion": "ray.io/v1", "kind": "RayService",
               "metadata": {"name": "serve", "namespace": "ray"},
               "spec": {"rayClusterConfig": copy.deepcopy(cluster["spec"])}}
    del service["spec"]["rayClusterConfig"]["gcsFaultToleranceOptions"]
    result = review([job, service])
    assert result.subjects == ["RayJob ray/train", "RayService ray/serve"]
    [error] = result.errors
    assert error.subject == "RayService ray/serve"
    assert error.where == "spec.rayClusterConfig.gcsFaultToleranceOptions"


def test_the_command_exits_1_on_an_error_and_0_on_the_hardened_cluster(tmp_path, capsys):
    assert main(["review", str(GOOD)]) == 0
    bad = base()
    del rc(bad)["spec"]["gcsFaultToleranceOptions"]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump_all(bad))
    assert main(["review", str(path)]) == 1
    out = capsys.readouterr().out
    assert "ERROR" in out and "gcs-ft" in out and "see experiments/head-kill.yaml" in out
    assert main(["review", str(tmp_path / "missing.yaml")]) == 2
    (tmp_path / "empty.yaml").write_text("kind: ConfigMap\nmetadata: {name: x}\n")
    assert main(["review", str(tmp_path / "empty.yaml")]) == 2
    assert "no RayCluster, RayJob or RayService" in capsys.readouterr().err
