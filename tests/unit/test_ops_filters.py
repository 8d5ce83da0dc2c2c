"""Filters of teardown.yml and logs.yml: strict switches, the attempt to gather, the teardown's refusal
and purge guard, the per-node log report."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.rlinfra.verl.plugins.filter.node_logs_report import node_logs_report
from ansible_collections.rlinfra.verl.plugins.filter.pick_attempt import pick_attempt
from ansible_collections.rlinfra.verl.plugins.filter.ray_teardown import ray_teardown_refusal
from ansible_collections.rlinfra.verl.plugins.filter.switches import parse_switches, strict_bool

BASE = "rlinfra-smoke-default"


@pytest.mark.parametrize(
    "value, expected",
    [
        (True, True),
        (False, False),
        (1, True),
        (0, False),
        ("true", True),
        ("TRUE", True),
        (" Yes ", True),
        ("1", True),
        ("false", False),
        ("No", False),
        ("0", False),
        ("FALSE", False),
    ],
)
def test_strict_bool_accepts_the_usual_spellings(value, expected):
    assert strict_bool(value, "teardown_purge") is expected


@pytest.mark.parametrize("value", ["ture", "", "on", "y", 2, -1, None, 1.0, [], "truee"])
def test_strict_bool_refuses_anything_else(value):
    with pytest.raises(
        AnsibleFilterError, match=r"^teardown_purge must be true or false \(also yes/no/1/0, any case\)"
    ):
        strict_bool(value, "teardown_purge")


def test_parse_switches_collects_every_error():
    out = parse_switches({"teardown_stop_jobs": "ture", "teardown_purge": "yes", "x": 2})
    assert out["values"] == {"teardown_purge": True}
    assert out["errors"] == [
        "teardown_stop_jobs must be true or false (also yes/no/1/0, any case), got 'ture'",
        "x must be true or false (also yes/no/1/0, any case), got 2 (int)",
    ]
    assert parse_switches({"a": False, "b": "1"}) == {"values": {"a": False, "b": True}, "errors": []}
    with pytest.raises(AnsibleFilterError):
        parse_switches(["a"])


JOBS = [
    dict(submission_id=BASE, status="FAILED"),
    dict(submission_id=BASE + "-2", status="SUCCEEDED"),
    dict(submission_id=BASE + "-a2", status="FAILED"),
    dict(submission_id=BASE + "-a3", status="RUNNING"),
    dict(submission_id="rlinfra-other-default", status="RUNNING"),
]


def test_pick_attempt_newest_or_the_one_asked_for():
    newest = pick_attempt(JOBS, BASE)
    assert (newest["submission_id"], newest["attempt"], newest["status"], newest["attempts"], newest["error"]) == (
        BASE + "-a3",
        3,
        "RUNNING",
        [1, 2, 3],
        "",
    )
    assert pick_attempt(JOBS, BASE, "")["attempt"] == 3
    assert pick_attempt(JOBS, BASE, "1")["submission_id"] == BASE
    assert pick_attempt(JOBS, BASE, 2)["submission_id"] == BASE + "-a2"
    # another run of the same experiment is not an attempt of this one
    assert pick_attempt(JOBS, BASE + "-2")["submission_id"] == BASE + "-2"


@pytest.mark.parametrize(
    "attempt, message",
    [
        ("4", "attempt 4 of %s (%s-a4) does not exist; its attempts: 1, 2, 3" % (BASE, BASE)),
        (
            "x",
            "attempt must be a whole number from 1 to 1000000, got 'x' (-e attempt=K, or leave it out for the newest)",
        ),
        (
            "0",
            "attempt must be a whole number from 1 to 1000000, got '0' (-e attempt=K, or leave it out for the newest)",
        ),
        (
            True,
            "attempt must be a whole number from 1 to 1000000, got True (-e attempt=K, or leave it out for the newest)",
        ),
        ("1.5", "attempt must be a whole number from 1"),
    ],
)
def test_pick_attempt_errors_in_one_line(attempt, message):
    out = pick_attempt(JOBS, BASE, attempt)
    assert out["submission_id"] is None and out["error"].startswith(message) and "\n" not in out["error"]


def test_pick_attempt_of_a_run_never_submitted():
    out = pick_attempt(JOBS, "rlinfra-smoke-b")
    assert out["error"] == (
        "rlinfra-smoke-b was never submitted to this cluster (no job rlinfra-smoke-b or "
        "rlinfra-smoke-b-aN in its Jobs API): check -e exp, -e run and -e cluster"
    )
    assert pick_attempt(None, BASE)["attempts"] == []


class _HostVars(dict):
    """hostvars as filters see them: hostvars[host].get(name)."""


def _hostvars(**checks):
    return _HostVars({h: ({"ray_teardown__check": c} if c is not None else {}) for h, c in checks.items()})


def test_teardown_refusal_names_the_running_jobs_and_the_switch():
    hv = _hostvars(
        h1=dict(cluster="a", running=[dict(submission_id="rlinfra-x-a", status="RUNNING")], error=""),
        h2=dict(cluster="b", running=[dict(submission_id="rlinfra-y-b", status="PENDING")], error=""),
        h3=None,
    )
    msg = ray_teardown_refusal(["h1", "h2", "h3"], hv)
    assert msg == (
        "refusing to tear down Ray: 2 job(s) still running: rlinfra-x-a (RUNNING, cluster a), rlinfra-y-b "
        "(PENDING, cluster b); stop them first (stop.yml -e exp=NAME) or re-run with -e teardown_stop_jobs=true "
        "to stop them"
    )
    assert ray_teardown_refusal(["h1", "h2"], hv, True) == ""


def test_teardown_refusal_when_the_jobs_cannot_be_listed_but_not_for_an_unreachable_head():
    hv = _hostvars(
        h1=dict(cluster="a", running=[], error="HTTP 403"), h2=None, h3=dict(cluster="c", running=[], error="")
    )
    assert "the jobs of Ray cluster(s) a (head h1: HTTP 403) could not be listed" in ray_teardown_refusal(["h1"], hv)
    assert ray_teardown_refusal(["h2", "h3", "missing"], hv) == ""


def _collected(host, **res):
    base = dict(
        item=host,
        changed=False,
        files=[dict(name="raylet.out", truncated=False)],
        redactions=0,
        skipped=[],
        notes=[],
        job_id="02000000",
        driver_log=None,
        bundle="/tmp/x/logs.tar.gz",
    )
    base.update(res)
    return base


def test_node_logs_report_per_host():
    collected = [
        _collected(
            "h1",
            files=[dict(name="raylet.out", truncated=True), dict(name="job-driver-x.log", truncated=False)],
            redactions=2,
            driver_log="job-driver-x.log",
            notes=["kernel log unavailable (dmesg: denied)"],
        ),
        dict(item="h2", unreachable=True, msg="Failed to connect to the host via ssh\nmore", changed=False),
        _collected("h3", skipped=[dict(name="worker-1.out")]),
        dict(item="h4", failed=True, msg="cannot write the log bundle"),
        _collected("h5"),
    ]
    fetched = [
        dict(item=dict(item="h1"), changed=True),
        dict(item=dict(item="h3"), changed=True),
        dict(item=dict(item="h5"), failed=True, msg="file not found"),
    ]
    out = node_logs_report(collected, fetched)
    assert out["ok"] == ["h1", "h3"] and out["job_id"] == "02000000" and out["driver_hosts"] == ["h1"]
    assert out["hosts"]["h2"]["status"] == "unreachable" and out["hosts"]["h4"]["status"] == "failed"
    assert out["hosts"]["h5"]["error"] == "the bundle could not be fetched: file not found"
    assert out["lines"] == [
        "h1: 2 file(s), 1 cut to their tail, 2 value(s) masked - kernel log unavailable (dmesg: denied)",
        "h2: unreachable - Failed to connect to the host via ssh",
        "h3: 1 file(s), 1 left out (size budget)",
        "h4: failed - cannot write the log bundle",
        "h5: failed - the bundle could not be fetched: file not found",
    ]


def test_node_logs_report_check_mode_and_missing_driver():
    out = node_logs_report([_collected("h1", bundle=None)], [], True)
    assert out["hosts"]["h1"]["status"] == "planned" and out["ok"] == []
    assert out["lines"] == [
        "h1: 1 file(s) (would be collected)",
        "no node had the job's driver log (the driver never started, or its node is not listed)",
    ]


def test_worker_head_finds_the_one_head_of_the_workers_cluster_and_its_address():
    from ansible_collections.rlinfra.verl.plugins.filter.ray_cluster import worker_head

    hostvars = {
        "h1": {"ray_node_ip": "10.0.0.1"},
        "h2": {"ray_cluster": "b", "ansible_local": {"rlinfra_ray": {"node_ip": "10.0.0.2"}}},
        "h3": {"ray_cluster": "c"},
        "w": {},
        "wb": {"ray_cluster": "b"},
        "wc": {"ray_cluster": "c"},
        "wd": {"ray_cluster": "d"},
    }
    heads = ["h1", "h2", "h3"]
    assert worker_head("w", heads, hostvars) == dict(name="h1", ip="10.0.0.1", error="")
    assert worker_head("wb", heads, hostvars) == dict(name="h2", ip="10.0.0.2", error="")  # from the local fact
    unknown = worker_head("wc", heads, hostvars)
    assert unknown["name"] == "h3" and unknown["ip"] == ""
    assert unknown["error"].startswith("The address of head h3 is unknown: run the ray_head role on it first")
    none = worker_head("wd", heads, hostvars)
    assert none["error"] == (
        "Worker wd (ray_cluster=d) needs exactly one host in group ray_head with the same ray_cluster; found 0: none."
    )
    two = worker_head("w", ["h1", "h1b"], dict(hostvars, h1b={}))
    assert "found 2: h1, h1b." in two["error"]


@pytest.mark.parametrize(
    "value,bad", [(True, False), ("yes", False), (0, False), ("ture", True), ("", True), (2, True)]
)
def test_the_firewall_switch_is_a_setting_read_strictly(value, bad):
    from ansible_collections.rlinfra.verl.plugins.module_utils.common.settings import check

    errors = check({"ray_firewall": value})
    assert bool(errors) is bad, errors
    if bad:
        assert errors[0].startswith("ray_firewall must be true or false (also yes/no/1/0, any case), got ")


def test_worker_join_starts_a_large_clusters_workers_in_waves_and_a_small_ones_at_once():
    from ansible_collections.rlinfra.verl.plugins.filter.ray_cluster import worker_join

    workers = ["w%02d" % i for i in range(11)] + ["other"]
    hostvars = {w: {"ray_cluster": "big"} for w in workers[:11]}
    hostvars["other"] = {"ray_cluster": "small"}
    # Eleven workers of one cluster, waves of 4: each waits alive, four at a time, in waves 1, 1, 1, 1, 2, ... 3.
    joins = [worker_join(w, workers, hostvars, 4, "none") for w in workers[:11]]
    assert {j["wait"] for j in joins} == {"alive"} and {j["throttle"] for j in joins} == {4}
    assert [j["wave"] for j in joins] == [1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3]
    # The other cluster's one worker in the same play starts as asked, without waiting.
    assert worker_join("other", workers, hostvars, 4, "none") == dict(wait="none", throttle=0, wave=0)
    # As many workers as a wave, or waves off: all at once, the wait asked for.
    assert worker_join("w00", workers[:4], hostvars, 4, "none") == dict(wait="none", throttle=0, wave=0)
    assert worker_join("w00", workers, hostvars, 0, "alive") == dict(wait="alive", throttle=0, wave=0)
    with pytest.raises(ValueError, match="ray_worker_join_wave must be a whole number"):
        worker_join("w00", workers, hostvars, "four")
