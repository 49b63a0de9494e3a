"""The three GCS samplers of ``bench/gcs_probe_accuracy.py``, each its own process:
``python _gcs_samplers.py ROLE ADDRESS OUT [EVERY_S DEADLINE_S]`` with ROLE ``probe``
(raychaos's GcsProbe), ``old`` (Ray's GcsClient, rebuilt after failures, as before issue 13) or
``observer`` (a fresh gRPC channel every 50 ms: the independent clock). Each writes one JSON
line per sample to OUT and stops when its stdin closes."""

from __future__ import annotations

import json
import resource
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

SRC = Path(__file__).resolve().parent.parent / "src"
OBSERVER_EVERY_S = 0.05


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _loop(every_s: float, once, out: Path, stop: threading.Event) -> None:
    with out.open("a", buffering=1) as f:
        f.write(json.dumps({"ready": time.time()}) + "\n")
        n, cpu0, next_at = 0, _cpu_s(), time.monotonic()
        while not stop.is_set():
            rec = once()
            n += 1
            f.write(json.dumps(rec) + "\n")
            next_at += every_s
            now = time.monotonic()
            if next_at < now:  # late: next sample right away, on a fresh grid
                next_at = now
            stop.wait(next_at - now)
        f.write(json.dumps({"cpu_s": _cpu_s() - cpu0, "samples": n}) + "\n")


def role_probe(address: str, out: Path, every_s: float, deadline_s: float) -> None:
    sys.path.insert(0, str(SRC))
    from raychaos.targets.gcs_probe import GcsProbe

    probe = GcsProbe(address)
    channel_id = id(probe.channel)
    stop = threading.Event()

    def once() -> dict[str, Any]:
        a = probe.ask(deadline_s, reports=True)
        return {"at": a.at, "done": a.at + a.latency_s, "up": a.up, "err": a.error,
                "inc": a.incarnation, "cid": a.cluster_id, "reported": a.reported,
                "views": a.views,
                "alive": [n.node_id for n in a.alive], "channel": id(probe.channel) == channel_id}

    def commands() -> None:  # "reports <after>" on stdin: dump node_reports(after)
        for line in sys.stdin:
            parts = line.split()
            if parts[:1] == ["reports"]:
                after = float(parts[1])
                reps = {k: v.to_dict() for k, v in probe.node_reports(after=after).items()}
                with out.open("a", buffering=1) as f:
                    f.write(json.dumps({"reports": reps, "after": after}) + "\n")
            elif parts[:1] == ["stop"]:
                break
        stop.set()

    threading.Thread(target=commands, daemon=True).start()
    _loop(every_s, once, out, stop)


def role_old(address: str, out: Path, every_s: float, timeout_s: float) -> None:
    from ray._raylet import GcsClient

    client: list[Any] = [None]
    stop = threading.Event()

    def once() -> dict[str, Any]:
        at = time.time()
        try:
            if client[0] is None:
                client[0] = GcsClient(address=address)
            client[0].get_all_node_info(timeout=timeout_s)
            up, err = True, None
        except Exception as exc:  # as LocalTarget.gcs_alive: a new client next time
            client[0] = None
            up, err = False, type(exc).__name__
        return {"at": at, "done": time.time(), "up": up, "err": err}

    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    _loop(every_s, once, out, stop)


def role_observer(address: str, out: Path) -> None:
    import grpc
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

    stop = threading.Event()

    def once() -> dict[str, Any]:
        at = time.time()
        # a fresh channel per poll: nothing it learned before can help or hurt it
        with grpc.insecure_channel(address, options=[("grpc.enable_http_proxy", 0),
                                                     ("grpc.enable_retries", 0)]) as ch:
            stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(ch)
            try:
                stub.GetAllNodeInfo(gcs_service_pb2.GetAllNodeInfoRequest(), timeout=0.25,
                                    wait_for_ready=False)
                up, err = True, None
            except grpc.RpcError as exc:
                up, err = False, exc.code().name
        return {"at": at, "done": time.time(), "up": up, "err": err}

    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    _loop(OBSERVER_EVERY_S, once, out, stop)


def main() -> None:
    role, address, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us via stdin
    if role == "probe":
        role_probe(address, out, float(sys.argv[4]), float(sys.argv[5]))
    elif role == "old":
        role_old(address, out, float(sys.argv[4]), float(sys.argv[5]))
    else:
        role_observer(address, out)


if __name__ == "__main__":
    main()
