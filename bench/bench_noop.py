#!/usr/bin/env python3
"""site.yml's no-op re-run, this tree against an earlier commit, on the same 3-node sandbox in one run.

The two trees converge differently (this one adds the network facts, NCCL/Gloo interface variables and the
excluded-node check), so each round first converges the sandbox with one side (not timed: it restarts Ray), then
times that side's no-op re-run ``--runs`` times (changed=0 asserted on every run); then the other side. The
side that goes first alternates between rounds so neither always meets a warmer page cache. The baseline runs
from a ``git worktree`` of ``--baseline`` with this checkout's virtualenv; both use the same inventory.

Prints a table (median, min-max, runs, the 1-minute load before each run, the ratio of the medians) and rewrites
the ``bench:noop`` section of docs/BENCHMARKS.md. Not a timed test: only idempotence is asserted.

    .venv/bin/python bench/bench_noop.py --baseline db16fe1 --rounds 2 --runs 4
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from _report import write_section  # noqa: E402

PLAYBOOK = str(Path(sys.executable).parent / "ansible-playbook")
INVENTORY = str(ROOT / ".sandbox/inventory.yml")


def play(tree):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env["ANSIBLE_NOCOLOR"] = "1"
    t0 = time.monotonic()
    proc = subprocess.run(
        [PLAYBOOK, "-i", INVENTORY, "site.yml"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    secs = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit("site.yml failed in %s:\n%s" % (tree, (proc.stdout + proc.stderr)[-3000:]))
    return secs, proc.stdout


def changed(out):
    return sum(int(n) for n in re.findall(r"changed=(\d+)", out))


def settle(limit=60):
    """Wait (at most ``limit`` s) until the 1-minute load is under 1.5 on this 2-core machine."""
    deadline = time.monotonic() + limit
    while os.getloadavg()[0] > 1.5 and time.monotonic() < deadline:
        time.sleep(3)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--baseline", required=True, help="the commit to compare with (e.g. the last landed one)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--no-write", action="store_true", help="print only; leave docs/BENCHMARKS.md alone")
    args = ap.parse_args(argv)
    base = subprocess.run(
        ["git", "rev-parse", "--short", args.baseline], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    work = Path(tempfile.mkdtemp(prefix="bench-noop-")) / "baseline"
    subprocess.run(["git", "worktree", "add", "--detach", str(work), base], cwd=ROOT, check=True, capture_output=True)
    sides = {"baseline %s" % base: str(work), "this tree": str(ROOT)}
    times = {name: [] for name in sides}
    loads = {name: [] for name in sides}
    try:
        for rnd in range(args.rounds):
            order = list(sides) if rnd % 2 == 0 else list(reversed(list(sides)))
            for name in order:
                play(sides[name])  # converge with this side (restarts Ray when the other side ran last)
                for _dummy in range(args.runs):
                    settle()
                    loads[name].append(os.getloadavg()[0])
                    secs, out = play(sides[name])
                    if changed(out):
                        raise SystemExit("%s: the no-op re-run changed something:\n%s" % (name, out[-3000:]))
                    times[name].append(secs)
                    print("round %d  %-18s %.2f s  (load %.1f)" % (rnd + 1, name, secs, loads[name][-1]), flush=True)
    finally:
        play(str(ROOT))  # leave the sandbox converged by this tree
        subprocess.run(["git", "worktree", "remove", "--force", str(work)], cwd=ROOT, check=False, capture_output=True)
    med = {n: statistics.median(t) for n, t in times.items()}
    base_name = "baseline %s" % base
    rows = [
        "| side | median (s) | min-max (s) | runs | load (1-min, median) | vs baseline |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, t in times.items():
        ratio = "" if name == base_name else "**%.2fx**" % (med[name] / med[base_name])
        rows.append(
            "| site.yml no-op, 3 nodes, %s | %.2f | %.2f-%.2f | %d | %.1f | %s |"
            % (name, med[name], min(t), max(t), len(t), statistics.median(loads[name]), ratio)
        )
    body = "\n".join(
        ["## site.yml no-op re-run: this tree against %s (3-node sandbox)" % base, ""]
        + rows
        + [
            "",
            "%d rounds alternating which side goes first; each side converges the sandbox (not timed) before its %d "
            "timed no-op runs, changed=0 asserted on each. 2-core machine shared by the controller and the three nodes."
            % (args.rounds, args.runs),
        ]
    )
    print("\n" + body)
    if not args.no_write:
        write_section("noop", body)


if __name__ == "__main__":
    main()
