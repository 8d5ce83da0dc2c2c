# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""What an experiment file may hold: every key with its type from module_utils/common/vocabulary.py, and the grammar of
``params`` (Hydra keys and values). experiment.py's ``validate`` checks a file against :data:`SCHEMA`, then the rules
that tie keys together (the framework's required params, a prefetch home the job reads, a secret listed and set).
tests/unit/test_bad_input_generated.py walks :data:`SCHEMA` and feeds every key its type's bad values.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable
from typing import Any, cast

from ansible_collections.rlinfra.verl.plugins.module_utils.common import masking, secret_names, vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.recovery import RECOVERY_EVENTS

FRAMEWORKS = ("verl", "nemo_rl", "custom")
CONVENTIONS = ("verl", "nemo_rl", "none")
MAX_ARG_BYTES = 131071  # Linux: one argv or environment string (MAX_ARG_STRLEN - 1)
RAY_RESOURCE_PRECISION = 0.0001  # ray._raylet.RESOURCE_UNIT_SCALING = 10000
MIN_POLL_INTERVAL = 0.1  # the same floor as the ray_job and ray_job_poll modules
RAY_BUILTIN_RESOURCES = {"cpu": "entrypoint_num_cpus", "gpu": "entrypoint_num_gpus", "memory": "entrypoint_memory"}

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,79}$")
PY_MODULE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


# ------------------------------------------------------------------------------------------------------------
# The error every experiment module raises, and the words its lines use
# ------------------------------------------------------------------------------------------------------------

MAPPING, LIST, STR, INT, NUM, BOOL = "mapping", "list", "string", "integer", "number", "boolean"


class ExperimentError(Exception):
    """One or more problems with an experiment; each entry of ``errors`` is one clear line."""

    def __init__(self, errors: str | list[str] | tuple[str, ...]):
        self.errors = list(errors) if isinstance(errors, (list, tuple)) else [errors]
        super().__init__("\n".join(self.errors))


# The Python type of each kind of YAML value, in the order type_name tries them: bool before int, since a bool is an
# int to isinstance.
YAML_KINDS = ((bool, BOOL), (int, INT), (float, NUM), (str, STR), (dict, MAPPING), (list, LIST), (type(None), "null"))


def type_name(value: Any) -> str:
    """The kind of a YAML value as the error lines name it (``mapping``, ``list``, ``string``...)."""
    for python_type, kind in YAML_KINDS:
        if isinstance(value, python_type):
            return kind
    return type(value).__name__


def is_kind(value: Any, kind: str) -> bool:
    if kind == MAPPING:
        return isinstance(value, dict)
    if kind == LIST:
        return isinstance(value, list)
    if kind == STR:
        return isinstance(value, str)
    if kind == BOOL:
        return isinstance(value, bool)
    if kind == INT:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == NUM:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    raise ValueError(kind)


def an(kind: str) -> str:
    """``a string``, ``an integer``."""
    return ("an " if kind[:1] in "aeiou" else "a ") + kind


def did_you_mean(word: Any, candidates: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest candidate, or nothing."""
    close = difflib.get_close_matches(str(word), list(candidates), n=1, cutoff=0.6)
    return " (did you mean '%s'?)" % close[0] if close else ""


def fmt(value: Any) -> str:
    """A value as an error line repeats it: its repr, at most 60 characters; never one shaped like a credential."""
    if vocabulary.credential_strings(value):
        return "a value that looks like it holds a credential (not shown)"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# ------------------------------------------------------------------------------------------------------------
# params: Hydra overrides

KEY_SEGMENT_RE = re.compile(r"^(?:[A-Za-z_$][A-Za-z0-9_$-]*|0|[1-9][0-9]*)$")
KEY_PREFIX_RE = re.compile(r"^(\+\+|\+|~)?(.*)$")
HYDRA_DICT_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")
# A params value that only points at the environment (OmegaConf's resolver) holds no secret itself.
ENV_REFERENCE = re.compile(r"^\$\{(oc\.env|env):[A-Za-z_][A-Za-z0-9_]*(,[^}]*)?\}$")


def _check_key(key, where, err, top):
    prefix, rest = KEY_PREFIX_RE.match(key).groups()
    if prefix and not top:
        err(
            "%s: %s: Hydra prefixes (+, ++, ~) are only allowed on a top-level params key, e.g. '+trainer.x'"
            % (where, fmt(key))
        )
        return False
    segments = rest.split(".")
    if not all(KEY_SEGMENT_RE.match(s) for s in segments):
        err("%s: %s is not a valid Hydra key (dotted names of letters, digits, '_', '-')" % (where, fmt(key)))
        return False
    return True


def _check_value(value, where, err):
    if isinstance(value, str) and masking.holds_credentials(value):
        err(_secret_line(where, "holds what looks like a credential (%s)" % masking.CREDENTIAL_WORDS))
        return False
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, list):
        return all(_check_value(v, "%s[%d]" % (where, i), err) for i, v in enumerate(value))
    if isinstance(value, dict):
        ok = True
        for k, v in value.items():
            if not isinstance(k, str) or not HYDRA_DICT_KEY.match(k):
                err("%s: %s cannot be a key of a Hydra dict value" % (where, fmt(k)))
                ok = False
            elif secret_names.is_secret_param(k) and _secret_value(v):  # a mapping in a list: [{api_key: ...}]
                err(_secret_line("%s.%s" % (where, k)))
                ok = False
            else:
                ok = _check_value(v, "%s.%s" % (where, k), err) and ok
        return ok
    err("%s: unsupported value of type %s (%s); quote it to pass a string" % (where, type(value).__name__, fmt(value)))
    return False


def _secret_value(value):
    """A value that would put a secret on the command line: text (not only a reference to the environment), a number
    (password: 123456), or a list or mapping holding one; true, false and null hold none (use_auth_token: true)."""
    if isinstance(value, str):
        return bool(value.strip()) and not ENV_REFERENCE.match(value.strip())
    if isinstance(value, (list, tuple)):
        return any(_secret_value(v) for v in value)
    if isinstance(value, dict):
        return any(_secret_value(v) for v in value.values())
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _secret_line(where, why="looks like a secret (its name says so)"):
    return (
        "%s %s, and params travel on the job's command line, which every dashboard reader sees: list the variable "
        "in secrets: (its value from verl_job_secrets or the controller's environment) and write ${oc.env:NAME} "
        "here" % (where, why)
    )


def flatten_params(
    params: Any,
    err: Callable[[str], Any],
    prefix: str = "",
    out: list[tuple[str, Any]] | None = None,
    top: bool = True,
    seen: set[str] | None = None,
) -> list[tuple[str, Any]]:
    """Ordered (hydra key, value) pairs of a nested mapping; empty mappings stay values ({}).
    ``seen`` holds the keys without their Hydra prefix, so a key set twice is found in one pass."""
    out = [] if out is None else out
    seen = set() if seen is None else seen
    if not isinstance(params, dict):
        err("params: expected a mapping, got %s" % vocabulary.type_word(params))
        return out
    for key, value in params.items():
        if not isinstance(key, str):
            err("params%s: key %s must be a string" % ("." + prefix.rstrip(".") if prefix else "", fmt(key)))
            continue
        where = "params." + prefix + key
        if not _check_key(key, "params." + prefix.rstrip(".") if prefix else "params", err, top and not prefix):
            continue
        if cast("re.Match[str]", KEY_PREFIX_RE.match(key)).group(1) == "~" and value is not None:  # see _check_key
            err("%s: a '~' (delete) key takes no value; write %s: null" % (where, key))
            continue
        if isinstance(value, dict) and value and not key.startswith("~"):
            flatten_params(value, err, prefix + key + ".", out, False, seen)
            continue
        if not _check_value(value, where, err):
            continue
        full = prefix + key
        bare = full.lstrip("+~")
        if bare in seen:
            err("%s is set twice" % where)
            continue
        if secret_names.is_secret_param(bare) and _secret_value(value):
            err(_secret_line(where))
            continue
        seen.add(bare)
        out.append((full, value))
    return out


class _Params(vocabulary.Type):
    """``params``: Hydra keys (dotted, an optional +, ++ or ~ on top) to values; no key set twice, no secret."""

    ansible = "dict"
    words = "Hydra overrides"
    sample_value: Any = {"trainer": {"total_epochs": 1}}

    def problems(self, value, where, context=None):
        errors = []
        flatten_params(value, errors.append)
        return [(where, self, value, vocabulary.Line(line)) for line in errors]

    def check(self, value):
        found = self.problems(value, "params")
        if found:
            raise found[0][3]
        return value


PARAMS = _Params()


# ------------------------------------------------------------------------------------------------------------
# env: never a secret's value


def _env(value):
    for name, text in value.items():
        if masking.holds_credentials(text):  # PIP_INDEX_URL: https://__token__:<token>@...
            raise vocabulary.Line(
                "env.%s holds what looks like a credential (%s), and an experiment file is shown by "
                "the dry run and its env by the job's runtime_env to every dashboard reader: list %s "
                "in secrets: and give its value in verl_job_secrets (e.g. Ansible Vault) or the "
                "controller's environment" % (name, masking.CREDENTIAL_WORDS, name)
            )
        if isinstance(name, str) and secret_names.is_secret_name(name):
            raise vocabulary.Line(
                "env.%s looks like a secret (its name matches the secret-name rule), and an experiment file is "
                "shown by the dry run and its env by the job's runtime_env to every dashboard reader: list %s "
                "in secrets: and give its value in verl_job_secrets (e.g. Ansible Vault) or the controller's "
                "environment" % (name, name)
            )
    return value


class _Env(vocabulary.EnvMap):
    def __init__(self, **kw):
        super().__init__(**kw)
        # _env refuses a credential itself, with the line that points to secrets:.
        self.value = vocabulary.Text(
            max_len=MAX_ARG_BYTES, what='one line of text or a number (quote true/false: "true")', credentials=True
        )

    def check(self, value):
        return _env(super().check(value))


# ------------------------------------------------------------------------------------------------------------
# The sections


class _Quantity(vocabulary.Number):
    """A Ray resource amount: not negative, and 0 or at least Ray's precision."""

    def __init__(self, **kw):
        super().__init__(0, strict=True, **kw)

    def check(self, value):
        value = super().check(value)
        if 0 < value < RAY_RESOURCE_PRECISION:
            raise vocabulary.Bad("be 0 or at least %s (Ray's resource precision)" % RAY_RESOURCE_PRECISION)
        return value


def _custom_resources(value):
    for key, amount in value.items():
        if not isinstance(key, str) or not key.strip():
            raise vocabulary.Line("resources.entrypoint_resources: %s is not a resource name" % fmt(key))
        if key.lower() in RAY_BUILTIN_RESOURCES:
            # Any spelling: 'gpu' would be a custom resource no node has, a job pending for ever.
            raise vocabulary.Line(
                "resources.entrypoint_resources.%s: Ray takes CPUs, GPUs and memory through their own keys, "
                "not as custom resources; use resources.%s" % (key, RAY_BUILTIN_RESOURCES[key.lower()])
            )
        try:
            _Quantity().validate(amount)
        except vocabulary.Bad as e:
            raise vocabulary.Line(_Quantity().line("resources.entrypoint_resources.%s" % key, amount, e)) from e
    return value


class _ByFramework(vocabulary.Type):
    """The entrypoint: its keys depend on the framework beside it."""

    ansible = "dict"

    def __init__(self, sections, **kw):
        super().__init__(**kw)
        self.sections = sections

    def section_for(self, context):
        return self.sections.get(context.get("framework") or "verl", self.sections["verl"])

    def check_in(self, value, context):
        return self.section_for(context).check(value)


class _OnCommandLine(vocabulary.Text):
    """Text that becomes part of the job's entrypoint, which every dashboard reader sees: never a credential."""

    def check_text(self, value):
        if masking.holds_credentials(value):
            raise vocabulary.Bad(
                "hold no credential (%s): the entrypoint is shown to every dashboard reader; list "
                "the variable in secrets: and write $NAME" % masking.CREDENTIAL_WORDS
            )
        return value


ENTRYPOINTS = {
    "verl": vocabulary.Section(
        dict(
            module=vocabulary.Text(
                empty=False, pattern=PY_MODULE_RE, what="a Python module name (e.g. verl.trainer.main_ppo)"
            ),
            config=vocabulary.Text(
                empty=False, pattern=r"^[A-Za-z0-9_][A-Za-z0-9_./-]*$", what="a Hydra config name (e.g. ppo_trainer)"
            ),
            python=_OnCommandLine(empty=False, what="the Python command (e.g. python3)"),
        )
    ),
    "nemo_rl": vocabulary.Section(
        dict(
            repo_dir=vocabulary.AbsPath("reads"),
            script=vocabulary.RelPath(),
            config=_OnCommandLine(empty=False),
            runner=_OnCommandLine(empty=False),
        )
    ),
    "custom": vocabulary.Section(dict(command=_OnCommandLine(empty=False, lines=True, max_len=MAX_ARG_BYTES))),
}

PREFETCH_ITEM = vocabulary.OneOf(
    vocabulary.HfRepoId(),
    vocabulary.Section(
        dict(
            repo=vocabulary.HfRepoId(required=True),
            revision=vocabulary.GitRef(),
            allow_patterns=vocabulary.OneOf(
                vocabulary.Text(empty=False), vocabulary.ListOf(vocabulary.Text(empty=False), empty=False)
            ),
            ignore_patterns=vocabulary.OneOf(
                vocabulary.Text(empty=False), vocabulary.ListOf(vocabulary.Text(empty=False), empty=False)
            ),
        )
    ),
)

SECTIONS = dict(
    resources=vocabulary.Section(
        dict(
            entrypoint_num_cpus=_Quantity(),
            entrypoint_num_gpus=_Quantity(),
            entrypoint_memory=vocabulary.Int(0, strict=True),
            entrypoint_resources=vocabulary.Custom(
                "dict", _custom_resources, [{"GPU": 1}, {"accel": "lots"}, {"x": -1}], {"x": 1}
            ),
        )
    ),
    wait=vocabulary.Section(
        dict(
            enabled=vocabulary.Switch(words=False),
            timeout=vocabulary.Seconds(1, integer=True, strict=True),
            progress_interval=vocabulary.Seconds(1, integer=True, strict=True),
            poll_interval=vocabulary.Seconds(
                MIN_POLL_INTERVAL, strict=True, hint=" (the dashboard serves the whole cluster)"
            ),
            stop_on_timeout=vocabulary.Switch(words=False),
            stall_timeout=vocabulary.Seconds(0, integer=True, strict=True, hint=" (0 is off)"),
            outage_grace=vocabulary.Seconds(1, integer=True, strict=True),
            supervise=vocabulary.Choice(("cluster", "controller")),
        )
    ),
    recovery=vocabulary.Section(
        dict(
            max_restarts=vocabulary.Int(0, 1000, strict=True),
            on=vocabulary.ListOf(vocabulary.Choice(RECOVERY_EVENTS)),
            backoff_s=vocabulary.Number(0, 86400, strict=True),
            min_nodes=vocabulary.Int(1, 10000, strict=True),
            node_wait_timeout=vocabulary.Seconds(1, integer=True, strict=True),
            allow_reshard=vocabulary.Switch(words=False),
            deadline=vocabulary.Time(),
            deadline_margin=vocabulary.Seconds(0, 86400, integer=True, strict=True),
            replace=vocabulary.Switch(words=False),
            replace_after=vocabulary.Seconds(0, 86400, integer=True, strict=True),
            max_replacements=vocabulary.Int(0, 100, strict=True),
            replace_timeout=vocabulary.Seconds(60, 86400, integer=True, strict=True),
        )
    ),
    prefetch=vocabulary.Section(
        dict(
            hf_home=vocabulary.AbsPath("writes"),
            models=vocabulary.ListOf(PREFETCH_ITEM),
            datasets=vocabulary.ListOf(PREFETCH_ITEM),
        )
    ),
    code=vocabulary.Section(
        dict(
            repo=vocabulary.GitUrl(required=True),
            ref=vocabulary.GitRef(),
            submodules=vocabulary.Switch(words=False),
            path=vocabulary.RelPath(),
            name=vocabulary.Name(),
            token_secret=vocabulary.EnvName(),
            ssh_key_secret=vocabulary.EnvName(),
        )
    ),
)

SCHEMA = vocabulary.Section(
    dict(
        description=vocabulary.Text(lines=True, max_len=10000),
        framework=vocabulary.Choice(FRAMEWORKS),
        cluster=vocabulary.Name(),
        project=vocabulary.Name(),
        conventions=vocabulary.Choice(CONVENTIONS),
        entrypoint=_ByFramework(ENTRYPOINTS),
        params=PARAMS,
        env=_Env(),
        secrets=vocabulary.ListOf(vocabulary.EnvName()),
        optional_secrets=vocabulary.ListOf(vocabulary.EnvName()),
        working_dir=vocabulary.RelPath(),
        excludes=vocabulary.ListOf(vocabulary.Text(empty=False)),
        on_end=vocabulary.Choice(("keep", "release", "release_always")),
        **SECTIONS,
    )
)
