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
import stat

from ansible_collections.rlinfra.verl.plugins.module_utils import code_checkout as CC
from ansible_collections.rlinfra.verl.plugins.module_utils import hf_prefetch as HFP
from ansible_collections.rlinfra.verl.plugins.module_utils import secrets_file as SF
from ansible_collections.rlinfra.verl.plugins.module_utils.experiment_schema import (
    MAX_ARG_BYTES, NAME_RE, SCHEMA, flatten_params)
from ansible_collections.rlinfra.verl.plugins.module_utils.cluster_shape import cluster_shape
from ansible_collections.rlinfra.verl.plugins.module_utils.recovery import RECOVERY_DEFAULTS

try:
    import yaml
except ImportError:  # pragma: no cover - PyYAML ships with ansible-core
    yaml = None

DEFAULT_CONVENTIONS = {"verl": "verl", "nemo_rl": "nemo_rl", "custom": "none"}
DEFAULT_CHECKPOINT_ROOT = "/data/checkpoints"
DEFAULT_CLUSTER = "default"
DEFAULT_PROJECT = "rlinfra"
SUBMISSION_PREFIX = "rlinfra"
MASK = "********"
EXTENSIONS = (".yml", ".yaml")

VERL_DEFAULTS = {"module": "verl.trainer.main_ppo", "config": "ppo_trainer", "python": "python3"}
NEMO_RL_DEFAULTS = {"script": "examples/run_grpo_math.py", "runner": "uv run"}
WAIT_DEFAULTS = {"enabled": True, "timeout": 86400, "progress_interval": 60, "poll_interval": 5, "stop_on_timeout": False,
                 "stall_timeout": 1800, "outage_grace": 300}
DEFAULT_ENV = {"PYTHONUNBUFFERED": "1"}

# verl: keys an experiment must set, with what they are for.
VERL_REQUIRED = (
    ("actor_rollout_ref.model.path", "the model to train: a Hugging Face id or a path on the shared volume"),
    ("data.train_files", "training parquet file(s), e.g. /data/datasets/gsm8k/train.parquet"),
    ("data.val_files", "validation parquet file(s), e.g. /data/datasets/gsm8k/test.parquet"),
)

# Limits (docs/EXPERIMENTS.md, "Limits"). An experiment file is a few kB written by hand; these
# bounds keep a careless or hostile file from hanging the controller, long before anything is sent.
MAX_FILE_BYTES = 1024 * 1024
# YAML values after expanding aliases: an alias costs nothing to write but is copied wherever it is
# used, so a 1 kB file of nested aliases ("billion laughs") can stand for billions of values.
MAX_YAML_NODES = 100000
MAX_YAML_DEPTH = 64  # libyaml's composer recurses in C: a deep enough file crashes the process
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

_MAPPING, _LIST, _STR, _INT, _NUM, _BOOL = "mapping", "list", "string", "integer", "number", "boolean"


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
    from yaml.composer import Composer
    from yaml.constructor import ConstructorError, SafeConstructor
    from yaml.nodes import MappingNode, ScalarNode
    from yaml.resolver import Resolver

    try:
        from yaml._yaml import CParser  # libyaml: parses 20k params in a fraction of the pure-Python time
    except ImportError:  # pragma: no cover - PyYAML without libyaml
        CParser = None

    class LimitError(yaml.YAMLError):
        """A file over one of the limits; ``problem`` says which, ``problem_mark`` where."""

        def __init__(self, problem, mark):
            super().__init__(problem)
            self.problem = problem
            self.problem_mark = mark

    class _LimitedComposer(Composer):
        """PyYAML's composer (in Python, so its recursion is bounded and caught), counting nesting and
        the values each node stands for once its aliases are expanded. The count is kept on the node,
        so a node referred to by many aliases is counted once per use but walked only once."""

        def compose_document(self):
            self._rl_depth = 0
            return Composer.compose_document(self)

        def compose_node(self, parent, index):
            event = self.peek_event()
            alias = event.anchor if isinstance(event, yaml.AliasEvent) else None
            self._rl_depth += 1
            try:
                if self._rl_depth > MAX_YAML_DEPTH:
                    raise LimitError("nested more than %d levels deep" % MAX_YAML_DEPTH, event.start_mark)
                node = Composer.compose_node(self, parent, index)
            finally:
                self._rl_depth -= 1
            size = getattr(node, "_rl_size", None)
            if size is None:
                if alias is not None:
                    raise LimitError("alias *%s refers to a node that contains it; an experiment cannot be a "
                                     "recursive structure" % alias, event.start_mark)
                if isinstance(node, ScalarNode):
                    size = 1
                elif isinstance(node, MappingNode):
                    size = 1 + sum(k._rl_size + v._rl_size for k, v in node.value)
                else:
                    size = 1 + sum(v._rl_size for v in node.value)
                node._rl_size = size
            if size > MAX_YAML_NODES:
                what = "alias *%s expands to" % alias if alias is not None else "this holds"
                raise LimitError("%s more than %d values once aliases are expanded; write the values out, or keep "
                                 "large data in a file on the shared volume" % (what, MAX_YAML_NODES), event.start_mark)
            return node

    _BOOL_TAG = "tag:yaml.org,2002:bool"
    _MERGE_TAG = "tag:yaml.org,2002:merge"

    def _key(loader, key_node, deep):
        """A mapping key. YAML 1.1 reads a bare ``on``/``off``/``yes``/``no`` as a boolean, which made
        ``recovery: {on: [...]}`` the key True; as a key it stays the word that was written."""
        if key_node.tag == _BOOL_TAG and isinstance(key_node, ScalarNode) and not key_node.style \
                and key_node.value.lower() not in ("true", "false"):
            return key_node.value
        key = loader.construct_object(key_node, deep=deep)
        try:
            hash(key)
        except TypeError:
            raise ConstructorError(None, None, "a %s cannot be a key" % type_name(key), key_node.start_mark)
        return key

    def _construct_mapping(loader, node, deep=False):
        """Refuse duplicate keys (PyYAML keeps the last one silently). Keys brought in by a merge
        (``<<: *defaults``) may be overridden, as YAML intends."""
        seen = {}
        for key_node, dummy in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            key = _key(loader, key_node, deep)
            if key in seen:
                raise ConstructorError(
                    None, None, "duplicate key %r (also on line %d)" % (key, seen[key] + 1), key_node.start_mark)
            seen[key] = key_node.start_mark.line
        loader.flatten_mapping(node)
        mapping = {}
        for key_node, value_node in node.value:
            mapping[_key(loader, key_node, deep)] = loader.construct_object(value_node, deep=deep)
        return mapping

    def _construct_int(loader, node):
        # int() refuses more than 4300 decimal digits with a ValueError, and a hex literal has no such
        # limit but cannot be printed back: both become one line here.
        try:
            value = SafeConstructor.construct_yaml_int(loader, node)
        except ValueError:
            value = None
        if value is None or value.bit_length() > 64:
            raise ConstructorError(None, None, "integer %s is out of range (at most 64 bits); quote it to pass a string"
                                   % _fmt(node.value), node.start_mark)
        return value

    def _guarded(construct, what):
        def guarded(loader, node):
            try:
                return construct(loader, node)
            except (ValueError, OverflowError) as e:
                raise ConstructorError(None, None, "%s %s cannot be read (%s); quote it to pass a string"
                                       % (what, _fmt(node.value), e), node.start_mark)
        return guarded

    class _Constructor(SafeConstructor):
        pass

    _Constructor.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
    _Constructor.add_constructor("tag:yaml.org,2002:int", _construct_int)
    _Constructor.add_constructor("tag:yaml.org,2002:float", _guarded(SafeConstructor.construct_yaml_float, "number"))
    _Constructor.add_constructor("tag:yaml.org,2002:timestamp",
                                 _guarded(SafeConstructor.construct_yaml_timestamp, "date"))

    class _PyLoader(yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser, _LimitedComposer, _Constructor,
                    Resolver):
        def __init__(self, stream):
            yaml.reader.Reader.__init__(self, stream)
            yaml.scanner.Scanner.__init__(self)
            yaml.parser.Parser.__init__(self)
            _LimitedComposer.__init__(self)
            _Constructor.__init__(self)
            Resolver.__init__(self)

    if CParser is not None:
        # libyaml's events, composed by the bounded Python composer (first in the MRO): libyaml's own
        # composer recurses in C and crashes the process on a deep enough file.
        class _CLoader(_LimitedComposer, CParser, _Constructor, Resolver):
            def __init__(self, stream):
                CParser.__init__(self, stream)
                _LimitedComposer.__init__(self)
                _Constructor.__init__(self)
                Resolver.__init__(self)
    else:  # pragma: no cover
        _CLoader = None


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


def check_inside(path, directory):
    """An experiment file is read only when it lies in its directory, links resolved: a link to a file elsewhere
    (a key, /etc/shadow) would be read and parts of it echoed in the errors."""
    real, top = os.path.realpath(path), os.path.realpath(directory)
    if os.path.lexists(real) and not real.startswith(top.rstrip("/") + "/"):
        raise ExperimentError("%s is a link to %s, outside the experiments directory %s: copy the experiment into the "
                              "directory, or point verl_job_experiments_dir at the directory that holds it"
                              % (path, real, top))
    return path


def find_experiment(name, experiments_dir):
    validate_name(name)
    paths = [os.path.join(experiments_dir, name + ext) for ext in EXTENSIONS]
    for path in paths:
        if os.path.isfile(path):
            return check_inside(path, experiments_dir)
    for path in paths:
        if os.path.lexists(path):  # a directory, a broken link, a link loop: read_yaml says which
            return check_inside(path, experiments_dir)
    if not os.path.isdir(experiments_dir):
        raise ExperimentError("experiments directory %s %s (set verl_job_experiments_dir)" % (
            experiments_dir, "is not a directory" if os.path.lexists(experiments_dir) else "does not exist"))
    names = experiment_names(experiments_dir)
    shown = ", ".join(names[:30]) + (" and %d more" % (len(names) - 30) if len(names) > 30 else "")
    raise ExperimentError("experiment '%s' not found in %s%s; available: %s"
                          % (name, experiments_dir, did_you_mean(name, names), shown or "none"))


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
        self.wait = {**WAIT_DEFAULTS, **(data.get("wait") or {})}  # non-string keys: reported, not a crash
        self.recovery = {**RECOVERY_DEFAULTS, **(data.get("recovery") or {})}
        self.prefetch = None  # {"models", "datasets", "hf_home", "hub_cache"} once validated (module_utils/hf_prefetch.py)
        self.code = None  # {"repo", "ref", "submodules", "path", "name", ...} once validated (module_utils/code_checkout.py)

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

    @classmethod
    def from_summary(cls, s):
        """The experiment :meth:`summary` describes, without reading nor validating the file again:
        a submit loads it once on the controller and the head's steps reuse that result."""
        data = {k: s.get(k) for k in ("description", "framework", "cluster", "conventions", "project", "entrypoint",
                                      "secrets", "optional_secrets", "working_dir", "excludes", "resources",
                                      "wait", "recovery")}
        exp = cls(s["name"], s["path"], data)
        exp.prefetch = s.get("prefetch")
        exp.code = s.get("code")
        exp.params = [tuple(pair) for pair in s.get("params") or []]  # JSON gives the pairs back as lists
        exp.env = dict(s.get("env") or {})
        return exp

    def summary(self):
        return dict(name=self.name, path=self.path, description=self.description, framework=self.framework,
                    cluster=self.cluster, conventions=self.conventions, project=self.project,
                    entrypoint=self.entrypoint, params=[[k, v] for k, v in self.params], env=self.env,
                    secrets=self.secrets, optional_secrets=self.optional_secrets, working_dir=self.working_dir_path,
                    excludes=self.excludes, resources=self.resources, wait=self.wait, recovery=self.recovery,
                    prefetch=self.prefetch, code=self.code)


def read_yaml(path, label):
    """The parsed file, or one line of :class:`ExperimentError`: not a regular file, over
    :data:`MAX_FILE_BYTES`, not UTF-8, not YAML, over the alias or nesting limits, a duplicate key."""
    try:
        st = os.stat(path)
        if stat.S_ISDIR(st.st_mode):
            raise ExperimentError("%s: %s is a directory, not an experiment file" % (label, path))
        if not stat.S_ISREG(st.st_mode):
            raise ExperimentError("%s: %s is not a regular file" % (label, path))
        if st.st_size > MAX_FILE_BYTES:
            raise ExperimentError("%s: the file is %d bytes, over the %d bytes (1 MiB) an experiment file may have; "
                                  "keep data, code and long lists out of it (working_dir, the shared volume)"
                                  % (label, st.st_size, MAX_FILE_BYTES))
        with open(path, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise ExperimentError("%s: cannot be read: %s (%s); check that it exists and that you may read it"
                              % (label, e.strerror or e, path))
    if len(raw) > MAX_FILE_BYTES:  # it grew while being read
        raise ExperimentError("%s: the file is over the %d bytes (1 MiB) an experiment file may have"
                              % (label, MAX_FILE_BYTES))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        column = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        raise ExperimentError("%s: not UTF-8 text (byte 0x%02x at line %d, column %d); save the file as UTF-8"
                              % (label, raw[e.start], line, column))
    return parse_yaml(text, label)


def parse_yaml(text, label):
    try:
        return _load(text, _CLoader or _PyLoader)
    except yaml.YAMLError as e:
        if _CLoader is not None and isinstance(e, (yaml.reader.ReaderError, yaml.scanner.ScannerError,
                                                   yaml.parser.ParserError)):
            # libyaml words its syntax errors differently: the same file gives the same line anywhere.
            try:
                _load(text, _PyLoader)
            except (yaml.YAMLError, RecursionError) as again:
                e = again
        raise ExperimentError(_yaml_error(e, label, text))
    except RecursionError:  # pragma: no cover - the depth limit comes first
        raise ExperimentError("%s: nested too deeply" % label)


def _load(text, loader_class):
    loader = loader_class(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def _yaml_error(e, label, text):
    if isinstance(e, RecursionError):
        return "%s: nested too deeply" % label
    mark = getattr(e, "problem_mark", None)
    where = " (line %d, column %d)" % (mark.line + 1, mark.column + 1) if mark else ""
    problem = getattr(e, "problem", None) or str(e).splitlines()[0]
    if isinstance(e, yaml.reader.ReaderError) and isinstance(e.position, int):
        line = text.count("\n", 0, e.position) + 1
        where = " (line %d, column %d)" % (line, e.position - (text.rfind("\n", 0, e.position) + 1) + 1)
        problem = "control character #x%04x is not allowed (in a quoted string, write it as an escape)" % e.character
    if isinstance(e, LimitError):
        return "%s: over a limit%s: %s" % (label, where, problem)
    return "%s: not valid YAML%s: %s" % (label, where, problem)


def load_experiment(name, experiments_dir, extra_params=None):
    """Find, read and validate ``experiments_dir/NAME.yml``; raise :class:`ExperimentError`."""
    return load_experiment_file(name, find_experiment(name, experiments_dir), extra_params=extra_params)


def load_experiment_file(name, path, extra_params=None):
    """Read and validate the experiment file ``path`` (named ``name``); raise :class:`ExperimentError`."""
    return validate(name, path, read_yaml(path, os.path.basename(path)), extra_params=extra_params)


def validate(name, path, data, extra_params=None):
    label = os.path.basename(path)
    errors = _Errors(label)
    err = errors.add

    if data is None:
        raise ExperimentError("%s: the file is empty; an experiment needs at least params (see docs/EXPERIMENTS.md)" % label)
    if not isinstance(data, dict):
        raise ExperimentError("%s: expected a mapping of keys (framework, params, env, ...), got %s"
                              % (label, an(type_name(data))))
    _check_nul(data, "", err)
    if errors:
        raise ExperimentError(errors.lines())
    # Every key against its type (module_utils/experiment_schema.py); then the rules that tie keys together.
    for where, t, value, bad in SCHEMA.problems(data, "", data):
        err(t.line(where, value, bad))
    if errors:
        raise ExperimentError(errors.lines())

    framework = data.get("framework") or "verl"
    exp = Experiment(name, path, data)
    exp.code = CC.normalize(data.get("code"), err)
    if exp.code is not None and data.get("working_dir") is not None:
        err("working_dir: the job runs in the checkout of code.repo; ship files with the repository instead (or drop code)")
    _check_entrypoint(exp, err)
    exp.env = dict((k, v if isinstance(v, str) else str(v)) for k, v in (data.get("env") or {}).items())
    exp.prefetch = _check_prefetch(data.get("prefetch"), exp.env, err)
    _check_secrets(exp, err)
    _check_working_dir(exp, err)

    exp.params = flatten_params(data.get("params") or {}, err)
    if extra_params:
        exp.params = merge_params(exp.params, flatten_params(extra_params, lambda m: err("extra params (verl_job_params): " + m)))
    if len(exp.params) > MAX_PARAMS:
        err("params: %d values, more than the %d an experiment may set (they all go on one command line); keep "
            "large settings in a config file (entrypoint.config, or a file in working_dir)" % (len(exp.params), MAX_PARAMS))

    if not errors and exp.conventions == "verl":
        _check_verl_conventions(exp, err)
    if not errors and framework == "verl":
        for key, what in VERL_REQUIRED:
            value = exp.param(key)
            if value is None or value == "" or value == []:
                err("params.%s is required for framework verl (%s)" % (key, what))
    if errors:
        raise ExperimentError(errors.lines())
    if exp.project is None:
        exp.project = exp.param("trainer.project_name") if exp.conventions == "verl" and isinstance(
            exp.param("trainer.project_name"), str) else DEFAULT_PROJECT
    return exp


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
            err("%s: contains a NUL character (\\0), which no command line, environment variable or path can carry"
                % (where or "value"))
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
            sub = ("%s[%d]" % (where, key)) if isinstance(value, list) else ("%s.%s" % (where, key) if where else str(key))
            _check_nul(item, sub, err, seen)


def _check_entrypoint(exp, err):
    ep = exp.entrypoint
    if exp.framework == "nemo_rl":
        repo = ep.get("repo_dir")
        if exp.raw.get("code") is not None:
            if repo is not None:
                err("entrypoint.repo_dir: with code, the job runs in the code's checkout; drop repo_dir (code.path names "
                    "a subdirectory)")
        elif not repo:
            err("entrypoint.repo_dir is required for framework nemo_rl (the NeMo RL checkout on the cluster, "
                "e.g. /data/code/RL)")
    elif exp.framework == "custom":
        if ep.get("command") is None:
            err("entrypoint.command is required for framework custom (the shell command that starts the driver)")


def _check_prefetch(section, env, err):
    """The prefetch section, normalized, with the cache the job reads: its HF_HOME (and HF_HUB_CACHE)."""
    items, hf_home = HFP.normalize(section, err)
    if not items:
        return None
    job_home = env.get("HF_HOME")
    if hf_home and job_home and os.path.normpath(hf_home) != os.path.normpath(job_home):
        err("prefetch.hf_home: %s differs from env.HF_HOME %s, so the job would not find the files; set only one"
            % (_fmt(hf_home), _fmt(job_home)))
        return None
    if hf_home and not job_home:
        env["HF_HOME"] = hf_home  # the job reads the cache the files went to
    hf_home = hf_home or job_home
    if not hf_home or not hf_home.startswith("/"):
        err("prefetch: the files need a home on the shared volume that the job reads: set env.HF_HOME (an absolute path, "
            "e.g. /data/hf_home) or prefetch.hf_home")
        return None
    hub_cache = env.get("HF_HUB_CACHE") or None
    if hub_cache is not None and not hub_cache.startswith("/"):
        err("env.HF_HUB_CACHE: expected an absolute path for prefetch, got %s" % _fmt(hub_cache))
        return None
    return dict(HFP.sections(items), hf_home=hf_home, hub_cache=hub_cache)


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
    if os.path.isdir(path):
        return
    if os.path.exists(path):
        err("working_dir: %s is not a directory (resolved to %s)" % (_fmt(exp.working_dir), path))
    elif os.path.lexists(path):
        err("working_dir: %s is a symbolic link that leads nowhere (a loop or a missing target; resolved to %s)"
            % (_fmt(exp.working_dir), path))
    else:
        err("working_dir: %s does not exist (resolved to %s, relative to the experiments directory)"
            % (_fmt(exp.working_dir), path))


def merge_params(base, extra):
    """``extra`` pairs replace same-key pairs of ``base`` in place; new keys go at the end."""
    merged = list(base)
    index = {}
    for i, (k, dummy) in enumerate(merged):
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
        err("project %s and params.trainer.project_name %s disagree; set only project" % (_fmt(exp.project), _fmt(project)))
    elif project is not None and not (isinstance(project, str) and NAME_RE.match(project)):
        err("params.trainer.project_name: %s is not a valid project name (letters, digits, '_', '-', '.')" % _fmt(project))
    ckpt = exp.param("trainer.default_local_dir")
    if ckpt is not None and not (isinstance(ckpt, str) and ckpt.startswith("/")):
        err("params.trainer.default_local_dir: %s must be an absolute path on the shared volume "
            "(leave it out to use <checkpoint root>/<project>/<experiment>)" % _fmt(ckpt))
    for key in SHAPE_KEYS["verl"]:
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
    if len(sid) > MAX_SUBMISSION_ID:
        raise ExperimentError("submission id %s is %d characters, more than %d; shorten the experiment name, the "
                              "cluster name or the run suffix" % (_fmt(sid), len(sid), MAX_SUBMISSION_ID))
    return sid


def check_job_size(label, rendered):
    """The rendered entrypoint and each environment variable fit in one Linux argv/environment
    string (:data:`MAX_ARG_BYTES`); over it Ray would create the job and fail it at exec."""
    size = len(rendered["entrypoint"].encode("utf-8", "surrogatepass"))
    if size > MAX_ARG_BYTES:
        raise ExperimentError("%s: the rendered entrypoint is %d bytes, over the %d Linux allows for one command "
                              "line argument (Ray runs it with /bin/sh -c); move long values or many params into "
                              "a config file (entrypoint.config, or a file in working_dir)" % (label, size, MAX_ARG_BYTES))
    for name, value in ((rendered.get("runtime_env") or {}).get("env_vars") or {}).items():
        size = len(name.encode("utf-8")) + 1 + len(str(value).encode("utf-8", "surrogatepass"))
        if size > MAX_ARG_BYTES:
            raise ExperimentError("%s: environment variable %s is %d bytes, over the %d Linux allows for one "
                                  "environment string" % (label, name, size, MAX_ARG_BYTES))


def check_fits(exp, nodes, cluster, where="alive now"):
    """The experiment's settings that name a node count fit the cluster it runs on (``nodes``)."""
    min_nodes = exp.recovery.get("min_nodes")
    if min_nodes and nodes and min_nodes > len(nodes):
        raise ExperimentError(
            "%s: recovery.min_nodes is %d but Ray cluster %s has %d node(s) %s: a recovery would wait for nodes it can "
            "never get; set recovery.min_nodes to at most %d" % (
                exp.label, min_nodes, cluster, len(nodes), where, len(nodes)))


def checkpoint_dir(exp, checkpoint_root=DEFAULT_CHECKPOINT_ROOT, cluster=None):
    """``<root>/<project>/<cluster>/<experiment>``: two clusters sharing the network volume never
    write into one directory; an explicit directory in the params wins."""
    if exp.conventions == "verl" and exp.param("trainer.default_local_dir"):
        return exp.param("trainer.default_local_dir")
    if exp.conventions == "nemo_rl" and exp.param("checkpointing.checkpoint_dir"):
        return exp.param("checkpointing.checkpoint_dir")
    root = (checkpoint_root or DEFAULT_CHECKPOINT_ROOT).rstrip("/") or "/"
    return "%s/%s/%s/%s" % (root, exp.project, cluster or exp.cluster, exp.name)


# The Hydra keys of a run's shape, per convention: (nodes key, GPUs per node key).
SHAPE_KEYS = {"verl": ("trainer.nnodes", "trainer.n_gpus_per_node"),
              "nemo_rl": ("cluster.num_nodes", "cluster.gpus_per_node")}


def managed_params(exp, nodes, checkpoint_root=DEFAULT_CHECKPOINT_ROOT, cluster=None):
    """The overrides rlinfra adds (those the experiment does not set), in a fixed order."""
    nnodes, gpus = cluster_shape(nodes)
    ckpt = checkpoint_dir(exp, checkpoint_root, cluster)
    if exp.conventions == "verl":
        wanted = [("trainer.project_name", exp.project), ("trainer.experiment_name", exp.name),
                  ("trainer.default_local_dir", ckpt), ("trainer.resume_mode", "auto")]
    elif exp.conventions == "nemo_rl":
        wanted = [("checkpointing.checkpoint_dir", ckpt)]
    else:
        wanted = []
    if exp.conventions in SHAPE_KEYS:
        wanted += list(zip(SHAPE_KEYS[exp.conventions], (nnodes, gpus)))
    return [(k, v) for k, v in wanted if not exp.has_param(k)]


def code_workdir(exp, code=None, root=None):
    """Where the job runs when the experiment names ``code`` (None otherwise): the checkout's directory that the
    code_checkout module returned (``code["workdir"]``), or in a dry run the one the ref's commit will have."""
    if not exp.code:
        return None
    if code:
        return code["workdir"]
    return CC.workdir(root, exp.code, "<commit of %s>" % exp.code["ref"])


def entrypoint_head(exp, workdir=None):
    """The command before the overrides, as a shell string; ``workdir``: the code's checkout, where it runs."""
    ep = exp.entrypoint
    if workdir and exp.framework == "nemo_rl":
        ep = dict(ep, repo_dir=workdir)
    elif workdir:
        return "cd %s && %s" % (shell_quote(workdir), entrypoint_head(exp))
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


def job_template(exp, pairs, filled, workdir=None):
    """What :func:`reshape` needs to render the entrypoint again for another cluster shape: the
    command, the override pairs, and which shape keys rlinfra filled (those it may change)."""
    filled_keys = {k for k, dummy in filled}
    keys = SHAPE_KEYS.get(exp.conventions, (None, None))
    return {"head": entrypoint_head(exp, workdir), "pairs": [[k, v] for k, v in pairs], "shape_keys": list(keys),
            "filled": [k in filled_keys for k in keys]}


def reshape(template, nodes=None):
    """``(entrypoint, nnodes, gpus_per_node)`` of ``template`` on the cluster made of ``nodes``
    (None: as rendered). Only the shape keys rlinfra filled change; a shape the experiment set
    itself is kept."""
    pairs = [list(p) for p in template["pairs"]]
    if nodes is not None:
        for key, filled, value in zip(template["shape_keys"], template["filled"], cluster_shape(nodes)):
            for pair in pairs:
                if filled and pair[0] == key:
                    pair[1] = value
    values = dict((k, v) for k, v in pairs)
    keys = template["shape_keys"]
    overrides = [hydra_override(k, v) for k, v in pairs]
    entrypoint = " ".join([template["head"]] + [shell_quote(o) for o in overrides])
    return entrypoint, values.get(keys[0]) if keys[0] else None, values.get(keys[1]) if keys[1] else None


def render(exp, nodes, cluster=None, run=None, checkpoint_root=DEFAULT_CHECKPOINT_ROOT, venv=None,
           secret_names_present=(), checkpoint_cluster=None, secrets_dir=None, code=None, code_root=None):
    """Everything the Ray job needs, except secret values and the working_dir package URI.

    ``nodes`` is the list of alive nodes (``ray_cluster_info``'s ``nodes``, or the same shape
    built from the inventory for a dry run). Returns a dict with ``submission_id``, ``entrypoint``,
    ``overrides`` (argv items as Hydra gets them), ``filled`` (the overrides rlinfra added),
    ``runtime_env`` (no secrets), ``runtime_env_display`` (secrets as ********), ``metadata``,
    ``resources``, ``checkpoint_dir``, ``nnodes``, ``gpus_per_node``, and ``secrets_file`` /
    ``secrets_dir`` (None without secrets, or without ``secrets_dir``: names only): see :func:`_route_secrets`;
    and ``code`` (repo, ref, commit, workdir; None when the experiment names no code). The ``code`` argument is
    the code_checkout module's result (``commit``, ``workdir``); None in a dry run.
    """
    cluster = cluster or exp.cluster
    ckpt_cluster = checkpoint_cluster or cluster
    sid = submission_id(exp.name, cluster, run)
    filled = managed_params(exp, nodes, checkpoint_root, ckpt_cluster)
    pairs = list(exp.params) + filled
    overrides = [hydra_override(k, v) for k, v in pairs]
    workdir = code_workdir(exp, code, code_root)
    template = job_template(exp, pairs, filled, workdir)
    present = [n for n in list(exp.secrets) + list(exp.optional_secrets) if n in secret_names_present]
    # Where the cluster's run files live, secrets or not: a submit removes the files that ended runs left there.
    secrets_run_dir = "%s/%s" % (secrets_dir.rstrip("/"), cluster) if secrets_dir else None
    secrets_dir = secrets_dir.rstrip("/") if present and secrets_dir else None
    if secrets_dir:
        template["head"] = SF.ENTRYPOINT_PREFIX + template["head"]
    entrypoint = reshape(template)[0]

    env_vars = dict(DEFAULT_ENV)
    env_vars.update(exp.env)
    if venv and "PATH" not in env_vars:
        # Ray expands ${PATH} in env_vars: the driver's `python3` is the cluster's venv.
        env_vars["PATH"] = venv.rstrip("/") + "/bin:${PATH}"
    runtime_env = {"env_vars": env_vars}
    secrets_file = _route_secrets(runtime_env, secrets_dir, cluster, sid) if secrets_dir else None
    display_env = dict(env_vars)
    for name in present:
        display_env[name] = MASK
    display = dict(runtime_env, env_vars=display_env)
    if exp.working_dir:
        display["working_dir"] = exp.working_dir_path

    shape = dict(pairs)
    if exp.conventions in SHAPE_KEYS:
        nnodes, gpus = (shape.get(k) for k in SHAPE_KEYS[exp.conventions])
    else:
        nnodes, gpus = cluster_shape(nodes)
    ckpt = checkpoint_dir(exp, checkpoint_root, ckpt_cluster)
    metadata = {"rlinfra_experiment": exp.name, "rlinfra_cluster": cluster, "rlinfra_project": exp.project,
                "rlinfra_framework": exp.framework, "rlinfra_run": str(run or ""),
                "rlinfra_checkpoint_dir": ckpt, "rlinfra_attempt": "1", "rlinfra_nodes": str(len(nodes or []))}
    code_out = None
    if exp.code:
        commit = code["commit"] if code else None
        code_out = {"repo": exp.code["repo"], "ref": exp.code["ref"], "commit": commit, "workdir": workdir}
        metadata["rlinfra_code"] = "%s@%s" % (exp.code["repo"], commit or "<commit of %s>" % exp.code["ref"])
    return dict(
        submission_id=sid, cluster=cluster, entrypoint=entrypoint, overrides=overrides,
        filled=[hydra_override(k, v) for k, v in filled], runtime_env=runtime_env, runtime_env_display=display,
        metadata=metadata, resources=copy.deepcopy(exp.resources), checkpoint_dir=ckpt,
        nnodes=nnodes, gpus_per_node=gpus, project=exp.project, job_template=template,
        secrets_file=secrets_file, secrets_dir=secrets_dir, secrets_run_dir=secrets_run_dir, code=code_out)


def _route_secrets(runtime_env, secrets_dir, cluster, sid):
    """Secret values never enter the runtime_env: Ray puts env_vars in the argv of its worker-setup
    process on every node. Only the path of the run's secrets file does; the entrypoint's shell
    sources the file for the driver and Ray's setup hook (found on PYTHONPATH, on the shared volume
    next to the files) loads it in every worker. Returns the file's path."""
    env_vars = runtime_env["env_vars"]
    path = SF.file_path(secrets_dir, cluster, sid)
    env_vars[SF.FILE_VAR] = path
    # The experiment's own PYTHONPATH stays, after the hook's directory; no trailing ':' (it would
    # put the worker's current directory on sys.path).
    env_vars["PYTHONPATH"] = secrets_dir + (":" + env_vars["PYTHONPATH"] if env_vars.get("PYTHONPATH") else "")
    runtime_env["worker_process_setup_hook"] = SF.HOOK
    return path


def mask_secrets(text, values, mask=MASK):
    """Replace every occurrence of each secret value in ``text`` (longest first)."""
    if not text:
        return text
    for value in sorted({v for v in values if v}, key=len, reverse=True):
        text = text.replace(value, mask)
    return text
