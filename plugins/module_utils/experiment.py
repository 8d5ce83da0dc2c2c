# -*- coding: utf-8 -*-
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Experiment files (``experiments/NAME.yml``): schema, validation and rendering to a Ray job.

Pure Python (PyYAML only), importable without Ansible, so that the ``verl_experiment`` action
plugin and the tests share one implementation. docs/EXPERIMENTS.md documents the file format.

* :func:`load_experiment` reads and validates a file; every problem is one line of
  :class:`ExperimentError` (``NAME.yml: key: what is wrong``).
* :func:`render` turns an experiment plus the live cluster's nodes into the Ray job: entrypoint
  (a shell string of Hydra overrides, each shell-quoted), runtime_env without secret values, a
  masked copy for display, metadata and the deterministic submission_id.
"""

from __future__ import annotations

import copy
import difflib
import math
import os
import re
import shlex

try:
    import yaml
except ImportError:  # pragma: no cover - PyYAML ships with ansible-core
    yaml = None

FRAMEWORKS = ("verl", "nemo_rl", "custom")
CONVENTIONS = ("verl", "nemo_rl", "none")
DEFAULT_CONVENTIONS = {"verl": "verl", "nemo_rl": "nemo_rl", "custom": "none"}
DEFAULT_CHECKPOINT_ROOT = "/data/checkpoints"
DEFAULT_CLUSTER = "default"
DEFAULT_PROJECT = "rlinfra"
SUBMISSION_PREFIX = "rlinfra"
MASK = "********"
EXTENSIONS = (".yml", ".yaml")

VERL_DEFAULTS = {"module": "verl.trainer.main_ppo", "config": "ppo_trainer", "python": "python3"}
NEMO_RL_DEFAULTS = {"script": "examples/run_grpo_math.py", "runner": "uv run"}
WAIT_DEFAULTS = {"enabled": True, "timeout": 86400, "progress_interval": 60, "poll_interval": 5, "stop_on_timeout": False}
DEFAULT_ENV = {"PYTHONUNBUFFERED": "1"}

# verl: keys an experiment must set, with what they are for.
VERL_REQUIRED = (
    ("actor_rollout_ref.model.path", "the model to train: a Hugging Face id or a path on the shared volume"),
    ("data.train_files", "training parquet file(s), e.g. /data/datasets/gsm8k/train.parquet"),
    ("data.val_files", "validation parquet file(s), e.g. /data/datasets/gsm8k/test.parquet"),
)

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,79}$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
KEY_SEGMENT_RE = re.compile(r"^(?:[A-Za-z_$][A-Za-z0-9_$-]*|0|[1-9][0-9]*)$")
KEY_PREFIX_RE = re.compile(r"^(\+\+|\+|~)?(.*)$")
PY_MODULE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")

_MAPPING, _LIST, _STR, _INT, _NUM, _BOOL = "mapping", "list", "string", "integer", "number", "boolean"

TOP_LEVEL = {
    "description": _STR,
    "framework": _STR,
    "cluster": _STR,
    "project": _STR,
    "conventions": _STR,
    "entrypoint": _MAPPING,
    "params": _MAPPING,
    "env": _MAPPING,
    "secrets": _LIST,
    "optional_secrets": _LIST,
    "working_dir": _STR,
    "excludes": _LIST,
    "resources": _MAPPING,
    "wait": _MAPPING,
}
ENTRYPOINT_KEYS = {
    "verl": {"module": _STR, "config": _STR, "python": _STR},
    "nemo_rl": {"repo_dir": _STR, "script": _STR, "config": _STR, "runner": _STR},
    "custom": {"command": _STR},
}
RESOURCE_KEYS = {"entrypoint_num_cpus": _NUM, "entrypoint_num_gpus": _NUM, "entrypoint_memory": _INT,
                 "entrypoint_resources": _MAPPING}
WAIT_KEYS = {"enabled": _BOOL, "timeout": _INT, "progress_interval": _INT, "poll_interval": _NUM,
             "stop_on_timeout": _BOOL}


class ExperimentError(Exception):
    """One or more problems with an experiment; each entry of ``errors`` is one clear line."""

    def __init__(self, errors):
        self.errors = list(errors) if isinstance(errors, (list, tuple)) else [errors]
        super().__init__("\n".join(self.errors))


def type_name(value):
    if isinstance(value, bool):
        return _BOOL
    if isinstance(value, int):
        return _INT
    if isinstance(value, float):
        return _NUM
    if isinstance(value, str):
        return _STR
    if isinstance(value, dict):
        return _MAPPING
    if isinstance(value, list):
        return _LIST
    if value is None:
        return "null"
    return type(value).__name__


def _is(value, kind):
    if kind == _MAPPING:
        return isinstance(value, dict)
    if kind == _LIST:
        return isinstance(value, list)
    if kind == _STR:
        return isinstance(value, str)
    if kind == _BOOL:
        return isinstance(value, bool)
    if kind == _INT:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == _NUM:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    raise ValueError(kind)


def an(kind):
    return ("an " if kind[:1] in "aeiou" else "a ") + kind


def did_you_mean(word, candidates):
    close = difflib.get_close_matches(str(word), list(candidates), n=1, cutoff=0.6)
    return " (did you mean '%s'?)" % close[0] if close else ""


def _fmt(value):
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# --------------------------------------------------------------------------------------------
# Quoting: Hydra override values, then the shell
# --------------------------------------------------------------------------------------------

# Characters Hydra reads as one unquoted string (a subset of its grammar's ID/UNQUOTED_CHAR/COLON
# tokens); anything else is single-quoted for Hydra.
_HYDRA_BARE = re.compile(r"^[A-Za-z0-9_/.][A-Za-z0-9_/.+@%:-]*$")
_HYDRA_DICT_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")
_SHELL_SAFE = re.compile(r"^[A-Za-z0-9_@%+=:,./-]+$")


def hydra_quote(text):
    """Single-quote ``text`` for Hydra's override grammar.

    Hydra un-escapes only backslashes that precede a quote or end the string, so exactly those
    are doubled, and quotes are backslash-escaped.
    """
    text = re.sub(r"(\\+)\Z", lambda m: m.group(1) * 2, text)
    text = re.sub(r"(\\*)'", lambda m: m.group(1) * 2 + "\\'", text)
    return "'" + text + "'"


def hydra_value(value, nested=False):
    """Render a YAML value as a Hydra override value.

    Top-level strings made only of safe characters stay bare (Hydra types them as it would on a
    command line, so ``1e-6`` is a float); other strings, and every string inside a list or dict,
    are single-quoted. Lists render as ``['console','wandb']``, dicts as ``{a:1,b:'x'}``.
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        if not nested and _HYDRA_BARE.match(value):
            return value
        return hydra_quote(value)
    if isinstance(value, list):
        return "[" + ",".join(hydra_value(v, True) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join("%s:%s" % (k, hydra_value(v, True)) for k, v in value.items()) + "}"
    raise TypeError("cannot render %s as a Hydra value" % type(value).__name__)


def hydra_override(key, value):
    if key.startswith("~") and value is None:
        return key
    return "%s=%s" % (key, hydra_value(value))


def shell_quote(text):
    """Quote one argv item for /bin/sh; readable where possible, always exact."""
    if text and _SHELL_SAFE.match(text):
        return text
    if "'" not in text:
        return "'" + text + "'"
    if not re.search(r'[$`"\\!]', text):  # nothing is special inside double quotes then
        return '"' + text + '"'
    return shlex.quote(text)


# --------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------

if yaml is not None:
    class _UniqueKeyLoader(yaml.SafeLoader):
        """SafeLoader that refuses duplicate keys instead of keeping the last one silently."""

    def _construct_mapping(loader, node, deep=False):
        loader.flatten_mapping(node)
        seen = {}
        for key_node, dummy in node.value:
            key = loader.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, "duplicate key %r (also on line %d)" % (key, seen[key] + 1), key_node.start_mark)
            seen[key] = key_node.start_mark.line
        return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)

    _UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def validate_name(name, what="experiment"):
    if not isinstance(name, str) or not NAME_RE.match(name):
        example = "gsm8k_grpo_qwen05b" if what == "experiment" else "default"
        raise ExperimentError("invalid %s name %s: use 1-80 letters, digits, '_', '-' or '.', starting with a "
                              "letter or digit (e.g. %s)" % (what, _fmt(name), example))
    return name


def experiment_names(experiments_dir):
    try:
        entries = os.listdir(experiments_dir)
    except OSError:
        return []
    names = set()
    for entry in entries:
        base, ext = os.path.splitext(entry)
        if ext in EXTENSIONS and NAME_RE.match(base) and os.path.isfile(os.path.join(experiments_dir, entry)):
            names.add(base)
    return sorted(names)


def find_experiment(name, experiments_dir):
    validate_name(name)
    for ext in EXTENSIONS:
        path = os.path.join(experiments_dir, name + ext)
        if os.path.isfile(path):
            return path
    if not os.path.isdir(experiments_dir):
        raise ExperimentError("experiments directory %s does not exist (set verl_job_experiments_dir)" % experiments_dir)
    names = experiment_names(experiments_dir)
    raise ExperimentError("experiment '%s' not found in %s%s; available: %s"
                          % (name, experiments_dir, did_you_mean(name, names), ", ".join(names) or "none"))


class Experiment:
    """A validated experiment. ``params`` is the flattened, ordered list of (hydra key, value)."""

    def __init__(self, name, path, data):
        self.name = name
        self.path = path
        self.experiments_dir = os.path.dirname(os.path.abspath(path))
        self.label = os.path.basename(path)
        self.raw = data
        self.description = data.get("description") or ""
        self.framework = data.get("framework") or "verl"
        self.cluster = data.get("cluster") or DEFAULT_CLUSTER
        self.conventions = data.get("conventions") or DEFAULT_CONVENTIONS.get(self.framework, "none")
        self.project = data.get("project")
        self.entrypoint = dict(data.get("entrypoint") or {})
        self.params = []
        self.env = {}
        self.secrets = list(data.get("secrets") or [])
        self.optional_secrets = list(data.get("optional_secrets") or [])
        self.working_dir = data.get("working_dir")
        self.excludes = list(data.get("excludes") or [])
        self.resources = dict(data.get("resources") or {})
        self.wait = dict(WAIT_DEFAULTS, **(data.get("wait") or {}))

    @property
    def working_dir_path(self):
        if not self.working_dir:
            return None
        return os.path.normpath(os.path.join(self.experiments_dir, self.working_dir))

    def param(self, key, default=None):
        for k, v in self.params:
            if k.lstrip("+") == key:
                return v
        return default

    def has_param(self, key):
        return any(k.lstrip("+") == key for k, dummy in self.params)

    def summary(self):
        return dict(name=self.name, path=self.path, description=self.description, framework=self.framework,
                    cluster=self.cluster, conventions=self.conventions, project=self.project,
                    entrypoint=self.entrypoint, params=[[k, v] for k, v in self.params], env=self.env,
                    secrets=self.secrets, optional_secrets=self.optional_secrets, working_dir=self.working_dir_path,
                    excludes=self.excludes, resources=self.resources, wait=self.wait)


def read_yaml(path, label):
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise ExperimentError("%s: cannot be read: %s" % (label, e))
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = " (line %d, column %d)" % (mark.line + 1, mark.column + 1) if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ExperimentError("%s: not valid YAML%s: %s" % (label, where, problem))


def load_experiment(name, experiments_dir, extra_params=None):
    """Find, read and validate ``experiments_dir/NAME.yml``; raise :class:`ExperimentError`."""
    path = find_experiment(name, experiments_dir)
    label = os.path.basename(path)
    data = read_yaml(path, label)
    return validate(name, path, data, extra_params=extra_params)


def validate(name, path, data, extra_params=None):
    label = os.path.basename(path)
    errors = []

    def err(msg):
        errors.append("%s: %s" % (label, msg))

    if data is None:
        raise ExperimentError("%s: the file is empty; an experiment needs at least params (see docs/EXPERIMENTS.md)" % label)
    if not isinstance(data, dict):
        raise ExperimentError("%s: expected a mapping of keys (framework, params, env, ...), got %s"
                              % (label, an(type_name(data))))
    for key, value in data.items():
        if key not in TOP_LEVEL:
            err("unknown top-level key %s%s; allowed: %s" % (_fmt(key), did_you_mean(key, TOP_LEVEL), ", ".join(TOP_LEVEL)))
        elif value is not None and not _is(value, TOP_LEVEL[key]):
            err("%s: expected %s, got %s (%s)" % (key, an(TOP_LEVEL[key]), an(type_name(value)), _fmt(value)))
    if errors:
        raise ExperimentError(errors)

    framework = data.get("framework") or "verl"
    if framework not in FRAMEWORKS:
        err("framework: %s is not one of %s%s" % (_fmt(framework), ", ".join(FRAMEWORKS), did_you_mean(framework, FRAMEWORKS)))
        raise ExperimentError(errors)
    for key, what in (("cluster", "cluster"), ("project", "project")):
        if data.get(key) is not None and not NAME_RE.match(data[key]):
            err("%s: %s is not a valid %s name (letters, digits, '_', '-', '.')" % (key, _fmt(data[key]), what))
    conventions = data.get("conventions")
    if conventions is not None and conventions not in CONVENTIONS:
        err("conventions: %s is not one of %s%s" % (_fmt(conventions), ", ".join(CONVENTIONS), did_you_mean(conventions, CONVENTIONS)))

    exp = Experiment(name, path, data)
    _check_entrypoint(exp, err)
    _check_section(data.get("resources") or {}, "resources", RESOURCE_KEYS, err)
    _check_section(data.get("wait") or {}, "wait", WAIT_KEYS, err)
    for key in ("entrypoint_num_cpus", "entrypoint_num_gpus", "entrypoint_memory"):
        value = exp.resources.get(key)
        if _is(value, _NUM) and value < 0:
            err("resources.%s: must not be negative, got %s" % (key, value))
    for key, value in (exp.resources.get("entrypoint_resources") or {}).items():
        if not _is(value, _NUM) or value < 0:
            err("resources.entrypoint_resources.%s: expected a non-negative number, got %s" % (key, _fmt(value)))
    for key in ("timeout", "progress_interval", "poll_interval"):
        value = (data.get("wait") or {}).get(key)
        if _is(value, _NUM) and value <= 0:
            err("wait.%s: must be positive, got %s" % (key, value))

    exp.env = _check_env(data.get("env") or {}, err)
    _check_secrets(exp, err)
    _check_working_dir(exp, err)
    for i, pattern in enumerate(exp.excludes):
        if not isinstance(pattern, str) or not pattern.strip():
            err("excludes[%d]: expected a non-empty string (a gitignore-style pattern), got %s" % (i, _fmt(pattern)))

    exp.params = _flatten_params(data.get("params") or {}, err)
    if extra_params:
        exp.params = merge_params(exp.params, _flatten_params(extra_params, lambda m: err("extra params (verl_job_params): " + m)))

    if not errors and exp.conventions == "verl":
        _check_verl_conventions(exp, err)
    if not errors and framework == "verl":
        for key, what in VERL_REQUIRED:
            value = exp.param(key)
            if value is None or value == "" or value == []:
                err("params.%s is required for framework verl (%s)" % (key, what))
    if errors:
        raise ExperimentError(errors)
    if exp.project is None:
        exp.project = exp.param("trainer.project_name") if exp.conventions == "verl" and isinstance(
            exp.param("trainer.project_name"), str) else DEFAULT_PROJECT
    return exp


def _check_section(section, where, schema, err):
    for key, value in section.items():
        if key not in schema:
            err("%s: unknown key %s%s; allowed: %s" % (where, _fmt(key), did_you_mean(key, schema), ", ".join(schema)))
        elif not _is(value, schema[key]):
            err("%s.%s: expected %s, got %s (%s)" % (where, key, an(schema[key]), an(type_name(value)), _fmt(value)))


def _check_entrypoint(exp, err):
    schema = ENTRYPOINT_KEYS[exp.framework]
    _check_section(exp.entrypoint, "entrypoint", schema, err)
    ep = exp.entrypoint
    if exp.framework == "verl":
        if isinstance(ep.get("module"), str) and not PY_MODULE_RE.match(ep["module"]):
            err("entrypoint.module: %s is not a Python module name (e.g. verl.trainer.main_ppo)" % _fmt(ep["module"]))
        if isinstance(ep.get("config"), str) and not re.match(r"^[A-Za-z0-9_][A-Za-z0-9_./-]*$", ep["config"]):
            err("entrypoint.config: %s is not a Hydra config name (e.g. ppo_trainer)" % _fmt(ep["config"]))
        if isinstance(ep.get("python"), str) and not ep["python"].strip():
            err("entrypoint.python: must not be empty")
    elif exp.framework == "nemo_rl":
        repo = ep.get("repo_dir")
        if not repo:
            err("entrypoint.repo_dir is required for framework nemo_rl (the NeMo RL checkout on the cluster, "
                "e.g. /data/code/RL)")
        elif isinstance(repo, str) and not repo.startswith("/"):
            err("entrypoint.repo_dir: %s must be an absolute path on the cluster" % _fmt(repo))
    elif exp.framework == "custom":
        cmd = ep.get("command")
        if not isinstance(cmd, str) or not cmd.strip():
            err("entrypoint.command is required for framework custom (the shell command that starts the driver)")


def _check_env(env, err):
    out = {}
    for key, value in env.items():
        if not isinstance(key, str) or not ENV_NAME_RE.match(key):
            err("env: %s is not a valid environment variable name" % _fmt(key))
            continue
        if isinstance(value, bool) or value is None or not isinstance(value, (str, int, float)):
            err("env.%s: expected a string or a number, got %s (quote it: %s: \"...\")" % (key, an(type_name(value)), key))
            continue
        out[key] = value if isinstance(value, str) else str(value)
    return out


def _check_secrets(exp, err):
    seen = set()
    for where in ("secrets", "optional_secrets"):
        for item in getattr(exp, where):
            if not isinstance(item, str) or not ENV_NAME_RE.match(item):
                hint = " (list NAMES only; values come from the controller environment or verl_job_secrets)" \
                    if isinstance(item, dict) else ""
                err("%s: %s is not an environment variable name%s" % (where, _fmt(item), hint))
                continue
            if item in seen:
                err("%s: %s is listed twice" % (where, item))
            seen.add(item)
            if item in exp.env:
                err("%s: %s is also set in env; a secret's value must never be written in the experiment file" % (where, item))


def _check_working_dir(exp, err):
    if exp.working_dir is None:
        return
    if not exp.working_dir.strip():
        err("working_dir: must not be empty")
        return
    path = exp.working_dir_path
    if not os.path.isdir(path):
        err("working_dir: %s does not exist (resolved to %s, relative to the experiments directory)"
            % (_fmt(exp.working_dir), path))


def _check_key(key, where, err, top):
    prefix, rest = KEY_PREFIX_RE.match(key).groups()
    if prefix and not top:
        err("%s: %s: Hydra prefixes (+, ++, ~) are only allowed on a top-level params key, e.g. '+trainer.x'"
            % (where, _fmt(key)))
        return False
    segments = rest.split(".")
    if not all(KEY_SEGMENT_RE.match(s) for s in segments):
        err("%s: %s is not a valid Hydra key (dotted names of letters, digits, '_', '-')" % (where, _fmt(key)))
        return False
    return True


def _check_value(value, where, err):
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, list):
        return all(_check_value(v, "%s[%d]" % (where, i), err) for i, v in enumerate(value))
    if isinstance(value, dict):
        ok = True
        for k, v in value.items():
            if not isinstance(k, str) or not _HYDRA_DICT_KEY.match(k):
                err("%s: %s cannot be a key of a Hydra dict value" % (where, _fmt(k)))
                ok = False
            else:
                ok = _check_value(v, "%s.%s" % (where, k), err) and ok
        return ok
    err("%s: unsupported value of type %s (%s); quote it to pass a string" % (where, type(value).__name__, _fmt(value)))
    return False


def _flatten_params(params, err, prefix="", out=None, top=True):
    """Ordered (hydra key, value) pairs of a nested mapping; empty mappings stay values ({})."""
    out = [] if out is None else out
    if not isinstance(params, dict):
        err("params: expected a mapping, got %s" % an(type_name(params)))
        return out
    for key, value in params.items():
        if not isinstance(key, str):
            err("params%s: key %s must be a string" % ("." + prefix.rstrip(".") if prefix else "", _fmt(key)))
            continue
        where = "params." + prefix + key
        if not _check_key(key, "params." + prefix.rstrip(".") if prefix else "params", err, top and not prefix):
            continue
        if KEY_PREFIX_RE.match(key).group(1) == "~" and value is not None:
            err("%s: a '~' (delete) key takes no value; write %s: null" % (where, key))
            continue
        if isinstance(value, dict) and value and not key.startswith("~"):
            _flatten_params(value, err, prefix + key + ".", out, top=False)
            continue
        if not _check_value(value, where, err):
            continue
        full = prefix + key
        if any(k.lstrip("+~") == full.lstrip("+~") for k, dummy in out):
            err("%s is set twice" % where)
            continue
        out.append((full, value))
    return out


def merge_params(base, extra):
    """``extra`` pairs replace same-key pairs of ``base`` in place; new keys go at the end."""
    merged = list(base)
    for key, value in extra:
        bare = key.lstrip("+~")
        for i, (k, dummy) in enumerate(merged):
            if k.lstrip("+~") == bare:
                merged[i] = (k if k.startswith(("+", "~")) and not key.startswith(("+", "~")) else key, value)
                break
        else:
            merged.append((key, value))
    return merged


def _check_verl_conventions(exp, err):
    project = exp.param("trainer.project_name")
    if exp.project is not None and project is not None and project != exp.project:
        err("project %s and params.trainer.project_name %s disagree; set only project" % (_fmt(exp.project), _fmt(project)))
    elif project is not None and not (isinstance(project, str) and NAME_RE.match(project)):
        err("params.trainer.project_name: %s is not a valid project name (letters, digits, '_', '-', '.')" % _fmt(project))
    ckpt = exp.param("trainer.default_local_dir")
    if ckpt is not None and not (isinstance(ckpt, str) and ckpt.startswith("/")):
        err("params.trainer.default_local_dir: %s must be an absolute path on the shared volume "
            "(leave it out to use <checkpoint root>/<project>/<experiment>)" % _fmt(ckpt))
    for key in ("trainer.nnodes", "trainer.n_gpus_per_node"):
        value = exp.param(key)
        if value is not None and not (_is(value, _INT) and value >= 0):
            err("params.%s: expected a non-negative integer, got %s" % (key, _fmt(value)))


# --------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------

def submission_id(name, cluster, run=None):
    """``rlinfra-<experiment>-<cluster>[-<run>]``: re-running submit never starts a duplicate."""
    validate_name(name)
    validate_name(cluster, "cluster")
    sid = "%s-%s-%s" % (SUBMISSION_PREFIX, name, cluster)
    if run not in (None, ""):
        run = str(run)
        if not NAME_RE.match(run):
            raise ExperimentError("invalid run suffix %s: use letters, digits, '_', '-' or '.' (e.g. -e run=2)" % _fmt(run))
        sid += "-" + run
    return sid


def cluster_shape(nodes):
    """(nnodes, gpus per node) verl should use on ``nodes``: the GPU nodes and their smallest GPU
    count; with no GPU at all, every node and 0."""
    nodes = list(nodes or [])
    gpus = [_num((n.get("resources") or {}).get("GPU")) for n in nodes]
    with_gpu = [g for g in gpus if g and g > 0]
    if with_gpu:
        return len(with_gpu), int(min(with_gpu))
    return len(nodes), 0


def _num(value):
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def checkpoint_dir(exp, checkpoint_root=DEFAULT_CHECKPOINT_ROOT):
    if exp.conventions == "verl" and exp.param("trainer.default_local_dir"):
        return exp.param("trainer.default_local_dir")
    if exp.conventions == "nemo_rl" and exp.param("checkpointing.checkpoint_dir"):
        return exp.param("checkpointing.checkpoint_dir")
    root = (checkpoint_root or DEFAULT_CHECKPOINT_ROOT).rstrip("/") or "/"
    return "%s/%s/%s" % (root, exp.project, exp.name)


def managed_params(exp, nodes, checkpoint_root=DEFAULT_CHECKPOINT_ROOT):
    """The overrides rlinfra adds (those the experiment does not set), in a fixed order."""
    nnodes, gpus = cluster_shape(nodes)
    ckpt = checkpoint_dir(exp, checkpoint_root)
    if exp.conventions == "verl":
        wanted = [("trainer.project_name", exp.project), ("trainer.experiment_name", exp.name),
                  ("trainer.default_local_dir", ckpt), ("trainer.resume_mode", "auto"),
                  ("trainer.nnodes", nnodes), ("trainer.n_gpus_per_node", gpus)]
    elif exp.conventions == "nemo_rl":
        wanted = [("checkpointing.checkpoint_dir", ckpt), ("cluster.num_nodes", nnodes),
                  ("cluster.gpus_per_node", gpus)]
    else:
        wanted = []
    return [(k, v) for k, v in wanted if not exp.has_param(k)]


def entrypoint_head(exp):
    """The command before the overrides, as a shell string."""
    ep = exp.entrypoint
    if exp.framework == "verl":
        python = ep.get("python") or VERL_DEFAULTS["python"]
        parts = [python.strip(), "-m", ep.get("module") or VERL_DEFAULTS["module"]]
        config = ep.get("config") or VERL_DEFAULTS["config"]
        if config != VERL_DEFAULTS["config"]:
            parts.append(shell_quote("--config-name=" + config))
        return " ".join(parts)
    if exp.framework == "nemo_rl":
        runner = (ep.get("runner") or NEMO_RL_DEFAULTS["runner"]).strip()
        parts = ["cd", shell_quote(ep["repo_dir"]), "&&", runner, shell_quote(ep.get("script") or NEMO_RL_DEFAULTS["script"])]
        if ep.get("config"):
            parts += ["--config", shell_quote(ep["config"])]
        return " ".join(parts)
    return ep["command"].strip()


def render(exp, nodes, cluster=None, run=None, checkpoint_root=DEFAULT_CHECKPOINT_ROOT, venv=None,
           secret_names_present=()):
    """Everything the Ray job needs, except secret values and the working_dir package URI.

    ``nodes`` is the list of alive nodes (``ray_cluster_info``'s ``nodes``, or the same shape
    built from the inventory for a dry run). Returns a dict with ``submission_id``, ``entrypoint``,
    ``overrides`` (argv items as Hydra gets them), ``filled`` (the overrides rlinfra added),
    ``runtime_env`` (no secrets), ``runtime_env_display`` (secrets as ********), ``metadata``,
    ``resources``, ``checkpoint_dir``, ``nnodes``, ``gpus_per_node``.
    """
    cluster = cluster or exp.cluster
    sid = submission_id(exp.name, cluster, run)
    filled = managed_params(exp, nodes, checkpoint_root)
    pairs = list(exp.params) + filled
    overrides = [hydra_override(k, v) for k, v in pairs]
    entrypoint = " ".join([entrypoint_head(exp)] + [shell_quote(o) for o in overrides])

    env_vars = dict(DEFAULT_ENV)
    env_vars.update(exp.env)
    if venv and "PATH" not in env_vars:
        # Ray expands ${PATH} in env_vars: the driver's `python3` is the cluster's venv.
        env_vars["PATH"] = venv.rstrip("/") + "/bin:${PATH}"
    runtime_env = {"env_vars": env_vars}
    display_env = dict(env_vars)
    for name in list(exp.secrets) + list(exp.optional_secrets):
        if name in secret_names_present:
            display_env[name] = MASK
    display = {"env_vars": display_env}
    if exp.working_dir:
        display["working_dir"] = exp.working_dir_path

    shape = dict(pairs)
    if exp.conventions == "verl":
        nnodes, gpus = shape.get("trainer.nnodes"), shape.get("trainer.n_gpus_per_node")
    elif exp.conventions == "nemo_rl":
        nnodes, gpus = shape.get("cluster.num_nodes"), shape.get("cluster.gpus_per_node")
    else:
        nnodes, gpus = cluster_shape(nodes)
    metadata = {"rlinfra_experiment": exp.name, "rlinfra_cluster": cluster, "rlinfra_project": exp.project,
                "rlinfra_framework": exp.framework, "rlinfra_run": str(run or ""),
                "rlinfra_checkpoint_dir": checkpoint_dir(exp, checkpoint_root)}
    return dict(
        submission_id=sid, cluster=cluster, entrypoint=entrypoint, overrides=overrides,
        filled=[hydra_override(k, v) for k, v in filled], runtime_env=runtime_env, runtime_env_display=display,
        metadata=metadata, resources=copy.deepcopy(exp.resources), checkpoint_dir=checkpoint_dir(exp, checkpoint_root),
        nnodes=nnodes, gpus_per_node=gpus, project=exp.project)


def mask_secrets(text, values, mask=MASK):
    """Replace every occurrence of each secret value in ``text`` (longest first)."""
    if not text:
        return text
    for value in sorted({v for v in values if v}, key=len, reverse=True):
        text = text.replace(value, mask)
    return text
