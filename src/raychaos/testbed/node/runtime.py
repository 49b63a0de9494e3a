"""The world's container runtime: a container is a process tree in its own PID, mount and UTS
namespace inside its pod's network namespace, started from the pod spec's command/args with
this machine's binaries (images are only "pulled", never run).

Each container is ``ip netns exec <pod netns> unshare --mount --pid --fork --mount-proc --uts
--kill-child=SIGKILL -- sh -c SETUP -- CMD...``: ``ip netns exec`` bind-mounts the world's
``/etc/netns/<ns>/hosts`` over /etc/hosts; SETUP gives the container a private /tmp (a folder
of the pod), a tmpfs /dev/shm when the pod mounts a Memory emptyDir there, its other volumes,
and the pod's hostname; then it execs CMD as PID 1 of the container. Killing that PID 1 kills
the whole PID namespace, agents and all, and ``kill`` returns once all of it is gone. ``exec``
is ``nsenter`` into that PID, mount, UTS and network namespace. Every process carries
``RAYCHAOS_WORLD=<world>/<pod uid>`` in its environment so a sweep finds anything a crash left
behind.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

__all__ = ["Container", "IMAGE_DEFAULTS", "MARKER", "argv_of", "base_env", "sweep", "marked"]

MARKER = "RAYCHAOS_WORLD"
VENV_BIN = str(Path(sys.executable).parent)
SAFE_MOUNT_ROOTS = ("/tmp/", "/dev/shm")


#: what an image runs when its container names no ``command`` (the image's ENTRYPOINT and
#: CMD), keyed by the image's repository name: the bed runs this machine's binaries, so an
#: image is only the name of one. Redis as the official image's entrypoint script runs it when
#: no config file is given: protected mode off, or a client from another pod is refused
IMAGE_DEFAULTS: dict[str, tuple[list[str], list[str]]] = {
    "redis": (["redis-server", "--protected-mode", "no"], []),
}


def argv_of(image: str, command: list[str], args: list[str]) -> list[str]:
    """A container's argv as a runtime builds it: ``command`` replaces the image's entrypoint
    (and drops its CMD), ``args`` replace its CMD. An unknown image without a command runs its
    args as they are (or nothing)."""
    if command:
        return command + args
    name = image.split("@", 1)[0].rsplit("/", 1)[-1].split(":", 1)[0]
    entry, cmd = IMAGE_DEFAULTS.get(name, ([], []))
    if entry and args[:1] == entry[:1]:
        args = args[1:]  # "redis-server --port 7000": the program named again, as CMD does
    return entry + (args or cmd)


def base_env(hostname: str, marker: str) -> dict[str, str]:
    return {"PATH": f"{VENV_BIN}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": "/root", "HOSTNAME": hostname, "LANG": "C.UTF-8", "PYTHONUNBUFFERED": "1",
            # no DNS server in the world: names come from /etc/hosts, which gRPC's default
            # c-ares resolver does not read
            "GRPC_DNS_RESOLVER": "native",
            MARKER: marker}


@dataclass
class Mount:
    target: str
    source: str | None = None      # a host folder to bind; None with tmpfs
    tmpfs_bytes: int | None = None


@dataclass
class Container:
    name: str
    netns: str
    hostname: str
    argv: list[str]
    env: dict[str, str]
    tmp_dir: Path
    log_path: Path
    mounts: list[Mount] = field(default_factory=list)
    nice: int = 0
    cpu_group: tuple[Any, str] | None = None  # (CpuGroups, group): the pod's CPU request
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    _init: int | None = field(default=None, repr=False)

    def setup_script(self) -> str:
        """Volumes first (their sources may live under the host's /tmp; targets under /tmp
        land in the container's own tmp folder), then that folder over /tmp, recursively."""
        lines = ["set -e"]
        for m in self.mounts:
            if m.target.startswith("/tmp/"):
                where = str(self.tmp_dir) + m.target[4:]
            elif m.target.startswith(SAFE_MOUNT_ROOTS) or os.path.isdir(m.target):
                where = m.target
            else:
                continue  # never create folders on the host's own filesystem
            t = shlex.quote(where)
            lines.append(f"mkdir -p {t}")
            if m.tmpfs_bytes is not None:
                lines.append(f"mount -t tmpfs -o size={int(m.tmpfs_bytes)} tmpfs {t}")
            elif m.source:
                lines.append(f"mount --bind {shlex.quote(m.source)} {t}")
        lines += [f"mount --rbind {shlex.quote(str(self.tmp_dir))} /tmp",
                  f"hostname {shlex.quote(self.hostname[:63])}", 'cd /', 'exec "$@"']
        return "\n".join(lines)

    def start(self) -> None:
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        for m in self.mounts:
            if m.source:
                Path(m.source).mkdir(parents=True, exist_ok=True)
        cmd = ["ip", "netns", "exec", self.netns, "unshare", "--mount", "--pid", "--fork",
               "--mount-proc", "--uts", "--kill-child=SIGKILL", "--propagation", "private",
               "--", "/bin/sh", "-c", self.setup_script(), "--", *self.argv]
        if self.cpu_group is not None:
            groups, group = self.cpu_group
            cmd = groups.join_command(group, cmd)
        if self.nice:
            cmd = ["nice", "-n", str(self.nice), *cmd]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self._init = None
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=self.env,
                                         start_new_session=True)
        self.started_at = time.time()

    # --- state ---------------------------------------------------------------------------------
    def exit_code(self) -> int | None:
        """None while running; else the exit code as Kubernetes reports it (128+signal)."""
        if self.proc is None:
            return None
        rc = self.proc.poll()
        if rc is None:
            return None
        return 128 - rc if rc < 0 else rc

    def init_pid(self) -> int | None:
        """Host PID of the container's PID 1 (the unshare process's child), found once and
        then checked by one read of its stat: the kubelet asks for it on every exec and
        port-forward, and listing the children the general way reads every process's stat
        (hundreds of Ray processes on a busy bed)."""
        if self.proc is None or self.proc.poll() is not None:
            return None
        if self._init is not None and _parent(self._init) == self.proc.pid:
            return self._init
        self._init = None
        kids = _children(self.proc.pid)
        if kids:
            self._init = kids[0]
        return self._init

    def signal_init(self, sig: int) -> None:
        pid = self.init_pid()
        if pid:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        """SIGKILL the container's PID 1 and return once every process of it is gone, as a
        real runtime does before the sandbox (the pod's network) is torn down.

        The kernel kills the whole PID namespace when its init dies, and the init's exit
        completes only after every other process in it has exited (and closed its sockets); the
        unshare process, its parent, exits after that, so waiting on it waits for them all.
        Killing unshare first instead (as this once did) returned at once while the namespace
        was still dying: the pod's link was then deleted before the FIN/RST of its connections
        went out, and peers kept dead connections open for minutes (seen on the bed: after a
        head pod was deleted, the workers' raylets took 2.2 min to reach the new GCS)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        init = self.init_pid()
        try:
            if init is not None:
                os.kill(init, signal.SIGKILL)
            else:  # no init yet: unshare alone
                os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
            except (ProcessLookupError, PermissionError, subprocess.TimeoutExpired):
                pass

    def exec(self, command: list[str], stdin: bool = False) -> subprocess.Popen[bytes] | None:
        pid = self.init_pid()
        if pid is None:
            return None
        return subprocess.Popen(
            ["nsenter", "-t", str(pid), "-m", "-u", "-p", "-n", "--wd=/", "--", *command],
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, env=self.env, start_new_session=True)


def _parent(pid: int) -> int | None:
    """The parent PID of ``pid`` (None: gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    return int(stat[stat.rindex(b")") + 2:].split()[1])


def _children(pid: int) -> list[int]:
    """The children of ``pid``: the kernel's list of them, else a scan of every process."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except FileNotFoundError:
        pass  # no CONFIG_PROC_CHILDREN, or gone
    except OSError:
        return []
    try:
        return [k.pid for k in psutil.Process(pid).children()]
    except psutil.Error:
        return []


def marked(prefix: str) -> list[psutil.Process]:
    """Processes whose RAYCHAOS_WORLD marker starts with ``prefix`` (e.g. ``world/``)."""
    found = []
    me = os.getpid()
    for proc in psutil.process_iter(["pid"]):
        if proc.pid == me:
            continue
        try:
            value = proc.environ().get(MARKER, "")
        except (psutil.Error, OSError):
            continue
        if value.startswith(prefix):
            found.append(proc)
    return found


def sweep(prefix: str, timeout: float = 10.0) -> list[int]:
    """SIGKILL every marked process; returns the PIDs still alive at the deadline."""
    for p in marked(prefix):
        try:
            p.kill()
        except psutil.Error:
            pass
    deadline = time.monotonic() + timeout
    left = [p.pid for p in marked(prefix)]
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = [p.pid for p in marked(prefix) if p.status() != psutil.STATUS_ZOMBIE]
    return left
