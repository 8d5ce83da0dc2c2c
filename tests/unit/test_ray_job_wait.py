"""rlinfra.verl.ray_job_wait: the progress line it prints while a job runs, and the dashboard options it passes on."""

from __future__ import annotations

import itertools

import pytest

from ansible_collections.rlinfra.verl.plugins.action import ray_job_wait as W
from ansible_collections.rlinfra.verl.plugins.action.ray_job_wait import DEFAULT_METRICS
from ansible_collections.rlinfra.verl.plugins.module_utils.ray import watchdog
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.recovery import hms, progress_line


def test_progress_line_prefers_key_metrics():
    res = {
        "status": "RUNNING",
        "duration_s": 3725.4,
        "last_step": 120,
        "last_metrics": {
            "timing_s/gen": 3.2,
            "actor/pg_loss": -0.0123456,
            "critic/score/mean": 0.61,
            "response_length/mean": 211.0,
            "perf/mfu": 0.4,
        },
    }
    assert progress_line("gsm8k", res, DEFAULT_METRICS, 5) == (
        "gsm8k: RUNNING, 1:02:05, step:120 - critic/score/mean:0.61 - actor/pg_loss:-0.01235 - response_length/mean:211"
    )


def test_progress_line_before_the_first_step_and_unknown_metrics():
    assert progress_line("smoke", {"status": "PENDING"}, DEFAULT_METRICS, 5) == "smoke: PENDING, -, no step yet"
    res = {
        "status": "SUCCEEDED",
        "duration_s": 12,
        "last_step": 3,
        "last_metrics": {"a": 1.0, "b": 2e9, "c": float("nan")},
    }
    assert progress_line("", res, DEFAULT_METRICS, 5) == "SUCCEEDED, 0:00:12, step:3 - a:1 - b:2.000e+09 - c:nan"
    assert hms(59.9) == "0:00:59"


# The watchdog with an empty address: the modules on the target resolve it, the wait shows what they used -------

HEAD_URL = "http://10.0.0.5:8265"
NO_ADDRESS = (
    "no Ray dashboard address on this host: it has no rlinfra_ray local fact "
    "(/etc/ansible/facts.d/rlinfra_ray.fact, written by site.yml) and address is not set"
)


class FakeAction:
    """Stands for the action plugin: records the modules run on the target and answers from a script."""

    class _connection:  # cannot pipeline: node_script runs the module, whose answers the test scripts
        has_pipelining = False
        become = None

    # The run report's read of the head's Prometheus (ray_metrics state=query) is answered apart from the script.
    METRICS = {"failed": True, "msg": "no Prometheus on this node (/etc/ray/metrics/prometheus.yml is missing)"}

    def __init__(self, answers, metrics=None):
        self.answers = iter(answers)
        self.calls = []
        self.metric_calls = []
        self.metrics = metrics or self.METRICS

    def _execute_module(self, module_name, module_args, task_vars):
        if module_name == "rlinfra.verl.ray_metrics":
            self.metric_calls.append(dict(module_args))
            return self.metrics
        self.calls.append((module_name, dict(module_args)))
        return next(self.answers)


def watch(answers, **args):
    spec = {k: v.get("default") for k, v in W.ARGUMENT_SPEC.items()}
    # 0.1: the shortest interval ray_job_wait and ray_job_poll take (node_script.call checks the poll's arguments).
    spec.update(submission_id="rlinfra-gsm8k-default", poll_interval=0.1, outage_grace=30, **args)
    action = FakeAction(answers)
    w = W.Watch(action, spec, {})
    ticks = itertools.count(0, 10)
    w.clock = lambda: float(next(ticks))
    w.t0 = w.clock()
    return w, action


def poll(**res):
    return dict(
        dict(
            reachable=True,
            found=True,
            address=HEAD_URL,
            nodes=[],
            dashboard_url=HEAD_URL + "/#/jobs/rlinfra-gsm8k-default",
        ),
        **res,
    )


def test_an_empty_address_goes_on_empty_and_lines_name_the_one_used(monkeypatch):
    monkeypatch.setattr(W.time, "sleep", lambda s: None)
    down = poll(reachable=False, found=False, error="connection refused")
    w, action = watch([down] * 10)
    with pytest.raises(W.Done) as done:
        w.run()
    assert done.value.reason == "unreachable"
    assert done.value.line.startswith("the Ray dashboard at %s has not answered for " % HEAD_URL)
    name, module_args = action.calls[0]
    assert name == "rlinfra.verl.ray_job_poll"
    assert (module_args["address"], module_args["auth_token"], module_args["auth_token_path"]) == ("", None, None)
    result = w.result(done.value.reason, done.value.line)
    assert (result["address"], result["dashboard_url"]) == (HEAD_URL, HEAD_URL + "/#/jobs/rlinfra-gsm8k-default")


def test_a_missing_job_names_the_dashboard_the_module_used():
    w, action = watch([poll(found=False)])
    with pytest.raises(W.Done) as done:
        w.run()
    assert done.value.reason == "missing"
    assert done.value.line.startswith("Ray job rlinfra-gsm8k-default does not exist on the cluster at %s (" % HEAD_URL)
    result = w.result("missing", done.value.line)
    assert (result["address"], result["dashboard_url"]) == (HEAD_URL, HEAD_URL + "/#/jobs/rlinfra-gsm8k-default")


def test_an_explicit_address_is_passed_as_given():
    w, action = watch(
        [poll(found=False, address="http://10.9.9.9:8265")],
        address="10.9.9.9:8265",
        auth_token_path="/etc/ray/auth_token",
    )
    with pytest.raises(W.Done) as done:
        w.run()
    assert action.calls[0][1]["address"] == "10.9.9.9:8265"
    assert action.calls[0][1]["auth_token_path"] == "/etc/ray/auth_token"
    assert "at http://10.9.9.9:8265 (" in done.value.line


def test_no_address_on_the_target_ends_the_wait_with_the_modules_line():
    w, action = watch([dict(failed=True, msg=NO_ADDRESS)])
    with pytest.raises(W.Done) as done:
        w.run()
    assert (done.value.reason, done.value.line) == ("error", NO_ADDRESS)
    assert w.result("error", NO_ADDRESS)["address"] == ""


def test_the_wait_does_every_request_of_the_watchdog_and_refuses_another():
    w, dummy = watch([])
    for kind in watchdog.REQUESTS:
        assert callable(getattr(w, kind, None)), kind
    with pytest.raises(ValueError, match="'run', which is none of its requests"):
        watchdog.do(w, ("run",))
