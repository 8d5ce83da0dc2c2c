"""Bad experiment files, one table: every row is one careless or hostile input, the exact line it
must give, and the proof that nothing was rendered, packaged or submitted.

Each row is checked on the pure-Python loader (``load``), on the renderer's size check
(``render``), on the working_dir preflight (``preflight``) or on the submission id (``sid``); the
real ``rlinfra.verl.verl_experiment`` action then runs over the rows that need no monkeypatching in
one ansible-playbook run, and ``submit.yml`` over two of them against the loopback Ray head.
"""

from __future__ import annotations

import collections
import errno
import json
import os
import re
import shlex
import subprocess
import sys
import time

import pytest
import yaml

from ansible_collections.rlinfra.verl.plugins.module_utils.ray import package as ray_package
from ansible_collections.rlinfra.verl.plugins.module_utils.verl import _experiment_quote as experiment_quote
from ansible_collections.rlinfra.verl.plugins.module_utils.verl import _experiment_yaml as experiment_yaml
from ansible_collections.rlinfra.verl.plugins.module_utils.verl import experiment as E
from ansible_collections.rlinfra.verl.plugins.module_utils.verl import experiment_render
from ansible_collections.rlinfra.verl.plugins.module_utils.verl import preflight as P

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")

HEAD = "framework: custom\nentrypoint: {command: python3 train.py}\n"
NODES = [{"node_ip": "10.0.0.1", "is_head": True, "resources": {"CPU": 8, "GPU": 0}}]
BOMB = (
    HEAD
    + """params:
  a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
  b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
  c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
  d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
  e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
  f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
  g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
  h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
  i: [*h, *h, *h, *h, *h, *h, *h, *h, *h]
"""
)
BIG = HEAD + "#" * experiment_yaml.MAX_FILE_BYTES + "\n"
ALLOWED_MSG = "(dotted names of letters, digits, '_', '-')"
_PARAMS_ROUTE = (
    ", and params travel on the job's command line, which every dashboard reader sees: list the variable "
    "in secrets: (its value from verl_job_secrets or the controller's environment) and write "
    "${oc.env:NAME} here"
)
SECRET_PARAM_WHY = " looks like a secret (its name says so)" + _PARAMS_ROUTE
CREDENTIAL_WORDS = (
    "a password or token in a URL, a bearer token, a GitHub or Hugging Face token or the like, or a private key"
)
SECRET_SHAPE_WHY = " holds what looks like a credential (" + CREDENTIAL_WORDS + ")" + _PARAMS_ROUTE
LINUX_ARG = "over the 131071 Linux allows for one"


def flat_params(n):
    return HEAD + "params:\n" + "".join("  k%d: %d\n" % (i, i) for i in range(n))


def _mkdir(path):
    def setup(d, monkeypatch):
        os.mkdir(os.path.join(d, path))

    return setup


def _symlink_loop(name):
    def setup(d, monkeypatch):
        os.symlink(name, os.path.join(d, name))

    return setup


def _file(name, text="x"):
    def setup(d, monkeypatch):
        with open(os.path.join(d, name), "w") as f:
            f.write(text)

    return setup


def _working_dir_with(fail):
    """``proj/`` with ``ok.py`` and ``data/secret.bin``; reading the latter fails the way ``fail`` says:
    EACCES when opened (the error names the file), or EIO while read (it does not)."""

    def setup(d, monkeypatch):
        os.makedirs(os.path.join(d, "proj", "data"))
        for rel in ("ok.py", "data/secret.bin"):
            with open(os.path.join(d, "proj", rel), "w") as f:
                f.write("x = 1\n")
        real_open = open

        class Broken:
            def __init__(self, f):
                self.f = f

            def read(self, *a):
                raise OSError(errno.EIO, "Input/output error")

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                self.f.close()

        def fake_open(path, mode="r", *args, **kwargs):
            if str(path).endswith("secret.bin"):
                if fail == "eacces":
                    raise PermissionError(errno.EACCES, "Permission denied", str(path))
                return Broken(real_open(path, mode, *args, **kwargs))
            return real_open(path, mode, *args, **kwargs)

        # Root reads any file: the errors a user's own account gets are simulated at open().
        monkeypatch.setattr(ray_package, "open", fake_open, raising=False)
        monkeypatch.setattr(P, "open", fake_open, raising=False)

    return setup


def _link(name, target):
    """``name`` in the experiments directory, a link to ``target``: a path, or ``{out}/...`` for a directory beside the
    experiments directory (made, with a file in it), outside it."""

    def setup(d, monkeypatch):
        out = os.path.join(os.path.dirname(d), "elsewhere")
        os.makedirs(os.path.join(out, "code"), exist_ok=True)
        with open(os.path.join(out, "code", "id_rsa"), "w") as f:
            f.write("-----BEGIN OPENSSH PRIVATE KEY-----\n")
        os.makedirs(os.path.dirname(os.path.join(d, name)), exist_ok=True)
        os.symlink(target.replace("{out}", out), os.path.join(d, name))

    return setup


def _working_dir_linking(*links):
    """``proj/`` with ``run.py`` and the links ``(relative path, target)`` in it."""

    def setup(d, monkeypatch):
        os.makedirs(os.path.join(d, "proj"))
        with open(os.path.join(d, "proj", "run.py"), "w") as f:
            f.write("print(1)\n")
        for rel, target in links:
            _link(os.path.join("proj", rel), target)(d, monkeypatch)

    return setup


Row = collections.namedtuple("Row", "id content expected stage setup")


def row(id, content, expected, stage="load", setup=None):
    return Row(id, content, expected, stage, setup)


ROWS = [
    # --- limits: size, aliases, nesting, count --------------------------------------------------
    row(
        "alias_bomb",
        BOMB,
        "alias_bomb.yml: over a limit (line 9, column 6): this holds more than 100000 values once aliases are "
        "expanded; write the values out, or keep large data in a file on the shared volume",
    ),
    row(
        "alias_recursive",
        HEAD + "params: &p {x: *p}\n",
        "alias_recursive.yml: over a limit (line 3, column 16): alias *p refers to a node that contains it; an "
        "experiment cannot be a recursive structure",
    ),
    row(
        "too_deep",
        HEAD + "params: {x: " + "[" * 100 + "]" * 100 + "}\n",
        "too_deep.yml: over a limit (line 3, column 75): nested more than 64 levels deep",
    ),
    row(
        "file_too_large",
        BIG,
        "file_too_large.yml: the file is %d bytes, over the 1048576 bytes (1 MiB) an experiment file may have; keep "
        "data, code and long lists out of it (working_dir, the shared volume)" % len(BIG.encode()),
    ),
    row(
        "too_many_params",
        flat_params(E.MAX_PARAMS + 1),
        "too_many_params.yml: params: 10001 values, more than the 10000 an experiment may set (they all go on one "
        "command line); keep large settings in a config file (entrypoint.config, or a file in working_dir)",
    ),
    row(
        "many_problems",
        HEAD + "env:\n" + "".join("  bad-%d: x\n" % i for i in range(25)),
        [
            "many_problems.yml: env (a key) must be an environment variable name (letters, digits, _; not starting with "
            "a digit), got 'bad-%d'" % i
            for i in range(20)
        ]
        + ["many_problems.yml: ... and 5 more problem(s)"],
    ),
    # --- bytes and YAML -------------------------------------------------------------------------
    row(
        "not_utf8",
        (HEAD + "params: {x: caf\xe9}\n").encode("latin-1"),
        "not_utf8.yml: not UTF-8 text (byte 0xe9 at line 3, column 16); save the file as UTF-8",
    ),
    row(
        "nul_byte",
        HEAD + "params: {x: a\0b}\n",
        "nul_byte.yml: not valid YAML (line 3, column 14): control character #x0000 is not allowed (in a quoted "
        "string, write it as an escape)",
    ),
    row(
        "nul_escape_in_param",
        HEAD + 'params: {x: "a\\0b"}\n',
        "nul_escape_in_param.yml: params.x: contains a NUL character (\\0), which no command line, environment "
        "variable or path can carry",
    ),
    row(
        "nul_escape_in_env",
        HEAD + 'env: {X: "a\\0"}\n',
        "nul_escape_in_env.yml: env.X: contains a NUL character (\\0), which no command line, environment variable "
        "or path can carry",
    ),
    row(
        "file_is_a_directory",
        None,
        "file_is_a_directory.yml: {dir}/file_is_a_directory.yml is a directory, not an experiment file",
        setup=_mkdir("file_is_a_directory.yml"),
    ),
    row(
        "file_is_a_symlink_loop",
        None,
        "file_is_a_symlink_loop.yml: cannot be read: Too many levels of symbolic links "
        "({dir}/file_is_a_symlink_loop.yml); check that it exists and that you may read it",
        setup=_symlink_loop("file_is_a_symlink_loop.yml"),
    ),
    row(
        "duplicate_nested_key",
        HEAD + "params:\n  trainer:\n    a: 1\n    a: 2\n",
        "duplicate_nested_key.yml: not valid YAML (line 6, column 5): duplicate key 'a' (also on line 5)",
    ),
    row(
        "set_flat_and_nested",
        HEAD + "params:\n  trainer.x: 1\n  trainer: {x: 2}\n",
        "set_flat_and_nested.yml: params.trainer.x is set twice",
    ),
    row(
        "unhashable_key",
        HEAD + "params:\n  ? [a, b]\n  : 1\n",
        "unhashable_key.yml: not valid YAML (line 4, column 5): a list cannot be a key",
    ),
    row(
        "int_out_of_range_hex",
        HEAD + "params: {seed: 0x" + "f" * 40 + "}\n",
        "int_out_of_range_hex.yml: not valid YAML (line 3, column 16): integer "
        "'0xffffffffffffffffffffffffffffffffffffffff' is out of range (at most 64 bits); quote it to pass a string",
    ),
    row(
        "int_too_many_digits",
        HEAD + "params: {seed: " + "9" * 5000 + "}\n",
        "int_too_many_digits.yml: not valid YAML (line 3, column 16): integer '" + "9" * 56 + "... is out of range "
        "(at most 64 bits); quote it to pass a string",
    ),
    row(
        "impossible_date",
        HEAD + "params: {day: 2024-13-45}\n",
        "impossible_date.yml: not valid YAML (line 3, column 15): date '2024-13-45' cannot be read (month must be "
        "in 1..12); quote it to pass a string",
    ),
    row(
        "python_tag",
        HEAD + "params: {x: !!python/object/apply:os.system [touch /tmp/pwned]}\n",
        "python_tag.yml: not valid YAML (line 3, column 13): could not determine a constructor for the tag "
        "'tag:yaml.org,2002:python/object/apply:os.system'",
    ),
    row(
        "tab_indent",
        HEAD + "params:\n\tx: 1\n",
        "tab_indent.yml: not valid YAML (line 4, column 1): found character '\\t' that cannot start any token",
    ),
    # --- numbers --------------------------------------------------------------------------------
    row(
        "nan_poll_interval",
        HEAD + "wait: {poll_interval: .nan}\n",
        "nan_poll_interval.yml: wait.poll_interval must be a finite number, got nan (the dashboard serves the whole "
        "cluster)",
    ),
    row(
        "inf_num_gpus",
        HEAD + "resources: {entrypoint_num_gpus: .inf}\n",
        "inf_num_gpus.yml: resources.entrypoint_num_gpus must be a finite number, got inf",
    ),
    row(
        "tiny_poll_interval",
        HEAD + "wait: {poll_interval: 0.001}\n",
        "tiny_poll_interval.yml: wait.poll_interval must be a number of seconds from 0.1 to 31622400, got 0.001 (the "
        "dashboard serves the whole cluster)",
    ),
    row(
        "zero_timeout",
        HEAD + "wait: {timeout: 0}\n",
        "zero_timeout.yml: wait.timeout must be a number of seconds from 1 to 31622400, got 0",
    ),
    row(
        "negative_stall_timeout",
        HEAD + "wait: {stall_timeout: -1}\n",
        "negative_stall_timeout.yml: wait.stall_timeout must be a number of seconds from 0 to 31622400, got -1 (0 is off)",
    ),
    # Durations past a year overflow the C time types sleep and socket take, after the job was submitted.
    row(
        "huge_poll_interval",
        HEAD + "wait: {poll_interval: 1.0e+300}\n",
        "huge_poll_interval.yml: wait.poll_interval must be a number of seconds from 0.1 to 31622400, got 1e+300 (the "
        "dashboard serves the whole cluster)",
    ),
    row(
        "huge_timeout",
        HEAD + "wait: {timeout: 10000000000000}\n",
        "huge_timeout.yml: wait.timeout must be a number of seconds from 1 to 31622400, got 10000000000000",
    ),
    row(
        "huge_node_wait_timeout",
        HEAD + "recovery: {node_wait_timeout: 100000000000}\n",
        "huge_node_wait_timeout.yml: recovery.node_wait_timeout must be a number of seconds from 1 to 31622400, got "
        "100000000000",
    ),
    row(
        "negative_outage_grace",
        HEAD + "wait: {outage_grace: -5}\n",
        "negative_outage_grace.yml: wait.outage_grace must be a number of seconds from 1 to 31622400, got -5",
    ),
    row(
        "code_repo_option_host",
        HEAD + "code: {repo: 'ssh://-oProxyCommand=id/x.git'}\n",
        "code_repo_option_host.yml: code.repo must be a git URL (https://host/org/repo.git, git@host:org/repo.git, ssh://, "
        "git:// or file://), got ssh://-oproxycommand=id/...",
    ),
    row(
        "code_ref_dot",
        HEAD + "code: {repo: 'https://example.org/org/x.git', ref: .}\n",
        "code_ref_dot.yml: code.ref must be a branch, a tag or a full 40-character commit, got '.'",
    ),
    row(
        "code_ref_upstream",
        HEAD + "code: {repo: 'https://example.org/org/x.git', ref: '@{upstream}'}\n",
        "code_ref_upstream.yml: code.ref must be a branch, a tag or a full 40-character commit, got '@{upstream}'",
    ),
    row(
        "resource_below_precision",
        HEAD + "resources: {entrypoint_num_cpus: 0.00001}\n",
        "resource_below_precision.yml: resources.entrypoint_num_cpus must be 0 or at least 0.0001 (Ray's resource "
        "precision), got 1e-05",
    ),
    row(
        "nan_custom_resource",
        HEAD + "resources: {entrypoint_resources: {accel: .nan}}\n",
        "nan_custom_resource.yml: resources.entrypoint_resources.accel must be a finite number, got nan",
    ),
    row(
        "negative_memory",
        HEAD + "resources: {entrypoint_memory: -1}\n",
        "negative_memory.yml: resources.entrypoint_memory must not be negative, got -1",
    ),
    # --- resources Ray takes through their own keys ---------------------------------------------
    row(
        "gpu_as_custom_resource",
        HEAD + "resources: {entrypoint_resources: {GPU: 1}}\n",
        "gpu_as_custom_resource.yml: resources.entrypoint_resources.GPU: Ray takes CPUs, GPUs and memory through "
        "their own keys, not as custom resources; use resources.entrypoint_num_gpus",
    ),
    row(
        "cpu_as_custom_resource",
        HEAD + "resources: {entrypoint_resources: {cpu: 2}}\n",
        "cpu_as_custom_resource.yml: resources.entrypoint_resources.cpu: Ray takes CPUs, GPUs and memory through "
        "their own keys, not as custom resources; use resources.entrypoint_num_cpus",
    ),
    row(
        "memory_as_custom_resource",
        HEAD + "resources: {entrypoint_resources: {memory: 1000000}}\n",
        "memory_as_custom_resource.yml: resources.entrypoint_resources.memory: Ray takes CPUs, GPUs and memory "
        "through their own keys, not as custom resources; use resources.entrypoint_memory",
    ),
    # --- env and secrets ------------------------------------------------------------------------
    row(
        "env_name_with_equals",
        HEAD + 'env: {"A=B": x}\n',
        "env_name_with_equals.yml: env (a key) must be an environment variable name (letters, digits, _; not "
        "starting with a digit), got 'A=B'",
    ),
    row(
        "env_nan",
        HEAD + "env: {X: .nan}\n",
        'env_nan.yml: env.X must be one line of text or a number (quote true/false: "true"), got nan',
    ),
    row(
        "env_huge_value",
        HEAD + "env: {BIG: %s}\n" % ("v" * 140000),
        "env_huge_value.yml: env.BIG must be at most 131071 characters long, got "
        "'vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv...'",
    ),
    row(
        "secret_also_optional",
        HEAD + "secrets: [HF_TOKEN]\noptional_secrets: [HF_TOKEN]\n",
        "secret_also_optional.yml: optional_secrets: HF_TOKEN is listed twice",
    ),
    row(
        "secret_also_in_env",
        HEAD + "env: {WANDB_API_KEY: abc}\nsecrets: [WANDB_API_KEY]\n",
        "secret_also_in_env.yml: env.WANDB_API_KEY looks like a secret (its name matches the secret-name rule), and "
        "an experiment file is shown by the dry run and its env by the job's runtime_env to every dashboard reader: "
        "list WANDB_API_KEY in secrets: and give its value in verl_job_secrets (e.g. Ansible Vault) or the "
        "controller's environment",
    ),
    # --- secrets in fresh forms: names in other cases, values of other shapes, credentials by their shape ----
    row(
        "param_secret_camel_case",
        HEAD + "params: {trainer: {wandbApiKey: abc123}}\n",
        "param_secret_camel_case.yml: params.trainer.wandbApiKey" + SECRET_PARAM_WHY,
    ),
    row(
        "param_secret_plural_list",
        HEAD + "params: {reward: {api_keys: [sk-1, sk-2]}}\n",
        "param_secret_plural_list.yml: params.reward.api_keys" + SECRET_PARAM_WHY,
    ),
    row(
        "param_secret_number",
        HEAD + "params: {db: {password: 123456}}\n",
        "param_secret_number.yml: params.db.password" + SECRET_PARAM_WHY,
    ),
    row(
        "param_secret_in_list_item",
        HEAD + "params: {reward: {servers: [{url: x, api_key: sk-1}]}}\n",
        "param_secret_in_list_item.yml: params.reward.servers[0].api_key" + SECRET_PARAM_WHY,
    ),
    row(
        "param_secret_header_with_prefix",
        HEAD + "params: {'++reward.headers.Authorization': abc123}\n",
        "param_secret_header_with_prefix.yml: params.++reward.headers.Authorization" + SECRET_PARAM_WHY,
    ),
    row(
        "param_secret_uppercase",
        HEAD + "params: {HF_TOKEN: hf_abc}\n",
        "param_secret_uppercase.yml: params.HF_TOKEN" + SECRET_PARAM_WHY,
    ),
    row(
        "param_url_with_password",
        HEAD + "params: {data: {train_files: 'https://u:pw@example.org/x.parquet'}}\n",
        "param_url_with_password.yml: params.data.train_files" + SECRET_SHAPE_WHY,
    ),
    row(
        "param_url_with_token_user",
        HEAD + "params: {model: {paths: ['HTTPS://tok@example.org/m']}}\n",
        "param_url_with_token_user.yml: params.model.paths[0]" + SECRET_SHAPE_WHY,
    ),
    row(
        "param_key_with_credentials",
        HEAD + "params: {'https://u:pw@example.org': 1}\n",
        "param_key_with_credentials.yml: params: a value that looks like it holds a credential (not shown) is not a "
        "valid Hydra key " + ALLOWED_MSG,
    ),
    row(
        "env_secret_lowercase",
        HEAD + "env: {wandb_api_key: abc}\n",
        "env_secret_lowercase.yml: env.wandb_api_key looks like a secret (its name matches the secret-name rule), and "
        "an experiment file is shown by the dry run and its env by the job's runtime_env to every dashboard reader: "
        "list wandb_api_key in secrets: and give its value in verl_job_secrets (e.g. Ansible Vault) or the "
        "controller's environment",
    ),
    row(
        "env_secret_value_newline",
        HEAD + 'env: {HF_TOKEN: "hf_abc\\nX-Evil: 1"}\n',
        'env_secret_value_newline.yml: env.HF_TOKEN must be one line of text or a number (quote true/false: "true") '
        "without line breaks or control characters (the value is not shown)",
    ),
    row(
        "env_url_with_password",
        HEAD + "env: {PIP_INDEX_URL: 'https://__token__:pw@example.org/simple'}\n",
        "env_url_with_password.yml: env.PIP_INDEX_URL holds what looks like a credential (" + CREDENTIAL_WORDS + "), "
        "and an experiment file is shown by the dry run and its env by the job's runtime_env to every dashboard "
        "reader: list PIP_INDEX_URL in secrets: and give its value in verl_job_secrets (e.g. Ansible Vault) or the "
        "controller's environment",
    ),
    row(
        "code_repo_token_uppercase_scheme",
        "framework: custom\nentrypoint: {command: python3 train.py}\n"
        "code: {repo: 'HTTPS://tok@github.com/org/x.git'}\n",
        "code_repo_token_uppercase_scheme.yml: code.repo must be a git URL (https://host/org/repo.git, "
        "git@host:org/repo.git, ssh://, git:// or file://) without credentials: name the secret that holds a token "
        "in code.token_secret, got https://********@github.com/...",
    ),
    row(
        "command_url_with_token",
        "framework: custom\nentrypoint: {command: 'git clone https://tok@example.org/x && python3 x.py'}\n",
        "command_url_with_token.yml: entrypoint.command must hold no credential (" + CREDENTIAL_WORDS + "): the "
        "entrypoint is shown to every dashboard reader; list the variable in secrets: and write $NAME, got a value "
        "that looks like it holds a credential (not shown)",
    ),
    row(
        "secrets_name_and_value",
        HEAD + "secrets: [HF_TOKEN=hf_abc]\n",
        "secrets_name_and_value.yml: secrets[0] must be an environment variable name (letters, digits, _; not starting "
        "with a digit), got a value that looks like it holds a credential (not shown)",
    ),
    row(
        "secrets_value_as_mapping",
        HEAD + "secrets: [{HF_TOKEN: hf_abc}]\n",
        "secrets_value_as_mapping.yml: secrets[0] must be an environment variable name (letters, digits, _; not "
        "starting with a digit), got a value that looks like it holds a credential (not shown)",
    ),
    row(
        "token_secret_is_the_token",
        HEAD + "code: {repo: 'https://github.com/org/x.git', token_secret: ghp_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789}\n",
        "token_secret_is_the_token.yml: code.token_secret must be the name of the variable that holds the token, not "
        "the token itself, got a value that looks like it holds a credential (not shown)",
    ),
    row(
        "param_known_token_shape",
        HEAD + "params: {reward: {endpoint_auth: hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567}}\n",
        "param_known_token_shape.yml: params.reward.endpoint_auth" + SECRET_SHAPE_WHY,
    ),
    # --- keys and types at every level ----------------------------------------------------------
    row(
        "param_key_shell_metacharacters",
        HEAD + 'params: {"a;rm -rf /": 1}\n',
        "param_key_shell_metacharacters.yml: params: 'a;rm -rf /' is not a valid Hydra key " + ALLOWED_MSG,
    ),
    row(
        "param_key_backquote",
        HEAD + "params: {trainer: {'`id`': 1}}\n",
        "param_key_backquote.yml: params.trainer: '`id`' is not a valid Hydra key " + ALLOWED_MSG,
    ),
    row(
        "param_key_not_a_string",
        HEAD + "params: {x: {1: a}}\n",
        "param_key_not_a_string.yml: params.x: key 1 must be a string",
    ),
    row(
        "wrong_type_top_level",
        HEAD + "cluster: 5\n",
        "wrong_type_top_level.yml: cluster must be a name of letters, digits, _ . - (starting with a letter or "
        "digit, at most 80), got 5",
    ),
    row(
        "wrong_type_entrypoint",
        "framework: custom\nentrypoint: {command: [python3, train.py]}\n",
        "wrong_type_entrypoint.yml: entrypoint.command must be text, got ['python3', 'train.py'] (a list)",
    ),
    row(
        "wrong_type_resources",
        HEAD + "resources: {entrypoint_num_cpus: '2'}\n",
        "wrong_type_resources.yml: resources.entrypoint_num_cpus must be a number, got '2'",
    ),
    row(
        "wrong_type_wait",
        HEAD + "wait: {enabled: 'yes'}\n",
        "wrong_type_wait.yml: wait.enabled must be true or false, got 'yes'",
    ),
    row(
        "wrong_type_recovery",
        HEAD + "recovery: {on: node_lost}\n",
        "wrong_type_recovery.yml: recovery.on must be a list, got 'node_lost'",
    ),
    row(
        "wrong_type_secrets",
        HEAD + "secrets: HF_TOKEN\n",
        "wrong_type_secrets.yml: secrets must be a list, got 'HF_TOKEN'",
    ),
    row(
        "wrong_type_excludes",
        HEAD + "excludes: [1]\n",
        "wrong_type_excludes.yml: excludes[0] must be one line of text, got 1",
    ),
    row(
        "recovery_key_not_a_string",
        HEAD + "recovery: {1: x}\n",
        "recovery_key_not_a_string.yml: recovery: unknown key 1; allowed: max_restarts, on, backoff_s, min_nodes, "
        "node_wait_timeout, allow_reshard, deadline, deadline_margin, replace, replace_after, max_replacements, replace_timeout",
    ),
    row(
        "recovery_negative",
        HEAD + "recovery: {max_restarts: -1}\n",
        "recovery_negative.yml: recovery.max_restarts must be a whole number from 0 to 1000, got -1",
    ),
    row(
        "recovery_bad_event",
        HEAD + "recovery: {on: [node_lots]}\n",
        "recovery_bad_event.yml: recovery.on[0] must be one of node_lost, head_restart, stalled, failed (did you "
        "mean 'node_lost'?), got 'node_lots'",
    ),
    row(
        "recovery_min_nodes_over_the_cluster",
        HEAD + "recovery: {max_restarts: 2, min_nodes: 3}\n",
        "recovery_min_nodes_over_the_cluster.yml: recovery.min_nodes is 3 but Ray cluster default has 1 node(s) alive "
        "now: a recovery would wait for nodes it can never get; set recovery.min_nodes to at most 1",
        stage="render",
    ),
    # --- working_dir ----------------------------------------------------------------------------
    row(
        "working_dir_is_a_file",
        HEAD + "working_dir: notes.txt\n",
        "working_dir_is_a_file.yml: working_dir: 'notes.txt' is not a directory (resolved to {dir}/notes.txt)",
        setup=_file("notes.txt"),
    ),
    row(
        "working_dir_symlink_loop",
        HEAD + "working_dir: wd_loop\n",
        "working_dir_symlink_loop.yml: working_dir: 'wd_loop' is a symbolic link that leads nowhere (a loop or a "
        "missing target; resolved to {dir}/wd_loop)",
        setup=_symlink_loop("wd_loop"),
    ),
    # A link out of the experiments directory: never zipped (/etc/ssh, all of /), and where it leads is not said.
    row(
        "working_dir_link_outside",
        HEAD + "working_dir: wd_out\n",
        "working_dir_link_outside.yml: working_dir: 'wd_out' leads outside the experiments directory {dir} through a "
        "symbolic link; copy its files into the experiments directory (a job is sent only what lies inside it)",
        setup=_link("wd_out", "{out}/code"),
    ),
    row(
        "working_dir_link_to_root",
        HEAD + "working_dir: wd_root\n",
        "working_dir_link_to_root.yml: working_dir: 'wd_root' leads outside the experiments directory {dir} through a "
        "symbolic link; copy its files into the experiments directory (a job is sent only what lies inside it)",
        setup=_link("wd_root", "/"),
    ),
    row(
        "working_dir_link_to_a_file_outside",
        HEAD + "working_dir: wd_key\n",
        "working_dir_link_to_a_file_outside.yml: working_dir: 'wd_key' leads outside the experiments directory {dir} "
        "through a symbolic link; copy its files into the experiments directory (a job is sent only what lies inside "
        "it)",
        setup=_link("wd_key", "{out}/code/id_rsa"),
    ),
    row(
        "working_dir_under_a_linked_directory",
        HEAD + "working_dir: shared/code\n",
        "working_dir_under_a_linked_directory.yml: working_dir: 'shared/code' leads outside the experiments directory "
        "{dir} through a symbolic link; copy its files into the experiments directory (a job is sent only what lies "
        "inside it)",
        setup=_link("shared", "{out}"),
    ),
    # A link in the working_dir out of it: the package holds only the working_dir's own files; the first one is named.
    row(
        "working_dir_holds_a_link_to_root",
        HEAD + "working_dir: proj\n",
        "working_dir {dir}/proj: data/all leads outside it through a symbolic link, and a job is sent only the "
        "working_dir's own files: copy what it needs into the working_dir, or leave the link out with the experiment's "
        'excludes (e.g. excludes: ["data/all"])',
        stage="preflight",
        setup=_working_dir_linking(("data/all", "/"), ("data/zkey", "{out}/code/id_rsa")),
    ),
    row(
        "working_dir_holds_a_link_to_a_file_outside",
        HEAD + "working_dir: proj\n",
        "working_dir {dir}/proj: key leads outside it through a symbolic link, and a job is sent only the "
        "working_dir's own files: copy what it needs into the working_dir, or leave the link out with the experiment's "
        'excludes (e.g. excludes: ["key"])',
        stage="preflight",
        setup=_working_dir_linking(("key", "../../elsewhere/code/id_rsa")),
    ),
    row(
        "working_dir_blank",
        HEAD + "working_dir: '  '\n",
        "working_dir_blank.yml: working_dir must be a relative path inside its base (not starting with /, no '..'), "
        "got '  '",
    ),
    row(
        "working_dir_unreadable_file",
        HEAD + "working_dir: proj\n",
        "working_dir {dir}/proj: cannot read data/secret.bin (Permission denied); fix the file's permissions, or "
        'leave it out with the experiment\'s excludes (e.g. excludes: ["data/secret.bin"])',
        stage="preflight",
        setup=_working_dir_with("eacces"),
    ),
    row(
        "working_dir_io_error",
        HEAD + "working_dir: proj\n",
        "working_dir {dir}/proj: cannot read data/secret.bin (Input/output error); fix the file's permissions, or "
        'leave it out with the experiment\'s excludes (e.g. excludes: ["data/secret.bin"])',
        stage="preflight",
        setup=_working_dir_with("eio"),
    ),
    # --- what only the rendered job shows -------------------------------------------------------
    row(
        "entrypoint_too_long",
        HEAD + "params: {prompt: '%s'}\n" % ("w " * 70000),
        re.compile(
            r"entrypoint_too_long\.yml: the rendered entrypoint is 14\d{4} bytes, "
            + LINUX_ARG
            + r" command line argument \(Ray runs it with /bin/sh -c\); move long values or many params into "
            r"a config file \(entrypoint.config, or a file in working_dir\)$"
        ),
        stage="render",
    ),
    row(
        "submission_id_too_long",
        HEAD + "cluster: %s\n" % ("c" * 80),
        "submission id %s... is 200 characters, more than 190; shorten the experiment name, the cluster name or the "
        "run suffix" % repr("rlinfra-" + "s" * 80)[:57],
        stage="sid",
    ),
]
assert len({r.id for r in ROWS}) == len(ROWS)


def _write(d, r):
    if r.content is not None:
        with open(os.path.join(d, r.id + ".yml"), "wb") as f:
            f.write(r.content if isinstance(r.content, bytes) else r.content.encode("utf-8"))


def _run_stage(r, d, tmp_path):
    """Raise ExperimentError as the stage would; return what was produced on the way (nothing)."""
    if r.stage == "sid":
        exp = E.load_experiment(r.id, d)
        return experiment_render.submission_id("s" * 80, exp.cluster, "r" * 30)
    exp = E.load_experiment(r.id, d)
    if r.stage == "render":
        rendered = experiment_render.render(exp, NODES)
        experiment_render.check_job_size(exp.label, rendered)
        experiment_render.check_fits(exp, NODES, rendered["cluster"])
    elif r.stage == "preflight":
        dest = str(tmp_path / "pkg.zip")
        check = P.check_working_dir(exp.working_dir_path, exp.excludes, dest=dest)
        assert not os.path.exists(dest) and not os.path.exists(dest + ".part")
        if check["status"] == "failed":
            raise E.ExperimentError(check["message"])
    return exp


@pytest.mark.parametrize("r", ROWS, ids=[r.id for r in ROWS])
def test_one_clear_line_and_nothing_rendered(r, tmp_path, monkeypatch):
    d = str(tmp_path / "experiments")
    os.mkdir(d)
    _write(d, r)
    if r.setup:
        r.setup(d, monkeypatch)
    before = sorted(os.listdir(d))
    started = time.monotonic()
    with pytest.raises(E.ExperimentError) as err:
        _run_stage(r, d, tmp_path)
    elapsed = time.monotonic() - started
    lines = err.value.errors
    if isinstance(r.expected, re.Pattern):
        assert len(lines) == 1 and r.expected.search(lines[0]), lines
    elif isinstance(r.expected, list):
        assert lines == r.expected
    else:
        assert lines == [r.expected.replace("{dir}", d)]
    assert all("\n" not in line and "Traceback" not in line for line in lines)
    assert sorted(os.listdir(d)) == before  # nothing written next to the experiment
    assert elapsed < 30, "%s took %.1fs" % (r.id, elapsed)


def test_table_is_large_enough():
    assert len(ROWS) >= 35


# ------------------------------------------------------------------------------------------------
# Limits that must also be fast, and what stays allowed
# ------------------------------------------------------------------------------------------------


def _parse_time(text, tmp_path, name, repeat=3):
    (tmp_path / (name + ".yml")).write_text(text)
    best = None
    for _dummy in range(repeat):
        started = time.perf_counter()
        try:
            E.load_experiment(name, str(tmp_path))
        except E.ExperimentError:
            pass
        took = time.perf_counter() - started
        best = took if best is None else min(best, took)
    return best


def test_20k_params_load_in_linear_time(tmp_path, monkeypatch):
    """20 000 params (over the limit, so it is lifted here) load about as fast as PyYAML's C loader
    alone reads the same file: the duplicate check is a set, not a scan of every earlier key."""
    monkeypatch.setattr(E, "MAX_PARAMS", 50000)
    text = flat_params(20000)
    took = _parse_time(text, tmp_path, "p20k")
    exp = E.load_experiment("p20k", str(tmp_path))
    assert len(exp.params) == 20000 and exp.params[-1] == ("k19999", 19999)
    started = time.perf_counter()
    yaml.load(text, Loader=yaml.CSafeLoader)
    plain = time.perf_counter() - started
    print("20k params: %.3fs (PyYAML CSafeLoader alone: %.3fs)" % (took, plain))
    assert took < max(1.0, 4 * plain), (took, plain)


def test_limits_refuse_at_once(tmp_path):
    assert _parse_time(BOMB, tmp_path, "bomb", repeat=1) < 0.5
    assert _parse_time(flat_params(20000), tmp_path, "many", repeat=1) < max(
        1.0, 4 * _parse_time(flat_params(20000).replace("params:", "paramz:", 1), tmp_path, "baseline", repeat=1)
    )
    deep = HEAD + "params:\n  x: " + "[" * 200000 + "]" * 200000 + "\n"  # crashes libyaml's own composer
    assert _parse_time(deep, tmp_path, "deep", repeat=1) < 5


def test_merge_keys_and_aliases_within_limits_stay_allowed(tmp_path):
    (tmp_path / "merge.yml").write_text(
        HEAD + "params:\n  actor: &opt {lr: 1.0e-6, wd: 0.01}\n  critic: {<<: *opt, lr: 1.0e-5}\n  ref: *opt\n"
    )
    exp = E.load_experiment("merge", str(tmp_path))
    assert exp.params == [
        ("actor.lr", 1e-6),
        ("actor.wd", 0.01),
        ("critic.lr", 1e-5),
        ("critic.wd", 0.01),
        ("ref.lr", 1e-6),
        ("ref.wd", 0.01),
    ]


def test_yaml_1_1_boolean_words_are_keys_not_booleans(tmp_path):
    """``on:`` (as docs/OPERATIONS.md writes recovery.on) is the key 'on', not True; values keep YAML's reading."""
    (tmp_path / "words.yml").write_text(
        HEAD + "recovery:\n  on: [node_lost, failed]\nwait: {enabled: no}\nparams: {yes: 1, off: 2, 'true': 3}\n"
    )
    exp = E.load_experiment("words", str(tmp_path))
    assert exp.recovery["on"] == ["node_lost", "failed"] and exp.wait["enabled"] is False
    assert exp.params == [("yes", 1), ("off", 2), ("true", 3)]


@pytest.mark.parametrize(
    "value",
    [
        "a;rm -rf / #",
        "$(id)",
        "`id`",
        'it\'s "quoted"',
        "tab\there",
        "new\nline",
        "${oc.env:HOME}",
        "\\'",
        "caf\u00e9 \u2603",
    ],
)
def test_shell_metacharacters_in_values_are_quoted_exactly(tmp_path, value):
    (tmp_path / "meta.yml").write_text(HEAD + "params:\n  $weird-key: %s\n" % json.dumps(value))
    exp = E.load_experiment("meta", str(tmp_path))
    rendered = experiment_render.render(exp, NODES)
    argv = shlex.split(rendered["entrypoint"])
    assert argv[:2] == ["python3", "train.py"]
    assert argv[2:] == rendered["overrides"] == ["$weird-key=" + experiment_quote.hydra_value(value)]


def test_symlink_loop_inside_working_dir_is_left_out(tmp_path):
    wd = tmp_path / "wd"
    (wd / "sub").mkdir(parents=True)
    (wd / "run.py").write_text("print(1)\n")
    os.symlink("loop", str(wd / "loop"))
    os.symlink("..", str(wd / "sub" / "up"))  # a directory cycle
    started = time.monotonic()
    check = P.check_working_dir(str(wd))
    assert time.monotonic() - started < 10
    assert check["status"] == "passed" and check["package"]["files"] == 1, check


# ------------------------------------------------------------------------------------------------
# The real action, and submit.yml against a real head
# ------------------------------------------------------------------------------------------------

ACTION_ROWS = [r for r in ROWS if r.setup is None and r.stage in ("load", "render")]
# Role values given with -e: held to the same rules as the file's.
ARG_ROWS = [
    (
        "wait_timeout_negative",
        {"wait_timeout": -5},
        "wait_timeout (verl_job_wait_timeout) must be a number of seconds from 1 to 31622400, got -5",
    ),
    (
        "poll_interval_nan",
        {"poll_interval": "nan"},
        "poll_interval (verl_job_poll_interval) must be a finite number, got nan (the dashboard serves the whole cluster)",
    ),
    (
        "poll_interval_tiny",
        {"poll_interval": 0.01},
        "poll_interval (verl_job_poll_interval) must be a number of seconds from 0.1 to 31622400, got 0.01 (the dashboard serves the "
        "whole cluster)",
    ),
    (
        "checkpoint_root_relative",
        {"checkpoint_root": "data/ckpt"},
        "checkpoint_root (verl_job_checkpoint_root) must be an absolute path (starting with /), got 'data/ckpt'",
    ),
    (
        "checkpoint_cluster_traversal",
        {"checkpoint_cluster": "../other"},
        "checkpoint_cluster (-e checkpoint_cluster) must be a name of letters, digits, _ . - (starting with a letter or "
        "digit, at most 80), got '../other'",
    ),
    ("venv_relative", {"venv": "venv"}, "venv (verl_job_venv) must be an absolute path (starting with /), got 'venv'"),
    (
        "params_secret",
        {"params": {"reward_model": {"api_key": "sk-s3cr3t"}}},
        "extra params (verl_job_params): params.reward_model.api_key looks like a secret (its name says so), and params "
        "travel on the job's command line, which every dashboard reader sees: list the variable in secrets: (its value "
        "from verl_job_secrets or the controller's environment) and write ${oc.env:NAME} here",
    ),
]


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


def _playbook(args, tmp_path, timeout=900):
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_LOCAL_TEMP=str(tmp_path / "atmp"))
    return subprocess.run([ANSIBLE_PLAYBOOK] + args, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def test_action_gives_the_same_line_and_writes_no_package(tmp_path):
    d = tmp_path / "experiments"
    d.mkdir()
    for r in ACTION_ROWS:
        _write(str(d), r)
    (d / "fine.yml").write_text(HEAD)
    packages = tmp_path / "packages"
    items = [{"name": r.id, "args": {}} for r in ACTION_ROWS] + [{"name": "fine", "args": a} for _, a, _ in ARG_ROWS]
    out = tmp_path / "results.json"
    # As submit.yml does: verl_experiment loads and validates, verl_experiment_render renders what it loaded.
    load_args = {"name": "{{ item.name }}", "experiments_dir": str(d)}
    for key in ("checkpoint_root", "checkpoint_cluster", "params"):
        load_args[key] = "{{ item.args.%s | default(omit) }}" % key
    render_args = {"loaded": "{{ item }}", "nodes": NODES, "package_dir": str(packages)}
    for key in ("wait_timeout", "poll_interval", "checkpoint_root", "checkpoint_cluster", "venv"):
        render_args[key] = "{{ item.item.args.%s | default(omit) }}" % key
    (tmp_path / "play.yml").write_text(
        json.dumps(
            [
                {
                    "name": "Render bad experiments",
                    "hosts": "localhost",
                    "gather_facts": False,
                    "tasks": [
                        {
                            "name": "Load",
                            "rlinfra.verl.verl_experiment": load_args,
                            "loop": items,
                            "register": "loads",
                            "ignore_errors": True,
                            "loop_control": {"label": "{{ item.name }}"},
                        },
                        {
                            "name": "Render",
                            "rlinfra.verl.verl_experiment_render": render_args,
                            "loop": "{{ loads.results }}",
                            "when": "item is not failed",
                            "register": "renders",
                            "ignore_errors": True,
                            "loop_control": {"label": "{{ item.item.name }}"},
                        },
                        {
                            "name": "Save",
                            "ansible.builtin.copy": {
                                "content": "{{ {'loads': loads.results, 'renders': renders.results} | to_json }}",
                                "dest": str(out),
                                "mode": "0600",
                            },
                        },
                    ],
                }
            ]
        )
    )
    proc = _playbook(["-i", _inventory(tmp_path), str(tmp_path / "play.yml")], tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    saved = json.loads(out.read_text())
    results = [load if load.get("failed") else render for load, render in zip(saved["loads"], saved["renders"])]
    assert len(results) == len(items)
    for r, res in zip(ACTION_ROWS, results):
        assert res["failed"] is True, r.id
        if isinstance(r.expected, re.Pattern):
            assert r.expected.search(res["msg"]), (r.id, res["msg"])
        elif isinstance(r.expected, list):
            assert res["errors"] == r.expected
        else:
            assert res["msg"] == r.expected.replace("{dir}", str(d)), r.id
        assert "entrypoint" not in res and "runtime_env" not in res, r.id  # nothing rendered
    for (id, _dummy, expected), res in zip(ARG_ROWS, results[len(ACTION_ROWS) :]):
        assert res["failed"] is True and res["msg"] == expected, (id, res.get("msg"))
    assert not packages.exists() or not os.listdir(str(packages))
    assert "Traceback" not in proc.stdout + proc.stderr


def test_the_actions_refuse_links_out_and_name_the_artifacts_variable(tmp_path):
    """The real actions, as submit.yml runs them: a working_dir that links out of the experiments directory (to /) is
    refused when loaded, one that holds a link out when packaged, and a package directory the controller cannot write
    (below a file, which fails for root too; /proc is refused before, by the directory's purpose) is one line naming
    verl_job_artifacts_dir, never the working_dir."""
    d = tmp_path / "experiments"
    (d / "proj").mkdir(parents=True)
    (d / "proj" / "run.py").write_text("print(1)\n")
    (d / "leaky").mkdir()
    os.symlink("/", str(d / "leaky" / "all"))
    os.symlink("/", str(d / "wd_root"))
    for name, wd in (("wd_root", "wd_root"), ("wd_ok", "proj"), ("wd_leaky", "leaky")):
        (d / (name + ".yml")).write_text(HEAD + "working_dir: %s\n" % wd)
    (tmp_path / "a-file").write_text("")
    packages = str(tmp_path / "a-file" / "wd_ok" / "packages")
    out = tmp_path / "results.json"
    (tmp_path / "play.yml").write_text(
        json.dumps(
            [
                {
                    "name": "Links and artifacts",
                    "hosts": "localhost",
                    "gather_facts": False,
                    "tasks": [
                        {
                            "name": "Load",
                            "rlinfra.verl.verl_experiment": {"name": "{{ item }}", "experiments_dir": str(d)},
                            "loop": ["wd_root", "wd_ok", "wd_leaky"],
                            "register": "loads",
                            "ignore_errors": True,
                        },
                        {
                            "name": "Render",
                            "rlinfra.verl.verl_experiment_render": {
                                "loaded": "{{ item }}",
                                "nodes": NODES,
                                "package_dir": packages,
                                "verl_config_check": "skip",
                            },
                            "loop": "{{ loads.results[1:] }}",
                            "register": "renders",
                            "ignore_errors": True,
                        },
                        {
                            "name": "Render without a package directory (a dry run)",
                            "rlinfra.verl.verl_experiment_render": {
                                "loaded": "{{ loads.results[2] }}",
                                "nodes": NODES,
                                "verl_config_check": "skip",
                            },
                            "register": "dry",
                            "ignore_errors": True,
                        },
                        {
                            "name": "Save",
                            "ansible.builtin.copy": {
                                "content": "{{ {'loads': loads.results, 'renders': renders.results, 'dry': dry} | to_json }}",
                                "dest": str(out),
                                "mode": "0600",
                            },
                        },
                    ],
                }
            ]
        )
    )
    proc = _playbook(["-i", _inventory(tmp_path), str(tmp_path / "play.yml")], tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    saved = json.loads(out.read_text())
    assert saved["loads"][0]["msg"] == (
        "wd_root.yml: working_dir: 'wd_root' leads outside the experiments directory %s through a symbolic link; copy "
        "its files into the experiments directory (a job is sent only what lies inside it)" % d
    )
    ok, leaky = saved["renders"]
    assert ok["failed"] and ok["msg"] == (
        "verl_job_artifacts_dir %s: cannot write the working_dir package (Not a "
        "directory): set verl_job_artifacts_dir to another directory" % packages
    )
    link_out = (
        "working_dir %s/leaky: all leads outside it through a symbolic link, and a job is sent only the "
        "working_dir's own files: copy what it needs into the working_dir, or leave the link out with the "
        'experiment\'s excludes (e.g. excludes: ["all"])' % d
    )
    assert leaky["failed"] and leaky["msg"] == (
        "verl_job_artifacts_dir %s: cannot write the working_dir package (Not "
        "a directory): set verl_job_artifacts_dir to another directory" % packages
    )
    assert saved["dry"]["failed"] and saved["dry"]["msg"] == "preflight: " + link_out
    assert "Traceback" not in proc.stdout + proc.stderr and "Errno" not in proc.stdout + proc.stderr


@pytest.mark.parametrize("name", ["alias_bomb", "gpu_as_custom_resource"])
def test_submit_refuses_before_ray_sees_anything(ray_head, tmp_path, name):
    r = next(r for r in ROWS if r.id == name)
    d = tmp_path / "experiments"
    d.mkdir()
    _write(str(d), r)
    client = ray_head.client()
    before = {j["submission_id"] for j in client.list_jobs()}
    started = time.monotonic()
    proc = _playbook(
        [
            "-i",
            _inventory(tmp_path),
            "submit.yml",
            "-e",
            "exp=" + name,
            "-e",
            "verl_job_experiments_dir=" + str(d),
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
    assert text.count("[ERROR]: Task failed: Action failed: " + r.expected + "\n") == 1, text[-3000:]
    assert time.monotonic() - started < 120
    assert {j["submission_id"] for j in client.list_jobs()} == before
    assert not (tmp_path / "artifacts").exists()
