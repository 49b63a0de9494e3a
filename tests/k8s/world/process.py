"""``WorldProcess``: the world as a daemon subprocess (``python -m tests.k8s.world up``), for a
test that wants the world outside its own process — e.g. to kill the test process and check
the world survives, or to share one world between processes. Same handles as ``World``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.k8s.world.world import STATE_ROOT

__all__ = ["WorldProcess"]

REPO = Path(__file__).resolve().parents[3]


class WorldProcess:
    def __init__(self, name: str = "raychaos", state_root: Path | str = STATE_ROOT,
                 *extra_args: str):
        self.name, self.state_root, self.extra = name, str(state_root), list(extra_args)
        self.info: dict = {}

    def _cli(self, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ, PYTHONPATH=f"{REPO / 'src'}{os.pathsep}{REPO}")
        return subprocess.run([sys.executable, "-m", "tests.k8s.world", *args, "--name",
                               self.name, "--state-root", self.state_root], env=env, cwd=REPO,
                              capture_output=True, text=True, timeout=timeout, check=False)

    def start(self, timeout: float = 700) -> WorldProcess:
        proc = self._cli("up", *self.extra, timeout=timeout)
        if proc.returncode:
            raise RuntimeError(f"world {self.name} did not come up: {proc.stderr.strip()}")
        self.info = json.loads((Path(self.state_root) / self.name / "ready.json").read_text())
        return self

    def stop(self, timeout: float = 180) -> list[str]:
        """``down``; returns the leftovers it reported ([] when clean)."""
        proc = self._cli("down", timeout=timeout)
        return [] if proc.returncode == 0 else [proc.stderr.strip()]

    @property
    def kubeconfig(self) -> str:
        return str(self.info["kubeconfig"])

    @property
    def namespace(self) -> str:
        return str(self.info["namespace"])

    @property
    def cluster(self) -> str:
        return str(self.info["cluster"])

    @property
    def url(self) -> str:
        return str(self.info["url"])

    def proxy_url(self) -> str:
        return str(self.info["dashboard"])
