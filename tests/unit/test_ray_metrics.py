"""ray_metrics (module rlinfra.verl.ray_metrics, module_utils/observe/metrics.py, its I/O in metrics_node.py):
node_exporter everywhere, Prometheus on the head, basic auth whose password never lands in argv, output or a readable
file, and a re-run that changes nothing. The module runs in-process on files under tmp_path over a fake systemctl and
stand-in binaries; the real services are the sandbox's (docs/OBSERVABILITY.md)."""

from __future__ import annotations

import json
import os
import pwd

import pytest

from ansible_collections.rlinfra.verl.plugins.filter.dashboard_access import prometheus_access
from ansible_collections.rlinfra.verl.plugins.module_utils.common import owned, settings
from ansible_collections.rlinfra.verl.plugins.module_utils.observe import metrics, metrics_node
from ansible_collections.rlinfra.verl.plugins.modules import ray_metrics

PASSWORD = "s3cr3tMetricsPassw0rdXYZ"
MEMBERS = [{"host": "worker-1", "address": "10.0.0.6"}, {"host": "head-1", "address": "10.0.0.5"}]


# ---- pure decisions --------------------------------------------------------------------------------------------


def test_bcrypt_through_libcrypt_hashes_and_verifies():
    b = metrics.Bcrypt()
    hashed = b.hash(PASSWORD, cost=4)
    assert hashed.startswith("$2b$04$") and len(hashed) == 60
    assert b.verify(PASSWORD, hashed) and not b.verify(PASSWORD + "x", hashed) and not b.verify(PASSWORD, "garbage")


def test_without_libcrypt_the_hash_is_one_line_not_a_crash():
    b = metrics.Bcrypt(find=lambda name: None)
    with pytest.raises(metrics.MetricsError, match="no libcrypt"):
        b.hash(PASSWORD)
    assert b.verify(PASSWORD, "$2b$04$" + "a" * 53) is False


def test_web_config_round_trip_and_a_matching_hash_is_kept():
    b = metrics.Bcrypt()
    hashed = b.hash(PASSWORD, cost=4)
    text = metrics.web_config(hashed)
    assert text.endswith('basic_auth_users:\n  "rlinfra": "%s"\n' % hashed) and PASSWORD not in text
    assert metrics.hash_in(text) == hashed
    assert metrics.kept_hash(text, PASSWORD, b) == hashed  # a re-run writes nothing: bcrypt salts differ
    renewed = metrics.kept_hash(text, "another password", b)
    assert renewed != hashed and b.verify("another password", renewed)
    with pytest.raises(metrics.MetricsError):
        metrics.web_config("plain-text")


def test_prometheus_headers_are_what_rays_dashboard_parses():
    headers = json.loads(metrics.prometheus_headers(PASSWORD))
    assert list(headers) == ["Authorization"] and headers["Authorization"].startswith("Basic ")
    import base64

    assert base64.b64decode(headers["Authorization"][6:]).decode() == "rlinfra:" + PASSWORD


def test_units_listen_on_the_private_address_behind_the_web_config():
    unit = metrics.exporter_unit(
        "/usr/bin/prometheus-node-exporter", "10.0.0.5", 9100, "/etc/ray/metrics/exporter-web.yml", "prometheus"
    )
    assert (
        "ExecStart=/usr/bin/prometheus-node-exporter --web.listen-address=10.0.0.5:9100 "
        "--web.config.file=/etc/ray/metrics/exporter-web.yml\n"
    ) in unit
    assert "User=prometheus\n" in unit and "WantedBy=multi-user.target" in unit
    v6 = metrics.exporter_unit("/usr/bin/x", "fd00::5", 9100, "/w.yml", "root")
    assert "--web.listen-address=[fd00::5]:9100" in v6
    prom = metrics.prometheus_unit(
        "/usr/bin/prometheus",
        "10.0.0.5",
        9090,
        "/etc/ray/metrics/prometheus.yml",
        "/etc/ray/metrics/prometheus-web.yml",
        "/workspace/prometheus",
        "15d",
        "root",
    )
    assert (
        "ExecStart=/usr/bin/prometheus --config.file=/etc/ray/metrics/prometheus.yml "
        "--storage.tsdb.path=/workspace/prometheus --storage.tsdb.retention.time=15d "
        "--web.listen-address=10.0.0.5:9090 --web.config.file=/etc/ray/metrics/prometheus-web.yml\n"
    ) in prom
    assert "ExecReload=/bin/kill -HUP $MAINPID" in prom


def test_scrape_config_names_every_member_ray_and_dcgm_only_where_installed():
    members = [dict(MEMBERS[0], dcgm=True), dict(MEMBERS[1], dcgm=False)]
    text = metrics.prometheus_config(
        members, 9100, 9400, "/etc/ray/metrics/password", "/workspace/ray/prom_metrics_service_discovery.json"
    )
    import yaml

    config = yaml.safe_load(text)
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert jobs["node"]["basic_auth"] == {"username": "rlinfra", "password_file": "/etc/ray/metrics/password"}
    assert jobs["node"]["static_configs"] == [
        {"targets": ["10.0.0.5:9100"], "labels": {"node": "head-1"}},
        {"targets": ["10.0.0.6:9100"], "labels": {"node": "worker-1"}},
    ]
    assert jobs["ray"]["file_sd_configs"][0]["files"] == ["/workspace/ray/prom_metrics_service_discovery.json"]
    assert jobs["dcgm"]["static_configs"] == [{"targets": ["10.0.0.6:9400"], "labels": {"node": "worker-1"}}]
    assert "dcgm" not in metrics.prometheus_config(MEMBERS, 9100, 9400, "/p", "/sd.json").split("job_name: ray")[1]
    assert metrics.members_in(text) == [("head-1", "10.0.0.5"), ("worker-1", "10.0.0.6")]


def test_scrape_config_refuses_a_member_without_an_address():
    with pytest.raises(metrics.MetricsError, match="worker-9"):
        metrics.prometheus_config(MEMBERS + [{"host": "worker-9", "address": ""}], 9100, 9400, "/p", "/sd.json")


@pytest.mark.parametrize(
    "active,enabled,unit,web,config,reloadable,expect",
    [
        (True, True, False, False, False, True, (False, "", False)),  # a re-run: nothing
        (False, False, True, False, False, False, (True, "start", True)),  # first converge
        (True, True, True, False, False, True, (True, "restart", False)),
        (True, True, False, True, False, True, (False, "restart", False)),
        (True, True, False, False, True, True, (False, "reload", False)),  # Prometheus: config alone reloads
        (True, False, False, False, False, True, (False, "", True)),
    ],
)
def test_what_a_change_means_for_the_service(active, enabled, unit, web, config, reloadable, expect):
    assert metrics.service_action(active, enabled, unit, web, config, reloadable) == expect


def test_one_utilisation_line_per_node_gpu_only_when_known():
    structure = {
        "cpu": {"head-1": [(1, 10.0), (2, 12.4)], "worker-1": [(1, 50.0), (2, None)]},
        "memory": {"head-1": [(2, 40.0)]},
        "gpu": {"worker-1": [(2, 55.5)]},
    }
    assert metrics.utilisation_lines(structure, ["head-1", "worker-1", "worker-2"]) == [
        "head-1: CPU 12%, memory 40%",
        "worker-1: CPU 50%, memory unknown, GPU 56%",
        "worker-2: CPU unknown, memory unknown",
    ]


def test_the_tunnel_to_prometheus_connects_like_the_dashboards_and_never_shows_the_password():
    hv = {
        "ansible_host": "203.0.113.7",
        "ansible_user": "ubuntu",
        "ray_node_ip": "10.0.0.5",
        "ray_metrics_prometheus_port": 9091,
    }
    tunnel, login = prometheus_access("gpu-0", hv, "/etc/ray/metrics/password")
    assert tunnel == "Prometheus: ssh -N -L 9091:10.0.0.5:9091 ubuntu@203.0.113.7   then open http://127.0.0.1:9091"
    assert login.endswith("ssh ubuntu@203.0.113.7 sudo cat /etc/ray/metrics/password")


def test_the_metrics_ports_are_checked_and_fenced_with_rays():
    assert {"ray_metrics_node_exporter_port", "ray_metrics_prometheus_port", "ray_metrics_dcgm_port"} <= set(
        settings.PORTS
    )
    import yaml

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "roles", "ray", "vars", "main.yml")) as f:
        text = f.read()
    fenced = yaml.safe_load(text)
    # Every port settings.PORTS checks is one the firewall table fences (Ray's, or the metrics' when they are on).
    named = str(fenced["ray__fixed_ports"]) + fenced["ray__metrics_ports"]
    assert [name for name in settings.PORTS if name not in named] == []
    with open(os.path.join(root, "roles", "ray", "tasks", "node.yml")) as f:
        assert 'ports: "{{ ray__fixed_ports | combine(ray__metrics_ports) }}"' in f.read()


# ---- the module over a fake systemctl ---------------------------------------------------------------------------


class FakeSystemd(metrics_node.Systemd):
    active, enabled, masked, calls = set(), set(), set(), []

    def __init__(self, module):
        self.module, self.path = module, "/bin/systemctl"

    def run(self, *args):
        if self.module.check_mode:
            return
        FakeSystemd.calls.append(args)
        verb, unit = args[0], args[-1]
        if verb in ("start", "restart"):
            FakeSystemd.active.add(unit)
        elif verb == "enable":
            FakeSystemd.enabled.add(unit)
        elif verb == "mask":
            FakeSystemd.masked.add(unit)
        elif verb == "unmask":
            FakeSystemd.masked.discard(unit)
        elif verb == "disable":
            FakeSystemd.active.discard(unit)
            FakeSystemd.enabled.discard(unit)

    def state(self, verb, unit):
        if verb == "is-active":
            return "active" if unit in FakeSystemd.active else "inactive"
        return "masked" if unit in FakeSystemd.masked else "enabled" if unit in FakeSystemd.enabled else "disabled"


@pytest.fixture
def node(tmp_path, module_runner, monkeypatch):
    monkeypatch.setattr(metrics_node, "Systemd", FakeSystemd)
    FakeSystemd.active, FakeSystemd.enabled, FakeSystemd.masked, FakeSystemd.calls = set(), set(), set(), []
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("prometheus-node-exporter", "prometheus"):
        (bin_dir / name).write_text("#!/bin/sh\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", "%s:%s" % (bin_dir, os.environ.get("PATH", "")))
    (tmp_path / "units").mkdir()
    me = pwd.getpwuid(os.getuid()).pw_name
    base = dict(
        address="10.0.0.5",
        password=PASSWORD,
        config_dir=str(tmp_path / "etc"),
        unit_dir=str(tmp_path / "units"),
        fact_path=str(tmp_path / "facts.d" / "rlinfra_metrics.fact"),
        exporter_user=me,
        install=False,
    )
    head = dict(
        prometheus=dict(
            user=me,
            storage_dir=str(tmp_path / "prometheus"),
            members=MEMBERS,
            dcgm_hosts=["worker-1"],
            ray_sd_file=str(tmp_path / "ray" / metrics.RAY_SD_FILE),
        )
    )

    def run(check_mode=False, is_head=True, **options):
        args = dict(base, **(head if is_head else {}))
        args.update(options)
        return module_runner(ray_metrics.main, args, check_mode=check_mode)

    run.tmp = tmp_path
    run.bin = bin_dir
    return run


def test_first_converge_writes_and_starts_then_a_rerun_changes_nothing(node):
    dry = node(check_mode=True)
    assert dry["changed"] is True and not (node.tmp / "etc").exists() and FakeSystemd.calls == []
    first = node()
    assert first["changed"] is True and PASSWORD not in json.dumps(first)
    etc = node.tmp / "etc" / "metrics"
    for name, mode in (
        ("password", 0o600),
        ("exporter-web.yml", 0o600),
        ("prometheus-web.yml", 0o600),
        ("prometheus.yml", 0o644),
    ):
        assert (etc / name).stat().st_mode & 0o777 == mode, name
    assert (etc / "password").read_text() == PASSWORD
    assert (
        PASSWORD
        not in (etc / "prometheus.yml").read_text() + (node.tmp / "units" / metrics.PROMETHEUS_UNIT).read_text()
    )
    assert '"10.0.0.6:9400"' in (etc / "prometheus.yml").read_text()  # dcgm_hosts
    assert owned.claimed(str(node.tmp / "prometheus"))
    assert ("mask", "prometheus-node-exporter.service") in FakeSystemd.calls and (
        "mask",
        "prometheus.service",
    ) in FakeSystemd.calls
    assert ("start", metrics.EXPORTER_UNIT) in FakeSystemd.calls and (
        "start",
        metrics.PROMETHEUS_UNIT,
    ) in FakeSystemd.calls
    assert json.loads((node.tmp / "facts.d" / "rlinfra_metrics.fact").read_text())["prometheus"] is True

    FakeSystemd.calls = []
    again = node()
    assert again["changed"] is False and again["files"] == [] and again["services"] == {} and FakeSystemd.calls == []
    assert node(check_mode=True)["changed"] is False


def test_a_new_member_reloads_prometheus_and_leaves_the_exporter(node):
    node()
    FakeSystemd.calls = []
    grown = node(
        prometheus=dict(
            user=pwd.getpwuid(os.getuid()).pw_name,
            storage_dir=str(node.tmp / "prometheus"),
            members=MEMBERS + [{"host": "worker-2", "address": "10.0.0.7"}],
            ray_sd_file=str(node.tmp / "sd.json"),
        )
    )
    assert grown["changed"] is True and FakeSystemd.calls == [("reload", metrics.PROMETHEUS_UNIT)]


def test_a_new_password_restarts_both_and_shows_no_secret_in_the_diff(node, module_runner):
    node()
    FakeSystemd.calls = []
    args = dict(
        address="10.0.0.5",
        password="an0therS3cret",
        config_dir=str(node.tmp / "etc"),
        unit_dir=str(node.tmp / "units"),
        fact_path=str(node.tmp / "facts.d" / "rlinfra_metrics.fact"),
        exporter_user=pwd.getpwuid(os.getuid()).pw_name,
        install=False,
        _ansible_diff=True,
    )
    changed = module_runner(ray_metrics.main, args)
    assert ("restart", metrics.EXPORTER_UNIT) in FakeSystemd.calls
    assert "an0therS3cret" not in json.dumps(changed) and "$2b$" not in json.dumps(changed)
    # Not the head any more: its Prometheus and its files go.
    assert (
        not (node.tmp / "units" / metrics.PROMETHEUS_UNIT).exists()
        and not (node.tmp / "etc" / "metrics" / "password").exists()
    )


def test_worker_gets_the_exporter_alone(node):
    result = node(is_head=False)
    assert result["changed"] is True
    assert sorted(os.listdir(node.tmp / "etc" / "metrics")) == ["exporter-web.yml"]
    assert not (node.tmp / "units" / metrics.PROMETHEUS_UNIT).exists()


def test_a_missing_binary_without_install_is_one_line(node):
    (node.bin / "prometheus-node-exporter").unlink()
    if any(
        os.path.exists(os.path.join(d, "prometheus-node-exporter")) for d in ("/usr/bin", "/usr/sbin", "/usr/local/bin")
    ):
        pytest.skip("this machine has node_exporter installed")
    result = node(is_head=False)
    assert (
        result["failed"] is True and "prometheus-node-exporter package" in result["msg"] and "\n" not in result["msg"]
    )


def test_absent_removes_ours_keeps_the_data_and_a_purge_takes_only_what_it_made(node):
    node()
    (node.tmp / "prometheus" / "wal").mkdir()
    gone = node(state="absent", storage_dir=str(node.tmp / "prometheus"))
    assert gone["changed"] is True and not (node.tmp / "etc" / "metrics").exists()
    assert not (node.tmp / "units" / metrics.EXPORTER_UNIT).exists() and (node.tmp / "prometheus" / "wal").is_dir()
    assert not (node.tmp / "facts.d" / "rlinfra_metrics.fact").exists()
    assert node(state="absent")["changed"] is False
    purged = node(state="absent", storage_dir=str(node.tmp / "prometheus"), purge=True)
    assert purged["changed"] is True and not (node.tmp / "prometheus").exists()
    theirs = node.tmp / "theirs"
    theirs.mkdir()
    (theirs / "data").write_text("x")
    refused = node(state="absent", storage_dir=str(theirs), purge=True)
    assert refused["failed"] is True and (theirs / "data").exists()


def test_query_without_prometheus_says_so(node):
    result = node(state="query")
    assert result["failed"] is True and "run site.yml with ray_metrics on" in result["msg"]
