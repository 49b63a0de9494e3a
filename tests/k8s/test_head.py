"""Head kill and watch-based recovery: the fake replaces a deleted head with a new UID."""

from __future__ import annotations

import pytest

from raychaos.errors import FaultFailed

pytestmark = pytest.mark.k8s


def test_kill_head_pod_deletes_with_grace_in_body_and_watch_sees_new_uid(fake, target):
    fake.head_replace_delay = 0.2
    old = target.head_identity()
    record: dict = {"fault": "kill_head"}
    evidence = target.kill_head("pod", record)
    assert record["undo"] == {"kind": "kill_head", "mode": "pod", "namespace": "ray",
                              "pod": old["pod"], "uid": old["uid"]}
    deletes = [(m, p, b) for m, p, _, b in fake.requests if m == "DELETE"]
    assert deletes == [("DELETE", f"/api/v1/namespaces/ray/pods/{old['pod']}",
                        deletes[0][2])]
    assert deletes[0][2]["gracePeriodSeconds"] == 0  # in the body, not the query
    back = target.wait_head_back(evidence["old"], timeout=5)
    assert back["recovered"] and back["uid_changed"] and back["via"] == "watch"
    assert back["new_uid"] != old["uid"] and back["old_uid"] == old["uid"]
    assert back["seconds"] >= 0.2
    assert back["detected_at"] - fake.ready_events[back["new_uid"]] < 0.5
    watches = [p for m, p, v, _ in fake.requests if v == "watch"]
    assert watches and "resourceVersion=" in watches[0]
    assert target.undo(record)["undone"]


def test_wait_head_back_relists_after_410_gone(fake, target):
    fake.head_replace_delay = 0.3
    evidence = target.kill_head("pod", {})
    fake.compacted_rv = 10**9  # every watch is "too old" (etcd compaction) ...

    def uncompact() -> None:
        fake.compacted_rv = 0  # ... until the history is readable again

    fake.later(0.1, uncompact)
    back = target.wait_head_back(evidence["old"], timeout=5)
    assert back["recovered"] and back["uid_changed"]
    assert back["lists"] >= 2  # each 410 Gone was answered by listing again
    gone = [p for m, p, v, _ in fake.requests if v == "watch"]
    assert len(gone) >= 2


def test_wait_head_back_counts_restart_as_back(fake, target):
    old = target.head_identity()
    with fake.lock:
        pod = fake.store["pods"][("ray", old["pod"])]
        pod["status"]["containerStatuses"][0]["restartCount"] = 1
        fake.put("pods", pod)
    back = target.wait_head_back(old, timeout=2)
    assert back["recovered"] and not back["uid_changed"] and back["restart_count"] == 1
    assert back["via"] == "list"


def test_wait_head_back_times_out_with_evidence(fake, target):
    fake.head_replace_delay = 30
    evidence = target.kill_head("pod", {})
    back = target.wait_head_back(evidence["old"], timeout=1)
    assert back["recovered"] is False and "new_uid" not in back


def test_kill_head_unknown_mode(target):
    with pytest.raises(FaultFailed, match="unknown mode 'nuke'"):
        target.kill_head("nuke", {})


def test_kill_gcs_plans_exec_in_dry_run(fake, make_target):
    target = make_target(dry_run=True)
    old = target.head_identity()
    evidence = target.kill_head("gcs", {})
    assert evidence["dry_run"]
    assert target.planned_calls() == [{
        "method": "POST", "path": f"/api/v1/namespaces/ray/pods/{old['pod']}/exec",
        "body": {"container": "ray-head", "command": ["pkill", "-KILL", "gcs_server"]}}]
    assert fake.mutating_requests() == []
