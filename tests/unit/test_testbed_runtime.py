"""The bed's container runtime, on real namespaces (root): a killed container's processes are
all gone, their connections closed to their peers, before ``kill`` returns — so the pod's
network, deleted right after as the kubelet does, never swallows the FIN/RST.

Why it matters: on the bed a head pod deleted while its processes were still dying left the
workers' raylets with silent dead connections to the old head's IP, and they took 2.2 min to
reach the new GCS (a real kubelet stops every container before the sandbox's network goes).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from raychaos.testbed.node.runtime import Container, base_env, marked

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="network and PID namespaces need root")

LISTENER = r"""
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("10.251.0.2", 7071)); s.listen(4); s.settimeout(30)
print("listening", flush=True)
conns = [s.accept()[0] for _ in range(3)]
print("accepted", flush=True)
for c in conns:
    c.settimeout(5)
    try:
        got = c.recv(1)
        print("closed" if got == b"" else "data", flush=True)
    except ConnectionResetError:
        print("closed", flush=True)
    except socket.timeout:
        print("still open", flush=True)
"""

#: three holders in sessions of their own (as Ray's processes are), under a shell as PID 1, each
#: with 400 MiB written: a process frees its memory before it closes its files, so a big one
#: (a raylet, a GCS, an object store) closes its connections a while after SIGKILL
HOLDER = ("import socket, time\n"
          "ballast = b'x' * (400 << 20)\n"
          "s = socket.create_connection(('10.251.0.2', 7071)); time.sleep(600)")


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def test_a_killed_container_closes_its_connections_before_its_network_goes(tmp_path):
    pod, peer = f"rc-rt-pod-{os.getpid()}", f"rc-rt-peer-{os.getpid()}"
    marker = f"rc-rt-{os.getpid()}/c1"
    _ip("netns", "add", pod)
    _ip("netns", "add", peer)
    listener = None
    c = None
    try:
        _ip("link", "add", "rcrt0", "netns", pod, "type", "veth", "peer", "name", "rcrt1",
            "netns", peer)
        _ip("-n", pod, "addr", "add", "10.251.0.1/24", "dev", "rcrt0")
        _ip("-n", peer, "addr", "add", "10.251.0.2/24", "dev", "rcrt1")
        for ns, dev in ((pod, "rcrt0"), (peer, "rcrt1")):
            _ip("-n", ns, "link", "set", dev, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        listener = subprocess.Popen(["ip", "netns", "exec", peer, sys.executable, "-c", LISTENER],
                                    stdout=subprocess.PIPE, text=True)
        assert listener.stdout is not None
        # the holders connect once: they start after the listener listens, however slow
        assert listener.stdout.readline().strip() == "listening"
        holder = f"{sys.executable} -c \"{HOLDER}\""
        c = Container("c1", pod, "rt", ["sh", "-c", " & ".join(
            [f"setsid {holder}"] * 3) + " & wait"], base_env("rt", marker), tmp_path / "tmp",
            tmp_path / "c1.log")
        c.start()
        assert listener.stdout.readline().strip() == "accepted", (tmp_path / "c1.log").read_text()
        c.kill()
        # what PodWorker does next (Net.remove_pod): the pod's link goes at once, from the
        # node's side, then its namespace
        _ip("-n", peer, "link", "del", "rcrt1")
        _ip("netns", "del", pod)
        assert marked(marker) == [], "a process of the container outlived kill()"
        out, _ = listener.communicate(timeout=30)
        assert out.split() == ["closed"] * 3, out
    finally:
        if c is not None:
            c.kill()
        if listener is not None and listener.poll() is None:
            listener.kill()
            listener.wait()
        for ns in (pod, peer):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)
