# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The user's code from git: an experiment's ``code:`` section, its ref resolved, its commit checked out once.

* :func:`normalize` reads the section (the one rule the experiment's validation and the module share).
* :func:`resolve` turns a branch or tag into the commit it names with ``git ls-remote`` (run on the controller
  by the ``code_checkout`` action, so a run names its commit before anything happens on the cluster).
* :func:`checkout` puts that commit, with its submodules, at ``<root>/<name>@<commit>`` on the shared volume,
  once: it is built in a temporary directory beside it and renamed into place when complete, so every node and
  every later run at that commit find either nothing or the whole tree. ``.git/rlinfra-code.json`` records what
  it holds.

Credentials never reach an argument, a file others can read, or a message: an HTTPS token goes to git through
its environment (``GIT_CONFIG_*``: an ``http.<origin>.extraHeader`` for the repository's own host only), an SSH
deploy key through a 0600 file in a 0700 directory that is removed afterwards (``GIT_SSH_COMMAND`` names the file).
"""

from __future__ import annotations

import base64
import errno
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from typing import Any

from ansible_collections.rlinfra.verl.plugins.module_utils.common import files, owned, vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.common.masking import mask_values

SECTION_KEYS = ("repo", "ref", "submodules", "path", "name", "token_secret", "ssh_key_secret")
COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,79}$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
REF_RE = re.compile(r"^[A-Za-z0-9_.][A-Za-z0-9_./-]{0,199}$")
# https://host/path, ssh://[user@]host[:port]/path, git://host/path, file:///path, or scp-like user@host:path; never
# a token or password in it (user-info or query), and an error line shows only its scheme and host. The one rule for
# the module's and the action's repo and the experiment's code.repo.
REPO = vocabulary.GitUrl(required=True)
DEFAULT_ROOT = "/data/code"
RECORD = "rlinfra-code.json"
GIT_TIMEOUT = 1800


class CodeError(Exception):
    """One clear line: what failed, for which repository, and what to do."""


# ----------------------------------------------------------------------------------------------------
# The experiment's section


def normalize(section: Any, err: Callable[[str], Any]) -> dict[str, Any] | None:
    """``code:`` as written -> ``{"repo", "ref", "submodules", "path", "name", "token_secret", "ssh_key_secret"}``
    (None when absent or wrong). Each problem goes to ``err`` as one line."""
    if section is None:
        return None
    if not isinstance(section, dict):
        err("code: expected a mapping with repo (and ref, submodules, path), got %s" % type(section).__name__)
        return None
    bad = [k for k in section if k not in SECTION_KEYS]
    for key in bad:
        err("code: unknown key %r; allowed: %s" % (key, ", ".join(SECTION_KEYS)))
    repo = section.get("repo")
    try:
        REPO.validate(repo)
    except vocabulary.Bad as e:
        err(REPO.line("code.repo", repo, e))
        return None
    ref = section.get("ref", "HEAD")
    if not isinstance(ref, str) or not REF_RE.match(ref) or ".." in ref or ref.endswith("/") or ref.endswith(".lock"):
        err("code.ref: %r is not a branch, a tag or a full 40-character commit" % (ref,))
        return None
    if re.match(r"^[0-9a-f]{7,39}$", ref):
        err("code.ref: %r looks like an abbreviated commit; write all 40 characters (or a branch or tag)" % ref)
        return None
    submodules = section.get("submodules", True)
    if not isinstance(submodules, bool):
        err("code.submodules: expected true or false, got %r" % (submodules,))
        return None
    path = section.get("path", ".")
    if not isinstance(path, str) or path.startswith("/") or ".." in path.split("/") or "\0" in path:
        err("code.path: %r must be a directory inside the repository (relative, no '..')" % (path,))
        return None
    name = section.get("name", default_name(repo))
    if not isinstance(name, str) or not NAME_RE.match(name):
        err("code.name: %r is not a usable directory name (letters, digits, '_', '-', '.'); set code.name" % (name,))
        return None
    out = {"repo": repo, "ref": ref, "submodules": submodules, "path": os.path.normpath(path), "name": name}
    for key in ("token_secret", "ssh_key_secret"):
        value = section.get(key)
        if value is not None and (not isinstance(value, str) or not ENV_NAME_RE.match(value)):
            err("code.%s: %r is not a secret's name (an environment variable name such as GITHUB_TOKEN)" % (key, value))
            return None
        out[key] = value
    if bad:
        return None
    return out


def default_name(repo: Any) -> str:
    base = re.split(r"[/:]", repo.rstrip("/"))[-1] if isinstance(repo, str) else ""
    return base[:-4] if base.endswith(".git") else base


def directory(root: str | None, code: Mapping[str, Any], commit: str) -> str:
    return "%s/%s@%s" % ((root or DEFAULT_ROOT).rstrip("/"), code["name"], commit)


def workdir(root: str | None, code: Mapping[str, Any], commit: str) -> str:
    """Where the entrypoint runs: the checkout, or its ``path``."""
    top = directory(root, code, commit)
    return top if code["path"] in ("", ".") else "%s/%s" % (top, code["path"])


# The module's options: one declaration, which the module enforces on the target and the action on the controller
# before it resolves anything (vocabulary.py's types; the section's own rules follow in module_section).
ARGS = vocabulary.Args(
    repo=REPO,
    ref=vocabulary.GitRef(default="HEAD"),
    commit=vocabulary.Text(
        max_len=40, pattern=COMMIT_RE, what="a full 40-character commit (empty: the one ref names)", default=""
    ),
    submodules=vocabulary.Switch(default=True),
    path=vocabulary.RelPath(default="."),
    name=vocabulary.Name(),
    root=vocabulary.AbsPath("writes", default=DEFAULT_ROOT),
    token=vocabulary.Secret(default=""),
    ssh_key=vocabulary.Secret(multiline=True, default=""),
    lock_timeout=vocabulary.Int(0, 7 * 86400, unit="seconds", default=1800),
)
ARGUMENT_SPEC = ARGS.spec


def module_section(params: Mapping[str, Any]) -> tuple[dict[str, Any] | None, list[str]]:
    """The module's options as an experiment's ``code:`` section, checked by :func:`normalize`; (code, errors)."""
    errors: list[str] = []
    given = dict((k, params[k]) for k in ("repo", "ref", "submodules", "path", "name") if params.get(k) is not None)
    return normalize(given, errors.append), errors


# ----------------------------------------------------------------------------------------------------
# Git, with credentials in its environment only


class Git:
    """git commands with the credentials the repository needs; use as a context manager."""

    def __init__(
        self,
        repo: str,
        token: str | None = "",
        ssh_key: str | None = "",
        run: Callable[..., tuple[int, str, str]] | None = None,
    ):
        self.repo = repo
        self.token = token or ""
        self.ssh_key = ssh_key or ""
        self.run = run or _run
        self.keydir: str | None = None

    def __enter__(self) -> Git:
        env = dict(os.environ, GIT_TERMINAL_PROMPT="0", GIT_ASKPASS="/bin/false", SSH_ASKPASS="/bin/false", LC_ALL="C")
        env.pop("GIT_DIR", None)
        if self.token:
            origin = _origin(self.repo)
            if not origin:
                raise CodeError(
                    "code.token_secret: a token is sent over https only; %s is not an https:// URL (use "
                    "code.ssh_key_secret for ssh)" % self.repo
                )
            basic = base64.b64encode(("x-access-token:" + self.token).encode("utf-8")).decode("ascii")
            env.update(
                GIT_CONFIG_COUNT="1",
                GIT_CONFIG_KEY_0="http.%s/.extraHeader" % origin,
                GIT_CONFIG_VALUE_0="Authorization: Basic " + basic,
            )
        if self.ssh_key:
            self.keydir = tempfile.mkdtemp(prefix="rlinfra-code-")  # 0700
            key = os.path.join(self.keydir, "key")
            fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(self.ssh_key.strip() + "\n")
            env["GIT_SSH_COMMAND"] = (
                "ssh -i %s -o IdentitiesOnly=yes -o BatchMode=yes -o StrictHostKeyChecking=accept-new" % key
            )
        self.env = env
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.keydir:
            shutil.rmtree(self.keydir, ignore_errors=True)

    def __call__(self, *args: str, **kw: Any) -> tuple[int, str, str]:
        return self.run(["git"] + list(args), self.env, kw.get("cwd"), self._secrets())

    def _secrets(self):
        return [s for s in (self.token, self.ssh_key.strip()) if s]


def _origin(url):
    m = re.match(r"^(https?://[^/]+)", url)
    return m.group(1) if m else None


def _run(argv, env, cwd, secrets):
    """(rc, stdout, stderr) with every credential masked out of what git printed."""
    try:
        proc = subprocess.Popen(
            argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        out, errout = proc.communicate(timeout=GIT_TIMEOUT)
    except OSError as e:
        if e.errno == errno.ENOENT:
            raise CodeError("git is not installed here: install it (apt-get install git) and re-run") from e
        raise
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise CodeError(
            "git %s took more than %d s: check the repository's address and the network" % (argv[1], GIT_TIMEOUT)
        ) from None
    out, errout = out.decode("utf-8", "replace"), errout.decode("utf-8", "replace")
    out, errout = mask_values(out, secrets), mask_values(errout, secrets)
    return proc.returncode, out, errout


def _last(text):
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    fatal = [line for line in lines if line.startswith("fatal:") or line.startswith("error:")]
    return (fatal or lines or ["no output"])[-1]


# ----------------------------------------------------------------------------------------------------
# Resolve (controller) and check out (the head)


def resolve(code: Mapping[str, Any], git: Git) -> str:
    """The commit ``code["ref"]`` names in the repository (a tag's commit, not the tag object)."""
    ref = code["ref"]
    if COMMIT_RE.match(ref):
        return ref
    rc, out, errout = git("ls-remote", "--", code["repo"], ref, *([] if ref == "HEAD" else ["refs/tags/%s^{}" % ref]))
    if rc != 0:
        raise CodeError("code %s: git ls-remote failed: %s%s" % (code["repo"], _last(errout), _hint(errout, git)))
    found = {}
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) == 2 and COMMIT_RE.match(parts[0]):
            found[parts[1]] = parts[0]
    for name in ("HEAD",) if ref == "HEAD" else ("refs/tags/%s^{}" % ref, "refs/tags/" + ref, "refs/heads/" + ref, ref):
        if name in found:
            return found[name]
    raise CodeError("code %s: no branch or tag named %r (check code.ref)" % (code["repo"], ref))


def _hint(errout, git):
    low = errout.lower()
    if "authentication" in low or "could not read username" in low or "403" in low or "401" in low:
        return (
            " - the token was refused or may not read it (code.token_secret)"
            if git.token
            else " - it needs credentials: name the secret holding a token in code.token_secret"
        )
    if "permission denied (publickey" in low or "host key verification" in low:
        return (
            " - the deploy key was refused (code.ssh_key_secret)"
            if git.ssh_key
            else " - it needs a deploy key: name the secret holding it in code.ssh_key_secret"
        )
    if "not found" in low or "does not appear to be a git repository" in low:
        return " - check code.repo"
    return ""


def read_record(path: str) -> dict[str, Any] | None:
    try:
        with open(os.path.join(path, ".git", RECORD)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def checkout(
    code: Mapping[str, Any],
    commit: str,
    root: str | None,
    git: Git,
    check_mode: bool = False,
    lock_timeout: float = 1800,
    sleep: Callable[[float], Any] = time.sleep,
) -> tuple[bool, dict[str, Any]]:
    """Put ``commit`` at ``<root>/<name>@<commit>`` unless it is there; returns (changed, record)."""
    final = directory(root, code, commit)
    record = read_record(final)
    if record is not None and record.get("commit") == commit:
        return False, record
    if os.path.exists(final):
        raise CodeError(
            "%s exists but is not a complete checkout made by rlinfra (no .git/%s): move it away and re-run"
            % (final, RECORD)
        )
    if check_mode:
        return True, {"repo": code["repo"], "commit": commit}
    with files.BoundedLock(
        os.path.join(os.path.dirname(final), ".%s.lock" % code["name"]),
        lock_timeout,
        "another checkout",
        CodeError,
        sleep,
    ):
        record = read_record(final)
        if record is not None and record.get("commit") == commit:
            return False, record  # another run finished it while this one waited
        tmp = owned.staging(final)
        try:
            record = _build(code, commit, tmp, git)
            os.rename(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return True, record


def _build(code, commit, tmp, git):
    def step(what, *args):
        rc, out, errout = git(*args, cwd=tmp)
        if rc != 0:
            raise CodeError(
                "code %s@%s: %s failed: %s%s" % (code["repo"], commit[:12], what, _last(errout), _hint(errout, git))
            )
        return out

    step("git init", "init", "-q")
    step("git remote add", "remote", "add", "origin", code["repo"])
    rc, dummy, dummy2 = git("fetch", "-q", "--depth", "1", "origin", commit, cwd=tmp)
    if rc != 0:  # a server that does not serve a commit by its id: the whole history, then the commit
        step("git fetch", "fetch", "-q", "origin")
        rc, dummy, dummy2 = git("cat-file", "-e", commit + "^{commit}", cwd=tmp)
        if rc != 0:
            raise CodeError(
                "code %s: commit %s is not in the repository (was the branch rewritten?)" % (code["repo"], commit)
            )
    step("git checkout", "-c", "advice.detachedHead=false", "checkout", "-q", "--detach", commit)
    submodules = []
    if code["submodules"] and os.path.exists(os.path.join(tmp, ".gitmodules")):
        # Local submodules only for a local repository: git refuses them by default (a repository's submodule
        # could otherwise read the host's own files).
        local = ["-c", "protocol.file.allow=always"] if code["repo"].startswith("file://") else []
        step("git submodule update", *(local + ["submodule", "update", "-q", "--init", "--recursive"]))
        for line in step("git submodule status", "submodule", "status", "--recursive").splitlines():
            parts = line.strip().lstrip("+-U ").split()
            if len(parts) >= 2:
                submodules.append({"path": parts[1], "commit": parts[0]})
    if code["path"] not in ("", ".") and not os.path.isdir(os.path.join(tmp, code["path"])):
        raise CodeError("code.path: %s is not a directory of %s at %s" % (code["path"], code["repo"], commit[:12]))
    record = {
        "repo": code["repo"],
        "ref": code["ref"],
        "commit": commit,
        "submodules": submodules,
        "checked_out": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    with open(os.path.join(tmp, ".git", RECORD), "w") as f:
        json.dump(record, f, indent=1, sort_keys=True)
    return record


def report(
    code: Mapping[str, Any], commit: str, changed: bool, record: Mapping[str, Any], check_mode: bool = False
) -> str:
    subs = record.get("submodules") or []
    what = "%s@%s (ref %s)%s" % (
        code["repo"],
        commit[:12],
        code["ref"],
        ", %d submodule%s" % (len(subs), "" if len(subs) == 1 else "s") if subs else "",
    )
    if not changed:
        return "code %s: already checked out, nothing fetched" % what
    return "code %s: %s" % (what, "would be checked out" if check_mode else "checked out")


def run(module: Any) -> None:
    """The ``code_checkout`` module's work, with its AnsibleModule (made from :data:`ARGS`): the section checked,
    the ref resolved unless ``commit`` names it, the commit checked out; exits through ``module``."""
    p = module.params
    code, errors = module_section(p)
    if errors:
        module.fail_json(msg=errors[0], errors=errors)
    if code is None:  # never: normalize gives the section when it found no error (for the type checker)
        raise AssertionError("code is set here")
    try:
        with Git(code["repo"], p["token"], p["ssh_key"]) as git:
            commit = p["commit"] or resolve(code, git)
            if not COMMIT_RE.match(commit):
                module.fail_json(msg="commit: %r is not a full 40-character commit" % commit)
            changed, record = checkout(
                code, commit, p["root"], git, check_mode=module.check_mode, lock_timeout=p["lock_timeout"]
            )
    except CodeError as e:
        module.fail_json(msg=str(e))
    except OSError as e:
        module.fail_json(msg="code %s: %s" % (code["repo"], e))
    module.exit_json(
        changed=changed,
        commit=commit,
        dir=directory(p["root"], code, commit),
        workdir=workdir(p["root"], code, commit),
        submodules=record.get("submodules") or [],
        line=report(code, commit, changed, record, module.check_mode),
    )
