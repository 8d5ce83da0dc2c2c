"""The verl config preflight in container mode (rlinfra.verl.verl_config_check, module_utils/verl/image_config_check.py):
run on the head with the image's Python through ``<engine> exec -i <container> python3 -``, the overrides on stdin.

The engine here is a stand-in script acting as ``podman exec -i NAME python3 -``: it runs the script from stdin with
this test's own Python (where verl's config may or may not be installed: the checks that compose it skip without it,
as tests/unit/test_preflight.py's need it) or, to play an image without verl and hydra, with that Python isolated
(``-I -S``: no site-packages, no PYTHONPATH)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.rlinfra.verl.plugins.module_utils.ray import cluster_info
from ansible_collections.rlinfra.verl.plugins.module_utils.verl import config_check, experiment, experiment_render
from ansible_collections.rlinfra.verl.plugins.module_utils.verl import image_config_check as I
from ansible_collections.rlinfra.verl.plugins.module_utils.verl import preflight as P
from ansible_collections.rlinfra.verl.plugins.modules import verl_config_check as module
from ansible_collections.rlinfra.verl.plugins.plugin_utils import node_script as N

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXPERIMENTS = os.path.join(REPO, "experiments")
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
IMAGE_ID = "0123456789ab" + "c" * 52
NAME = "rlinfra-ray-head"


def _has_verl_config():
    if config_check.verl_config_dir() is None:
        return False
    try:
        import hydra  # noqa: F401
        import omegaconf  # noqa: F401
    except ImportError:
        return False
    return True


needs_verl = pytest.mark.skipif(
    not _has_verl_config(),
    reason="verl's config (verl --no-deps, hydra-core) is not "
    "installed in this Python (requirements-dev.txt, requirements-nodeps.txt)",
)


def engine(tmp_path, with_verl=True):
    """A stand-in ``podman``: checks its arguments are ``exec -i <NAME> python3 -``, logs them, runs stdin."""
    path = tmp_path / ("podman" if with_verl else "podman-bare")
    flags = "" if with_verl else "-I -S "
    path.write_text(
        "#!/bin/sh\n"
        "echo \"$@\" >> '%s/argv.log'\n"
        'if [ "$1" != exec ] || [ "$2" != -i ] || [ "$4" != python3 ] || [ "$5" != - ] || [ $# -ne 5 ]; then\n'
        '  echo "stand-in: unexpected arguments: $*" >&2; exit 125\nfi\n'
        'if [ "$3" != %s ]; then\n'
        '  echo "Error: no container with name or ID \\"$3\\" found: no such container" >&2; exit 125\nfi\n'
        "exec '%s' %s-\n" % (tmp_path, NAME, sys.executable, flags)
    )
    path.chmod(0o755)
    return str(path)


def overrides(name="gsm8k_ppo_qwen05b", **extra):
    exp = experiment.load_experiment(name, EXPERIMENTS, extra_params=extra or None)
    nodes = [{"node_ip": "10.0.0.%d" % i, "is_head": i == 0, "resources": {"CPU": 96, "GPU": 8}} for i in range(4)]
    return experiment_render.render(exp, nodes)["overrides"]


def run(tmp_path, items, with_verl=True, container=NAME):
    return I.run_in_image(engine(tmp_path, with_verl), container, IMAGE_ID, "head-1", items, "ppo_trainer", 120)


# --- in the image --------------------------------------------------------------------------------------------------


@needs_verl
def test_the_image_composes_and_its_line_names_the_image_and_head(tmp_path):
    items = overrides()
    result = run(tmp_path, items)
    assert result["status"] == "passed", result["message"]
    assert result["message"].startswith(
        "verl config check passed: %d override(s) compose with verl 0.9.1's ppo_trainer" % len(items)
    )
    assert result["message"].endswith(" - verl 0.9.1 config in image 0123456789ab on head-1")
    assert result["python"] == sys.executable and result["name"] == "verl_config"
    # The overrides went on stdin: the engine's arguments are the command alone.
    assert (tmp_path / "argv.log").read_text() == "exec -i %s python3 -\n" % NAME


@needs_verl
def test_a_misspelt_key_fails_in_the_image_as_on_the_controller(tmp_path):
    items = overrides(trainer={"nnodez": 2})
    here = P.check_verl_config(items)
    there = run(tmp_path, items)
    assert there["status"] == here["status"] == "failed"
    assert there["message"] == here["message"] + " - verl 0.9.1 config in image 0123456789ab on head-1"
    assert "Did you mean 'trainer.nnodes'?" in there["message"] and "\n" not in there["message"]


def test_an_image_without_verl_or_hydra_is_skipped_and_fails_when_required(tmp_path):
    result = run(tmp_path, ["trainer.nnodes=1"], with_verl=False)
    assert result["status"] == "skipped"
    assert result["message"].startswith(
        "the image has no verl/hydra (verl is not installed, for %s in image "
        "0123456789ab on head-1): verl config check skipped; " % sys.executable
    )
    assert "verl_job_verl_config_check=skip" in result["message"]
    assert P.apply_mode(result, "auto")["status"] == "skipped"
    required = P.apply_mode(result, "required")
    assert required["status"] == "failed" and required["message"] == result["message"]


def test_hydra_missing_in_the_image_is_said(tmp_path):
    """verl found, hydra not: a stand-in verl package whose config folder exists, in an isolated Python."""
    fake = tmp_path / "site" / "verl"
    (fake / "trainer" / "config").mkdir(parents=True)
    (fake / "__init__.py").write_text("raise SystemExit('verl must never be imported')\n")
    text = I.image_script(["trainer.nnodes=1"], "ppo_trainer", "image 0123456789ab on head-1")
    # -S: no site-packages (no hydra); the stand-in verl through PYTHONPATH alone.
    proc = subprocess.run(
        [sys.executable, "-S", "-"],
        input=text,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(tmp_path / "site"), "PATH": os.environ.get("PATH", "")},
    )
    result = I.answer(proc.returncode, proc.stdout, proc.stderr, "image 0123456789ab on head-1", ["podman"])
    assert result["status"] == "skipped", result
    assert result["message"].startswith("the image has no verl/hydra (No module named 'hydra', for ")


def test_a_container_that_is_not_running_is_one_failed_line(tmp_path):
    result = run(tmp_path, ["trainer.nnodes=1"], container="rlinfra-ray-gone")
    assert result["status"] == "failed"
    assert result["message"] == (
        "verl config check could not run in image 0123456789ab on head-1: %s exec -i rlinfra-ray-gone python3 - exited "
        '125: Error: no container with name or ID "rlinfra-ray-gone" found: no such container' % engine(tmp_path)
    )


def test_no_engine_no_answer_and_a_timeout_are_failed_lines(tmp_path):
    missing = I.run_in_image(str(tmp_path / "no-podman"), NAME, IMAGE_ID, "head-1", [], "ppo_trainer", 10)
    assert missing["status"] == "failed" and "No such file or directory" in missing["message"]
    garbage = I.answer(0, "Python 2.7\n%s{half" % config_check.MARK, "", "image x on h", ["podman", "exec"])
    assert garbage["status"] == "failed" and garbage["message"].endswith("exited 0: %s{half" % config_check.MARK)

    def slow(*a, **kw):
        raise subprocess.TimeoutExpired(a[0], 5)

    late = I.run_in_image("/usr/bin/podman", NAME, IMAGE_ID, "head-1", [], "ppo_trainer", 5, run=slow)
    assert late["message"] == (
        "verl config check in image 0123456789ab on head-1 did not finish within 5s "
        "(/usr/bin/podman exec -i rlinfra-ray-head python3 -)"
    )


def test_the_overrides_travel_inside_the_script_never_as_arguments():
    secretish = "data.train_files=/d/$(rm -rf /)'\"x.parquet"
    text = I.image_script([secretish], "ppo_trainer", "image a on b")
    assert I.command("/usr/bin/podman", NAME) == ["/usr/bin/podman", "exec", "-i", NAME, "python3", "-"]
    compile(text, "<image>", "exec")  # one valid program, the value inside a JSON literal
    assert repr(json.dumps(dict(overrides=[secretish], config_name="ppo_trainer", where="image a on b"))) in text


# --- the module and the plain-script route ---------------------------------------------------------------------------


def test_the_module_runs_it(tmp_path, module_runner):
    res = module_runner(
        module.main,
        dict(
            engine_path=engine(tmp_path, with_verl=False),
            container=NAME,
            image_id=IMAGE_ID,
            node="head-1",
            overrides=["trainer.nnodes=1"],
        ),
    )
    assert res["changed"] is False and "failed" not in res
    assert res["check"]["status"] == "skipped" and res["line"] == "skipped: " + res["check"]["message"]
    bad = module_runner(module.main, dict(engine_path="podman", container="-x", image_id="abc"))
    assert bad["failed"] is True
    assert bad["msg"].splitlines() == [
        "engine_path must be an absolute path (starting with /), got 'podman'",
        "container must be a name of letters, digits, _ . - (starting with a letter or digit, at most 80), got '-x'",
        "image_id must be an image ID (64 hex characters), got 'abc'",
    ]


def test_the_plain_script_route_reads_the_check_from_memory(tmp_path):
    """On the head the function runs as node_script's plain script: config_check's source comes from its loader."""
    args = dict(
        engine_path=engine(tmp_path, with_verl=False),
        container=NAME,
        image_id=IMAGE_ID,
        node="head-1",
        overrides=["trainer.nnodes=1"],
        config_name="ppo_trainer",
        timeout=60,
    )
    text = N.script("verl.image_config_check", "check", args)
    proc = subprocess.run(
        [sys.executable, "-I", "-c", N.RUN_STDIN],
        input=text,
        capture_output=True,
        text=True,
        cwd=str(tmp_path),
        timeout=120,
    )
    kind, value = N.outcome(proc.returncode, proc.stdout, proc.stderr)
    assert kind == "result", (value, proc.stderr[-2000:])
    assert value["check"]["status"] == "skipped"
    assert value["check"]["message"].startswith("the image has no verl/hydra (verl is not installed")


# --- what the render action makes of it ------------------------------------------------------------------------------


def test_a_failed_task_is_one_failed_check_line():
    got = P.image_check({"failed": True, "msg": "engine_path must be an absolute path\nmore"}, IMAGE_ID, "head-1")
    assert got == {
        "name": "verl_config",
        "status": "failed",
        "message": "verl config check could not run in image "
        "0123456789ab on head-1: engine_path must be an absolute path more",
    }
    ok = {"check": {"name": "verl_config", "status": "passed", "message": "m", "python": "/usr/bin/python3"}}
    assert P.image_check(ok, IMAGE_ID, "h")["status"] == "passed"


def test_a_container_without_its_engine_name_or_image_is_a_line():
    assert P.container_problem({}) is None
    assert P.container_problem({"engine_path": "/usr/bin/podman", "name": NAME, "image_id": IMAGE_ID}) is None
    assert P.container_problem({"engine": "podman", "name": NAME}).startswith(
        "container names no engine_path or image_id: the verl config check cannot run in the head's image"
    )


def test_the_cluster_info_hands_on_the_heads_container_only_when_whole():
    whole = {
        "engine": "podman",
        "engine_path": "/usr/bin/podman",
        "name": NAME,
        "image": "verlai/verl:x",
        "image_id": IMAGE_ID,
    }
    assert cluster_info.container_of({"container": whole}) == whole
    assert cluster_info.container_of({"venv": "/opt/venv"}) == {}
    assert cluster_info.container_of({"container": {}}) == {}
    assert cluster_info.container_of({"container": dict(whole, image_id="")}) == {}
    assert cluster_info.container_of({"container": "podman"}) == {}


def _play(tmp_path, container, mode, interpreter):
    inv = tmp_path / "inventory.yml"
    inv.write_text(
        json.dumps(
            {
                "all": {
                    "children": {
                        "ray_head": {
                            "hosts": {
                                "localhost": {"ansible_connection": "local", "ansible_python_interpreter": interpreter}
                            }
                        }
                    }
                }
            }
        )
    )
    out = tmp_path / "result.json"
    nodes = [{"node_ip": "10.0.0.1", "is_head": True, "resources": {"CPU": 96, "GPU": 8}}]
    (tmp_path / "play.yml").write_text(
        json.dumps(
            [
                {
                    "name": "Render in container mode",
                    "hosts": "localhost",
                    "gather_facts": False,
                    "tasks": [
                        {
                            "name": "Load",
                            "rlinfra.verl.verl_experiment": {
                                "name": "gsm8k_ppo_qwen05b",
                                "experiments_dir": EXPERIMENTS,
                                "params": {"trainer": {"nnodes": 1}},
                            },
                            "register": "loaded",
                        },
                        {
                            "name": "Render",
                            "rlinfra.verl.verl_experiment_render": {
                                "loaded": "{{ loaded }}",
                                "nodes": nodes,
                                "container": container,
                                "verl_config_check": mode,
                            },
                            "register": "rendered",
                            "ignore_errors": True,
                        },
                        {
                            "name": "Save",
                            "ansible.builtin.copy": {
                                "content": "{{ rendered | to_json }}",
                                "dest": str(out),
                                "mode": "0600",
                            },
                        },
                    ],
                }
            ]
        )
    )
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_LOCAL_TEMP=str(tmp_path / "atmp"))
    proc = subprocess.run(
        [ANSIBLE_PLAYBOOK, "-i", str(inv), str(tmp_path / "play.yml")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize("route", ["local", "script"])
def test_render_takes_the_images_check_in_container_mode(tmp_path, route):
    """In the render action (as preflight.yml calls it with the head's container): the check runs through the
    engine, in this process (the local route) or as node_script's plain script with another path to Python."""
    interpreter = sys.executable
    if route == "script":
        interpreter = str(tmp_path / "python3")
        os.symlink(sys.executable, interpreter)
    container = {
        "engine": "podman",
        "engine_path": engine(tmp_path, with_verl=False),
        "name": NAME,
        "image": "verlai/verl:test",
        "image_id": IMAGE_ID,
    }
    auto = _play(tmp_path, container, "auto", interpreter)
    line = next((ln for ln in auto["preflight"]["lines"] if "verl/hydra" in ln), auto["preflight"]["lines"])
    assert line.startswith("skipped: the image has no verl/hydra (verl is not installed, for ")
    assert line.endswith("in image 0123456789ab on localhost): verl config check skipped; " + config_check.IMAGE_HINT)
    assert auto["preflight"]["ok"] is True
    required = _play(tmp_path, container, "required", interpreter)
    assert required["failed"] is True
    assert "preflight: the image has no verl/hydra (verl is not installed" in required["msg"]
    assert (tmp_path / "argv.log").read_text() == ("exec -i %s python3 -\n" % NAME) * 2
