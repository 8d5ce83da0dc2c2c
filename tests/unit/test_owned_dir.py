"""rlinfra.verl.owned_dir and module_utils/common/owned.py: a directory is removed only when it is provably the collection's
own, on real directory trees; every refusal is one line and leaves everything in place."""

from __future__ import annotations

import os
import stat

import pytest

from ansible_collections.rlinfra.verl.plugins.module_utils.common import owned, paths
from ansible_collections.rlinfra.verl.plugins.modules import owned_dir

MARK = "rlinfra-fingerprint.txt"


def _args(path, **extra):
    return dict(dict(path=str(path), markers=[MARK], keep=["/data"], what="Python environment"), **extra)


def _venv(path, marked=True):
    (path / "bin").mkdir(parents=True)
    (path / "bin" / "python").write_text("")
    if marked:
        (path / MARK).write_text("sha256:x\n")
    return path


@pytest.mark.parametrize("check_mode", [False, True])
def test_a_marked_directory_goes_and_check_mode_only_says_so(tmp_path, module_runner, check_mode):
    venv = _venv(tmp_path / "venv")
    out = module_runner(owned_dir.main, _args(venv), check_mode=check_mode)
    assert out["changed"] and out["removed"]
    assert venv.exists() == check_mode
    again = module_runner(owned_dir.main, _args(tmp_path / "gone"))
    assert not again["changed"] and not again["removed"]


@pytest.mark.parametrize("check_mode", [False, True])
@pytest.mark.parametrize(
    "setup,line",
    [
        (
            lambda t: _venv(t / "venv", marked=False),
            "refusing to remove the Python environment {t}/venv: it holds files but not rlinfra-fingerprint.txt, so it was "
            "not made by rlinfra",
        ),
        (
            lambda t: os.symlink(_venv(t / "real"), t / "venv"),
            "refusing to remove the Python environment {t}/venv: it is a symbolic link (to {t}/real)",
        ),
        (
            lambda t: (t / "venv").write_text("a file"),
            "refusing to remove the Python environment {t}/venv: it is a file, not a directory",
        ),
    ],
)
def test_what_is_not_ours_stays(tmp_path, module_runner, setup, line, check_mode):
    setup(tmp_path)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    out = module_runner(owned_dir.main, _args(tmp_path / "venv"), check_mode=check_mode)
    assert out["failed"] and out["msg"] == line.format(t=tmp_path) and not out.get("changed")
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


@pytest.mark.parametrize(
    "path,line",
    [
        ("/", "refusing to remove the Python environment /: a system or top-level directory"),
        ("/opt", "refusing to remove the Python environment /opt: a system or top-level directory"),
        ("/usr/", "refusing to remove the Python environment /usr: a system or top-level directory"),
        ("/ray", "refusing to remove the Python environment /ray: a system or top-level directory"),
        (
            "/data/venv",
            "refusing to remove the Python environment /data/venv: it lies inside the kept directory /data, "
            "which a teardown never removes",
        ),
        # Two leading slashes: os.path.normpath keeps them, Linux reads /mnt (often empty, so no marker would be needed).
        ("//mnt", "refusing to remove the Python environment /mnt: a system or top-level directory"),
        ("//opt/", "refusing to remove the Python environment /opt: a system or top-level directory"),
        (
            "//data/venv",
            "refusing to remove the Python environment /data/venv: it lies inside the kept directory /data, "
            "which a teardown never removes",
        ),
        (
            "/data//./venv",
            "refusing to remove the Python environment /data/venv: it lies inside the kept directory /data, "
            "which a teardown never removes",
        ),
    ],
)
def test_system_and_kept_directories_are_refused_by_name(module_runner, path, line):
    # The removal rule itself (module_utils/common/owned.py), stricter than where the collection may write: any
    # top-level directory, the kept ones.
    with pytest.raises(owned.NotOurs) as refused:
        owned.check(
            path,
            [MARK],
            inputs=[("the kept directory", "/data", "which a teardown never removes")],
            what="Python environment",
            verb="remove",
        )
    assert str(refused.value) == line
    # Through the module, the path's type (purpose "owns") answers first where it can: / and the system's and others'
    # directories never reach the module's own code.
    out = module_runner(owned_dir.main, _args(path))
    assert out["failed"] and not out.get("changed")
    if paths.misplaced(path, "owns"):
        assert out["msg"].startswith("path must be a directory of the collection's own"), out["msg"]
    else:
        assert out["msg"] == line


def test_a_directory_that_holds_what_is_kept_is_refused(tmp_path, module_runner):
    _venv(tmp_path / "top" / "venv")
    out = module_runner(owned_dir.main, _args(tmp_path / "top", keep=[str(tmp_path / "top" / "venv")]))
    assert out["failed"] and out["msg"].startswith(
        "refusing to remove the Python environment %s: it contains the kept "
        "directory %s/top/venv" % (tmp_path / "top", tmp_path)
    )
    assert (tmp_path / "top" / "venv" / MARK).exists()


def test_a_mount_point_is_refused(tmp_path, monkeypatch):
    venv = _venv(tmp_path / "venv")
    real = os.path.ismount
    monkeypatch.setattr(os.path, "ismount", lambda p: p == str(venv) or real(p))
    with pytest.raises(owned.NotOurs, match="it is a mount point"):
        owned.remove(str(venv), [MARK])
    assert venv.exists()


def test_replace_keeps_the_old_until_the_new_is_in_place(tmp_path):
    target, staging = tmp_path / "model", tmp_path / ".model.merging"
    target.mkdir()
    (target / ".rlinfra-merge.json").write_text("old")
    staging.mkdir()
    (staging / ".rlinfra-merge.json").write_text("new")
    owned.replace(str(staging), str(target), [".rlinfra-merge.json"])
    assert (target / ".rlinfra-merge.json").read_text() == "new" and not staging.exists()
    assert sorted(os.listdir(tmp_path)) == ["model"]


def test_a_volume_mounted_below_is_refused_and_nothing_goes(tmp_path, monkeypatch):
    venv = _venv(tmp_path / "venv")
    (venv / "cache").mkdir()
    info = tmp_path / "mountinfo"
    # as the kernel writes it: a space in a path is \040
    info.write_text("22 1 8:1 / / rw - ext4 /dev/sda1 rw\n40 22 0:5 / %s/cache\\040dir rw - nfs srv:/x rw\n" % venv)
    os.rename(venv / "cache", venv / "cache dir")
    monkeypatch.setattr(owned, "MOUNTINFO", str(info))
    with pytest.raises(owned.NotOurs) as e:
        owned.remove(str(venv), [MARK])
    assert str(e.value) == "refusing to remove the directory %s: a volume is mounted below it (%s/cache dir)" % (
        venv,
        venv,
    )
    assert (venv / MARK).exists() and (venv / "cache dir").is_dir()


@pytest.mark.parametrize("planted", ["dir", "link"])
def test_replace_sets_the_old_aside_in_a_directory_of_its_own(tmp_path, planted):
    """A fixed aside name (.model.replaced) was emptied without a check: whatever had that name went."""
    target = tmp_path / "model"
    target.mkdir()
    (target / ".rlinfra-merge.json").write_text("old")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "weights.bin").write_text("keep")
    if planted == "dir":
        os.rename(mine, tmp_path / ".model.replaced")
        mine = tmp_path / ".model.replaced"
    else:
        os.symlink(mine, tmp_path / ".model.replaced")
    before = sorted(os.listdir(tmp_path))
    staging = owned.staging(str(target))
    (tmp_path / os.path.basename(staging) / ".rlinfra-merge.json").write_text("new")
    owned.replace(staging, str(target), [".rlinfra-merge.json"])
    assert (target / ".rlinfra-merge.json").read_text() == "new"
    assert (mine / "weights.bin").read_text() == "keep" and sorted(os.listdir(tmp_path)) == before


def test_staging_is_new_and_never_a_path_that_was_there(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, tmp_path / ".model.merging")
    os.symlink(elsewhere, tmp_path / ".model.staging-")
    made = owned.staging(str(tmp_path / "models" / "model"))
    assert os.path.dirname(made) == str(tmp_path / "models") and not os.path.islink(made)
    assert os.listdir(made) == [] and stat.S_IMODE(os.stat(made).st_mode) == 0o755 and os.listdir(elsewhere) == []


# A marker proves what the collection made, never a directory it was given and wrote into -------------------------


def test_claim_marks_only_a_directory_made_here_or_found_empty(tmp_path):
    assert owned.claim(str(tmp_path / "new" / "venv")) and (tmp_path / "new" / "venv" / owned.CLAIM).is_file()
    (tmp_path / "empty").mkdir()
    assert owned.claim(str(tmp_path / "empty"), check_mode=True) and not (tmp_path / "empty" / owned.CLAIM).exists()
    assert owned.claim(str(tmp_path / "empty")) and owned.claimed(str(tmp_path / "empty"))
    assert owned.claim(str(tmp_path / "empty"))  # ours already
    home = tmp_path / "home"
    home.mkdir()
    (home / "thesis.tex").write_text("mine")
    os.symlink(tmp_path / "empty", tmp_path / "link")
    (tmp_path / "file").write_text("x")
    for theirs in (home, tmp_path / "link", tmp_path / "file"):
        assert not owned.claim(str(theirs)) and not owned.claimed(str(theirs))
    assert sorted(os.listdir(home)) == ["thesis.tex"]


def test_a_users_directory_the_collection_wrote_into_is_not_purged(tmp_path, module_runner):
    """python_env_path (or ray_temp_dir) naming a user's directory: the venv's fingerprint file (or Ray's session_latest)
    then landed in it, and the purge, taking that for the marker, removed the user's files with it."""
    home = tmp_path / "alice"
    home.mkdir()
    (home / "thesis.tex").write_text("mine")
    assert not owned.claim(str(home))
    _venv(home)  # what python_env then put there, its fingerprint file included
    out = module_runner(owned_dir.main, _args(home, markers=[owned.CLAIM]))
    assert out["failed"] and out["msg"] == (
        "refusing to remove the Python environment %s: it holds files but not "
        "rlinfra-owned.txt, so it was not made by rlinfra" % home
    )
    assert (home / "thesis.tex").read_text() == "mine"


@pytest.mark.parametrize("check_mode", [False, True])
def test_several_directories_are_all_checked_before_any_goes(tmp_path, module_runner, check_mode):
    venv, temp = _venv(tmp_path / "venv"), _venv(tmp_path / "ray")
    dirs = [
        dict(path=str(venv), markers=[MARK], what="Python environment"),
        dict(path=str(temp), markers=[MARK], what="Ray temp dir"),
        dict(path=str(tmp_path / "never-made"), markers=[MARK]),
    ]
    out = module_runner(owned_dir.main, dict(dirs=dirs, keep=["/data"]), check_mode=check_mode)
    assert out["changed"] and out["removed"] and out["paths"] == [str(venv), str(temp)]
    assert venv.exists() == temp.exists() == check_mode
    unmarked = _venv(tmp_path / "theirs", marked=False)
    if not venv.exists():
        _venv(venv)
    refused = module_runner(
        owned_dir.main,
        dict(
            dirs=[dict(path=str(venv), markers=[MARK]), dict(path=str(unmarked), markers=[MARK], what="Ray temp dir")]
        ),
    )
    assert refused["failed"] and not refused["changed"] and refused["paths"] == []
    assert refused["msg"].startswith("refusing to remove the Ray temp dir %s: it holds files but not" % unmarked)
    assert venv.exists() and unmarked.exists()


@pytest.mark.parametrize(
    "args", [dict(), dict(path="/opt/x", dirs=[dict(path="/opt/y", markers=[MARK])]), dict(path="/opt/x")]
)
def test_path_with_markers_or_dirs(module_runner, args):
    out = module_runner(owned_dir.main, args)
    assert out["failed"] and out["msg"].startswith("owned_dir: ")
