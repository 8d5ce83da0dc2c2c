# -*- coding: utf-8 -*-
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Removing or replacing a directory: only one this collection made, and never one that holds or lies inside an input.

Every removal of a directory a user can see (a merged model replaced by a new merge, the venv and Ray's temp dir
purged by a teardown) goes through :func:`check`, which refuses, in one line and before anything is touched:

* a path that is not absolute, holds ``..``, is a system or top-level directory;
* a path equal to, inside, or containing any of the operation's *inputs* (the checkpoints a merge reads, the venv it
  runs), compared as written and after resolving links;
* a symbolic link (removing through it would remove what it points at) and a mount point (a volume);
* an existing directory that holds anything but is not marked as the collection's: one of ``markers`` (a file the
  collection writes there, such as ``.rlinfra-merge.json``) must be in it. An empty directory holds nothing to lose.

Temporary directories a process makes for itself (``tempfile.mkdtemp``) are not user data and need none of this.
Standard library only.
"""

from __future__ import annotations

import os
import shutil

SYSTEM = frozenset(("/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib64", "/media", "/mnt", "/opt",
                    "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/var", "/workspace", "/data",
                    "/usr/local", "/var/lib", "/var/tmp", "/var/log", "/opt/rlinfra"))


class NotOurs(Exception):
    """One line: which directory, why it is not removed, what to do."""


def _inside(path, root):
    return path == root or path.startswith(root.rstrip("/") + "/")


def _forms(path):
    """The path as written (normalized) and with its links resolved."""
    norm = os.path.normpath(path)
    return {norm, os.path.realpath(norm)}


def check(path, markers, inputs=(), what="directory", fix="", verb="replace"):
    """Raise :class:`NotOurs` unless ``path`` may be removed or replaced (see the module's docstring). ``inputs``:
    ``(label, path)`` pairs the operation reads, or ``(label, path, why)`` (``why``: "which is kept");
    ``fix``: what the user can do, appended to the line; ``verb``: "replace" or "remove"."""
    tail = "; %s" % fix if fix else ""
    if not isinstance(path, str) or not path.startswith("/") or ".." in path.split("/"):
        raise NotOurs("refusing to %s the %s %r: not an absolute path without '..'%s" % (verb, what, path, tail))
    head = "refusing to %s the %s %s" % (verb, what, os.path.normpath(path))
    norm = os.path.normpath(path)
    if norm in SYSTEM or norm.count("/") < 2:
        raise NotOurs("%s: a system or top-level directory%s" % (head, tail))
    for item in inputs:
        label, given, why = (tuple(item) + ("which this operation reads",))[:3]
        if not given:
            continue
        for mine in _forms(norm):
            for theirs in _forms(given):
                if _inside(mine, theirs) or _inside(theirs, mine):
                    relation = "is" if mine == theirs else ("lies inside" if _inside(mine, theirs) else "contains")
                    raise NotOurs("%s: it %s %s %s, %s%s" % (head, relation, label, given, why, tail))
    if os.path.islink(norm):
        raise NotOurs("%s: it is a symbolic link (to %s)%s" % (head, os.path.realpath(norm), tail))
    if not os.path.lexists(norm):
        return False
    if os.path.ismount(norm):
        raise NotOurs("%s: it is a mount point%s" % (head, tail))
    if not os.path.isdir(norm):
        raise NotOurs("%s: it is a file, not a directory%s" % (head, tail))
    try:
        entries = os.listdir(norm)
    except OSError as e:
        raise NotOurs("%s: it cannot be read (%s)%s" % (head, e.strerror, tail))
    if entries and not any(m in entries for m in markers):
        raise NotOurs("%s: it holds files but not %s, so it was not made by rlinfra%s" % (
            head, " or ".join(markers), tail))
    return True


def remove(path, markers, inputs=(), what="directory", fix=""):
    """Remove ``path`` after :func:`check`; False when there was nothing."""
    if not check(path, markers, inputs, what, fix, verb="remove"):
        return False
    shutil.rmtree(os.path.normpath(path))
    return True


def replace(staging, path, markers, inputs=(), what="directory", fix=""):
    """Put the complete directory ``staging`` at ``path``, after :func:`check` of ``path``."""
    norm = os.path.normpath(path)
    old = None
    if check(norm, markers, inputs, what, fix):
        # Aside first, so that the path is never missing for longer than two renames.
        old = os.path.join(os.path.dirname(norm), ".%s.replaced" % os.path.basename(norm))
        if os.path.lexists(old):
            shutil.rmtree(old)
        os.rename(norm, old)
    os.rename(staging, norm)
    if old:
        shutil.rmtree(old)
