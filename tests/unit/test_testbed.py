"""The test bed's build and lifecycle logic without its binaries: a part already built is never
rebuilt, a missing Go toolchain is one sentence, and ``down`` stops only the PIDs ``up`` wrote
(real processes of the test's own)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from raychaos.testbed import bed, build, demo, sutcpu

pytestmark = pytest.mark.unit


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RAYCHAOS_TESTBED_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("RAYCHAOS_TESTBED_STATE", str(tmp_path / "state"))
    return tmp_path


def test_each_part_has_a_build_module_and_a_versioned_binary(cache):
    for name, part in build.PARTS.items():
        assert (build.HERE / part.module / "go.mod").exists(), name
        assert build.path_of(name).name == f"{name}-{part.version}"
    mod = (build.HERE / "kubernetes" / "go.mod").read_text()
    # every staging module of k8s.io/kubernetes is replaced by the same release's v0.x
    assert "require k8s.io/kubernetes v1.36.3" in mod
    assert mod.count(" v0.36.3") >= 30 and "./staging" not in mod


def test_a_part_already_built_is_not_built_again(cache, monkeypatch):
    out = build.path_of("etcd")
    out.parent.mkdir(parents=True)
    out.write_text("#!/bin/sh\n")
    said: list[str] = []
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("go was called"))
    assert build.build("etcd", said.append) == out and said == []


def test_no_go_is_one_sentence(cache, monkeypatch):
    monkeypatch.setattr(build.shutil, "which", lambda _: None)
    monkeypatch.setattr(build.os.path, "exists", lambda _: False)
    with pytest.raises(build.BuildError, match="needs the go command"):
        build.build("kube-scheduler", lambda _: None)
    assert not build.path_of("kube-scheduler").exists()


def test_go_env_keeps_its_caches_to_itself(cache):
    env = build.go_env()
    assert env["GOMODCACHE"].startswith(str(cache / "cache")) and env["GOTOOLCHAIN"] == "local"
    assert "-mod=mod" in env["GOFLAGS"]


def test_down_of_a_bed_that_is_not_up_says_so_and_changes_nothing(cache):
    with pytest.raises(bed.BedError, match="is not up"):
        bed.down("nope")
    with pytest.raises(bed.BedError, match="is not up"):
        bed.status("nope")
    assert not (cache / "state").exists()


def test_down_stops_exactly_the_pids_up_wrote(cache):
    mine = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        root = bed.state_dir("t")
        root.mkdir(parents=True)
        (root / "pids.json").write_text(json.dumps({"etcd": mine.pid}))
        assert bed.down("t") == ["etcd"]
        assert mine.wait(timeout=10) is not None and other.poll() is None
        assert not root.exists()
    finally:
        for p in (mine, other):
            p.kill()
            p.wait()


def test_a_harness_pointed_at_a_bed_here_counts_the_bed_as_the_system_under_test(
        cache, monkeypatch):
    """The host-noise sensor subtracts the bed's CPU (its processes, its pods' groups) when the
    API server is a bed's on this machine, and nothing for any other API server."""
    root = bed.state_dir("t")
    root.mkdir(parents=True)
    server = "https://127.0.0.1:40123"
    (root / "bed.json").write_text(json.dumps({"name": "t", "server": server,
                                               "pids": {"kube-apiserver": os.getpid()}}))
    assert sutcpu.local_sut("https://10.0.0.1:6443") is None
    read = sutcpu.local_sut(server + "/")
    assert read is not None
    monkeypatch.setattr("raychaos.targets.local.cpu.cpu_groups", lambda: None)
    cpu_only = sutcpu.local_sut(server)
    assert cpu_only is not None and cpu_only() is None  # no CPU groups: the pods unknown
    first = read()
    if first is not None:  # root with a CPU controller: this process's CPU and no pods yet
        sum(range(300_000))
        assert read() >= first >= 0


def test_up_creates_the_demo_raycluster_with_its_redis_and_waits_for_it(tmp_path):
    """The demo's objects go to their own collections; the RayCluster is waited for until the
    operator calls it ready; a refusal names the object and the answer."""
    calls: list[tuple[str, str]] = []
    state = iter(["", "", "ready"])

    class Api:
        def call(self, method, path, body=None, timeout=10.0):
            calls.append((method, path))
            if method == "GET":
                return 200, {"status": {"state": next(state)}}
            return 201, body

    said: list[str] = []
    name = demo.create_demo(Api(), "ray", {"kuberay-operator": os.getpid()}, tmp_path,
                            said.append)
    assert name == "demo"
    assert [p for m, p in calls if m == "POST"] == [
        "/apis/apps/v1/namespaces/ray/deployments", "/api/v1/namespaces/ray/services",
        "/apis/ray.io/v1/namespaces/ray/rayclusters"]
    assert calls[-1] == ("GET", "/apis/ray.io/v1/namespaces/ray/rayclusters/demo")
    assert said[-1].startswith("up: RayCluster ray/demo ready in")

    class Refusing(Api):
        def call(self, method, path, body=None, timeout=10.0):
            return 422, "spec.foo: unknown field"

    with pytest.raises(bed.BedError, match="creating Deployment redis answered 422"):
        demo.create_demo(Refusing(), "ray", {"kuberay-operator": os.getpid()}, tmp_path,
                         said.append)
