"""Parsing of both Hyperbolic API shapes (plugins/module_utils/hyperbolic/client.py)."""

from __future__ import annotations

import pytest
from conftest_hyperbolic import load_fixture

from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic import client as hyperbolic


# ----------------------------------------------------------------------------- ssh commands
@pytest.mark.parametrize(
    "command, expected",
    [
        ("ssh ubuntu@ssh.hyperbolic.xyz -p 31065", ("ssh.hyperbolic.xyz", 31065, "ubuntu")),
        ("ssh -p 31065 ubuntu@ssh.hyperbolic.xyz", ("ssh.hyperbolic.xyz", 31065, "ubuntu")),
        ("ssh -p22 root@10.0.0.1", ("10.0.0.1", 22, "root")),
        ("ssh root@10.0.0.1", ("10.0.0.1", 22, "root")),
        ("ssh 10.0.0.1", ("10.0.0.1", 22, "ubuntu")),
        ("ssh -l admin -p 2200 host.example", ("host.example", 2200, "admin")),
        ("ssh -o Port=2201 -o User=bob host.example", ("host.example", 2201, "bob")),
        (
            "ssh -i ~/.ssh/id_ed25519 -o StrictHostKeyChecking=no -p2200 ubuntu@192.0.2.53",
            ("192.0.2.53", 2200, "ubuntu"),
        ),
        ("ssh -A -t ubuntu@h.example -p 40000", ("h.example", 40000, "ubuntu")),
        ("/usr/bin/ssh ubuntu@h.example -p 40000", ("h.example", 40000, "ubuntu")),
        ("ssh ubuntu@[2001:db8::1] -p 2222", ("2001:db8::1", 2222, "ubuntu")),
        ("ssh ssh://bob@h.example:2022", ("h.example", 2022, "bob")),
        ("ssh -i '/path with space/key' ubuntu@h.example -p 2022", ("h.example", 2022, "ubuntu")),
    ],
)
def test_parse_ssh_command(command, expected):
    got = hyperbolic.parse_ssh_command(command)
    assert (got["host"], got["port"], got["user"]) == expected


def test_parse_ssh_command_default_user_and_bad_input():
    assert hyperbolic.parse_ssh_command("ssh h.example", default_user="root")["user"] == "root"
    # not a usable "ssh USER@HOST [-p PORT]": no host is better than a wrong one (details in
    # tests/unit/test_bad_input_inventory.py)
    for bad in (
        None,
        "",
        "ssh",
        "ssh -p 22",
        42,
        "ssh -p 99999 u@h",
        "ssh ubuntu@h.example -p 2022 nvidia-smi",
        "please connect via console",
        "ssh please",
    ):
        assert hyperbolic.parse_ssh_command(bad) is None, bad


# ----------------------------------------------------------------------------- on_demand
def _by_id(records):
    return {r["id"]: r for r in records}


def test_normalize_on_demand_fixture():
    records = _by_id(hyperbolic.normalize_instances("on_demand", load_fixture("on_demand_rentals.json")))
    first = records["vm-7f3a2c"]
    assert first == {
        "source": "on_demand",
        "id": "vm-7f3a2c",
        "label": "exp-a-0",
        "status": "running",
        "gpu_type": "H100-SXM5-80GB",
        "gpu_count": 8,
        "region": "us-east-1",
        "ssh": {"host": "203.0.113.10", "port": 22, "user": "ubuntu"},
        "cost_per_hour": None,
        "kind": "virtual-machine",
        "private_ip": None,
        "user_metadata": None,
    }
    # port given as a string, non-default user
    assert records["vm-7f3a2d"]["ssh"] == {"host": "203.0.113.11", "port": 30022, "user": "root"}
    # no user in sshNetworking -> default user
    assert records["vm-7f3a2e"]["ssh"] == {"host": "gpu-b0.example.net", "port": 2201, "user": "ubuntu"}
    # not running yet / no networking -> no ssh details, but still parsed
    assert records["vm-boot01"]["ssh"] is None
    assert records["vm-dead01"]["ssh"] is None
    # sshNetworking given as a single object
    assert records["vm-space01"]["ssh"]["port"] == 2222
    # API text is kept verbatim (marking it unsafe is the plugin's job)
    assert records["vm-jinja01"]["label"] == "{{ lookup('pipe', 'id') }}"


def test_normalize_on_demand_reads_both_public_shapes():
    """The current on-demand shape (claude-hyperbolic-guardrails, lisa-rtm) and the earlier /v2/marketplace one
    (SkyPilot's provisioner, HyperbolicLabs' CLI): SSH, GPUs, price and the name this collection gave it."""
    current = {
        "id": 18025,
        "rentalId": "6qsRH8--y1YL",
        "status": "Running",
        "gpuType": "h100",
        "gpuCount": 8,
        "region": "ca-east-1",
        "label": "exp-a-0",
        "currentTerm": {"costPerHourCents": 2552},
        "providerData": {"sshNetworking": [{"host": "38.80.122.148", "port": 22, "user": "ubuntu"}]},
    }
    earlier = {
        "id": 123,
        "status": "Running",
        "costPerHour": 149,
        "terminatedAt": None,
        "meta": {
            "ssh_command": "ssh ubuntu@1.2.3.4 -p 31022",
            "gpu_count": 1,
            "resources": {"gpus": {"h100-sxm5-80gb": {"count": 1}}},
            "userMetadata": {"rlinfra": {"label": "exp-b", "name": "exp-b-0"}},
        },
    }
    assert hyperbolic.normalize_on_demand(current) == {
        "source": "on_demand",
        "id": "18025",
        "label": "exp-a-0",
        "status": "Running",
        "gpu_type": "h100",
        "gpu_count": 8,
        "region": "ca-east-1",
        "ssh": {"host": "38.80.122.148", "port": 22, "user": "ubuntu"},
        "cost_per_hour": 25.52,
        "kind": "virtual-machine",
        "private_ip": None,
        "user_metadata": None,
    }
    assert hyperbolic.normalize_on_demand(earlier) == {
        "source": "on_demand",
        "id": "123",
        "label": "exp-b-0",
        "status": "Running",
        "gpu_type": "h100-sxm5-80gb",
        "gpu_count": 1,
        "region": None,
        "ssh": {"host": "1.2.3.4", "port": 31022, "user": "ubuntu"},
        "cost_per_hour": 1.49,
        "kind": "virtual-machine",
        "private_ip": None,
        "user_metadata": {"rlinfra": {"label": "exp-b", "name": "exp-b-0"}},
    }


def test_bare_metal_rentals_of_several_nodes_become_one_record_per_node():
    """HyperbolicLabs' CLI (cmd/instances.go, OnDemandInstanceMeta): bare-metal rentals carry ``rental_type``,
    ``node_networking`` [{public_ip, private_ip}] and ``username``; SkyPilot's reading gives ``internal_ip`` on VMs."""
    metal = {
        "id": 900,
        "status": "Running",
        "costPerHour": 4000,
        "meta": {
            "rental_type": "bare-metal",
            "node_count": 2,
            "username": "root",
            "network_type": "infiniband",
            "name": "exp-c",
            "node_networking": [
                {"public_ip": "192.0.2.70", "private_ip": "10.1.0.7"},
                {"public_ip": "192.0.2.71", "private_ip": "10.1.0.8"},
                {"public_ip": "not a host!", "private_ip": "10.1.0.9"},
            ],
        },
    }
    record = hyperbolic.normalize_on_demand(metal)
    assert record["kind"] == "bare-metal" and record["cost_per_hour"] == 40.0 and len(record["nodes"]) == 2
    nodes = hyperbolic.expand_nodes([record])
    assert [(n["label"], n["node"], n["ssh"], n["private_ip"], n["id"]) for n in nodes] == [
        ("exp-c-node0", 0, {"host": "192.0.2.70", "port": 22, "user": "root"}, "10.1.0.7", "900"),
        ("exp-c-node1", 1, {"host": "192.0.2.71", "port": 22, "user": "root"}, "10.1.0.8", "900"),
    ]
    vm = hyperbolic.normalize_on_demand(
        {
            "id": 5,
            "status": "Running",
            "meta": {"ssh_command": "ssh ubuntu@1.2.3.4 -p 31022", "internal_ip": "10.0.0.2"},
        }
    )
    assert vm["private_ip"] == "10.0.0.2" and hyperbolic.expand_nodes([vm]) == [vm]


def test_a_bare_metal_rental_with_a_node_on_loopback_is_left_out_whole():
    """One node whose public address is the controller's own loopback: never a node short, never a host on the
    controller; the rental keeps no SSH details and says why (the inventory warns it, naming the rental)."""
    metal = {
        "id": 901,
        "status": "Running",
        "meta": {
            "rental_type": "bare-metal",
            "name": "exp-l",
            "username": "root",
            "node_networking": [{"public_ip": "192.0.2.72"}, {"public_ip": "::1"}],
        },
    }
    record = hyperbolic.normalize_on_demand(metal)
    assert record["ssh"] is None and "nodes" not in record and hyperbolic.expand_nodes([record]) == [record]
    assert record["ssh_error"] == (
        "node_networking[1] public_ip '::1' is this machine's own loopback: SSH there reaches the controller, not the "
        "rented machine; check the rental's address in Hyperbolic's console"
    )


def test_normalize_on_demand_accepts_sshcommand_shape():
    item = {"id": "x", "status": "running", "sshCommand": "ssh -p 2022 root@h.example"}
    assert hyperbolic.normalize_on_demand(item)["ssh"] == {"host": "h.example", "port": 2022, "user": "root"}


# ----------------------------------------------------------------------------- marketplace
def test_normalize_marketplace_fixture():
    items = load_fixture("marketplace_instances.json")["instances"]
    records = _by_id(hyperbolic.normalize_instances("marketplace", items))
    otter = records["brave-otter-cat"]
    assert otter == {
        "source": "marketplace",
        "id": "brave-otter-cat",
        "label": None,
        "status": "online",
        "gpu_type": "NVIDIA-H100-80GB-HBM3",
        "gpu_count": 2,
        "region": "us-central-1",
        "ssh": {"host": "ssh.hyperbolic.example", "port": 31065, "user": "ubuntu"},
        "cost_per_hour": None,
        "kind": "virtual-machine",
        "private_ip": None,
        "user_metadata": None,
    }
    heron = records["calm-heron-fox"]
    assert heron["ssh"] == {"host": "192.0.2.50", "port": 2222, "user": "root"}
    assert heron["gpu_count"] == 3  # no gpu_count: counted from hardware.gpus
    assert heron["status"] == "ONLINE"
    assert records["quiet-lynx-owl"]["ssh"] == {"host": "192.0.2.51", "port": 22, "user": "ubuntu"}
    assert records["quiet-lynx-owl"]["region"] is None
    assert records["tidy-crane-yak"]["label"] == "exp-b-1"
    assert records["tidy-crane-yak"]["ssh"]["port"] == 2200


def test_normalize_marketplace_accepts_ssh_networking_shape():
    item = {
        "id": "m1",
        "instance": {"status": "online"},
        "providerData": {"sshNetworking": [{"host": "h", "port": 2000, "user": "u"}]},
    }
    assert hyperbolic.normalize_marketplace(item)["ssh"] == {"host": "h", "port": 2000, "user": "u"}


# ----------------------------------------------------------------------------- shapes and errors
def test_extract_items_shapes():
    assert hyperbolic.extract_items("on_demand", [{"id": 1}]) == [{"id": 1}]
    assert hyperbolic.extract_items("on_demand", {"rentals": [{"id": 1}]}) == [{"id": 1}]
    assert hyperbolic.extract_items("marketplace", {"instances": [{"id": 1}]}) == [{"id": 1}]
    assert hyperbolic.extract_items("marketplace", {"instances": None}) == []
    for source, bad in (
        ("on_demand", {"x": 1}),
        ("on_demand", "nope"),
        ("marketplace", {"instances": [1]}),
        ("marketplace", 3),
    ):
        with pytest.raises(hyperbolic.HyperbolicResponseError):
            hyperbolic.extract_items(source, bad)


def test_item_without_id_fails_whole_source():
    with pytest.raises(hyperbolic.HyperbolicResponseError, match="no usable id"):
        hyperbolic.normalize_instances("on_demand", [{"id": "ok", "status": "running"}, {"status": "running"}])


def test_numeric_ids_become_text():
    record = hyperbolic.normalize_on_demand({"id": 12345, "status": "running", "gpuCount": "2"})
    assert record["id"] == "12345" and record["gpu_count"] == 2


@pytest.mark.parametrize(
    "status, wanted, keep",
    [
        ("running", {"running", "online"}, True),
        ("Running", {"running", "online"}, True),
        ("ONLINE", {"running", "online"}, True),
        ("terminated", {"running", "online"}, False),
        ("", {"running"}, False),
        ("starting", set(), True),
        ("starting", {"*"}, True),
        ("starting", {"all"}, True),
    ],
)
def test_status_filter(status, wanted, keep):
    assert hyperbolic.status_is_wanted(status, wanted) is keep


@pytest.mark.parametrize(
    "body, message",
    [
        (b'{"detail": "Invalid API key"}', "Invalid API key"),
        (b'{"message": "Forbidden:  no\\naccess"}', "Forbidden: no access"),
        (b'{"error": {"message": "quota"}}', "quota"),
        (b"<html>Bad Gateway</html>", "<html>Bad Gateway</html>"),
        (b"", ""),
    ],
)
def test_api_message(body, message):
    assert hyperbolic.api_message(body) == message


def test_retry_after_parsing():
    assert hyperbolic._retry_after_seconds("3") == 3.0
    assert hyperbolic._retry_after_seconds("0.5") == 0.5
    assert hyperbolic._retry_after_seconds(None) is None
    assert hyperbolic._retry_after_seconds("soon") is None
    assert hyperbolic._retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == pytest.approx(10.0)
