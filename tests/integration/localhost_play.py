"""Runs the collection's playbooks with localhost as the only ray_head (ansible_connection=local),
as the loopback submit and merge tests do, and reads their output."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = str(Path(sys.executable).with_name("ansible-playbook"))


def write_inventory(directory: Path, python: str = sys.executable) -> Path:
    """``<directory>/inventory.yml``: localhost alone in ray_head, on this interpreter (``python``: another path to it
    makes the collection's calls on the head run as plain scripts, as on a remote head, not in Ansible's process)."""
    inv = directory / "inventory.yml"
    inv.write_text(
        json.dumps(
            {
                "all": {
                    "children": {
                        "ray_head": {
                            "hosts": {
                                "localhost": {"ansible_connection": "local", "ansible_python_interpreter": python}
                            }
                        }
                    }
                }
            }
        )
    )
    return inv


def run_playbook(
    directory: Path,
    name: str,
    extra_vars: dict,
    *extra: str,
    env: dict | None = None,
    verbosity: str | None = "-v",
    timeout: int = 1200,
) -> subprocess.CompletedProcess:
    """``ansible-playbook`` from the repository root; ``proc.output`` is stdout + stderr. HF_TOKEN is
    removed from the environment unless ``env`` gives one (a developer's token never leaks in)."""
    args = [ANSIBLE_PLAYBOOK, "-i", str(directory / "inventory.yml"), name] + ([verbosity] if verbosity else [])
    args += ["-e", json.dumps(extra_vars)]
    for item in extra:
        args += [item] if item.startswith("--") else ["-e", item]  # a flag (--check) as it is, else extra vars
    full_env = dict(
        os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_LOCAL_TEMP=str(directory / "ansible-tmp")
    )
    full_env.pop("HF_TOKEN", None)
    full_env.update(env or {})
    proc = subprocess.run(args, cwd=REPO, env=full_env, capture_output=True, text=True, timeout=timeout, check=False)
    proc.output = proc.stdout + proc.stderr
    return proc


def flat(output: str) -> str:
    """Ansible's YAML callback folds long strings over several lines: compare with spaces normalized."""
    return " ".join(output.split())


def recap(output: str) -> dict:
    match = re.search(r"localhost\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", output)
    assert match, output[-3000:]
    return dict(zip(("ok", "changed", "unreachable", "failed"), map(int, match.groups())))


def changed_tasks(output: str) -> list[str]:
    """The tasks a playbook's text output reports as changed, ``TASK name: host, host`` (and a handler's ``RUNNING
    HANDLER``): what an idempotence assertion prints, as the output's tail rarely holds the task that changed."""
    found: list[str] = []
    task = ""
    for line in output.splitlines():
        header = re.match(r"^(TASK|RUNNING HANDLER) \[(.*)\] \*+$", line)
        if header:
            task = header.group(2)
            continue
        hit = re.match(r"^changed: \[([^\]]+)\]", line)
        if hit and task:
            entry = "TASK %s: " % task
            if found and found[-1].startswith(entry):
                found[-1] += ", " + hit.group(1)
            else:
                found.append(entry + hit.group(1))
    return found
