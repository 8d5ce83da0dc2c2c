# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The replace kit (recovery.replace, docs/ARCHITECTURE.md 3.8b): what the run's supervisor on the head needs to rent and
converge a machine in place of one gone for good (module_utils/hyperbolic/replace.py reads it), in one root-only
directory - the dedicated SSH key, the cluster's inventory as the controller sees it, what a replacement is rented with
(``settings.json``) and this collection at the controller's version (its ansible-core, ``ansible/``, is
rlinfra.verl.python_env_sync's).

:func:`pack` runs on the controller (action ``rlinfra.verl.replace_kit``): a reproducible archive of the collection, so
the same collection is the same bytes; :func:`write` is the module's work on the head: each file written only when it
differs, the collection unpacked only when its archive's digest differs from the one it was last unpacked from.
Standard library only."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
from collections.abc import Mapping
from typing import Any

from ansible_collections.rlinfra.verl.plugins.module_utils.common.files import write_atomic

COLLECTION = "collections/ansible_collections/rlinfra/verl"
# What of the collection the head's converges run (site.yml and what it reaches).
PACKED = ("galaxy.yml", "meta", "plugins", "roles", "playbooks")
SKIPPED_DIRS = ("__pycache__",)
SKIPPED_SUFFIXES = (".pyc",)
DIGEST = "collection.sha256"


def pack(root: str) -> bytes:
    """The archive of the collection at ``root`` (:data:`PACKED`, without bytecode): names sorted, no times, owners
    or modes but the executable bit, so that the same files are the same bytes."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for top in PACKED:
            for path in _walk(root, top):
                full = os.path.join(root, path)
                info = tar.gettarinfo(full, arcname=path)
                info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
                info.mode = 0o755 if info.isdir() or info.mode & 0o111 else 0o644
                if info.isfile():
                    with open(full, "rb") as handle:
                        tar.addfile(info, handle)
                else:
                    tar.addfile(info)
    return out.getvalue()


def _walk(root: str, top: str) -> list[str]:
    full = os.path.join(root, top)
    if not os.path.isdir(full):
        return [top] if os.path.lexists(full) else []
    found = [top]
    for name in sorted(os.listdir(full)):
        if name in SKIPPED_DIRS or name.endswith(SKIPPED_SUFFIXES):
            continue
        found.extend(_walk(root, os.path.join(top, name)))
    return found


def nice_json(value: Any) -> str:
    """As Ansible's ``to_nice_json`` writes it (the kit's files were written so before)."""
    return json.dumps(value, indent=4, sort_keys=True, separators=(",", ": "))


def _read(path: str) -> str | None:
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return None


def _private(path: str, mode: int) -> bool:
    """Whether ``path`` (a file or directory that exists) is not root's with ``mode``, as the kit keeps it."""
    st = os.lstat(path)
    return (st.st_mode & 0o7777) != mode or (os.geteuid() == 0 and (st.st_uid, st.st_gid) != (0, 0))


def _own(path: str, mode: int) -> None:
    os.chmod(path, mode)
    if os.geteuid() == 0:
        os.chown(path, 0, 0)


def plan(params: Mapping[str, Any]) -> list[str]:
    """What :func:`write` would change on this node, one phrase each (empty: the kit is as ``params`` describes)."""
    kit = params["path"]
    todo = []
    for sub in ("", COLLECTION, "tmp"):
        path = os.path.join(kit, sub) if sub else kit
        if os.path.islink(path) or not os.path.isdir(path) or _private(path, 0o700):
            todo.append("directory %s" % path)
    for name, text in files(params).items():
        path = os.path.join(kit, name)
        if _read(path) != text or os.path.islink(path) or _private(path, 0o600):
            todo.append(name)
    unpacked = os.path.isfile(os.path.join(kit, COLLECTION, "galaxy.yml"))
    if not unpacked or (_read(os.path.join(kit, DIGEST)) or "").strip() != params["archive_sha256"]:
        todo.append("the collection")
    return todo


def files(params: Mapping[str, Any]) -> dict[str, str]:
    """The kit's files (name -> content)."""
    return {
        "ssh_key": params["ssh_key_content"],
        "inventory.json": nice_json(params["inventory"]),
        "settings.json": nice_json(params["settings"]),
    }


def read_archive(path: str) -> bytes:
    """The archive the action copied (gzip-compressed on the way), as :func:`pack` made it."""
    with open(path, "rb") as handle:
        data = handle.read()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def unpack(archive: bytes, dest: str) -> None:
    """``archive`` unpacked in place of ``dest``: into a new directory beside it, then swapped in, so that a supervisor
    reading the collection never sees half of it."""
    parent = os.path.dirname(dest)
    staging = tempfile.mkdtemp(dir=parent, prefix=".verl.staging-")
    try:
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            for member in tar.getmembers():
                if (
                    member.name.startswith("/")
                    or ".." in member.name.split("/")
                    or not (member.isfile() or member.isdir())
                ):
                    raise ValueError("the collection's archive holds %r, which is not unpacked" % member.name)
            # Every member was checked above; the "data" filter, where this Python has it, checks again.
            checked: dict[str, Any] = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            tar.extractall(staging, **checked)  # noqa: S202
        _own(staging, 0o700)
        aside = None
        if os.path.lexists(dest):
            aside = tempfile.mkdtemp(dir=parent, prefix=".verl.replaced-")
            os.rename(dest, os.path.join(aside, "old"))
        os.rename(staging, dest)
        staging = ""
        if aside:
            shutil.rmtree(aside, ignore_errors=True)
    finally:
        if staging:
            shutil.rmtree(staging, ignore_errors=True)


def write(params: Mapping[str, Any], module: Any) -> dict[str, Any]:
    """The ``replace_kit`` module's work: the kit at ``path`` made what ``params`` describes (in check mode, only
    said); ``changed`` lists what was (would be) written."""
    todo = plan(params)
    result: dict[str, Any] = dict(changed=bool(todo), written=todo, path=params["path"])
    if module.check_mode or not todo:
        return result
    kit = params["path"]
    try:
        for sub in ("", COLLECTION, "tmp"):
            path = os.path.join(kit, sub) if sub else kit
            if os.path.islink(path):
                raise OSError("%s is a symbolic link; the kit is never reached through one" % path)
            os.makedirs(path, mode=0o700, exist_ok=True)
            _own(path, 0o700)
        for name, text in files(params).items():
            path = os.path.join(kit, name)
            if _read(path) != text or os.path.islink(path):
                write_atomic(path, text, 0o600, prefix=".rlinfra-kit.")
            _own(path, 0o600)
        if "the collection" in todo:
            if not params.get("archive"):
                return dict(result, failed=True, msg="the collection differs and no archive was given to unpack")
            archive = read_archive(params["archive"])
            got = hashlib.sha256(archive).hexdigest()
            if got != params["archive_sha256"]:
                return dict(result, failed=True, msg="the collection's archive arrived damaged (sha256 %s)" % got)
            unpack(archive, os.path.join(kit, COLLECTION))
            write_atomic(os.path.join(kit, DIGEST), got + "\n", 0o600, prefix=".rlinfra-kit.")
    except (OSError, ValueError, EOFError, tarfile.TarError) as e:
        return dict(result, failed=True, msg="the replace kit %s could not be written: %s" % (kit, e))
    return result
