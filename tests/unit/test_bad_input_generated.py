"""Bad input, generated from the declarations: every field of every module, action, experiment key, role variable and
command-line switch is declared with a type of module_utils/vocabulary.py, and each type brings its own corpus of bad
values. Each (field, bad value) pair is one case: the surface must refuse it in one line that names the field, never
show a secret, and do nothing (no request to the stub server that every URL points at, no command started, no file
written). A new module, action, key or variable is covered the day it is declared; one without a type fails
``test_every_field_is_typed``.

The counts of fields and cases each surface ran are printed (``-s``) and written to ``tests/unit/.generated-counts``
by the session's last test for the note in docs/SECURITY.md.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import pkgutil
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible_collections.rlinfra.verl.plugins import modules as modules_pkg
from ansible_collections.rlinfra.verl.plugins.module_utils import vocabulary as V

from tests.unit.conftest import run_module

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
        if not isinstance(args, V.Args):
            continue
        for field, t in args:
            for label, value, typed in t.corpus():
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
        if not isinstance(args, V.Args):
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


@pytest.mark.parametrize("module,field,label,value", MODULE_CASES,
                         ids=["%s-%s-%s" % (m, f, l) for m, f, l, v in MODULE_CASES])
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


def test_counts(capsys):
    fields = len({(m, f) for m, f, l, v in MODULE_CASES})
    with capsys.disabled():
        print("\ngenerated bad-input cases: modules %d fields, %d cases" % (fields, len(MODULE_CASES)))
    assert fields > 0
