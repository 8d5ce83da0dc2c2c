"""Restart decisions of a Ray node (rlinfra.verl.ray_node_state) and site.yml's refusal to restart Ray under a
running job (rlinfra.verl.ray_node_guard, module_utils/ray/node_state.py)."""

from __future__ import annotations

import json
import os
import sys

import pytest

from ansible_collections.rlinfra.verl.plugins.module_utils.node.python_env import inputs_digest
from ansible_collections.rlinfra.verl.plugins.module_utils.ray import node_state as ns
from ansible_collections.rlinfra.verl.plugins.modules import ray_node_guard, ray_node_state

INPUTS = {"ray_env": "e" * 64, "token": "t" * 64, "unit": {"role": "worker", "temp_dir": "/workspace/ray"}}
JOB = {
    "submission_id": "rlinfra-smoke-default-r1",
    "status": "RUNNING",
    "metadata": {"rlinfra_experiment": "smoke", "rlinfra_run": "r1", "rlinfra_cluster": "default"},
}


# --- the flag -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, want",
    [
        (True, True),
        (False, False),
        (1, True),
        (0, False),
        ("true", True),
        ("TRUE", True),
        ("Yes", True),
        ("1", True),
        ("false", False),
        ("No", False),
        ("0", False),
        (" true ", True),
    ],
)
def test_flag_accepts_booleans_and_their_words(value, want):
    assert ns.parse_flag(value) is want


@pytest.mark.parametrize("value", ["treu", "", "y", "on", "2", 2, -1, 1.0, None, [], {}])
def test_flag_refuses_anything_else(value):
    with pytest.raises(ValueError) as err:
        ns.parse_flag(value)
    assert str(err.value).startswith("ray_restart_running_jobs must be true or false (also yes/no/1/0, any case), got ")
    assert "\n" not in str(err.value) and str(err.value).endswith("nothing was changed")


# --- reasons --------------------------------------------------------------------------------------------


def test_reasons():
    parts = ns.part_digests(INPUTS)
    record = json.loads(ns.record_content(parts, "fp1"))
    assert ns.restart_reasons(None, parts, "fp1") == ["no_record"]
    assert ns.restart_reasons(record, parts, "fp1") == []
    assert ns.restart_reasons(record, parts, "fp2") == ["environment"]
    assert ns.restart_reasons(record, parts, "fp1", python_env_changed=True) == ["python_env"]
    changed = ns.part_digests(dict(INPUTS, ray_env="f" * 64, unit={"role": "worker", "temp_dir": "/x"}))
    assert ns.restart_reasons(record, changed, "fp1") == ["ray_env", "unit"]
    assert ns.restart_reasons(record, ns.part_digests({"ray_env": "e" * 64}), "fp1") == ["token", "unit"]


def test_digests_ignore_key_order():
    assert ns.part_digests({"unit": {"a": 1, "b": [1, 2]}}) == ns.part_digests({"unit": {"b": [1, 2], "a": 1}})
    assert ns.part_digests({"unit": {"a": 1}}) != ns.part_digests({"unit": {"a": "1 "}})


# --- the guard ------------------------------------------------------------------------------------------


def node(host, cluster="default", head=False, restart=False, reasons=(), jobs=None, error=""):
    return dict(
        host=host,
        cluster=cluster,
        reports_jobs=head,
        restart=restart,
        reasons=list(reasons),
        running_jobs=jobs,
        jobs_error=error,
    )


def test_guard_refuses_naming_nodes_reasons_jobs_and_the_ways_on():
    nodes = [
        node("h", head=True, restart=True, reasons=["python_env"], jobs=[JOB]),
        node("w1", restart=True, reasons=["python_env"]),
        node("w2", restart=True, reasons=["python_env", "unit"]),
        node("w3"),
    ]
    errors, warnings, running = ns.guard(nodes, allow=False)
    assert warnings == [] and running == {"default": ["rlinfra-smoke-default-r1"]}
    (error,) = errors
    assert error == (
        "Ray would restart on h, w1 (python_env); w2 (python_env, unit) of cluster 'default', where job(s) "
        "rlinfra-smoke-default-r1 (RUNNING) run: stop them first (ansible-playbook stop.yml -e exp=smoke "
        "-e run=r1) or re-run with -e ray_restart_running_jobs=true to restart anyway (they fail)"
    )
    assert ns.refusal(errors).startswith("Refusing to restart Ray under a running job, nothing was changed: Ray would")


def test_guard_allowed_warns():
    errors, warnings, _ = ns.guard([node("h", head=True, restart=True, reasons=["ray_env"], jobs=[JOB])], allow=True)
    assert errors == [] and "rlinfra-smoke-default-r1 (RUNNING)" in warnings[0] and "they will fail" in warnings[0]


def test_guard_lets_through_what_no_job_is_under():
    nodes = [
        node("h", head=True, jobs=[JOB]),
        node("w"),  # a job, no restart
        node("h2", cluster="b", head=True, restart=True, reasons=["unit"], jobs=[]),  # a restart, no job
        node("w2", cluster="b", restart=True, reasons=["no_record"]),
    ]
    assert ns.guard(nodes, allow=False) == ([], [], {"default": ["rlinfra-smoke-default-r1"], "b": []})


def test_guard_one_error_per_blocked_cluster_and_unlisted_jobs():
    other = dict(JOB, submission_id="hand-made", metadata={})
    pending = dict(
        JOB, status="PENDING", submission_id="rlinfra-x-b", metadata={"rlinfra_experiment": "x", "rlinfra_cluster": "b"}
    )
    nodes = [
        node("h", head=True, restart=True, reasons=["token"], jobs=[other]),
        node("h2", cluster="b", head=True, jobs=[pending]),
        node("w2", cluster="b", restart=True, reasons=["environment"]),
        node("h3", cluster="c", head=True, error="HTTP 503"),
        node("w3", cluster="c", restart=True, reasons=["unit"]),
    ]
    errors, _, _ = ns.guard(nodes, allow=False)
    assert len(errors) == 3
    assert "hand-made (RUNNING)" in errors[0] and "(ray job stop hand-made)" in errors[0]
    assert "rlinfra-x-b (PENDING)" in errors[1] and "(ansible-playbook stop.yml -e exp=x -e cluster=b)" in errors[1]
    assert "w3 (unit) of cluster 'c', but its running jobs could not be listed (HTTP 503)" in errors[2]
    assert ns.guard(nodes, allow=True)[0] == []


def test_guard_module(module_runner):
    nodes = [
        node("h", head=True, restart=True, reasons=["python_env"], jobs=[JOB]),
        node("w", restart=True, reasons=["python_env"]),
    ]
    res = module_runner(ray_node_guard.main, dict(nodes=nodes))
    assert res["failed"] is True and "\n" not in res["msg"]
    assert res["msg"].startswith(
        "Refusing to restart Ray under a running job, nothing was changed: Ray would restart on h, w"
    )
    assert res["restarting"] == {"default": ["h", "w"]}

    typo = module_runner(ray_node_guard.main, dict(nodes=nodes, restart_running_jobs="treu"))
    assert typo["failed"] is True and typo["msg"].startswith("ray_restart_running_jobs must be true or false")
    assert "'treu'" in typo["msg"]

    allowed = module_runner(ray_node_guard.main, dict(nodes=nodes, restart_running_jobs="yes"), check_mode=True)
    assert allowed.get("failed") is not True and allowed["allow"] is True and allowed["changed"] is False
    assert "rlinfra-smoke-default-r1" in json.dumps(allowed.get("warnings"))
    assert allowed["running_jobs"] == {"default": ["rlinfra-smoke-default-r1"]}

    quiet = module_runner(
        ray_node_guard.main, dict(nodes=[node("h", head=True, jobs=[JOB])], restart_running_jobs=False)
    )
    assert quiet.get("failed") is not True and quiet["allow"] is False and quiet["restarting"] == {}


# --- ray_node_state -------------------------------------------------------------------------------------


@pytest.fixture
def state(tmp_path, module_runner, monkeypatch):
    active = {"value": True}
    monkeypatch.setattr(ns, "service_active", lambda module, service: active["value"])
    env_state = tmp_path / "venv-state.json"
    env_state.write_text(json.dumps({"fingerprint": "fp1", "inputs": "in1"}))

    def run(check_mode=False, **options):
        args = dict(
            path=str(tmp_path / "rlinfra-state.json"),
            service="ray-worker.service",
            inputs=INPUTS,
            python_env_state=str(env_state),
        )
        args.update(options)
        return module_runner(ray_node_state.main, args, check_mode=check_mode)

    run.active, run.env_state, run.path = active, env_state, tmp_path / "rlinfra-state.json"
    return run


def test_state_query_record_query(state):
    first = state()
    assert (first["active"], first["recorded"], first["restart"], first["reasons"]) == (
        True,
        False,
        True,
        ["no_record"],
    )
    state.active["value"] = False
    assert state()["restart"] is False  # not running: a start, not a restart
    state.active["value"] = True

    dry = state(state="recorded", check_mode=True)
    assert dry["changed"] is True and not state.path.exists()
    rec = state(state="recorded")
    assert rec["changed"] is True and os.stat(state.path).st_mode & 0o777 == 0o600
    assert json.loads(state.path.read_text()) == {"version": 1, "parts": ns.part_digests(INPUTS), "fingerprint": "fp1"}
    assert state(state="recorded")["changed"] is False

    same = state()
    assert (
        same["changed"] is False and same["restart"] is False and same["reasons"] == [] and same["fingerprint"] == "fp1"
    )
    assert state(inputs=dict(INPUTS, token="u" * 64))["reasons"] == ["token"]

    state.env_state.write_text(json.dumps({"fingerprint": "fp2", "inputs": "in2"}))  # a new environment installed
    assert state()["reasons"] == ["environment"]


def test_state_foresees_a_new_package_set(state):
    state(state="recorded")
    python = sys.executable
    version = os.popen("%s -VV" % python).read().strip().splitlines()[0]
    want = dict(python=python, packages=["ray[default]==2.60.0", "six"])
    state.env_state.write_text(
        json.dumps({"fingerprint": "fp1", "inputs": inputs_digest(want["packages"], [], [], version)})
    )
    assert state(python_env=want)["reasons"] == []
    assert state(python_env=dict(want, packages=["six", "ray[default]==2.60.0"]))["reasons"] == []  # order
    assert state(python_env=dict(want, packages=["ray[default]==2.60.0"]))["reasons"] == ["python_env"]
    assert state(python_env=dict(want, no_deps_packages=["x"]))["reasons"] == ["python_env"]
    state.env_state.unlink()  # a venv made before these records: its fingerprint is unknown
    assert state(python_env=want)["reasons"] == ["python_env", "environment"]


def test_state_broken_record_is_no_record(state):
    state.path.write_text("{not json")
    assert state()["reasons"] == ["no_record"]


def test_state_record_needs_its_directory(state, tmp_path):
    res = state(state="recorded", path=str(tmp_path / "absent" / "state.json"))
    assert res["failed"] is True and "does not exist" in res["msg"]
