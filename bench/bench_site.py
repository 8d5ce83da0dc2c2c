#!/usr/bin/env python3
"""site.yml on the 3-node SSH sandbox: first converge and no-op re-run wall times.

Starts from a fresh sandbox (sandbox.sh down/up, the base image and wheelhouse are cached), runs
site.yml twice and reads the PLAY RECAP. Prints a table and rewrites the ``bench:site`` section of
docs/BENCHMARKS.md. Not a timed test: it reports, it does not assert, except that the re-run
changed nothing.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from _report import write_section  # noqa: E402

NODES = int(os.environ.get("SANDBOX_NODES", "3"))


def run(cmd: list[str], env: dict | None = None) -> tuple[float, str]:
    t0 = time.monotonic()
    out = subprocess.run(cmd, cwd=ROOT, env=env, text=True, capture_output=True)
    took = time.monotonic() - t0
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{out.stdout[-3000:]}\n{out.stderr[-2000:]}")
    return took, out.stdout


def changed_total(recap: str) -> int:
    return sum(int(n) for n in re.findall(r"changed=(\d+)", recap.split("PLAY RECAP")[-1]))


def main() -> None:
    env = dict(os.environ, ANSIBLE_INVENTORY=str(ROOT / ".sandbox/inventory.yml"), ANSIBLE_FORCE_COLOR="0")
    run(["sandbox/sandbox.sh", "down"])
    t_up, _ = run(["sandbox/sandbox.sh", "up", str(NODES)])
    playbook = [str(ROOT / ".venv/bin/ansible-playbook"), "site.yml"]
    t_first, out_first = run(playbook, env)
    t_second, out_second = run(playbook, env)
    c1, c2 = changed_total(out_first), changed_total(out_second)
    rows = [
        ("sandbox up (containers + sshd)", t_up, "-"),
        ("site.yml first converge", t_first, c1),
        ("site.yml re-run (no-op)", t_second, c2),
    ]
    table = ["| step | wall time (s) | changed |", "| --- | ---: | ---: |"]
    table += [f"| {name} | {secs:.1f} | {chg} |" for name, secs, chg in rows]
    table.append(f"\nRe-run / first converge: {t_second / t_first:.2f}. {NODES} nodes, 2-core machine.")
    text = "\n".join(table)
    print(text)
    write_section("site", "## site.yml on the sandbox\n\n" + text)
    if c2 != 0:
        sys.exit(f"re-run changed {c2} tasks: site.yml is not idempotent")


if __name__ == "__main__":
    main()
