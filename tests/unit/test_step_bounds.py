"""No playbook waits on a node without a bound (issue 48): every play of site.yml, fitness.yml and submit.yml that
runs on the nodes bounds each of its steps with ``timeout: rlinfra_step_timeout``; a step that sets its own bound
says why; SSH ends a connection to a frozen node (ansible.cfg's keepalives). The sandbox test
(tests/integration/test_sandbox_faults.py) freezes a worker during fitness.yml and site.yml and sees it named."""

from __future__ import annotations

import configparser
import glob
import json
import os
import subprocess
import sys

import pytest
import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BOUND = "{{ rlinfra_step_timeout | default(3600) }}"
# The steps that bound themselves, and how (each is said in a comment where it runs).
SELF_BOUNDED = {
    ("roles/verl_job/tasks/run.yml", "Wait for job {{ verl_job__submitted.submission_id }}"): 0,
    (
        "roles/verl_job/tasks/main.yml",
        "Fetch the experiment's models and datasets into the shared Hugging Face cache",
    ): 0,
    (
        "roles/ray/tasks/container.yml",
        "Make the engine and the image ready (an archive loaded, or the image pulled, only when the node lacks it)",
    ): "{{ (rlinfra_step_timeout | default(3600) | int) + 3600 }}",
}


def _plays(name):
    with open(os.path.join(ROOT, "playbooks", name)) as handle:
        return yaml.safe_load(handle)


@pytest.mark.parametrize("name", ["site.yml", "fitness.yml", "submit.yml"])
def test_every_play_on_the_nodes_bounds_its_steps(name):
    plays = _plays(name)
    on_nodes = [p for p in plays if p["hosts"] != "localhost"]
    assert on_nodes
    assert [(p["name"], p.get("timeout")) for p in on_nodes] == [(p["name"], BOUND) for p in on_nodes]


def _tasks(node):
    if isinstance(node, list):
        for item in node:
            yield from _tasks(item)
    elif isinstance(node, dict):
        yield node
        for key in ("block", "rescue", "always"):
            if key in node:
                yield from _tasks(node[key])


def test_a_step_with_its_own_bound_is_one_of_the_known():
    found = {}
    for path in sorted(glob.glob(os.path.join(ROOT, "roles", "*", "tasks", "*.yml"))):
        with open(path) as handle:
            for task in _tasks(yaml.safe_load(handle) or []):
                if "timeout" in task and not any(k.endswith("wait_for_connection") for k in task):
                    found[(os.path.relpath(path, ROOT), task.get("name"))] = task["timeout"]
    # A module's own argument named timeout is inside its arguments, not a task keyword: only keywords are found here.
    assert found == SELF_BOUNDED


def test_ssh_ends_a_connection_to_a_frozen_node():
    config = configparser.ConfigParser(interpolation=None)
    config.read(os.path.join(ROOT, "ansible.cfg"))
    args = config["ssh_connection"]["ssh_args"].split()
    options = dict(args[i + 1].split("=", 1) for i, word in enumerate(args) if word == "-o")
    # The keepalives end the connection (interval x (count + 1) at worst), ssh then tries a new one, which the connect
    # timeout ends: together under the minute the playbooks promise (measured: tests/integration/test_sandbox_faults.py).
    interval, count = int(options["ServerAliveInterval"]), int(options["ServerAliveCountMax"])
    assert interval * (count + 1) + int(config["defaults"]["timeout"]) <= 55


def test_the_bound_is_inherited_by_every_task_of_the_play(tmp_path):
    """The play keyword reaches a task of an included role and ends a hung step with the task's own failure."""
    role = tmp_path / "roles" / "hangs" / "tasks"
    role.mkdir(parents=True)
    (role / "main.yml").write_text(yaml.safe_dump([{"name": "Hang", "ansible.builtin.command": "sleep 60"}]))
    (tmp_path / "play.yml").write_text(
        yaml.safe_dump(
            [
                {
                    "name": "A play on a node",
                    "hosts": "all",
                    "gather_facts": False,
                    "timeout": BOUND,
                    "tasks": [{"name": "Run the role", "ansible.builtin.include_role": {"name": "hangs"}}],
                }
            ]
        )
    )
    (tmp_path / "inventory.json").write_text(
        json.dumps(
            {
                "all": {
                    "hosts": {"node-1": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}}
                }
            }
        )
    )
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
        ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
        ANSIBLE_ROLES_PATH=str(tmp_path / "roles"),
    )
    proc = subprocess.run(
        [
            os.path.join(os.path.dirname(sys.executable), "ansible-playbook"),
            "-i",
            str(tmp_path / "inventory.json"),
            str(tmp_path / "play.yml"),
            "-e",
            "rlinfra_step_timeout=3",
        ],
        cwd=str(tmp_path),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = json.loads(proc.stdout)
    result = out["plays"][0]["tasks"][-1]["hosts"]["node-1"]
    # Ended by the bound (3 s), not by the command (60 s) nor by the test's own limit.
    assert proc.returncode != 0 and result["failed"] and result["timedout"]["period"] == 3, result
