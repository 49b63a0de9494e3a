"""The few things the world borrows from raychaos's local target, in one place.

Why one module: the world is test code built on the local target's pieces; this keeps the
dependency in one place. What is borrowed: the tiny image
registry (its server, run as a process, and the pull a node does, inside a network namespace).
"""

from __future__ import annotations

from raychaos.targets.local.registry import server as local_registry
from raychaos.targets.local.registry.server import pull_image

__all__ = ["pull_image", "REGISTRY_SCRIPT"]

#: run as ``python REGISTRY_SCRIPT serve HOST PORT IMAGE_MB [ERROR_RATE]``
REGISTRY_SCRIPT = local_registry.__file__
