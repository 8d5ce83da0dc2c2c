"""module_utils/common/plain_http.py, the Ray dashboard client's HTTP on the standard library (it runs as a plain script on
the head): against real HTTP and HTTPS servers on loopback - certificates checked unless validate_certs is false,
redirects refused with their status, a JSON body sent as the client sends it, the token in its header only."""

from __future__ import annotations

import http.server
import json
import ssl
import subprocess
import threading

import pytest

from ansible_collections.rlinfra.verl.plugins.module_utils.common.plain_http import open_url
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.client import RayClient, RayError, RayHTTPError

TOKEN = "tok-plain-http-0123456789"


class Handler(http.server.BaseHTTPRequestHandler):
    seen = []

    def log_message(self, *args):
        pass

    def _answer(self, code, body, headers=()):
        self.send_response(code)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        Handler.seen.append(("GET", self.path, self.headers.get("Authorization"), b""))
        if self.path == "/moved":
            self._answer(302, b"", [("Location", "/api/version")])
        else:
            self._answer(200, b'{"ray_version": "2.60.0"}', [("Content-Type", "application/json")])

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        Handler.seen.append(("POST", self.path, self.headers.get("Authorization"), body))
        self._answer(200, b'{"submission_id": "x"}')


@pytest.fixture
def server(tmp_path):
    def start(tls=False):
        httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if tls:
            cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
            subprocess.run(
                [
                    "openssl",
                    "req",
                    "-x509",
                    "-newkey",
                    "rsa:2048",
                    "-nodes",
                    "-keyout",
                    str(key),
                    "-out",
                    str(cert),
                    "-days",
                    "1",
                    "-subj",
                    "/CN=127.0.0.1",
                ],
                check=True,
                capture_output=True,
            )
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(str(cert), str(key))
            httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        servers.append(httpd)
        return "%s://127.0.0.1:%d" % ("https" if tls else "http", httpd.server_address[1])

    servers = []
    Handler.seen = []
    yield start
    for httpd in servers:
        httpd.shutdown()
        httpd.server_close()


def test_the_client_sends_json_and_the_token_header_over_plain_http(server):
    address = server()
    client = RayClient(address, token=TOKEN, retries=0)
    assert client.version() == {"ray_version": "2.60.0"}
    assert client.request("POST", "/api/jobs/", {"entrypoint": "echo hi"}) == {"submission_id": "x"}
    assert [s[:3] for s in Handler.seen] == [
        ("GET", "/api/version", "Bearer " + TOKEN),
        ("POST", "/api/jobs/", "Bearer " + TOKEN),
    ]
    assert json.loads(Handler.seen[1][3]) == {"entrypoint": "echo hi"}


def test_a_redirect_is_refused_with_its_status_not_followed(server):
    address = server()
    with pytest.raises(RayHTTPError, match="HTTP 302") as caught:
        RayClient(address, token=TOKEN, retries=0).request("GET", "/moved")
    assert caught.value.status == 302
    assert [s[1] for s in Handler.seen] == ["/moved"]
    # Plain open_url follows one when asked to, as Ansible's does by default.
    assert json.loads(open_url(address + "/moved").read()) == {"ray_version": "2.60.0"}


def test_a_self_signed_certificate_is_refused_unless_validate_certs_is_false(server):
    address = server(tls=True)
    with pytest.raises(
        RayError, match="TLS error talking to the Ray dashboard at %s.*set validate_certs: false" % address
    ):
        RayClient(address, token=TOKEN, retries=0).version()
    assert RayClient(address, token=TOKEN, validate_certs=False, retries=0).version() == {"ray_version": "2.60.0"}
    assert TOKEN not in str(RayClient(address, token=TOKEN, retries=0)._fail(RayError, "echo " + TOKEN))
