"""Shared test fixtures: a tiny threaded HTTP server on loopback that loads can hit."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytest_plugins = ["pytester"]  # tests/unit/test_pytest_plugin.py runs pytest inside pytest


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _reply(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802
        if self.path.startswith("/fail"):
            self._reply(500, {"error": "on purpose"})
        else:
            self._reply(200, {"ok": True, "path": self.path})

    def do_POST(self):  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self._reply(200, {"ok": True})

    def log_message(self, *args):
        pass


@pytest.fixture
def loopback_http():
    """Base URL of a threaded HTTP server on 127.0.0.1 (``/fail*`` answers 500)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


#: ``make test`` runs the suite in two lanes at once (pytest-xdist, ``-n 2``), one per worker:
#:
#: - ``real-clusters``: every test that runs real Ray nodes, real pulls or qdiscs — the
#:   integration tier (in the order tests/integration/conftest.py sets, sharing its warm local
#:   cluster), then ``tests/k8s/bed`` (the test bed, its pods real Ray nodes) — one after
#:   another, as in a serial run: their verdicts are calibrated on a box that runs one cluster
#:   at a time.
#:   (Measured: with the two real tiers side by side the box had no idle CPU for minutes and the
#:   local registry-throttle run failed twice — 5.5 % and 11.5 % of the storm's tasks failed,
#:   p95 3.5 s and 7.2 s against 560 ms — where it passes alone.)
#: - ``light``: the unit tier and ``tests/k8s/simbed`` (the test bed's real control plane and
#:   KubeRay operator with simulated nodes: no Ray, no pods running), at nice 19 and in a CPU
#:   group of weight 15 (``tests/_lanes.py``, which says why nice alone did not do it): they use
#:   the CPU the real clusters leave idle (about 40 % of a serial run's) instead of taking it
#:   from them; and ``tests/k8s/test_e2e.py`` (opt-in: skipped unless a real cluster is given).
#:
#: Any other k8s module runs in the real-clusters lane, and so does all of ``tests/k8s/bed``
#: (the test bed of real parts, its pods real Ray nodes).
SIMULATED_K8S = frozenset({"test_e2e.py"})
LIGHT_NICE = 19


def lane(nodeid: str) -> str:
    """The lane of a test (``tests/<tier>/<module>::...``); anything else is real-clusters."""
    parts = nodeid.split("::", 1)[0].split("/")
    tier = parts[1] if len(parts) > 2 and parts[0] == "tests" else ""
    if tier == "unit" or (tier == "k8s" and len(parts) == 3 and parts[-1] in SIMULATED_K8S) \
            or (tier == "k8s" and len(parts) == 4 and parts[2] == "simbed"):
        return "light"
    return "real-clusters"


def pytest_xdist_make_scheduler(config, log):  # noqa: ANN001, ANN201
    """The lanes above as xdist work units (a unit runs whole, in order, on one worker). Not
    ``--dist loadgroup``: its group marks rename node IDs in a way pytest 9.2 no longer keeps."""
    from xdist.scheduler import LoadScopeScheduling

    class Lanes(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return lane(nodeid)

    return Lanes(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """No test starts after a SIGTERM. An xdist worker running the light lane lowers its
    priority (once: the lane is all it runs; what its tests start inherits it); a serial run
    keeps its priority."""
    import os

    if _SIGNALLED:  # a test swallowed the KeyboardInterrupt (a run it drove stopped cleanly)
        pytest.exit(f"stopped by signal {_SIGNALLED[0]}: no further test starts", returncode=2)
    if _worker(item.config) and lane(item.nodeid) == "light" \
            and os.getpriority(os.PRIO_PROCESS, 0) < LIGHT_NICE:
        os.setpriority(os.PRIO_PROCESS, 0, LIGHT_NICE)
        from tests._lanes import join

        join("lane")


def pytest_collection_modifyitems(config, items):
    """Tiers are marked by folder: tests/unit, tests/integration, tests/k8s. The simulated-node
    bed (``tests/k8s/simbed``) goes last: it waits for the bed's build, which ``make test``
    runs in the background while the rest of its lane runs."""
    items.sort(key=lambda item: "/simbed/" in item.nodeid)
    for item in items:
        parts = item.path.parts
        for tier in ("unit", "integration", "k8s"):
            if tier in parts:
                item.add_marker(getattr(pytest.mark, tier))


_SIGNALLED: list[int] = []  # the SIGTERMs this process received


def _worker(config) -> bool:  # noqa: ANN001
    """A pytest-xdist worker: its reports reach the controller, which prints them."""
    return hasattr(config, "workerinput")


def pytest_configure(config):
    """SIGTERM (a CI timeout, a killed job) becomes KeyboardInterrupt, so module fixtures still
    tear their Ray clusters, namespaces and qdiscs down instead of leaving them running, and no
    further test starts (a test that drives a run in-process sees the interrupt stop the run,
    not the session: without this the session went on to the next module's cluster). The
    controller of an xdist run passes its first SIGTERM on to its workers, where the fixtures
    are, and waits for them (ending itself would end them before their teardown); a second one
    ends it."""
    import os
    import signal

    controller = bool(getattr(config.option, "numprocesses", None)) and not _worker(config)

    def _interrupt(signum, frame):
        _SIGNALLED.append(signum)
        if controller and len(_SIGNALLED) == 1:
            import psutil

            workers = psutil.Process().children()
            for child in workers:
                os.kill(child.pid, signum)
            if workers:
                return
        raise KeyboardInterrupt(f"signal {signum}")

    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, _interrupt)


_FIRST: list = []  # the outermost pytest run's config (pytester runs pytest inside pytest)
_STATUS = pytest.StashKey[int]()
_FAILED: list[str] = []  # "nodeid: why", a line per failed test of the outermost run


#: A test of a real-cluster tier slower than this gets a line of its own when it ends.
SLOW_LINE_S = 90.0
_STARTED: list[float] = []


@pytest.hookimpl(trylast=True)
def pytest_runtest_logreport(report):
    """Say at once, on a line of its own, when a test fails or takes long: a CI run cut off by its
    time limit never prints the digest or the durations, and its progress dots alone say
    neither what failed nor where the time went. Remember why each test failed, in one line,
    for the digest printed last (CI shows the end of the output: the reason of every failure
    must be there, not only the last one's). Runs where the reports arrive: the controller
    of an xdist run, or the one process of a serial one."""
    if not _FIRST or _worker(_FIRST[0]):
        return
    import time

    failed = report.failed
    slow = report.when == "call" and report.duration >= SLOW_LINE_S
    if report.failed:
        when = "" if report.when == "call" else f" ({report.when})"
        _FAILED.append(f"{report.nodeid}{when}: {_why(report)[:400]}")
    reporter = _FIRST[0].pluginmanager.get_plugin("terminalreporter")
    if reporter is None or not (failed or slow):
        return
    at = f"[{(time.monotonic() - _STARTED[0]) / 60:5.1f} min]"
    reporter.ensure_newline()
    if failed:
        reporter.write_line(f"{at} FAILED {report.nodeid} ({report.when}, "
                            f"{report.duration:.0f} s): {_why(report)[:300]}")
    else:
        reporter.write_line(f"{at} slow: {report.nodeid} {report.duration:.0f} s "
                            f"({report.outcome})")


def _why(report) -> str:  # noqa: ANN001
    """A failed report's reason, its first line with the spaces folded."""
    crash = getattr(report.longrepr, "reprcrash", None)
    why = crash.message if crash is not None else str(report.longrepr)
    return " ".join((why.strip().splitlines() or [""])[0].split())


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    if not _FIRST:
        import time

        _FIRST.append(config)
        _STARTED.append(time.monotonic())


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    session.config.stash[_STATUS] = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """The test process ends with pytest's own status, without the interpreter's finalization.

    Tests leave native threads behind (gRPC channels' pollers, Ray's C++ clients, Kubernetes
    watches of worlds already stopped): finalizing the interpreter under them can abort it
    (SIGABRT after the summary, so CI fails on a run whose tests all passed). The exit handlers
    still run. The threads still alive are listed, so a leak stays visible. ``raychaos`` ends
    the same way (``raychaos.cli.entry``); so does an xdist worker, after it has sent the
    controller its last report and its "finished"."""
    if not _FIRST or config is not _FIRST[0] or _STATUS not in config.stash:
        return
    import collections
    import re
    import sys

    from raychaos.cli import exit_now

    left = collections.Counter(re.sub(r"^Thread-\d+ ", "", t.name)
                               for t in threading.enumerate() if t is not threading.main_thread())
    if left:
        who = f" (xdist worker {config.workerinput['workerid']})" if _worker(config) else ""
        print(f"\nthreads still running when the tests ended{who} ({sum(left.values())}): "
              + ", ".join(f"{name} x{n}" for name, n in left.most_common(12)), file=sys.stderr)
    if _FAILED:
        print(f"\nwhy each test failed ({len(_FAILED)}):", file=sys.stderr)
        for line in _FAILED:
            print(f"  {line}", file=sys.stderr)
    exit_now(config.stash[_STATUS])
