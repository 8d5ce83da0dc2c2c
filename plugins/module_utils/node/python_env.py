# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""What a node's Python environment holds and needs, and its fingerprint.

Shared by the python_env_sync module (which installs the environment exactly) and the ray_node_state
module (which decides whether Ray must restart). Standard library only; whatever must be evaluated by
the environment's own interpreter (requirement markers, installed metadata) is done by INSPECT_SCRIPT,
run with that interpreter, and everything else (the choosing) is plain functions tested in tests/unit.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from typing import Any, Callable, Iterable, Mapping, Sequence

from ansible_collections.rlinfra.verl.plugins.module_utils.node.container import FINGERPRINT_PREFIX

# The environment's own tooling: never removed, whatever the requirement lists say.
TOOLING = ("pip", "setuptools", "wheel", "uv")
STATE_FILE_NAME = "rlinfra-state.json"

# Run by the environment's interpreter (json on stdin: {"roots": [...], "no_deps": [...]}, requirement strings). It parses with the
# `packaging` that pip vendors (pip is always in the venv), so markers are evaluated exactly as the
# installers evaluate them for this interpreter. Prints one JSON document, never raises.
INSPECT_SCRIPT = r"""
import json, re, sys
try:
    from pip._vendor.packaging.requirements import Requirement
except Exception:
    try:
        from packaging.requirements import Requirement
    except Exception:
        print(json.dumps({"error": "neither pip nor packaging is importable in this environment"}))
        sys.exit(0)
from importlib import metadata

def canon(name):
    return re.sub(r"[-_.]+", "-", name).lower()

def parse(text):
    try:
        return Requirement(text)
    except Exception:
        return None

def applies(marker, extra):
    if marker is None:
        return True
    try:
        return bool(marker.evaluate({"extra": extra}))
    except Exception:
        return True  # in doubt, keep what it names

def describe(text):
    req = parse(text)
    if req is None:
        return {"text": text, "name": None}
    return {"text": text, "name": canon(req.name), "extras": sorted(req.extras), "applies": applies(req.marker, "")}

query = json.load(sys.stdin)
roots = [describe(t) for t in query.get("roots", [])]
no_deps = [describe(t) for t in query.get("no_deps", [])]
dists = {}
for dist in metadata.distributions():
    name = dist.metadata["Name"]
    if not name or canon(name) in dists:
        continue
    extras = dist.metadata.get_all("Provides-Extra") or []
    requires = []
    for text in dist.requires or []:
        req = parse(text)
        if req is None:
            continue
        when = [e for e in [""] + extras if applies(req.marker, e)]
        if when:
            requires.append({"name": canon(req.name), "extras": sorted(req.extras), "when": when})
    dists[canon(name)] = {"name": name, "version": dist.version, "extras": extras, "requires": requires}
print(json.dumps({"roots": roots, "no_deps": no_deps, "dists": dists}))
"""


def canonical(name: str) -> str:
    """PEP 503 normalized project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_lines(packages: Iterable[Any] | None) -> list[str]:
    """The requirement strings of a list, without blanks, comments and option lines (--index-url ...)."""
    out = []
    for item in packages or []:
        text = str(item).strip()
        if text and not text.startswith(("#", "-")):
            out.append(text)
    return out


def needed(
    dists: Mapping[str, Any],
    roots: Iterable[Mapping[str, Any]],
    no_deps: Iterable[Mapping[str, Any]] = (),
    keep: Iterable[str] = TOOLING,
) -> set[str]:
    """Canonical names of the installed distributions the environment needs.

    ``dists``, ``roots`` and ``no_deps`` come from INSPECT_SCRIPT. Every root that applies is kept with what
    it requires (its extras' requirements too), recursively; a ``no_deps`` entry is kept alone (installed
    with --no-deps: what it would require is not its to keep); ``keep`` names (the venv's tooling) are kept
    with what they require. Names that are not installed are ignored.
    """
    keep_set: set[str]
    seen: set[tuple[str, str]]
    keep_set, seen = set(), set()
    stack = [(r["name"], r.get("extras", [])) for r in roots if r.get("name") and r.get("applies", True)]
    stack += [(canonical(n), []) for n in keep]
    keep_set.update(r["name"] for r in no_deps if r.get("name") in dists and r.get("applies", True))
    while stack:
        name, extras = stack.pop()
        dist = dists.get(name)
        if dist is None:
            continue
        keep_set.add(name)
        declared = {canonical(e): e for e in dist.get("extras", [])}
        active = {""} | {declared.get(canonical(e), e) for e in extras}
        new = [e for e in active if (name, e) not in seen]
        seen.update((name, e) for e in new)
        for req in dist.get("requires", []):
            if any(e in req["when"] for e in new):
                stack.append((req["name"], req.get("extras", [])))
    return keep_set


def unneeded(
    dists: Mapping[str, Any],
    roots: Sequence[Mapping[str, Any]],
    no_deps: Sequence[Mapping[str, Any]] = (),
    keep: Iterable[str] = TOOLING,
    ignore_missing: bool = False,
) -> tuple[list[str], str | None]:
    """(names to remove as installed, sorted; reason to remove nothing, or None).

    Nothing is removed when a requirement cannot be named (a bare path or URL) or when one that applies is
    not installed: what the environment needs is then unknown, and a guess could remove what a job imports.
    ``ignore_missing`` (a dry run, where the install has not happened) leaves the missing ones out instead.
    """
    entries = list(roots) + list(no_deps)
    unnamed = [r["text"] for r in entries if not r.get("name")]
    if unnamed:
        return [], (
            "cannot tell the project name of %s (write it as 'name @ URL'), so packages dropped from "
            "the lists are not removed" % ", ".join(repr(t) for t in unnamed)
        )
    missing = [r["text"] for r in entries if r.get("applies", True) and r["name"] not in dists]
    if missing and not ignore_missing:
        return [], "%s not installed, so packages dropped from the lists are not removed" % (
            ", ".join(repr(t) for t in missing)
        )
    keep_set = needed(dists, roots, no_deps, keep)
    return sorted((d["name"] for n, d in dists.items() if n not in keep_set), key=canonical), None


# uv lists what it changed (or would, with --dry-run) as " + name==1.0", " - name==0.9", " ~ name==1.0" (reinstalled).
UV_ITEM = re.compile(r"^ ([+~-]) (\S+)")


def uv_changes(stderr: str | None) -> tuple[list[str], list[str]]:
    """(installed, removed) lists of ``name==version`` from uv's report (real or --dry-run)."""
    installed: list[str]
    removed: list[str]
    installed, removed = [], []
    for line in (stderr or "").splitlines():
        m = UV_ITEM.match(line)
        if m:
            (removed if m.group(1) == "-" else installed).append(m.group(2))
    return installed, removed


def frozen_lines(text: str | None) -> list[str]:
    return sorted(line.strip() for line in (text or "").splitlines() if line.strip() and not line.startswith("#"))


def fingerprint(python_version: str | None, frozen: Iterable[str]) -> str:
    """sha256 of the interpreter's version line and the sorted frozen package set."""
    body = "python " + (python_version or "") + "\n" + "\n".join(sorted(frozen))
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


def inputs_digest(
    packages: Iterable[Any] | None,
    no_build_isolation: Iterable[Any] | None = (),
    no_deps: Iterable[Any] | None = (),
    python_version: str | None = None,
) -> str:
    """sha256 of what decides the environment: the three requirement lists (order does not matter) and the
    interpreter. The same inputs on the same interpreter install the same environment."""
    doc = {
        "packages": sorted(requirement_lines(packages)),
        "no_build_isolation": sorted(requirement_lines(no_build_isolation)),
        "no_deps": sorted(requirement_lines(no_deps)),
        "python": python_version or "",
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode("utf-8")).hexdigest()


def python_version(run: Callable[..., tuple[int, str, str]], python: str | None) -> str | None:
    """First line of ``python -VV`` (version and build), or None when the interpreter does not run."""
    if not python or not os.path.exists(python):
        return None
    rc, out, err = run([python, "-VV"])
    text = (out or err or "").strip()
    return text.splitlines()[0] if rc == 0 and text else None


def state_path(venv: str) -> str:
    return os.path.join(venv, STATE_FILE_NAME)


def read_json(path: str) -> dict[str, Any] | None:
    """The JSON object in ``path``, or None when it is missing or unreadable (a broken record is no record)."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def uv_wheel(names: Iterable[str], machine: str) -> str | None:
    """The uv wheel in a wheelhouse listing that runs on this machine (``os.uname().machine``), or None.
    Its ``uv`` binary is all a new environment needs to install the rest, pip included."""
    arch = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine.lower(), machine.lower())
    found = sorted(
        n for n in names if n.startswith("uv-") and n.endswith(".whl") and "linux" in n and n[:-4].endswith(arch)
    )
    return found[-1] if found else None


# Run by the new environment's interpreter: the wheels `python -m venv` would install (ensurepip's bundle,
# which Debian keeps in /usr/share/python-wheels), as [[name, version, path]]. Installing exactly these with
# uv gives the same environment as `python -m venv`, in a tenth of the time.
ENSUREPIP_SCRIPT = r"""
import ensurepip, json, os
try:
    if hasattr(ensurepip, "_get_packages"):
        packages = ensurepip._get_packages()
    else:
        packages = {"pip": ensurepip._get_usable_pip_package()}
    out = []
    for name, pkg in packages.items():
        path = pkg.wheel_path or os.path.join(os.path.dirname(ensurepip.__file__), "_bundled", pkg.wheel_name)
        out.append([name, pkg.version, str(path)])
except Exception:
    out = []
print(json.dumps(out))
"""


def ensurepip_wheels(text: str | None) -> list[tuple[str, str, str]] | None:
    """[(name, version, path)] from ENSUREPIP_SCRIPT's answer, or None when it is unusable (then ensurepip runs)."""
    try:
        rows = json.loads((text or "").strip().splitlines()[-1])
        wheels = [(str(n), str(v), str(p)) for n, v, p in rows]
    except (ValueError, IndexError, TypeError):
        return None
    if not wheels or not all(os.path.isfile(p) for dummy, dummy2, p in wheels):
        return None
    return wheels


def fast_path(record: Any, inputs: str, current_fingerprint: str) -> bool:
    """True when the environment holds what the last exact install of the same inputs left: nothing to do."""
    return bool(record) and record.get("inputs") == inputs and record.get("fingerprint") == current_fingerprint


def mismatch(host: str, mine: Mapping[str, Any], head: str, theirs: Mapping[str, Any]) -> str:
    """'' when ``host`` runs the environment of its cluster's ``head``; else the one line that says how they differ.
    ``mine`` / ``theirs``: ``{fingerprint, frozen, python_version}`` as python_env_sync returned them. A node whose
    environment is not there to read (check mode before its first converge: no fingerprint) is not compared."""
    if not mine.get("fingerprint") or not theirs.get("fingerprint") or mine["fingerprint"] == theirs["fingerprint"]:
        return ""
    image = FINGERPRINT_PREFIX  # the node runs a container image
    if str(mine["fingerprint"]).startswith(image) or str(theirs["fingerprint"]).startswith(image):

        def what(env):
            fp = str(env["fingerprint"])
            return (
                "image %s (%s)" % (fp[len(image) :][:12], ", ".join(env.get("frozen") or []) or "?")
                if fp.startswith(image)
                else "a venv (fingerprint %s)" % fp[:12]
            )

        return (
            "%s runs %s, head %s runs %s: every node of a cluster must run the same image. Re-run site.yml (each "
            "node loads ray_container_image_archive or pulls ray_container_image when it lacks it), or make "
            "ray_container_image and ray_container_image_archive the same for the whole cluster."
            % (host, what(mine), head, what(theirs))
        )
    frozen, ref = list(mine.get("frozen") or []), list(theirs.get("frozen") or [])
    interp = ""
    if mine.get("python_version") != theirs.get("python_version"):
        interp = "interpreter %s here, %s on the head; " % (mine.get("python_version"), theirs.get("python_version"))
    return (
        "%s runs a different Python environment than head %s (fingerprint %s vs %s): %sonly here: %s; only on the "
        "head: %s. Re-run site.yml, or fix python_env_packages (or python_env_python) for this host."
        % (
            host,
            head,
            str(mine["fingerprint"])[:12],
            str(theirs["fingerprint"])[:12],
            interp,
            ", ".join(x for x in frozen if x not in ref) or "-",
            ", ".join(x for x in ref if x not in frozen) or "-",
        )
    )
