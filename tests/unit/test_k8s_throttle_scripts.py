"""The registry throttle's shell scripts and the hosts it shapes, without a cluster: the scripts
run in the tool image's ``sh`` (busybox/dash-like) on a node, where a syntax error would only
show as "no report" from every node; the hosts must be names ``getent`` resolves, with Docker
Hub's blob CDN beside its registry (the layers come from there). Moved from the k8s tier, where
they needed no cluster either."""

from __future__ import annotations

import subprocess

import pytest

from raychaos.targets.kubernetes import registry


@pytest.mark.parametrize("shell", ["sh", "bash"])
def test_the_scripts_parse(shell):
    for script in (registry.THROTTLE_SCRIPT, registry.CLEAN_SCRIPT):
        proc = subprocess.run([shell, "-n", "-c", script], capture_output=True, text=True,
                              check=False)
        assert proc.returncode == 0, proc.stderr


def test_registry_hosts_drop_ports_and_know_docker_hub():
    assert registry.registry_hosts(["registry.example:5000/ray:1", "rayproject/ray:2.60.0",
                                    "localhost:5001/x"]) == [
        "localhost", "production.cloudflare.docker.com", "registry-1.docker.io",
        "registry.example"]
