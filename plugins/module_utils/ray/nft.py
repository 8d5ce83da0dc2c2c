# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""nftables as ``rlinfra.verl.ray_firewall`` and ``rlinfra.verl.ray_node`` drive it: write the table's file,
check it with ``nft -c``, apply it with ``nft -f`` in one transaction, remember a digest of the live table.
The decisions (ports, sources, rules) are module_utils/ray/firewall.py's; this file does the I/O."""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Mapping
from typing import Any

from ansible_collections.rlinfra.verl.plugins.module_utils.common.files import write_atomic
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.firewall import (
    FAMILY,
    FirewallError,
    allowed_sources,
    controller_address,
    ray_ports,
    render,
)

# Loads the table again at boot, before the network and Ray come up (nftables.service flushes the whole
# ruleset: after it).
BOOT_UNIT = """\
# Written by rlinfra.verl (role ray). Do not edit; re-run site.yml.
[Unit]
Description=Ray's ports for the cluster's members only (nftables table inet {table})
Documentation=file://{path}
DefaultDependencies=no
After=nftables.service local-fs.target
Before=network-pre.target ray-head.service ray-worker.service shutdown.target
Wants=network-pre.target
Conflicts=shutdown.target
ConditionPathExists={path}

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart={nft} -f {path}

[Install]
WantedBy=sysinit.target
"""
BOOT_UNIT_NAME = "rlinfra-ray-firewall.service"


def read_text(path: str) -> str | None:
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return None


def remove(path: str) -> bool:
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False


def ancestor_env(name: str, pid: int | None = None, proc: str = "/proc") -> str:
    """``name`` from the environment of the nearest process above ``pid`` (default: this one) that has it.
    sudo drops SSH_CONNECTION; the login shell it runs under still has it (root reads any /proc/PID/environ)."""
    pid = pid or os.getpid()
    key = name.encode() + b"="
    for _dummy in range(32):
        try:
            with open(os.path.join(proc, str(pid), "environ"), "rb") as handle:
                for item in handle.read().split(b"\0"):
                    if item.startswith(key):
                        return item[len(key) :].decode("utf-8", "replace")
            with open(os.path.join(proc, str(pid), "stat")) as handle:
                pid = int(handle.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return ""
        if pid <= 1:
            return ""
    return ""


class Nft:
    def __init__(self, module: Any) -> None:
        self.module = module
        self.path = module.get_bin_path("nft", opt_dirs=["/usr/sbin", "/sbin"]) or ""

    def run(self, *args: str) -> tuple[int, str, str]:
        return self.module.run_command([self.path] + list(args))

    def usable(self) -> str:
        """'' when nft works here, else why not (one line)."""
        if not self.path:
            return "the nft binary is missing (install the nftables package)"
        rc, dummy, err = self.run("list", "tables")
        if rc != 0:
            return "'nft list tables' failed: %s" % (err.strip().splitlines() or ["rc %d" % rc])[-1]
        return ""

    def table_digest(self, table: str) -> str | None:
        """Digest of the live table without counters; None when it does not exist."""
        rc, out, dummy = self.run("-s", "list", "table", FAMILY, table)
        return hashlib.sha256(out.encode()).hexdigest() if rc == 0 else None


def install_nft(module: Any) -> str:
    """Best effort: install the nftables package with the node's package manager. '' when done, else why not."""
    for tool, argv in (
        ("apt-get", ["install", "-y", "-q", "nftables"]),
        ("dnf", ["install", "-y", "nftables"]),
        ("yum", ["install", "-y", "nftables"]),
        ("zypper", ["--non-interactive", "install", "nftables"]),
    ):
        path = module.get_bin_path(tool)
        if path:
            rc, dummy, err = module.run_command([path] + argv, environ_update={"DEBIAN_FRONTEND": "noninteractive"})
            return "" if rc == 0 else "%s failed: %s" % (tool, (err.strip().splitlines() or ["rc %d" % rc])[-1])
    return "no package manager found"


def present(module: Any, nft: Nft, p: Mapping[str, Any], result: dict[str, Any]) -> None:
    """Apply the table ``p`` describes (ray_firewall's options). Fills ``result``; fails the module on bad input."""
    protected = sorted(set(p.get("protected_ports") or []) | {22})
    dummy: Any  # each unused part of a result, whatever its type
    try:
        dummy, merged = ray_ports(p["ports"] or {}, protected=protected)
        controller = (p.get("controller") or "").strip() or controller_address(p.get("ssh_connection"))
        v4, v6, dummy = allowed_sources(p.get("members") or [], controller, p.get("allow") or [])
        rules = render(merged, v4, v6, table=p["table"])
    except FirewallError as exc:
        module.fail_json(msg="ray_firewall: %s" % exc, **result)
    result.update(
        ports=[("%d" % lo) if lo == hi else "%d-%d" % (lo, hi) for lo, hi in merged],
        allowed_v4=v4,
        allowed_v6=v6,
        controller=controller,
        rules=rules,
    )
    why = nft.usable()
    if why:
        module.warn(
            "Ray's ports are NOT filtered on this node: nftables cannot be used here (%s). "
            "Set ray_firewall=false to silence this." % why
        )
        result["active"] = False
        return
    result["active"] = True
    path, stamp = p["path"], p["path"] + ".applied"
    write = read_text(path) != rules
    live = nft.table_digest(p["table"])
    apply = write or live is None or (read_text(stamp) or "").strip() != live
    result["changed"] = write or apply
    if module.check_mode or not result["changed"]:
        return
    directory = os.path.dirname(path) or "."
    if not os.path.isdir(directory):
        os.makedirs(directory, 0o755)
    fd, tmp = tempfile.mkstemp(prefix=".rlinfra-fw-check.", dir=directory)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(rules)
        rc, dummy, err = nft.run("-c", "-f", tmp)
        if rc != 0:
            module.fail_json(msg="ray_firewall: nft rejects the rules: %s" % err.strip().replace("\n", " | "), **result)
    finally:
        remove(tmp)
    if write:
        write_atomic(path, rules, 0o600, prefix=".rlinfra-fw.")  # root-only from its first byte
    rc, dummy, err = nft.run("-f", path)
    if rc != 0:
        module.fail_json(msg="ray_firewall: nft -f %s failed: %s" % (path, err.strip().replace("\n", " | ")), **result)
    write_atomic(stamp, (nft.table_digest(p["table"]) or "") + "\n", 0o600, prefix=".rlinfra-fw.")


def absent(module: Any, nft: Nft, p: Mapping[str, Any], result: dict[str, Any]) -> None:
    path, stamp = p["path"], p["path"] + ".applied"
    exists = bool(nft.path) and not nft.usable() and nft.table_digest(p["table"]) is not None
    result["active"] = bool(nft.path) and not nft.usable()
    result["changed"] = exists or os.path.exists(path) or os.path.exists(stamp)
    if module.check_mode:
        return
    if exists:
        rc, dummy, err = nft.run("delete", "table", FAMILY, p["table"])
        if rc != 0:
            module.fail_json(
                msg="ray_firewall: cannot delete table %s %s: %s" % (FAMILY, p["table"], err.strip()), **result
            )
    remove(path)
    remove(stamp)


def firewall(module: Any) -> None:
    """The ``ray_firewall`` module's work, with its AnsibleModule: :func:`present` or :func:`absent` by ``state``;
    exits through ``module``."""
    if module.params["state"] == "present" and module.params["ports"] is None:
        module.fail_json(
            msg="ports must be given with state=present (Ray's ports, name -> port or low-high range)", changed=False
        )
    nft = Nft(module)
    result = dict(changed=False, active=False, nft=nft.path)
    if module.params["state"] == "present":
        present(module, nft, module.params, result)
    else:
        absent(module, nft, module.params, result)
    module.exit_json(**result)
