"""Bench: what the raychaos load machinery costs, measured against the bare tools.

Why: a load harness that eats the throughput it is supposed to apply hides regressions and
fakes SLO breaches. Two side-by-side comparisons, alternated to spread out noise from other
processes on the machine:

1. Ray task throughput: ``loads/task_storm.py`` (as a driver/job of one small local Ray) vs a
   bare driver doing ``ray.get([noop.remote(i) for i in range(64)])`` in a loop.
   Goal: storm / bare >= 0.9.
2. Locust rps: ``LocustProcess`` (with the stats plugin) vs the same locustfile run with the
   plain ``locust`` CLI, both against the same loopback HTTP server (a thread in this process).
   Goal: runner / standalone >= 0.95.

Not a test (it takes ~2 minutes and its numbers depend on the machine)::

    PYTHONPATH=src python bench/loads.py [--seconds 8] [--repeats 2]
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from raychaos.loads.locust_runner import LOADS_DIR, LocustProcess, locust_command, stats_format

BENCH_USERS = Path(__file__).resolve().parent / "bench_users.py"
BARE_DRIVER = """
import os, sys, time, ray
ray.init(address=os.environ["RAY_ADDRESS"], log_to_driver=False)
@ray.remote(num_cpus=0.01, max_retries=5, retry_exceptions=False)
def noop(i):
    return i
seconds, warmup = float(sys.argv[1]), 2.0
t0 = time.monotonic(); done = 0; measured_from = None
while time.monotonic() - t0 < seconds:
    ray.get([noop.remote(i) for i in range(64)])
    if measured_from is None and time.monotonic() - t0 >= warmup:
        measured_from = time.monotonic()
    elif measured_from is not None:
        done += 64
print("BARE_TPS", done / (time.monotonic() - measured_from))
"""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):  # noqa: N802
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


def storm_tps(address: str, seconds: float) -> float:
    proc = subprocess.run(
        [sys.executable, str(LOADS_DIR / "task_storm.py"), "--duration", str(seconds)],
        env={**os.environ, "RAY_ADDRESS": address}, capture_output=True, text=True, check=True,
    )
    parse = stats_format().parse_line
    lines = [d for d in map(parse, proc.stdout.splitlines()) if d]
    steady = lines[2:] or lines  # skip the partial first second and the warm-up second
    return statistics.mean(line["count"] for line in steady)


def bare_tps(address: str, seconds: float) -> float:
    proc = subprocess.run(
        [sys.executable, "-c", BARE_DRIVER, str(seconds)],
        env={**os.environ, "RAY_ADDRESS": address}, capture_output=True, text=True, check=True,
    )
    line = next(x for x in proc.stdout.splitlines() if x.startswith("BARE_TPS"))
    return float(line.split()[1])


def _csv_rps(prefix: Path) -> float:
    with open(f"{prefix}_stats.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["Name"] == "Aggregated"]
    return float(rows[0]["Requests/s"])


def locust_rps(host: str, seconds: float, runner: bool, tmp: Path, n: int) -> float:
    prefix = tmp / f"{'runner' if runner else 'cli'}{n}"
    flags = ["--csv", str(prefix)]
    if runner:
        load = LocustProcess(BENCH_USERS, host, users=10, spawn_rate=10, duration_s=seconds,
                             stats_path=tmp / f"runner{n}.stats", extra_args=tuple(flags))
        with load:
            load.wait()
    else:
        cmd = [*locust_command(), "--headless", "-f", str(BENCH_USERS), "--host", host,
               "-u", "10", "-r", "10", "-t", f"{int(seconds)}s", "--only-summary", *flags]
        subprocess.run(cmd, capture_output=True, timeout=seconds + 60, cwd=BENCH_USERS.parent)
    return _csv_rps(prefix)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="length of each run")
    parser.add_argument("--repeats", type=int, default=2, help="alternated runs per variant")
    args = parser.parse_args()

    import ray

    os.environ.pop("RAY_ADDRESS", None)
    ray.init(num_cpus=2, object_store_memory=100 * 1024**2, include_dashboard=False,
             log_to_driver=False)
    try:
        address = ray.get_runtime_context().gcs_address
        bare, storm = [], []
        for _ in range(args.repeats):
            bare.append(bare_tps(address, args.seconds))
            storm.append(storm_tps(address, args.seconds))
    finally:
        ray.shutdown()
    print(f"tasks/s  bare driver {[round(x) for x in bare]}  task_storm {[round(x) for x in storm]}"
          f"  ratio {statistics.mean(storm) / statistics.mean(bare):.3f} (goal >= 0.9)")

    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host = f"http://127.0.0.1:{server.server_address[1]}"
    cli, runner = [], []
    with tempfile.TemporaryDirectory(prefix="raychaos-bench-") as tmp:
        for n in range(args.repeats):
            cli.append(locust_rps(host, args.seconds, False, Path(tmp), n))
            runner.append(locust_rps(host, args.seconds, True, Path(tmp), n))
    server.shutdown()
    print(f"req/s    locust CLI {[round(x) for x in cli]}  "
          f"LocustProcess {[round(x) for x in runner]}"
          f"  ratio {statistics.mean(runner) / statistics.mean(cli):.3f} (goal >= 0.95)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
