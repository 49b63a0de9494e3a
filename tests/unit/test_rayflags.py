"""Ray 2.60's fault flags: every spec checked completely before a node sees it (Ray kills the
process on a malformed one), rendered exactly as Ray parses it, and the method names pinned to
what the installed Ray 2.60 really calls (its protos and its binaries)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from raychaos.config.rayflags import (
    ASIO_DELAY_ENV,
    CLIENT_METHODS,
    GCS_HANDLERS,
    RAY_VERSION,
    RPC_FAILURE_ENV,
    asio_delay_env,
    asio_delay_problems,
    rpc_failure_env,
    rpc_failure_problems,
)

pytestmark = pytest.mark.unit

LEASE = "NodeManagerService.grpc_client.RequestWorkerLease"
NODES = "ray::rpc::NodeInfoGcsService.grpc_client.GetAllNodeInfo"


def test_a_valid_spec_renders_rays_json_in_whole_percents():
    env = rpc_failure_env({LEASE: {"num_failures": -1, "req_failure_prob": 0.25,
                                   "resp_failure_prob": 0.1, "num_lower_bound_req_failures": 2}})
    assert json.loads(env[RPC_FAILURE_ENV]) == {LEASE: {
        "num_failures": -1, "req_failure_prob": 25, "resp_failure_prob": 10,
        "num_lower_bound_req_failures": 2}}
    as_text = json.dumps({"*": {"num_failures": 3, "in_flight_failure_prob": 0.5}})
    assert rpc_failure_problems(as_text) == []
    assert json.loads(rpc_failure_env(as_text)[RPC_FAILURE_ENV]) == {
        "*": {"num_failures": 3, "in_flight_failure_prob": 50}}


@pytest.mark.parametrize("spec,fragment", [
    ('{"x": ', "is not valid JSON"),
    ([LEASE], "expected a mapping of RPC method -> failures"),
    ({}, "is empty"),
    ({"NodeInfoGcsService.grpc_client.GetAllNodeInfo": {"num_failures": 1,
                                                         "req_failure_prob": 0.5}},
     f"did you mean {NODES!r}"),
    ({"NodeManagerService.grpc_client.RequestWorkerLeese": {"num_failures": 1}},
     f"did you mean {LEASE!r}"),
    ({LEASE: {"num_failures": -1, "req_failure_prob": 1.5}}, "must be in [0, 1], got 1.5"),
    ({LEASE: {"num_failures": -1, "req_failure_prob": 25}}, "not Ray's percent: 25% is 0.25"),
    ({LEASE: {"num_failures": -1, "req_failure_prob": -0.1}}, "must be in [0, 1], got -0.1"),
    ({LEASE: {"num_failures": -1, "req_failure_prob": 0.125}}, "whole percents"),
    ({LEASE: {"num_failures": -1, "req_failure_prob": 0.6, "resp_failure_prob": 0.5}},
     "exceeds 1"),
    ({LEASE: {"req_failure_prob": 0.5}}, "num_failures: must be -1 (unlimited) or at least 1"),
    ({LEASE: {"num_failures": -1}}, "nothing would fail"),
    ({LEASE: {"num_failures": -1, "req_failure_prob": 0.1, "colour": 1}}, "colour: unknown key"),
    ({LEASE: 5}, "expected a mapping of num_failures"),
    ({"*": {"num_failures": -1, "req_failure_prob": 0.1},
      LEASE: {"num_failures": -1, "req_failure_prob": 0.1}}, "the wildcard overrides"),
])
def test_every_malformed_spec_is_refused_with_the_key(spec, fragment):
    problems = rpc_failure_problems(spec)
    assert problems, spec
    assert any(fragment in f"{where}: {message}" for where, message in problems), problems


def test_slow_gcs_renders_the_handlers_ray_posts_and_refuses_bad_ranges():
    env = asio_delay_env(["NodeInfoGcsService.GetAllNodeInfo"], 200, 400.5)
    assert env == {ASIO_DELAY_ENV: "NodeInfoGcsService.grpc_server.GetAllNodeInfo"
                                   ".HandleRequestImpl=200000:400500"}
    every = asio_delay_env(None, 10, 10)[ASIO_DELAY_ENV].split(",")
    assert len(every) == len(GCS_HANDLERS) > 50
    assert all(item.endswith(".HandleRequestImpl=10000:10000") for item in every)
    assert asio_delay_problems(["NodeInfoGcsService.GetAllNodes"], 1, 2)[0][1].endswith(
        "(did you mean 'NodeInfoGcsService.GetAllNodeInfo'?)")
    assert asio_delay_problems(None, 5, 1) == [("min_ms", "is above max_ms (5 > 1): Ray exits "
                                                "on a delay range whose minimum is bigger than "
                                                "its maximum")]
    assert asio_delay_problems(["*"], 1, 2)[0][0] == "methods[0]"
    assert asio_delay_problems([], 1, 2)[0][0] == "methods"
    assert asio_delay_problems(None, 0, 0)[0][0] == "max_ms"
    assert asio_delay_problems(None, 0.0001, 1)[0][0] == "min_ms"


def _generated_services() -> dict[str, set[str]]:
    import importlib
    import pkgutil

    import ray.core.generated as generated

    out: dict[str, set[str]] = {}
    for info in pkgutil.iter_modules(generated.__path__):
        if info.name.endswith("_pb2"):
            module = importlib.import_module(f"ray.core.generated.{info.name}")
            for service in module.DESCRIPTOR.services_by_name.values():
                out.setdefault(service.name, set()).update(m.name for m in service.methods)
    return out


def test_the_method_names_are_the_installed_ray_260s():
    import ray

    assert ray.__version__ == RAY_VERSION
    services = _generated_services()
    for name in CLIENT_METHODS | {s.replace(".", ".grpc_client.") for s in GCS_HANDLERS}:
        service, method = name.rsplit("::", 1)[-1].split(".grpc_client.")
        if service == "ObjectManagerService":  # no Python module generated for it
            continue
        assert method in services.get(service, set()), name


def _names(path: Path, marker: bytes) -> set[str]:
    """Every ``<Service>{marker}<Method>`` string in a binary (a plain scan: regexes over 40 MB
    are slow)."""
    data, out, at = path.read_bytes(), set(), 0
    word = re.compile(rb"[A-Za-z:]+$")
    while (at := data.find(marker, at)) >= 0:
        left = word.search(data[max(0, at - 80):at])
        right = re.match(rb"[A-Za-z]+", data[at + len(marker):at + len(marker) + 80])
        if left and right:
            out.add((left.group() + marker + right.group()).decode())
        at += len(marker)
    return out


def test_every_gcs_client_call_in_the_ray_binary_is_known_and_vice_versa():
    import ray

    found = {n for n in _names(Path(ray.__file__).parent / "_raylet.so", b".grpc_client.")
             if n.startswith("ray::rpc::")}
    assert len(found) > 50
    assert found - CLIENT_METHODS == set()
    assert {m for m in CLIENT_METHODS if m.startswith("ray::rpc::")} - found == set()
    server = Path(ray.__file__).parent / "core/src/ray/gcs/gcs_server"
    handlers = {n.replace(".grpc_server.", ".") for n in _names(server, b".grpc_server.")}
    # the linker merges a few strings (e.g. "...PinRuntimeEnvURRayEventExportGcsService"):
    # every handler that appears whole is known, and all but those few appear whole
    assert {h for h in handlers if h.split(".")[0] in {g.split(".")[0] for g in GCS_HANDLERS}
            } <= set(GCS_HANDLERS)
    assert len(set(GCS_HANDLERS) - handlers) <= 2, set(GCS_HANDLERS) - handlers


def test_health_check_knobs_are_the_heads_environment(tmp_path):
    from raychaos.config.settings import LocalClusterSpec
    from raychaos.targets.local.network.pods import PodNetwork
    from raychaos.targets.local.plan import plan_nodes

    spec = LocalClusterSpec(name="hc", health_check_period_ms=1000,
                            health_check_timeout_ms=2000, health_check_failure_threshold=3)
    head, *workers = plan_nodes(spec, tmp_path, PodNetwork("hc"), "netns")
    assert {k: v for k, v in head.env.items() if "health" in k} == {
        "RAY_health_check_period_ms": "1000", "RAY_health_check_timeout_ms": "2000",
        "RAY_health_check_failure_threshold": "3"}
    assert not any("health" in k for w in workers for k in w.env)
    default, *_ = plan_nodes(LocalClusterSpec(name="hc"), tmp_path, PodNetwork("hc"), "netns")
    assert not any("health" in k for k in default.env)  # Ray's own defaults


def test_worker_nodes_keep_idle_workers_as_a_production_node_would(tmp_path):
    """Every worker node gets ``RAY_num_workers_soft_limit`` (8 unless set; None: Ray's one
    per CPU), the head none; and the Ray binary reads that variable (a renamed knob would be
    ignored without a word)."""
    import ray

    from raychaos.config.settings import LocalClusterSpec
    from raychaos.targets.local.network.pods import PodNetwork
    from raychaos.targets.local.plan import plan_nodes

    head, *workers = plan_nodes(LocalClusterSpec(name="sl"), tmp_path, PodNetwork("sl"), "netns")
    assert "RAY_num_workers_soft_limit" not in head.env
    assert workers and all(w.env["RAY_num_workers_soft_limit"] == "8" for w in workers)
    _, *ray_default = plan_nodes(LocalClusterSpec(name="sl", num_workers_soft_limit=None),
                                 tmp_path, PodNetwork("sl"), "netns")
    assert not any("RAY_num_workers_soft_limit" in w.env for w in ray_default)
    raylet = Path(ray.__file__).parent / "core" / "src" / "ray" / "raylet" / "raylet"
    assert b"RAY_num_workers_soft_limit" in raylet.read_bytes()
