"""Bad input, generated from the declarations: every field of every module, action, experiment key, role variable and
command-line switch is declared with a type of module_utils/common/vocabulary/, and each type has its own corpus of bad
values (tests/unit/vocabulary_corpus.py). Each (field, bad value) pair is one case: the surface must refuse it in one
line that names the field, never show a secret, and do nothing (no request to the stub server that every URL points at,
no command started, no file written). A new module, action, key or variable is covered the day it is declared; one
without a type fails ``test_every_field_is_typed``.

The counts of fields and cases each surface ran are printed (``-s``) and written to ``tests/unit/.generated-counts``
by the session's last test for the note in docs/SECURITY.md.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import json
import os
import pkgutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible_collections.rlinfra.verl.plugins import modules as modules_pkg
from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from tests.unit.conftest import run_module
from tests.unit.vocabulary_corpus import corpus

SECRET_MARKS = ("s3cr3t", "ghp_")
COUNTS = {}


class _Recorder(BaseHTTPRequestHandler):
    requests = []

    def _answer(self):
        type(self).requests.append((self.command, self.path))
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = do_PUT = do_DELETE = _answer

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def stub():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield "http://127.0.0.1:%d" % server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def fill(value, tmp, stub):
    if isinstance(value, str):
        return value.replace("{tmp}", tmp).replace("{stub}", stub)
    if isinstance(value, list):
        return [fill(v, tmp, stub) for v in value]
    if isinstance(value, dict):
        return dict((fill(k, tmp, stub), fill(v, tmp, stub)) for k, v in value.items())
    return value


def _modules():
    out = {}
    for info in pkgutil.iter_modules(modules_pkg.__path__):
        mod = importlib.import_module("%s.%s" % (modules_pkg.__name__, info.name))
        if hasattr(mod, "main"):
            out[info.name] = mod
    return out


MODULES = _modules()


def _module_cases():
    cases = []
    for name, mod in sorted(MODULES.items()):
        args = getattr(mod, "ARGS", None)
        if not isinstance(args, vocabulary.Args):
            continue
        for field, t in args:
            for label, value, typed in corpus(t):
                # Ansible converts what it can to the option's type first (its own rules): a value of the wrong
                # Python type is a case only when it must still be refused afterwards (null for a required field).
                if typed and label != "null":
                    continue
                cases.append((name, field, label, value))
    return cases


MODULE_CASES = _module_cases()


def test_every_field_is_typed():
    """Every module with a main() declares ``ARGS`` (vocabulary types), and its argument_spec is exactly that."""
    missing = []
    for name, mod in sorted(MODULES.items()):
        args = getattr(mod, "ARGS", None)
        if not isinstance(args, vocabulary.Args):
            missing.append("%s: no ARGS" % name)
        elif getattr(mod, "ARGUMENT_SPEC", None) != args.spec:
            missing.append("%s: ARGUMENT_SPEC is not ARGS.spec" % name)
    assert not missing, missing


@contextlib.contextmanager
def _no_commands():
    started = []
    real = subprocess.Popen.__init__

    def refuse(self, args, *a, **kw):
        started.append(args)
        raise OSError("the generated bad-input test started a command: %r" % (args,))

    subprocess.Popen.__init__ = refuse
    try:
        yield started
    finally:
        subprocess.Popen.__init__ = real


def _tree(path):
    out = set()
    for root, dirs, files in os.walk(path):
        out.update(os.path.join(root, n) for n in dirs + files)
    return out


@pytest.mark.parametrize(
    "module,field,label,value", MODULE_CASES, ids=["%s-%s-%s" % (m, f, l) for m, f, l, v in MODULE_CASES]
)
def test_module_refuses(module, field, label, value, stub, tmp_path):
    mod = MODULES[module]
    tmp = str(tmp_path)
    args = fill(dict(mod.ARGS.samples(), **{field: value}), tmp, stub)
    before = _tree(tmp)
    _Recorder.requests.clear()
    with _no_commands() as started:
        res = run_module(mod.main, args)
    COUNTS.setdefault("modules", set()).add((module, field))
    msg = res.get("msg", "")
    assert res.get("failed") is True, res
    assert "\n" not in msg and "Traceback" not in json.dumps(res), msg
    assert field in msg or any(a in msg for a in mod.ARGS.fields[field].aliases), msg
    assert not any(mark in json.dumps(res) for mark in SECRET_MARKS), msg
    assert not res.get("changed"), res
    assert _Recorder.requests == [] and started == [] and _tree(tmp) == before


# ------------------------------------------------------------------------------------------------------------
# Experiment keys: every key of module_utils/verl/experiment_schema.py, at every level


from ansible_collections.rlinfra.verl.plugins.module_utils.verl import (
    experiment,  # noqa: E402
    experiment_schema,  # noqa: E402
)

BASE = {"framework": "custom", "entrypoint": {"command": "python3 train.py"}}


def _keys(t, path, framework, parents=()):
    """``(path, type, framework, parents)`` of every key below ``t``; a list's item is ``[0]``; ``parents``: the
    ``(path, Section)`` pairs above it, whose required keys a case fills with good values."""
    if isinstance(t, vocabulary.Section):
        if path:
            yield path, t, framework, parents
        for key, sub in t.fields.items():
            yield from _keys(sub, "%s.%s" % (path, key) if path else key, framework, parents + ((path, t),))
    elif isinstance(t, experiment_schema._ByFramework):
        for name, section in t.sections.items():
            yield from _keys(section, path, name, parents)
    elif isinstance(t, vocabulary.ListOf):
        yield path, t, framework, parents
        yield from _keys(t.item, path + "[0]", framework, parents)
    elif isinstance(t, vocabulary.OneOf):
        yield path, t, framework, parents
        for sub in t.types:
            if isinstance(sub, vocabulary.Section):  # its keys; the other forms' values are in the OneOf's own corpus
                yield from _keys(sub, path, framework, parents)
    else:
        yield path, t, framework, parents


def _put(data, path, value):
    """``data`` with ``value`` at ``path`` (``a.b[0].c``), parents made as mappings or one-item lists."""
    parts = [p for p in path.replace("[0]", ".[0]").split(".") if p]
    node = data
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        nxt = None if last else ([] if parts[i + 1] == "[0]" else {})
        if part == "[0]":
            if not node:
                node.append(value if last else nxt)
            elif last:
                node[0] = value
            node = node[0]
        else:
            if last:
                node[part] = value
            else:
                if not isinstance(node.get(part), type(nxt)):
                    node[part] = nxt
                node = node[part]
    return data


def _experiment_cases():
    seen, cases = set(), []
    for path, t, framework, parents in _keys(experiment_schema.SCHEMA, "", "custom"):
        for label, value, _typed in corpus(t):
            if (path, framework, label) not in seen:
                seen.add((path, framework, label))
                cases.append((path, framework, label, value, parents))
    return cases


EXPERIMENT_CASES = _experiment_cases()


@pytest.mark.parametrize(
    "path,framework,label,value,parents",
    EXPERIMENT_CASES,
    ids=["%s-%s-%s" % (p, f, l) for p, f, l, v, ps in EXPERIMENT_CASES],
)
def test_experiment_key_refuses(path, framework, label, value, parents, tmp_path):
    data = copy.deepcopy(BASE)
    data["framework"] = framework
    data["entrypoint"] = {"verl": {}, "nemo_rl": {"repo_dir": "/data/code/RL"}, "custom": {"command": "x"}}[framework]
    if path == "framework":
        data["entrypoint"] = {}
    if path.startswith("prefetch") and not path.startswith("prefetch.hf_home"):
        data["env"] = {"HF_HOME": "/data/hf_home"}
    for parent, section in parents:
        for key, sample in section.sample().items():
            _put(data, "%s.%s" % (parent, key) if parent else key, copy.deepcopy(sample))
    _put(data, path, copy.deepcopy(value))
    before = _tree(str(tmp_path))
    with pytest.raises(experiment.ExperimentError) as err:
        experiment.validate("case", str(tmp_path / "case.yml"), data)
    lines = err.value.errors
    assert len(lines) == 1, lines
    line = lines[0]
    shown = path.split("[0]")[0].split(".")[-1] if "[0]" not in path else path.split("[0]")[0]
    assert line.startswith("case.yml: ") and (path.split("[0]")[0] in line or shown in line), line
    assert not any(mark in line for mark in SECRET_MARKS), line
    assert _tree(str(tmp_path)) == before


def test_every_experiment_key_has_cases():
    keys = {p for p, f, l, v, ps in EXPERIMENT_CASES}
    top = set(experiment_schema.SCHEMA.fields)
    assert top <= keys and "wait.timeout" in keys and "code.repo" in keys and "prefetch.models[0].revision" in keys
    assert "entrypoint.module" in keys and "entrypoint.repo_dir" in keys and "entrypoint.command" in keys


# ------------------------------------------------------------------------------------------------------------
# Role variables (module_utils/common/settings.py RULES) and command-line switches (module_utils/common/cli.py SWITCHES)

from ansible_collections.rlinfra.verl.plugins.module_utils.common import (
    cli,  # noqa: E402
    settings,  # noqa: E402
)

ROLE_CASES = [(name, label, value) for name, t in sorted(settings.RULES.items()) for label, value, typed in corpus(t)]
# A key with no value (ray_metrics:) is null: refused for every variable whose kind has no word for it.
ROLE_CASES += [
    (name, "null_value", None)
    for name, t in sorted(settings.RULES.items())
    if not settings.null_ok(t) and ("null", None) not in [(l, v) for l, v, typed in corpus(t)]
]


@pytest.mark.parametrize("name,label,value", ROLE_CASES, ids=["%s-%s" % (n, l) for n, l, v in ROLE_CASES])
def test_role_variable_refuses(name, label, value):
    lines = settings.check({name: value})
    assert len(lines) == 1 and lines[0].startswith(name), lines
    assert not any(mark in lines[0] for mark in SECRET_MARKS), lines


def _playbook_of(switch):
    return next(p for p, names in cli.PLAYBOOKS.items() if switch in names)


SWITCH_CASES = [(name, label, value) for name, t in sorted(cli.SWITCHES.items()) for label, value, typed in corpus(t)]


@pytest.mark.parametrize("name,label,value", SWITCH_CASES, ids=["%s-%s" % (n, l) for n, l, v in SWITCH_CASES])
def test_switch_refuses(name, label, value):
    parsed, errors = cli.check(_playbook_of(name), {name}, {name: value})
    assert len(errors) == 1 and errors[0].startswith(name + " "), errors
    assert name not in parsed


def test_every_role_variable_of_a_checked_role_has_a_type():
    """The roles whose settings are checked: each variable of their argument specs that reaches a unit, a file or a
    command on the node has a rule; the rest are listed here, each with why it needs none."""
    import glob

    import yaml

    typed_by_spec_only = {
        # Ansible's own spec types (bool/int/choices) suffice: they only choose between the role's own behaviours.
        "nfs_mount_check_ports",
        "nfs_mount_probe",
        "python_env_offline",
        "python_env_prune",
        "python_env_wheelhouse_fill",
        "ray_auth_mode",
        "ray_head_include_dashboard",
        "ray_head_wait",
        "ray_node_wait",
        "ray_worker_wait",
        "ray_restart_running_jobs",
        "ray_teardown_purge",
        "storage_lvm_fallback_plain",
        "storage_lvm_force",
        "storage_lvm_fstype",
        "storage_lvm_layout",
        "storage_lvm_stop_after",
        "ray_node_role",
        "ray_node_throttle",  # ray_worker's waves, from the filter worker_join over ray_worker_join_wave (typed)
        # Reach a module whose own ARGS type them (the generated module cases cover them there).
        "nfs_mount_fstype",
        "nfs_mount_packages",
        "python_env_fingerprint_file",
        "python_env_no_build_isolation_packages",
        "python_env_no_deps_packages",
        "ray_auth_token",
        "ray_head_idle_api_key",
        "ray_head_idle_api_url",
        "ray_node_dashboard_url",
        "ray_node_gcs_address",
        "ray_node_start_args",
        "ray_node_token",
        "ray_node_metrics_password",  # module ray_node's metrics_password (vocabulary.Secret)
        "ray_node_secret_env",
        "storage_lvm_discover_exclude",
        "storage_lvm_discover_pattern",
        "storage_lvm_fs_label",
        "storage_lvm_mkfs_options",
        "storage_lvm_packages",
    }
    missing = []
    for path in glob.glob(
        os.path.join(
            os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
            "roles",
            "*",
            "meta",
            "argument_specs.yml",
        )
    ):
        for entry in yaml.safe_load(open(path))["argument_specs"].values():
            for name in entry.get("options") or {}:
                if settings.owner(name) and name not in settings.RULES and name not in typed_by_spec_only:
                    missing.append(name)
    assert not sorted(set(missing)), sorted(set(missing))


# ------------------------------------------------------------------------------------------------------------
# Actions with arguments of their own: every case in ONE ansible-playbook run (one task per case), on localhost

from ansible_collections.rlinfra.verl.plugins import action as action_pkg  # noqa: E402


def _actions():
    out = {}
    for info in pkgutil.iter_modules(action_pkg.__path__):
        mod = importlib.import_module("%s.%s" % (action_pkg.__name__, info.name))
        args = getattr(mod, "ARGS", None)
        module = MODULES.get(info.name)
        # An action whose arguments are its module's: the module's cases cover the declaration, and
        # test_scripted_actions_refuse_on_the_controller the action's own use of it.
        if isinstance(args, vocabulary.Args) and (module is None or getattr(module, "ARGS", None) is not args):
            out[info.name] = args
    return out


def _shared():
    """Actions that take their module's arguments (the plain-script route, or work before the module)."""
    out = {}
    for info in pkgutil.iter_modules(action_pkg.__path__):
        mod = importlib.import_module("%s.%s" % (action_pkg.__name__, info.name))
        module = MODULES.get(info.name)
        if (
            module is not None
            and getattr(mod, "ARGUMENT_SPEC", None) is not None
            and getattr(mod, "ARGS", getattr(module, "ARGS", None)) is getattr(module, "ARGS", None)
        ):
            out[info.name] = module.ARGS
    return out


ACTIONS = _actions()
ACTION_CASES = [
    (name, field, label, value)
    for name, args in sorted(ACTIONS.items())
    for field, t in args
    for label, value, typed in corpus(t)
    if not typed or label == "null"
]
# The same declaration through the action: the first bad value of every field is enough to show the action checks it
# before it sends anything (the module's own cases hold every value).
ACTIONS.update(_shared())
ACTION_CASES += [
    (name, field, label, value)
    for name, args in sorted(_shared().items())
    for field, t in args
    for label, value, typed in [next((c for c in corpus(t) if not c[2]), (None, None, True))]
    if label is not None
]


def test_every_action_declares_its_arguments():
    missing = []
    for info in pkgutil.iter_modules(action_pkg.__path__):
        mod = importlib.import_module("%s.%s" % (action_pkg.__name__, info.name))
        spec = getattr(mod, "ARGUMENT_SPEC", None)
        args = getattr(mod, "ARGS", None) or getattr(MODULES.get(info.name), "ARGS", None)
        if spec is not None and not (isinstance(args, vocabulary.Args) and args.spec == spec):
            missing.append(info.name)
        if spec is None and not hasattr(mod, "ActionModule"):
            continue
    assert not missing, missing


@pytest.fixture(scope="module")
def action_results(tmp_path_factory, stub):
    tmp = str(tmp_path_factory.mktemp("actions"))
    tasks = []
    for i, (name, field, _label, value) in enumerate(ACTION_CASES):
        args = fill(dict(ACTIONS[name].samples(), **{field: value}), tmp, stub)
        tasks.append(
            {"name": "case %d" % i, "rlinfra.verl.%s" % name: args, "register": "r%d" % i, "ignore_errors": True}
        )
    out = os.path.join(tmp, "results.json")
    tasks.append(
        {
            "name": "Save",
            "ansible.builtin.copy": {
                "content": "{{ [%s] | to_json }}" % ", ".join("r%d" % i for i in range(len(ACTION_CASES))),
                "dest": out,
                "mode": "0600",
            },
        }
    )
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]
    with open(os.path.join(tmp, "play.yml"), "w") as f:
        json.dump(play, f)
    inventory = os.path.join(tmp, "inventory.yml")
    with open(inventory, "w") as f:
        json.dump(
            {
                "all": {
                    "hosts": {
                        "localhost": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
                    }
                }
            },
            f,
        )
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(root, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    before = _tree(tmp)
    _Recorder.requests.clear()
    proc = subprocess.run(
        [
            os.path.join(os.path.dirname(sys.executable), "ansible-playbook"),
            "-i",
            inventory,
            os.path.join(tmp, "play.yml"),
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with open(out) as f:
        results = json.load(f)
    written = _tree(tmp) - before - {out, os.path.join(tmp, "play.yml"), inventory}
    return results, proc.stdout + proc.stderr, list(_Recorder.requests), written


@pytest.mark.parametrize("index", range(len(ACTION_CASES)), ids=["%s-%s-%s" % (a, f, l) for a, f, l, v in ACTION_CASES])
def test_action_refuses(index, action_results):
    results, output, requests, written = action_results
    name, field, label, value = ACTION_CASES[index]
    res = results[index]
    t = ACTIONS[name].fields[field]
    msg = res.get("msg", "")
    assert res.get("failed") is True, res
    # The vocabulary's line names the field (or the variable it comes from); Ansible's own conversion line, the field.
    assert ((t.label or field) in msg or "'%s'" % field in msg) and "\n" not in msg, msg
    assert not res.get("changed"), res
    assert not any(mark in json.dumps(res) for mark in SECRET_MARKS), msg
    assert requests == [] and written == set()
    assert not any(mark in output for mark in SECRET_MARKS)


def test_counts(capsys):
    """How many fields and cases each surface ran (the numbers docs/SECURITY.md quotes)."""
    rows = [
        ("module arguments", {(m, f) for m, f, l, v in MODULE_CASES}, MODULE_CASES),
        ("action arguments", {(a, f) for a, f, l, v in ACTION_CASES}, ACTION_CASES),
        ("experiment keys", {(p, fw) for p, fw, l, v, ps in EXPERIMENT_CASES}, EXPERIMENT_CASES),
        ("role variables", {n for n, l, v in ROLE_CASES}, ROLE_CASES),
        ("command-line switches", {n for n, l, v in SWITCH_CASES}, SWITCH_CASES),
    ]
    with capsys.disabled():
        print("\ngenerated bad-input cases:")
        for name, fields, cases in rows:
            print("  %-22s %4d fields %5d cases" % (name, len(fields), len(cases)))
        print(
            "  %-22s %4d fields %5d cases" % ("total", sum(len(f) for n, f, c in rows), sum(len(c) for n, f, c in rows))
        )
    assert all(fields and cases for name, fields, cases in rows)
