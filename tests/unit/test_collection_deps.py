"""The collections rlinfra.verl needs are declared once in spirit and three times in files (galaxy.yml for
ansible-galaxy, requirements.yml for users, execution-environment.yml for AWX): they must agree, and every
module name the roles use must belong to one of them (the gates then resolve each name for real)."""

from __future__ import annotations

import importlib.util
import os

import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def _load(name):
    with open(os.path.join(ROOT, name)) as f:
        return yaml.safe_load(f)


def _checker():
    spec = importlib.util.spec_from_file_location("check_fqcn", os.path.join(ROOT, "scripts", "check_fqcn.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_three_declarations_agree():
    galaxy = _load("galaxy.yml")["dependencies"]
    users = {c["name"]: c["version"] for c in _load("requirements.yml")["collections"]}
    ee = {c["name"]: c["version"] for c in _load("execution-environment.yml")["dependencies"]["galaxy"]["collections"]}
    assert galaxy == users
    assert {k: v for k, v in ee.items() if k != "awx.awx"} == galaxy  # awx.awx: only for loading the AWX assets


def test_every_collection_the_roles_use_is_declared():
    names = _checker().collect(ROOT)
    used = {".".join(n.split(".")[:2]) for n in names} - {"ansible.builtin", "ansible.legacy", "rlinfra.verl"}
    assert used and used <= set(_load("galaxy.yml")["dependencies"])
    assert "community.general.lvg" in names and "ansible.posix.mount" in names  # not blind: the scan finds them


def test_the_scan_reads_blocks_handlers_and_module_defaults():
    play = [
        {
            "hosts": "all",
            "module_defaults": {"group/rlinfra.verl.ray": {}},
            "tasks": [
                {
                    "name": "b",
                    "block": [{"name": "x", "community.crypto.openssl_privatekey": {"path": "/k"}}],
                    "rescue": [{"name": "y", "ansible.builtin.debug": {"msg": "m"}}],
                }
            ],
            "handlers": [{"name": "h", "community.docker.docker_container": {"name": "c"}}],
        }
    ]
    assert _checker().task_names(play, set()) == {
        "rlinfra.verl.ray",
        "community.crypto.openssl_privatekey",
        "ansible.builtin.debug",
        "community.docker.docker_container",
    }
