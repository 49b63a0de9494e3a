"""A node of the test bed: a network namespace whose pods' containers are real processes.

``net`` builds the namespaces (node uplinks on one bridge, a pod bridge per node), ``runtime``
runs a container as a process tree in its own PID/mount/UTS namespace, ``podworker`` takes one
pod from sandbox to removal, ``probes`` runs readiness probes, ``kubelet`` holds the pods of a
set of nodes, and ``agent`` serves them to the bed's kubelet (virtual-kubelet, in Go) over a
Unix socket. The KubeRay test world under tests/ runs the same pieces behind its own API.
"""
