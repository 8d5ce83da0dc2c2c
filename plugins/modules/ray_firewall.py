#!/usr/bin/python
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
  - The rules are written to O(path) (root-only) with C(delete table) inside (one transaction), checked with C(nft -c), then applied
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
    description:
      - Further addresses or networks allowed to reach Ray's ports.
      - A public network wider than C(/8) (IPv4) or C(/16) (IPv6) - V(0.0.0.0/0), V(::/0), V(0.0.0.0/1)... - opens Ray's
        ports (and with them the cluster) to the whole internet or a large part of it; it is refused, before anything
        changes, unless O(allow_world) is true. So are IPv6 networks carrying that much IPv4 (V(::ffff:0:0/96),
        V(64:ff9b::/96), V(2002::/16)), narrower networks that together open as much, and bits set after the prefix
        (V(203.0.113.7/8)).
    type: list
    elements: str
    default: []
  allow_world:
    description:
      - Let O(allow) hold networks that open Ray's ports to the whole internet or a large part of it (see O(allow)).
        Ray's ports run code for whoever reaches them; leave it false unless another firewall stands in front.
    type: bool
    default: false
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

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.firewall import PortsType
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.nft import firewall

ARGS = vocabulary.Args(
    state=vocabulary.Choice(("present", "absent"), default="present"),
    ports=PortsType(),
    # An empty address passes the type for module_utils/ray/firewall.py's own line (the member's facts are missing).
    members=vocabulary.ListOf(
        vocabulary.Options(
            dict(
                host=vocabulary.Text(empty=False, max_len=255, required=True),
                address=vocabulary.Address(empty=True, default=""),
            )
        ),
        default=[],
    ),
    controller=vocabulary.Address(empty=True, default=""),
    ssh_connection=vocabulary.Text(max_len=512, default=""),
    # A network wider than /8 (IPv4) or /16 (IPv6) that is not private opens Ray's ports to a large part of the
    # internet: refused unless allow_world is true.
    allow=vocabulary.Networks(world_switch="allow_world", default=[]),
    allow_world=vocabulary.Switch(default=False),
    protected_ports=vocabulary.ListOf(vocabulary.Port(), default=[22]),
    path=vocabulary.AbsPath("config", default="/etc/ray/rlinfra-firewall.nft"),
    table=vocabulary.Text(
        empty=False,
        max_len=41,
        pattern=r"^[A-Za-z][A-Za-z0-9_]{0,40}$",
        default="rlinfra_ray",
        what="an nftables table name (letters, digits and _, starting with a letter, at most 41)",
    ),
)
ARGUMENT_SPEC = ARGS.spec


def main():
    firewall(ARGS.new_module(AnsibleModule))


if __name__ == "__main__":
    main()
