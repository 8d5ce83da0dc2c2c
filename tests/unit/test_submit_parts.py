"""The parts a submit is made of since the redesign: the experiment loaded once and rendered from that
result, the run's secrets file converged on the head (verl_secrets_file), the secret-values rule, and
the run's result (job_result filter)."""

from __future__ import annotations

import os
import stat

import pytest

from ansible_collections.rlinfra.verl.plugins.filter.job_result import NOT_WAITED, job_result
from ansible_collections.rlinfra.verl.plugins.filter.secrets_file import secret_values
from ansible_collections.rlinfra.verl.plugins.module_utils.verl import experiment as E
from ansible_collections.rlinfra.verl.plugins.module_utils.verl import experiment_render, secrets_run
from ansible_collections.rlinfra.verl.plugins.module_utils.verl import secrets_file as SF

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXPERIMENTS = os.path.join(REPO, "experiments")
NODES = [{"node_ip": "10.0.0.%d" % i, "is_head": i == 0, "resources": {"CPU": 96, "GPU": 8}} for i in range(3)]


@pytest.mark.parametrize("name", sorted(E.experiment_names(EXPERIMENTS)))
def test_an_experiment_rebuilt_from_its_summary_renders_the_same_job(name):
    exp = E.load_experiment(
        name, EXPERIMENTS, extra_params={"trainer": {"total_epochs": 3}} if name.startswith("gsm8k") else None
    )
    again = E.Experiment.from_summary(exp.summary())
    assert again.summary() == exp.summary()
    kw = dict(
        cluster="c1", run="2", venv="/opt/v", secret_names_present=exp.secrets, secrets_dir="/data/.rlinfra/secrets"
    )
    assert experiment_render.render(again, NODES, **kw) == experiment_render.render(exp, NODES, **kw)


def test_from_summary_never_reads_the_file(tmp_path):
    path = tmp_path / "exp1.yml"
    path.write_text("framework: custom\nentrypoint:\n  command: python3 x.py\nparams:\n  a: 1\n")
    summary = E.load_experiment("exp1", str(tmp_path)).summary()
    path.write_text("this: [is not valid")
    assert E.Experiment.from_summary(summary).params == [("a", 1)]


def test_secret_values_prefer_ansible_then_the_environment(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "from-env")
    monkeypatch.setenv("WANDB_API_KEY", "wandb-env")
    monkeypatch.delenv("NOPE", raising=False)
    got = secret_values(["HF_TOKEN", "WANDB_API_KEY", "NOPE"], {"HF_TOKEN": "vault", "WANDB_API_KEY": ""})
    assert got == {"HF_TOKEN": "vault", "WANDB_API_KEY": "wandb-env"}
    # The preflight's split of the same names follows the same rule.
    assert secrets_run.sources(["HF_TOKEN", "WANDB_API_KEY", "NOPE"], ["HF_TOKEN"], os.environ) == (
        ["HF_TOKEN"],
        ["WANDB_API_KEY"],
    )


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_secrets_file_converges_and_removes_only_ended_runs(tmp_path):
    root = tmp_path / "secrets"
    run = str(root / "c1" / "rlinfra-a-c1.env")
    jobs = [
        {"submission_id": "rlinfra-b-c1", "status": "RUNNING"},
        {"submission_id": "rlinfra-old-c1", "status": "FAILED"},
    ]
    (root / "c1").mkdir(parents=True)
    for other in ("rlinfra-b-c1.env", "rlinfra-old-c1.env"):
        (root / "c1" / other).write_text(SF.dumps({"HF_TOKEN": "old"}))
    (root / "c1" / "notes.txt").write_text("x")
    # Check mode: says what it would do, touches nothing.
    res = secrets_run.converge(str(root), run, {"HF_TOKEN": "v1"}, "HOOK", jobs, True, "present", check=True)
    assert res["changed"] and res["written"] and not os.path.exists(run)
    assert (root / "c1" / "rlinfra-old-c1.env").exists()

    res = secrets_run.converge(str(root), run, {"HF_TOKEN": "v1"}, "HOOK", jobs, True, "present")
    assert res["changed"] and res["written"]
    assert res["removed"] == [str(root / "c1" / "rlinfra-old-c1.env")]
    assert SF.loads(open(run).read()) == {"HF_TOKEN": "v1"}
    assert _mode(run) == 0o600 and _mode(root) == 0o700 and _mode(root / "c1") == 0o700
    assert (root / "rlinfra_secrets.py").read_text() == "HOOK" and _mode(root / "rlinfra_secrets.py") == 0o644
    assert (root / "c1" / "rlinfra-b-c1.env").exists() and (root / "c1" / "notes.txt").exists()

    again = secrets_run.converge(str(root), run, {"HF_TOKEN": "v1"}, "HOOK", jobs, True, "present")
    assert again == {"changed": False, "written": False, "removed": []}

    os.chmod(run, 0o644)  # loosened by hand: put back
    assert secrets_run.converge(str(root), run, {"HF_TOKEN": "v1"}, "HOOK", jobs, True, "present")["written"]
    assert _mode(run) == 0o600

    # A run that ended well starts nothing: not rewritten (write=false), and state=absent removes it.
    assert not secrets_run.converge(str(root), run, {"HF_TOKEN": "v2"}, "HOOK", jobs, False, "present")["changed"]
    assert SF.loads(open(run).read()) == {"HF_TOKEN": "v1"}
    assert secrets_run.converge(str(root), run, {}, "", [], True, "absent") == {
        "changed": True,
        "written": False,
        "removed": [run],
    }
    assert not os.path.exists(run)
    assert secrets_run.converge(str(root), run, {}, "", [], True, "absent")["changed"] is False


def test_secrets_file_refuses_a_value_no_shell_can_hold_before_changing_anything(tmp_path):
    root = tmp_path / "secrets"
    with pytest.raises(ValueError, match="cannot be an environment variable"):
        secrets_run.converge(str(root), str(root / "c" / "r.env"), {"X": "a\0b"}, "HOOK", [], True, "present")
    assert not root.exists()


RENDERED = {
    "experiment": {"name": "smoke", "framework": "none", "path": "/e/smoke.yml"},
    "cluster": "default",
    "submission_id": "rlinfra-smoke-default",
    "checkpoint_dir": "/data/checkpoints/p/default/smoke",
    "run_artifacts_dir": "/home/me/proj/artifacts/smoke",
}


def test_job_result_of_a_run_not_waited_for():
    r = job_result(
        RENDERED,
        {"submission_id": "rlinfra-smoke-default", "submitted": True, "status": "PENDING"},
        {"skipped": True, "changed": False},
    )
    assert (r["waited"], r["failed"], r["status"], r["submitted"]) == (False, False, None, True)
    assert r["lines"][1] == NOT_WAITED
    assert r["lines"][0] == "experiment:    smoke (none) on Ray cluster default - /e/smoke.yml"


def test_job_result_takes_the_waits_verdict_not_ansibles_failed():
    waited = {
        "submission_id": "rlinfra-smoke-default-a2",
        "status": "FAILED",
        "succeeded": False,
        "failed": False,
        "msg": "Ray job rlinfra-smoke-default-a2 FAILED",
        "summary": ["status:        FAILED"],
        "dashboard_url": "http://10.0.0.1:8265",
        "attempts": [{"attempt": 1}, {"attempt": 2}],
        "log_path": "/a/l.log",
    }
    r = job_result(RENDERED, {"submission_id": "rlinfra-smoke-default", "submitted": False}, waited)
    assert r["failed"] and r["submission_id"] == "rlinfra-smoke-default-a2" and r["msg"] == waited["msg"]
    assert r["lines"][1:] == [
        "status:        FAILED",
        "checkpoints:   /data/checkpoints/p/default/smoke",
        "artifacts:     /home/me/proj/artifacts/smoke",
        "dashboard:     http://10.0.0.1:8265",
    ]
    ok = job_result(
        RENDERED, {"submission_id": "rlinfra-smoke-default"}, dict(waited, succeeded=True, status="SUCCEEDED")
    )
    assert not ok["failed"]


def test_the_wait_takes_what_the_task_does_not_set_from_the_rendered_experiment():
    from ansible_collections.rlinfra.verl.plugins.action.ray_job_wait import ARGUMENT_SPEC, from_experiment

    rendered = dict(
        RENDERED,
        wait={
            "timeout": 600,
            "progress_interval": 30,
            "poll_interval": 2.0,
            "stop_on_timeout": True,
            "stall_timeout": 0,
            "outage_grace": 120,
            "enabled": True,
        },
        experiment=dict(RENDERED["experiment"], recovery={"max_restarts": 2}),
        runtime_env={"env_vars": {"A": "1"}},
        job_template={"head": "python3 x.py"},
        metadata={"m": "1"},
        resources={"entrypoint_num_cpus": 1},
        package={"uri": "gcs://_ray_pkg_abc.zip"},
        cluster_hosts=["h1", "h2"],
    )
    args = {k: v.get("default") for k, v in ARGUMENT_SPEC.items()}
    args.update(submission_id="rlinfra-smoke-default-a2", experiment=rendered, package_src="/tmp/p.zip", timeout=99)
    out = from_experiment(args, {"submission_id", "experiment", "package_src", "timeout"})
    assert out["timeout"] == 99  # set on the task: wins
    assert (out["progress_interval"], out["poll_interval"], out["stop_on_timeout"], out["outage_grace"]) == (
        30,
        2.0,
        True,
        120,
    )
    assert out["base_submission_id"] == "rlinfra-smoke-default" and out["label"] == "smoke"
    assert out["recovery"] == {"max_restarts": 2} and out["hosts"] == ["h1", "h2"]
    assert out["checkpoint_dir"] == RENDERED["checkpoint_dir"] and out["runtime_env"] == {"env_vars": {"A": "1"}}
    assert out["job"] == {
        "job_template": {"head": "python3 x.py"},
        "metadata": {"m": "1"},
        "resources": {"entrypoint_num_cpus": 1},
        "package": {"uri": "gcs://_ray_pkg_abc.zip", "src": "/tmp/p.zip"},
    }
    assert from_experiment(dict(args, experiment=dict(rendered, package=None)), set())["job"]["package"] is None


def test_job_result_ends_a_failed_runs_lines_with_its_log_tail():
    waited = {
        "status": "FAILED",
        "succeeded": False,
        "summary": ["status:        FAILED"],
        "logs_tail": "\n".join("line %d" % i for i in range(10)),
    }
    lines = job_result(RENDERED, {"submission_id": "rlinfra-smoke-default"}, waited, 3)["lines"]
    assert lines[-4:] == ["end of the log of rlinfra-smoke-default:", "line 7", "line 8", "line 9"]
    ok = job_result(RENDERED, {"submission_id": "s"}, dict(waited, succeeded=True, status="SUCCEEDED"), 3)["lines"]
    assert "line 9" not in ok


def test_values_to_mask_are_the_run_secrets_and_every_given_value(monkeypatch):
    from ansible_collections.rlinfra.verl.plugins.filter.secrets_file import values_to_mask

    monkeypatch.setenv("HF_TOKEN", "env-hf")
    got = values_to_mask(["HF_TOKEN", "WANDB_API_KEY"], {"WANDB_API_KEY": "w", "OTHER": "o", "EMPTY": ""})
    assert sorted(got) == ["env-hf", "o", "w"]


@pytest.mark.parametrize("name", sorted(E.experiment_names(EXPERIMENTS)))
def test_verl_submit_takes_every_rendered_job(name):
    """verl_submit's declared types (module_utils/common/vocabulary.py) take what verl_experiment renders."""
    from ansible_collections.rlinfra.verl.plugins.modules import verl_submit

    exp = E.load_experiment(name, EXPERIMENTS)
    for kw in ({}, dict(secret_names_present=["HF_TOKEN"], secrets_dir="/data/rlinfra-secrets")):
        job = experiment_render.render(exp, NODES, **kw)
        job["package"] = {"uri": "gcs://_ray_pkg_%s.zip" % ("0" * 40), "path": "/tmp/pkg/x.zip"}
        jobs = [{"submission_id": "other", "status": "RUNNING", "metadata": {}, "job_id": "02000000"}]
        assert verl_submit.ARGS.errors(dict(job=job, jobs=jobs, secrets={"HF_TOKEN": "hf_x"}, hook="x = 1\n")) == []


def test_verl_submit_refuses_a_bad_job_in_one_line_before_anything(module_runner, tmp_path):
    from ansible_collections.rlinfra.verl.plugins.modules import verl_submit

    job = experiment_render.render(E.load_experiment("smoke", EXPERIMENTS), NODES)
    for bad, line in (
        (dict(submission_id="team/run"), "job.submission_id must be 1-200 letters"),
        (dict(checkpoint_dir="ckpt"), "job.checkpoint_dir must be an absolute path (starting with /), got 'ckpt'"),
        (
            dict(secrets_file="/etc/x.env", secrets_dir="/data/s"),
            "job.secrets_file must be an absolute path inside /data/s, got '/etc/x.env'",
        ),
    ):
        res = module_runner(
            verl_submit.main,
            dict(
                job=dict(job, **bad),
                address="http://127.0.0.1:9",
                package_dest=str(tmp_path / "x.zip"),
                secrets={"HF_TOKEN": "s3cr3t"},
            ),
        )
        assert res["failed"] is True and res["msg"].startswith(line) and "\n" not in res["msg"], res["msg"]
        assert "s3cr3t" not in str(res) and os.listdir(str(tmp_path)) == []
