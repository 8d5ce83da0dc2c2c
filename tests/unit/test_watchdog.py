"""The watchdog's state machine (module_utils/ray/watchdog.py) on scripted poll sequences: each row feeds the
answers of the I/O it asks for and asserts every line it says, every stop, log, cluster look, sleep and
submission it asks for, and how the watch ends. A change in the watchdog's logic or wording fails a row."""

from __future__ import annotations

import pytest

from ansible_collections.rlinfra.verl.plugins.module_utils.ray import watchdog

SID = "rlinfra-gsm8k-default"
A2 = SID + "-a2"
URL = "http://10.0.0.1:8265"
NAMES = {"10.0.0.1": "head-1", "10.0.0.2": "gpu-2", "10.0.0.3": "gpu-3"}
TEMPLATE = {
    "pairs": [["trainer.nnodes", 3], ["trainer.n_gpus_per_node", 0]],
    "head": "python3 -m verl.trainer.main_ppo",
    "shape_keys": ["trainer.nnodes", "trainer.n_gpus_per_node"],
    "filled": [True, True],
}
JOB = {"job_template": TEMPLATE, "metadata": {"rlinfra_experiment": "gsm8k"}, "resources": None, "package": None}
PACKAGE = {"uri": "gcs://_ray_pkg_x.zip", "src": "/tmp/pkg"}
REC = {"max_restarts": 1, "backoff_s": 10}
ON = dict(recovery=REC, job=JOB, checkpoint_dir="/ckpt")
M3 = {"rlinfra_nodes": "3"}


def node(node_id, ip, head=False, state="ALIVE"):
    return {
        "node_id": node_id,
        "node_ip": ip,
        "node_name": ip,
        "is_head": head,
        "state": state,
        "resources": {"CPU": 2},
    }


HEAD = node("h1", "10.0.0.1", head=True)
NEW_HEAD = node("h2", "10.0.0.1", head=True)
W2 = node("w2", "10.0.0.2")
W3 = node("w3", "10.0.0.3")
W3_DEAD = node("w3", "10.0.0.3", state="DEAD")
W3_BACK = node("w3b", "10.0.0.3")
W9 = node("w9", "10.0.0.9")
ALL = (HEAD, W2, W3)
NO_W3 = (HEAD, W2)
NO_HEAD = (W2, W3)
RESTARTED = (NEW_HEAD, W2, W3)


def job(status="RUNNING", step=None, nodes=ALL, **res):
    return dict(reachable=True, found=True, status=status, last_step=step, nodes=list(nodes), **res)


def gone(nodes=ALL):
    return dict(reachable=True, found=False, nodes=list(nodes))


def down(error="connection refused"):
    return dict(reachable=False, found=False, error=error)


def entrypoint(nnodes=3):
    return "python3 -m verl.trainer.main_ppo trainer.nnodes=%d trainer.n_gpus_per_node=0" % nnodes


WHY = {
    "node_lost": "a node left the cluster",
    "failed": "the job failed",
    "stalled": "no new training step",
    "head_restart": "the Ray head restarted (Ray keeps no jobs across a head restart)",
}


def recovered(why, step, at, nodes=3, resume=None, backoff=10, checkpoint=True, entry_nodes=None, first=None):
    """What a recovery of attempt 1 asks for and says, up to the next attempt's submission (and the proof of its resume:
    ``first``, its first step seen)."""
    out = [
        "attempt 1 (%s) ended: %s, at step %s; recovery 1 of 1" % (SID, WHY[why], step),
        "cluster jobs=True timeout=60 wait_for_nodes=1",
        "sleep %g" % backoff,
        "waiting up to 600s for %d alive node(s)" % nodes,
        "cluster timeout=600 wait_for_nodes=%d" % nodes,
    ]
    out += ["checkpoint /ckpt"] if checkpoint else []
    return (
        out
        + [
            "submit %s after %s from %s: %s" % (A2, why, SID, entrypoint(entry_nodes or nodes)),
            "attempt 2 (%s) submitted at %s after %s; %s"
            % (
                A2,
                at,
                why.replace("_", " "),
                "resumes from checkpoint step %s" % resume
                if resume is not None
                else "no checkpoint yet: starts from scratch",
            ),
        ]
        + (
            ["attempt 2 (%s) resumed from checkpoint step %s: its first step seen is %s" % (A2, resume, first)]
            if first is not None
            else []
        )
    )


def recovery_answers(nodes=ALL, jobs=(), ckpt=None, checkpoint=True):
    """The answers to a recovery's cluster looks, checkpoint read and submission."""
    return [{"jobs": list(jobs)}, {"nodes": list(nodes)}] + ([ckpt or {}] if checkpoint else []) + [{}]


LOST_W3 = "node gpu-3 (10.0.0.3) left the cluster at %s"
HEAD_DOWN = "the Ray head head-1 (10.0.0.1) went down at %s (ray-head restarting, or the node is down); Ray loses its jobs with it"
HEAD_RESTARTED = "the Ray head restarted at %s (a new head node joined); every Ray node re-registers"
GONE = "job %s is gone from the cluster at %s: the Ray head restarted (Ray keeps no jobs across a head restart)"
HEAD_GONE_LINE = (
    "Ray job %s is gone%s: the Ray head restarted and Ray keeps no jobs across a restart%s; %s; run submit.yml "
    "with -e run=NEW to resume from the checkpoint"
)
OFF = "recovery is off (recovery.max_restarts: 0)"
SPENT = "all 1 restart(s) of recovery.max_restarts are used"
RESUME = "run submit.yml with -e run=NEW to resume from the checkpoint"
STOPPED_LINE = (
    "Ray job %s was stopped from outside this wait (stop.yml, the dashboard or `ray job stop`); not resubmitted. "
    "To go on from its checkpoint, submit a new run (submit.yml with -e run=NEW)" % SID
)
OUTAGE = "the Ray dashboard does not answer (connection refused); waiting up to %ss for it"
SHAPE = (
    "checkpoint /ckpt/global_step_5 (step 5) was written by world size 3 (model_world_size_3_rank_*.pt) but the "
    "cluster now has 2 node(s) x 0 GPU(s) = world size 2"
)
HEAD_CHECK = ["sleep 2", "poll 0 tail=0"]

# A first attempt that loses gpu-3 at 0:00:20 and is recovered as attempt 2 at 0:00:30 (recovery on).
LOSE_AND_RECOVER = dict(
    script=[job(step=1, metadata=M3), job(step=2, nodes=NO_W3, metadata=M3)]
    + recovery_answers((HEAD, W2, W3_BACK), [{"submission_id": SID, "status": "STOPPED"}], {"latest_step": 2}),
    trace=[
        LOST_W3 % "0:00:20",
        "stopping attempt 1 (%s): it lost a node and would hang or fail" % SID,
        "stop " + SID,
        "save_log " + SID,
    ]
    + recovered("node_lost", 2, "0:00:30", resume=2),
)
RESUMED_A2 = "attempt 2 (%s) resumed from checkpoint step 2: its first step seen is 3" % A2


def show(request):
    """A request as the tables write it: a line the user reads as it is, an I/O request in short."""
    kind, params = request[0], request[1:]
    if kind == "say":
        return params[0]
    if kind == "poll":
        return "poll %s%s" % (params[0], "" if params[1] is None else " tail=%s" % params[1])
    if kind == "sleep":
        return "sleep %g" % params[0]
    if kind == "cluster":
        return "cluster " + " ".join("%s=%s" % item for item in sorted(params[0].items()))
    if kind == "upload":
        return "upload %s" % params[0]["uri"]
    if kind == "replace":  # every key of every node asked for, so a key more or less fails a row
        return "replace " + ", ".join(
            "{%s}" % " ".join("%s=%s" % item for item in sorted(n.items())) for n in params[0]
        )
    if kind == "submit":
        sid, command, metadata, dummy = params
        assert metadata["rlinfra_attempt"] == sid.rsplit("-a", 1)[1]
        assert metadata["rlinfra_experiment"] == "gsm8k"  # the run's own metadata is kept
        return "submit %s after %s from %s: %s" % (
            sid,
            metadata["rlinfra_recovered_from"],
            metadata["rlinfra_previous"],
            command,
        )
    return "%s %s" % (kind, params[0])


def drive(script, **opts):
    """Runs the machine on ``script`` (the answers to its polls, cluster looks, checkpoint reads, uploads,
    submissions and replacements, in order): a poll takes the seconds it asked for, a sleep its seconds, the rest
    no time; an answer's ``_dt`` overrides how long its call took. Returns the machine, the trace (every request
    but progress lines and the usual polls), the seconds of those polls, and how the watch ended."""
    args = dict(submission_id=SID, address=URL, progress_interval=10, poll_interval=5.0)
    wall = opts.pop("wall", None)  # the epoch time of the watch's 0 (recovery.deadline is on the wall clock)
    args.update(opts)
    # A copy: a replacement adds the new machine's address to the machine's names.
    dog = watchdog.Watchdog(args, 0.0, names=dict(NAMES), wall=wall)
    steps = dog.watch(0.0)
    answers = iter([dict(a) for a in script])
    trace, polls, now = [], [], 0.0
    request = next(steps)
    try:
        while True:
            kind = request[0]
            answer = next(answers) if kind in ("poll", "cluster", "checkpoint", "upload", "submit", "replace") else None
            took = (answer or {}).pop("_dt", request[1] if kind in ("poll", "sleep") else 0)
            if kind == "poll" and request[2] is None and request[1] > 0:
                polls.append(request[1])
            elif kind != "progress":
                trace.append(show(request))
            now += took
            request = steps.send((answer, now))
    except StopIteration as end:
        assert next(answers, None) is None, "answers left over: the watch ended sooner than the row says"
        return dog, trace, polls, end.value


ROWS = [
    # --- plain ends ---------------------------------------------------------------------------------
    dict(
        name="succeeds_at_once",
        script=[job("SUCCEEDED", 3)],
        trace=["save_log " + SID],
        end=("succeeded", None),
        check=lambda dog, polls: dog.rows[0]["status"] == "SUCCEEDED" and polls == [10],
    ),
    dict(
        name="runs_then_succeeds",
        script=[job(step=1), job(step=2), job("SUCCEEDED", 3)],
        trace=["save_log " + SID],
        end=("succeeded", None),
        check=lambda dog, polls: polls == [10, 10, 10] and not dog.lost,
    ),
    dict(
        name="missing_from_the_start",
        script=[gone()],
        trace=[],
        end=(
            "missing",
            "Ray job %s does not exist on the cluster at %s (deleted, or the head restarted before this "
            "wait began); run submit.yml again to start it" % (SID, URL),
        ),
    ),
    dict(
        name="missing_and_no_address_known",
        opts=dict(address=None),
        script=[gone()],
        trace=[],
        end=(
            "missing",
            "Ray job %s does not exist on the cluster at ? (deleted, or the head restarted before this "
            "wait began); run submit.yml again to start it" % SID,
        ),
    ),
    dict(
        name="failed_recovery_off",
        script=[job(step=1), job("FAILED", 4, driver_exit_code=1, message="ValueError: x"), job("FAILED", 4)],
        trace=HEAD_CHECK + ["save_log " + SID],
        end=("failed", "Ray job %s ended FAILED at step 4 (driver exit code 1); %s; see the log" % (SID, OFF)),
    ),
    dict(
        name="failed_not_in_recovery_on",
        opts=ON,
        script=[job("FAILED", 4, driver_exit_code=1), job("FAILED", 4)],
        trace=HEAD_CHECK + ["save_log " + SID],
        end=(
            "failed",
            "Ray job %s ended FAILED at step 4 (driver exit code 1); recovery.on does not include failed; "
            "see the log" % SID,
        ),
    ),
    dict(
        name="failed_without_exit_code_or_step",
        script=[job("FAILED"), job("FAILED")],
        trace=HEAD_CHECK + ["save_log " + SID],
        end=("failed", "Ray job %s ended FAILED; %s; see the log" % (SID, OFF)),
    ),
    dict(
        name="failed_recovered_when_on_includes_failed",
        opts=dict(ON, recovery=dict(REC, on=["failed"])),
        script=[job(step=1, metadata=M3), job("FAILED", 4, driver_exit_code=1, metadata=M3), job("FAILED", 4)]
        + recovery_answers(ALL, [{"submission_id": SID, "status": "FAILED"}], {"latest_step": 4})
        + [job("SUCCEEDED", 6)],
        trace=HEAD_CHECK
        + ["save_log " + SID]
        + recovered("failed", 4, "0:00:32", resume=4, first=6)
        + ["save_log " + A2],
        end=("succeeded", None),
        check=lambda dog, polls: [r["status"] for r in dog.rows] == ["FAILED", "SUCCEEDED"] and dog.sid == A2,
    ),
    dict(
        name="stopped_from_outside",
        script=[job(step=2), job("STOPPED", 2), job("STOPPED", 2)],
        trace=HEAD_CHECK + ["save_log " + SID],
        end=("stopped", STOPPED_LINE),
    ),
    dict(
        name="stopped_from_outside_is_never_recovered",
        opts=ON,
        script=[job("STOPPED", 2), job("STOPPED", 2)],
        trace=HEAD_CHECK + ["save_log " + SID],
        end=("stopped", STOPPED_LINE),
        check=lambda dog, polls: dog.restarts == 0,
    ),
    # --- the head ----------------------------------------------------------------------------------
    dict(
        name="stopped_as_the_head_goes_down",
        script=[job(step=3), job("STOPPED", 3), down()],
        trace=HEAD_CHECK
        + ["the Ray dashboard stopped answering as job %s ended: the head is going down" % SID, "save_log " + SID],
        end=("head_restart", HEAD_GONE_LINE % (SID, " at step 3", "", OFF)),
    ),
    dict(
        name="failed_and_the_second_look_misses_the_head",
        script=[job(step=3), job("FAILED", 3), job("FAILED", 3, NO_HEAD)],
        trace=HEAD_CHECK + [HEAD_DOWN % "0:00:22", "save_log " + SID],
        end=("head_restart", HEAD_GONE_LINE % (SID, " at step 3", "; lost: head-1 (10.0.0.1)", OFF)),
    ),
    dict(
        name="head_restart_job_gone_recovery_off",
        script=[job(step=3), gone(RESTARTED)],
        trace=[HEAD_RESTARTED % "0:00:20", GONE % (SID, "0:00:20")],
        end=("head_restart", HEAD_GONE_LINE % (SID, " at step 3", "", OFF)),
        check=lambda dog, polls: dog.rows[0]["status"] == "LOST" and dog.res["status"] is None,
    ),
    dict(
        # A restarted head's dashboard answers before any node registered with its new GCS (the list is empty, or
        # holds only workers under new ids): nothing is called lost, the restart is named by the job being gone.
        name="head_restart_answered_before_its_nodes_registered",
        script=[job(step=3), gone(())],
        trace=[GONE % (SID, "0:00:20")],
        end=("head_restart", HEAD_GONE_LINE % (SID, " at step 3", "", OFF)),
        check=lambda dog, polls: dog.lost == [] and [e["event"] for e in dog.events] == ["head_restart"],
    ),
    dict(
        name="head_restart_recovered_while_its_nodes_register_again",
        opts=ON,
        script=[job(step=3, metadata=M3), gone((W3_BACK,))]
        + recovery_answers(RESTARTED, (), {"latest_step": 3})
        + [job("SUCCEEDED", 6, RESTARTED)],
        # The restart is named once the new head node is seen, by the wait for the nodes before the next attempt.
        trace=[GONE % (SID, "0:00:20")]
        + recovered("head_restart", 3, "0:00:30", resume=3, first=6)[:5]
        + [HEAD_RESTARTED % "0:00:30"]
        + recovered("head_restart", 3, "0:00:30", resume=3, first=6)[5:]
        + ["save_log " + A2],
        end=("succeeded", None),
        check=lambda dog, polls: dog.lost == [] and [r["status"] for r in dog.rows] == ["LOST", "SUCCEEDED"],
    ),
    dict(
        name="job_gone_without_a_new_head_after_it_was_seen",
        script=[job(step=3), gone()],
        trace=[GONE % (SID, "0:00:20")],
        end=("head_restart", HEAD_GONE_LINE % (SID, " at step 3", "", OFF)),
    ),
    dict(
        name="head_restart_job_gone_recovered",
        opts=ON,
        script=[job(step=3, metadata=M3), gone(RESTARTED)]
        + recovery_answers(RESTARTED, (), {"latest_step": 3})
        + [job("SUCCEEDED", 6, RESTARTED)],
        trace=[HEAD_RESTARTED % "0:00:20", GONE % (SID, "0:00:20")]
        + recovered("head_restart", 3, "0:00:30", resume=3, first=6)
        + ["save_log " + A2],
        end=("succeeded", None),
        check=lambda dog, polls: [r["status"] for r in dog.rows] == ["LOST", "SUCCEEDED"],
    ),
    dict(
        name="head_down_in_the_list_then_job_gone",
        script=[job(step=3), job(step=3, nodes=NO_HEAD), gone(RESTARTED)],
        trace=[HEAD_DOWN % "0:00:20", HEAD_RESTARTED % "0:00:30", GONE % (SID, "0:00:30")],
        end=("head_restart", HEAD_GONE_LINE % (SID, " at step 3", "; lost: head-1 (10.0.0.1)", OFF)),
        check=lambda dog, polls: [e["event"] for e in dog.events] == ["head_restart", "head_restart"],
    ),
    dict(
        name="head_down_mid_run_recovered_without_a_stop",
        opts=dict(ON, checkpoint_dir=""),
        script=[job(step=3), job(step=3, nodes=NO_HEAD)]
        + recovery_answers(RESTARTED, checkpoint=False)
        + [job("SUCCEEDED", 1, RESTARTED)],
        trace=[HEAD_DOWN % "0:00:20", "save_log " + SID]
        + recovered("head_restart", 3, "0:00:30", nodes=2, checkpoint=False, entry_nodes=3)[:5]
        + [HEAD_RESTARTED % "0:00:30"]
        + recovered("head_restart", 3, "0:00:30", checkpoint=False)[-2:]
        + ["save_log " + A2],
        end=("succeeded", None),
    ),
    dict(
        name="succeeds_while_the_head_is_lost",
        script=[job(step=1), job("SUCCEEDED", 2, NO_HEAD)],
        trace=[HEAD_DOWN % "0:00:20", "save_log " + SID],
        end=("succeeded", None),
    ),
    dict(
        name="head_restarts_before_the_resubmitted_attempt_is_seen",
        opts=ON,
        script=LOSE_AND_RECOVER["script"] + [gone((NEW_HEAD, W2, W3_BACK))],
        trace=LOSE_AND_RECOVER["trace"] + [HEAD_RESTARTED % "0:00:40", GONE % (A2, "0:00:40")],
        # The step is the last one the watch saw, attempt 1's: attempt 2 never showed one.
        end=("head_restart", HEAD_GONE_LINE % (A2, " at step 2", "; lost: gpu-3 (10.0.0.3)", SPENT)),
    ),
    # --- lost nodes -------------------------------------------------------------------------------
    dict(
        name="failure_reads_like_a_lost_node_and_ray_marks_it_dead",
        script=[
            job(step=5),
            job("FAILED", 5, message="ray.exceptions.ActorDiedError: The actor died unexpectedly"),
            job("FAILED", 5),
            {"nodes": [HEAD, W2, W3_DEAD]},
        ],
        trace=HEAD_CHECK + ["cluster timeout=10", LOST_W3 % "0:00:22", "save_log " + SID],
        end=(
            "node_lost",
            "Ray job %s ended FAILED at step 5 after a node left the cluster; lost: gpu-3 (10.0.0.3); %s; %s"
            % (SID, OFF, RESUME),
        ),
    ),
    dict(
        name="failure_reads_like_a_lost_node_but_every_node_stays",
        script=[job(step=5), job("FAILED", 5, logs_tail="NCCL error: unhandled system error"), job("FAILED", 5)]
        + [dict(nodes=list(ALL), _dt=10)] * 5,
        trace=HEAD_CHECK + ["cluster timeout=10", "sleep 3"] * 5 + ["save_log " + SID],
        end=("failed", "Ray job %s ended FAILED at step 5; %s; see the log" % (SID, OFF)),
    ),
    dict(
        name="failure_reads_like_a_lost_node_and_cluster_info_fails",
        script=[job("FAILED", 5, message="NodeDiedError"), job("FAILED", 5), {"failed": True, "msg": "timed out"}],
        trace=HEAD_CHECK + ["cluster timeout=10", "save_log " + SID],
        end=("failed", "Ray job %s ended FAILED at step 5; %s; see the log" % (SID, OFF)),
    ),
    dict(
        name="node_lost_then_the_job_fails_recovery_off",
        script=[job(step=1), job(step=2, nodes=NO_W3), job("FAILED", 2, NO_W3)],
        trace=[LOST_W3 % "0:00:20", "save_log " + SID],
        end=(
            "node_lost",
            "Ray job %s ended FAILED at step 2 after a node left the cluster; lost: gpu-3 (10.0.0.3); %s; %s"
            % (SID, OFF, RESUME),
        ),
    ),
    dict(
        name="node_lost_then_back_and_the_job_succeeds",
        script=[
            job(step=1),
            job(step=2, nodes=NO_W3),
            job(step=3, nodes=(HEAD, W2, W3_BACK)),
            job("SUCCEEDED", 4, (HEAD, W2, W3_BACK)),
        ],
        trace=[LOST_W3 % "0:00:20", "save_log " + SID],
        end=("succeeded", None),
        check=lambda dog, polls: len(dog.lost) == 1 and set(dog.known) == {"h1", "w2", "w3b"},
    ),
    dict(
        name="node_lost_and_the_job_succeeds_in_the_same_poll",
        script=[job(step=1), job("SUCCEEDED", 2, NO_W3)],
        trace=[LOST_W3 % "0:00:20", "save_log " + SID],
        end=("succeeded", None),
        check=lambda dog, polls: dog.result("succeeded", None, 20.0)["lost_nodes"][0]["label"] == "gpu-3 (10.0.0.3)",
    ),
    dict(
        name="node_lost_and_the_job_stopped_from_outside",
        script=[job(step=1), job("STOPPED", 1, NO_W3)],
        trace=[LOST_W3 % "0:00:20", "save_log " + SID],
        end=("stopped", STOPPED_LINE),
    ),
    dict(
        name="stopped_and_the_second_look_finds_a_worker_gone",
        opts=dict(recovery={"max_restarts": 1, "on": ["failed"]}),
        script=[job(step=3), job("STOPPED", 3), job("STOPPED", 3, NO_W3)],
        trace=HEAD_CHECK + [LOST_W3 % "0:00:22", "save_log " + SID],
        end=("stopped", STOPPED_LINE),
    ),
    dict(
        name="node_lost_not_in_recovery_on",
        opts=dict(ON, recovery={"max_restarts": 2, "on": ["stalled"]}),
        script=[job(step=1), job(step=2, nodes=NO_W3), job("FAILED", 2, NO_W3)],
        trace=[LOST_W3 % "0:00:20", "save_log " + SID],
        end=(
            "node_lost",
            "Ray job %s ended FAILED at step 2 after a node left the cluster; lost: gpu-3 (10.0.0.3); "
            "recovery.on does not include node_lost; %s" % (SID, RESUME),
        ),
    ),
    dict(
        name="node_not_in_the_inventory",
        script=[job(step=1, nodes=ALL + (W9,)), job("SUCCEEDED", 2)],
        trace=["node 10.0.0.9 (not in the inventory) left the cluster at 0:00:20", "save_log " + SID],
        end=("succeeded", None),
    ),
    dict(
        name="node_lost_mid_run_recovered",
        opts=ON,
        script=LOSE_AND_RECOVER["script"]
        + [job(step=3, nodes=(HEAD, W2, W3_BACK)), job("SUCCEEDED", 5, (HEAD, W2, W3_BACK))],
        trace=LOSE_AND_RECOVER["trace"] + [RESUMED_A2, "save_log " + A2],
        end=("succeeded", None),
        check=lambda dog, polls: (
            [(r["status"], r["why"]) for r in dog.rows] == [("STOPPED", "node_lost"), ("SUCCEEDED", "succeeded")]
            and dog.events
            == [
                dict(event="node_lost", node="gpu-3 (10.0.0.3)", at_s=20.0),
                dict(
                    event="resubmitted",
                    after="node_lost",
                    detected_s=20.0,
                    submitted_s=30.0,
                    attempt=2,
                    resume_step=2,
                    first_step_s=40.0,
                    first_logged_step=3,
                    resume_proven=True,
                ),
            ]
        ),
    ),
    dict(
        name="second_loss_after_a_recovery_spends_the_budget",
        opts=ON,
        script=LOSE_AND_RECOVER["script"]
        + [
            job(step=3, nodes=(HEAD, W2, W3_BACK)),
            job(step=4, nodes=(HEAD, W3_BACK)),
            job("FAILED", 4, (HEAD, W3_BACK)),
        ],
        trace=LOSE_AND_RECOVER["trace"]
        + [RESUMED_A2, "node gpu-2 (10.0.0.2) left the cluster at 0:00:50", "save_log " + A2],
        end=(
            "node_lost",
            "Ray job %s ended FAILED at step 4 after a node left the cluster; lost: gpu-3 (10.0.0.3), "
            "gpu-2 (10.0.0.2); %s; %s" % (A2, SPENT, RESUME),
        ),
        check=lambda dog, polls: [n["attempt"] for n in dog.lost] == [1, 2],
    ),
    dict(
        name="started_as_attempt_2_with_no_restart_left",
        opts=dict(ON, submission_id=A2, base_submission_id=SID),
        script=[job(step=1), job(step=2, nodes=NO_W3), job("FAILED", 2, NO_W3)],
        trace=[LOST_W3 % "0:00:20", "save_log " + A2],
        end=(
            "node_lost",
            "Ray job %s ended FAILED at step 2 after a node left the cluster; lost: gpu-3 (10.0.0.3); %s; %s"
            % (A2, SPENT, RESUME),
        ),
        check=lambda dog, polls: (dog.attempt, dog.restarts, dog.rows[0]["attempt"]) == (2, 1, 2),
    ),
    # --- outages ----------------------------------------------------------------------------------
    dict(
        name="outage_then_back",
        script=[down(), job(step=2), job("SUCCEEDED", 3)],
        trace=[OUTAGE % 300, "sleep 5", "the Ray dashboard answers again after 15s", "save_log " + SID],
        end=("succeeded", None),
        check=lambda dog, polls: dog.events == [dict(event="unreachable", at_s=10.0)],
    ),
    dict(
        name="outage_past_the_grace",
        opts=dict(outage_grace=30),
        script=[down()] * 4,
        trace=[OUTAGE % 30, "sleep 5", "sleep 5", "sleep 5"],
        end=(
            "unreachable",
            "the Ray dashboard at %s has not answered for 45s (connection refused): the state of job %s "
            "is unknown. Check the head (systemctl status ray-head), then run status.yml for the experiment"
            % (URL, SID),
        ),
    ),
    dict(
        name="outage_with_a_short_poll_interval_and_no_address",
        opts=dict(outage_grace=5, poll_interval=1, address=None),
        script=[down("timed out")] * 2,
        trace=["the Ray dashboard does not answer (timed out); waiting up to 5s for it", "sleep 2"],
        end=(
            "unreachable",
            "the Ray dashboard at ? has not answered for 12s (timed out): the state of job %s is "
            "unknown. Check the head (systemctl status ray-head), then run status.yml for the experiment" % SID,
        ),
    ),
    dict(
        name="two_outages_each_said_once",
        script=[down(), down(), job(step=1), down(), job("SUCCEEDED", 2)],
        trace=[
            OUTAGE % 300,
            "sleep 5",
            "sleep 5",
            "the Ray dashboard answers again after 30s",
            OUTAGE % 300,
            "sleep 5",
            "the Ray dashboard answers again after 15s",
            "save_log " + SID,
        ],
        end=("succeeded", None),
        check=lambda dog, polls: [e["at_s"] for e in dog.events] == [10.0, 50.0],
    ),
    # --- stalls -----------------------------------------------------------------------------------
    dict(
        name="stall_recovery_off",
        opts=dict(stall_timeout=25),
        script=[job(step=1)] * 4,
        trace=["no new step for 30s (last step 1): job %s is stalled" % SID, "save_log " + SID],
        end=(
            "stalled",
            "Ray job %s is stalled at step 1: no new step for 25s (wait.stall_timeout); %s; it is left "
            "running: stop.yml stops it, or set recovery.on to restart it" % (SID, OFF),
        ),
        check=lambda dog, polls: dog.rows[0]["status"] == "RUNNING",
    ),
    dict(
        name="stall_before_any_step",
        opts=dict(stall_timeout=25),
        script=[job()] * 3,
        trace=["no new step for 30s (last step -): job %s is stalled" % SID, "save_log " + SID],
        end=(
            "stalled",
            "Ray job %s is stalled: no new step for 25s (wait.stall_timeout); %s; it is left running: "
            "stop.yml stops it, or set recovery.on to restart it" % (SID, OFF),
        ),
    ),
    dict(
        name="stall_recovered",
        opts=dict(ON, stall_timeout=25, recovery={"max_restarts": 1, "on": ["stalled"], "backoff_s": 1}),
        script=[job(step=6, metadata=M3)] * 4
        + recovery_answers(ALL, [{"submission_id": SID, "status": "STOPPED"}], {"latest_step": 6})
        + [job("SUCCEEDED", 8)],
        trace=["no new step for 30s (last step 6): job %s is stalled" % SID, "stop " + SID, "save_log " + SID]
        + recovered("stalled", 6, "0:00:41", resume=6, backoff=1, first=8)
        + ["save_log " + A2],
        end=("succeeded", None),
        check=lambda dog, polls: dog.rows[0]["status"] == "STOPPED",
    ),
    dict(
        name="stall_with_recovery_for_other_events_only",
        opts=dict(stall_timeout=25, recovery={"max_restarts": 1, "on": ["node_lost"]}),
        script=[job(step=1)] * 4,
        trace=["no new step for 30s (last step 1): job %s is stalled" % SID, "save_log " + SID],
        end=(
            "stalled",
            "Ray job %s is stalled at step 1: no new step for 25s (wait.stall_timeout); recovery.on does not "
            "include stalled; it is left running: stop.yml stops it, or set recovery.on to restart it" % SID,
        ),
    ),
    dict(
        name="no_stall_while_pending",
        opts=dict(stall_timeout=25),
        script=[job("PENDING")] * 4 + [job("SUCCEEDED", 1)],
        trace=["save_log " + SID],
        end=("succeeded", None),
    ),
    dict(
        name="new_steps_restart_the_stall_clock",
        opts=dict(stall_timeout=15),
        script=[job(step=n) for n in range(1, 5)] + [job("SUCCEEDED", 5)],
        trace=["save_log " + SID],
        end=("succeeded", None),
    ),
    dict(
        name="stall_off",
        script=[job(step=1)] * 6 + [job("SUCCEEDED", 1)],
        trace=["save_log " + SID],
        end=("succeeded", None),
    ),
    # --- the wait's timeout -------------------------------------------------------------------------
    dict(
        name="timeout_while_running",
        opts=dict(timeout=25),
        script=[job(step=1), job(step=2), job(step=3)],
        trace=["save_log " + SID],
        end=("timeout", "Ray job %s is still RUNNING after 25s (verl step 3); it keeps running" % SID),
        check=lambda dog, polls: polls == [10, 10, 5] and dog.rows[0]["why"] == "timeout",
    ),
    dict(
        name="timeout_stops_the_job_when_asked",
        opts=dict(timeout=25, stop_on_timeout=True),
        script=[job(step=1), job(step=2), job(step=3), job("STOPPED", 3)],
        trace=["stop " + SID, "poll 0", "save_log " + SID],
        end=("timeout", "Ray job %s is still RUNNING after 25s (verl step 3); stopped it (stop_on_timeout)" % SID),
        check=lambda dog, polls: dog.rows[0]["status"] == "STOPPED",
    ),
    dict(
        name="timeout_and_the_job_succeeded_as_it_was_stopped",
        opts=dict(timeout=10, stop_on_timeout=True),
        script=[job(step=1), job("SUCCEEDED", 2)],
        trace=["stop " + SID, "poll 0", "save_log " + SID],
        end=("timeout", "Ray job %s is still RUNNING after 10s (verl step 2); stopped it (stop_on_timeout)" % SID),
        check=lambda dog, polls: (dog.rows[0]["status"], dog.rows[0]["why"]) == ("SUCCEEDED", "timeout"),
    ),
    dict(
        name="timeout_during_an_outage_before_any_answer",
        opts=dict(timeout=10, stop_on_timeout=True),
        script=[down()],
        trace=[OUTAGE % 300, "sleep 5", "save_log " + SID],
        end=("timeout", "Ray job %s is still None after 10s; stopped it (stop_on_timeout)" % SID),
    ),
    # --- recovery's steps -----------------------------------------------------------------------------
    dict(
        name="min_nodes_from_recovery_settings",
        opts=dict(ON, recovery=dict(REC, min_nodes=2)),
        script=LOSE_AND_RECOVER["script"][:2]
        + recovery_answers(NO_W3, (), {"latest_step": 2})
        + [job("SUCCEEDED", 3, NO_W3)],
        trace=LOSE_AND_RECOVER["trace"][:4]
        + recovered("node_lost", 2, "0:00:30", nodes=2, resume=2, first=3)
        + ["save_log " + A2],
        end=("succeeded", None),
    ),
    dict(
        name="min_nodes_not_met",
        opts=ON,
        script=LOSE_AND_RECOVER["script"][:3] + [{"failed": True, "msg": "2 of 3 node(s) alive after 600s"}],
        trace=LOSE_AND_RECOVER["trace"][:9],
        end=(
            "no_nodes",
            "Ray job %s was not resubmitted: 2 of 3 node(s) alive after 600s; lost: gpu-3 (10.0.0.3). Bring "
            "the nodes back (site.yml), then run submit.yml again; it attaches to the newest attempt" % SID,
        ),
    ),
    dict(
        name="min_nodes_from_alive_nodes_when_the_metadata_is_unreadable",
        opts=ON,
        script=[job(step=1), job(step=2, nodes=NO_W3, metadata={"rlinfra_nodes": "three"})]
        + recovery_answers(NO_W3, (), {"latest_step": 2})
        + [job("SUCCEEDED", 3, NO_W3)],
        trace=LOSE_AND_RECOVER["trace"][:4]
        + recovered("node_lost", 2, "0:00:30", nodes=2, resume=2, first=3)
        + ["save_log " + A2],
        end=("succeeded", None),
    ),
    dict(
        name="resume_on_another_shape_refused",
        opts=ON,
        script=LOSE_AND_RECOVER["script"][:2]
        + recovery_answers(NO_W3, (), {"latest_step": 5, "world_size": 3, "step_dir": "/ckpt/global_step_5"})[:3],
        trace=LOSE_AND_RECOVER["trace"][:9]
        + [
            "checkpoint /ckpt",
            SHAPE + "; not resubmitted: bring the cluster back to "
            "3 rank(s) (site.yml) and run submit.yml again, or set recovery.allow_reshard: "
            "true if the trainer can reshard",
        ],
        end=(
            "shape",
            "Ray job %s was not resubmitted: %s; not resubmitted: bring the cluster back to 3 rank(s) (site.yml) "
            "and run submit.yml again, or set recovery.allow_reshard: true if the trainer can reshard" % (SID, SHAPE),
        ),
    ),
    dict(
        name="resume_on_another_shape_when_resharding_is_allowed",
        opts=dict(ON, recovery=dict(REC, allow_reshard=True)),
        script=LOSE_AND_RECOVER["script"][:2]
        + recovery_answers(NO_W3, (), {"latest_step": 5, "world_size": 3, "step_dir": "/ckpt/global_step_5"})
        + [job("SUCCEEDED", 9, NO_W3)],
        trace=LOSE_AND_RECOVER["trace"][:9]
        + ["checkpoint /ckpt", SHAPE + "; resubmitting anyway (recovery.allow_reshard: true)"]
        + recovered("node_lost", 2, "0:00:30", resume=5, entry_nodes=2, first=9)[-3:]
        + ["save_log " + A2],
        end=("succeeded", None),
    ),
    dict(
        name="checkpoint_directory_unreadable",
        opts=ON,
        script=LOSE_AND_RECOVER["script"][:4] + [{"failed": True, "msg": "Permission denied"}],
        trace=LOSE_AND_RECOVER["trace"][:10],
        end=("checkpoint", "cannot read the checkpoint directory /ckpt on the head: Permission denied"),
    ),
    dict(
        name="nothing_to_resubmit",
        opts=dict(ON, job={}),
        script=LOSE_AND_RECOVER["script"][:5],
        trace=LOSE_AND_RECOVER["trace"][:10],
        end=("node_lost", "Ray job %s a node left the cluster; the wait has no job to resubmit (no job given)" % SID),
    ),
    dict(
        name="package_upload_fails",
        opts=dict(ON, job=dict(JOB, package=PACKAGE)),
        script=LOSE_AND_RECOVER["script"][:5] + [{"failed": True, "msg": "dashboard refused"}],
        trace=LOSE_AND_RECOVER["trace"][:10] + ["upload gcs://_ray_pkg_x.zip"],
        end=(
            "package",
            "the working_dir package gcs://_ray_pkg_x.zip could not be uploaded again: dashboard refused; "
            "run submit.yml again",
        ),
    ),
    dict(
        name="package_uploaded_again_then_submitted",
        opts=dict(ON, job=dict(JOB, package=PACKAGE)),
        script=LOSE_AND_RECOVER["script"][:5]
        + [{}]
        + LOSE_AND_RECOVER["script"][5:]
        + [job("SUCCEEDED", 3, (HEAD, W2, W3_BACK))],
        trace=LOSE_AND_RECOVER["trace"][:10]
        + ["upload gcs://_ray_pkg_x.zip"]
        + LOSE_AND_RECOVER["trace"][10:]
        + [RESUMED_A2, "save_log " + A2],
        end=("succeeded", None),
    ),
    dict(
        name="submission_refused",
        opts=ON,
        script=LOSE_AND_RECOVER["script"][:5] + [{"failed": True, "msg": "already exists"}],
        trace=LOSE_AND_RECOVER["trace"][:11],
        end=("submit", "attempt 2 (%s) could not be submitted: already exists" % A2),
        check=lambda dog, polls: (dog.sid, dog.attempt, dog.restarts) == (A2, 2, 1),
    ),
    dict(
        name="every_active_attempt_of_the_run_is_stopped_first",
        opts=ON,
        script=LOSE_AND_RECOVER["script"][:2]
        + recovery_answers(
            ALL,
            [
                {"submission_id": SID, "status": "RUNNING"},
                {"submission_id": "rlinfra-other-default", "status": "RUNNING"},
                {"submission_id": SID + "-a3", "status": "PENDING"},
            ],
            {"latest_step": 2},
        )
        + [job("SUCCEEDED", 3)],
        trace=LOSE_AND_RECOVER["trace"][:6]
        + [
            "stopping %s (still RUNNING) before the next attempt" % SID,
            "stop " + SID,
            "stopping %s-a3 (still PENDING) before the next attempt" % SID,
            "stop %s-a3" % SID,
        ]
        + LOSE_AND_RECOVER["trace"][6:]
        + [RESUMED_A2, "save_log " + A2],
        end=("succeeded", None),
    ),
    # The end race: the attempt SUCCEEDED as it was being stopped for a lost node: the run is complete, nothing resubmitted.
    dict(
        name="an_attempt_that_succeeded_as_it_was_stopped_ends_the_run",
        opts=ON,
        script=LOSE_AND_RECOVER["script"][:2] + [{"jobs": [{"submission_id": SID, "status": "SUCCEEDED"}]}],
        trace=LOSE_AND_RECOVER["trace"][:6]
        + ["attempt 1 (%s) had SUCCEEDED before it could be stopped: the run is complete, no new attempt" % SID],
        end=("succeeded", None),
        check=lambda dog, polls: (
            [(r["status"], r["why"]) for r in dog.rows] == [("SUCCEEDED", "succeeded")]
            and dog.restarts == 0
            and dog.attempt == 1
        ),
    ),
    # --- a resume proven, not assumed (issue 49) ------------------------------------------------------------------
    # Attempt 2 was given step 2 and logs step 1 first: it started over. Stopped at once, no attempt 3, one line.
    dict(
        name="an_attempt_that_starts_over_is_stopped_at_its_first_step",
        opts=dict(ON, recovery=dict(REC, max_restarts=3)),
        script=LOSE_AND_RECOVER["script"] + [job(step=1, nodes=(HEAD, W2, W3_BACK))],
        trace=[t.replace("recovery 1 of 1", "recovery 1 of 3") for t in LOSE_AND_RECOVER["trace"]]
        + ["stop " + A2, "save_log " + A2],
        end=(
            "not_resumed",
            "attempt 2 (%s) started over at step 1 instead of resuming from checkpoint step 2: stopped "
            "it; no further attempt (it would start over too): the trainer did not load the checkpoint: check that it "
            "reads it (verl: trainer.resume_mode auto, trainer.default_local_dir the run's checkpoint directory) and "
            "that the checkpoint's step directory is whole; then run submit.yml with -e run=NEW" % A2,
        ),
        check=lambda dog, polls: (
            [(r["status"], r["why"]) for r in dog.rows] == [("STOPPED", "node_lost"), ("STOPPED", "not_resumed")]
            and dog.attempt == 2
            and dog.events[-1] == dict(event="not_resumed", at_s=40.0, attempt=2, first_step=1, resume_step=2)
            and dog.events[-2]["resume_proven"] is False
        ),
    ),
    # Ended already when its first step is read (it failed at step 1): nothing to stop, the same end.
    dict(
        name="an_attempt_that_started_over_and_ended_is_not_recovered",
        opts=ON,
        script=LOSE_AND_RECOVER["script"] + [job("FAILED", 1, (HEAD, W2, W3_BACK))],
        trace=LOSE_AND_RECOVER["trace"] + ["save_log " + A2],
        end=(
            "not_resumed",
            "attempt 2 (%s) started over at step 1 instead of resuming from checkpoint step 2; no further "
            "attempt (it would start over too): the trainer did not load the checkpoint: check that it reads it (verl: "
            "trainer.resume_mode auto, trainer.default_local_dir the run's checkpoint directory) and that the "
            "checkpoint's step directory is whole; then run submit.yml with -e run=NEW" % A2,
        ),
        check=lambda dog, polls: (
            [(r["status"], r["why"]) for r in dog.rows] == [("STOPPED", "node_lost"), ("FAILED", "not_resumed")]
        ),
    ),
    # The log copy's first step decides, not the newest one: a poll that comes late sees step 4, yet the attempt began
    # at step 1. verl's asynchronous save is named as the cause when the experiment turned it on.
    dict(
        name="the_first_logged_step_decides_and_async_save_is_named",
        opts=dict(
            ON,
            job=dict(
                JOB,
                job_template=dict(
                    TEMPLATE, pairs=TEMPLATE["pairs"] + [["actor_rollout_ref.actor.checkpoint.async_save", True]]
                ),
            ),
        ),
        script=LOSE_AND_RECOVER["script"] + [job(step=4, nodes=(HEAD, W2, W3_BACK), first_step=1)],
        trace=LOSE_AND_RECOVER["trace"][:-2]
        + [
            "submit %s after node_lost from %s: %s actor_rollout_ref.actor.checkpoint.async_save=true"
            % (A2, SID, entrypoint()),
            LOSE_AND_RECOVER["trace"][-1],
            "stop " + A2,
            "save_log " + A2,
        ],
        end=(
            "not_resumed",
            "attempt 2 (%s) started over at step 1 instead of resuming from checkpoint step 2: stopped "
            "it; no further attempt (it would start over too): actor_rollout_ref.actor.checkpoint.async_save=true: "
            "verl's asynchronous save writes no tracker file (latest_checkpointed_iteration.txt), so "
            "trainer.resume_mode=auto starts over (verl issue 7952); turn it off, or resume by path "
            "(trainer.resume_mode=resume_path, trainer.resume_from_path=<checkpoint dir>/global_step_2); then run "
            "submit.yml with -e run=NEW" % A2,
        ),
    ),
    # The tracker names step 6, whose directory lacks rank 2's shard (a node lost mid-save): the resume is from step 4,
    # by path, and said; attempt 2's first step 5 proves it.
    dict(
        name="an_incomplete_last_checkpoint_resumes_from_the_newest_whole_one",
        opts=ON,
        script=LOSE_AND_RECOVER["script"][:4]
        + [
            {
                "path": "/ckpt",
                "latest_step": 6,
                "resume_step": 4,
                "resume_dir": "/ckpt/global_step_4",
                "incomplete": [{"step": 6, "missing_ranks": [2]}],
            },
            {},
            job(step=5, nodes=(HEAD, W2, W3_BACK)),
            job("SUCCEEDED", 8, (HEAD, W2, W3_BACK)),
        ],
        trace=LOSE_AND_RECOVER["trace"][:10]
        + [
            "checkpoint /ckpt: step 6 lacks the shards of rank(s) 2 (a node lost while saving?); the next attempt "
            "resumes from step 4, the newest whole one (/ckpt/global_step_4)",
            "submit %s after node_lost from %s: %s trainer.resume_mode=resume_path "
            "trainer.resume_from_path=/ckpt/global_step_4" % (A2, SID, entrypoint()),
            "attempt 2 (%s) submitted at 0:00:30 after node lost; resumes from checkpoint step 4" % A2,
            "attempt 2 (%s) resumed from checkpoint step 4: its first step seen is 5" % A2,
            "save_log " + A2,
        ],
        end=("succeeded", None),
    ),
    # No whole step at all: the next attempt starts over on purpose (resume_mode=disable), and nothing is expected of it.
    dict(
        name="no_whole_checkpoint_starts_over_on_purpose",
        opts=ON,
        script=LOSE_AND_RECOVER["script"][:4]
        + [
            {
                "path": "/ckpt",
                "latest_step": 2,
                "resume_step": None,
                "resume_dir": None,
                "incomplete": [{"step": 2, "missing_ranks": None}],
            },
            {},
            job(step=1, nodes=(HEAD, W2, W3_BACK)),
            job("SUCCEEDED", 8, (HEAD, W2, W3_BACK)),
        ],
        trace=LOSE_AND_RECOVER["trace"][:10]
        + [
            "checkpoint /ckpt holds no whole step (step 2 has no directory: a node lost while saving?): the next attempt "
            "starts from scratch",
            "submit %s after node_lost from %s: %s trainer.resume_mode=disable" % (A2, SID, entrypoint()),
            "attempt 2 (%s) submitted at 0:00:30 after node lost; no whole checkpoint: starts from scratch" % A2,
            "save_log " + A2,
        ],
        end=("succeeded", None),
    ),
]


# recovery.deadline: where it cuts the run, said once the attempt has a pace; no recovery it leaves no time for.
WALL = 1_800_000_000  # 2027-01-15T08:00:00Z, the watch's 0
TOTAL = dict(JOB, job_template=dict(TEMPLATE, pairs=TEMPLATE["pairs"] + [["trainer.total_training_steps", 50]]))
ROWS += [
    dict(
        name="deadline_says_where_it_cuts_the_run",
        opts=dict(wall=WALL, job=TOTAL, recovery={"deadline": "2027-01-15T08:01:40Z", "deadline_margin": 30}),
        script=[job(step=1), job(step=2), job(step=3), job("SUCCEEDED", 4)],
        trace=[
            "recovery.deadline 2027-01-15T08:01:40Z (in 0:01:20) cuts the run at about step 10 of 50 (10.0 s a step); "
            "it is told to save before it (a next run on new machines resumes from there)",
            "save_log " + SID,
        ],
        end=("succeeded", None),
    ),
    dict(
        name="deadline_after_the_runs_end",
        opts=dict(wall=WALL, job=TOTAL, recovery={"deadline": "2027-01-15T09:00:00Z"}),
        script=[job(step=40), job(step=41), job("SUCCEEDED", 50)],
        trace=[
            "recovery.deadline 2027-01-15T09:00:00Z (in 0:59:40): at 10.0 s a step the run ends at step 50 about "
            "0:58:10 before it",
            "save_log " + SID,
        ],
        end=("succeeded", None),
    ),
    dict(
        name="deadline_leaves_no_time_for_a_recovery",
        opts=dict(ON, wall=WALL, recovery=dict(REC, deadline="2027-01-15T08:00:25Z", deadline_margin=10)),
        script=[job(step=1, metadata=M3), job(step=2, nodes=NO_W3, metadata=M3)],
        trace=[
            LOST_W3 % "0:00:20",
            "recovery.deadline 2027-01-15T08:00:25Z (in 0:00:05) cuts the run at about step 2 (10.0 s a step); it is "
            "told to save before it (a next run on new machines resumes from there)",
            "stopping attempt 1 (%s): it lost a node and would hang or fail" % SID,
            "stop " + SID,
            "save_log " + SID,
            "attempt 1 (%s) ended: a node left the cluster, at step 2; recovery 1 of 1" % SID,
        ],
        end=(
            "deadline",
            "Ray job %s was not resubmitted: recovery.deadline 2027-01-15T08:00:25Z is 5 s away "
            "(recovery.deadline_margin 10 s): an attempt could not save before the machines end. On the "
            "next machines, run submit.yml -e exp=... again: it resumes from the newest checkpoint" % SID,
        ),
        check=lambda dog, polls: [e["event"] for e in dog.events] == ["node_lost", "deadline"],
    ),
]


# recovery.replace: a machine still gone after replace_after is replaced by the run's supervisor (the "replace"
# request, answered as module_utils/hyperbolic/replace.py does), then the wait for the nodes goes on.
REPLACE = dict(REC, replace=True, replace_after=300)
# Two workers lost at once, the recovery's wait for them over: the start both rows below share.
TWO_LOST_SCRIPT = [
    job(step=1, metadata=M3),
    job(step=2, nodes=(HEAD,), metadata=M3),
    {"jobs": []},
    {"failed": True, "msg": "1 of 3 node(s) alive after 300s", "_dt": 300},
    {"nodes": [HEAD]},
]


def two_lost_trace(wanted):
    return [
        "node gpu-2 (10.0.0.2) left the cluster at 0:00:20",
        LOST_W3 % "0:00:20",
        "stopping attempt 1 (%s): it lost a node and would hang or fail" % SID,
        "stop " + SID,
        "save_log " + SID,
        "attempt 1 (%s) ended: a node left the cluster, at step 2; recovery 1 of 1" % SID,
        "cluster jobs=True timeout=60 wait_for_nodes=1",
        "sleep 10",
        WAIT_300 % wanted,
        "cluster timeout=300 wait_for_nodes=3",
        "cluster timeout=30",
    ]


W3_NEW = node("w3n", "10.0.0.13")
WITH_W3_NEW = (HEAD, W2, W3_NEW)
REPLACED_W3 = dict(label="gpu-3 (10.0.0.3)", name="gpu-3", new_ip="10.0.0.13", rental="18003", old_rental="18002")
REPLACED_EVENT = dict(
    event="replaced",
    node="gpu-3 (10.0.0.3)",
    new="gpu-3",
    new_ip="10.0.0.13",
    rental="18003",
    old_rental="18002",
    detected_s=330.0,
    done_s=750.0,
)
BY_HAND = (
    "bring the machine back by hand (provision.yml rents what the label lacks, then site.yml), then run "
    "submit.yml again; it attaches to the newest attempt"
)
CONVERGE_TODO = "site.yml from the controller converges it (the label's rentals now include it), then submit.yml"
NO_NODES = (
    "Ray job %s was not resubmitted: %s; lost: %s. Bring the nodes back (site.yml), then run submit.yml again; "
    "it attaches to the newest attempt"
)
# Attempt 1 loses gpu-3 at 0:00:20; after the backoff, the wait for the nodes begins at 0:00:30.
BEFORE_WAIT = dict(script=LOSE_AND_RECOVER["script"][:3], trace=LOSE_AND_RECOVER["trace"][:7])
WAIT_300 = "waiting up to 300s for 3 alive node(s); a machine still gone then is replaced (recovery.replace, %d left)"
# replace_after (300 s) passes without gpu-3, and a look finds its address still gone: replacing it at 0:05:30.
STILL_GONE = [{"failed": True, "msg": "2 of 3 node(s) alive after 300s", "_dt": 300}, {"nodes": list(NO_W3)}]
REPLACING_W3 = [
    WAIT_300 % 1,
    "cluster timeout=300 wait_for_nodes=3",
    "cluster timeout=30",
    "gpu-3 (10.0.0.3) still gone after 300s: replacing it (recovery.replace)",
    "replace {head=False label=gpu-3 (10.0.0.3) name=gpu-3 node_ip=10.0.0.3}",
]
# Replaced in 7 minutes; then the whole node_wait_timeout for the nodes, and attempt 2 on the new machine at 0:12:30.
REPLACED = dict(
    script=BEFORE_WAIT["script"]
    + STILL_GONE
    + [dict(replaced=[REPLACED_W3], _dt=420), {"nodes": list(WITH_W3_NEW)}, {"latest_step": 2}, {}],
    trace=BEFORE_WAIT["trace"]
    + REPLACING_W3
    + [
        "replaced gpu-3 (10.0.0.3) by gpu-3 (10.0.0.13) in 0:07:00; waiting up to 600s for 3 alive node(s)",
        "cluster timeout=600 wait_for_nodes=3",
        "checkpoint /ckpt",
        "submit %s after node_lost from %s: %s" % (A2, SID, entrypoint()),
        "attempt 2 (%s) submitted at 0:12:30 after node lost; resumes from checkpoint step 2" % A2,
    ],
)
ROWS += [
    dict(
        name="replace_a_machine_still_gone_then_resubmit",
        opts=dict(ON, recovery=REPLACE),
        script=REPLACED["script"] + [job(step=3, nodes=WITH_W3_NEW), job("SUCCEEDED", 5, WITH_W3_NEW)],
        trace=REPLACED["trace"] + [RESUMED_A2, "save_log " + A2],
        end=("succeeded", None),
        check=lambda dog, polls: (
            dog.events
            == [
                dict(event="node_lost", node="gpu-3 (10.0.0.3)", at_s=20.0),
                REPLACED_EVENT,
                dict(
                    event="resubmitted",
                    after="node_lost",
                    detected_s=20.0,
                    submitted_s=750.0,
                    attempt=2,
                    resume_step=2,
                    first_step_s=760.0,
                    first_logged_step=3,
                    resume_proven=True,
                ),
            ]
            and (dog.replaced, dog.names.get("10.0.0.13"), dog.restarts) == (1, "gpu-3", 1)
            and [(r["status"], r["why"]) for r in dog.rows] == [("STOPPED", "node_lost"), ("SUCCEEDED", "succeeded")]
        ),
    ),
    # A node back within replace_after: no look, nothing replaced.
    dict(
        name="replace_on_and_the_node_is_back_in_time",
        opts=dict(ON, recovery=REPLACE),
        script=BEFORE_WAIT["script"]
        + [
            {"nodes": [HEAD, W2, W3_BACK], "_dt": 40},
            {"latest_step": 2},
            {},
            job(step=3, nodes=(HEAD, W2, W3_BACK)),
            job("SUCCEEDED", 5, (HEAD, W2, W3_BACK)),
        ],
        trace=BEFORE_WAIT["trace"]
        + [
            WAIT_300 % 1,
            "cluster timeout=300 wait_for_nodes=3",
            "checkpoint /ckpt",
            "submit %s after node_lost from %s: %s" % (A2, SID, entrypoint()),
            "attempt 2 (%s) submitted at 0:01:10 after node lost; resumes from checkpoint step 2" % A2,
            RESUMED_A2,
            "save_log " + A2,
        ],
        end=("succeeded", None),
        check=lambda dog, polls: dog.replaced == 0 and "replaced" not in [e["event"] for e in dog.events],
    ),
    dict(
        name="replace_fails",
        opts=dict(ON, recovery=REPLACE),
        script=BEFORE_WAIT["script"]
        + STILL_GONE
        + [dict(failed=True, msg="renting in place of gpu-3 failed: no machine matches", _dt=5)],
        trace=BEFORE_WAIT["trace"] + REPLACING_W3,
        end=(
            "replace",
            "Ray job %s was not resubmitted: replacing gpu-3 (10.0.0.3) failed: renting in place of gpu-3 "
            "failed: no machine matches; %s" % (SID, BY_HAND),
        ),
        check=lambda dog, polls: (
            dog.replaced == 0
            and [e["event"] for e in dog.events] == ["node_lost"]
            and dog.names == NAMES
            and dog.sid == SID
        ),
    ),
    # Rented, but its converge failed: counted, recorded, and the supervisor's own todo said.
    dict(
        name="replace_rents_but_the_converge_fails",
        opts=dict(ON, recovery=REPLACE),
        script=BEFORE_WAIT["script"]
        + STILL_GONE
        + [
            dict(
                failed=True,
                replaced=[REPLACED_W3],
                todo=CONVERGE_TODO,
                _dt=900,
                msg="the new machine gpu-3 could not "
                "be converged: site.yml failed (exit 2): fatal: [gpu-3]: UNREACHABLE!",
            )
        ],
        trace=BEFORE_WAIT["trace"] + REPLACING_W3,
        end=(
            "replace",
            "Ray job %s was not resubmitted: replacing gpu-3 (10.0.0.3) failed: the new machine gpu-3 "
            "could not be converged: site.yml failed (exit 2): fatal: [gpu-3]: UNREACHABLE!; %s" % (SID, CONVERGE_TODO),
        ),
        check=lambda dog, polls: (
            dog.events[-1] == dict(REPLACED_EVENT, done_s=1230.0)
            and dog.replaced == 1
            and dog.names.get("10.0.0.13") == "gpu-3"
        ),
    ),
    # Nothing gone for good (its SSH answers): the wait goes on for what is left of node_wait_timeout.
    dict(
        name="replace_finds_nothing_gone_for_good",
        opts=dict(ON, recovery=REPLACE),
        script=BEFORE_WAIT["script"]
        + STILL_GONE
        + [
            dict(replaced=[], msg="every lost machine still answers SSH", _dt=31),
            {"nodes": [HEAD, W2, W3_BACK]},
            {"latest_step": 2},
            {},
            job(step=3, nodes=(HEAD, W2, W3_BACK)),
            job("SUCCEEDED", 5, (HEAD, W2, W3_BACK)),
        ],
        trace=BEFORE_WAIT["trace"]
        + REPLACING_W3
        + [
            "nothing was replaced (every lost machine still answers SSH); waiting up to 300s more for 3 alive node(s)",
            "cluster timeout=300 wait_for_nodes=3",
            "checkpoint /ckpt",
            "submit %s after node_lost from %s: %s" % (A2, SID, entrypoint()),
            "attempt 2 (%s) submitted at 0:06:01 after node lost; resumes from checkpoint step 2" % A2,
            RESUMED_A2,
            "save_log " + A2,
        ],
        end=("succeeded", None),
        check=lambda dog, polls: dog.replaced == 0 and [e["event"] for e in dog.events] == ["node_lost", "resubmitted"],
    ),
    dict(
        name="replace_answers_nothing_and_the_nodes_stay_short",
        opts=dict(ON, recovery=REPLACE),
        script=BEFORE_WAIT["script"] + STILL_GONE + [{}, {"failed": True, "msg": "2 of 3 node(s) alive after 300s"}],
        trace=BEFORE_WAIT["trace"]
        + REPLACING_W3
        + [
            "nothing was replaced (no machine is gone for good); waiting up to 300s more for 3 alive node(s)",
            "cluster timeout=300 wait_for_nodes=3",
        ],
        end=("no_nodes", NO_NODES % (SID, "2 of 3 node(s) alive after 300s", "gpu-3 (10.0.0.3)")),
    ),
    # Two machines gone: both asked for at once, in the order they left.
    dict(
        name="replace_two_machines_at_once",
        opts=dict(ON, recovery=dict(REPLACE, max_replacements=2)),
        script=TWO_LOST_SCRIPT
        + [
            dict(
                failed=True,
                msg="gpu-2 (10.0.0.2) is not one of cluster prov's rentals",
                todo="bring it back by hand (site.yml --limit gpu-2), then run submit.yml again",
            )
        ],
        trace=two_lost_trace(2)
        + [
            "gpu-2 (10.0.0.2), gpu-3 (10.0.0.3) still gone after 300s: replacing them (recovery.replace)",
            "replace {head=False label=gpu-2 (10.0.0.2) name=gpu-2 node_ip=10.0.0.2}, "
            "{head=False label=gpu-3 (10.0.0.3) name=gpu-3 node_ip=10.0.0.3}",
        ],
        end=(
            "replace",
            "Ray job %s was not resubmitted: replacing gpu-2 (10.0.0.2), gpu-3 (10.0.0.3) failed: "
            "gpu-2 (10.0.0.2) is not one of cluster prov's rentals; bring it back by hand (site.yml --limit gpu-2), "
            "then run submit.yml again" % SID,
        ),
    ),
    # Two gone, one replacement left: only the first is asked for; the wait then fails on the other.
    dict(
        name="replace_no_more_than_max_replacements",
        opts=dict(ON, recovery=REPLACE),
        script=TWO_LOST_SCRIPT
        + [
            dict(
                replaced=[
                    dict(label="gpu-2 (10.0.0.2)", name="gpu-2", new_ip="10.0.0.12", rental="18004", old_rental="18001")
                ],
                _dt=60,
            ),
            {"failed": True, "msg": "2 of 3 node(s) alive after 600s"},
        ],
        trace=two_lost_trace(1)
        + [
            "gpu-2 (10.0.0.2) still gone after 300s: replacing it (recovery.replace)",
            "replace {head=False label=gpu-2 (10.0.0.2) name=gpu-2 node_ip=10.0.0.2}",
            "replaced gpu-2 (10.0.0.2) by gpu-2 (10.0.0.12) in 0:01:00; waiting up to 600s for 3 alive node(s)",
            "cluster timeout=600 wait_for_nodes=3",
        ],
        end=("no_nodes", NO_NODES % (SID, "2 of 3 node(s) alive after 600s", "gpu-2 (10.0.0.2), gpu-3 (10.0.0.3)")),
        check=lambda dog, polls: dog.replaced == 1,
    ),
    # The one replacement was made in the first recovery: the second waits as without recovery.replace, and says why.
    dict(
        name="replace_once_then_max_replacements_is_used",
        opts=dict(ON, recovery=dict(REPLACE, max_restarts=2)),
        script=REPLACED["script"]
        + [
            job(step=3, nodes=WITH_W3_NEW),
            job(step=4, nodes=NO_W3),
            {"jobs": [{"submission_id": A2, "status": "STOPPED"}]},
            {"failed": True, "msg": "2 of 3 node(s) alive after 600s"},
        ],
        trace=[t.replace("recovery 1 of 1", "recovery 1 of 2") for t in REPLACED["trace"]]
        + [
            RESUMED_A2,
            "node gpu-3 (10.0.0.13) left the cluster at 0:12:50",
            "stopping attempt 2 (%s): it lost a node and would hang or fail" % A2,
            "stop " + A2,
            "save_log " + A2,
            "attempt 2 (%s) ended: a node left the cluster, at step 4; recovery 2 of 2" % A2,
            "cluster jobs=True timeout=60 wait_for_nodes=1",
            "sleep 10",
            "waiting up to 600s for 3 alive node(s); recovery.max_replacements (1) used: no machine is replaced again",
            "cluster timeout=600 wait_for_nodes=3",
        ],
        end=("no_nodes", NO_NODES % (A2, "2 of 3 node(s) alive after 600s", "gpu-3 (10.0.0.3), gpu-3 (10.0.0.13)")),
        check=lambda dog, polls: dog.replaced == 1 and [e["event"] for e in dog.events].count("replaced") == 1,
    ),
    dict(
        name="replace_on_with_max_replacements_0",
        opts=dict(ON, recovery=dict(REPLACE, max_replacements=0)),
        script=LOSE_AND_RECOVER["script"]
        + [job(step=3, nodes=(HEAD, W2, W3_BACK)), job("SUCCEEDED", 5, (HEAD, W2, W3_BACK))],
        trace=[
            t + "; recovery.max_replacements (0) used: no machine is replaced again"
            if t == "waiting up to 600s for 3 alive node(s)"
            else t
            for t in LOSE_AND_RECOVER["trace"]
        ]
        + [RESUMED_A2, "save_log " + A2],
        end=("succeeded", None),
    ),
    # recovery.replace off (its other keys set or not): the wait of before, and no replace request.
    dict(
        name="replace_off_waits_as_before",
        opts=dict(ON, recovery=dict(REC, replace=False, replace_after=60, max_replacements=3)),
        script=BEFORE_WAIT["script"] + [{"failed": True, "msg": "2 of 3 node(s) alive after 600s"}],
        trace=LOSE_AND_RECOVER["trace"][:9],
        end=("no_nodes", NO_NODES % (SID, "2 of 3 node(s) alive after 600s", "gpu-3 (10.0.0.3)")),
        check=lambda dog, polls: dog.replaced == 0 and dog.settings["replace"] is False,
    ),
    dict(
        name="replace_null_keeps_the_default_off",
        opts=dict(ON, recovery=dict(REC, replace=None)),
        script=LOSE_AND_RECOVER["script"]
        + [job(step=3, nodes=(HEAD, W2, W3_BACK)), job("SUCCEEDED", 5, (HEAD, W2, W3_BACK))],
        trace=LOSE_AND_RECOVER["trace"] + [RESUMED_A2, "save_log " + A2],
        end=("succeeded", None),
    ),
]


@pytest.mark.parametrize("row", ROWS, ids=[row["name"] for row in ROWS])
def test_poll_sequence(row):
    dog, trace, polls, end = drive(row["script"], **row.get("opts", {}))
    assert trace == row["trace"]
    assert end == row["end"]
    if row.get("check"):
        assert row["check"](dog, polls)


def test_the_table_covers_at_least_forty_sequences():
    assert len(ROWS) >= 40 and len({row["name"] for row in ROWS}) == len(ROWS)


def test_replace_on_never_waits_less_than_replace_off():
    """gpu-3 answers again just after replace_after: nothing to replace, and the wait must go on for the rest of
    node_wait_timeout (with recovery.replace off it waits all 600 s), not end the run at 300 s."""
    dog, trace, dummy, end = drive(
        BEFORE_WAIT["script"]
        + [
            STILL_GONE[0],
            {"nodes": [HEAD, W2, W3_BACK]},
            {"nodes": [HEAD, W2, W3_BACK]},
            {"latest_step": 2},
            {},
            job(step=3, nodes=(HEAD, W2, W3_BACK)),
            job("SUCCEEDED", 5, (HEAD, W2, W3_BACK)),
        ],
        **dict(ON, recovery=REPLACE),
    )
    assert end == ("succeeded", None) and dog.attempt == 2
    assert "cluster timeout=300 wait_for_nodes=3" in trace[trace.index("cluster timeout=30") :]
    assert not any(t.startswith("replace ") for t in trace)


def test_result_of_a_head_restart_has_no_status_and_names_the_line():
    dog, dummy, dummy, (reason, line) = drive([job(step=3), gone(RESTARTED)])
    out = dog.result(reason, line, 25.0, job_url=URL + "/#/jobs/x", log_paths=["/a/x.log"], artifacts_error="disk full")
    assert (out["status"], out["reason"], out["reason_line"], out["succeeded"], out["timed_out"]) == (
        None,
        "head_restart",
        line,
        False,
        False,
    )
    assert (out["dashboard_url"], out["address"], out["log_path"], out["waited_s"], out["last_step"]) == (
        URL + "/#/jobs/x",
        URL,
        "/a/x.log",
        25.0,
        3,
    )
    assert out["summary"][0] == "status:        UNKNOWN - " + line
    assert "artifacts:     NOT SAVED - disk full" in out["summary"]


def test_result_of_a_success_after_a_recovery():
    dog, dummy, dummy, (reason, line) = drive(
        LOSE_AND_RECOVER["script"] + [job("SUCCEEDED", 5, dashboard_url=URL + "/#/jobs/a2")], **ON
    )
    out = dog.result(reason, line, 60.0)
    assert (out["status"], out["succeeded"], out["submission_id"], out["attempt"], out["log_path"]) == (
        "SUCCEEDED",
        True,
        A2,
        2,
        "",
    )
    assert "reason_line" not in out and out["dashboard_url"] == URL + "/#/jobs/a2"
    assert "  1. %s: STOPPED (a node left the cluster), steps reached 2" % SID in out["summary"]


def test_the_clock_starts_when_the_watch_does():
    dog = watchdog.Watchdog(dict(submission_id=SID, stall_timeout=5, progress_interval=10), 100.0)
    steps = dog.watch(1000.0)
    assert next(steps) == ("poll", 10, None)
    assert steps.send((job(step=1), 1010.0)) == ("progress", job(step=1))
    assert dog.step_at == 1000.0 and dog.elapsed() == "0:00:10"
