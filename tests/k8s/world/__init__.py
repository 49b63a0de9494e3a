"""The KubeRay test world: a Kubernetes API over HTTP whose pods are real Ray nodes.

``World(...).start()`` in a process, or ``python -m tests.k8s.world up|down`` as a daemon; see
README.md in this folder.
"""

from tests.k8s.world.process import WorldProcess
from tests.k8s.world.world import NodeSpec, World, cleanup, default_nodes, default_raycluster

__all__ = ["World", "WorldProcess", "NodeSpec", "cleanup", "default_nodes", "default_raycluster"]
