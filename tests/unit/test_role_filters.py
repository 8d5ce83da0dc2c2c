"""Filters that carry the choices of the ray and verl_job roles' task files (issue 50 point 6): site.yml's preflight
(which node speaks for its cluster, one report per node for rlinfra.verl.ray_node_guard), and what verl_job refuses
before a submit and prints for stop, status and the per-node logs. Each line is the one the playbooks printed."""

from __future__ import annotations

import pytest

from ansible_collections.rlinfra.verl.plugins.filter.ray_guard import ray_guard_nodes, ray_reporter
from ansible_collections.rlinfra.verl.plugins.filter.secrets_file import code_secrets
from ansible_collections.rlinfra.verl.plugins.filter.verl_job_lines import (
    node_logs_lines,
    on_end_refusal,
    replace_refusal,
    status_lines,
    stop_line,
)

HOSTVARS = {"h1": {}, "w1": {}, "w2": {}, "h2": {"ray_cluster": "b"}, "w3": {"ray_cluster": "b"}}
GROUPS = {"ray_head": ["h1", "h2"], "ray_workers": ["w1", "w2", "w3"]}


def test_the_head_speaks_for_its_cluster_when_it_is_in_the_play():
    assert ray_reporter(["w1", "h1", "w2"], GROUPS, HOSTVARS) == dict(cluster="default", head="h1", reporter="h1")
    assert ray_reporter(["w3", "h2"], GROUPS, HOSTVARS, "b") == dict(cluster="b", head="h2", reporter="h2")


def test_without_its_head_the_clusters_first_node_in_the_play_speaks():
    assert ray_reporter(["w3", "w2", "w1"], GROUPS, HOSTVARS) == dict(cluster="default", head="h1", reporter="w2")
    assert ray_reporter(["w1"], {"ray_workers": ["w1"]}, HOSTVARS) == dict(cluster="default", head="", reporter="w1")


def test_one_report_per_node_with_the_jobs_on_the_one_that_listed_them():
    lead = dict(cluster="default", head="h1", reporter="h1")
    job = {"submission_id": "rlinfra-smoke-default", "status": "RUNNING"}
    hostvars = {
        "h1": dict(
            ray__lead=lead, ray__plan=dict(restart=True, reasons=["ray_env"]), ray__jobs=dict(running_jobs=[job])
        ),
        "w1": dict(ray__lead=lead, ray__plan=dict(restart=False, reasons=[]), ray__jobs=dict(skipped=True)),
    }
    assert ray_guard_nodes(["h1", "w1"], hostvars) == [
        dict(
            host="h1",
            cluster="default",
            reports_jobs=True,
            restart=True,
            reasons=["ray_env"],
            running_jobs=[job],
            jobs_error="",
        ),
        dict(
            host="w1", cluster="default", reports_jobs=False, restart=False, reasons=[], running_jobs=[], jobs_error=""
        ),
    ]


@pytest.mark.parametrize(
    "jobs, error",
    [
        (
            dict(failed=True, msg="dashboard at http://10.0.0.1:8265 did not answer"),
            "dashboard at http://10.0.0.1:8265 did not answer",
        ),
        (dict(failed=True), "unknown error"),
        (dict(changed=False, running_jobs=[]), ""),
        (dict(skipped=True, skip_reason="Conditional result was False"), ""),
    ],
)
def test_jobs_that_could_not_be_listed_are_said_so(jobs, error):
    hostvars = {"w1": dict(ray__lead=dict(cluster="b", reporter="w1"), ray__plan=dict(restart=False), ray__jobs=jobs)}
    (node,) = ray_guard_nodes(["w1"], hostvars)
    assert node["jobs_error"] == error and node["cluster"] == "b" and node["reports_jobs"]


SUPERVISED = {"cluster": "c1", "wait": {"supervise": "cluster"}}
WATCHED_HERE = {"cluster": "c1", "wait": {"supervise": "controller"}}


def test_on_end_keep_is_never_refused_and_a_release_needs_the_supervisor_and_the_key():
    assert on_end_refusal(WATCHED_HERE, "keep") == on_end_refusal(SUPERVISED, "release", "key") == ""
    assert on_end_refusal(WATCHED_HERE, "release", "key") == (
        "on_end: release needs the run's supervisor on the head (wait.supervise: cluster), which gives the machines "
        "back when the run ends; set wait.supervise: cluster or on_end: keep; nothing was submitted"
    )
    assert on_end_refusal(SUPERVISED, "release_always", "") == (
        "on_end: release_always gives the rentals back through the Hyperbolic API, and neither HYPERBOLIC_API_KEY (the "
        "controller's environment) nor verl_job_hyperbolic_api_key is set: set one, or -e on_end=keep; nothing was "
        "submitted"
    )


def test_recovery_replace_names_every_reason_it_cannot_work():
    assert replace_refusal(SUPERVISED, True, "key", "/keys/replace") == ""
    assert replace_refusal(WATCHED_HERE, False, "", "") == (
        "recovery.replace: the run's supervisor on the head replaces machines: set wait.supervise: cluster; cluster c1 "
        "was not rented by provision.yml (the head has no /etc/rlinfra/hyperbolic-c1.json): on SSH hosts and Slurm, "
        "bring a lost machine back by hand (site.yml --limit); neither HYPERBOLIC_API_KEY (the controller's "
        "environment) nor verl_job_hyperbolic_api_key is set; hyperbolic_replace_ssh_key is not set: name the private "
        "key (on the controller) of an SSH key the account's machines accept, kept for this (never your own key: it "
        "goes to the head); nothing was submitted"
    )
    assert replace_refusal(SUPERVISED, True, "", "/keys/replace") == (
        "recovery.replace: neither HYPERBOLIC_API_KEY (the controller's environment) nor verl_job_hyperbolic_api_key "
        "is set; nothing was submitted"
    )


@pytest.mark.parametrize(
    "stopped, check_mode, line",
    [
        (dict(found=False, changed=False), False, "job base does not exist (not submitted, or deleted)"),
        (
            dict(found=True, changed=True, submission_id="base-a2", status="RUNNING"),
            True,
            "check mode: base-a2 is RUNNING and would be stopped; nothing was stopped",
        ),
        (
            dict(found=True, changed=True, submission_id="base-a2", status="STOPPED"),
            False,
            "stopped base-a2, now STOPPED; a resubmission (-e run=N) resumes from the last checkpoint",
        ),
        (
            dict(found=True, changed=False, submission_id="base", status="SUCCEEDED"),
            True,
            "job base was not running (SUCCEEDED)",
        ),
    ],
)
def test_what_stop_says(stopped, check_mode, line):
    assert stop_line(stopped, "base", check_mode) == line


def test_status_prints_the_run_or_how_to_submit_it():
    loaded = dict(submission_id="rlinfra-smoke-c1", cluster="c1")
    polled = dict(
        attempts=[dict(line="attempt 1: FAILED"), dict(line="attempt 2: RUNNING")],
        summary=["status:        RUNNING"],
        submission_id="rlinfra-smoke-c1-a2",
        logs_tail="step 1\nstep 2\n",
    )
    assert status_lines(polled, dict(report=["supervisor: watching"]), ["fitness: fit"], loaded, "smoke") == [
        "fitness: fit",
        "status:        RUNNING",
        "attempt 1: FAILED",
        "attempt 2: RUNNING",
        "supervisor: watching",
        "log tail of rlinfra-smoke-c1-a2:",
        "step 1",
        "step 2",
    ]
    assert status_lines(dict(attempts=[]), dict(report=[]), [], loaded, "smoke") == [
        "status:        NOT SUBMITTED (no job rlinfra-smoke-c1 on Ray cluster c1): ansible-playbook submit.yml -e exp=smoke"
    ]


def test_the_per_node_logs_say_where_they_went_and_what_they_say():
    report = dict(job_id="02000000", lines=["w1: 12 file(s)"])
    amended = dict(changed=True, path="/a/run/report.md", events=[1, 2])
    assert node_logs_lines(report, "sid", "/a/sid/nodes", ["Xid 79 on w1"], amended) == [
        "Per-node logs of sid (Ray job 02000000): /a/sid/nodes/<host>/",
        "w1: 12 file(s)",
        "what the logs say:",
        "  Xid 79 on w1",
        "report: /a/run/report.md (2 kernel event(s) of the run added)",
    ]
    skipped = dict(changed=False, skipped=True)
    assert node_logs_lines(dict(job_id=None, lines=[]), "sid", "/b", [], skipped, True) == [
        "Per-node logs of sid: /b/<host>/ (check mode: nothing fetched)"
    ]


def test_code_secrets_from_the_given_values_else_the_environment(monkeypatch):
    monkeypatch.setenv("DEPLOY_KEY", "-----BEGIN KEY-----")
    monkeypatch.delenv("GH_TOKEN", raising=False)
    code = dict(token_secret="GH_TOKEN", ssh_key_secret="DEPLOY_KEY")
    assert code_secrets(code, {"GH_TOKEN": "ghp_x"}) == dict(
        token="ghp_x", ssh_key="-----BEGIN KEY-----", missing=[], error=""
    )
    out = code_secrets(code, {"GH_TOKEN": ""})
    assert out["token"] == "" and out["missing"] == ["GH_TOKEN"]
    assert out["error"] == (
        "code: GH_TOKEN (named by code.token_secret / code.ssh_key_secret) has no value: set it in verl_job_secrets "
        "(e.g. from Vault) or in the controller's environment."
    )
    assert code_secrets(dict(token_secret="GH_TOKEN", ssh_key_secret="GH_TOKEN"), {})["missing"] == ["GH_TOKEN"]
    assert code_secrets(dict(token_secret=None, ssh_key_secret=None), {}) == dict(
        token="", ssh_key="", missing=[], error=""
    )


def test_what_the_converge_record_watches():
    from ansible_collections.rlinfra.verl.plugins.filter.ray_cluster import ray_watch

    head = ray_watch("head", "/etc/ray", "/opt/rlinfra/venv", False, True, True)
    assert head["files"][:2] == [
        "/etc/systemd/system/ray-head.service",
        "/etc/systemd/system/rlinfra-ray-firewall.service",
    ]
    assert len(head["files"]) == 9 and "/etc/fstab" in head["files"]
    assert head["dirs"] == ["/etc/ray", "/opt/rlinfra/venv", "/etc/ray/metrics"]
    assert head["packages"] == ["/opt/rlinfra/venv/lib/python*/site-packages"]
    assert head["units"] == ["ray-head.service", "rlinfra-node-exporter.service", "rlinfra-prometheus.service"]
    assert head["nft_tables"] == ["rlinfra_ray"]
    worker = ray_watch("worker", "/etc/ray", "/opt/rlinfra/venv", True, False, False)
    assert worker["files"][0] == "/etc/systemd/system/ray-worker.service"
    assert worker["dirs"] == ["/etc/ray", "/etc/ray/metrics"] and worker["packages"] == []
    assert worker["units"] == ["ray-worker.service"] and worker["nft_tables"] == []
    assert ray_watch("worker", "/etc/ray", "/v", False, True, False)["units"] == [
        "ray-worker.service",
        "rlinfra-node-exporter.service",
    ]


def test_the_cluster_line_comes_before_the_preflight_but_not_in_a_dry_run():
    from ansible_collections.rlinfra.verl.plugins.filter.verl_job_lines import preflight_lines

    rendered = dict(preflight=dict(lines=["preflight: ok entrypoint"]))
    cluster = dict(address="http://10.0.0.1:8265", alive_nodes=3, total_gpus=24, total_cpus=96.0)
    assert preflight_lines(rendered, cluster, "c1") == [
        "Ray cluster c1 at http://10.0.0.1:8265: 3 alive node(s), 24 GPU(s), 96.0 CPU(s)",
        "preflight: ok entrypoint",
    ]
    assert preflight_lines(rendered, dict(skipped=True), "c1", True) == ["preflight: ok entrypoint"]


def test_the_failure_line_names_the_causes_the_driver_log_and_the_node_logs():
    from ansible_collections.rlinfra.verl.plugins.filter.verl_job_lines import failure_line

    result = dict(msg="job rlinfra-x FAILED at step 12", log_path="/a/x.log")
    assert failure_line(result, ["Xid 79 on w1", "NCCL timeout"], "/a/x/nodes") == (
        "job rlinfra-x FAILED at step 12: Xid 79 on w1; NCCL timeout - driver log: /a/x.log - node logs: /a/x/nodes"
    )
    assert failure_line(dict(result, log_path=""), [], None) == "job rlinfra-x FAILED at step 12"


def test_a_check_mode_merge_merged_nothing():
    from ansible_collections.rlinfra.verl.plugins.filter.verl_job_lines import merge_result

    merged = dict(step=4, source="/c/global_step_4/actor", target="/m/gsm8k", merged=True, uploaded_to="", report=[])
    assert merge_result(merged, "gsm8k") == dict(
        experiment="gsm8k", step=4, source="/c/global_step_4/actor", target="/m/gsm8k", merged=True, uploaded_to=""
    )
    assert merge_result(merged, "gsm8k", True)["merged"] is False
