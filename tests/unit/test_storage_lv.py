"""The logical volume step's decisions (module_utils/node/storage_lv.py ``next_step``): which lvcreate/lvextend
runs for the free extents of each physical volume. The commands themselves run on real LVM in the molecule
storage_lvm scenario and the VM stage."""

from __future__ import annotations

import pytest

from ansible_collections.rlinfra.verl.plugins.module_utils.node.storage_lv import next_step
from ansible_collections.rlinfra.verl.plugins.modules import storage_lvm_lv, storage_lvm_probe

P = dict(vg="vg_scratch", lv="lv_scratch", layout="striped", stripe_size="")


def test_new_striped_volume_takes_equal_extents_of_every_pv():
    argv, left = next_step(P, False, {"/dev/b": 100, "/dev/a": 120})
    assert argv == [
        "lvcreate",
        "--yes",
        "--wipesignatures",
        "y",
        "-n",
        "lv_scratch",
        "-i",
        "2",
        "-l",
        "200",
        "vg_scratch",
        "/dev/a",
        "/dev/b",
    ]
    assert left == {"/dev/a": 20, "/dev/b": 0}
    # What is left on one PV is a linear segment.
    argv, left = next_step(P, True, left)
    assert argv == ["lvextend", "-i", "1", "-l", "+20", "vg_scratch/lv_scratch", "/dev/a"] and left == {
        "/dev/a": 0,
        "/dev/b": 0,
    }
    assert next_step(P, True, left) == (None, left)


def test_stripe_size_and_linear_layout():
    argv, _ = next_step(dict(P, stripe_size="256k"), False, {"/dev/a": 10, "/dev/b": 10})
    assert argv[6:10] == ["-i", "2", "-I", "256k"]
    argv, left = next_step(dict(P, layout="linear"), True, {"/dev/a": 10, "/dev/c": 5})
    assert argv == ["lvextend", "-l", "+100%FREE", "vg_scratch/lv_scratch", "/dev/a", "/dev/c"]
    assert left == {"/dev/a": 0, "/dev/c": 0}


# The modules refuse a bad option before any LVM command or device probe (their ARGS, module_utils/common/vocabulary.py) ----

LVM_NAME = "an LVM name (letters, digits, + _ . -, not starting with -)"
REFUSED = [
    (storage_lvm_lv, {"vg": "-vg", "lv": "lv_scratch"}, "vg must be %s, got '-vg'" % LVM_NAME),
    (storage_lvm_lv, {"vg": "vg", "lv": "my lv"}, "lv must be %s, got 'my lv'" % LVM_NAME),
    (
        storage_lvm_lv,
        {"vg": "vg", "lv": "lv", "stripe_size": "256 kb"},
        "stripe_size must be empty or a size such as 256k, got '256 kb'",
    ),
    (
        storage_lvm_lv,
        {"vg": "vg", "lv": "lv", "planned": {"nvme1n1": 100}},
        "planned (a key) must be an absolute path (starting with /), got 'nvme1n1'",
    ),
    (
        storage_lvm_probe,
        {"devices": "/dev/sdb"},
        "devices must be auto or a list of block devices (for example [/dev/nvme1n1]), got '/dev/sdb'",
    ),
    (
        storage_lvm_probe,
        {"devices": ["/dev/../etc/passwd"]},
        "devices must be a list of block devices under /dev; '/dev/../etc/passwd' is not one, got ['/dev/../etc/passwd'] "
        "(a list)",
    ),
    (
        storage_lvm_probe,
        {"devices": "auto", "mount_point": "workspace"},
        "mount_point must be an absolute path (starting with /), got 'workspace'",
    ),
    (
        storage_lvm_probe,
        {"devices": "auto", "discover_pattern": "(nvme"},
        "discover_pattern must be a regular expression (missing ), unterminated subpattern at position 0), got '(nvme'",
    ),
    (
        storage_lvm_probe,
        {"devices": "auto", "discover_exclude": ["../sda"]},
        "discover_exclude[0] must be a disk's kernel name (nvme0n1) or the absolute path of its device node, got '../sda'",
    ),
    (storage_lvm_probe, {"devices": "auto", "discover_min_size": -1}, "discover_min_size must not be negative, got -1"),
]


@pytest.mark.parametrize(
    "module,args,expected", REFUSED, ids=["%s-%d" % (r[0].__name__.rsplit(".", 1)[1], i) for i, r in enumerate(REFUSED)]
)
def test_the_modules_refuse_bad_options_before_touching_lvm(module, args, expected, module_runner, monkeypatch):
    ran = []
    monkeypatch.setattr("subprocess.run", lambda argv, *a, **kw: ran.append(argv))
    out = module_runner(module.main, args)
    assert out["failed"] is True and out["msg"] == expected and ran == []


def test_the_planned_physical_volumes_are_block_devices_under_dev():
    # The lvg step's new PVs are devices: a written path's confinement (no /dev) must not refuse them (the VM stage's
    # check-mode run was refused by it once).
    assert (
        storage_lvm_lv.ARGS.errors(
            {"vg": "vg", "lv": "lv", "layout": "striped", "stripe_size": "", "planned": {"/dev/vdb": 100}}
        )
        == []
    )
