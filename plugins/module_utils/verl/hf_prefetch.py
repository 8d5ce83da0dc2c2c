# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Hugging Face models and datasets downloaded once into the Hub cache on the shared volume.

The experiment's ``prefetch:`` section is read by :func:`normalize` (the one rule the experiment's validation and the
module share; it and the section's other rules are in module_utils/verl/_hf_prefetch_section.py, and callers use them
from here) and fetched by :func:`prefetch` on one node before the job starts, so that eight nodes do not each download
the same 30 GB when the job begins.

What lands on disk is huggingface_hub's own cache layout (its "Manage the cache" guide), so
transformers, datasets and vLLM find it offline: ``<hub cache>/<models|datasets>--org--name/`` with
``blobs/<etag>`` (the file's sha256 when it is an LFS file, else its git blob id), ``snapshots/<commit>/<path>``
(a relative symlink to the blob) and ``refs/<revision>`` (the commit a branch or tag resolved to).
The Hub is read with the standard library only (the module runs with the node's system Python, which
does not have huggingface_hub): ``GET /api/<models|datasets>/<repo>/revision/<rev>?blobs=true`` for the
commit and the files with their ids and sizes, ``GET /[datasets/]<repo>/resolve/<commit>/<path>`` for each
file. Every file is checked against its size and its sha256 or git blob id before it is renamed into
place; a partial download resumes with a Range request; the token goes in the Authorization header only
(never to another host a download is redirected to) and never into a file, an argument or a message.

The commit's file list goes where huggingface_hub (1.33 and later) keeps it, ``trees/<commit>.json`` in the same
folder and format: huggingface_hub then knows the snapshot complete offline, and a pinned commit found complete
here is not asked of the Hub at all (whichever of the two filled the cache).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ansible_collections.rlinfra.verl.plugins.module_utils.common import files as fs
from ansible_collections.rlinfra.verl.plugins.module_utils.common import masking
from ansible_collections.rlinfra.verl.plugins.module_utils.verl._hf_prefetch_section import (
    ITEM_KEYS,
    KINDS,
    NETWORK_FS,
    REPO_RE,
    REVISION_RE,
    SECTION_KEYS,
    items_of,
    label,
    normalize,
    not_shared,
    sections,
    selected,
)

__all__ = [
    "CHUNK",
    "COMMIT_RE",
    "DEFAULT_ENDPOINT",
    "ITEM_KEYS",
    "KINDS",
    "NETWORK_FS",
    "REPO_RE",
    "REVISION_RE",
    "SECTION_KEYS",
    "TREE_FORMAT",
    "Cache",
    "Hub",
    "HubUnreachable",
    "PrefetchError",
    "fetch_item",
    "human_bytes",
    "items_of",
    "label",
    "normalize",
    "not_shared",
    "prefetch",
    "repo_folder",
    "report",
    "sections",
    "selected",
]

try:
    from http import client as _http
    from urllib import error as _error
    from urllib import parse as _parse
    from urllib import request as _request
except ImportError:  # pragma: no cover - Python 2 is not supported by the collection
    _http = _request = _error = _parse = None  # type: ignore[assignment]  # never on Python 3

DEFAULT_ENDPOINT = "https://huggingface.co"
COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
TREE_FORMAT = 1  # huggingface_hub's _tree_cache.TREE_CACHE_FORMAT_VERSION
CHUNK = 1024 * 1024


class PrefetchError(Exception):
    """One clear line: what failed, for which repository, and what to do."""


# ----------------------------------------------------------------------------------------------------
# The cache layout


def repo_folder(item: Mapping[str, Any]) -> str:
    return "%ss--%s" % (item["kind"], item["repo"].replace("/", "--"))


class Cache:
    """One repository's folder in the Hub cache (blobs, snapshots, refs, trees) and its lock."""

    def __init__(self, hub_cache: str, item: Mapping[str, Any]):
        self.root = os.path.join(hub_cache, repo_folder(item))
        self.lock = os.path.join(hub_cache, ".locks", repo_folder(item), "rlinfra-prefetch.lock")

    def blob(self, blob_id: str) -> str:
        return os.path.join(self.root, "blobs", blob_id)

    def link(self, commit: str, path: str) -> str:
        return os.path.join(self.root, "snapshots", commit, *path.split("/"))

    def ref(self, revision: str) -> str:
        return os.path.join(self.root, "refs", *revision.split("/"))

    def read_ref(self, revision: str) -> str | None:
        try:
            with open(self.ref(revision)) as f:
                value = f.read().strip()
        except OSError:
            return None
        return value if COMMIT_RE.match(value) else None

    def tree(self, commit: str) -> str:
        return os.path.join(self.root, "trees", commit + ".json")

    def read_tree(self, commit: str) -> list[dict[str, Any]] | None:
        """The commit's files from ``trees/<commit>.json``, or None (absent, unreadable, another format)."""
        try:
            with open(self.tree(commit)) as f:
                data = json.load(f)
            if data.get("format_version") != TREE_FORMAT:
                return None
            return [
                _file(path, x["blob_id"], x.get("lfs_sha256"), x.get("lfs_size") or x["size"])
                for path, x in data["files"].items()
            ]
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def write_tree(self, commit: str, files: Iterable[Mapping[str, Any]]) -> bool:
        # huggingface_hub's own bytes (key order, indent), so that either may have written it.
        entries = OrderedDict()
        for f in sorted(files, key=lambda f: f["path"]):
            entry = OrderedDict([("size", f["size"]), ("blob_id", f["blob_id"])])
            if f["lfs"]:
                entry.update([("lfs_sha256", f["blob"]), ("lfs_size", f["size"])])
            entries[f["path"]] = entry
        data = OrderedDict([("format_version", TREE_FORMAT), ("files", entries)])
        return _write(self.tree(commit), json.dumps(data, indent=1))

    def present(self, commit: str, f: Mapping[str, Any]) -> bool:
        """The file is in place: its snapshot link leads to a blob of the right size."""
        link = self.link(commit, f["path"])
        try:
            return (
                os.path.islink(link)
                and os.path.realpath(link) == os.path.realpath(self.blob(f["blob"]))
                and os.path.getsize(self.blob(f["blob"])) == f["size"]
            )
        except OSError:
            return False


def _write(path, text):
    fs.makedirs(os.path.dirname(path))
    return fs.write_if_changed(path, text, 0o644)


def _place_link(cache, commit, f):
    link = cache.link(commit, f["path"])
    target = os.path.relpath(cache.blob(f["blob"]), os.path.dirname(link))
    if os.path.islink(link) and os.readlink(link) == target:
        return
    fs.makedirs(os.path.dirname(link))
    tmp = "%s.tmp.%d" % (link, os.getpid())
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(target, tmp)
    os.rename(tmp, link)


# ----------------------------------------------------------------------------------------------------
# The Hub


class _Redirects(_request.HTTPRedirectHandler if _request else object):  # type: ignore[misc]  # always urllib's
    """Follow redirects, but never carry the token to another host (the Hub sends large files to a CDN)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        new = _request.HTTPRedirectHandler.redirect_request(self, req, fp, code, msg, headers, newurl)
        auth = req.unredirected_hdrs.get("Authorization")
        if new is not None and auth and _parse.urlsplit(newurl).netloc == _parse.urlsplit(req.full_url).netloc:
            new.add_unredirected_header("Authorization", auth)
        return new


class Hub:
    """The few Hub endpoints a download needs. ``token`` is sent only to ``endpoint``'s own host."""

    def __init__(
        self, endpoint: str | None = DEFAULT_ENDPOINT, token: str | None = "", timeout: float = 60, opener: Any = None
    ):
        self.endpoint = (endpoint or DEFAULT_ENDPOINT).rstrip("/")
        self.token = token or ""
        self.timeout = timeout
        self.opener = opener or _request.build_opener(_Redirects())

    def _request(self, url, headers=None):
        req = _request.Request(url, headers=dict(headers or {}, **{"User-Agent": "rlinfra.verl-prefetch"}))
        if self.token:
            # Unredirected: urllib would otherwise copy it onto a redirect to another host.
            req.add_unredirected_header("Authorization", "Bearer " + self.token)
        return self.opener.open(req, timeout=self.timeout)

    def info(self, item: Mapping[str, Any]) -> tuple[str, list[dict[str, Any]]]:
        """(commit, files) of the item's revision; files as :func:`_file` makes them."""
        url = "%s/api/%ss/%s/revision/%s?blobs=true" % (
            self.endpoint,
            item["kind"],
            item["repo"],
            _parse.quote(item["revision"], safe=""),
        )
        try:
            resp = self._request(url, {"Accept": "application/json"})
            try:
                data = json.loads(resp.read(32 * 1024 * 1024).decode("utf-8"))
            finally:
                resp.close()
        except _error.HTTPError as e:
            raise PrefetchError(self._http_line(item, e)) from e
        except (_error.URLError, _http.HTTPException, socket.timeout, OSError) as e:
            raise HubUnreachable(
                "%s: could not reach the Hub at %s (%s): check the head's network, or HF_ENDPOINT"
                % (label(item), self.endpoint, _reason(e))
            ) from e
        except ValueError:
            raise PrefetchError(
                "%s: the Hub at %s did not answer with JSON; is HF_ENDPOINT a Hugging Face Hub?"
                % (label(item), self.endpoint)
            ) from None
        commit = data.get("sha") if isinstance(data, dict) else None
        siblings = data.get("siblings") if isinstance(data, dict) else None
        if not isinstance(commit, str) or not COMMIT_RE.match(commit) or not isinstance(siblings, list):
            raise PrefetchError("%s: the Hub's answer has no commit or file list (sha, siblings)" % label(item))
        files = []
        for s in siblings:
            try:
                lfs = s.get("lfs") or None
                f = _file(
                    s["rfilename"], s["blobId"], lfs["sha256"] if lfs else None, lfs["size"] if lfs else s["size"]
                )
            except (KeyError, TypeError, ValueError, AttributeError):
                raise PrefetchError(
                    "%s: the Hub listed a file without its id or size (was ?blobs=true honoured?)" % label(item)
                ) from None
            if (
                not _safe_path(f["path"])
                or not re.match(r"^[0-9a-f]{40}$", f["blob_id"])
                or not re.match(r"^[0-9a-f]{40}(?:[0-9a-f]{24})?$", f["blob"])
            ):
                raise PrefetchError(
                    "%s: the Hub listed a file with an unusable name or id: %r" % (label(item), f["path"])
                )
            files.append(f)
        return commit, files

    def download(
        self,
        item: Mapping[str, Any],
        commit: str,
        f: Mapping[str, Any],
        dest: str,
        retries: int = 3,
        log: Callable[[str], Any] | None = None,
        sleep: Callable[[float], Any] = time.sleep,
    ) -> None:
        """Fetch one file into ``dest`` (resuming a partial one), checked against its size and id."""
        prefix = "" if item["kind"] == "model" else "%ss/" % item["kind"]
        url = "%s/%s%s/resolve/%s/%s" % (self.endpoint, prefix, item["repo"], commit, _parse.quote(f["path"], safe="/"))
        reason = ""
        for attempt in range(1, retries + 1):
            try:
                self._fetch(url, dest, f["size"])
                break
            except _error.HTTPError as e:
                if e.code < 500 and e.code not in (408, 429):
                    raise PrefetchError(self._http_line(item, e, f["path"])) from e
                reason = "HTTP %d" % e.code
            except (_error.URLError, _http.HTTPException, socket.timeout, OSError, _Short) as e:
                reason = _reason(e)
            if attempt == retries:
                raise PrefetchError(
                    "%s: %s: the download failed %d times (last: %s); re-run to resume it"
                    % (label(item), f["path"], retries, reason)
                )
            if log:
                log("%s: %s: attempt %d failed (%s), resuming" % (label(item), f["path"], attempt, reason))
            sleep(min(2**attempt, 30))
        digest = _digest(dest, f)
        if digest != f["blob"]:
            os.unlink(dest)
            raise PrefetchError(
                "%s: %s: the downloaded file does not match its id (%s, expected %s): removed; re-run to "
                "fetch it again" % (label(item), f["path"], digest[:12], f["blob"][:12])
            )

    def _fetch(self, url, dest, size):
        if os.path.islink(dest):
            os.unlink(dest)  # the partial file's name is ours; a link there is dropped, never resumed into
        have = os.path.getsize(dest) if os.path.exists(dest) else 0
        if have > size:
            os.unlink(dest)
            have = 0
        if have == size:
            return
        headers = {"Accept-Encoding": "identity"}
        if have:
            headers["Range"] = "bytes=%d-" % have
        resp = self._request(url, headers)
        try:
            if have and resp.getcode() != 206:
                have = 0  # the server sends the whole file again
            with fs.open_writing(dest, append=bool(have)) as out:
                while True:
                    chunk = resp.read(CHUNK)
                    if not chunk:
                        break
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
        finally:
            resp.close()
        got = os.path.getsize(dest)
        if got != size:
            raise _Short("got %d of %d bytes" % (got, size))

    def _http_line(self, item, e, path=None):
        what = "%s%s" % (label(item), ": " + path if path else "")
        if e.code in (401, 403):
            hint = (
                "the token was refused or may not read it: check HF_TOKEN in the secrets"
                if self.token
                else "it needs a token: set HF_TOKEN in verl_job_secrets (or the controller's environment)"
            )
        elif e.code == 404:
            hint = "no such repository, revision or file: check the name and the revision"
        else:
            hint = "try again later"
        return "%s: the Hub at %s answered %d %s: %s" % (what, self.endpoint, e.code, _reason(e), hint)


class HubUnreachable(PrefetchError):
    """No answer from the Hub at all (network), as opposed to an answer that refuses."""


class _Short(Exception):
    pass


def _reason(e):
    # urllib's texts repeat the URL they failed on (a redirect's signed CDN URL, its query a credential).
    r = getattr(e, "reason", None) or e
    return masking.mask_patterns(str(r)) or type(r).__name__


def _file(path, blob_id, lfs_sha256, size):
    """A file of a commit: its cache blob is named by its sha256 when it is an LFS file, else by its git blob id."""
    return {
        "path": str(path),
        "blob_id": str(blob_id),
        "blob": str(lfs_sha256 or blob_id),
        "size": int(size),
        "lfs": bool(lfs_sha256),
    }


def _safe_path(path):
    parts = path.split("/") if isinstance(path, str) else []
    return bool(parts) and all(p not in ("", ".", "..") for p in parts) and "\0" not in path


def _digest(path, f):
    """sha256 for an LFS file, the git blob id (sha1 of "blob <size>\\0" + content) for the others."""
    h = hashlib.sha256() if f["lfs"] else hashlib.sha1(b"blob %d\0" % f["size"])
    with open(path, "rb") as src:
        for chunk in iter(lambda: src.read(CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


# ----------------------------------------------------------------------------------------------------
# One prefetch


def fetch_item(
    item: Mapping[str, Any],
    hub: Hub,
    hub_cache: str,
    check_mode: bool = False,
    retries: int = 3,
    lock_timeout: float = 3600,
    log: Callable[[str], Any] | None = None,
) -> dict[str, Any]:
    """Bring one item into the cache. Returns a result dict (status: present, downloaded, cached)."""
    cache = Cache(hub_cache, item)
    result = dict(item, commit=None, files=0, downloaded_files=0, downloaded_bytes=0, status="present")
    revision = item["revision"]
    pinned = revision if COMMIT_RE.match(revision) else None
    if pinned:
        known = cache.read_tree(pinned)
        if known is not None:
            wanted = _wanted(known, item)
            if all(cache.present(pinned, f) for f in wanted):
                result.update(commit=pinned, files=len(wanted))
                return result
    try:
        commit, files = hub.info(item)
    except HubUnreachable as e:
        # Offline but complete locally: the commit this revision last resolved to is what the job will find.
        commit = pinned or cache.read_ref(revision)  # type: ignore[assignment]  # None: nothing cached, raised below
        known = cache.read_tree(commit) if commit else None
        if known is None or not all(cache.present(commit, f) for f in _wanted(known, item)):
            raise
        result.update(commit=commit, files=len(_wanted(known, item)), status="cached")
        if log:
            log("%s (using the cached commit %s)" % (e, commit[:12]))
        return result
    wanted = _wanted(files, item)
    if not wanted:
        raise PrefetchError(
            "%s: no file of commit %s matches allow_patterns/ignore_patterns" % (label(item), commit[:12])
        )
    missing = [f for f in wanted if not cache.present(commit, f)]
    ref_changed = revision != commit and cache.read_ref(revision) != commit
    result.update(commit=commit, files=len(wanted))
    if missing:
        result.update(
            status="downloaded", downloaded_files=len(missing), downloaded_bytes=sum(f["size"] for f in missing)
        )
    if check_mode or (not missing and not ref_changed and cache.read_tree(commit) is not None):
        if ref_changed and result["status"] == "present":
            result["status"] = "ref"
        return result
    with fs.BoundedLock(cache.lock, lock_timeout, "another prefetch", PrefetchError):
        for f in missing:
            blob = cache.blob(f["blob"])
            if not (os.path.exists(blob) and os.path.getsize(blob) == f["size"]):
                fs.makedirs(os.path.dirname(blob))
                part = blob + ".incomplete"
                hub.download(item, commit, f, part, retries=retries, log=log)
                os.chmod(part, 0o644)
                os.rename(part, blob)
            _place_link(cache, commit, f)
        cache.write_tree(commit, files)
        if revision != commit:
            if _write(cache.ref(revision), commit) and result["status"] == "present":
                result["status"] = "ref"
    return result


def _wanted(files, item):
    by_path = dict((f["path"], f) for f in files)
    return [by_path[p] for p in selected(sorted(by_path), item)]


def prefetch(
    items: Iterable[Mapping[str, Any]],
    hf_home: str,
    hub_cache: str | None = None,
    endpoint: str | None = DEFAULT_ENDPOINT,
    token: str | None = "",
    timeout: float = 60,
    retries: int = 3,
    check_mode: bool = False,
    lock_timeout: float = 3600,
    hub: Hub | None = None,
) -> tuple[bool, list[dict[str, Any]], list[str]]:
    """Every item in turn. Returns (changed, results, lines); raises :class:`PrefetchError` on the first failure."""
    hub = hub or Hub(endpoint, token, timeout)
    hub_cache = hub_cache or os.path.join(hf_home, "hub")
    lines: list[str]
    results: list[dict[str, Any]]
    lines, results = [], []
    for item in items:
        results.append(
            fetch_item(
                item,
                hub,
                hub_cache,
                check_mode=check_mode,
                retries=retries,
                lock_timeout=lock_timeout,
                log=lines.append,
            )
        )
        lines.append(report(results[-1], check_mode))
    changed = any(r["status"] in ("downloaded", "ref") for r in results)
    return changed, results, lines


def report(r: Mapping[str, Any], check_mode: bool = False) -> str:
    where = "%s (commit %s, %d file%s)" % (
        label(r),
        (r["commit"] or "?")[:12],
        r["files"],
        "" if r["files"] == 1 else "s",
    )
    if r["status"] == "downloaded":
        verb = "would download" if check_mode else "downloaded"
        return "%s: %s %d file%s, %s" % (
            where,
            verb,
            r["downloaded_files"],
            "" if r["downloaded_files"] == 1 else "s",
            human_bytes(r["downloaded_bytes"]),
        )
    if r["status"] == "cached":
        return "%s: already in the cache (the Hub did not answer)" % where
    if r["status"] == "ref":
        return "%s: already in the cache; %s now names this commit" % (where, r["revision"])
    return "%s: already in the cache, nothing downloaded" % where


def human_bytes(n: float) -> str:  # type: ignore[return]  # the loop returns at its last unit
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return ("%d %s" if unit == "B" else "%.1f %s") % (n, unit)
        n /= 1000.0
