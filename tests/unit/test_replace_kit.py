"""rlinfra.verl.replace_kit (module_utils/hyperbolic/replace_kit.py): the kit the run's supervisor replaces machines with,
on a real tree - root-only, each file written only when it differs, the collection's archive reproducible and unpacked
only when it differs, whole or not at all; check mode writes nothing."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import stat
import tarfile

import pytest

from ansible_collections.rlinfra.verl.plugins.action.replace_kit import COLLECTION_ROOT
from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic import replace_kit
from ansible_collections.rlinfra.verl.plugins.modules import replace_kit as module

KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk=\n-----END OPENSSH PRIVATE KEY-----\n"
INVENTORY = {"all": {"children": {"ray_head": {"hosts": {"h": {"ansible_connection": "local"}}}}}}
SETTINGS = {"min_hours": 1, "daily_budget": None, "ssh_public_key": ""}


def _collection(root):
    (root / "plugins" / "modules" / "__pycache__").mkdir(parents=True)
    (root / "plugins" / "modules" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    (root / "plugins" / "modules" / "x.pyc").write_bytes(b"\0")
    (root / "plugins" / "modules" / "ping.py").write_text("print('pong')\n")
    (root / "roles" / "r" / "tasks").mkdir(parents=True)
    (root / "roles" / "r" / "tasks" / "main.yml").write_text("---\n")
    (root / "playbooks").mkdir()
    (root / "meta").mkdir()
    (root / "galaxy.yml").write_text("name: verl\n")
    (root / "tests").mkdir()
    (root / "tests" / "t.py").write_text("")
    return root


def _args(tmp_path, archive, **extra):
    path = tmp_path / "kit" / "prov"
    blob = tmp_path / "collection.tar.gz"
    blob.write_bytes(gzip.compress(archive, mtime=0))
    return dict(
        dict(
            path=str(path),
            ssh_key="/home/me/.ssh/replace",
            inventory=INVENTORY,
            settings=SETTINGS,
            ssh_key_content=KEY,
            archive=str(blob),
            archive_sha256=hashlib.sha256(archive).hexdigest(),
        ),
        **extra,
    )


def test_the_archive_is_the_same_bytes_for_the_same_files_without_bytecode_or_tests(tmp_path):
    root = _collection(tmp_path / "c")
    first = replace_kit.pack(str(root))
    os.utime(root / "galaxy.yml", (1, 1))
    (root / "plugins" / "modules" / "ping.py").chmod(0o700)
    assert replace_kit.pack(str(root)) != first  # the executable bit is kept
    (root / "plugins" / "modules" / "ping.py").chmod(0o644)
    assert replace_kit.pack(str(root)) == first
    with tarfile.open(fileobj=io.BytesIO(first)) as tar:
        names = tar.getnames()
        assert all(m.mtime == 0 and m.uid == m.gid == 0 for m in tar.getmembers())
    assert names == [
        "galaxy.yml",
        "meta",
        "plugins",
        "plugins/modules",
        "plugins/modules/ping.py",
        "roles",
        "roles/r",
        "roles/r/tasks",
        "roles/r/tasks/main.yml",
        "playbooks",
    ]


def test_this_collection_packs():
    with tarfile.open(fileobj=io.BytesIO(replace_kit.pack(COLLECTION_ROOT))) as tar:
        names = set(tar.getnames())
    assert {"galaxy.yml", "plugins/modules/replace_kit.py", "roles/verl_job/tasks/replace_kit.yml"} <= names
    assert not [n for n in names if "__pycache__" in n or n.startswith(("tests", "docs", "collections"))]


@pytest.mark.skipif(os.geteuid() != 0, reason="the kit is root's")
def test_the_kit_is_written_root_only_then_left_alone(tmp_path, module_runner):
    archive = replace_kit.pack(str(_collection(tmp_path / "c")))
    args = _args(tmp_path, archive)
    planned = module_runner(module.main, args, check_mode=True)
    assert planned["changed"] and not (tmp_path / "kit").exists()
    out = module_runner(module.main, args)
    kit = tmp_path / "kit" / "prov"
    assert out["changed"] and out["written"][-1] == "the collection", out
    assert (kit / "ssh_key").read_text() == KEY
    assert (kit / "settings.json").read_text() == (
        '{\n    "daily_budget": null,\n    "min_hours": 1,\n    "ssh_public_key": ""\n}'
    )
    assert (kit / replace_kit.COLLECTION / "plugins" / "modules" / "ping.py").read_text() == "print('pong')\n"
    for path in (kit, kit / "tmp", kit / replace_kit.COLLECTION):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700, path
    for name in ("ssh_key", "inventory.json", "settings.json"):
        assert stat.S_IMODE((kit / name).stat().st_mode) == 0o600, name
    again = module_runner(module.main, args)
    assert not again["changed"] and again["written"] == []
    # A changed setting rewrites that file alone; a new collection is swapped in whole, nothing of the old one left.
    (tmp_path / "c" / "roles" / "r" / "tasks" / "main.yml").unlink()
    newer = replace_kit.pack(str(tmp_path / "c"))
    out = module_runner(module.main, _args(tmp_path, newer, settings=dict(SETTINGS, min_hours=2)))
    assert out["written"] == ["settings.json", "the collection"]
    assert not (kit / replace_kit.COLLECTION / "roles" / "r" / "tasks" / "main.yml").exists()
    assert not [n for n in os.listdir(kit / "collections/ansible_collections/rlinfra") if n != "verl"]


@pytest.mark.skipif(os.geteuid() != 0, reason="the kit is root's")
def test_a_damaged_archive_changes_nothing_of_the_collection(tmp_path, module_runner):
    archive = replace_kit.pack(str(_collection(tmp_path / "c")))
    args = _args(tmp_path, archive, archive_sha256="0" * 64)
    out = module_runner(module.main, args)
    assert out["failed"] and out["msg"].startswith("the collection's archive arrived damaged")
    assert not (tmp_path / "kit" / "prov" / replace_kit.COLLECTION / "galaxy.yml").exists()


def test_an_archive_with_a_path_outside_is_refused(tmp_path):
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        info = tarfile.TarInfo("../escape")
        tar.addfile(info, io.BytesIO(b""))
    dest = tmp_path / "verl"
    with pytest.raises(ValueError, match="'../escape', which is not unpacked"):
        replace_kit.unpack(out.getvalue(), str(dest))
    assert not dest.exists() and os.listdir(tmp_path) == []
