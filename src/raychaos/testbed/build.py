"""Build the test bed's real parts from their Go modules, once per version.

Each part is an ordinary ``go build`` of a published module at one release. Two build modules:

- ``build/bed``: ``kube-apiserver``, ``kube-controller-manager``, ``kube-scheduler`` from
  ``k8s.io/kubernetes`` (the module requires that release and replaces each staging module,
  which k8s.io/kubernetes points at local paths, with the same release's published ``v0.x`` —
  the usual way to build Kubernetes outside its own tree); ``etcd`` from
  ``go.etcd.io/etcd/server/v3`` (``./etcd``, a three-line main of ours calls ``etcdmain``); and
  ``raychaos-kubelet`` (``./kubelet``): ``github.com/virtual-kubelet/virtual-kubelet``'s node
  and pod controllers with a provider of ours that hands each pod to the bed's node agent.
  One module, one build list: what they share (k8s.io/api, client-go, apiserver, grpc, etcd's
  client, ...) is downloaded and compiled once.
- ``build/kuberay``: ``kuberay-operator`` from ``github.com/ray-project/kuberay/ray-operator``
  (its go.mod has no replace directives; it is built against k8s.io v0.34 and
  controller-runtime v0.22, which do not compile with v0.36), with the CRDs of the same
  module's ``config/crd``.

Binaries land in ``<cache>/bin/<part>-<version>-<digest>`` (``RAYCHAOS_TESTBED_CACHE``, default
``~/.cache/raychaos/testbed``): the digest is of the build module's go.mod and go.sum and of the
part's own source, so a change to the build list or to our provider is a new binary. The module
and build caches sit beside them. A part already built is never built again; the parts missing
from one module are built by one ``go build``, which compiles what they share once and in
parallel.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from raychaos.errors import RaychaosError

__all__ = ["PARTS", "Part", "build", "build_all", "cache_dir", "chaos_mesh_crds", "crd_dir",
           "go_env", "path_of"]

HERE = Path(__file__).resolve().parent / "build"
KUBERNETES = "v1.36.3"
ETCD = "v3.7.3"
KUBERAY = "v1.5.0"
VIRTUAL_KUBELET = "v1.14.1"
#: Chaos Mesh's release tags (v2.x) are not versions of its module path (it has no /v2), so
#: the module proxy serves it by commit: master of 2026-09-02. Only its CRDs are used.
CHAOS_MESH = "v0.9.1-0.20260902003049-47411975a8cb"
CHAOS_MESH_CRDS = ("networkchaos",)


def _digest(module: str, own: str | None) -> str:
    """The build module's go.mod and go.sum, and the part's own folder of source if any."""
    h = hashlib.sha256()
    files = [HERE / module / "go.mod", HERE / module / "go.sum"]
    if own:
        files += sorted((HERE / module / own).glob("*.go"))
    for f in files:
        h.update(f.name.encode() + f.read_bytes())
    return h.hexdigest()[:10]


@dataclass(frozen=True)
class Part:
    name: str
    module: str  # the build module's folder under build/
    package: str  # what ``go build`` builds
    release: str  # the release of the module it comes from

    @property
    def version(self) -> str:
        return f"{self.release}-{_digest(self.module, self._own())}"

    def _own(self) -> str | None:
        return self.package[2:] if self.package.startswith("./") else None

    @property
    def output(self) -> str:
        """The file ``go build -o DIR/`` names it: the package path's last element."""
        return self.package.rstrip("/").rsplit("/", 1)[-1]


PARTS: dict[str, Part] = {p.name: p for p in (
    Part("etcd", "bed", "./etcd", ETCD),
    Part("kube-apiserver", "bed", "k8s.io/kubernetes/cmd/kube-apiserver", KUBERNETES),
    Part("kube-controller-manager", "bed", "k8s.io/kubernetes/cmd/kube-controller-manager",
         KUBERNETES),
    Part("kube-scheduler", "bed", "k8s.io/kubernetes/cmd/kube-scheduler", KUBERNETES),
    Part("kuberay-operator", "kuberay", "github.com/ray-project/kuberay/ray-operator", KUBERAY),
    Part("raychaos-kubelet", "bed", "./kubelet", VIRTUAL_KUBELET),
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
    return _build_module([PARTS[name]], say)[name]


def _build_module(parts: list[Part], say: Callable[[str], None]) -> dict[str, Path]:
    """Parts of one build module: those missing built by one ``go build -o DIR/``. One build
    of a module at a time on this machine (a lock file beside the binaries): a second caller —
    a test that needs the bed while ``make test``'s background build is still going — waits for
    the first and then finds its parts built."""
    if all(path_of(p.name).exists() for p in parts):
        return {p.name: path_of(p.name) for p in parts}
    bindir = cache_dir() / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    with open(bindir / f".lock-{parts[0].module}", "w") as lock:
        if _locked_elsewhere(lock):
            say(f"testbed: waiting for another build of build/{parts[0].module} to finish")
            t0 = time.monotonic()
            fcntl.flock(lock, fcntl.LOCK_EX)
            say(f"testbed: waited {time.monotonic() - t0:.0f} s for it")
        return _build_locked(parts, say)


def _locked_elsewhere(lock: Any) -> bool:
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    return False


def _build_locked(parts: list[Part], say: Callable[[str], None]) -> dict[str, Path]:
    missing = [p for p in parts if not path_of(p.name).exists()]
    if missing:
        module = missing[0].module
        names = ", ".join(f"{p.name} {p.release}" for p in missing)
        say(f"testbed: building {names} from build/{module} (once per version; minutes the "
            "first time)")
        t0 = time.monotonic()
        bindir = cache_dir() / "bin"
        tmp = bindir / f".partial-{module}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        try:
            cmd = [_go(), "build", "-trimpath", f"-ldflags=-s -w {_stamp(module)}",
                   "-o", f"{tmp}/", *(p.package for p in missing)]
            proc = subprocess.run(cmd, cwd=HERE / module, env=go_env(), capture_output=True,
                                  text=True, check=False)
            if proc.returncode != 0:
                tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
                raise BuildError(f"building {names} failed (go build in build/{module}, exit "
                                 f"{proc.returncode}):\n{tail}")
            for p in missing:
                (tmp / p.output).replace(path_of(p.name))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        say(f"testbed: built {names} in {time.monotonic() - t0:.0f} s -> {bindir}")
    return {p.name: path_of(p.name) for p in parts}


def _stamp(module: str) -> str:
    """The version Kubernetes' own build stamps into its binaries (``/version`` answers it; a
    client that checks the server's minor version reads it): without it, v0.0.0-master. Only
    Kubernetes' packages read these variables, so etcd and the kubelet built beside it are
    unchanged by them."""
    if module != "bed":
        return ""
    major, minor = KUBERNETES.lstrip("v").split(".")[:2]
    flags = []
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [f"-X {pkg}.gitVersion={KUBERNETES}", f"-X {pkg}.gitMajor={major}",
                  f"-X {pkg}.gitMinor={minor}", f"-X {pkg}.gitTreeState=clean"]
    return " ".join(flags)


def build_all(say: Callable[[str], None] = print, kubelet: bool = True) -> dict[str, Path]:
    """Every part (without the kubelet unless ``kubelet``), each module's missing parts built
    together."""
    wanted = [p for p in PARTS.values() if kubelet or p.name != "raychaos-kubelet"]
    out: dict[str, Path] = {}
    for module in dict.fromkeys(p.module for p in wanted):
        out.update(_build_module([p for p in wanted if p.module == module], say))
    return {p.name: out[p.name] for p in wanted}


def chaos_mesh_crds() -> list[Path]:
    """Chaos Mesh's own CRDs (``config/crd/bases``) the bed installs, from its module's
    download (fetched once into the bed's module cache)."""
    cache_dir().mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([_go(), "mod", "download", "-json",
                           f"github.com/chaos-mesh/chaos-mesh@{CHAOS_MESH}"],
                          cwd=cache_dir(), env=go_env(), capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0:
        raise BuildError(f"Chaos Mesh's module {CHAOS_MESH} could not be downloaded: "
                         f"{(proc.stderr or proc.stdout).strip()[-500:]}")
    bases = Path(json.loads(proc.stdout)["Dir"]) / "config" / "crd" / "bases"
    return [bases / f"chaos-mesh.org_{plural}.yaml" for plural in CHAOS_MESH_CRDS]


def crd_dir() -> Path:
    """KubeRay's CRDs (``config/crd/bases``) from the operator module's download."""
    proc = subprocess.run([_go(), "list", "-m", "-f", "{{.Dir}}",
                           "github.com/ray-project/kuberay/ray-operator"],
                          cwd=HERE / "kuberay", env=go_env(), capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise BuildError(f"KubeRay's module is not downloaded: {proc.stderr.strip()}")
    return Path(proc.stdout.strip()) / "config" / "crd" / "bases"
