"""The test bed's build and lifecycle logic without its binaries: a part already built is never
rebuilt, a missing Go toolchain is one sentence, and ``down`` stops only the PIDs ``up`` wrote
(real processes of the test's own)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from raychaos.testbed import bed, build, demo, processes, sutcpu

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
        assert part.version.startswith(part.release + "-"), part.version
    mod = (build.HERE / "bed" / "go.mod").read_text()
    # every staging module of k8s.io/kubernetes is replaced by the same release's v0.x
    assert "k8s.io/kubernetes v1.36.3" in mod
    assert mod.count(" v0.36.3") >= 30 and "./staging" not in mod
    # the control plane, etcd and the kubelet share one build list
    assert {p.module for p in build.PARTS.values() if p.name != "kuberay-operator"} == {"bed"}


def test_a_change_to_our_kubelet_is_a_new_kubelet_and_nothing_else(cache, monkeypatch,
                                                                    tmp_path):
    import shutil

    here = tmp_path / "build"
    shutil.copytree(build.HERE, here)
    monkeypatch.setattr(build, "HERE", here)
    before = {n: p.version for n, p in build.PARTS.items()}
    with (here / "bed" / "kubelet" / "provider.go").open("a") as f:
        f.write("\n// a change\n")
    after = {n: p.version for n, p in build.PARTS.items()}
    assert {n for n in before if before[n] != after[n]} == {"raychaos-kubelet"}
    with (here / "bed" / "go.sum").open("a") as f:  # a new build list: every part of the module
        f.write("\n")
    again = {n: p.version for n, p in build.PARTS.items()}
    assert {n for n in after if after[n] != again[n]} == set(build.PARTS) - {"kuberay-operator"}


def _fake_go(monkeypatch: pytest.MonkeyPatch, calls: list[list[str]]) -> None:
    """``go build -o DIR/ PKG...`` that writes each package's binary and records the call."""
    def fake_go(cmd, cwd, **_):  # noqa: ANN001, ANN202
        calls.append(cmd)
        outdir = cmd[cmd.index("-o") + 1]
        for pkg in cmd[cmd.index("-o") + 2:]:
            (build.Path(outdir) / pkg.rsplit("/", 1)[-1]).write_text("#!/bin/sh\n")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(build, "_go", lambda: "go")
    monkeypatch.setattr(build.subprocess, "run", fake_go)


def test_the_missing_parts_of_a_module_are_built_by_one_go_build(cache, monkeypatch):
    calls: list[list[str]] = []

    _fake_go(monkeypatch, calls)
    said: list[str] = []
    paths = build.build_all(said.append)
    assert len(calls) == 2, calls  # one per module
    assert sorted(calls[0][calls[0].index("-o") + 2:]) == sorted(
        p.package for p in build.PARTS.values() if p.module == "bed")
    assert all(p.exists() for p in paths.values()) and set(paths) == set(build.PARTS)
    assert len(said) == 4 and "built" in said[1], said
    assert not list((build.cache_dir() / "bin").glob(".partial-*"))
    calls.clear()
    assert build.build_all(said.append) == paths and calls == []  # nothing built twice


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


def test_the_beds_own_processes_run_in_a_cpu_group_as_heavy_as_all_its_nodes(cache):
    """Left in the root group, each control-plane process weighed one CPU against the nodes'
    14: a head restarting beside a task storm starved the API server and the node agent for
    seconds. Each process is in the group from its first instruction; the bed's CPU reader
    counts it once (with the groups, not again by PID); down removes the group."""
    import time

    from raychaos.targets.local.cpu import in_cpu_group, shares_for, weight_for

    cpu = processes.control_plane_cpu("t", bed.NODE_CPUS)
    if cpu is None:
        pytest.skip("no CPU groups on this machine (not root, or no CPU controller)")
    groups, group = cpu
    root = bed.state_dir("t")
    (root / "logs").mkdir(parents=True)
    pid = processes.start(root, "etcd", [sys.executable, "-c",
                                    "import time\nwhile True: sum(range(10**5))"], cpu=cpu)
    try:
        nodes = shares_for(bed.NODE_CPUS)
        if groups.version == 1:
            assert int((groups.path(group) / "cpu.shares").read_text()) == nodes
        else:
            assert int((groups.path(group) / "cpu.weight").read_text()) == weight_for(nodes)
        deadline = time.monotonic() + 10  # its shell moves itself in, then execs the binary
        while not in_cpu_group(pid, group):
            assert time.monotonic() < deadline, open(f"/proc/{pid}/cgroup").read()
            time.sleep(0.02)
        assert str(pid) in (groups.path(group) / "cgroup.procs").read_text().split()
        server = "https://127.0.0.1:40124"
        (root / "bed.json").write_text(json.dumps({"name": "t", "server": server,
                                                   "pids": {"etcd": pid}}))
        read = sutcpu.local_sut(server)
        assert read is not None
        r0, u0 = read(), groups.usage_seconds(group)
        deadline = time.monotonic() + 30
        while (groups.usage_seconds(group) or 0) - (u0 or 0) < 0.3:
            assert time.monotonic() < deadline, "the spinner got no CPU in 30 s"
            time.sleep(0.05)
        r1, u1 = read(), groups.usage_seconds(group)
        assert None not in (r0, r1, u0, u1)
        # counted once, with the groups: not the group's seconds plus the PID's again
        assert 0.5 * (u1 - u0) < r1 - r0 < 1.5 * (u1 - u0), (r1 - r0, u1 - u0)
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    (root / "pids.json").write_text(json.dumps({"etcd": pid}))
    bed.down("t")
    assert groups.existing(group) == []


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


def test_a_second_build_waits_for_the_first_and_builds_nothing_twice(cache, monkeypatch):
    import fcntl
    import threading

    calls: list[list[str]] = []

    _fake_go(monkeypatch, calls)
    bindir = build.cache_dir() / "bin"
    bindir.mkdir(parents=True)
    held = open(bindir / ".lock-bed", "w")  # the first build, still going  # noqa: SIM115
    fcntl.flock(held, fcntl.LOCK_EX)
    said: list[str] = []
    waiter = threading.Thread(target=build.build, args=("etcd", said.append))
    waiter.start()
    waiter.join(timeout=1.0)
    assert waiter.is_alive() and said == ["testbed: waiting for another build of build/bed "
                                          "to finish"]
    build.path_of("etcd").write_text("#!/bin/sh\n")  # what the first build made
    fcntl.flock(held, fcntl.LOCK_UN)
    held.close()
    waiter.join(timeout=10)
    assert not waiter.is_alive() and calls == [], calls
    assert said[-1].startswith("testbed: waited ")


def test_a_check_that_times_out_is_not_yet_ready_and_the_wait_goes_on(tmp_path):
    """Seen: ``up`` of a bed beside a busy CI lane died of a 10 s read timeout while waiting for
    a CRD to be Established; an API server too busy to answer is "not yet"."""
    import os

    from raychaos.testbed.bed import _wait

    answers = iter([TimeoutError("The read operation timed out"), OSError("refused"), False,
                    True])

    def check() -> bool:
        got = next(answers)
        if isinstance(got, Exception):
            raise got
        return got

    _wait("the CRD", check, os.getpid(), tmp_path / "log", timeout=30)
    with pytest.raises(StopIteration):
        next(answers)


def test_up_with_nodes_from_a_python_under_tmp_is_one_sentence(cache, monkeypatch):
    """Each pod gets a /tmp of its own: a virtualenv under the host's /tmp is not there (seen:
    a clone in /tmp for a CI-like run, every Ray pod failing to exec its python)."""
    import sys

    from raychaos.testbed import bed

    monkeypatch.setattr(sys, "prefix", "/tmp/ci-check/.venv")
    with pytest.raises(bed.BedError, match=r"install raychaos outside /tmp"):
        bed.up("under-tmp", nodes=True)


def test_up_with_both_kinds_of_node_is_one_sentence_and_starts_nothing(cache, capsys):
    from raychaos.cli import main

    assert main(["testbed", "up", "--nodes", "--sim-nodes", "--name", "both"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "--sim-nodes" in err and len(err.splitlines()) == 1
