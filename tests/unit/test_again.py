"""recovery.replace, the whole cluster gone (module_utils/hyperbolic/again.py): when the controller's submit rents the
cluster again, with which provision.yml switches, and what it passes on of the submit's own command line."""

from __future__ import annotations

from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic import again

RECORD = {
    "label": "prov",
    "rentals": {
        "18002": {
            "api": "on_demand",
            "name": "prov-1",
            "cost_per_hour": 25.52,
            "gpu_type": "h100",
            "gpu_count": 8,
            "region": "us-east-1",
        },
        "18001": {
            "api": "on_demand",
            "name": "prov-0",
            "cost_per_hour": 25.52,
            "gpu_type": "h100",
            "gpu_count": 8,
            "region": "us-east-1",
        },
    },
}


def test_the_spec_is_the_records():
    assert again.spec(RECORD) == dict(nodes=2, gpu="h100", gpu_count=8, region="us-east-1", api="on_demand")
    assert again.spec({"label": "prov", "rentals": {}}) is None and again.spec({}) is None
    market = {"rentals": {"a": {"api": "marketplace", "name": "m-0", "gpu_count": 4}}}
    assert again.spec(market) == dict(nodes=1, gpu="any", gpu_count=4, region="", api="marketplace")


def test_gone_only_when_the_provider_ended_the_head():
    assert again.head_of(RECORD) == "prov-0" and again.head_of({}) == ""
    assert again.gone(RECORD, ["prov-1"]) == "the API no longer lists the rental of its head prov-0 (terminated)"
    assert again.gone(RECORD, []) == "the API no longer lists the rental of its head prov-0 (terminated)"
    assert again.gone(RECORD, ["prov-0", "prov-1"]) == ""  # listed: rebooting or cut off, not gone
    assert again.gone(RECORD, ["prov-0"]) == ""  # a worker alone: the supervisor's to replace, never rented twice


def test_provision_switches_and_what_is_passed_on():
    assert again.provision_switches("prov", again.spec(RECORD)) == [
        "label=prov",
        "nodes=2",
        "gpu=h100",
        "gpu_count=8",
        "api=on_demand",
        "region=us-east-1",
    ]
    assert again.provision_switches("m", dict(nodes=1, gpu="any", gpu_count=4, region="", api="marketplace")) == [
        "label=m",
        "nodes=1",
        "gpu=any",
        "gpu_count=4",
        "api=marketplace",
    ]
    given = {
        "exp": "x",
        "run": "2",
        "cluster": "prov",
        "wait": "false",
        "dry_run": "false",
        "on_end": "keep",
        "checkpoint_cluster": "a",
        "hyperbolic_record_dir": "/r",
        "fitness_min_gbit": "0.2",
    }
    assert again.without_submit_switches(given) == {"hyperbolic_record_dir": "/r", "fitness_min_gbit": "0.2"}


def test_the_line_names_why_how_long_and_the_machines():
    assert again.summary_line(
        "prov",
        "the API no longer lists the rental of its head prov-0 (terminated)",
        93.4,
        [dict(name="prov-0", id="18005")],
    ) == (
        "cluster prov was gone (the API no longer lists the rental of its head prov-0 (terminated)): rented again and "
        "converged with provision.yml in 93s (prov-0 = rental 18005); the run resumes from the checkpoints on the "
        "shared volume"
    )


def test_no_new_machine_dearer_a_gpu_hour_than_the_records():
    assert abs(again.ceiling(RECORD) - 25.52 / 8) < 1e-6
    assert again.ceiling({"rentals": {"a": {"name": "x-0", "gpu_count": 8}}}) is None and again.ceiling({}) is None
