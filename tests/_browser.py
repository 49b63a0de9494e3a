"""Headless Chromium driven over the DevTools protocol, to look at a page as a person would.

``--screenshot`` alone can only photograph a page; whether the timeline *answers the mouse*
needs a real mouse event. This starts Debian's ``chromium`` with a DevTools port on loopback,
attaches to its page over a WebSocket (websocket-client, which the kubernetes client brings),
and offers what the report tests need: open a file, wait for a condition, evaluate JavaScript,
move the mouse, take a screenshot. The browser is always ended, by its PID.
"""

from __future__ import annotations

import base64
import itertools
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

CHROMIUM = Path("/usr/bin/chromium")


class Chromium:
    def __init__(self, width: int = 1200, height: int = 1600):
        self.width, self.height = width, height
        self.profile = Path(tempfile.mkdtemp(prefix="raychaos-chromium-"))
        self.proc: subprocess.Popen[bytes] | None = None
        self.ws: Any = None
        self._ids = itertools.count(1)

    def __enter__(self) -> Chromium:
        import websocket

        self.proc = subprocess.Popen(
            [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu",
             "--disable-background-networking", "--disable-component-update", "--no-first-run",
             "--disable-sync", "--remote-debugging-address=127.0.0.1",
             "--remote-debugging-port=0", f"--user-data-dir={self.profile}",
             f"--window-size={self.width},{self.height}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        port_file = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not port_file.exists() or not port_file.read_text().strip():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("chromium did not open its DevTools port")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        pages: list[dict[str, Any]] = []
        while not pages:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as r:
                pages = [t for t in json.loads(r.read()) if t.get("type") == "page"]
            if time.monotonic() > deadline:
                raise RuntimeError("chromium has no page to attach to")
        self.ws = websocket.create_connection(pages[0]["webSocketDebuggerUrl"], timeout=30,
                                              suppress_origin=True)
        self.send("Emulation.setDeviceMetricsOverride", width=self.width, height=self.height,
                  deviceScaleFactor=1, mobile=False)
        return self

    def __exit__(self, *_exc: Any) -> None:
        if self.ws is not None:
            self.ws.close()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        shutil.rmtree(self.profile, ignore_errors=True)

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        msg_id = next(self._ids)
        self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        while True:
            reply = json.loads(self.ws.recv())
            if reply.get("id") == msg_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result

    def evaluate(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True,
                           awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result.get("result", {}).get("value")

    def open(self, path: Path) -> None:
        self.send("Page.navigate", url=path.resolve().as_uri())
        self.wait_for("document.readyState === 'complete'")

    def wait_for(self, expression: str, timeout: float = 60.0) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"still false after {timeout:g}s: {expression}")
            time.sleep(0.2)

    def mouse_move(self, x: float, y: float) -> None:
        self.send("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y)

    def screenshot(self, out: Path) -> Path:
        data = self.send("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        out.write_bytes(base64.b64decode(data["data"]))
        return out

    def hover_text(self, selector: str, fx: float, fy: float) -> str:
        """Move the mouse to (fx, fy) of ``selector``'s box (fractions), return the hover label."""
        box = self.evaluate(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)});"
            "e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect();"
            "return [r.left, r.top, r.width, r.height]; })()")
        left, top, width, height = box
        self.mouse_move(left + width * fx - 3, top + height * fy)
        self.mouse_move(left + width * fx, top + height * fy)
        text: str = self.wait_for(
            "(() => { const h = document.querySelector('.hoverlayer');"
            "return h && h.textContent.trim().length ? h.textContent : ''; })()", timeout=10)
        return text


def check_in_chromium(report: Path, shot: Path | None = None) -> dict[str, str]:
    """Open ``report`` in headless Chromium: the interactive timeline is drawn, and a hover
    over it shows values. Returns the story's text and the hover label."""
    with Chromium(1200, 1400) as browser:
        browser.open(report)
        state = browser.wait_for("document.documentElement.dataset.plots || ''")
        assert state == "ready", state
        assert browser.evaluate("document.querySelectorAll('#timeline .main-svg').length") > 0
        story = browser.evaluate("document.getElementById('story').innerText")
        loads = browser.evaluate("[...document.querySelectorAll('h3.load')].map(e => e.innerText)")
        hover = browser.hover_text("#timeline .nsewdrag", 0.5, 0.5)
        if shot is not None:
            browser.screenshot(shot)
    return {"story": story, "hover": hover, "loads": ",".join(loads)}
