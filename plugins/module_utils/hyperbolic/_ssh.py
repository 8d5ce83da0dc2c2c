# Copyright: (c) 2025, rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""A rented machine's SSH address, read from what the Hyperbolic API gives for it.

An ``sshCommand`` line (``parse_ssh_command_strict``: ``ssh USER@HOST [-p PORT]`` and the options that mean the same;
jump hosts, proxy commands and trailing words refused) or ``sshNetworking`` entries (``_ssh_from_networking``), the
first usable one of a rental's (``_ssh_details``). Hosts, users and ports are checked (``valid_ssh_host``,
``valid_ssh_user``, ``_port``) and an address that is no machine's, or the controller's own loopback, is refused
(``no_machine``). A private helper of the ``hyperbolic`` package: callers import these names from
``hyperbolic/client.py``.
"""

from __future__ import annotations

import ipaddress
import re
import shlex
from typing import Any

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.common.numbers import whole_number
from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic._errors import _json_type, _one_line

DEFAULT_SSH_USER = "ubuntu"
DEFAULT_SSH_PORT = 22

__all__ = [
    "DEFAULT_SSH_USER",
    "DEFAULT_SSH_PORT",
    "SSH_COMMAND_FORM",
    "NO_MACHINE",
    "LOOPBACK",
    "valid_ssh_host",
    "no_machine",
    "valid_ssh_user",
    "parse_ssh_command_strict",
    "parse_ssh_command",
]


# ssh(1) options that take an argument (man ssh, OpenSSH 9)
_SSH_ARG_OPTS = set("BbcDEeFIiJLlmOoPpQRSWw")
# options that reach the host through another one: the destination alone would not be reachable
# (or would be another machine), so such a command is not turned into a host
_SSH_INDIRECT_OPTS = {"proxycommand", "proxyjump"}
_LABEL = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
_HOST_NAME = re.compile(r"(?:%s\.)*%s\.?" % (_LABEL, _LABEL))
_IPV4 = re.compile(r"(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)")
_USER_OK = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}")
SSH_COMMAND_FORM = "ssh USER@HOST [-p PORT]"


def _port(value: Any) -> int | None:
    """A TCP port from an int or a string of digits; None when absent, ValueError when invalid."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, bool):
        raise ValueError("port %s is not a number" % _one_line(repr(value), 40))
    port = whole_number(int(value) if isinstance(value, float) and value.is_integer() else value)
    if port is None:
        raise ValueError("port %s is not a number" % _one_line(repr(value), 40))
    if not 0 < port < 65536:
        raise ValueError("port %d is out of range 1-65535" % port)
    return port


def _is_ip(host: str) -> bool:
    if _IPV4.fullmatch(host):
        return True
    if ":" not in host:
        return False
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def valid_ssh_host(host: object) -> bool:
    """True for an IP address or a DNS-style host name (never an option such as ``-oX=y``)."""
    if not isinstance(host, str) or not host or len(host) > 253:
        return False
    if _is_ip(host):
        return True
    # "999.1.2.3" is neither an address nor a name
    return bool(_HOST_NAME.fullmatch(host)) and not host.rstrip(".").rsplit(".", 1)[-1].isdigit()


NO_MACHINE = "is no machine's address (0.0.0.0, ::, multicast and broadcast name none; SSH to 0.0.0.0 reaches this one)"
LOOPBACK = (
    "is this machine's own loopback: SSH there reaches the controller, not the rented machine; check the "
    "rental's address in Hyperbolic's console"
)


def no_machine(host: str) -> str:
    """What is wrong with an SSH host the API gave as a rented machine's (vocabulary.unreachable, loopback refused):
    NO_MACHINE for ``0.0.0.0``, ``::``, multicast, broadcast or a scoped address, LOOPBACK for this machine's own
    loopback (``127.0.0.1``, ``::1``, ``localhost``); '' for an address or name of a machine."""
    if not vocabulary.unreachable(host, loopback=False):
        return ""
    # Refused even where loopback is good (ray_private_ip): no machine at all; else only as the controller's own.
    return NO_MACHINE if vocabulary.unreachable(host) else LOOPBACK


def valid_ssh_user(user: object) -> bool:
    """True for a POSIX-style login name."""
    return isinstance(user, str) and bool(_USER_OK.fullmatch(user))


def _is_name_like(host: str) -> bool:
    """An IP address or a dotted name: something an API gives as an address, unlike a lone word."""
    return _is_ip(host) or "." in host.strip(".")


def parse_ssh_command_strict(command: object, default_user: str = DEFAULT_SSH_USER) -> dict[str, Any]:
    """Parse an ``ssh`` command line into ``{"host", "port", "user"}``; ValueError says why not.

    The command must start with ``ssh`` and name exactly one destination, ``USER@HOST`` (the
    user may also come from ``-l USER`` or ``-o User=``; without any, HOST must be an IP address
    or a dotted name and ``default_user`` applies). The port comes from ``-p PORT``/``-pPORT``
    or ``-o Port=`` before or after the destination, else 22; ``ssh://user@host:port`` works too.
    Other ssh options are ignored, except jump hosts and proxy commands, and anything after the
    destination that is not an option (a remote command, or prose) makes the command invalid.
    """
    if not isinstance(command, str) or not command.strip():
        raise ValueError("no sshCommand")
    shown = _one_line(repr(command), 80)
    if "'" in command or '"' in command or "\\" in command:
        try:
            argv = shlex.split(command)
        except ValueError:
            raise ValueError("sshCommand %s has unbalanced quotes" % shown) from None
    else:  # the usual case; str.split is much cheaper than shlex
        argv = command.split()
    if not argv or argv[0].rsplit("/", 1)[-1] not in ("ssh", "ssh.exe"):
        raise ValueError("sshCommand %s is not of the form '%s'" % (shown, SSH_COMMAND_FORM))
    argv = argv[1:]

    def port_of(value):
        try:
            return _port(value)
        except ValueError as exc:
            raise ValueError("sshCommand %s: %s" % (shown, exc)) from None

    destinations = []
    opt_user = opt_port = None
    i = 0
    while i < len(argv):
        tok = argv[i]
        if tok == "--":
            destinations.extend(argv[i + 1 :])
            break
        if tok.startswith("-") and len(tok) > 1:
            flag = tok[1]
            if flag in _SSH_ARG_OPTS:
                if len(tok) > 2:
                    val = tok[2:]
                else:
                    i += 1
                    if i >= len(argv):
                        raise ValueError("sshCommand %s ends in %s without its value" % (shown, tok))
                    val = argv[i]
                if flag == "p":
                    opt_port = port_of(val)
                    if opt_port is None:
                        raise ValueError("sshCommand %s has an empty -p" % shown)
                elif flag == "l":
                    opt_user = val
                elif flag == "J":
                    raise ValueError(
                        "sshCommand %s goes through a jump host (-J), which the inventory cannot express" % shown
                    )
                elif flag == "o":
                    key, dummy, oval = val.replace("=", " ", 1).partition(" ")
                    key = key.strip().lower()
                    if key == "port":
                        opt_port = opt_port or port_of(oval)
                    elif key == "user":
                        opt_user = opt_user or oval.strip()
                    elif key in _SSH_INDIRECT_OPTS:
                        raise ValueError(
                            "sshCommand %s goes through -o %s, which the inventory cannot express" % (shown, key)
                        )
            # flags without argument (-A, -t, -4, -v, ...) are ignored
            i += 1
            continue
        destinations.append(tok)
        i += 1
    if not destinations:
        raise ValueError("sshCommand %s names no USER@HOST" % shown)
    if len(destinations) > 1:
        raise ValueError(
            "sshCommand %s has words after the destination %s; expected '%s'"
            % (shown, _one_line(repr(destinations[0]), 60), SSH_COMMAND_FORM)
        )
    host = destinations[0]
    user = port = None
    if host.startswith("ssh://"):
        rest = host[len("ssh://") :].rstrip("/")
        if "@" in rest:
            user, rest = rest.rsplit("@", 1)
        if rest.startswith("["):
            rest, dummy, tail = rest[1:].partition("]")
            if tail.startswith(":"):
                port = port_of(tail[1:])
            elif tail:
                raise ValueError("sshCommand %s has a malformed ssh:// address" % shown)
        elif rest.count(":") == 1:
            rest, p = rest.split(":")
            port = port_of(p)
        host = rest
    elif "@" in host:
        user, host = host.rsplit("@", 1)
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    user = opt_user or user
    if not valid_ssh_host(host):
        raise ValueError("sshCommand %s: %s is not a host name or IP address" % (shown, _one_line(repr(host), 60)))
    refused = no_machine(host)
    if refused:
        raise ValueError("sshCommand %s: %s %s" % (shown, _one_line(repr(host), 60), refused))
    if user is None and not _is_name_like(host):
        raise ValueError("sshCommand %s is not of the form '%s'" % (shown, SSH_COMMAND_FORM))
    if user is not None and not valid_ssh_user(user):
        raise ValueError("sshCommand %s: %s is not a valid user name" % (shown, _one_line(repr(user), 40)))
    return {
        "host": host,
        "port": opt_port or port or DEFAULT_SSH_PORT,
        "user": user or default_user,
    }


def parse_ssh_command(command: object, default_user: str = DEFAULT_SSH_USER) -> dict[str, Any] | None:
    """``parse_ssh_command_strict`` that answers None instead of raising."""
    try:
        return parse_ssh_command_strict(command, default_user)
    except ValueError:
        return None


def _ssh_from_networking(networking, default_user):
    """SSH details from an ``sshNetworking`` value; ValueError when present but unusable."""
    if isinstance(networking, dict):
        networking = [networking]
    if not isinstance(networking, list):
        raise ValueError("sshNetworking is %s, not a list" % _json_type(networking))
    problem = None
    for entry in networking:
        if not isinstance(entry, dict):
            problem = problem or "sshNetworking has an entry that is %s" % _json_type(entry)
            continue
        host = entry.get("host") or entry.get("ip") or entry.get("hostname")
        if not host:
            continue
        try:
            if not valid_ssh_host(host):
                raise ValueError("sshNetworking host %s is not a host name or IP address" % (_one_line(repr(host), 60)))
            refused = no_machine(host)
            if refused:
                raise ValueError("sshNetworking host %s %s" % (_one_line(repr(host), 60), refused))
            port = _port(entry.get("port"))
            user = entry.get("user") or entry.get("username") or default_user
            if not valid_ssh_user(user):
                raise ValueError("sshNetworking user %s is not a valid user name" % _one_line(repr(user), 40))
        except ValueError as exc:
            problem = problem or ("sshNetworking " + str(exc) if str(exc).startswith("port") else str(exc))
            continue
        return {"host": host, "port": port or DEFAULT_SSH_PORT, "user": user}
    if problem:
        raise ValueError(problem)
    return None


def _ssh_details(item, default_user, *containers):
    """``(details, problem)`` from either shape, looking at ``item`` and nested ``containers``.

    The first usable description wins. ``problem`` says why none was usable when some were given
    (``(None, None)``: the API gave no SSH details at all, e.g. a machine still booting).
    """
    provider = item.get("providerData")
    candidates = []
    if isinstance(provider, dict):
        candidates.append(("net", provider.get("sshNetworking")))
    for obj in (item,) + tuple(c for c in containers if isinstance(c, dict)):
        candidates.append(("net", obj.get("sshNetworking")))
    for obj in (item, provider) + tuple(containers):
        if isinstance(obj, dict):
            candidates.append(("cmd", obj.get("sshCommand") or obj.get("ssh_command")))
    problem = None
    for kind, value in candidates:
        if value is None or value == "" or value == []:
            continue
        try:
            if kind == "net":
                found = _ssh_from_networking(value, default_user)
            else:
                found = parse_ssh_command_strict(value, default_user)
        except ValueError as exc:
            problem = problem or str(exc)
            continue
        if found:
            return found, None
    return None, problem
