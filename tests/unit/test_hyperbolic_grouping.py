"""Host naming, clusters, heads, groups, unsafe marking and cache behaviour of the plugin,
on the fixture payloads of both API shapes (plugins/inventory/hyperbolic.py; the pure helpers are in
plugins/plugin_utils/hyperbolic_hosts.py)."""

from __future__ import annotations

import random
import re

import pytest
from ansible.errors import AnsibleParserError
from conftest_hyperbolic import Harness, fixture_answer, load_fixture, raw_answer

from ansible_collections.rlinfra.verl.plugins.inventory import hyperbolic as plugin_mod
from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic import client as hb
from ansible_collections.rlinfra.verl.plugins.plugin_utils import hyperbolic_hosts as hosts

CLUSTER_RE = "^exp-(?P<cluster>[^-]+)-"


@pytest.fixture
def harness(tmp_path, monkeypatch):
    return Harness(tmp_path, fixture_answer(), monkeypatch)


def _records():
    return hb.normalize_instances("on_demand", load_fixture("on_demand_rentals.json")) + hb.normalize_instances(
        "marketplace", load_fixture("marketplace_instances.json")["instances"]
    )


# ----------------------------------------------------------------------------- pure helpers
@pytest.mark.parametrize(
    "value, name",
    [
        ("exp-a-0", "exp-a-0"),
        ("Exp A / node #1 (ü)", "Exp-A-node-1"),
        ("{{ lookup('pipe', 'id') }}", "lookup-pipe-id"),
        ("..weird..", "weird"),
        ("", ""),
        (None, ""),
    ],
)
def test_sanitize_host_name(value, name):
    assert hosts.sanitize_host_name(value) == name


def test_host_names_unique_and_independent_of_api_order():
    records = _records()
    first = hosts.assign_host_names(records)
    names = [n for n, _ in first]
    assert len(names) == len(set(names))
    assert "dup" in names and "dup-vm-dup002" in names
    for seed in range(5):
        shuffled = list(records)
        random.Random(seed).shuffle(shuffled)
        again = hosts.assign_host_names(shuffled)
        assert [(n, r["id"]) for n, r in again] == [(n, r["id"]) for n, r in first]


def test_host_name_falls_back_to_id_then_suffix():
    recs = [
        {"source": "marketplace", "id": "a b", "label": None},
        {"source": "on_demand", "id": "x", "label": "a-b"},
        {"source": "on_demand", "id": "y", "label": "a-b"},
        {"source": "on_demand", "id": "???", "label": "!!!"},
    ]
    names = dict((r["id"], n) for n, r in hosts.assign_host_names(recs))
    assert sorted(names.values()) == sorted(set(names.values()))
    assert names["???"] == "instance"
    assert {names["a b"], names["x"], names["y"]} == {"a-b", "a-b-x", "a-b-y"}


def test_choose_heads_first_last_glob():
    clusters = {"a": [("n2", "exp-a-2"), ("n0", "exp-a-0"), ("n1", "exp-a-1")], "b": [("m1", "exp-b-1")]}
    assert hosts.choose_heads(clusters, "first")[0] == {"a": "n0", "b": "m1"}
    assert hosts.choose_heads(clusters, "last")[0] == {"a": "n2", "b": "m1"}
    heads, warnings = hosts.choose_heads(clusters, "*-1")
    assert heads == {"a": "n1", "b": "m1"} and warnings == []
    heads, warnings = hosts.choose_heads(clusters, "*-9")
    assert heads == {"a": "n0", "b": "m1"} and len(warnings) == 2


def test_cluster_from_regex_groups():
    rec = {"label": "exp-a-0", "id": "x"}
    assert hosts.cluster_from_regex(re.compile(CLUSTER_RE), rec) == "a"
    assert hosts.cluster_from_regex(re.compile("^exp-([^-]+)"), rec) == "a"
    assert hosts.cluster_from_regex(re.compile("exp-a"), rec) == "exp-a"
    assert hosts.cluster_from_regex(re.compile("^zzz"), rec) is None
    assert hosts.cluster_from_regex(re.compile("^(o.)"), {"label": None, "id": "ox-1"}) == "ox"


# ----------------------------------------------------------------------------- the plugin
def test_hosts_vars_and_filters(harness):
    snap = harness.parse({"cluster_from": CLUSTER_RE})
    hosts = snap["hosts"]
    # running/online only (any case); terminated, starting and offline left out
    assert sorted(hosts) == sorted(
        [
            "exp-a-0",
            "exp-a-1",
            "exp-b-0",
            "dup",
            "dup-vm-dup002",
            "lookup-pipe-id",
            "Exp-A-node-1",
            "brave-otter-cat",
            "calm-heron-fox",
            "quiet-lynx-owl",
            "exp-b-1",
        ]
    )
    assert hosts["exp-a-1"] == {
        "ansible_host": "203.0.113.11",
        "ansible_port": 30022,
        "ansible_user": "root",
        "hyperbolic_id": "vm-7f3a2d",
        "hyperbolic_label": "exp-a-1",
        "hyperbolic_status": "Running",
        "hyperbolic_gpu_type": "H100-SXM5-80GB",
        "hyperbolic_gpu_count": 8,
        "hyperbolic_region": "us-east-1",
        "hyperbolic_source": "on_demand",
        "ray_cluster": "a",
        "hyperbolic_kind": "virtual-machine",
        "hyperbolic_node": None,
        "hyperbolic_private_ip": None,
        "hyperbolic_cost_per_hour": None,
        "hyperbolic_user_metadata": None,
    }
    assert hosts["brave-otter-cat"]["ansible_port"] == 31065
    assert hosts["brave-otter-cat"]["hyperbolic_source"] == "marketplace"
    assert hosts["brave-otter-cat"]["hyperbolic_label"] is None
    assert hosts["exp-b-1"]["ray_cluster"] == "b"  # marketplace instance with a label
    # running but without SSH details: left out with a warning
    assert any("exp-c-0" in w and "SSH" in w for w in harness.warnings)


def test_groups_and_heads_per_cluster(harness):
    snap = harness.parse({"cluster_from": CLUSTER_RE})
    groups = snap["groups"]
    assert groups["ray_cluster_a"] == ["exp-a-0", "exp-a-1"]
    assert groups["ray_cluster_b"] == ["exp-b-0", "exp-b-1"]
    assert set(groups["ray_head"]) == {"exp-a-0", "exp-b-0", "Exp-A-node-1"}
    assert not set(groups["ray_head"]) & set(groups["ray_workers"])
    assert sorted(groups["ray_head"] + groups["ray_workers"]) == sorted(snap["hosts"])
    assert groups["hyperbolic"] == sorted(snap["hosts"])
    # exactly one head per cluster
    for cluster in ("a", "b", "default"):
        members = groups["ray_cluster_" + cluster]
        assert len(set(members) & set(groups["ray_head"])) == 1


def test_head_selector_glob_and_determinism(harness):
    snap = harness.parse({"cluster_from": CLUSTER_RE, "head_selector": "*-1"})
    assert {"exp-a-1", "exp-b-1"} <= set(snap["groups"]["ray_head"])
    again = harness.parse({"cluster_from": CLUSTER_RE, "head_selector": "*-1"})
    assert again == snap


def test_name_pattern_and_statuses(harness):
    snap = harness.parse({"name_pattern": "exp-a-*", "statuses": ["running", "terminated"]})
    # exp-a-9 (terminated) has no SSH details, so it is left out with a warning
    assert sorted(snap["hosts"]) == ["exp-a-0", "exp-a-1"]
    snap = harness.parse({"name_pattern": "*-fox"})  # marketplace instance without label: matched on id
    assert sorted(snap["hosts"]) == ["calm-heron-fox"]
    snap = harness.parse({"statuses": [], "name_pattern": "sleepy-*"})
    assert sorted(snap["hosts"]) == ["sleepy-moth-elk"]


def test_cluster_from_template(harness):
    snap = harness.parse({"cluster_from": "{{ (hyperbolic_region or 'nowhere') | replace('-', '_') }}"})
    assert snap["hosts"]["exp-a-0"]["ray_cluster"] == "us_east_1"
    assert snap["hosts"]["quiet-lynx-owl"]["ray_cluster"] == "nowhere"
    assert "ray_cluster_us_east_1" in snap["groups"]


def test_compose_can_set_ray_cluster_and_groups_run_after(harness):
    snap = harness.parse(
        {
            "compose": {
                "ray_cluster": "'big' if hyperbolic_gpu_count >= 4 else 'small'",
                "ansible_ssh_private_key_file": "'/keys/id'",
            },
            "groups": {"h100": "'H100' in (hyperbolic_gpu_type or '')"},
            "keyed_groups": [{"key": "hyperbolic_source", "prefix": "src"}],
        }
    )
    hosts = snap["hosts"]
    assert hosts["exp-a-0"]["ray_cluster"] == "big"
    assert hosts["dup"]["ray_cluster"] == "small"
    assert hosts["dup"]["ansible_ssh_private_key_file"] == "/keys/id"
    groups = snap["groups"]
    assert set(groups["ray_cluster_big"]) | set(groups["ray_cluster_small"]) == set(hosts)
    assert len(set(groups["ray_cluster_big"]) & set(groups["ray_head"])) == 1
    assert "exp-a-0" in groups["h100"] and "dup" not in groups["h100"]
    assert "brave-otter-cat" in groups["src_marketplace"]


def _trusted(text):
    """A template as Ansible would load it from a playbook (trusted on ansible-core >= 2.19)."""
    try:
        from ansible._internal._datatag._tags import TrustedAsTemplate
    except ImportError:
        return text
    return TrustedAsTemplate().tag(text)


def test_api_values_are_never_trusted_templates(harness):
    snap = harness.parse({})
    host = snap["hosts"]["lookup-pipe-id"]
    assert host["hyperbolic_label"] == "{{ lookup('pipe', 'id') }}"
    try:  # ansible-core >= 2.19: untrusted == not tagged TrustedAsTemplate
        from ansible._internal._datatag._tags import TrustedAsTemplate
    except ImportError:  # older cores: AnsibleUnsafeText
        from ansible.utils.unsafe_proxy import AnsibleUnsafe

        for value in host.values():
            assert value is None or isinstance(value, (int, AnsibleUnsafe))
    else:
        for vars_ in snap["hosts"].values():
            for value in vars_.values():
                assert not TrustedAsTemplate.is_tagged_on(value)
    # rendering the variables through Ansible's templar gives the text back, unexecuted
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar

    templar = Templar(loader=DataLoader(), variables=host)
    assert templar.template(_trusted("{{ hyperbolic_label }}")) == "{{ lookup('pipe', 'id') }}"
    assert templar.template(_trusted("{{ hyperbolic_gpu_type }}")) == "{{ 7 * 6 }}"
    assert templar.template(_trusted("{{ hyperbolic_region }}")) == "{% raw %}r{% endraw %}"


def test_404_source_skipped_with_warning(tmp_path, monkeypatch):
    raw = raw_answer(
        on_demand=load_fixture("on_demand_rentals.json"),
        skipped={"marketplace": "HTTP 404 on GET /v1/marketplace/instances: Not Found"},
    )
    h = Harness(tmp_path, raw, monkeypatch)
    snap = h.parse({})
    assert "exp-a-0" in snap["hosts"] and "brave-otter-cat" not in snap["hosts"]
    assert any("marketplace" in w and "404" in w for w in h.warnings)


def test_every_source_404_fails_the_inventory(tmp_path, monkeypatch):
    h = Harness(tmp_path, raw_answer(skipped={"on_demand": "HTTP 404", "marketplace": "HTTP 404"}), monkeypatch)
    with pytest.raises(AnsibleParserError, match="every source answered HTTP 404.*check api_url"):
        h.parse({})


def test_sources_option_limits_and_orders(harness):
    snap = harness.parse({"sources": ["marketplace"]})
    assert {v["hyperbolic_source"] for v in snap["hosts"].values()} == {"marketplace"}


def test_unknown_source_is_rejected(harness):
    with pytest.raises(AnsibleParserError, match="unknown sources entry 'spot'"):
        harness.parse({"sources": ["spot"]})


def test_bad_cluster_regex_is_reported(harness):
    with pytest.raises(AnsibleParserError, match="cluster_from"):
        harness.parse({"cluster_from": "exp-("})


# ----------------------------------------------------------------------------- cache
def test_cache_holds_raw_results_and_cached_run_is_identical(harness, tmp_path):
    options = {
        "cluster_from": CLUSTER_RE,
        "cache": True,
        "cache_plugin": "jsonfile",
        "cache_connection": str(tmp_path / "cache"),
        "keyed_groups": [{"key": "hyperbolic_region", "prefix": "region"}],
    }
    path = harness.write_config(options)
    first = harness.parse(path=path)
    assert harness.fetches == 1
    cached = harness.plugin._cache[harness.plugin.get_cache_key(str(path))]
    assert set(cached) == {"format", "api_url", "sources", "skipped"}  # raw API results only
    assert cached["sources"]["on_demand"][0]["providerData"]["sshNetworking"]
    assert "unit-test-key" not in repr(cached)

    second = harness.parse(path=path)
    assert harness.fetches == 1, "a cache hit must not call the API"
    assert second == first

    # --flush-cache (cache=False) refreshes
    third = harness.parse(path=path, cache=False)
    assert harness.fetches == 2 and third == first


def test_cache_miss_when_a_source_was_not_cached(harness, tmp_path):
    base = {"cache": True, "cache_plugin": "jsonfile", "cache_connection": str(tmp_path / "c")}
    path = harness.write_config(dict(base, sources=["on_demand"]))
    harness.parse(path=path)
    path = harness.write_config(dict(base, sources=["on_demand", "marketplace"]))
    harness.parse(path=path)
    assert harness.fetches == 2


def test_no_api_key_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.delenv("HYPERBOLIC_API_KEY", raising=False)
    h = Harness(tmp_path, fixture_answer(), monkeypatch)
    monkeypatch.undo()  # restore the real _fetch so the key is needed
    monkeypatch.delenv("HYPERBOLIC_API_KEY", raising=False)
    path = h.write_config({"api_key": None})
    with pytest.raises(AnsibleParserError, match="HYPERBOLIC_API_KEY"):
        h.parse(path=path)


def test_verify_file(tmp_path):
    plugin = plugin_mod.InventoryModule()
    for name, ok in (
        ("x.hyperbolic.yml", True),
        ("hyperbolic.yaml", True),
        ("x.yml", False),
        ("hyperbolic.yml.bak", False),
    ):
        path = tmp_path / name
        path.write_text("plugin: rlinfra.verl.hyperbolic\n")
        assert bool(plugin.verify_file(str(path))) is ok, name
    assert not plugin.verify_file(str(tmp_path / "missing.hyperbolic.yml"))


# ----------------------------------------------------------------------------- the rental shapes the clients read
def test_rentals_of_the_earlier_shape_become_hosts_with_their_price_metadata_and_nodes(tmp_path, monkeypatch):
    """SkyPilot's reading of ``/v2/marketplace/virtual-machine-rentals`` (sky/provision/hyperbolic/utils.py @02b1563):
    SSH only in ``meta.ssh_command``, GPUs in ``meta.resources.gpus``, the tag in ``meta.userMetadata``, the price
    in ``costPerHour`` (cents); HyperbolicLabs' CLI (cmd/instances.go): bare metal in ``meta.node_networking``."""
    skypilot = {
        "id": 123,
        "status": "Running",
        "costPerHour": 149,
        "terminatedAt": None,
        "meta": {
            "ssh_command": "ssh ubuntu@192.0.2.40 -p 31022",
            "internal_ip": "10.0.0.2",
            "resources": {"gpus": {"h100-sxm5-80gb": {"count": 1}}},
            "userMetadata": {"rlinfra": {"label": "exp-s", "name": "exp-s-0"}},
        },
    }
    tagged_elsewhere = {
        "id": 124,
        "status": "Running",
        "costPerHour": 149,
        "meta": {"ssh_command": "ssh ubuntu@192.0.2.41 -p 31023", "userMetadata": {"skypilot": {"cluster_name": "c1"}}},
    }
    metal = {
        "id": 900,
        "status": "Running",
        "costPerHour": 4000,
        "meta": {
            "rental_type": "bare-metal",
            "username": "root",
            "name": "exp-m",
            "node_networking": [
                {"public_ip": "192.0.2.70", "private_ip": "10.1.0.7"},
                {"public_ip": "192.0.2.71", "private_ip": "10.1.0.8"},
            ],
        },
    }
    harness = Harness(tmp_path, raw_answer(on_demand=[skypilot, tagged_elsewhere, metal]), monkeypatch)
    snap = harness.parse({"sources": ["on_demand"]})
    hosts = snap["hosts"]
    assert sorted(hosts) == ["124", "exp-m-node0", "exp-m-node1", "exp-s-0"]
    s0 = hosts["exp-s-0"]
    assert (
        s0["ansible_host"],
        s0["ansible_port"],
        s0["hyperbolic_gpu_type"],
        s0["hyperbolic_gpu_count"],
        s0["hyperbolic_cost_per_hour"],
        s0["hyperbolic_private_ip"],
        s0["ray_cluster"],
    ) == ("192.0.2.40", 31022, "h100-sxm5-80gb", 1, 1.49, "10.0.0.2", "exp-s")
    assert hosts["124"]["hyperbolic_user_metadata"] == {"skypilot": {"cluster_name": "c1"}}
    assert hosts["124"]["ray_cluster"] == "default"
    assert [
        (hosts[n]["ansible_host"], hosts[n]["hyperbolic_node"], hosts[n]["hyperbolic_id"], hosts[n]["ansible_user"])
        for n in ("exp-m-node0", "exp-m-node1")
    ] == [("192.0.2.70", 0, "900", "root"), ("192.0.2.71", 1, "900", "root")]
    assert hosts["exp-m-node0"]["hyperbolic_kind"] == "bare-metal"
    assert harness.warnings == []  # none left out for its SSH details, as before this shape was read
