"""Bad experiment files: each gives exactly one clear line, and nothing is ever submitted.

Checked three ways: the pure-Python loader (exact text of the line); the real
``rlinfra.verl.verl_experiment`` action in one ansible-playbook run over every bad file; and the
real ``submit.yml`` against the loopback Ray head (the run fails with that line and the head's job
list does not change).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.rlinfra.verl.plugins.module_utils.verl import experiment

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BAD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "experiments_bad")
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")

ALLOWED = (
    "description, framework, cluster, project, conventions, entrypoint, params, env, secrets, "
    "optional_secrets, working_dir, excludes, on_end, resources, wait, recovery, prefetch, code"
)
EXPECTED = {
    "unknown_key": "unknown_key.yml: top level: unknown key 'paramz' (did you mean 'params'?); allowed: description, "
    "framework, cluster, project, conventions, entrypoint, params, env, secrets, optional_secrets, "
    "working_dir, excludes, on_end, resources, wait, recovery, prefetch, code",
    "bad_framework": "bad_framework.yml: framework must be one of verl, nemo_rl, custom (did you mean 'verl'?), got "
    "'verll'",
    "missing_model": "missing_model.yml: params.actor_rollout_ref.model.path is required for framework verl "
    "(the model to train: a Hugging Face id or a path on the shared volume)",
    "missing_val_files": "missing_val_files.yml: params.data.val_files is required for framework verl "
    "(validation parquet file(s), e.g. /data/datasets/gsm8k/test.parquet)",
    "params_list": "params_list.yml: params: expected a mapping, got a list",
    "env_bool": 'env_bool.yml: env.DEBUG must be one line of text or a number (quote true/false: "true"), got True',
    "secret_in_env": "secret_in_env.yml: env.HF_TOKEN looks like a secret (its name matches the secret-name rule), "
    "and an experiment file is shown by the dry run and its env by the job's runtime_env to every "
    "dashboard reader: list HF_TOKEN in secrets: and give its value in verl_job_secrets (e.g. "
    "Ansible Vault) or the controller's environment",
    "secret_bad_name": "secret_bad_name.yml: secrets[0] must be an environment variable name (letters, digits, _; "
    "not starting with a digit), got 'hf-token'",
    "not_yaml": "not_yaml.yml: not valid YAML (line 3, column 7): expected ',' or '}', but got ':'",
    "duplicate_key": "duplicate_key.yml: not valid YAML (line 5, column 1): duplicate key 'params' (also on line 3)",
    "missing_working_dir": "missing_working_dir.yml: working_dir: 'no_such_dir' does not exist (resolved to "
    + os.path.join(BAD, "no_such_dir")
    + ", relative to the experiments directory)",
    "custom_no_command": "custom_no_command.yml: entrypoint.command is required for framework custom "
    "(the shell command that starts the driver)",
    "bad_cluster": "bad_cluster.yml: cluster must be a name of letters, digits, _ . - (starting with a letter or "
    "digit, at most 80), got 'gpu cluster 1'",
    "wait_typo": "wait_typo.yml: wait: unknown key 'timout' (did you mean 'timeout'?); allowed: enabled, timeout, "
    "progress_interval, poll_interval, stop_on_timeout, stall_timeout, outage_grace, supervise",
    "wrong_type_wait": "wrong_type_wait.yml: wait.timeout must be a whole number, got 'an hour'",
    "nemo_relative_repo": "nemo_relative_repo.yml: entrypoint.repo_dir must be an absolute path (starting with /), "
    "got 'code/RL'",
    "top_level_list": "top_level_list.yml: expected a mapping of keys (framework, params, env, ...), got a list",
    "empty": "empty.yml: the file is empty; an experiment needs at least params (see docs/EXPERIMENTS.md)",
    "bad_param_key": "bad_param_key.yml: params.trainer: 'total epochs' is not a valid Hydra key "
    "(dotted names of letters, digits, '_', '-')",
    "code_short_ref": "code_short_ref.yml: code.ref: '4f0c1a2' looks like an abbreviated commit; write all 40 characters "
    "(or a branch or tag)",
    "code_with_repo_dir": "code_with_repo_dir.yml: entrypoint.repo_dir: with code, the job runs in the code's checkout; drop "
    "repo_dir (code.path names a subdirectory)",
    "code_token_in_url": "code_token_in_url.yml: code.repo must be a git URL (https://host/org/repo.git, "
    "git@host:org/repo.git, ssh://, git:// or file://) without credentials: name the secret "
    "that holds a token in code.token_secret, got https://********@github.com/...",
    "prefetch_no_home": "prefetch_no_home.yml: prefetch: the files need a home on the shared volume that the job reads: "
    "set env.HF_HOME (an absolute path, e.g. /data/hf_home) or prefetch.hf_home",
    "prefetch_bad_repo": "prefetch_bad_repo.yml: prefetch.datasets[0].repo must be a Hugging Face repository id "
    "(org/name: letters, digits, _ - .; no '--' or '..'), got '../../etc'",
    "unknown_entrypoint_key": "unknown_entrypoint_key.yml: entrypoint: unknown key 'modul' (did you mean 'module'?); "
    "allowed: module, config, python",
}
NOT_FOUND = (
    "experiment 'gsm8k_grp' not found in %s (did you mean 'gsm8k_grpo_qwen05b'?); available: "
    "gsm8k_grpo_qwen05b, gsm8k_ppo_qwen05b, math_grpo_qwen14b, nemo_rl_grpo_math, smoke"
    % os.path.join(REPO, "experiments")
)
BAD_NAME = (
    "invalid experiment name '../etc/passwd': use 1-80 letters, digits, '_', '-' or '.', starting with a "
    "letter or digit (e.g. gsm8k_grpo_qwen05b)"
)


def test_every_bad_file_has_an_expected_message():
    assert sorted(EXPECTED) == experiment.experiment_names(BAD)
    assert len(EXPECTED) >= 10


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_one_clear_line(name):
    with pytest.raises(experiment.ExperimentError) as err:
        experiment.load_experiment(name, BAD)
    assert err.value.errors == [EXPECTED[name]]
    assert str(err.value) == EXPECTED[name] and "\n" not in str(err.value)


def test_not_found_lists_the_available_experiments():
    with pytest.raises(experiment.ExperimentError) as err:
        experiment.load_experiment("gsm8k_grp", os.path.join(REPO, "experiments"))
    assert str(err.value) == NOT_FOUND


def test_bad_experiment_name():
    with pytest.raises(experiment.ExperimentError) as err:
        experiment.load_experiment("../etc/passwd", os.path.join(REPO, "experiments"))
    assert str(err.value) == BAD_NAME


def test_several_problems_give_one_line_each(tmp_path):
    (tmp_path / "multi.yml").write_text(
        "framework: custom\nentrypoint: {command: x}\nenv: {A: true}\nsecrets: [b-c]\nwait: {timeout: -1}\n"
    )
    with pytest.raises(experiment.ExperimentError) as err:
        experiment.load_experiment("multi", str(tmp_path))
    assert err.value.errors == [
        'multi.yml: env.A must be one line of text or a number (quote true/false: "true"), got True',
        "multi.yml: secrets[0] must be an environment variable name (letters, digits, _; not starting with a digit), "
        "got 'b-c'",
        "multi.yml: wait.timeout must be a number of seconds from 1 to 31622400, got -1",
    ]


def test_extra_params_are_validated_too():
    with pytest.raises(experiment.ExperimentError) as err:
        experiment.load_experiment("smoke", os.path.join(REPO, "experiments"), extra_params={"bad key": 1})
    assert str(err.value) == (
        "smoke.yml: extra params (verl_job_params): params: 'bad key' is not a valid Hydra key "
        "(dotted names of letters, digits, '_', '-')"
    )


def _inventory(tmp_path):
    inv = tmp_path / "inventory.yml"
    inv.write_text(
        json.dumps(
            {
                "all": {
                    "children": {
                        "ray_head": {
                            "hosts": {
                                "localhost": {
                                    "ansible_connection": "local",
                                    "ansible_python_interpreter": sys.executable,
                                }
                            }
                        }
                    }
                }
            }
        )
    )
    return str(inv)


def _run(args, tmp_path, env=None):
    full_env = dict(
        os.environ,
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_FORCE_COLOR="0",
        ANSIBLE_LOCAL_TEMP=str(tmp_path / "atmp"),
        **(env or {}),
    )
    return subprocess.run(
        [ANSIBLE_PLAYBOOK] + args, cwd=REPO, env=full_env, capture_output=True, text=True, timeout=600
    )


def test_action_plugin_reports_each_line(tmp_path):
    """The real action, run by ansible-playbook over every bad file (plus an unknown and a bad name)."""
    names = sorted(EXPECTED) + ["gsm8k_grp", "../etc/passwd"]
    out = tmp_path / "results.json"
    playbook = tmp_path / "validate.yml"
    playbook.write_text(
        json.dumps(
            [
                {
                    "name": "Validate bad experiments",
                    "hosts": "localhost",
                    "gather_facts": False,
                    "tasks": [
                        {
                            "name": "Validate",
                            "rlinfra.verl.verl_experiment": {
                                "name": "{{ item }}",
                                "experiments_dir": "{{ '%s' if item != 'gsm8k_grp' and '/' not in item else '' }}"
                                % BAD,
                            },
                            "loop": names,
                            "register": "results",
                            "ignore_errors": True,
                        },
                        {
                            "name": "Save",
                            "ansible.builtin.copy": {
                                "content": "{{ results.results | to_json }}",
                                "dest": str(out),
                                "mode": "0600",
                            },
                        },
                    ],
                }
            ]
        )
    )
    proc = _run(["-i", _inventory(tmp_path), str(playbook)], tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = {r["item"]: r for r in json.loads(out.read_text())}
    for name in sorted(EXPECTED):
        assert results[name]["failed"] is True
        assert results[name]["msg"] == EXPECTED[name]
        assert results[name]["errors"] == [EXPECTED[name]]
    # The action searches the user's project (inventory dir, the playbook's, the current dir; and their parents).
    searched = [
        os.path.join(d, "experiments")
        for d in (str(tmp_path), os.path.dirname(str(tmp_path)), REPO, os.path.dirname(REPO))
    ]
    assert results["gsm8k_grp"]["msg"] == (
        "experiment 'gsm8k_grp' not found: no gsm8k_grp.yml or gsm8k_grp.yaml; searched %s (the inventory's, the "
        "playbook's and the current directory, and their parents); experiments there: gsm8k_grpo_qwen05b, "
        "gsm8k_ppo_qwen05b, math_grpo_qwen14b, nemo_rl_grpo_math, smoke (did you mean 'gsm8k_grpo_qwen05b'?); set "
        "verl_job_experiments_dir (or RLINFRA_EXPERIMENTS_DIR) to read another directory" % ", ".join(searched)
    )
    assert results["../etc/passwd"]["msg"] == BAD_NAME


@pytest.mark.parametrize("name", ["unknown_key", "missing_model", "secret_in_env", "not_yaml"])
def test_submit_playbook_fails_with_the_line_and_submits_nothing(ray_head, tmp_path, name):
    client = ray_head.client()
    before = {j["submission_id"] for j in client.list_jobs()}
    proc = _run(
        [
            "-i",
            _inventory(tmp_path),
            "submit.yml",
            "-e",
            "exp=" + name,
            "-e",
            "verl_job_experiments_dir=" + BAD,
            "-e",
            "verl_job_address=" + ray_head.address,
            "-e",
            "verl_job_token_path=" + ray_head.token_path,
            "-e",
            "verl_job_become=false",
            "-e",
            "verl_job_artifacts_dir=" + str(tmp_path / "artifacts"),
        ],
        tmp_path,
    )
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert text.count("[ERROR]: Task failed: Action failed: " + EXPECTED[name] + "\n") == 1, text[-3000:]
    assert "failed=1" in proc.stdout
    after = {j["submission_id"] for j in client.list_jobs()}
    assert after == before
    assert not any(sid.startswith("rlinfra-" + name) for sid in after)
    assert not (tmp_path / "artifacts").exists()
