"""A resilience review of a RayCluster, RayJob or RayService: what will make a fault hurt.

Chaos experiments show what a cluster does when the head dies or a node drains; most of the
damage they find was already written in the manifest — no GCS fault tolerance, a /dev/shm
smaller than the object store, a PodDisruptionBudget KubeRay can never satisfy. This package
reads the objects (a manifest file, or what a target's :meth:`review_objects` returns) and
judges them with the rules of :mod:`raychaos.review.rules`; every finding names the catalog
experiment that demonstrates it. ``raychaos review`` prints it and exits 1 on any error; every
run records it in its summary (the preflight of a Kubernetes experiment).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from raychaos.review.model import ClusterView, cluster_views
from raychaos.review.rules import RULES, Finding, Options

__all__ = ["Finding", "Options", "RULES", "Review", "review"]

_ORDER = {"error": 0, "warning": 1, "info": 2}


@dataclass
class Review:
    subjects: list[str]
    findings: list[Finding] = field(default_factory=list)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "warning"]

    def to_dict(self) -> dict[str, Any]:
        return {"subjects": self.subjects, "errors": len(self.errors),
                "warnings": len(self.warnings),
                "findings": [f.to_dict() for f in self.findings]}

    def line(self) -> str:
        """One progress line: counts and the first error or warning."""
        first = next(iter(self.errors or self.warnings), None)
        text = f"review of {', '.join(self.subjects) or 'nothing'}: {len(self.errors)} " \
               f"error(s), {len(self.warnings)} warning(s)"
        return text + (f"; {first.rule}: {first.message}" if first else "")


def review_view(view: ClusterView, options: Options | None = None) -> list[Finding]:
    opts = options or Options()
    out = []
    for rule in RULES:
        for severity, where, message in rule.check(view, opts):
            out.append(Finding(rule.id, severity, view.subject, where, message, rule.experiment))
    return out


def review(objects: list[dict[str, Any]], options: Options | None = None,
           live: bool = False) -> Review:
    """Every rule over every Ray cluster among ``objects``; errors first."""
    views = cluster_views(objects, live=live)
    findings = [f for v in views for f in review_view(v, options)]
    findings.sort(key=lambda f: (_ORDER[f.severity], f.subject, f.rule))
    return Review([v.subject for v in views], findings)


def format_review(result: Review, verbose: bool = False) -> str:
    """The review as text: one line per finding (info only with ``verbose``)."""
    lines = []
    for f in result.findings:
        if f.severity == "info" and not verbose:
            continue
        lines.append(f"{f.severity.upper():7s} {f.rule:16s} {f.subject}: {f.message}")
        lines.append(f"{'':24s} at {f.where}; see {f.experiment}")
    lines.append(f"{len(result.errors)} error(s), {len(result.warnings)} warning(s) in "
                 f"{', '.join(result.subjects) or 'no Ray cluster'}")
    return "\n".join(lines)
