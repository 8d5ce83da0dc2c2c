"""rlinfra.verl.verl_secrets_file: the module around module_utils/verl/secrets_run.py's ``converge`` (the file's format and
when it is written are tested in test_secrets_file.py and test_submit_parts.py). It touches nothing outside
``<secrets_dir>/<cluster>/``, and never shows a secret."""

from __future__ import annotations

import json
import os
import stat

import pytest

from ansible_collections.rlinfra.verl.plugins.module_utils.verl import secrets_file
from ansible_collections.rlinfra.verl.plugins.modules import verl_secrets_file

SECRET = "hf_s3cr3t-value"


def test_the_module_writes_the_run_s_file_and_removes_it(tmp_path, module_runner):
    root = tmp_path / "secrets"
    path = root / "c1" / "run-1.env"
    args = {"secrets_dir": str(root), "path": str(path), "values": {"HF_TOKEN": SECRET, "KEY": "line1\nline2"}}
    out = module_runner(verl_secrets_file.main, args)
    assert out["changed"] and out["written"] and SECRET not in json.dumps(out)
    assert secrets_file.loads(path.read_text()) == args["values"] and stat.S_IMODE(os.stat(path).st_mode) == 0o600
    out = module_runner(verl_secrets_file.main, dict(args, state="absent"))
    assert out["changed"] and not path.exists()


REFUSED = [
    (
        "outside",
        {"path": "/srv/rlinfra/x.env", "state": "absent"},
        "path must be a run's file <secrets_dir>/<cluster>/<submission id>.env, one directory inside secrets_dir "
        "{root}, got '/srv/rlinfra/x.env'",
    ),
    (
        "system",
        {"path": "/etc/ssh/x.env", "state": "absent"},
        "path must be a place the collection may write into, outside the system's directories (/usr, /etc, /proc, ...): "
        "/etc/ssh/x.env is under /etc, got '/etc/ssh/x.env'",
    ),
    (
        "not_env",
        {"path": "{root}/c1/notes.txt"},
        "path must be a run's file <secrets_dir>/<cluster>/<submission id>.env, one directory inside secrets_dir "
        "{root}, got '{root}/c1/notes.txt'",
    ),
    (
        "the_dir_itself",
        {"path": "{root}/run.env"},
        "path must be a run's file <secrets_dir>/<cluster>/<submission id>.env, one directory inside secrets_dir "
        "{root}, got '{root}/run.env'",
    ),
    ("dotdot", {"path": "/srv/../etc/x.env"}, "path must be an absolute path without '..', got '/srv/../etc/x.env'"),
    (
        "relative_dir",
        {"secrets_dir": "secrets"},
        "secrets_dir must be an absolute path (starting with /), got 'secrets'",
    ),
    (
        "bad_name",
        {"values": {"HF-TOKEN": SECRET}},
        "values (a key) must be an environment variable name (letters, digits, _; not starting with a digit), got "
        "'HF-TOKEN'",
    ),
    (
        "nul_value",
        {"values": {"HF_TOKEN": SECRET + "\x00"}},
        "values.HF_TOKEN must be the key's text without control characters (the value is not shown)",
    ),
]


@pytest.mark.parametrize("label,args,expected", REFUSED, ids=[r[0] for r in REFUSED])
def test_the_module_refuses_before_touching_a_file(label, args, expected, tmp_path, module_runner):
    root = tmp_path / "secrets"
    params = {"secrets_dir": str(root), "path": str(root / "c1" / "run-1.env"), "values": {"HF_TOKEN": SECRET}}
    params.update(dict((k, v.replace("{root}", str(root)) if isinstance(v, str) else v) for k, v in args.items()))
    out = module_runner(verl_secrets_file.main, params)
    assert out["failed"] is True and out["msg"] == expected.replace("{root}", str(root)) and not out.get("changed")
    assert SECRET not in json.dumps(out) and not root.exists()


# Only the collection's own files go, and never through a link --------------------------------------------------


def _tree(path):
    return sorted(
        (os.path.relpath(os.path.join(r, n), path), stat.S_IMODE(os.lstat(os.path.join(r, n)).st_mode))
        for r, ds, fs in os.walk(path)
        for n in ds + fs
    )


def test_a_run_directory_that_is_a_link_is_refused_and_nothing_changes(tmp_path, module_runner):
    """<secrets_dir>/<cluster> made a link to a project: its mode was set to 0700 and its .env files of "ended runs"
    (every .env without a running job of that name) were removed."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "prod.env").write_text("DB_PASSWORD=x\n")
    root = tmp_path / "secrets"
    root.mkdir(mode=0o700)
    os.symlink(project, root / "c1")
    before = _tree(tmp_path)
    args = {"secrets_dir": str(root), "path": str(root / "c1" / "run-1.env"), "values": {"HF_TOKEN": SECRET}}
    out = module_runner(verl_secrets_file.main, args)
    assert (
        out["failed"]
        and not out.get("changed")
        and out["msg"]
        == (
            "secrets file %s/c1/run-1.env: %s/c1: it is a symbolic link (to %s); a secrets directory is never reached "
            "through one; make it a directory, or set verl_job_secrets_dir to one" % (root, root, project)
        )
    )
    assert _tree(tmp_path) == before and SECRET not in json.dumps(out)


def test_a_system_secrets_directory_is_refused(module_runner):
    out = module_runner(verl_secrets_file.main, {"secrets_dir": "//srv", "path": "/srv/c1/run-1.env", "values": {}})
    assert out["failed"] and out["msg"] == (
        "secrets_dir must be a directory of the collection's own below /srv (such as "
        "/srv/rlinfra), not /srv itself, which holds others' directories, got '//srv'"
    )


def test_only_files_rlinfra_wrote_are_removed(tmp_path, module_runner):
    root = tmp_path / "secrets"
    (root / "c1").mkdir(parents=True)
    ours = root / "c1" / "old-run.env"
    ours.write_text(secrets_file.dumps({"HF_TOKEN": "old"}))
    theirs = root / "c1" / "prod.env"
    theirs.write_text("DB_PASSWORD=x\n")
    elsewhere = tmp_path / "elsewhere.env"
    elsewhere.write_text(secrets_file.dumps({}))
    os.symlink(elsewhere, root / "c1" / "linked.env")
    args = {"secrets_dir": str(root), "path": str(root / "c1" / "run-1.env"), "values": {"HF_TOKEN": SECRET}}
    out = module_runner(verl_secrets_file.main, args)
    assert out["changed"] and out["removed"] == [str(ours)]
    assert theirs.read_text() == "DB_PASSWORD=x\n" and os.path.islink(root / "c1" / "linked.env") and elsewhere.exists()
    # state=absent of a file rlinfra did not write: refused, kept
    out = module_runner(verl_secrets_file.main, dict(args, path=str(theirs), state="absent"))
    assert (
        out["failed"]
        and not out.get("changed")
        and out["msg"]
        == (
            "secrets file %s: refusing to remove it: it is not a secrets file rlinfra wrote (its first line is not %r)"
            % (theirs, secrets_file.HEADER)
        )
    )
    assert theirs.read_text() == "DB_PASSWORD=x\n"
