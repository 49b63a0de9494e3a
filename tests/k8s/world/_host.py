"""The few things the world borrows from raychaos's local target, in one place.

Why one module: the local target's modules are being renamed by a renovation happening in
parallel; re-pointing these imports is then a one-file change. What is borrowed: the tiny image
registry (its server, run as a process, and the pull a node does, inside a network namespace).
"""

from __future__ import annotations

from raychaos.targets import local_registry
from raychaos.targets.local_registry import pull_image

__all__ = ["pull_image", "REGISTRY_SCRIPT"]

#: run as ``python REGISTRY_SCRIPT serve HOST PORT IMAGE_MB [ERROR_RATE]``
REGISTRY_SCRIPT = local_registry.__file__
