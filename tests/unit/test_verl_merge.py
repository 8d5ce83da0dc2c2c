"""rlinfra.verl.verl_merge (module_utils/verl/merge.py): which checkpoint is merged, when a merge is needed, and every
refusal, on real checkpoint directory trees. The merger itself is verl's (tests/integration/test_merge.py runs it on
real FSDP shards); here a venv without verl shows the failure path for real: one line, the model left as it was."""

from __future__ import annotations

import json
import os
import sys

import pytest

from ansible_collections.rlinfra.verl.plugins.module_utils.common import paths
from ansible_collections.rlinfra.verl.plugins.module_utils.ray import client as ray_client
from ansible_collections.rlinfra.verl.plugins.module_utils.verl import checkpoint as verl_checkpoint
from ansible_collections.rlinfra.verl.plugins.module_utils.verl import merge as verl_merge_utils
from ansible_collections.rlinfra.verl.plugins.modules import verl_merge

EXP = "gsm8k"


def make_step(ckpt, step, world=2, complete=True):
    actor = ckpt / ("global_step_%d" % step) / "actor"
    (actor / "huggingface").mkdir(parents=True)
    for rank in range(world):
        (actor / ("model_world_size_%d_rank_%d.pt" % (world, rank))).write_bytes(b"x" * (10 + rank))
    if complete:
        (actor / "fsdp_config.json").write_text('{"FSDP_version": 2, "world_size": %d}' % world)
        (actor / "huggingface" / "config.json").write_text("{}")
    (actor / "optim_world_size_2_rank_0.pt").write_bytes(b"ignored")
    return actor


@pytest.fixture(autouse=True)
def fact_path(tmp_path, monkeypatch):
    """This host's rlinfra_ray local fact, in tmp_path: absent unless a test writes it."""
    path = tmp_path / "rlinfra_ray.fact"
    monkeypatch.setattr(ray_client, "FACT_PATH", str(path))
    return path


@pytest.fixture
def ckpt(tmp_path):
    d = tmp_path / "ckpt"
    d.mkdir()
    make_step(d, 10)
    make_step(d, 20)
    (d / verl_checkpoint.TRACKER).write_text("20\n")
    return d


def test_the_tracker_names_the_step_and_only_shards_count(ckpt):
    step, actor, files = verl_checkpoint.merge_source(str(ckpt), EXP)
    assert step == 20 and actor == str(ckpt / "global_step_20" / "actor")
    assert [f[0] for f in files] == ["fsdp_config.json", "model_world_size_2_rank_0.pt", "model_world_size_2_rank_1.pt"]
    assert verl_checkpoint.merge_source(str(ckpt), EXP, 10)[0] == 10


@pytest.mark.parametrize(
    "setup,step,line",
    [
        (
            lambda d: None,
            30,
            "experiment gsm8k has no checkpoint of step 30: {d}/global_step_30/actor does not exist; "
            "steps found: 10, 20",
        ),
        (
            lambda d: os.remove(d / verl_checkpoint.TRACKER),
            None,
            "experiment gsm8k has no checkpoint to merge: {d}/"
            "latest_checkpointed_iteration.txt does not exist; steps found: 10, 20 (name one with -e step=N)",
        ),
        (
            lambda d: (d / verl_checkpoint.TRACKER).write_text("soon"),
            None,
            "experiment gsm8k has no checkpoint to merge: {d}/"
            "latest_checkpointed_iteration.txt does not hold a step number; steps found: 10, 20 (name one with -e step=N)",
        ),
        (
            lambda d: os.remove(d / "global_step_20" / "actor" / "fsdp_config.json"),
            None,
            "{d}/global_step_20/actor is not a complete verl FSDP checkpoint (it has no fsdp_config.json): merge.yml "
            "merges the actor checkpoints that verl's FSDP workers save",
        ),
        (
            lambda d: [os.remove(p) for p in (d / "global_step_20" / "actor").glob("model_world_size_*")],
            None,
            "{d}/global_step_20/actor is not a complete verl FSDP checkpoint (it has no model_world_size_*_rank_*.pt "
            "shards): merge.yml merges the actor checkpoints that verl's FSDP workers save",
        ),
    ],
)
def test_refusals_are_one_line(ckpt, setup, step, line):
    setup(ckpt)
    with pytest.raises(verl_checkpoint.MergeError) as e:
        verl_checkpoint.merge_source(str(ckpt), EXP, step)
    assert str(e.value) == line.format(d=ckpt)


def test_no_directory_names_the_host(tmp_path):
    with pytest.raises(
        verl_checkpoint.MergeError,
        match=r"^experiment gsm8k has no checkpoint directory %s on head-0 \(no checkpoint "
        r"saved yet, or verl_job_checkpoint_root differs from the job's\)$" % (tmp_path / "nope"),
    ):
        verl_checkpoint.merge_source(str(tmp_path / "nope"), EXP, host="head-0")


def test_a_checkpoint_saved_again_is_merged_again(ckpt):
    step, actor, files = verl_checkpoint.merge_source(str(ckpt), EXP)
    record = {"step": step, "source": actor, "fingerprint": verl_checkpoint.fingerprint(files)}
    assert not verl_checkpoint.merge_needed(record, step, actor, verl_checkpoint.fingerprint(files))
    assert verl_checkpoint.merge_needed(record, step, actor, verl_checkpoint.fingerprint(files), force=True)
    assert verl_checkpoint.merge_needed(record, 10, actor, verl_checkpoint.fingerprint(files))
    shard = ckpt / "global_step_20" / "actor" / "model_world_size_2_rank_1.pt"
    shard.write_bytes(b"y" * 99)
    assert verl_checkpoint.merge_needed(
        record, step, actor, verl_checkpoint.fingerprint(verl_checkpoint.merge_source(str(ckpt), EXP)[2])
    )


def args(ckpt, tmp_path, **extra):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    if not (venv / "bin" / "python").exists():
        os.symlink(sys.executable, venv / "bin" / "python")  # a real interpreter, without verl
    return dict(
        dict(
            checkpoint_dir=str(ckpt),
            experiment=EXP,
            target=str(tmp_path / "models" / EXP),
            venv=str(venv),
            host_label="head-0",
        ),
        **extra,
    )


def test_check_mode_says_what_it_would_merge_and_touches_nothing(ckpt, tmp_path, module_runner):
    out = module_runner(verl_merge.main, args(ckpt, tmp_path), check_mode=True)
    assert out["changed"] and out["merged"] and out["step"] == 20
    assert out["report"] == "would merge step 20 of gsm8k (%s/global_step_20/actor) into %s/models/gsm8k" % (
        ckpt,
        tmp_path,
    )
    assert not (tmp_path / "models").exists()


def test_a_failing_merger_leaves_the_model_as_it_was(ckpt, tmp_path, module_runner):
    target = tmp_path / "models" / EXP
    target.mkdir(parents=True)
    (target / verl_checkpoint.RECORD).write_text(json.dumps({"step": 10, "merged_at": "earlier"}))
    out = module_runner(verl_merge.main, args(ckpt, tmp_path))
    assert out["failed"]
    assert out["msg"].startswith("verl's model merger failed on %s/global_step_20/actor (exit 1): " % ckpt), out["msg"]
    assert "No module named 'verl'" in out["msg"] and "\n" not in out["msg"]
    assert json.loads((target / verl_checkpoint.RECORD).read_text())["step"] == 10
    assert sorted(os.listdir(tmp_path / "models")) == [EXP]  # no staging directory left


def test_already_merged_changes_nothing(ckpt, tmp_path, module_runner):
    step, actor, files = verl_checkpoint.merge_source(str(ckpt), EXP)
    target = tmp_path / "models" / EXP
    target.mkdir(parents=True)
    (target / verl_checkpoint.RECORD).write_text(
        json.dumps(
            {
                "step": step,
                "source": actor,
                "fingerprint": verl_checkpoint.fingerprint(files),
                "merged_at": "2026-11-01T00:00:00Z",
            }
        )
    )
    out = module_runner(verl_merge.main, args(ckpt, tmp_path))
    assert not out["changed"] and not out["merged"]
    assert out["report"] == (
        "%s already holds step 20 of gsm8k (merged 2026-11-01T00:00:00Z); nothing to merge "
        "(-e verl_job_merge_force=true merges again)" % target
    )


def test_an_upload_without_a_token_is_refused_first(ckpt, tmp_path, module_runner):
    out = module_runner(verl_merge.main, args(ckpt, tmp_path, hf_repo="me/model"))
    assert out["failed"] and out["msg"].startswith("verl_job_hf_repo is me/model but no Hugging Face token is set")
    assert not (tmp_path / "models").exists()


# The venv from the head's rlinfra_ray local fact, and experiments verl does not train ---------------------------


def fact_args(ckpt, tmp_path, **extra):
    out = args(ckpt, tmp_path, **extra)
    return out, out.pop("venv")


def test_the_venv_comes_from_the_fact(ckpt, tmp_path, fact_path, module_runner):
    base, venv = fact_args(ckpt, tmp_path)
    fact_path.write_text(json.dumps({"role": "head", "dashboard_url": "http://10.0.0.5:8265", "venv": venv}))
    out = module_runner(verl_merge.main, base, check_mode=True)
    assert out["changed"] and out["merged"] and out["venv"] == venv
    # Not in check mode the merger runs from that venv (a real interpreter without verl): its own error.
    out = module_runner(verl_merge.main, base)
    assert (
        out["failed"]
        and out["msg"].startswith("verl's model merger failed on %s/global_step_20/actor (exit 1): " % ckpt)
        and "No module named 'verl'" in out["msg"]
    )


def test_an_explicit_venv_wins_over_the_fact(ckpt, tmp_path, fact_path, module_runner):
    base, venv = fact_args(ckpt, tmp_path)
    fact_path.write_text(json.dumps({"venv": str(tmp_path / "not-this-one")}))
    out = module_runner(verl_merge.main, dict(base, venv=venv), check_mode=True)
    assert out.get("failed") is not True and out["venv"] == venv


@pytest.mark.parametrize(
    "fact,line",
    [
        (
            None,
            "no Python environment with verl known on head-0: it has no rlinfra_ray local fact ({f}, written by "
            "site.yml) and verl_job_venv is not set",
        ),
        (
            {"role": "head", "venv": ""},
            "no Python environment with verl known on head-0: its rlinfra_ray local fact ({f}) "
            "names no venv and verl_job_venv is not set",
        ),
        (
            '{"role": "head", "ve',
            "no Python environment with verl known on head-0: the rlinfra_ray local fact {f} is not "
            "valid JSON (Unterminated string starting at: line 1 column 18 (char 17)): it is "
            "half-written or damaged; run site.yml again to rewrite it, or set verl_job_venv",
        ),
    ],
)
def test_no_venv_known_is_one_line(ckpt, tmp_path, fact_path, module_runner, fact, line):
    if fact is not None:
        fact_path.write_text(fact if isinstance(fact, str) else json.dumps(fact))
    base, dummy = fact_args(ckpt, tmp_path)
    out = module_runner(verl_merge.main, base)
    assert out["failed"] and out["msg"] == line.format(f=fact_path)
    assert not (tmp_path / "models").exists()


@pytest.mark.parametrize("check_mode", [False, True])
def test_an_experiment_verl_does_not_train_has_nothing_to_merge(tmp_path, fact_path, module_runner, check_mode):
    # No checkpoint, no venv, no fact, an upload asked without a token: none of it matters for such an experiment.
    out = module_runner(
        verl_merge.main,
        dict(
            checkpoint_dir=str(tmp_path / "none"),
            experiment="custom_program",
            framework="custom",
            target=str(tmp_path / "models" / "custom_program"),
            hf_repo="me/model",
        ),
        check_mode=check_mode,
    )
    assert out.get("failed") is not True, out
    assert (out["changed"], out["merged"], out["step"], out["source"], out["target"], out["uploaded_to"]) == (
        False,
        False,
        None,
        "",
        "",
        "",
    )
    assert out["report"] == (
        "nothing to merge: experiment custom_program is a custom experiment, and merge.yml merges "
        "the FSDP actor checkpoints of verl experiments"
    )
    assert not (tmp_path / "models").exists()


# The target is replaced as a whole: never the checkpoints, never a directory the merge did not make ------------


def _tree(path):
    return sorted(os.path.relpath(os.path.join(r, n), path) for r, ds, fs in os.walk(path) for n in ds + fs)


@pytest.mark.parametrize(
    "where,relation",
    [
        ("{ckpt}", "is the checkpoint directory {ckpt}"),
        ("{ckpt}/..", None),  # the parent: normalized to tmp_path, which contains the checkpoints
        ("{tmp}", "contains the checkpoint directory {ckpt}"),
        ("{ckpt}/merged", "lies inside the checkpoint directory {ckpt}"),
        ("{ckpt}/global_step_20", "lies inside the checkpoint directory {ckpt}"),
        ("{link}", "is the checkpoint directory {ckpt}"),  # the same directory through a link to it
    ],
)
@pytest.mark.parametrize("check_mode", [False, True])
def test_a_target_overlapping_the_checkpoints_is_refused_and_nothing_is_lost(
    ckpt, tmp_path, module_runner, where, relation, check_mode
):
    os.symlink(ckpt, tmp_path / "link")
    target = where.format(ckpt=ckpt, tmp=tmp_path, link=tmp_path / "link")
    before = _tree(ckpt)
    out = module_runner(verl_merge.main, args(ckpt, tmp_path, target=target), check_mode=check_mode)
    assert out["failed"] and "\n" not in out["msg"]
    if "/.." in target:
        assert out["msg"] == "target must be an absolute path without '..', got %r" % target
    elif where == "{link}":
        assert out["msg"].startswith(
            "refusing to replace the merge target %s: it is the checkpoint directory %s, which "
            "this operation reads" % (tmp_path / "link", ckpt)
        ), out["msg"]
    else:
        shown = os.path.normpath(target)
        assert out["msg"] == (
            "refusing to replace the merge target %s: it %s, which this operation reads; merge into a "
            "directory of its own, outside the checkpoints (verl_job_models_root for merge.yml)"
            % (shown, relation.format(ckpt=ckpt))
        )
    assert _tree(ckpt) == before and (ckpt / "global_step_20" / "actor").is_dir()


@pytest.mark.parametrize("target,shown", [("/", "/"), ("//", "/"), ("/data/", "/data"), ("//etc", "/etc")])
def test_a_system_target_is_refused_naming_it_as_given(ckpt, tmp_path, module_runner, target, shown):
    """target=/ was refused as "the merge target '': not an absolute path": its trailing slash was stripped."""
    out = module_runner(verl_merge.main, args(ckpt, tmp_path, target=target))
    if paths.misplaced(target, "writes"):
        # The argument's type answers first (purpose "writes"), with the value as given.
        assert (
            out["failed"]
            and out["msg"].startswith("target must be a place the collection may write into")
            and out["msg"].endswith(", got %r" % target)
        ), out["msg"]
        return
    assert out["failed"] and out["msg"] == (
        "refusing to replace the merge target %s: a system or top-level directory; merge into a directory of its own, "
        "outside the checkpoints (verl_job_models_root for merge.yml)" % shown
    )
    assert out["target"] == shown


def test_a_target_that_is_not_a_merged_model_is_refused(ckpt, tmp_path, module_runner):
    target = tmp_path / "models" / EXP
    target.mkdir(parents=True)
    (target / "notes.txt").write_text("mine")
    out = module_runner(verl_merge.main, args(ckpt, tmp_path))
    assert out["failed"] and out["msg"] == (
        "refusing to replace the merge target %s: it holds files but not .rlinfra-merge.json, so it was not made by "
        "rlinfra; merge into a directory of its own, outside the checkpoints (verl_job_models_root for merge.yml)"
        % target
    )
    assert (target / "notes.txt").read_text() == "mine"


def test_a_target_that_is_a_link_is_refused(ckpt, tmp_path, module_runner):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / verl_checkpoint.RECORD).write_text("{}")
    (tmp_path / "models").mkdir()
    os.symlink(elsewhere, tmp_path / "models" / EXP)
    out = module_runner(verl_merge.main, args(ckpt, tmp_path))
    assert out["failed"] and out["msg"].startswith(
        "refusing to replace the merge target %s/models/%s: it is a symbolic link (to %s)" % (tmp_path, EXP, elsewhere)
    ), out["msg"]
    assert (elsewhere / verl_checkpoint.RECORD).exists()


def test_a_target_that_is_a_mount_point_is_refused(ckpt, tmp_path, module_runner, monkeypatch):
    target = tmp_path / "models" / EXP
    target.mkdir(parents=True)
    real = os.path.ismount
    monkeypatch.setattr(os.path, "ismount", lambda p: p == str(target) or real(p))
    out = module_runner(verl_merge.main, args(ckpt, tmp_path))
    assert out["failed"] and out["msg"].startswith(
        "refusing to replace the merge target %s: it is a mount point" % target
    )


# What the merge builds and writes beside the target: never a path that was there before ------------------------

FAKE_MERGER = """
import os, sys
target = sys.argv[sys.argv.index("--target_dir") + 1]
os.makedirs(target, exist_ok=True)
with open(os.path.join(target, "config.json"), "w") as f:
    f.write("merged")
"""


@pytest.fixture
def fake_verl(tmp_path, monkeypatch):
    """A verl whose model merger writes config.json into --target_dir, as the real one does."""
    pkg = tmp_path / "fake" / "verl"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "model_merger.py").write_text(FAKE_MERGER)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "fake"))


@pytest.mark.parametrize("planted", ["link", "dir"])
def test_the_merge_never_builds_in_a_path_that_was_there(ckpt, tmp_path, module_runner, fake_verl, planted):
    """The staging directory had a fixed name (.gsm8k.merging): a link there had the merger write through it into
    the user's directory, and the link then became the target; a directory there was emptied unchecked."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "config.json").write_text("mine")
    (tmp_path / "models").mkdir()
    old = tmp_path / "models" / (".%s.merging" % EXP)
    if planted == "link":
        os.symlink(mine, old)
    else:
        os.rename(mine, old)
        mine = old
    out = module_runner(verl_merge.main, args(ckpt, tmp_path))
    assert out["changed"] and out["merged"] and out["step"] == 20, out
    target = tmp_path / "models" / EXP
    assert not os.path.islink(target) and (target / "config.json").read_text() == "merged"
    assert json.loads((target / verl_checkpoint.RECORD).read_text())["step"] == 20
    assert oct(os.stat(target).st_mode & 0o777) == oct(0o755)
    assert (mine / "config.json").read_text() == "mine" and sorted(os.listdir(mine)) == ["config.json"]
    assert sorted(os.listdir(tmp_path / "models")) == sorted([EXP, old.name])  # nothing of the merge's left


def test_the_record_is_never_written_through_a_link(tmp_path):
    victim = tmp_path / "shadow"
    victim.write_text("root:x:0:0\n")
    target = tmp_path / "model"
    target.mkdir()
    os.symlink(victim, target / (verl_checkpoint.RECORD + ".tmp"))
    verl_merge_utils._write_record(str(target), {"step": 20})
    assert victim.read_text() == "root:x:0:0\n"
    assert json.loads((target / verl_checkpoint.RECORD).read_text()) == {"step": 20}
    assert oct(os.stat(target / verl_checkpoint.RECORD).st_mode & 0o777) == oct(0o644)


# Container mode: the merger and the uploader run inside the head's Ray container, with the image's Python ------

HEAD = "rlinfra-ray-head"

# The stand-in for podman: ``container inspect`` says whether the head's container runs (a file "stopped" beside it
# stops it); ``exec [-i] [--env NAME[=VALUE]] NAME python3 ...`` runs the test's Python with only the image's
# packages (verl, huggingface_hub) and the named variables, valued from the exec's own environment as the engine
# does; ``exec NAME test -d P`` answers from the real filesystem, except for the paths listed in "unseen" (a path
# ending in "/" is seen, its children are not: a directory the image holds of its own, such as /tmp). Every argv is
# recorded in calls.jsonl, every environment the container's Python got in env.jsonl.
STAND_IN = """#!%(python)s
import json, os, sys
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "calls.jsonl"), "a") as f:
    f.write(json.dumps(sys.argv) + "\\n")
argv = sys.argv[1:]
running = not os.path.exists(os.path.join(here, "stopped"))
if argv[:2] == ["container", "inspect"]:
    if argv[-1] != %(name)r:
        sys.exit("Error: no such container %%s" %% argv[-1])
    print("true" if running else "false")
    sys.exit(0)
assert argv[0] == "exec", argv
args = argv[1:]
if args[0] == "-i":
    args = args[1:]
env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": %(image)r}
while args[0] == "--env":
    key, eq, value = args[1].partition("=")
    env[key] = value if eq else os.environ[key]
    args = args[2:]
name, cmd = args[0], args[1:]
if name != %(name)r or not running:
    sys.exit("Error: can only create exec sessions on running containers: container state improper")
if cmd[:2] == ["test", "-d"]:
    unseen = open(os.path.join(here, "unseen")).read().split() if os.path.exists(os.path.join(here, "unseen")) else []
    path = cmd[2]
    hidden = any(path.startswith(u) if u.endswith("/") else (path == u or path.startswith(u + "/")) for u in unseen)
    sys.exit(0 if os.path.isdir(path) and not hidden else 1)
assert cmd[0] == "python3", cmd
with open(os.path.join(here, "env.jsonl"), "a") as f:
    f.write(json.dumps(env) + "\\n")
os.execve(sys.executable, [sys.executable] + cmd[1:], env)
"""

FAKE_HUB = """
import json, os
class HfApi:
    def __init__(self, endpoint=None, token=None):
        self.token = token
    def create_repo(self, **kw):
        pass
    def upload_folder(self, repo_id, folder_path, **kw):
        with open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "uploads.jsonl"), "a") as f:
            files = sorted(set(os.listdir(folder_path)) - set(kw.get("ignore_patterns") or ()))
            f.write(json.dumps({"repo": repo_id, "token": self.token, "files": files}) + "\\n")
        return "https://hf.example/%s/commit/1" % repo_id
"""

TOKEN = "hf_secretSECRETsecret123"


class Podman:
    def __init__(self, tmp_path, fact_path):
        self.dir = tmp_path / "engine"
        self.image = tmp_path / "image"  # what the image's Python imports; the host's has neither verl nor the hub
        for pkg, source in (
            ("verl", {"__init__.py": "", "model_merger.py": FAKE_MERGER}),
            ("huggingface_hub", {"__init__.py": FAKE_HUB}),
        ):
            (self.image / pkg).mkdir(parents=True)
            for name, text in source.items():
                (self.image / pkg / name).write_text(text)
        self.dir.mkdir()
        self.path = self.dir / "podman"
        self.path.write_text(STAND_IN % dict(python=sys.executable, name=HEAD, image=str(self.image)))
        self.path.chmod(0o755)
        fact_path.write_text(
            json.dumps(
                {
                    "role": "head",
                    "venv": "",
                    "container": {
                        "engine": "podman",
                        "engine_path": str(self.path),
                        "name": HEAD,
                        "image": "verlai/verl:test",
                        "image_id": "a" * 64,
                    },
                }
            )
        )

    def _lines(self, name):
        path = self.dir / name if name != "uploads.jsonl" else self.image / name
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def calls(self):
        return self._lines("calls.jsonl")

    def pythons(self):
        return [c for c in self.calls() if "python3" in c]

    def envs(self):
        return self._lines("env.jsonl")

    def uploads(self):
        return self._lines("uploads.jsonl")

    def hide(self, *paths):
        (self.dir / "unseen").write_text("\n".join(str(p) for p in paths))

    def stop(self):
        (self.dir / "stopped").write_text("")


@pytest.fixture
def podman(tmp_path, fact_path):
    return Podman(tmp_path, fact_path)


def container_args(ckpt, tmp_path, **extra):
    return dict(
        dict(checkpoint_dir=str(ckpt), experiment=EXP, target=str(tmp_path / "models" / EXP), host_label="head-0"),
        **extra,
    )


def test_in_container_mode_the_merge_and_the_upload_run_inside_the_head_container(
    ckpt, tmp_path, podman, module_runner
):
    out = module_runner(verl_merge.main, container_args(ckpt, tmp_path, hf_repo="me/model", hf_token=TOKEN))
    assert out.get("failed") is not True, out
    assert out["merged"] and out["step"] == 20 and out["uploaded_to"] == "me/model"
    assert (out["runtime"], out["container"], out["venv"]) == ("container", HEAD, "")
    target = tmp_path / "models" / EXP
    assert (target / "config.json").read_text() == "merged"  # written by the image's verl, at the host's path
    assert json.loads((target / verl_checkpoint.RECORD).read_text())["uploaded"] == {"me/model": 20}
    merger, uploader = podman.pythons()
    assert merger[:3] == [str(podman.path), "exec", "-i"] and merger[merger.index("python3") - 1] == HEAD
    assert merger[merger.index("python3") :][:3] == ["python3", "-m", "verl.model_merger"]
    assert uploader[:3] == [str(podman.path), "exec", "-i"] and uploader[uploader.index("python3") + 1] == "-c"
    # Values reach the container through the exec's own environment, never its arguments; the token on stdin.
    assert not any("=" in a for c in podman.pythons() for a in c[: c.index("python3")])
    assert merger_env(podman)["HF_HUB_OFFLINE"] == "1" and merger_env(podman)["PYTHONUNBUFFERED"] == "1"
    assert not any(TOKEN in a for c in podman.calls() for a in c)
    assert all(TOKEN not in json.dumps(e) for e in podman.envs())
    assert podman.uploads() == [{"repo": "me/model", "token": TOKEN, "files": ["config.json"]}]
    # The checkpoint and the target's directory were seen inside first.
    tests = [c[c.index(HEAD) + 1 :] for c in podman.calls() if "test" in c]
    assert tests[:2] == [["test", "-d", out["source"]], ["test", "-d", str(tmp_path)]]  # models/ was not made yet
    assert sorted(os.listdir(tmp_path / "models")) == [EXP]
    # A re-run runs nothing inside.
    before = len(podman.pythons())
    out = module_runner(verl_merge.main, container_args(ckpt, tmp_path, hf_repo="me/model", hf_token=TOKEN))
    assert not out["changed"] and len(podman.pythons()) == before


def merger_env(podman):
    return podman.envs()[0]


def test_an_explicit_venv_wins_over_the_container(ckpt, tmp_path, podman, module_runner):
    out = module_runner(verl_merge.main, args(ckpt, tmp_path))
    assert out["failed"] and "No module named 'verl'" in out["msg"]  # the venv's Python, without verl
    assert podman.calls() == []


@pytest.mark.parametrize("check_mode", [False, True])
@pytest.mark.parametrize(
    "hidden,shown",
    [
        ("{ckpt}", "{ckpt}/global_step_20/actor"),
        ("{tmp}/models", "{tmp}/models"),
        ("{tmp}/models/", "{tmp}/models"),  # the directory is the image's own: the staging directory is not seen
    ],
)
def test_a_path_the_container_does_not_see_is_one_line_and_nothing_changes(
    ckpt, tmp_path, podman, module_runner, hidden, shown, check_mode
):
    (tmp_path / "models").mkdir()
    podman.hide(hidden.format(ckpt=ckpt, tmp=tmp_path))
    before = _tree(tmp_path / "models"), _tree(ckpt)
    out = module_runner(verl_merge.main, container_args(ckpt, tmp_path), check_mode=check_mode)
    if check_mode and hidden.endswith("/"):
        # A dry run makes no staging directory to test: it foresees the merge.
        assert out.get("failed") is not True and out["merged"], out
    else:
        assert out["failed"] and out["msg"] == (
            "%s is not visible inside the head's container %s: add its volume to ray_container_mounts and run site.yml"
            % (shown.format(ckpt=ckpt, tmp=tmp_path), HEAD)
        )
    assert (_tree(tmp_path / "models"), _tree(ckpt)) == before
    assert podman.pythons() == []


@pytest.mark.parametrize("check_mode", [False, True])
def test_a_stopped_container_is_one_line(ckpt, tmp_path, podman, module_runner, check_mode):
    podman.stop()
    out = module_runner(verl_merge.main, container_args(ckpt, tmp_path), check_mode=check_mode)
    assert out["failed"] and out["msg"] == "the head's container %s is not running: run site.yml" % HEAD
    assert not (tmp_path / "models").exists() and podman.pythons() == []


def test_a_missing_engine_is_one_line(ckpt, tmp_path, podman, module_runner):
    podman.path.unlink()
    out = module_runner(verl_merge.main, container_args(ckpt, tmp_path))
    assert out["failed"] and "\n" not in out["msg"]
    assert out["msg"].startswith("the head's container engine %s cannot run: " % podman.path), out["msg"]


@pytest.mark.parametrize(
    "container,words",
    [
        ("podman", "container is str ('podman'), not an object"),
        ({"engine_path": "podman", "name": HEAD}, "its container names no engine path or no container name"),
        ({"engine_path": "/usr/bin/podman", "name": 7}, "container.name is"),
    ],
)
def test_a_damaged_container_fact_is_one_line(ckpt, tmp_path, fact_path, module_runner, container, words):
    fact_path.write_text(json.dumps({"role": "head", "venv": "", "container": container}))
    out = module_runner(verl_merge.main, container_args(ckpt, tmp_path))
    assert out["failed"] and "\n" not in out["msg"] and words in out["msg"], out["msg"]
    assert out["msg"].startswith(
        "no Python environment with verl known on head-0: the rlinfra_ray local fact %s is damaged: " % fact_path
    )
