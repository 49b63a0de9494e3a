"""Bulk TCP sender/receiver run inside a node's network namespace (``ip netns exec``).

Standalone on purpose (standard library only, run by file path): it starts in ~50 ms inside a
pod's namespace without importing Ray or raychaos. Two uses: a short measured transfer between
two pods (the evidence that a network fault changed the rate) and a paced, time-bounded flood
(the "noisy neighbour" of the saturation fault). Everything stops by itself after ``seconds``.

    python local_netprobe.py recv HOST PORT SECONDS      # prints {"bytes", "seconds", "rate_bps"}
    python local_netprobe.py send HOST PORT SECONDS [RATE_BPS]
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


def main(argv: list[str]) -> int:
    mode, host, port, seconds = argv[0], argv[1], int(argv[2]), float(argv[3])
    if mode == "recv":
        print(json.dumps(recv(host, port, seconds)), flush=True)
    else:
        print(json.dumps(send(host, port, seconds, float(argv[4]) if len(argv) > 4 else 0.0)),
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
