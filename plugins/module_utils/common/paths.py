# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""What a path is for, and where a path of that purpose may lie: the one rule behind every path the collection is
given (module and action arguments, experiment keys, role variables).

Every path field is declared with a purpose (:data:`PURPOSES`), so that what it may be follows from what the collection
does with it:

* ``owns``: a directory the collection creates and may remove again (a venv, Ray's temp dir, Prometheus's data, the
  image store, the idle guard's root). Never ``/``, never in or under the system's own trees (``/usr``, ``/etc``,
  ``/proc``...), never a directory that holds others' directories (``/opt``, ``/var/lib``, ``/home/ubuntu``) itself;
* ``writes``: a directory or file the collection writes into and leaves there (checkpoints, a mount point, the shared
  prefetch cache, a merged model, a record): the same places as ``owns``;
* ``config``: one of the collection's own files or directories among the system's configuration (``/etc/ray``,
  ``/etc/systemd/system``, ``/etc/ansible/facts.d``): under ``/etc`` is fine, ``/etc`` itself and the other system
  trees are not;
* ``mounts``: a host directory bind-mounted into the Ray container, read-write: the places ``writes`` allows;
* ``local``: a directory on the controller the collection writes into (artifacts, reports): relative means under the
  directory the playbook runs from; absolute, the places ``writes`` allows;
* ``reads``: a path the collection only reads (an interpreter, an archive, a checkpoint to merge): anywhere;
* ``remote``: a path on another machine, passed on as it is (an NFS export: ``/`` is a real NFSv4 export).

A list of paths that are written (``mounts``...) holds each path once (:func:`duplicates`): docker and podman refuse
a mount given twice. Standard library only: code on the nodes imports it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

PURPOSES = ("owns", "writes", "config", "mounts", "local", "reads", "remote")
# The purposes whose paths the collection writes into: confined by :func:`misplaced`.
WRITTEN = ("owns", "writes", "config", "mounts", "local")

# The system's own trees: nothing of the collection's is made, written or mounted in or under them (config: /etc aside).
SYSTEM_TREES = (
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/lost+found",
    "/proc",
    "/run",
    "/sbin",
    "/snap",
    "/sys",
    "/usr",
    "/var/cache/apt",
    "/var/lib/apt",
    "/var/lib/dpkg",
    "/var/lib/systemd",
    "/var/log/journal",
    "/var/mail",
    "/var/spool",
)
# Directories that hold other people's directories: the collection's own lives below one, never in its place (a venv made
# in /opt itself would add /opt/bin and /opt/lib; a purge would remove /opt).
SHARED_DIRS = (
    "/",
    "/home",
    "/media",
    "/mnt",
    "/opt",
    "/root",
    "/srv",
    "/tmp",
    "/var",
    "/var/cache",
    "/var/lib",
    "/var/local",
    "/var/log",
    "/var/opt",
    "/var/tmp",
)
# What a line says a written path must be, by purpose.
WORDS = {
    "owns": "a directory of the collection's own",
    "writes": "a place the collection may write into",
    "config": "a place of the collection's own",
    "mounts": "a directory the container may write into",
    "local": "a place on the controller the collection may write into",
}


def normpath(path: str) -> str:
    """``os.path.normpath``, and a path starting with exactly two slashes read as Linux reads it: ``normpath`` keeps
    ``//etc`` (POSIX leaves its meaning to the system), which would then be neither ``/etc`` nor inside ``/``."""
    path = os.path.normpath(path)
    return path[1:] if path.startswith("//") else path


def inside(path: str, root: str) -> bool:
    """Whether ``path`` is ``root`` or below it, by components after normalizing (no file system access)."""
    path, root = normpath(path), normpath(root)
    return path == root or path.startswith(root.rstrip("/") + "/")


def overlap(a: str, b: str) -> bool:
    """Whether one of two paths is the other or lies inside it."""
    return inside(a, b) or inside(b, a)


def _shared(path: str) -> str | None:
    """The directory of others' that ``path`` stands in place of, or None: one of :data:`SHARED_DIRS`, or a user's home
    (``/home/ubuntu``) itself."""
    if path in SHARED_DIRS:
        return path
    parent = os.path.dirname(path)
    return path if parent == "/home" else None


def misplaced(path: str, purpose: str | None) -> str | None:
    """Why an absolute ``path`` of ``purpose`` lies where the collection must not write (the words after "must"), or
    None when it may. A relative path is the caller's to judge (``local`` resolves it under the playbook's directory)."""
    if purpose not in WRITTEN or not path.startswith("/"):
        return None
    norm = normpath(path)
    words = WORDS[purpose]
    if norm == "/":
        return "be %s, not /" % words
    trees = [t for t in SYSTEM_TREES if inside(norm, t)]
    if purpose == "config" and trees == ["/etc"]:
        return "be %s below /etc (such as /etc/ray), not /etc itself" % words if norm == "/etc" else None
    if trees:
        return "be %s, outside the system's directories (/usr, /etc, /proc, ...): %s is %s" % (
            words,
            norm,
            "one" if norm == trees[-1] else "under " + trees[-1],
        )
    shared = _shared(norm)
    if shared:
        return "be %s below %s (such as %s/rlinfra), not %s itself, which holds others' directories" % (
            words,
            shared,
            shared,
            shared,
        )
    return None


def duplicates(paths: Iterable[Any]) -> list[Any]:
    """The paths of a list that name the same place as one before them (``/data`` and ``/data/``), in order."""
    seen, out = set(), []
    for path in paths:
        norm = normpath(path) if isinstance(path, str) and path else path
        if norm in seen:
            out.append(path)
        seen.add(norm)
    return out
