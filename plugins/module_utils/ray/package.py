# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Ship a local ``working_dir`` to a Ray cluster the way ``ray job submit`` does, without ``import ray``.

* :func:`build_package` zips a directory deterministically (sorted entries, fixed timestamps and
  permissions), leaving out excluded paths (checkpoints and ``*.safetensors`` always), and stops
  as soon as the zip grows past the size Ray accepts.
* :func:`package_uri` names the zip by content, ``gcs://_ray_pkg_<sha1>.zip`` (the scheme Ray's
  ``get_uri_for_package`` uses), so the same files always give the same URI.
* :func:`ensure_package` uploads it through the dashboard's package API with the shared Ray
  client (``GET /api/packages/gcs/<name>``: 200 when present, 404 when absent; ``PUT`` the zip bytes).

Standard library only: the HTTP is the caller's client.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import io
import os
import re
import stat
import zipfile
from typing import Any, Iterable, Iterator, Sequence

from ansible_collections.rlinfra.verl.plugins.module_utils.common.vocabulary import leads_outside

# Ray 2.60, ray/_private/runtime_env/packaging.py: GCS_STORAGE_MAX_SIZE is the gRPC message limit,
# GRPC_CPP_MAX_MESSAGE_SIZE = 512 MiB (packages of that size or more are refused).
GCS_STORAGE_MAX_SIZE = 512 * 1024 * 1024
# Ray 2.60, ray/_private/ray_constants.py: DASHBOARD_CLIENT_MAX_SIZE = 100 MiB is aiohttp's
# client_max_size for the dashboard; the package PUT (the path `ray job submit` uses too) is refused
# above it, so this is the limit that applies to a working_dir uploaded through the dashboard.
DASHBOARD_CLIENT_MAX_SIZE = 100 * 1024 * 1024
RAY_PACKAGE_MAX_BYTES = min(GCS_STORAGE_MAX_SIZE - 1, DASHBOARD_CLIENT_MAX_SIZE)

RAY_PKG_PREFIX = "_ray_pkg_"
# Always left out of a working_dir: checkpoints and model weights belong on the shared volume.
ALWAYS_EXCLUDED = ("checkpoints/", "*.safetensors")
DEFAULT_EXCLUDES = ALWAYS_EXCLUDED + (".git/", "__pycache__/", "*.pyc", ".venv/", ".pytest_cache/")

_ZIP_DATE = (1980, 1, 1, 0, 0, 0)  # the earliest date a zip can hold: timestamps never change the hash
_URI = re.compile(r"^gcs://(%s[0-9a-f]{40}\.zip)$" % RAY_PKG_PREFIX)


class PackageError(Exception):
    """A working_dir that cannot be packaged or uploaded; ``str()`` is one line."""


class PackageTooLarge(PackageError):
    def __init__(self, msg: str, size: int):
        super().__init__(msg)
        self.size = size


class DestError(OSError):
    """The zip could not be written to ``dest`` (a full disk, a read-only directory): the fault of where it goes, never
    of the working_dir, so the caller names the setting of that place, not the experiment."""


@contextlib.contextmanager
def _writing(path: str | None) -> Iterator[None]:
    try:
        yield
    except DestError:
        raise
    except OSError as e:
        raise DestError(e.errno, e.strerror or str(e), path) from e


def excludes_item(rel: str) -> str:
    """``rel`` as an item of the experiment's ``excludes`` list, for a line that suggests one."""
    return '"%s"' % rel.replace("\\", "\\\\").replace('"', '\\"')


def _link_out(root: str, rel: str) -> PackageError:
    return PackageError(
        "working_dir %s: %s leads outside it through a symbolic link, and a job is sent only the "
        "working_dir's own files: copy what it needs into the working_dir, or leave the link out with "
        "the experiment's excludes (e.g. excludes: [%s])" % (root, rel, excludes_item(rel))
    )


def mib(n: float) -> str:
    return "%.1f MiB" % (n / 1024.0 / 1024.0)


def _matches(pattern: str, rel: str, name: str, is_dir: bool) -> bool:
    """gitignore-like matching of one pattern against a path relative to the root."""
    pattern = pattern.strip()
    if not pattern:
        return False
    dir_only = pattern.endswith("/")
    pattern = pattern.rstrip("/")
    if dir_only and not is_dir:
        return False
    if "/" in pattern:  # anchored at the root of the working_dir
        return fnmatch.fnmatchcase(rel, pattern.lstrip("/"))
    return fnmatch.fnmatchcase(name, pattern)


def is_excluded(rel: str, is_dir: bool, excludes: Iterable[str]) -> bool:
    name = rel.rsplit("/", 1)[-1]
    return any(_matches(p, rel, name, is_dir) for p in excludes)


def iter_entries(root: str, excludes: Sequence[str] = DEFAULT_EXCLUDES) -> Iterator[tuple[str, str, bool]]:
    """Yield ``(relative posix path, absolute path, is_dir)`` in a stable order.

    Directories are yielded only when empty (as Ray does); excluded directories are not entered;
    symlinks to files are followed, symlinks to directories are not entered, links that lead
    nowhere are left out. A link (not excluded) that leads outside ``root`` is :class:`PackageError`:
    through it, the package would carry another directory's files (``/etc/passwd``, all of ``/``).
    """
    root = os.path.abspath(root)
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        rel_dir = os.path.relpath(dirpath, root).replace(os.sep, "/")
        rel_dir = "" if rel_dir == "." else rel_dir + "/"
        kept = []
        for d in sorted(dirnames):
            full = os.path.join(dirpath, d)
            if is_excluded(rel_dir + d, True, excludes):
                continue
            if os.path.islink(full):
                if leads_outside(full, root):
                    raise _link_out(root, rel_dir + d)
                continue
            kept.append(d)
        dirnames[:] = kept
        files = [f for f in sorted(filenames) if not is_excluded(rel_dir + f, False, excludes)]
        for f in files:
            full = os.path.join(dirpath, f)
            if os.path.islink(full) and leads_outside(full, root):
                raise _link_out(root, rel_dir + f)
        files = [f for f in files if os.path.isfile(os.path.join(dirpath, f))]  # skips broken links, fifos
        if rel_dir and not kept and not files and not filenames:
            yield rel_dir, dirpath, True
        for f in files:
            yield rel_dir + f, os.path.join(dirpath, f), False


class _Counter(io.RawIOBase):
    """Write-only sink that hashes and counts what the zip writer produces."""

    def __init__(self, limit, sink=None, path=None):
        self.size = 0
        self.limit = limit
        self.sha1 = hashlib.sha1()
        self.sink = sink
        self.path = path  # the file the sink writes, named by a DestError

    def writable(self):
        return True

    def write(self, b):
        b = bytes(b)
        self.size += len(b)
        if self.limit is not None and self.size > self.limit:
            raise PackageTooLarge("", self.size)
        self.sha1.update(b)
        if self.sink is not None:
            with _writing(self.path):
                self.sink.write(b)
        return len(b)


def build_package(
    root: str,
    excludes: Iterable[str] | None = None,
    max_bytes: int = RAY_PACKAGE_MAX_BYTES,
    dest: str | None = None,
    experiments_dir: str | None = None,
) -> dict[str, Any]:
    """Zip ``root`` deterministically.

    ``excludes`` are added to :data:`DEFAULT_EXCLUDES`. Writes the zip to ``dest`` (a path) when
    given, else keeps it in memory. Returns a dict: ``uri``, ``size``, ``files``, ``sha1``, and
    ``data`` (bytes, only without ``dest``). Raises :class:`PackageTooLarge` past ``max_bytes``,
    :class:`PackageError` when ``root`` leads out of ``experiments_dir`` (when given) or holds a link
    out of itself, and :class:`DestError` when ``dest`` cannot be written.
    """
    if experiments_dir and leads_outside(root, experiments_dir):
        raise PackageError(
            "working_dir %s leads outside the experiments directory %s through a symbolic link; copy "
            "its files into the experiments directory (a job is sent only what lies inside it)"
            % (root, experiments_dir)
        )
    if not os.path.isdir(root):
        raise PackageError("working_dir %s is not a directory" % root)
    patterns = tuple(DEFAULT_EXCLUDES) + tuple(excludes or ())
    part = None if dest is None else dest + ".part"
    if part is None:
        sink: Any = io.BytesIO()  # else the file at part: read back only when in memory
    else:
        with _writing(part):
            sink = open(part, "wb")
    counter = _Counter(max_bytes, sink, part)
    files = 0
    out: Any  # a member's writer in the loop below, then the dict returned
    try:
        with zipfile.ZipFile(counter, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as zf:
            for rel, full, is_dir in iter_entries(root, patterns):
                info = zipfile.ZipInfo(rel, date_time=_ZIP_DATE)
                info.create_system = 3  # unix, so that the permission bits below are honoured
                if is_dir:
                    info.external_attr = (stat.S_IFDIR | 0o755) << 16 | 0x10
                    zf.writestr(info, b"")
                    continue
                mode = 0o755 if os.stat(full).st_mode & 0o111 else 0o644
                info.external_attr = (stat.S_IFREG | mode) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                info.file_size = os.path.getsize(full)
                with open(full, "rb") as src, zf.open(info, "w") as out:
                    while True:
                        chunk = src.read(1 << 20)
                        if not chunk:
                            break
                        out.write(chunk)
                files += 1
        if part is not None:
            if dest is None:  # never: part is made from dest (for the type checker)
                raise AssertionError("dest is set here")
            with _writing(part):
                sink.close()
                os.chmod(part, 0o600)
                os.replace(part, dest)
    except PackageTooLarge as e:
        _drop(sink, part)
        raise PackageTooLarge(
            "working_dir %s zips to more than %s, over Ray's limit for a working_dir "
            "uploaded through the dashboard (%s); move large files to the shared volume or "
            "add them to excludes" % (root, mib(max_bytes), mib(RAY_PACKAGE_MAX_BYTES)),
            e.size,
        ) from e
    except BaseException:
        _drop(sink, part)
        raise
    digest = counter.sha1.hexdigest()
    out = dict(uri="gcs://%s%s.zip" % (RAY_PKG_PREFIX, digest), size=counter.size, files=files, sha1=digest)
    if dest is None:
        out["data"] = sink.getvalue()
    return out


def _drop(sink: Any, part: str | None) -> None:
    """The half-written zip goes; a second failure on the way (the disk still full) never hides the first."""
    if part is None:
        return
    with contextlib.suppress(OSError):
        sink.close()
    with contextlib.suppress(OSError):
        if os.path.lexists(part):
            os.unlink(part)


def package_uri(data: bytes) -> str:
    """Content-addressed URI of zip bytes (Ray's ``get_uri_for_package`` naming)."""
    return "gcs://%s%s.zip" % (RAY_PKG_PREFIX, hashlib.sha1(data).hexdigest())


def package_name(uri: str | None) -> str:
    match = _URI.match(uri or "")
    if not match:
        raise PackageError("not a package URI made by rlinfra: %r (expected gcs://_ray_pkg_<sha1>.zip)" % uri)
    return match.group(1)


def read_package(src: str) -> bytes:
    """The bytes of the working_dir zip at ``src`` on this host, checked as Ray will take them (PackageError)."""
    if not os.path.isfile(src):
        raise PackageError("src %s is not a file (the working_dir zip made by rlinfra.verl.verl_experiment)" % src)
    if os.path.getsize(src) > RAY_PACKAGE_MAX_BYTES:
        raise PackageError(
            "src %s is %s, over the %s Ray accepts through the dashboard; leave large files out of the "
            "working_dir" % (src, mib(os.path.getsize(src)), mib(RAY_PACKAGE_MAX_BYTES))
        )
    try:
        with open(src, "rb") as f:
            return f.read(RAY_PACKAGE_MAX_BYTES + 1)
    except OSError as e:
        raise PackageError("src %s cannot be read: %s" % (src, e.strerror or e)) from e


def ensure_package(client: Any, uri: str, data: bytes) -> bool:
    """Upload ``data`` as ``uri`` unless the cluster has it. Returns True when it was uploaded.

    ``client`` is a :class:`ray_client.RayClient` (anything with ``has_package`` and
    ``upload_package``); its errors (RayError) pass through.
    """
    if package_uri(data) != uri:
        raise PackageError(
            "package bytes do not match %s (sha1 %s): the zip changed in transit"
            % (uri, hashlib.sha1(data).hexdigest())
        )
    name = package_name(uri)
    if client.has_package(name):
        return False
    if len(data) > RAY_PACKAGE_MAX_BYTES:
        raise PackageTooLarge(
            "package %s is %s, over Ray's %s limit" % (uri, mib(len(data)), mib(RAY_PACKAGE_MAX_BYTES)), len(data)
        )
    client.upload_package(name, data)
    if not client.has_package(name):
        raise PackageError("package %s is still missing after its upload" % uri)
    return True
