# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The converge record: what a node looked like when site.yml last converged it, so that an unchanged re-run
checks the node in one call instead of walking every role again.

A full converge ends by writing, on each node, the digest of the run's inputs (the collection's own files,
the roles' variables as given, the node's inventory address) and what it observed on the node afterwards:
the files the roles manage (content, mode, owner), the names of the packages in the Python environment, the
Ray units' states, the firewall's live table, the mounts /etc/fstab names, the addresses and GPUs. A re-run
observes the same things again; equal inputs and equal observations mean the node is as the last converge left
it, so the roles would change nothing. Anything else (no record, a changed variable, a stopped unit, an
edited file, a flushed table, a package added by hand) sends the node's whole cluster through the full
converge, which repairs it and writes a new record.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import stat
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ansible_collections.rlinfra.verl.plugins.module_utils.common.files import makedirs, write_atomic
from ansible_collections.rlinfra.verl.plugins.module_utils.node.facts import ip_runner, node_facts

VERSION = 1
RECORD_NAME = "rlinfra-converged.json"
# Left out of a watched directory's digest: the record itself, and what changes without anyone converging.
SKIP_NAMES = (RECORD_NAME,)
PACKAGE_SUFFIXES = (".dist-info", ".egg-info", ".egg-link", ".pth")
FSTAB_SKIP_TYPES = ("swap", "none", "proc", "sysfs", "tmpfs", "devpts")
UNIT_DIR = "/etc/systemd/system"
# The files the roles manage besides the Ray unit: anything new they manage goes here (or in :func:`watched`), else
# drift in it goes unseen.
WATCHED_FILES = (
    UNIT_DIR + "/rlinfra-ray-firewall.service",
    "/etc/ansible/facts.d/rlinfra_ray.fact",
    "/etc/fstab",
    UNIT_DIR + "/rlinfra-idle-guard.timer",
    "/etc/rlinfra/idle-guard.json",
    UNIT_DIR + "/rlinfra-node-exporter.service",
    UNIT_DIR + "/rlinfra-prometheus.service",
    "/etc/ansible/facts.d/rlinfra_metrics.fact",
)


def watched(
    role: str, config_dir: str, venv: str, container: bool = False, metrics: bool = False, firewall: bool = False
) -> dict[str, list[str]]:
    """What a record watches on a node of ``role`` (``head`` or ``worker``): the files the roles manage, the Ray
    configuration (and the metrics' configs) and, unless Ray runs in a container, the venv and its packages; the Ray
    unit and the metrics' services; the firewall's table (``watch`` of :func:`write`)."""
    unit = "ray-%s.service" % role
    return dict(
        files=["%s/%s" % (UNIT_DIR, unit)] + list(WATCHED_FILES),
        dirs=([config_dir] if container else [config_dir, venv]) + [config_dir + "/metrics"],
        packages=[] if container else [venv + "/lib/python*/site-packages"],
        units=[unit]
        + (["rlinfra-node-exporter.service"] if metrics else [])
        + (["rlinfra-prometheus.service"] if metrics and role == "head" else []),
        nft_tables=["rlinfra_ray"] if firewall else [],
    )


def digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def file_state(path: str) -> list[str | int] | None:
    """(sha256, mode, uid, gid) of a regular file; None when it is missing or not a regular file."""
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            return None
        with open(path, "rb") as handle:
            content = hashlib.sha256(handle.read()).hexdigest()
    except OSError:
        return None
    return [content, stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid]


def dir_files(path: str) -> dict[str, list[str | int]] | None:
    """{name: file_state} of the regular files directly in ``path`` (not the record); None when it is missing."""
    try:
        names = sorted(os.listdir(path))
    except OSError:
        return None
    out = {}
    for name in names:
        if name in SKIP_NAMES:
            continue
        state = file_state(os.path.join(path, name))
        if state is not None:
            out[name] = state
    return out


def package_names(pattern: str) -> list[str]:
    """The sorted package metadata entries (dist-info, egg-info, .pth) of the site-packages ``pattern`` matches:
    a package added, removed or upgraded by hand changes them; bytecode caches do not."""
    out = []
    for directory in sorted(glob.glob(pattern)):
        try:
            out += [
                os.path.join(os.path.basename(directory), n)
                for n in os.listdir(directory)
                if n.endswith(PACKAGE_SUFFIXES)
            ]
        except OSError:
            continue
    return sorted(out)


def parse_fstab(text: str) -> list[str]:
    """The mount points /etc/fstab mounts at boot (not swap, not noauto, not the root)."""
    points = []
    for line in text.splitlines():
        fields = line.split("#", 1)[0].split()
        if len(fields) < 3 or fields[2] in FSTAB_SKIP_TYPES or fields[1] in ("/", "none"):
            continue
        if len(fields) > 3 and "noauto" in fields[3].split(","):
            continue
        points.append(fields[1].replace("\\040", " "))
    return sorted(set(points))


def parse_mountinfo(text: str) -> dict[str, list[str]]:
    """{mount point: [source, fstype]} from /proc/self/mountinfo (the last mount on a point wins, as the kernel shows it)."""
    out = {}
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if not sep or len(fields) < 5 or len(rest) < 2:
            continue
        out[fields[4].replace("\\040", " ")] = [rest[1], rest[0]]
    return out


def mounts(fstab_text: str, mountinfo_text: str) -> dict[str, list[str] | None]:
    """{mount point: [source, fstype] or None} for each point /etc/fstab names: None when nothing is mounted there."""
    mounted = parse_mountinfo(mountinfo_text)
    return {point: mounted.get(point) for point in parse_fstab(fstab_text)}


def parse_units(text: str | None) -> dict[str, list[str]]:
    """{unit: [ActiveState, UnitFileState]} from ``systemctl show -p Id -p ActiveState -p UnitFileState U...``."""
    current: dict[str, str]
    out, current = {}, {}
    for line in (text or "").splitlines() + [""]:
        if not line.strip():
            if current.get("Id"):
                out[current["Id"]] = [current.get("ActiveState", ""), current.get("UnitFileState", "")]
            current = {}
            continue
        key, dummy, value = line.partition("=")
        current[key] = value
    return out


class Probe:
    """What observe() reads from the system, one method per source, so that tests can stand in for it."""

    def __init__(self, module: Any = None, root: str = "/") -> None:
        self.module = module
        self.root = root

    def read(self, path: str) -> str:
        try:
            with open(os.path.join(self.root, path.lstrip("/")), encoding="utf-8", errors="replace") as handle:
                return handle.read()
        except OSError:
            return ""

    def units(self, names: Sequence[str]) -> dict[str, list[str]]:
        systemctl = self.module.get_bin_path("systemctl") if self.module else None
        if not names or not systemctl:
            return {}
        rc, out, dummy = self.module.run_command(
            [systemctl, "show", "-p", "Id", "-p", "ActiveState", "-p", "UnitFileState"] + list(names)
        )
        return parse_units(out) if rc == 0 else {}

    def nft_table(self, table: str) -> str | None:
        from ansible_collections.rlinfra.verl.plugins.module_utils.ray.nft import Nft

        nft = Nft(self.module)
        return nft.table_digest(table) if nft.path else None

    def gpus(self) -> list[str | int]:
        from ansible_collections.rlinfra.verl.plugins.module_utils.ray.node import detect_gpus

        return list(detect_gpus())

    def controller(self) -> str:
        from ansible_collections.rlinfra.verl.plugins.module_utils.ray.firewall import controller_address
        from ansible_collections.rlinfra.verl.plugins.module_utils.ray.nft import ancestor_env

        try:
            return controller_address(ancestor_env("SSH_CONNECTION"))
        except Exception:  # pylint: disable=broad-except
            return ""


def observe(watch: Mapping[str, Any], facts: Mapping[str, Any], probe: Probe) -> dict[str, Any]:
    """What the node shows now of what ``watch`` names (see the module's O(watch)) plus its address facts."""
    units = probe.units(sorted(watch.get("units") or []))
    return {
        "files": {p: file_state(p) for p in sorted(watch.get("files") or [])},
        "dirs": {p: dir_files(p) for p in sorted(watch.get("dirs") or [])},
        "packages": {p: package_names(p) for p in sorted(watch.get("packages") or [])},
        "units": {u: units.get(u) for u in sorted(watch.get("units") or [])},
        "nft": {t: probe.nft_table(t) for t in sorted(watch.get("nft_tables") or [])},
        "mounts": mounts(probe.read("/etc/fstab"), probe.read("/proc/self/mountinfo")),
        "gpus": probe.gpus(),
        "controller": probe.controller() if watch.get("nft_tables") else "",
        "address": [
            facts.get("ansible_default_ipv4", {}).get("address", ""),
            sorted(facts.get("ansible_all_ipv4_addresses") or []),
        ],
        # Which interface reaches the head, its MTU, the RDMA ports: what ray_net_ifname auto exports follows them.
        "net": net_summary(facts.get("ansible_rlinfra_net")),
    }


def net_summary(net: object) -> dict[str, Any]:
    """The parts of ``ansible_rlinfra_net`` that decide Ray's address and the collectives' interface."""
    net = net if isinstance(net, dict) else {}
    return dict(
        links=sorted([k, v.get("mtu"), v.get("up")] for k, v in (net.get("links") or {}).items()),
        addresses=sorted(list(a) for a in net.get("addresses") or []),
        routes=sorted(
            [r.get("dest"), r.get("dev"), r.get("src"), r.get("via"), r.get("metric")] for r in net.get("routes") or []
        ),
        ib=sorted([p.get("hca"), p.get("port"), p.get("state")] for p in net.get("ib") or []),
    )


def _describe(category: str, key: str, before: Any, now: Any) -> str:
    """One phrase for a difference in one watched item."""
    if category in ("files", "dirs"):
        if category == "dirs" and isinstance(before, dict) and isinstance(now, dict):
            name = next(k for k in sorted(set(before) | set(now)) if before.get(k) != now.get(k))
            key, before, now = os.path.join(key, name), before.get(name), now.get(name)
        if before is None or now is None:
            return "%s %s" % (key, "appeared" if before is None else "is gone")
        return "%s changed (%s)" % (key, "content" if before[0] != now[0] else "mode or owner")
    what = {
        "packages": "the packages in %s" % key,
        "nft": "the live firewall table %s" % key,
        "mounts": "the mount at %s" % key,
        "gpus": "the GPUs",
        "controller": "the controller's address (the firewall admits it)",
        "address": "the node's addresses",
        "net": "the node's interfaces or routes",
    }.get(category, category)
    return "%s changed" % what


def _first_difference(before: Mapping[str, Any], now: Mapping[str, Any]) -> str:
    """A short description of the first watched item in which ``now`` differs from ``before``."""
    for category in sorted(set(before) | set(now)):
        old, new = before.get(category), now.get(category)
        if old == new:
            continue
        if isinstance(old, dict) and isinstance(new, dict):
            key = next(k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k))
            return _describe(category, key, old.get(key), new.get(key))
        return _describe(category, "", old, new)
    return ""


def verdict(record: Mapping[str, Any] | None, inputs: str | None, observed: Mapping[str, Any]) -> str:
    """'' when the node is as ``record`` says its last converge left it under the same ``inputs``, else why not
    (one short phrase)."""
    if not record:
        return "no converge record"
    if record.get("version") != VERSION:
        return "the converge record is from another version"
    if record.get("inputs") != inputs:
        return "the collection or the roles' variables changed"
    before = record.get("observed") or {}
    if before == observed:
        return ""
    units_before, units_now = before.get("units") or {}, observed.get("units") or {}
    for name in sorted(set(units_before) | set(units_now)):
        if units_before.get(name) != units_now.get(name):
            state = units_now.get(name) or ["not loaded", ""]
            return "%s is %s (%s)" % (name, state[0] or "not loaded", state[1] or "no unit file")
    return _first_difference(before, observed) or "the node changed"


def load(path: str) -> dict[str, Any] | None:
    """The record at ``path``; None when missing or unreadable (a half-written one counts as none)."""
    try:
        with open(path, encoding="utf-8") as handle:
            value = json.load(handle)
        return value if isinstance(value, dict) else None
    except (OSError, ValueError):
        return None


def check(params: Mapping[str, Any], module: Any) -> dict[str, Any]:
    """The module's state=check, for AnsibleModule or plain_module.PlainModule (``module``: get_bin_path and
    run_command): ``{ansible_facts, reason}`` - the node's facts (the record's too when the node is as recorded) and
    why it is not ('' when it is)."""
    facts = node_facts(ip_runner(module), params["fact_dir"], params["local"])
    record = load(params["path"])
    reason = "no inputs given" if not params["inputs"] else ""
    if record and not reason:
        reason = verdict(record, params["inputs"], observe(record.get("watch") or {}, facts, Probe(module)))
    elif not reason:
        reason = verdict(None, params["inputs"], {})
    if not reason:
        if record is None:  # never: without a record, verdict gives a reason (for the type checker)
            raise AssertionError("record is set here")
        facts.update(record.get("facts") or {})
    facts["ansible_converge_record"] = dict(
        converged=not reason, reason=reason, inputs=params["inputs"] or "", members=(record or {}).get("members") or []
    )
    return dict(ansible_facts=facts, reason=reason)


def write(params: Mapping[str, Any], module: Any) -> dict[str, Any]:
    """The module's state=write, for AnsibleModule or plain_module.PlainModule: what the node is now, recorded at
    ``params["path"]`` (root-only) unless it is already; ``recorded`` says whether it was (would be, in check mode)."""
    observed = observe(
        params["watch"], node_facts(ip_runner(module), params["fact_dir"], params["local"]), Probe(module)
    )
    text = content(params["inputs"], params["watch"], observed, params["facts"], params["members"])
    try:
        with open(params["path"], encoding="utf-8") as handle:
            recorded = handle.read() != text
    except OSError:
        recorded = True
    if recorded and not module.check_mode:
        makedirs(os.path.dirname(params["path"]) or ".", 0o755)
        write_atomic(params["path"], text, 0o600, prefix=".rlinfra-converged.")
    return dict(changed=False, recorded=recorded, reason="")


def run(module: Any) -> None:
    """The ``converge_record`` module's work, with its AnsibleModule: :func:`write` or :func:`check` by ``state``,
    exits through ``module``."""
    p = module.params
    module.exit_json(**(write(p, module) if p["state"] == "write" else dict(changed=False, **check(p, module))))


def content(
    inputs: str | None,
    watch: Mapping[str, Any],
    observed: Mapping[str, Any],
    facts: Mapping[str, Any],
    members: Iterable[str],
) -> str:
    return (
        json.dumps(
            dict(version=VERSION, inputs=inputs, watch=watch, observed=observed, facts=facts, members=sorted(members)),
            sort_keys=True,
            indent=1,
        )
        + "\n"
    )


def plan(
    hosts: Iterable[str],
    states: Mapping[str, Any],
    members_of: Callable[[str], tuple[str, Sequence[str]]],
    excluded: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Which of ``hosts`` site.yml converges fully: every host of a cluster in which any host is not as its record
    says, or whose recorded members differ from the cluster's members now. ``states``: {host: the check's
    ansible_converge_record}; ``members_of(host)``: (cluster name, its member hosts now, those left out excluded);
    ``excluded``: {host: its rlinfra_excluded fact} - workers fitness.yml left out, neither converged nor waited for.
    Returns {converge, checked, reasons, lines, excluded}: the lines say it per cluster, hosts grouped by reason."""
    excluded = excluded or {}
    clusters: dict[str, tuple[list[str], Sequence[str]]]
    left: dict[str, list[str]]
    clusters, left = {}, {}
    for host in hosts:
        name, members = members_of(host)
        if host in excluded:
            left.setdefault(name, []).append(host)
            continue
        clusters.setdefault(name, ([], members))[0].append(host)
    converge, checked, reasons, lines = [], [], {}, []
    for name, (in_play, members) in sorted(clusters.items()):
        why = {}
        for host in in_play:
            state = states.get(host) or {}
            if not state or state.get("reason"):
                why[host] = state.get("reason") or "not checked"
            elif sorted(state.get("members") or []) != sorted(members):
                why[host] = "the cluster's members changed"
        if why:
            converge += in_play
            reasons.update(why)
            grouped: dict[str, list[str]] = {}
            for host in in_play:
                if host in why:
                    grouped.setdefault(why[host], []).append(host)
            lines.append(
                "Cluster '%s': converging its %d node(s) in full - %s."
                % (name, len(in_play), "; ".join("%s: %s" % (", ".join(h), r) for r, h in grouped.items()))
            )
        else:
            checked += in_play
            lines.append(
                "Cluster '%s': all %d node(s) as their last converge left them (checked in one call each: inputs, "
                "files, packages, units, firewall, mounts, addresses); nothing to converge." % (name, len(in_play))
            )
    for name in sorted(left):
        for host in sorted(left[name]):
            fact = excluded[host] if isinstance(excluded[host], dict) else {}
            lines.append(
                "Cluster '%s': %s is left out (fitness.yml, since %s: %s); its Ray stays stopped until "
                "fitness.yml finds it fit again."
                % (name, host, fact.get("since") or "?", (fact.get("reason") or "unfit")[:300])
            )
    return dict(converge=converge, checked=checked, reasons=reasons, lines=lines, excluded=sorted(excluded))
