"""The commands that bring a cluster up or down for a user: ``raychaos local`` (the embedded
Ray cluster) and ``raychaos testbed`` (a KubeRay control plane of real parts); each registers
its parser and handler on the command line's subparsers, as ``ramp`` and ``review`` do."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from typing import Any

__all__ = ["add_cluster_parsers", "local", "testbed"]


def add_cluster_parsers(sub: Any) -> None:
    """``raychaos local`` and ``raychaos testbed`` on the command line's subparsers."""
    loc = sub.add_parser("local", help="the embedded local Ray cluster")
    loc.add_argument("action", choices=["up", "down", "status"])
    loc.add_argument("--name", default="raychaos")
    loc.add_argument("--workers", type=int, default=None)
    loc.add_argument("--gpu-workers", type=int, default=None)
    loc.add_argument("--gcs-storage", choices=["rocksdb", "redis", "none"], default=None)
    loc.add_argument("--state-root", help=argparse.SUPPRESS)
    loc.set_defaults(handler=local)

    tb = sub.add_parser("testbed", help="a throwaway KubeRay control plane on this machine: "
                                        "real etcd, kube-apiserver, controller-manager, "
                                        "scheduler, KubeRay operator and a kubelet "
                                        "(virtual-kubelet) whose pods are real processes, built "
                                        "from their Go modules (no Docker, no kind)",
                        description="build: build the parts that are missing (Go 1.26 and the "
                                    "Go module proxy; once per version). up: build, start, print "
                                    "KUBECONFIG and namespace (with --nodes: and a ready "
                                    "RayCluster with GCS fault tolerance, and the command that "
                                    "runs the head kill on it). down: stop what up started and "
                                    "remove its state, pods included. status: its processes and "
                                    "readiness.")
    tb.add_argument("action", choices=["build", "up", "down", "status"])
    tb.add_argument("--name", default="default", help="the bed's name (default: default)")
    tb.add_argument("--namespace", default="ray", help="namespace up creates (default: ray)")
    tb.add_argument("--nodes", action="store_true",
                    help="up: also four nodes (head-0, cpu-0, gpu-a, gpu-b: network namespaces "
                         "whose pods are real processes; root) and the RayCluster 'demo' "
                         "(GCS fault tolerance in Redis). Measured on it: head kill, GPU drain "
                         "and the GCS-FT-off control; the whole catalog is not yet")
    tb.add_argument("--sim-nodes", action="store_true",
                    help="up: the same four nodes, simulated instead (no root): their kubelet "
                         "runs nothing, pods go Running and Ready at once, so the operator, "
                         "scheduler, evictions and PDBs are real and nothing answers as Ray "
                         "(exec, logs, port-forward fail); for API-level checks and dry runs")
    tb.add_argument("--no-cluster", action="store_true",
                    help="up --nodes/--sim-nodes: create no RayCluster (apply your own)")
    tb.set_defaults(handler=testbed)


def local(args: argparse.Namespace) -> int:
    """``raychaos local up|down|status``: the embedded local Ray cluster."""
    from raychaos.config.settings import LocalClusterSpec
    from raychaos.targets.local.target import LocalTarget

    spec = LocalClusterSpec(name=args.name)
    changes = {k: v for k, v in (("workers", args.workers), ("gpu_workers", args.gpu_workers),
                                 ("gcs_storage", args.gcs_storage)) if v is not None}
    try:
        spec = replace(spec, **changes)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    target = LocalTarget(spec, state_root=args.state_root, progress=print)
    if args.action == "up":
        status = target.up()
        print(f"up: {status['dashboard_url']} (GCS {status['gcs_address']}, {status['mode']} mode)")
    elif args.action == "down":
        result = target.down()
        print(f"down: ended {len(result['killed'])} processes"
              + (f"; still alive: {result['left']}" if result["left"] else ""))
        return 1 if result["left"] else 0
    else:
        print(json.dumps(target.status(), indent=2, default=str))
    return 0


def testbed(args: argparse.Namespace) -> int:
    """``raychaos testbed build|up|down|status``: the real KubeRay control plane."""
    from raychaos.testbed import bed, build

    if args.action == "build":
        for name, path in build.build_all().items():
            print(f"{name}: {path}")
    elif args.action == "up":
        if args.nodes and args.sim_nodes:
            print("error: --nodes and --sim-nodes: a bed has one kind of node; choose one",
                  file=sys.stderr)
            return 2
        b = bed.up(args.name, args.namespace, nodes=args.nodes, cluster=not args.no_cluster,
                   sim_nodes=[dict(n) for n in bed.DEFAULT_NODES] if args.sim_nodes else None)
        print(f"up: test bed {b.name!r}, API server {b.server}")
        for name, pid in b.pids.items():
            print(f"  {name:24s} pid {pid}")
        print(f"export KUBECONFIG={b.kubeconfig}\nnamespace: {b.namespace}")
        if b.cluster and args.sim_nodes:
            print(f"cluster: {b.cluster} (simulated nodes: ready to the operator, no Ray in "
                  f"it; try --dry-run runs and raychaos review)")
        elif b.cluster:
            print(f"cluster: {b.cluster}\nrun: raychaos run experiments/head-kill.yaml "
                  f"--target kubernetes --kubeconfig {b.kubeconfig} --namespace {b.namespace} "
                  f"--cluster {b.cluster}")
        print(f"KUBECONFIG={b.kubeconfig} NAMESPACE={b.namespace}"
              + (f" CLUSTER={b.cluster}" if b.cluster else ""))
    elif args.action == "down":
        stopped = bed.down(args.name)
        print(f"down: stopped {', '.join(stopped) or 'nothing (all had exited)'}")
    else:
        st = bed.status(args.name)
        print(json.dumps(st, indent=2))
        return 0 if st["ready"] and all(st["alive"].values()) else 1
    return 0
