"""module_utils/verl/code_checkout.py: an experiment's code resolved to a commit and checked out once, with submodules.

Real git on real repositories in tmp_path: a bare repository with a submodule (a relative URL, as NeMo RL's are),
served over git's smart HTTP with a token (tests/fake_git) or read by path; the checkout is what git made, the
record names the commits, a second run fetches nothing, and every failure is one line without the token.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.rlinfra.verl.plugins.module_utils.verl import code_checkout as CC
from tests.fake_git.server import GitServer

TOKEN = "ghp_" + "t" * 36
GIT_URL = "a git URL (https://host/org/repo.git, git@host:org/repo.git, ssh://, git:// or file://)"
NO_CREDENTIALS = GIT_URL + " without credentials: name the secret that holds a token in code.token_secret"
NO_QUERY = GIT_URL + " without a query string or fragment (a token does not belong in a URL)"
GIT_ID = ["-c", "user.email=t@example.com", "-c", "user.name=t", "-c", "protocol.file.allow=always"]


def git(*args, cwd=None):
    out = subprocess.run(["git", *GIT_ID, *args], cwd=cwd, capture_output=True, text=True, check=True).stdout
    return out.strip()


@pytest.fixture
def repos(tmp_path):
    """served/trainer.git (main, tag v1) with vendor/lib -> ../lib.git; returns (served dir, commits)."""
    served, work = tmp_path / "served", tmp_path / "work"
    served.mkdir()
    work.mkdir()
    for name in ("lib", "trainer"):
        git("init", "-q", "--bare", "-b", "main", str(served / (name + ".git")))
    git("clone", "-q", str(served / "lib.git"), str(work / "lib"))
    (work / "lib" / "lib.txt").write_text("lib v1\n")
    git("add", ".", cwd=work / "lib")
    git("commit", "-qm", "lib", cwd=work / "lib")
    git("push", "-q", "origin", "HEAD:main", cwd=work / "lib")
    git("clone", "-q", str(served / "trainer.git"), str(work / "trainer"))
    t = work / "trainer"
    (t / "src" / "app").mkdir(parents=True)
    (t / "src" / "app" / "train.py").write_text("print('v1')\n")
    git("submodule", "add", "-q", "../lib.git", "vendor/lib", cwd=t)
    git("add", ".", cwd=t)
    git("commit", "-qm", "one", cwd=t)
    git("tag", "-a", "v1", "-m", "v1", cwd=t)
    first = git("rev-parse", "HEAD", cwd=t)
    (t / "src" / "app" / "train.py").write_text("print('v2')\n")
    git("commit", "-qam", "two", cwd=t)
    git("push", "-q", "--tags", "origin", "HEAD:main", cwd=t)
    return served, {
        "first": first,
        "main": git("rev-parse", "HEAD", cwd=t),
        "lib": git("rev-parse", "HEAD", cwd=work / "lib"),
    }


def code(repo, **kw):
    errors = []
    out = CC.normalize(dict({"repo": repo}, **kw), errors.append)
    assert errors == []
    return out


def test_normalize_defaults_and_one_line_per_problem():
    assert code("https://github.com/NVIDIA-NeMo/RL.git") == {
        "repo": "https://github.com/NVIDIA-NeMo/RL.git",
        "ref": "HEAD",
        "submodules": True,
        "path": ".",
        "name": "RL",
        "token_secret": None,
        "ssh_key_secret": None,
    }
    assert code("git@github.com:org/trainer.git", path="src/app/")["path"] == "src/app"
    for section, start in [
        (
            {"repo": "not a url"},
            "code.repo must be " + GIT_URL + ", got a value with spaces or line breaks (not shown)",
        ),
        ({"repo": "https://u:p@h/r.git"}, "code.repo must be " + GIT_URL + " without credentials"),
        ({"repo": "https://h/r.git", "ref": "abc1234"}, "code.ref: 'abc1234' looks like an abbreviated commit"),
        ({"repo": "https://h/r.git", "ref": "a..b"}, "code.ref: 'a..b' is not a branch"),
        ({"repo": "https://h/r.git", "path": "../x"}, "code.path: '../x' must be a directory inside"),
        ({"repo": "https://h/r.git", "submodules": "yes"}, "code.submodules: expected true or false"),
        ({"repo": "https://h/r.git", "token_secret": "my-token"}, "code.token_secret: 'my-token' is not"),
        ({"repo": "https://h/r.git", "branch": "x"}, "code: unknown key 'branch'"),
    ]:
        errors = []
        assert CC.normalize(section, errors.append) is None
        assert len(errors) == 1 and errors[0].startswith(start), errors


def test_resolve_branch_tag_head_and_commit_over_http_with_a_token(repos):
    served, commits = repos
    with GitServer(served, token=TOKEN) as srv:
        url = srv.url + "/trainer.git"
        with CC.Git(url, token=TOKEN) as g:
            assert CC.resolve(code(url, ref="main"), g) == commits["main"]
            assert CC.resolve(code(url), g) == commits["main"]  # HEAD: the default branch
            assert CC.resolve(code(url, ref="v1"), g) == commits["first"]  # the tag's commit, not the tag object
            assert CC.resolve(code(url, ref=commits["first"]), g) == commits["first"]
            with pytest.raises(CC.CodeError, match=r"no branch or tag named 'nope'"):
                CC.resolve(code(url, ref="nope"), g)
        assert srv.requests and all(r["token_ok"] for r in srv.requests)
        for token, hint in (
            ("", "it needs credentials: name the secret holding a token in code.token_secret"),
            ("ghp_wrong", "the token was refused"),
        ):
            with CC.Git(url, token=token) as g, pytest.raises(CC.CodeError) as e:
                CC.resolve(code(url, ref="main"), g)
            assert str(e.value).startswith("code %s: git ls-remote failed: " % url) and hint in str(e.value)
            assert "\n" not in str(e.value) and TOKEN not in str(e.value) and "ghp_wrong" not in str(e.value)


def test_checkout_with_submodule_once_then_nothing_fetched(repos, tmp_path):
    served, commits = repos
    root = tmp_path / "code"
    with GitServer(served, token=TOKEN) as srv:
        c = code(srv.url + "/trainer.git", ref="main", path="src/app")
        with CC.Git(c["repo"], token=TOKEN) as g:
            changed, record = CC.checkout(c, commits["main"], str(root), g)
            assert changed and record["commit"] == commits["main"]
            assert record["submodules"] == [{"path": "vendor/lib", "commit": commits["lib"]}]
            top = root / ("trainer@" + commits["main"])
            assert (top / "src" / "app" / "train.py").read_text() == "print('v2')\n"
            assert (top / "vendor" / "lib" / "lib.txt").read_text() == "lib v1\n"
            assert git("rev-parse", "HEAD", cwd=top) == commits["main"]
            assert CC.workdir(str(root), c, commits["main"]) == str(top / "src" / "app")
            assert sorted(os.listdir(root)) == [".trainer.lock", "trainer@" + commits["main"]]  # no temporary left
            for path in top.rglob("*"):
                if path.is_file():
                    assert TOKEN.encode() not in path.read_bytes(), path
            fetched = len(srv.requests)
            assert CC.checkout(c, commits["main"], str(root), g) == (False, record)
            assert len(srv.requests) == fetched
            line = CC.report(c, commits["main"], False, record)
            assert line == "code %s@%s (ref main), 1 submodule: already checked out, nothing fetched" % (
                c["repo"],
                commits["main"][:12],
            )
            # Another commit: its own directory; the first stays for the runs that use it.
            changed, dummy = CC.checkout(c, commits["first"], str(root), g)
            assert (
                changed
                and (root / ("trainer@" + commits["first"]) / "src" / "app" / "train.py").read_text() == "print('v1')\n"
            )
            assert (top / "src" / "app" / "train.py").is_file()


def test_a_killed_run_leaves_nothing_in_the_way_and_foreign_directories_are_not_touched(repos, tmp_path):
    served, commits = repos
    root = tmp_path / "code"
    c = code("file://%s/trainer.git" % served, ref="main", submodules=False)
    half = root / ("trainer@%s.tmp-99999" % commits["main"])
    half.mkdir(parents=True)  # what a run killed mid-clone leaves
    (half / "partial").write_text("x")
    with CC.Git(c["repo"]) as g:
        changed, record = CC.checkout(c, commits["main"], str(root), g)
        assert (
            changed
            and record["submodules"] == []
            and not (root / ("trainer@" + commits["main"]) / "vendor" / "lib" / "lib.txt").exists()
        )
        mine = root / ("mine@" + commits["main"])
        mine.mkdir()
        (mine / "notes").write_text("keep")
        with pytest.raises(CC.CodeError, match=r"exists but is not a complete checkout made by rlinfra .*move it away"):
            CC.checkout(dict(c, name="mine"), commits["main"], str(root), g)
        assert (mine / "notes").read_text() == "keep"
        with pytest.raises(CC.CodeError, match=r"commit 0{40} is not in the repository"):
            CC.checkout(c, "0" * 40, str(root), g)
        with pytest.raises(CC.CodeError, match=r"code.path: nope is not a directory of"):
            CC.checkout(dict(c, path="nope"), commits["first"], str(root), g)
        assert not [p for p in os.listdir(root) if ".tmp-" in p and p != half.name]


def test_ssh_key_lives_in_a_private_file_only_while_git_runs():
    seen = {}

    def run(argv, env, cwd, secrets):
        key = env["GIT_SSH_COMMAND"].split()[2]
        seen.update(
            key=key,
            mode=os.stat(key).st_mode & 0o777,
            dir_mode=os.stat(os.path.dirname(key)).st_mode & 0o777,
            text=open(key).read(),
            argv=argv,
        )
        return 0, "%s\tHEAD\n" % ("a" * 40), ""

    with CC.Git("git@example.com:org/r.git", ssh_key="-----KEY-----\nsecret\n", run=run) as g:
        assert CC.resolve(code("git@example.com:org/r.git"), g) == "a" * 40
    assert seen["mode"] == 0o600 and seen["dir_mode"] == 0o700 and "secret" in seen["text"]
    assert not os.path.exists(seen["key"]) and "secret" not in " ".join(seen["argv"])
    with pytest.raises(CC.CodeError, match=r"a token is sent over https only"):
        with CC.Git("git@example.com:org/r.git", token="t"):
            pass


def test_missing_git_is_one_line(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with CC.Git("https://h/r.git") as g, pytest.raises(CC.CodeError, match=r"^git is not installed here"):
        CC.resolve(code("https://h/r.git", ref="main"), g)


# A token never travels in the repository's address: the experiment's code.repo, the module's and the action's repo
# share one rule (vocabulary.GitUrl), whose line shows only the scheme and the host ------------------------------

TOKEN_IN_URL = [
    (
        "userinfo_token",
        "https://%s@github.com/org/x.git" % TOKEN,
        NO_CREDENTIALS + ", got https://********@github.com/...",
    ),
    (
        "password",
        "https://oauth2:%s@github.com/org/x.git" % TOKEN,
        NO_CREDENTIALS + ", got https://********@github.com/...",
    ),
    (
        "ssh_password",
        "ssh://git:%s@github.com/org/x.git" % TOKEN,
        NO_CREDENTIALS + ", got ssh://********@github.com/...",
    ),
    ("query_token", "https://github.com/org/x.git?access_token=%s" % TOKEN, NO_QUERY + ", got https://github.com/..."),
]


@pytest.mark.parametrize("label,repo,must", TOKEN_IN_URL, ids=[r[0] for r in TOKEN_IN_URL])
def test_experiment_code_repo_with_a_token_is_refused_without_showing_it(label, repo, must):
    errors = []
    assert CC.normalize({"repo": repo}, errors.append) is None
    assert errors == ["code.repo must be " + must]
    assert TOKEN not in errors[0]


def _no_git(monkeypatch):
    started = []
    monkeypatch.setattr(CC, "_run", lambda argv, *a: started.append(argv) or (1, "", "git must not run"))
    return started


MODULE_ROWS = [(label, {"repo": repo}, "repo must be " + must) for label, repo, must in TOKEN_IN_URL] + [
    ("relative_root", {"root": "data/code"}, "root must be an absolute path (starting with /), got 'data/code'"),
    ("root_dotdot", {"root": "/data/../etc"}, "root must be an absolute path without '..', got '/data/../etc'"),
    (
        "token_newline",
        {"token": TOKEN + "\nHost: evil.example"},
        "token must be the secret alone, without spaces, line breaks or other characters a token cannot have (the value "
        "is not shown)",
    ),
    (
        "ssh_key_nul",
        {"ssh_key": "-----BEGIN KEY-----\n%s\x00\n" % TOKEN},
        "ssh_key must be the key's text without control characters (the value is not shown)",
    ),
    (
        "lock_timeout_negative",
        {"lock_timeout": -1},
        "lock_timeout must be a whole number of seconds from 0 to 604800, got -1",
    ),
    (
        "ref_option",
        {"ref": "--upload-pack=touch /tmp/x"},
        "ref must be a branch, a tag or a full 40-character commit, got '--upload-pack=touch /tmp/x'",
    ),
    (
        "path_outside",
        {"path": "../x"},
        "path must be a relative path inside its base (not starting with /, no '..'), got '../x'",
    ),
]


@pytest.mark.parametrize("label,args,expected", MODULE_ROWS, ids=[r[0] for r in MODULE_ROWS])
def test_module_refuses_bad_options_before_git_runs(label, args, expected, tmp_path, monkeypatch, module_runner):
    from ansible_collections.rlinfra.verl.plugins.modules import code_checkout as module

    started = _no_git(monkeypatch)
    params = dict({"repo": "https://github.com/org/x.git", "ref": "main", "root": str(tmp_path / "code")}, **args)
    res = module_runner(module.main, params)
    assert res["failed"] is True and res["msg"] == expected and not res.get("changed")
    assert TOKEN not in json.dumps(res) and started == [] and not (tmp_path / "code").exists()
    # The action checks the same declaration on the controller before git ls-remote.
    assert CC.ARGS.errors(dict((k, v["default"]) for k, v in CC.ARGUMENT_SPEC.items() if "default" in v) | params) == [
        expected
    ]


ACTION_TASK = """
    - rlinfra.verl.code_checkout:
        repo: "{{ rows[%d].repo }}"
        root: "{{ rows[%d].root }}"
        ref: main
      register: out%d
      ignore_errors: true
"""
ACTION_PLAY = """
- hosts: localhost
  gather_facts: false
  tasks:
%s
    - ansible.builtin.copy:
        dest: "{{ dest }}"
        content: "{{ [out0.msg, out1.msg] | to_json }}"
        mode: "0600"
""" % "".join(ACTION_TASK % (i, i, i) for i in range(2))


def test_action_refuses_on_the_controller_before_git_ls_remote(tmp_path):
    """The real action in ansible-playbook: the line, no git run on the controller, no token in the output."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    (tmp_path / "p.yml").write_text(ACTION_PLAY)
    rows = [
        {"repo": "https://%s@github.com/org/x.git" % TOKEN, "root": str(tmp_path / "code")},
        {"repo": "https://github.com/org/x.git", "root": "data/code"},
    ]
    env = dict((k, v) for k, v in os.environ.items() if not k.startswith("ANSIBLE_"))
    spy = tmp_path / "bin"
    spy.mkdir()
    (spy / "git").write_text('#!/bin/sh\necho "$@" >> %s\nexit 1\n' % (tmp_path / "git-ran"))
    (spy / "git").chmod(0o755)
    env.update(ANSIBLE_NOCOLOR="1", PATH="%s:%s" % (spy, env.get("PATH", "/usr/bin:/bin")))
    proc = subprocess.run(
        [
            os.path.join(os.path.dirname(sys.executable), "ansible-playbook"),
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            "ansible_python_interpreter=" + sys.executable,
            "-e",
            json.dumps({"rows": rows, "dest": str(tmp_path / "out.json")}),
            str(tmp_path / "p.yml"),
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert json.loads((tmp_path / "out.json").read_text()) == [
        "repo must be " + NO_CREDENTIALS + ", got https://********@github.com/...",
        "root must be an absolute path (starting with /), got 'data/code'",
    ]
    assert TOKEN not in proc.stdout + proc.stderr and not (tmp_path / "code").exists()
    assert not (tmp_path / "git-ran").exists()
