"""The plain-script route, call by call: each module that plugin_utils/node_script.py runs as a plain Python script
(SCRIPTED, and converge_record's check), timed against the same module run as Ansible runs modules
(``-e rlinfra_node_script=false``), on the head of the 3-node sandbox through SSH, as site.yml and submit.yml call it.

Each side is one ``ansible-playbook`` run of the call repeated ``--calls`` times on the head; a floor run (the same
playbook with a debug task, no process on the node) is subtracted, so a figure is the call's own cost. The sides
alternate which runs first, round by round; medians. The route is kept for a call when it runs on every node of
every re-run (its time grows with the node count) or a performance goal of docs/BENCHMARKS.md needs it.

Run from the repository root with the sandbox up and converged (sandbox/sandbox.sh up; ansible-playbook site.yml):
    python bench/bench_script_route.py [--rounds 3] [--calls 5] [--no-write]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _report  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PLAYBOOK = str(Path(sys.executable).parent / "ansible-playbook")
INVENTORY = ROOT / ".sandbox" / "inventory.yml"

# (name, task, why the route is kept or not)
CALLS = [
    (
        "ray_node_state (site.yml restart check)",
        {
            "rlinfra.verl.ray_node_state": {
                "path": "/etc/ray/rlinfra-state.json",
                "service": "ray-head.service",
                "inputs": {},
                "python_env_state": "/opt/rlinfra/venv/rlinfra-state.json",
            }
        },
        "every node, every site.yml that converges",
    ),
    (
        "converge_record check (site.yml no-op)",
        {
            "rlinfra.verl.converge_record": {
                "path": "/etc/ray/rlinfra-converged.json",
                "settings": ["ray"],
                "local": ["rlinfra_ray"],
            }
        },
        "every node, every site.yml (the no-op goal)",
    ),
    (
        "fitness_node gpu=off (submit room check)",
        {
            "rlinfra.verl.fitness_node": {
                "node": "head",
                "gpu": "off",
                "volumes": [{"what": "scratch volume", "path": "/workspace/ray", "min_free_gib": 0}],
            }
        },
        "every node in fitness.yml; the head in every submit",
    ),
    (
        "ray_cluster_info (submit, status)",
        {"rlinfra.verl.ray_cluster_info": {}},
        "every submit/status (the submit goal)",
    ),
    (
        "ray_job_poll (the watch, every poll)",
        {"rlinfra.verl.ray_job_poll": {"submission_id": "rlinfra-bench-absent", "timeout": 0, "logs_tail_lines": 0}},
        "every poll of a run (5 s apart, for days)",
    ),
]
FLOOR = {"ansible.builtin.debug": {"msg": "floor"}}


def playbook(task, calls, tmp):
    path = os.path.join(
        tmp, "%s.yml" % ("floor" if task is FLOOR else "play-%d" % abs(hash(json.dumps(task, sort_keys=True))))
    )
    with open(path, "w") as f:
        json.dump(
            [
                {
                    "hosts": "ray_head",
                    "gather_facts": False,
                    "become": True,
                    "tasks": [dict(task, name="call", loop=list(range(calls)))],
                }
            ],
            f,
        )
    return path


def timed(path, script):
    env = dict(os.environ, ANSIBLE_NOCOLOR="1")
    started = time.monotonic()
    proc = subprocess.run(
        [PLAYBOOK, "-v", "-i", str(INVENTORY), path, "-e", "rlinfra_node_script=%s" % script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    took = time.monotonic() - started
    if proc.returncode != 0:
        sys.exit("bench_script_route: %s failed:\n%s" % (path, (proc.stdout + proc.stderr)[-2000:]))
    want = "runtime: script" if script == "true" else "runtime: module"
    if "floor" not in path and want not in proc.stdout:
        sys.exit("bench_script_route: %s with rlinfra_node_script=%s did not report %r" % (path, script, want))
    return took


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--no-write", action="store_true")
    opts = ap.parse_args()
    if not INVENTORY.exists():
        sys.exit(
            "bench_script_route: no sandbox (%s): run sandbox/sandbox.sh up and ansible-playbook site.yml first"
            % INVENTORY
        )
    load0 = os.getloadavg()[0]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        floor_pb = playbook(FLOOR, opts.calls, tmp)
        for name, task, why in CALLS:
            pb = playbook(task, opts.calls, tmp)
            sides = {"script": [], "module": []}
            for r in range(opts.rounds):
                floor = timed(floor_pb, "true")
                order = ("true", "false") if r % 2 == 0 else ("false", "true")
                for script in order:
                    took = timed(pb, script)
                    sides["script" if script == "true" else "module"].append(max(took - floor, 0) / opts.calls)
            script_s, module_s = statistics.median(sides["script"]), statistics.median(sides["module"])
            rows.append((name, module_s, script_s, why))
            print("%-42s module %.3f s  script %.3f s" % (name, module_s, script_s), flush=True)
    load1 = os.getloadavg()[0]
    lines = [
        "| call | module (s/call) | script (s/call) | saved per call | script/module | runs |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for name, module_s, script_s, why in rows:
        lines.append(
            "| %s | %.3f | %.3f | %.3f | %.2fx | %s |"
            % (name, module_s, script_s, module_s - script_s, script_s / module_s if module_s else 0, why)
        )
    body = "\n".join(
        [
            "## The plain-script route, call by call (3-node sandbox head, SSH)",
            "",
            "`bench/bench_script_route.py`: each call %d times on the head in one ansible-playbook run, the plain script "
            "(`rlinfra_node_script=true`, the default) against the module (`false`), sides alternating, the floor run "
            "(a debug task) subtracted; medians of %d rounds. Load average (1 min) at start/end: %.1f / %.1f on %d cores."
            % (opts.calls, opts.rounds, load0, load1, os.cpu_count() or 0),
            "",
        ]
        + lines
        + [
            "",
            "Every call kept on the route saves its figure on each node or each poll it runs for (the right column); "
            "`ray_job` and `verl_submit` are timed whole in the ray_job section (submit + wait). `rlinfra_node_script: "
            "false` turns the route off (every call then runs as a module).",
        ]
    )
    print(body)
    if not opts.no_write:
        _report.write_section("script-route", body)


if __name__ == "__main__":
    main()
