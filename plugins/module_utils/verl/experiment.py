# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Experiment files (``experiments/NAME.yml``): finding, loading and validating one.

Pure Python (PyYAML only), importable without Ansible, so that the ``verl_experiment`` action
plugin and the tests share one implementation. docs/EXPERIMENTS.md documents the file format.
The concerns live apart: reading YAML within limits (_experiment_yaml.py), what a file may hold
(experiment_schema.py, which also holds :class:`ExperimentError`), rendering the Ray job
(experiment_render.py, its quoting in _experiment_quote.py), masking (masking.py).

* :func:`load_experiment` reads and validates a file; every problem is one line of
  :class:`ExperimentError` (``NAME.yml: key: what is wrong``).
* :class:`Experiment` is the validated result; :meth:`Experiment.summary` carries it from the
  controller to the head's steps, so a submit reads the file once.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.recovery import recovery_settings
from ansible_collections.rlinfra.verl.plugins.module_utils.verl import code_checkout, hf_prefetch
from ansible_collections.rlinfra.verl.plugins.module_utils.verl._experiment_yaml import read_yaml
from ansible_collections.rlinfra.verl.plugins.module_utils.verl.experiment_schema import (
    INT,
    NAME_RE,
    SCHEMA,
    ExperimentError,
    an,
    did_you_mean,
    flatten_params,
    fmt,
    is_kind,
    type_name,
)

DEFAULT_CONVENTIONS = {"verl": "verl", "nemo_rl": "nemo_rl", "custom": "none"}
DEFAULT_CHECKPOINT_ROOT = "/data/checkpoints"
DEFAULT_CLUSTER = "default"
DEFAULT_PROJECT = "rlinfra"
SUBMISSION_PREFIX = "rlinfra"
EXTENSIONS = (".yml", ".yaml")

VERL_DEFAULTS = {"module": "verl.trainer.main_ppo", "config": "ppo_trainer", "python": "python3"}
NEMO_RL_DEFAULTS = {"script": "examples/run_grpo_math.py", "runner": "uv run"}
WAIT_DEFAULTS = {
    "enabled": True,
    "timeout": 86400,
    "progress_interval": 60,
    "poll_interval": 5,
    "stop_on_timeout": False,
    "stall_timeout": 1800,
    "outage_grace": 300,
    "supervise": "cluster",
}
DEFAULT_ENV = {"PYTHONUNBUFFERED": "1"}

# verl: keys an experiment must set, with what they are for.
VERL_REQUIRED = (
    ("actor_rollout_ref.model.path", "the model to train: a Hugging Face id or a path on the shared volume"),
    ("data.train_files", "training parquet file(s), e.g. /data/datasets/gsm8k/train.parquet"),
    ("data.val_files", "validation parquet file(s), e.g. /data/datasets/gsm8k/test.parquet"),
)

# Limits (docs/EXPERIMENTS.md, "Limits"); the file's own (size, YAML values, depth) are _experiment_yaml.py's.
# Ray starts the entrypoint with /bin/sh -c ENTRYPOINT, one argv item, and Linux refuses any single
# argv or environment string of MAX_ARG_STRLEN (32 pages = 131072 bytes, NUL included) or more:
# the job would be created and then fail with "Argument list too long".
# Ray names the driver's log file job-driver-<submission id>.log (255 bytes at most on Linux); room
# is left for the recovery attempts' "-aN" suffix.
MAX_PARAMS = 10000
MAX_SUBMISSION_ID = 190
MAX_ERRORS = 20  # more problems than this are counted, not listed
# Ray resources asked through entrypoint_num_cpus/_gpus/_memory; as custom resources Ray fails the job.

ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SHAPE_KEYS = {
    "verl": ("trainer.nnodes", "trainer.n_gpus_per_node"),
    "nemo_rl": ("cluster.num_nodes", "cluster.gpus_per_node"),
}


def validate_name(name: Any, what: str = "experiment") -> str:
    if not isinstance(name, str) or not NAME_RE.match(name):
        example = "gsm8k_grpo_qwen05b" if what == "experiment" else "default"
        raise ExperimentError(
            "invalid %s name %s: use 1-80 letters, digits, '_', '-' or '.', starting with a "
            "letter or digit (e.g. %s)" % (what, fmt(name), example)
        )
    return name


def experiment_names(experiments_dir: str) -> list[str]:
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


def check_inside(path: str, directory: str) -> str:
    """An experiment file is read only when it lies in its directory, links followed: a link to a file elsewhere (a
    key, /etc/shadow) would be read and parts of it echoed in the errors. Where the link leads is not said either."""
    if vocabulary.leads_outside(path, directory):
        raise ExperimentError(
            "%s is a symbolic link that leads outside the experiments directory %s: copy the "
            "experiment into the directory, or point verl_job_experiments_dir at the directory "
            "that holds it" % (path, os.path.abspath(directory))
        )
    return path


def find_experiment(name: str, experiments_dir: str) -> str:
    validate_name(name)
    paths = [os.path.join(experiments_dir, name + ext) for ext in EXTENSIONS]
    for path in paths:
        if os.path.isfile(path):
            return check_inside(path, experiments_dir)
    for path in paths:
        if os.path.lexists(path):  # a directory, a broken link, a link loop: read_yaml says which
            return check_inside(path, experiments_dir)
    if not os.path.isdir(experiments_dir):
        raise ExperimentError(
            "experiments directory %s %s (set verl_job_experiments_dir)"
            % (experiments_dir, "is not a directory" if os.path.lexists(experiments_dir) else "does not exist")
        )
    names = experiment_names(experiments_dir)
    shown = ", ".join(names[:30]) + (" and %d more" % (len(names) - 30) if len(names) > 30 else "")
    raise ExperimentError(
        "experiment '%s' not found in %s%s; available: %s"
        % (name, experiments_dir, did_you_mean(name, names), shown or "none")
    )


class Experiment:
    """A validated experiment. ``params`` is the flattened, ordered list of (hydra key, value)."""

    prefetch: dict[str, Any] | None
    code: dict[str, Any] | None

    def __init__(self, name: str, path: str, data: Mapping[str, Any]):
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
        self.params: list[tuple[str, Any]] = []
        self.env: dict[str, str] = {}
        self.secrets = list(data.get("secrets") or [])
        self.optional_secrets = list(data.get("optional_secrets") or [])
        self.working_dir = data.get("working_dir")
        self.excludes = list(data.get("excludes") or [])
        self.resources = dict(data.get("resources") or {})
        self.wait = {**WAIT_DEFAULTS, **(data.get("wait") or {})}  # non-string keys: reported, not a crash
        self.recovery = recovery_settings(data.get("recovery"))  # a key set to null keeps its default
        self.on_end = (
            data.get("on_end") or "keep"
        )  # the rentals once the run has ended (module_utils/ray/supervisor.py)
        self.prefetch = (
            None  # {"models", "datasets", "hf_home", "hub_cache"} once validated (module_utils/verl/hf_prefetch.py)
        )
        self.code = None  # {"repo", "ref", "submodules", "path", "name", ...} once validated (module_utils/verl/code_checkout.py)

    @property
    def working_dir_path(self) -> str | None:
        if not self.working_dir:
            return None
        return os.path.normpath(os.path.join(self.experiments_dir, self.working_dir))

    def param(self, key: str, default: Any = None) -> Any:
        for k, v in self.params:
            if k.lstrip("+") == key:
                return v
        return default

    def has_param(self, key: str) -> bool:
        return any(k.lstrip("+") == key for k, dummy in self.params)

    @classmethod
    def from_summary(cls, s: Mapping[str, Any]) -> Experiment:
        """The experiment :meth:`summary` describes, without reading nor validating the file again:
        a submit loads it once on the controller and the head's steps reuse that result."""
        data = {
            k: s.get(k)
            for k in (
                "description",
                "framework",
                "cluster",
                "conventions",
                "project",
                "entrypoint",
                "secrets",
                "optional_secrets",
                "working_dir",
                "excludes",
                "resources",
                "wait",
                "recovery",
                "on_end",
            )
        }
        exp = cls(s["name"], s["path"], data)
        exp.prefetch = s.get("prefetch")
        exp.code = s.get("code")
        exp.params = [tuple(pair) for pair in s.get("params") or []]  # JSON gives the pairs back as lists
        exp.env = dict(s.get("env") or {})
        return exp

    def summary(self) -> dict[str, Any]:
        return dict(
            name=self.name,
            path=self.path,
            description=self.description,
            framework=self.framework,
            cluster=self.cluster,
            conventions=self.conventions,
            project=self.project,
            entrypoint=self.entrypoint,
            params=[[k, v] for k, v in self.params],
            env=self.env,
            secrets=self.secrets,
            optional_secrets=self.optional_secrets,
            working_dir=self.working_dir_path,
            excludes=self.excludes,
            resources=self.resources,
            wait=self.wait,
            recovery=self.recovery,
            on_end=self.on_end,
            prefetch=self.prefetch,
            code=self.code,
        )


def load_experiment(name: str, experiments_dir: str, extra_params: Mapping[str, Any] | None = None) -> Experiment:
    """Find, read and validate ``experiments_dir/NAME.yml``; raise :class:`ExperimentError`."""
    return load_experiment_file(name, find_experiment(name, experiments_dir), extra_params=extra_params)


def load_experiment_file(name: str, path: str, extra_params: Mapping[str, Any] | None = None) -> Experiment:
    """Read and validate the experiment file ``path`` (named ``name``); raise :class:`ExperimentError`."""
    return validate(name, path, read_yaml(path, os.path.basename(path)), extra_params=extra_params)


def validate(name: str, path: str, data: Any, extra_params: Mapping[str, Any] | None = None) -> Experiment:
    label = os.path.basename(path)
    errors = _Errors(label)
    err = errors.add

    if data is None:
        raise ExperimentError(
            "%s: the file is empty; an experiment needs at least params (see docs/EXPERIMENTS.md)" % label
        )
    if not isinstance(data, dict):
        raise ExperimentError(
            "%s: expected a mapping of keys (framework, params, env, ...), got %s" % (label, an(type_name(data)))
        )
    _check_nul(data, "", err)
    if errors:
        raise ExperimentError(errors.lines())
    # Every key against its type (module_utils/verl/experiment_schema.py); then the rules that tie keys together.
    for where, t, value, bad in SCHEMA.problems(data, "", data):
        err(t.line(where, value, bad))
    if errors:
        raise ExperimentError(errors.lines())

    framework = data.get("framework") or "verl"
    exp = Experiment(name, path, data)
    exp.code = code_checkout.normalize(data.get("code"), err)
    if exp.code is not None and data.get("working_dir") is not None:
        err(
            "working_dir: the job runs in the checkout of code.repo; ship files with the repository instead (or drop code)"
        )
    _check_entrypoint(exp, err)
    exp.env = dict((k, v if isinstance(v, str) else str(v)) for k, v in (data.get("env") or {}).items())
    exp.prefetch = _check_prefetch(data.get("prefetch"), exp.env, err)
    _check_secrets(exp, err)
    _check_working_dir(exp, err)

    exp.params = flatten_params(data.get("params") or {}, err)
    if extra_params:
        exp.params = merge_params(
            exp.params, flatten_params(extra_params, lambda m: err("extra params (verl_job_params): " + m))
        )
    if len(exp.params) > MAX_PARAMS:
        err(
            "params: %d values, more than the %d an experiment may set (they all go on one command line); keep "
            "large settings in a config file (entrypoint.config, or a file in working_dir)"
            % (len(exp.params), MAX_PARAMS)
        )

    if not errors and exp.conventions == "verl":
        _check_verl_conventions(exp, err)
    _check_deadline(exp, err)
    if not errors and framework == "verl":
        for key, what in VERL_REQUIRED:
            value = exp.param(key)
            if value is None or value == "" or value == []:
                err("params.%s is required for framework verl (%s)" % (key, what))
    if errors:
        raise ExperimentError(errors.lines())
    if exp.project is None:
        exp.project = (
            exp.param("trainer.project_name")
            if exp.conventions == "verl" and isinstance(exp.param("trainer.project_name"), str)
            else DEFAULT_PROJECT
        )
    return exp


def _check_deadline(exp, err):
    """recovery.deadline kept as UTC ISO text (YAML gives a datetime); verl saves before it only when it saves at all."""
    if exp.recovery.get("deadline") is None:
        return
    exp.recovery["deadline"] = vocabulary.Time().check(exp.recovery["deadline"])
    if exp.conventions == "verl":
        freq = exp.param("trainer.save_freq")
        if isinstance(freq, bool) or not isinstance(freq, int) or freq <= 0:
            err(
                "recovery.deadline needs params.trainer.save_freq above 0: verl saves before the deadline only when it "
                "saves checkpoints at all (got %s)" % ("no trainer.save_freq" if freq is None else fmt(freq))
            )


class _Errors(list):
    """Problems, one line each, prefixed with the file's name; past :data:`MAX_ERRORS` they are only
    counted, so that a file with 20000 bad keys still gives a readable answer."""

    def __init__(self, label):
        super().__init__()
        self.label = label
        self.more = 0

    def add(self, msg):
        if len(self) < MAX_ERRORS:
            self.append("%s: %s" % (self.label, msg))
        else:
            self.more += 1

    def lines(self):
        return list(self) + (["%s: ... and %d more problem(s)" % (self.label, self.more)] if self.more else [])


def _finite(value):
    return not isinstance(value, float) or math.isfinite(value)


def _check_nul(value, where, err, seen=None):
    """NUL cannot be carried by a command line, an environment variable nor a path: Ray would
    create the job and fail it. Reported once per value, wherever it is in the file."""
    if isinstance(value, str):
        if "\0" in value:
            err(
                "%s: contains a NUL character (\\0), which no command line, environment variable or path can carry"
                % (where or "value")
            )
    elif isinstance(value, (dict, list)):
        seen = set() if seen is None else seen
        if id(value) in seen:  # the same (aliased) value, already checked
            return
        seen.add(id(value))
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            if isinstance(key, str) and "\0" in key:
                err("%s: a key contains a NUL character (\\0)" % (where or "top level"))
                continue
            sub = (
                ("%s[%d]" % (where, key))
                if isinstance(value, list)
                else ("%s.%s" % (where, key) if where else str(key))
            )
            _check_nul(item, sub, err, seen)


def _check_entrypoint(exp, err):
    ep = exp.entrypoint
    if exp.framework == "nemo_rl":
        repo = ep.get("repo_dir")
        if exp.raw.get("code") is not None:
            if repo is not None:
                err(
                    "entrypoint.repo_dir: with code, the job runs in the code's checkout; drop repo_dir (code.path names "
                    "a subdirectory)"
                )
        elif not repo:
            err(
                "entrypoint.repo_dir is required for framework nemo_rl (the NeMo RL checkout on the cluster, "
                "e.g. /data/code/RL)"
            )
    elif exp.framework == "custom":
        if ep.get("command") is None:
            err("entrypoint.command is required for framework custom (the shell command that starts the driver)")


def _check_prefetch(section, env, err):
    """The prefetch section, normalized, with the cache the job reads: its HF_HOME (and HF_HUB_CACHE)."""
    items, hf_home = hf_prefetch.normalize(section, err)
    if not items:
        return None
    job_home = env.get("HF_HOME")
    if hf_home and job_home and os.path.normpath(hf_home) != os.path.normpath(job_home):
        err(
            "prefetch.hf_home: %s differs from env.HF_HOME %s, so the job would not find the files; set only one"
            % (fmt(hf_home), fmt(job_home))
        )
        return None
    if hf_home and not job_home:
        env["HF_HOME"] = hf_home  # the job reads the cache the files went to
    hf_home = hf_home or job_home
    if not hf_home or not hf_home.startswith("/"):
        err(
            "prefetch: the files need a home on the shared volume that the job reads: set env.HF_HOME (an absolute path, "
            "e.g. /data/hf_home) or prefetch.hf_home"
        )
        return None
    hub_cache = env.get("HF_HUB_CACHE") or None
    if hub_cache is not None and not hub_cache.startswith("/"):
        err("env.HF_HUB_CACHE: expected an absolute path for prefetch, got %s" % fmt(hub_cache))
        return None
    return dict(hf_prefetch.sections(items), hf_home=hf_home, hub_cache=hub_cache)


def _check_secrets(exp, err):
    seen = set()
    for where in ("secrets", "optional_secrets"):
        for item in getattr(exp, where):
            if not isinstance(item, str) or not ENV_NAME_RE.match(item):
                hint = (
                    " (list NAMES only; values come from the controller environment or verl_job_secrets)"
                    if isinstance(item, dict)
                    else ""
                )
                err("%s: %s is not an environment variable name%s" % (where, fmt(item), hint))
                continue
            if item in seen:
                err("%s: %s is listed twice" % (where, item))
            seen.add(item)
            if item in exp.env:
                err(
                    "%s: %s is also set in env; a secret's value must never be written in the experiment file"
                    % (where, item)
                )


def _check_working_dir(exp, err):
    if exp.working_dir is None:
        return
    if not exp.working_dir.strip():
        err("working_dir: must not be empty")
        return
    path = exp.working_dir_path
    # First: what lies at the other end of such a link (a directory, a file, nothing) is not this file's to tell.
    if vocabulary.leads_outside(path, exp.experiments_dir):
        err(
            "working_dir: %s leads outside the experiments directory %s through a symbolic link; copy its files into "
            "the experiments directory (a job is sent only what lies inside it)"
            % (fmt(exp.working_dir), exp.experiments_dir)
        )
        return
    if os.path.isdir(path):
        return
    if os.path.exists(path):
        err("working_dir: %s is not a directory (resolved to %s)" % (fmt(exp.working_dir), path))
    elif os.path.lexists(path):
        err(
            "working_dir: %s is a symbolic link that leads nowhere (a loop or a missing target; resolved to %s)"
            % (fmt(exp.working_dir), path)
        )
    else:
        err(
            "working_dir: %s does not exist (resolved to %s, relative to the experiments directory)"
            % (fmt(exp.working_dir), path)
        )


def merge_params(base: Iterable[tuple[str, Any]], extra: Iterable[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """``extra`` pairs replace same-key pairs of ``base`` in place; new keys go at the end."""
    merged = list(base)
    index: dict[str, int] = {}
    i: int | None
    for i, (k, _dummy) in enumerate(merged):
        index.setdefault(k.lstrip("+~"), i)
    for key, value in extra:
        bare = key.lstrip("+~")
        i = index.get(bare)
        if i is None:
            index[bare] = len(merged)
            merged.append((key, value))
        else:
            k = merged[i][0]
            merged[i] = (k if k.startswith(("+", "~")) and not key.startswith(("+", "~")) else key, value)
    return merged


def _check_verl_conventions(exp, err):
    project = exp.param("trainer.project_name")
    if exp.project is not None and project is not None and project != exp.project:
        err(
            "project %s and params.trainer.project_name %s disagree; set only project"
            % (fmt(exp.project), fmt(project))
        )
    elif project is not None and not (isinstance(project, str) and NAME_RE.match(project)):
        err(
            "params.trainer.project_name: %s is not a valid project name (letters, digits, '_', '-', '.')"
            % fmt(project)
        )
    ckpt = exp.param("trainer.default_local_dir")
    if ckpt is not None and not (isinstance(ckpt, str) and ckpt.startswith("/")):
        err(
            "params.trainer.default_local_dir: %s must be an absolute path on the shared volume "
            "(leave it out to use <checkpoint root>/<project>/<experiment>)" % fmt(ckpt)
        )
    for key in SHAPE_KEYS["verl"]:
        value = exp.param(key)
        if value is not None and not (is_kind(value, INT) and value >= 0):
            err("params.%s: expected a non-negative integer, got %s" % (key, fmt(value)))


# --------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------
