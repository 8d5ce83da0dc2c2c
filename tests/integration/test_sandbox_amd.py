"""An AMD node in the sandbox: ROCm's compute device (/dev/kfd) and two DRM render nodes are made (mknod) in one
worker's container, then site.yml runs as users run it.

That worker's Ray is given the two GPUs (ray_num_gpus: auto), its environment gains verl's AMD settings and
HIP_VISIBLE_DEVICES=0,1, the other nodes are left alone (same Ray PIDs, no ROCm settings), the cluster reports
2 GPUs, and a re-run changes nothing. A ray_env naming CUDA_VISIBLE_DEVICES for that node stops the run with one
line and changes nothing there. The devices are then removed and site.yml puts the cluster back as other tests
expect it (zero GPUs, no ROCm settings).
"""

from __future__ import annotations

import json
import os
import re
import subprocess

from ansible_collections.rlinfra.verl.plugins.module_utils.ray.node import env_names
from tests.fake_hyperbolic.testing import venv_bin
from tests.integration.conftest import ROOT, SANDBOX_INVENTORY, sandbox_nodes

RECAP = re.compile(r"^(\S+)\s+: ok=\d+\s+changed=(\d+)\s+unreachable=\d+\s+failed=(\d+)", re.M)
DEVICES = (
    "mkdir -p /dev/dri && mknod -m 666 /dev/kfd c 238 0 && mknod -m 666 /dev/dri/renderD200 c 226 200 "
    "&& mknod -m 666 /dev/dri/renderD201 c 226 201"
)
PRESETS = {
    "GPU_MAX_HW_QUEUES": "2",
    "TORCH_NCCL_HIGH_PRIORITY": "1",
    "NCCL_CHECKS_DISABLE": "1",
    "CUDA_DEVICE_MAX_CONNECTIONS": "1",
    "RCCL_MSCCL_ENABLE": "0",
    "HSA_NO_SCRATCH_RECLAIM": "1",
}


def playbook(*args, inventory=()):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env["ANSIBLE_NOCOLOR"] = "1"
    proc = subprocess.run(
        [
            venv_bin("ansible-playbook"),
            "-i",
            str(SANDBOX_INVENTORY),
            *[a for path in inventory for a in ("-i", str(path))],
            "site.yml",
            *args,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    proc.output = proc.stdout + proc.stderr
    proc.recap = {h: (int(c), int(f)) for h, c, f in RECAP.findall(proc.stdout)}
    return proc


def on_node(node, script):
    return subprocess.run(
        ["docker", "exec", node, "sh", "-c", script], capture_output=True, text=True, timeout=120, check=False
    )


def ray_pid(node):
    unit = "ray-head" if node["role"] == "head" else "ray-worker"
    return on_node(node["name"], "systemctl show -p MainPID --value %s.service" % unit).stdout.strip()


def raylet_env(node):
    """The environment of the node's running raylet, as Ray itself sees it."""
    out = on_node(node["name"], "tr '\\0' '\\n' < /proc/$(pgrep -o raylet)/environ").stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def test_amd_worker_gets_its_gpus_and_the_rocm_environment(sandbox, tmp_path):
    nodes = sandbox_nodes()
    amd = next(n for n in nodes if n["role"] == "worker")
    others = [n for n in nodes if n is not amd]
    start = playbook()
    assert start.returncode == 0, start.output[-4000:]
    before = {n["name"]: ray_pid(n) for n in nodes}
    try:
        made = on_node(amd["name"], DEVICES + " && test -c /dev/kfd && test -c /dev/dri/renderD201 && echo made")
        assert made.stdout.strip() == "made", made.stderr

        converge = playbook()
        assert converge.returncode == 0, converge.output[-4000:]
        unit = on_node(amd["name"], "cat /etc/systemd/system/ray-worker.service").stdout
        assert "--num-gpus=2" in unit, unit
        env = env_names(on_node(amd["name"], "cat /etc/ray/ray.env").stdout)
        assert {k: env.get(k) for k in PRESETS} == PRESETS and env.get("HIP_VISIBLE_DEVICES") == "0,1", env
        assert "CUDA_VISIBLE_DEVICES" not in env and "ROCR_VISIBLE_DEVICES" not in env, env
        seen = raylet_env(amd)
        assert seen.get("HIP_VISIBLE_DEVICES") == "0,1" and seen.get("RCCL_MSCCL_ENABLE") == "0", sorted(seen)
        assert ray_pid(amd) not in ("", "0", before[amd["name"]])
        for n in others:
            assert ray_pid(n) == before[n["name"]], n["name"]  # only the AMD node restarted
            assert "HIP_VISIBLE_DEVICES" not in on_node(n["name"], "cat /etc/ray/ray.env").stdout
        said = " ".join(converge.stdout.split())
        assert re.search(r"nodes alive, [0-9.]+ CPUs, 2(\.0)? GPUs", said), said[-3000:]

        again = playbook()
        assert again.returncode == 0 and all(c == 0 for c, _ in again.recap.values()), again.output[-4000:]

        # A device list for the AMD node alone (a second inventory source gives it the host variable).
        extra = tmp_path / "amd.yml"
        extra.write_text(json.dumps({"all": {"hosts": {amd["name"]: {"ray_env": {"CUDA_VISIBLE_DEVICES": "0,1"}}}}}))
        kept = on_node(amd["name"], "sha256sum /etc/ray/ray.env /etc/systemd/system/ray-worker.service").stdout
        bad = playbook(inventory=[extra])
        assert bad.returncode != 0 and bad.recap[amd["name"]][1] == 1, bad.output[-4000:]
        assert all(bad.recap[n["name"]] == (0, 0) for n in others), bad.output[-4000:]
        text = " ".join(bad.output.split())
        assert "ray_env sets CUDA_VISIBLE_DEVICES on this AMD node" in text and "HIP_VISIBLE_DEVICES instead" in text, (
            text[-3000:]
        )
        assert on_node(amd["name"], "sha256sum /etc/ray/ray.env /etc/systemd/system/ray-worker.service").stdout == kept
    finally:
        on_node(amd["name"], "rm -f /dev/kfd /dev/dri/renderD200 /dev/dri/renderD201")
        restore = playbook()
    assert restore.returncode == 0, restore.output[-4000:]
    assert "--num-gpus=0" in on_node(amd["name"], "cat /etc/systemd/system/ray-worker.service").stdout
    assert "HIP_VISIBLE_DEVICES" not in on_node(amd["name"], "cat /etc/ray/ray.env").stdout
