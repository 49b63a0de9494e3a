"""PATCH bodies as the API server applies them: JSON merge patch (RFC 7386), strategic merge
patch (lists of objects merged by their merge key, e.g. containers by ``name``) and JSON patch
(RFC 6902).

Why: clients cordon with either content type (both goldens), the kubernetes client sends
strategic merge for ``patch_*`` calls with a dict body, and status writers patch conditions.
"""

from __future__ import annotations

import copy
from typing import Any

__all__ = ["apply_patch", "UnsupportedPatch"]

# list fields whose items merge by key in a strategic merge patch (as in the Kubernetes types)
MERGE_KEYS = {"containers": "name", "initContainers": "name", "volumes": "name", "env": "name",
              "volumeMounts": "mountPath", "conditions": "type", "ports": "containerPort",
              "ownerReferences": "uid", "addresses": "type", "imagePullSecrets": "name",
              "containerStatuses": "name", "initContainerStatuses": "name",
              "taints": "key", "finalizers": None}


class UnsupportedPatch(ValueError):
    pass


def merge_patch(dst: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(dst) if isinstance(dst, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def strategic_merge(dst: Any, patch: Any, field: str | None = None) -> Any:
    if isinstance(patch, list) and isinstance(dst, list) and field in MERGE_KEYS:
        key = MERGE_KEYS[field]
        if key is None:  # a set of scalars
            return list(dict.fromkeys(dst + patch))
        out = [copy.deepcopy(d) for d in dst]
        for item in patch:
            if not isinstance(item, dict) or key not in item:
                out.append(copy.deepcopy(item))
                continue
            if item.get("$patch") == "delete":
                out = [d for d in out if d.get(key) != item[key]]
                continue
            for i, d in enumerate(out):
                if isinstance(d, dict) and d.get(key) == item[key]:
                    out[i] = strategic_merge(d, item)
                    break
            else:
                out.append({k: v for k, v in item.items() if k != "$patch"})
        return out
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    out = dict(dst) if isinstance(dst, dict) else {}
    for k, v in patch.items():
        if k.startswith("$"):
            continue
        if v is None:
            out.pop(k, None)
        else:
            out[k] = strategic_merge(out.get(k), v, k)
    return out


def _pointer(path: str) -> list[str]:
    return [p.replace("~1", "/").replace("~0", "~") for p in path.lstrip("/").split("/")]


def json_patch(doc: Any, ops: list[dict]) -> Any:
    doc = copy.deepcopy(doc)
    for op in ops:
        parts = _pointer(op["path"])
        parent = doc
        for p in parts[:-1]:
            parent = parent[int(p)] if isinstance(parent, list) else parent[p]
        last = parts[-1]
        kind = op["op"]
        if kind in ("add", "replace"):
            if isinstance(parent, list):
                idx = len(parent) if last == "-" else int(last)
                if kind == "add":
                    parent.insert(idx, copy.deepcopy(op["value"]))
                else:
                    parent[idx] = copy.deepcopy(op["value"])
            else:
                parent[last] = copy.deepcopy(op["value"])
        elif kind == "remove":
            if isinstance(parent, list):
                parent.pop(int(last))
            else:
                parent.pop(last)
        elif kind == "test":
            cur = parent[int(last)] if isinstance(parent, list) else parent.get(last)
            if cur != op["value"]:
                raise UnsupportedPatch(f"test operation failed at {op['path']}")
        else:
            raise UnsupportedPatch(f"unsupported JSON patch op {kind!r}")
    return doc


def apply_patch(obj: dict, body: Any, content_type: str) -> dict:
    ct = (content_type or "").split(";")[0].strip()
    if ct == "application/merge-patch+json":
        return merge_patch(obj, body)
    if ct == "application/strategic-merge-patch+json":
        return strategic_merge(obj, body)
    if ct == "application/json-patch+json":
        return json_patch(obj, body)
    raise UnsupportedPatch(f"the body of the request was in an unknown format - accepted media "
                           f"types include: application/json-patch+json, "
                           f"application/merge-patch+json, "
                           f"application/strategic-merge-patch+json (got {ct!r})")
