"""Container mode: loading the image archive from the shared volume on one node against three at once, and a re-run.

What site.yml's container step does on each node, run as that step runs it: ``rlinfra.verl.ray_container`` with
``archive`` (the sandbox's test image, ``sandbox/sandbox.sh image``, about 750 MB) through one ``ansible-playbook``,
limited to the head (one node) or given all three nodes (at once, as site.yml's play runs them). Before each timed
load the image is removed from the nodes (not timed). The re-run is the same playbook again on the three nodes, the
image present: it must load nothing (``loaded`` false on every node, asserted). Sides alternate which goes first,
round by round; medians. The third side gives the three nodes one shared store (``image_store``): one node loads,
the others find the image there. Goal (issue: containers): three nodes at once <= 1.5x one node; a re-run loads
nothing.

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
STORE = "/data/rlinfra-bench-store"
PLAY = [
    {
        "name": "Make the image ready",
        "hosts": "HOSTS",
        "gather_facts": False,
        "tasks": [
            {
                "name": "Load the archive when the node lacks its image",
                "rlinfra.verl.ray_container": {
                    "image": IMAGE,
                    "archive": ARCHIVE,
                    "mounts": ["/data"],
                    "state_path": "/tmp/rlinfra-bench-image.json",
                    "image_store": "STORE",
                },
                "register": "image",
            },
            {"name": "Say what it did", "ansible.builtin.debug": {"msg": "LOADED={{ image.loaded }}"}},
        ],
    }
]


def nodes():
    state = json.loads((ROOT / ".sandbox" / "state.json").read_text())
    return [n["name"] for n in state["nodes"]]


def forget(names):
    """The images off the nodes, the disk's writes finished and the page cache dropped (every load then reads the archive
    from the disk, as a fresh node does), and the CPUs quiet again - so one step's leftovers do not land on the next."""
    for name in names:
        # Every image goes (one sharing the test image's layer makes a load skip it: the other tests leave some).
        subprocess.run(
            [
                "docker",
                "exec",
                name,
                "sh",
                "-c",
                "rm -f /etc/containers/storage.conf; podman rm -af "
                ">/dev/null 2>&1; podman rmi -af >/dev/null 2>&1; rm -f /tmp/rlinfra-bench-image.json",
            ],
            check=False,
        )
    subprocess.run(["docker", "exec", names[0], "rm", "-rf", STORE], check=False)
    subprocess.run(["sync"], check=False)
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError:
        pass
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and os.getloadavg()[0] > 1.0:
        time.sleep(2)


def run(hosts, store=""):
    play = json.loads(json.dumps(PLAY[0]).replace('"STORE"', json.dumps(store)))
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
        json.dump([dict(play, hosts=hosts)], f)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_NOCOLOR="1")
    t0 = time.perf_counter()
    proc = subprocess.run(
        [PLAYBOOK, "-i", str(INVENTORY), f.name], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
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
    took = {"one": [], "three": [], "store": [], "rerun": [], "store_rerun": []}
    # one: the head loads into its own store; three: every node into its own, at once (site.yml's play); store: the
    # three at once with ray_container_image_store - one loads into the shared store, the others find it there.
    order = ["one", "three", "store"]
    for r in range(args.rounds):
        sides = order[r % 3 :] + order[: r % 3]
        for side in sides:
            forget(names)
            store = STORE if side == "store" else ""
            seconds, loaded = run(head if side == "one" else "all", store)
            assert loaded == (len(names) if side == "three" else 1), (side, loaded)
            took[side].append(seconds)
            print("round %d %-5s %.1f s (loaded on %d)" % (r + 1, side, seconds, loaded), flush=True)
            if side != "one":
                seconds, loaded = run("all", store)
                assert loaded == 0, "a re-run loaded the image again on %d node(s)" % loaded
                took["rerun" if side == "three" else "store_rerun"].append(seconds)
                print("round %d rerun %.1f s (loaded on 0)" % (r + 1, seconds), flush=True)
    forget(names)
    load1 = os.getloadavg()[0]
    size = subprocess.run(
        ["docker", "exec", head, "stat", "-c", "%s", ARCHIVE], capture_output=True, text=True, check=True
    ).stdout.strip()
    med = {k: statistics.median(v) for k, v in took.items()}
    m1 = med["one"]

    def row(label, key, ratio):
        v = took[key]
        return "| %s | %.1f | %.1f-%.1f | %s |" % (label, med[key], min(v), max(v), ratio)

    body = "\n".join(
        [
            "## Container mode: loading the image archive on one node against three at once",
            "",
            "`bench/bench_container_load.py`: `rlinfra.verl.ray_container` with `archive` (the sandbox's test image, %d MB, "
            "on the shared volume) in one `ansible-playbook` run - limited to the head, or on the three nodes at once as "
            "site.yml's play runs it, each node into its own store or, with `image_store` (`ray_container_image_store`), "
            "into one store on the shared volume that every node then runs the image from - the image (and the store) "
            "removed, the disk synced, the page cache dropped and the CPUs let settle (load < 1, 60 s at most) before each "
            "timed load; then the same run again with the image there (it loads nothing: `loaded` false on every node, "
            "asserted). %d rounds, the three sides rotating which goes first; medians; `ansible-playbook`'s own start is "
            "in every figure. Load average (1 min) at start/end: %.1f / %.1f on %d cores."
            % (int(size) // 1000000, args.rounds, load0, load1, os.cpu_count()),
            "",
            "| step | median (s) | min-max (s) | ratio |",
            "|---|---:|---:|---:|",
            row("load on one node (its own store)", "one", ""),
            row(
                "load on three nodes at once, each into its own store", "three", "%.2fx one node" % (med["three"] / m1)
            ),
            row(
                "load on three nodes at once, shared store (`ray_container_image_store`)",
                "store",
                "**%.2fx** one node (goal <= 1.5x)" % (med["store"] / m1),
            ),
            row("re-run on three nodes, own stores (loads nothing)", "rerun", "%.2fx one load" % (med["rerun"] / m1)),
            row(
                "re-run on three nodes, shared store (loads nothing)",
                "store_rerun",
                "%.2fx one load" % (med["store_rerun"] / m1),
            ),
        ]
    )
    print(body)
    if not args.no_write:
        _report.write_section("container-load", body)
        print("wrote docs/BENCHMARKS.md (section bench:container-load)")


if __name__ == "__main__":
    main()
