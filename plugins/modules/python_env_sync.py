#!/usr/bin/python
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

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.node.python_env import TOOLING
from ansible_collections.rlinfra.verl.plugins.module_utils.node.python_env_sync import run

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


def main():
    run(ARGS.new_module(AnsibleModule))


if __name__ == "__main__":
    main()
