#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: python_env_sync
short_description: Install a pinned package set into a virtualenv exactly, with uv, and fingerprint it
version_added: 0.2.0
description:
  - Installs O(packages) into the virtualenv O(venv) with C(uv pip install -r), then
    O(no_build_isolation_packages) (C(--no-build-isolation)) and O(no_deps_packages) (C(--no-deps)).
  - Then removes every installed package the environment no longer needs (C(uv pip sync) semantics) - a
    package dropped from the lists goes, with the dependencies only it needed. What is needed is read from
    the installed packages' metadata, markers and extras evaluated by the environment's own interpreter
    (with the C(packaging) that pip vendors) - every requirement of O(packages) and
    O(no_build_isolation_packages) with what it requires, recursively; the O(no_deps_packages) alone; the
    venv's tooling (O(keep)) with what it requires. When a requirement cannot be named (a bare path) or is
    missing after the install, nothing is removed and a warning says why.
  - When the record says the environment was installed from the same lists and interpreter and its fingerprint
    is still the one recorded, nothing is installed nor pruned (a re-run costs one C(uv pip freeze)).
  - Writes a fingerprint of the environment (sha256 of the interpreter's C(python -VV) line and the sorted
    C(uv pip freeze)) to O(fingerprint_file), and a record of it and of the inputs digest (the three lists
    and the interpreter) to C(<venv>/rlinfra-state.json), which M(rlinfra.verl.ray_node_state) reads.
author:
  - rlinfra maintainers (@rlinfra)
options:
  venv:
    description:
      - The virtualenv. Created with O(python) when it has no C(bin/python); C(uv) is put into it when it has none.
      - A new virtualenv is made fast where the wheelhouse (O(wheelhouse)) holds a C(uv) wheel for this machine -
        C(python -m venv --without-pip), the C(uv) binary taken from the wheel, then the very wheels C(python -m venv)
        would install (C(ensurepip)'s) installed with C(uv) - the same environment in a fraction of the time. Otherwise
        C(python -m venv), then C(pip install uv).
    type: path
    required: true
  python:
    description: The interpreter (an absolute path) that creates the virtualenv when it does not exist; empty means it must exist.
    type: path
    default: ""
  wheelhouse:
    description:
      - A directory of wheels on the node (the shared volume's wheelhouse), used as C(--find-links) when it exists.
      - With O(no_index) it must exist (unless O(find_links) is given); a missing one fails with one line.
    type: path
  requirements_copy:
    description: Where to write the requirement lines for people on the node (for example C(<venv>/rlinfra-requirements.txt)).
    type: path
  download_only:
    description:
      - Only fill O(wheelhouse) with C(pip download) of the lists (creating the virtualenv first when needed) and
        install nothing; run it on one node before the others install, so that they install from the wheelhouse.
    type: bool
    default: false
  packages:
    description:
      - Requirement strings installed with their dependencies (one line each of a requirements file), each a name with
        extras, versions and markers (C(ray[default]==2.60.0)) or C(name @ URL) (C(name @ file:///path/x.whl) for a
        wheel on the node).
      - Option lines (C(--extra-index-url=URL), C(-r FILE), C(-e .)) are refused; the sources have their own options
        (O(index_url), O(extra_index_urls), O(find_links)).
    type: list
    elements: str
    required: true
  no_build_isolation_packages:
    description: Requirements installed afterwards with C(--no-build-isolation) (for example flash-attn), with their dependencies.
    type: list
    elements: str
    default: []
  no_deps_packages:
    description: Requirements installed afterwards with C(--no-deps) (for example sgl_kernel); their dependencies are not kept for them.
    type: list
    elements: str
    default: []
  find_links:
    description: Directories (absolute paths) or URLs of wheels (C(--find-links)), for example the shared wheelhouse.
    type: list
    elements: str
    default: []
  no_index:
    description: Install from O(find_links) only (C(--no-index)).
    type: bool
    default: false
  index_url:
    description: Package index URL (C(https://), C(http://) or C(file://), without credentials or a query); empty means uv's default.
    type: str
    default: ""
  extra_index_urls:
    description: Extra package index URLs, written like O(index_url).
    type: list
    elements: str
    default: []
  prune:
    description: Remove the installed packages the lists no longer need.
    type: bool
    default: true
  keep:
    description: Packages never removed, with what they require (the venv's own tooling).
    type: list
    elements: str
    default: [pip, setuptools, wheel, uv]
  fingerprint_file:
    description: Where the fingerprint, the interpreter line and the frozen set are written; default C(<venv>/rlinfra-fingerprint.txt).
    type: path
attributes:
  check_mode:
    support: full
    description:
      - Installs with C(--dry-run) and removes nothing; RV(removed) lists what the current environment holds
        that the lists do not need (packages the install would add are not inspected), RV(fingerprint) is the
        current one.
  diff_mode:
    support: none
    description: RV(installed) and RV(removed) say what changed.
notes:
  - The environment is installed and fingerprinted in one task so that the fingerprint always describes what
    the installs left.
seealso:
  - module: rlinfra.verl.ray_node_state
"""

EXAMPLES = r"""
- name: Install the pinned set exactly, from the shared wheelhouse only
  rlinfra.verl.python_env_sync:
    venv: /opt/rlinfra/venv
    packages: ["ray[default]==2.60.0", "verl==0.9.1"]
    no_deps_packages: ["sgl_kernel==0.3.9"]
    find_links: [/data/wheelhouse]
    no_index: true
  register: env

- name: Show what changed
  ansible.builtin.debug:
    msg: "installed {{ env.installed }}, removed {{ env.removed }}, fingerprint {{ env.fingerprint[:12] }}"
"""

RETURN = r"""
installed:
  description: Packages installed or upgraded (C(name==version)), in check mode those that would be.
  returned: always
  type: list
  elements: str
  sample: ["iniconfig==2.3.1"]
removed:
  description: Packages removed (C(name==version) of what uv replaced, names of what was pruned), in check mode those that would be.
  returned: always
  type: list
  elements: str
  sample: ["mdurl"]
not_removed_reason:
  description: Why nothing was pruned, when pruning was skipped (also a warning).
  returned: when pruning was skipped
  type: str
frozen:
  description: The sorted C(uv pip freeze) of the environment.
  returned: always
  type: list
  elements: str
  sample: ["aiohttp==3.14.5", "ray==2.60.0"]
python_version:
  description: First line of C(python -VV) of the environment's interpreter.
  returned: always
  type: str
  sample: "Python 3.11.2 (main, May 12 2026, 05:17:27) [GCC 12.2.0]"
fingerprint:
  description: sha256 of RV(python_version) and RV(frozen); equal fingerprints mean the same interpreter and package set.
  returned: always
  type: str
  sample: 4f1c0e8b2d7a9c1e5b3f6a0d8e2c4b6a9f1e3d5c7b9a1f3e5d7c9b1a3f5e7d9c
inputs_digest:
  description: sha256 of the three requirement lists (order ignored) and RV(python_version).
  returned: always
  type: str
"""

import json
import os
import zipfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.rlinfra.verl.plugins.module_utils.common.files import write_if_changed
from ansible_collections.rlinfra.verl.plugins.module_utils.common.files import write_atomic
from ansible_collections.rlinfra.verl.plugins.module_utils.common import owned, vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.node.python_env import (
    ENSUREPIP_SCRIPT, INSPECT_SCRIPT, TOOLING, ensurepip_wheels, fast_path, fingerprint, frozen_lines, inputs_digest,
    python_version, read_json, requirement_lines, state_path, unneeded, uv_changes, uv_wheel)

# A local index (a PEP 503 directory on the shared volume) is file://; never credentials or a query in any of them.
INDEX_SCHEMES = ("https", "http", "file")
ARGS = vocabulary.Args(
    venv=vocabulary.AbsPath("owns", required=True),
    # Requirements only: an option line (--extra-index-url=..., -r FILE, -e .) would change where or how everything is
    # installed; the sources have their own options.
    packages=vocabulary.ListOf(vocabulary.Requirement(), required=True),
    no_build_isolation_packages=vocabulary.ListOf(vocabulary.Requirement(), default=[]),
    no_deps_packages=vocabulary.ListOf(vocabulary.Requirement(), default=[]),
    find_links=vocabulary.ListOf(vocabulary.PathOrUrl(schemes=INDEX_SCHEMES), default=[]),
    no_index=vocabulary.Switch(default=False),
    index_url=vocabulary.Url(schemes=INDEX_SCHEMES, empty=True, default=""),
    extra_index_urls=vocabulary.ListOf(vocabulary.Url(schemes=INDEX_SCHEMES), default=[]),
    prune=vocabulary.Switch(default=True),
    keep=vocabulary.ListOf(vocabulary.Name(), default=list(TOOLING)),
    fingerprint_file=vocabulary.AbsPath("writes", empty=True),
    python=vocabulary.AbsPath("reads", empty=True, default=""),
    wheelhouse=vocabulary.AbsPath("writes", empty=True),
    requirements_copy=vocabulary.AbsPath("writes", empty=True),
    download_only=vocabulary.Switch(default=False),
)
ARGUMENT_SPEC = ARGS.spec
UV_ENV = {"UV_NO_PROGRESS": "1", "NO_COLOR": "1"}


def one_line(text, limit=1500):
    """uv's error report (a tree of lines) as one line; the "Using Python ..." preamble left out."""
    lines = [ln.strip(" \u2502\u2570\u2500\u25b6\u00d7") for ln in (text or "").splitlines()]
    return " ".join(ln for ln in lines if ln and not ln.startswith("Using Python"))[:limit]


class Sync:
    def __init__(self, module):
        self.module = module
        p = module.params
        self.venv = p["venv"]
        self.python = os.path.join(self.venv, "bin", "python")
        self.uv = os.path.join(self.venv, "bin", "uv")
        self.sources = []
        self.wheelhouse = p["wheelhouse"] if p["wheelhouse"] and os.path.isdir(p["wheelhouse"]) else None
        for link in p["find_links"] + ([self.wheelhouse] if self.wheelhouse else []):
            self.sources += ["--find-links", link]
        if p["no_index"]:
            self.sources.append("--no-index")
        if p["index_url"]:
            self.sources += ["--index-url", p["index_url"]]
        for url in p["extra_index_urls"]:
            self.sources += ["--extra-index-url", url]
        self.installed, self.removed = [], []

    def run(self, argv, what, data=None):
        rc, out, err = self.module.run_command(argv, data=data, environ_update=UV_ENV)
        if rc != 0:
            self.module.fail_json(msg="%s failed (exit %d): %s" % (what, rc, one_line(err or out)),
                                  rc=rc, stdout=out, stderr=err, installed=self.installed, removed=self.removed)
        return out, err

    def bootstrap_uv(self):
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

    def ensure_venv(self):
        """Create the venv, with pip and uv in it as installed packages, where something is missing; the result is
        the environment `python -m venv` + `pip install uv` makes. True when something was made."""
        p, made = self.module.params, False
        boot, uv_version = self.bootstrap_uv()
        if not os.path.exists(self.python):
            if not p["python"]:
                self.module.fail_json(msg="%s has no interpreter (%s): create the virtualenv first or set python" % (self.venv, self.python))
            # Ours (pruned, and removed by a purge) only when made here or in an empty directory: owned.claim.
            owned.claim(self.venv)
            self.run([p["python"], "-m", "venv"] + (["--without-pip"] if boot else []) + [self.venv],
                     "creating the virtualenv with %s" % p["python"])
            made = True
        need_pip = not os.path.exists(os.path.join(self.venv, "bin", "pip"))
        need_uv = not os.path.exists(self.uv)
        if not (need_pip or need_uv):
            return made
        if boot is None:
            if need_pip:
                self.run([self.python, "-m", "ensurepip"], "ensurepip")
            if need_uv:
                self.run([self.python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "uv"] + self.sources,
                         "pip install uv")
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
            self.run([boot, "pip", "install", "--python", self.python, "--no-index"]
                     + [arg for link in links for arg in ("--find-links", link)] + wanted, "installing pip and uv with uv")
        return True

    def download(self, packages):
        req_file = os.path.join(self.module.tmpdir, "requirements.txt")
        with open(req_file, "w") as f:
            f.write("".join(str(x).strip() + "\n" for x in packages))
        out, dummy = self.run([self.python, "-m", "pip", "download", "--disable-pip-version-check", "--dest", self.wheelhouse,
                               "-r", req_file] + self.sources, "pip download into the wheelhouse")
        return "Saved " in out

    def uv_pip(self, args, what):
        dry = ["--dry-run"] if self.module.check_mode else []
        out, err = self.run([self.uv, "pip"] + args[:1] + ["--python", self.python] + args[1:] + dry, what)
        installed, removed = uv_changes(err)
        self.installed += installed
        self.removed += removed

    def install(self, packages, nbi, nodeps):
        req_file = os.path.join(self.module.tmpdir, "requirements.txt")
        with open(req_file, "w") as f:
            f.write("".join(str(p).strip() + "\n" for p in packages))
        self.uv_pip(["install", "-r", req_file] + self.sources, "uv pip install of python_env_packages")
        if nbi:
            self.uv_pip(["install", "--no-build-isolation"] + nbi + self.sources,
                        "uv pip install --no-build-isolation of python_env_no_build_isolation_packages")
        if nodeps:
            self.uv_pip(["install", "--no-deps"] + nodeps + self.sources,
                        "uv pip install --no-deps of python_env_no_deps_packages")

    def prune(self, packages, nbi, nodeps, keep):
        # The environment python_env_path names holds exactly the lists (a package dropped from them, or installed by
        # hand, is removed), whoever made it: that is what python_env_path asks for. Removing the directory itself is
        # another matter, left to a purge, which needs the claim (owned.claim) only an environment made here carries.
        query = json.dumps({"roots": requirement_lines(packages) + requirement_lines(nbi),
                            "no_deps": requirement_lines(nodeps)})
        out, dummy = self.run([self.python, "-c", INSPECT_SCRIPT], "reading the installed packages", data=query)
        try:
            seen = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            seen = {"error": "unreadable answer %r" % out[-300:]}
        if seen.get("error"):
            return "cannot read the installed packages (%s), so packages dropped from the lists are not removed" % seen["error"]
        # A dry run inspects the environment before the install it did not make: what that install would add
        # is left out (and what only it would need may be listed as removable).
        remove, reason = unneeded(seen["dists"], seen["roots"], seen["no_deps"], keep, ignore_missing=self.module.check_mode)
        if reason:
            return reason
        if remove:
            before = len(self.removed)
            self.uv_pip(["uninstall"] + remove, "uv pip uninstall of packages no longer in the lists")
            if len(self.removed) == before:
                self.removed += remove
        return None


def main():
    module = ARGS.new_module(AnsibleModule)
    p = module.params
    sync = Sync(module)
    if p["no_index"] and not sync.wheelhouse and not p["find_links"]:
        module.fail_json(msg="python_env_offline is true but the wheelhouse %s does not exist on this node: mount the "
                             "shared volume or set python_env_offline=false" % p["wheelhouse"])
    missing = not all(os.path.exists(x) for x in (sync.python, sync.uv, os.path.join(sync.venv, "bin", "pip")))
    if missing and module.check_mode:
        # A dry run on a new node: the virtualenv the run would create is not there to ask.
        module.exit_json(changed=True, installed=[], removed=[], frozen=[], python_version=None,
                         fingerprint=None, inputs_digest=None)
    made = sync.ensure_venv() if missing else False
    if p["download_only"]:
        saved = bool(sync.wheelhouse) and not p["no_index"] and not module.check_mode and sync.download(p["packages"])
        module.exit_json(changed=made or saved, installed=[], removed=[])
    result = dict(changed=False)
    wrote = write_if_changed(p["requirements_copy"], "".join(x + "\n" for x in p["packages"]), 0o644,
                             module.check_mode) if p["requirements_copy"] else False
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
    wrote = write_if_changed(fp_file, "%s\n# %s\n%s" % (digest, version, "".join(x + "\n" for x in frozen)),
                             0o644, module.check_mode) or wrote
    record = json.dumps({"fingerprint": digest, "inputs": inputs, "python": version}, indent=2, sort_keys=True) + "\n"
    wrote = write_if_changed(state_path(sync.venv), record, 0o644, module.check_mode) or wrote

    result.update(changed=bool(made or sync.installed or sync.removed or wrote), installed=sync.installed,
                  removed=sync.removed, frozen=frozen, python_version=version, fingerprint=digest,
                  inputs_digest=inputs)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
