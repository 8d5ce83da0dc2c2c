"""The collection as a user installs and runs it: README's "Real machines: your own project", on the sandbox.

The collection's tarball is built and installed with ``--no-deps`` into an empty ``collections/`` of a fresh
project whose venv holds ansible-core only; the dependencies galaxy.yml declares - and only those - are added
from the ``ansible`` package's bundled copies (Galaxy is not reachable here). The project has README's
``ansible.cfg`` word for word, its own static inventory of the sandbox's nodes, and an experiment of its own
made as README says (a copy of the bundled example under another name). Then, from the project:
``rlinfra.verl.site``, ``rlinfra.verl.submit`` (waited: the driver log lands
in the project's artifacts/), ``status``, ``stop``, and a dry run from a subdirectory; all succeed and use the
project's experiment file.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
from pathlib import Path

import yaml

from tests.fake_hyperbolic.testing import venv_bin
from tests.integration.conftest import ROOT, SANDBOX, sandbox_nodes

TAG = secrets.token_hex(4)
CKPT_ROOT = "/data/checkpoints-user-" + TAG
README = ROOT / "README.md"


def readme_section():
    text = README.read_text()
    start = text.index("## Real machines: your own project")
    return text[start : text.index("\n## ", start + 10)]


def fenced(section, lang, after):
    """The body of the first ```lang block that follows the text ``after`` in README's section."""
    at = section.index(after)
    m = re.compile(r"```%s\n(.*?)```" % re.escape(lang), re.S).search(section, at)
    assert m, "README: no ```%s block after %r" % (lang, after)
    return m.group(1)


def norm(text):
    """Whitespace collapsed: README's ansible.cfg prints results as YAML, which folds long lines."""
    return " ".join(str(text).split())


def shown(needle, output):
    return norm(needle) in norm(output)


def sh(args, cwd, env=None, timeout=600):
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    proc.output = proc.stdout + proc.stderr
    return proc


def user_env(project):
    """The user's shell: the project's venv first on PATH, none of this repository's Ansible settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "VIRTUAL_ENV", "PYTHON"))}
    env["PATH"] = "%s:%s" % (project / ".venv" / "bin", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    env.update(ANSIBLE_NOCOLOR="1", HOME=str(project.parent / "home"))
    Path(env["HOME"]).mkdir(exist_ok=True)
    return env


def core_version():
    proc = sh([venv_bin("python"), "-c", "import ansible.release as r; print(r.__version__)"], ROOT)
    return proc.stdout.strip()


def make_venv(project):
    """A venv with ansible-core only (the version CI tests), as README's step 1 (uv instead of pip: the same wheels)."""
    venv = project / ".venv"
    proc = sh(["uv", "venv", "-q", "--python", "3.11", str(venv)], project)
    assert proc.returncode == 0, proc.output
    proc = sh(
        ["uv", "pip", "install", "-q", "--python", str(venv / "bin" / "python"), "ansible-core==" + core_version()],
        project,
        timeout=900,
    )
    assert proc.returncode == 0, proc.output
    listed = sh(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import importlib.metadata as m; print(' '.join(sorted(d.metadata['Name'].lower() for d in m.distributions())))",
        ],
        project,
    ).stdout.split()
    assert "ansible-core" in listed and "ansible" not in listed and "ray" not in listed, listed
    site = sh(
        [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], project
    )
    assert not (Path(site.stdout.strip()) / "ansible_collections").exists(), "the venv has collections of its own"


def install_collection(project, dist):
    """The tarball with --no-deps, then exactly the declared dependencies from the ansible package's copies."""
    proc = sh(
        [venv_bin("ansible-galaxy"), "collection", "build", "--force", "--output-path", str(dist), str(ROOT)], ROOT
    )
    assert proc.returncode == 0, proc.output
    (tarball,) = dist.glob("rlinfra-verl-*.tar.gz")
    env = user_env(project)
    proc = sh(["ansible-galaxy", "collection", "install", "--no-deps", "-p", "collections", str(tarball)], project, env)
    assert proc.returncode == 0, proc.output
    declared = yaml.safe_load((ROOT / "galaxy.yml").read_text())["dependencies"]
    bundled = (
        Path(
            sh(
                [
                    venv_bin("python"),
                    "-c",
                    "import ansible_collections, os; print(os.path.dirname(ansible_collections.__path__[0]))",
                ],
                ROOT,
            ).stdout.strip()
        )
        / "ansible_collections"
    )
    for fqcn in declared:
        ns, name = fqcn.split(".")
        shutil.copytree(bundled / ns / name, project / "collections" / "ansible_collections" / ns / name, symlinks=True)
    proc = sh(["ansible-galaxy", "collection", "list", "-p", "collections", "--format", "json"], project, env)
    assert proc.returncode == 0, proc.output
    # ansible-core's own (ansible.builtin, ansible._protomatter) are part of it, not installed collections.
    listed = {
        n
        for path in json.loads(proc.stdout).values()
        for n in path
        if not n.startswith(("ansible._", "ansible.builtin"))
    }
    assert listed == {"rlinfra.verl", *declared}, listed
    return tarball


def write_inventory(project):
    """The user's own static inventory of the sandbox's nodes (the same host variables the sandbox sets)."""
    nodes = sandbox_nodes()
    hosts = {n["name"]: {"ansible_host": n["ip"]} for n in nodes}
    head = [n["name"] for n in nodes if n["role"] == "head"]
    inventory = {
        "all": {
            "vars": {
                "ansible_user": "root",
                "ansible_ssh_private_key_file": str(SANDBOX / "id_ed25519"),
                "ansible_python_interpreter": "/usr/bin/python3",
                "python_env_offline": True,
                "python_env_wheelhouse": "/data/wheelhouse",
                # The sandbox's nodes get new host keys whenever they are rebuilt.
                "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR",
            },
            "children": {
                "ray_head": {"hosts": {h: hosts[h] for h in head}},
                "ray_workers": {"hosts": {h: v for h, v in hosts.items() if h not in head}},
            },
        }
    }
    (project / "inventory.yml").write_text(yaml.safe_dump(inventory, sort_keys=False))


def test_readme_user_flow_from_the_installed_tarball(sandbox, tmp_path):
    section = readme_section()
    project = tmp_path / "rl-project"
    project.mkdir()
    make_venv(project)
    install_collection(project, tmp_path / "dist")
    (project / "ansible.cfg").write_text(fenced(section, "ini", "`ansible.cfg`:"))
    write_inventory(project)
    env = user_env(project)
    copy = sh(["bash", "-euc", fenced(section, "bash", "Experiments: start from a bundled example")], project, env)
    assert copy.returncode == 0, copy.output
    (project / "experiments" / "first.yml").write_text(
        (project / "experiments" / "first.yml").read_text().replace("description: ", "description: the user's own - ")
    )

    commands = [
        c.split("#")[0].split() for c in fenced(section, "bash", "**3. The commands**").splitlines() if c.strip()
    ]
    assert [c[1] for c in commands] == [
        "rlinfra.verl.site",
        "rlinfra.verl.submit",
        "rlinfra.verl.submit",
        "rlinfra.verl.status",
        "rlinfra.verl.stop",
    ], commands
    # Apart from the other tests on the shared sandbox: a run of its own, checkpoints of its own.
    extra = ["-e", "run=" + TAG, "-e", json.dumps({"verl_job_checkpoint_root": CKPT_ROOT})]
    sid = "rlinfra-first-default-" + TAG
    outputs = {}
    for argv in commands:
        is_job = argv[1] != "rlinfra.verl.site"
        proc = sh(argv + (extra if is_job else []), project, env, timeout=1200)
        assert proc.returncode == 0, "%s failed:\n%s" % (" ".join(argv), proc.output[-5000:])
        if not is_job:
            assert shown("%d nodes alive" % len(sandbox_nodes()), proc.output), proc.output[-3000:]
        outputs[" ".join(argv[1:])] = proc.output

    exp_file = str(project / "experiments" / "first.yml")
    dry = outputs["rlinfra.verl.submit -e exp=first -e dry_run=true"]
    assert shown("first (custom) from %s" % exp_file, dry) and shown("artifacts: %s" % (project / "artifacts"), dry)
    submit = outputs["rlinfra.verl.submit -e exp=first"]
    assert shown("experiment: first (custom) on Ray cluster default - %s" % exp_file, submit)
    assert shown("status: SUCCEEDED", submit) and shown("artifacts: %s" % (project / "artifacts" / "first"), submit)
    log = project / "artifacts" / "first" / (sid + ".log")
    assert log.is_file() and oct(log.stat().st_mode & 0o777) == "0o600"
    assert "SMOKE_RESULT" in log.read_text()
    assert (
        sid in outputs["rlinfra.verl.status -e exp=first"]
        and "SUCCEEDED" in outputs["rlinfra.verl.status -e exp=first"]
    )
    assert shown("job %s was not running (SUCCEEDED)" % sid, outputs["rlinfra.verl.stop -e exp=first"])

    # From a subdirectory of the project (Ansible reads ./ansible.cfg only: README says to export ANSIBLE_CONFIG).
    sub = project / "notebooks"
    sub.mkdir()
    proc = sh(
        ["ansible-playbook", "rlinfra.verl.submit", "-e", "exp=first", "-e", "dry_run=true", *extra],
        sub,
        dict(env, ANSIBLE_CONFIG=str(project / "ansible.cfg")),
    )
    assert proc.returncode == 0, proc.output[-4000:]
    assert shown("first (custom) from %s" % exp_file, proc.output)
    assert shown("artifacts: %s" % (project / "artifacts"), proc.output) and not (sub / "artifacts").exists()
    # A plain name never runs the bundled example; the line names the directories searched.
    proc = sh(
        ["ansible-playbook", "rlinfra.verl.submit", "-e", "exp=gsm8k_ppo_qwen05b", "-e", "dry_run=true"], project, env
    )
    assert proc.returncode != 0
    assert shown(
        "experiment 'gsm8k_ppo_qwen05b' not found: no gsm8k_ppo_qwen05b.yml or gsm8k_ppo_qwen05b.yaml; searched %s"
        % (project / "experiments"),
        proc.output,
    )
    assert shown("-e exp=rlinfra.verl:gsm8k_ppo_qwen05b", proc.output)
