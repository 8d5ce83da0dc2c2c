"""Safe upgrades on the sandbox: a new package set under a running job.

With a `smoke` job running, site.yml given a changed python_env_packages (one package added) refuses before changing anything, in one line naming the job and the two ways on; a typo in
ray_restart_running_jobs is one error line and nothing done; with -e ray_restart_running_jobs=true it
installs the set, restarts Ray on every node (new main PIDs) and leaves every node with the same
fingerprint. The cluster is then put back as other tests expect it (the job stopped, the default package
set installed exactly: the added package is removed again, site.yml converged).

Two converging site.yml runs (the forced upgrade, the restore), each restarting Ray; the start is the
sandbox's converged default set (a no-op run when an earlier test converged it).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess

from tests.fake_hyperbolic.testing import venv_bin
from tests.integration.conftest import ROOT, SANDBOX_INVENTORY, sandbox_nodes

TAG = secrets.token_hex(4)
RAY = "ray[default]==2.60.0"  # the default python_env_packages (and sandbox/node-requirements.txt)
NEW_SET = [RAY, "mdurl==0.1.2"]  # mdurl added: its wheel is in the sandbox's wheelhouse
CKPT_ROOT = "/data/checkpoints-upg-" + TAG
VENV = "/opt/rlinfra/venv"


def playbook(name, *extra):
    args = [venv_bin("ansible-playbook"), "-i", str(SANDBOX_INVENTORY), name]
    for item in extra:
        args += ["-e", item if isinstance(item, str) else json.dumps(item)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200, check=False)
    proc.output = proc.stdout + proc.stderr
    return proc


def packages(pins):
    return {"python_env_packages": pins}


def on_node(node, script):
    return subprocess.run(
        ["docker", "exec", node, "sh", "-c", script], capture_output=True, text=True, timeout=120, check=False
    ).stdout


def snapshot(nodes):
    """Per node: the Ray service's main PID, the installed set, and the files a converge writes."""
    out = {}
    for n in nodes:
        unit = "ray-head" if n["role"] == "head" else "ray-worker"
        out[n["name"]] = {
            "pid": on_node(n["name"], "systemctl show -p MainPID --value %s.service" % unit).strip(),
            "frozen": on_node(n["name"], "%s/bin/uv pip freeze --python %s/bin/python 2>/dev/null" % (VENV, VENV)),
            "files": on_node(
                n["name"], "sha256sum /etc/ray/* /etc/systemd/system/ray-*.service %s/rlinfra-* 2>&1" % VENV
            ),
        }
    return out


def error_lines(output):
    return [line for line in output.splitlines() if line.startswith("[ERROR]")]


def recap(output):
    return {
        m.group(1): (int(m.group(2)), int(m.group(3)))
        for m in re.finditer(r"^(\S+)\s+: ok=\d+\s+changed=(\d+)\s+unreachable=\d+\s+failed=(\d+)", output, re.M)
    }


def test_upgrade_refused_under_running_job_then_forced(sandbox):
    nodes = sandbox_nodes()
    names = [n["name"] for n in nodes]
    head = next(n["name"] for n in nodes if n["role"] == "head")
    subprocess.run([str(ROOT / "sandbox" / "sandbox.sh"), "wheelhouse"], cwd=ROOT, check=True, capture_output=True)
    assert on_node(head, "ls /data/wheelhouse/mdurl-0.1.2-*.whl").count(".whl") == 1

    start = playbook("site.yml")
    assert start.returncode == 0, start.output[-4000:]
    run = "upg-" + TAG
    sid = "rlinfra-smoke-default-" + run
    try:
        slow = {
            "verl_job_checkpoint_root": CKPT_ROOT,
            "verl_job_params": {"trainer": {"total_training_steps": 900, "save_freq": 300, "step_sleep_s": 1.0}},
        }
        submit = playbook("submit.yml", "exp=smoke", "run=" + run, "wait=false", slow)
        assert submit.returncode == 0, submit.output[-4000:]
        before = snapshot(nodes)
        assert all("ray==2.60.0" in before[n]["frozen"] and "mdurl" not in before[n]["frozen"] for n in names)

        # The new set would restart Ray everywhere: refused before anything changes, in one line.
        refused = playbook("site.yml", packages(NEW_SET))
        assert refused.returncode != 0, refused.output[-4000:]
        (line,) = error_lines(refused.output)
        assert "Refusing to restart Ray under a running job, nothing was changed" in line, line
        assert sid in line and "python_env" in line and all(n in line for n in names), line
        assert "ansible-playbook stop.yml -e exp=smoke -e run=%s" % run in line, line
        assert "-e ray_restart_running_jobs=true" in line, line
        assert all(changed == 0 for changed, _ in recap(refused.output).values()), refused.output[-2000:]
        assert snapshot(nodes) == before

        # A typo in the flag is an error, never a silent false (nor true).
        typo = playbook("site.yml", "ray_restart_running_jobs=treu", packages(NEW_SET))
        assert typo.returncode != 0, typo.output[-4000:]
        (line,) = error_lines(typo.output)
        assert "ray_restart_running_jobs must be true or false" in line and "'treu'" in line, line
        assert snapshot(nodes) == before

        forced = playbook("site.yml", "ray_restart_running_jobs=true", packages(NEW_SET))
        assert forced.returncode == 0, forced.output[-4000:]
        assert sid in " ".join(forced.output.split()), forced.output[-4000:]  # the warning names the job it ends
        after = snapshot(nodes)
        for n in names:
            assert after[n]["pid"] not in ("", "0", before[n]["pid"]), (n, before[n]["pid"], after[n]["pid"])
            assert "mdurl==0.1.2" in after[n]["frozen"], after[n]["frozen"]
        prints = {n: on_node(n, "head -1 %s/rlinfra-fingerprint.txt" % VENV).strip() for n in names}
        assert len(set(prints.values())) == 1 and len(prints[head]) == 64, prints
    finally:
        # Other tests share the sandbox: no job left, the default set, a converged cluster.
        playbook("stop.yml", "exp=smoke", "run=" + run)
        restore = playbook("site.yml")
        on_node(head, "rm -rf " + CKPT_ROOT)
    assert restore.returncode == 0, restore.output[-4000:]
    restored = snapshot(nodes)
    # Exact install: the package the default set no longer names is gone again.
    assert all("mdurl" not in restored[n]["frozen"] and "ray==2.60.0" in restored[n]["frozen"] for n in names)
