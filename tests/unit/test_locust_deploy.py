"""deploy/locust.yaml and the runner's command lines agree on how Locust is wired: the stats
plugin is loaded first, the run is time-capped, and workers find the master."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from raychaos.loads.locust_runner import PLUGIN, LocustProcess

pytestmark = pytest.mark.unit

DEPLOY = Path(__file__).parents[2] / "deploy" / "locust.yaml"


def test_manifest_has_master_workers_service_and_configmap():
    docs = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(DEPLOY.read_text())}
    master = docs[("Deployment", "raychaos-locust-master")]["spec"]["template"]["spec"]
    worker = docs[("Deployment", "raychaos-locust-worker")]["spec"]["template"]["spec"]
    assert ("Service", "raychaos-locust-master") in docs
    assert ("ConfigMap", "raychaos-locustfiles") in docs
    for spec in (master, worker):
        args = spec["containers"][0]["args"]
        assert args[args.index("-f") + 1].startswith("/mnt/locust/_locust_stats.py,")
        assert spec["volumes"][0]["configMap"]["name"] == "raychaos-locustfiles"
    assert "-t" in master["containers"][0]["args"]
    assert "raychaos-locust-master" in worker["containers"][0]["args"]


def test_command_lines_are_capped_and_bound_to_loopback(tmp_path):
    load = LocustProcess(tmp_path / "users.py", "http://127.0.0.1:1", users=3, spawn_rate=1.5,
                         duration_s=2.5, workers=2, stats_path=tmp_path / "s")
    master = load.master_args(5557)
    assert master[master.index("-t") + 1] == "3s"
    assert master[master.index("-f") + 1] == f"{PLUGIN},{tmp_path / 'users.py'}"
    assert master[master.index("--master-bind-host") + 1] == "127.0.0.1"
    assert master[master.index("--expect-workers") + 1] == "2"
    worker = load.worker_args(5557)
    assert "--worker" in worker and worker[worker.index("--master-port") + 1] == "5557"
