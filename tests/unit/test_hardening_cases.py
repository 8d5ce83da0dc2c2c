"""The third pass of hardening (issue 48), the cases not already a row of a bad-input table: each one as a careless user
met it, and the line (or the safe place) it gets now. The table in docs/SECURITY.md lists them all, with the tests
that hold the others."""

from __future__ import annotations

import pytest

from ansible_collections.rlinfra.verl.plugins.action import verl_experiment, verl_experiment_render
from ansible_collections.rlinfra.verl.plugins.filter.ray_env import plain_env, secret_env
from ansible_collections.rlinfra.verl.plugins.module_utils.common import masking
from ansible_collections.rlinfra.verl.plugins.module_utils.verl import experiment
from ansible_collections.rlinfra.verl.plugins.module_utils.verl.experiment_schema import ExperimentError
from ansible_collections.rlinfra.verl.plugins.plugin_utils.task_vars import shapes_masked

TOKEN = "hf_" + "Ab1" * 12
PASSWORD_URL = "https://bob:s3cr3tPassw0rd@pypi.example.org/simple"


def _action_line(args, **given):
    values = dict(args.samples(), **given)
    values = {k: v.replace("{tmp}", "/tmp/x") if isinstance(v, str) else v for k, v in values.items()}
    return args.errors(values)


@pytest.mark.parametrize("root", ["/", "//", "/usr/x", "/etc"])
def test_a_checkpoint_root_in_a_system_place_is_refused_on_the_controller(root):
    """verl_job_checkpoint_root=/ wrote the smoke run's checkpoints to the head's root file system."""
    lines = _action_line(verl_experiment.ARGS, checkpoint_root=root)
    assert len(lines) == 1 and lines[0].startswith(
        "checkpoint_root (verl_job_checkpoint_root) must be a place the collection may write into"
    ), lines
    assert lines[0].endswith(", got %r" % root)


def test_the_models_root_is_checked_with_the_experiment():
    """merge.yml's target is <verl_job_models_root>/<exp>: the root is checked before the head is reached."""
    assert _action_line(verl_experiment.ARGS, models_root="/usr") == [
        "models_root (verl_job_models_root) must be a place the collection may write into, outside the system's "
        "directories (/usr, /etc, /proc, ...): /usr is one, got '/usr'"
    ]
    assert _action_line(verl_experiment_render.ARGS, secrets_dir="/etc")[0].startswith(
        "secrets_dir (verl_job_secrets_dir) must be a directory of the collection's own"
    )


def test_a_credential_in_ray_env_goes_where_the_secrets_go():
    """ray_env: {MY_URL: https://bob:<password>@host/x} was written to /etc/ray/ray.env, mode 0644."""
    env = {"MY_URL": PASSWORD_URL, "PLAIN": "1", "HF_TOKEN": TOKEN, "NCCL_DEBUG": "INFO", "NOTE": "Bearer " + "x" * 20}
    assert plain_env(env) == {"PLAIN": "1", "NCCL_DEBUG": "INFO"}
    assert secret_env(env) == {"MY_URL": PASSWORD_URL, "HF_TOKEN": TOKEN, "NOTE": "Bearer " + "x" * 20}
    # The user's own name rule does not let a credential by its shape back into the shown file.
    assert "MY_URL" in secret_env(env, "^NEVER$") and "MY_URL" not in plain_env(env, "^NEVER$")


def test_a_token_pasted_as_the_experiment_cluster_is_never_repeated():
    """An hf_ token in an experiment's cluster: appeared whole in "no host ... belongs to Ray cluster 'hf_...'"."""
    data = {"framework": "custom", "entrypoint": {"command": "python3 train.py"}, "cluster": TOKEN}
    with pytest.raises(ExperimentError) as refused:
        experiment.validate("exp", "/x/exp.yml", data)
    assert refused.value.errors == [
        "exp.yml: cluster must be a name of letters, digits, _ . - (starting with a letter or digit, at most 80), not a "
        "credential: secrets have fields of their own (an experiment's secrets:, Ansible Vault), got a value that looks "
        "like it holds a credential (not shown)"
    ]
    assert TOKEN not in str(refused.value)


def test_every_action_failure_is_masked_by_shape():
    """Whatever field a value came from, an action's failed line never shows a credential by its shape."""
    result = shapes_masked(
        {
            "failed": True,
            "msg": "no host belongs to Ray cluster '%s'" % TOKEN,
            "errors": ["index %s is down" % PASSWORD_URL, "key -----BEGIN OPENSSH PRIVATE KEY-----\nabc"],
        }
    )
    assert result["msg"] == "no host belongs to Ray cluster '********'"
    assert result["errors"] == ["index https://bob:********@pypi.example.org/simple is down", "key ********"]
    # A result that did not fail is left as it is (a summary names what it must).
    assert shapes_masked({"msg": TOKEN})["msg"] == TOKEN


@pytest.mark.parametrize("text", ["cluster default is whole", "ray_head_idle_api_key is set", "HF_TOKEN=<unset>"])
def test_the_shape_mask_leaves_ordinary_lines_alone(text):
    assert masking.mask_shapes(text) == text
