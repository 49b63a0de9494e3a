"""Counting what Ray's own processes log on a local node: injected RPC failures, failed health
checks, a raylet that knows it was wrongly marked dead.

Why from the logs: those are the only places Ray reports them (each injected failure is one
``Inject RPC ... failure for <call>`` line of the calling process; each missed health check one
``Health check failed for node`` line of the GCS). A node's Ray session folder is its pod's
``/tmp/rc-<tag>`` — on the host the node folder bind-mounted there in netns mode, the mount point
itself in host mode. Files are read incrementally (an offset per file), so asking every second
costs only what was written since.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from raychaos.targets.local.cluster import LocalCluster

__all__ = ["LogCounter"]

SUFFIXES = (".out", ".err", ".log")


class LogCounter:
    """Cumulative counts of needles per node over the node's current (and earlier) sessions."""

    def __init__(self, cluster: LocalCluster):
        self.cluster = cluster
        self._seen: dict[tuple[str, str], tuple[int, dict[str, int]]] = {}

    def _log_dirs(self, node: str) -> list[Path]:
        desired = self.cluster.desired() or {}
        for entry in desired.get("nodes", []):
            plan = entry["plan"]
            if plan["name"] == node:
                root = Path(plan["node_dir"] if desired.get("mode") == "netns"
                            else plan["mount_point"])
                return sorted(p / "logs" for p in root.glob("session_2*") if p.is_dir())
        return []

    def _count_file(self, path: Path, needles: tuple[str, ...]) -> dict[str, int]:
        key = (str(path), "\x00".join(needles))
        offset, counts = self._seen.get(key, (0, dict.fromkeys(needles, 0)))
        try:
            size = path.stat().st_size
            if size < offset:  # rotated or truncated: count again from the start
                offset, counts = 0, dict.fromkeys(needles, 0)
            with open(path, "rb") as fh:
                fh.seek(offset)
                chunk = fh.read()
        except OSError:
            return counts
        cut = chunk.rfind(b"\n") + 1
        text = chunk[:cut].decode(errors="replace")
        counts = dict(counts)
        for needle in needles:
            counts[needle] += text.count(needle)
        self._seen[key] = (offset + cut, counts)
        return counts

    def counts(self, nodes: list[str], needles: list[str]) -> dict[str, dict[str, int]]:
        """``{node: {needle: lines so far}}`` for the nodes whose logs can be read."""
        wanted = tuple(needles)
        out: dict[str, dict[str, int]] = {}
        for node in nodes:
            dirs = self._log_dirs(node)
            if not dirs:
                continue
            total = dict.fromkeys(wanted, 0)
            for folder in dirs:
                for path in folder.iterdir():
                    if path.suffix in SUFFIXES and path.is_file():
                        for needle, n in self._count_file(path, wanted).items():
                            total[needle] += n
            out[node] = total
        return out

    def lines(self, node: str, needle: str, limit: int = 20) -> list[str]:
        """The last ``limit`` lines of ``node``'s logs that contain ``needle`` (evidence)."""
        found: list[str] = []
        for folder in self._log_dirs(node):
            for path in sorted(folder.iterdir()):
                if path.suffix not in SUFFIXES or not path.is_file():
                    continue
                try:
                    text = path.read_text(errors="replace")
                except OSError:
                    continue
                found += [f"{path.name}: {line.strip()[:240]}" for line in text.splitlines()
                          if needle in line]
        return found[-limit:]


def summarize(counts: dict[str, dict[str, int]]) -> dict[str, Any]:
    """Totals per needle over nodes."""
    total: dict[str, int] = {}
    for per in counts.values():
        for needle, n in per.items():
            total[needle] = total.get(needle, 0) + n
    return total
