#!/usr/bin/env python3
"""Every module and action the collection's roles and playbooks name must resolve with ansible-core and
the collections galaxy.yml declares, nothing else (a user's `ansible-galaxy collection install` brings
exactly those). Run by scripts/gates.sh against the installed tarball:

    check_fqcn.py COLLECTION_ROOT COLLECTIONS_PATH[:COLLECTIONS_PATH...]

COLLECTIONS_PATH holds the installed rlinfra.verl and copies of the declared dependencies only; the
Python environment's own ansible_collections (the `ansible` package) are not searched.
Prints one line per name that does not resolve, or per collection used but not declared; exit 1 then."""

from __future__ import annotations

import glob
import json
import os
import sys

import yaml

# awx/configure.yml loads the AWX assets with awx.awx, which docs/AWX.md asks for; it is no part of a run.
SCANNED = ("roles/*/tasks/*.yml", "roles/*/handlers/*.yml", "playbooks/*.yml", "*.yml")
NOT_PLAYBOOKS = {"galaxy.yml", "execution-environment.yml", "requirements.yml"}
BLOCK_KEYS = ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers")
CORE = ("ansible.builtin.", "ansible.legacy.")


def task_names(node, out):
    """The FQCN actions (``a.b.c:`` keys) of every task under ``node``, and module_defaults groups/modules."""
    if isinstance(node, list):
        for item in node:
            task_names(item, out)
        return out
    if not isinstance(node, dict):
        return out
    for key, value in node.items():
        if key in BLOCK_KEYS:
            task_names(value, out)
        elif key == "module_defaults" and isinstance(value, dict):
            out.update(k[len("group/") :] if k.startswith("group/") else k for k in value)
        elif isinstance(key, str) and key.count(".") >= 2 and " " not in key:
            out.add(key)
    return out


def collect(root):
    names = {}
    for pattern in SCANNED:
        for path in sorted(glob.glob(os.path.join(root, pattern))):
            if os.path.basename(path) in NOT_PLAYBOOKS:
                continue
            with open(path) as f:
                data = yaml.safe_load(f)
            for name in task_names(data, set()):
                names.setdefault(name, os.path.relpath(path, root))
    return names


def declared_dependencies(root):
    """galaxy.yml's dependencies; an installed collection has them in MANIFEST.json."""
    if os.path.exists(os.path.join(root, "galaxy.yml")):
        with open(os.path.join(root, "galaxy.yml")) as f:
            return yaml.safe_load(f).get("dependencies") or {}
    with open(os.path.join(root, "MANIFEST.json")) as f:
        return json.load(f)["collection_info"].get("dependencies") or {}


def main(argv):
    root, paths = argv[1], [os.path.abspath(p) for p in argv[2].split(":")]
    os.environ["ANSIBLE_COLLECTIONS_PATH"] = ":".join(paths)
    os.environ["ANSIBLE_COLLECTIONS_SCAN_SYS_PATH"] = "False"
    from ansible.plugins.loader import action_loader, init_plugin_loader, module_loader

    init_plugin_loader(paths)
    declared = set(declared_dependencies(root))
    with open(os.path.join(root, "meta", "runtime.yml")) as f:
        groups = set(yaml.safe_load(f).get("action_groups") or {})
    problems = []
    names = collect(root)
    for name, where in sorted(names.items()):
        collection = ".".join(name.split(".")[:2])
        if name.startswith(CORE):
            pass
        elif collection != "rlinfra.verl" and collection not in declared:
            problems.append("%s (%s): collection %s is not in galaxy.yml's dependencies" % (name, where, collection))
            continue
        if collection == "rlinfra.verl" and name.split(".")[2] in groups:
            continue  # an action group of meta/runtime.yml
        found = module_loader.find_plugin_with_context(name)
        if not found.resolved and not action_loader.find_plugin_with_context(name).resolved:
            problems.append("%s (%s): does not resolve with ansible-core and the declared collections" % (name, where))
    for line in problems:
        print(line)
    print(
        "%d module/action names checked against ansible-core + %s: %s"
        % (
            len(names),
            ", ".join(sorted(declared)) or "nothing",
            "%d problem(s)" % len(problems) if problems else "all resolve",
        )
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
