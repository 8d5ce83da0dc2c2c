"""An experiment's ``code``: a private repository with a submodule, checked out once on the shared volume.

A git server (git's own smart HTTP backend behind a token check, tests/fake_git) serves two bare repositories
from the controller on the sandbox network's gateway address: ``trainer.git`` and, as its submodule by a relative
URL, ``lib.git``. The experiment names ``code: {repo, ref: main, path, token_secret: GIT_TOKEN}``; the token comes
from the controller's environment. submit.yml runs as users run it, on the real cluster:

1. the controller resolves main to its commit, the head checks it out with the submodule at
   /data/code/trainer@<commit>, and the job (started by Ray) runs in its ``path`` and reads the submodule's file;
   the summary and the job's metadata name the commit; the token is in no file of the checkout, in no output;
2. a second run fetches nothing ("already checked out"; the server saw only the controller's ls-remote, nothing
   from the head);
3. a new commit on main gets its own directory, the first one stays;
4. a refused token stops the run with one line before anything is submitted.
"""

from __future__ import annotations

import json
import secrets
import subprocess

import yaml

from tests.fake_git.server import GitServer
from tests.integration.conftest import SANDBOX, sandbox_nodes, sandbox_playbook

TAG = secrets.token_hex(4)
TOKEN = "ghp_FAKE_code_" + secrets.token_hex(12)
ROOT_DIR = "/data/code"
GIT_ID = ["-c", "user.email=t@example.com", "-c", "user.name=t", "-c", "protocol.file.allow=always"]
TRAIN = "import os\nprint('CWD=' + os.getcwd())\nprint('LIB=' + open('../../vendor/lib/lib.txt').read().strip())\n"


def git(*args, cwd=None):
    return subprocess.run(["git", *GIT_ID, *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def on_node(node, script):
    return subprocess.run(
        ["docker", "exec", node, "sh", "-c", script], capture_output=True, text=True, timeout=120, check=False
    ).stdout


def playbook(name, *extra, token=TOKEN):
    return sandbox_playbook(name, *extra, env={"GIT_TOKEN": token})


def shown(text, output):
    return text in " ".join(output.split())


def gateway():
    """The controller's address on the sandbox's network (its bridge), which the nodes reach."""
    network = json.loads((SANDBOX / "state.json").read_text())["network"]
    out = subprocess.run(["docker", "network", "inspect", network], capture_output=True, text=True, check=True).stdout
    return json.loads(out)[0]["IPAM"]["Config"][0]["Gateway"]


def make_repos(tmp_path):
    served, work = tmp_path / "served", tmp_path / "work"
    served.mkdir()
    for name in ("lib", "trainer"):
        git("init", "-q", "--bare", "-b", "main", str(served / (name + ".git")))
    git("clone", "-q", str(served / "lib.git"), str(work / "lib"))
    (work / "lib" / "lib.txt").write_text("lib-%s\n" % TAG)
    git("add", ".", cwd=work / "lib")
    git("commit", "-qm", "lib", cwd=work / "lib")
    git("push", "-q", "origin", "HEAD:main", cwd=work / "lib")
    t = work / "trainer"
    git("clone", "-q", str(served / "trainer.git"), str(t))
    (t / "src" / "app").mkdir(parents=True)
    (t / "src" / "app" / "train.py").write_text(TRAIN)
    git("submodule", "add", "-q", "../lib.git", "vendor/lib", cwd=t)
    git("add", ".", cwd=t)
    git("commit", "-qm", "one", cwd=t)
    git("push", "-q", "origin", "HEAD:main", cwd=t)
    return served, t


def test_code_checked_out_once_with_its_submodule(sandbox, tmp_path):
    nodes = sandbox_nodes()
    head = next(n["name"] for n in nodes if n["role"] == "head")
    if on_node(head, "systemctl is-active ray-head").strip() != "active":
        site = playbook("site.yml")
        assert site.returncode == 0, site.output[-4000:]
    served, work = make_repos(tmp_path)
    first = git("rev-parse", "HEAD", cwd=work)

    exp_dir = tmp_path / "experiments"
    exp_dir.mkdir()
    with GitServer(served, token=TOKEN, host=gateway()) as srv:
        repo = srv.url + "/trainer.git"
        (exp_dir / "code_probe.yml").write_text(
            yaml.safe_dump(
                {
                    "framework": "custom",
                    "entrypoint": {"command": "python3 train.py"},
                    "code": {"repo": repo, "ref": "main", "path": "src/app", "token_secret": "GIT_TOKEN"},
                    "wait": {"timeout": 300, "poll_interval": 1},
                }
            )
        )
        common = (
            "exp=code_probe",
            "verl_job_experiments_dir=" + str(exp_dir),
            "verl_job_artifacts_dir=" + str(tmp_path / "a"),
        )
        top = "%s/trainer@%s" % (ROOT_DIR, first)
        try:
            # 1. Resolved on the controller, checked out on the head, run there.
            one = playbook("submit.yml", *common, "run=1-" + TAG)
            assert one.returncode == 0, one.output[-4000:]
            assert shown("code %s@%s (ref main), 1 submodule: checked out" % (repo, first[:12]), one.output), (
                one.output[-3000:]
            )
            assert shown("code: %s@%s (ref main)" % (repo, first), one.output)  # the summary: the full commit
            log = "\n".join(p.read_text() for p in (tmp_path / "a" / "code_probe").glob("*.log"))
            assert "CWD=%s/src/app" % top in log and "LIB=lib-%s" % TAG in log, log[-2000:]
            record = json.loads(on_node(head, "cat %s/.git/rlinfra-code.json" % top))
            assert record["commit"] == first and record["submodules"][0]["path"] == "vendor/lib"
            assert on_node(head, "grep -rl '%s' %s || echo none" % (TOKEN, top)).strip() == "none"
            assert all(r["token_ok"] for r in srv.requests), srv.requests
            head_ip = next(n["ip"] for n in nodes if n["name"] == head)
            fetched = sorted({r["path"].split("/")[1] for r in srv.requests if r["client"] == head_ip})
            assert fetched == ["lib.git", "trainer.git"], (
                srv.requests
            )  # the head fetched both; the controller only asked

            # 2. Already there: the controller resolves, the head fetches nothing.
            seen = len(srv.requests)
            two = playbook("submit.yml", *common, "run=2-" + TAG)
            assert two.returncode == 0, two.output[-4000:]
            assert shown("1 submodule: already checked out, nothing fetched", two.output)
            later = srv.requests[seen:]
            assert later and not [r for r in later if r["client"] == head_ip], later

            # 3. A new commit on main: its own directory; the first stays.
            (work / "src" / "app" / "train.py").write_text(TRAIN + "print('v2')\n")
            git("commit", "-qam", "two", cwd=work)
            git("push", "-q", "origin", "HEAD:main", cwd=work)
            second = git("rev-parse", "HEAD", cwd=work)
            three = playbook("submit.yml", *common, "run=3-" + TAG)
            assert three.returncode == 0, three.output[-4000:]
            assert shown("code %s@%s (ref main), 1 submodule: checked out" % (repo, second[:12]), three.output)
            assert on_node(head, "ls -d %s/trainer@*" % ROOT_DIR).split() == sorted(
                ["%s/trainer@%s" % (ROOT_DIR, c) for c in (first, second)]
            )

            # 4. A refused token: one line, nothing submitted.
            four = playbook("submit.yml", *common, "run=4-" + TAG, token="ghp_FAKE_wrong")
            assert four.returncode != 0
            assert shown("code %s: git ls-remote failed:" % repo, four.output) and shown(
                "the token was refused", four.output
            )
            assert (
                "Traceback" not in four.output
                and "rlinfra-code_probe-default-4-" + TAG not in four.output.split("TASK [")[-1]
            )
            for proc in (one, two, three, four):
                assert TOKEN not in proc.output
        finally:
            on_node(head, "rm -rf %s/trainer@* %s/.trainer.lock" % (ROOT_DIR, ROOT_DIR))
