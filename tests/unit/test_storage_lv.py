"""The logical volume step's decisions (module_utils/storage_lv.py ``next_step``): which lvcreate/lvextend
runs for the free extents of each physical volume. The commands themselves run on real LVM in the molecule
storage_lvm scenario and the VM stage."""

from __future__ import annotations

from ansible_collections.rlinfra.verl.plugins.module_utils.storage_lv import next_step

P = dict(vg="vg_scratch", lv="lv_scratch", layout="striped", stripe_size="")


def test_new_striped_volume_takes_equal_extents_of_every_pv():
    argv, left = next_step(P, False, {"/dev/b": 100, "/dev/a": 120})
    assert argv == ["lvcreate", "--yes", "--wipesignatures", "y", "-n", "lv_scratch", "-i", "2", "-l", "200",
                    "vg_scratch", "/dev/a", "/dev/b"]
    assert left == {"/dev/a": 20, "/dev/b": 0}
    # What is left on one PV is a linear segment.
    argv, left = next_step(P, True, left)
    assert argv == ["lvextend", "-i", "1", "-l", "+20", "vg_scratch/lv_scratch", "/dev/a"] and left == {"/dev/a": 0,
                                                                                                         "/dev/b": 0}
    assert next_step(P, True, left) == (None, left)


def test_stripe_size_and_linear_layout():
    argv, _ = next_step(dict(P, stripe_size="256k"), False, {"/dev/a": 10, "/dev/b": 10})
    assert argv[6:10] == ["-i", "2", "-I", "256k"]
    argv, left = next_step(dict(P, layout="linear"), True, {"/dev/a": 10, "/dev/c": 5})
    assert argv == ["lvextend", "-l", "+100%FREE", "vg_scratch/lv_scratch", "/dev/a", "/dev/c"]
    assert left == {"/dev/a": 0, "/dev/c": 0}
