"""plugin_utils/node_script.py: a module_utils function run on a node as a plain Python script (what converge_record's
check does on every node of every re-run), and plain_module.PlainModule, the two AnsibleModule methods it stands in
for. The scripts run in a fresh, isolated interpreter that has no collection and no Ansible on its path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.rlinfra.verl.plugins.module_utils.common.masking import masked
from ansible_collections.rlinfra.verl.plugins.module_utils.common.plain_module import PlainModule
from ansible_collections.rlinfra.verl.plugins.module_utils.ray import converge_record as R
from ansible_collections.rlinfra.verl.plugins.plugin_utils import node_script as N


def run_isolated(text, cwd):
    # -I: no PYTHONPATH, no user site, no current directory on sys.path - as on a node without the collection.
    proc = subprocess.run(
        [sys.executable, "-I", "-c", N.RUN_STDIN], input=text, capture_output=True, text=True, cwd=cwd, timeout=60
    )
    return proc.returncode, proc.stdout, proc.stderr


def write(directory, name, text):
    path = directory.joinpath(*name.split(".")).with_suffix(".py")  # a dotted name lies in a sub-package
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_the_closure_follows_every_import_form_and_refuses_ansible(tmp_path):
    pkg = N.PACKAGE
    write(
        tmp_path,
        "a",
        "from %s.b import x\nfrom %s import (\n    c,  # a comment\n    d as D,\n)\n"
        "from %s import f as F  # one name per line, two lines\nfrom %s import g as G\n"
        "from %s.sub import h, k as K  # modules of a sub-package\nfrom %s.sub.i import z\n" % ((pkg,) * 6),
    )
    write(tmp_path, "sub.h", "from %s.sub import j\n" % pkg)
    write(tmp_path, "sub.i", "z = 0\n")
    write(tmp_path, "sub.j", "\n")
    write(tmp_path, "sub.k", "\n")
    write(tmp_path, "f", "\n")
    write(tmp_path, "g", "\n")
    write(tmp_path, "b", "x = 1\n")
    write(tmp_path, "c", "def f():\n    from %s.e import y\n    return y\n" % pkg)
    write(tmp_path, "d", "import os\n")
    write(tmp_path, "e", "y = 2\n")
    write(tmp_path, "lonely", "z = 3\n")
    assert sorted(N.closure(["a"], str(tmp_path))) == [
        "a",
        "b",
        "c",
        "d",
        "e",
        "f",
        "g",
        "sub.h",
        "sub.i",
        "sub.j",
        "sub.k",
    ]
    assert N.packages(["a", "sub.h", "sub.deeper.x"]) == ["sub", "sub.deeper"]
    write(tmp_path, "e", "from ansible.module_utils.basic import AnsibleModule\n")
    N._SOURCES.clear()
    with pytest.raises(N.NeedsModule, match="e imports Ansible"):
        N.closure(["a"], str(tmp_path))
    with pytest.raises(N.NeedsModule, match="missing cannot be read"):
        N.closure(["missing"], str(tmp_path))
    N._SOURCES.clear()


def test_the_reply_is_the_marked_line_or_nothing():
    good = N.MARK + json.dumps({"reason": ""})
    assert N.reply(0, "motd noise\n" + good + "\n") == {"reason": ""}
    assert N.reply(1, good) is None  # the script failed on the node
    assert N.reply(0, "no marked line\n") is None  # e.g. a python that is not Python 3
    assert N.reply(0, N.MARK + "{half a json") is None  # cut off
    assert N.reply(0, N.MARK + "[1, 2]") is None


def test_plain_module_finds_and_runs_commands_as_ansible_module_does():
    m = PlainModule()
    assert m.get_bin_path("sh") and os.access(m.get_bin_path("sh"), os.X_OK)
    assert m.get_bin_path("rlinfra-no-such-tool") is None
    with pytest.raises(ValueError, match="rlinfra-no-such-tool not found"):
        m.get_bin_path("rlinfra-no-such-tool", required=True)
    rc, out, err = m.run_command(["sh", "-c", "echo $LC_ALL; echo oops >&2; exit 3"])
    assert (rc, out, err) == (3, "C\n", "oops\n")
    assert m.run_command(["/nonexistent/tool"])[0] == 127


def test_the_converge_check_as_a_script_gives_what_the_module_gives(tmp_path):
    """The script carries converge_record and everything it imports; in an interpreter without the collection it
    returns what the same check returns in-process (the module's code path), converged or naming the drift."""
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "ray.env").write_text("A=1\n")
    facts_dir = tmp_path / "facts"
    facts_dir.mkdir()
    (facts_dir / "rlinfra_ray.fact").write_text(json.dumps({"role": "head"}))
    watch = {"files": [], "dirs": [str(etc)], "packages": [], "units": [], "nft_tables": []}
    module = PlainModule()
    params = dict(path=str(tmp_path / "record.json"), inputs="in1", fact_dir=str(facts_dir), local=["rlinfra_ray"])
    from ansible_collections.rlinfra.verl.plugins.module_utils.node.facts import ip_runner, node_facts

    observed = R.observe(watch, node_facts(ip_runner(module), str(facts_dir), ["rlinfra_ray"]), R.Probe(module))
    (tmp_path / "record.json").write_text(R.content("in1", watch, observed, {"ray_node_ip": "10.1.2.3"}, ["h1"]))

    code, out, err = run_isolated(N.script("ray.converge_record", "check", params), str(tmp_path))
    assert code == 0, err
    got = N.reply(code, out)
    assert got == json.loads(json.dumps(R.check(params, module)))
    assert got["reason"] == "" and got["ansible_facts"]["ray_node_ip"] == "10.1.2.3"
    assert got["ansible_facts"]["ansible_local"]["rlinfra_ray"] == {"role": "head"}
    assert got["ansible_facts"]["ansible_converge_record"]["members"] == ["h1"]

    (etc / "ray.env").write_text("A=2\n")
    got = N.reply(*run_isolated(N.script("ray.converge_record", "check", params), str(tmp_path))[:2])
    assert got["reason"] == "%s changed (content)" % (etc / "ray.env")
    assert got == json.loads(json.dumps(R.check(params, module)))
    got = N.reply(
        *run_isolated(N.script("ray.converge_record", "check", dict(params, inputs="in2")), str(tmp_path))[:2]
    )
    assert got["reason"] == "the collection or the roles' variables changed"


def test_in_this_process_the_check_gives_what_the_script_gives(tmp_path, monkeypatch):
    """On the controller itself the action runs the function in its own process: the same result as the script's,
    the task's environment set for the call only, None when the function raises (the module then runs)."""
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "ray.env").write_text("A=1\n")
    params = dict(path=str(tmp_path / "record.json"), inputs="in1", fact_dir=str(tmp_path / "facts"), local=[])
    here = N.run_here("ray.converge_record", "check", params)
    assert here == N.reply(*run_isolated(N.script("ray.converge_record", "check", params), str(tmp_path))[:2])
    assert here["reason"] == "no converge record"

    from ansible_collections.rlinfra.verl.plugins.module_utils.common import plain_module

    monkeypatch.setattr(
        plain_module.PlainModule,
        "reply",
        lambda self, result: dict(result, env=os.environ.get("RLX_ENV")),
        raising=True,
    )
    monkeypatch.setattr(R, "check", lambda args, module: {"token": os.environ.get("RLX_ENV")})
    assert N.run_here("ray.converge_record", "check", params, environ={"RLX_ENV": "from-task"}) == {
        "token": "from-task",
        "env": "from-task",
    }
    assert "RLX_ENV" not in os.environ

    def boom(args, module):
        raise KeyError("path")

    monkeypatch.setattr(R, "check", boom)
    failed = N.run_here("ray.converge_record", "check", params, environ={"RLX_ENV": "x"})
    assert failed["failed"] is True and failed["msg"].startswith(
        "check failed: KeyError: 'path' (module_utils/ray/converge_record.py"
    )
    assert "not run again as a module" in failed["msg"]
    assert "RLX_ENV" not in os.environ


def test_the_function_runs_here_only_on_this_controller_as_this_user_with_this_python():
    class Conn:
        def __init__(self, transport, become=None):
            self.transport, self.become = transport, become

    class Action:
        def __init__(self, conn):
            self._connection = conn

    assert N.runs_here(Action(Conn("local")), sys.executable)
    assert not N.runs_here(Action(Conn("local")), str(Path(sys.executable).with_name("python3")))  # another interpreter
    assert not N.runs_here(Action(Conn("local")), "python3")
    assert not N.runs_here(Action(Conn("local", become=object())), sys.executable)
    assert not N.runs_here(Action(Conn("ssh")), sys.executable)
    assert not N.runs_here(Action(Conn("community.docker.docker")), sys.executable)


def test_the_script_sets_the_task_environment(tmp_path):
    for name in ("plain_module", "masking", "secret_names"):  # plain_module and what it imports
        write(tmp_path, "common." + name, (Path(N.MODULE_UTILS) / "common" / (name + ".py")).read_text())
    write(tmp_path, "envreader", "import os\ndef read(args, module):\n    return {'v': os.environ.get('RLX_ENV')}\n")
    N._SOURCES.clear()
    text = N.script("envreader", "read", {}, str(tmp_path), environ={"RLX_ENV": "from-task"})
    N._SOURCES.clear()
    assert N.reply(*run_isolated(text, str(tmp_path))[:2]) == {"v": "from-task"}


def test_the_restart_check_as_a_script_gives_what_the_module_gives(tmp_path):
    """site.yml's check before anything changes (ray_node_state) runs the same way: without a record it foresees a
    restart only where the unit is active; with the record the module wrote, nothing; a changed input is named.
    The unit here is one systemd does not know (no systemd in the test's container either: inactive)."""
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

    from ansible_collections.rlinfra.verl.plugins.module_utils.ray import node_state
    from ansible_collections.rlinfra.verl.plugins.modules.ray_node_state import ARGUMENT_SPEC

    env_state = tmp_path / "venv-state.json"
    env_state.write_text(json.dumps({"fingerprint": "fp1", "inputs": "in1"}))
    inputs = {"ray_env": "e1", "token": "t1", "unit": {"role": "worker", "ports": [6379]}}

    def params(**options):
        raw = dict(
            path=str(tmp_path / "state.json"),
            service="rlinfra-no-such-unit.service",
            inputs=inputs,
            python_env_state=str(env_state),
        )
        raw.update(options)
        return ArgumentSpecValidator(ARGUMENT_SPEC).validate(raw).validated_parameters

    def on_node(p):
        code, out, err = run_isolated(N.script("ray.node_state", "node_state", p), str(tmp_path))
        assert code == 0, err
        return N.reply(code, out)

    first = on_node(params())
    assert first == json.loads(json.dumps(node_state.node_state(params(), PlainModule())))
    assert (first["active"], first["recorded"], first["restart"], first["reasons"]) == (
        False,
        False,
        False,
        ["no_record"],
    )
    wrote = on_node(params(state="recorded"))
    assert wrote["changed"] is True and oct((tmp_path / "state.json").stat().st_mode & 0o777) == "0o600"
    assert on_node(params())["reasons"] == []
    changed = on_node(params(inputs=dict(inputs, ray_env="e2")))
    assert changed["reasons"] == ["ray_env"] and changed["restart"] is False
    missing = on_node(params(path=str(tmp_path / "nowhere" / "state.json"), state="recorded"))
    assert missing["failed"] is True and "does not exist" in missing["msg"]


def test_the_record_written_as_a_script_is_the_one_the_check_then_finds(tmp_path):
    """state=write runs as a script too (site.yml's last step on every node it converged): it writes the record
    root-only, says recorded=false when it is already there, writes nothing in check mode, and the check that follows
    finds the node as recorded."""
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "ray.env").write_text("A=1\n")
    facts_dir = tmp_path / "facts"
    facts_dir.mkdir()
    watch = {
        "files": [str(tmp_path / "absent.service")],
        "dirs": [str(etc)],
        "packages": [],
        "units": [],
        "nft_tables": [],
    }
    path = tmp_path / "conf" / "record.json"
    params = dict(
        state="write",
        path=str(path),
        inputs="in1",
        watch=watch,
        facts={"ray_node_ip": "10.1.2.3"},
        members=["h2", "h1"],
        fact_dir=str(facts_dir),
        local=["rlinfra_ray"],
    )

    def on_node(p, check_mode=False):
        code, out, err = run_isolated(N.script("ray.converge_record", "write", p, check_mode=check_mode), str(tmp_path))
        assert code == 0, err
        return N.reply(code, out)

    assert on_node(params, check_mode=True) == {"changed": False, "recorded": True, "reason": ""}
    assert not path.exists()
    assert on_node(params) == {"changed": False, "recorded": True, "reason": ""}
    assert oct(path.stat().st_mode & 0o777) == "0o600" and json.loads(path.read_text())["members"] == ["h1", "h2"]
    assert on_node(params)["recorded"] is False
    check = dict(path=str(path), inputs="in1", fact_dir=str(facts_dir), local=["rlinfra_ray"])
    found = N.reply(*run_isolated(N.script("ray.converge_record", "check", check), str(tmp_path))[:2])
    assert found["reason"] == "" and found["ansible_facts"]["ray_node_ip"] == "10.1.2.3"
    (etc / "ray.env").write_text("A=2\n")
    assert on_node(params)["recorded"] is True


def test_an_error_in_the_function_is_the_tasks_failure_never_a_second_run(tmp_path):
    """A failure inside the function (here: a bad parameter) ends the script non-zero after it started: the function
    may have acted, so the action reports the error and never runs the module after it. A script that never reached
    the function (a Python that cannot load it) is the only case for the module."""
    code, out, err = run_isolated(N.script("ray.converge_record", "check", {"path": str(tmp_path)}), str(tmp_path))
    assert code != 0 and "KeyError" in err
    assert N.reply(code, out) is None
    assert N.outcome(code, out, err) == ("raised", "KeyError: 'fact_dir'")
    assert N.outcome(1, N.STARTED + "\n", "Killed") == (
        "raised",
        "the script stopped after the function started (exit code 1): Killed",
    )
    code, out, err = run_isolated("raise SystemExit(3)\n" + N.script("ray.converge_record", "check", {}), str(tmp_path))
    assert N.outcome(code, out, err) == ("not started", "exit code 3")
    code, out, err = run_isolated("import rlinfra_no_such_module\n", str(tmp_path))
    kind, why = N.outcome(code, out, err)
    assert kind == "not started" and "ModuleNotFoundError" in why


def test_auto_interpreter_words_are_not_paths():
    class T:
        @staticmethod
        def template(v):
            return v

    facts = {"ansible_facts": {"discovered_interpreter_python": "/usr/bin/python3.11"}}
    for word in ("auto", "auto_silent", "auto_legacy", "auto_legacy_silent"):
        assert N.interpreter(T, dict(facts, ansible_python_interpreter=word)) == "/usr/bin/python3.11"
        assert N.interpreter(T, {"ansible_python_interpreter": word}) == "python3"
    assert N.interpreter(T, dict(facts, ansible_python_interpreter="/opt/py/bin/python")) == "/opt/py/bin/python"


def test_the_result_is_masked_on_the_node_as_ansible_masks_a_module_result(tmp_path):
    """What the function reads on the node (a token) and the no_log options it was given never leave the node in its
    line; warnings and check mode pass as for a module."""
    token_file = tmp_path / "token"
    token_file.write_text("tok-SECRET-1234\n")
    for name in ("plain_module", "masking", "secret_names"):  # plain_module and what it imports
        write(tmp_path, "common." + name, (Path(N.MODULE_UTILS) / "common" / (name + ".py")).read_text())
    write(
        tmp_path,
        "reader",
        "def read(args, module):\n"
        "    token = open(args['path']).read().strip()\n"
        "    module.no_log_values.add(token)\n"
        "    module.warn('read ' + token)\n"
        "    return {'line': 'Bearer ' + token, token: [args['key'] + '!'], 'check': module.check_mode}\n",
    )
    N._SOURCES.clear()
    text = N.script(
        "reader",
        "read",
        {"path": str(token_file), "key": "api-KEY-5678"},
        str(tmp_path),
        no_log_values=["api-KEY-5678"],
        check_mode=True,
    )
    N._SOURCES.clear()
    code, out, err = run_isolated(text, str(tmp_path))
    assert code == 0, err
    assert "SECRET" not in out and "KEY" not in out
    assert N.reply(code, out) == {
        "line": "Bearer ********",
        "********": ["********!"],
        "check": True,
        "warnings": ["read ********"],
    }


def test_masking_takes_the_longest_secret_first_and_leaves_other_values():
    assert masked({"a": "xx-abc-xx", "n": 3, "b": [True, None]}, ["abc", "xx-abc", ""]) == {
        "a": "********-xx",
        "n": 3,
        "b": [True, None],
    }
    assert masked("same", []) == "same"
    assert N.leaves({"HF_TOKEN": "hf_x", "empty": "", "n": [1, None, False]}) == ["hf_x", "1"]
    assert N.leaves("z" * (N.LONGEST_SECRET + 1)) == []


def test_a_path_the_module_would_expand_on_the_node_goes_to_the_module():
    """Argument checking on the controller expands ~ there; the module expands it on the node, so it runs instead."""

    class Action:
        calls = []

        def _execute_module(self, module_name, module_args, task_vars):
            self.calls.append((module_name, module_args))
            return {"changed": False}

    action = Action()
    args = {"submission_id": "x", "auth_token_path": "~/ray-token"}
    assert N.call(action, {}, "rlinfra.verl.ray_job_poll", args) == {"changed": False, "runtime": "module"}
    assert action.calls == [("rlinfra.verl.ray_job_poll", args)]


@pytest.mark.parametrize("module_name", sorted(N.SCRIPTED))
def test_every_scripted_module_runs_without_ansible(module_name, tmp_path):
    """Each SCRIPTED function's code reaches the node without Ansible: a module_utils import of Ansible added to
    it later would quietly send every call back to the module runtime this saves."""
    utils, function = N.SCRIPTED[module_name]
    text = N.script(utils, function, {}).replace("_args = json.loads", "raise SystemExit(0)\n_args = json.loads")
    text = text.replace(
        "from %s.%s import %s\n" % (N.PACKAGE, utils, function),
        "from %s.%s import %s\nprint('RLINFRA-IMPORTED', callable(%s))\n" % (N.PACKAGE, utils, function, function),
    )
    rc, out, err = run_isolated(text, tmp_path)
    assert rc == 0 and "RLINFRA-IMPORTED True" in out, err[-2000:]


def test_the_switch_turns_the_route_off_and_a_misspelt_one_is_a_line():
    """rlinfra_node_script: false runs the module as Ansible does; a value that is not a switch changes nothing."""

    class Action:
        calls = []

        def _execute_module(self, module_name, module_args, task_vars):
            self.calls.append(module_name)
            return {"changed": False}

    action = Action()
    args = {"submission_id": "x"}
    assert N.call(action, {"rlinfra_node_script": "false"}, "rlinfra.verl.ray_job_poll", args) == {
        "changed": False,
        "runtime": "module",
    }
    assert action.calls == ["rlinfra.verl.ray_job_poll"]
    bad = N.call(action, {"rlinfra_node_script": "flase"}, "rlinfra.verl.ray_job_poll", args)
    assert bad == {
        "failed": True,
        "changed": False,
        "msg": "rlinfra_node_script must be true or false (also yes/no/1/0, any case), got 'flase'",
    }
    assert action.calls == ["rlinfra.verl.ray_job_poll"]
    assert N.wanted({}) == (True, None) and N.wanted({"rlinfra_node_script": True}) == (True, None)
    with pytest.raises(Exception, match="rlinfra_node_script must be true or false"):
        N.run(action, {"rlinfra_node_script": "2"}, "ray.node_state", "node_state", {})
