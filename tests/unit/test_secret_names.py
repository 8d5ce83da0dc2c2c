"""The collection's one rule for secret names (module_utils/common/secret_names.py), the filters the ray role
splits ``ray_env`` with (``rlinfra.verl.secret_env`` / ``plain_env``), and the role's wiring of them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.rlinfra.verl.plugins.filter.ray_env import plain_env, secret_env
from ansible_collections.rlinfra.verl.plugins.module_utils.common import masking, secret_names, settings
from ansible_collections.rlinfra.verl.plugins.module_utils.ray import client as ray_client
from ansible_collections.rlinfra.verl.plugins.module_utils.ray import node_logs

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# The ray role's own rule before the collection had one (its default ray_env_secret_pattern).
OLD_ROLE_PATTERN = "(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|ACCESS_KEY|PRIVATE_KEY)$"
SECRETS = [
    "HF_TOKEN",
    "WANDB_API_KEY",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_ACCESS_KEY_ID",
    "DB_PASSWORD",
    "MYSQL_PASSWD",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "BASIC_AUTH",
    "hf_token",
    "Github_Token",
    "SSH_PRIVATE_KEY",
    "OPENAI_API_KEY",
    "TOKEN",
    "NGC_API_KEY",
]
PLAIN = [
    "HF_HOME",
    "NCCL_SOCKET_IFNAME",
    "GLOO_SOCKET_IFNAME",
    "PATH",
    "CUDA_VISIBLE_DEVICES",
    "PYTHONUNBUFFERED",
    "RAY_DEBUG_POST_MORTEM",
    "NCCL_DEBUG",
    "VLLM_ATTENTION_BACKEND",
    "HF_HUB_ENABLE_HF_TRANSFER",
    "OMP_NUM_THREADS",
]
# Names the old role pattern matched: each must still be a secret under the collection's rule.
OLD_SECRETS = [
    "HF_TOKEN",
    "TOKEN",
    "MY_SECRET",
    "DB_PASSWORD",
    "MYSQL_PASSWD",
    "WANDB_API_KEY",
    "AWS_ACCESS_KEY",
    "SSH_PRIVATE_KEY",
    "GITHUBTOKEN",
    "CLIENT_SECRET",
]


# --- the rule ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", SECRETS)
def test_secret_names_are_secrets(name):
    assert secret_names.is_secret_name(name) is True


@pytest.mark.parametrize("name", PLAIN)
def test_plain_names_are_not(name):
    assert secret_names.is_secret_name(name) is False


def test_the_rule_is_case_insensitive_and_unanchored():
    assert secret_names.SECRET_NAME.flags & re.IGNORECASE
    assert (
        secret_names.SECRET_NAME.pattern
        == secret_names.SECRET_NAME_PATTERN
        == "TOKEN(?!IZER)|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH"
    )
    assert (
        secret_names.is_secret_name("token_for_x")
        and secret_names.is_secret_name("X_AUTH_HEADER")
        and secret_names.is_secret_name("apikey")
    )
    # Broad on purpose: a word merely containing one of the rule's words is hidden too, except a tokenizer's.
    assert secret_names.is_secret_name("MY_TOKENS") and not secret_names.is_secret_name("TOKENIZERS_PARALLELISM")
    assert not secret_names.is_secret_name("") and not secret_names.is_secret_name(7)


@pytest.mark.parametrize("name", OLD_SECRETS)
def test_every_name_the_old_role_rule_hid_is_still_hidden(name):
    assert re.search(OLD_ROLE_PATTERN, name)
    assert secret_names.is_secret_name(name)


def test_the_modules_mask_by_the_same_rule():
    """ray_client (values masked in module results) and node_logs (values masked in logs) read the rule from
    its one home: same words, same case-insensitivity."""
    assert ray_client.SECRET_NAME.pattern == secret_names.SECRET_NAME_PATTERN
    assert ray_client.SECRET_NAME.flags == secret_names.SECRET_NAME.flags
    assert node_logs.DEFAULT_SECRET_NAME_PATTERN == secret_names.SECRET_NAME_PATTERN
    # node_logs embeds the text in its own expressions: an alternation of words (a lookahead at most).
    assert re.fullmatch(r"[A-Z]+(\(\?![A-Z]+\))?(\|[A-Z]+)*", secret_names.SECRET_NAME_PATTERN)
    masked, count = masking.redact_bytes(
        b'"HF_TOKEN": "abc123", HF_HOME=/data/hf, TOKENIZERS_PARALLELISM=true', [], node_logs.name_maskers()
    )
    assert (masked, count) == (b'"HF_TOKEN": "********", HF_HOME=/data/hf, TOKENIZERS_PARALLELISM=true', 1)


def test_the_documented_defaults_spell_the_rule():
    """Module documentation cannot import: where it spells the rule, it must spell this one."""
    from ansible_collections.rlinfra.verl.plugins.modules import ray_node_logs

    options = yaml.safe_load(ray_node_logs.DOCUMENTATION)["options"]
    assert options["secret_name_pattern"]["default"] == secret_names.SECRET_NAME_PATTERN


def test_an_override_replaces_the_rule_case_sensitively():
    assert secret_names.is_secret_name("WANDB_API_KEY", OLD_ROLE_PATTERN)
    assert not secret_names.is_secret_name("WANDB_API_KEY_FILE", OLD_ROLE_PATTERN)
    assert not secret_names.is_secret_name("hf_token", OLD_ROLE_PATTERN)
    assert secret_names.is_secret_name("MY_CERT", "CERT")
    assert not secret_names.is_secret_name("HF_TOKEN", "CERT")
    # empty or None: the collection's rule
    assert (
        secret_names.name_rule("") is secret_names.SECRET_NAME
        and secret_names.name_rule(None) is secret_names.SECRET_NAME
    )
    with pytest.raises(re.error):
        secret_names.is_secret_name("X", "(")


def test_split_env_keeps_values_and_covers_every_entry():
    env = {"HF_TOKEN": "hf_x", "HF_HOME": "/data/hf", "WANDB_API_KEY": "w", "NCCL_DEBUG": "WARN", "N": 3}
    plain, secret = secret_names.split_env(env)
    assert plain == {"HF_HOME": "/data/hf", "NCCL_DEBUG": "WARN", "N": 3}
    assert secret == {"HF_TOKEN": "hf_x", "WANDB_API_KEY": "w"}
    assert secret_names.split_env(None) == ({}, {}) and secret_names.split_env({}) == ({}, {})


def test_secret_values_are_what_the_modules_mask():
    env = {"HF_TOKEN": "hf_x", "HF_HOME": "/data/hf", "EMPTY_TOKEN": "", "PORT_KEY": 8, "MY_VAR": "v"}
    assert secret_names.env_secret_values(env) == ["hf_x", "8"]
    assert secret_names.env_secret_values(env, ["MY_VAR", "HF_HOME"]) == ["hf_x", "/data/hf", "8", "v"]
    assert secret_names.env_secret_values(None) == [] and secret_names.env_secret_values("HF_TOKEN=x") == []


# --- the filters ------------------------------------------------------------------------------------------

ENV = {
    "HF_TOKEN": "hf_x",
    "HF_HOME": "/data/hf",
    "WANDB_API_KEY": "w",
    "NCCL_SOCKET_IFNAME": "eth0",
    "AWS_SECRET_ACCESS_KEY": "s",
    "DB_PASSWORD": "p",
    "GITHUB_TOKEN": "g",
    "PYTHONUNBUFFERED": "1",
}


def _old_split(env, pattern):
    """What the ray role did before: dict2items | rejectattr/selectattr('key', 'search', pattern) | items2dict."""
    return (
        {k: v for k, v in env.items() if not re.search(pattern, k)},
        {k: v for k, v in env.items() if re.search(pattern, k)},
    )


def test_filters_split_like_the_role_did_for_its_old_names():
    old_plain, old_secret = _old_split(ENV, OLD_ROLE_PATTERN)
    assert (
        secret_env(ENV)
        == old_secret
        == {k: ENV[k] for k in ("HF_TOKEN", "WANDB_API_KEY", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "GITHUB_TOKEN")}
    )
    assert plain_env(ENV) == old_plain == {"HF_HOME": "/data/hf", "NCCL_SOCKET_IFNAME": "eth0", "PYTHONUNBUFFERED": "1"}


def test_filters_are_complements():
    env = dict(ENV, AWS_ACCESS_KEY_ID="id", GOOGLE_APPLICATION_CREDENTIALS="/k.json", TOKENIZERS_PARALLELISM="true")
    for pattern in ("", None, OLD_ROLE_PATTERN, "CERT"):
        plain, secret = plain_env(env, pattern), secret_env(env, pattern)
        assert set(plain).isdisjoint(secret) and dict(plain, **secret) == env
    # Names the old rule left in the public file and the collection's rule hides
    assert set(secret_env(env)) - set(secret_env(env, OLD_ROLE_PATTERN)) == {
        "AWS_ACCESS_KEY_ID",
        "GOOGLE_APPLICATION_CREDENTIALS",
    }


def test_filter_override():
    assert secret_env(ENV, "(TOKEN)$") == {"HF_TOKEN": "hf_x", "GITHUB_TOKEN": "g"}
    assert plain_env({"hf_token": "x"}, OLD_ROLE_PATTERN) == {"hf_token": "x"}
    assert secret_env({"hf_token": "x"}) == {"hf_token": "x"}


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: secret_env(ENV, "("), r"^secret_env: the secret name pattern '\(' is not a regular expression \("),
        (lambda: plain_env(["HF_TOKEN=x"]), r"^plain_env expects a mapping of variable names to values, got list$"),
        (lambda: plain_env(ENV, 5), r"^plain_env: the secret name pattern must be text, got 5$"),
    ],
)
def test_filter_errors(call, message):
    with pytest.raises(AnsibleFilterError, match=message):
        call()


def test_bad_override_is_a_settings_error():
    assert settings.check({"ray_env_secret_pattern": ""}) == []
    assert settings.check({"ray_env_secret_pattern": OLD_ROLE_PATTERN}) == []
    [line] = settings.check({"ray_env_secret_pattern": "(TOKEN"})
    assert line.startswith(
        "ray_env_secret_pattern must be empty (the collection's rule for secret names) or a "
        "regular expression (missing ), unterminated subpattern"
    )
    assert line.endswith("got '(TOKEN'")


# --- the role -----------------------------------------------------------------------------------------------


def _role_file(*parts):
    with open(os.path.join(ROOT, "roles", "ray", *parts)) as f:
        return yaml.safe_load(f)


def _env_expressions():
    task = next(t for t in _role_file("tasks", "node.yml") if "rlinfra.verl.ray_node" in t)
    return task["vars"]["ray__public_env"], task["vars"]["ray__secret_env"]


def test_role_defaults_to_the_collection_rule():
    assert _role_file("defaults", "main.yml")["ray_env_secret_pattern"] == ""
    spec = _role_file("meta", "argument_specs.yml")["argument_specs"]["node"]["options"]["ray_env_secret_pattern"]
    assert spec["type"] == "str" and spec["default"] == ""
    public, secret = _env_expressions()
    # ray__env: ray_env over the interface variables the role adds (roles/ray/vars/main.yml), never secrets.
    assert public == "{{ ray__env | rlinfra.verl.plain_env(ray_env_secret_pattern) }}"
    # ray_node_secret_env: what a role adds that is secret by its nature (the head's RAY_PROMETHEUS_HEADERS).
    assert secret == (
        "{{ ray__env | rlinfra.verl.secret_env(ray_env_secret_pattern) | combine(ray_node_secret_env | default({})) }}"
    )


PLAY = """
- name: The ray role's split of ray_env, one host per case
  hosts: all
  gather_facts: false
  tasks:
    - name: Split as roles/ray/tasks/node.yml does
      ansible.builtin.set_fact:
        public_env: {public}
        secret_env: {secret}
"""


def test_role_split_for_real(tmp_path):
    """The role's own expressions, rendered by ansible-playbook with the role's default and with an override."""
    public, secret = _env_expressions()
    default = _role_file("defaults", "main.yml")["ray_env_secret_pattern"]
    cases = {"default": default, "old_rule": OLD_ROLE_PATTERN, "tokens_only": "TOKEN$"}
    hosts = {name: {"ray__env": ENV, "ray_env_secret_pattern": pattern} for name, pattern in cases.items()}
    inventory = {
        "all": {"vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}, "hosts": hosts}
    }
    (tmp_path / "inventory.yml").write_text(json.dumps(inventory))
    (tmp_path / "play.yml").write_text(PLAY.format(public=json.dumps(public), secret=json.dumps(secret)))
    env = dict(
        os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg")
    )
    proc = subprocess.run(
        [
            os.path.join(os.path.dirname(sys.executable), "ansible-playbook"),
            "-i",
            str(tmp_path / "inventory.yml"),
            str(tmp_path / "play.yml"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    facts = {h: r["ansible_facts"] for h, r in json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"].items()}
    old_plain, old_secret = _old_split(ENV, OLD_ROLE_PATTERN)
    assert facts["default"] == {"public_env": old_plain, "secret_env": old_secret}
    assert facts["old_rule"] == {"public_env": old_plain, "secret_env": old_secret}
    assert facts["tokens_only"]["secret_env"] == {"HF_TOKEN": "hf_x", "GITHUB_TOKEN": "g"}
    assert set(facts["tokens_only"]["public_env"]) == set(ENV) - {"HF_TOKEN", "GITHUB_TOKEN"}
