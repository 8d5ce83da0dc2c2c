"""The run's GPU-hours and cost (module_utils/hyperbolic/run_cost.py) and its line in submit.yml's summary (job_result)."""

from __future__ import annotations

from ansible_collections.rlinfra.verl.plugins.filter.job_result import job_result
from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic.run_cost import (
    cost_line,
    node_prices,
    run_cost,
    run_seconds,
)

RENDERED = {
    "experiment": {"name": "smoke", "framework": "none", "path": "/e/smoke.yml"},
    "cluster": "c",
    "submission_id": "rlinfra-smoke-c",
    "checkpoint_dir": "/d",
    "run_artifacts_dir": "/a",
}
HOSTVARS = {
    "c-0": {"hyperbolic_cost_per_hour": "25.52", "hyperbolic_gpu_count": 8},
    "c-1": {"hyperbolic_cost_per_hour": 25.52, "hyperbolic_gpu_count": "8"},
    "ssh-host": {"ansible_host": "10.0.0.9"},
}


def test_prices_come_from_the_host_variables_and_unknown_stays_unknown():
    assert node_prices(["c-0", "ssh-host", "gone"], HOSTVARS) == [
        dict(host="c-0", cost_per_hour=25.52, gpu_count=8),
        dict(host="ssh-host", cost_per_hour=None, gpu_count=None),
        dict(host="gone", cost_per_hour=None, gpu_count=None),
    ]
    assert node_prices(["c-0"], {"c-0": {"hyperbolic_cost_per_hour": True, "hyperbolic_gpu_count": -1}}) == [
        dict(host="c-0", cost_per_hour=None, gpu_count=None)
    ]


def test_the_wall_time_spans_every_attempt_recoveries_included():
    waited = {
        "duration_s": 60.0,
        "attempts": [
            {"start_time": "2026-11-26T10:00:00+00:00", "end_time": "2026-11-26T10:20:00+00:00"},
            {"start_time": "2026-11-26T10:25:00Z", "end_time": "2026-11-26T10:30:00Z"},
        ],
    }
    assert run_seconds(waited) == 1800.0
    assert (
        run_seconds({"duration_s": 60.0, "attempts": [{"start_time": "2026-11-26T10:00:00", "end_time": None}]}) == 60.0
    )
    assert run_seconds({}) is None


def test_cost_only_when_every_node_is_priced():
    both = run_cost(node_prices(["c-0", "c-1"], HOSTVARS), 1800.0)
    assert both == dict(seconds=1800.0, nodes=2, priced=2, cost_per_hour=51.04, cost=25.52, gpu_hours=8.0)
    assert cost_line(both) == "cost:          8.00 GPU-hours, $25.52 (2 node(s) at $51.04/h for 0:30:00)"
    mixed = run_cost(node_prices(["c-0", "ssh-host"], HOSTVARS), 1800.0)
    assert mixed["cost"] is None and mixed["gpu_hours"] is None and cost_line(mixed) == ""
    partial = run_cost(
        [dict(host="a", cost_per_hour=None, gpu_count=8), dict(host="b", cost_per_hour=2.0, gpu_count=8)], 3600.0
    )
    assert cost_line(partial).startswith("cost:          16.00 GPU-hours, cost unknown (1 of 2 node(s) priced")
    assert run_cost(node_prices(["c-0"], HOSTVARS), None) is None and cost_line(None) == ""


def test_the_summary_says_what_the_run_cost():
    waited = {
        "submission_id": "rlinfra-smoke-c",
        "status": "SUCCEEDED",
        "succeeded": True,
        "duration_s": 900.0,
        "summary": ["status:        SUCCEEDED"],
        "attempts": [],
        "dashboard_url": "http://h:8265",
    }
    r = job_result(RENDERED, {"submission_id": "rlinfra-smoke-c"}, waited, 30, ["c-0", "c-1"], HOSTVARS)
    assert r["cost"]["cost"] == 12.76 and r["cost"]["gpu_hours"] == 4.0
    assert r["lines"][1:3] == [
        "status:        SUCCEEDED",
        "cost:          4.00 GPU-hours, $12.76 (2 node(s) at $51.04/h for 0:15:00)",
    ]
    plain = job_result(RENDERED, {"submission_id": "rlinfra-smoke-c"}, waited, 30, ["ssh-host"], HOSTVARS)
    assert plain["cost"]["cost"] is None and not any(line.startswith("cost:") for line in plain["lines"])
    assert job_result(RENDERED, {"submission_id": "s"}, {"skipped": True}, 30, ["c-0"], HOSTVARS)["cost"] is None
