"""module_utils/node/slurm.py: what Slurm's tools print, read into the job and its nodes.

The ``-o`` texts are recorded from the real Slurm 22.05 the sandbox runs (fixtures/slurm/, where
tests/integration/test_sandbox_slurm.py runs the plugin against the live daemons); the JSON form follows the shape
``scontrol --json`` documents for Slurm 23.02+ (22.05 answers it with an error, and the text form is read).
The command runner is replaced here only to script what the tools answer.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from ansible_collections.rlinfra.verl.plugins.module_utils.node import slurm as S
from tests.fake_hyperbolic.testing import load_failures

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "slurm")


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as f:
        return f.read()


def test_oneliner_keeps_values_with_spaces_and_odd_keys():
    f = S.parse_oneliner(fixture("nodes.txt").splitlines()[0])
    assert f["NodeAddr"] == "172.21.0.2" and f["OS"] == "Linux 6.18.44-fc-v595 #1 SMP PREEMPT_DYNAMIC @0"
    job = S.parse_oneliner(fixture("job_running.txt").strip())
    assert job["AllocNode:Sid"] == "rlinfra-dev-1:2467" and job["CPUs/Task"] == "1" and job["Power"] == ""


def test_job_from_text_running_and_pending():
    running = S.job_from_text(fixture("job_running.txt"), "1")
    assert running == {
        "job_id": "1",
        "name": "rl-fixture",
        "state": "RUNNING",
        "reason": "None",
        "partition": "rl",
        "nodes": "rlinfra-dev-[1-3]",
        "user": "root",
        "gpus_per_node": 0,
    }
    S.check_state(running)
    pending = S.job_from_text(fixture("job_pending.txt"), "2")
    assert pending["state"] == "PENDING" and pending["nodes"] == ""
    with pytest.raises(
        S.SlurmError, match=r"^Slurm job 2 \(rl-fixture\) is PENDING \(reason: Resources\): it has no nodes"
    ):
        S.check_state(pending)
    ended = dict(running, state="TIMEOUT")
    with pytest.raises(S.SlurmError, match=r"^Slurm job 1 \(rl-fixture\) has ended \(TIMEOUT\): allocate again"):
        S.check_state(ended)


def test_job_from_json_documented_shape():
    data = {
        "jobs": [
            {
                "job_id": 4242,
                "name": "rl",
                "job_state": ["RUNNING"],
                "state_reason": "None",
                "partition": "gpu",
                "nodes": "gpu-[01-04]",
                "user_name": "ml",
                "tres_per_node": "gres/gpu:h100:8",
                "node_count": {"number": 4},
            }
        ]
    }
    assert S.job_from_json(data, "4242") == {
        "job_id": "4242",
        "name": "rl",
        "state": "RUNNING",
        "reason": "None",
        "partition": "gpu",
        "nodes": "gpu-[01-04]",
        "user": "ml",
        "gpus_per_node": 8,
    }
    assert S.job_from_json({"jobs": []}, "1") is None


@pytest.mark.parametrize(
    "per_node, alloc, count, want",
    [
        ("gres:gpu:8", "", "2", 8),
        ("gres/gpu:a100:4", "", 1, 4),
        ("", "cpu=64,gres/gpu=16,node=2", "2", 8),
        ("", "cpu=3,node=3,billing=3", "3", 0),
        ("", "gres/gpu=8", "2-4", 4),
        ("", "", None, 0),
    ],
)
def test_gpus_per_node(per_node, alloc, count, want):
    assert S.gpus_from_tres(per_node, alloc, count) == want


class Script:
    """Answers per command (the first words), recording what ran."""

    def __init__(self, answers):
        self.answers, self.ran = answers, []

    def __call__(self, argv, timeout):
        self.ran.append(argv)
        text = " ".join(argv)
        for prefix, answer in self.answers.items():
            if prefix in text:
                if isinstance(answer, Exception):
                    raise answer
                return answer
        raise AssertionError("unexpected command %s" % argv)


def test_allocation_falls_back_to_text_and_keeps_slurms_order():
    run = Script(
        {
            "scontrol --json": (1, "", "scontrol: unrecognized option '--json'"),
            "scontrol -o show job 1": (0, fixture("job_running.txt"), ""),
            "show hostnames": (0, "rlinfra-dev-1\nrlinfra-dev-2\nrlinfra-dev-3\n", ""),
            "show node": (
                0,
                fixture("nodes.txt")
                + fixture("nodes.txt").splitlines()[1].replace("-2", "-3").replace("172.21.0.3", "172.21.0.4")
                + "\n",
                "",
            ),
        }
    )
    job, nodes = S.Slurm(run=run).allocation(job_id="1")
    assert job["job_id"] == "1" and [(n["name"], n["addr"]) for n in nodes] == [
        ("rlinfra-dev-1", "172.21.0.2"),
        ("rlinfra-dev-2", "172.21.0.3"),
        ("rlinfra-dev-3", "172.21.0.4"),
    ]
    assert run.ran[2] == ["scontrol", "show", "hostnames", "rlinfra-dev-[1-3]"]


def test_login_host_runs_the_tools_over_ssh_quoted():
    run = Script({"squeue": (0, "7 RUNNING\n", "")})
    assert S.Slurm("me@login", ["-i", "k"], run=run).job_id_by_name("my job") == "7"
    argv = run.ran[0]
    assert argv[:5] == ["ssh", "-i", "k", "me@login", "--"] and "--name 'my job'" in argv[5]


def test_each_failure_is_one_line():
    cases = [
        (
            S.Slurm(run=Script({"scontrol": FileNotFoundError()})),
            {"job_id": "1"},
            r"^scontrol is not installed here: install Slurm's client tools \(slurm-client\) or set login_host",
        ),
        (
            S.Slurm(
                "me@login", run=Script({"ssh": (255, "", "ssh: connect to host login port 22: Connection refused")})
            ),
            {"job_id": "1"},
            r"^cannot reach the login node me@login over ssh: ssh: connect to host login port 22",
        ),
        (
            S.Slurm(run=Script({"scontrol": subprocess.TimeoutExpired("scontrol", 30)})),
            {"job_id": "1"},
            r"^scontrol here gave no answer in 30 s: is slurmctld up",
        ),
        (
            S.Slurm(run=Script({"scontrol": (1, "", "slurm_load_jobs error: Invalid job id specified")})),
            {"job_id": "9"},
            r"^Slurm job 9 is unknown to slurmctld",
        ),
        (
            S.Slurm(run=Script({"squeue": (0, "", "")})),
            {"job_name": "rl"},
            r"^no pending or running Slurm job is named 'rl'",
        ),
        (
            S.Slurm(run=Script({"squeue": (0, "12 PENDING\n3 RUNNING\n", "")})),
            {"job_name": "rl"},
            r"^2 Slurm jobs are named 'rl' \(3 RUNNING, 12 PENDING\): set job_id",
        ),
        (S.Slurm(run=Script({})), {"job_id": "12a"}, r"^job_id '12a' is not a Slurm job id"),
        (S.Slurm(run=Script({})), {}, r"^no Slurm job given: set job_id or job_name"),
    ]
    for slurm, query, pattern in cases:
        with pytest.raises(S.SlurmError, match=pattern) as e:
            slurm.allocation(**query)
        assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "answer",
    [
        '{"jobs": {"0": {}}}',
        '{"jobs": "x"}',
        '{"jobs": [5]}',
        '{"jobs": [null]}',
        "[1, 2]",
        '"jobs"',
        '{"jobs": [{"job_id": 1, "nodes": {"a": 1}, "name": ["x"], "job_state": {"s": 1}}]}',
    ],
)
def test_a_json_answer_of_another_shape_is_one_line_or_the_text_form(answer):
    """Odd --json shapes: never a traceback (jobs[0] of a mapping, .get of a number); the text form is asked then."""
    run = Script({"scontrol --json": (0, answer, ""), "scontrol -o show job 1": (0, fixture("job_running.txt"), "")})
    try:
        job = S.Slurm(run=run).job("1")
    except S.SlurmError as e:
        assert "\n" not in str(e)
        return
    assert isinstance(job["nodes"], str) and isinstance(job["name"], str)


@pytest.mark.parametrize(
    "names, nodes, pattern",
    [
        (
            "-oProxyCommand=touch\n",
            None,
            r"^Slurm gave node name '-oProxyCommand=touch', which must be a host name or IP "
            r"address: check the node's definition in slurm.conf",
        ),
        (
            "n1\n",
            "NodeName=n1 NodeAddr=-oProxyCommand=id State=IDLE\n",
            r"^Slurm gave NodeAddr of node 'n1' '-oProxyCommand=id', which must be a host name or IP address",
        ),
        (
            "n1\n",
            "NodeName=n1 NodeAddr=0.0.0.0 State=IDLE\n",
            r"^Slurm gave NodeAddr of node 'n1' '0.0.0.0', which must be a machine's address, not 0.0.0.0",
        ),
        # ansible_host on loopback is the controller: the play would run there, not on the node.
        (
            "n1\n",
            "NodeName=n1 NodeAddr=::1 State=IDLE\n",
            r"^Slurm gave NodeAddr of node 'n1' '::1', which must be a machine's address, not ::1 \(this machine's own "
            r"loopback\): check the node's definition in slurm.conf \(scontrol show node\)$",
        ),
        (
            "n1\n",
            "NodeName=n1 NodeAddr=127.0.1.1 State=IDLE\n",
            r"^Slurm gave NodeAddr of node 'n1' '127.0.1.1', which must be a machine's address, not 127.0.1.1 \(this "
            r"machine's own loopback\): check",
        ),
        (
            "localhost\n",
            "NodeName=localhost State=IDLE\n",  # no NodeAddr: the name is the address
            r"^Slurm gave NodeAddr of node 'localhost' 'localhost', which must be a machine's address, not localhost \(this "
            r"machine's own loopback\): check",
        ),
        ("a/../b\n", None, r"^Slurm gave node name 'a/../b', which must be a host name or IP address"),
        ("3 RUNNING extra\n", None, None),
    ],
)
def test_node_names_and_addresses_become_hosts_only_when_they_are_hosts(names, nodes, pattern):
    """What scontrol answers becomes inventory hosts and ansible_host, which ssh reads as its destination."""
    run = Script(
        {
            "scontrol --json": (1, "", "no --json"),
            "scontrol -o show job 1": (0, fixture("job_running.txt"), ""),
            "show hostnames": (0, names, ""),
            "show node": (0, nodes or "", ""),
            "squeue": (0, "3 RUNNING extra\n4\n", ""),
        }
    )
    if pattern is None:  # squeue lines of another shape: one line, never an unpacking error
        with pytest.raises(S.SlurmError, match=r"^2 Slurm jobs are named 'rl' \(3 RUNNING, 4 \): set job_id"):
            S.Slurm(run=run).allocation(job_name="rl")
        return
    with pytest.raises(S.SlurmError, match=pattern) as e:
        S.Slurm(run=run).allocation(job_id="1")
    assert "\n" not in str(e.value)


def test_a_node_named_localhost_is_a_host_when_its_address_is_a_machines():
    """The rule is on the address ssh connects to (ansible_host), not on the node's name in Slurm."""
    run = Script(
        {
            "scontrol --json": (1, "", "no --json"),
            "scontrol -o show job 1": (0, fixture("job_running.txt"), ""),
            "show hostnames": (0, "localhost\n", ""),
            "show node": (0, "NodeName=localhost NodeAddr=172.21.0.2 State=IDLE\n", ""),
        }
    )
    job, nodes = S.Slurm(run=run).allocation(job_id="1")
    assert [(n["name"], n["addr"]) for n in nodes] == [("localhost", "172.21.0.2")]


STATE_LINE = (
    'Slurm answered job_state as %s for job 7%s, which is not a state ("RUNNING", or ["RUNNING", ...] '
    "from Slurm 23.02 on): neither running nor ended is read from it; see the job with scontrol show job 7"
)


@pytest.mark.parametrize(
    "state, line",
    [
        ({"current": ["RUNNING"]}, STATE_LINE % ("a mapping", " ({'current': ['RUNNING']})")),
        (1, STATE_LINE % ("an integer", " (1)")),
        ([], STATE_LINE % ("an empty list", "")),
        ([3, "RUNNING"], STATE_LINE % ("a list holding an integer", " ([3, 'RUNNING'])")),
        ([""], STATE_LINE % ("a list holding empty text", " ([''])")),
        (None, STATE_LINE % ("null", "")),
        ("", STATE_LINE % ("empty text", "")),
    ],
)
def test_a_job_state_that_is_no_state_is_refused_never_read_as_ended_or_running(state, line):
    """A mapping, a number, an empty list...: before, "has ended" (allocate again) for a job that may be running."""
    data = {"jobs": [{"job_id": 7, "name": "rl", "job_state": state, "nodes": "n1"}]}
    with pytest.raises(S.SlurmError) as e:
        S.job_from_json(data, "7")
    assert str(e.value) == line
    run = Script({"scontrol --json": (0, json.dumps(data), "")})
    with pytest.raises(S.SlurmError) as e:
        S.Slurm(run=run).allocation(job_id="7")
    assert str(e.value) == line and [a[:2] for a in run.ran] == [["scontrol", "--json"]]  # nothing asked after it


def test_no_job_state_at_all_is_refused():
    with pytest.raises(S.SlurmError) as e:
        S.job_from_json({"jobs": [{"job_id": 7, "nodes": "n1"}]}, "7")
    assert str(e.value) == (
        "Slurm answered no job_state for job 7: neither running nor ended is read from it; see "
        "the job with scontrol show job 7"
    )


@pytest.mark.parametrize(
    "state, want",
    [
        ("RUNNING", "RUNNING"),
        (["RUNNING"], "RUNNING"),
        (["PENDING", "REQUEUED"], "PENDING"),
        (["COMPLETED"], "COMPLETED"),
        ("running", "RUNNING"),
    ],
)
def test_both_json_forms_of_job_state_are_read(state, want):
    """A string before Slurm 23.02, a list of strings since (the base state first, then flags)."""
    assert S.job_from_json({"jobs": [{"job_id": 7, "job_state": state}]}, "7")["state"] == want


def test_json_answer_is_used_when_offered():
    data = {
        "jobs": [
            {"job_id": 5, "name": "rl", "job_state": "RUNNING", "partition": "p", "nodes": "n1", "tres_per_node": ""}
        ]
    }
    run = Script({"scontrol --json": (0, json.dumps(data), "")})
    assert S.Slurm(run=run).job("5")["nodes"] == "n1" and len(run.ran) == 1


@pytest.mark.parametrize(
    "option,value,line",
    [
        (
            "login_host",
            "-oProxyCommand=touch /tmp/x",
            "login_host must be a login node as host or user@host (not an ssh "
            "option), got '-oProxyCommand=touch /tmp/x'",
        ),
        ("timeout", -5, "timeout must be a whole number from 1 to 3600, got -5"),
        ("cache_timeout", -5, "cache_timeout must not be negative, got -5"),
        (
            "job_id",
            "42; rm",
            "job_id must be a Slurm job id (digits, or digits_digits for an array task), got '42; rm'",
        ),
    ],
)
def test_options_are_checked_by_type_before_any_slurm_tool_runs(tmp_path, option, value, line):
    """One line (Ansible's warning, once for our plugin, once for 'auto'), no host, and no Slurm tool (nor ssh) started:
    a spy on PATH would leave a file."""
    import sys

    spy = tmp_path / "bin"
    spy.mkdir()
    for tool in ("ssh", "scontrol", "squeue"):
        (spy / tool).write_text("#!/bin/sh\ntouch %s/ran-%s\n" % (tmp_path, tool))
        (spy / tool).chmod(0o755)
    inv = tmp_path / "x.slurm.yml"
    inv.write_text(json.dumps({"plugin": "rlinfra.verl.slurm", "job_id": "42", option: value}))
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PATH="%s:%s" % (spy, os.environ["PATH"]), ANSIBLE_CONFIG=os.path.join(root, "ansible.cfg"))
    proc = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "ansible-inventory"), "-i", str(inv), "--list"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and json.loads(proc.stdout)["_meta"]["hostvars"] == {}
    assert load_failures(proc.stderr) == ["rlinfra.verl.slurm: cannot load %s: %s" % (inv, line)], proc.stderr
    assert not list(tmp_path.glob("ran-*"))


def test_a_failed_source_fails_again_without_asking_while_the_same_inventory_is_built():
    """'auto' hands our file back to our plugin: the same line, no second round of Slurm tools or API requests; a new
    inventory (refresh_inventory) asks again."""
    from ansible.errors import AnsibleParserError
    from ansible.inventory.data import InventoryData

    from ansible_collections.rlinfra.verl.plugins.plugin_utils import inventory_load as L

    first, second = InventoryData(), InventoryData()
    L.failed_before(first, "/x.slurm.yml")  # nothing failed yet
    with pytest.raises(AnsibleParserError, match="^rlinfra.verl.slurm: cannot load /x.slurm.yml: job 42 ended$"):
        L.give_up(first, "/x.slurm.yml", "rlinfra.verl.slurm: cannot load /x.slurm.yml: job 42 ended")
    with pytest.raises(AnsibleParserError, match="job 42 ended"):
        L.failed_before(first, "/x.slurm.yml")
    L.failed_before(second, "/x.slurm.yml")
    L.failed_before(first, "/other.slurm.yml")
