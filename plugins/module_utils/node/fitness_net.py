# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The network part of fitness.yml, measured over the interface Ray and the collectives use: standard library only.

Every node runs a short-lived agent (``start_agent``: a detached process listening on the node's Ray address and
``ray_fitness_port``, which the Ray firewall admits from the cluster's members only; it answers only requests that
carry this run's nonce and exits after ``lifetime`` seconds or when told). The head's coordinator (``measure``) then
asks each agent in turn to stream to another for ``seconds`` and reports what the receiver counted:

* every node to the head, one at a time (a head's link shared by several senders would make each look slow);
* for a cluster of at most ``pairs_max`` nodes, every ordered pair, in rounds of disjoint pairs (round-robin), so an
  8-node cluster takes 14 rounds, not 56 transfers.

The sender's socket buffer is small, so a slow link cannot hide in it; the receiver times from the first byte to the
last. One JSON line per request; the agent never runs anything it is sent.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from typing import Any, Callable, Mapping, Sequence

CHUNK = 256 * 1024
SNDBUF = 256 * 1024
CONNECT_TIMEOUT = 5.0


def _send_json(sock: socket.socket, obj: Any) -> None:
    sock.sendall((json.dumps(obj) + "\n").encode())


def _read_line(sock: socket.socket, limit: int = 65536) -> Any:
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(1)
        if not chunk:
            break
        data += chunk
        if len(data) > limit:
            raise ValueError("request too long")
    return json.loads(data.decode() or "null")


def stream(to_ip: str, port: int, nonce: str, seconds: float) -> dict[str, Any]:
    """Send to the agent at ``to_ip`` for ``seconds``; ``{"bytes", "seconds", "gbit"}`` as the receiver counted them,
    or ``{"error"}``."""
    try:
        sock = socket.create_connection((to_ip, port), timeout=CONNECT_TIMEOUT)
    except OSError as exc:
        return dict(error="cannot connect to %s:%s (%s)" % (to_ip, port, exc.strerror or exc))
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SNDBUF)
        sock.settimeout(max(30.0, seconds * 20))
        _send_json(sock, dict(nonce=nonce, cmd="sink"))
        payload = os.urandom(CHUNK)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            sock.sendall(payload)
        sock.shutdown(socket.SHUT_WR)
        answer = _read_line(sock)
        if not isinstance(answer, dict) or "bytes" not in answer:
            return dict(error="the receiver at %s answered %r" % (to_ip, answer))
        elapsed = max(float(answer.get("seconds") or 0), 1e-6)
        return dict(
            bytes=int(answer["bytes"]), seconds=round(elapsed, 3), gbit=round(answer["bytes"] * 8 / elapsed / 1e9, 4)
        )
    except (OSError, ValueError) as exc:
        return dict(error="streaming to %s failed (%s)" % (to_ip, getattr(exc, "strerror", None) or exc))
    finally:
        sock.close()


def _sink(conn: socket.socket) -> None:
    total, first = 0, None
    while True:
        data = conn.recv(CHUNK)
        if not data:
            break
        if first is None:
            first = time.monotonic()
        total += len(data)
    elapsed = time.monotonic() - first if first is not None else 0.0
    _send_json(conn, dict(bytes=total, seconds=elapsed))


def serve(sock: socket.socket, nonce: str, lifetime: float, clock: Callable[[], float] = time.monotonic) -> None:
    """Answer requests on the listening ``sock`` until ``lifetime`` seconds have passed or a ``bye`` arrives."""
    end = clock() + lifetime
    stop = threading.Event()

    def handle(conn):
        with conn:
            try:
                conn.settimeout(60)
                request = _read_line(conn)
                if isinstance(request, dict) and request.get("cmd") == "yield":
                    # a later fitness.yml's agent wants the port (this run was interrupted): leave
                    _send_json(conn, dict(ok=True))
                    stop.set()
                    return
                if not isinstance(request, dict) or request.get("nonce") != nonce:
                    return
                cmd = request.get("cmd")
                if cmd == "sink":
                    _sink(conn)
                elif cmd == "send":
                    _send_json(
                        conn,
                        stream(
                            str(request.get("to")),
                            int(request.get("port")),
                            nonce,
                            float(request.get("seconds") or 1.0),
                        ),
                    )
                elif cmd == "ping":
                    _send_json(conn, dict(ok=True))
                elif cmd == "bye":
                    _send_json(conn, dict(ok=True))
                    stop.set()
            except (OSError, ValueError, TypeError):
                return

    sock.settimeout(0.5)
    while not stop.is_set() and clock() < end:
        try:
            conn, dummy = sock.accept()
        except socket.timeout:
            continue
        except OSError:
            break
        threading.Thread(target=handle, args=(conn,), daemon=True).start()
    sock.close()


def start_agent(params: Mapping[str, Any], module: Any) -> dict[str, Any]:
    """Node side (a plain script or the module): listen on ``ip``:``port`` and detach an agent that serves for
    ``lifetime`` seconds. ``{"changed": False, "listening": "ip:port"}``; one line when the port cannot be had."""
    ip, port, nonce, lifetime = params["ip"], int(params["port"]), params["nonce"], float(params["lifetime"])
    if module.check_mode:
        return dict(changed=False, listening="", skipped=True, msg="check mode: no agent started")
    sock, error = None, None
    for attempt in range(20):
        try:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((ip, port))
            sock.listen(64)
            break
        except OSError as exc:
            sock.close()  # type: ignore[union-attr]  # None only when socket.socket() itself failed
            sock = None
            if attempt == 0:
                # an agent an interrupted run left behind: it leaves when asked (nothing else answers "yield")
                ask(ip, port, dict(cmd="yield"), 2.0)
            time.sleep(0.25)
            error = exc
    if sock is None:
        return dict(
            failed=True,
            changed=False,
            msg="cannot listen on %s:%d for the network check (%s): is another "
            "fitness.yml running, or is ray_fitness_port taken?" % (ip, port, getattr(error, "strerror", "") or error),
        )
    pid = os.fork()
    if pid:
        sock.close()
        os.waitpid(pid, 0)
        return dict(changed=False, listening="%s:%d" % (ip, port))
    # The child: a new session, its own grandchild serving, nothing left of the task's stdin/stdout (the connection
    # closes when the task's process ends).
    os.setsid()
    if os.fork():
        os._exit(0)  # pylint: disable=protected-access
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    try:
        serve(sock, nonce, lifetime)
    finally:
        os._exit(0)  # pylint: disable=protected-access


def ask(ip: str, port: int, request: Mapping[str, Any], timeout: float) -> dict[str, Any]:
    """One request to an agent, its one-line answer (``{"error"}`` when there is none)."""
    try:
        with socket.create_connection((ip, port), timeout=CONNECT_TIMEOUT) as sock:
            sock.settimeout(timeout)
            _send_json(sock, request)
            answer = _read_line(sock)
            return answer if isinstance(answer, dict) else dict(error="no answer")
    except (OSError, ValueError) as exc:
        return dict(error="the agent at %s:%s did not answer (%s)" % (ip, port, getattr(exc, "strerror", None) or exc))


def rounds(names: Sequence[str]) -> list[list[tuple[str, str]]]:
    """Round-robin rounds of disjoint unordered pairs covering every pair once (the circle method)."""
    items: list[Any] = list(names) + ([None] if len(names) % 2 else [])  # None: the odd one out's bye
    n = len(items)
    out = []
    for _dummy in range(n - 1):
        pairs = [(items[i], items[n - 1 - i]) for i in range(n // 2)]
        out.append([p for p in pairs if None not in p])
        items = [items[0], items[-1]] + items[1:-1]
    return [r for r in out if r]


def measure(params: Mapping[str, Any], module: Any) -> dict[str, Any]:
    """Head side: the transfers described above. ``params``: ``nodes`` [{host, ip}], ``head`` (host), ``port``,
    ``nonce``, ``seconds``, ``pairs_max``. Returns ``{"changed": False, "links": [{from, to, gbit | error}]}``."""
    nodes = {n["host"]: n["ip"] for n in params["nodes"]}
    head, port, nonce = params["head"], int(params["port"]), params["nonce"]
    seconds = float(params["seconds"])
    timeout = max(60.0, seconds * 30)
    if module.check_mode:
        return dict(changed=False, links=[], skipped=True)

    def one(src, dst):
        answer = ask(
            nodes[src], port, dict(nonce=nonce, cmd="send", to=nodes[dst], port=port, seconds=seconds), timeout
        )
        return dict({"from": src, "to": dst}, **answer)

    links = []
    hosts = sorted(nodes)
    if len(hosts) <= int(params["pairs_max"]):
        for group in rounds(hosts):
            for ordered in (group, [(b, a) for a, b in group]):
                results = [None] * len(ordered)
                threads = [
                    threading.Thread(target=lambda i=i, p=p, results=results: results.__setitem__(i, one(*p)))
                    for i, p in enumerate(ordered)
                ]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                links += results
    else:
        links = [one(h, head) for h in hosts if h != head]
    for ip in nodes.values():
        ask(ip, port, dict(nonce=nonce, cmd="bye"), 5.0)
    return dict(changed=False, links=sorted(links, key=lambda link: (link["from"], link["to"])))
