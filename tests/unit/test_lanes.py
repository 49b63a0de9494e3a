"""``tests/_lanes.py``: the light work of ``make test`` runs in a CPU group of low weight, which
is gone afterwards, and the command's exit status comes through."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from raychaos.targets.local.cpu import cpu_groups

pytestmark = pytest.mark.skipif(cpu_groups() is None, reason="needs a CPU controller (root)")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_a_command_runs_in_a_weight_2_group_that_is_removed_after():
    groups = cpu_groups()
    assert groups is not None
    show = ("import os, sys; g = [l.split(':', 2)[2] for l in open('/proc/self/cgroup')"
            " if 'cpu' in l.split(':')[1].split(',')][0].strip();"
            " print(g); print(open(f'{sys.argv[1]}{g}/' + sys.argv[2]).read().strip());"
            " sys.exit(3)")
    weight = "cpu.shares" if groups.version == 1 else "cpu.weight"
    ran = subprocess.run([sys.executable, "-m", "tests._lanes", "--shares", "2", sys.executable,
                          "-c", show, str(groups.root), weight],
                         cwd=REPO, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 3, ran.stderr
    group, value = ran.stdout.split()
    assert group.startswith("/rc-light-cmd-") and value in ("2", "1"), ran.stdout
    assert not groups.path(group.lstrip("/")).exists()
