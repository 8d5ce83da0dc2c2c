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
import time
from pathlib import Path

import yaml

from tests.fake_hyperbolic.testing import venv_bin
from tests.integration.conftest import ROOT, SANDBOX_INVENTORY, SANDBOX_STATE, report_of, sandbox_nodes
from tests.integration.localhost_play import changed_tasks
from tests.integration.test_sandbox_amd import DEVICES, raylet_env
from tests.integration.test_sandbox_dashboard import browser  # noqa: F401 pylint: disable=unused-import
from tests.integration.test_sandbox_faults import BAD_SIGNS, SLOW, WAIT, Playbook
from tests.integration.test_sandbox_secrets_argv import STOP as SAMPLER_STOP
from tests.integration.test_sandbox_secrets_argv import Sampler
from tests.integration.test_submit_loopback import all_text_under

TAG = secrets.token_hex(4)
CKPT_ROOT = "/data/checkpoints-ctr-" + TAG
IMAGE = "rlinfra/ray-node:sandbox"
SANDBOX_IMAGE = os.environ.get("RLINFRA_IMAGE") or "rlinfra/debian-systemd:bookworm"
ARCHIVE = "/data/images/rlinfra-ray.tar"
RAY_TEMP = "/workspace/ray"  # the sandbox's ray_temp_dir
MARKER = "rlinfra-sandbox-ray-image"
CONTAINER = {"ray_container_image": IMAGE, "ray_container_image_archive": ARCHIVE, "ray_container_mounts": ["/data"]}
EXP = "smoke-container-" + TAG
# The second image goes through the shared image store: one node loads it there, every node runs it from there.
STORE = "/data/rlinfra-images-" + TAG
V2 = dict(
    CONTAINER,
    ray_container_image=IMAGE + "-v2",
    ray_container_image_archive="/data/images/rlinfra-ray-v2.tar",
    ray_container_image_store=STORE,
)


def playbook(name, *extra):
    args = [venv_bin("ansible-playbook"), "-i", str(SANDBOX_INVENTORY), name]
    for item in extra:
        if isinstance(item, str) and item.startswith("--"):
            args.append(item)  # a flag (--check) as it is, else extra vars
        else:
            args += ["-e", item if isinstance(item, str) else json.dumps(item)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_") and k != "HF_TOKEN"}
    env.update(ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200, check=False)
    proc.output = proc.stdout + proc.stderr
    return proc


def on_node(node, script):
    return subprocess.run(
        ["docker", "exec", node, "sh", "-c", script], capture_output=True, text=True, timeout=120, check=False
    ).stdout


def recap(output):
    return {
        m.group(1): (int(m.group(2)), int(m.group(3)))
        for m in re.finditer(r"^(\S+)\s+: ok=\d+\s+changed=(\d+)\s+unreachable=\d+\s+failed=(\d+)", output, re.M)
    }


def second_image():
    """The test image with one more layer (a new image ID), its archive beside the first (sandbox.sh image builds
    both)."""
    return (
        subprocess.run(
            ["docker", "image", "inspect", "-f", "{{.Id}}", IMAGE + "-v2"], capture_output=True, text=True, check=True
        )
        .stdout.strip()
        .split(":")[-1]
    )


REGISTRY_CONFIG = """version: 0.1
storage:
  filesystem:
    rootdirectory: /var/lib/docker-registry
http:
  addr: :5000
  tls:
    certificate: /certs/server.crt
    key: /certs/server.key
auth:
  htpasswd:
    realm: rlinfra-test
    path: /certs/htpasswd
"""


def start_registry(tmp_path, user, password):
    """Debian's docker-registry in a container of the sandbox's image on the sandbox's network: TLS from a test CA
    (the nodes are made to trust it as a user would, in the system store), htpasswd (bcrypt) auth. Its name."""
    state = json.loads(SANDBOX_STATE.read_text())
    network = state["network"]
    name = network.rsplit("-net", 1)[0] + "-registry"
    certs = tmp_path / "registry"
    certs.mkdir()
    ssl = ["openssl"]
    subprocess.run(
        ssl
        + [
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=rlinfra test CA",
            "-keyout",
            str(certs / "ca.key"),
            "-out",
            str(certs / "ca.crt"),
        ],
        check=True,
        capture_output=True,
    )
    (certs / "san.cnf").write_text("subjectAltName=DNS:%s\nbasicConstraints=CA:FALSE\n" % name)
    subprocess.run(
        ssl
        + [
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=" + name,
            "-keyout",
            str(certs / "server.key"),
            "-out",
            str(certs / "server.csr"),
        ],
        check=True,
        capture_output=True,
    )
    subprocess.run(
        ssl
        + [
            "x509",
            "-req",
            "-in",
            str(certs / "server.csr"),
            "-CA",
            str(certs / "ca.crt"),
            "-CAkey",
            str(certs / "ca.key"),
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            str(certs / "san.cnf"),
            "-out",
            str(certs / "server.crt"),
        ],
        check=True,
        capture_output=True,
    )
    (certs / "config.yml").write_text(REGISTRY_CONFIG)
    htpasswd = subprocess.run(
        ["docker", "run", "--rm", "-i", "--network", "none", SANDBOX_IMAGE, "htpasswd", "-iBn", user],
        input=password,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (certs / "htpasswd").write_text(htpasswd)
    for f in certs.iterdir():
        f.chmod(0o644)
    subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
    subprocess.run(
        [
            "docker",
            "run",
            "-d",
            "--name",
            name,
            "--network",
            network,
            "-v",
            "%s:/certs:ro" % certs,
            SANDBOX_IMAGE,
            "/usr/bin/docker-registry",
            "serve",
            "/certs/config.yml",
        ],
        capture_output=True,
        check=True,
        timeout=120,
    )
    for node in state["nodes"]:
        subprocess.run(
            [
                "docker",
                "cp",
                str(certs / "ca.crt"),
                "%s:/usr/local/share/ca-certificates/rlinfra-test-ca.crt" % node["name"],
            ],
            check=True,
            capture_output=True,
        )
        on_node(node["name"], "update-ca-certificates >/dev/null 2>&1")
    return name


def stop_registry(name):
    subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
    for node in sandbox_nodes():
        on_node(
            node["name"],
            "rm -f /usr/local/share/ca-certificates/rlinfra-test-ca.crt; "
            "update-ca-certificates --fresh >/dev/null 2>&1; rm -f /root/push-auth.json",
        )


def vars_file(tmp_path, data):
    """Extra vars in a file of mode 0600 (as a user passes a Vault file): a value on the command line is in argv."""
    path = tmp_path / ("vars-%s.json" % secrets.token_hex(4))
    path.touch(mode=0o600)
    path.write_text(json.dumps(data))
    return str(path)


def running_images(nodes):
    return {
        n["name"]: on_node(n["name"], "podman ps --filter name=rlinfra-ray --format '{{.ImageID}}'").strip()
        for n in nodes
    }


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


SHOTS = ROOT / "artifacts" / "test-report"


def check_report(browser, exp, worker, killed_at, csv_columns):  # noqa: F811 pylint: disable=redefined-outer-name
    """The run's report: every metric the CSV has drawn, the worker's loss an event at the time it was killed, the
    next attempt after it; opened offline in Chromium, every chart drawn, a screenshot kept."""
    data, path = report_of(exp)
    assert sorted(data["metrics"]) == sorted(csv_columns), (data["metrics"], csv_columns)
    lost = [e for e in data["events"] if e["kind"] == "node_lost"]
    assert len(lost) == 1 and worker["name"] in lost[0]["text"], data["events"]
    # Ray notices a node gone within its heartbeat timeout; the watch polls every few seconds.
    assert killed_at - 2 <= lost[0]["t"] <= killed_at + 90, (killed_at, lost[0])
    assert any(e["kind"] == "resubmitted" and e["t"] > lost[0]["t"] for e in data["events"]), data["events"]
    from selenium.webdriver.common.by import By

    browser.get(path.as_uri())
    time.sleep(1)
    drawn = browser.find_elements(By.CSS_SELECTOR, "canvas")
    assert len(drawn) >= len(csv_columns), len(drawn)
    assert "hidden" not in browser.title.lower()
    SHOTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(SHOTS / "report.png"))


def test_ray_and_the_job_run_inside_the_image(sandbox, tmp_path, browser):  # noqa: F811 pylint: disable=redefined-outer-name
    built = subprocess.run(
        [str(ROOT / "sandbox" / "sandbox.sh"), "image"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    nodes = sandbox_nodes()
    names = [n["name"] for n in nodes]
    head = next(n["name"] for n in nodes if n["role"] == "head")
    assert on_node(head, "test -s %s && echo ok" % ARCHIVE).strip() == "ok"
    for name in names:  # as a fresh node (an earlier run of this test left its images)
        on_node(name, "podman rmi -f %s %s-v2 >/dev/null 2>&1; podman image prune -f >/dev/null 2>&1" % (IMAGE, IMAGE))

    amd = nodes[-1]  # an AMD worker: ROCm's device nodes made as test_sandbox_amd makes them
    try:
        made = subprocess.run(
            ["docker", "exec", amd["name"], "sh", "-c", DEVICES + " && echo made"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert made.stdout.strip() == "made", made.stderr
        # What a careful user runs first: --check --diff says what each node would get and changes nothing.
        units = {
            n["name"]: on_node(n["name"], "cat /etc/systemd/system/ray-%s.service 2>/dev/null" % n["role"])
            for n in nodes
        }
        check = playbook("site.yml", "--check", "--diff", CONTAINER)
        assert check.returncode == 0, check.output[-5000:]
        flat = " ".join(check.output.split())
        for name in names:
            assert re.search(
                r"%s would get: the image loaded from its archive; .*Ray (started|restarted)" % name, flat
            ), check.output[-3000:]
            assert on_node(name, "podman image exists %s && echo yes" % IMAGE).strip() == ""
        assert {
            n["name"]: on_node(n["name"], "cat /etc/systemd/system/ray-%s.service 2>/dev/null" % n["role"])
            for n in nodes
        } == units
        for sign in BAD_SIGNS:
            assert sign not in check.output, check.output[-3000:]

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
            raylet = on_node(
                n["name"],
                "for p in $(pgrep -f raylet); do test -f /proc/$p/root/etc/rlinfra-container-image "
                "&& echo inside; done",
            ).split()
            assert raylet and set(raylet) == {"inside"}, raylet
            # The unit's UMask reaches Ray inside: no log of its session is others' to read (the engine's own 0022
            # made them so, and every later converge found and closed new ones: changed=1 on a converged node).
            exposed = on_node(
                n["name"], "find %s/session_latest/logs/ -type f -perm -o+r 2>/dev/null | head -3" % RAY_TEMP
            ).split()
            assert not exposed, (n["name"], exposed)
            umask = on_node(n["name"], "grep -h '^Umask' /proc/$(pgrep -f raylet | head -1)/status").split()
            assert umask == ["Umask:", "0027"], (n["name"], umask)
        # The AMD worker's GPUs pass into its container (ROCm's device nodes, the video group) and Ray counts them.
        unit = on_node(amd["name"], "cat /etc/systemd/system/ray-worker.service")
        assert "--device /dev/kfd --device /dev/dri --group-add video" in unit and "--num-gpus=2" in unit, unit
        inside = on_node(amd["name"], "podman exec rlinfra-ray-worker sh -c 'test -c /dev/kfd && ls /dev/dri'").split()
        assert {"renderD200", "renderD201"} <= set(inside), inside
        assert raylet_env(amd).get("HIP_VISIBLE_DEVICES") == "0,1"
        assert re.search(r"nodes alive, [0-9.]+ CPUs, 2(\.0)? GPUs", " ".join(first.output.split())), first.output[
            -3000:
        ]
        loaded_ids = {on_node(name, "podman image inspect --format '{{.Id}}' %s" % IMAGE).strip() for name in names}
        assert len(loaded_ids) == 1 and "" not in loaded_ids, loaded_ids

        token = on_node(head, "cat /etc/ray/auth_token").strip()
        assert len(token) >= 16
        for name in names:
            argv = on_node(name, "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '")
            assert argv and token not in argv, name

        again = playbook("site.yml", CONTAINER)
        assert again.returncode == 0, again.output[-5000:]
        assert all(changed == 0 and failed == 0 for changed, failed in recap(again.output).values()), (
            changed_tasks(again.output),
            again.output[-2000:],
        )
        assert set(names) <= set(recap(again.output)), again.output[-3000:]

        # The AMD devices go, so that the runs below see the cluster the other tests see (no GPUs).
        on_node(amd["name"], "rm -f /dev/kfd /dev/dri/renderD200 /dev/dri/renderD201")
        without = playbook("site.yml", CONTAINER)
        assert without.returncode == 0, without.output[-5000:]
        assert "--num-gpus=0" in on_node(amd["name"], "cat /etc/systemd/system/ray-worker.service")

        exp_dir = experiment(tmp_path)
        submit = playbook(
            "submit.yml",
            "exp=" + EXP,
            {"verl_job_experiments_dir": str(exp_dir), "verl_job_checkpoint_root": CKPT_ROOT},
        )
        assert submit.returncode == 0, submit.output[-5000:]
        assert "SUCCEEDED" in submit.output, submit.output[-3000:]
        driver_log = all_text_under(ROOT / "artifacts" / EXP)
        assert MARKER in driver_log, driver_log[-3000:]
        assert "SMOKE_RESULT " in driver_log, driver_log[-3000:]

        # A worker killed mid-run in container mode: named, and the run resumes as with the venv (systemd restarts
        # the node's container when the machine comes back).
        fault = "ctr-fault-" + TAG
        data = yaml.safe_load((exp_dir / (EXP + ".yml")).read_text())
        data["wait"], data["recovery"] = dict(WAIT), {"max_restarts": 3, "backoff_s": 2}
        data["params"]["trainer"].update(SLOW["trainer"])
        (exp_dir / (fault + ".yml")).write_text(yaml.safe_dump(data))
        worker = next(n for n in nodes if n["role"] != "head")
        run = Playbook(
            "submit.yml", "exp=" + fault, json.dumps({"verl_job_checkpoint_root": CKPT_ROOT}), exp_dir=exp_dir
        )
        tracker = "%s/rlinfra_smoke/default/%s/latest_checkpointed_iteration.txt" % (CKPT_ROOT, fault)
        deadline = time.monotonic() + 240
        while not on_node(head, "cat %s 2>/dev/null" % tracker).strip() and time.monotonic() < deadline:
            assert run.proc.poll() is None, run.output[-4000:]
            time.sleep(1)
        killed_at = time.time()
        subprocess.run(["docker", "kill", worker["name"]], capture_output=True, check=True, timeout=60)
        time.sleep(20)
        subprocess.run(["docker", "start", worker["name"]], capture_output=True, check=True, timeout=60)
        assert run.wait() == 0, run.output[-5000:]
        assert run.first(r"node %s \(%s\) left the cluster at" % (worker["name"], re.escape(worker["ip"])))[1], (
            run.output[-4000:]
        )
        assert run.first(r"attempt 2 \(rlinfra-%s-default-a2\) submitted .* resumes from checkpoint step \d+" % fault)[
            1
        ], run.output[-4000:]
        assert "SUCCEEDED" in run.output and MARKER in all_text_under(ROOT / "artifacts" / fault)
        back_in = on_node(worker["name"], "podman ps --filter name=rlinfra-ray --format '{{.Names}}'").strip()
        assert back_in == "rlinfra-ray-worker", back_in
        metrics_csv = sorted((ROOT / "artifacts" / fault).glob("*.metrics.csv"))
        assert metrics_csv, list((ROOT / "artifacts" / fault).rglob("*"))
        columns = set()
        for f in metrics_csv:
            columns |= set(f.read_text().splitlines()[0].split(",")[1:])
        check_report(browser, fault, worker, killed_at, columns)

        # A new image while a job runs: refused before anything changes; applied once the job is stopped.
        v2_id = second_image()
        before = running_images(nodes)
        assert len(set(before.values())) == 1 and v2_id[:12] not in list(before.values())[0], before
        run = "v2-" + TAG
        slow = {
            "verl_job_experiments_dir": str(exp_dir),
            "verl_job_checkpoint_root": CKPT_ROOT,
            "verl_job_params": {"trainer": {"total_training_steps": 900, "save_freq": 300, "step_sleep_s": 1.0}},
        }
        started = playbook("submit.yml", "exp=" + EXP, "run=" + run, "wait=false", slow)
        assert started.returncode == 0, started.output[-4000:]
        refused = playbook("site.yml", V2)
        assert refused.returncode != 0, refused.output[-4000:]
        errors = [line for line in refused.output.splitlines() if line.startswith("[ERROR]")]
        assert len(errors) == 1 and "Refusing to restart Ray under a running job, nothing was changed" in errors[0], (
            errors
        )
        assert "rlinfra-%s-default-%s" % (EXP, run) in errors[0], errors[0]
        assert running_images(nodes) == before
        assert all(on_node(name, "podman image exists %s-v2 && echo yes" % IMAGE).strip() == "" for name in names)
        stopped = playbook("stop.yml", "exp=" + EXP, "run=" + run, {"verl_job_experiments_dir": str(exp_dir)})
        assert stopped.returncode == 0, stopped.output[-3000:]
        applied = playbook("site.yml", V2)
        assert applied.returncode == 0, applied.output[-5000:]
        # systemd starts the new container after the restart returns (Type=simple): give each node a bounded while.
        deadline = time.monotonic() + 90
        after = running_images(nodes)
        while not all(v2_id.startswith(i) and i for i in after.values()) and time.monotonic() < deadline:
            time.sleep(3)
            after = running_images(nodes)
        assert all(v2_id.startswith(image_id) and image_id for image_id in after.values()), "\n".join(
            ["v2 is %s; running: %s" % (v2_id[:12], after)]
            + [
                "%s: %s" % (n["name"], line[:300])
                for n in nodes
                for line in on_node(
                    n["name"],
                    "podman ps -a --format '{{.Names}} {{.ImageID}} {{.Status}}'; journalctl -u ray-%s -n 25 "
                    "--no-pager -o short-precise | grep -v ' ray\\[' " % n["role"],
                ).splitlines()
            ]
            + ["site.yml's output ends:"]
            + applied.output[-2500:].splitlines()
        )
        # Loaded once, into the shared store: every node lists it (its storage.conf, the collection's own) and runs
        # the image from it, read-only; no node holds a copy of its own (one row, read-only); a re-run changes nothing.
        for name in names:
            assert on_node(name, "head -1 /etc/containers/storage.conf").startswith("# rlinfra.verl: written by")
            assert on_node(name, "podman images --format '{{.ReadOnly}}' %s-v2" % IMAGE).split() == ["true"], name
        assert on_node(head, "test -d %s/overlay-images && echo store" % STORE).strip() == "store"
        again = playbook("site.yml", V2)
        assert again.returncode == 0, again.output[-5000:]
        assert all(changed == 0 and failed == 0 for changed, failed in recap(again.output).values()), (
            changed_tasks(again.output),
            again.output[-2000:],
        )

        # A private registry (TLS from a test CA, htpasswd): an image pulled by reference with credentials.
        user, password = "rlinfra-bot", "pw-" + secrets.token_hex(12)
        registry = start_registry(tmp_path, user, password)
        ref = "%s:5000/rlinfra/ray-node:pulled" % registry
        # The image to pull: the first image plus 20 MB of its own, built and pushed from the head, then removed
        # there so that every node pulls it.
        pushed = on_node(
            head,
            (
                "set -e; podman rm -f rlinfra-mk >/dev/null 2>&1 || true; "
                f"podman run --name rlinfra-mk --network host {IMAGE} sh -c 'head -c 20000000 /dev/urandom > /blob' && "
                f"podman commit -q rlinfra-mk {ref} >/dev/null && podman rm rlinfra-mk >/dev/null && "
                f"printf %s '{password}' | podman login --authfile /root/push-auth.json -u {user} --password-stdin {registry}:5000 "
                f">/dev/null && podman push -q --authfile /root/push-auth.json {ref} && podman image inspect --format "
                f"'{{{{.Id}}}}' {ref} && podman rmi {ref} >/dev/null && echo pushed"
            ),
        )
        assert pushed.strip().endswith("pushed"), pushed
        pulled_id = pushed.split()[-2]
        for name in names:  # as nodes that never pulled it (an earlier run of this test may have)
            on_node(name, "podman rmi -f %s >/dev/null 2>&1" % ref)
        wrong = dict(
            CONTAINER,
            ray_container_image=ref,
            ray_container_image_archive="",
            ray_container_registry_username=user,
            ray_container_registry_password="wrong-" + password,
        )
        refused = playbook("site.yml", "@" + vars_file(tmp_path, wrong))
        assert refused.returncode != 0, refused.output[-4000:]
        flat = " ".join(refused.output.split())
        line = (
            r"podman login to %s:5000 as %s was refused: .{0,200}invalid username/password; check "
            r"ray_container_registry_username and ray_container_registry_password; nothing was changed"
            % (re.escape(registry), user)
        )
        for name in names:  # each node: its one line naming the refused login; nothing changed
            assert re.search(r"fatal: \[%s\]: FAILED! => changed: false msg: '%s'" % (name, line), flat), flat[-3000:]
            assert on_node(name, "test -e /etc/ray/registry || echo none").strip() == "none"
        assert password not in refused.output
        assert running_images(nodes) == after
        assert all(on_node(name, "podman image exists %s && echo yes" % ref).strip() == "" for name in names)

        needles = {"registry password": password}
        samplers = [Sampler(n["name"], needles) for n in nodes] + [Sampler(None, needles)]
        for sampler in samplers:
            sampler.start()
        try:
            good = playbook(
                "site.yml", "@" + vars_file(tmp_path, dict(wrong, ray_container_registry_password=password))
            )
        finally:
            for n in nodes:
                on_node(n["name"], "touch " + SAMPLER_STOP)
            Path(SAMPLER_STOP).touch()
            for sampler in samplers:
                sampler.join(60)
            Path(SAMPLER_STOP).unlink()
            for n in nodes:
                on_node(n["name"], "rm -f " + SAMPLER_STOP)
        assert good.returncode == 0, good.output[-5000:]
        assert all(s.samples >= 5 for s in samplers), [s.samples for s in samplers]
        assert not [hit for s in samplers for hit in s.hits], [hit for s in samplers for hit in s.hits]
        assert password not in good.output
        assert set(running_images(nodes).values()) == {pulled_id[:12]}, (pulled_id, running_images(nodes))
        for n in nodes:
            record = json.loads(on_node(n["name"], "cat /etc/ray/rlinfra-image.json"))
            assert record["digests"] and all(
                d.startswith(ref.rsplit(":", 1)[0] + "@sha256:") for d in record["digests"]
            )
            # The login lived for the pull only: no credential stays on the node.
            assert on_node(n["name"], "test -e /etc/ray/registry || echo gone").strip() == "gone"
            assert password not in on_node(
                n["name"], "grep -rl . /etc/ray /etc/systemd/system 2>/dev/null | xargs cat 2>/dev/null"
            )
    finally:
        if "registry" in locals():
            stop_registry(registry)
        # Other tests share the sandbox: no job left, no AMD devices, the venv back, Ray restarted from it.
        on_node(amd["name"], "rm -f /dev/kfd /dev/dri/renderD200 /dev/dri/renderD201")
        playbook("stop.yml", "exp=" + EXP, "run=v2-" + TAG, {"verl_job_experiments_dir": str(tmp_path / "experiments")})
        back = playbook("site.yml")
        for name in names:  # the store's listing first: podman refuses a listed store that is gone
            on_node(
                name, "grep -q '^# rlinfra.verl' /etc/containers/storage.conf && rm -f /etc/containers/storage.conf"
            )
        on_node(head, "rm -rf " + STORE)
        on_node(head, "rm -rf " + CKPT_ROOT)
        shutil.rmtree(ROOT / "artifacts" / EXP, ignore_errors=True)
        shutil.rmtree(ROOT / "artifacts" / ("ctr-fault-" + TAG), ignore_errors=True)
    assert back.returncode == 0, back.output[-5000:]
    for n in nodes:
        unit = on_node(n["name"], "cat /etc/systemd/system/ray-%s.service" % n["role"])
        assert "/opt/rlinfra/venv/bin/ray start" in unit and "podman" not in unit, unit
