"""The world's etcd: objects by (resource, namespace, name), one resourceVersion counter, an
event log that watches read, and the label and field selectors clients send.

Why its own module: the API server, the controllers, the scheduler, KubeRay and the kubelet all
read and write the same objects, in-process, under one lock; watches need the exact sequence of
changes (a grace-0 delete is MODIFIED then DELETED) and a window of history (older
resourceVersions get 410 Expired, as from a real watch cache).
"""

from __future__ import annotations

import copy
import re
import threading
import time
import uuid
from collections import deque
from typing import Any

from raychaos.testbed.node.objects import now

__all__ = ["Store", "label_match", "parse_label_selector", "field_match", "now", "micro_now"]


def micro_now() -> str:
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1e6):06d}Z"


# --- label selectors: equality AND set-based ----------------------------------------------------
_TERM = re.compile(r"^\s*(?P<neg>!)?\s*(?P<key>[A-Za-z0-9_./-]+)\s*"
                   r"(?:(?P<op>==|=|!=|\s+in\s+|\s+notin\s+)\s*(?P<val>.*?))?\s*$")


def _split_terms(selector: str) -> list[str]:
    terms, depth, cur = [], 0, ""
    for ch in selector:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            terms.append(cur)
            cur = ""
        else:
            cur += ch
    terms.append(cur)
    return [t for t in terms if t.strip()]


def parse_label_selector(selector: str | None) -> list[tuple[str, str, list[str]]]:
    """``a=b,c!=d,e in (f,g),h notin (i),j,!k`` → [(key, op, values)]; ValueError if bad."""
    out = []
    for term in _split_terms(selector or ""):
        m = _TERM.match(term)
        if not m:
            raise ValueError(f"unable to parse requirement: {term!r}")
        key, op, val = m["key"], (m["op"] or "").strip(), m["val"]
        if m["neg"]:
            if op:
                raise ValueError(f"unable to parse requirement: {term!r}")
            out.append((key, "!", []))
        elif not op:
            out.append((key, "exists", []))
        elif op in ("in", "notin"):
            if not (val.startswith("(") and val.endswith(")")):
                raise ValueError(f"unable to parse requirement: {term!r}")
            out.append((key, op, [v.strip() for v in val[1:-1].split(",") if v.strip()]))
        else:
            out.append((key, "!=" if op == "!=" else "=", [val]))
    return out


def label_match(selector: str | list | None, labels: dict[str, str] | None) -> bool:
    reqs = parse_label_selector(selector) if isinstance(selector, (str, type(None))) else selector
    labels = labels or {}
    for key, op, vals in reqs:
        has = key in labels
        if op == "exists" and not has or op == "!" and has:
            return False
        if op == "=" and labels.get(key) != vals[0] or op == "!=" and labels.get(key) == vals[0]:
            return False
        if op == "in" and labels.get(key) not in vals or op == "notin" and has and \
                labels[key] in vals:
            return False
    return True


def selector_dict_match(sel: dict[str, Any] | None, labels: dict[str, str] | None) -> bool:
    """A LabelSelector object (matchLabels + matchExpressions); an empty one matches all."""
    sel = sel or {}
    reqs: list[tuple[str, str, list[str]]] = [(k, "=", [v]) for k, v in
                                              (sel.get("matchLabels") or {}).items()]
    for e in sel.get("matchExpressions") or []:
        op = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}[e["operator"]]
        reqs.append((e["key"], op, list(e.get("values") or [])))
    return label_match(reqs, labels)


def _field(obj: dict, path: str) -> str:
    cur: Any = obj
    for part in path.split("."):
        cur = cur.get(part) if isinstance(cur, dict) else None
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return "" if cur is None else str(cur)


def field_match(selector: str | None, obj: dict) -> bool:
    for term in filter(None, (t.strip() for t in (selector or "").split(","))):
        neg = "!=" in term
        key, val = term.replace("==", "=").split("!=" if neg else "=", 1)
        if (_field(obj, key.strip()) == val.strip()) == neg:
            return False
    return True


class Store:
    """All objects, guarded by ``lock`` (a Condition: writers notify, watches wait)."""

    def __init__(self, first_rv: int = 1000, history: int = 20000):
        self.lock = threading.Condition(threading.RLock())
        self.rv = first_rv
        self.objects: dict[str, dict[tuple[str, str], dict]] = {}
        self.log: deque[tuple[int, str, str, dict]] = deque(maxlen=history)
        self.oldest_rv = first_rv  # a watch from before this gets 410 Expired
        self.closed = False

    def _bump(self) -> str:
        self.rv += 1
        return str(self.rv)

    def _record(self, resource: str, kind: str, obj: dict) -> None:
        if len(self.log) == self.log.maxlen:
            self.oldest_rv = self.log[0][0]
        self.log.append((self.rv, resource, kind, copy.deepcopy(obj)))
        self.lock.notify_all()

    def compact(self) -> None:
        """Forget history, as etcd compaction does: older watches now get 410 Expired."""
        with self.lock:
            self.log.clear()
            self.oldest_rv = self.rv

    # --- reads ---------------------------------------------------------------------------------
    def get(self, resource: str, ns: str, name: str) -> dict | None:
        with self.lock:
            obj = self.objects.get(resource, {}).get((ns, name))
            return copy.deepcopy(obj) if obj is not None else None

    def raw(self, resource: str, ns: str, name: str) -> dict | None:
        """The stored object itself (callers hold ``lock`` and must not keep it)."""
        return self.objects.get(resource, {}).get((ns, name))

    def list(self, resource: str, ns: str | None = None, labels: str | list | None = None,
             fields: str | None = None, copy_: bool = True) -> list[dict]:
        with self.lock:
            out = []
            for (n, _), o in self.objects.get(resource, {}).items():
                if ns and n != ns:
                    continue
                if labels and not label_match(labels, o["metadata"].get("labels")):
                    continue
                if fields and not field_match(fields, o):
                    continue
                out.append(copy.deepcopy(o) if copy_ else o)
            return out

    def by_uid(self, uid: str) -> dict | None:
        with self.lock:
            for objs in self.objects.values():
                for o in objs.values():
                    if o["metadata"].get("uid") == uid:
                        return o
            return None

    # --- writes --------------------------------------------------------------------------------
    def create(self, resource: str, obj: dict) -> dict:
        """Store a new object (the caller checked it does not exist); returns a copy."""
        with self.lock:
            meta = obj.setdefault("metadata", {})
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now()
            meta["resourceVersion"] = self._bump()
            self.objects.setdefault(resource, {})[(meta.get("namespace") or "", meta["name"])] = obj
            self._record(resource, "ADDED", obj)
            return copy.deepcopy(obj)

    def update(self, resource: str, obj: dict) -> dict:
        """Replace a stored object (same key); bumps resourceVersion; returns a copy."""
        with self.lock:
            meta = obj["metadata"]
            key = (meta.get("namespace") or "", meta["name"])
            meta["resourceVersion"] = self._bump()
            self.objects.setdefault(resource, {})[key] = obj
            self._record(resource, "MODIFIED", obj)
            return copy.deepcopy(obj)

    def remove(self, resource: str, ns: str, name: str) -> dict | None:
        with self.lock:
            obj = self.objects.get(resource, {}).pop((ns, name), None)
            if obj is not None:
                obj["metadata"]["resourceVersion"] = self._bump()
                self._record(resource, "DELETED", obj)
            return obj

    def mutate(self, resource: str, ns: str, name: str, fn: Any) -> dict | None:
        """Apply ``fn(obj)`` to the stored object; saved (new RV) only when it changed."""
        with self.lock:
            obj = self.objects.get(resource, {}).get((ns, name))
            if obj is None:
                return None
            before = copy.deepcopy(obj)
            fn(obj)
            if obj != before:
                return self.update(resource, obj)
            return copy.deepcopy(obj)

    def events_since(self, rv: int, resource: str) -> list[tuple[int, str, dict]]:
        """Changes after ``rv`` to ``resource`` (caller holds the lock)."""
        out = []
        for r, res, t, o in reversed(self.log):  # newest first: stop at the first seen one
            if r <= rv:
                break
            if res == resource:
                out.append((r, t, o))
        out.reverse()
        return out

    def close(self) -> None:
        with self.lock:
            self.closed = True
            self.lock.notify_all()
