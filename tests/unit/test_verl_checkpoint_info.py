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
    assert (
        out["failed"] is True and out["msg"] == "path must be an absolute path (starting with /), got 'checkpoints/x'"
    )


def _step(root, step, world, ranks):
    actor = root / ("global_step_%d" % step) / "actor"
    actor.mkdir(parents=True)
    for rank in ranks:
        (actor / ("model_world_size_%d_rank_%d.pt" % (world, rank))).write_bytes(b"x")


def test_a_resume_passes_over_steps_that_lack_a_rank_or_a_directory(tmp_path, module_runner):
    # Steps 2 and 4 whole, step 6 without rank 2's shard (a node lost mid-save), the tracker naming step 8 (gone).
    _step(tmp_path, 2, 3, range(3))
    _step(tmp_path, 4, 3, range(3))
    _step(tmp_path, 6, 3, (0, 1))
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("8")
    out = module_runner(verl_checkpoint_info.main, {"path": str(tmp_path)})
    assert out["latest_step"] == 8 and out["resume_step"] == 4
    assert out["resume_dir"] == str(tmp_path / "global_step_4")
    assert out["incomplete"] == [{"step": 8, "missing_ranks": None}, {"step": 6, "missing_ranks": [2]}]


def test_a_whole_latest_step_is_the_resume_and_nothing_is_passed_over(tmp_path, module_runner):
    _step(tmp_path, 3, 2, range(2))
    out = module_runner(verl_checkpoint_info.main, {"path": str(tmp_path)})
    assert (out["latest_step"], out["resume_step"], out["incomplete"]) == (3, 3, [])
    # No whole step at all: nothing to resume from, said by resume_step None.
    _step(tmp_path, 5, 2, (1,))
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("5")
    (tmp_path / "global_step_3" / "actor" / "model_world_size_2_rank_0.pt").unlink()
    out = module_runner(verl_checkpoint_info.main, {"path": str(tmp_path)})
    assert out["resume_step"] is None and out["incomplete"] == [
        {"step": 5, "missing_ranks": [0]},
        {"step": 3, "missing_ranks": [0]},
    ]
