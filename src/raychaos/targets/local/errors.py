"""Where the local target turns third-party failures into the raychaos error tree.

Ray's clients raise their own exceptions (``RuntimeError``, ``ConnectionError``, gRPC errors,
``requests`` errors from the Jobs API); ``ip``/``tc``/``nft`` fail with an exit status
(:func:`.network.shaping.sh` raises :class:`~raychaos.errors.FaultFailed` for those). Callers
that reach Ray wrap the call in :func:`ray_errors`, so what leaves the target is always a
:class:`~raychaos.errors.RaychaosError` with the original on ``__cause__``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from raychaos.errors import RaychaosError, TargetUnavailable

__all__ = ["ray_errors"]


@contextmanager
def ray_errors(what: str) -> Iterator[None]:
    """Re-raise anything but a RaychaosError as TargetUnavailable naming ``what``."""
    try:
        yield
    except RaychaosError:
        raise
    except Exception as exc:
        raise TargetUnavailable(f"{what}: {type(exc).__name__}: {str(exc)[:300]}") from exc
