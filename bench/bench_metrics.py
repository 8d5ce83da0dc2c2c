#!/usr/bin/env python3
"""What the metrics stack (ray_metrics, on by default) adds to site.yml on the 3-node SSH sandbox.

Each round converges two fresh sandboxes in turn (sandbox.sh down/up, not timed): one with the default
(``ray_metrics`` on: node_exporter on every node, Prometheus on the head), one with ``-e ray_metrics=false``;
then re-runs site.yml on each (the no-op figure, ``changed=0`` asserted). The order alternates between rounds;
before each timed step the CPUs are let settle (bench_site.settle). Goal (issue: observability): the stack adds
at most 15 s to a cold site.yml of 3 nodes and nothing to a no-op re-run. Prints a table and rewrites the
``bench:metrics`` section of docs/BENCHMARKS.md.

    python bench/bench_metrics.py [--rounds 3] [--no-write]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_site as B  # noqa: E402
from _report import write_section  # noqa: E402

OFF = ["-e", "ray_metrics=false"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    load0 = os.getloadavg()[0]
    took = {"on": [], "off": [], "on_noop": [], "off_noop": []}
    for r in range(args.rounds):
        for side in ["on", "off"] if r % 2 == 0 else ["off", "on"]:
            extra = [] if side == "on" else OFF
            B.fresh_sandbox(3)
            B.settle()
            cold = B.site(extra)
            took[side].append(cold.secs)
            noop = B.noop(extra)
            took[side + "_noop"].append(noop.secs)
            print(
                "round %d metrics %-3s cold %.1f s, no-op %.1f s (load %.1f)"
                % (r + 1, side, cold.secs, noop.secs, cold.load),
                flush=True,
            )
            # A slow no-op is a full converge: the plan's line says why (a unit's state, a file, an input).
            print("  no-op plan: %s" % (B.plan_lines(noop.out) or "(not printed)"), flush=True)
    load1 = os.getloadavg()[0]
    med = {k: statistics.median(v) for k, v in took.items()}

    def row(label, key, note=""):
        return "| %s | %.1f | %.1f-%.1f | %s |" % (label, med[key], min(took[key]), max(took[key]), note)

    body = "\n".join(
        [
            "## Metrics stack: what ray_metrics adds to site.yml",
            "",
            "`bench/bench_metrics.py`: site.yml on a fresh 3-node sandbox (sandbox.sh down/up, not timed) with the default "
            "(`ray_metrics` on: node_exporter on every node, Prometheus on the head, Ray's dashboard told where it is) "
            "against `-e ray_metrics=false`, then the no-op re-run of each (`changed=0` asserted). %d rounds, the sides "
            "alternating; medians; the CPUs let settle before each step. The packages are in the sandbox's image (a node "
            "without them installs them with apt: not in these figures). Load average (1 min) at start/end: %.1f / %.1f "
            "on %d cores." % (args.rounds, load0, load1, os.cpu_count()),
            "",
            "| step | median (s) | min-max (s) | vs ray_metrics=false |",
            "|---|---:|---:|---:|",
            row("cold site.yml, ray_metrics=false", "off"),
            row(
                "cold site.yml, ray_metrics on (default)",
                "on",
                "**%+.1f s** (goal <= +15 s)" % (med["on"] - med["off"]),
            ),
            row("no-op re-run, ray_metrics=false", "off_noop"),
            row(
                "no-op re-run, ray_metrics on",
                "on_noop",
                "**%+.1f s** (goal: nothing)" % (med["on_noop"] - med["off_noop"]),
            ),
        ]
    )
    print(body)
    if not args.no_write:
        write_section("metrics", body)
        print("wrote docs/BENCHMARKS.md (section bench:metrics)")


if __name__ == "__main__":
    main()
