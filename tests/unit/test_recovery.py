"""The watchdog's decisions (module_utils/ray/recovery.py), attempt naming (ray/attempts.py), the checkpoint
reader (verl/checkpoint.py) and re-rendering an entrypoint for another cluster shape (experiment.reshape)."""

from __future__ import annotations

import os

import pytest

from ansible_collections.rlinfra.verl.plugins.module_utils.ray import attempts
from ansible_collections.rlinfra.verl.plugins.module_utils.ray import recovery as R
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.client import ACTIVE_STATUSES
from ansible_collections.rlinfra.verl.plugins.module_utils.verl import checkpoint as verl_checkpoint
from ansible_collections.rlinfra.verl.plugins.module_utils.verl import experiment, experiment_render

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def node(i, ip, state="ALIVE", head=False, gpus=0):
    return {
        "node_id": i,
        "node_ip": ip,
        "node_name": ip,
        "is_head": head,
        "state": state,
        "resources": {"CPU": 2, "GPU": gpus} if gpus else {"CPU": 2},
    }


# --- attempts ------------------------------------------------------------------------------


def test_attempt_ids_round_trip_and_foreign_ids_are_not_attempts():
    base = "rlinfra-smoke-default"
    assert attempts.attempt_id(base, 1) == base and attempts.attempt_id(base, 2) == base + "-a2"
    assert [attempts.attempt_number(attempts.attempt_id(base, n), base) for n in (1, 2, 10)] == [1, 2, 10]
    for other in (base + "-2", base + "-a1", base + "-a02", base + "-ax", "rlinfra-smoke-default2", "", None):
        assert attempts.attempt_number(other, base) is None, other


def test_newest_attempt_is_the_highest_number_not_the_latest_listed():
    base = "rlinfra-smoke-default"
    jobs = [
        {"submission_id": base + "-a10", "status": "RUNNING"},
        {"submission_id": base, "status": "FAILED"},
        {"submission_id": base + "-a2", "status": "STOPPED"},
        {"submission_id": base + "-2", "status": "RUNNING"},
    ]
    assert attempts.newest_attempt(jobs, base)["submission_id"] == base + "-a10"
    assert attempts.newest_attempt(jobs, base)["attempt"] == 10
    assert [j["attempt"] for j in attempts.attempts_of(jobs, base)] == [1, 2, 10]
    assert attempts.newest_attempt([], base) is None
    lines = [
        j["line"]
        for j in attempts.with_lines(
            [
                {
                    "submission_id": base + "-a2",
                    "status": "RUNNING",
                    "start_time": "t2",
                    "metadata": {"rlinfra_recovered_from": "node_lost"},
                }
            ],
            base,
        )
    ]
    assert lines == ["attempt 2: %s-a2 RUNNING, started t2, ended - (resubmitted after node lost)" % base]


def test_checkpoint_holder_is_another_active_run_on_the_same_directory():
    jobs = [
        {"submission_id": "rlinfra-x-default", "status": "RUNNING", "metadata": {"rlinfra_checkpoint_dir": "/c/x"}},
        {"submission_id": "rlinfra-x-default-2", "status": "RUNNING", "metadata": {"rlinfra_checkpoint_dir": "/c/x/"}},
        {"submission_id": "rlinfra-x-default-3", "status": "SUCCEEDED", "metadata": {"rlinfra_checkpoint_dir": "/c/x"}},
    ]
    assert (
        attempts.checkpoint_holder(jobs, "/c/x", "rlinfra-x-default", ACTIVE_STATUSES)["submission_id"]
        == "rlinfra-x-default-2"
    )
    assert (
        attempts.checkpoint_holder(jobs, "/c/x", "rlinfra-x-default-2", ACTIVE_STATUSES)["submission_id"]
        == "rlinfra-x-default"
    )
    assert (
        attempts.checkpoint_holder(jobs[2:], "/c/x", "rlinfra-x-default", ACTIVE_STATUSES) is None
    )  # ended runs hold nothing
    assert attempts.checkpoint_holder(jobs, "/c/y", "rlinfra-y-default", ACTIVE_STATUSES) is None


# --- nodes and events ----------------------------------------------------------------------


def test_lost_node_is_named_by_inventory_host_and_address():
    known = R.alive([node("a", "10.0.0.1", head=True), node("b", "10.0.0.2"), node("c", "10.0.0.3")])
    now = [node("a", "10.0.0.1", head=True), node("b", "10.0.0.2"), node("c", "10.0.0.3", state="DEAD")]
    lost = R.lost_nodes(known, now)
    assert [n["node_id"] for n in lost] == ["c"]
    assert R.node_label(lost[0], {"10.0.0.3": "gpu-3"}) == "gpu-3 (10.0.0.3)"
    assert R.node_label(lost[0], {}) == "10.0.0.3 (not in the inventory)"
    # A node missing from the list (GCS forgot it) is lost too.
    assert [n["node_id"] for n in R.lost_nodes(known, now[:1])] == ["b", "c"]
    assert R.head_id(now) == "a"


@pytest.mark.parametrize(
    "status, lost, expected",
    [
        ("SUCCEEDED", [], "succeeded"),
        ("SUCCEEDED", ["x"], "succeeded"),
        ("FAILED", [], "failed"),
        ("FAILED", ["x"], "node_lost"),
        ("STOPPED", [], "stopped"),
    ],
)
def test_end_event(status, lost, expected):
    assert R.end_event(status, lost) == expected


def test_recovery_needs_the_event_and_a_restart_left():
    off = R.recovery_settings({})
    assert off["max_restarts"] == 0 and off["on"] == ["node_lost", "head_restart", "stalled"]
    assert R.can_recover("node_lost", off, 0) == (False, "recovery is off (recovery.max_restarts: 0)")
    on = R.recovery_settings({"max_restarts": 2})
    assert R.can_recover("node_lost", on, 0) == (True, "")
    assert R.can_recover("node_lost", on, 2) == (False, "all 2 restart(s) of recovery.max_restarts are used")
    assert R.can_recover("failed", on, 0) == (False, "recovery.on does not include failed")
    assert R.can_recover("failed", R.recovery_settings({"max_restarts": 1, "on": ["failed"]}), 0)[0]


# --- checkpoints and shapes ----------------------------------------------------------------


def make_checkpoint(root, steps, world, tracker=True):
    for step in steps:
        actor = root / ("global_step_%d" % step) / "actor"
        actor.mkdir(parents=True)
        for rank in range(world):
            (actor / ("model_world_size_%d_rank_%d.pt" % (world, rank))).write_bytes(b"x")
    if tracker:
        (root / "latest_checkpointed_iteration.txt").write_text(str(steps[-1]))


def test_checkpoint_info_reads_latest_step_and_world_size(tmp_path):
    make_checkpoint(tmp_path, [5, 10], 3)
    (tmp_path / "global_step_15.tmp-1").mkdir()  # a half-written step is not a step
    info = verl_checkpoint.inspect(str(tmp_path))
    assert (info["exists"], info["steps"], info["latest_step"], info["world_size"], info["ranks"]) == (
        True,
        [5, 10],
        10,
        3,
        [0, 1, 2],
    )
    assert info["step_dir"] == str(tmp_path / "global_step_10")


def test_checkpoint_info_without_tracker_missing_and_empty(tmp_path):
    make_checkpoint(tmp_path / "a", [2, 7], 16, tracker=False)
    assert verl_checkpoint.inspect(str(tmp_path / "a"))["latest_step"] == 7
    missing = verl_checkpoint.inspect(str(tmp_path / "nope"))
    assert (missing["exists"], missing["latest_step"], missing["world_size"]) == (False, None, None)
    (tmp_path / "empty").mkdir()
    assert verl_checkpoint.inspect(str(tmp_path / "empty"))["latest_step"] is None


def test_shape_check_refuses_another_world_size_unless_allowed(tmp_path):
    make_checkpoint(tmp_path, [5], 3)
    ckpt = verl_checkpoint.inspect(str(tmp_path))
    three = [node(i, "10.0.0.%d" % i) for i in range(3)]
    assert R.shape_check(ckpt, three) == (True, "")
    ok, line = R.shape_check(ckpt, three[:2])
    assert not ok
    assert line == (
        "checkpoint %s (step 5) was written by world size 3 (model_world_size_3_rank_*.pt) but the cluster "
        "now has 2 node(s) x 0 GPU(s) = world size 2; not resubmitted: bring the cluster back to 3 rank(s) "
        "(site.yml) and run submit.yml again, or set recovery.allow_reshard: true if the trainer can reshard"
        % (tmp_path / "global_step_5")
    )
    ok, line = R.shape_check(ckpt, three[:2], allow_reshard=True)
    assert ok and line.endswith("resubmitting anyway (recovery.allow_reshard: true)")
    gpus = [node(i, "10.0.0.%d" % i, gpus=8) for i in range(2)]  # 16 ranks
    assert not R.shape_check(ckpt, gpus)[0]
    assert R.shape_check({"world_size": None}, three[:1]) == (True, "")  # nothing to check


def test_reshape_changes_only_the_shape_rlinfra_filled():
    exp = experiment.load_experiment("smoke", os.path.join(REPO, "experiments"))
    three = [node(i, "10.0.0.%d" % i) for i in range(3)]
    rendered = experiment_render.render(exp, three)
    assert experiment_render.reshape(rendered["job_template"]) == (rendered["entrypoint"], 3, 0)
    entrypoint, nnodes, gpus = experiment_render.reshape(rendered["job_template"], three[:2])
    assert (nnodes, gpus) == (2, 0) and "trainer.nnodes=2" in entrypoint and "trainer.nnodes=3" not in entrypoint
    assert entrypoint.replace("trainer.nnodes=2", "trainer.nnodes=3") == rendered["entrypoint"]
    pinned = experiment.load_experiment(
        "smoke", os.path.join(REPO, "experiments"), extra_params={"trainer": {"nnodes": 3}}
    )
    template = experiment_render.render(pinned, three)["job_template"]
    assert experiment_render.reshape(template, three[:1])[1] == 3  # set by the experiment: kept


def test_checkpoint_dir_names_the_cluster_and_can_borrow_another():
    exp = experiment.load_experiment("smoke", os.path.join(REPO, "experiments"))
    a = experiment_render.render(exp, [node(1, "10.0.0.1")], cluster="a")
    b = experiment_render.render(exp, [node(1, "10.0.0.1")], cluster="b")
    assert a["checkpoint_dir"] == "/data/checkpoints/rlinfra_smoke/a/smoke" != b["checkpoint_dir"]
    assert "trainer.default_local_dir=/data/checkpoints/rlinfra_smoke/a/smoke" in a["overrides"]
    borrowed = experiment_render.render(exp, [node(1, "10.0.0.1")], cluster="b", checkpoint_cluster="a")
    assert borrowed["checkpoint_dir"] == a["checkpoint_dir"] and borrowed["submission_id"] == b["submission_id"]


# --- what the user reads ---------------------------------------------------------------------


def test_summary_names_lost_nodes_and_every_attempt():
    result = {
        "status": "SUCCEEDED",
        "submission_id": "s-a2",
        "duration_s": 12.34,
        "last_step": 30,
        "last_metrics": {"reward/mean": 0.8, "pg_loss": -0.01},
        "lost_nodes": [{"label": "gpu-3 (10.0.0.3)", "at": "0:00:46"}],
        "attempts": [
            {"attempt": 1, "submission_id": "s", "status": "FAILED", "why": "node_lost", "last_step": 14},
            {"attempt": 2, "submission_id": "s-a2", "status": "SUCCEEDED", "why": "succeeded", "last_step": 30},
        ],
        "log_paths": ["/a/s.log", "/a/s-a2.log"],
    }
    assert R.summary_lines(result) == [
        "status:        SUCCEEDED",
        "submission_id: s-a2",
        "duration:      12.3 s",
        "last step:     30 reward/mean:0.8 - pg_loss:-0.01",
        "node lost:     gpu-3 (10.0.0.3) at 0:00:46",
        "attempts:",
        "  1. s: FAILED (a node left the cluster), steps reached 14",
        "  2. s-a2: SUCCEEDED, steps reached 30",
        "log:           /a/s.log",
        "log:           /a/s-a2.log",
    ]


def test_recovery_schema_is_checked_like_the_rest(tmp_path):
    def load(recovery, wait=None):
        data = {"framework": "custom", "entrypoint": {"command": "python3 x.py"}, "recovery": recovery}
        if wait:
            data["wait"] = wait
        return experiment.validate("x", str(tmp_path / "x.yml"), data)

    assert load({"max_restarts": 3, "on": ["node_lost", "failed"]}).recovery["max_restarts"] == 3
    for recovery, wait, line in [
        ({"max_restart": 3}, None, "x.yml: recovery: unknown key 'max_restart' (did you mean 'max_restarts'?)"),
        (
            {"on": ["node_lots"]},
            None,
            "x.yml: recovery.on[0] must be one of node_lost, head_restart, stalled, failed "
            "(did you mean 'node_lost'?), got 'node_lots'",
        ),
        ({"max_restarts": "3"}, None, "x.yml: recovery.max_restarts must be a whole number, got '3'"),
        ({"min_nodes": 0}, None, "x.yml: recovery.min_nodes must be a whole number from 1 to 10000, got 0"),
        ({"max_restarts": -1}, None, "x.yml: recovery.max_restarts must be a whole number from 0 to 1000, got -1"),
        (
            {},
            {"stall_timeout": -5},
            "x.yml: wait.stall_timeout must be a number of seconds from 0 to 31622400, got -5 (0 is off)",
        ),
    ]:
        with pytest.raises(experiment.ExperimentError) as err:
            load(recovery, wait)
        assert err.value.errors[0].startswith(line), err.value.errors


@pytest.mark.parametrize(
    "text, lost",
    [
        ("ray.exceptions.ActorUnavailableError: The actor 3f2 is unavailable: ... ipv4:172.23.0.4:11114", True),
        ("ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.", True),
        ("RuntimeError: NCCL communicator was aborted on rank 3.", True),
        ("ValueError: could not convert string to float: 'abc'", False),
        ("smoke_rl: configuration error: Could not override 'x'", False),
        ("", False),
    ],
)
def test_failures_that_read_like_a_lost_node(text, lost):
    assert R.looks_like_lost_node(text) is lost


def test_progress_line_names_the_attempt_and_prints_odd_numbers():
    res = {"status": "RUNNING", "duration_s": None, "last_step": 7, "last_metrics": {"x": float("inf"), "y": 123456.0}}
    assert (
        R.progress_line("gsm8k", res, [], 5, attempt=2) == "gsm8k: RUNNING (attempt 2), -, step:7 - x:inf - y:1.235e+05"
    )


def test_a_list_that_knows_none_of_the_nodes_and_has_no_head_is_a_restart_registering():
    def node(node_id, head=False, state="ALIVE"):
        return {"node_id": node_id, "is_head": head, "state": state}

    known = {"h1": node("h1", True), "w2": node("w2")}
    assert R.registering(known, []) is True  # the new GCS has no node yet
    assert R.registering(known, [node("w2b")]) is True  # a worker back under a new id, no head yet
    assert R.registering(known, [node("h2", True)]) is False  # the new head: the restart is seen
    assert R.registering(known, [node("w2")]) is False  # the same GCS, the head gone from it: lost
    assert R.registering(known, [node("h1", True, "DEAD"), node("w2")]) is False  # the head's node died
    assert R.registering({}, []) is False  # nothing was known: nothing to call lost anyway
