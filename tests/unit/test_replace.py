"""recovery.replace on the head (module_utils/hyperbolic/replace.py): the run's supervisor replaces a machine gone for
good, against the fake Hyperbolic API on loopback (tests/fake_hyperbolic/server.py, the on-demand API).

The cluster is rented as provision.yml rents it (``Rent.present``, then the label's record written by
``record.update``, as the hyperbolic_instance module does), so ids, names and prices are the fake's. The kit is a temp
directory with the inventory submit.yml writes (``inventory.json``); ``site.yml`` is never run: a fake ``run`` records
the command and its environment. Renting waits for the new machine's SSH banner (``Rent``'s own probe): the
rentals' SSH is a listener answering with a banner on an address of this machine other than loopback
(testing.own_address), as in test_hyperbolic_on_demand.py.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess

import pytest

from ansible_collections.rlinfra.verl.plugins.module_utils.common.plain_http import open_url
from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic import record as hyperbolic_record
from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic import replace
from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic.client import HyperbolicClient
from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic.rent import Rent
from tests.fake_hyperbolic.server import FakeHyperbolic, machine_item, rental_option
from tests.fake_hyperbolic.testing import HYPERBOLIC_TEST_KEY, own_address

LABEL = "prov"
WORKER_IP = "203.0.113.11"  # the worker's SSH address as the API gave it (documentation range: never connected to)
RECAP = (
    "PLAY [Converge] ***\nTASK [ray : Start Ray] ***\nok: [prov-1]\nPLAY RECAP ***\n"
    "prov-0                     : ok=40   changed=0    unreachable=0    failed=0    skipped=3\n"
    "prov-1                     : ok=52   changed=31   unreachable=0    failed=0    skipped=1\n"
)
RECAP_LINE = (
    "prov-0 : ok=40 changed=0 unreachable=0 failed=0 skipped=3; "
    "prov-1 : ok=52 changed=31 unreachable=0 failed=0 skipped=1"
)
FATAL = 'fatal: [prov-1]: FAILED! => {"changed": false, "msg": "ray start exited 1"}'
BY_HAND_TODO = "site.yml from the controller converges it (the label's rentals now include it), then submit.yml"


class Kit:
    """The fake API with cluster ``prov`` rented (prov-0 the head, on this machine's SSH listener; prov-1 a worker at
    WORKER_IP), the head's record and the kit's inventory."""

    def __init__(self, fake, tmp_path, port, api="on_demand"):
        self.fake, self.port, self.own = fake, port, own_address()
        self.dir = tmp_path / "kit"
        self.dir.mkdir(mode=0o700)
        self.record = tmp_path / "etc" / ("hyperbolic-%s.json" % LABEL)
        # provision.yml: rent 2, then the record, as the hyperbolic_instance module writes it.
        client = HyperbolicClient(HYPERBOLIC_TEST_KEY, fake.url, retries=0)
        result = Rent(client, api=api, sleep=lambda s: None, probe=lambda h, p: "").present(
            LABEL, 2, gpu_model="H100", gpu_count=8, region="us-east-1" if api == "on_demand" else ""
        )
        hyperbolic_record.update(str(self.record), LABEL, api, result)
        self.ids = dict((v["name"], v["id"]) for v in result["instances"])
        self.head_id, self.old_id = self.ids["prov-0"], self.ids["prov-1"]
        self.inventory = {
            "all": {
                "children": {
                    "ray_head": {
                        "hosts": {
                            "prov-0": {
                                "ansible_host": self.own,
                                "ansible_port": port,
                                "ansible_user": "ubuntu",
                                "ansible_connection": "local",
                                "ray_num_gpus": 8,
                            }
                        }
                    },
                    "ray_workers": {
                        "hosts": {
                            "prov-1": {
                                "ansible_host": WORKER_IP,
                                "ansible_port": 22,
                                "ansible_user": "ubuntu",
                                "ray_node_ip": WORKER_IP,
                                "ray_num_gpus": 8,
                                "hyperbolic_id": self.old_id,
                            }
                        }
                    },
                }
            }
        }
        (self.dir / "inventory.json").write_text(json.dumps(self.inventory))
        self.record_text = self.record.read_text()
        self.requests_before = len(fake.requests)
        self.conf = dict(
            label=LABEL,
            dir=str(self.dir),
            record=str(self.record),
            api=api,
            api_url=fake.url,
            api_key=HYPERBOLIC_TEST_KEY,
            timeout=1800,
        )
        self.lines, self.sleeps, self.probes = [], [], []
        self.run = Runner()

    def replace(self, nodes, probe_answers=("",), client="default", **conf):
        answers = list(probe_answers)

        def probe(host, port):
            self.probes.append((host, port))
            return answers.pop(0)

        ticks = iter(range(0, 10**6, 10))  # every reading of the clock is 10 s after the one before
        if client == "default":
            client = HyperbolicClient(HYPERBOLIC_TEST_KEY, self.fake.url, retries=0, opener=open_url)
        return replace.replace(
            dict(self.conf, **conf),
            nodes,
            self.lines.append,
            clock=lambda: next(ticks),
            sleep=self.sleeps.append,
            probe=probe,
            client=client,
            run=self.run,
        )

    def worker_lost(self):
        return [dict(label="prov-1 (%s)" % WORKER_IP, node_ip=WORKER_IP, head=False)]

    def terminate_worker(self):
        """The provider ends the worker's rental on its own (the machine is gone for good): listed no more."""
        self.fake.provider_terminates(int(self.old_id))
        assert [r["label"] for r in self.fake.active_rentals()] == ["prov-0"]

    def calls(self, method, path):
        return [r for r in self.fake.requests[self.requests_before :] if r[0] == method and r[1] == path]

    def saved_inventory(self):
        return json.loads((self.dir / "inventory.json").read_text())

    def rentals(self):
        return hyperbolic_record.read(str(self.record), LABEL)["rentals"]


class Runner:
    """``subprocess.run`` of site.yml: records each call (and the inventory it would read), answers as told."""

    def __init__(self):
        self.calls, self.inventories = [], []
        self.rc, self.stdout, self.stderr, self.raises = 0, RECAP, "", None

    def __call__(self, args, **kwargs):
        self.calls.append((args, kwargs))
        with open(os.path.join(kwargs["cwd"], "inventory.json")) as handle:
            self.inventories.append(json.load(handle))
        if self.raises is not None:
            raise self.raises
        return subprocess.CompletedProcess(args, self.rc, self.stdout, self.stderr)


@pytest.fixture
def kit(tmp_path, sshd, monkeypatch):
    # The controller's own Ansible settings never reach the kit's converge.
    monkeypatch.setenv("ANSIBLE_CONFIG", "/nowhere/ansible.cfg")
    monkeypatch.setenv("ANSIBLE_STDOUT_CALLBACK", "json")
    with FakeHyperbolic(api_key=HYPERBOLIC_TEST_KEY) as fake:
        host = own_address()
        fake.set_options(
            [rental_option("h100", 8, "us-east-1", cents=2552)],
            host_pool=[(host, sshd, "ubuntu"), (WORKER_IP, 22, "ubuntu")] + [(host, sshd, "ubuntu")] * 4,
        )
        yield Kit(fake, tmp_path, sshd)


def new_rental(kit):
    """The id of the newest rental the fake made."""
    return str(kit.fake.od_rentals[-1]["record"]["id"])


def converged(kit, new_id, new_port):
    """The lines of a rent and converge that went through, after the ones that judged the machine."""
    return [
        "rented %s as prov-1 (8 x h100 in us-east-1)" % new_id,
        "replace: rented prov-1 again: rental %s at %s:%s (8 x h100, $25.52/h) in 10s" % (new_id, kit.own, new_port),
        "replace: converging cluster prov (prov-0, prov-1) from the head with site.yml, up to 1800s",
        "replace: site.yml converged prov-0, prov-1 in 10s (%s)" % RECAP_LINE,
    ]


def assert_pointed_at_the_new_machine(kit, new_id):
    """The record: the old rental gone, the new one in with its price and spec, the head's untouched. The inventory:
    prov-1 on the new machine (the address Ray had resolved forgotten), the rest as it was."""
    old_record = json.loads(kit.record_text)["rentals"]
    rentals = kit.rentals()
    assert sorted(rentals) == sorted([kit.head_id, new_id]) and kit.old_id not in rentals
    assert rentals[kit.head_id] == old_record[kit.head_id]
    assert dict(rentals[new_id], rented_at=None) == dict(
        api="on_demand",
        name="prov-1",
        cost_per_hour=25.52,
        gpu_type="h100",
        gpu_count=8,
        region="us-east-1",
        rented_at=None,
    )
    inventory = kit.saved_inventory()
    hosts = inventory["all"]["children"]
    assert hosts["ray_head"] == kit.inventory["all"]["children"]["ray_head"]
    assert hosts["ray_workers"]["hosts"]["prov-1"] == dict(
        ansible_host=kit.own,
        ansible_port=kit.port,
        ansible_user="ubuntu",
        ray_num_gpus=8,
        hyperbolic_id=new_id,
        rlinfra_replaces=WORKER_IP,
    )
    assert stat.S_IMODE(os.stat(os.path.join(kit.conf["dir"], "inventory.json")).st_mode) == 0o600
    # site.yml read the new inventory, not the old one.
    assert kit.run.inventories == [inventory]


def assert_converged_from_the_kit(kit):
    """One ansible-playbook from the kit: its ansible-core, its collection, its key, on every host of the cluster; the
    controller's ANSIBLE_* settings are not carried."""
    [(args, kwargs)] = kit.run.calls
    root = kit.conf["dir"]
    assert args == [
        os.path.join(root, "ansible", "bin", "ansible-playbook"),
        "-i",
        os.path.join(root, "inventory.json"),
        "rlinfra.verl.site",
        "--limit",
        "prov-0,prov-1",
    ]
    env = kwargs.pop("env")
    assert kwargs == dict(cwd=root, capture_output=True, text=True, timeout=1800, check=False)
    assert dict((k, v) for k, v in env.items() if k.startswith("ANSIBLE_")) == dict(
        ANSIBLE_COLLECTIONS_PATH=os.path.join(root, "collections"),
        ANSIBLE_PRIVATE_KEY_FILE=os.path.join(root, "ssh_key"),
        ANSIBLE_HOST_KEY_CHECKING="False",
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_RETRY_FILES_ENABLED="0",
        ANSIBLE_LOCAL_TEMP=os.path.join(root, "tmp"),
        ANSIBLE_SSH_ARGS="-o ServerAliveInterval=15 -o ServerAliveCountMax=4 -o UserKnownHostsFile=/dev/null "
        "-o StrictHostKeyChecking=no",
    )
    assert env["HOME"] == root and env["PATH"] == os.environ["PATH"]


def assert_nothing_changed(kit):
    """Nothing rented or released, the record and the inventory as they were, no converge."""
    assert kit.calls("POST", "/v2/on-demand/virtual-machine-rentals") == []
    assert kit.calls("POST", "/v2/on-demand/virtual-machine-rentals/terminate") == []
    assert len(kit.fake.od_bodies) == 2 and kit.fake.od_terminated == []
    assert kit.record.read_text() == kit.record_text and kit.saved_inventory() == kit.inventory
    assert kit.run.calls == []


def test_a_terminated_rental_is_rented_again_under_its_name_and_converged(kit):
    kit.terminate_worker()
    out = kit.replace(kit.worker_lost())
    new_id = new_rental(kit)
    assert out == dict(
        replaced=[
            dict(label="prov-1 (%s)" % WORKER_IP, name="prov-1", new_ip=kit.own, rental=new_id, old_rental=kit.old_id)
        ]
    )
    assert kit.lines == [
        "replace: prov-1 (rental %s, %s) is gone for good: the API no longer lists its rental "
        "(terminated)" % (kit.old_id, WORKER_IP)
    ] + converged(kit, new_id, kit.port)
    # One of the same spec, under the same name; nothing given back (the provider had ended it), no SSH look.
    assert kit.fake.od_bodies[2:] == [dict(gpuType="h100", gpuCount=8, region="us-east-1", label="prov-1")]
    assert kit.calls("POST", "/v2/on-demand/virtual-machine-rentals/terminate") == []
    assert kit.fake.od_terminated == [] and kit.probes == []
    assert sorted(r["label"] for r in kit.fake.active_rentals()) == ["prov-0", "prov-1"]
    assert kit.sleeps == [2.0]  # the new rental's one Pending listing (Rent's wait), on the injected sleep
    assert_pointed_at_the_new_machine(kit, new_id)
    assert_converged_from_the_kit(kit)


def test_a_machine_whose_ssh_still_answers_is_not_replaced(kit):
    out = kit.replace(kit.worker_lost(), probe_answers=[""])
    assert out == dict(replaced=[], msg="every lost machine still answers SSH")
    assert kit.lines == [
        "replace: prov-1 (rental %s) still answers SSH at %s:22: not gone for good, not replaced"
        % (kit.old_id, WORKER_IP)
    ]
    assert kit.probes == [(WORKER_IP, 22)] and kit.sleeps == []
    assert_nothing_changed(kit)


def test_ssh_that_answers_the_second_look_is_not_gone_for_good(kit):
    out = kit.replace(kit.worker_lost(), probe_answers=["SSH at %s:22: timed out" % WORKER_IP, ""])
    assert out == dict(replaced=[], msg="every lost machine still answers SSH")
    assert kit.probes == [(WORKER_IP, 22)] * 2 and kit.sleeps == [replace.PROBE_PAUSE] == [30]
    assert_nothing_changed(kit)


def test_a_listed_rental_whose_ssh_fails_twice_is_given_back_and_rented_again(kit):
    why = "SSH at %s:22: timed out" % WORKER_IP
    out = kit.replace(kit.worker_lost(), probe_answers=[why, why])
    new_id = new_rental(kit)
    assert out == dict(
        replaced=[
            dict(label="prov-1 (%s)" % WORKER_IP, name="prov-1", new_ip=kit.own, rental=new_id, old_rental=kit.old_id)
        ]
    )
    assert kit.lines == [
        "replace: prov-1 (rental %s, %s) is gone for good: its rental is listed but SSH does not answer (%s, twice 30s "
        "apart)" % (kit.old_id, WORKER_IP, why),
        "released %s" % kit.old_id,
        "released %s (prov-1) to replace them" % kit.old_id,
    ] + converged(kit, new_id, kit.port)
    assert kit.probes == [(WORKER_IP, 22)] * 2 and kit.sleeps == [30, 2.0]
    # Given back exactly once, by its numeric id; the head's rental untouched.
    assert kit.fake.od_terminated == [int(kit.old_id)]
    assert len(kit.calls("POST", "/v2/on-demand/virtual-machine-rentals/terminate")) == 1
    assert kit.fake.od_bodies[2:] == [dict(gpuType="h100", gpuCount=8, region="us-east-1", label="prov-1")]
    assert sorted((r["label"], str(r["id"])) for r in kit.fake.active_rentals()) == [
        ("prov-0", kit.head_id),
        ("prov-1", new_id),
    ]
    assert_pointed_at_the_new_machine(kit, new_id)
    assert_converged_from_the_kit(kit)


def test_a_failed_converge_fails_with_its_fatal_line_and_keeps_the_new_machine(kit):
    kit.terminate_worker()
    kit.run.rc, kit.run.stdout = (
        2,
        (
            "PLAY [Converge] ***\nTASK [ray : Start Ray] ***\n%s\nPLAY RECAP ***\n"
            "prov-1 : ok=12 changed=3 unreachable=0 failed=1\n" % FATAL
        ),
    )
    kit.run.stderr = "[WARNING]: Platform linux on host prov-1 is using the discovered Python interpreter\n"
    out = kit.replace(kit.worker_lost())
    new_id = new_rental(kit)
    assert out == dict(
        failed=True,
        replaced=[
            dict(label="prov-1 (%s)" % WORKER_IP, name="prov-1", new_ip=kit.own, rental=new_id, old_rental=kit.old_id)
        ],
        msg="the new machine prov-1 could not be converged: site.yml failed (exit 2): %s" % FATAL,
        todo=BY_HAND_TODO,
    )
    assert kit.lines[-1] == "replace: converging cluster prov (prov-0, prov-1) from the head with site.yml, up to 1800s"
    # Rented and recorded all the same: the label's rentals (teardown.yml, on_end) include it.
    assert_pointed_at_the_new_machine(kit, new_id)


def test_a_failed_converge_without_a_fatal_line_keeps_its_last_lines(kit):
    kit.terminate_worker()
    kit.run.rc, kit.run.stdout, kit.run.stderr = 4, "PLAY [Converge] ***\n", "ERROR! the playbook could not be found\n"
    out = kit.replace(kit.worker_lost())
    assert out["failed"] is True and out["msg"] == (
        "the new machine prov-1 could not be converged: site.yml failed "
        "(exit 4): ERROR! the playbook could not be found"
    )


def test_a_converge_past_replace_timeout_fails_and_names_it(kit):
    kit.terminate_worker()
    kit.run.raises = subprocess.TimeoutExpired(
        ["ansible-playbook"], 1800, output=b"PLAY [Converge] ***\nTASK [python_env : Sync the venv] ***\n"
    )
    out = kit.replace(kit.worker_lost())
    assert out["failed"] is True and out["todo"] == BY_HAND_TODO and [r["name"] for r in out["replaced"]] == ["prov-1"]
    assert out["msg"] == (
        "the new machine prov-1 could not be converged: site.yml did not finish within "
        "recovery.replace_timeout (1800s); its last lines: PLAY [Converge] *** | TASK [python_env : "
        "Sync the venv] ***"
    )
    assert kit.run.calls[0][1]["timeout"] == 1800


def test_the_converge_is_bounded_by_the_confs_timeout(kit):
    kit.terminate_worker()
    kit.run.raises = subprocess.TimeoutExpired(["ansible-playbook"], 90)
    out = kit.replace(kit.worker_lost(), timeout=90)
    assert out["msg"] == (
        "the new machine prov-1 could not be converged: site.yml did not finish within "
        "recovery.replace_timeout (90s); its last lines: "
    )
    assert kit.run.calls[0][1]["timeout"] == 90
    assert kit.lines[-1] == "replace: converging cluster prov (prov-0, prov-1) from the head with site.yml, up to 90s"


def test_a_kit_without_ansible_playbook_fails_in_one_line(kit):
    kit.terminate_worker()
    playbook = os.path.join(kit.conf["dir"], "ansible", "bin", "ansible-playbook")
    kit.run.raises = FileNotFoundError(2, "No such file or directory", playbook)
    out = kit.replace(kit.worker_lost())
    assert out["failed"] is True and out["msg"] == (
        "the new machine prov-1 could not be converged: site.yml could not be started from the kit ([Errno 2] No such "
        "file or directory: '%s')" % playbook
    )


def test_the_head_is_never_replaced_from_itself(kit):
    out = kit.replace([dict(label="prov-0 (%s)" % kit.own, node_ip=kit.own, head=True)])
    assert out == dict(
        failed=True,
        msg="the lost machine prov-0 (%s) is the head, where this supervisor runs" % kit.own,
        todo="run submit.yml again from the controller: with recovery.replace it rents the cluster again",
    )
    assert kit.lines == [] and kit.probes == []
    assert_nothing_changed(kit)


def test_an_address_not_in_the_inventory_is_left_to_a_human(kit):
    lost = dict(label="203.0.113.99 (not in the inventory)", node_ip="203.0.113.99", head=False)
    out = kit.replace([lost] + kit.worker_lost())
    assert out["failed"] is True and set(out) == {"failed", "msg", "todo"}
    assert out["msg"] == (
        "203.0.113.99 (not in the inventory) is not one of cluster prov's rentals (the kit's "
        "inventory and the head's record name no such machine)"
    )
    assert out["todo"].startswith("bring it back by hand (site.yml --limit ")
    assert out["todo"].endswith("), then run submit.yml again")
    assert kit.lines == [] and kit.probes == []
    assert_nothing_changed(kit)


def test_a_host_the_record_does_not_list_is_left_to_a_human(kit):
    record = json.loads(kit.record_text)
    del record["rentals"][kit.old_id]
    kit.record.write_text(json.dumps(record))
    kit.record_text = kit.record.read_text()
    out = kit.replace(kit.worker_lost())
    assert out == dict(
        failed=True,
        msg="prov-1 (%s) is not one of cluster prov's rentals (the kit's inventory and "
        "the head's record name no such machine)" % WORKER_IP,
        todo="bring it back by hand (site.yml --limit prov-1), then run submit.yml again",
    )
    assert_nothing_changed(kit)


def test_an_unreadable_kit_is_one_line(kit):
    os.unlink(os.path.join(kit.conf["dir"], "inventory.json"))
    out = kit.replace(kit.worker_lost())
    assert out == dict(
        failed=True,
        msg="the replace kit cannot be read ([Errno 2] No such file or directory: '%s')"
        % os.path.join(kit.conf["dir"], "inventory.json"),
    )
    assert kit.fake.requests[kit.requests_before :] == []


def test_an_api_that_cannot_list_fails_in_one_line_and_rents_nothing(kit):
    kit.fake.fail_next(1, status=503)
    out = kit.replace(kit.worker_lost())
    assert out["failed"] is True and out["msg"].startswith("the Hyperbolic API could not list the rentals of prov: ")
    assert "503" in out["msg"] and HYPERBOLIC_TEST_KEY not in out["msg"]
    assert_nothing_changed(kit)


def test_without_a_client_the_conf_key_and_url_are_used(kit):
    """The supervisor passes no client: the conf's key and URL, with the standard-library opener (no Ansible on the
    head's supervisor)."""
    out = kit.replace(kit.worker_lost(), client=None)
    assert out == dict(replaced=[], msg="every lost machine still answers SSH")
    assert kit.fake.requests[kit.requests_before :] == [("GET", "/v2/on-demand/virtual-machine-rentals", 200, True)]


def test_the_new_machine_is_rented_with_the_runs_ssh_public_key(kit):
    kit.terminate_worker()
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeFakeFakeFakeFakeFakeFakeFakeFakeFakeFa rlinfra-replace"
    with open(os.path.join(kit.conf["dir"], "settings.json"), "w") as handle:  # the kit's, as replace_kit.yml writes it
        json.dump(dict(ssh_public_key=key, min_hours=1, daily_budget=None), handle)
    kit.replace(kit.worker_lost())
    assert kit.fake.od_bodies[2:] == [
        dict(gpuType="h100", gpuCount=8, region="us-east-1", label="prov-1", sshPublicKey=key)
    ]


def test_a_supervisor_restarted_after_renting_converges_the_new_machine_and_rents_nothing(kit):
    """The supervisor died after the rent and before the converge's answer: at its next look the kit's inventory names
    the new machine for prov-1 (rlinfra_replaces: the lost address), so it is converged again, not rented twice."""
    kit.terminate_worker()
    first = kit.replace(kit.worker_lost())
    assert first["replaced"][0]["name"] == "prov-1"
    bodies = len(kit.fake.od_bodies)
    again = kit.replace([dict(kit.worker_lost()[0], name="prov-1")])
    assert len(kit.fake.od_bodies) == bodies  # nothing rented
    assert again == dict(
        replaced=[
            dict(
                label="prov-1 (%s)" % WORKER_IP,
                name="prov-1",
                new_ip=kit.own,
                rental=first["replaced"][0]["rental"],
                old_rental="",
            )
        ]
    )
    assert any(
        line.startswith(
            "replace: prov-1 was already rented again (rental %s at %s): converging it"
            % (first["replaced"][0]["rental"], kit.own)
        )
        for line in kit.lines
    ), kit.lines


def test_inventory_helpers():
    inventory = {
        "all": {
            "hosts": {"solo": None},
            "children": {
                "ray_head": {"hosts": {"h": {"ansible_host": "10.0.0.1"}}},
                "ray_workers": {
                    "hosts": {"w": {"ansible_host": "10.0.0.2", "ray_node_ip": "10.0.0.2", "x": 1}},
                    "children": {"gpu": {"hosts": {"w": {"y": 2}}}},
                },
            },
        }
    }
    assert replace.inventory_hosts(inventory) == {
        "solo": {},
        "h": {"ansible_host": "10.0.0.1"},
        "w": {"ansible_host": "10.0.0.2", "ray_node_ip": "10.0.0.2", "x": 1, "y": 2},
    }
    assert replace.by_address(inventory) == {"solo": "solo", "10.0.0.1": "h", "10.0.0.2": "w"}
    pointed = replace.point_at(inventory, "w", dict(host="192.0.2.7", port="2222", user="root", id=18009))
    assert pointed["all"]["children"]["ray_workers"]["hosts"]["w"] == dict(
        ansible_host="192.0.2.7",
        ansible_port=2222,
        ansible_user="root",
        x=1,
        hyperbolic_id="18009",
        rlinfra_replaces="",
    )
    assert pointed["all"]["children"]["ray_workers"]["children"]["gpu"]["hosts"]["w"] == dict(
        y=2,
        ansible_host="192.0.2.7",
        ansible_port=2222,
        ansible_user="root",
        hyperbolic_id="18009",
        rlinfra_replaces="",
    )
    assert pointed["all"]["children"]["ray_head"]["hosts"]["h"] == {"ansible_host": "10.0.0.1"}


def test_gone_for_good():
    calls, sleeps = [], []

    def probe(answers):
        def look(host, port):
            calls.append((host, port))
            return answers.pop(0)

        return look

    assert replace.gone_for_good(None, "h", 22, probe([]), sleeps.append) == (
        "the API no longer lists its rental (terminated)"
    )
    assert calls == [] and sleeps == []
    assert replace.gone_for_good({"id": 1}, "h", 22, probe([""]), sleeps.append) == ""
    assert replace.gone_for_good({"id": 1}, "h", 22, probe(["refused", ""]), sleeps.append) == ""
    assert replace.gone_for_good({"id": 1}, "h", 2222, probe(["refused", "timed out"]), sleeps.append) == (
        "its rental is listed but SSH does not answer (timed out, twice 30s apart)"
    )
    assert calls == [("h", 22), ("h", 22), ("h", 22), ("h", 2222), ("h", 2222)] and sleeps == [30, 30]


# --- the ceiling and the API the label rented on ---------------------------------------------------------------


def test_a_replacement_dearer_than_the_lost_machine_is_not_rented(kit):
    kit.terminate_worker()
    kit.fake.set_options([rental_option("h100", 8, "us-east-1", cents=2552 * 4)])
    out = kit.replace(kit.worker_lost())
    assert out.get("failed") is True and out["msg"].startswith("renting in place of prov-1 failed: no machine matches")
    assert len(kit.fake.od_bodies) == 2


@pytest.fixture
def marketplace_kit(tmp_path, sshd):
    with FakeHyperbolic(api_key=HYPERBOLIC_TEST_KEY) as fake:
        host = own_address()
        fake.set_machines(
            [machine_item("gpu-a", gpus_total=16)],
            host_pool=[(host, sshd, "ubuntu"), (WORKER_IP, 22, "ubuntu")] + [(host, sshd, "ubuntu")] * 4,
        )
        yield Kit(fake, tmp_path, sshd, api="marketplace")


def test_a_marketplace_cluster_is_looked_up_on_the_marketplace(marketplace_kit):
    kit = marketplace_kit
    conf = dict(kit.conf)
    del conf["api"]
    kit.conf = conf
    out = kit.replace(kit.worker_lost(), probe_answers=[""])
    assert out == dict(replaced=[], msg="every lost machine still answers SSH")
