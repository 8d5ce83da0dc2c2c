# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The work of module rlinfra.verl.python_env_sync: a node's virtualenv holding exactly the listed packages (uv pip
sync semantics) - the venv made (with pip and uv, from the wheelhouse when it has them), the packages installed with
uv, the rest pruned, the fingerprint and the record written; or, with ``download_only``, the wheelhouse filled. What
to install, prune or skip is module_utils/node/python_env.py. Standard library only.

It needs AnsibleModule itself (``fail_json``/``exit_json`` end the call, ``tmpdir``, ``run_command`` with ``data``):
the module passes it in (:func:`run`)."""

from __future__ import annotations

import json
import os
import zipfile
from collections.abc import Sequence
from typing import Any

from ansible_collections.rlinfra.verl.plugins.module_utils.common import owned
from ansible_collections.rlinfra.verl.plugins.module_utils.common.files import write_atomic, write_if_changed
from ansible_collections.rlinfra.verl.plugins.module_utils.node.python_env import (
    ENSUREPIP_SCRIPT,
    INSPECT_SCRIPT,
    ensurepip_wheels,
    fast_path,
    fingerprint,
    frozen_lines,
    inputs_digest,
    python_version,
    read_json,
    requirement_lines,
    state_path,
    unneeded,
    uv_changes,
    uv_wheel,
)

UV_ENV = {"UV_NO_PROGRESS": "1", "NO_COLOR": "1"}


def one_line(text: str | None, limit: int = 1500) -> str:
    """uv's error report (a tree of lines) as one line; the "Using Python ..." preamble left out."""
    lines = [ln.strip(" \u2502\u2570\u2500\u25b6\u00d7") for ln in (text or "").splitlines()]
    return " ".join(ln for ln in lines if ln and not ln.startswith("Using Python"))[:limit]


class Sync:
    def __init__(self, module: Any) -> None:
        self.module = module
        p = module.params
        self.venv = p["venv"]
        self.python = os.path.join(self.venv, "bin", "python")
        self.uv = os.path.join(self.venv, "bin", "uv")
        self.sources: list[str] = []
        # The wheelhouse directory when it exists, else None.
        self.wheelhouse: Any = p["wheelhouse"] if p["wheelhouse"] and os.path.isdir(p["wheelhouse"]) else None
        for link in p["find_links"] + ([self.wheelhouse] if self.wheelhouse else []):
            self.sources += ["--find-links", link]
        if p["no_index"]:
            self.sources.append("--no-index")
        if p["index_url"]:
            self.sources += ["--index-url", p["index_url"]]
        for url in p["extra_index_urls"]:
            self.sources += ["--extra-index-url", url]
        self.installed: list[str] = []
        self.removed: list[str] = []

    def run(self, argv: Sequence[str], what: str, data: str | None = None) -> tuple[str, str]:
        rc, out, err = self.module.run_command(argv, data=data, environ_update=UV_ENV)
        if rc != 0:
            self.module.fail_json(
                msg="%s failed (exit %d): %s" % (what, rc, one_line(err or out)),
                rc=rc,
                stdout=out,
                stderr=err,
                installed=self.installed,
                removed=self.removed,
            )
        return out, err

    def bootstrap_uv(self) -> tuple[str | None, str | None]:
        """(path of a uv binary taken from the wheelhouse's uv wheel, its version), or (None, None) without one."""
        name = uv_wheel(os.listdir(self.wheelhouse), os.uname().machine) if self.wheelhouse else None
        if not name:
            return None, None
        with zipfile.ZipFile(os.path.join(self.wheelhouse, name)) as wheel:
            member = next((m for m in wheel.namelist() if m.endswith(".data/scripts/uv")), None)
            if member is None:
                return None, None
            path = os.path.join(self.module.tmpdir, "uv")
            write_atomic(path, wheel.read(member), 0o755)
        return path, name.split("-")[1]

    def ensure_venv(self) -> bool:
        """Create the venv, with pip and uv in it as installed packages, where something is missing; the result is
        the environment `python -m venv` + `pip install uv` makes. True when something was made."""
        p, made = self.module.params, False
        boot, uv_version = self.bootstrap_uv()
        if not os.path.exists(self.python):
            if not p["python"]:
                self.module.fail_json(
                    msg="%s has no interpreter (%s): create the virtualenv first or set python"
                    % (self.venv, self.python)
                )
            # Ours (pruned, and removed by a purge) only when made here or in an empty directory: owned.claim.
            owned.claim(self.venv)
            self.run(
                [p["python"], "-m", "venv"] + (["--without-pip"] if boot else []) + [self.venv],
                "creating the virtualenv with %s" % p["python"],
            )
            made = True
        need_pip = not os.path.exists(os.path.join(self.venv, "bin", "pip"))
        need_uv = not os.path.exists(self.uv)
        if not (need_pip or need_uv):
            return made
        if boot is None:
            if need_pip:
                self.run([self.python, "-m", "ensurepip"], "ensurepip")
            if need_uv:
                self.run(
                    [self.python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "uv"]
                    + self.sources,
                    "pip install uv",
                )
            return True
        wanted, links = ["uv==%s" % uv_version] if need_uv else [], [self.wheelhouse]
        if need_pip:
            out, dummy = self.run([self.python, "-c", ENSUREPIP_SCRIPT], "reading ensurepip's wheels")
            wheels = ensurepip_wheels(out)
            if wheels is None:
                self.run([self.python, "-m", "ensurepip"], "ensurepip")
            else:
                links += sorted({os.path.dirname(path) for dummy, dummy2, path in wheels})
                wanted += ["%s==%s" % (name, version) for name, version, dummy in wheels]
        if wanted:
            self.run(
                [boot, "pip", "install", "--python", self.python, "--no-index"]
                + [arg for link in links for arg in ("--find-links", link)]
                + wanted,
                "installing pip and uv with uv",
            )
        return True

    def download(self, packages: list[str]) -> bool:
        req_file = os.path.join(self.module.tmpdir, "requirements.txt")
        with open(req_file, "w") as f:
            f.write("".join(str(x).strip() + "\n" for x in packages))
        out, dummy = self.run(
            [
                self.python,
                "-m",
                "pip",
                "download",
                "--disable-pip-version-check",
                "--dest",
                self.wheelhouse,
                "-r",
                req_file,
            ]
            + self.sources,
            "pip download into the wheelhouse",
        )
        return "Saved " in out

    def uv_pip(self, args: list[str], what: str) -> None:
        dry = ["--dry-run"] if self.module.check_mode else []
        out, err = self.run([self.uv, "pip"] + args[:1] + ["--python", self.python] + args[1:] + dry, what)
        installed, removed = uv_changes(err)
        self.installed += installed
        self.removed += removed

    def install(self, packages: list[str], nbi: list[str], nodeps: list[str]) -> None:
        req_file = os.path.join(self.module.tmpdir, "requirements.txt")
        with open(req_file, "w") as f:
            f.write("".join(str(p).strip() + "\n" for p in packages))
        self.uv_pip(["install", "-r", req_file] + self.sources, "uv pip install of python_env_packages")
        if nbi:
            self.uv_pip(
                ["install", "--no-build-isolation"] + nbi + self.sources,
                "uv pip install --no-build-isolation of python_env_no_build_isolation_packages",
            )
        if nodeps:
            self.uv_pip(
                ["install", "--no-deps"] + nodeps + self.sources,
                "uv pip install --no-deps of python_env_no_deps_packages",
            )

    def prune(self, packages: list[str], nbi: list[str], nodeps: list[str], keep: Sequence[str]) -> str | None:
        # The environment python_env_path names holds exactly the lists (a package dropped from them, or installed by
        # hand, is removed), whoever made it: that is what python_env_path asks for. Removing the directory itself is
        # another matter, left to a purge, which needs the claim (owned.claim) only an environment made here carries.
        query = json.dumps(
            {"roots": requirement_lines(packages) + requirement_lines(nbi), "no_deps": requirement_lines(nodeps)}
        )
        out, dummy = self.run([self.python, "-c", INSPECT_SCRIPT], "reading the installed packages", data=query)
        try:
            seen = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            seen = {"error": "unreadable answer %r" % out[-300:]}
        if seen.get("error"):
            return (
                "cannot read the installed packages (%s), so packages dropped from the lists are not removed"
                % seen["error"]
            )
        # A dry run inspects the environment before the install it did not make: what that install would add
        # is left out (and what only it would need may be listed as removable).
        remove, reason = unneeded(
            seen["dists"], seen["roots"], seen["no_deps"], keep, ignore_missing=self.module.check_mode
        )
        if reason:
            return reason
        if remove:
            before = len(self.removed)
            self.uv_pip(["uninstall"] + remove, "uv pip uninstall of packages no longer in the lists")
            if len(self.removed) == before:
                self.removed += remove
        return None


def run(module: Any) -> None:
    """The whole of module python_env_sync for AnsibleModule ``module`` (its arguments checked): ends the module with
    its result."""
    p = module.params
    sync = Sync(module)
    if p["no_index"] and not sync.wheelhouse and not p["find_links"]:
        module.fail_json(
            msg="python_env_offline is true but the wheelhouse %s does not exist on this node: mount the "
            "shared volume or set python_env_offline=false" % p["wheelhouse"]
        )
    missing = not all(os.path.exists(x) for x in (sync.python, sync.uv, os.path.join(sync.venv, "bin", "pip")))
    if missing and module.check_mode:
        # A dry run on a new node: the virtualenv the run would create is not there to ask.
        module.exit_json(
            changed=True, installed=[], removed=[], frozen=[], python_version=None, fingerprint=None, inputs_digest=None
        )
    made = sync.ensure_venv() if missing else False
    if p["download_only"]:
        saved = bool(sync.wheelhouse) and not p["no_index"] and not module.check_mode and sync.download(p["packages"])
        module.exit_json(changed=made or saved, installed=[], removed=[])
    result: dict[str, Any] = dict(changed=False)
    wrote = (
        write_if_changed(p["requirements_copy"], "".join(x + "\n" for x in p["packages"]), 0o644, module.check_mode)
        if p["requirements_copy"]
        else False
    )
    version = python_version(module.run_command, sync.python)
    inputs = inputs_digest(p["packages"], p["no_build_isolation_packages"], p["no_deps_packages"], version)
    out, dummy = sync.run([sync.uv, "pip", "freeze", "--python", sync.python], "uv pip freeze")
    if not fast_path(read_json(state_path(sync.venv)), inputs, fingerprint(version, frozen_lines(out))):
        sync.install(p["packages"], p["no_build_isolation_packages"], p["no_deps_packages"])
        if p["prune"]:
            reason = sync.prune(p["packages"], p["no_build_isolation_packages"], p["no_deps_packages"], p["keep"])
            if reason:
                module.warn(reason)
                result["not_removed_reason"] = reason
        out, dummy = sync.run([sync.uv, "pip", "freeze", "--python", sync.python], "uv pip freeze")
    frozen = frozen_lines(out)
    digest = fingerprint(version, frozen)
    fp_file = p["fingerprint_file"] or os.path.join(sync.venv, "rlinfra-fingerprint.txt")
    wrote = (
        write_if_changed(
            fp_file, "%s\n# %s\n%s" % (digest, version, "".join(x + "\n" for x in frozen)), 0o644, module.check_mode
        )
        or wrote
    )
    record = json.dumps({"fingerprint": digest, "inputs": inputs, "python": version}, indent=2, sort_keys=True) + "\n"
    wrote = write_if_changed(state_path(sync.venv), record, 0o644, module.check_mode) or wrote

    result.update(
        changed=bool(made or sync.installed or sync.removed or wrote),
        installed=sync.installed,
        removed=sync.removed,
        frozen=frozen,
        python_version=version,
        fingerprint=digest,
        inputs_digest=inputs,
    )
    module.exit_json(**result)
