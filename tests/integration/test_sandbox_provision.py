"""From nothing to a cluster and back to nothing, on the sandbox: the fake Hyperbolic API rents out
the sandbox's own containers (a rented instance answers SSH at a container's address). On the current on-demand API
(the default) its rental options list 8 x h100 in us-east-1 at $25.52/h; on the v1 marketplace it lists two machines.

provision.yml -e nodes=3 -e gpu=H100 rents three, waits for SSH and builds Ray cluster 'prov' on them with site.yml,
keeping the rentals' record (with their prices) on the controller and on the head; the inventory plugin then lists
them (head prov-0, with their price); a second run rents nothing and changes nothing; teardown.yml -e release=true
stops Ray and releases exactly those three, and the records go; the inventory is empty again (the v1 marketplace: the
module and the inventory source alone, the build being the same). The API
key never shows. Then the idle guard on the sandbox's own cluster (tagged 'default' through the fake API): with
a job running it releases nothing; once the job has ended longer ago than the limit it stops Ray and releases
the cluster's instances, saying why in the journal. The sandbox is converged again afterwards.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time

import pytest
import yaml

from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic.client import HyperbolicClient
from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic.rent import Rent, ssh_banner
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.client import RayClient
from tests.fake_hyperbolic.server import FakeHyperbolic, machine_item, rental_option
from tests.fake_hyperbolic.testing import HYPERBOLIC_TEST_KEY, unwrap
from tests.integration.conftest import ROOT, SANDBOX, report_of, sandbox_nodes, sandbox_playbook, venv_bin
from tests.integration.test_sandbox_code import gateway
from tests.integration.test_sandbox_firewall import recap
from tests.integration.test_sandbox_job import leaks, on_node

MACHINES = [
    machine_item("sbx-node-a", cluster="sandbox-a", gpus_total=16, cents=199),
    machine_item("sbx-node-b", cluster="sandbox-b", gpus_total=8, cents=249),
]


def flat(text):
    return " ".join(text.split()).replace("''", "'")


def inventory_dir(tmp_path, url, source="marketplace"):
    inv = tmp_path / "inventory"
    (inv / "group_vars").mkdir(parents=True)
    (inv / "prov.hyperbolic.yml").write_text(
        yaml.safe_dump(
            {
                "plugin": "rlinfra.verl.hyperbolic",
                "api_url": url,
                "sources": [source],
                "name_pattern": "prov-*",
                "cluster_from": r"^(?P<cluster>.+)-\d+$",
                "retries": 1,
                "retry_backoff": 0.1,
            }
        )
    )
    (inv / "group_vars" / "all.yml").write_text(
        yaml.safe_dump(
            {
                "ansible_python_interpreter": "/usr/bin/python3",
                "python_env_offline": True,
                "python_env_wheelhouse": "/data/wheelhouse",
                "ansible_ssh_private_key_file": str(SANDBOX / "id_ed25519"),
            }
        )
    )
    return inv


def env_for(url):
    return {"HYPERBOLIC_API_KEY": HYPERBOLIC_TEST_KEY, "HYPERBOLIC_API_URL": url}


def run(name, inv, *extra, url):
    args = [venv_bin("ansible-playbook"), "-i", str(inv), name]
    for item in extra:
        args += ["-e", item]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "HYPERBOLIC_"))}
    env.update(ANSIBLE_NOCOLOR="1", **env_for(url))
    proc = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    proc.output = proc.stdout + proc.stderr
    return proc


def listed(inv, url):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "HYPERBOLIC_"))}
    env.update(env_for(url))
    proc = subprocess.run(
        [venv_bin("ansible-inventory"), "-i", str(inv), "--list"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return unwrap(json.loads(proc.stdout))


def creates_of(fake, api):
    path = "/v2/on-demand/virtual-machine-rentals" if api == "on_demand" else "/v1/marketplace/instances/create"
    return len([r for r in fake.requests if r[0] == "POST" and r[1] == path])


def active_of(fake, api):
    return fake.active_rentals() if api == "on_demand" else fake.rented


def test_rent_list_release_on_the_marketplace(sandbox, tmp_path):
    """The v1 marketplace, through the module provision.yml and teardown.yml call with api=marketplace and the
    inventory plugin's marketplace source: three rented, listed as cluster prov with the record kept, a second call
    rents nothing, state=absent releases exactly those. The build that follows a rental is the API's no more than
    on_demand's (test_rent_build_release), and is not run twice."""
    nodes = sandbox_nodes()
    records = tmp_path / "records"
    with FakeHyperbolic(api_key=HYPERBOLIC_TEST_KEY) as fake:
        fake.set_machines(MACHINES, host_pool=[(n["ip"], 22, "root") for n in nodes])
        inv = inventory_dir(tmp_path, fake.url, source="marketplace")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "HYPERBOLIC_"))}
        env.update(ANSIBLE_NOCOLOR="1", **env_for(fake.url))

        def module(state):
            args = {"api": "marketplace", "label": "prov", "state": state, "record": str(records / "prov.json")}
            if state == "present":
                args.update(count=3, gpu_model="H100")
            proc = subprocess.run(
                [
                    venv_bin("ansible"),
                    "-i",
                    "localhost,",
                    "localhost",
                    "-c",
                    "local",
                    "-e",
                    "ansible_python_interpreter=" + venv_bin("python"),
                    "-m",
                    "rlinfra.verl.hyperbolic_instance",
                    "-a",
                    json.dumps(args),
                ],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
            assert HYPERBOLIC_TEST_KEY not in proc.stdout + proc.stderr
            return proc.stdout

        module("present")
        assert len(fake.rented) == 3 and creates_of(fake, "marketplace") == 3
        record = json.loads((records / "prov.json").read_text())
        assert sorted(r["name"] for r in record["rentals"].values()) == ["prov-0", "prov-1", "prov-2"]
        assert {r["api"] for r in record["rentals"].values()} == {"marketplace"}
        data = listed(inv, fake.url)
        assert data["ray_head"]["hosts"] == ["prov-0"] and sorted(data["ray_workers"]["hosts"]) == ["prov-1", "prov-2"]
        assert sorted(v["ansible_host"] for v in data["_meta"]["hostvars"].values()) == sorted(n["ip"] for n in nodes)
        again = module("present")
        assert "changed: false" in again and "rented: []" in again and creates_of(fake, "marketplace") == 3
        module("absent")
        assert fake.rented == [] and len(fake.terminated) == 3
        left = json.loads((records / "prov.json").read_text()) if (records / "prov.json").exists() else {}
        assert not left.get("rentals"), left


@pytest.mark.parametrize("api", ["on_demand"])
def test_rent_build_release(sandbox, tmp_path, api):
    nodes = sandbox_nodes()
    head = next(n for n in nodes if n["role"] == "head")
    records = tmp_path / "records"
    with FakeHyperbolic(api_key=HYPERBOLIC_TEST_KEY) as fake:
        pool = [(n["ip"], 22, "root") for n in nodes]
        if api == "on_demand":
            fake.set_options([rental_option("h100", 8, "us-east-1", cents=2552)], host_pool=pool)
        else:
            fake.set_machines(MACHINES, host_pool=pool)
        inv = inventory_dir(tmp_path, fake.url, source=api)
        switches = ["nodes=3", "gpu=H100", "label=prov", "hyperbolic_record_dir=%s" % records] + (
            ["api=marketplace"] if api == "marketplace" else []
        )
        try:
            first = run("provision.yml", inv, *switches, url=fake.url)
            assert first.returncode == 0, first.output[-4000:]
            assert len(active_of(fake, api)) == 3 and HYPERBOLIC_TEST_KEY not in first.output
            assert re.search(r"Cluster 'prov': 3 nodes alive", flat(first.output)), first.output[-3000:]
            record = json.loads((records / "prov.json").read_text())
            assert sorted(r["name"] for r in record["rentals"].values()) == ["prov-0", "prov-1", "prov-2"]
            assert {r["api"] for r in record["rentals"].values()} == {api}
            on_head = on_node(
                head["name"], "stat -c '%a %U' /etc/rlinfra/hyperbolic-prov.json; cat /etc/rlinfra/hyperbolic-prov.json"
            )
            assert on_head.startswith("600 root\n") and json.loads(on_head.split("\n", 1)[1]) == record

            data = listed(inv, fake.url)
            assert data["ray_head"]["hosts"] == ["prov-0"] and sorted(data["ray_workers"]["hosts"]) == [
                "prov-1",
                "prov-2",
            ]
            hostvars = data["_meta"]["hostvars"]
            assert {h: v["ray_cluster"] for h, v in hostvars.items()} == {
                "prov-0": "prov",
                "prov-1": "prov",
                "prov-2": "prov",
            }
            assert sorted(v["ansible_host"] for v in hostvars.values()) == sorted(n["ip"] for n in nodes)
            if api == "on_demand":  # the API's price of each rental, as the run's cost reads it
                assert {v["hyperbolic_cost_per_hour"] for v in hostvars.values()} == {25.52}
                assert {r["cost_per_hour"] for r in record["rentals"].values()} == {25.52}
                assert fake.od_bodies == [
                    {"gpuType": "h100", "gpuCount": 8, "region": "us-east-1", "label": "prov-%d" % n} for n in range(3)
                ]

            creates = creates_of(fake, api)
            again = run("provision.yml", inv, *switches, url=fake.url)
            assert again.returncode == 0, again.output[-4000:]
            assert creates_of(fake, api) == creates == 3
            assert set(recap(again.output).values()) == {0}, again.output[-3000:]

            down = run(
                "teardown.yml",
                inv,
                "release=true",
                "teardown_stop_jobs=true",
                "hyperbolic_record_dir=%s" % records,
                url=fake.url,
            )
            assert down.returncode == 0, down.output[-4000:]
            assert active_of(fake, api) == []
            assert len(fake.od_terminated if api == "on_demand" else fake.terminated) == 3
            assert not (records / "prov.json").exists()
            assert "ray_head" not in listed(inv, fake.url) or not listed(inv, fake.url)["ray_head"].get("hosts")
            for n in nodes:
                assert (
                    on_node(n["name"], "ls /etc/systemd/system/ray-*.service /etc/rlinfra 2>/dev/null").strip() == ""
                ), n["name"]
        finally:
            # A run that failed half-way leaves the label's record on the head: not for the next test to find.
            on_node(head["name"], "rm -f /etc/rlinfra/hyperbolic-prov.json; rmdir /etc/rlinfra 2>/dev/null; true")
            restore = sandbox_playbook("site.yml")
            assert restore.returncode == 0, restore.output[-4000:]


def test_idle_guard_keeps_a_busy_cluster_and_releases_an_idle_one(sandbox):
    nodes = sandbox_nodes()
    head = next(n for n in nodes if n["role"] == "head")
    with FakeHyperbolic(api_key=HYPERBOLIC_TEST_KEY, host=gateway()) as fake:
        fake.set_machines(MACHINES, host_pool=[(n["ip"], 22, "root") for n in nodes])
        # What provision.yml would have rented for the sandbox's cluster ("default"): its own three containers.
        Rent(HyperbolicClient(HYPERBOLIC_TEST_KEY, fake.url)).present("default", 3, gpu_model="H100")
        rented = sorted(i["item"]["id"] for i in fake.rented)
        guard = ("ray_head_idle_release_after=10", "ray_head_idle_check_every=3600")
        try:
            site = sandbox_playbook("site.yml", *guard, env=env_for(fake.url))
            assert site.returncode == 0, site.output[-4000:]
            assert on_node(head["name"], "systemctl is-enabled rlinfra-idle-guard.timer").strip() == "enabled"
            assert on_node(head["name"], "stat -c '%a %U' /etc/rlinfra/idle-guard.json").strip() == "600 root"
            assert HYPERBOLIC_TEST_KEY not in site.output and leaks(head["name"], [HYPERBOLIC_TEST_KEY]) == []

            token = on_node(head["name"], "cat /etc/ray/auth_token").strip()
            client = RayClient("http://%s:8265" % head["ip"], token=token)
            sid = "idle-guard-%d" % int(time.time())
            client.submit_job(sid, "sleep 600")
            deadline = time.monotonic() + 120
            while (client.get_job(sid) or {}).get("status") not in ("RUNNING",) and time.monotonic() < deadline:
                time.sleep(1)
            on_node(head["name"], "systemctl start rlinfra-idle-guard.service")
            journal = on_node(head["name"], "journalctl -u rlinfra-idle-guard.service -o cat --no-pager")
            assert "idle guard (default): busy: job(s) %s running or pending; nothing to do" % sid in journal, journal[
                -2000:
            ]
            assert fake.terminated == [] and on_node(head["name"], "systemctl is-active ray-head").strip() == "active"

            client.stop_job(sid)
            while (client.get_job(sid) or {}).get("status") not in (
                "STOPPED",
                "FAILED",
            ) and time.monotonic() < deadline:
                time.sleep(1)
            time.sleep(11)
            on_node(head["name"], "systemctl start rlinfra-idle-guard.service")
            journal = on_node(head["name"], "journalctl -u rlinfra-idle-guard.service -o cat --no-pager")
            assert re.search(
                r"idle guard \(default\): idle for \d+s \(the last job, %s, ended \d+s ago\), at or over the "
                r"limit of 10s" % sid,
                journal,
            ), journal[-2000:]
            assert "idle guard (default): Ray stopped" in journal
            assert "idle guard (default): released %s" % ", ".join(rented) in journal, journal[-2000:]
            assert sorted(fake.terminated) == rented and fake.rented == []
            assert on_node(head["name"], "systemctl is-active ray-head").strip() != "active"
            assert HYPERBOLIC_TEST_KEY not in journal
        finally:
            restore = sandbox_playbook("site.yml")
            assert restore.returncode == 0, restore.output[-4000:]
            assert (
                on_node(
                    head["name"], "ls /etc/systemd/system/rlinfra-idle-guard.timer 2>&1; ls /etc/rlinfra 2>&1"
                ).count("No such file")
                == 2
            )


def smoke_experiment(tmp_path, prefix, keys, **trainer):
    """experiments/smoke.yml under a fresh name in tmp_path, with ``keys`` set and the trainer's params updated:
    (tag, name, experiments dir, the experiment's data)."""
    tag = "%d" % (time.time() * 1000 % 10**9)
    name = prefix + "-" + tag
    exp_dir = tmp_path / "experiments"
    exp_dir.mkdir()
    shutil.copytree(ROOT / "experiments" / "smoke", exp_dir / "smoke")
    data = yaml.safe_load((ROOT / "experiments" / "smoke.yml").read_text())
    data.update(keys)
    data["params"]["trainer"].update(trainer)
    (exp_dir / (name + ".yml")).write_text(yaml.safe_dump(data))
    return tag, name, exp_dir, data


def test_on_end_release_gives_the_machines_back_once_the_run_succeeded(sandbox, tmp_path):
    """An experiment with on_end: release on the sandbox's cluster (rented as 'default' through the fake API): once the
    run SUCCEEDED, its supervisor on the head gives every rental back after the grace, with the key it keeps root-only;
    the summary and the run report say when; the key shows nowhere."""
    nodes = sandbox_nodes()
    head = next(n for n in nodes if n["role"] == "head")
    tag, name, exp_dir, dummy = smoke_experiment(
        tmp_path,
        "onend",
        dict(on_end="release", wait={"progress_interval": 3, "poll_interval": 1, "timeout": 600}),
        total_training_steps=4,
        save_freq=2,
        step_sleep_s=0.2,
    )
    sid = "rlinfra-%s-default" % name
    with FakeHyperbolic(api_key=HYPERBOLIC_TEST_KEY, host=gateway()) as fake:
        fake.set_machines(MACHINES, host_pool=[(n["ip"], 22, "root") for n in nodes])
        Rent(HyperbolicClient(HYPERBOLIC_TEST_KEY, fake.url)).present("default", 3, gpu_model="H100")
        rented = sorted(i["item"]["id"] for i in fake.rented)
        run = sandbox_playbook(
            "submit.yml",
            "exp=" + name,
            json.dumps(
                {
                    "verl_job_experiments_dir": str(exp_dir),
                    "verl_job_checkpoint_root": "/data/checkpoints-onend-" + tag,
                    "verl_job_release_grace": 5,
                }
            ),
            env=env_for(fake.url),
        )
        out = flat(run.output)
        assert run.returncode == 0, out[-4000:]
        assert "on_end: release: the rentals of cluster default are given back in 5s" in out, out[-3000:]
        assert re.search(
            r"given back: %s at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(on_end: release\)" % re.escape(", ".join(rented)),
            out,
        ), out[-3000:]
        assert sorted(fake.terminated) == rented and fake.rented == []
        html = report_of(name)[1].read_text()
        assert "machines given back" in html and "(on_end: release)" in html, html[:3000]
        assert (
            on_node(head["name"], "stat -c '%%a %%U' /var/lib/rlinfra/runs/%s/config.json" % sid).strip() == "600 root"
        )
        assert HYPERBOLIC_TEST_KEY not in run.output and leaks(head["name"], [HYPERBOLIC_TEST_KEY]) == []
        # A bad word is refused before anything is submitted.
        typo = sandbox_playbook(
            "submit.yml",
            "exp=" + name,
            "on_end=relase",
            json.dumps({"verl_job_experiments_dir": str(exp_dir)}),
            env=env_for(fake.url),
        )
        assert typo.returncode != 0 and "on_end must be one of keep, release, release_always" in flat(typo.output)


BAD_GPU_XML = ROOT / "tests" / "unit" / "fixtures" / "gpu" / "nvidia_smi_q_x_v100s_8gpu_drv460_TRIMMED_VARIANT_bad.xml"
STAND_IN = '#!/bin/sh\n[ "$1 $2" = "-q -x" ] && cat /usr/local/share/rlinfra-test/nvidia.xml && exit 0\nexit 9\n'


def quiet(node):
    """Ray off on a sandbox node, at once: SIGKILL first, as a stop would drain for 30 s toward a head that already
    declared the node dead."""
    on_node(
        node["name"],
        "systemctl disable ray-worker ray-head 2>/dev/null; systemctl kill -s KILL ray-worker "
        "ray-head 2>/dev/null; systemctl stop ray-worker ray-head 2>/dev/null; systemctl reset-failed; true",
    )


def test_unfit_then_gone_for_good_machines_are_replaced_and_a_cluster_gone_whole_is_rented_again(sandbox, tmp_path):
    """Three ways a rented machine is replaced, on one cluster provision.yml rents (2 of a pool of 3 containers): they
    share the rented cluster and the sandbox's restore.

    0. Unfit at provision time: provision.yml -e replace_unfit=true, the second rental a machine whose nvidia-smi (a
       stand-in printing a real ``-q -x`` document with uncorrectable ECC errors) shows a bad GPU. Round 1 names it,
       gives its rental back (the fake wipes that container, as a released machine is gone: it goes back to the pool)
       and rents another under the same name; the cluster converges on it; round 2 finds every node fit.
    1. A worker gone for good, with recovery.replace: a run submitted with wait=false (nobody watches it); once it
       has a checkpoint the worker's container is killed and the fake API lists its rental as terminated (the provider
       ended it). The supervisor on the head waits replace_after, finds the rental gone, rents one of the same spec
       under the same name (the wiped machine of step 0), converges the cluster from the head with the collection's
       site.yml (its own ansible-core), and resumes the run on 2 nodes from the checkpoint: SUCCEEDED. The head's
       record names the new rental, not the lost one.
    2. The whole cluster gone: a second run, wait=false; once it has a checkpoint the head's container is killed and
       its rental ended (the machine lost in step 1 is back as a fresh machine in the pool). submit.yml again: the
       inventory has no head for 'prov', so the controller rents it again with provision.yml (the record's spec),
       converges it, reads the inventory again and submits: the run resumes from the checkpoint on the shared volume
       and SUCCEEDS.

    No key in any output or in the head's process arguments. Then released, and the sandbox converged again."""
    nodes = sandbox_nodes()
    head = next(n for n in nodes if n["role"] == "head")
    bad, spare = [n for n in nodes if n["role"] != "head"]
    by_ip = {n["ip"]: n for n in nodes}
    records = tmp_path / "records"
    tag, name, exp_dir, data = smoke_experiment(
        tmp_path,
        "replace",
        dict(
            wait={"progress_interval": 5, "poll_interval": 1, "timeout": 1500},
            recovery={
                "max_restarts": 2,
                "backoff_s": 2,
                "node_wait_timeout": 300,
                "replace": True,
                "replace_after": 10,
                "replace_timeout": 900,
            },
        ),
        total_training_steps=24,
        save_freq=4,
        step_sleep_s=1.0,
    )
    sid = "rlinfra-%s-prov" % name
    on_node(
        bad["name"],
        "mkdir -p /usr/local/share/rlinfra-test && cat > /usr/local/share/rlinfra-test/nvidia.xml",
        stdin=BAD_GPU_XML.read_text(),
    )
    on_node(bad["name"], "cat > /usr/local/bin/nvidia-smi && chmod 755 /usr/local/bin/nvidia-smi", stdin=STAND_IN)

    def wipe(host):
        quiet(by_ip[host[0]])
        on_node(by_ip[host[0]]["name"], "rm -f /usr/local/bin/nvidia-smi /etc/ansible/facts.d/rlinfra_*.fact")

    with FakeHyperbolic(api_key=HYPERBOLIC_TEST_KEY, host=gateway()) as fake:
        fake.set_options(
            [rental_option("h100", 8, "us-east-1", cents=2552)],
            host_pool=[(n["ip"], 22, "root") for n in (head, bad, spare)],
        )
        fake.on_terminate = wipe
        inv = inventory_dir(tmp_path, fake.url, source="on_demand")
        common = ["hyperbolic_record_dir=%s" % records, "fitness_min_gbit=0.2", "fitness_ray_min_gbit=0.1"]
        try:
            # 0. Unfit at provision time.
            out = run(
                "provision.yml", inv, "nodes=2", "gpu=H100", "label=prov", "replace_unfit=true", *common, url=fake.url
            )
            text = flat(out.output)
            assert out.returncode == 0, out.output[-5000:]
            assert [b["label"] for b in fake.od_bodies] == ["prov-0", "prov-1", "prov-1"], fake.od_bodies
            assert len(fake.od_terminated) == 1
            assert re.search(r"round 1: replacing prov-1 = rental %d" % fake.od_terminated[0], text), text[-4000:]
            assert re.search(r"prov-1 GPU 3 \([0-9A-F:.]+\): \d+ uncorrectable ECC error", text), text[-4000:]
            assert "round 2: every node is fit, nothing to replace" in text, text[-4000:]
            assert re.search(r"Cluster 'prov': 2 nodes alive", text), text[-3000:]
            live = {r["record"]["label"]: r for r in fake.od_rentals if r["record"]["status"] != "Terminated"}
            assert {label: r["host"][0] for label, r in live.items()} == {"prov-0": head["ip"], "prov-1": spare["ip"]}
            names = sorted(r["name"] for r in json.loads((records / "prov.json").read_text())["rentals"].values())
            assert names == ["prov-0", "prov-1"]
            assert HYPERBOLIC_TEST_KEY not in out.output
            ids = {label: r["record"]["id"] for label, r in live.items()}
            worker, free = spare, bad  # the worker now, and the wiped machine back in the pool

            # 1. A worker gone for good.
            t0 = time.monotonic()
            submit = run(
                "submit.yml",
                inv,
                "exp=" + name,
                "cluster=prov",
                "wait=false",
                *common,
                json.dumps(
                    {
                        "verl_job_experiments_dir": str(exp_dir),
                        "verl_job_checkpoint_root": "/data/checkpoints-replace-" + tag,
                        "hyperbolic_replace_ssh_key": str(SANDBOX / "id_ed25519"),
                    }
                ),
                url=fake.url,
            )
            print("submit with the replace kit: %.1f s" % (time.monotonic() - t0))
            assert submit.returncode == 0, submit.output[-5000:]
            assert (
                on_node(
                    head["name"],
                    "stat -c '%a %U' /var/lib/rlinfra/cluster/prov/ssh_key "
                    "/var/lib/rlinfra/cluster/prov/inventory.json",
                ).split()
                == ["600", "root"] * 2
            )

            def said():
                text = on_node(head["name"], "cat /var/lib/rlinfra/runs/%s/state.json 2>/dev/null" % sid)
                return json.loads(text) if text.strip() else {}

            tracker = "/data/checkpoints-replace-%s/rlinfra_smoke/prov/%s/latest_checkpointed_iteration.txt" % (
                tag,
                name,
            )
            deadline = time.monotonic() + 300
            while not on_node(head["name"], "cat %s 2>/dev/null" % tracker).strip() and time.monotonic() < deadline:
                time.sleep(1)
            assert on_node(head["name"], "cat %s 2>/dev/null" % tracker).strip(), json.dumps(said())[-3000:]
            subprocess.run(["docker", "kill", worker["name"]], capture_output=True, check=True, timeout=60)
            fake.provider_terminates(ids["prov-1"])
            lost_at = time.time()
            deadline = time.monotonic() + 1200
            while not said().get("final") and time.monotonic() < deadline:  # bounded: a stuck replace fails here
                time.sleep(3)
            # The clean-up's lines come after the state that says the run ended (Supervisor.clean_up).
            deadline = time.monotonic() + 60
            while (
                "removed the replacement kit's SSH key" not in json.dumps(said().get("lines"))
                and time.monotonic() < deadline
            ):
                time.sleep(1)
            state = said()
            lines = " ".join(line[2] for line in state.get("lines") or [])
            assert (state.get("final") or {}).get("reason") == "succeeded", lines[-5000:]
            assert re.search(
                r"prov-1 \(%s\) still gone after 10s: replacing it \(recovery\.replace\)" % re.escape(worker["ip"]),
                lines,
            ), lines[-4000:]
            assert (
                "replace: prov-1 (rental %s, %s) is gone for good: the API no longer lists its rental (terminated)"
                % (ids["prov-1"], worker["ip"])
                in lines
            ), lines[-4000:]
            new = [
                r["record"]
                for r in fake.od_rentals
                if r["record"]["status"] != "Terminated" and r["record"]["label"] == "prov-1"
            ]
            assert len(new) == 1 and new[0]["id"] != ids["prov-1"], fake.od_rentals
            assert re.search(
                r"replace: rented prov-1 again: rental %s at %s:22" % (new[0]["id"], re.escape(free["ip"])), lines
            ), lines[-4000:]
            assert re.search(r"replace: site\.yml converged prov-0, prov-1 in \d+s", lines), lines[-4000:]
            assert re.search(
                r"attempt 2 \(%s-a2\) submitted .* resumes from checkpoint step \d+" % re.escape(sid), lines
            ), lines[-4000:]
            assert re.search(r"attempt 2 \(%s-a2\) resumed from checkpoint step \d+" % re.escape(sid), lines), lines[
                -4000:
            ]
            first_step = next(line for line in state["lines"] if "resumed from checkpoint step" in line[2])
            replaced_at = next(line for line in state["lines"] if "site.yml converged" in line[2])
            print(
                "permanent loss to the resumed attempt's first step: %.1f s (converged after %.1f s; replace_after 10)"
                % (first_step[1] - lost_at, replaced_at[1] - lost_at)
            )
            record = json.loads(on_node(head["name"], "cat /etc/rlinfra/hyperbolic-prov.json"))
            assert sorted(record["rentals"]) == sorted([str(ids["prov-0"]), str(new[0]["id"])]), record
            # The run over, the kit's key (it opens every node) and the API key leave the head.
            assert "removed the replacement kit's SSH key /var/lib/rlinfra/cluster/prov/ssh_key" in lines, lines[-3000:]
            assert "removed the API key from the run's config" in lines, lines[-3000:]
            assert on_node(head["name"], "test -e /var/lib/rlinfra/cluster/prov/ssh_key || echo gone").strip() == "gone"
            events = [e for e in state["dog"]["events"] if e["event"] == "replaced"]
            assert len(events) == 1 and events[0]["new"] == "prov-1" and events[0]["new_ip"] == free["ip"], events
            everything = out.output + submit.output + json.dumps(state)
            assert HYPERBOLIC_TEST_KEY not in everything and leaks(head["name"], [HYPERBOLIC_TEST_KEY]) == []

            # 2. The whole cluster gone. The lost worker's container comes back as a fresh machine the fake can rent.
            lost, worker = worker, free
            subprocess.run(["docker", "start", lost["name"]], capture_output=True, check=True, timeout=60)
            up(lost)
            quiet(lost)
            on_node(lost["name"], "rm -rf /etc/rlinfra /var/lib/rlinfra/cluster; true")
            fake.add_hosts([(lost["ip"], 22, "root")])
            second = name + "-b"
            (exp_dir / (second + ".yml")).write_text(
                yaml.safe_dump(dict(data, recovery={"max_restarts": 1, "backoff_s": 2, "replace": True}))
            )
            given = json.dumps(
                {
                    "verl_job_experiments_dir": str(exp_dir),
                    "verl_job_checkpoint_root": "/data/checkpoints-replace-" + tag,
                    "hyperbolic_replace_ssh_key": str(SANDBOX / "id_ed25519"),
                }
            )
            started = run(
                "submit.yml", inv, "exp=" + second, "cluster=prov", "wait=false", *common, given, url=fake.url
            )
            assert started.returncode == 0, started.output[-5000:]
            tracker = "/data/checkpoints-replace-%s/rlinfra_smoke/prov/%s/latest_checkpointed_iteration.txt" % (
                tag,
                second,
            )
            deadline = time.monotonic() + 300
            while not on_node(worker["name"], "cat %s 2>/dev/null" % tracker).strip() and time.monotonic() < deadline:
                time.sleep(1)
            step = on_node(worker["name"], "cat %s 2>/dev/null" % tracker).strip()
            assert step, "no checkpoint of the second run within 300 s"
            subprocess.run(["docker", "kill", head["name"]], capture_output=True, check=True, timeout=60)
            fake.provider_terminates(ids["prov-0"])
            t0 = time.monotonic()
            again = run("submit.yml", inv, "exp=" + second, "cluster=prov", *common, given, url=fake.url)
            text = flat(again.output)
            assert again.returncode == 0, again.output[-6000:]
            print("the whole cluster gone to SUCCEEDED again: %.1f s" % (time.monotonic() - t0))
            heads = [
                r["record"]
                for r in fake.od_rentals
                if r["record"]["status"] != "Terminated" and r["record"]["label"] == "prov-0"
            ]
            assert len(heads) == 1 and heads[0]["id"] != ids["prov-0"], fake.od_rentals
            assert re.search(
                r"cluster prov was gone \(the API no longer lists the rental of its head prov-0 "
                r"\(terminated\)\): rented again and converged with provision\.yml in \d+s \(prov-0 = "
                r"rental %s, prov-1 = rental %s\)" % (heads[0]["id"], new[0]["id"]),
                text,
            ), text[-5000:]
            assert "status: SUCCEEDED" in text, text[-3000:]
            driver = "".join(p.read_text() for p in (ROOT / "artifacts" / second).glob("rlinfra-%s-prov*.log" % second))
            resumed = re.search(r"smoke_rl: resumed from \S+/global_step_(\d+) \(step (\d+)\)", driver)
            assert resumed and int(resumed.group(2)) >= int(step), driver[-3000:]
            record = json.loads((records / "prov.json").read_text())
            assert sorted(record["rentals"]) == sorted([str(heads[0]["id"]), str(new[0]["id"])]), record
            assert HYPERBOLIC_TEST_KEY not in started.output + again.output
            down = run("teardown.yml", inv, "release=true", "teardown_stop_jobs=true", *common[:1], url=fake.url)
            assert down.returncode == 0, down.output[-4000:]
            assert fake.active_rentals() == []
            # teardown.yml took the kit with Ray (the new head is the machine lost in step 1).
            assert on_node(lost["name"], "test -e /var/lib/rlinfra/cluster/prov || echo gone").strip() == "gone"
        finally:
            fake.on_terminate = None
            on_node(bad["name"], "rm -f /usr/local/bin/nvidia-smi; rm -rf /usr/local/share/rlinfra-test")
            for node in nodes:
                subprocess.run(["docker", "start", node["name"]], capture_output=True, check=False, timeout=60)
                up(node)
            for node in nodes:  # heads and workers of 'prov': the sandbox's cluster again below
                quiet(node)
                on_node(
                    node["name"],
                    "rm -rf /etc/rlinfra/hyperbolic-prov.json /var/lib/rlinfra/cluster/prov; "
                    "rmdir /etc/rlinfra 2>/dev/null; true",
                )
            restore = sandbox_playbook("site.yml")
            assert restore.returncode == 0, restore.output[-4000:]


def up(node, timeout=90):
    """Until a started container's sshd answers (its systemd boots first)."""
    deadline = time.monotonic() + timeout
    while ssh_banner(node["ip"], 22) and time.monotonic() < deadline:
        time.sleep(1)
