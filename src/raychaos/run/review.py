"""``raychaos review``: the resilience review of manifest files or of a live Ray object.

Exit codes fit a pipeline: 0 no error finding (warnings are printed), 1 at least one error
finding, 2 the input could not be read (no such file, not YAML, no Ray object in it, the
cluster cannot be reached).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import yaml

from raychaos.errors import ConfigError

__all__ = ["add_review_parser", "load_manifests", "review_command"]


def load_manifests(paths: list[str]) -> list[dict[str, Any]]:
    """Every object of every YAML document (``kind: List`` items too) in ``paths``."""
    objects: list[dict[str, Any]] = []
    for name in paths:
        path = Path(name)
        if not path.is_file():
            raise ConfigError(f"{path}: manifest not found")
        try:
            docs = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" (line {mark.line + 1})" if mark else ""
            raise ConfigError(f"{path}: not valid YAML{where}") from exc
        for doc in docs:
            if isinstance(doc, dict) and doc.get("kind") == "List":
                objects += [i for i in doc.get("items") or [] if isinstance(i, dict)]
            elif isinstance(doc, dict):
                objects.append(doc)
    return objects


def _live(kind: str, name: str | None, namespace: str, context: str | None,
          kubeconfig: str | None) -> list[dict[str, Any]]:
    from raychaos.targets.kubernetes.review import read_live_objects

    return read_live_objects(kind, name, namespace, context=context, kubeconfig=kubeconfig)


def review_command(files: list[str], *, live: str | None = None, namespace: str = "default",
                   context: str | None = None, kubeconfig: str | None = None,
                   head_restart_s: float = 60.0, as_json: bool = False,
                   verbose: bool = False) -> int:
    """Review, print, and return the exit code (0 clean, 1 an error finding)."""
    from raychaos.review import Options, format_review, review  # the parser stays light

    if live:
        kind, _, name = live.partition("/")
        objects = _live(kind, name or None, namespace, context, kubeconfig)
    else:
        if not files:
            raise ConfigError("review: name manifest files, or --live KIND/NAME")
        objects = load_manifests(files)
    result = review(objects, Options(head_restart_s=head_restart_s), live=bool(live))
    if not result.subjects:
        where = live or ", ".join(files)
        raise ConfigError(f"{where}: no RayCluster, RayJob or RayService in it")
    print(json.dumps(result.to_dict(), indent=2) if as_json else format_review(result, verbose))
    return 1 if result.errors else 0


def add_review_parser(sub: Any) -> None:
    """``raychaos review`` on the command line's subparsers."""
    rv = sub.add_parser("review", help="resilience review of a RayCluster/RayJob/RayService "
                                       "manifest or live object; exit 1 on an error finding")
    rv.add_argument("manifests", nargs="*", help="YAML files (several documents each)")
    rv.add_argument("--live", metavar="KIND[/NAME]",
                    help="read raycluster/NAME, rayjob/NAME or rayservice/NAME from the API")
    rv.add_argument("--namespace", default="default")
    rv.add_argument("--context", help="kubeconfig context")
    rv.add_argument("--kubeconfig", help="kubeconfig file")
    rv.add_argument("--head-restart-s", type=float, default=60.0,
                    help="how long a head restart is expected to take (default: 60)")
    rv.add_argument("--json", action="store_true", help="print the findings as JSON")
    rv.add_argument("--verbose", action="store_true", help="also print what passed (info)")
    rv.set_defaults(handler=_from_args)


def _from_args(args: argparse.Namespace) -> int:
    return review_command(args.manifests, live=args.live, namespace=args.namespace,
                          context=args.context, kubeconfig=args.kubeconfig,
                          head_restart_s=args.head_restart_s, as_json=args.json,
                          verbose=args.verbose)
