"""Secrets stay out of every process's command line on every node, Ray's own processes included.

Ray copies a job's ``runtime_env.env_vars`` into the argv of its worker-setup process
(``setup_worker.py --serialized-runtime-env-context=...``) on every node that starts a worker for
the job; such a process lives a second or two, so one ``ps`` snapshot misses it. Here every node
(and the controller) is sampled with ``ps -eww -o args=`` every 0.2 s from before the submission
until after the waited run ended, while one ``smoke`` run is given a fake HF_TOKEN (controller
environment) and a fake WANDB_API_KEY (verl_job_secrets, from an extra-vars file).

Checked: no sample holds a value; the sampler saw Ray's setup_worker processes (carrying the
runtime_env, now only RLINFRA_SECRETS_FILE) on every node, so it was not blind; the rollout actor
on every node saw HF_TOKEN (its sha256); the run's secrets file was 0600 root while the run lived
and is gone afterwards; Ansible's output holds no value.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import subprocess
import threading
import time

import yaml

from tests.fake_hyperbolic.testing import venv_bin
from tests.integration.conftest import ROOT, SANDBOX_INVENTORY, sandbox_nodes

TAG = secrets.token_hex(6)
SECRETS = {
    "HF_TOKEN": "hf_FAKE_argv_" + secrets.token_hex(12),
    "WANDB_API_KEY": "wandb_FAKE_argv_" + secrets.token_hex(12),
}
CKPT_ROOT = "/data/checkpoints-argv-" + TAG
SECRETS_DIR = "/data/.rlinfra/secrets"  # the default: .rlinfra/secrets next to the checkpoint root
RUN = "argv-" + TAG
SID = "rlinfra-smoke-default-" + RUN
SECRETS_FILE = "%s/default/%s.env" % (SECRETS_DIR, SID)
STOP = "/tmp/.rlinfra-argv-sampler-stop-" + TAG
MARK = "@@rlinfra-sample@@"
INTERVAL_S = 0.2
BOUND_S = 900  # every sampler ends by itself after this, whatever happens to the test


def on_node(node, script):
    return subprocess.run(
        ["docker", "exec", node, "sh", "-c", script], capture_output=True, text=True, timeout=120
    ).stdout


class Sampler(threading.Thread):
    """``ps -eww -o args=`` every INTERVAL_S on one node (or the controller, node None), streamed
    from one loop so that the cadence is not bounded by ``docker exec``'s start-up. Keeps counts,
    never the lines themselves (they may hold what we look for)."""

    def __init__(self, node, needles, watch_file=None):
        super().__init__(daemon=True)
        self.node, self.needles = node, needles
        self.samples = self.setup_workers = self.route_seen = self.actors = 0
        self.hits, self.file_modes = [], set()
        stat = ('stat -c "@@mode %%a %%U" %s 2>/dev/null; ' % watch_file) if watch_file else ""
        loop = (
            "end=$(( $(date +%%s) + %d )); while [ ! -e %s ] && [ $(date +%%s) -lt $end ]; do "
            "ps -eww -o args=; %secho %s; sleep %s; done" % (BOUND_S, STOP, stat, MARK, INTERVAL_S)
        )
        argv = ["docker", "exec", node, "sh", "-c", loop] if node else ["sh", "-c", loop]
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, errors="replace"
        )

    def run(self):
        sample = []
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            if line != MARK:
                sample.append(line)
                continue
            self.samples += 1
            for args in sample:
                if args.startswith("@@mode "):
                    self.file_modes.add(args[len("@@mode ") :])
                    continue
                for name, value in self.needles.items():
                    if value in args:
                        self.hits.append("%s: %s in %s" % (self.node or "controller", name, args.split(" ", 1)[0]))
                if "setup_worker.py" in args:
                    self.setup_workers += 1
                    self.route_seen += "RLINFRA_SECRETS_FILE" in args
                if args.startswith("ray::Rollout"):
                    self.actors += 1
            sample = []


def playbook(name, *extra, env=None):
    args = [venv_bin("ansible-playbook"), "-i", str(SANDBOX_INVENTORY), name]
    for item in extra:
        args += ["-e", item]
    full_env = {k: v for k, v in os.environ.items() if k not in SECRETS and not k.startswith("ANSIBLE_")}
    full_env.update(ANSIBLE_NOCOLOR="1", **(env or {}))
    proc = subprocess.run(args, cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=1200)
    proc.output = proc.stdout + proc.stderr
    return proc


def test_no_secret_in_any_argv_on_any_node(sandbox, tmp_path):
    nodes = sandbox_nodes()
    head = next(n["name"] for n in nodes if n["role"] == "head")
    units = {n["name"]: "ray-head" if n["name"] == head else "ray-worker" for n in nodes}
    if any(on_node(node, "systemctl is-active " + unit).strip() != "active" for node, unit in units.items()):
        site = playbook("site.yml")
        assert site.returncode == 0, site.output[-4000:]

    # smoke, with WANDB_API_KEY as a second secret; its value comes from verl_job_secrets in a file.
    exp_dir = tmp_path / "experiments"
    shutil.copytree(ROOT / "experiments" / "smoke", exp_dir / "smoke")
    exp = yaml.safe_load((ROOT / "experiments" / "smoke.yml").read_text())
    exp["optional_secrets"] = ["HF_TOKEN", "WANDB_API_KEY"]
    (exp_dir / "smoke.yml").write_text(yaml.safe_dump(exp))
    extra = tmp_path / "vars.json"
    extra.touch(mode=0o600)
    extra.write_text(
        json.dumps(
            {
                "verl_job_secrets": {"WANDB_API_KEY": SECRETS["WANDB_API_KEY"]},
                "verl_job_checkpoint_root": CKPT_ROOT,
                "verl_job_experiments_dir": str(exp_dir),
            }
        )
    )

    samplers = [Sampler(n["name"], SECRETS, SECRETS_FILE if n["name"] == head else None) for n in nodes]
    samplers.append(Sampler(None, SECRETS))
    on_head = next(s for s in samplers if s.node == head)
    for s in samplers:
        s.start()
    started = time.monotonic()
    try:
        time.sleep(1)
        submit = playbook(
            "submit.yml", "exp=smoke", "run=" + RUN, "@" + str(extra), env={"HF_TOKEN": SECRETS["HF_TOKEN"]}
        )
        time.sleep(1)
    finally:
        for n in nodes:
            on_node(n["name"], "touch " + STOP)
        open(STOP, "w").close()
        for s in samplers:
            s.join(timeout=30)
            s.proc.kill()
        for n in nodes:
            on_node(n["name"], "rm -f " + STOP)
        os.unlink(STOP)
    elapsed = time.monotonic() - started
    assert submit.returncode == 0, submit.output[-4000:]

    for s in samplers:  # shown with -s / on failure
        print(
            "sampler %s: %d samples, %d setup_worker lines (%d with RLINFRA_SECRETS_FILE), %d rollout actor lines, "
            "%d hits in %.0fs"
            % (s.node or "controller", s.samples, s.setup_workers, s.route_seen, s.actors, len(s.hits), elapsed)
        )
    hits = [h for s in samplers for h in s.hits]
    assert not hits, hits
    # Not blind: many samples everywhere, and on every node the worker-setup command line that used to
    # carry the values (it carries the file's path now).
    for s in samplers:
        assert s.samples >= max(20, elapsed / 2), (s.node, s.samples, elapsed)
    for s in samplers[:-1]:
        assert s.setup_workers and s.route_seen, (s.node, s.setup_workers, s.route_seen)
        assert s.actors, s.node

    # Every node's rollout actor saw HF_TOKEN, the driver too.
    log = (ROOT / "artifacts" / "smoke" / (SID + ".log")).read_text()
    result = json.loads([ln for ln in log.splitlines() if ln.startswith("SMOKE_RESULT ")][-1].split(" ", 1)[1])
    digest = hashlib.sha256(SECRETS["HF_TOKEN"].encode()).hexdigest()
    assert result["hf_token_sha256"] == digest
    assert result["hf_token_seen_by_rollouts"] == len(nodes) == 3
    assert len(re.findall("HF_TOKEN sha256:" + digest, log)) == 1 + len(nodes)

    # The file was root's alone while the run lived, and went with the run.
    assert on_head.file_modes == {"600 root"}, on_head.file_modes
    after = on_node(head, f"stat -c '%a %U' {SECRETS_DIR} {SECRETS_DIR}/default; test -e {SECRETS_FILE} || echo gone")
    assert after == "700 root\n700 root\ngone\n", after
    for value in SECRETS.values():
        assert value not in submit.output
        assert value not in log
    on_node(head, "rm -rf " + CKPT_ROOT)
