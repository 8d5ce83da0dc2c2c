"""ray_metrics (the role roles/ray_metrics, its decisions in module_utils/observe/metrics.py, what it reads of a node in
module rlinfra.verl.ray_metrics_info, and module rlinfra.verl.ray_metrics's query and removal): basic auth whose
password never lands in argv, output or a readable file, a bcrypt hash kept while it verifies (so that a re-run
rewrites nothing), the scrape config's targets, and the role's templates as Ansible renders them. The services
themselves are the sandbox's (tests/integration/test_sandbox_metrics.py, docs/OBSERVABILITY.md)."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys

import pytest
import yaml

from ansible_collections.rlinfra.verl.plugins.filter.dashboard_access import prometheus_access
from ansible_collections.rlinfra.verl.plugins.filter.prometheus_targets import prometheus_targets
from ansible_collections.rlinfra.verl.plugins.module_utils.common import owned, settings
from ansible_collections.rlinfra.verl.plugins.module_utils.common.plain_module import PlainModule
from ansible_collections.rlinfra.verl.plugins.module_utils.observe import metrics, metrics_info, metrics_node
from ansible_collections.rlinfra.verl.plugins.modules import ray_metrics

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROLE = os.path.join(ROOT, "roles", "ray_metrics")
PASSWORD = "s3cr3tMetricsPassw0rdXYZ"
MEMBERS = [{"host": "worker-1", "address": "10.0.0.6"}, {"host": "head-1", "address": "10.0.0.5"}]
ME = pwd.getpwuid(os.getuid()).pw_name


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


def test_a_matching_hash_is_kept_a_new_password_gets_a_new_one():
    b = metrics.Bcrypt()
    hashed = b.hash(PASSWORD, cost=4)
    text = 'basic_auth_users:\n  "rlinfra": "%s"\n' % hashed  # as the role's web-config.yml.j2 writes it
    assert metrics.hash_in(text) == hashed
    assert metrics.kept_hash(text, PASSWORD, b) == hashed  # a re-run writes nothing: bcrypt salts differ
    renewed = metrics.kept_hash(text, "another password", b)
    assert renewed != hashed and b.verify("another password", renewed)
    assert metrics.hash_in('basic_auth_users:\n  "someone": "x"\n') is None


def test_prometheus_headers_are_what_rays_dashboard_parses():
    headers = json.loads(metrics.prometheus_headers(PASSWORD))
    assert list(headers) == ["Authorization"] and headers["Authorization"].startswith("Basic ")
    import base64

    assert base64.b64decode(headers["Authorization"][6:]).decode() == "rlinfra:" + PASSWORD


def test_scrape_targets_every_member_sorted_dcgm_only_where_installed():
    targets = metrics.scrape_targets(
        [dict(MEMBERS[0], dcgm=True), dict(MEMBERS[1], dcgm=False), {"host": "w6", "address": "fd00::6"}], 9100, 9400
    )
    assert targets == {
        "node": [
            {"target": "10.0.0.5:9100", "node": "head-1"},
            {"target": "[fd00::6]:9100", "node": "w6"},
            {"target": "10.0.0.6:9100", "node": "worker-1"},
        ],
        "dcgm": [{"target": "10.0.0.6:9400", "node": "worker-1"}],
    }


def test_scrape_targets_refuse_a_member_without_an_address_or_no_member():
    with pytest.raises(metrics.MetricsError, match="worker-9"):
        metrics.scrape_targets(MEMBERS + [{"host": "worker-9", "address": ""}], 9100, 9400)
    with pytest.raises(metrics.MetricsError, match="no cluster member"):
        metrics.scrape_targets([], 9100, 9400)


def test_the_filter_reads_dcgm_from_this_run_else_from_the_last_converge():
    hostvars = {
        "head-1": {"ray_node_ip": "10.0.0.5", "ray_metrics__info": {"dcgm": False}},
        "worker-1": {"ray_node_ip": "10.0.0.6", "ray_metrics__info": {"dcgm": True}},
        "worker-2": {"ray_node_ip": "10.0.0.7", "ansible_local": {"rlinfra_metrics": {"dcgm": True}}},
        "worker-3": {"ray_node_ip": "10.0.0.8"},
    }
    groups = {"ray_head": ["head-1"], "ray_workers": ["worker-1", "worker-2", "worker-3"]}
    targets = prometheus_targets(sorted(hostvars), hostvars, groups, "9100", 9400)
    assert [t["node"] for t in targets["dcgm"]] == ["worker-1", "worker-2"]
    assert [t["target"] for t in targets["node"]] == [
        "10.0.0.5:9100",
        "10.0.0.6:9100",
        "10.0.0.7:9100",
        "10.0.0.8:9100",
    ]


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
    with open(os.path.join(ROOT, "roles", "ray", "vars", "main.yml")) as f:
        fenced = yaml.safe_load(f)
    # Every port settings.PORTS checks is one the firewall table fences (Ray's, or the metrics' when they are on).
    named = str(fenced["ray__fixed_ports"]) + fenced["ray__metrics_ports"]
    assert [name for name in settings.PORTS if name not in named] == []
    with open(os.path.join(ROOT, "roles", "ray", "tasks", "node.yml")) as f:
        assert 'ports: "{{ ray__fixed_ports | combine(ray__metrics_ports) }}"' in f.read()


def test_the_role_reads_the_ray_roles_variables_with_the_ray_roles_defaults():
    """The switch, the ports and the data directory stay the ray role's (its firewall, environment and teardown read
    them); the role ray_metrics falls back to the same defaults, and owns the rest."""
    with open(os.path.join(ROOT, "roles", "ray", "defaults", "main.yml")) as f:
        ray = yaml.safe_load(f)
    with open(os.path.join(ROLE, "vars", "main.yml")) as f:
        own = f.read()
    for name in (
        "ray_metrics",
        "ray_metrics_node_exporter_port",
        "ray_metrics_prometheus_port",
        "ray_metrics_dcgm_port",
        "ray_metrics_storage_dir",
        "ray_config_dir",
        "ray_user",
        "ray_cluster",
    ):
        default = str(ray[name]).lower() if isinstance(ray[name], bool) else str(ray[name])
        assert ("%s | default(%s)" % (name, default) in own) or ("%s | default('%s')" % (name, default) in own), name
    with open(os.path.join(ROLE, "defaults", "main.yml")) as f:
        assert sorted(yaml.safe_load(f)) == [
            "ray_metrics_dashboards_dir",
            "ray_metrics_retention",
            "ray_metrics_scrape_interval",
        ]
    assert settings.check(dict(ray_metrics_retention="15d", ray_metrics_scrape_interval="15s")) == []


# ---- what the role reads of a node (ray_metrics_info, a SCRIPTED function) --------------------------------------


@pytest.fixture
def node(tmp_path, monkeypatch):
    """A node under tmp_path: its PATH holds only the stand-in programs given, its config and unit directories are
    tmp_path's."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setattr("ansible_collections.rlinfra.verl.plugins.module_utils.common.plain_module.SBIN", ())
    (tmp_path / "units").mkdir()

    def read(programs=("prometheus-node-exporter", "prometheus"), **params):
        for name in programs:
            (bin_dir / name).write_text("#!/bin/sh\n")
            (bin_dir / name).chmod(0o755)
        args = dict(
            password=PASSWORD,
            config_dir=str(tmp_path / "etc"),
            unit_dir=str(tmp_path / "units"),
            exporter_user=ME,
            prometheus=True,
            prometheus_user=ME,
            storage_dir=str(tmp_path / "prometheus"),
            files=[],
        )
        args.update(params)
        module = PlainModule(args, [PASSWORD])
        return module.reply(metrics_info.info(args, module))

    read.tmp = tmp_path
    return read


def test_info_on_a_fresh_head_says_what_is_there_and_hashes_the_password(node):
    got = node()
    assert got["changed"] is False and got["missing"] == [] and got["apt"] is False and got["dcgm"] is False
    assert got["binaries"] == {
        "exporter": str(node.tmp / "bin" / "prometheus-node-exporter"),
        "prometheus": str(node.tmp / "bin" / "prometheus"),
    }
    assert got["units"] == {"exporter": False, "prometheus": False} and got["storage_ours"] is True
    assert got["running"] == {"exporter": False, "prometheus": False} and got["distro_masked"] == []
    b = metrics.Bcrypt()
    assert all(b.verify(PASSWORD, got["hashes"][kind]) for kind in ("exporter", "prometheus"))
    assert PASSWORD not in json.dumps(got) and got["exporter_user"] == ME


def test_info_keeps_the_hash_a_web_config_holds_while_it_verifies(node):
    first = node()
    web = node.tmp / "etc" / "metrics"
    web.mkdir(parents=True)
    (web / "exporter-web.yml").write_text('basic_auth_users:\n  "rlinfra": "%s"\n' % first["hashes"]["exporter"])
    assert node()["hashes"]["exporter"] == first["hashes"]["exporter"]  # a re-run: the same file, no restart
    renewed = node(password="an0therS3cret")["hashes"]["exporter"]
    assert renewed != first["hashes"]["exporter"] and metrics.Bcrypt().verify("an0therS3cret", renewed)


def test_info_on_a_worker_names_the_missing_package_and_falls_back_to_root(node):
    got = node(programs=("dcgm-exporter",), prometheus=False, exporter_user="nobody-such-user")
    assert got["missing"] == ["prometheus-node-exporter"] and got["dcgm"] is True
    assert list(got["hashes"]) == ["exporter"] and got["exporter_user"] == "root"
    (node.tmp / "units" / metrics.EXPORTER_UNIT).write_text("[Unit]\n")
    assert node(prometheus=False)["units"] == {"exporter": True}


def test_info_says_what_systemd_runs(node):
    """The units as the role leaves them (running, enabled; the distribution's masked): their tasks are skipped."""
    states = {
        ("is-active", metrics.EXPORTER_UNIT): "active",
        ("is-enabled", metrics.EXPORTER_UNIT): "enabled",
        ("is-active", metrics.PROMETHEUS_UNIT): "active",
        ("is-enabled", metrics.PROMETHEUS_UNIT): "disabled",
        ("is-enabled", "prometheus-node-exporter.service"): "masked",
        ("is-active", "prometheus.service"): "active",
    }
    script = '#!/bin/sh\ncase "$1 $2" in\n%s\nesac\n' % "\n".join(
        "  '%s %s') echo %s ;;" % (verb, unit, out) for (verb, unit), out in states.items()
    )
    (node.tmp / "bin" / "systemctl").write_text(script)
    (node.tmp / "bin" / "systemctl").chmod(0o755)
    got = node()
    assert got["running"] == {"exporter": True, "prometheus": False}
    assert got["distro_masked"] == ["prometheus-node-exporter.service"] and got["distro_active"] == [
        "prometheus.service"
    ]


def test_info_refuses_a_prometheus_user_the_node_does_not_have(node):
    got = node(prometheus_user="nobody-such-user")
    assert got == {"failed": True, "msg": "user nobody-such-user does not exist on this node"}


def test_someone_elses_data_directory_is_not_the_collections(node):
    theirs = node.tmp / "theirs"
    theirs.mkdir()
    (theirs / "data").write_text("x")
    assert node(storage_dir=str(theirs))["storage_ours"] is False
    owned.claim(str(node.tmp / "ours"))
    (node.tmp / "ours" / "wal").mkdir()
    assert node(storage_dir=str(node.tmp / "ours"))["storage_ours"] is True


# ---- the role's templates, as Ansible renders them --------------------------------------------------------------

PLAY = """
- name: Render the role's templates as its tasks do
  hosts: all
  gather_facts: false
  vars_files:
    - %(role)s/defaults/main.yml
    - %(role)s/vars/main.yml
  tasks:
    - name: Render
      ansible.builtin.debug:
        msg:
          exporter_unit: "{{ lookup('ansible.builtin.template', '%(role)s/templates/rlinfra-node-exporter.service.j2') }}"
          exporter_web: >-
            {{ lookup('ansible.builtin.template', '%(role)s/templates/web-config.yml.j2',
                      template_vars={'ray_metrics__hash': ray_metrics__node.hashes.exporter}) }}
          prometheus_unit: >-
            {{ lookup('ansible.builtin.template', '%(role)s/templates/rlinfra-prometheus.service.j2')
               if ray_metrics__is_head else '' }}
          prometheus_config: >-
            {{ lookup('ansible.builtin.template', '%(role)s/templates/prometheus.yml.j2',
                      template_vars={'ray_metrics__targets': ray_metrics__members
                                     | rlinfra.verl.prometheus_targets(hostvars, groups, ray_metrics__exporter_port,
                                                                       ray_metrics__dcgm_port)})
               if ray_metrics__is_head else '' }}
"""


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ray_metrics_templates")
    b = metrics.Bcrypt()
    hashed = b.hash(PASSWORD, cost=4)

    def info(dcgm, **more):
        return dict(
            binaries={"exporter": "/usr/bin/prometheus-node-exporter", "prometheus": "/usr/bin/prometheus"},
            hashes={"exporter": hashed, "prometheus": hashed},
            exporter_user="prometheus",
            dcgm=dcgm,
            **more,
        )

    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory = {
        "all": {
            "vars": dict(local, ray_user="ray"),
            "children": {
                "ray_head": {"hosts": {"head-1": {"ray_node_ip": "10.0.0.5", "ray_metrics__info": info(False)}}},
                "ray_workers": {
                    "hosts": {
                        "worker-1": {"ray_node_ip": "fd00::6", "ray_metrics__info": info(True)},
                        "worker-2": {
                            "ray_node_ip": "10.0.0.7",
                            "ray_metrics__info": info(False),
                            # a worker this run did not read: its last converge's record
                            "ansible_local": {"rlinfra_metrics": {"dcgm": True}},
                        },
                    }
                },
            },
        }
    }
    # worker-2 read in this run says no DCGM: this run's word wins over the record
    (tmp / "inventory.yml").write_text(json.dumps(inventory))
    (tmp / "play.yml").write_text(PLAY % {"role": ROLE})
    env = dict(
        os.environ,
        ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
        ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
    )
    proc = subprocess.run(
        [
            os.path.join(os.path.dirname(sys.executable), "ansible-playbook"),
            "-i",
            str(tmp / "inventory.yml"),
            "-e",
            "ray_metrics_retention=30d",  # as a user gives it (the play reads the role's defaults as vars_files)
            str(tmp / "play.yml"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    hosts = json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]
    return {host: res["msg"] for host, res in hosts.items()}, hashed


def test_the_units_listen_on_the_private_address_behind_the_web_config(rendered):
    out, hashed = rendered
    head, worker = out["head-1"], out["worker-1"]
    assert (
        "ExecStart=/usr/bin/prometheus-node-exporter --web.listen-address=10.0.0.5:9100 "
        "--web.config.file=/etc/ray/metrics/exporter-web.yml\n"
    ) in head["exporter_unit"]
    assert "User=prometheus\n" in head["exporter_unit"] and head["exporter_unit"].endswith(
        "WantedBy=multi-user.target\n"
    )
    assert "--web.listen-address=[fd00::6]:9100 " in worker["exporter_unit"] and worker["prometheus_unit"] == ""
    assert (
        "ExecStart=/usr/bin/prometheus --config.file=/etc/ray/metrics/prometheus.yml "
        "--storage.tsdb.path=/workspace/prometheus --storage.tsdb.retention.time=30d "
        "--web.listen-address=10.0.0.5:9090 --web.config.file=/etc/ray/metrics/prometheus-web.yml\n"
    ) in head["prometheus_unit"]
    assert "User=ray\n" in head["prometheus_unit"] and "ExecReload=/bin/kill -HUP $MAINPID\n" in head["prometheus_unit"]
    for text in (head["exporter_unit"], head["prometheus_unit"], head["prometheus_config"]):
        assert PASSWORD not in text and hashed not in text


def test_the_web_config_holds_the_hash_the_node_reads_back(rendered):
    out, hashed = rendered
    web = out["head-1"]["exporter_web"]
    assert yaml.safe_load(web) == {"basic_auth_users": {"rlinfra": hashed}} and PASSWORD not in web
    # What ray_metrics_info reads on the next run: the same hash kept, so the template writes the same file.
    assert metrics.hash_in(web) == hashed and metrics.kept_hash(web, PASSWORD, metrics.Bcrypt()) == hashed


def test_the_scrape_config_names_every_member_ray_and_dcgm_only_where_installed(rendered):
    out, dummy = rendered
    text = out["head-1"]["prometheus_config"]
    config = yaml.safe_load(text)
    assert config["global"] == {"scrape_interval": "15s", "evaluation_interval": "15s"}
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert jobs["node"]["basic_auth"] == {"username": "rlinfra", "password_file": "/etc/ray/metrics/password"}
    assert jobs["node"]["static_configs"] == [
        {"targets": ["10.0.0.5:9100"], "labels": {"node": "head-1"}},
        {"targets": ["[fd00::6]:9100"], "labels": {"node": "worker-1"}},
        {"targets": ["10.0.0.7:9100"], "labels": {"node": "worker-2"}},
    ]
    assert jobs["ray"]["file_sd_configs"] == [
        {"files": ["/workspace/ray/prom_metrics_service_discovery.json"], "refresh_interval": "30s"}
    ]
    assert jobs["dcgm"]["static_configs"] == [{"targets": ["[fd00::6]:9400"], "labels": {"node": "worker-1"}}]
    # The head's queries name the nodes from it.
    assert metrics.members_in(text) == [("head-1", "10.0.0.5"), ("worker-1", "fd00::6"), ("worker-2", "10.0.0.7")]


# ---- module ray_metrics: removal and query ----------------------------------------------------------------------


class FakeSystemd(metrics_node.Systemd):
    calls: list = []

    def __init__(self, module):
        self.module, self.path = module, "/bin/systemctl"

    def run(self, *args):
        if not self.module.check_mode:
            FakeSystemd.calls.append(args)
            if args[0] == "unmask":  # as systemctl does: our mask is the link
                os.unlink(os.path.join(self.module.params["unit_dir"], args[1]))


@pytest.fixture
def installed(tmp_path, module_runner, monkeypatch):
    """A head as the role leaves it (under tmp_path), and a runner of module ray_metrics over a fake systemctl."""
    monkeypatch.setattr(metrics_node, "Systemd", FakeSystemd)
    FakeSystemd.calls = []
    units, etc, facts = tmp_path / "units", tmp_path / "etc" / "metrics", tmp_path / "facts.d"
    for d in (units, etc, facts):
        d.mkdir(parents=True)
    for name in (metrics.EXPORTER_UNIT, metrics.PROMETHEUS_UNIT):
        (units / name).write_text("[Unit]\n")
    for name in ("prometheus-node-exporter.service", "prometheus.service"):
        os.symlink("/dev/null", units / name)  # the role's masks
    for name in (metrics.PASSWORD, metrics.EXPORTER_WEB, metrics.PROMETHEUS_WEB, metrics.PROMETHEUS_CONFIG):
        (etc / name).write_text("x\n")
    (facts / "rlinfra_metrics.fact").write_text("{}\n")
    owned.claim(str(tmp_path / "prometheus"))

    def run(check_mode=False, **options):
        args = dict(
            state="absent",
            config_dir=str(tmp_path / "etc"),
            unit_dir=str(units),
            fact_path=str(facts / "rlinfra_metrics.fact"),
        )
        args.update(options)
        return module_runner(ray_metrics.main, args, check_mode=check_mode)

    run.tmp = tmp_path
    return run


def test_absent_removes_ours_keeps_the_data_and_a_purge_takes_only_what_it_made(installed):
    tmp = installed.tmp
    (tmp / "prometheus" / "wal").mkdir()
    dry = installed(check_mode=True)
    assert dry["changed"] is True and (tmp / "etc" / "metrics" / "password").exists() and FakeSystemd.calls == []
    gone = installed(storage_dir=str(tmp / "prometheus"))
    assert gone["changed"] is True and not (tmp / "etc" / "metrics").exists()
    assert os.listdir(tmp / "units") == [] and (tmp / "prometheus" / "wal").is_dir()
    assert not (tmp / "facts.d" / "rlinfra_metrics.fact").exists()
    assert ("unmask", "prometheus.service") in FakeSystemd.calls and ("daemon-reload",) in FakeSystemd.calls
    assert installed()["changed"] is False
    purged = installed(storage_dir=str(tmp / "prometheus"), purge=True)
    assert purged["changed"] is True and not (tmp / "prometheus").exists()
    theirs = tmp / "theirs"
    theirs.mkdir()
    (theirs / "data").write_text("x")
    refused = installed(storage_dir=str(theirs), purge=True)
    assert refused["failed"] is True and (theirs / "data").exists()


def test_a_node_no_longer_the_head_loses_only_its_prometheus(installed):
    tmp = installed.tmp
    out = installed(services=["prometheus"])
    assert out["changed"] is True and sorted(os.listdir(tmp / "etc" / "metrics")) == [metrics.EXPORTER_WEB]
    assert sorted(os.listdir(tmp / "units")) == ["prometheus-node-exporter.service", metrics.EXPORTER_UNIT]
    assert FakeSystemd.calls == [
        ("disable", "--now", metrics.PROMETHEUS_UNIT),
        ("daemon-reload",),
        ("unmask", "prometheus.service"),
    ]
    assert (tmp / "facts.d" / "rlinfra_metrics.fact").exists()  # the role rewrites it


def test_query_without_prometheus_says_so(installed):
    os.unlink(installed.tmp / "etc" / "metrics" / metrics.PROMETHEUS_CONFIG)
    result = installed(state="query")
    assert result["failed"] is True and "run site.yml with ray_metrics on" in result["msg"]


def test_info_reads_what_each_file_the_role_writes_holds(node):
    etc = node.tmp / "etc"
    (etc / "metrics").mkdir(parents=True)
    (etc / "metrics" / "prometheus.yml").write_text("scrape_configs: []\n")
    (etc / "metrics" / "prometheus.yml").chmod(0o640)
    os.symlink(etc / "metrics" / "prometheus.yml", etc / "linked.yml")
    paths = [str(etc / "metrics"), str(etc / "metrics" / "prometheus.yml"), str(etc / "linked.yml"), str(etc / "none")]
    got = node(files=paths)["files"]
    assert got[paths[0]] == {
        "type": "directory",
        "mode": "%04o" % (os.stat(paths[0]).st_mode & 0o7777),
        "owner": ME,
        "group": got[paths[0]]["group"],
    }
    assert got[paths[1]]["type"] == "file" and got[paths[1]]["mode"] == "0640" and got[paths[1]]["owner"] == ME
    assert got[paths[1]]["sha1"] == "%s" % __import__("hashlib").sha1(b"scrape_configs: []\n").hexdigest()
    assert got[paths[2]] is None and got[paths[3]] is None  # a link is not in place: the role's task replaces it


def test_files_to_write_lists_each_path_not_as_the_tasks_would_write_it():
    from ansible.errors import AnsibleFilterError

    from ansible_collections.rlinfra.verl.plugins.filter.files_to_write import files_to_write

    sha = __import__("hashlib").sha1(b"x: 1\n").hexdigest()
    found = {
        "/d": {"type": "directory", "mode": "0755", "owner": "root", "group": "root"},
        "/d/f": {"type": "file", "mode": "0600", "owner": "prometheus", "group": "root", "sha1": sha},
    }
    wanted = [
        {"path": "/d", "state": "directory", "mode": "0755"},
        {"path": "/d/f", "content": "x: 1\n", "mode": "0600", "owner": "prometheus"},
    ]
    assert files_to_write(wanted, found) == []
    assert files_to_write([wanted[0], dict(wanted[1], content="x: 2\n")], found) == ["/d/f"]
    assert files_to_write([dict(wanted[1], mode="0644")], found) == ["/d/f"]
    assert files_to_write([dict(wanted[1], owner="root")], found) == ["/d/f"]
    assert files_to_write([dict(wanted[0], state="file")], found) == ["/d"]
    assert files_to_write([{"path": "/d/missing"}, wanted[1]], found) == ["/d/missing"]
    assert files_to_write([{"path": "/d", "state": "directory", "mode": ""}], found) == []  # a mode left alone
    assert files_to_write([{"path": "/d/f"}], dict(found, **{"/d/f": None})) == ["/d/f"]
    assert files_to_write(list(reversed(wanted)), {}) == ["/d/f", "/d"]  # none there: all, in order
    with pytest.raises(AnsibleFilterError, match="mode must be octal"):
        files_to_write([{"path": "/d", "state": "directory", "mode": "rwx"}], found)
    with pytest.raises(AnsibleFilterError, match="list of dicts with a path"):
        files_to_write([{"mode": "0644"}], found)
