#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: ray_firewall
short_description: Let only a Ray cluster's members and its controller reach Ray's ports (nftables)
version_added: 0.2.0
description:
  - Keeps one nftables table of its own (V(inet rlinfra_ray)) whose input chain drops new connections to Ray's
    ports (O(ports)) from any address that is neither loopback, a member of the cluster (O(members)), the controller
    (O(controller), else the first field of O(ssh_connection)) nor in O(allow). Every other port (SSH included),
    every other table and rule is left alone.
  - The rules are written to O(path) (root-only) with C(flush table) inside, checked with C(nft -c), then applied
    with C(nft -f) in one transaction. The module remembers a digest of the table it applied and applies again only
    when the file changes or the live table differs (someone flushed it, a reboot without the persistence unit).
  - Where nftables cannot be used (no C(nft) binary, or C(nft list tables) fails, as in a container without
    CAP_NET_ADMIN) it warns and changes nothing; RV(active) says so.
  - V(state=absent) deletes the table and the files.
author:
  - rlinfra maintainers (@rlinfra)
options:
  state:
    description: Whether the table and its file exist.
    type: str
    choices: [present, absent]
    default: present
  ports:
    description:
      - Ray's ports, name -> port or V(low-high) range. Overlapping ports, or a port covering one of
        O(protected_ports), are errors.
    type: dict
  members:
    description: The cluster's nodes; a member without an address is an error naming it.
    type: list
    elements: dict
    default: []
    suboptions:
      host:
        description: Inventory name (for messages).
        type: str
        required: true
      address:
        description: Its private address.
        type: str
        default: ""
  controller:
    description: Address of the controller as the nodes see it; empty takes it from O(ssh_connection).
    type: str
    default: ""
  ssh_connection:
    description: The node's C($SSH_CONNECTION) for this run (its first field is the controller's address).
    type: str
    default: ""
  allow:
    description: Further addresses or networks allowed to reach Ray's ports.
    type: list
    elements: str
    default: []
  protected_ports:
    description: Ports no Ray port may cover (SSH).
    type: list
    elements: int
    default: [22]
  path:
    description: Where the rules are written. A sibling C(<path>.applied) keeps the digest of the applied table.
    type: path
    default: /etc/ray/rlinfra-firewall.nft
  table:
    description: Name of the table (family C(inet)).
    type: str
    default: rlinfra_ray
attributes:
  check_mode:
    support: full
    description: Reports what would change; writes and applies nothing.
  diff_mode:
    support: none
    description: Not supported.
"""

EXAMPLES = r"""
- name: Fence Ray's ports
  rlinfra.verl.ray_firewall:
    ports: {gcs: 6379, dashboard: 8265, workers: "10002-19999"}
    members: [{host: head, address: 10.0.0.5}, {host: gpu-1, address: 10.0.0.6}]
    ssh_connection: "10.0.0.1 53022 10.0.0.5 22"
"""

RETURN = r"""
active:
  description: Whether nftables could be used here (false - nothing filtered, a warning says why).
  returned: always
  type: bool
nft:
  description: Path of the C(nft) binary used (empty when none).
  returned: always
  type: str
ports:
  description: The filtered ports and ranges, merged.
  returned: state=present
  type: list
  elements: str
  sample: ["6379-6384", "8265", "10001-19999", "52365"]
allowed_v4:
  description: IPv4 addresses and networks let through.
  returned: state=present
  type: list
  elements: str
allowed_v6:
  description: IPv6 addresses and networks let through.
  returned: state=present
  type: list
  elements: str
controller:
  description: The controller address allowed (empty when unknown).
  returned: state=present
  type: str
rules:
  description: The nftables script.
  returned: state=present
  type: str
"""

import hashlib
import os
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.rlinfra.verl.plugins.module_utils.files import write_atomic
from ansible_collections.rlinfra.verl.plugins.module_utils.firewall import (
    FAMILY, FirewallError, allowed_sources, controller_address, ray_ports, render)

ARGUMENT_SPEC = dict(
    state=dict(type="str", choices=["present", "absent"], default="present"),
    ports=dict(type="dict"),
    members=dict(type="list", elements="dict", default=[], options=dict(
        host=dict(type="str", required=True),
        address=dict(type="str", default=""),
    )),
    controller=dict(type="str", default=""),
    ssh_connection=dict(type="str", default=""),
    allow=dict(type="list", elements="str", default=[]),
    protected_ports=dict(type="list", elements="int", default=[22]),
    path=dict(type="path", default="/etc/ray/rlinfra-firewall.nft"),
    table=dict(type="str", default="rlinfra_ray"),
)


def _read(path):
    try:
        with open(path) as handle:
            return handle.read()
    except (IOError, OSError):
        return None


def _remove(path):
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False


class Nft:
    def __init__(self, module):
        self.module = module
        self.path = module.get_bin_path("nft", opt_dirs=["/usr/sbin", "/sbin"]) or ""

    def run(self, *args):
        return self.module.run_command([self.path] + list(args))

    def usable(self):
        """'' when nft works here, else why not (one line)."""
        if not self.path:
            return "the nft binary is missing (install the nftables package)"
        rc, dummy, err = self.run("list", "tables")
        if rc != 0:
            return "'nft list tables' failed: %s" % (err.strip().splitlines() or ["rc %d" % rc])[-1]
        return ""

    def table_digest(self, table):
        """Digest of the live table without counters; None when it does not exist."""
        rc, out, dummy = self.run("-s", "list", "table", FAMILY, table)
        return hashlib.sha256(out.encode()).hexdigest() if rc == 0 else None


def present(module, nft, result):
    p = module.params
    protected = sorted(set(p["protected_ports"] or []) | {22})
    try:
        by_name, merged = ray_ports(p["ports"] or {}, protected=protected)
        controller = p["controller"].strip() or controller_address(p["ssh_connection"])
        v4, v6, dummy = allowed_sources(p["members"], controller, p["allow"])
        rules = render(merged, v4, v6, table=p["table"])
    except FirewallError as exc:
        module.fail_json(msg="ray_firewall: %s" % exc, **result)
    result.update(ports=[("%d" % lo) if lo == hi else "%d-%d" % (lo, hi) for lo, hi in merged],
                  allowed_v4=v4, allowed_v6=v6, controller=controller, rules=rules)
    why = nft.usable()
    if why:
        module.warn("Ray's ports are NOT filtered on this node: nftables cannot be used here (%s). "
                    "Set ray_firewall=false to silence this." % why)
        result["active"] = False
        return
    result["active"] = True
    path, stamp = p["path"], p["path"] + ".applied"
    write = _read(path) != rules
    live = nft.table_digest(p["table"])
    apply = write or live is None or (_read(stamp) or "").strip() != live
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
        _remove(tmp)
    if write:
        write_atomic(path, rules, 0o600, prefix=".rlinfra-fw.")  # root-only from its first byte
    rc, dummy, err = nft.run("-f", path)
    if rc != 0:
        module.fail_json(msg="ray_firewall: nft -f %s failed: %s" % (path, err.strip().replace("\n", " | ")), **result)
    write_atomic(stamp, (nft.table_digest(p["table"]) or "") + "\n", 0o600, prefix=".rlinfra-fw.")


def absent(module, nft, result):
    p = module.params
    path, stamp = p["path"], p["path"] + ".applied"
    exists = bool(nft.path) and not nft.usable() and nft.table_digest(p["table"]) is not None
    result["active"] = bool(nft.path) and not nft.usable()
    result["changed"] = exists or os.path.exists(path) or os.path.exists(stamp)
    if module.check_mode:
        return
    if exists:
        rc, dummy, err = nft.run("delete", "table", FAMILY, p["table"])
        if rc != 0:
            module.fail_json(msg="ray_firewall: cannot delete table %s %s: %s" % (FAMILY, p["table"], err.strip()), **result)
    _remove(path)
    _remove(stamp)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True,
                           required_if=[("state", "present", ["ports"])])
    nft = Nft(module)
    result = dict(changed=False, active=False, nft=nft.path)
    if module.params["state"] == "present":
        present(module, nft, result)
    else:
        absent(module, nft, result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
