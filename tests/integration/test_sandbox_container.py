"""Container mode on the sandbox (issue: containers as the node environment).

The sandbox's nodes have Debian's podman. ``sandbox/sandbox.sh image`` builds a small image from the sandbox's base
with Ray's venv from the wheelhouse and a marker file only the image has, and saves it as an archive the nodes see
at /data/images/rlinfra-ray.tar. site.yml with ``ray_container_image_archive`` loads it on the three nodes and runs
Ray's head and workers inside it under systemd; a copy of the smoke experiment whose entrypoint first prints the
marker SUCCEEDS (so its driver ran inside the image, and its rollout actors on every node with it); the token is in
no process's arguments on any node; a re-run is ``changed=0`` and loads nothing. A second image (one more layer) given
while a job runs is refused before anything changes, in one line, and applied once the job is stopped. The cluster is
then put back as the other tests expect it (the venv, Ray restarted from it).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
from pathlib import Path

import yaml

from tests.fake_hyperbolic.testing import venv_bin
from tests.integration.conftest import ROOT, SANDBOX_INVENTORY, sandbox_nodes
from tests.integration.test_submit_loopback import all_text_under

TAG = secrets.token_hex(4)
IMAGE = "rlinfra/ray-node:sandbox"
ARCHIVE = "/data/images/rlinfra-ray.tar"
MARKER = "rlinfra-sandbox-ray-image"
CONTAINER = {"ray_container_image": IMAGE, "ray_container_image_archive": ARCHIVE, "ray_container_mounts": ["/data"]}
EXP = "smoke-container-" + TAG
IMAGES = Path(os.environ.get("SANDBOX_IMAGES") or ROOT / ".sandbox" / "images")
V2 = dict(CONTAINER, ray_container_image=IMAGE + "-v2", ray_container_image_archive="/data/images/rlinfra-ray-v2.tar")


def playbook(name, *extra):
    args = [venv_bin("ansible-playbook"), "-i", str(SANDBOX_INVENTORY), name]
    for item in extra:
        args += ["-e", item if isinstance(item, str) else json.dumps(item)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_") and k != "HF_TOKEN"}
    env.update(ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200, check=False)
    proc.output = proc.stdout + proc.stderr
    return proc


def on_node(node, script):
    return subprocess.run(["docker", "exec", node, "sh", "-c", script], capture_output=True, text=True,
                          timeout=120, check=False).stdout


def recap(output):
    return {m.group(1): (int(m.group(2)), int(m.group(3))) for m in
            re.finditer(r"^(\S+)\s+: ok=\d+\s+changed=(\d+)\s+unreachable=\d+\s+failed=(\d+)", output, re.M)}


def second_image():
    """The test image with one more layer (a new image ID), saved beside the first archive."""
    cid = subprocess.run(["docker", "create", "--network", "none", IMAGE, "sh", "-c", "echo v2 > /etc/rlinfra-image-v2"],
                         capture_output=True, text=True, check=True).stdout.strip()
    try:
        subprocess.run(["docker", "start", "-a", cid], capture_output=True, check=True, timeout=120)
        subprocess.run(["docker", "commit", cid, IMAGE + "-v2"], capture_output=True, check=True, timeout=300)
    finally:
        subprocess.run(["docker", "rm", "-f", cid], capture_output=True, check=False)
    part = IMAGES / "rlinfra-ray-v2.tar.part"
    subprocess.run(["docker", "save", "-o", str(part), IMAGE + "-v2"], check=True, timeout=600)
    part.rename(IMAGES / "rlinfra-ray-v2.tar")
    return subprocess.run(["docker", "image", "inspect", "-f", "{{.Id}}", IMAGE + "-v2"], capture_output=True, text=True,
                          check=True).stdout.strip().split(":")[-1]


def running_images(nodes):
    return {n["name"]: on_node(n["name"], "podman ps --filter name=rlinfra-ray --format '{{.ImageID}}'").strip()
            for n in nodes}


def experiment(tmp_path):
    exp_dir = tmp_path / "experiments"
    exp_dir.mkdir()
    shutil.copytree(ROOT / "experiments" / "smoke", exp_dir / "smoke")
    exp = yaml.safe_load((ROOT / "experiments" / "smoke.yml").read_text())
    exp["entrypoint"]["command"] = "cat /etc/rlinfra-container-image && python3 smoke_rl.py"
    exp["params"]["trainer"]["total_training_steps"] = 6
    exp["params"]["trainer"]["save_freq"] = 3
    (exp_dir / (EXP + ".yml")).write_text(yaml.safe_dump(exp))
    return exp_dir


def test_ray_and_the_job_run_inside_the_image(sandbox, tmp_path):
    built = subprocess.run([str(ROOT / "sandbox" / "sandbox.sh"), "image"], cwd=ROOT, capture_output=True, text=True,
                           timeout=900, check=False)
    assert built.returncode == 0, built.stderr[-3000:]
    nodes = sandbox_nodes()
    names = [n["name"] for n in nodes]
    head = next(n["name"] for n in nodes if n["role"] == "head")
    assert on_node(head, "test -s %s && echo ok" % ARCHIVE).strip() == "ok"
    for name in names:  # as a fresh node (an earlier run of this test left its images)
        on_node(name, "podman rmi -f %s %s-v2 >/dev/null 2>&1; podman image prune -f >/dev/null 2>&1" % (IMAGE, IMAGE))

    try:
        first = playbook("site.yml", CONTAINER)
        assert first.returncode == 0, first.output[-5000:]
        for n in nodes:
            role = n["role"]
            unit = on_node(n["name"], "cat /etc/systemd/system/ray-%s.service" % role)
            assert re.search(r"^ExecStart=/usr/bin/podman run --rm --name rlinfra-ray-%s " % role, unit, re.M), unit
            assert "--env RAY_AUTH_TOKEN_PATH" in unit and "--volume /etc/ray:/etc/ray:ro" in unit, unit
            running = on_node(n["name"], "podman ps --format '{{.Names}} {{.ImageID}}'")
            assert ("rlinfra-ray-%s" % role) in running, running
            # Ray's own processes run inside the image: the raylet's root is the container's, not the node's.
            raylet = on_node(n["name"], "for p in $(pgrep -f raylet); do test -f /proc/$p/root/etc/rlinfra-container-image "
                                        "&& echo inside; done").split()
            assert raylet and set(raylet) == {"inside"}, raylet
        loaded_ids = {on_node(name, "podman image inspect --format '{{.Id}}' %s" % IMAGE).strip() for name in names}
        assert len(loaded_ids) == 1 and "" not in loaded_ids, loaded_ids

        token = on_node(head, "cat /etc/ray/auth_token").strip()
        assert len(token) >= 16
        for name in names:
            argv = on_node(name, "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '")
            assert argv and token not in argv, name

        again = playbook("site.yml", CONTAINER)
        assert again.returncode == 0, again.output[-5000:]
        assert all(changed == 0 and failed == 0 for changed, failed in recap(again.output).values()), again.output[-3000:]
        assert set(names) <= set(recap(again.output)), again.output[-3000:]

        exp_dir = experiment(tmp_path)
        submit = playbook("submit.yml", "exp=" + EXP, {"verl_job_experiments_dir": str(exp_dir),
                                                       "verl_job_checkpoint_root": "/data/checkpoints-ctr-" + TAG})
        assert submit.returncode == 0, submit.output[-5000:]
        assert "SUCCEEDED" in submit.output, submit.output[-3000:]
        driver_log = all_text_under(ROOT / "artifacts" / EXP)
        assert MARKER in driver_log, driver_log[-3000:]
        assert "SMOKE_RESULT " in driver_log, driver_log[-3000:]

        # A new image while a job runs: refused before anything changes; applied once the job is stopped.
        v2_id = second_image()
        before = running_images(nodes)
        assert len(set(before.values())) == 1 and v2_id[:12] not in list(before.values())[0], before
        run = "v2-" + TAG
        slow = {"verl_job_experiments_dir": str(exp_dir), "verl_job_checkpoint_root": "/data/checkpoints-ctr-" + TAG,
                "verl_job_params": {"trainer": {"total_training_steps": 900, "save_freq": 300, "step_sleep_s": 1.0}}}
        started = playbook("submit.yml", "exp=" + EXP, "run=" + run, "wait=false", slow)
        assert started.returncode == 0, started.output[-4000:]
        refused = playbook("site.yml", V2)
        assert refused.returncode != 0, refused.output[-4000:]
        errors = [line for line in refused.output.splitlines() if line.startswith("[ERROR]")]
        assert len(errors) == 1 and "Refusing to restart Ray under a running job, nothing was changed" in errors[0], errors
        assert "rlinfra-%s-default-%s" % (EXP, run) in errors[0], errors[0]
        assert running_images(nodes) == before
        assert all(on_node(name, "podman image exists %s-v2 && echo yes" % IMAGE).strip() == "" for name in names)
        stopped = playbook("stop.yml", "exp=" + EXP, "run=" + run, {"verl_job_experiments_dir": str(exp_dir)})
        assert stopped.returncode == 0, stopped.output[-3000:]
        applied = playbook("site.yml", V2)
        assert applied.returncode == 0, applied.output[-5000:]
        after = running_images(nodes)
        assert all(v2_id.startswith(image_id) and image_id for image_id in after.values()), (v2_id, after)
    finally:
        # Other tests share the sandbox: no job left, the venv back, Ray restarted from it.
        playbook("stop.yml", "exp=" + EXP, "run=v2-" + TAG, {"verl_job_experiments_dir": str(tmp_path / "experiments")})
        back = playbook("site.yml")
        on_node(head, "rm -rf /data/checkpoints-ctr-" + TAG)
        shutil.rmtree(ROOT / "artifacts" / EXP, ignore_errors=True)
    assert back.returncode == 0, back.output[-5000:]
    for n in nodes:
        unit = on_node(n["name"], "cat /etc/systemd/system/ray-%s.service" % n["role"])
        assert "/opt/rlinfra/venv/bin/ray start" in unit and "podman" not in unit, unit
