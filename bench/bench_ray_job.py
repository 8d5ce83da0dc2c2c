#!/usr/bin/env python3
"""Benchmark: submit + wait for a trivial Ray job, the collection's client vs the ``ray job`` CLI.

Starts one Ray head on 127.0.0.1 with token auth (the same helper as the unit tests' ``ray_head``
fixture), then runs ``--rounds`` rounds, alternating the two ways so that load drift hits both:

* ``module``: a fresh ``python`` process that imports ``plugins/module_utils/ray/client.py`` (what
  ``rlinfra.verl.ray_job`` runs), submits ``echo hi`` and polls every ``--poll`` seconds until it ends;
* ``cli``: ``ray job submit --address URL --submission-id ID -- echo hi`` (it waits by default);
* ``playbook``: what a user waits for - ``ansible-playbook`` with one ``rlinfra.verl.ray_job`` task
  (``state: finished``, the module's default poll_interval) on localhost with the Python that runs Ansible (as
  implicit localhost has it), a whole process like ``cli``: the action runs the code in its own process
  (``runtime: local``);
* ``playbook-script``: the same with another path to that Python as the interpreter, so the code runs as a plain
  script through the connection (``runtime: script``), as it does on a remote head;
* ``floor`` (reference, no Ray job): the same ``ansible-playbook`` command with one ``ansible.builtin.debug``
  task (no module, no process on the target), i.e. what ansible-playbook itself costs with one task.

Both read the token from RAY_AUTH_TOKEN_PATH (never from argv). Each round's job must SUCCEED.
``ray-side`` is Ray's own start-to-end time of the job (the same work for both), so
``overhead`` = wall time - ray-side is what each client adds; ``client CPU`` is the user+sys time
of the client process itself (steadier than wall time on a shared machine).

Prints a table and rewrites the ``<!-- bench:ray_job -->`` section of docs/BENCHMARKS.md.
Run from the repository root:  .venv/bin/python bench/bench_ray_job.py [--rounds 5] [--no-write]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "collections"))
sys.path.insert(0, str(ROOT / "tests" / "unit"))

from conftest import kill_session, start_ray_head  # noqa: E402  (the unit tests' head helper)

BENCH_MD = ROOT / "docs" / "BENCHMARKS.md"
MODULE_CODE = r"""
import sys
sys.path.insert(0, sys.argv[1])
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.client import RayClient, resolve_token
client = RayClient(sys.argv[2], token=resolve_token())
client.submit_job(sys.argv[3], "echo hi")
job, timed_out = client.wait_for_job(sys.argv[3], timeout=300, poll_interval=float(sys.argv[4]))
sys.exit(0 if job["status"] == "SUCCEEDED" and not timed_out else 1)
"""


PLAYBOOK = """- hosts: localhost
  gather_facts: false
  tasks:
    - name: Run echo hi as a Ray job and wait for it
      rlinfra.verl.ray_job:
        address: "{{ bench_address }}"
        auth_token_path: "{{ bench_token_path }}"
        submission_id: "{{ bench_sid }}"
        entrypoint: echo hi
        state: finished
      register: run
      failed_when: run.status | default('') != 'SUCCEEDED' or run.runtime | default('') != bench_runtime
"""
FLOOR_PLAYBOOK = """- hosts: localhost
  gather_facts: false
  tasks:
    - name: Nothing but ansible-playbook's own start, one task and its end
      ansible.builtin.debug:
        msg: hi
"""
METHODS = ("module", "cli", "playbook", "playbook-script")
RUNTIME = {"playbook": "local", "playbook-script": "script"}


def _children_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_timed(cmd, env):
    """Wall time and CPU time (user+sys) of the client process."""
    cpu0, t0 = _children_cpu(), time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    wall, cpu = time.perf_counter() - t0, _children_cpu() - cpu0
    if proc.returncode != 0:
        raise SystemExit("failed: %s\n%s" % (" ".join(cmd[:3]), (proc.stdout + proc.stderr)[-2000:]))
    return wall, cpu


def stats(values):
    return statistics.median(values), min(values), max(values)


def render(results, rounds, poll, load):
    c_med = stats(results["cli"]["wall"])[0]
    lines = [
        "Submit + wait of `echo hi` on a one-node Ray 2.60 head on 127.0.0.1 with token auth, "
        "%d rounds each, alternating (%s, %s CPUs, Python %s, %s)."
        % (rounds, platform.machine(), os.cpu_count(), platform.python_version(), datetime.date.today().isoformat()),
        "`module`: fresh `python` process, `ray_client.RayClient` submit + poll every %ss; "
        "`cli`: `ray job submit --address ... -- echo hi`; `playbook`: `ansible-playbook` running one "
        "`rlinfra.verl.ray_job` task (`state: finished`, default poll_interval) on localhost with the Python that runs "
        "Ansible, as implicit localhost has it (the code runs in the action's process, `runtime: local`); "
        "`playbook-script`: the same with another path to that Python, so the code runs as a plain script through the "
        "connection (`runtime: script`), as on a remote head. Times in seconds. Load average (1 min) at "
        "start/end: %.1f / %.1f (the machine is shared; Ray's own job time grows with load)." % ((poll,) + load),
        "",
        "| method | median | min | max | median ray-side job time | median overhead | median client CPU |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name in METHODS:
        wall, ray_side = results[name]["wall"], results[name]["ray"]
        med, lo, hi = stats(wall)
        overhead = statistics.median(w - r for w, r in zip(wall, ray_side))
        lines.append(
            "| %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |"
            % (name, med, lo, hi, statistics.median(ray_side), overhead, statistics.median(results[name]["cpu"]))
        )
    c_cpu = statistics.median(results["cli"]["cpu"])
    lines.append("")
    for name, what in (
        ("playbook", "what a user waits for"),
        ("playbook-script", "the same, code as a script"),
        ("module", "the client inside one Python process"),
    ):
        med, cpu = stats(results[name]["wall"])[0], statistics.median(results[name]["cpu"])
        lines.append(
            "Ratio %s/CLI (medians, %s): **%.2f** wall, **%.2f** client CPU  " % (name, what, med / c_med, cpu / c_cpu)
        )
    floor = statistics.median(results["floor"]["wall"])
    beyond = [
        "%s %.2f s"
        % (name, statistics.median(w - floor - r for w, r in zip(results[name]["wall"], results[name]["ray"])))
        for name in ("playbook", "playbook-script")
    ]
    lines.append(
        "Floor: the same `ansible-playbook` command with one `ansible.builtin.debug` task (no module, no process "
        "on the target) takes %.2f s (median). Beyond that floor and Ray's own job time, the ray_job task costs "
        "(medians): %s - the submit, the polls, seeing the end, and for the script its Python's start."
        % (floor, ", ".join(beyond))
    )
    return "\n".join(lines)


def write_section(body):
    start, end = "<!-- bench:ray_job -->", "<!-- /bench:ray_job -->"
    section = "%s\n## rlinfra.verl.ray_job: submit + wait\n\n%s\n%s" % (start, body, end)
    text = BENCH_MD.read_text() if BENCH_MD.exists() else "# Benchmarks\n"
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.DOTALL)
    if pattern.search(text):
        text = pattern.sub(lambda m: section, text)
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    BENCH_MD.write_text(text)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--poll", type=float, default=0.25, help="module poll interval, seconds")
    parser.add_argument("--no-write", action="store_true", help="do not rewrite docs/BENCHMARKS.md")
    args = parser.parse_args()

    print("starting a Ray head on 127.0.0.1 ...", flush=True)
    load_start = os.getloadavg()[0]
    head, sid, base = start_ray_head()
    try:
        env = head.env()
        client = head.client()
        ray_cli = str(Path(sys.executable).with_name("ray"))
        results = {name: {"wall": [], "ray": [], "cpu": []} for name in METHODS}
        play = Path(base) / "bench_ray_job.yml"
        play.write_text(PLAYBOOK)
        floor_play = Path(base) / "bench_floor.yml"
        floor_play.write_text(FLOOR_PLAYBOOK)
        results["floor"] = {"wall": [], "ray": [], "cpu": []}
        play_env = dict(
            env,
            ANSIBLE_COLLECTIONS_PATH=str(ROOT / "collections"),
            ANSIBLE_NOCOLOR="1",
            ANSIBLE_LOCALHOST_WARNING="False",
            ANSIBLE_INVENTORY_UNPARSED_WARNING="False",
        )
        # One untimed job first: the first job on a fresh head pays for starting worker processes.
        warm = "warmup-" + uuid.uuid4().hex[:6]
        client.submit_job(warm, "echo hi")
        client.wait_for_job(warm, timeout=300, poll_interval=0.5)
        for i in range(args.rounds):
            for name in METHODS if i % 2 == 0 else tuple(reversed(METHODS)):
                job_id = "bench-%s-%d-%s" % (name, i, uuid.uuid4().hex[:6])
                if name == "module":
                    cmd = [
                        sys.executable,
                        "-c",
                        MODULE_CODE,
                        str(ROOT / "collections"),
                        head.address,
                        job_id,
                        str(args.poll),
                    ]
                elif name in RUNTIME:
                    python = sys.executable if name == "playbook" else str(Path(sys.executable).with_name("python3"))
                    cmd = [
                        str(Path(sys.executable).with_name("ansible-playbook")),
                        "-i",
                        "localhost,",
                        "-c",
                        "local",
                        str(play),
                        "-e",
                        "ansible_python_interpreter=" + python,
                        "-e",
                        "bench_address=" + head.address,
                        "-e",
                        "bench_token_path=" + head.token_path,
                        "-e",
                        "bench_sid=" + job_id,
                        "-e",
                        "bench_runtime=" + RUNTIME[name],
                    ]
                else:
                    cmd = [
                        ray_cli,
                        "job",
                        "submit",
                        "--address",
                        head.address,
                        "--submission-id",
                        job_id,
                        "--",
                        "echo",
                        "hi",
                    ]
                wall, cpu = run_timed(cmd, play_env if name in RUNTIME else env)
                job = client.get_job(job_id)
                assert job["status"] == "SUCCEEDED", job
                results[name]["wall"].append(wall)
                results[name]["cpu"].append(cpu)
                results[name]["ray"].append((job["end_time"] - job["start_time"]) / 1000.0)
                print("round %d %-6s %.2fs" % (i + 1, name, wall), flush=True)
            floor_cmd = [
                str(Path(sys.executable).with_name("ansible-playbook")),
                "-i",
                "localhost,",
                "-c",
                "local",
                str(floor_play),
                "-e",
                "ansible_python_interpreter=" + sys.executable,
            ]
            wall, cpu = run_timed(floor_cmd, play_env)
            results["floor"]["wall"].append(wall)
            results["floor"]["cpu"].append(cpu)
            print("round %d %-6s %.2fs" % (i + 1, "floor", wall), flush=True)
    finally:
        kill_session(sid)
        shutil.rmtree(base, ignore_errors=True)

    table = render(results, args.rounds, args.poll, (load_start, os.getloadavg()[0]))
    print()
    print(table)
    if not args.no_write:
        write_section(table)
        print("\nwrote %s" % BENCH_MD.relative_to(ROOT))


if __name__ == "__main__":
    main()
