"""Names and label values of the objects the Kubernetes target creates are valid for the API
server (a run id like ``20261201T133913Z-registry-throttle-385626`` is not: upper case, and too
long once prefixed), and cut names stay distinct per node."""

from __future__ import annotations

import re

from raychaos.targets.kubernetes.safety import label_value, object_name, run_labels

RFC1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LABEL = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
RUN = "20261201T133913Z-registry-throttle-385626"


def test_object_names_are_rfc1123_and_distinct_when_cut():
    names = [object_name("raychaos-throttle-clean", RUN, node) for node in
             ("gpu-a", "gpu-b", "head-0", "cpu-0")]
    assert all(RFC1123.match(n) and len(n) <= 63 for n in names), names
    assert len(set(names)) == 4, "a cut name keeps a hash of the whole"
    assert object_name("raychaos-pull-throttle", "run1") == "raychaos-pull-throttle-run1"


def test_label_values_are_valid_and_stable():
    long = RUN + "-a-very-long-experiment-name-that-goes-on-and-on"
    for text in (RUN, long, "-odd_.", "x" * 80):
        value = label_value(text)
        assert LABEL.match(value) and len(value) <= 63, value
        assert label_value(text) == value
    assert run_labels(RUN)["raychaos.io/run-id"] == RUN
