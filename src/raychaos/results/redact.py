"""Keep secrets out of everything a run writes: results files, the ledger, the timeline, logs.

Results folders get attached to tickets and CI artifacts; a Redis password in
``redis_address: redis://:pw@host`` or a token in the experiment's ``secrets`` block must not
travel with them. Redaction happens at the one place JSON is written
(:mod:`raychaos.results.store`), so a new writer cannot forget it: keys that name a credential
lose their value, URLs lose their userinfo, and the Chaos Toolkit ``secrets`` block keeps its
keys only.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["redact", "redact_text", "MASK"]

MASK = "***"
SECRET_KEYS = re.compile(r"(pass(word)?|passwd|token|secret|api[_-]?key|(^|[_-])auth$|"
                         r"authorization|credential|private[_-]?key|client[_-]?key|bearer)",
                         re.IGNORECASE)
# scheme://user:password@host and the Redis form scheme://:password@host
_URL_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<info>[^/@\s]*)@")
# host:port forms such as ":password@10.0.0.1:6379" without a scheme
_BARE_USERINFO = re.compile(r"(?<![\w/])(?P<info>[^\s:/@]*:[^\s/@]+)@(?=[\w.\-\[\]]+(:\d+)?\b)")


def redact_text(text: str) -> str:
    """Mask the userinfo of every URL-like address in ``text``."""
    text = _URL_USERINFO.sub(lambda m: f"{m['scheme']}{MASK}@" if m["info"] else m[0], text)
    return _BARE_USERINFO.sub(f"{MASK}@", text)


def redact(value: Any, key: str = "") -> Any:
    """A copy of ``value`` with credentials masked (dicts, lists, strings; others as they are)."""
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        for k, v in value.items():
            ks = str(k)
            if ks == "secrets" and isinstance(v, dict):
                out[k] = {name: _mask_all(block) for name, block in v.items()}
            elif SECRET_KEYS.search(ks) and isinstance(v, str) and v:  # numbers: data, not keys
                out[k] = MASK
            else:
                out[k] = redact(v, ks)
        return out
    if isinstance(value, (list, tuple)):
        return [redact(v, key) for v in value]
    if isinstance(value, str):
        return redact_text(value)
    return value


def _mask_all(block: Any) -> Any:
    if isinstance(block, dict):
        return {k: _mask_all(v) for k, v in block.items()}
    return MASK
