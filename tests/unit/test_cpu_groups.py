"""A pod's CPU request as a cgroup (raychaos.targets.local.cpu): the weights written, the join
command that puts the pod's first process in its group before it execs anything, and the
removal — against a folder laid out as the controller's, and (as root, where the machine has a
CPU controller) against the real one with a real process."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from raychaos.targets.local.cpu import (
    CpuGroups,
    cluster_prefix,
    cpu_groups,
    pod_group,
    shares_for,
    weight_for,
)


def test_shares_follow_the_kubelets_rule():
    assert shares_for(1) == 1024
    assert shares_for(0.25) == 256
    assert shares_for(0) == 2  # the kubelet's minimum
    assert weight_for(2) == 1 and weight_for(262144) == 10000
    assert weight_for(1024) == 39  # the kubelet's v2 weight for a 1-CPU request


@pytest.mark.parametrize(("version", "file", "value"), [(1, "cpu.shares", "2048"),
                                                        (2, "cpu.weight", "79")])
def test_groups_are_made_weighed_and_removed_deepest_first(tmp_path, version, file, value):
    groups = CpuGroups(tmp_path, version)
    path = groups.ensure("raychaos-c/head", shares_for(2))
    assert (path / file).read_text() == value
    groups.ensure("raychaos-c/worker-1", shares_for(1))
    groups.ensure("raychaos-other/head", shares_for(1))
    assert groups.existing("raychaos-c") == ["raychaos-c"]
    assert pod_group("c", "head") == "raychaos-c--head" and cluster_prefix("c") == "raychaos-c--"
    # a real controller's group folders hold only files; the fake's hold the weight file,
    # which a real rmdir does not see: remove it the way the kernel would
    for f in tmp_path.rglob(file):
        f.unlink()
    assert groups.remove("raychaos-c") == []
    assert not (tmp_path / "raychaos-c").exists() and (tmp_path / "raychaos-other").exists()
    assert groups.remove("raychaos-c") == []  # idempotent


def test_the_join_command_moves_its_own_process_before_exec(tmp_path):
    groups = CpuGroups(tmp_path, 1)
    groups.ensure("raychaos-c/head", 1024)
    out = subprocess.run(groups.join_command("raychaos-c/head", ["sh", "-c", "echo $$"]),
                         capture_output=True, text=True, check=True).stdout.strip()
    # the shell wrote its PID, then exec'd the command under the same PID
    assert (tmp_path / "raychaos-c/head/cgroup.procs").read_text().strip() == out


def test_no_groups_without_a_writable_controller(tmp_path):
    assert cpu_groups(tmp_path / "no-v1", tmp_path / "no-v2") is None or os.geteuid() != 0


@pytest.mark.skipif(os.geteuid() != 0 or cpu_groups() is None,
                    reason="needs root and a CPU controller")
def test_a_real_process_lands_in_its_group_and_the_group_goes():
    groups = cpu_groups()
    assert groups is not None
    name = f"raychaos-unit-{os.getpid()}"
    try:
        groups.ensure(f"{name}/pod", shares_for(1.5))
        proc = subprocess.Popen(groups.join_command(f"{name}/pod", ["sleep", "30"]))
        try:
            deadline = 50
            while deadline and str(proc.pid) not in (
                    groups.path(name, "pod", "cgroup.procs").read_text().split()):
                deadline -= 1
                subprocess.run(["sleep", "0.1"], check=True)
            assert deadline, "the process joined its group"
            line = next(x for x in Path(f"/proc/{proc.pid}/cgroup").read_text().splitlines()
                        if (groups.version == 1 and "cpu" in x.split(":")[1].split(","))
                        or (groups.version == 2 and x.startswith("0::")))
            assert line.endswith(f"/{name}/pod")
            assert groups.path(name, "pod", "cpu.shares" if groups.version == 1
                               else "cpu.weight").read_text().strip() in ("1536", "59")
        finally:
            proc.kill()
            proc.wait()
    finally:
        assert groups.remove(name) == []
    assert groups.existing(name) == []


def test_pods_join_a_separate_cpuacct_group_and_it_goes_with_them(tmp_path):
    groups = CpuGroups(tmp_path / "cpu", 1, tmp_path / "cpuacct")
    groups.ensure("raychaos-c--head", 1024)
    out = subprocess.run(groups.join_command("raychaos-c--head", ["sh", "-c", "echo $$"]),
                         capture_output=True, text=True, check=True).stdout.strip()
    for root in ("cpu", "cpuacct"):
        assert (tmp_path / root / "raychaos-c--head/cgroup.procs").read_text().strip() == out
    for f in tmp_path.rglob("cgroup.procs"):
        f.unlink()
    (tmp_path / "cpu/raychaos-c--head/cpu.shares").unlink()
    assert groups.remove("raychaos-c--head") == []
    assert not (tmp_path / "cpuacct/raychaos-c--head").exists()


def test_the_sut_counter_never_goes_backwards(tmp_path):
    from raychaos.targets.local.cpu import CpuUsage

    groups = CpuGroups(tmp_path / "cpu", 1, tmp_path / "cpuacct")

    def usage(name: str, ns: int) -> None:
        (tmp_path / "cpuacct" / name).mkdir(parents=True, exist_ok=True)
        (tmp_path / "cpuacct" / name / "cpuacct.usage").write_text(str(ns))

    counter = CpuUsage(groups, cluster_prefix("c"))
    assert counter.read() is None, "no group: the SUT does not run here"
    usage("raychaos-c--head", 2_000_000_000)
    usage("raychaos-c--worker-1", 1_000_000_000)
    usage("raychaos-other--head", 9_000_000_000)
    assert counter.read() == 3.0
    usage("raychaos-c--head", 500_000_000)  # the group made again: its counter restarted
    assert counter.read() == 3.5
    (tmp_path / "cpuacct/raychaos-c--worker-1/cpuacct.usage").unlink()
    (tmp_path / "cpuacct/raychaos-c--worker-1").rmdir()
    assert counter.read() == 3.5, "a group that goes keeps what it added"
    (tmp_path / "cpu/raychaos-c--worker-2").mkdir(parents=True)  # no cpuacct group: unknown
    assert counter.read() is None
