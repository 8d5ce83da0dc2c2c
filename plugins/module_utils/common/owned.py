# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Removing or replacing a directory: only one this collection made, and never one that holds or lies inside an input.

Every removal of a directory a user can see (a merged model replaced by a new merge, the venv and Ray's temp dir
purged by a teardown) goes through :func:`check`, which refuses, in one line and before anything is touched:

* a path that is not absolute, holds ``..``, is a system or top-level directory;
* a path equal to, inside, or containing any of the operation's *inputs* (the checkpoints a merge reads, the venv it
  runs), compared as written and after resolving links;
* a symbolic link (removing through it would remove what it points at), a mount point (a volume) and a directory a
  volume is mounted below (``rmtree`` would go on into it);
* an existing directory that holds anything but is not marked as the collection's: one of ``markers`` (a file the
  collection writes there, such as ``.rlinfra-merge.json``) must be in it. An empty directory holds nothing to lose.

A marker proves only what the collection made. A directory it is merely given and then writes into (a venv created in
a directory that held a user's files, Ray's sessions in a temp dir that was already in use) is not made its own by
that: :func:`claim` marks a directory (:data:`CLAIM`) only when it makes it, or finds it empty.

Paths are compared as Linux reads them (:func:`vocabulary.normpath`: ``//mnt`` is ``/mnt``).

Temporary directories a process makes for itself (``tempfile.mkdtemp``) are not user data and need none of this; so
what is built to replace a directory, and the old one set aside, always go to such a directory made beside it
(:func:`staging`), never to a fixed name (``.model.merging``), which someone may have made, filled or pointed
elsewhere before: emptying, filling or removing it would then reach what is not ours. Standard library only
(vocabulary is too).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ansible_collections.rlinfra.verl.plugins.module_utils.common.files import write_atomic
from ansible_collections.rlinfra.verl.plugins.module_utils.common.vocabulary import normpath

SYSTEM = frozenset(
    (
        "/",
        "/bin",
        "/boot",
        "/dev",
        "/etc",
        "/home",
        "/lib",
        "/lib64",
        "/media",
        "/mnt",
        "/opt",
        "/proc",
        "/root",
        "/run",
        "/sbin",
        "/srv",
        "/sys",
        "/tmp",
        "/usr",
        "/var",
        "/workspace",
        "/data",
        "/usr/local",
        "/var/lib",
        "/var/tmp",
        "/var/log",
        "/opt/rlinfra",
    )
)

MOUNTINFO = "/proc/self/mountinfo"
# The marker of a directory this collection made (claim): the venv and Ray's temp dir a purge removes.
CLAIM = "rlinfra-owned.txt"


class NotOurs(Exception):
    """One line: which directory, why it is not removed, what to do."""


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _forms(path: str) -> set[str]:
    """The path as written (normalized) and with its links resolved."""
    norm = normpath(path)
    return {norm, os.path.realpath(norm)}


def _mounts_below(path: str) -> list[str]:
    """The mount points strictly below ``path`` (from /proc/self/mountinfo; none where it cannot be read)."""
    try:
        with open(MOUNTINFO) as f:
            points = [line.split()[4] for line in f if len(line.split()) > 4]
    except OSError:
        return []
    # mountinfo writes a space, tab, newline or backslash in a path as its octal code (\040)
    points = [re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), p) for p in points]
    real = os.path.realpath(path).rstrip("/") + "/"
    return sorted(p for p in points if p.startswith(real))


def check(
    path: Any,
    markers: Sequence[str],
    inputs: Iterable[Sequence[Any]] = (),
    what: str = "directory",
    fix: str = "",
    verb: str = "replace",
) -> bool:
    """Raise :class:`NotOurs` unless ``path`` may be removed or replaced (see the module's docstring). ``inputs``:
    ``(label, path)`` pairs the operation reads, or ``(label, path, why)`` (``why``: "which is kept");
    ``fix``: what the user can do, appended to the line; ``verb``: "replace" or "remove"."""
    tail = "; %s" % fix if fix else ""
    if not isinstance(path, str) or not path.startswith("/") or ".." in path.split("/"):
        raise NotOurs("refusing to %s the %s %r: not an absolute path without '..'%s" % (verb, what, path, tail))
    norm = normpath(path)
    head = "refusing to %s the %s %s" % (verb, what, norm)
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
    below = _mounts_below(norm)
    if below:
        raise NotOurs("%s: a volume is mounted below it (%s)%s" % (head, below[0], tail))
    try:
        entries = os.listdir(norm)
    except OSError as e:
        raise NotOurs("%s: it cannot be read (%s)%s" % (head, e.strerror, tail)) from e
    if entries and not any(m in entries for m in markers):
        raise NotOurs(
            "%s: it holds files but not %s, so it was not made by rlinfra%s" % (head, " or ".join(markers), tail)
        )
    return True


def remove(
    path: str, markers: Sequence[str], inputs: Iterable[Sequence[Any]] = (), what: str = "directory", fix: str = ""
) -> bool:
    """Remove ``path`` after :func:`check`; False when there was nothing."""
    if not check(path, markers, inputs, what, fix, verb="remove"):
        return False
    shutil.rmtree(normpath(path))
    return True


def remove_dir(params: Mapping[str, Any], module: Any) -> dict[str, Any]:
    """The ``owned_dir`` module's work (``state=absent``): the directory ``path``, or each of ``dirs``, removed when it
    proves to be ours (checked only, in check mode); every one is checked before any goes. ``failed`` and ``msg`` when
    one does not prove so, or cannot be removed."""
    if (params.get("path") is None) == (not params.get("dirs")):
        return dict(failed=True, msg="owned_dir: give either path (with markers) or dirs", removed=False)
    if params.get("dirs"):
        dirs = [dict(d, what=d.get("what") or "directory") for d in params["dirs"]]
    elif not params.get("markers"):
        return dict(failed=True, msg="owned_dir: markers must be given with path", removed=False)
    else:
        dirs = [dict(path=params["path"], markers=params["markers"], what=params["what"])]
    inputs = [("the kept directory", k, "which a teardown never removes") for k in params["keep"]]
    gone: list[str] = []
    d: dict[str, Any] = dirs[0]
    try:
        present = []
        for d in dirs:
            if check(d["path"], d["markers"], inputs, d["what"], verb="remove"):
                present.append(d)
        for d in present:
            if not module.check_mode:
                remove(d["path"], d["markers"], inputs, d["what"])
            gone.append(d["path"])
    except NotOurs as e:
        return dict(failed=True, msg=str(e), removed=bool(gone), paths=gone, changed=bool(gone))
    except OSError as e:
        return dict(
            failed=True,
            msg="the %s %s could not be removed: %s" % (d["what"], d["path"], e.strerror or e),
            removed=bool(gone),
            paths=gone,
            changed=bool(gone),
        )
    return dict(changed=bool(gone), removed=bool(gone), paths=gone)


def claim(path: str, mode: int = 0o755, check_mode: bool = False) -> bool:
    """Make ``path`` the collection's own where nothing of anyone else's is in it: a missing or empty directory is made
    (with its parents) and given :data:`CLAIM`; one that holds it already is ours. True when it is (would be) ours;
    False for a link, a file, or a directory holding anything else, which stays its owner's and is never removed."""
    norm = normpath(path)
    if os.path.islink(norm) or (os.path.lexists(norm) and not os.path.isdir(norm)):
        return False
    if os.path.isdir(norm):
        entries = os.listdir(norm)
        if CLAIM in entries:
            return True
        if entries:
            return False
    if not check_mode:
        os.makedirs(norm, mode=mode, exist_ok=True)
        write_atomic(
            os.path.join(norm, CLAIM),
            "made by rlinfra.verl; a teardown with purge removes it as a whole (docs/SECURITY.md)\n",
            0o644,
        )
    return True


def claimed(path: str) -> bool:
    """Whether ``path`` is a directory :func:`claim` made ours (its marker a file, not a link)."""
    marker = os.path.join(normpath(path), CLAIM)
    return not os.path.islink(normpath(path)) and os.path.isfile(marker) and not os.path.islink(marker)


def staging(path: str, mode: int = 0o755) -> str:
    """A new empty directory beside ``path`` (made when missing with its parents), made by this process, for what
    will replace ``path`` (see the module's docstring); ``mode``: the replacement's, as it will be seen."""
    norm = normpath(path)
    parent = os.path.dirname(norm)
    os.makedirs(parent, mode=0o755, exist_ok=True)
    made = tempfile.mkdtemp(dir=parent, prefix=".%s.staging-" % os.path.basename(norm))
    os.chmod(made, mode)
    return made


def replace(
    staging: str,
    path: str,
    markers: Sequence[str],
    inputs: Iterable[Sequence[Any]] = (),
    what: str = "directory",
    fix: str = "",
) -> None:
    """Put the complete directory ``staging`` at ``path``, after :func:`check` of ``path``."""
    norm = normpath(path)
    aside = None
    if check(norm, markers, inputs, what, fix):
        # Aside first, so that the path is never missing for longer than two renames; into a directory of this
        # process's own, so that nothing already there is removed with it.
        aside = tempfile.mkdtemp(dir=os.path.dirname(norm), prefix=".%s.replaced-" % os.path.basename(norm))
        os.rename(norm, os.path.join(aside, "old"))
    os.rename(staging, norm)
    if aside:
        shutil.rmtree(aside)
