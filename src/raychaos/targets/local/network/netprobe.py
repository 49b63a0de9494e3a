"""Bulk TCP sender/receiver run inside a node's network namespace (``ip netns exec``).

Standalone on purpose (standard library only, run by file path): it starts in ~50 ms inside a
pod's namespace without importing Ray or raychaos. Two uses: a short measured transfer between
two pods (the evidence that a network fault changed the rate) and a paced, time-bounded flood
(the "noisy neighbour" of the saturation fault). Everything stops by itself after ``seconds``.

    python local_netprobe.py recv HOST PORT SECONDS      # prints {"bytes", "seconds", "rate_bps"}
    python local_netprobe.py send HOST PORT SECONDS [RATE_BPS]
    python local_netprobe.py udp-recv HOST PORT SECONDS  # a sink, so no port-unreachable replies
    python local_netprobe.py udp-send HOST PORT SECONDS RATE_BPS

The UDP flood fills the sender's own shaped queue, which a TCP flow cannot: the kernel keeps a
TCP socket's bytes in its host's queues to about a millisecond of its pacing rate (TCP Small
Queues), so a shaper on the sender's own interface sees a few packets of it, never the seconds
of bufferbloat a saturated link has (measured on a 2 Mbit tbf: ~20 KB backlog under a TCP
flood; its 1.25 MB limit full under UDP).
"""

from __future__ import annotations

import json
import socket
import sys
import time

CHUNK = b"\xa5" * 65536


def recv(host: str, port: int, seconds: float) -> dict[str, float | str]:
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((host, port))
    srv.listen(4)
    srv.settimeout(seconds + 5)
    print("READY", flush=True)
    total, t0, t_end = 0, None, time.monotonic() + seconds + 5
    try:
        conn, _ = srv.accept()
    except OSError:
        return {"bytes": 0, "seconds": 0.0, "rate_bps": 0.0, "error": "no connection"}
    conn.settimeout(2.0)
    with conn:
        while time.monotonic() < t_end:
            try:
                data = conn.recv(1 << 20)
            except OSError:
                break
            if not data:
                break
            if t0 is None:
                t0 = time.monotonic()
            total += len(data)
    took = time.monotonic() - (t0 or time.monotonic())
    return {"bytes": total, "seconds": round(took, 3),
            "rate_bps": round(total * 8 / took, 1) if took > 0 else 0.0}


def send(host: str, port: int, seconds: float, rate_bps: float = 0.0) -> dict[str, float | str]:
    deadline = time.monotonic() + seconds
    sock = None
    while sock is None and time.monotonic() < deadline:
        try:
            sock = socket.create_connection((host, port), timeout=2.0)
        except OSError:
            time.sleep(0.05)
    if sock is None:
        return {"bytes": 0, "error": "connect failed"}
    sent, t0 = 0, time.monotonic()
    sock.settimeout(1.0)
    with sock:
        while time.monotonic() < deadline:
            if rate_bps > 0 and sent * 8 > rate_bps * (time.monotonic() - t0):
                time.sleep(0.002)  # pace the flood: it must load the link, not burn a core
                continue
            try:
                sent += sock.send(CHUNK)
            except TimeoutError:
                continue
            except OSError:
                break
    return {"bytes": sent, "seconds": round(time.monotonic() - t0, 3)}


UDP_PAYLOAD = b"\xa5" * 1400  # one packet under the usual MTU


def udp_recv(host: str, port: int, seconds: float) -> dict[str, float | str]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((host, port))
    sock.settimeout(1.0)
    print("READY", flush=True)
    total, deadline = 0, time.monotonic() + seconds + 5
    with sock:
        while time.monotonic() < deadline:
            try:
                total += len(sock.recv(65536))
            except TimeoutError:
                continue
            except OSError:
                break
    return {"bytes": total}


#: A socket may have only its send buffer's worth (~200 KB) queued below it: these many fill a
#: deep shaper queue (seconds at a few Mbit/s), as many senders on one NIC do
UDP_SOCKETS = 16


def udp_send(host: str, port: int, seconds: float, rate_bps: float) -> dict[str, float | str]:
    socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(UDP_SOCKETS)]
    sent, t0, i = 0, time.monotonic(), 0
    deadline = t0 + seconds
    try:
        while time.monotonic() < deadline:
            if sent * 8 > rate_bps * (time.monotonic() - t0):
                time.sleep(0.002)  # paced: a full queue, not a burnt core
                continue
            i = (i + 1) % len(socks)
            try:
                sent += socks[i].sendto(UDP_PAYLOAD, (host, port))
            except OSError:  # the queue is full (ENOBUFS): that is the point; wait a little
                time.sleep(0.002)
    finally:
        for sock in socks:
            sock.close()
    return {"bytes": sent, "seconds": round(time.monotonic() - t0, 3)}


def main(argv: list[str]) -> int:
    mode, host, port, seconds = argv[0], argv[1], int(argv[2]), float(argv[3])
    if mode == "recv":
        print(json.dumps(recv(host, port, seconds)), flush=True)
    elif mode == "udp-recv":
        print(json.dumps(udp_recv(host, port, seconds)), flush=True)
    elif mode == "udp-send":
        print(json.dumps(udp_send(host, port, seconds, float(argv[4]))), flush=True)
    else:
        print(json.dumps(send(host, port, seconds, float(argv[4]) if len(argv) > 4 else 0.0)),
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
