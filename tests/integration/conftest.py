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
