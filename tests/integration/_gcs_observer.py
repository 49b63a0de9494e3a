"""An independent observer of a GCS: its own process, a fresh gRPC channel for every question,
one ``GetAllNodeInfo`` every 50 ms with a 100 ms deadline, each answer written as a JSON line
``{"ts": <wall time asked>, "up": bool}``. Nothing of raychaos is used, so what it sees is a
witness for what the harness's monitor says it saw.

    python tests/integration/_gcs_observer.py GCS_ADDRESS OUT.jsonl   # until SIGTERM
"""

from __future__ import annotations

import json
import signal
import sys
import time

import grpc
from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

EVERY_S = 0.05


def main(address: str, out: str) -> int:
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    with open(out, "a", buffering=1) as fh:
        next_at = time.monotonic()
        while not stop:
            ts = time.time()
            channel = grpc.insecure_channel(address, options=[("grpc.enable_retries", 0)])
            try:
                stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel)
                stub.GetAllNodeInfo(gcs_service_pb2.GetAllNodeInfoRequest(), timeout=0.1)
                up = True
            except grpc.RpcError:
                up = False
            finally:
                channel.close()
            fh.write(json.dumps({"ts": round(ts, 4), "up": up}) + "\n")
            next_at += EVERY_S
            time.sleep(max(0.0, next_at - time.monotonic()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
