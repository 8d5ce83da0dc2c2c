# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Filter ``rlinfra.verl.dashboard_access``: the lines site.yml prints to reach a cluster's dashboard.

    {{ inventory_hostname | rlinfra.verl.dashboard_access(hostvars[inventory_hostname], token_path) }}

Ready to paste: the SSH tunnel (with the inventory's user, port, key and SSH arguments, and the ssh
connection's ``ssh_args`` and ``host_key_checking``, so it reaches the head the way Ansible does), the
page to open, and a command that prints the token for the dashboard's "Authentication Token Required"
dialog (Ray sets a cookie from it). Never the token itself.
"""

from __future__ import annotations

import shlex


def _config_args(ssh_args):
    """Ansible's ssh_args without what only its own connection reuse needs (-C, Control*)."""
    words, out = shlex.split(str(ssh_args or "")), []
    i = 0
    while i < len(words):
        word = words[i]
        if word == "-C":
            i += 1
            continue
        if word == "-o" and i + 1 < len(words):
            if not words[i + 1].lower().startswith("control"):
                out += [word, words[i + 1]]
            i += 2
            continue
        if word.startswith("-o") and word[2:].lower().startswith("control"):
            i += 1
            continue
        out.append(word)
        i += 1
    return out


def _ssh(hv, host, ssh_args="", host_key_checking=True):
    argv = ["ssh"]
    configured = _config_args(ssh_args)
    if not host_key_checking and not any(w.lower().startswith("stricthostkeychecking") for w in configured):
        argv += ["-o", "StrictHostKeyChecking=no"]  # what Ansible's ssh connection adds for host_key_checking=False
    argv += configured
    port = hv.get("ansible_port") or hv.get("ansible_ssh_port")
    if port and str(port) != "22":
        argv += ["-p", str(port)]
    key = hv.get("ansible_ssh_private_key_file") or hv.get("ansible_private_key_file")
    if key:
        argv += ["-i", str(key)]
    for name in ("ansible_ssh_common_args", "ansible_ssh_extra_args"):
        if hv.get(name):
            argv += shlex.split(str(hv[name]))
    user = hv.get("ansible_user") or hv.get("ansible_ssh_user")
    target = hv.get("ansible_host") or host
    argv.append("%s@%s" % (user, target) if user else str(target))
    return argv


def _connection(hv, host, ssh_args, host_key_checking):
    """``(ssh argv, the head's private address)``: the ssh command that connects the way Ansible did, and where the
    tunnels lead on the head."""
    checking = (
        host_key_checking
        if isinstance(host_key_checking, bool)
        else str(host_key_checking).strip().lower() not in ("false", "no", "0", "off", "n", "f")
    )
    return _ssh(hv, host, ssh_args, checking), hv.get("ray_node_ip") or hv.get("ansible_host") or host


def _tunnel(what, host, hostvars, ssh_args, host_key_checking, port_var, port, secret_path):
    """``(port, tunnel line, secret command)`` for the head's ``what``, listening on the host variable ``port_var`` (else
    ``port``): the line giving the ssh command that forwards 127.0.0.1:<port> to it, and the shell command that prints
    the root-only file ``secret_path`` on the head."""
    hv = dict(hostvars or {})
    port = int(hv.get(port_var) or port)
    ssh, node_ip = _connection(hv, host, ssh_args, host_key_checking)
    # ssh -L reads an IPv6 address only in brackets.
    target = "[%s]" % node_ip if ":" in str(node_ip) else node_ip
    tunnel = ssh[:1] + ["-N", "-L", "%d:%s:%d" % (port, target, port)] + ssh[1:]
    secret = ssh + ["sudo", "cat", str(secret_path)]
    return (
        port,
        "%s: %s   then open http://127.0.0.1:%d" % (what, " ".join(shlex.quote(a) for a in tunnel), port),
        " ".join(shlex.quote(a) for a in secret),
    )


def dashboard_access(host, hostvars, token_path="/etc/ray/auth_token", ssh_args="", host_key_checking=True):
    """[tunnel line, token line, CLI line] for the head ``host`` with host variables ``hostvars``; ``ssh_args`` and
    ``host_key_checking`` are the ssh connection's settings, so that the commands connect the way Ansible did."""
    port, tunnel, token = _tunnel(
        "Dashboard", host, hostvars, ssh_args, host_key_checking, "ray_dashboard_port", 8265, token_path
    )
    return [
        tunnel,
        "Dashboard token (it asks for it once; root-only in %s on %s): %s" % (token_path, host, token),
        "Ray CLI: put the token in a file of mode 0600, then export RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH=<that file> "
        "RAY_ADDRESS=http://127.0.0.1:%d" % port,
    ]


def prometheus_access(host, hostvars, password_path="/etc/ray/metrics/password", ssh_args="", host_key_checking=True):
    """[tunnel line, password line] for the head's Prometheus (ray_metrics), beside the dashboard's: the same
    connection, and a command that prints the basic-auth password, never the password."""
    dummy, tunnel, password = _tunnel(
        "Prometheus", host, hostvars, ssh_args, host_key_checking, "ray_metrics_prometheus_port", 9090, password_path
    )
    return [
        tunnel,
        "Prometheus login: user rlinfra, password (root-only in %s on %s): %s" % (password_path, host, password),
    ]


class FilterModule:
    def filters(self):
        return {"dashboard_access": dashboard_access, "prometheus_access": prometheus_access}
