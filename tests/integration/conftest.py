"""The integration tier's one local cluster, shared by every module that needs the standard
shape (head + 2 workers, one with a GPU, GCS FT on rocksdb): started once for the package,
restored and proven clean between modules (``_experiments.module_cluster``), and torn down
after the last one — the teardown proves nothing is left. A module that needs other settings
(the negative control, without GCS fault tolerance) starts its own."""

from __future__ import annotations

import pytest

from ._experiments import NOTHING_LEFT, WARM


@pytest.fixture(scope="package")
def warm_cluster(tmp_path_factory):
    from raychaos.config.settings import LocalClusterSpec
    from raychaos.targets.local.target import LocalTarget

    root = tmp_path_factory.mktemp("warm-state")
    target = LocalTarget(LocalClusterSpec(name=WARM, head_restart_delay_s=1), state_root=root)
    try:
        target.up()
        yield target, root
    finally:
        target.down()
        assert target.leftovers() == NOTHING_LEFT


# The modules that run the head-kill experiment (with its Serve application) run last and
# together, so the application the first one deploys is reused by the others instead of being
# removed in between for a module that needs the whole GPU (the drain test).
LAST = {"test_head_kill.py": 1, "test_pipelines.py": 2}


def pytest_collection_modifyitems(items):
    slots = [i for i, item in enumerate(items) if "integration" in item.path.parts]
    ours = sorted((items[i] for i in slots), key=lambda item: LAST.get(item.path.name, 0))
    for i, item in zip(slots, ours, strict=True):
        items[i] = item
