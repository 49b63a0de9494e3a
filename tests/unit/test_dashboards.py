"""The run on the dashboards people have: Prometheus, the Pushgateway (Debian's real servers, on
loopback) and Grafana's annotation API (a small stand-in on loopback that checks what Grafana
checks). Nothing leaves the machine; every server started here is ended by its PID."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from _runs import T0, make_run

from raychaos.errors import ConfigError, RaychaosError
from raychaos.results.openmetrics import write_openmetrics
from raychaos.results.publish import Publish
from raychaos.results.store import load_run

pytestmark = pytest.mark.unit


def need(binary: str) -> str:
    """The Debian server's binary; in CI its absence fails (.ci/apt-packages.txt lists it)."""
    path = shutil.which(binary)
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"{binary} is not installed (see .ci/apt-packages.txt)")
        pytest.skip(f"needs {binary} (Debian: apt-get install prometheus prometheus-pushgateway)")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as r:  # noqa: S310 - loopback only
        return r.read().decode()


def wait_ready(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            get(url)
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{url} never answered: {log.read_text()[-2000:]}") from None
            time.sleep(0.2)


def start(cmd: list[str], ready: str, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
    try:
        wait_ready(ready, proc, log)
    except BaseException:
        stop(proc)
        raise
    return proc


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def prometheus(tmp: Path, tsdb: Path, scrape: str | None = None) -> tuple[
        subprocess.Popen[bytes], str]:
    port = free_port()
    config = tmp / "prometheus.yml"
    jobs = "" if scrape is None else (
        "scrape_configs:\n  - job_name: pushgateway\n    honor_labels: true\n"
        f"    scrape_interval: 1s\n    static_configs:\n      - targets: ['{scrape}']\n")
    config.write_text("global:\n  scrape_interval: 1s\n" + jobs)
    base = f"http://127.0.0.1:{port}"
    proc = start([need("prometheus"), f"--config.file={config}",
                  f"--storage.tsdb.path={tsdb}", "--storage.tsdb.retention.time=100y",
                  f"--web.listen-address=127.0.0.1:{port}"], f"{base}/-/ready",
                 tmp / "prometheus.log")
    return proc, base


def query(base: str, promql: str, at: float | None = None) -> list[dict[str, Any]]:
    params = {"query": promql, **({"time": f"{at:.3f}"} if at is not None else {})}
    data = json.loads(get(f"{base}/api/v1/query?{urllib.parse.urlencode(params)}"))
    assert data["status"] == "success", data
    result: list[dict[str, Any]] = data["data"]["result"]
    return result


def value(rows: list[dict[str, Any]]) -> float:
    assert len(rows) == 1, rows
    return float(rows[0]["value"][1])


def test_the_timeline_backfills_into_prometheus_and_answers_queries(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    om = write_openmetrics(run)
    assert om.read_text().endswith("# EOF\n")
    tsdb = tmp_path / "tsdb"
    subprocess.run([need("promtool"), "tsdb", "create-blocks-from", "openmetrics", str(om),
                    str(tsdb)], check=True, capture_output=True, timeout=120)
    proc, base = prometheus(tmp_path, tsdb)
    try:
        sel = '{experiment="kill-the-head-under-load",run_id="run-a"}'
        assert value(query(base, f"raychaos_gcs_up{sel}", T0 + 10)) == 1
        assert value(query(base, f"raychaos_gcs_up{sel}", T0 + 23)) == 0  # the outage
        assert value(query(base, f"raychaos_nodes_alive{sel}", T0 + 40)) == 3
        fault = 'raychaos_fault_active{kind="fault",fault="kill_head",id="f1"}'
        assert value(query(base, fault, T0 + 25)) == 1 and value(query(base, fault, T0 + 45)) == 0
        ops = 'raychaos_load_operations_total{load="task_storm"}'
        assert value(query(base, ops, T0 + 20)) == 2000  # 20 s at 100/s
        assert value(query(base, 'raychaos_slo_value{slo="storm-p99"}', T0 + 60)) == 40
        assert value(query(base, 'raychaos_load_window_dip_ratio{load="task_storm",'
                                 'window="chaos"}', T0 + 60)) == pytest.approx(0.73)
        assert value(query(base, 'raychaos_recovery_seconds{figure="gcs_down_s"}',
                           T0 + 60)) == 6
    finally:
        stop(proc)


def test_figures_go_to_the_pushgateway_and_prometheus_scrapes_them(tmp_path: Path) -> None:
    port = free_port()
    gateway = f"http://127.0.0.1:{port}"
    pgw = start([need("prometheus-pushgateway"), f"--web.listen-address=127.0.0.1:{port}"],
                f"{gateway}/-/ready", tmp_path / "pushgateway.log")
    prom = None
    try:
        publish = Publish.from_options(gateway, None)
        assert publish is not None
        first = make_run(tmp_path / "a", "run-1", started_at=T0)
        second = make_run(tmp_path / "b", "run-2", started_at=T0 + 3600)
        [line] = publish.run(first)
        assert line.endswith("/metrics/job/raychaos/experiment/kill-the-head-under-load")
        publish.run(second)  # replaces the experiment's group
        text = get(f"{gateway}/metrics")
        assert 'run_id="run-2"' in text and 'run_id="run-1"' not in text
        assert 'raychaos_slo_value{experiment="kill-the-head-under-load",instance="",' \
               'job="raychaos",metric="p99_latency_ms",run_id="run-2",slo="storm-p99",' \
               'window="chaos"} 40' in text
        # the timeline itself cannot be pushed: the Pushgateway refuses timestamps
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(urllib.request.Request(  # noqa: S310 - loopback only
                f"{gateway}/metrics/job/raychaos-timeline", method="PUT",
                data=b'raychaos_gcs_up{run_id="x"} 1 1764460800000\n'), timeout=10)
        assert refused.value.code == 400
        prom, base = prometheus(tmp_path, tmp_path / "tsdb", scrape=f"127.0.0.1:{port}")
        deadline = time.monotonic() + 30
        rows: list[dict[str, Any]] = []
        while not rows and time.monotonic() < deadline:
            rows = query(base, 'raychaos_slo_value{job="raychaos",slo="storm-p99"}')
            time.sleep(0.5)
        assert value(rows) == 40 and rows[0]["metric"]["run_id"] == "run-2"
        assert value(query(base, 'raychaos_run_verdict{job="raychaos"}')) == 1  # fail
    finally:
        if prom is not None:
            stop(prom)
        stop(pgw)


class FakeGrafana(BaseHTTPRequestHandler):
    """``POST /api/annotations`` as Grafana answers it (only what raychaos uses)."""

    token = "glsa_test"
    received: list[dict[str, Any]] = []

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path != "/api/annotations":
            return self._reply(404, {"message": "Not found"})
        if self.headers.get("Authorization") != f"Bearer {self.token}":
            return self._reply(401, {"message": "invalid API key"})
        try:
            data = json.loads(body)
            assert isinstance(data["time"], int) and isinstance(data["timeEnd"], int)
            assert data["timeEnd"] >= data["time"] > 10**12  # epoch milliseconds
            assert all(isinstance(t, str) for t in data["tags"]) and isinstance(data["text"], str)
        except (ValueError, KeyError, AssertionError):
            return self._reply(400, {"message": "bad request data"})
        type(self).received.append(data)
        return self._reply(200, {"message": "Annotation added", "id": len(self.received)})

    def _reply(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_args: Any) -> None:
        pass


@pytest.fixture
def grafana() -> Iterator[str]:
    FakeGrafana.received = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeGrafana)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_each_fault_becomes_one_grafana_region_annotation(tmp_path: Path, grafana: str) -> None:
    run = make_run(tmp_path)
    publish = Publish.from_options(None, grafana, "ray-dash",
                                   environ={"RAYCHAOS_GRAFANA_TOKEN": FakeGrafana.token})
    assert publish is not None
    assert publish.run(run) == [f"added 1 Grafana annotation(s) at {grafana}"]
    [note] = FakeGrafana.received
    assert note["time"] == int((T0 + 20.0) * 1000) and note["timeEnd"] == int((T0 + 30.0) * 1000)
    assert note["tags"] == ["raychaos", "kill-the-head-under-load", "kill_head", "verdict:fail"]
    assert note["dashboardUID"] == "ray-dash" and "kill_head f1" in note["text"]
    wrong = Publish.from_options(None, grafana, environ={"GRAFANA_TOKEN": "nope"})
    assert wrong is not None
    with pytest.raises(RaychaosError, match=r"/api/annotations: the server answered 401 "
                                            r"Unauthorized \(.*invalid API key"):
        wrong.run(load_run(run).run_dir)


def test_publishing_options_are_refused_before_anything_starts(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--grafana-url: no Grafana token in the environment"):
        Publish.from_options(None, "http://127.0.0.1:3000", environ={})
    with pytest.raises(ConfigError, match="--push-gateway: expected an http"):
        Publish.from_options("127.0.0.1:9091", None)
    assert Publish.from_options(None, None) is None
    port = free_port()  # nothing listens there
    publish = Publish.from_options(f"http://127.0.0.1:{port}", None)
    assert publish is not None
    with pytest.raises(RaychaosError, match="could not reach the server"):
        publish.run(make_run(tmp_path))


def test_the_cli_refuses_grafana_without_a_token(tmp_path: Path, capsys, monkeypatch) -> None:
    from raychaos.cli import main

    for var in ("RAYCHAOS_GRAFANA_TOKEN", "GRAFANA_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    code = main(["run", "experiments/head-kill.yaml", "--grafana-url", "http://127.0.0.1:3000",
                 "--results", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "no Grafana token" in err and "nothing was started" in err
    assert not any(tmp_path.iterdir())
