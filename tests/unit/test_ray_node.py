"""rlinfra.verl.ray_node (module_utils/ray/node_apply.py) and module_utils/ray/node.py, nft.py: one node converged in
one call.

The module runs in-process on files under tmp_path, over a fake systemctl (the real one is exercised by the
sandbox and molecule scenarios); the helpers run on real files, processes and sockets.
"""

from __future__ import annotations

import json
import os
import socket
import sys

import pytest

from ansible_collections.rlinfra.verl.plugins.module_utils.ray import nft as nft_utils
from ansible_collections.rlinfra.verl.plugins.module_utils.ray import node as rn
from ansible_collections.rlinfra.verl.plugins.module_utils.ray import node_apply, node_state
from ansible_collections.rlinfra.verl.plugins.modules import ray_node

TOKEN = "tok-" + "x" * 40
SECRET_ENV = 'HF_TOKEN="hf_secret_value_123"\n'


# --- helpers ----------------------------------------------------------------------------------------------


def test_count_gpus_counts_only_numbered_nvidia_devices(tmp_path):
    for name in ("nvidia0", "nvidia1", "nvidia12", "nvidiactl", "nvidia-uvm", "nvme0"):
        (tmp_path / name).touch()
    assert rn.count_gpus(str(tmp_path)) == 3
    assert rn.count_gpus(str(tmp_path / "missing")) == 0


def amd_node(root, renders=(), vendors=None, kfd_gpu_ids=None):
    """/dev with kfd and render nodes, /sys with their vendors and (optionally) the KFD topology, under root."""
    (root / "dev" / "dri").mkdir(parents=True)
    (root / "dev" / "kfd").touch()
    for name in renders:
        (root / "dev" / "dri" / name).touch()
    for name, vendor in (vendors or {}).items():
        (root / "sys/class/drm" / name / "device").mkdir(parents=True)
        (root / "sys/class/drm" / name / "device" / "vendor").write_text(vendor + "\n")
    for i, gpu_id in enumerate(kfd_gpu_ids or []):
        (root / "sys/class/kfd/kfd/topology/nodes" / str(i)).mkdir(parents=True)
        (root / "sys/class/kfd/kfd/topology/nodes" / str(i) / "gpu_id").write_text("%s\n" % gpu_id)
    return str(root / "dev"), str(root / "sys")


def test_detect_gpus_counts_amd_render_nodes_leaving_out_other_vendors(tmp_path):
    dev, sys_root = amd_node(
        tmp_path,
        ["renderD128", "renderD129", "renderD130", "card0", "renderD200"],
        {"renderD128": "0x1002", "renderD129": "0x1002", "renderD130": "0x1a03"},
    )
    # renderD130 is a BMC's display (ASPEED, 0x1a03); renderD200's vendor cannot be read, so it counts.
    assert rn.detect_gpus(dev, sys_root) == ("amd", 3)


def test_detect_gpus_prefers_rocm_smi_then_the_kfd_topology(tmp_path):
    dev, sys_root = amd_node(tmp_path, ["renderD128"], kfd_gpu_ids=[0, 53241, 8842])  # node 0 is the CPU
    assert rn.detect_gpus(dev, sys_root) == ("amd", 2)
    smi = json.dumps({"card%d" % i: {"Device ID": "0x74a1"} for i in range(8)})
    assert rn.detect_gpus(dev, sys_root, rocm_smi=lambda: smi) == ("amd", 8)
    assert rn.detect_gpus(dev, sys_root, rocm_smi=lambda: None) == ("amd", 2)  # the tool failed
    assert rn.detect_gpus(dev, sys_root, rocm_smi=lambda: "WARNING: no devices") == ("amd", 2)


def test_detect_gpus_nvidia_first_and_nothing_without_devices(tmp_path):
    dev, sys_root = amd_node(tmp_path, ["renderD128"])
    assert rn.detect_gpus(dev, sys_root) == ("amd", 1)
    (tmp_path / "dev" / "kfd").unlink()
    assert rn.detect_gpus(dev, sys_root) == ("", 0)  # a render node alone is no compute GPU
    (tmp_path / "dev" / "nvidia0").touch()
    assert rn.detect_gpus(dev, sys_root) == ("nvidia", 1)


def test_amd_env_adds_presets_ray_env_leaves_and_names_the_gpus():
    presets = {"GPU_MAX_HW_QUEUES": "2", "HSA_NO_SCRATCH_RECLAIM": 1}
    lines, error = rn.amd_env('RAY_AUTH_MODE=token\nGPU_MAX_HW_QUEUES="4"\n', "", presets, 2)
    assert error == "" and rn.env_names(lines) == {"HIP_VISIBLE_DEVICES": "0,1", "HSA_NO_SCRATCH_RECLAIM": "1"}
    lines, error = rn.amd_env('HIP_VISIBLE_DEVICES="2,3"\n', 'HF_TOKEN="x"\n', {}, 2)
    assert (lines, error) == ("", "")  # the user's own list stands
    assert rn.amd_env("", "", {}, 0) == ("", "")


def test_amd_env_refuses_what_breaks_verl_workers_in_one_line():
    for env, secret in (('CUDA_VISIBLE_DEVICES="0,1"\n', ""), ("", 'ROCR_VISIBLE_DEVICES="0"\n')):
        lines, error = rn.amd_env(env, secret, {"GPU_MAX_HW_QUEUES": "2"}, 2)
        assert (
            lines == "" and "\n" not in error and "on this AMD node" in error and "HIP_VISIBLE_DEVICES instead" in error
        )


def test_put_writes_only_what_differs(tmp_path):
    path = str(tmp_path / "f")
    assert rn.put(path, "a\n", 0o600, check_mode=True) is True and not os.path.exists(path)
    assert rn.put(path, "a\n", 0o600) is True
    assert oct(os.stat(path).st_mode & 0o777) == "0o600" and open(path).read() == "a\n"
    assert rn.put(path, "a\n", 0o600) is False
    assert rn.put(path, "a\n", 0o644) is True and oct(os.stat(path).st_mode & 0o777) == "0o644"
    assert rn.put(path, "a\n", 0o644, uid=os.getuid()) is False
    assert rn.put(path, "b\n", 0o644) is True and open(path).read() == "b\n"


def test_ensure_dir_creates_and_keeps_an_existing_mode_when_asked(tmp_path):
    path = str(tmp_path / "d" / "e")
    assert rn.ensure_dir(path, 0o700, check_mode=True) is True and not os.path.exists(path)
    assert rn.ensure_dir(path, 0o700) is True and oct(os.stat(path).st_mode & 0o777) == "0o700"
    os.chmod(path, 0o755)  # Ray loosens its temp tree on start
    assert rn.ensure_dir(path, 0o700, keep_mode=True) is False and oct(os.stat(path).st_mode & 0o777) == "0o755"
    assert rn.ensure_dir(path, 0o700) is True and oct(os.stat(path).st_mode & 0o777) == "0o700"


def test_the_config_dir_and_its_files_are_never_written_through_a_link(tmp_path):
    """/etc/ray made a link to /etc: it was chmodded 0755; /etc/ray/ray.env a link to a shadow-like file: --diff showed
    its content (it was read through the link)."""
    etc = tmp_path / "etc"
    etc.mkdir(mode=0o700)
    shadow = etc / "shadow"
    shadow.write_text("root:$6$hash:0:0\n")
    os.chmod(shadow, 0o600)
    os.symlink(etc, tmp_path / "ray")
    with pytest.raises(OSError) as e:
        rn.ensure_dir(str(tmp_path / "ray"), 0o755)
    assert e.value.strerror == (
        "it is a symbolic link (to %s); a directory the collection keeps is never reached through one" % etc
    )
    assert oct(etc.stat().st_mode & 0o777) == "0o700"
    conf = tmp_path / "conf"
    conf.mkdir()
    os.symlink(shadow, conf / "ray.env")
    diff = []
    assert rn.put(str(conf / "ray.env"), "A=1\n", 0o600, diff=diff) is True
    assert "hash" not in json.dumps(diff) and shadow.read_text() == "root:$6$hash:0:0\n"
    assert not os.path.islink(conf / "ray.env") and (conf / "ray.env").read_text() == "A=1\n"


def test_open_logs_finds_only_logs_others_can_read(tmp_path):
    logs = tmp_path / "session_1" / "logs"
    logs.mkdir(parents=True)
    (logs / "raylet.out").write_text("x")
    os.chmod(logs / "raylet.out", 0o644)
    (logs / "closed.out").write_text("x")
    os.chmod(logs / "closed.out", 0o640)
    other = tmp_path / "session_1" / "runtime_resources"
    other.mkdir()
    (other / "script.py").write_text("x")
    os.chmod(other / "script.py", 0o644)
    found = rn.open_logs(str(tmp_path))
    assert found == [str(logs / "raylet.out")]
    rn.close_logs(found)
    assert oct(os.stat(logs / "raylet.out").st_mode & 0o777) == "0o640"
    assert rn.open_logs(str(tmp_path)) == [] and rn.open_logs(str(tmp_path / "missing")) == []


def test_wait_for_port_answers_at_once_or_names_the_address():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    try:
        assert rn.wait_for_port("127.0.0.1:%d" % port, 5) == ""
    finally:
        server.close()
    slept = []
    why = rn.wait_for_port("127.0.0.1:%d" % port, 0.5, sleep=slept.append)
    assert why.startswith("127.0.0.1:%d did not accept connections within 0.5s" % port) and "\n" not in why


def _fake_proc(tmp_path, procs):
    """A /proc with pid -> (ppid, environ dict); stat carries a comm with ') ' in it, as real ones may."""
    for pid, (ppid, env) in procs.items():
        d = tmp_path / str(pid)
        d.mkdir()
        (d / "environ").write_bytes(b"".join(b"%s=%s\0" % (k.encode(), v.encode()) for k, v in env.items()))
        (d / "stat").write_text("%d (odd) name) S %d %d 0 0" % (pid, ppid, pid))
    return str(tmp_path)


def test_ancestor_env_reads_the_nearest_process_that_has_it(tmp_path):
    # sudo drops SSH_CONNECTION: the python module lacks it, the login shell two levels up has it.
    proc = _fake_proc(
        tmp_path,
        {
            300: (200, {"PATH": "/usr/bin"}),
            200: (100, {"HOME": "/root"}),
            100: (1, {"SSH_CONNECTION": "10.1.2.3 5000 10.0.0.5 22", "HOME": "/root"}),
            1: (0, {"SSH_CONNECTION": "the init process is never read"}),
        },
    )
    assert nft_utils.ancestor_env("SSH_CONNECTION", pid=300, proc=proc) == "10.1.2.3 5000 10.0.0.5 22"
    # The nearest wins; a prefix of another name does not match.
    assert nft_utils.ancestor_env("HOME", pid=300, proc=proc) == "/root"
    assert nft_utils.ancestor_env("SSH", pid=300, proc=proc) == ""


def test_ancestor_env_gives_up_quietly(tmp_path):
    proc = _fake_proc(tmp_path, {300: (200, {}), 200: (1, {}), 1: (0, {"X": "init"})})
    assert nft_utils.ancestor_env("X", pid=300, proc=proc) == ""  # stops before init
    assert nft_utils.ancestor_env("X", pid=999, proc=proc) == ""  # no such process
    (tmp_path / "loop").mkdir()
    loop = _fake_proc(tmp_path / "loop", {5: (6, {}), 6: (5, {})})
    assert nft_utils.ancestor_env("X", pid=5, proc=loop) == ""  # a cycle ends (bounded walk)


def test_ancestor_env_reads_the_real_proc():
    # This process's own start-up environment (what /proc/self/environ holds) always has PATH.
    assert nft_utils.ancestor_env("PATH") != ""
    assert nft_utils.ancestor_env("RLINFRA_TEST_NOT_SET_ANYWHERE") == ""


# --- the module over a fake systemctl -------------------------------------------------------------------


class FakeSystemd(rn.Systemd):
    active_units, enabled_units, calls = set(), set(), []

    def __init__(self, module):
        self.module, self.path = module, "/bin/systemctl"

    def run(self, *args):
        FakeSystemd.calls.append(args)
        if args[0] in ("start", "restart"):
            FakeSystemd.active_units.add(args[1])
        if args[0] == "enable":
            FakeSystemd.enabled_units.add(args[1])
        return ""

    def active(self, unit):
        return unit in FakeSystemd.active_units

    def enabled(self, unit):
        return unit in FakeSystemd.enabled_units


node_gpus = ("nvidia", 4)


@pytest.fixture
def node(tmp_path, module_runner, monkeypatch):
    monkeypatch.setattr(node_apply, "Systemd", FakeSystemd)
    monkeypatch.setattr(node_apply, "detect_gpus", lambda rocm_smi=None: node_gpus)
    FakeSystemd.active_units, FakeSystemd.enabled_units, FakeSystemd.calls = set(), set(), []
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / "rlinfra-state.json").write_text(json.dumps({"fingerprint": "fp1"}))
    base = dict(
        role="worker",
        config_dir=str(tmp_path / "etc"),
        temp_dir=str(tmp_path / "tmp"),
        user=os.environ.get("USER") or "root",
        unit="ExecStart=ray start --num-gpus=@NUM_GPUS@\n",
        env="RAY_AUTH_MODE=token\n",
        secret_env=SECRET_ENV,
        token=TOKEN,
        fact={"role": "worker", "cluster": "c"},
        fact_path=str(tmp_path / "facts.d" / "rlinfra_ray.fact"),
        unit_dir=str(tmp_path / "units"),
        restart_inputs={"unit": {"num_gpus": "auto"}},
        python_env_state=str(venv / "rlinfra-state.json"),
        wait="none",
    )
    (tmp_path / "units").mkdir()

    def run(check_mode=False, **options):
        args = dict(base, **options)
        args["user"] = __import__("pwd").getpwuid(os.getuid()).pw_name
        return module_runner(ray_node.main, args, check_mode=check_mode)

    run.tmp = tmp_path
    run.venv = venv
    return run


def starts():
    return [c for c in FakeSystemd.calls if c[0] in ("start", "restart")]


def test_first_converge_writes_everything_then_nothing_changes(node):
    dry = node(check_mode=True)
    assert (
        dry["changed"] is True and dry["started"] is True and not (node.tmp / "etc").exists() and not FakeSystemd.calls
    )
    first = node()
    assert first["changed"] is True and first["gpus"] == 4 and starts() == [("start", "ray-worker.service")]
    etc = node.tmp / "etc"
    assert (node.tmp / "units" / "ray-worker.service").read_text() == "ExecStart=ray start --num-gpus=4\n"
    assert oct((etc / "auth_token").stat().st_mode & 0o777) == "0o600" and (etc / "auth_token").read_text() == TOKEN
    assert oct((etc / "ray-secrets.env").stat().st_mode & 0o777) == "0o600"
    assert oct((etc / "ray.env").stat().st_mode & 0o777) == "0o644"
    assert oct((node.tmp / "tmp").stat().st_mode & 0o777) == "0o700"
    assert json.loads((node.tmp / "facts.d" / "rlinfra_ray.fact").read_text()) == {"role": "worker", "cluster": "c"}
    record = json.loads((etc / "rlinfra-state.json").read_text())
    assert record["fingerprint"] == "fp1" and record["parts"] == node_state.part_digests({"unit": {"num_gpus": "auto"}})
    assert TOKEN not in json.dumps(first) and "hf_secret_value_123" not in json.dumps(first)

    FakeSystemd.calls = []
    again = node()
    assert again["changed"] is False and again["files"] == [] and again["reasons"] == [] and FakeSystemd.calls == []


def test_what_ray_runs_changing_restarts_it_and_says_why(node):
    node()
    FakeSystemd.calls = []
    res = node(env="RAY_AUTH_MODE=token\nX=1\n")
    assert (
        res["changed"] is True
        and res["reasons"] == ["environment files"]
        and starts() == [("restart", "ray-worker.service")]
    )
    (node.venv / "rlinfra-state.json").write_text(json.dumps({"fingerprint": "fp2"}))  # python_env_sync reinstalled
    FakeSystemd.calls = []
    res = node(env="RAY_AUTH_MODE=token\nX=1\n")
    assert res["reasons"] == ["environment"] and starts() == [("restart", "ray-worker.service")]
    FakeSystemd.active_units.clear()  # stopped by hand: started again, nothing to restart
    FakeSystemd.calls = []
    res = node(env="RAY_AUTH_MODE=token\nX=1\n")
    assert res["changed"] is True and res["reasons"] == [] and starts() == [("start", "ray-worker.service")]


def test_the_metrics_password_is_kept_root_only_without_a_restart_and_never_shown(node):
    """A head with ray_metrics on: ray_head's password goes to <config_dir>/metrics/password in the same call (mode
    0600, the directory 0755), before the secret environment; writing or changing it restarts nothing."""
    secret = "metrics-password-" + "m" * 31
    node()
    made = node(metrics_dir=True)  # a worker: the directory its exporter's web config goes in, no password
    assert made["changed"] is True and made["reasons"] == [] and made["files"] == [str(node.tmp / "etc" / "metrics")]
    assert not (node.tmp / "etc" / "metrics" / "password").exists()
    (node.tmp / "etc" / "metrics").rmdir()
    FakeSystemd.calls = []
    dry = node(check_mode=True, _ansible_diff=True, metrics_password=secret)
    [entry] = [d for d in dry["diff"] if d["after_header"].startswith(str(node.tmp / "etc" / "metrics" / "password"))]
    assert entry["after"] == "(a secret file: its new content is not shown)\n" and secret not in json.dumps(dry)
    assert not (node.tmp / "etc" / "metrics").exists()
    res = node(metrics_password=secret)
    kept = node.tmp / "etc" / "metrics" / "password"
    assert res["changed"] is True and res["reasons"] == [] and starts() == [] and secret not in json.dumps(res)
    assert kept.read_text() == secret and oct(kept.stat().st_mode & 0o777) == "0o600"
    assert oct(kept.parent.stat().st_mode & 0o777) == "0o755"
    assert node(metrics_password=secret)["changed"] is False
    assert node()["changed"] is False and kept.read_text() == secret  # none given: the kept one is left alone


def test_restart_under_a_running_job_is_refused_and_remembered(node):
    node()
    FakeSystemd.calls = []
    res = node(token="another-token-" + "y" * 30, running_jobs=["rlinfra-smoke-c"])
    assert res["failed"] is True and "\n" not in res["msg"]
    assert (
        "must restart (token file) but job(s) rlinfra-smoke-c run" in res["msg"]
        and "ray_restart_running_jobs=true" in res["msg"]
    )
    assert starts() == [] and not (node.tmp / "etc" / "rlinfra-state.json").exists()
    # The next run, the job gone, restarts because the record is missing.
    res = node(token="another-token-" + "y" * 30)
    assert res["reasons"] == ["no_record"] and starts() == [("restart", "ray-worker.service")]
    allowed = node(token="third-token-" + "z" * 30, running_jobs=["rlinfra-smoke-c"], restart_running_jobs=True)
    assert allowed.get("failed") is not True and "token file" in allowed["reasons"]


def test_check_mode_adds_what_the_check_before_the_run_foresaw(node):
    node()
    FakeSystemd.calls = []
    dry = node(check_mode=True, foreseen=["python_env"])
    assert dry["reasons"] == ["python_env"] and dry["changed"] is True and FakeSystemd.calls == []
    assert node(foreseen=["python_env"])["reasons"] == []  # foreseen reasons only stand in for a dry run


def test_amd_node_gets_the_rocm_environment_once_and_a_conflict_changes_nothing(node, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "node_gpus", ("amd", 2))
    presets = {"GPU_MAX_HW_QUEUES": "2", "RCCL_MSCCL_ENABLE": "0"}
    first = node(rocm_env=presets)
    assert first["gpu_vendor"] == "amd" and first["gpus"] == 2
    env = (node.tmp / "etc" / "ray.env").read_text()
    assert env.startswith("RAY_AUTH_MODE=token\n")
    assert rn.env_names(env) == {
        "RAY_AUTH_MODE": "token",
        "GPU_MAX_HW_QUEUES": "2",
        "RCCL_MSCCL_ENABLE": "0",
        "HIP_VISIBLE_DEVICES": "0,1",
    }
    assert (node.tmp / "units" / "ray-worker.service").read_text() == "ExecStart=ray start --num-gpus=2\n"
    FakeSystemd.calls = []
    assert node(rocm_env=presets)["changed"] is False and FakeSystemd.calls == []
    bad = node(rocm_env=presets, env='RAY_AUTH_MODE=token\nCUDA_VISIBLE_DEVICES="0,1"\n')
    assert bad["failed"] is True and "CUDA_VISIBLE_DEVICES on this AMD node" in bad["msg"] and "\n" not in bad["msg"]
    assert (node.tmp / "etc" / "ray.env").read_text() == env and FakeSystemd.calls == []


def test_wait_gcs_names_the_address_when_nothing_listens(node):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    res = node(role="head", wait="gcs", gcs_address="127.0.0.1:%d" % port, timeout=1)
    assert res["failed"] is True and "127.0.0.1:%d did not accept connections within 1s" % port in res["msg"]
    assert "journalctl -u ray-head.service" in res["msg"]


def test_a_worker_starts_only_once_its_heads_gcs_listens(node):
    """Started before its head's GCS listens, a worker's Ray would fail and be restarted by systemd: it is started
    once the address accepts connections; when it never does, one line says so and Ray is not started."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    res = node(gcs_address="127.0.0.1:%d" % port, timeout=1)
    assert res["failed"] is True and starts() == []
    assert (
        res["msg"].startswith(
            "this worker's Ray was not started: its head's GCS at 127.0.0.1:%d did not accept "
            "connections within 1s" % port
        )
        and "\n" not in res["msg"]
    )
    sock.listen(1)
    try:
        res = node(gcs_address="127.0.0.1:%d" % port, timeout=5)
    finally:
        sock.close()
    assert res["changed"] is True and starts() == [("start", "ray-worker.service")]
    FakeSystemd.calls = []
    assert node(gcs_address="127.0.0.1:%d" % port, timeout=1)["changed"] is False and FakeSystemd.calls == []


def test_a_world_open_firewall_is_refused_before_anything(node):
    """ray_firewall's rule for its allow list, inside the firewall mapping: allow_world beside it lets it through."""
    res = node(firewall=dict(ports={"gcs": 6379}, allow=["10.0.0.0/8", "0.0.0.0/0"]))
    assert res["failed"] is True and res["msg"] == (
        "firewall.allow[1] must be a network narrower than /8: 0.0.0.0/0 opens to the whole internet or a large part "
        "of it (set allow_world: true if that is really meant), got '0.0.0.0/0'"
    )
    assert not (node.tmp / "etc").exists() and FakeSystemd.calls == []
    typo = node(firewall=dict(ports={"gcs": 6379}, alow=["10.0.0.0/8"]))
    assert typo["failed"] is True and typo["msg"].startswith("firewall: unknown key 'alow' (did you mean 'allow'?)")
    world = dict(ports={"gcs": 6379}, allow=["0.0.0.0/0", "::/0"])
    assert ray_node.ARGS.errors(dict(firewall=dict(world, allow_world=True))) == []
    assert ray_node.ARGS.errors(dict(firewall=dict(world, allow_world="yes"))) == []  # a switch's words, as a switch
    assert len(ray_node.ARGS.errors(dict(firewall=dict(world, allow_world=False)))) == 1


def test_diff_shows_each_file_that_would_change_and_hides_the_secrets(node):
    """site.yml --check --diff: each file ray_node would write, with its change; the token and the secrets' file
    say they change, never their content; a converged node shows nothing."""
    first = node(check_mode=True, _ansible_diff=True)
    by_path = dict((d["after_header"].split(" (")[0], d) for d in first["diff"])
    unit = by_path[str(node.tmp / "units" / "ray-worker.service")]
    assert (
        unit["before"] == ""
        and unit["after"] == "ExecStart=ray start --num-gpus=4\n"
        and "absent" in unit["before_header"]
    )
    assert by_path[str(node.tmp / "etc" / "ray.env")]["after"] == "RAY_AUTH_MODE=token\n"
    for secret in ("auth_token", "ray-secrets.env"):
        entry = by_path[str(node.tmp / "etc" / secret)]
        assert entry["after"] == "(a secret file: its new content is not shown)\n"
    assert TOKEN not in json.dumps(first) and "hf_secret_value_123" not in json.dumps(first)
    node()
    assert "diff" not in node(check_mode=True, _ansible_diff=True)
    changed = node(check_mode=True, _ansible_diff=True, env="RAY_AUTH_MODE=token\nX=1\n")
    [entry] = [d for d in changed["diff"] if d["after_header"].startswith(str(node.tmp / "etc" / "ray.env"))]
    assert (entry["before"], entry["after"]) == ("RAY_AUTH_MODE=token\n", "RAY_AUTH_MODE=token\nX=1\n")
    rotated = node(check_mode=True, _ansible_diff=True, token="another-token-value-0123456789")
    [entry] = [d for d in rotated["diff"] if d["after_header"].startswith(str(node.tmp / "etc" / "auth_token"))]
    assert (entry["before"], entry["after"]) == (
        "(a secret file: its content is not shown)\n",
        "(a secret file: its new content is not shown)\n",
    )
    assert "another-token-value-0123456789" not in json.dumps(rotated) and TOKEN not in json.dumps(rotated)


def test_diff_shows_the_firewall_rules_when_they_change_and_nothing_else_unchanged(node, monkeypatch):
    """The rules file is written by the firewall's own code, not by put: --diff names it too when a member joins
    (mode 0600: that it changes, not how), and a converged node with its table shows nothing."""
    from tests.unit.test_ray_firewall import FakeNft

    monkeypatch.setattr(node_apply, "Nft", FakeNft)
    FakeNft.live, FakeNft.works, FakeNft.calls = None, True, []
    fw = dict(ports={"gcs": 6379}, members=[{"host": "h", "address": "10.0.0.5"}], controller="10.0.0.1")
    node(firewall=fw)
    assert "diff" not in node(check_mode=True, _ansible_diff=True, firewall=fw)
    grown = dict(fw, members=fw["members"] + [{"host": "w", "address": "10.0.0.6"}])
    out = node(check_mode=True, _ansible_diff=True, firewall=grown)
    assert [d["before_header"] for d in out["diff"]] == [str(node.tmp / "etc" / "rlinfra-firewall.nft")]
    assert out["diff"][0]["after"] == "(a secret file: its new content is not shown)\n"
    assert "10.0.0.6" not in json.dumps(out["diff"])


def engine_stand_in(tmp_path, answer):
    """A stand-in for ``podman container inspect --format '{{.Image}} {{.State.Running}}' NAME``: prints ``answer``'s
    file (empty: the container does not exist, exit 125 as podman does)."""
    said = tmp_path / "engine-answer"
    said.write_text(answer)
    engine = tmp_path / "podman"
    engine.write_text(
        '#!/bin/sh\ntest -s "%s" || { echo "no such container" >&2; exit 125; }\ncat "%s"\n' % (said, said)
    )
    engine.chmod(0o755)
    return engine, said


NEW_ID, OLD_ID = "ab" * 32, "cd" * 32


def container_fact(engine):
    box = {"engine": "podman", "engine_path": str(engine), "name": "rlinfra-ray-worker", "image_id": NEW_ID}
    return {"role": "worker", "cluster": "c", "container": box}


def test_container_mode_returns_once_the_engine_runs_the_units_image(node):
    engine, dummy = engine_stand_in(node.tmp, "%s true\n" % NEW_ID)
    res = node(container_engine="podman", fact=container_fact(engine), timeout=5)
    assert res.get("failed") is not True and res["started"] is True, res


def test_an_old_container_that_outlived_its_restart_fails_in_one_line(node):
    engine, said = engine_stand_in(node.tmp, "%s true\n" % NEW_ID)
    node(container_engine="podman", fact=container_fact(engine))
    said.write_text("%s true\n" % OLD_ID)  # the restart's stop failed: the old container still runs
    res = node(container_engine="podman", fact=container_fact(engine), token="another-token-" + "z" * 30, timeout=1)
    assert res["failed"] is True and "\n" not in res["msg"], res
    assert starts()[-1] == ("restart", "ray-worker.service")
    assert (
        "Ray's container rlinfra-ray-worker on this node is not running image %s 1s after its start (image %s, "
        "running): see journalctl -u ray-worker" % (NEW_ID[:12], OLD_ID[:12])
    ) in res["msg"], res["msg"]
    said.write_text("")  # no container at all (its start failed)
    res = node(container_engine="podman", fact=container_fact(engine), token="a-third-token-" + "w" * 30, timeout=1)
    assert res["failed"] is True and "(no container of that name)" in res["msg"], res["msg"]
