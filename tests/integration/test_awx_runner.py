"""site.yml and submit.yml (exp=smoke) on the sandbox through ansible-runner, the way AWX runs a job: inside the
execution environment built from execution-environment.yml (scripts/ee.sh: ansible-builder on the project's own
Debian base, no registry, no Galaxy), with runner's container mode, the private data directory mounted at /runner.

The private data directory is laid out as AWX's RunJob lays it out (awx/main/tasks/jobs.py):

    project/           a copy of the repository (AWX copies the synced checkout, without .git)
    inventory/hosts    the inventory as AWX writes it: an executable script printing the JSON
    env/envvars        the job environment: AWX's own variables plus what the credential types'
                       injectors produce (rendered here from the injectors awx/configure.yml loads,
                       with fake, recognizable values)
    env/extravars      the survey answers and awx_* meta variables, strings tagged !unsafe (AWX's
                       safe_dump)
    env/cmdline        -u USER [--forks N] [-v] from the Machine credential and the template
    env/settings       job_timeout, suppress_ansible_output
    env/ssh_key        the Machine credential's key (runner hands it to ssh-agent through a fifo)

and ansible-runner is called with AWX's parameters (ident = job id, suppress_env_files,
fact_cache_type). Runner runs ansible-playbook from project/, so the repository's ansible.cfg applies
(collections_path ./collections resolves rlinfra.verl with no Galaxy server).

After each job the whole artifacts directory (stdout, job_events/*.json, fact_cache/, status, rc,
command) is searched for every secret value. One file holds them by design of ansible-runner itself:
``command`` records the full environment runner passed to ansible-playbook (runner writes it
unconditionally; AWX gets the same data through its status handler, stores only a masked copy,
build_safe_env, and deletes the private data directory after the job). The test asserts that the
secrets appear there only as the values of the variables the credentials injected, and nowhere else.

If the sandbox is not up it is brought up (sandbox/sandbox.sh up, idempotent); a converged sandbox
makes site.yml a no-op.
"""

from __future__ import annotations

import base64
import configparser
import hashlib
import json
import os
import re
import secrets
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ansible_runner = pytest.importorskip("ansible_runner")

ROOT = Path(__file__).resolve().parents[2]
# The running interpreter's bin directory: its venv may live anywhere (a worktree links the checkout's).
VENV_BIN = Path(sys.executable).parent
SANDBOX_KEY = ROOT / ".sandbox" / "id_ed25519"

# Fake, recognizable credential values, unique to this test session: finding one anywhere means
# this run leaked it.
_TAG = secrets.token_hex(10)
CREDENTIAL_INPUTS = {
    "Hyperbolic API": {"hyperbolic_api_key": "hyp_FAKE_awx_c41d" + _TAG},
    "Hugging Face / W&B tokens": {"hf_token": "hf_FAKE_awx_7f3e" + _TAG, "wandb_api_key": "wandb_FAKE_awx_9b2a" + _TAG},
}
SECRETS = {
    "HYPERBOLIC_API_KEY": CREDENTIAL_INPUTS["Hyperbolic API"]["hyperbolic_api_key"],
    "HF_TOKEN": CREDENTIAL_INPUTS["Hugging Face / W&B tokens"]["hf_token"],
    "WANDB_API_KEY": CREDENTIAL_INPUTS["Hugging Face / W&B tokens"]["wandb_api_key"],
}
SSH_USER = "root"  # the Machine credential's username for the sandbox
AWX_HOST = "https://awx.example.invalid"  # never contacted
JOB_TIMEOUT = 1500
# Copied from the repository into project/: what a git checkout does not contain (local state).
PROJECT_IGNORE = shutil.ignore_patterns(
    ".git",
    ".venv",
    ".sandbox",
    ".cache",
    ".ansible",
    ".pytest_cache",
    "artifacts",
    "__pycache__",
    "*.pyc",
    "rlinfra-verl-*.tar.gz",
)


# --------------------------------------------------------------------------------------------
# Fixtures: the sandbox, the rendered AWX assets, a clean environment
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def clean_env():
    """The test process's environment as the runner's base: no ANSIBLE_*, no secret, the venv first."""
    mp = pytest.MonkeyPatch()
    for key in list(os.environ):
        if key.startswith(("ANSIBLE_", "HYPERBOLIC_", "RAY_", "CONTROLLER_")) or key in ("HF_TOKEN", "WANDB_API_KEY"):
            mp.delenv(key)
    mp.setenv("PATH", "%s:%s" % (VENV_BIN, os.environ.get("PATH", "/usr/bin:/bin")))
    yield
    mp.undo()


@pytest.fixture(scope="module")
def assets(tmp_path_factory, clean_env):
    """What awx/configure.yml would load into AWX, rendered without a controller."""
    out = tmp_path_factory.mktemp("assets") / "assets.json"
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(
        [
            str(VENV_BIN / "ansible-playbook"),
            "-i",
            "localhost,",
            "awx/configure.yml",
            "-e",
            "rlinfra_awx_dump=%s" % out,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text())


# --------------------------------------------------------------------------------------------
# What AWX writes into the private data directory
# --------------------------------------------------------------------------------------------


class _UnsafeDumper(yaml.SafeDumper):
    """awx.main.utils.safe_yaml.SafeStringDumper: every string becomes `!unsafe`."""

    def represent_data(self, data):
        if isinstance(data, str):
            return self.represent_scalar("!unsafe", data)
        return super().represent_data(data)


def awx_safe_dump(extra_vars, safe_dict=None):
    """awx.main.utils.safe_yaml.safe_dump: launch-time values are !unsafe, template ones are not."""
    safe_dict = safe_dict or {}
    parts = []
    for key, value in extra_vars.items():
        dumper = yaml.SafeDumper if key in safe_dict and safe_dict[key] == value else _UnsafeDumper
        parts.append(yaml.dump_all([{key: value}], None, Dumper=dumper, default_flow_style=False))
    return "".join(parts)


def render_injectors(credential_type, inputs):
    """CredentialType.inject_credential: render the env and extra_vars injectors in Jinja's sandbox."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    sandbox_env = ImmutableSandboxedEnvironment()
    namespace = {k: v for k, v in inputs.items() if v not in ("", None)}
    injectors = credential_type["injectors"]
    env = {k: sandbox_env.from_string(t).render(**namespace) for k, t in injectors.get("env", {}).items()}
    extra = {k: sandbox_env.from_string(t).render(**namespace) for k, t in injectors.get("extra_vars", {}).items()}
    return env, extra


def survey_extra_vars(survey_spec, answers):
    """The survey's contribution to extra_vars: the answers, then the defaults of unanswered questions."""
    out = {}
    for q in survey_spec["spec"]:
        var = q["variable"]
        if var in answers:
            value = answers[var]
            if q["type"] == "multiplechoice":
                assert value in q["choices"], "%s=%r is not a choice of the survey: %s" % (var, value, q["choices"])
            out[var] = value
        elif q.get("default") not in (None, ""):
            out[var] = q["default"]
        else:
            assert not q.get("required"), "survey question %s is required" % var
    unknown = set(answers) - set(out)
    assert not unknown, "not survey questions: %s" % sorted(unknown)
    return out


def read_ansible_config(project_dir, keys):
    """awx.main.utils.ansible.read_ansible_config: [defaults] values of project/ansible.cfg."""
    parser = configparser.ConfigParser()
    parser.read(Path(project_dir) / "ansible.cfg")
    return {k: parser.get("defaults", k) for k in keys if parser.has_option("defaults", k)}


def awx_job_env(pdd, job_id, inventory_id, root="/runner"):
    """RunJob.build_env: paths under the container's root (/runner), the private data directory mounted there."""
    env = {
        "AWX_PRIVATE_DATA_DIR": root,
        "JOB_ID": str(job_id),
        "INVENTORY_ID": str(inventory_id),
        "PROJECT_REVISION": subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
        ).stdout.strip(),
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "MAX_EVENT_RES": "700000",
        "AWX_HOST": AWX_HOST,
        "ANSIBLE_SSH_CONTROL_PATH_DIR": root + "/cp",
    }
    (pdd / "cp").mkdir(mode=0o700, exist_ok=True)
    path_vars = [
        (
            "ANSIBLE_ROLES_PATH",
            "roles_path",
            "requirements_roles",
            "~/.ansible/roles:/usr/share/ansible/roles:/etc/ansible/roles",
        ),
        (
            "ANSIBLE_COLLECTIONS_PATH",
            "collections_path",
            "requirements_collections",
            "~/.ansible/collections:/usr/share/ansible/collections",
        ),
        (
            "ANSIBLE_CALLBACK_PLUGINS",
            "callback_plugins",
            "plugins_path",
            "~/.ansible/plugins:/plugins/callback:/usr/share/ansible/plugins/callback",
        ),
    ]
    config = read_ansible_config(pdd / "project", [p[1] for p in path_vars])
    for env_key, setting, folder, default in path_vars:
        paths = default.split(":")
        if setting in config:
            for path in config[setting].split(":"):
                if path not in paths:
                    paths = [config[setting]] + paths
        env[env_key] = os.pathsep.join([root + "/" + folder] + paths)
    return env


def awx_inventory_script(inventory, strip=("ansible_ssh_private_key_file",), first_id=1):
    """Inventory.get_script_data(hostvars=True, towervars=True) of a YAML inventory, as AWX writes it."""
    groups, hostvars = {}, {}

    def walk(name, node):
        node = node or {}
        group = groups.setdefault(name, {"hosts": [], "children": [], "vars": {}})
        group["vars"].update({k: v for k, v in (node.get("vars") or {}).items() if k not in strip})
        for host, hvars in (node.get("hosts") or {}).items():
            group["hosts"].append(host)
            hv = hostvars.setdefault(host, {})
            hv.update({k: v for k, v in (hvars or {}).items() if k not in strip})
        for child, sub in (node.get("children") or {}).items():
            group["children"].append(child)
            walk(child, sub)

    walk("all", inventory["all"])
    for i, host in enumerate(sorted(hostvars), start=first_id):
        hostvars[host].update({"remote_tower_enabled": "true", "remote_tower_id": i})
    data = {k: {kk: vv for kk, vv in v.items() if vv} for k, v in groups.items()}
    data["_meta"] = {"hostvars": hostvars}
    return "#! /usr/bin/env python3\n# -*- coding: utf-8 -*-\nprint(%r)\n" % json.dumps(data)


def _write(path, text, mode=0o600):
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


class AwxJob:
    """One job of a job template: builds the private data directory, runs it, inspects the artifacts."""

    def __init__(
        self, base, assets, inventory, key, job_id, answers, credentials, image, verbosity=None, launch_vars=None
    ):
        self.jt = next(jt for jt in assets["job_templates"] if jt["key"] == key)
        self.image = image
        self.assets = assets
        self.job_id = job_id
        self.pdd = base / ("job_%d" % job_id)
        self.pdd.mkdir(mode=0o700)
        pdd = self.pdd
        for sub in ("inventory", "env"):
            (pdd / sub).mkdir(mode=0o700)
        shutil.copytree(ROOT, pdd / "project", symlinks=True, ignore=PROJECT_IGNORE)

        _write(pdd / "inventory" / "hosts", awx_inventory_script(inventory), mode=0o700)

        env = awx_job_env(pdd, job_id, inventory_id=7)
        cred_extra = {}
        types = {t["name"]: t for t in assets["credential_types"]}
        for type_name in credentials:
            injected_env, injected_extra = render_injectors(types[type_name], CREDENTIAL_INPUTS[type_name])
            env.update(injected_env)
            cred_extra.update(injected_extra)
        self.injected = {k: v for k, v in env.items() if v in SECRETS.values()}
        _write(pdd / "env" / "envvars", json.dumps(env, indent=2))

        extra = survey_extra_vars(self.jt["survey_spec"], answers) if self.jt["survey_enabled"] else {}
        if launch_vars:
            assert self.jt["ask_variables_on_launch"], "%s does not prompt for variables" % self.jt["name"]
            extra.update(launch_vars)
        for name in ("awx", "tower"):
            extra.update(
                {
                    "%s_job_id" % name: job_id,
                    "%s_job_launch_type" % name: "manual",
                    "%s_user_name" % name: "admin",
                    "%s_user_id" % name: 1,
                    "%s_inventory_id" % name: 7,
                    "%s_inventory_name" % name: assets["inventory"]["name"],
                    "%s_project_revision" % name: env["PROJECT_REVISION"],
                    "%s_project_scm_branch" % name: "main",
                    "%s_job_template_id" % name: 40 + job_id % 10,
                    "%s_job_template_name" % name: self.jt["name"],
                }
            )
        _write(pdd / "env" / "extravars", awx_safe_dump(extra))
        self.extra_vars = extra
        if cred_extra:  # credential extra_vars go to their own file, passed as -e @file
            _write(pdd / "env" / "cred_extravars", awx_safe_dump(cred_extra))

        args = ["-u", SSH_USER, "--forks=%d" % self.jt["forks"]]
        if cred_extra:
            args += ["-e", "@/runner/env/cred_extravars"]
        verbosity = verbosity if verbosity is not None else self.jt["verbosity"]
        if verbosity:
            args.append("-" + "v" * min(5, verbosity))
        _write(pdd / "env" / "cmdline", " ".join(args))
        _write(
            pdd / "env" / "settings",
            json.dumps(
                {
                    "job_timeout": JOB_TIMEOUT,
                    "suppress_ansible_output": True,
                    # AWX's default (AWX_RUNNER_SUPPRESS_OUTPUT_FILE) is true;
                    # kept here so that stdout is searched too.
                    "suppress_output_file": False,
                }
            ),
        )
        _write(pdd / "env" / "ssh_key", SANDBOX_KEY.read_text())
        self.result = None

    def run(self):
        self.result = ansible_runner.run(
            private_data_dir=str(self.pdd),
            ident=str(self.job_id),
            playbook=self.jt["playbook"],
            inventory=str(self.pdd / "inventory" / "hosts"),
            suppress_env_files=True,
            fact_cache_type="jsonfile" if self.jt["use_fact_cache"] else "",
            quiet=True,
            # AWX's container group: the job's ansible-playbook runs in the EE. The host's network: the nodes'
            # firewall admits the controller by the address they see, the same as for the other tests' runs.
            process_isolation=True,
            process_isolation_executable="docker",
            container_image=self.image,
            container_options=["--network=host"],
        )
        return self.result

    @property
    def artifacts(self):
        return self.pdd / "artifacts" / str(self.job_id)

    def events(self):
        return [
            json.loads(p.read_text())
            for p in sorted((self.artifacts / "job_events").glob("*.json"), key=lambda p: int(p.name.split("-", 1)[0]))
        ]

    def stdout(self):
        return "".join(e.get("stdout", "") + "\n" for e in self.events())

    def explain(self):
        return "job %d (%s): status %s rc %s\n%s" % (
            self.job_id,
            self.jt["playbook"],
            self.result.status,
            self.result.rc,
            self.stdout()[-6000:],
        )


# --------------------------------------------------------------------------------------------
# Secret search
# --------------------------------------------------------------------------------------------


def _forms(value):
    """The value, and its base64 encodings at the three possible alignments in a base64 stream."""
    raw = value.encode()
    forms = {raw}
    for shift, skip in ((0, 0), (1, 2), (2, 3)):
        forms.add(base64.b64encode(b"\0" * shift + raw).rstrip(b"=")[skip:-4])
    return forms


def find_secrets(root):
    """[(relative path, secret name)] for every regular file under root holding a secret value."""
    hits = []
    for path in sorted(Path(root).rglob("*")):
        if path.is_symlink() or not path.is_file():  # the ssh_key_data fifo is not read
            continue
        data = path.read_bytes()
        for name, value in SECRETS.items():
            if any(f in data for f in _forms(value)):
                hits.append((str(path.relative_to(root)), name))
    return hits


def check_command_file(job):
    """runner's `command` artifact: secrets only as the env values the credentials injected."""
    command_file = job.artifacts / "command"
    assert stat.S_IMODE(command_file.stat().st_mode) == 0o600
    data = json.loads(command_file.read_text())
    assert data["cwd"] == "/runner/project", "runner did not run from project/: %s" % data["cwd"]
    argv = data["command"]
    assert argv[:2] == ["docker", "run"] and job.image in argv, "not run in the execution environment: %s" % argv
    assert not any(v in json.dumps(data["command"]) for v in SECRETS.values()), "a secret on the command line"
    leaked = {k: v for k, v in data["env"].items() if v in SECRETS.values()}
    assert leaked == job.injected, "secrets in runner's env record other than the injected variables: %s" % sorted(
        set(leaked) ^ set(job.injected)
    )
    for key, value in data["env"].items():
        if key not in job.injected:
            assert not any(s in value for s in SECRETS.values()), "secret inside env var %s" % key
    return data


def check_env_list(job):
    """runner's container mode hands the job's environment to `docker run --env-file env.list` (KEY=VALUE lines,
    so no value is on docker's command line): secrets only as the values of the injected variables."""
    env = dict(line.split("=", 1) for line in (job.artifacts / "env.list").read_text().splitlines() if "=" in line)
    leaked = {k: v for k, v in env.items() if v in SECRETS.values()}
    assert leaked == job.injected, "secrets in env.list other than the injected variables: %s" % sorted(
        set(leaked) ^ set(job.injected)
    )
    for key, value in env.items():
        if key not in job.injected:
            assert not any(s in value for s in SECRETS.values()), "secret inside env var %s" % key
    # Private to root, as AWX's private data directory is: the directory above is 0700.
    assert stat.S_IMODE(job.pdd.stat().st_mode) == 0o700


def assert_no_secret_in_artifacts(job):
    hits = [h for h in find_secrets(job.artifacts) if h[0] not in ("command", "env.list")]
    assert not hits, "secret values in the runner's artifacts: %s" % hits
    check_command_file(job)
    check_env_list(job)


# --------------------------------------------------------------------------------------------
# The test
# --------------------------------------------------------------------------------------------


def _head_cluster(inventory):
    """ray_cluster of the sandbox's head (group ray_head), as the survey's cluster answer."""
    all_ = inventory["all"]
    head_vars = {}
    for name, group in (all_.get("children") or {}).items():
        if name == "ray_head":
            head_vars = next(iter((group.get("hosts") or {}).values())) or {}
    return head_vars.get("ray_cluster") or (all_.get("vars") or {}).get("ray_cluster") or "default"


@pytest.fixture(scope="module")
def ee_image():
    """The execution environment, built by scripts/ee.sh (cached; scripts/test.sh builds it ahead in its side lane)."""
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "ee.sh")], capture_output=True, text=True, timeout=1200, check=False
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    tag = re.search(r"^\[ee\] (?:built|have) (\S+)", proc.stdout, re.M)
    assert tag, proc.stdout
    return tag.group(1)


def test_site_then_submit_smoke_like_awx(tmp_path_factory, sandbox, assets, clean_env, ee_image):
    base = tmp_path_factory.mktemp("awx")
    base.chmod(0o700)
    # The job gets the Hyperbolic and HF / W&B credentials (the templates attach the Hyperbolic one
    # to the inventory source only: here it proves that even a key the job does not use stays out of
    # the artifacts) and the Machine credential (env/ssh_key). Not the Ray token credential: it would
    # replace the shared sandbox's cluster token.
    all_types = list(CREDENTIAL_INPUTS)

    # --- site.yml, as the "site" job template launches it --------------------------------------
    site = AwxJob(base, assets, sandbox, "site", job_id=4101, answers={}, credentials=all_types, image=ee_image)
    assert site.jt["playbook"] == "site.yml" and not site.jt["survey_enabled"]
    result = site.run()
    assert result.status == "successful" and result.rc == 0, site.explain()
    assert set(result.stats["ok"]) >= {h for h in _inventory_hosts(sandbox)}, result.stats
    assert not result.stats.get("failures") and not result.stats.get("dark"), result.stats
    assert any((site.artifacts / "fact_cache").iterdir()), "use_fact_cache: no facts were cached"
    assert_no_secret_in_artifacts(site)

    # --- submit.yml -e exp=smoke, with the survey's answers --------------------------------------
    run = "awx-" + _TAG[:8]
    answers = {"exp": "smoke", "dry_run": "false", "run": run}
    cluster = _head_cluster(sandbox)
    if cluster != "default":  # the smoke experiment names cluster 'default'
        answers["cluster"] = cluster
    # Launch-time extra variables (the template prompts for them): checkpoints apart from other users'
    # smoke runs on the shared sandbox volume.
    submit = AwxJob(
        base,
        assets,
        sandbox,
        "submit",
        job_id=4102,
        answers=answers,
        credentials=all_types,
        image=ee_image,
        verbosity=1,
        launch_vars={"verl_job_checkpoint_root": "/data/checkpoints-awx-test"},
    )
    assert "!unsafe 'smoke'" in (submit.pdd / "env" / "extravars").read_text()
    result = submit.run()
    assert result.status == "successful" and result.rc == 0, submit.explain()
    out = submit.stdout()
    # The repository's ansible.cfg applied (runner ran ansible-playbook from project/).
    assert "Using /runner/project/ansible.cfg as config file" in out, out[:3000]
    sid = "rlinfra-smoke-%s-%s" % (cluster, run)
    assert "Submitted %s" % sid in out, out[-4000:]
    assert "SUCCEEDED" in out, out[-4000:]
    assert "/data/checkpoints-awx-test/rlinfra_smoke/default/smoke" in out, out[
        -4000:
    ]  # the launch-time variable applied
    assert_no_secret_in_artifacts(submit)

    # The HF token reached the job (the smoke program prints only its sha256) ...
    log = submit.pdd / "project" / "artifacts" / "smoke" / ("%s.log" % sid)
    assert log.is_file(), "no driver log at %s" % log
    digest = hashlib.sha256(SECRETS["HF_TOKEN"].encode()).hexdigest()
    assert "HF_TOKEN sha256:%s" % digest in log.read_text(), log.read_text()[-3000:]
    # ... and no secret is anywhere in the job's outputs outside env/ (what AWX wrote) and runner's
    # env record: not in the project copy (driver log, working_dir zips), not in the artifacts.
    hits = [
        h
        for h in find_secrets(submit.pdd)
        if not h[0].startswith("env/") and h[0] not in ("artifacts/4102/command", "artifacts/4102/env.list")
    ]
    assert not hits, hits


def _inventory_hosts(inventory):
    hosts = set()

    def walk(node):
        node = node or {}
        hosts.update((node.get("hosts") or {}).keys())
        for sub in (node.get("children") or {}).values():
            walk(sub)

    walk(inventory["all"])
    return hosts


def test_secret_search_finds_runner_env_record(tmp_path, clean_env):
    """The search is not vacuous: runner's `command` record of a tiny local job holds the injected value."""
    pdd = tmp_path / "pdd"
    _write(pdd / "project" / "noop.yml", "- name: Nothing\n  hosts: localhost\n  gather_facts: false\n  tasks: []\n")
    _write(pdd / "env" / "envvars", json.dumps({"HF_TOKEN": SECRETS["HF_TOKEN"]}))
    result = ansible_runner.run(
        private_data_dir=str(pdd), ident="1", playbook="noop.yml", quiet=True, suppress_env_files=True
    )
    assert result.status == "successful", result.status
    assert find_secrets(pdd / "artifacts" / "1") == [("command", "HF_TOKEN")]
    assert find_secrets(tmp_path / "nothing-here") == []
    encoded = tmp_path / "b64"
    _write(encoded / "x", base64.b64encode(b"xy" + SECRETS["WANDB_API_KEY"].encode()).decode())
    assert find_secrets(encoded) == [("x", "WANDB_API_KEY")]


# --------------------------------------------------------------------------------------------
# awx/configure.yml against a fake controller (AWX API v2 on 127.0.0.1; no AWX server exists here)
# --------------------------------------------------------------------------------------------


class FakeController:
    """A small in-memory AWX API: what the awx.awx modules of awx/configure.yml call, with the checks
    AWX makes that matter here (playbook and inventory file in the project, one credential per type on a
    template, credential inputs declared by their type, survey spec shape, injector fields)."""

    TOKEN = "fake-controller-token-" + _TAG
    ASSOCIATIONS = (
        "credentials",
        "success_nodes",
        "failure_nodes",
        "always_nodes",
        "labels",
        "instance_groups",
        "notification_templates_started",
        "notification_templates_success",
        "notification_templates_error",
        "notification_templates_approvals",
        "galaxy_credentials",
        "input_inventories",
    )
    SUBS = {
        "job_templates": (
            "survey_spec",
            "credentials",
            "labels",
            "instance_groups",
            "notification_templates_started",
            "notification_templates_success",
            "notification_templates_error",
        ),
        "workflow_job_templates": (
            "survey_spec",
            "workflow_nodes",
            "labels",
            "notification_templates_started",
            "notification_templates_success",
            "notification_templates_error",
            "notification_templates_approvals",
        ),
        "workflow_job_template_nodes": (
            "success_nodes",
            "failure_nodes",
            "always_nodes",
            "credentials",
            "labels",
            "instance_groups",
        ),
        "projects": (
            "update",
            "notification_templates_started",
            "notification_templates_success",
            "notification_templates_error",
        ),
        "inventory_sources": (
            "notification_templates_started",
            "notification_templates_success",
            "notification_templates_error",
        ),
        "organizations": (
            "instance_groups",
            "galaxy_credentials",
            "notification_templates_started",
            "notification_templates_success",
            "notification_templates_error",
            "notification_templates_approvals",
        ),
        "inventories": ("instance_groups", "input_inventories"),
    }

    def __init__(self, project_files):
        import threading

        self.lock = threading.Lock()
        self.project_files = sorted(project_files)
        self.store, self.links, self.surveys, self.log = {}, {}, {}, []
        self.next_id = 100
        self._put("organizations", {"name": "Default"}, obj_id=1)
        machine_fields = [
            {"id": "username", "label": "Username", "type": "string"},
            {"id": "password", "label": "Password", "type": "string", "secret": True},
            {
                "id": "ssh_key_data",
                "label": "SSH Private Key",
                "type": "string",
                "secret": True,
                "multiline": True,
                "format": "ssh_private_key",
            },
        ]
        self._put(
            "credential_types",
            {"name": "Machine", "kind": "ssh", "managed": True, "inputs": {"fields": machine_fields}, "injectors": {}},
            obj_id=1,
        )
        self._put(
            "credential_types",
            {"name": "Source Control", "kind": "scm", "managed": True, "inputs": {"fields": []}, "injectors": {}},
            obj_id=2,
        )
        self.server = None

    # -- storage ----------------------------------------------------------------------------
    def _put(self, res, data, obj_id=None):
        if obj_id is None:
            self.next_id += 1
            obj_id = self.next_id
        url = "/api/v2/%s/%d/" % (res, obj_id)
        obj = dict(
            data,
            id=obj_id,
            type=res[:-1],
            url=url,
            summary_fields={},
            related={sub: url + sub + "/" for sub in self.SUBS.get(res, ())},
        )
        self.store.setdefault(res, {})[obj_id] = obj
        return obj

    def _objects(self, res):
        if res == "unified_job_templates":
            return [
                o
                for r in ("job_templates", "workflow_job_templates", "projects", "inventory_sources")
                for o in self.store.get(r, {}).values()
            ]
        return list(self.store.get(res, {}).values())

    def _view(self, obj):
        obj = json.loads(json.dumps(obj))
        if obj["type"] == "credential":
            ctype = self.store["credential_types"][obj["credential_type"]]
            secret = {f["id"] for f in ctype["inputs"]["fields"] if f.get("secret")}
            obj["inputs"] = {k: ("$encrypted$" if k in secret else v) for k, v in obj["inputs"].items()}
        return obj

    def get(self, res, name):
        return next((o for o in self._objects(res) if o.get("name", o.get("identifier")) == name), None)

    # -- validation (AWX's answers to what would be wrong) ----------------------------------
    def _validate(self, res, data, current=None):
        from jinja2 import Environment, meta

        merged = dict(current or {}, **data)
        errors = {}
        if res == "credential_types":
            if merged.get("kind") not in ("cloud", "net"):
                errors["kind"] = ["Must be 'cloud' or 'net', not %r" % merged.get("kind")]
            fields = merged.get("inputs", {}).get("fields", [])
            ids = {f["id"] for f in fields}
            for f in fields:
                if not {"id", "label"} <= set(f) or set(f) - {
                    "id",
                    "label",
                    "type",
                    "help_text",
                    "secret",
                    "multiline",
                    "format",
                    "choices",
                    "ask_at_runtime",
                    "default",
                }:
                    errors["inputs"] = ["invalid field %r" % f]
            for req in merged.get("inputs", {}).get("required", []):
                if req not in ids:
                    errors["inputs"] = ["required %s is not a field" % req]
            for kind, entries in (merged.get("injectors") or {}).items():
                if kind not in ("env", "extra_vars", "file"):
                    errors["injectors"] = ["unknown injector kind %s" % kind]
                    continue
                for var, tmpl in entries.items():
                    refs = meta.find_undeclared_variables(Environment().parse(tmpl))
                    if not refs <= ids | {"tower"}:
                        errors["injectors"] = ["%s uses undefined %s" % (var, sorted(refs - ids))]
        elif res == "credentials":
            ctype = self.store["credential_types"].get(merged.get("credential_type"))
            if ctype is None:
                errors["credential_type"] = ["does not exist"]
            else:
                ids = {f["id"] for f in ctype["inputs"]["fields"]}
                unknown = set(merged.get("inputs") or {}) - ids
                if unknown:
                    errors["inputs"] = ["not fields of %s: %s" % (ctype["name"], sorted(unknown))]
                for req in ctype["inputs"].get("required", []):
                    if not (merged.get("inputs") or {}).get(req):
                        errors["inputs"] = ["%s is required" % req]
        elif res == "job_templates":
            project = self.store.get("projects", {}).get(merged.get("project"))
            if project is None:
                errors["project"] = ["does not exist"]
            elif merged.get("playbook") not in project["playbook_files"]:
                errors["playbook"] = ["Playbook not found for project."]
            if merged.get("inventory") not in self.store.get("inventories", {}) and not merged.get(
                "ask_inventory_on_launch"
            ):
                errors["inventory"] = ["Job Template must provide 'inventory' or allow prompting for it."]
        elif res == "inventory_sources":
            project = self.store.get("projects", {}).get(merged.get("source_project"))
            if merged.get("source") != "scm" or project is None:
                errors["source_project"] = ["scm source needs a project"]
            elif merged.get("source_path") not in project["inventory_files"]:
                errors["source_path"] = ["Invalid inventory file choice."]
            if merged.get("credential") is not None:
                cred = self.store["credentials"][merged["credential"]]
                if self.store["credential_types"][cred["credential_type"]]["kind"] != "cloud":
                    errors["credential"] = ["Cloud-based inventory sources need a cloud credential."]
        elif res == "projects":
            if merged.get("scm_type") != "git" or not merged.get("scm_url"):
                errors["scm_url"] = ["SCM URL required"]
        elif res == "workflow_job_template_nodes":
            if merged.get("unified_job_template") not in {o["id"] for o in self._objects("unified_job_templates")}:
                errors["unified_job_template"] = ["does not exist"]
        if merged.get("organization") is not None and merged["organization"] not in self.store["organizations"]:
            errors["organization"] = ["does not exist"]
        return errors

    def _validate_survey(self, spec):
        if not isinstance(spec, dict) or not {"name", "description", "spec"} <= set(spec) or not spec["spec"]:
            return "survey spec needs name, description and a non-empty spec"
        seen = set()
        for q in spec["spec"]:
            if q.get("type") not in (
                "text",
                "textarea",
                "password",
                "integer",
                "float",
                "multiplechoice",
                "multiselect",
            ):
                return "invalid type %r" % q.get("type")
            if not q.get("question_name") or not q.get("variable") or not isinstance(q.get("required"), bool):
                return "question_name, variable and required are needed: %r" % q
            if q["variable"] in seen:
                return "duplicate variable %s" % q["variable"]
            seen.add(q["variable"])
            if q["type"] == "multiplechoice" and q.get("default") and q["default"] not in q.get("choices", []):
                return "default %r is not a choice" % q["default"]
        return None

    # -- HTTP --------------------------------------------------------------------------------
    def handle(self, method, path, query, body, auth):
        from urllib.parse import parse_qsl

        self.log.append((method, path))
        if auth != "Bearer " + self.TOKEN:
            return 401, {"detail": "Authentication credentials were not provided."}
        parts = [p for p in path.split("/") if p][2:]  # after api/v2
        if not parts:
            return 200, {}
        res = parts[0]
        if len(parts) == 1:
            if method == "GET":
                params = dict(parse_qsl(query))
                ors = {k[4:]: v for k, v in params.items() if k.startswith("or__")}
                rest = {k: v for k, v in params.items() if not k.startswith("or__") and k not in ("page_size", "page")}

                def match(o):
                    if ors and not any(str(o.get(k)) == v for k, v in ors.items()):
                        return False
                    return all(str(o.get(k)) == v for k, v in rest.items())

                results = [self._view(o) for o in self._objects(res) if match(o)]
                return 200, {"count": len(results), "next": None, "previous": None, "results": results}
            if method == "POST":
                errors = self._validate(res, body)
                if errors:
                    return 400, errors
                obj = self._put(res, body)
                if res == "projects":
                    self._project_synced(obj)
                return 201, self._view(obj)
            return 405, {}
        obj_id = int(parts[1])
        obj = self.store.get(res, {}).get(obj_id)
        if obj is None:
            return 404, {"detail": "Not found."}
        if len(parts) == 2:
            if method == "GET":
                return 200, self._view(obj)
            if method == "PATCH":
                body = {k: v for k, v in body.items() if v != "$encrypted$"}
                if res == "credentials" and "inputs" in body:
                    body["inputs"] = {
                        k: (obj["inputs"].get(k) if v == "$encrypted$" else v) for k, v in body["inputs"].items()
                    }
                errors = self._validate(res, body, current=obj)
                if errors:
                    return 400, errors
                obj.update(body)
                if res == "projects":
                    self._project_synced(obj)
                return 200, self._view(obj)
            if method == "DELETE":
                self._delete(res, obj_id)
                return 204, None
            return 405, {}
        sub = parts[2]
        if sub == "survey_spec":
            if method == "GET":
                return 200, self.surveys.get((res, obj_id), {})
            if method == "POST":
                problem = self._validate_survey(body)
                if problem:
                    return 400, {"error": problem}
                self.surveys[(res, obj_id)] = body
                return 200, {}
            if method == "DELETE":
                self.surveys.pop((res, obj_id), None)
                return 200, {}
        if sub == "workflow_nodes" and method == "GET":
            nodes = [
                self._view(o)
                for o in self._objects("workflow_job_template_nodes")
                if o.get("workflow_job_template") == obj_id
            ]
            return 200, {"count": len(nodes), "next": None, "results": nodes}
        if sub in self.ASSOCIATIONS:
            linked = self.links.setdefault((res, obj_id, sub), [])
            target = {
                "success_nodes": "workflow_job_template_nodes",
                "failure_nodes": "workflow_job_template_nodes",
                "always_nodes": "workflow_job_template_nodes",
                "galaxy_credentials": "credentials",
                "input_inventories": "inventories",
            }.get(sub, sub)
            if sub.startswith("notification_templates"):
                target = "notification_templates"
            if method == "GET":
                results = [self._view(self.store[target][i]) for i in linked if i in self.store.get(target, {})]
                return 200, {"count": len(results), "next": None, "results": results}
            if method == "POST":
                other = int(body["id"])
                if body.get("disassociate"):
                    linked.remove(other)
                    return 204, None
                if other not in self.store.get(target, {}):
                    return 400, {"msg": "%s %s does not exist" % (target, other)}
                if sub == "credentials":
                    kinds = [self.store["credentials"][i]["credential_type"] for i in linked]
                    if self.store["credentials"][other]["credential_type"] in kinds:
                        return 400, {"error": "Cannot assign multiple credentials of the same type."}
                linked.append(other)
                return 204, None
        return 404, {"detail": "Not found."}

    def _project_synced(self, project):
        files = self.project_files
        project.setdefault("scm_revision", "")
        project["playbook_files"] = [f for f in files if "/" not in f and f.endswith(".yml")]
        project["inventory_files"] = [f for f in files if f.startswith("inventories/")]
        update = self._put(
            "project_updates",
            {
                "name": project["name"],
                "status": "successful",
                "finished": True,
                "failed": False,
                "project": project["id"],
            },
        )
        project["summary_fields"] = {"current_update": {"id": update["id"], "status": "successful"}}
        project["scm_revision"] = "0" * 40

    def _delete(self, res, obj_id):
        self.store[res].pop(obj_id)
        if res == "inventories":
            for src in [o for o in self._objects("inventory_sources") if o.get("inventory") == obj_id]:
                self.store["inventory_sources"].pop(src["id"])
        if res == "workflow_job_templates":
            for node in [
                o for o in self._objects("workflow_job_template_nodes") if o.get("workflow_job_template") == obj_id
            ]:
                self.store["workflow_job_template_nodes"].pop(node["id"])

    def start(self):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, fmt, *args):  # quiet
                pass

            def _serve(self):
                path, _, query = self.path.partition("?")
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else {}
                with fake.lock:
                    status, payload = fake.handle(self.command, path, query, body, self.headers.get("Authorization"))
                data = b"" if payload is None else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("X-API-Product-Name", "AWX")
                self.send_header("X-API-Product-Version", "24.6.1")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_DELETE = _serve  # noqa: N815

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return "http://127.0.0.1:%d" % self.server.server_address[1]

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def _project_files():
    out = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [f for f in out if (ROOT / f).is_file()]


def _configure(url, *extra, secrets_env=None):
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ANSIBLE_", "CONTROLLER_", "HYPERBOLIC_"))
        and k.lower() not in ("http_proxy", "https_proxy")
    }
    env.update(
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_NOCOLOR="1",
        NO_PROXY="127.0.0.1",
        CONTROLLER_HOST=url,
        CONTROLLER_OAUTH_TOKEN=FakeController.TOKEN,
        CONTROLLER_VERIFY_SSL="false",
        PATH="%s:%s" % (VENV_BIN, os.environ.get("PATH", "/usr/bin:/bin")),
    )
    env.update(secrets_env or {})
    proc = subprocess.run(
        [
            str(VENV_BIN / "ansible-playbook"),
            "-i",
            "localhost,",
            "awx/configure.yml",
            "-e",
            "rlinfra_awx_scm_url=https://git.example.invalid/rlinfra/verl.git",
            "-e",
            "rlinfra_awx_ee_image=registry.example.invalid/rlinfra/verl-ee:test",
            *extra,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    return proc


def _recap(stdout):
    import re

    m = re.search(r"localhost\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", stdout)
    assert m, stdout[-3000:]
    return {"ok": int(m.group(1)), "changed": int(m.group(2)), "failed": int(m.group(4))}


def test_configure_loads_into_a_controller_idempotently_and_removes(tmp_path, clean_env):
    files = _project_files()
    fake = FakeController(files)
    url = fake.start()
    ssh_key = "-----BEGIN OPENSSH PRIVATE KEY-----\nFAKEawxKEY" + _TAG + "\n-----END OPENSSH PRIVATE KEY-----\n"
    vault = tmp_path / "vault.yml"
    _write(
        vault,
        yaml.safe_dump({"rlinfra_awx_ssh_private_key": ssh_key, "rlinfra_awx_ray_auth_token": "ray_FAKE_" + _TAG}),
    )
    secrets_env = {
        "HYPERBOLIC_API_KEY": SECRETS["HYPERBOLIC_API_KEY"],
        "HF_TOKEN": SECRETS["HF_TOKEN"],
        "WANDB_API_KEY": SECRETS["WANDB_API_KEY"],
    }
    all_secrets = list(SECRETS.values()) + ["ray_FAKE_" + _TAG, "FAKEawxKEY" + _TAG]
    try:
        first = _configure(url, "-e", "@%s" % vault, secrets_env=secrets_env)
        assert first.returncode == 0, first.stdout[-6000:] + first.stderr[-3000:]
        assert not any(s in first.stdout + first.stderr for s in all_secrets), "a secret in the playbook's output"

        # Credential types: injectors verbatim; credentials: the secrets stored, in the right types.
        hyper_type = fake.get("credential_types", "Hyperbolic API")
        assert hyper_type["injectors"]["env"]["HYPERBOLIC_API_KEY"] == "{{ hyperbolic_api_key }}"
        ml = fake.get("credential_types", "Hugging Face / W&B tokens")
        assert ml["injectors"]["env"] == {"HF_TOKEN": "{{ hf_token }}", "WANDB_API_KEY": "{{ wandb_api_key }}"}
        assert fake.get("credentials", "rlinfra-verl HF / W&B")["inputs"] == {
            "hf_token": SECRETS["HF_TOKEN"],
            "wandb_api_key": SECRETS["WANDB_API_KEY"],
        }
        assert fake.get("credentials", "rlinfra-verl SSH")["inputs"]["ssh_key_data"].strip() == ssh_key.strip()
        assert fake.get("credentials", "rlinfra-verl SSH")["credential_type"] == 1  # Machine

        # Inventory sourced from the project's hyperbolic inventory file, with the Hyperbolic credential.
        inventory = fake.get("inventories", "rlinfra-verl Hyperbolic")
        source = fake.get("inventory_sources", "rlinfra-verl Hyperbolic (inventories/hyperbolic.yml)")
        assert source["inventory"] == inventory["id"] and source["source_path"] == "inventories/hyperbolic.yml"
        assert source["credential"] == fake.get("credentials", "rlinfra-verl Hyperbolic")["id"]
        assert source["update_on_launch"] is True
        ee = fake.get("execution_environments", "rlinfra-verl EE")
        assert ee["image"] == "registry.example.invalid/rlinfra/verl-ee:test"

        # Job templates: playbooks, surveys, credentials (merge only once merge.yml exists).
        has_merge = (ROOT / "merge.yml").is_file()
        jts = {o["name"]: o for o in fake._objects("job_templates")}
        expected = {
            "rlinfra-verl site",
            "rlinfra-verl submit",
            "rlinfra-verl stop",
            "rlinfra-verl status",
            "rlinfra-verl logs",
            "rlinfra-verl teardown",
            "rlinfra-verl provision",
            "rlinfra-verl fitness",
        }
        assert set(jts) == expected | ({"rlinfra-verl merge"} if has_merge else set())
        fitness = jts["rlinfra-verl fitness"]
        assert fitness["playbook"] == "fitness.yml" and fitness["ask_variables_on_launch"] is True
        assert [q["variable"] for q in fake.surveys[("job_templates", fitness["id"])]["spec"]] == ["cluster"]
        submit = jts["rlinfra-verl submit"]
        assert (
            submit["playbook"] == "submit.yml"
            and submit["survey_enabled"]
            and submit["execution_environment"] == ee["id"]
        )
        survey = fake.surveys[("job_templates", submit["id"])]
        assert [q["variable"] for q in survey["spec"]] == ["exp", "dry_run", "run", "cluster"]
        assert "smoke" in survey["spec"][0]["choices"]
        linked = {
            fake.store["credentials"][i]["name"] for i in fake.links[("job_templates", submit["id"], "credentials")]
        }
        assert linked == {"rlinfra-verl HF / W&B", "rlinfra-verl Ray token", "rlinfra-verl SSH"}
        site = jts["rlinfra-verl site"]
        assert ("job_templates", site["id"]) not in fake.surveys and site["use_fact_cache"] is True
        assert "merge.yml" in first.stdout if not has_merge else True

        # Workflow: site -> submit (-> merge).
        wf = fake.get("workflow_job_templates", "rlinfra-verl train (site, submit, merge)")
        nodes = {
            n["identifier"]: n
            for n in fake._objects("workflow_job_template_nodes")
            if n["workflow_job_template"] == wf["id"]
        }
        assert set(nodes) == {"site", "submit"} | ({"merge"} if has_merge else set())
        assert fake.links[("workflow_job_template_nodes", nodes["site"]["id"], "success_nodes")] == [
            nodes["submit"]["id"]
        ]
        assert nodes["site"]["unified_job_template"] == site["id"]
        assert [q["variable"] for q in fake.surveys[("workflow_job_templates", wf["id"])]["spec"]] == [
            "exp",
            "run",
            "cluster",
        ]

        # A second run changes nothing.
        second = _configure(url, "-e", "@%s" % vault, secrets_env=secrets_env)
        assert second.returncode == 0, second.stdout[-6000:]
        assert _recap(second.stdout)["changed"] == 0, second.stdout[-6000:]

        # absent removes everything it created.
        gone = _configure(url, "-e", "rlinfra_awx_state=absent")
        assert gone.returncode == 0, gone.stdout[-6000:]
        left = {
            res: [o.get("name") for o in objs.values()]
            for res, objs in fake.store.items()
            if res not in ("project_updates",) and objs
        }
        assert left == {"organizations": ["Default"], "credential_types": ["Machine", "Source Control"]}, left
    finally:
        fake.stop()
