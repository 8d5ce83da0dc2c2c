"""The progress line printed by rlinfra.verl.ray_job_wait while a job runs."""

from __future__ import annotations

from ansible_collections.rlinfra.verl.plugins.action.ray_job_wait import DEFAULT_METRICS
from ansible_collections.rlinfra.verl.plugins.module_utils.recovery import hms, progress_line


def test_progress_line_prefers_key_metrics():
    res = {"status": "RUNNING", "duration_s": 3725.4, "last_step": 120,
           "last_metrics": {"timing_s/gen": 3.2, "actor/pg_loss": -0.0123456, "critic/score/mean": 0.61,
                            "response_length/mean": 211.0, "perf/mfu": 0.4}}
    assert progress_line("gsm8k", res, DEFAULT_METRICS, 5) == (
        "gsm8k: RUNNING, 1:02:05, step:120 - critic/score/mean:0.61 - actor/pg_loss:-0.01235 - response_length/mean:211")


def test_progress_line_before_the_first_step_and_unknown_metrics():
    assert progress_line("smoke", {"status": "PENDING"}, DEFAULT_METRICS, 5) == "smoke: PENDING, -, no step yet"
    res = {"status": "SUCCEEDED", "duration_s": 12, "last_step": 3, "last_metrics": {"a": 1.0, "b": 2e9, "c": float("nan")}}
    assert progress_line("", res, DEFAULT_METRICS, 5) == "SUCCEEDED, 0:00:12, step:3 - a:1 - b:2.000e+09 - c:nan"
    assert hms(59.9) == "0:00:59"
