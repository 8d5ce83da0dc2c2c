"""fitness.yml's parts that run without a cluster: the network agents and the head's transfers on loopback
addresses (real sockets, real detached agents), the verdict (table, lines, unfit, exclusion), the Ray check's
command line and result line, and the all-reduce table in nccl-tests' format (compared with a real all_reduce_perf
output, tests/unit/fixtures/gpu/SOURCES.md)."""

from __future__ import annotations

import base64
import errno
import json
import os
import re
import socket
import time
from pathlib import Path

import pytest

from ansible_collections.rlinfra.verl.plugins.module_utils.common.plain_module import PlainModule
from ansible_collections.rlinfra.verl.plugins.module_utils.node import fitness_net, fitness_ray
from ansible_collections.rlinfra.verl.plugins.module_utils.node.fitness_report import verdict

FIXTURES = Path(__file__).parent / "fixtures" / "gpu"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_round_robin_covers_every_pair_once_in_disjoint_rounds():
    for n in range(2, 10):
        names = ["n%d" % i for i in range(n)]
        rounds = fitness_net.rounds(names)
        pairs = [frozenset(p) for r in rounds for p in r]
        assert sorted(map(sorted, pairs)) == sorted(sorted((a, b)) for i, a in enumerate(names) for b in names[i + 1 :])
        assert all(len({h for p in r for h in p}) == 2 * len(r) for r in rounds)  # a node is in one pair per round
        assert len(rounds) == (n - 1 if n % 2 == 0 else n)


def test_agents_measure_every_ordered_pair_then_go(tmp_path):
    port = free_port()
    nodes = [dict(host="n%d" % i, ip="127.0.0.%d" % (i + 1)) for i in range(3)]
    nonce = "n0nce-%d" % port
    for n in nodes:
        started = fitness_net.start_agent(dict(ip=n["ip"], port=port, nonce=nonce, lifetime=60), PlainModule())
        assert started == dict(changed=False, listening="%s:%d" % (n["ip"], port))
    # A request without the nonce gets nothing.
    assert "error" in fitness_net.ask("127.0.0.1", port, dict(nonce="wrong", cmd="ping"), 2.0)
    assert fitness_net.ask("127.0.0.1", port, dict(nonce=nonce, cmd="ping"), 2.0) == {"ok": True}
    # An agent an interrupted run left behind gives the port to the next run's.
    assert fitness_net.start_agent(dict(ip="127.0.0.1", port=port, nonce=nonce + "-2", lifetime=60), PlainModule())[
        "listening"
    ]
    assert "error" in fitness_net.ask("127.0.0.1", port, dict(nonce=nonce, cmd="ping"), 2.0)
    fitness_net.ask("127.0.0.1", port, dict(nonce=nonce + "-2", cmd="bye"), 2.0)
    assert fitness_net.start_agent(dict(ip="127.0.0.1", port=port, nonce=nonce, lifetime=60), PlainModule())[
        "listening"
    ]
    # Anything else on the port: one line.
    with socket.socket() as other:
        other.bind(("127.0.0.2", free_port()))
        other.listen(1)
        busy = other.getsockname()[1]
        taken = fitness_net.start_agent(dict(ip="127.0.0.2", port=busy, nonce=nonce, lifetime=5), PlainModule())
    assert taken["failed"] and taken["msg"].startswith(
        "cannot listen on 127.0.0.2:%d for the network check (Address already in use)" % busy
    )
    out = fitness_net.measure(
        dict(nodes=nodes, head="n0", port=port, nonce=nonce, seconds=0.2, pairs_max=8), PlainModule()
    )
    assert [(l["from"], l["to"]) for l in out["links"]] == [
        (a, b) for a in ("n0", "n1", "n2") for b in ("n0", "n1", "n2") if a != b
    ]
    assert all(l["gbit"] > 0 and l["bytes"] > 0 and "error" not in l for l in out["links"]), out
    # told to go: the port is free again
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and fitness_net.ask("127.0.0.1", port, dict(nonce=nonce, cmd="ping"), 0.5).get(
        "ok"
    ):
        time.sleep(0.1)
    assert "error" in fitness_net.ask("127.0.0.1", port, dict(nonce=nonce, cmd="ping"), 0.5)


def test_a_large_cluster_measures_each_node_to_its_head_only():
    port = free_port()
    nodes = [dict(host="n%d" % i, ip="127.0.1.%d" % (i + 1)) for i in range(3)]
    for n in nodes:
        fitness_net.start_agent(dict(ip=n["ip"], port=port, nonce="x" * 8, lifetime=30), PlainModule())
    out = fitness_net.measure(
        dict(nodes=nodes, head="n1", port=port, nonce="x" * 8, seconds=0.1, pairs_max=2), PlainModule()
    )
    assert [(l["from"], l["to"]) for l in out["links"]] == [("n0", "n1"), ("n2", "n1")]


def test_an_agent_that_is_not_there_is_an_error_not_a_number():
    assert fitness_net.stream("127.0.0.1", free_port(), "x", 0.1)["error"].startswith("cannot connect to 127.0.0.1:")


def node(host, ip, lines=(), gpus=(8, 8), shared=50, scratch=20):
    return dict(
        host=host,
        ip=ip,
        ifname="eth0",
        check=dict(
            lines=list(lines),
            gpu=dict(count=gpus[0], expected=gpus[1]),
            volumes=[
                dict(what="shared volume", path="/data", free_bytes=shared * 1024**3),
                dict(what="scratch volume", path="/workspace/ray", free_bytes=scratch * 1024**3),
            ],
        ),
    )


NODES = [node("gpu-0", "10.0.0.5"), node("gpu-1", "10.0.0.6"), node("gpu-2", "10.0.0.7")]
LINKS = [{"from": "gpu-1", "to": "gpu-0", "gbit": 9.41}, {"from": "gpu-2", "to": "gpu-0", "gbit": 0.021}]
RAY = {
    "objects": [
        {"from": a, "to": b, "gbit": 3.2}
        for a in ("10.0.0.5", "10.0.0.6", "10.0.0.7")
        for b in ("10.0.0.5", "10.0.0.6", "10.0.0.7")
        if a != b
    ],
    "allreduce": {"skipped": "torch is not in the cluster's environment"},
}


def test_a_slow_link_is_one_line_naming_the_pair_the_interface_and_the_threshold():
    out = verdict("c", "gpu-0", NODES, LINKS, RAY, {"min_gbit": 1.0})
    assert out["lines"] == ["gpu-2 -> gpu-0: 0.021 Gbit/s over eth0 (threshold 1 Gbit/s)"]
    assert out["unfit"] == ["gpu-2"] and out["exclude"] == []
    assert out["failure"] == (
        "cluster c is not fit to train, 1 unfit node(s): gpu-2 -> gpu-0: 0.021 Gbit/s over eth0 "
        "(threshold 1 Gbit/s); fix them, or leave the unfit workers out with "
        "-e fitness_exclude_unfit=true (docs/FITNESS.md)"
    )
    assert out["table"][0].split() == [
        "node",
        "address",
        "iface",
        "to",
        "head",
        "via",
        "Ray",
        "GPUs",
        "shared",
        "free",
        "scratch",
        "free",
        "verdict",
    ]
    row = next(r for r in out["table"] if r.startswith("gpu-2"))
    assert row.split() == [
        "gpu-2",
        "10.0.0.7",
        "eth0",
        "0.02",
        "Gb/s",
        "3.20",
        "Gb/s",
        "8/8",
        "50.0",
        "GiB",
        "20.0",
        "GiB",
        "UNFIT",
    ]
    assert out["table"][-1] == "all-reduce: skipped (torch is not in the cluster's environment)"


def test_a_node_that_dropped_out_is_one_line_and_nothing_is_measured_to_it():
    """A worker frozen during fitness.yml (unreachable): named once; the links and Ray transfers that could not
    reach it are not lines of their own (issue 48)."""
    dropped = dict(NODES[2], check={"dropped": True, "error": "no result: the node dropped out of the run"})
    ray = {
        "objects": [
            dict(o, error="not schedulable") if "10.0.0.7" in (o["from"], o["to"]) else o for o in RAY["objects"]
        ],
        "allreduce": RAY["allreduce"],
    }
    links = LINKS + [{"from": "gpu-0", "to": "gpu-2", "error": "cannot connect (Connection refused)"}]
    out = verdict("c", "gpu-0", NODES[:2] + [dropped], links, ray, {"min_gbit": 1.0})
    assert out["lines"] == ["gpu-2: the node check failed: no result: the node dropped out of the run"]
    assert out["unfit"] == ["gpu-2"]


def test_excluding_leaves_the_unfit_worker_out_and_takes_it_back_once_fit():
    out = verdict("c", "gpu-0", NODES, LINKS, RAY, {"min_gbit": 1.0}, exclude_unfit=True)
    assert out["failure"] == "" and out["exclude"] == ["gpu-2"] and out["record"]["fit"] is True
    assert out["summary"] == [
        "Cluster c: fit without gpu-2 (left out)",
        "gpu-2 left out of the cluster: gpu-2 -> gpu-0: 0.021 Gbit/s over eth0 (threshold 1 Gbit/s)",
    ]
    assert out["record"]["excluded"] == {"gpu-2": ["gpu-2 -> gpu-0: 0.021 Gbit/s over eth0 (threshold 1 Gbit/s)"]}
    # left out earlier (Ray stopped there: not looked for through Ray), still slow: stays out, even without the switch
    ray = dict(RAY, objects=[o for o in RAY["objects"] if "10.0.0.7" not in (o["from"], o["to"])])
    again = verdict("c", "gpu-0", NODES, LINKS, ray, {"min_gbit": 1.0}, excluded=["gpu-2"])
    assert (
        again["failure"] == ""
        and again["exclude"] == ["gpu-2"]
        and again["summary"][1].startswith("gpu-2 stays left out")
    )
    fixed = verdict(
        "c", "gpu-0", NODES, LINKS[:1] + [dict(LINKS[1], gbit=9.0)], ray, {"min_gbit": 1.0}, excluded=["gpu-2"]
    )
    assert (
        fixed["readmit"] == ["gpu-2"]
        and fixed["exclude"] == []
        and fixed["summary"] == ["Cluster c: fit", "gpu-2 is fit again: site.yml starts its Ray"]
    )
    # a head is never left out
    head_bad = verdict(
        "c",
        "gpu-0",
        [node("gpu-0", "10.0.0.5", ["gpu-0 GPU 1 (00000000:3B:00.0): row remapping failed"])] + NODES[1:],
        LINKS[:1],
        RAY,
        exclude_unfit=True,
    )
    assert head_bad["exclude"] == [] and head_bad["failure"].endswith("; fix it")


def test_ray_and_node_problems_are_named():
    ray = {
        "objects": [{"from": "10.0.0.6", "to": "10.0.0.5", "error": "ObjectLostError"}],
        "allreduce": {
            "backend": "nccl",
            "world": 16,
            "rows": [dict(bytes=8 << 20, count=2 << 20, time_us=9000.0, algbw=0.93, busbw=0.2)],
        },
    }
    out = verdict("c", "gpu-0", NODES[:2], LINKS[:1], ray)
    assert out["lines"] == [
        "gpu-1 -> gpu-0 through Ray's object store: ObjectLostError",
        "cluster c: the NCCL all-reduce over 16 GPUs reaches 0.20 GB/s bus bandwidth (threshold 1 GB/s): a slow or "
        "wrong interface between nodes (NCCL_SOCKET_IFNAME, NCCL_IB_HCA)",
    ]
    missing = verdict(
        "c",
        "gpu-0",
        NODES,
        LINKS[:1],
        {"objects": [o for o in RAY["objects"] if "10.0.0.7" not in (o["from"], o["to"])]},
    )
    assert "gpu-2 is not in the Ray cluster (its Ray node is not alive)" in missing["lines"]
    failed = verdict(
        "c", "gpu-0", [dict(NODES[0], check={"error": "unreachable"})], [], {"error": "the Ray check printed no result"}
    )
    assert failed["lines"] == [
        "gpu-0: the node check failed: unreachable",
        "cluster c: the check through Ray failed: the Ray check printed no result",
    ]


def test_the_ray_check_command_line_carries_its_script_and_parameters():
    line = fitness_ray.entrypoint("10.0.0.5", object_mib=4, pairs_max=3, allreduce="gloo", store_port=7000)
    match = re.fullmatch(r"python -c \"import base64; exec\(base64\.b64decode\('([A-Za-z0-9+/=]+)'\)\)\"", line)
    code = base64.b64decode(match.group(1)).decode()
    compile(code, "<fitness>", "exec")
    params = json.loads(
        re.search(r"P = json\.loads\((.*)\)\nray\.init\(\)", code).group(1)[1:-1].encode().decode("unicode_escape")
    )
    assert (
        params["head_ip"],
        params["object_mib"],
        params["pairs_max"],
        params["allreduce"],
        params["store_port"],
    ) == ("10.0.0.5", 4, 3, "gloo", 7000)
    compile(params["rank_code"], "<rank>", "exec")
    assert fitness_ray.parse('noise\n%s{"objects": [], "nodes": ["a"]}\n' % fitness_ray.MARK) == {
        "objects": [],
        "nodes": ["a"],
    }
    with pytest.raises(ValueError, match=r"^the Ray check printed no result \(its log ends: Traceback boom\)$"):
        fitness_ray.parse("x\nTraceback boom\n")


def test_the_all_reduce_table_is_nccl_tests_own():
    real = (FIXTURES / "nccl_tests_all_reduce.txt").read_text().splitlines()
    header = next(i for i, l in enumerate(real) if l.startswith("#       size"))
    rows = [dict(bytes=8388608, count=2097152, time_us=135.8, algbw=61.77, busbw=115.82)]
    ours = fitness_ray.table(rows)
    assert ours[0] == real[header][: len(ours[0])].rstrip() or real[header].startswith(ours[0])
    assert real[header + 1].startswith(ours[1].rstrip())
    sample = next(l for l in real[header + 2 :] if l.strip().startswith("8388608"))
    assert (
        ours[2][: len("       8388608       2097152     float     sum      -1")]
        == sample[: len("       8388608       2097152     float     sum      -1")]
    )
    assert re.fullmatch(r"# Avg bus bandwidth    : [0-9.]+ ", ours[-1])
    assert fitness_ray.bus_factor(16) == 2 * 15 / 16


def test_submit_waits_for_the_nodes_left_in_and_refuses_an_unfit_cluster():
    from ansible_collections.rlinfra.verl.plugins.filter.fitness import fitness_gate

    hosts = ["gpu-0", "gpu-1", "gpu-2"]
    assert fitness_gate({}, hosts, "c") == dict(wait_for=3, excluded=[], error="", lines=[])
    left = dict(
        cluster="c",
        head="gpu-0",
        fit=True,
        members=hosts,
        time="20261126T120000Z",
        unfit={"gpu-2": ["gpu-2 -> gpu-0: 0.021 Gbit/s over eth0 (threshold 1 Gbit/s)"]},
        excluded={"gpu-2": ["gpu-2 -> gpu-0: 0.021 Gbit/s over eth0 (threshold 1 Gbit/s)"]},
    )
    gate = fitness_gate(left, hosts, "c")
    assert (gate["wait_for"], gate["excluded"], gate["error"]) == (2, ["gpu-2"], "")
    assert gate["lines"] == [
        "left out:      gpu-2 (fitness.yml, 20261126T120000Z): gpu-2 -> gpu-0: 0.021 Gbit/s over eth0 "
        "(threshold 1 Gbit/s)"
    ]
    unfit = dict(left, fit=False, excluded={})
    assert fitness_gate(unfit, hosts, "c")["error"] == (
        "cluster c's last fitness.yml (20261126T120000Z) found it not fit to train: gpu-2 -> gpu-0: 0.021 Gbit/s over eth0 "
        "(threshold 1 Gbit/s); fix it and run fitness.yml again, or leave the unfit workers out with fitness.yml "
        "-e fitness_exclude_unfit=true; nothing was submitted"
    )
    # a verdict about other members (a node replaced since) is not held against the cluster
    assert fitness_gate(unfit, ["gpu-0", "gpu-1", "gpu-3"], "c")["error"] == ""


def test_site_leaves_the_excluded_worker_unconverged_and_says_so():
    from ansible_collections.rlinfra.verl.plugins.filter.ray_cluster import converge_plan, ray_active

    groups = {"ray_head": ["h0"], "ray_workers": ["w1", "w2"]}
    state = {"converged": True, "reason": "", "members": ["h0", "w1"]}
    hv = {
        "h0": {"ansible_converge_record": state},
        "w1": {"ansible_converge_record": state},
        "w2": {
            "ansible_converge_record": dict(state, reason="no converge record"),
            "ansible_local": {"rlinfra_excluded": {"since": "2026-11-26T12:00:00Z", "reason": "w2 GPU 3: Xid 79"}},
        },
    }
    plan = converge_plan(["h0", "w1", "w2"], hv, groups)
    assert plan["converge"] == [] and plan["checked"] == ["h0", "w1"] and plan["excluded"] == ["w2"]
    assert plan["lines"][-1] == (
        "Cluster 'default': w2 is left out (fitness.yml, since 2026-11-26T12:00:00Z: w2 GPU 3: "
        "Xid 79); its Ray stays stopped until fitness.yml finds it fit again."
    )
    assert ray_active(["h0", "w1", "w2"], hv) == ["h0", "w1"]
    assert plan["groups"] == []  # a no-op re-run adds nobody to a group: its later plays have no hosts
    del hv["w2"]["ansible_local"]  # taken back: the members changed, the cluster converges
    assert sorted(converge_plan(["h0", "w1", "w2"], hv, groups)["converge"]) == ["h0", "w1", "w2"]


def test_site_checks_fitness_on_the_hosts_that_ask_for_it():
    from ansible_collections.rlinfra.verl.plugins.filter.ray_cluster import converge_plan

    groups = {"ray_head": ["h0"], "ray_workers": ["w1"]}
    state = {"converged": True, "reason": "", "members": ["h0", "w1"]}
    hv = {
        "h0": {"ansible_converge_record": state, "ray_fitness_check": "yes"},
        "w1": {"ansible_converge_record": dict(state, reason="unit changed"), "ray_fitness_check": True},
    }
    plan = converge_plan(["h0", "w1"], hv, groups)
    assert plan["groups"] == [
        {"host": "h0", "groups": ["rlinfra_converge", "rlinfra_fitness"]},
        {"host": "w1", "groups": ["rlinfra_converge", "rlinfra_fitness"]},
    ]
    hv["w1"]["ray_fitness_check"] = "false"
    hv["w1"]["ansible_converge_record"] = state
    assert converge_plan(["h0", "w1"], hv, groups)["groups"] == [{"host": "h0", "groups": ["rlinfra_fitness"]}]


def test_a_dead_run_names_its_causes_from_the_driver_log_and_the_kernel_logs(tmp_path):
    """The driver log ends with torch.save's real ENOSPC line (tests/unit/fixtures/gpu/training_failures.txt); one node's
    kernel log holds a real Xid 79 line (kernel_lines.txt); the head reports its checkpoint volume's free space."""
    from ansible_collections.rlinfra.verl.plugins.filter.node_logs_report import run_causes
    from ansible_collections.rlinfra.verl.plugins.module_utils.node.kernel_log import kernel_events

    lines = (FIXTURES / "training_failures.txt").read_text().splitlines()
    enospc = next(l for l in lines if l.startswith("OSError: [Errno 28] No space left on device"))
    xid = next(l for l in (FIXTURES / "kernel_lines.txt").read_text().splitlines() if "Xid" in l and ": 79," in l)
    log = tmp_path / "driver.log"
    log.write_text("step:18 - actor/loss:0.12\nstep:19 - actor/loss:0.11\nsaving checkpoint\n" + enospc + "\n")
    collected = [
        dict(item="gpu-0", volumes=[dict(path="/data/checkpoints/p/default/e", free_bytes=0)], kernel_events=[]),
        dict(
            item="gpu-2",
            volumes=[dict(path="/data/checkpoints/p/default/e", free_bytes=0)],
            kernel_events=kernel_events([xid]),
        ),
        dict(item="gpu-3", unreachable=True),
    ]
    causes = run_causes(collected, str(log), 19)
    assert causes[0] == (
        "the checkpoint volume /data/checkpoints/p/default/e is full (0 B free) at step 19: free space or "
        "lower trainer.max_actor_ckpt_to_keep"
    )
    assert len(causes) == 2 and causes[1].startswith("gpu-2: Xid 79 (GPU has fallen off the bus) on 0000:")
    assert run_causes([], "", None) == [] and run_causes(collected[2:], str(tmp_path / "none.log")) == []


def test_check_mode_measures_nothing_through_ray_and_calls_that_no_failure():
    """fitness.yml --check: the Ray job is skipped; that is not the cluster's failure (it read "not run (Conditional
    result was False)" and failed the run), while a Ray check skipped for real stays one."""
    from ansible_collections.rlinfra.verl.plugins.action.fitness_report import ray_result

    skipped = {"skipped": True, "skip_reason": "Conditional result was False"}
    assert ray_result(skipped, check_mode=True) == {}
    assert ray_result(skipped) == {"error": "not run (Conditional result was False)"}
    nodes = [
        dict(host="h", ip="10.0.0.1", ifname="eth0", check={"lines": []}),
        dict(host="w", ip="10.0.0.2", ifname="eth0", check={"lines": []}),
    ]
    out = verdict("c", "h", nodes, [], ray_result(skipped, check_mode=True))
    assert not out["failure"] and not out["unfit"]


@pytest.mark.parametrize(
    "how,why,fix",
    [
        ("proc", "No such file or directory", ""),
        ("disk_full", "No space left on device", "free space or "),
        ("read_only", "Read-only file system", ""),
    ],
)
def test_a_verdict_that_cannot_be_kept_names_fitness_artifacts_dir(tmp_path, monkeypatch, how, why, fix):
    """A full disk or a read-only directory ended the task with a bare traceback naming no setting."""
    from ansible_collections.rlinfra.verl.plugins.module_utils.node import fitness_report

    base = str(tmp_path / "fitness")
    if how == "proc":
        base = "/proc/1/rlinfra-artifacts/fitness"  # fails for root too
    else:
        err = errno.ENOSPC if how == "disk_full" else errno.EROFS

        def fails(path, *args, **kwargs):
            raise OSError(err, os.strerror(err), path)

        monkeypatch.setattr(fitness_report.files, "write_atomic", fails)
    out = verdict("c", "gpu-0", NODES, LINKS, RAY, {"min_gbit": 1.0})
    with pytest.raises(ValueError) as e:
        fitness_report.save(base, "c-20231114T221000Z.json", out["document"])
    assert str(e.value) == (
        "fitness_artifacts_dir %s: cannot write the fitness report c-20231114T221000Z.json (%s): "
        "%sset fitness_artifacts_dir to another directory" % (base, why, fix)
    )
    assert not os.path.exists(os.path.join(base, "c-20231114T221000Z.json"))
    # The action keeps the verdict in its result and fails with that line alone.
    from ansible_collections.rlinfra.verl.plugins.action import fitness_report as action

    act = object.__new__(action.ActionModule)
    act._task = type("Task", (), {"check_mode": False})()
    res = act.act(
        {},
        dict(
            cluster="c",
            head="gpu-0",
            members=[],
            links={},
            ray={},
            exclude_unfit=False,
            thresholds={},
            artifacts_dir=base,
        ),
        {"hostvars": {}},
    )
    assert res["failed"] and res["path"] == "" and res["table"]
    assert re.fullmatch(
        r"fitness_artifacts_dir %s: cannot write the fitness report c-\d{8}T\d{6}Z\.json \(%s\): %sset "
        r"fitness_artifacts_dir to another directory" % (re.escape(base), why, fix),
        res["msg"],
    )


def test_a_verdict_is_kept_0600_under_fitness_artifacts_dir(tmp_path):
    from ansible_collections.rlinfra.verl.plugins.module_utils.node import fitness_report

    path = fitness_report.save(str(tmp_path / "a" / "fitness"), "c-1.json", {"fit": True})
    assert path == str(tmp_path / "a" / "fitness" / "c-1.json") and json.loads(Path(path).read_text()) == {"fit": True}
    assert os.stat(path).st_mode & 0o777 == 0o600 and os.stat(tmp_path / "a" / "fitness").st_mode & 0o777 == 0o700
