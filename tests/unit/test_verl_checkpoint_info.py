"""rlinfra.verl.verl_checkpoint_info: the module around module_utils/verl/checkpoint.py's ``inspect`` (its reading is
tested in test_recovery.py): it reads an absolute path only."""

from __future__ import annotations

from ansible_collections.rlinfra.verl.plugins.modules import verl_checkpoint_info


def test_the_module_reads_the_checkpoint_directory(tmp_path, module_runner):
    actor = tmp_path / "global_step_5" / "actor"
    actor.mkdir(parents=True)
    for rank in range(2):
        (actor / ("model_world_size_2_rank_%d.pt" % rank)).write_bytes(b"x")
    out = module_runner(verl_checkpoint_info.main, {"path": str(tmp_path)}, check_mode=True)
    assert out["changed"] is False and out["latest_step"] == 5 and out["world_size"] == 2


def test_a_relative_path_is_refused(module_runner):
    out = module_runner(verl_checkpoint_info.main, {"path": "checkpoints/x"})
    assert out["failed"] is True and out["msg"] == "path must be an absolute path (starting with /), got 'checkpoints/x'"
