"""A local pod's storage: its own /dev/shm, its own (optionally slow) spill disk, and what Ray
made of them.

On Kubernetes a Ray pod's ``/dev/shm`` is an ``emptyDir`` of its own and its spill directory a
disk of its own; on one machine every process would share the host's. So each pod gets:

- a ``tmpfs`` on ``/dev/shm`` inside its mount namespace, of ``shm_mb`` (:func:`shm_mount`,
  used by :mod:`.nodes` when it starts the pod) — smaller than the object store, Ray moves the
  store to disk (its temp dir) with one warning, exactly the "/dev/shm trap";
- with ``spill_disk.size_mb``, a sparse file on a loop device with an ext4 filesystem, mounted
  on the pod's spill directory. This kernel offers one way to slow it: the cgroup v1
  ``blkio.throttle`` limits on the loop device (in the root blkio cgroup, so every reader and
  writer of that device is limited, the kernel's own writeback included), plus a strict
  per-device dirty limit (``/sys/class/bdi/MAJ:MIN/strict_limit``, ``max_bytes``) so a writer
  waits for the disk instead of filling the page cache. There is no cgroup v2 ``io``
  controller here (the unified hierarchy carries only ``hugetlb``) and no device-mapper (no
  ``dm-delay``); where neither throttle exists the disk is plain and a slow one is refused.

Everything made is recorded in cluster.json (``disks``) before it is used, and
:func:`release_disks` undoes it; :func:`leftover_storage` finds what a crash left.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from raychaos.errors import TargetUnavailable

__all__ = ["BLKIO", "attach_spill_disk", "leftover_storage", "node_storage", "release_disks",
           "shm_mount", "sweep_page_cache", "throttle_support"]

BLKIO = Path("/sys/fs/cgroup/blkio")
DIRTY_MAX_BYTES = 8 * 2**20  # what a writer may have in flight before it waits for the disk


def throttle_support() -> str | None:
    """None when a loop device can be slowed here, else why not (one sentence)."""
    if (BLKIO / "blkio.throttle.write_bps_device").exists():
        return None
    return ("this kernel has no cgroup v1 blkio throttle (and raychaos does not drive cgroup v2 "
            "io.max or dm-delay): the spill disk cannot be slowed")


def shm_mount(size_bytes: int) -> str:
    """The shell step that gives a pod its own /dev/shm of ``size_bytes`` (in its mount ns)."""
    return f"mount -t tmpfs -o size={max(1, size_bytes // 1024)}k,mode=1777 tmpfs /dev/shm"


def _run(*cmd: str) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise TargetUnavailable(f"local target: `{' '.join(cmd)}` failed: "
                                f"{(proc.stderr or proc.stdout).strip()}")
    return proc.stdout.strip()


def _write(path: Path, value: str) -> None:
    path.write_text(value + "\n", encoding="ascii")


def attach_spill_disk(image: Path, mount: Path, size_mb: int, write_mbps: float,
                      read_mbps: float, record: dict[str, Any],
                      save: Callable[[], None]) -> None:
    """Make, mount and (optionally) throttle one spill disk; ``record`` is filled and ``save``d
    before each step that leaves something behind."""
    image.parent.mkdir(parents=True, exist_ok=True)
    with open(image, "wb") as fh:
        fh.truncate(size_mb * 2**20)
    record.update(image=str(image), mount=str(mount))
    save()
    loop = _run("losetup", "--find", "--show", str(image))
    record["loop"] = loop
    save()
    _run("mkfs.ext4", "-q", "-F", "-m", "0", loop)
    mount.mkdir(parents=True, exist_ok=True)
    _run("mount", "-o", "noatime", loop, str(mount))
    record["mounted"] = True
    save()
    os.chmod(mount, 0o1777)
    devno = (Path("/sys/block") / Path(loop).name / "dev").read_text().strip()
    record["devno"] = devno
    if write_mbps or read_mbps:
        why = throttle_support()
        if why:
            raise TargetUnavailable(f"target.local.spill_disk: {why}")
        bdi = Path("/sys/class/bdi") / devno
        # restored by ratio: writing max_ratio back also resets the byte limit it implies
        record["bdi"] = {"strict_limit": (bdi / "strict_limit").read_text().strip(),
                         "max_ratio": (bdi / "max_ratio").read_text().strip()}
        record["throttled"] = True
        save()
        for kind, mbps in (("write", write_mbps), ("read", read_mbps)):
            if mbps:
                _write(BLKIO / f"blkio.throttle.{kind}_bps_device",
                       f"{devno} {int(mbps * 2**20)}")
        if write_mbps:
            _write(bdi / "strict_limit", "1")
            _write(bdi / "max_bytes", str(DIRTY_MAX_BYTES))
    save()


def _release_one(disk: dict[str, Any]) -> list[str]:
    """Undo one disk (throttle, bdi limits, mount, loop); what could not be undone."""
    left = []
    devno, loop = disk.get("devno"), disk.get("loop")
    if devno and disk.get("throttled"):
        for kind in ("read", "write"):
            try:
                _write(BLKIO / f"blkio.throttle.{kind}_bps_device", f"{devno} 0")
            except OSError:
                pass
        bdi = Path("/sys/class/bdi") / str(devno)
        for key, value in (disk.get("bdi") or {}).items():
            try:  # loop devices outlive us: leave the next user the defaults we found
                _write(bdi / key, str(value))
            except OSError as exc:
                left.append(f"{bdi / key}: {exc}")
    mount = disk.get("mount")
    if mount and _mounted(mount):
        if subprocess.run(["umount", "-l", mount], capture_output=True).returncode != 0:
            left.append(f"mount {mount}")
    if loop and _backing(loop) == disk.get("image"):
        if subprocess.run(["losetup", "-d", loop], capture_output=True).returncode != 0:
            left.append(f"loop device {loop}")
    return left


def release_disks(disks: list[dict[str, Any]], state_dir: Path) -> list[str]:
    """Undo every recorded disk, and any loop device or mount under ``state_dir`` a crash left
    unrecorded; returns what is still there."""
    left = []
    for disk in disks:
        left += _release_one(disk)
    for found in leftover_storage(state_dir):
        left += _release_one(found)
    return sorted(set(left))


def _mounts() -> list[str]:
    try:
        lines = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return []
    return [line.split()[1].replace("\\040", " ") for line in lines if len(line.split()) > 1]


def _mounted(path: str) -> bool:
    return path in _mounts()


def _backing(loop: str) -> str | None:
    try:
        return (Path("/sys/block") / Path(loop).name / "loop" / "backing_file").read_text().strip()
    except OSError:
        return None


def leftover_storage(state_dir: Path) -> list[dict[str, Any]]:
    """Mounts and loop devices of this cluster that still exist (as disk records)."""
    root = str(state_dir.resolve() if state_dir.exists() else state_dir)
    found: list[dict[str, Any]] = [{"mount": m} for m in _mounts()
                                   if m.startswith(root + os.sep)]
    for block in Path("/sys/block").glob("loop*"):
        backing = _backing(str(block))
        if backing and (backing.startswith(root + os.sep) or backing.startswith(
                str(state_dir) + os.sep)):
            found.append({"loop": f"/dev/{block.name}", "image": backing})
    return found


def sweep_page_cache(mount: str) -> int:
    """Drop the clean page cache of every file under ``mount``; how many files were swept."""
    count = 0
    for base, _dirs, files in os.walk(mount):
        for name in files:
            try:
                fd = os.open(os.path.join(base, name), os.O_RDONLY)
            except OSError:
                continue
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                count += 1
            except OSError:
                pass
            finally:
                os.close(fd)
    return count


_ARG = re.compile(r"^--(plasma_directory|fallback_directory|object_store_memory)=(.*)$")


def raylet_storage(raylet_pid: int) -> dict[str, Any]:
    """Where this raylet keeps its object store, and the /dev/shm its pod sees."""
    import psutil

    facts: dict[str, Any] = {}
    try:
        for arg in psutil.Process(raylet_pid).cmdline():
            m = _ARG.match(arg)
            if m:
                facts[m.group(1)] = m.group(2)
    except psutil.Error:
        return {}
    try:
        st = os.statvfs(f"/proc/{raylet_pid}/root/dev/shm")
        facts["shm_mb"] = round(st.f_blocks * st.f_frsize / 2**20, 1)
    except OSError:
        pass
    store = facts.pop("object_store_memory", None)
    if store is not None and str(store).isdigit():
        facts["object_store_mb"] = round(int(store) / 2**20, 1)
    plasma = str(facts.get("plasma_directory", ""))
    facts["on_shm"] = plasma.startswith("/dev/shm") if plasma else None
    return facts


def node_storage(nodes: dict[str, dict[str, Any]], plans: dict[str, dict[str, Any]]
                 ) -> list[dict[str, Any]]:
    """Per node: object store size, /dev/shm size, where Ray put the store, the spill dir."""
    from raychaos.targets.local.nodes import find_child

    out = []
    for name, entry in sorted(nodes.items()):
        pid = entry.get("pid")
        raylet = find_child(pid, "raylet") if pid else None
        facts = raylet_storage(raylet.pid) if raylet else {}
        plan = plans.get(name, {})
        out.append({"node": name, "observed": bool(facts), "at": time.time(),
                    "spill_directory": plan.get("spill_dir") or None, **facts})
    return out
