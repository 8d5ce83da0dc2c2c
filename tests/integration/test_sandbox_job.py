"""A job on the sandbox (real SSH nodes, systemd, Ray under token auth, the shared /data volume).

While a `smoke` run given fake HF_TOKEN / WANDB_API_KEY values is running, those values and the
cluster's Ray token appear in no process's command line on any node, in no systemd unit, and in no
file another local user (``nobody``) can read; nor in Ansible's output. stop.yml then stops it
mid-run, submit.yml with the same run reports the stopped job instead of starting a duplicate, and
a new run resumes from the last checkpoint.

The sandbox is brought up when it is not (sandbox/sandbox.sh up); site.yml converges it (a no-op
when it is converged already).
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import time

from tests.fake_hyperbolic.testing import venv_bin
from tests.integration.conftest import ROOT, SANDBOX_INVENTORY, sandbox_nodes
from tests.integration.test_submit_loopback import flat, smoke_result

TAG = secrets.token_hex(6)
SECRETS = {
    "HF_TOKEN": "hf_FAKE_sbx_" + secrets.token_hex(12),
    "WANDB_API_KEY": "wandb_FAKE_sbx_" + secrets.token_hex(12),
}
CKPT_ROOT = "/data/checkpoints-sbx-" + TAG  # apart from other runs on the shared volume
TRACKER = CKPT_ROOT + "/rlinfra_smoke/default/smoke/latest_checkpointed_iteration.txt"
# Where a leak could land that another local user might read (the wheelhouse is read-only input).
READABLE_ROOTS = "/etc /root /home /tmp /var /workspace /opt /srv /run /data"


def playbook(name, *extra, env=None):
    args = [
        venv_bin("ansible-playbook"),
        "-i",
        str(SANDBOX_INVENTORY),
        name,
        "-e",
        json.dumps({"verl_job_checkpoint_root": CKPT_ROOT}),
    ]
    for item in extra:
        args += ["-e", item]
    full_env = {k: v for k, v in os.environ.items() if k not in SECRETS and not k.startswith("ANSIBLE_")}
    full_env.update(ANSIBLE_NOCOLOR="1", **(env or {}))
    proc = subprocess.run(args, cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=1200)
    proc.output = proc.stdout + proc.stderr
    return proc


def on_node(node, script, stdin="", user="root"):
    proc = subprocess.run(
        ["docker", "exec", "-i", "-u", user, node, "sh", "-c", script],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return proc.stdout


def leaks(node, needles):
    """Where the values show on one node; they travel on stdin, never in a command line."""
    found = []
    if any(v in on_node(node, "ps -eww -o args=") for v in needles):
        found.append("%s: a process command line" % node)
    units = on_node(node, "grep -rlsF -f /dev/stdin /etc/systemd /lib/systemd/system /run/systemd", "\n".join(needles))
    found += ["%s: unit %s" % (node, p) for p in units.split()]
    readable = on_node(
        node, "grep -rlsF --exclude-dir=wheelhouse -f /dev/stdin %s" % READABLE_ROOTS, "\n".join(needles), user="nobody"
    )
    found += ["%s: %s readable by nobody" % (node, p) for p in readable.split()]
    return found


def test_secrets_stay_hidden_then_stop_and_resume(sandbox):
    nodes = sandbox_nodes()
    head = next(n["name"] for n in nodes if n["role"] == "head")
    site = playbook("site.yml")
    assert site.returncode == 0, site.output[-4000:]

    run = "sbx-" + TAG
    sid = "rlinfra-smoke-default-" + run
    slow = {"verl_job_params": {"trainer": {"total_training_steps": 40, "save_freq": 2, "step_sleep_s": 1.0}}}
    submit = playbook("submit.yml", "exp=smoke", "run=" + run, "wait=false", json.dumps(slow), env=SECRETS)
    assert submit.returncode == 0, submit.output[-4000:]
    assert "Submitted %s" % sid in flat(submit.output)

    deadline = time.monotonic() + 300
    while not on_node(head, "cat %s 2>/dev/null" % TRACKER).strip() and time.monotonic() < deadline:
        time.sleep(2)
    assert on_node(head, "cat %s 2>/dev/null" % TRACKER).strip(), "no checkpoint within 300 s"

    # The job is running on every node now: look everywhere for the values.
    ray_token = on_node(head, "cat /etc/ray/auth_token").strip()
    assert len(ray_token) >= 32
    needles = list(SECRETS.values()) + [ray_token]
    found = [hit for n in nodes for hit in leaks(n["name"], needles)]
    assert not found, found
    # The search is not blind: root finds the job's secret in the environment of its driver process.
    assert on_node(head, "grep -lsF -f /dev/stdin /proc/[0-9]*/environ", SECRETS["HF_TOKEN"]).strip()

    stop = playbook("stop.yml", "exp=smoke", "run=" + run)
    assert stop.returncode == 0, stop.output[-4000:]
    assert "stopped %s, now STOPPED" % sid in flat(stop.output)
    stopped_at = int(on_node(head, "cat " + TRACKER))
    assert 2 <= stopped_at < 40

    again = playbook("submit.yml", "exp=smoke", "run=" + run, "wait=false", json.dumps(slow), env=SECRETS)
    assert again.returncode == 0, again.output[-4000:]
    assert "%s already exists (STOPPED); not submitted again" % sid in flat(again.output)

    slow["verl_job_params"]["trainer"]["step_sleep_s"] = 0
    resume = playbook("submit.yml", "exp=smoke", "run=%s-2" % run, json.dumps(slow), env=SECRETS)
    assert resume.returncode == 0, resume.output[-4000:]
    result = smoke_result((ROOT / "artifacts" / "smoke" / ("%s-2.log" % sid)).read_text())
    assert result["resumed_from"] >= stopped_at and result["final_step"] == 40
    assert sorted(result["rollout_nodes"]) == sorted(n["ip"] for n in nodes)

    for proc in (site, submit, stop, again, resume):
        assert not [v for v in needles if v in proc.output]
    on_node(head, "rm -rf " + CKPT_ROOT)
