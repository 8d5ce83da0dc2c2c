# -*- coding: utf-8 -*-
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The roles' variables as values, checked before a role changes anything.

Argument specs check types (``ray_gcs_port=abc`` is refused by Ansible itself); these rules check
what a type cannot say: an address Ray can bind to, a port in range and not taken twice, a GPU count,
a mount option string that mount(8) and /etc/fstab accept, and, above all, no newline or control
character in anything that lands in a systemd unit, an environment file or fstab (a newline in
``ray_private_ip`` would add an ``ExecStartPre=`` line to the unit).

``check(settings)`` -> one line per bad variable, each naming the variable, what it must be and the
value it got. Rules are keyed by variable name; the role a variable belongs to is its prefix.
"""

from __future__ import annotations

import ipaddress
import re

from ansible_collections.rlinfra.verl.plugins.module_utils.numbers import whole_number
from ansible_collections.rlinfra.verl.plugins.module_utils.switches import switch_value

ROLES = ("storage_lvm", "nfs_mount", "python_env", "ray")

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_USER = re.compile(r"^[a-z_][a-z0-9_-]{0,31}\$?$")
_UMASK = re.compile(r"^0?[0-7]{3}$")
_MODE = re.compile(r"^0?[0-7]{3,4}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_RESOURCE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:/-]{0,63}$")
_CLUSTER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,79}$")
_HOST = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$")
_LVM_NAME = re.compile(r"^[A-Za-z0-9+_.][A-Za-z0-9+_.-]{0,127}$")
_SIZE = re.compile(r"^[0-9]+(\.[0-9]+)?[KMGTP]?i?B?$", re.IGNORECASE)
_STRIPE = re.compile(r"^([0-9]+[kKmM]?)?$")
_OPTION = re.compile(r"^[A-Za-z0-9_.:/=+@-]+$")


class Bad(ValueError):
    """What the value must be (the caller adds the name and the value)."""


def _shown(value):
    if isinstance(value, str):
        return repr(value) if len(value) <= 80 else repr(value[:77] + "...")
    return "%r (%s)" % (value, type(value).__name__)


def _text(value):
    if not isinstance(value, str):
        raise Bad("text")
    if _CONTROL.search(value):
        raise Bad("one line without control characters")
    return value


def _int(value, low, high=None, must=None):
    """A whole number from ``low`` (to ``high``); ``must`` replaces the message of either refusal."""
    number = whole_number(value)
    if number is None:
        raise Bad(must or "a whole number")
    if number < low or (high is not None and number > high):
        raise Bad(must or "a whole number from %d%s" % (low, " to %d" % high if high is not None else " up"))
    return number


# ---- one function per kind of value ----------------------------------------------------------

def address(value):
    """An IP address a node can bind to and others can reach."""
    text = _text(value).strip()
    if not text:
        raise Bad("this node's private IP address (the node's facts showed none: set it in the inventory)")
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        raise Bad("this node's private IP address (for example 10.0.0.5)")
    if ip.is_unspecified or ip.is_multicast:
        raise Bad("an address the other nodes can reach (Ray advertises it), not %s" % text)
    return text


def address_or_empty(value):
    return "" if value in ("", None) else address(value)


def network(value):
    try:
        return str(ipaddress.ip_network(_text(value).strip(), strict=False))
    except ValueError:
        raise Bad("an IP address or network (for example 10.0.0.0/24)")


def port(value):
    return _int(value, 1, 65535, must="a TCP port from 1 to 65535")


def count_or_auto(value):
    return value if value == "auto" else _int(value, 0, must="auto or a whole number from 0 up")


def switch(value):
    """On or off, read strictly: a misspelt true is an error, not false."""
    if switch_value(value)[0] is None:
        raise Bad("true or false (also yes/no/1/0, any case)")
    return value


def count_or_empty(value):
    if value in ("", None):
        return ""
    return _int(value, 0, must="empty (Ray detects it) or a whole number from 0 up")


def limit(value):
    return value if value == "infinity" else _int(value, 1, must="infinity or a whole number from 1 up")


def positive(value):
    return _int(value, 1)


def seconds_or_off(value):
    return _int(value, 0, must="a whole number of seconds, 0 for off")


def check_interval(value):
    return _int(value, 10, must="a whole number of seconds from 10")


def umask(value):
    if not _UMASK.match(_text(value)):
        raise Bad("an octal umask such as 0027")
    return value


def mode(value):
    if not isinstance(value, str):
        raise Bad("an octal mode in quotes such as '0755' (unquoted, YAML reads a number)")
    if not _MODE.match(_text(value)):
        raise Bad("an octal mode such as 0755, quoted")
    return value


def user(value):
    if not _USER.match(_text(value)):
        raise Bad("a user name (lowercase letters, digits, _ and -)")
    return value


def path(value, max_len=None):
    text = _text(value)
    if not text.startswith("/") or re.search(r"\s", text):
        raise Bad("an absolute path without spaces")
    if max_len and len(text) >= max_len:
        raise Bad("an absolute path shorter than %d characters (Ray's socket paths must fit in 107)" % max_len)
    return text


def temp_dir(value):
    return path(value, 60)


def cluster(value):
    if not isinstance(value, str) or not _CLUSTER.match(value):
        raise Bad("a name of letters, digits, _ . - (starting with a letter or digit, at most 80)")
    return value


def host(value):
    text = _text(value).strip()
    try:
        ipaddress.ip_address(text)
        return text
    except ValueError:
        pass
    if not _HOST.match(text):
        raise Bad("a host name or IP address")
    return text


def host_or_empty(value):
    return "" if value in ("", None) else host(value)


def options(value):
    """A mount option string: comma-separated words, no spaces, none empty (fstab splits on spaces)."""
    text = _text(value)
    words = text.split(",")
    if not text or any(not w or not _OPTION.match(w) for w in words):
        raise Bad("comma-separated mount options without spaces, for example defaults,noatime")
    return text


def env(value):
    if not isinstance(value, dict):
        raise Bad("a mapping of variable names to values")
    for name, item in value.items():
        if not isinstance(name, str) or not _ENV_NAME.match(name):
            raise Bad("a mapping of variable names (letters, digits, _) to values; %s is not a name" % _shown(name))
        if isinstance(item, (dict, list)) or item is None:
            raise Bad("a mapping to text or number values; %s has %s" % (name, type(item).__name__))
        if _CONTROL.search(str(item)):
            raise Bad("a mapping to one-line values; %s has a newline or control character" % name)
    return value


def secret_pattern(value):
    """Empty (the collection's rule for secret names) or the user's own regular expression."""
    if value in ("", None):
        return ""
    try:
        re.compile(_text(value))
    except re.error as e:
        raise Bad("empty (the collection's rule for secret names) or a regular expression (%s)" % e)
    return value


def resources(value):
    if not isinstance(value, dict):
        raise Bad("a mapping of custom resource names to amounts")
    for name, amount in value.items():
        if not isinstance(name, str) or not _RESOURCE.match(name):
            raise Bad("a mapping of resource names (letters, digits, _ . : / -) to amounts; %s is not one" % _shown(name))
        if name in ("CPU", "GPU", "memory", "object_store_memory"):
            raise Bad("custom resources only; %s is set with its own variable (ray_num_cpus, ray_num_gpus)" % name)
        if isinstance(amount, bool) or not isinstance(amount, (int, float)) or amount < 0:
            raise Bad("a mapping to amounts of 0 or more; %s has %s" % (name, _shown(amount)))
    return value


def args(value):
    if not isinstance(value, list):
        raise Bad("a list of arguments")
    for item in value:
        if not isinstance(item, str) or _CONTROL.search(item):
            raise Bad("a list of one-line text arguments; %s is not" % _shown(item))
    return value


def networks(value):
    if not isinstance(value, list):
        raise Bad("a list of IP addresses or networks")
    for item in value:
        try:
            network(item)
        except Bad:
            raise Bad("a list of IP addresses or networks; %s is not one" % _shown(item))
    return value


def devices(value):
    if value == "auto":
        return value
    if not isinstance(value, list):
        raise Bad("auto or a list of block devices (for example [/dev/nvme1n1])")
    for item in value:
        if not isinstance(item, str) or not re.match(r"^/dev/[A-Za-z0-9/_.:-]+$", item):
            raise Bad("a list of block devices under /dev; %s is not one" % _shown(item))
    return value


def lvm_name(value):
    if not isinstance(value, str) or not _LVM_NAME.match(value) or value in (".", ".."):
        raise Bad("an LVM name (letters, digits, + _ . -, not starting with -)")
    return value


def stripe(value):
    if not _STRIPE.match(_text(str(value))):
        raise Bad("empty or a size such as 256k")
    return value


def size(value):
    if not _SIZE.match(_text(str(value))):
        raise Bad("a size such as 1G or 500M")
    return value


def package_list(value):
    if not isinstance(value, list):
        raise Bad("a list of requirement strings")
    for item in value:
        if not isinstance(item, str) or not item.strip() or _CONTROL.search(item):
            raise Bad("a list of one-line requirement strings; %s is not one" % _shown(item))
    return value


def url_or_empty(value):
    text = _text(value)
    if text and not re.match(r"^(https?|file)://\S+$", text):
        raise Bad("empty or an http(s):// or file:// URL")
    return value


def url_list(value):
    if not isinstance(value, list):
        raise Bad("a list of URLs")
    for item in value:
        if not isinstance(item, str) or not re.match(r"^(https?|file)://\S+$", item):
            raise Bad("a list of http(s):// or file:// URLs; %s is not one" % _shown(item))
    return value


PORTS = ("ray_gcs_port", "ray_dashboard_port", "ray_node_manager_port", "ray_object_manager_port",
         "ray_dashboard_agent_grpc_port", "ray_runtime_env_agent_port", "ray_metrics_export_port",
         "ray_dashboard_agent_listen_port", "ray_client_server_port", "ray_autoscaler_metrics_port",
         "ray_dashboard_metrics_port", "ray_min_worker_port", "ray_max_worker_port")

RULES = {
    "ray_private_ip": address,
    "ray_cluster": cluster,
    "ray_env": env,
    "ray_rocm_env": env,
    "ray_env_secret_pattern": secret_pattern,
    "ray_temp_dir": temp_dir,
    "ray_config_dir": path,
    "ray_venv": path,
    "ray_umask": umask,
    "ray_user": user,
    "ray_num_cpus": count_or_empty,
    "ray_num_gpus": count_or_auto,
    "ray_resources": resources,
    "ray_extra_args": args,
    "ray_limit_nofile": limit,
    "ray_limit_nproc": limit,
    "ray_start_timeout": positive,
    "ray_head_idle_release_after": seconds_or_off,
    "ray_head_idle_check_every": check_interval,
    "ray_firewall_controller": address_or_empty,
    "ray_firewall": switch,
    "ray_firewall_allow": networks,
    "nfs_mount_server": host_or_empty,
    "nfs_mount_export": path,
    "nfs_mount_path": path,
    "nfs_mount_options": options,
    "nfs_mount_connect_timeout": positive,
    "nfs_mount_probe_timeout": positive,
    "storage_lvm_devices": devices,
    "storage_lvm_vg_name": lvm_name,
    "storage_lvm_lv_name": lvm_name,
    "storage_lvm_stripe_size": stripe,
    "storage_lvm_mount_point": path,
    "storage_lvm_mount_options": options,
    "storage_lvm_mount_mode": mode,
    "storage_lvm_mount_owner": user,
    "storage_lvm_mount_group": user,
    "storage_lvm_discover_min_size": size,
    "python_env_path": path,
    "python_env_python": path,
    "python_env_wheelhouse": path,
    "python_env_packages": package_list,
    "python_env_index_url": url_or_empty,
    "python_env_extra_index_urls": url_list,
}
RULES.update((name, port) for name in PORTS)


def owner(name):
    """The role a variable belongs to: the longest role prefix it starts with (None when none)."""
    owners = [r for r in ROLES if name.startswith(r + "_")]
    return max(owners, key=len) if owners else None


def names_for(roles):
    """The checked variables of the given roles."""
    unknown = [r for r in roles if r not in ROLES]
    if unknown:
        raise ValueError("unknown role(s) %s; known: %s" % (", ".join(unknown), ", ".join(ROLES)))
    return sorted(n for n in RULES if owner(n) in roles)


def plain(value):
    """The value with Ansible's tagged types turned into Python's own (so that a line shows ``int``)."""
    if isinstance(value, dict):
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    for kind in (bool, int, float, str):
        if isinstance(value, kind):
            return kind(value)
    return value


def check(settings):
    """``{name: value}`` -> list of error lines (empty when every value is good). Unknown names are ignored."""
    settings = plain(settings)
    errors = []
    for name in sorted(settings):
        rule = RULES.get(name)
        if rule is None:
            continue
        try:
            rule(settings[name])
        except Bad as e:
            errors.append("%s must be %s, got %s" % (name, e, _shown(settings[name])))
    errors.extend(_port_clashes(settings))
    return errors


def _port_clashes(settings):
    given = {}
    for name in PORTS:
        if name in settings:
            try:
                given[name] = port(settings[name])
            except Bad:
                return []  # already reported
    errors = []
    by_number = {}
    for name, number in given.items():
        by_number.setdefault(number, []).append(name)
    for number, names in sorted(by_number.items()):
        if len(names) > 1:
            errors.append("%s all use port %d: give each its own port" % (" and ".join(sorted(names)), number))
    low, high = given.get("ray_min_worker_port"), given.get("ray_max_worker_port")
    if low is not None and high is not None:
        if low > high:
            errors.append("ray_min_worker_port (%d) must not be above ray_max_worker_port (%d)" % (low, high))
        else:
            inside = sorted(n for n, p in given.items() if low <= p <= high and n not in ("ray_min_worker_port",
                                                                                          "ray_max_worker_port"))
            if inside:
                errors.append("%s fall%s inside the worker port range %d-%d (ray_min_worker_port..ray_max_worker_port): "
                              "move %s or the range" % (", ".join(inside), "s" if len(inside) == 1 else "", low, high,
                                                        "it" if len(inside) == 1 else "them"))
    return errors
