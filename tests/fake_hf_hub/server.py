"""A stand-in for the Hugging Face Hub's download endpoints (standard library only).

Serves what huggingface_hub's snapshot_download and rlinfra.verl.hf_prefetch read, in the Hub's shapes:

* ``GET /api/{models|datasets}/{org}/{name}/revision/{rev}[?blobs=true]`` -> ``{"id", "sha", "siblings":
  [{"rfilename", "blobId", "size", "lfs": {"sha256", "size", "pointerSize"}}]}``; 404 for an unknown
  repository or revision, 401 for a private repository without the right Bearer token.
* ``GET /api/{models|datasets}/{org}/{name}/tree/{rev}?recursive=true`` -> ``[{"type", "oid", "size", "path",
  "lfs": {"oid", "size", "pointerSize"}}]`` (what huggingface_hub 1.x's snapshot_download lists).
* ``HEAD|GET /[datasets/]{org}/{name}/resolve/{rev}/{path}``: a regular file answers 200 with
  ``ETag: "<git blob id>"``, ``X-Repo-Commit``; an LFS file answers 302 to a second server (the "CDN": another
  port, and another address when ``cdn_host`` is given) with ``X-Linked-Etag: "<sha256>"``, ``X-Linked-Size``; both
  honour ``Range: bytes=N-`` with 206.

Faults it injects: ``drop_next(path, after)`` closes the next download of ``path`` after ``after`` bytes;
``corrupt_next(path)`` serves the next download with its bytes flipped; ``down = True`` refuses every
connection's request (closes it). It logs every request (method, path, whether a token came, range) on
both servers so tests can assert what was (not) downloaded and where the token went.

Library use::

    with FakeHub(token="hf_x") as hub:
        commit = hub.add_repo("model", "org/tiny", {"config.json": b"{}", "model.safetensors": b"..."}, private=True)
        ... hub.url ... hub.requests ... hub.cdn_requests ...

As a process (a sandbox node)::

    python3 server.py --host 0.0.0.0 --port 8080 --spec spec.json   # spec: {"token": .., "repos": [..]}

``GET /_fake/requests`` answers the request log of both servers; ``POST /_fake/reset`` clears it.
"""

import argparse
import base64
import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

LFS_SUFFIXES = (".safetensors", ".bin", ".parquet", ".pt", ".gguf")


def git_blob_id(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class FakeHub:
    def __init__(self, token="", host="127.0.0.1", port=0, cdn_port=0, cdn_host=None):
        self.token = token
        self.repos = {}  # (kind, repo) -> {"private", "branches": {name: commit}, "commits": {commit: {path: bytes}}}
        self.requests = []
        self.cdn_requests = []
        self.drops = {}
        self.corrupt = set()
        self.down = False
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer((host, port), self._handler(cdn=False))
        # Another address (127.0.0.2 on loopback) is another host for huggingface_hub, which compares host names.
        self.cdn = ThreadingHTTPServer((cdn_host or host, cdn_port), self._handler(cdn=True))
        self.public_host = host
        self.cdn_public_host = cdn_host or host

    # ------------------------------------------------------------------ content
    def add_repo(self, kind, repo, files, private=False, branch="main"):
        """Add a commit with ``files`` ({path: bytes}) on ``branch``; returns the commit id."""
        entry = self.repos.setdefault((kind, repo), {"private": private, "branches": {}, "commits": {}})
        entry["private"] = private
        tree = "\n".join("%s %s" % (p, git_blob_id(d)) for p, d in sorted(files.items()))
        commit = hashlib.sha1(("%s %s %s %d" % (kind, repo, tree, len(entry["commits"]))).encode()).hexdigest()
        entry["commits"][commit] = dict(files)
        entry["branches"][branch] = commit
        return commit

    def drop_next(self, path, after):
        self.drops[path] = after

    def corrupt_next(self, path):
        self.corrupt.add(path)

    def downloads(self, path=None):
        """GETs of file contents (resolve answered 200/206, or the CDN), optionally of one file."""
        out = [
            r for r in self.requests if r["method"] == "GET" and "/resolve/" in r["path"] and r["status"] in (200, 206)
        ]
        out += [r for r in self.cdn_requests if r["method"] == "GET"]
        return [r for r in out if path is None or r.get("file") == path]

    @staticmethod
    def is_lfs(path, data):
        return path.endswith(LFS_SUFFIXES) or len(data) > 10 * 1024 * 1024

    def _resolve(self, kind, repo, rev):
        entry = self.repos.get((kind, repo))
        if entry is None:
            return None, None
        commit = entry["branches"].get(rev, rev if rev in entry["commits"] else None)
        return entry, commit

    # ------------------------------------------------------------------ server
    @property
    def url(self):
        return "http://%s:%d" % (self.public_host, self.server.server_address[1])

    @property
    def cdn_url(self):
        return "http://%s:%d" % (self.cdn_public_host, self.cdn.server_address[1])

    def __enter__(self):
        for srv in (self.server, self.cdn):
            threading.Thread(target=srv.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        for srv in (self.server, self.cdn):
            srv.shutdown()
            srv.server_close()

    def serve_forever(self):
        threading.Thread(target=self.cdn.serve_forever, daemon=True).start()
        self.server.serve_forever()

    def _handler(self, cdn):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_HEAD(self):
                self.handle_any("HEAD")

            def do_GET(self):
                self.handle_any("GET")

            def do_POST(self):
                self.handle_any("POST")

            def send(self, code, body=b"", headers=None, ctype="application/json"):
                self.send_response(code)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def error(self, code, message):
                self.log["status"] = code
                self.send(code, json.dumps({"error": message}).encode(), {"X-Error-Message": message})

            def handle_any(self, method):
                parts = urlsplit(self.path)
                auth = self.headers.get("Authorization") or ""
                self.log = {
                    "method": method,
                    "path": parts.path,
                    "query": parts.query,
                    "auth": bool(auth),
                    "token_ok": auth == "Bearer " + hub.token,
                    "range": self.headers.get("Range"),
                    "status": None,
                }
                with hub.lock:
                    (hub.cdn_requests if cdn else hub.requests).append(self.log)
                if hub.down:
                    self.close_connection = True
                    self.connection.close()
                    return
                if parts.path == "/_fake/requests":
                    self.log["status"] = 200
                    return self.send(200, json.dumps({"requests": hub.requests, "cdn": hub.cdn_requests}).encode())
                if parts.path == "/_fake/reset" and method == "POST":
                    del hub.requests[:], hub.cdn_requests[:]
                    return self.send(200, b"{}")
                if cdn:
                    return self.serve_cdn(parts.path)
                m = re.match(r"^/api/(models|datasets)/([^/]+(?:/[^/]+)?)/revision/([^/]+)$", parts.path)
                if m and method == "GET":
                    return self.api(m.group(1)[:-1], m.group(2), unquote(m.group(3)))
                m = re.match(r"^/api/(models|datasets)/([^/]+(?:/[^/]+)?)/tree/([^/]+)$", parts.path)
                if m and method == "GET":
                    return self.tree(m.group(1)[:-1], m.group(2), unquote(m.group(3)))
                m = re.match(r"^/(datasets/)?([^/]+(?:/[^/]+)?)/resolve/([^/]+)/(.+)$", parts.path)
                if m and method in ("GET", "HEAD"):
                    return self.resolve(
                        "dataset" if m.group(1) else "model", m.group(2), unquote(m.group(3)), unquote(m.group(4))
                    )
                self.error(404, "Not Found")

            def allowed(self, entry):
                if entry["private"] and not self.log["token_ok"]:
                    self.error(
                        401,
                        "Invalid credentials in Authorization header"
                        if self.log["auth"]
                        else "Repository not found or you are not authenticated",
                    )
                    return False
                return True

            def api(self, kind, repo, rev):
                entry, commit = hub._resolve(kind, repo, rev)
                if entry is None:
                    return self.error(404 if not hub.token or self.log["token_ok"] else 401, "Repository not found")
                if not self.allowed(entry):
                    return
                if commit is None:
                    return self.error(404, "Invalid rev id: %s" % rev)
                siblings = []
                for path, data in sorted(entry["commits"][commit].items()):
                    s = {"rfilename": path, "blobId": git_blob_id(data), "size": len(data)}
                    if hub.is_lfs(path, data):
                        s["lfs"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
                    siblings.append(s)
                self.log["status"] = 200
                self.send(
                    200,
                    json.dumps({"id": repo, "sha": commit, "private": entry["private"], "siblings": siblings}).encode(),
                )

            def tree(self, kind, repo, rev):
                """list_repo_tree(recursive=True): files and the directories above them (one page)."""
                entry, commit = hub._resolve(kind, repo, rev)
                if entry is None or commit is None:
                    return self.error(404, "Repository not found" if entry is None else "Invalid rev id: %s" % rev)
                if not self.allowed(entry):
                    return
                out, dirs = [], set()
                for path, data in sorted(entry["commits"][commit].items()):
                    parts = path.split("/")
                    for i in range(1, len(parts)):
                        d = "/".join(parts[:i])
                        if d not in dirs:
                            dirs.add(d)
                            out.append(
                                {"type": "directory", "oid": hashlib.sha1(d.encode()).hexdigest(), "size": 0, "path": d}
                            )
                    f = {"type": "file", "oid": git_blob_id(data), "size": len(data), "path": path}
                    if hub.is_lfs(path, data):
                        f["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
                    out.append(f)
                self.log["status"] = 200
                self.send(200, json.dumps(out).encode())

            def resolve(self, kind, repo, rev, path):
                self.log["file"] = path
                entry, commit = hub._resolve(kind, repo, rev)
                if entry is None:
                    return self.error(404, "Repository not found")
                if not self.allowed(entry):
                    return
                if commit is None:
                    return self.error(404, "Invalid rev id: %s" % rev)
                data = entry["commits"][commit].get(path)
                if data is None:
                    return self.error(404, "Entry not found")
                headers = {"X-Repo-Commit": commit, "ETag": '"%s"' % git_blob_id(data), "Accept-Ranges": "bytes"}
                if hub.is_lfs(path, data):
                    sha = hashlib.sha256(data).hexdigest()
                    headers.update(
                        {
                            "X-Linked-Etag": '"%s"' % sha,
                            "X-Linked-Size": str(len(data)),
                            "Location": "%s/%s?name=%s"
                            % (hub.cdn_url, sha, base64.urlsafe_b64encode(path.encode()).decode()),
                        }
                    )
                    self.log["status"] = 302
                    return self.send(302, b"", headers)
                self.body(data, path, headers)

            def serve_cdn(self, path):
                sha = path.lstrip("/")
                for entry in hub.repos.values():
                    for files in entry["commits"].values():
                        for name, data in files.items():
                            if hashlib.sha256(data).hexdigest() == sha:
                                self.log["file"] = name
                                return self.body(data, name, {"ETag": '"%s"' % sha, "Accept-Ranges": "bytes"})
                self.error(404, "no such object")

            def body(self, data, path, headers):
                start = 0
                m = re.match(r"^bytes=(\d+)-$", self.headers.get("Range") or "")
                if m and int(m.group(1)) < len(data):
                    start = int(m.group(1))
                    headers["Content-Range"] = "bytes %d-%d/%d" % (start, len(data) - 1, len(data))
                chunk = data[start:]
                if self.command == "GET" and path in hub.corrupt:
                    hub.corrupt.discard(path)
                    chunk = bytes(b ^ 0xFF for b in chunk)
                code = 206 if start else 200
                self.log["status"] = code
                drop = hub.drops.pop(path, None) if self.command == "GET" else None
                if drop is None:
                    return self.send(code, chunk, headers, "application/octet-stream")
                self.send_response(code)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(chunk)))
                self.end_headers()
                self.wfile.write(chunk[:drop])
                self.wfile.flush()
                self.close_connection = True

        return Handler


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument("--cdn-port", type=int, default=8081)
    ap.add_argument("--public-host", help="the address clients reach this server at (for the CDN redirects)")
    ap.add_argument("--spec", required=True, help="JSON: {token, repos: [{kind, repo, private, files: {path: text}}]}")
    args = ap.parse_args()
    with open(args.spec) as f:
        spec = json.load(f)
    hub = FakeHub(spec.get("token", ""), args.host, args.port, args.cdn_port)
    hub.public_host = hub.cdn_public_host = args.public_host or args.host
    for r in spec.get("repos", []):
        files = {p: (base64.b64decode(v[4:]) if v.startswith("b64:") else v.encode()) for p, v in r["files"].items()}
        hub.add_repo(r["kind"], r["repo"], files, private=r.get("private", False))
    hub.serve_forever()


if __name__ == "__main__":
    main()
