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
    ("outside", {"path": "/etc/ssh/x.env", "state": "absent"},
     "path must be a run's file <secrets_dir>/<cluster>/<submission id>.env, one directory inside secrets_dir "
     "{root}, got '/etc/ssh/x.env'"),
    ("not_env", {"path": "{root}/c1/notes.txt"},
     "path must be a run's file <secrets_dir>/<cluster>/<submission id>.env, one directory inside secrets_dir "
     "{root}, got '{root}/c1/notes.txt'"),
    ("the_dir_itself", {"path": "{root}/run.env"},
     "path must be a run's file <secrets_dir>/<cluster>/<submission id>.env, one directory inside secrets_dir "
     "{root}, got '{root}/run.env'"),
    ("dotdot", {"path": "/srv/../etc/x.env"}, "path must be an absolute path without '..', got '/srv/../etc/x.env'"),
    ("relative_dir", {"secrets_dir": "secrets"}, "secrets_dir must be an absolute path (starting with /), got 'secrets'"),
    ("bad_name", {"values": {"HF-TOKEN": SECRET}},
     "values (a key) must be an environment variable name (letters, digits, _; not starting with a digit), got "
     "'HF-TOKEN'"),
    ("nul_value", {"values": {"HF_TOKEN": SECRET + "\x00"}},
     "values.HF_TOKEN must be the key's text without control characters (the value is not shown)"),
]


@pytest.mark.parametrize("label,args,expected", REFUSED, ids=[r[0] for r in REFUSED])
def test_the_module_refuses_before_touching_a_file(label, args, expected, tmp_path, module_runner):
    root = tmp_path / "secrets"
    params = {"secrets_dir": str(root), "path": str(root / "c1" / "run-1.env"), "values": {"HF_TOKEN": SECRET}}
    params.update(dict((k, v.replace("{root}", str(root)) if isinstance(v, str) else v) for k, v in args.items()))
    out = module_runner(verl_secrets_file.main, params)
    assert out["failed"] is True and out["msg"] == expected.replace("{root}", str(root)) and not out.get("changed")
    assert SECRET not in json.dumps(out) and not root.exists()
