# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The experiment's ``prefetch:`` section (module_utils/verl/hf_prefetch.py's input): read and checked by
:func:`normalize`, the one rule the experiment's validation and the hf_prefetch module share, one line per problem;
an item's name (:func:`label`) and the files it asks for (:func:`selected`, huggingface_hub's allow/ignore patterns);
and :func:`not_shared`, whether ``HF_HOME`` is where every node of the job will find the files.

hf_prefetch.py imports every public name of this file, and callers use them from there. Standard library only: this
runs on the controller (the experiment's validation) and on the node that prefetches.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

KINDS = (("models", "model"), ("datasets", "dataset"))
ITEM_KEYS = ("repo", "revision", "allow_patterns", "ignore_patterns")
SECTION_KEYS = ("models", "datasets", "hf_home")
# Hub repo ids: "name" or "owner/name"; the Hub itself refuses "--" and ".." in them, and both would make
# the cache folder name ambiguous or leave the cache.
REPO_RE = re.compile(r"^(?:[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/)?[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$")
REVISION_RE = re.compile(r"^[A-Za-z0-9_.][A-Za-z0-9_./-]{0,199}$")

# File systems every node of a cluster can mount: a cache there is shared even when it is not the checkpoints' volume.
NETWORK_FS = (
    "nfs",
    "nfs4",
    "cifs",
    "smb3",
    "lustre",
    "gpfs",
    "beegfs",
    "glusterfs",
    "ceph",
    "cephfs",
    "fuse.juicefs",
    "fuse.s3fs",
    "fuse.gcsfuse",
    "9p",
    "virtiofs",
    "weka",
    "wekafs",
)


def _mount_of(path, mounts_text):
    """``(mount point, fs type)`` of the mount holding ``path`` (the longest mount point that is a prefix of it)."""
    best = ("/", "")
    for line in mounts_text.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        point = parts[1].replace("\\040", " ")
        if (path == point or path.startswith(point.rstrip("/") + "/")) and len(point) >= len(best[0]):
            best = (point, parts[2])
    return best


def _existing(path):
    while not os.path.exists(path) and path not in ("/", ""):
        path = os.path.dirname(path)
    return path or "/"


def not_shared(hf_home: str, shared_path: str, mounts: str = "/proc/mounts") -> str | None:
    """None when ``hf_home`` is on the file system of ``shared_path`` (the volume every node mounts) or on a network
    file system; else the one line saying why the prefetch would help only the head."""
    home, shared = _existing(os.path.realpath(hf_home)), _existing(os.path.realpath(shared_path))
    if os.stat(home).st_dev == os.stat(shared).st_dev:
        return None
    try:
        with open(mounts) as f:
            text = f.read()
    except OSError:
        text = ""
    point, kind = _mount_of(home, text)
    if kind in NETWORK_FS:
        return None
    shared_point, shared_kind = _mount_of(shared, text)
    return (
        "prefetch: HF_HOME %s is on %s (%s), not on the shared volume (%s is on %s at %s): the job's other nodes "
        "would not find the files; set env.HF_HOME under %s (e.g. %s/hf_home)"
        % (
            hf_home,
            kind or "a local file system",
            point,
            shared_path,
            shared_kind or "a file system",
            shared_point,
            shared_point,
            shared_point.rstrip("/"),
        )
    )


def normalize(section: Any, err: Callable[[str], Any]) -> tuple[list[dict[str, Any]], str | None]:
    """``prefetch:`` as written -> (items, hf_home). Each problem goes to ``err`` as one line.

    An item is ``{"kind": "model"|"dataset", "repo", "revision", "allow_patterns", "ignore_patterns"}``;
    a plain string is a repository at ``main``."""
    items: list[dict[str, Any]] = []
    if section is None:
        return items, None
    if not isinstance(section, dict):
        err("prefetch: expected a mapping with models and/or datasets, got %s" % type(section).__name__)
        return items, None
    for key in section:
        if key not in SECTION_KEYS:
            err("prefetch: unknown key %r; allowed: %s" % (key, ", ".join(SECTION_KEYS)))
    hf_home = section.get("hf_home")
    if hf_home is not None and (not isinstance(hf_home, str) or not hf_home.startswith("/")):
        err(
            "prefetch.hf_home: expected an absolute path on the shared volume (e.g. /data/hf_home), got %r" % (hf_home,)
        )
        hf_home = None
    seen = set()
    for plural, kind in KINDS:
        entries = section.get(plural)
        if entries is None:
            continue
        if not isinstance(entries, list):
            err(
                "prefetch.%s: expected a list of repository ids (or mappings with repo:), got %s"
                % (plural, type(entries).__name__)
            )
            continue
        for i, entry in enumerate(entries):
            item = _item(entry, kind, "prefetch.%s[%d]" % (plural, i), err)
            if item is None:
                continue
            key = (kind, item["repo"], item["revision"])
            if key in seen:
                err("prefetch.%s[%d]: %s@%s is listed twice" % (plural, i, item["repo"], item["revision"]))
                continue
            seen.add(key)
            items.append(item)
    return items, hf_home


def _item(entry, kind, where, err):
    if isinstance(entry, str):
        entry = {"repo": entry}
    if not isinstance(entry, dict):
        err(
            "%s: expected a repository id like org/name or a mapping with repo:, got %s" % (where, type(entry).__name__)
        )
        return None
    bad = [k for k in entry if k not in ITEM_KEYS]
    if bad:
        err("%s: unknown key %r; allowed: %s" % (where, bad[0], ", ".join(ITEM_KEYS)))
        return None
    repo = entry.get("repo")
    if not isinstance(repo, str) or not REPO_RE.match(repo) or "--" in repo or ".." in repo:
        err(
            "%s: repo %r is not a Hugging Face repository id (org/name: letters, digits, '_', '-', '.'; no '--' or '..')"
            % (where, repo)
        )
        return None
    revision = entry.get("revision", "main")
    if (
        not isinstance(revision, str)
        or not REVISION_RE.match(revision)
        or ".." in revision
        or "//" in revision
        or revision.endswith("/")
    ):
        err("%s: revision %r is not a branch, tag or commit name" % (where, revision))
        return None
    item = {"kind": kind, "repo": repo, "revision": revision}
    for key in ("allow_patterns", "ignore_patterns"):
        value = entry.get(key)
        if value is None:
            item[key] = []
        elif isinstance(value, str):
            item[key] = [value]
        elif isinstance(value, list) and value and all(isinstance(p, str) and p for p in value):
            item[key] = list(value)
        else:
            err("%s: %s: expected a non-empty list of file patterns (like *.safetensors), got %r" % (where, key, value))
            return None
    return item


def sections(items: Iterable[Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Items back in the experiment's form, ``{"models": [...], "datasets": [...]}`` (what the module takes)."""
    out: dict[str, list[dict[str, Any]]] = dict((plural, []) for plural, dummy in KINDS)
    for item in items:
        out[item["kind"] + "s"].append(dict((k, v) for k, v in item.items() if k != "kind" and v != []))
    return out


def items_of(section: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The items of an already validated section (the experiment's ``prefetch``), with their kinds."""
    return normalize(dict((plural, section.get(plural) or []) for plural, dummy in KINDS), lambda msg: None)[0]


def label(item: Mapping[str, Any]) -> str:
    return "%s %s@%s" % (item["kind"], item["repo"], item["revision"])


def selected(paths: Iterable[str], item: Mapping[str, Any]) -> list[str]:
    """The repository files the item asks for (huggingface_hub's allow/ignore pattern semantics)."""
    out = []
    for path in paths:
        if item.get("allow_patterns") and not any(_match(path, p) for p in item["allow_patterns"]):
            continue
        if any(_match(path, p) for p in item.get("ignore_patterns") or ()):
            continue
        out.append(path)
    return out


def _match(path, pattern):
    if pattern.endswith("/"):
        pattern += "*"
    return fnmatch.fnmatch(path, pattern)
