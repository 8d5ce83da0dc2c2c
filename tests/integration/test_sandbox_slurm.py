"""The ``rlinfra.verl.slurm`` inventory against a real Slurm: slurmctld and slurmd (Debian's 22.05 packages, munge
for auth) in the sandbox's containers.

The test gives the nodes one munge key and one slurm.conf (every sandbox node is a Slurm node of partition ``rl``;
the head container also runs slurmctld and serves as the login node), starts the daemons, allocates the three
nodes with ``sbatch --wrap 'sleep infinity'`` and reads the inventory from that job as users do, the controller
running Slurm's client tools on the login node over SSH (it has none of its own):

* by job name, by id and from SLURM_JOB_ID: ray_head is the job's first node, ray_workers the others, one Ray
  cluster, the host variables (address, job id, partition, GPUs per node);
* site.yml runs on the allocated nodes through it (they are the sandbox's cluster: nothing changes);
* a pending job, an ended job, an unknown id, a name two jobs share and a controller without Slurm's tools each
  stop the run with one line.
Afterwards the daemons are stopped and their files removed.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import time

import yaml

from tests.fake_hyperbolic.testing import load_failures, unwrap, venv_bin
from tests.integration.conftest import ROOT, SANDBOX, sandbox_nodes

TAG = secrets.token_hex(3)
NAME = "rl-" + TAG


def on_node(node, script, check=True):
    proc = subprocess.run(
        ["docker", "exec", node, "sh", "-c", script], capture_output=True, text=True, timeout=180, check=False
    )
    assert not check or proc.returncode == 0, "%s: %s\n%s" % (node, script, proc.stderr)
    return proc.stdout


def slurm_conf(nodes, head):
    lines = [
        "ClusterName=sandbox",
        "SlurmctldHost=%s(%s)" % (head["name"], head["ip"]),
        "SlurmUser=slurm",
        "AuthType=auth/munge",
        "StateSaveLocation=/var/lib/slurm/slurmctld",
        "SlurmdSpoolDir=/var/lib/slurm/slurmd",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "SchedulerType=sched/backfill",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "MpiDefault=none",
        "ReturnToService=2",
        "SlurmdParameters=config_overrides",
        "SlurmctldTimeout=30",
        "SlurmdTimeout=30",
    ]
    lines += ["NodeName=%s NodeAddr=%s CPUs=1 State=UNKNOWN" % (n["name"], n["ip"]) for n in nodes]
    lines.append("PartitionName=rl Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


def start_slurm(nodes, head, tmp_path):
    key = os.urandom(1024)
    (tmp_path / "munge.key").write_bytes(key)
    (tmp_path / "slurm.conf").write_text(slurm_conf(nodes, head))
    for n in nodes:
        for f, dest in (("munge.key", "/etc/munge/munge.key"), ("slurm.conf", "/etc/slurm/slurm.conf")):
            subprocess.run(["docker", "cp", str(tmp_path / f), "%s:%s" % (n["name"], dest)], check=True)
        on_node(
            n["name"],
            "chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key && "
            "mkdir -p /var/lib/slurm/slurmd /var/lib/slurm/slurmctld && chown -R slurm:slurm /var/lib/slurm "
            "&& systemctl restart munge",
        )
    on_node(head["name"], "systemctl restart slurmctld")
    for n in nodes:
        on_node(n["name"], "systemctl restart slurmd")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        states = on_node(head["name"], "sinfo -h -N -o '%N %T'", check=False).split("\n")
        if len([s for s in states if s.strip().endswith("idle")]) == len(nodes):
            return
        time.sleep(1)
    raise AssertionError(
        "Slurm nodes not idle: %s\n%s"
        % (states, on_node(head["name"], "journalctl -u slurmctld -n 30 --no-pager", check=False))
    )


def stop_slurm(nodes, head):
    on_node(
        head["name"],
        "scancel --full --signal=KILL --user=root 2>/dev/null; scancel --user=root 2>/dev/null",
        check=False,
    )
    for n in nodes:
        on_node(
            n["name"],
            "systemctl stop slurmd slurmctld munge; rm -rf /etc/slurm/slurm.conf /etc/munge/munge.key "
            "/var/lib/slurm/slurmd/* /var/lib/slurm/slurmctld/*",
            check=False,
        )


def sbatch(head, *args):
    out = on_node(head["name"], "sbatch --parsable -o /dev/null %s --wrap 'sleep infinity'" % " ".join(args))
    return out.strip().split(";")[0]


def wait_state(head, job, want, reason=None):
    """Until squeue shows the job in state ``want`` (and with ``reason``: the scheduler sets it a moment later)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        state = on_node(head["name"], "squeue -h -j %s -o '%%T %%r'" % job, check=False).strip()
        if state.split()[:1] == [want] and (reason is None or state.split()[1:] == [reason]):
            return
        time.sleep(0.5)
    raise AssertionError("job %s is %r, not %s %s" % (job, state, want, reason or ""))


def inventory(tmp_path, head, options, env=None):
    inv = tmp_path / "inv"
    (inv / "group_vars").mkdir(parents=True, exist_ok=True)
    key = json.loads((SANDBOX / "state.json").read_text())["ssh_key"]
    (inv / "group_vars" / "all.yml").write_text(
        yaml.safe_dump(
            {
                "ansible_user": "root",
                "ansible_ssh_private_key_file": key,
                "ansible_python_interpreter": "/usr/bin/python3",
                "python_env_offline": True,
                "python_env_wheelhouse": "/data/wheelhouse",
            }
        )
    )
    login = {
        "login_host": "root@" + head["ip"],
        "ssh_args": [
            "-i",
            key,
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "LogLevel=ERROR",
        ],
    }
    (inv / "rl.slurm.yml").write_text(yaml.safe_dump(dict({"plugin": "rlinfra.verl.slurm"}, **dict(login, **options))))
    return inv


def run(argv, env=None):
    full = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "SLURM_"))}
    full.update(ANSIBLE_NOCOLOR="1", **(env or {}))
    proc = subprocess.run(argv, cwd=ROOT, env=full, capture_output=True, text=True, timeout=1200, check=False)
    proc.output = proc.stdout + proc.stderr
    return proc


def listed(inv, env=None):
    proc = run([venv_bin("ansible-inventory"), "-i", str(inv), "--list"], env)
    assert proc.returncode == 0, proc.output[-3000:]
    return unwrap(json.loads(proc.stdout))


def one_error(inv, env=None):
    """The plugin's one line for a source it cannot load (AnsibleParserError: Ansible warns it and lists no host; the
    playbooks that need a cluster then stop at their first task)."""
    proc = run([venv_bin("ansible-inventory"), "-i", str(inv), "--list"], env)
    errors = load_failures(proc.stderr)
    assert len(errors) == 1 and "Traceback" not in proc.output, proc.output[-3000:]
    assert not unwrap(json.loads(proc.stdout))["_meta"]["hostvars"], proc.stdout[-2000:]
    return " ".join(errors[0].split())


def test_slurm_job_becomes_the_ray_cluster(sandbox, tmp_path):
    nodes = sandbox_nodes()
    head = next(n for n in nodes if n["role"] == "head")
    names = [n["name"] for n in nodes]
    try:
        start_slurm(nodes, head, tmp_path)
        job = sbatch(head, "-N", str(len(nodes)), "--job-name", NAME)
        wait_state(head, job, "RUNNING")

        # By name: groups, one cluster, the host variables.
        inv = inventory(tmp_path, head, {"job_name": NAME, "ray_cluster": "default"})
        raw = json.loads(run([venv_bin("ansible-inventory"), "-i", str(inv), "--list"]).stdout)
        assert raw["_meta"]["hostvars"][names[0]]["slurm_job_name"] == {"__ansible_unsafe": NAME}  # never templated
        got = listed(inv)
        assert got["ray_head"]["hosts"] == [names[0]] and sorted(got["ray_workers"]["hosts"]) == sorted(names[1:])
        hv = got["_meta"]["hostvars"]
        for n in nodes:
            assert {
                k: hv[n["name"]][k]
                for k in (
                    "ansible_host",
                    "slurm_job_id",
                    "slurm_job_name",
                    "slurm_partition",
                    "slurm_gpus_per_node",
                    "ray_cluster",
                )
            } == {
                "ansible_host": n["ip"],
                "slurm_job_id": job,
                "slurm_job_name": NAME,
                "slurm_partition": "rl",
                "slurm_gpus_per_node": 0,
                "ray_cluster": "default",
            }

        # site.yml on the allocated nodes, through this inventory.
        site = run([venv_bin("ansible-playbook"), "-i", str(inv), "site.yml"])
        assert site.returncode == 0, site.output[-4000:]
        assert re.search(r"Cluster '+default'+: %d nodes alive" % len(nodes), site.stdout), site.stdout[-2000:]
        recap = re.findall(r"^(\S+)\s+: ok=\d+\s+changed=(\d+)", site.stdout, re.M)
        # The sandbox's own cluster: nothing to change (localhost: site.yml's first play, the switches, changes nothing).
        assert sorted(recap) == sorted([("localhost", "0")] + [(n, "0") for n in names]), recap

        # By id, and the allocation this runs in; without ray_cluster the cluster is the job's name.
        by_id = listed(inventory(tmp_path, head, {"job_id": job}))
        assert by_id["ray_head"]["hosts"] == [names[0]]
        assert {h["ray_cluster"] for h in by_id["_meta"]["hostvars"].values()} == {NAME}
        from_env = listed(inventory(tmp_path, head, {}), env={"SLURM_JOB_ID": job})
        assert sorted(from_env["_meta"]["hostvars"]) == sorted(names)

        # The inventory cache (as for the Hyperbolic plugin): a cached job is listed without asking Slurm.
        cache = {
            "job_id": job,
            "cache": True,
            "cache_plugin": "ansible.builtin.jsonfile",
            "cache_connection": str(tmp_path / "cache"),
            "cache_timeout": 600,
        }
        assert sorted(listed(inventory(tmp_path, head, cache))["_meta"]["hostvars"]) == sorted(names)
        gone = inventory(tmp_path, head, cache)
        conf = yaml.safe_load((gone / "rl.slurm.yml").read_text())
        (gone / "rl.slurm.yml").write_text(
            yaml.safe_dump(dict(conf, login_host="root@127.0.0.1", ssh_args=["-p", "1", "-o", "ConnectTimeout=2"]))
        )
        assert sorted(listed(gone)["_meta"]["hostvars"]) == sorted(names)
        flushed = run([venv_bin("ansible-inventory"), "-i", str(gone), "--list", "--flush-cache"])
        assert any(
            "cannot reach the login node root@127.0.0.1 over ssh" in line for line in load_failures(flushed.stderr)
        ), flushed.output[-3000:]

        # Pending, two of a name, ended, unknown: one line each.
        pending = sbatch(head, "-N", str(len(nodes)), "--job-name", NAME)
        wait_state(head, pending, "PENDING", "Resources")
        line = one_error(inventory(tmp_path, head, {"job_id": pending}))
        assert (
            "Slurm job %s (%s) is PENDING (reason: Resources): it has no nodes yet; wait until it runs"
            % (pending, NAME)
            in line
        )
        line = one_error(inventory(tmp_path, head, {"job_name": NAME}))
        assert "2 Slurm jobs are named '%s' (%s RUNNING, %s PENDING): set job_id" % (NAME, job, pending) in line
        on_node(head["name"], "scancel %s %s" % (job, pending))
        line = one_error(inventory(tmp_path, head, {"job_id": job}))
        assert re.search(
            r"Slurm job %s \(%s\) has ended \((CANCELLED|COMPLETING|COMPLETED)\): allocate again" % (job, NAME), line
        ), line
        line = one_error(inventory(tmp_path, head, {"job_id": "987654"}))
        assert "Slurm job 987654 is unknown to slurmctld" in line

        # A controller without Slurm's tools and no login node.
        plain = tmp_path / "plain"
        plain.mkdir()
        (plain / "x.slurm.yml").write_text("plugin: rlinfra.verl.slurm\njob_id: '%s'\n" % job)
        line = one_error(plain, env={"PATH": os.path.dirname(venv_bin("ansible-inventory")) + ":/usr/bin:/bin"})
        assert "scontrol is not installed here: install Slurm's client tools (slurm-client) or set login_host" in line
    finally:
        stop_slurm(nodes, head)
