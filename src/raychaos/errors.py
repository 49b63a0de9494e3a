"""The one exception tree raychaos raises.

Everything the harness raises on purpose derives from :class:`RaychaosError`, so the CLI can turn
any of them into one clear sentence and exit code 2 without a traceback::

    RaychaosError
    ├── ConfigError            bad input: file, key path and value named; nothing was started
    ├── TargetError            the cluster under test
    │   ├── TargetUnavailable  cannot reach / start it
    │   ├── NothingMatched     a selector matched no node, pod or job
    │   ├── TargetBusy         another run holds the target's lock
    │   └── KubeApiError       the Kubernetes API answered an error (status, reason, message)
    ├── FaultFailed            a fault did not land (no proof it happened)
    ├── RollbackFailed         an undo did not complete: something may still be applied
    ├── NotRecovered           the fault landed and the system under test did not recover
    │                          within its bound: a FAILURE of the system (exit 1), not an error
    ├── ProbeFailed            a probe could not produce evidence at all
    ├── Interrupted            SIGINT/SIGTERM during a run
    └── Aborted                an ``abort_if`` condition held: the run stopped itself

Third-party errors are translated in one place per target and re-raised ``from exc`` so the
original stays on ``__cause__``: ``ApiException`` and urllib3 errors in
:mod:`raychaos.targets.kubernetes.client`, Ray errors in :mod:`raychaos.targets.local.errors`,
``ip``/``tc``/``nft`` exit statuses in :mod:`raychaos.targets.local.network.shaping`.
"""

from __future__ import annotations


class RaychaosError(Exception):
    """Base of every error raychaos raises on purpose."""


class ConfigError(RaychaosError):
    """One or more problems in an input file; each problem is one sentence."""

    def __init__(self, problems: list[str] | str):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))


class TargetError(RaychaosError):
    """Something is wrong with the cluster under test."""


class TargetUnavailable(TargetError):
    """The target cannot be reached or started."""


class NothingMatched(TargetError):
    """A selector matched nothing, so a fault would be a silent no-op."""


class TargetBusy(TargetError):
    """Another run holds the target."""


class KubeApiError(TargetError):
    """The Kubernetes API server answered with an error; ``status`` is the HTTP code."""

    def __init__(self, status: int, reason: str, message: str, what: str = ""):
        self.status = status
        self.reason = reason
        self.message = message
        self.what = what
        super().__init__(f"{what + ': ' if what else ''}HTTP {status} {reason}: {message}")


class FaultFailed(RaychaosError):
    """A fault did not land, or there is no proof that it did."""


class RollbackFailed(RaychaosError):
    """Undoing a fault failed; what is still applied is named in the message."""


class NotRecovered(RaychaosError):
    """The fault landed, and the system under test did not recover within its bound.

    Not a harness error: the verdict of such a run is ``fail`` (exit 1) with this reason, so a
    pipeline that retries errored runs does not retry away a real failure."""


class ProbeFailed(RaychaosError):
    """A probe could not produce evidence."""


class Interrupted(RaychaosError):
    """The run was interrupted by a signal."""

    def __init__(self, signame: str):
        self.signame = signame
        super().__init__(f"interrupted by {signame}")


class Aborted(RaychaosError):
    """An ``abort_if`` condition of the experiment held; the reason names metric and value."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(f"aborted: {reason}")
