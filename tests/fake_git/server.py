"""Git's smart HTTP protocol, served by git itself (``git http-backend`` as a CGI), with an optional token.

Stands in for GitHub/GitLab: ``https://host/org/repo.git`` becomes ``http://<address>:<port>/repo.git`` over the
bare repositories under ``root``; with ``token`` every request must carry ``Authorization: Basic
base64(x-access-token:<token>)`` (what GitHub accepts for a token), else 401 with ``WWW-Authenticate``. Every
request is logged (method, path, the client's address, whether the token was right) so tests can assert who fetched what.

    with GitServer(root, token="ghp_x", host="127.0.0.1") as srv:
        ... srv.url + "/trainer.git" ... srv.requests ...
"""

import base64
import os
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit


class GitServer:
    def __init__(self, root, token="", host="127.0.0.1", port=0):
        self.root = str(root)
        self.token = token
        self.requests = []
        self.server = ThreadingHTTPServer((host, port), self._handler())

    @property
    def url(self):
        return "http://%s:%d" % self.server.server_address[:2]

    def __enter__(self):
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def _handler(self):
        srv = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                self.cgi()

            def do_POST(self):
                self.cgi()

            def cgi(self):
                parts = urlsplit(self.path)
                want = "Basic " + base64.b64encode(("x-access-token:%s" % srv.token).encode()).decode()
                auth = self.headers.get("Authorization") or ""
                entry = {
                    "method": self.command,
                    "path": parts.path,
                    "query": parts.query,
                    "auth": bool(auth),
                    "token_ok": auth == want,
                    "client": self.client_address[0],
                }
                srv.requests.append(entry)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                if srv.token and not entry["token_ok"]:
                    entry["status"] = 401
                    msg = b"Authentication failed\n"
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Basic realm="git"')
                    self.send_header("Content-Length", str(len(msg)))
                    self.end_headers()
                    self.wfile.write(msg)
                    return
                env = dict(
                    os.environ,
                    GIT_PROJECT_ROOT=srv.root,
                    GIT_HTTP_EXPORT_ALL="1",
                    REQUEST_METHOD=self.command,
                    PATH_INFO=parts.path,
                    QUERY_STRING=parts.query,
                    REMOTE_ADDR=self.client_address[0],
                    REMOTE_USER="git",
                    CONTENT_TYPE=self.headers.get("Content-Type") or "",
                    CONTENT_LENGTH=str(length),
                    GIT_PROTOCOL=self.headers.get("Git-Protocol") or "",
                    HTTP_CONTENT_ENCODING=self.headers.get("Content-Encoding") or "",
                )
                out = subprocess.run(
                    ["git", "http-backend"], input=body, env=env, capture_output=True, check=False
                ).stdout
                head, sep, payload = out.partition(b"\r\n\r\n")
                if not sep:
                    head, sep, payload = out.partition(b"\n\n")
                status, headers = 200, []
                for line in head.decode("latin-1").splitlines():
                    name, sep, value = line.partition(":")
                    if name.lower() == "status":
                        status = int(value.strip().split()[0])
                    elif name:
                        headers.append((name, value.strip()))
                entry["status"] = status
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        return Handler
