"""Container mode: loading the image archive from the shared volume on one node against three at once, and a re-run.

What site.yml's container step does on each node, run as that step runs it: ``rlinfra.verl.ray_container`` with
``archive`` (the sandbox's test image, ``sandbox/sandbox.sh image``, about 750 MB) through one ``ansible-playbook``,
limited to the head (one node) or given all three nodes (at once, as site.yml's play runs them). Before each timed
load the image is removed from the nodes (not timed). The re-run is the same playbook again on the three nodes, the
image present: it must load nothing (``loaded`` false on every node, asserted). Sides alternate which goes first,
round by round; medians. Goal (issue: containers): three nodes at once <= 1.5x one node; a re-run loads nothing.

Run from the repository root with the sandbox up (sandbox/sandbox.sh up; sandbox/sandbox.sh image):
    python bench/bench_container_load.py [--rounds 5] [--no-write]
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
IMAGE = "rlinfra/ray-node:sandbox"
ARCHIVE = "/data/images/rlinfra-ray.tar"
PLAY = [{"name": "Make the image ready", "hosts": "HOSTS", "gather_facts": False, "tasks": [
    {"name": "Load the archive when the node lacks its image", "rlinfra.verl.ray_container": {
        "image": IMAGE, "archive": ARCHIVE, "mounts": ["/data"], "state_path": "/tmp/rlinfra-bench-image.json"},
     "register": "image"},
    {"name": "Say what it did", "ansible.builtin.debug": {"msg": "LOADED={{ image.loaded }}"}}]}]


def nodes():
    state = json.loads((ROOT / ".sandbox" / "state.json").read_text())
    return [n["name"] for n in state["nodes"]]


def forget(names):
    """The image off the nodes, the disk's writes finished and the page cache dropped (every load then reads the archive
    from the disk, as a fresh node does), and the CPUs quiet again - so one step's leftovers do not land on the next."""
    for name in names:
        subprocess.run(["docker", "exec", name, "sh", "-c", "podman rmi -f %s >/dev/null 2>&1; podman image prune -f "
                        ">/dev/null 2>&1; rm -f /tmp/rlinfra-bench-image.json" % IMAGE], check=False)
    subprocess.run(["sync"], check=False)
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError:
        pass
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and os.getloadavg()[0] > 1.0:
        time.sleep(2)


def run(hosts):
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
        json.dump([dict(PLAY[0], hosts=hosts)], f)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_NOCOLOR="1")
    t0 = time.perf_counter()
    proc = subprocess.run([PLAYBOOK, "-i", str(INVENTORY), f.name], cwd=ROOT, env=env, capture_output=True, text=True,
                          check=False)
    took = time.perf_counter() - t0
    os.unlink(f.name)
    if proc.returncode != 0:
        sys.exit("the playbook failed:\n" + (proc.stdout + proc.stderr)[-3000:])
    loaded = proc.stdout.count('"msg": "LOADED=True"') + proc.stdout.count("msg: LOADED=True")
    return took, loaded


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    names = nodes()
    head = names[0]
    load0 = os.getloadavg()[0]
    one, three, rerun = [], [], []
    for r in range(args.rounds):
        sides = ["one", "three"] if r % 2 == 0 else ["three", "one"]
        for side in sides:
            forget(names)
            took, loaded = run(head if side == "one" else "all")
            assert loaded == (1 if side == "one" else len(names)), (side, loaded)
            (one if side == "one" else three).append(took)
            print("round %d %-5s %.1f s (loaded on %d)" % (r + 1, side, took, loaded), flush=True)
            if side == "three":
                took, loaded = run("all")
                assert loaded == 0, "a re-run loaded the image again on %d node(s)" % loaded
                rerun.append(took)
                print("round %d rerun %.1f s (loaded on 0)" % (r + 1, took), flush=True)
    load1 = os.getloadavg()[0]
    size = subprocess.run(["docker", "exec", head, "stat", "-c", "%s", ARCHIVE], capture_output=True, text=True,
                          check=True).stdout.strip()
    m1, m3, mr = statistics.median(one), statistics.median(three), statistics.median(rerun)
    body = "\n".join([
        "## Container mode: loading the image archive on one node against three at once",
        "",
        "`bench/bench_container_load.py`: `rlinfra.verl.ray_container` with `archive` (the sandbox's test image, %d MB, "
        "on the shared volume) in one `ansible-playbook` run - limited to the head, or on the three nodes at once as "
        "site.yml's play runs it - the image removed from the nodes, the disk synced, the page cache dropped and the "
        "CPUs let settle (load < 1, 60 s at most) before each timed load; then the same run again "
        "with the image there (it loads nothing: `loaded` false on every node, asserted). %d rounds, sides alternating; "
        "medians; `ansible-playbook`'s own start is in every figure. Load average (1 min) at start/end: %.1f / %.1f on "
        "%d cores." % (int(size) // 1000000, args.rounds, load0, load1, os.cpu_count()),
        "",
        "| step | median (s) | min-max (s) | ratio |",
        "|---|---:|---:|---:|",
        "| load on one node | %.1f | %.1f-%.1f | |" % (m1, min(one), max(one)),
        "| load on three nodes at once | %.1f | %.1f-%.1f | **%.2fx** one node (goal <= 1.5x) |" % (
            m3, min(three), max(three), m3 / m1),
        "| re-run on three nodes (loads nothing) | %.1f | %.1f-%.1f | %.2fx one load |" % (
            mr, min(rerun), max(rerun), mr / m1),
    ])
    print(body)
    if not args.no_write:
        _report.write_section("container-load", body)
        print("wrote docs/BENCHMARKS.md (section bench:container-load)")


if __name__ == "__main__":
    main()
