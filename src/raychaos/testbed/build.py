"""Build the test bed's real parts from their Go modules, once per version.

Each part is an ordinary ``go build`` of a published module at one release:

- ``kube-apiserver``, ``kube-controller-manager``, ``kube-scheduler`` from ``k8s.io/kubernetes``
  through the build module in ``build/kubernetes`` (it requires that release and replaces each
  staging module, which k8s.io/kubernetes points at local paths, with the same release's
  published ``v0.x`` — the usual way to build Kubernetes outside its own tree);
- ``etcd`` from ``go.etcd.io/etcd/server/v3`` (a three-line main of ours calls ``etcdmain``);
- ``kuberay-operator`` from ``github.com/ray-project/kuberay/ray-operator`` (its go.mod has no
  replace directives), with the CRDs of the same module's ``config/crd``;
- ``raychaos-kubelet``: ``github.com/virtual-kubelet/virtual-kubelet``'s node and pod
  controllers with a provider of ours (``build/kubelet/main.go``) that hands each pod to the
  bed's node agent; its version is virtual-kubelet's plus a digest of our source, so a change
  to the provider is a new binary.

Binaries land in ``<cache>/bin/<part>-<version>`` (``RAYCHAOS_TESTBED_CACHE``, default
``~/.cache/raychaos/testbed``); the module and build caches sit beside them, so a second build of
another part reuses what the first compiled. A part already built is never built again.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from raychaos.errors import RaychaosError

__all__ = ["PARTS", "Part", "build", "build_all", "cache_dir", "crd_dir", "go_env", "path_of"]

HERE = Path(__file__).resolve().parent / "build"
KUBERNETES = "v1.36.3"
ETCD = "v3.7.3"
KUBERAY = "v1.5.0"
VIRTUAL_KUBELET = "v1.14.1"


def _source_digest(module: str) -> str:
    h = hashlib.sha256()
    for f in sorted((HERE / module).glob("*")):
        if f.suffix in (".go", ".mod"):
            h.update(f.name.encode() + f.read_bytes())
    return h.hexdigest()[:10]


@dataclass(frozen=True)
class Part:
    name: str
    module: str  # the build module's folder under build/
    package: str  # what ``go build`` builds
    version: str


PARTS: dict[str, Part] = {p.name: p for p in (
    Part("etcd", "etcd", ".", ETCD),
    Part("kube-apiserver", "kubernetes", "k8s.io/kubernetes/cmd/kube-apiserver", KUBERNETES),
    Part("kube-controller-manager", "kubernetes", "k8s.io/kubernetes/cmd/kube-controller-manager",
         KUBERNETES),
    Part("kube-scheduler", "kubernetes", "k8s.io/kubernetes/cmd/kube-scheduler", KUBERNETES),
    Part("kuberay-operator", "kuberay", "github.com/ray-project/kuberay/ray-operator", KUBERAY),
    Part("raychaos-kubelet", "kubelet", ".", f"{VIRTUAL_KUBELET}-{_source_digest('kubelet')}"),
)}


class BuildError(RaychaosError):
    """A part of the test bed could not be built (no Go, no module proxy, a compile error)."""


def cache_dir() -> Path:
    return Path(os.environ.get("RAYCHAOS_TESTBED_CACHE")
                or Path.home() / ".cache" / "raychaos" / "testbed")


def go_env() -> dict[str, str]:
    """The environment of every ``go`` command: caches of our own, the module file as written
    (``-mod=mod`` fills go.sum on the first build), no VCS stamping, the local toolchain."""
    root = cache_dir() / "go"
    env = dict(os.environ)
    env.update(GOPATH=str(root), GOMODCACHE=str(root / "mod"), GOCACHE=str(root / "build"),
               GOFLAGS="-mod=mod -buildvcs=false", GOTOOLCHAIN="local", CGO_ENABLED="0")
    return env


def _go() -> str:
    go = shutil.which("go") or ("/usr/local/go/bin/go" if os.path.exists("/usr/local/go/bin/go")
                                else None)
    if go is None:
        raise BuildError("the test bed is built from Go modules and needs the go command "
                         "(Go 1.26): none on PATH or at /usr/local/go/bin/go")
    return go


def path_of(name: str) -> Path:
    part = PARTS[name]
    return cache_dir() / "bin" / f"{part.name}-{part.version}"


def build(name: str, say: Callable[[str], None] = print) -> Path:
    """The part's binary, built first if it is missing (one progress line, one time line)."""
    out = path_of(name)
    if out.exists():
        return out
    part = PARTS[name]
    out.parent.mkdir(parents=True, exist_ok=True)
    say(f"testbed: building {part.name} {part.version} from {part.package} "
        "(once per version; minutes the first time)")
    t0 = time.monotonic()
    tmp = out.with_name(out.name + ".partial")
    cmd = [_go(), "build", "-trimpath", f"-ldflags=-s -w {_stamp(part)}", "-o", str(tmp),
           part.package]
    proc = subprocess.run(cmd, cwd=HERE / part.module, env=go_env(), capture_output=True,
                          text=True, check=False)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
        raise BuildError(f"building {part.name} {part.version} failed "
                         f"(go build {part.package}, exit {proc.returncode}):\n{tail}")
    tmp.replace(out)
    say(f"testbed: built {part.name} {part.version} in {time.monotonic() - t0:.0f} s -> {out}")
    return out


def _stamp(part: Part) -> str:
    """The version Kubernetes' own build stamps into its binaries (``/version`` answers it; a
    client that checks the server's minor version reads it): without it, v0.0.0-master."""
    if part.module != "kubernetes":
        return ""
    major, minor = part.version.lstrip("v").split(".")[:2]
    flags = []
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [f"-X {pkg}.gitVersion={part.version}", f"-X {pkg}.gitMajor={major}",
                  f"-X {pkg}.gitMinor={minor}", f"-X {pkg}.gitTreeState=clean"]
    return " ".join(flags)


def build_all(say: Callable[[str], None] = print, kubelet: bool = True) -> dict[str, Path]:
    return {name: build(name, say) for name in PARTS
            if kubelet or name != "raychaos-kubelet"}


def crd_dir() -> Path:
    """KubeRay's CRDs (``config/crd/bases``) from the operator module's download."""
    proc = subprocess.run([_go(), "list", "-m", "-f", "{{.Dir}}",
                           "github.com/ray-project/kuberay/ray-operator"],
                          cwd=HERE / "kuberay", env=go_env(), capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise BuildError(f"KubeRay's module is not downloaded: {proc.stderr.strip()}")
    return Path(proc.stdout.strip()) / "config" / "crd" / "bases"
