"""Bad command-line switches, one table: every row is one ``ansible-playbook <playbook>.yml -e ...``
a careless user types, and the exact line it must give. Nothing may be done by it: the line comes from
``rlinfra.verl.command_line``, the first task of every playbook (rules in ``module_utils/common/cli.py``).

Every row runs in-process against the rules; each kind of refusal of each playbook runs for real too
(``ansible-playbook`` from the repository root against a one-host local inventory), where the run must stop at its
first task with that line, a non-zero exit and nothing changed.
"""

from __future__ import annotations

import collections
import concurrent.futures
import json
import os
import subprocess
import sys

import pytest
import yaml

from ansible_collections.rlinfra.verl.plugins.module_utils.common import cli

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BOOL = "must be true or false (also yes/no/1/0, any case), got"
JOB = "exp, run, cluster"

Row = collections.namedtuple("Row", "id playbook extra expect")
EMPTY = "is empty (-e %s= with nothing after it: an unset shell variable?): give "
CLUSTER_OUT = (
    "the cluster's name, or leave -e cluster out for the experiment's cluster (every cluster for site.yml, "
    "fitness.yml and teardown.yml)"
)
EXP = "exp must be an experiment name (letters, digits, _ . -), or rlinfra.verl:NAME for a bundled example"
NAME = "a name of letters, digits, _ . - (starting with a letter or digit, at most 80)"
ROWS = [
    # -- on/off switches: a typo must not read as false --------------------------------------------------------
    Row("dry_run_typo", "submit", ["exp=smoke", "dry_run=treu"], "dry_run %s 'treu'" % BOOL),
    Row("dry_run_word", "submit", ["exp=smoke", "dry_run=maybe"], "dry_run %s 'maybe'" % BOOL),
    Row("dry_run_on", "submit", ["exp=smoke", "dry_run=on"], "dry_run %s 'on'" % BOOL),
    Row("dry_run_y", "submit", ["exp=smoke", "dry_run=y"], "dry_run %s 'y'" % BOOL),
    Row("dry_run_two", "submit", ["exp=smoke", "dry_run=2"], "dry_run %s '2'" % BOOL),
    Row("dry_run_empty", "submit", ["exp=smoke", "dry_run="], "dry_run %s ''" % BOOL),
    Row("dry_run_json_list", "submit", ["exp=smoke", '{"dry_run": [true]}'], "dry_run %s [True] (a list)" % BOOL),
    Row("wait_typo", "submit", ["exp=smoke", "wait=fasle"], "wait %s 'fasle'" % BOOL),
    Row(
        "two_bad_switches",
        "submit",
        ["exp=smoke", "dry_run=treu", "wait=nope"],
        "dry_run %s 'treu'; wait %s 'nope'" % (BOOL, BOOL),
    ),
    Row("stop_jobs_typo", "teardown", ["teardown_stop_jobs=ture"], "teardown_stop_jobs %s 'ture'" % BOOL),
    Row("purge_typo", "teardown", ["teardown_purge=yess"], "teardown_purge %s 'yess'" % BOOL),
    Row("restart_typo", "site", ["ray_restart_running_jobs=treu"], "ray_restart_running_jobs %s 'treu'" % BOOL),
    Row("release_typo", "teardown", ["release=ture"], "release %s 'ture'" % BOOL),
    Row("keep_partial_typo", "provision", ["nodes=2", "keep_partial=yse"], "keep_partial %s 'yse'" % BOOL),
    Row("nodes_zero", "provision", ["nodes=0"], "nodes must be a whole number from 1 to 256, got '0'"),
    Row(
        "gpu_count_word",
        "provision",
        ["nodes=2", "gpu_count=eight"],
        "gpu_count must be a whole number from 1 to 64, got 'eight'",
    ),
    Row(
        "gpu_count_dash",
        "provision",
        ["nodes=2", "gpu-count=8"],
        "-e gpu-count is not a switch of provision.yml; did you mean -e gpu_count? (its switches: nodes, gpu, gpu_count, "
        "label, max_price, region, keep_partial, api, replace_unfit)",
    ),
    Row(
        "replace_unfit_typo",
        "provision",
        ["nodes=2", "replace_unfit=ture"],
        "replace_unfit must be true or false (also yes/no/1/0, any case), got 'ture'",
    ),
    Row(
        "fitness_cluster_near_miss",
        "fitness",
        ["clustr=a"],
        "-e clustr is not a switch of fitness.yml; did you mean -e cluster? (its switches: cluster)",
    ),
    # -- a scope given empty (an unset shell variable) never means "all" ------------------------------------------
    Row(
        "teardown_cluster_empty", "teardown", ["cluster=", "release=true"], "cluster " + EMPTY % "cluster" + CLUSTER_OUT
    ),
    Row("teardown_cluster_blank", "teardown", ["cluster=  "], "cluster " + EMPTY % "cluster" + CLUSTER_OUT),
    Row("submit_exp_empty", "submit", ["exp="], "exp " + EMPTY % "exp" + "an experiment name"),
    Row(
        "stop_run_empty",
        "stop",
        ["exp=smoke", "run="],
        "run " + EMPTY % "run" + "the run's suffix, or leave -e run out for the run without one",
    ),
    Row(
        "provision_label_empty",
        "provision",
        ["nodes=2", "label="],
        "label " + EMPTY % "label" + "the label of the rentals (a name)",
    ),
    Row(
        "submit_checkpoint_cluster_empty",
        "submit",
        ["exp=smoke", "checkpoint_cluster="],
        "checkpoint_cluster "
        + EMPTY % "checkpoint_cluster"
        + "the cluster whose checkpoints to resume from, or leave -e "
        "checkpoint_cluster out for the cluster's own",
    ),
    # -- the playbooks' own variables, read by their plays' keywords: checked with the command line -------------------
    Row(
        "step_timeout_word",
        "site",
        ["rlinfra_step_timeout=1h"],
        "rlinfra_step_timeout must be a whole number of seconds from 60 to 604800 (a week), got '1h'",
    ),
    Row(
        "fitness_cluster_dash",
        "fitness",
        ["cluster=-a"],
        "cluster must be a name of letters, digits, _ . - (starting with a letter or digit, at most 80), got '-a'",
    ),
    Row(
        "submit_on_end_typo",
        "submit",
        ["exp=smoke", "on_end=relase"],
        "on_end must be one of keep, release, release_always (did you mean 'release'?), got 'relase'",
    ),
    # -- near misses of a switch's name: Ansible would set a variable nobody reads ---------------------------
    Row(
        "dryrun",
        "submit",
        ["exp=smoke", "dryrun=true"],
        "-e dryrun is not a switch of submit.yml; did you mean -e dry_run? (its switches: %s, checkpoint_cluster, "
        "dry_run, wait, on_end)" % JOB,
    ),
    Row(
        "dry_dash_run",
        "submit",
        ["exp=smoke", "dry-run=true"],
        "-e dry-run is not a switch of submit.yml; did you mean -e dry_run? (its switches: %s, checkpoint_cluster, "
        "dry_run, wait, on_end)" % JOB,
    ),
    Row(
        "DRY_RUN_upper",
        "submit",
        ["exp=smoke", "DRY_RUN=true"],
        "-e DRY_RUN is not a switch of submit.yml; did you mean -e dry_run? (its switches: %s, checkpoint_cluster, "
        "dry_run, wait, on_end)" % JOB,
    ),
    Row(
        "wiat",
        "submit",
        ["exp=smoke", "wiat=false"],
        "-e wiat is not a switch of submit.yml; did you mean -e wait? (its switches: %s, checkpoint_cluster, "
        "dry_run, wait, on_end)" % JOB,
    ),
    Row(
        "expp",
        "status",
        ["expp=smoke"],
        "-e expp is not a switch of status.yml; did you mean -e exp? (its switches: %s)" % JOB,
    ),
    Row(
        "clutser",
        "stop",
        ["exp=smoke", "clutser=b"],
        "-e clutser is not a switch of stop.yml; did you mean -e cluster? (its switches: %s)" % JOB,
    ),
    Row(
        "attempts",
        "logs",
        ["exp=smoke", "attempts=2"],
        "-e attempts is not a switch of logs.yml; did you mean -e attempt? (its switches: %s, attempt)" % JOB,
    ),
    Row(
        "steps",
        "merge",
        ["exp=smoke", "steps=4"],
        "-e steps is not a switch of merge.yml; did you mean -e step? (its switches: %s, step)" % JOB,
    ),
    Row(
        "purge_short",
        "teardown",
        ["teardown-purge=true"],
        "-e teardown-purge is not a switch of teardown.yml; did you mean -e teardown_purge? (its switches: cluster, "
        "teardown_stop_jobs, teardown_purge, release, api)",
    ),
    Row(
        "stop_jobs_plural",
        "teardown",
        ["teardown_stop_job=true"],
        "-e teardown_stop_job is not a switch of teardown.yml; did you mean -e teardown_stop_jobs? (its switches: "
        "cluster, teardown_stop_jobs, teardown_purge, release, api)",
    ),
    Row(
        "restart_dashes",
        "site",
        ["ray-restart-running-jobs=true"],
        "-e ray-restart-running-jobs is not a switch of site.yml; did you mean -e ray_restart_running_jobs? "
        "(its switches: ray_restart_running_jobs)",
    ),
    # -- a switch of another playbook: it would do nothing, or the opposite ------------------------------------
    Row(
        "stop_dry_run",
        "stop",
        ["exp=smoke", "dry_run=true"],
        "-e dry_run is not a switch of stop.yml (its switches: %s); it would be ignored: drop it" % JOB,
    ),
    Row(
        "status_wait",
        "status",
        ["exp=smoke", "wait=false"],
        "-e wait is not a switch of status.yml (its switches: %s); it would be ignored: drop it" % JOB,
    ),
    Row(
        "teardown_dry_run",
        "teardown",
        ["dry_run=true"],
        "-e dry_run is not a switch of teardown.yml (its switches: cluster, teardown_stop_jobs, teardown_purge, release, api); "
        "it would be ignored: drop it",
    ),
    Row(
        "site_purge",
        "site",
        ["teardown_purge=true"],
        "-e teardown_purge is not a switch of site.yml (its switches: ray_restart_running_jobs); it would be "
        "ignored: drop it",
    ),
    Row(
        "submit_step",
        "submit",
        ["exp=smoke", "step=3"],
        "-e step is not a switch of submit.yml (its switches: %s, checkpoint_cluster, dry_run, wait, on_end); it would be "
        "ignored: drop it" % JOB,
    ),
    Row(
        "merge_attempt",
        "merge",
        ["exp=smoke", "attempt=2"],
        "-e attempt is not a switch of merge.yml (its switches: %s, step); it would be ignored: drop it" % JOB,
    ),
    # -- counts ---------------------------------------------------------------------------------------------
    Row(
        "attempt_word",
        "logs",
        ["exp=smoke", "attempt=last"],
        "attempt must be a whole number from 1 to 1000000, got 'last'",
    ),
    Row(
        "attempt_zero", "logs", ["exp=smoke", "attempt=0"], "attempt must be a whole number from 1 to 1000000, got '0'"
    ),
    Row(
        "attempt_negative",
        "logs",
        ["exp=smoke", "attempt=-1"],
        "attempt must be a whole number from 1 to 1000000, got '-1'",
    ),
    Row(
        "step_word",
        "merge",
        ["exp=smoke", "step=latest"],
        "step must be a whole number from 1 to 1000000000000, got 'latest'",
    ),
    Row(
        "step_fraction",
        "merge",
        ["exp=smoke", "step=1.5"],
        "step must be a whole number from 1 to 1000000000000, got '1.5'",
    ),
    Row(
        "step_json_float",
        "merge",
        ["exp=smoke", '{"step": 2.0}'],
        "step must be a whole number from 1 to 1000000000000, got 2.0",
    ),
    # -- words ----------------------------------------------------------------------------------------------
    Row("exp_list", "submit", ['{"exp": ["a", "b"]}'], EXP + ", got ['a', 'b'] (a list)"),
    Row("exp_mapping", "status", ['{"exp": {"name": "smoke"}}'], EXP + ", got {'name': 'smoke'} (a mapping)"),
    Row(
        "cluster_newline",
        "teardown",
        ['{"cluster": "a\\nb"}'],
        "cluster must be " + NAME + " without line breaks or control characters, got 'a\\nb'",
    ),
    # A switch given as null (an -e @file with dry_run: null): refused, never read as "not given".
    Row(
        "dry_run_null",
        "submit",
        ["exp=smoke", '{"dry_run": null}'],
        "dry_run must be set (null is not a value here), got null",
    ),
    Row("release_null", "teardown", ['{"release": null}'], "release must be set (null is not a value here), got null"),
    # provision.yml -e gpu= rented any GPU model, with no price cap.
    Row(
        "gpu_empty",
        "provision",
        ["nodes=2", "gpu="],
        "gpu must not be empty (it must be a GPU model such as H100 (or any, with max_price)), got ''",
    ),
    Row(
        "max_price_word",
        "provision",
        ["nodes=1", "gpu=H100", "max_price=cheap"],
        "max_price must be a number, got 'cheap'",
    ),
    Row(
        "max_price_zero",
        "provision",
        ["nodes=1", "gpu=H100", "max_price=0"],
        "max_price must be a number of US dollars per GPU-hour above 0 and at most 1000, got '0'",
    ),
    Row("run_bool", "stop", ['{"exp": "smoke", "run": true}'], "run must be " + NAME + ", got True"),
    # Counts and prices past any real rental: the switch says so, not a module's argument further down.
    Row(
        "nodes_a_billion",
        "provision",
        ["nodes=1000000000", "gpu=H100"],
        "nodes must be a whole number from 1 to 256, got '1000000000'",
    ),
    Row(
        "gpu_count_huge",
        "provision",
        ["nodes=1", "gpu=H100", "gpu_count=4096"],
        "gpu_count must be a whole number from 1 to 64, got '4096'",
    ),
    Row(
        "max_price_huge",
        "provision",
        ["nodes=1", "gpu=H100", "max_price=1e300"],
        "max_price must be a number of US dollars per GPU-hour above 0 and at most 1000, got '1e300'",
    ),
    Row(
        "max_price_negative",
        "provision",
        ["nodes=1", "gpu=H100", "max_price=-2"],
        "max_price must be a number of US dollars per GPU-hour above 0 and at most 1000, got '-2'",
    ),
    Row(
        "attempt_huge",
        "logs",
        ["exp=smoke", "attempt=1000000000000000000000000000000"],
        "attempt must be a whole number from 1 to 1000000, got '1000000000000000000000000000000'",
    ),
    Row(
        "dry_run_list",
        "submit",
        ["exp=smoke", '{"dry_run": []}'],
        "dry_run must be true or false (also yes/no/1/0, any case), got [] (a list)",
    ),
    Row("wait_on", "submit", ["exp=smoke", "wait=on"], "wait %s 'on'" % BOOL),
]
# Rows whose extra vars are good: the switch parses, and the run goes on past the first task.
GOOD = [
    ("submit", ["exp=smoke", "dry_run=YES", "wait=0"], {"exp": "smoke", "dry_run": True, "wait": False}),
    ("logs", ["exp=smoke", "attempt=2"], {"exp": "smoke", "attempt": 2}),
    ("merge", ['{"exp": "smoke", "step": 7}'], {"exp": "smoke", "step": 7}),
    ("teardown", ["teardown_purge=False", "cluster=b"], {"cluster": "b", "teardown_purge": False}),
    # The collection's own variables and names far from any switch are ordinary -e variables.
    ("submit", ["exp=smoke", "verl_job_wait_timeout=60", "ray_num_gpus=0", "my_note=x"], {"exp": "smoke"}),
    ("site", ["ray_restart_running_jobs=true", "storage_lvm_force=false"], {"ray_restart_running_jobs": True}),
    # An AWX workflow (site -> submit -> merge) sends its survey answers to every playbook of the chain.
    ("site", ["exp=smoke", "run=2", "cluster=a"], {}),
    ("teardown", ["exp=smoke", "cluster=a"], {"cluster": "a"}),
]


def _extra(words):
    out = {}
    for word in words:
        if word.startswith("{"):
            out.update(json.loads(word))
        else:
            name, _, value = word.partition("=")
            out[name] = value
    return out


@pytest.mark.parametrize("r", ROWS, ids=[r.id for r in ROWS])
def test_one_clear_line(r):
    given = _extra(r.extra)
    parsed, errors = cli.check(r.playbook, set(given), given)
    assert cli.summary(r.playbook, errors) == "Bad command line for %s.yml, nothing was done: %s" % (
        r.playbook,
        r.expect,
    )


@pytest.mark.parametrize("value", ["", None, "  "])
def test_an_awx_survey_left_blank_is_not_given(value):
    """AWX before 2026 sends a blank optional survey answer as "" (or null, awx#16205): in an AWX job that is "not
    answered"; the same on the command line is refused."""
    values = {"exp": "smoke", "cluster": value, "run": value}
    assert cli.check("submit", set(values), values, awx=True) == ({"exp": "smoke"}, [])
    assert len(cli.check("submit", set(values), values)[1]) == 2


@pytest.mark.parametrize("playbook,extra,want", GOOD)
def test_good_switches_parse(playbook, extra, want):
    given = _extra(extra)
    assert cli.check(playbook, set(given), given) == (want, [])


def test_table_covers_every_playbook_and_kind():
    assert len(ROWS) >= 35 and len({r.id for r in ROWS}) == len(ROWS)
    assert {r.playbook for r in ROWS} == set(cli.PLAYBOOKS)
    bad_names = {name for r in ROWS for name in _extra(r.extra)}
    assert {n for n in cli.SWITCHES if n not in cli.WORDS} <= bad_names


# ---- for real ----------------------------------------------------------------------------------------------

INVENTORY = {
    "all": {
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
        "children": {"ray_head": {"hosts": {"head0": {"ray_cluster": "a"}}}},
    }
}


def _family(r):
    """What kind of refusal a row's line is: each kind is run for real once per playbook (the in-process test above
    holds every row's line; a real run proves the playbook stops at its first task with it)."""
    for family, words in (
        ("switch", "must be true or false"),
        ("not_a_switch", "is not a switch of"),
        ("empty", " is empty ("),
        ("count", "whole number"),
        ("null", "null"),
        ("name", "must be a name"),
        ("exp", "experiment name"),
    ):
        if words in r.expect:
            return family
    return r.id


REAL = list({(r.playbook, _family(r)): r for r in reversed(ROWS)}.values())[::-1]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("switches")
    (tmp / "inventory.yml").write_text(yaml.safe_dump(INVENTORY))
    env = dict(
        os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg")
    )
    cases = [(r.id, r.playbook, r.extra) for r in REAL] + [
        ("good_%d" % i, pb, extra) for i, (pb, extra, _) in enumerate(GOOD)
    ]

    def play(case):
        name, playbook, extra = case
        argv = [
            os.path.join(os.path.dirname(sys.executable), "ansible-playbook"),
            "--check",
            "-i",
            str(tmp / "inventory.yml"),
            "playbooks/%s.yml" % playbook,
        ]
        for word in extra:
            argv += ["-e", word]
        proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        return name, proc

    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        return dict(pool.map(play, cases))


def _first_task(proc):
    out = json.loads(proc.stdout)
    task = out["plays"][0]["tasks"][0]
    return out, task["task"]["name"], next(iter(task["hosts"].values()))


def test_every_playbook_and_kind_of_refusal_runs_for_real():
    assert {r.playbook for r in REAL} == set(cli.PLAYBOOKS) and len(REAL) >= 30
    assert {"teardown_cluster_empty", "dry_run_typo", "step_timeout_word"} <= {r.id for r in REAL}


@pytest.mark.parametrize("r", REAL, ids=[r.id for r in REAL])
def test_the_run_stops_at_its_first_task_with_the_line(runs, r):
    proc = runs[r.id]
    out, name, result = _first_task(proc)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert name == "Read the command line strictly"
    assert result["msg"] == "Bad command line for %s.yml, nothing was done: %s" % (r.playbook, r.expect)
    assert len(out["plays"]) == 1 and len(out["plays"][0]["tasks"]) == 1
    assert all(s["changed"] == 0 for s in out["stats"].values())


@pytest.mark.parametrize("i", range(len(GOOD)))
def test_good_switches_pass_the_first_task(runs, i):
    playbook, extra, want = GOOD[i]
    out, name, result = _first_task(runs["good_%d" % i])
    assert name == "Read the command line strictly"
    assert not result.get("failed") and result["switches"] == want


# ---- an inventory that gave no cluster -----------------------------------------------------------------------


def test_only_the_playbooks_that_work_on_a_cluster_need_one():
    # provision.yml rents its cluster; teardown.yml also takes down a cluster whose head is gone (its own check).
    assert set(cli.NEEDS_CLUSTER) == set(cli.PLAYBOOKS) - {"provision", "teardown"}
    assert cli.no_cluster("submit", ["a.hyperbolic.yml", "b.yml"]) == (
        "No Ray cluster for submit.yml, nothing was done: no host in group ray_head; the inventory (a.hyperbolic.yml, "
        "b.yml) gave none (a source that could not be loaded is named in the warning above): fix it and rerun"
    )


@pytest.mark.parametrize(
    "groups", [{}, {"ray_workers": {"hosts": {"w0": {"ray_cluster": "a"}}}}], ids=["empty", "no_head"]
)
def test_a_cluster_playbook_stops_at_its_first_task_without_a_head(tmp_path, groups):
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": groups}}))
    env = dict(
        os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg")
    )
    proc = subprocess.run(
        [
            os.path.join(os.path.dirname(sys.executable), "ansible-playbook"),
            "-i",
            str(inventory),
            "playbooks/submit.yml",
            "-e",
            "exp=smoke",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out, name, result = _first_task(proc)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert name == "Read the command line strictly"
    assert result["msg"] == cli.no_cluster("submit", [str(inventory)])
    assert len(out["plays"]) == 1 and len(out["plays"][0]["tasks"]) == 1
