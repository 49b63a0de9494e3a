"""The two lanes ``make test`` runs (tests/conftest.py): which test runs where."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import SIMULATED_K8S, lane

K8S = Path(__file__).resolve().parents[1] / "k8s"


def test_every_simulated_module_named_exists():
    assert sorted(SIMULATED_K8S - {p.name for p in K8S.glob("test_*.py")}) == []


def test_real_clusters_run_in_one_lane_and_the_rest_in_the_light_one():
    assert lane("tests/integration/test_catalog.py::test_catalog_experiment[gpu-node-drain]") \
        == "real-clusters"
    assert lane("tests/k8s/test_world_ray.py::test_x") == "real-clusters"
    # the test bed (the real control plane), whatever its modules are called
    assert lane("tests/k8s/bed/test_catalog.py::test_x[y]") == "real-clusters"
    assert lane("tests/k8s/bed/test_drain.py::test_x") == "real-clusters"
    assert lane("tests/k8s/test_world_api.py::test_selectors") == "light"
    assert lane("tests/unit/test_verdict.py::test_x") == "light"
    # a module nobody classified runs with the real clusters: slower, never starved at nice 19
    assert lane("tests/k8s/test_new_thing.py::test_y") == "real-clusters"


def test_the_real_world_modules_are_not_in_the_light_lane():
    real = {p.name for p in K8S.glob("test_*.py")
            if "raychaos-world-tests" in p.read_text() or "real pods need root" in p.read_text()}
    assert real, "the k8s tier has modules with real pods"
    assert real & SIMULATED_K8S == set()
