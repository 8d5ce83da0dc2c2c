"""The converge record: site.yml's one-call check of a node against what its last converge left.

Pure parts on real files in a temporary tree (observe, verdict, fstab/mountinfo/systemctl parsing, the
per-cluster plan, the inputs digest), then the action and module end to end through ansible-playbook on
localhost: no record -> written -> unchanged (facts restored) -> each kind of drift named in one phrase."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.rlinfra.verl.plugins.action import converge_record as A
from ansible_collections.rlinfra.verl.plugins.filter.ray_cluster import converge_plan
from ansible_collections.rlinfra.verl.plugins.module_utils.ray import converge_record as R

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = str(Path(sys.executable).with_name("ansible-playbook"))

FSTAB = """# /etc/fstab
UUID=abc / ext4 defaults 0 1
/dev/vg/scratch /workspace xfs defaults,noatime,nofail 0 2
nfs-1:/export /data nfs4 rw,hard 0 0
/swapfile none swap sw 0 0
/dev/sdz /mnt/manual ext4 noauto 0 0
"""
MOUNTINFO = """22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw
80 22 253:0 / /workspace rw,noatime - xfs /dev/mapper/vg-scratch rw
81 22 0:50 / /data rw - nfs4 nfs-1:/export rw
"""


class FakeProbe(R.Probe):
    def __init__(self, fstab=FSTAB, mountinfo=MOUNTINFO, units=None, table="t1", gpus=("", 0), controller="10.0.0.9"):
        super().__init__()
        self.text = {"/etc/fstab": fstab, "/proc/self/mountinfo": mountinfo}
        self.unit_states = units if units is not None else {"ray-worker.service": ["active", "enabled"]}
        self.table, self.gpu, self.ctl = table, gpus, controller

    def read(self, path):
        return self.text.get(path, "")

    def units(self, names):
        return {n: self.unit_states[n] for n in names if n in self.unit_states}

    def nft_table(self, table):
        return self.table

    def gpus(self):
        return list(self.gpu)

    def controller(self):
        return self.ctl


FACTS = {"ansible_default_ipv4": {"address": "10.0.0.5"}, "ansible_all_ipv4_addresses": ["10.0.0.5"]}


@pytest.fixture
def node(tmp_path):
    etc, venv = tmp_path / "etc_ray", tmp_path / "venv"
    site = venv / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    etc.mkdir()
    (etc / "ray.env").write_text("A=1\n")
    (etc / "auth_token").write_text("secret\n")
    os.chmod(etc / "auth_token", 0o600)
    (etc / R.RECORD_NAME).write_text("{}")  # the record itself is not watched
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (site / "ray-2.60.0.dist-info").mkdir()
    (site / "__pycache__").mkdir()
    unit = tmp_path / "ray-worker.service"
    unit.write_text("[Service]\n")
    watch = dict(
        files=[str(unit)],
        dirs=[str(etc), str(venv)],
        packages=[str(venv / "lib" / "python*" / "site-packages")],
        units=["ray-worker.service"],
        nft_tables=["rlinfra_ray"],
    )
    record = json.loads(
        R.content("in1", watch, R.observe(watch, FACTS, FakeProbe()), {"ray_node_ip": "10.0.0.5"}, ["b", "a"])
    )
    return dict(etc=etc, venv=venv, site=site, unit=unit, watch=watch, record=record)


def check(node, probe=None, inputs="in1", facts=FACTS):
    return R.verdict(node["record"], inputs, R.observe(node["record"]["watch"], facts, probe or FakeProbe()))


def test_an_unchanged_node_is_as_recorded(node):
    assert check(node) == ""
    assert node["record"]["members"] == ["a", "b"] and node["record"]["facts"] == {"ray_node_ip": "10.0.0.5"}
    # What changes without anyone converging is not watched: bytecode caches, the record itself.
    (node["site"] / "__pycache__" / "x.pyc").write_bytes(b"x")
    (node["etc"] / R.RECORD_NAME).write_text('{"version": 1}')
    assert check(node) == ""


def test_each_kind_of_drift_is_named(node):
    assert check(node, inputs="in2") == "the collection or the roles' variables changed"
    assert (
        check(node, probe=FakeProbe(units={"ray-worker.service": ["failed", "enabled"]}))
        == "ray-worker.service is failed (enabled)"
    )
    assert check(node, probe=FakeProbe(units={})) == "ray-worker.service is not loaded (no unit file)"
    assert check(node, probe=FakeProbe(table=None)) == "the live firewall table rlinfra_ray changed"
    assert (
        check(node, probe=FakeProbe(controller="10.9.9.9"))
        == "the controller's address (the firewall admits it) changed"
    )
    assert check(node, probe=FakeProbe(gpus=("nvidia", 7))) == "the GPUs changed"
    unmounted = MOUNTINFO.replace("81 22 0:50 / /data rw - nfs4 nfs-1:/export rw\n", "")
    assert check(node, probe=FakeProbe(mountinfo=unmounted)) == "the mount at /data changed"
    assert check(node, facts={"ansible_default_ipv4": {"address": "10.0.0.6"}}) == "the node's addresses changed"


def test_file_and_package_drift_is_named(node):
    (node["etc"] / "ray.env").write_text("A=2\n")
    assert check(node) == "%s changed (content)" % (node["etc"] / "ray.env")
    (node["etc"] / "ray.env").write_text("A=1\n")
    os.chmod(node["etc"] / "auth_token", 0o644)
    assert check(node) == "%s changed (mode or owner)" % (node["etc"] / "auth_token")
    os.chmod(node["etc"] / "auth_token", 0o600)
    (node["etc"] / "extra").write_text("x")
    assert check(node) == "%s appeared" % (node["etc"] / "extra")
    os.unlink(node["etc"] / "extra")
    node["unit"].unlink()
    assert check(node) == "%s is gone" % node["unit"]
    node["unit"].write_text("[Service]\n")
    assert check(node) == ""
    (node["site"] / "requests-2.32.0.dist-info").mkdir()
    assert check(node) == "the packages in %s changed" % node["watch"]["packages"][0]


def test_no_other_or_half_written_record_means_a_full_converge(node, tmp_path):
    assert R.verdict(None, "in1", {}) == "no converge record"
    half = tmp_path / "half.json"
    half.write_text(json.dumps(node["record"])[:40])
    assert R.load(str(half)) is None
    assert R.verdict(dict(node["record"], version=0), "in1", {}) == "the converge record is from another version"


def test_fstab_mountinfo_and_systemctl_parsing():
    assert R.parse_fstab(FSTAB) == ["/data", "/workspace"]
    assert R.mounts(FSTAB, MOUNTINFO) == {
        "/data": ["nfs-1:/export", "nfs4"],
        "/workspace": ["/dev/mapper/vg-scratch", "xfs"],
    }
    assert R.mounts(FSTAB, "")["/data"] is None
    text = "Id=ray-worker.service\nActiveState=active\nUnitFileState=enabled\n\nId=rlinfra-ray-firewall.service\nActiveState=inactive\nUnitFileState=enabled\n"
    assert R.parse_units(text) == {
        "ray-worker.service": ["active", "enabled"],
        "rlinfra-ray-firewall.service": ["inactive", "enabled"],
    }


def test_a_cluster_converges_whole_or_not_at_all():
    hostvars = {h: {"ray_cluster": c} for h, c in (("h1", "a"), ("w1", "a"), ("h2", "b"), ("w2", "b"))}
    groups = {"ray_head": ["h1", "h2"], "ray_workers": ["w1", "w2"]}

    def state(reason="", members=None):
        return {"ansible_converge_record": {"converged": not reason, "reason": reason, "members": members or []}}

    for h in hostvars:
        hostvars[h].update(state(members=["h1", "w1"] if hostvars[h]["ray_cluster"] == "a" else ["h2", "w2"]))
    out = converge_plan(["h1", "w1", "h2", "w2"], hostvars, groups)
    assert out["converge"] == [] and out["checked"] == ["h1", "w1", "h2", "w2"]
    assert out["lines"][0].startswith("Cluster 'a': all 2 node(s) as their last converge left them")

    hostvars["w2"].update(state("ray-worker.service is failed (enabled)", ["h2", "w2"]))
    out = converge_plan(["h1", "w1", "h2", "w2"], hostvars, groups)
    assert out["converge"] == ["h2", "w2"] and out["checked"] == ["h1", "w1"]
    assert (
        out["lines"][1] == "Cluster 'b': converging its 2 node(s) in full - w2: ray-worker.service is failed (enabled)."
    )

    # A node added to cluster a: its record is missing, and the others' records name the old members.
    hostvars["w3"] = dict(ray_cluster="a", **state("no converge record"))
    groups["ray_workers"].append("w3")
    out = converge_plan(["h1", "w1", "w3"], hostvars, groups)
    assert out["converge"] == ["h1", "w1", "w3"]
    assert out["reasons"] == {
        "h1": "the cluster's members changed",
        "w1": "the cluster's members changed",
        "w3": "no converge record",
    }
    # A node removed: the rest finds its records name one host too many.
    del hostvars["w3"]
    groups["ray_workers"].remove("w3")
    hostvars["w1"].update(state(members=["h1", "w1", "w3"]))
    assert converge_plan(["h1", "w1"], hostvars, groups)["converge"] == ["h1", "w1"]


class Templar:
    def template(self, value):
        if isinstance(value, str) and "{{" in value:
            if "undefined_fact" in value:
                from ansible.errors import AnsibleUndefinedVariable

                raise AnsibleUndefinedVariable("undefined_fact is undefined")
            return value.replace("{{ x }}", "X")
        return value


def test_the_inputs_digest_follows_the_roles_variables_only():
    base = {
        "inventory_hostname": "w1",
        "ansible_host": "10.0.0.5",
        "ray_num_cpus": 4,
        "python_env_packages": ["ray==2.60.0"],
        "groups": {"ray_workers": ["w1"]},
        "exp": "smoke",
        "ray_node__internal": 1,
    }
    one = A.inputs_digest(Templar(), base)
    assert one == A.inputs_digest(Templar(), dict(base))
    assert A.inputs_digest(Templar(), dict(base, exp="other", ray_node__internal=2)) == one  # not the roles' inputs
    # Facts published by an earlier run (a fact cache brings them back) are not inputs.
    cached = {"python_env_fingerprint": "abc", "ray_node_ip": "10.0.0.5"}
    assert A.inputs_digest(Templar(), dict(base, ansible_facts=cached, **cached)) == one
    for changed in (
        {"ray_num_cpus": 8},
        {"ansible_host": "10.0.0.6"},
        {"nfs_mount_server": "n"},
        {"groups": {"ray_head": ["w1"]}},
    ):
        assert A.inputs_digest(Templar(), dict(base, **changed)) != one, changed
    # A value that cannot be templated yet (it names a node fact) is digested as written.
    late = dict(base, ray_private_ip="{{ undefined_fact }}")
    assert A.inputs_digest(Templar(), late) == A.inputs_digest(Templar(), dict(late))
    assert A.inputs_digest(Templar(), dict(base, ray_env="{{ x }}")) != A.inputs_digest(
        Templar(), dict(base, ray_env="{{ y }}")
    )


def test_the_collection_digest_follows_its_code(tmp_path):
    (tmp_path / "roles" / "r").mkdir(parents=True)
    (tmp_path / "roles" / "r" / "main.yml").write_text("a")
    (tmp_path / "plugins" / "__pycache__").mkdir(parents=True)
    first = A.collection_digest(str(tmp_path))
    A._TREE.clear()
    (tmp_path / "plugins" / "__pycache__" / "x.pyc").write_bytes(b"1")
    assert A.collection_digest(str(tmp_path)) == first
    A._TREE.clear()
    (tmp_path / "roles" / "r" / "main.yml").write_text("b")
    assert A.collection_digest(str(tmp_path)) != first
    A._TREE.clear()


PLAY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: check
      rlinfra.verl.converge_record:
        path: "{{ base }}/record.json"
        fact_dir: "{{ base }}/facts"
      register: first
    - name: write
      rlinfra.verl.converge_record:
        state: write
        path: "{{ base }}/record.json"
        inputs: "{{ ansible_converge_record.inputs }}"
        watch: {dirs: ["{{ base }}/etc"]}
        facts: {ray_node_ip: 10.1.2.3}
        members: [localhost]
      register: written
    - name: check again
      rlinfra.verl.converge_record:
        path: "{{ base }}/record.json"
        fact_dir: "{{ base }}/facts"
      register: second
    - name: report
      ansible.builtin.copy:
        dest: "{{ base }}/result.json"
        mode: "0600"
        content: "{{ {'first': first.reason, 'written': written.recorded, 'second': second.reason, 'ip': ray_node_ip | default(''),
                       'changed': [first.changed, written.changed, second.changed], 'members': ansible_converge_record.members,
                       'runtime': [first.runtime, written.runtime, second.runtime]} | to_json }}"
"""


def _play(tmp_path, *extra):
    (tmp_path / "p.yml").write_text(PLAY)
    # Another path to this Python is another interpreter: the checks run as on a node (a script), not in this process.
    python3 = str(Path(sys.executable).with_name("python3"))
    proc = subprocess.run(
        [
            PLAYBOOK,
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            "ansible_python_interpreter=" + python3,
            "-e",
            "base=" + str(tmp_path),
            str(tmp_path / "p.yml"),
        ]
        + list(extra),
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=dict(os.environ, ANSIBLE_NOCOLOR="1"),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads((tmp_path / "result.json").read_text())


def test_the_action_and_module_end_to_end(tmp_path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "ray.env").write_text("A=1\n")
    out = _play(tmp_path)
    # The checks ran as plain scripts (no module runtime on the node), the write as the module.
    assert out == {
        "first": "no converge record",
        "written": True,
        "second": "",
        "ip": "10.1.2.3",
        "changed": [False, False, False],
        "members": ["localhost"],
        "runtime": ["script", "script", "script"],
    }
    assert os.stat(tmp_path / "record.json").st_mode & 0o777 == 0o600
    # A new run: the record is rewritten only when something differs; a file edited since is named.
    (tmp_path / "etc" / "ray.env").write_text("A=2\n")
    out = _play(tmp_path)
    assert (
        out["first"] == "%s changed (content)" % (tmp_path / "etc" / "ray.env")
        and out["written"] is True
        and out["second"] == ""
    )
    # Another variable given to the run: its inputs differ from the record's.
    out = _play(tmp_path, "-e", "ray_num_cpus=3")
    assert out["first"] == "the collection or the roles' variables changed"
    out = _play(tmp_path, "-e", "ray_num_cpus=3")
    assert out["first"] == "" and out["written"] is False


SETTINGS_PLAY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: check with the settings first
      rlinfra.verl.converge_record:
        path: "{{ base }}/record.json"
        fact_dir: "{{ base }}/facts"
        settings: [ray]
"""


def test_bad_settings_stop_the_check_before_the_node_is_read(tmp_path):
    """site.yml checks every role's variables in the same task: one line, and the node is not read (the module
    never runs, so no facts come back); with good values the same task reads the node."""
    (tmp_path / "p.yml").write_text(SETTINGS_PLAY)
    base = [
        PLAYBOOK,
        "-i",
        "localhost,",
        "-c",
        "local",
        "-e",
        "ansible_python_interpreter=" + sys.executable,
        "-e",
        "base=" + str(tmp_path),
        str(tmp_path / "p.yml"),
    ]
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json")
    bad = subprocess.run(
        base + ["-e", "ray_gcs_port=70000"], cwd=ROOT, capture_output=True, text=True, env=env, timeout=300
    )
    res = json.loads(bad.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    assert bad.returncode != 0 and res["failed"]
    assert res["msg"].startswith("Bad setting for localhost (nothing was changed): ray_gcs_port"), res["msg"]
    assert "ray_gcs_port" in res["msg"] and "70000" in res["msg"]
    assert "ansible_facts" not in res and not (tmp_path / "facts").exists()
    good = subprocess.run(
        base + ["-e", "ray_gcs_port=6379"], cwd=ROOT, capture_output=True, text=True, env=env, timeout=300
    )
    res = json.loads(good.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    assert good.returncode == 0, good.stdout[-2000:]
    assert res["ansible_facts"]["ansible_converge_record"]["reason"] == "no converge record"
