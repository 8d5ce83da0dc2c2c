"""module_utils/code_checkout.py: an experiment's code resolved to a commit and checked out once, with submodules.

Real git on real repositories in tmp_path: a bare repository with a submodule (a relative URL, as NeMo RL's are),
served over git's smart HTTP with a token (tests/fake_git) or read by path; the checkout is what git made, the
record names the commits, a second run fetches nothing, and every failure is one line without the token.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from ansible_collections.rlinfra.verl.plugins.module_utils import code_checkout as CC
from tests.fake_git.server import GitServer

TOKEN = "ghp_" + "t" * 36
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
    return served, {"first": first, "main": git("rev-parse", "HEAD", cwd=t), "lib": git("rev-parse", "HEAD", cwd=work / "lib")}


def code(repo, **kw):
    errors = []
    out = CC.normalize(dict({"repo": repo}, **kw), errors.append)
    assert errors == []
    return out


def test_normalize_defaults_and_one_line_per_problem():
    assert code("https://github.com/NVIDIA-NeMo/RL.git") == {
        "repo": "https://github.com/NVIDIA-NeMo/RL.git", "ref": "HEAD", "submodules": True, "path": ".", "name": "RL",
        "token_secret": None, "ssh_key_secret": None}
    assert code("git@github.com:org/trainer.git", path="src/app/")["path"] == "src/app"
    for section, start in [({"repo": "not a url"}, "code.repo: 'not a url' is not a git URL"),
                           ({"repo": "https://u:p@h/r.git"}, "code.repo: the URL holds a password or token"),
                           ({"repo": "https://h/r.git", "ref": "abc1234"}, "code.ref: 'abc1234' looks like an abbreviated commit"),
                           ({"repo": "https://h/r.git", "ref": "a..b"}, "code.ref: 'a..b' is not a branch"),
                           ({"repo": "https://h/r.git", "path": "../x"}, "code.path: '../x' must be a directory inside"),
                           ({"repo": "https://h/r.git", "submodules": "yes"}, "code.submodules: expected true or false"),
                           ({"repo": "https://h/r.git", "token_secret": "my-token"}, "code.token_secret: 'my-token' is not"),
                           ({"repo": "https://h/r.git", "branch": "x"}, "code: unknown key 'branch'")]:
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
        for token, hint in (("", "it needs credentials: name the secret holding a token in code.token_secret"),
                            ("ghp_wrong", "the token was refused")):
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
            assert line == "code %s@%s (ref main), 1 submodule: already checked out, nothing fetched" % (c["repo"], commits["main"][:12])
            # Another commit: its own directory; the first stays for the runs that use it.
            changed, dummy = CC.checkout(c, commits["first"], str(root), g)
            assert changed and (root / ("trainer@" + commits["first"]) / "src" / "app" / "train.py").read_text() == "print('v1')\n"
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
        assert changed and record["submodules"] == [] and not (root / ("trainer@" + commits["main"]) / "vendor" / "lib" / "lib.txt").exists()
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
        seen.update(key=key, mode=os.stat(key).st_mode & 0o777, dir_mode=os.stat(os.path.dirname(key)).st_mode & 0o777,
                    text=open(key).read(), argv=argv)
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
