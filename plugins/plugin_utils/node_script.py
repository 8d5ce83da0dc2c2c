# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Run one function of the collection's module_utils on a node as a plain Python script, without Ansible's
module runtime.

A module call starts AnsiballZ: it unpacks a zip and imports ansible.module_utils.basic from it, which can keep
no bytecode - about a quarter of a CPU-second on a small node, more than a converge check's own work, paid by
every node of every re-run. The script here carries the function's module and everything it imports from
module_utils (found by reading their imports; standard library otherwise), imports them from memory and prints
the function's result as one JSON line. An action runs it through its connection (stdin, become as for a
module). Only a script that never reached the function - code that needs Ansible's runtime, no such Python, code
the node's Python cannot load - gives None, and the action runs the module instead (said at -vv). Once the function
has started it may have acted (submitted a job, waited an hour): an error from then on is the task's failure, in one
line, and the module is never run after it. When the target is the controller itself
(:func:`runs_here`), the action's own process runs the function, which gives the same result without a Python to
start. Either way the task's ``environment`` applies, as it does to a module.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import re
import shlex
import sys
from collections.abc import Container, Iterable, Mapping
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary

display = Display()

PACKAGE = "ansible_collections.rlinfra.verl.plugins.module_utils"
MODULE_UTILS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
# The module every script loads besides the function's: the stand-in for AnsibleModule.
PLAIN_MODULE = "common.plain_module"
MARK = "RLINFRA-NODE-SCRIPT "
# Printed once the code is loaded, just before the function runs: past it the function may have acted (submitted a
# job, waited an hour), so the module is never run after it - a failure from then on is the task's failure.
STARTED = "RLINFRA-NODE-SCRIPT-STARTED"
RAISED = "RLINFRA-NODE-SCRIPT-RAISED "
LONGEST_SECRET = 65536
# "from <package>[.sub[.module]] import a as A, b" on one line, or in parentheses over several: the dotted part after the
# package (a module, or a package whose names are its modules or its own code's) and the names.
_FROM = re.compile(
    r"^[ \t]*from[ \t]+%s(?:\.([\w.]+))?[ \t]+import[ \t]+(?:\(([^)]*)\)|([^\n]*))" % re.escape(PACKAGE), re.M
)
_ANSIBLE = re.compile(r"^\s*(from|import)\s+ansible(\.|\s)", re.M)
_SOURCES: dict[tuple[str, str], str] = {}

# The module_utils sources given, imported from memory, and the function's import: the start of every script and program.
IMPORTER = r"""_SOURCES = json.loads(%(sources)s)
_PACKAGES = set(%(packages)r)
class _Memory:
    def find_spec(self, name, path=None, target=None):
        if name in _SOURCES or name in _PACKAGES:
            return importlib.machinery.ModuleSpec(name, self, is_package=name in _PACKAGES)
        return None
    def create_module(self, spec):
        return None
    def exec_module(self, module):
        exec(compile(_SOURCES.get(module.__name__, ""), "<rlinfra>/" + module.__name__, "exec"), module.__dict__)
    def get_source(self, name):
        return _SOURCES.get(name, "")
sys.meta_path.insert(0, _Memory())
from %(package)s.%(module)s import %(function)s
"""
LOADER = (
    r"""
import importlib.machinery, json, os, sys
os.environ.update(json.loads(%(environ)s))
"""
    + IMPORTER
    + r"""from %(package)s.common.plain_module import PlainModule
_args = json.loads(%(args)s)
_module = PlainModule(_args, json.loads(%(secrets)s), %(check_mode)r)
sys.stdout.write(%(started)r + "\n")
sys.stdout.flush()
try:
    _value = %(function)s(_args, _module)
except Exception as _exc:
    sys.stdout.write(%(raised)r + json.dumps(_module.reply({"error": "%%s: %%s" %% (type(_exc).__name__, _exc)}), default=str) + "\n")
    raise
sys.stdout.write(%(mark)r + json.dumps(_module.reply(_value), default=str) + "\n")
"""
)
# How the node's Python runs the script from stdin. Not ``python -``: Python reads a script given so one byte per
# read() (a syscall per byte of ~70 kB, ~60 ms of a ~150 ms call); this reads it whole. (The loader above is no
# importlib.abc class for the same reason: importlib.abc imports importlib.resources, pathlib and tempfile, ~40 ms.)
RUN_STDIN = 'import sys; exec(compile(sys.stdin.buffer.read(), "<rlinfra>", "exec"))'


class NeedsModule(Exception):
    """The code cannot run without Ansible's module runtime."""


def _path(name: str, directory: str) -> str:
    """The file or directory of module_utils module or sub-package ``name`` (dotted: ``ray.job_poll``), no suffix."""
    return os.path.join(directory, *name.split("."))


def _source(name: str, directory: str) -> str:
    key = (directory, name)
    if key not in _SOURCES:
        try:
            with open(_path(name, directory) + ".py", encoding="utf-8") as handle:
                _SOURCES[key] = handle.read()
        except OSError as e:
            raise NeedsModule("module_utils %s cannot be read: %s" % (name, e)) from e
    return _SOURCES[key]


def _exists(name: str, directory: str) -> bool:
    """Whether module_utils ``name`` is a module or a package (rather than a name its package's code defines)."""
    return os.path.isfile(_path(name, directory) + ".py") or os.path.isdir(_path(name, directory))


def packages(names: Iterable[str]) -> list[str]:
    """The sub-packages of module_utils that modules ``names`` (dotted: ``ray.job_poll``) lie in: ``["ray"]``."""
    return sorted(set(name.rsplit(".", n)[0] for name in names for n in range(1, name.count(".") + 1)))


def modules(sources: Mapping[str, str]) -> dict[str, str]:
    """{dotted module name from ``ansible_collections``: source} of a :func:`closure` (``x.__init__`` is package ``x``)."""
    return {
        "%s.%s" % (PACKAGE, k[: -len(".__init__")] if k.endswith(".__init__") else k): v for k, v in sources.items()
    }


def closure(names: Iterable[str], directory: str = MODULE_UTILS, lazy_ansible: Container[str] = ()) -> dict[str, str]:
    """{module name: source} of ``names`` and every module_utils module they import, directly or not; names are
    dotted below module_utils (``ray.job_poll``), their sub-packages in :func:`packages`. A package below those
    (``common.vocabulary``, a module split into files) comes as ``<package>.__init__``, its ``__init__.py``: wherever
    it or one of its modules is imported, since importing ``common.vocabulary._text`` runs it first. The sub-packages'
    own ``__init__.py`` (``common``, ``ray``: a docstring) stay behind; the loader makes them empty modules.
    ``lazy_ansible``: modules that import Ansible only inside a function their caller never reaches
    (hyperbolic.client's default opener)."""
    found, todo = {}, list(names)
    while todo:
        name = todo.pop()
        if os.path.isdir(_path(name, directory)):
            name += ".__init__"  # from <package>.common import vocabulary: the package's own code
        if name in found:
            continue
        text = found[name] = _source(name, directory)
        if name not in lazy_ansible and _ANSIBLE.search(text):
            raise NeedsModule("module_utils %s imports Ansible" % name)
        parts = name.split(".")
        todo += [".".join(parts[:n]) + ".__init__" for n in range(2, len(parts))]  # common.vocabulary.__init__
        for base, group, line in _FROM.findall(text):
            imported: str | list[str]
            imported = re.sub(r"#[^\n]*", "", group or line)
            imported = [part.split()[0] for part in imported.replace("\n", " ").split(",") if part.strip()]
            if base and not os.path.isdir(_path(base, directory)):
                todo.append(base)  # from <package>.ray.client import RayClient
            else:  # from <package>.ray import client, job_poll: modules of the package; from <package>.common.vocabulary
                # import Text: a name of the package's own code (its __init__.py)
                for part in imported:
                    module = (base + "." if base else "") + part
                    todo.append(base if base and not _exists(module, directory) else module)
    return found


def script(
    module: str,
    function: str,
    args: Mapping[str, Any],
    directory: str = MODULE_UTILS,
    no_log_values: Iterable[str] = (),
    check_mode: bool = False,
    environ: Mapping[str, str] | None = None,
) -> str:
    """The Python source that prints ``MARK + json(function(args, PlainModule(args)))``, ``no_log_values`` (and what
    the function adds to them, such as a token it read) masked, ``environ`` (the task's ``environment``) set for it;
    raises NeedsModule."""
    sources = closure([module, PLAIN_MODULE], directory)
    names = [PACKAGE.rsplit(".", n)[0] for n in range(PACKAGE.count(".") + 1)]
    names += ["%s.%s" % (PACKAGE, name) for name in packages(sources)]
    return LOADER % dict(
        sources=repr(json.dumps(modules(sources))),
        packages=names,
        package=PACKAGE,
        module=module,
        function=function,
        mark=MARK,
        started=STARTED,
        raised=RAISED,
        args=repr(json.dumps(args)),
        secrets=repr(json.dumps(sorted(set(no_log_values)))),
        check_mode=bool(check_mode),
        environ=repr(json.dumps(dict(environ or {}))),
    )


PROGRAM = (
    r"""# rlinfra.verl: %(package)s.%(module)s.%(function)s and the module_utils it imports, one file (generated by
# plugin_utils/node_script.py's program(); standard library only, no Ansible). Do not edit: the next submit replaces it.
import importlib.machinery, json, sys
"""
    + IMPORTER
    + r"""sys.exit(%(function)s(sys.argv[1:]))
"""
)


def program(
    module: str, function: str, lazy_ansible: Container[str] = (), directory: str = MODULE_UTILS
) -> tuple[str, str]:
    """(source, sha1) of a program that runs ``function(argv)`` of module_utils ``module`` on a node, as a service
    does (the run's supervisor): the same closure as :func:`script`, loaded from memory; raises NeedsModule."""
    sources = closure([module], directory, lazy_ansible=lazy_ansible)
    names = [PACKAGE.rsplit(".", n)[0] for n in range(PACKAGE.count(".") + 1)]
    names += ["%s.%s" % (PACKAGE, name) for name in packages(sources)]
    text = PROGRAM % dict(
        sources=repr(json.dumps(modules(sources), sort_keys=True)),
        packages=sorted(names),
        package=PACKAGE,
        module=module,
        function=function,
    )
    return text, hashlib.sha1(text.encode("utf-8")).hexdigest()


def run_here(
    module: str,
    function: str,
    args: Mapping[str, Any],
    no_log_values: Iterable[str] = (),
    check_mode: bool = False,
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any] | None:
    """What the script of :func:`script` would print, from this process: the function's module imported here, the
    environment set around the call; a failed result naming the exception when it raised (never the module then:
    the function may have acted)."""
    closure([module, PLAIN_MODULE])  # the same rule as for the script: code that imports Ansible gets the module
    code = importlib.import_module("%s.%s" % (PACKAGE, module))
    plain = importlib.import_module("%s.%s" % (PACKAGE, PLAIN_MODULE))
    saved = dict(os.environ)
    os.environ.update(environ or {})
    try:
        args = json.loads(json.dumps(args))
        plain_module = plain.PlainModule(args, no_log_values, check_mode)
        value = json.loads(json.dumps(plain_module.reply(getattr(code, function)(args, plain_module)), default=str))
    except Exception as exc:  # noqa: BLE001 - any error of the function is the task's (TaskTimeoutError is no Exception)
        return raised(module, function, plain_module.reply({"error": "%s: %s" % (type(exc).__name__, exc)})["error"])
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return value if isinstance(value, dict) else None


def raised(module: str, function: str, error: object) -> dict[str, Any]:
    """The task's failure when the function raised after it started: one line, never followed by the module."""
    return dict(
        failed=True,
        changed=False,
        msg="%s failed: %s (module_utils/%s.py %s(); not run again as a module, "
        "since it may have acted)" % (function, str(error)[:2000], module.replace(".", "/"), function),
    )


def outcome(rc: int | None, stdout: str | None, stderr: str | None = "") -> tuple[str, Any]:
    """(kind, value) of a script's run: ("result", the function's result), ("raised", the exception's line) when it
    raised or stopped after it started, ("not started", why) when it never reached the function (no such Python,
    code it cannot load): only then may the module run instead."""
    value = reply(rc, stdout)
    if value is not None:
        return "result", value
    lines = (stdout or "").splitlines()
    for line in reversed(lines):
        if line.startswith(RAISED):
            try:
                return "raised", str(json.loads(line[len(RAISED) :]).get("error"))
            except (ValueError, AttributeError):
                return "raised", line[len(RAISED) :]
    tail = " ".join((stderr or "").strip().splitlines()[-1:])[-300:]
    if STARTED in lines:
        return "raised", "the script stopped after the function started (exit code %s)%s" % (
            rc,
            ": " + tail if tail else "",
        )
    return "not started", "exit code %s%s" % (rc, ": " + tail if tail else "")


def reply(rc: int | None, stdout: str | None) -> dict[str, Any] | None:
    """The function's result from the script's exit code and output; None when it did not give one."""
    if rc != 0:
        return None
    for line in reversed((stdout or "").splitlines()):
        if line.startswith(MARK):
            try:
                value = json.loads(line[len(MARK) :])
            except ValueError:
                return None
            return value if isinstance(value, dict) else None
    return None


def interpreter(templar: Any, task_vars: Mapping[str, Any]) -> str:
    """The node's Python as a module would use it: ansible_python_interpreter, else the one discovered earlier in
    the run, else python3 from the node's PATH."""
    given = task_vars.get("ansible_python_interpreter")
    given = str(templar.template(given)) if given else ""
    # auto, auto_silent, auto_legacy...: discovery's words, not a path (the module's runtime resolves them).
    if given and not given.startswith("auto"):
        return given
    return (task_vars.get("ansible_facts") or {}).get("discovered_interpreter_python") or "python3"


def runs_here(action: ActionBase, python: str) -> bool:
    """Whether the target is this very process's machine, user and Python - the local connection without become, and
    the interpreter a module would use is the one running Ansible (implicit localhost's default): then the action's
    own process runs the function and no Python starts (~0.15 s of a short ray_job)."""
    connection = action._connection
    return connection.transport == "local" and not connection.become and python == sys.executable


SWITCH = "rlinfra_node_script"


def wanted(task_vars: Mapping[str, Any]) -> tuple[bool | None, str | None]:
    """(whether the plain-script route is on, the line when ``rlinfra_node_script`` is not a switch). Off, every
    SCRIPTED module runs as Ansible runs modules: the way out on a node whose Python cannot run the script, and the
    baseline bench/bench_script_route.py times the route against."""
    value = task_vars.get(SWITCH)
    if value is None:
        return True, None
    try:
        return vocabulary.Switch().check(value), None
    except vocabulary.Bad as e:
        return None, "%s must %s, got %r" % (SWITCH, e, value)


def run(
    action: ActionBase,
    task_vars: Mapping[str, Any],
    module: str,
    function: str,
    args: Mapping[str, Any],
    no_log_values: Iterable[str] = (),
) -> dict[str, Any] | None:
    """``function(args)`` of module_utils ``module`` on the action's host through its connection (or in this process,
    :func:`runs_here`), with the task's ``environment``; its result with ``runtime`` saying where it ran (``script`` or
    ``local``), None when it could not run that way (then run the module)."""
    on, line = wanted(task_vars)
    if line:
        raise AnsibleActionFail(line)
    connection = action._connection
    # The script goes on stdin, as a pipelined module does (whether or not the configuration pipelines modules).
    if not on or not connection.has_pipelining or (connection.become and not connection.become.pipelining):
        return None
    environ: dict[str, Any] = {}
    action._compute_environment_string(environ)
    environ = dict((str(k), str(v)) for k, v in environ.items())
    python = interpreter(action._templar, task_vars)
    check_mode = action._task.check_mode
    try:
        if runs_here(action, python):
            value, runtime = run_here(module, function, args, no_log_values, check_mode, environ), "local"
        else:
            text = script(module, function, args, no_log_values=no_log_values, check_mode=check_mode, environ=environ)
            res = action._low_level_execute_command(
                "%s -c %s" % (python, shlex.quote(RUN_STDIN)), sudoable=True, in_data=text.encode()
            )
            kind, value = outcome(res.get("rc"), res.get("stdout"), res.get("stderr"))
            if kind == "raised":
                value = raised(module, function, value)
            elif kind == "not started":
                display.v(
                    "rlinfra.verl: %s.%s as a plain script did not start with %s (%s); running the module"
                    % (module, function, python, value)
                )
                return None
            runtime = "script"
    except NeedsModule as exc:
        display.v("rlinfra.verl: %s.%s runs as a module: %s" % (module, function, exc))
        return None
    return None if value is None else dict(value, runtime=runtime)


def leaves(value: Any) -> list[str]:
    """The strings a no_log option's value holds (a container's every leaf), as Ansible masks them."""
    if isinstance(value, dict):
        return [x for v in value.values() for x in leaves(v)]
    if isinstance(value, (list, tuple, set)):
        return [x for v in value for x in leaves(v)]
    if value is None or value == "" or isinstance(value, bool):
        return []
    # A token or a key is short; a longer no_log value is data kept out of the output (verl_submit's inline zip),
    # which no result holds, and masking by it would double the script.
    return [str(value)] if len(str(value)) <= LONGEST_SECRET else []


# Modules whose whole work is one function of module_utils (``function(params, module)`` returns the module's
# result): their actions, and other actions that run them, take the plain script first.
SCRIPTED = {
    "rlinfra.verl.fitness_net": ("node.fitness_net", "measure"),
    "rlinfra.verl.fitness_node": ("node.fitness_node", "check"),
    "rlinfra.verl.ray_cluster_info": ("ray.cluster_info", "info"),
    "rlinfra.verl.ray_job": ("ray.job_run", "run_job"),
    "rlinfra.verl.ray_job_poll": ("ray.job_poll", "poll"),
    "rlinfra.verl.ray_metrics_info": ("observe.metrics_info", "info"),
    "rlinfra.verl.ray_node_state": ("ray.node_state", "node_state"),
    "rlinfra.verl.ray_run_supervisor": ("ray.supervisor_unit", "manage"),
    "rlinfra.verl.verl_submit": ("ray.job_submit", "submit_job"),
    "rlinfra.verl.verl_config_check": ("verl.image_config_check", "check"),
}


def expands_on_node(spec: Mapping[str, Mapping[str, Any]], module_args: Mapping[str, Any]) -> bool:
    """Whether a path option as given has a ~ or $VAR: validation expands them here, on the controller; the module
    expands them on the node, so such a call goes to the module."""
    return any(
        opt.get("type") == "path" and any(c in str(module_args.get(k) or "") for c in "~$") for k, opt in spec.items()
    )


def declared_spec(module_name: str) -> dict[str, Any]:
    """The argument spec module ``module_name`` declares (its ARGUMENT_SPEC)."""
    return importlib.import_module(
        "ansible_collections.rlinfra.verl.plugins.modules." + module_name.rsplit(".", 1)[1]
    ).ARGUMENT_SPEC


def call(
    action: ActionBase, task_vars: Mapping[str, Any], module_name: str, module_args: Mapping[str, Any]
) -> dict[str, Any]:
    """What module ``module_name`` (one of SCRIPTED) returns for ``module_args``: from its function run as a plain
    script (``runtime: script``), else from the module itself (``runtime: module``) - arguments it would refuse, a
    path it would expand on the node, a script that cannot run, or ``rlinfra_node_script: false``."""
    utils, function = SCRIPTED[module_name]
    on, line = wanted(task_vars)
    if line:
        return dict(failed=True, changed=False, msg=line)
    declared = importlib.import_module(
        "ansible_collections.rlinfra.verl.plugins.modules." + module_name.rsplit(".", 1)[1]
    )
    spec = declared.ARGUMENT_SPEC
    checked = ArgumentSpecValidator(spec).validate(dict(module_args))
    params = checked.validated_parameters
    if not checked.error_messages:
        # The vocabulary's types, as the module's main() would check them (vocabulary.enforce): refused here, before
        # anything reaches the node.
        lines = declared.ARGS.errors(params)
        if lines:
            return dict(failed=True, changed=False, msg="\n".join(lines))
    if on and not checked.error_messages and not expands_on_node(spec, module_args):
        secrets = [v for k, opt in spec.items() if opt.get("no_log") for v in leaves(params.get(k))]
        res = run(action, task_vars, utils, function, params, no_log_values=secrets)
        if res is not None:
            return res
    res = action._execute_module(module_name=module_name, module_args=module_args, task_vars=task_vars)
    return dict(res, runtime="module")


class ScriptedAction(ActionBase):
    """The action of a SCRIPTED module ``MODULE``: the rest is :func:`call`."""

    TRANSFERS_FILES = False
    MODULE = ""
    _supports_async = True

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        if self._task.async_val:
            # Ansible's async wrapper runs modules only: an async task gets the module, as without this action.
            wrap_async = not self._connection.has_native_async
            result.update(
                self._execute_module(
                    module_name=self.MODULE, module_args=self._task.args, task_vars=task_vars, wrap_async=wrap_async
                )
            )
            if not wrap_async:
                self._remove_tmp_path(self._connection._shell.tmpdir)
            return result
        result.update(call(self, task_vars, self.MODULE, self._task.args))
        return result
