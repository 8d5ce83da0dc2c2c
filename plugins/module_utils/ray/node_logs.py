# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Per-node log bundles of one Ray job (module ``rlinfra.verl.ray_node_logs``): which files of a node
belong to the job, reading a bounded tail of each, masking secret values in the bytes before they
leave the node, and packing them into a private tar.gz.

Ray's layout (checked on Ray 2.60), under ``<temp dir>/session_latest/logs`` (``session_latest`` is a
symlink to the newest ``session_<date>`` directory; a restarted node starts a new one):

* ``raylet.out`` / ``raylet.err`` on every node, ``gcs_server.out`` / ``gcs_server.err`` on the head;
* ``job-driver-<submission_id>.log``: the driver's output, on the node that ran the driver;
* ``worker-<worker id>-<job id hex>-<pid>.out`` / ``.err``: the job's tasks and actors on that node;
* ``runtime_env_setup-<job id hex>.log``: the job's runtime_env setup (it records env_vars).

Only the standard library: this runs on the nodes.
"""

from __future__ import annotations

import io
import json
import os
import re
import stat
import tarfile
import time
from typing import IO, Any, Callable, Iterable, Mapping, Sequence, cast

from ansible_collections.rlinfra.verl.plugins.module_utils.common import secret_names
from ansible_collections.rlinfra.verl.plugins.module_utils.common.files import env_items
from ansible_collections.rlinfra.verl.plugins.module_utils.common.masking import mask_partial_tail, redact_bytes
from ansible_collections.rlinfra.verl.plugins.module_utils.ray import client as ray_client

DEFAULT_TEMP_DIR = "/workspace/ray"
FACT_PATH = ray_client.FACT_PATH
DEFAULT_TOKEN_PATH = "/etc/ray/auth_token"
SECRETS_ENV_NAME = "ray-secrets.env"
MIB = 1024 * 1024
DAEMON_LOGS = ("raylet.out", "raylet.err", "gcs_server.out", "gcs_server.err")
JOB_ID_RE = re.compile(r"^[0-9a-fA-F]{2,64}$")
# Ray's submission ids are free text, but the collection's are rlinfra-<exp>-<cluster>[-<run>][-aN].
SUBMISSION_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,200}$")
BUNDLE_ROOT_RE = re.compile(r"^(?!\.\.?$)[A-Za-z0-9._-]{1,200}$")
KERNEL_FILE = "kernel.log"
MANIFEST_FILE = "MANIFEST.json"


class NodeLogsError(Exception):
    """A bad input; ``str()`` is one line fit for ``fail_json``."""


# Secrets -----------------------------------------------------------------------------------------


def secret_variants(values: Iterable[Any] | None) -> list[bytes]:
    """The byte strings to mask for ``values``: each value as is and as it appears inside a JSON
    string (Ray's logs print runtime_envs as JSON), longest first, empty values dropped."""
    out = set()
    for value in values or []:
        if value is None:
            continue
        text = str(value).strip()
        if not text:
            continue
        out.add(text.encode("utf-8"))
        out.add(json.dumps(text)[1:-1].encode("utf-8"))
    return sorted(out, key=lambda v: (-len(v), v))


# Names of variables whose values are masked wherever a log shows them as a JSON/Python mapping entry
# ("HF_TOKEN": "...") or an environment assignment (HF_TOKEN=...), known values or not: the daemon
# logs of a node may print the runtime_env of any job, other experiments' secrets included.
DEFAULT_SECRET_NAME_PATTERN = secret_names.SECRET_NAME_PATTERN


def name_maskers(pattern: str = DEFAULT_SECRET_NAME_PATTERN) -> list[re.Pattern[bytes]]:
    """Compiled expressions whose group ``value`` is a secret by its name; [] for an empty pattern."""
    if not pattern:
        return []
    kw = pattern.encode("utf-8")
    return [
        # "NAME": "value", 'NAME': 'value', "NAME"="value" (any case)
        re.compile(
            rb"""(["'])[A-Za-z0-9_.-]*(?i:(?:%s))[A-Za-z0-9_.-]*\1\s*[:=]\s*(?P<q>["'])"""
            rb"""(?P<value>(?:(?!(?P=q))[^\\\n]|\\.)+)(?P=q)""" % kw
        ),
        # NAME=value, environment style (upper-case names only: code such as key=... is left alone)
        re.compile(rb"""(?<![A-Za-z0-9_])[A-Z0-9_]*(?:%s)[A-Z0-9_]*=(?P<value>[^\s"',;]+)""" % kw),
        # Authorization: Bearer <token>
        re.compile(rb"""[Bb]earer\s+(?P<value>[A-Za-z0-9._~+/=-]{8,})"""),
    ]


def read_env_file_values(path: str) -> list[str]:
    """Values of ``KEY=VALUE`` lines (values JSON-quoted as ray.env.j2 writes them); [] if unreadable."""
    try:
        with open(path, "rb") as f:
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return []
    return [value for dummy, value in env_items(text) if value]


def read_secret_file(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace").strip()
    except OSError:
        return ""


def read_fact(path: str | None = None) -> dict[str, Any]:
    """The node's rlinfra_ray local fact (written by site.yml), {} when absent or unreadable."""
    try:
        return ray_client.local_ray_fact(path or FACT_PATH)
    except ray_client.RayError:  # logs are gathered on a broken node too: the fact only gives defaults
        return {}


# Choosing the files ------------------------------------------------------------------------------


def validate_ids(submission_id: str | None, job_id: str | None) -> None:
    if not SUBMISSION_ID_RE.match(submission_id or ""):
        raise NodeLogsError(
            "submission_id %r is not a Ray submission id (letters, digits, '_', '.', ':', '-')" % (submission_id,)
        )
    if job_id and not JOB_ID_RE.match(job_id):
        raise NodeLogsError(
            "job_id %r is not a hex Ray job id (e.g. 02000000, the job_id of GET /api/jobs/<id>)" % (job_id,)
        )


def sessions(temp_dir: str) -> tuple[str | None, list[str]]:
    """(latest session directory or None, every session directory newest first) under ``temp_dir``."""
    latest = None
    link = os.path.join(temp_dir, "session_latest")
    if os.path.isdir(link):
        latest = os.path.realpath(link)
    found = []
    try:
        names = os.listdir(temp_dir)
    except OSError:
        names = []
    for name in names:
        path = os.path.join(temp_dir, name)
        if (
            name.startswith("session_")
            and name != "session_latest"
            and not os.path.islink(path)
            and os.path.isdir(os.path.join(path, "logs"))
        ):
            found.append(os.path.realpath(path))
    found.sort(key=lambda p: (_mtime(p), p), reverse=True)
    if latest and latest not in found and os.path.isdir(os.path.join(latest, "logs")):
        found.insert(0, latest)
    return latest, found


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0


def _regular(path: str) -> os.stat_result | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st if stat.S_ISREG(st.st_mode) else None


def job_file_names(names: Sequence[str], submission_id: str, job_id: str | None) -> list[str]:
    """The names among ``names`` (one session's logs) that belong to the job: its driver log, and
    with the hex ``job_id`` its worker logs, their core-worker logs, the driver's core log and the
    runtime_env setup log."""
    driver = "job-driver-%s.log" % submission_id
    out = [n for n in names if n == driver]
    if job_id:
        job_id = job_id.lower()
        worker = re.compile(r"^worker-([0-9a-f]+)-%s-([0-9]+)\.(?:out|err)$" % re.escape(job_id))
        core = set()
        for n in names:
            m = worker.match(n)
            if m:
                out.append(n)
                core.add("python-core-worker-%s_%s.log" % m.groups())
        core_driver = re.compile(r"^python-core-driver-%sf+_[0-9]+\.log$" % re.escape(job_id))
        out += [n for n in names if n in core or core_driver.match(n) or n == "runtime_env_setup-%s.log" % job_id]
    return out


def _session_files(session: str) -> dict[str, str]:
    """name -> path of the files in a session's logs/ and logs/old/ (Ray's log monitor moves the
    logs of dead workers to old/; a name in logs/ wins)."""
    logs = os.path.join(session, "logs")
    found = {}
    for directory in (os.path.join(logs, "old"), logs):
        try:
            names = os.listdir(directory)
        except OSError:
            continue
        for name in names:
            found[name] = os.path.join(directory, name)
    return found


def plan(
    temp_dir: str, submission_id: str, job_id: str | None, extra_patterns: Iterable[str] = ()
) -> list[dict[str, Any]]:
    """What to collect: a list of dicts ``{source, name, kind, size, mtime, latest}``, most useful
    first. Files of the newest session keep their names; files of an older session in which the job
    ran (the node restarted since) go under ``<session_dir_name>/``, with that session's daemon logs."""
    latest, every = sessions(temp_dir)
    entries = []
    for session in every:
        files = _session_files(session)
        names = sorted(files)
        job_names = job_file_names(names, submission_id, job_id)
        if session != latest and not job_names:
            continue
        extra = [n for n in names if any(re.fullmatch(p, n) for p in extra_patterns)]
        prefix = "" if session == latest else os.path.basename(session) + "/"
        for kind, chosen in (("ray", [n for n in DAEMON_LOGS if n in files]), ("job", job_names), ("extra", extra)):
            for name in chosen:
                st = _regular(files[name])
                if st is None:
                    continue  # a symlink or a vanished file: never followed
                entries.append(
                    dict(
                        source=files[name],
                        name=prefix + name,
                        kind=kind,
                        size=st.st_size,
                        mtime=int(st.st_mtime),
                        latest=session == latest,
                    )
                )
    seen = set()
    # seen.add() gives None: it only marks the name as seen (mypy: func-returns-value)
    unique = [e for e in entries if not (e["name"] in seen or seen.add(e["name"]))]  # type: ignore[func-returns-value]

    def rank(e):
        base = e["name"].rsplit("/", 1)[-1]
        first = e["kind"] == "ray" or base.startswith(("job-driver-", "runtime_env_setup-"))
        return (not e["latest"], 0 if first else 1 if e["kind"] == "job" else 2, -e["mtime"], e["name"])

    return sorted(unique, key=rank)


def read_tail(path: str, max_bytes: int) -> tuple[bytes, int, bool]:
    """The last ``max_bytes`` of a file, starting at a line boundary when cut; (bytes, size, truncated)."""
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        if size <= max_bytes:
            f.seek(0)
            return f.read(max_bytes + 1)[:max_bytes] if size else b"", size, False
        f.seek(size - max_bytes)
        data = f.read(max_bytes)
    return data, size, True


def cut_to_line(data: bytes, longest_secret: int) -> bytes:
    """Drop the partial first line of a cut tail (it could hold the end of a secret); a tail without
    any newline loses as many bytes as the longest secret instead."""
    nl = data.find(b"\n")
    if nl >= 0:
        return data[nl + 1 :]
    return data[max(longest_secret - 1, 0) :]


# The kernel log ----------------------------------------------------------------------------------


def boot_time(path: str = "/proc/stat") -> float | None:
    """The node's boot as epoch seconds (``btime`` in /proc/stat), what plain dmesg's times count from; None unread."""
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def kernel_log(
    run: Callable[[list[str]], tuple[int, str, str]], lines: int, get_bin_path: Callable[[str], str | None]
) -> tuple[str | None, str | None, list[str]]:
    """The last ``lines`` lines of the kernel log (OOM kills, GPU Xid errors): dmesg, else
    journalctl -k. ``run(argv) -> (rc, out, err)``. Returns (text or None, source, notes)."""
    notes = []
    attempts = []
    dmesg = get_bin_path("dmesg")
    if dmesg:
        # -T (wall-clock times) is missing from some dmesg builds: then plain dmesg.
        attempts += [("dmesg -T", [dmesg, "-T"]), ("dmesg", [dmesg])]
    journalctl = get_bin_path("journalctl")
    if journalctl:
        attempts.append(("journalctl -k", [journalctl, "-k", "-b", "--no-pager", "-o", "short-iso", "-n", str(lines)]))
    if not attempts:
        notes.append("neither dmesg nor journalctl is installed")
    denied = False
    for label, argv in attempts:
        if denied and label == "dmesg":
            continue  # the same permission problem again
        try:
            rc, out, err = run(argv)
        except Exception as e:  # a missing or broken binary must not stop the collection
            notes.append("%s: %s" % (label, e))
            continue
        text = out or ""
        if rc != 0:
            reason = (err or text or "exit %d" % rc).strip().splitlines()[-1]
            reason = reason.split(": ", 1)[1] if reason.startswith(("dmesg: ", "journalctl: ")) else reason
            denied = denied or "not permitted" in reason.lower() or "denied" in reason.lower()
            notes.append("%s: %s" % (label.split()[0], reason[:200]))
            continue
        kept = [ln for ln in text.splitlines() if ln.strip() and ln.strip() != "-- No entries --"]
        if not kept:
            notes.append("%s: no entries" % label)
            continue
        return "\n".join(kept[-lines:]) + "\n", label, notes
    return None, None, notes


# Packing -----------------------------------------------------------------------------------------


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes, mtime: float) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o600
    info.mtime = mtime
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    tar.addfile(info, io.BytesIO(data))


def _add_dir(tar: tarfile.TarFile, name: str, mtime: float) -> None:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    info.mode = 0o700
    info.mtime = mtime
    tar.addfile(info)


def collect(
    entries: Iterable[Mapping[str, Any]],
    variants: Sequence[bytes],
    max_file_bytes: int,
    max_total_bytes: int,
    kernel: str | None = None,
    maskers: Sequence[re.Pattern[bytes]] = (),
    read: Callable[[str, int], tuple[bytes, int, bool]] = read_tail,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, bytes]]:
    """Read, cut and redact the planned entries within the budgets. Returns (files, skipped, blobs)
    where ``files`` describe what was kept (no content), ``blobs`` maps names to redacted bytes."""
    longest = max((len(v) for v in variants), default=0)
    files, skipped, blobs = [], [], {}
    total = 0
    items = list(entries)
    if kernel is not None:
        # Small and often the answer (an OOM kill, a GPU Xid): first, before the budget runs out.
        items.insert(
            0,
            dict(
                name=KERNEL_FILE,
                kind="kernel",
                data=kernel.encode("utf-8", "replace"),
                source=None,
                mtime=int(time.time()),
            ),
        )
    for entry in items:
        remaining = max_total_bytes - total
        if remaining <= 0 or (entry["kind"] != "ray" and remaining < 1024):
            skipped.append(dict(name=entry["name"], size=entry.get("size"), reason="node budget reached"))
            continue
        limit = min(max_file_bytes, remaining)
        if "data" in entry:
            raw = entry["data"]
            size, truncated = len(raw), len(raw) > limit
            raw = raw[-limit:] if truncated else raw
        else:
            try:
                raw, size, truncated = read(entry["source"], limit)
            except OSError as e:
                skipped.append(dict(name=entry["name"], size=entry.get("size"), reason="unreadable: %s" % e.strerror))
                continue
        if truncated:
            raw = cut_to_line(raw, longest)
        data, count = redact_bytes(raw, variants, maskers)
        data, partial = mask_partial_tail(data, variants)
        blobs[entry["name"]] = data
        total += len(data)
        files.append(
            dict(
                name=entry["name"],
                source=entry["source"],
                kind=entry["kind"],
                size=size,
                kept_bytes=len(data),
                truncated=truncated,
                redactions=count + partial,
            )
        )
    return files, skipped, blobs


def pack(
    path: str, blobs: Mapping[str, bytes], manifest: Any, mtimes: Mapping[str, float] | None = None, root: str = ""
) -> int:
    """Write a tar.gz of ``blobs`` plus MANIFEST.json, all under ``root/`` when given: files 0600,
    directories 0700, owned by 0, no links."""
    mtimes = mtimes or {}
    now = int(time.time())
    prefix = root + "/" if root else ""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz") as tar:
        dirs = {prefix + n.rsplit("/", 1)[0] for n in blobs if "/" in n}
        if root:
            dirs.add(root)
        for d in sorted(dirs):
            _add_dir(tar, d, now)
        for name in sorted(blobs):
            _add_bytes(tar, prefix + name, blobs[name], mtimes.get(name, now))
        _add_bytes(
            tar, prefix + MANIFEST_FILE, (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode("utf-8"), now
        )
    return os.path.getsize(path)


def unpack(data: bytes, dest: str) -> tuple[list[str], list[str]]:
    """Unpack a bundle made by :func:`pack` (bytes of a tar.gz) into ``dest`` on the controller:
    directories 0700 (``dest`` and the ones made on the way to it too), files 0600, nothing outside ``dest``. Returns ``(files, refused)``: the names
    written, and the names left out - absolute, with ``..``, links, devices, or under a link."""
    missing = []
    path = os.path.abspath(dest)
    while not os.path.isdir(path):
        missing.append(path)
        path = os.path.dirname(path)
    for path in reversed(missing):  # every directory made here is private, not only the last one
        os.mkdir(path, 0o700)
    os.chmod(dest, 0o700)
    root = os.path.realpath(dest)
    files, refused = [], []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for member in tar:
            parts = [p for p in member.name.split("/") if p not in ("", ".")]
            target = os.path.join(root, *parts) if parts else root
            if member.name.startswith("/") or ".." in parts or not parts or not (member.isfile() or member.isdir()):
                refused.append(member.name)
                continue
            parent = os.path.dirname(target)
            for i in range(1, len(parts)):
                step = os.path.join(root, *parts[:i])
                if not os.path.isdir(step) and not os.path.lexists(step):
                    os.mkdir(step, 0o700)
            if os.path.realpath(parent if member.isfile() else target) != (parent if member.isfile() else target):
                refused.append(member.name)  # a directory on the way is a link
                continue
            if member.isdir():
                if not os.path.isdir(target):
                    os.mkdir(target, 0o700)
                os.chmod(target, 0o700)
                continue
            if os.path.islink(target):
                os.unlink(target)
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
            with os.fdopen(fd, "wb") as out, cast(IO[bytes], tar.extractfile(member)) as src:  # a file: never None
                while True:
                    chunk = src.read(1 << 20)
                    if not chunk:
                        break
                    out.write(chunk)
            os.chmod(target, 0o600)
            files.append("/".join(parts))
    return files, refused
