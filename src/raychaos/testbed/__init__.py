"""The test bed: a KubeRay control plane of real parts on one Linux machine (see :mod:`.bed`)."""
