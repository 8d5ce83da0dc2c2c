# -*- coding: utf-8 -*-
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Run one function of the collection's module_utils on a node as a plain Python script, without Ansible's
module runtime.

A module call starts AnsiballZ: it unpacks a zip and imports ansible.module_utils.basic from it, which can keep
no bytecode - about a quarter of a CPU-second on a small node, more than a converge check's own work, paid by
every node of every re-run. The script here carries the function's module and everything it imports from
module_utils (found by reading their imports; standard library otherwise), imports them from memory and prints
the function's result as one JSON line. An action runs it through its connection (stdin, become as for a
module); any problem - code that needs Ansible's runtime, no python3, an error on the node, output that is not
the expected line - gives None, and the action runs the module instead.
"""

from __future__ import annotations

import json
import os
import re

PACKAGE = "ansible_collections.rlinfra.verl.plugins.module_utils"
MODULE_UTILS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
MARK = "RLINFRA-NODE-SCRIPT "
_FROM_MODULE = re.compile(r"^\s*from\s+%s\.(\w+)\s+import\b" % re.escape(PACKAGE), re.M)
_FROM_PACKAGE = re.compile(r"^\s*from\s+%s\s+import\s+\(?([\w\s,]+)\)?" % re.escape(PACKAGE), re.M)
_ANSIBLE = re.compile(r"^\s*(from|import)\s+ansible(\.|\s)", re.M)
_SOURCES = {}

LOADER = r'''
import importlib.abc, importlib.util, json, sys
_SOURCES = json.loads(%(sources)s)
_PACKAGES = set(%(packages)r)
class _Memory(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name in _SOURCES or name in _PACKAGES:
            return importlib.util.spec_from_loader(name, self, is_package=name in _PACKAGES)
        return None
    def create_module(self, spec):
        return None
    def exec_module(self, module):
        exec(compile(_SOURCES.get(module.__name__, ""), "<rlinfra>/" + module.__name__, "exec"), module.__dict__)
sys.meta_path.insert(0, _Memory())
from %(package)s.%(module)s import %(function)s
from %(package)s.plain_module import PlainModule
sys.stdout.write(%(mark)r + json.dumps(%(function)s(json.loads(%(args)s), PlainModule()), default=str) + "\n")
'''


class NeedsModule(Exception):
    """The code cannot run without Ansible's module runtime."""


def _source(name, directory):
    key = (directory, name)
    if key not in _SOURCES:
        try:
            with open(os.path.join(directory, name + ".py"), encoding="utf-8") as handle:
                _SOURCES[key] = handle.read()
        except OSError as e:
            raise NeedsModule("module_utils %s cannot be read: %s" % (name, e))
    return _SOURCES[key]


def closure(names, directory=MODULE_UTILS):
    """{module name: source} of ``names`` and every module_utils module they import, directly or not."""
    found, todo = {}, list(names)
    while todo:
        name = todo.pop()
        if name in found:
            continue
        text = found[name] = _source(name, directory)
        if _ANSIBLE.search(text):
            raise NeedsModule("module_utils %s imports Ansible" % name)
        todo += _FROM_MODULE.findall(text)
        for group in _FROM_PACKAGE.findall(text):
            todo += [part.split()[0] for part in group.replace("\n", " ").split(",") if part.strip()]
    return found


def script(module, function, args, directory=MODULE_UTILS):
    """The Python source that prints ``MARK + json(function(args, PlainModule()))``; raises NeedsModule."""
    sources = closure([module, "plain_module"], directory)
    packages = [PACKAGE.rsplit(".", n)[0] for n in range(PACKAGE.count(".") + 1)]
    return LOADER % dict(sources=repr(json.dumps({"%s.%s" % (PACKAGE, k): v for k, v in sources.items()})), packages=packages,
                         package=PACKAGE, module=module, function=function, mark=MARK, args=repr(json.dumps(args)))


def reply(rc, stdout):
    """The function's result from the script's exit code and output; None when it did not give one."""
    if rc != 0:
        return None
    for line in reversed((stdout or "").splitlines()):
        if line.startswith(MARK):
            try:
                value = json.loads(line[len(MARK):])
            except ValueError:
                return None
            return value if isinstance(value, dict) else None
    return None


def interpreter(templar, task_vars):
    """The node's Python as a module would use it: ansible_python_interpreter, else the one discovered earlier in
    the run, else python3 from the node's PATH."""
    given = task_vars.get("ansible_python_interpreter")
    if given:
        return str(templar.template(given))
    return (task_vars.get("ansible_facts") or {}).get("discovered_interpreter_python") or "python3"


def run(action, task_vars, module, function, args):
    """``function(args)`` of module_utils ``module`` on the action's host through its connection; None when it could
    not run that way (then run the module)."""
    connection = action._connection
    # The script goes on stdin, as a pipelined module does (whether or not the configuration pipelines modules).
    if not connection.has_pipelining or (connection.become and not connection.become.pipelining):
        return None
    try:
        text = script(module, function, args)
    except NeedsModule:
        return None
    python = interpreter(action._templar, task_vars)
    res = action._low_level_execute_command("%s -" % python, sudoable=True, in_data=text.encode())
    return reply(res.get("rc"), res.get("stdout"))
