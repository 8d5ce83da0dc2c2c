# Copyright: (c) 2025, rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""What the ``rlinfra.verl.hyperbolic`` inventory makes of the instances it keeps: hosts, clusters and groups.

* Host names: ``sanitize_host_name``, ``assign_host_names`` (unique, deterministic, never a name Ansible reserves),
  ``name_hosts`` (the same, with the warnings for reserved names).
* Host variables: ``host_vars``, every API value marked unsafe (``unsafe``).
* Ray clusters: ``cluster_namer`` (the ``cluster_from`` option as a regular expression or a Jinja template),
  ``cluster_from_regex``, ``rented_cluster`` (the cluster this collection rented an instance for), ``choose_heads``.
* Groups: ``sanitize_group_part``, ``cluster_groups`` (one group per cluster), ``keyed_group_error`` (the line for a
  ``keyed_groups`` key that gives no text).

Pure functions, unit-tested without an inventory; the plugin (plugins/inventory/hyperbolic.py) adds the hosts.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterable
from typing import Any, Optional

from ansible.errors import AnsibleParserError
from ansible.utils.unsafe_proxy import wrap_var

from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic.client import HyperbolicError, one_line
from ansible_collections.rlinfra.verl.plugins.plugin_utils.hyperbolic_options import PLUGIN, error_text, shown

try:  # ansible-core >= 2.19
    from ansible.errors import AnsibleTemplateSyntaxError

    _TEMPLATE_SYNTAX_ERRORS: tuple[type[BaseException], ...] = (AnsibleTemplateSyntaxError,)
except ImportError:  # pragma: no cover - older cores report syntax errors as plain AnsibleError
    _TEMPLATE_SYNTAX_ERRORS = ()

Record = dict[str, Any]
# (record, host variables) -> cluster name, or None for "not placed"
ClusterNamer = Callable[[Record, dict[str, Any]], Optional[str]]

_HOST_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_GROUP_UNSAFE = re.compile(r"[^A-Za-z0-9_]+")
# Host names are for people and `--limit`; the API's label stays complete in hyperbolic_label.
_MAX_NAME = 64
# Names Ansible gives a meaning of its own: a host called "localhost" would receive every
# `delegate_to: localhost` task, over SSH, on the rented machine.
RESERVED_HOSTS = frozenset(("localhost", "127.0.0.1", "all", "ungrouped", "ray_head", "ray_workers"))


def sanitize_host_name(value: object) -> str:
    """Reduce a label/id to ``[A-Za-z0-9._-]`` (runs of anything else become one ``-``), at most 64 characters."""
    if not value:
        return ""
    return _HOST_UNSAFE.sub("-", str(value)[: _MAX_NAME * 4]).strip("-.")[:_MAX_NAME].rstrip("-.")


def sanitize_group_part(value: object) -> str:
    """Reduce a value to ``[A-Za-z0-9_]`` for use inside a group name."""
    return _GROUP_UNSAFE.sub("_", str(value)[: _MAX_NAME * 4]).strip("_")[:_MAX_NAME] or "_"


def display_name(record: Record) -> str:
    """The name an instance is matched and sorted by: its label, else its id."""
    return record.get("label") or record.get("id") or ""


def base_host_name(record: Record) -> str:
    """The host name an instance asks for before clashes are settled: its sanitised label, else id."""
    return sanitize_host_name(record.get("label")) or sanitize_host_name(record.get("id")) or "instance"


def assign_host_names(records: Iterable[Record], reserved: Iterable[str] = ()) -> list[tuple[str, Record]]:
    """Unique, deterministic host names: ``[(name, record), ...]`` sorted by name.

    The base name is the sanitised label, else the sanitised id. Instances are processed in an
    order that depends only on their data (not on the API's ordering), and a name that clashes
    (with another instance, or with one of ``reserved``) gets ``-<id>`` (then ``-2``, ``-3``, ...)
    appended.
    """
    keyed = []
    for record in records:
        keyed.append((base_host_name(record), str(record.get("source") or ""), str(record.get("id") or ""), record))
    keyed.sort(key=lambda k: k[:3])
    used = set(reserved)
    named = []
    for base, _source, ident, record in keyed:
        name = base
        if name in used:
            sid = sanitize_host_name(ident)
            name = "%s-%s" % (base, sid) if sid and sid != base else base
            n = 2
            stem = name
            while name in used:
                name = "%s-%d" % (stem, n)
                n += 1
        used.add(name)
        named.append((name, record))
    named.sort(key=lambda item: item[0])
    return named


def name_hosts(records: Iterable[Record], group: str) -> tuple[list[tuple[str, Record]], list[str]]:
    """``(named, warnings)``: ``assign_host_names`` with Ansible's reserved names and ``group`` kept free, and one
    warning for each instance whose own name was one of them."""
    reserved = RESERVED_HOSTS | {group}
    named = assign_host_names(records, reserved)
    warnings = []
    for name, record in named:
        base = base_host_name(record)
        if base in reserved and name != base:
            warnings.append(
                "%s: instance %s is named %s, which Ansible reserves; host name %s used"
                % (PLUGIN, shown(record["id"]), shown(base), name)
            )
    return named, warnings


def cluster_from_regex(regex: re.Pattern[str], record: Record) -> str | None:
    """Cluster name from a compiled regex searched in the label (or id); None when no match."""
    match = regex.search(display_name(record))
    if not match:
        return None
    if "cluster" in regex.groupindex:
        return match.group("cluster")
    if regex.groups:
        return match.group(1)
    return match.group(0)


def choose_heads(
    clusters: dict[str, list[tuple[str, str]]], selector: str | None = "first"
) -> tuple[dict[str, str], list[str]]:
    """Pick one head per cluster.

    ``clusters`` maps a cluster name to a list of ``(host_name, match_name)``.
    Returns ``(heads, warnings)``: ``heads`` maps cluster -> head host name.
    """
    heads = {}
    warnings = []
    selector = (selector or "first").strip()
    for cluster in sorted(clusters):
        members = sorted(clusters[cluster])
        if not members:
            continue
        if selector == "first":
            head = members[0][0]
        elif selector == "last":
            head = members[-1][0]
        else:
            matching = [m for m in members if fnmatch.fnmatchcase(m[1], selector)]
            if matching:
                head = matching[0][0]
            else:
                head = members[0][0]
                warnings.append(
                    "rlinfra.verl.hyperbolic: no member of Ray cluster '%s' matches head_selector '%s'; "
                    "using '%s' (first by name)" % (one_line(cluster, 80), selector, head)
                )
        heads[cluster] = head
    return heads, warnings


def cluster_groups(
    clusters: Iterable[str], prefix: str, add_group: Callable[[str], str]
) -> tuple[dict[str, str], list[str]]:
    """``({cluster: group name}, warnings)``: one group per Ray cluster, made with ``add_group`` (the inventory's,
    which returns the name it used), in cluster order, with a warning for each cluster whose group an earlier
    cluster already took."""
    groups: dict[str, str] = {}
    warnings = []
    for cluster in sorted(clusters):
        gname = prefix + sanitize_group_part(cluster)
        if gname in groups.values():
            warnings.append("%s: Ray clusters with similar names share the group %s" % (PLUGIN, gname))
        groups[cluster] = add_group(gname)
    return groups, warnings


def keyed_group_error(exc: BaseException, index: int, entry: object, host: str) -> HyperbolicError | None:
    """The one line for a ``keyed_groups`` entry whose key gave no text, from Ansible's error; None for any other."""
    kind = re.search(r"got: <class '([\w.]+)'>", str(exc))
    if not kind:
        return None
    word = kind.group(1).rsplit(".", 1)[-1].lower()
    word = (
        "a number"
        if "int" in word or "float" in word
        else "a boolean"
        if "bool" in word
        else "null"
        if "none" in word
        else "a value that is not text"
    )
    # Ansible's line names only a Python class: say which entry, what it gave, and the fix.
    return HyperbolicError(
        "keyed_groups[%d] (key %s) gave %s for host %s, and a group name is made from text: "
        "end the key with | string (e.g. key: hyperbolic_gpu_count | string)"
        % (
            index,
            shown(entry.get("key") if isinstance(entry, dict) else entry, 60),
            word,
            shown(host, 60),
        )
    )


# ansible-core >= 2.19 (data tagging): a plain, untagged ``str`` is never trusted as a template,
# and ``wrap_var`` returns it unchanged; older cores return an AnsibleUnsafeText. Only values
# that could carry trust (tagged strings, or any string on older cores) need the call.
_PLAIN_STR_IS_UNSAFE = type(wrap_var("x")) is str  # pylint: disable=unidiomatic-typecheck


def unsafe(value: Any) -> Any:
    """Mark one API value unsafe (``wrap_var``), skipping the no-op case for speed."""
    if value is None or (_PLAIN_STR_IS_UNSAFE and type(value) is str):  # pylint: disable=unidiomatic-typecheck
        return value
    return wrap_var(value)


def host_vars(record: Record) -> dict[str, Any]:
    """The host variables of one instance, every API value marked unsafe."""
    ssh = record.get("ssh") or {}
    gpu_count = record.get("gpu_count")
    port = ssh.get("port")
    return {
        "ansible_host": unsafe(ssh.get("host")),
        "ansible_port": int(port) if port is not None else None,
        "ansible_user": unsafe(ssh.get("user")),
        "hyperbolic_id": unsafe(record.get("id")),
        "hyperbolic_label": unsafe(record.get("label")),
        "hyperbolic_status": unsafe(record.get("status")),
        "hyperbolic_gpu_type": unsafe(record.get("gpu_type")),
        "hyperbolic_gpu_count": int(gpu_count) if gpu_count is not None else None,
        "hyperbolic_region": unsafe(record.get("region")),
        "hyperbolic_source": unsafe(record.get("source")),
        "hyperbolic_kind": unsafe(record.get("kind")),
        "hyperbolic_node": record.get("node"),
        "hyperbolic_private_ip": unsafe(record.get("private_ip")),
        "hyperbolic_cost_per_hour": record.get("cost_per_hour"),
        "hyperbolic_user_metadata": wrap_var(record["user_metadata"]) if record.get("user_metadata") else None,
    }


def rented_cluster(record: Record) -> str | None:
    """The cluster the collection rented an instance for (``userMetadata.rlinfra.label``), else None."""
    meta = record.get("user_metadata") or {}
    ours: Any = meta.get("rlinfra") if isinstance(meta.get("rlinfra"), dict) else {}
    label = ours.get("label")
    return label if isinstance(label, str) and label else None


def cluster_namer(spec: str | None, templar: Callable[[], Any], strict: Callable[[], Any]) -> ClusterNamer | None:
    """The ``cluster_from`` option as a function ``(record, hostvars) -> cluster name or None``; None without it.

    ``templar`` and ``strict`` give the plugin's Templar and its ``strict`` option, asked only for a template.
    A template is tried once on a made-up instance, so a syntax error (HyperbolicError) stops the run before any
    request; so does a regular expression that does not compile.
    """
    if not spec:
        return None
    if "{{" in spec or "{%" in spec:
        return _template_namer(spec, templar(), strict())
    try:
        regex = re.compile(spec)
    except re.error as exc:
        raise HyperbolicError("cluster_from is not a valid regular expression: %s" % exc) from None
    return lambda record, hvars: cluster_from_regex(regex, record)


def _template_namer(spec: str, templar: Any, strict: Any) -> ClusterNamer:
    def by_template(record: Record, hvars: dict[str, Any]) -> str | None:
        templar.available_variables = hvars
        try:
            value = templar.template(spec)
        except _TEMPLATE_SYNTAX_ERRORS as exc:
            # the option is broken for every instance: not a per-instance miss
            raise HyperbolicError("cluster_from is not a valid Jinja template: %s" % error_text(exc)) from None
        except Exception as exc:  # pylint: disable=broad-except
            if strict:
                raise AnsibleParserError(
                    "cluster_from failed for %s: %s" % (shown(display_name(record)), error_text(exc))
                ) from exc
            return None
        return None if value is None else str(value).strip()

    # one trial run on a made-up instance, so a syntax error stops the run before any request
    dummy = {"source": "on_demand", "id": "x", "label": "x", "status": "running", "ssh": None}
    try:
        by_template(dummy, host_vars(dummy))
    except HyperbolicError:
        raise
    except Exception:  # pylint: disable=broad-except
        pass
    return by_template
