#!/usr/bin/env python3
"""site.yml against the seeds' bring-up on the SSH sandbox, side by side in one run.

Each round starts two fresh sandboxes in turn (sandbox.sh down/up; the base image and the wheelhouse
are cached, so that part is not timed): on one, bench/seed_bringup.sh does what the seeds do (node by
node: venv, pip from the wheelhouse, ray start, then ray status until all joined); on the other,
site.yml converges from nothing and is re-run (the no-op figure, changed=0 asserted). The order
alternates between rounds so neither side always meets a warmer page cache.

On the last converged 3-node cluster it then times what a user waits for beyond Ray's own work:
``submit.yml -e exp=smoke`` minus the job's runtime (Ray's start_time to end_time), and status.yml.
Finally it brings up 12 nodes (one CPU and a 100 MB object store each, so they fit a 2-core machine),
converges them with the metrics stack on (site.yml's default), times the no-op re-run there, measures each node's
idle CPU with the metrics stack on and then off (``ray_metrics=false`` removes it), and leaves a 3-node sandbox
converged behind it.

``--users root,ubuntu`` runs it all once per login user: root, then a non-root user with passwordless sudo, as
Hyperbolic's machines are reached (sandbox.sh's SANDBOX_USER; the plays become root through sudo); the 12-node part
runs for the first user only. The table has one column per user.

Prints a table and rewrites the ``bench:site`` section of docs/BENCHMARKS.md. Every figure carries
the 1-minute load average taken just before it; before each timed step the bench waits (60 s at most)
until the CPUs are 85% idle, so one step's leftovers do not land on the next. Not a timed test: only idempotence is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "collections"))
from _report import write_section  # noqa: E402

from ansible_collections.rlinfra.verl.plugins.module_utils.ray.client import RayClient  # noqa: E402

PLAYBOOK = str(Path(sys.executable).parent / "ansible-playbook")
STATE = ROOT / ".sandbox/state.json"
# Twelve Ray nodes on two cores and 24 GiB: one logical CPU each (the smoke actors need one) and a
# small object store, otherwise each raylet reserves 30% of the container's view of memory.
BIG_VARS = [
    "-e",
    "ray_num_cpus=1",
    "-e",
    '{"ray_extra_args": ["--object-store-memory=100000000"]}',
    "-e",
    "ray_start_timeout=300",
]  # twelve raylets joining on two loaded cores can take over 120 s


DOCKER_CPU = Path("/sys/fs/cgroup/cpuacct/docker/cpuacct.usage")  # cgroup v1: every container's CPU, in ns


class Timed:
    def __init__(self, secs, load, out, cpu):
        self.secs, self.load, self.out, self.cpu = secs, load, out, cpu


def cpu_now():
    """(controller, nodes) CPU seconds so far: this process's children (ansible-playbook, ssh, the seed
    script) and the sandbox's containers (the nodes' modules and their idle Ray), when the cgroup is readable."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    nodes = int(DOCKER_CPU.read_text()) / 1e9 if DOCKER_CPU.exists() else float("nan")
    return usage.ru_utime + usage.ru_stime, nodes


def idle_fraction(seconds=2.0) -> float:
    def sample():
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return fields[3] + fields[4], sum(fields)  # idle + iowait, total

    idle0, total0 = sample()
    time.sleep(seconds)
    idle1, total1 = sample()
    return (idle1 - idle0) / max(1, total1 - total0)


def settle(limit=60.0) -> None:
    """Wait (at most ``limit`` s) until the CPUs are mostly idle, so that what the previous step left
    running (a torn-down sandbox's processes, page-cache writeback) does not land on the next figure."""
    deadline = time.monotonic() + limit
    while idle_fraction() < 0.85 and time.monotonic() < deadline:
        pass


def run(cmd, env=None, quiet=False) -> Timed:
    if quiet:
        settle()
    load = os.getloadavg()[0]
    cpu0, t0 = cpu_now(), time.monotonic()
    out = subprocess.run(cmd, cwd=ROOT, env=env, text=True, capture_output=True)
    took, cpu1 = time.monotonic() - t0, cpu_now()
    if out.returncode != 0:
        sys.exit(
            "bench_site: %s failed (rc=%s):\n%s\n%s"
            % (" ".join(cmd), out.returncode, out.stdout[-3000:], out.stderr[-2000:])
        )
    return Timed(took, load, out.stdout, (cpu1[0] - cpu0[0], cpu1[1] - cpu0[1]))


def changed_total(stdout: str) -> int:
    return sum(int(n) for n in re.findall(r"changed=(\d+)", stdout.split("PLAY RECAP")[-1]))


USER = {"name": "root"}  # whom the sandbox's inventory logs in as (--users), read by fresh_sandbox


def fresh_sandbox(nodes: int) -> None:
    env = dict(os.environ, SANDBOX_USER=USER["name"])
    run(["sandbox/sandbox.sh", "down"], env)
    run(["sandbox/sandbox.sh", "up", str(nodes)], env)


def container_cpu() -> dict:
    """CPU seconds so far of each sandbox node's container (cgroup v1 cpuacct), by name."""
    out = {}
    for node in json.loads(STATE.read_text())["nodes"]:
        cid = subprocess.run(
            ["docker", "inspect", "-f", "{{.Id}}", node["name"]], text=True, capture_output=True, check=True
        ).stdout.strip()
        usage = DOCKER_CPU.parent / cid / "cpuacct.usage"
        out[node["name"]] = int(usage.read_text()) / 1e9 if usage.exists() else float("nan")
    return out


def idle_cpu(seconds: float = 60.0) -> tuple:
    """(median, max) % of one core each node's container used over ``seconds`` with nothing to do."""
    time.sleep(20)  # what the last step started (a restart, Prometheus's first scrapes) settles first
    before, t0 = container_cpu(), time.monotonic()
    time.sleep(seconds)
    after, took = container_cpu(), time.monotonic() - t0
    used = [100.0 * (after[n] - before[n]) / took for n in before]
    return med(used), max(used)


def ansible_env() -> dict:
    return dict(
        os.environ, ANSIBLE_INVENTORY=str(ROOT / ".sandbox/inventory.yml"), ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1"
    )


def site(extra=(), quiet=False) -> Timed:
    return run([PLAYBOOK, "site.yml", *extra], ansible_env(), quiet)


def plan_lines(stdout: str) -> str:
    """What site.yml's plan said of each cluster (converged in full or found as last converged, and why), one line."""
    found = re.search(r"TASK \[Say which nodes were found as last converged[^\n]*\n(.*?)\n(?:TASK|PLAY) ", stdout, re.S)
    text = found.group(1) if found else ""
    return " ".join(" ".join(re.findall(r"^\s*- (.*(?:\n\s{4,}[^-\s].*)*)", text, re.M)).split()).replace("''", "'")


def noop(extra=()) -> Timed:
    t = site(extra, quiet=True)
    changed = changed_total(t.out)
    if changed:
        sys.exit("bench_site: the re-run changed %d task(s): site.yml is not idempotent\n%s" % (changed, t.out[-4000:]))
    return t


def head_client() -> RayClient:
    head = json.loads(STATE.read_text())["nodes"][0]
    token = subprocess.run(
        ["docker", "exec", head["name"], "cat", "/etc/ray/auth_token"], text=True, capture_output=True, check=True
    ).stdout.strip()
    return RayClient("http://%s:8265" % head["ip"], token=token)


def job_runtime(client: RayClient, run_id: str) -> float:
    for job in client.list_jobs():
        sid = job.get("submission_id") or ""
        if sid.startswith("rlinfra-smoke-") and sid.endswith("-" + run_id):
            if job.get("status") != "SUCCEEDED":
                sys.exit("bench_site: smoke job %s ended %s" % (sid, job.get("status")))
            return (job["end_time"] - job["start_time"]) / 1000.0
    sys.exit("bench_site: no smoke job with run %s on the head" % run_id)


def med(values):
    return statistics.median(values)


def span(values):
    return "%.1f-%.1f" % (min(values), max(values))


def loads(timed):
    return "/".join("%.1f" % t.load for t in timed)


def cpus(timed):
    """Median CPU seconds: controller + nodes."""
    return "%.1f + %.1f" % (med([t.cpu[0] for t in timed]), med([t.cpu[1] for t in timed]))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3, help="submit/status/no-op repetitions")
    parser.add_argument("--big", type=int, default=12, help="nodes for the large no-op figure (0: skip)")
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/BENCHMARKS.md alone")
    parser.add_argument("--users", default="root", help="login users, comma-separated (root,ubuntu)")
    args = parser.parse_args(argv)
    tables, summary, baseline = [], {}, None
    for i, user in enumerate(args.users.split(",")):
        USER["name"] = user
        text, figures, baseline = one_user(args, big=args.big if i == 0 else 0, baseline=baseline)
        tables.append("### Logged in as %s%s\n\n%s" % (user, "" if user == "root" else " (sudo)", text))
        summary[user] = figures
    users = list(summary)
    names = [name for name in summary[users[0]] if all(name in summary[u] for u in users)]
    head = "| figure | %s | target |" % " | ".join("as %s (s)" % u for u in users)
    lines = [head, "|---|%s---|" % ("---:|" * len(users))]
    for name in names:
        target = summary[users[0]][name][1]
        lines.append("| %s | %s | %s |" % (name, " | ".join("%.1f" % summary[u][name][0] for u in users), target))
    notes = (
        "Rounds alternate which side runs first; each side starts from a fresh sandbox (containers + sshd, "
        "cached image and wheelhouse, not timed). The seed-style script does less than site.yml (no systemd "
        "units, auth token, firewall, fingerprints or checks). %d-node runs use one Ray CPU and a 100 MB object "
        "store per node, the metrics stack on (the default). Idle CPU: each node container's CPU over 60 s with "
        "nothing to do, %% of one core. Machine: %d cores, shared by the controller and every sandbox node: CPU is "
        "what the controller's processes (ansible-playbook, ssh) and the sandbox's containers (the nodes' modules, "
        "their idle Ray) used during the step." % (args.big, os.cpu_count() or 0)
    )
    body = "\n".join(lines) + "\n\n" + "\n\n".join(tables) + "\n\n" + notes
    print(body)
    if not args.no_write:
        write_section("site", "## site.yml against the seeds' bring-up (3-node sandbox)\n\n%s" % body)


def one_user(args, big, baseline=None):
    """The whole sequence for USER: the table's text and {figure: (median, target)}. ``baseline``: the seed-style
    bring-up of an earlier user (it logs in as root whoever site.yml logs in as), not run again."""

    seed, cold, quiet = list(baseline or []), [], []
    for rnd in range(args.rounds):
        order = ("seed", "site") if rnd % 2 == 0 else ("site", "seed")
        order = order if baseline is None else ("site",)
        for side in order:
            fresh_sandbox(3)
            if side == "seed":
                seed.append(run(["bash", "bench/seed_bringup.sh", str(STATE)], quiet=True))
                print("round %d seed-style bring-up: %.1f s (load %.1f)" % (rnd + 1, seed[-1].secs, seed[-1].load))
            else:
                cold.append(site(quiet=True))
                quiet.append(noop())
                print(
                    "round %d site.yml cold %.1f s (load %.1f), no-op %.1f s (load %.1f)"
                    % (rnd + 1, cold[-1].secs, cold[-1].load, quiet[-1].secs, quiet[-1].load)
                )
    # The last side of the last round was seed when rounds is even: converge a fresh one for the rest.
    if order[-1] == "seed":
        fresh_sandbox(3)
        site()
    quiet += [noop() for _ in range(args.repeat - 1)]

    client = head_client()
    submit_over, runtimes, submits = [], [], []
    stamp = time.strftime("%H%M%S")
    for i in range(args.repeat):
        run_id = "b%s%d" % (stamp, i)
        t = run([PLAYBOOK, "submit.yml", "-e", "exp=smoke", "-e", "run=" + run_id], ansible_env(), quiet=True)
        job = job_runtime(client, run_id)
        submits.append(t)
        runtimes.append(job)
        submit_over.append(t.secs - job)
        print("submit.yml %.1f s, job %.1f s, overhead %.1f s (load %.1f)" % (t.secs, job, t.secs - job, t.load))
    status = [
        run([PLAYBOOK, "status.yml", "-e", "exp=smoke", "-e", "run=" + run_id], ansible_env(), quiet=True)
        for _ in range(args.repeat)
    ]

    big_cold = big_quiet = idle_on = idle_off = None
    if big:
        fresh_sandbox(big)
        big_cold = site(BIG_VARS, quiet=True)
        big_quiet = [noop(BIG_VARS) for _ in range(args.repeat)]
        print("%d nodes: cold %.1f s, no-op %s" % (big, big_cold.secs, [round(t.secs, 1) for t in big_quiet]))
        idle_on = idle_cpu()
        site([*BIG_VARS, "-e", "ray_metrics=false"], quiet=True)
        idle_off = idle_cpu()
        print(
            "%d nodes idle CPU per node (%% of a core, median/max): metrics on %.1f/%.1f, off %.1f/%.1f"
            % (big, *idle_on, *idle_off)
        )
        fresh_sandbox(3)
        site()

    s_seed, s_cold, s_quiet = [t.secs for t in seed], [t.secs for t in cold], [t.secs for t in quiet]
    ratio = med(s_cold) / med(s_seed)

    def row(name, timed, target, secs=None):
        secs = secs if secs is not None else [t.secs for t in timed]
        return "| %s | %.1f | %s | %d | %s | %s | %s |" % (
            name,
            med(secs),
            span(secs),
            len(secs),
            loads(timed),
            cpus(timed),
            target,
        )

    rows = [
        "| figure | median (s) | min-max (s) | runs | load (1-min, per run) | CPU s: controller + nodes | target |",
        "| --- | ---: | ---: | ---: | --- | ---: | --- |",
        row("seed-style bring-up, 3 nodes (bench/seed_bringup.sh)", seed, "baseline"),
        row("site.yml cold converge, 3 nodes", cold, "<= 0.6x baseline: **%.2fx**" % ratio),
        row("site.yml no-op re-run, 3 nodes (changed=0)", quiet, "<= 2 s"),
        row(
            "submit.yml -e exp=smoke: wall minus the job's own runtime (%.1f s wall, %.1f s job)"
            % (med([t.secs for t in submits]), med(runtimes)),
            submits,
            "<= 5 s",
            submit_over,
        ),
        row("status.yml -e exp=smoke", status, "<= 3 s"),
    ]
    figures = {
        "seed-style bring-up, 3 nodes": (med(s_seed), "baseline"),
        "site.yml cold converge, 3 nodes": (med(s_cold), "<= 0.6x baseline: **%.2fx**" % ratio),
        "site.yml no-op re-run, 3 nodes": (med(s_quiet), "<= 2 s"),
        "submit.yml overhead (wall minus the job)": (med(submit_over), "<= 5 s"),
        "status.yml": (med([t.secs for t in status]), "<= 3 s"),
    }
    if big_quiet:
        s_big = [t.secs for t in big_quiet]
        rows += [
            row("site.yml cold converge, %d nodes, metrics on" % big, [big_cold], "converges"),
            row(
                "site.yml no-op re-run, %d nodes (changed=0)" % big,
                big_quiet,
                "<= 2x 3-node: **%.2fx**" % (med(s_big) / med(s_quiet)),
            ),
            "| idle CPU per node, %d nodes, metrics on (%% of a core) | %.1f | max %.1f | 1 |  |  |  |"
            % (big, *idle_on),
            "| idle CPU per node, %d nodes, metrics off (%% of a core) | %.1f | max %.1f | 1 |  |  |  |"
            % (big, *idle_off),
        ]
    return "\n".join(rows), figures, seed


if __name__ == "__main__":
    main()
