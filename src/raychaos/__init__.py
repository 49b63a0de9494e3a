"""raychaos: chaos and load testing for Ray clusters.

Provoke the failures that hurt Ray in production (head/GCS loss, GPU node drains, slow image
pulls, saturated networks) while real load runs, and judge what happened against SLOs.
"""

__version__ = "0.1.0"
