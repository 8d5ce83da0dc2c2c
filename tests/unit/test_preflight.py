"""Preflight checks: verl's real Hydra config (verl 0.9.1 installed with --no-deps), cluster
resources, and the working_dir package (size limit, excludes, determinism, upload)."""

from __future__ import annotations

import errno
import hashlib
import importlib.util
import io
import json
import os
import zipfile

import pytest

from ansible_collections.rlinfra.verl.plugins.module_utils.common import files
from ansible_collections.rlinfra.verl.plugins.module_utils.ray import package as R
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.client import RayAuthError, RayClient
from ansible_collections.rlinfra.verl.plugins.module_utils.verl import experiment, experiment_render
from ansible_collections.rlinfra.verl.plugins.module_utils.verl import preflight as verl_preflight

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXPERIMENTS = os.path.join(REPO, "experiments")


def nodes(n, gpus=8, cpus=96):
    return [{"node_ip": "10.0.0.%d" % i, "is_head": i == 0, "resources": {"CPU": cpus, "GPU": gpus}} for i in range(n)]


def rendered(name, cluster=None, **extra):
    exp = experiment.load_experiment(name, EXPERIMENTS, extra_params=extra or None)
    return exp, experiment_render.render(exp, cluster if cluster is not None else nodes(4))


def test_verl_is_really_there_and_not_imported():
    config_dir = verl_preflight.verl_config_dir()
    assert config_dir and os.path.isfile(os.path.join(config_dir, "ppo_trainer.yaml"))
    assert importlib.util.find_spec("verl").origin.endswith("verl/__init__.py")
    import sys

    assert "verl" not in sys.modules  # find_spec only; verl's __init__ would pull torch


@pytest.mark.parametrize("name", ["gsm8k_ppo_qwen05b", "gsm8k_grpo_qwen05b", "math_grpo_qwen14b"])
def test_shipped_verl_experiments_compose(name):
    _, r = rendered(name)
    result = verl_preflight.check_verl_config(r["overrides"])
    assert result["status"] == "passed", result["message"]
    assert "verl 0.9.1" in result["message"]


def test_misspelt_key_fails_naming_it():
    _, r = rendered("gsm8k_ppo_qwen05b", trainer={"nnodez": 2})
    result = verl_preflight.check_verl_config(r["overrides"])
    assert result["status"] == "failed"
    assert "Could not override 'trainer.nnodez'" in result["message"]
    assert "Did you mean 'trainer.nnodes'?" in result["message"]
    assert "\n" not in result["message"]


def test_wrong_type_fails_naming_key_and_type():
    _, r = rendered("gsm8k_ppo_qwen05b", trainer={"total_epochs": "fifteen"})
    result = verl_preflight.check_verl_config(r["overrides"])
    assert result["status"] == "failed"
    assert "trainer.total_epochs='fifteen': verl expects an integer here (its default is 30)" in result["message"]


def test_mandatory_rollout_name_is_required():
    exp = experiment.validate(
        "norollout",
        os.path.join(EXPERIMENTS, "norollout.yml"),
        {
            "params": {
                "data": {"train_files": "/d/t.parquet", "val_files": "/d/v.parquet"},
                "actor_rollout_ref": {"model": {"path": "Qwen/Qwen2.5-0.5B-Instruct"}},
            }
        },
    )
    result = verl_preflight.check_verl_config(experiment_render.render(exp, nodes(1))["overrides"])
    assert result["status"] == "failed"
    assert "leaves actor_rollout_ref.rollout.name unset" in result["message"]
    assert "reward.reward_model" not in result["message"]  # disabled section (enable: false)


def test_skipped_with_reason_when_verl_is_missing(monkeypatch):
    monkeypatch.setattr(verl_preflight.importlib.util, "find_spec", lambda name: None)
    result = verl_preflight.check_verl_config(["trainer.nnodes=1"])
    assert result["status"] == "skipped"
    assert "verl is not installed in the controller's Python" in result["message"]
    assert "pip install --no-deps verl==0.9.1" in result["message"]


# Resources -----------------------------------------------------------------------------------


def test_gpu_shortage_fails():
    exp, r = rendered("math_grpo_qwen14b", cluster=nodes(2))
    result = verl_preflight.check_resources(
        exp.framework, exp.conventions, r["nnodes"], r["gpus_per_node"], nodes(2), "math14b"
    )
    assert result["status"] == "failed"
    assert result["message"] == (
        "not enough GPUs: trainer.nnodes=4 x trainer.n_gpus_per_node=8 needs 4 node(s) with 8 GPU(s) each (32 GPUs), "
        "but cluster 'math14b' has 2 such node(s) and 16 GPU(s) in all (2 node(s), GPUs per node [8, 8], "
        "CPUs per node [96, 96])"
    )


def test_cpu_rule_three_per_gpu():
    exp, r = rendered("math_grpo_qwen14b")
    small = nodes(4, gpus=8, cpus=16)
    result = verl_preflight.check_resources(
        exp.framework, exp.conventions, r["nnodes"], r["gpus_per_node"], small, "math14b"
    )
    assert result["status"] == "failed"
    assert "verl reserves 3 CPUs per GPU, so each of the 4 node(s) needs 24 CPUs for 8 GPUs" in result["message"]
    # Exactly 24 CPUs per node leave nothing for the TaskRunner and the driver (entrypoint_num_cpus: 1).
    tight = nodes(4, gpus=8, cpus=24)
    result = verl_preflight.check_resources(exp.framework, exp.conventions, 4, 8, tight, "math14b", r["resources"])
    assert result["status"] == "failed" and "TaskRunner plus the entrypoint need 2 more" in result["message"]
    ok = nodes(3, gpus=8, cpus=24) + nodes(1, gpus=8, cpus=26)
    assert (
        verl_preflight.check_resources(exp.framework, exp.conventions, 4, 8, ok, "math14b", r["resources"])["status"]
        == "passed"
    )


def test_no_gpu_at_all_and_cpu_only_custom():
    exp, r = rendered("gsm8k_grpo_qwen05b", cluster=nodes(3, gpus=0, cpus=2))
    result = verl_preflight.check_resources("verl", "verl", r["nnodes"], r["gpus_per_node"], nodes(3, gpus=0, cpus=2))
    assert result["status"] == "failed"
    assert "verl needs GPUs but the job asks for trainer.nnodes=3 x trainer.n_gpus_per_node=0" in result["message"]
    smoke, rs = rendered("smoke", cluster=nodes(3, gpus=0, cpus=2))
    assert (
        verl_preflight.check_resources("custom", "verl", rs["nnodes"], rs["gpus_per_node"], nodes(3, gpus=0, cpus=2))[
            "status"
        ]
        == "passed"
    )
    too_big = verl_preflight.check_resources(
        "custom", "none", 0, 0, nodes(3, gpus=0, cpus=2), "default", {"entrypoint_num_gpus": 1}
    )
    assert too_big["status"] == "failed" and "can hold the entrypoint" in too_big["message"]


def test_nemo_rl_gpu_check():
    exp, r = rendered("nemo_rl_grpo_math")
    assert verl_preflight.check_resources("nemo_rl", "nemo_rl", 4, 8, nodes(4))["status"] == "passed"
    result = verl_preflight.check_resources("nemo_rl", "nemo_rl", 4, 8, nodes(3))
    assert result["status"] == "failed" and "cluster.num_nodes=4 x cluster.gpus_per_node=8" in result["message"]


# working_dir -----------------------------------------------------------------------------------


def test_oversized_working_dir_fails_at_rays_real_limit(tmp_path):
    assert R.RAY_PACKAGE_MAX_BYTES == 100 * 1024 * 1024  # Ray 2.60: the dashboard's client_max_size
    big = tmp_path / "wd"
    big.mkdir()
    with open(big / "data.bin", "wb") as f:  # incompressible, just over the limit
        for _ in range(101):
            f.write(os.urandom(1024 * 1024))
    result = verl_preflight.check_working_dir(str(big))
    assert result["status"] == "failed"
    assert "zips to more than 100.0 MiB, over Ray's limit" in result["message"]
    assert not list(big.glob("*.part"))


def test_checkpoints_and_safetensors_are_excluded(tmp_path):
    wd = tmp_path / "wd"
    (wd / "checkpoints" / "global_step_1").mkdir(parents=True)
    (wd / "pkg").mkdir()
    (wd / "train.py").write_text("print('hi')\n")
    (wd / "pkg" / "util.py").write_text("X = 1\n")
    (wd / "pkg" / "__pycache__").mkdir()
    (wd / "pkg" / "__pycache__" / "util.cpython-311.pyc").write_bytes(b"x")
    (wd / "empty").mkdir()
    with open(wd / "model.safetensors", "wb") as f:
        f.truncate(300 * 1024 * 1024)  # sparse: big on paper, but excluded anyway
    (wd / "checkpoints" / "global_step_1" / "model.pt").write_bytes(os.urandom(1024))
    (wd / "notes.tmp").write_text("x")
    result = verl_preflight.check_working_dir(str(wd), excludes=["*.tmp"])
    assert result["status"] == "passed", result["message"]
    pkg = R.build_package(str(wd), ["*.tmp"])
    names = zipfile.ZipFile(io.BytesIO(pkg["data"])).namelist()
    assert names == ["train.py", "empty/", "pkg/util.py"]  # top-down, sorted at each level


def test_package_is_deterministic_and_content_addressed(tmp_path):
    wd = tmp_path / "wd"
    wd.mkdir()
    (wd / "a.py").write_text("A = 1\n")
    (wd / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(wd / "run.sh", 0o755)
    first = R.build_package(str(wd))
    os.utime(wd / "a.py", (1, 1))  # timestamps do not matter
    second = R.build_package(str(wd), dest=str(tmp_path / "pkg.zip"))
    assert first["data"] == (tmp_path / "pkg.zip").read_bytes()
    assert first["uri"] == second["uri"] == R.package_uri(first["data"])
    assert first["uri"] == "gcs://_ray_pkg_%s.zip" % hashlib.sha1(first["data"]).hexdigest()
    assert oct(os.stat(tmp_path / "pkg.zip").st_mode & 0o777) == "0o600"
    info = {i.filename: i for i in zipfile.ZipFile(io.BytesIO(first["data"])).infolist()}
    assert (info["run.sh"].external_attr >> 16) & 0o777 == 0o755
    (wd / "a.py").write_text("A = 2\n")
    assert R.build_package(str(wd))["uri"] != first["uri"]


LINK_OUT = (
    "working_dir {wd}: {rel} leads outside it through a symbolic link, and a job is sent only the "
    "working_dir's own files: copy what it needs into the working_dir, or leave the link out with the "
    'experiment\'s excludes (e.g. excludes: ["{rel}"])'
)
ROOT_OUT = (
    "working_dir {wd} leads outside the experiments directory {exps} through a symbolic link; copy its files "
    "into the experiments directory (a job is sent only what lies inside it)"
)


def _linked_tree(tmp_path):
    """experiments/wd with a file, a link to a file inside it, a link to a directory inside it, and a link that leads
    nowhere; ``outside/`` beside the experiments directory holds a key."""
    exps, outside = tmp_path / "experiments", tmp_path / "outside"
    (exps / "wd" / "pkg").mkdir(parents=True)
    outside.mkdir()
    (outside / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    (exps / "wd" / "train.py").write_text("print(1)\n")
    os.symlink("train.py", exps / "wd" / "alias.py")  # a file inside: zipped as a file, as before
    os.symlink("pkg", exps / "wd" / "pkg_alias")  # a directory inside: not entered, as before
    os.symlink(str(outside / "gone"), exps / "wd" / "broken")  # leads nowhere: left out, as before
    return exps, outside


@pytest.mark.parametrize(
    "rel,target",
    [("etc_passwd", "{outside}/id_rsa"), ("all", "/"), ("pkg/up", "../../.."), ("pkg/key", "../../../outside/id_rsa")],
)
def test_a_link_out_of_the_working_dir_is_refused_naming_it_and_nothing_is_written(tmp_path, rel, target):
    exps, outside = _linked_tree(tmp_path)
    wd = exps / "wd"
    os.symlink(target.format(outside=outside), wd / rel)
    dest = tmp_path / "pkg.zip"
    result = verl_preflight.check_working_dir(str(wd), dest=str(dest), experiments_dir=str(exps))
    assert result == dict(name="working_dir", status="failed", message=LINK_OUT.format(wd=wd, rel=rel))
    assert "BEGIN" not in result["message"] and not os.path.exists(dest) and not os.path.exists(str(dest) + ".part")
    with pytest.raises(R.PackageError) as err:
        R.build_package(str(wd))  # the packer itself, whoever calls it
    assert str(err.value) == LINK_OUT.format(wd=wd, rel=rel)


def test_links_that_stay_inside_are_kept_and_excluded_links_out_are_left_out(tmp_path):
    exps, outside = _linked_tree(tmp_path)
    wd = exps / "wd"
    os.symlink(str(outside / "id_rsa"), wd / "key")
    os.symlink("/", wd / "pkg" / "root")
    (wd / ".venv" / "bin").mkdir(parents=True)
    os.symlink("/usr/bin/python3", wd / ".venv" / "bin" / "python")  # a venv: excluded by default, never looked into
    result = verl_preflight.check_working_dir(str(wd), excludes=["key", "pkg/root"], experiments_dir=str(exps))
    assert result["status"] == "passed", result["message"]
    names = zipfile.ZipFile(io.BytesIO(R.build_package(str(wd), ["key", "pkg/root"])["data"])).namelist()
    assert names == ["alias.py", "train.py", "pkg/"]
    # The working_dir may itself be a link to a directory inside the experiments directory.
    os.symlink("wd", exps / "wd_alias")
    assert (
        verl_preflight.check_working_dir(
            str(exps / "wd_alias"), excludes=["key", "pkg/root"], experiments_dir=str(exps)
        )["status"]
        == "passed"
    )


@pytest.mark.parametrize("target", ["{outside}", "/"])
def test_the_packer_never_follows_the_working_dir_itself_out_of_the_experiments_directory(tmp_path, target):
    exps, outside = _linked_tree(tmp_path)
    os.symlink(target.format(outside=outside), exps / "wd_out")
    dest = tmp_path / "pkg.zip"
    result = verl_preflight.check_working_dir(str(exps / "wd_out"), dest=str(dest), experiments_dir=str(exps))
    assert result == dict(name="working_dir", status="failed", message=ROOT_OUT.format(wd=exps / "wd_out", exps=exps))
    assert not os.path.exists(dest) and not os.path.exists(str(dest) + ".part")


def _failing(monkeypatch, module, name, err, match=""):
    """``module.name`` (os.makedirs, open...) raising OSError ``err`` for paths holding ``match``."""
    real = getattr(module, name)

    def fake(path, *args, **kwargs):
        if match in str(path):
            raise OSError(err, os.strerror(err), str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(module, name, fake, raising=False)


ARTIFACTS_LINE = "verl_job_artifacts_dir {dir}: cannot write the working_dir package ({why}): {fix}"
ELSEWHERE = "set verl_job_artifacts_dir to another directory"


@pytest.mark.parametrize(
    "how,why,fix",
    [
        ("disk_full", "No space left on device", "free space or " + ELSEWHERE),
        ("full_at_close", "No space left on device", "free space or " + ELSEWHERE),
        ("read_only", "Read-only file system", ELSEWHERE),
        ("proc", "No such file or directory", ELSEWHERE),
    ],
)
def test_an_artifacts_directory_that_cannot_be_written_names_the_variable_not_the_working_dir(
    tmp_path, monkeypatch, how, why, fix
):
    """A full disk was reported as 'working_dir ...: cannot read' (the experiment blamed); a read-only directory or
    one under /proc gave a bare [Errno 30] / [Errno 2]."""
    exps, dummy = _linked_tree(tmp_path)
    package_dir = tmp_path / "artifacts" / "smoke" / "packages"
    if how in ("disk_full", "full_at_close"):  # the zip's first write; or the last bytes, flushed at its close
        real_open = open

        class Full:
            def __init__(self, f):
                self.f = f

            def write(self, b):
                if how == "disk_full":
                    _raise(errno.ENOSPC)
                return len(b)

            def close(self):
                self.f.close()
                _raise(errno.ENOSPC)

        monkeypatch.setattr(
            R,
            "open",
            lambda p, m="r", *a, **k: (
                Full(real_open(p, m, *a, **k)) if p.endswith(".part") else real_open(p, m, *a, **k)
            ),
            raising=False,
        )
    elif how == "read_only":
        _failing(monkeypatch, os, "makedirs", errno.EROFS)
    else:
        package_dir = "/proc/1/rlinfra-artifacts/smoke/packages"  # fails for root too
    with pytest.raises(experiment.ExperimentError) as err:
        verl_preflight.package_working_dir(str(exps / "wd"), [], str(package_dir), str(exps))
    assert str(err.value) == ARTIFACTS_LINE.format(dir=package_dir, why=why, fix=fix)
    assert "working_dir" not in str(err.value).split(":")[0]
    if how != "proc" and os.path.isdir(package_dir):
        assert os.listdir(package_dir) == []  # no half-written zip, no temporary file


def _raise(err):
    raise OSError(err, os.strerror(err))


@pytest.mark.parametrize(
    "error,tail",
    [
        (
            OSError(errno.EACCES, "Permission denied"),
            "(Permission denied): give the controller's user write access or set V to another directory",
        ),
        (
            OSError(errno.EDQUOT, "Disk quota exceeded"),
            "(Disk quota exceeded): free space or set V to another directory",
        ),
        (
            OSError(errno.EIO, None),
            "(Input/output error): set V to another directory",
        ),  # no strerror: the errno's meaning
        (OSError("no errno at all"), "(no errno at all): set V to another directory"),
    ],
)
def test_the_write_line_names_the_variable_the_path_and_the_reason(error, tail):
    assert files.cannot_write("V", "/a/b", "the thing", error) == "V /a/b: cannot write the thing " + tail


def test_the_package_is_kept_by_its_content_in_the_artifacts_directory(tmp_path):
    exps, dummy = _linked_tree(tmp_path)
    package_dir = tmp_path / "artifacts" / "smoke" / "packages"
    check, pkg = verl_preflight.package_working_dir(str(exps / "wd"), [], str(package_dir), str(exps))
    assert check["status"] == "passed" and pkg["path"] == str(package_dir / pkg["uri"].split("://")[1])
    assert os.listdir(package_dir) == [os.path.basename(pkg["path"])]
    os.symlink("/", exps / "wd" / "all")
    check, pkg = verl_preflight.package_working_dir(str(exps / "wd"), [], str(package_dir), str(exps))
    assert check["status"] == "failed" and pkg is None and len(os.listdir(package_dir)) == 1  # the earlier one only


def test_ensure_package_protocol():
    class Recorder:  # records what ensure_package asks of the Ray client, and in which order
        def __init__(self):
            self.store, self.calls = {}, []

        def has_package(self, name):
            self.calls.append(("has", name))
            return name in self.store

        def upload_package(self, name, data):
            self.calls.append(("upload", name))
            self.store[name] = data

    client = Recorder()
    data = R.build_package(os.path.join(EXPERIMENTS, "smoke"))["data"]
    uri = R.package_uri(data)
    assert R.ensure_package(client, uri, data) is True
    assert R.ensure_package(client, uri, data) is False
    name = uri.split("://")[1]
    assert client.calls == [("has", name), ("upload", name), ("has", name), ("has", name)]
    assert client.store[name] == data
    with pytest.raises(R.PackageError, match="do not match"):
        R.ensure_package(client, uri, data + b"x")


def test_upload_to_the_real_head(ray_head):
    data = R.build_package(os.path.join(EXPERIMENTS, "smoke"))["data"]
    uri = R.package_uri(data)
    client = RayClient(ray_head.address, token=ray_head.token)
    R.ensure_package(client, uri, data)  # uploaded, or already there from another test
    assert client.has_package(R.package_name(uri))
    assert not client.has_package("_ray_pkg_%s.zip" % ("0" * 40))
    assert R.ensure_package(client, uri, data) is False
    with pytest.raises(RayAuthError, match="rejected the auth token"):
        RayClient(ray_head.address, token="wrong").has_package(R.package_name(uri))


def test_ray_package_module_uploads_once(ray_head, module_runner, tmp_path):
    from ansible_collections.rlinfra.verl.plugins.modules import ray_package as mod

    wd = tmp_path / "wd"
    wd.mkdir()
    (wd / "unique.txt").write_text(str(tmp_path))  # content (so the URI) unique to this test run
    pkg = R.build_package(str(wd), dest=str(tmp_path / "pkg.zip"))
    args = dict(address=ray_head.address, auth_token=ray_head.token, uri=pkg["uri"], src=str(tmp_path / "pkg.zip"))
    assert module_runner(mod.main, args, check_mode=True)["changed"] is True
    first = module_runner(mod.main, args)
    assert (first["changed"], first["uploaded"], first["size"]) == (True, True, pkg["size"])
    second = module_runner(mod.main, args)
    assert (second["changed"], second["uploaded"]) == (False, False)
    # Present on the cluster: the zip is not needed (not read) any more.
    gone = module_runner(mod.main, dict(args, src=str(tmp_path / "gone.zip")))
    assert (gone["changed"], gone.get("failed", False)) == (False, False)
    absent = module_runner(
        mod.main, dict(args, uri="gcs://_ray_pkg_%s.zip" % ("1" * 40), src=str(tmp_path / "gone.zip"))
    )
    assert absent["failed"] and "is not on the cluster and src" in absent["msg"], absent
    assert ray_head.token not in json.dumps(first)
    bad = module_runner(mod.main, dict(args, uri="gcs://_ray_pkg_%s.zip" % ("0" * 40)))
    assert bad["failed"] and "do not match" in bad["msg"]
    wrong = module_runner(mod.main, dict(args, auth_token="not-the-token"))
    assert wrong["failed"] and "rejected the auth token" in wrong["msg"]
