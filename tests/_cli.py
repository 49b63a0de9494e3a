"""``raychaos run`` as a child process of a test, ended the way a person ends it.

``subprocess.run`` answers a timeout or a KeyboardInterrupt (a SIGTERMed test session) with
SIGKILL: the run never rolls back, and its Locust — a process group of its own — is left
running against the cluster (two were found 45 minutes later). Here the child gets SIGTERM
first and up to ``grace_s`` to roll back and stop its loads; SIGKILL only after that.
"""

from __future__ import annotations

import signal
import subprocess
from typing import Any

GRACE_S = 120.0


def run_gracefully(cmd: list[str], timeout: float, grace_s: float = GRACE_S,
                   **popen: Any) -> subprocess.CompletedProcess[str]:  # noqa: ANN401
    """``subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **popen)``,
    but a timeout or an interrupt SIGTERMs the child and waits for it before it is killed."""
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          stdin=subprocess.DEVNULL, **popen) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except BaseException:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.communicate(timeout=grace_s)
            except BaseException:
                proc.kill()
                raise
            raise
        return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
