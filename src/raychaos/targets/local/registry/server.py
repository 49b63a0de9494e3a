"""A tiny image registry for the local target, and the "image pull" a node does before it starts.

On Kubernetes a replacement pod waits for its image; a slow registry turns a 10 s recovery into
minutes. Locally the supervisor calls :func:`pull_image` before (re)starting a node whenever
cluster.json has an ``image`` key; the pull runs inside the node's network namespace, so a tc
shaping on the bridge between pods and the registry really slows it down.

The server is standard library only and runs as its own process (``serve``), so an undo from
another process (``raychaos rollback``) can stop it by PID. An image is
``<host>:<port>/<name>:<tag>``; ``/v2/<name>/manifests/<tag>`` lists synthetic layers of the
configured total size, ``/v2/<name>/blobs/<digest>`` streams one, and a configurable fraction of
blob requests is answered 503 (the puller retries, as container runtimes do).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

__all__ = ["pull_image", "serve", "LAYER_BYTES"]

LAYER_BYTES = 8 * 1024 * 1024
CHUNK = bytes(range(256)) * 256  # 64 KiB of not-all-zeros


def pull_image(image: str, dest_dir: str | Path, netns: str | None = None,
               retries: int = 20, timeout: float = 600.0) -> dict[str, Any]:
    """Download every layer of ``image`` into ``dest_dir``; bytes, seconds and rate_bps.

    With ``netns`` the pull runs in that network namespace (``ip netns exec``), where the node
    it is for lives, so it takes the same network path (and shaping) as the node would."""
    if netns:
        proc = subprocess.run(["ip", "netns", "exec", netns, sys.executable, __file__, "pull",
                               image, str(dest_dir)], capture_output=True, text=True,
                              timeout=timeout + 30, check=False)
        if proc.returncode:
            raise RuntimeError(f"pull of {image} in {netns} failed: {proc.stderr.strip()[-300:]}")
        result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
        return result
    host, _, ref = image.partition("/")
    name, _, tag = ref.rpartition(":")
    base = f"http://{host}/v2/{name}"
    dest = Path(dest_dir)
    dest.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with urllib.request.urlopen(f"{base}/manifests/{tag}", timeout=30) as resp:
        manifest = json.loads(resp.read())
    total, errors = 0, 0
    for layer in manifest["layers"]:
        for attempt in range(retries + 1):
            try:
                total += _fetch(f"{base}/blobs/{layer['digest']}", dest / layer["digest"])
                break
            except urllib.error.HTTPError as exc:
                errors += 1
                if exc.code < 500 or attempt == retries:
                    raise
                time.sleep(min(1.0, 0.05 * 2 ** attempt))
    took = time.monotonic() - t0
    return {"image": image, "bytes": total, "seconds": round(took, 3),
            "rate_bps": round(total * 8 / took, 1) if took > 0 else 0.0,
            "layers": len(manifest["layers"]), "errors": errors}


def _fetch(url: str, path: Path) -> int:
    got = 0
    with urllib.request.urlopen(url, timeout=60) as resp, open(path, "wb") as out:
        while True:
            data = resp.read(1 << 16)
            if not data:
                break
            out.write(data)
            got += len(data)
    return got


def serve(host: str, port: int, image_mb: float, error_rate: float = 0.0) -> None:
    """Serve every image name/tag as ``image_mb`` MiB of layers until killed."""
    size = int(image_mb * 1024 * 1024)
    sizes = {f"sha256-{i}": min(LAYER_BYTES, size - i * LAYER_BYTES)
             for i in range(max(1, -(-size // LAYER_BYTES)))}
    layers = [{"digest": digest, "size": n} for digest, n in sizes.items()]

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:  # noqa: N802
            parts = self.path.strip("/").split("/")
            if len(parts) >= 4 and parts[-2] == "manifests":
                body = json.dumps({"layers": layers}).encode()
                return self._send(200, body)
            if len(parts) >= 4 and parts[-2] == "blobs" and parts[-1] in sizes:
                if error_rate and random.random() < error_rate:
                    return self._send(503, b"registry overloaded (raychaos)")
                left = sizes[parts[-1]]
                self.send_response(200)
                self.send_header("Content-Length", str(left))
                self.end_headers()
                while left > 0:
                    n = min(left, len(CHUNK))
                    self.wfile.write(CHUNK[:n])
                    left -= n
                return None
            return self._send(404, b"not found")

        def _send(self, code: int, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    print(json.dumps({"listening": f"{host}:{server.server_address[1]}"}), flush=True)
    server.serve_forever()


def main(argv: list[str]) -> int:
    if argv[0] == "serve":
        serve(argv[1], int(argv[2]), float(argv[3]), float(argv[4]) if len(argv) > 4 else 0.0)
    elif argv[0] == "pull":
        print(json.dumps(pull_image(argv[1], argv[2])), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
