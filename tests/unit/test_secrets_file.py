"""The secrets-file route: file format (shell and hook read the same values), render, filters."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from ansible_collections.rlinfra.verl.plugins.module_utils.common import masking
from ansible_collections.rlinfra.verl.plugins.module_utils.verl import (
    experiment,
    experiment_render,
    secrets_file,
    secrets_run,
)

NASTY = {"HF_TOKEN": "hf_a'b\"c$HOME`id`\\n;x", "MULTI": "line1\nline2 $(x) ${PATH}", "EMPTYISH": " ", "PLAIN": "p"}


def test_shell_and_hook_read_the_same_values(tmp_path):
    path = tmp_path / "run.env"
    path.write_text(secrets_file.dumps(NASTY))
    assert secrets_file.loads(path.read_text()) == NASTY
    # What dash does with the entrypoint prefix: the values verbatim, nothing expanded or run.
    script = (
        secrets_file.ENTRYPOINT_PREFIX
        + 'python3 -c "import json, os; print(json.dumps({k: os.environ[k] for k in %r}))"' % sorted(NASTY)
    )
    out = subprocess.run(
        ["/bin/sh", "-c", script],
        env={"RLINFRA_SECRETS_FILE": str(path), "PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert json.loads(out) == NASTY


def test_a_missing_file_fails_the_driver_and_the_hook(tmp_path, monkeypatch):
    gone = str(tmp_path / "gone.env")
    proc = subprocess.run(
        ["/bin/sh", "-c", secrets_file.ENTRYPOINT_PREFIX + "echo ran"],
        env={"RLINFRA_SECRETS_FILE": gone},
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0 and "ran" not in proc.stdout
    monkeypatch.setenv(secrets_file.FILE_VAR, gone)
    with pytest.raises(RuntimeError, match="cannot read the run's secrets file .*gone.env"):
        secrets_file.load()


def test_hook_loads_into_the_environment(tmp_path, monkeypatch):
    path = tmp_path / "run.env"
    path.write_text(secrets_file.dumps({"RLINFRA_TEST_SECRET": "v'1"}))
    monkeypatch.setenv(secrets_file.FILE_VAR, str(path))
    monkeypatch.delenv("RLINFRA_TEST_SECRET", raising=False)
    assert secrets_file.load() == ["RLINFRA_TEST_SECRET"]
    assert os.environ["RLINFRA_TEST_SECRET"] == "v'1"


@pytest.mark.parametrize("values", [{"1BAD": "x"}, {"A B": "x"}, {"A": "nul\0"}])
def test_dumps_refuses_what_cannot_be_an_environment_variable(values):
    with pytest.raises(ValueError):
        secrets_file.dumps(values)


def test_default_dir_is_next_to_the_checkpoint_root():
    assert secrets_file.default_dir("/data/checkpoints") == "/data/.rlinfra/secrets"
    assert secrets_file.default_dir("/data/checkpoints/") == "/data/.rlinfra/secrets"
    assert secrets_file.default_dir("/ckpt") == "/.rlinfra/secrets"


def make(data):
    base = {"framework": "custom", "entrypoint": {"command": "python3 x.py"}}
    return experiment.validate("q", "/nonexistent/q.yml", dict(base, **data))


def test_render_routes_secrets_by_file_and_keeps_the_entrypoint_for_recoveries():
    exp = make({"secrets": ["WANDB_API_KEY"], "optional_secrets": ["HF_TOKEN"], "env": {"PYTHONPATH": "/opt/x"}})
    r = experiment_render.render(
        exp,
        [{"node_ip": "10.0.0.1", "is_head": True, "resources": {"CPU": 4}}],
        secret_names_present=["WANDB_API_KEY"],
        secrets_dir="/data/.rlinfra/secrets/",
    )
    env = r["runtime_env"]["env_vars"]
    assert r["secrets_file"] == env["RLINFRA_SECRETS_FILE"] == "/data/.rlinfra/secrets/default/rlinfra-q-default.env"
    assert r["secrets_dir"] == "/data/.rlinfra/secrets"
    assert env["PYTHONPATH"] == "/data/.rlinfra/secrets:/opt/x"
    assert "WANDB_API_KEY" not in env and "HF_TOKEN" not in env
    assert r["runtime_env"]["worker_process_setup_hook"] == "rlinfra_secrets.load"
    assert r["entrypoint"].startswith('set -a; . "$RLINFRA_SECRETS_FILE"; set +a; python3 x.py')
    assert experiment_render.reshape(r["job_template"])[0] == r["entrypoint"]  # what a recovery attempt submits
    assert r["runtime_env_display"]["env_vars"]["WANDB_API_KEY"] == masking.MASK
    assert r["runtime_env_display"]["worker_process_setup_hook"] == "rlinfra_secrets.load"


def test_render_without_secrets_changes_nothing():
    exp = make({"optional_secrets": ["HF_TOKEN"]})
    r = experiment_render.render(exp, [], secret_names_present=[], secrets_dir="/data/.rlinfra/secrets")
    assert r["secrets_file"] is None and r["entrypoint"] == "python3 x.py"
    assert set(r["runtime_env"]) == {"env_vars"} and "PYTHONPATH" not in r["runtime_env"]["env_vars"]


def test_filters_decide_when_the_file_is_written_and_removed():
    assert secrets_run.needed(None) and secrets_run.needed({"status": "RUNNING"})
    assert secrets_run.needed({"status": "FAILED"})  # the wait may recover it
    assert not secrets_run.needed({"status": "SUCCEEDED"}) and not secrets_run.needed({"status": "STOPPED"})
    assert secrets_run.done({"reason": "succeeded", "status": "SUCCEEDED"})
    assert secrets_run.done({"reason": "failed", "status": "FAILED"})
    assert secrets_run.done({"reason": "head_restart", "status": None})
    assert not secrets_run.done({"reason": "timeout", "status": "RUNNING"})
    assert not secrets_run.done({"reason": "unreachable", "status": "RUNNING"})
    assert not secrets_run.done({"skipped": True}) and not secrets_run.done(None)
    jobs = [
        {"submission_id": "r-1", "status": "SUCCEEDED"},
        {"submission_id": "r-2", "status": "FAILED"},
        {"submission_id": "r-2-a2", "status": "RUNNING"},
        {"submission_id": "r-3", "status": "STOPPED"},
    ]
    paths = ["/s/c/r-1.env", "/s/c/r-2.env", "/s/c/r-3.env", "/s/c/r-4.env", "/s/c/new.env", "/s/c/x.txt"]
    assert secrets_run.stale(paths, jobs, "new") == ["/s/c/r-1.env", "/s/c/r-3.env", "/s/c/r-4.env"]


def test_file_text_round_trips_through_the_filter():
    assert secrets_file.loads(secrets_file.dumps(NASTY)) == NASTY
