# -*- coding: utf-8 -*-
# Copyright: (c) 2025, rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
name: hyperbolic
short_description: Ray cluster inventory from Hyperbolic GPU instances
version_added: 0.1.0
author:
  - rlinfra maintainers (@rlinfra)
description:
  - Lists the GPU instances of a Hyperbolic account (on-demand virtual machine rentals and
    marketplace instances) and turns them into an inventory for Ray clusters.
  - Every instance becomes one host in the O(group) group. Instances are split into Ray clusters
    (host variable C(ray_cluster), see O(cluster_from)); each cluster gets exactly one head,
    chosen deterministically (O(head_selector)), in the C(ray_head) group; the other members go to
    C(ray_workers). Each cluster also gets a C(ray_cluster_<name>) group.
  - Host names are the instance label (or, without a label, its id), reduced to letters, digits,
    C(.), C(_) and C(-); clashing names get the instance id appended, so every name is unique.
  - Host variables are C(ansible_host), C(ansible_port), C(ansible_user), C(hyperbolic_id),
    C(hyperbolic_label), C(hyperbolic_status), C(hyperbolic_gpu_type), C(hyperbolic_gpu_count),
    C(hyperbolic_region), C(hyperbolic_source) and C(ray_cluster).
  - Every value that comes from the API is marked unsafe, so Jinja in an instance label (or any
    other API field) is never evaluated.
  - The inventory cache (O(cache)) stores the raw API answers only; filtering, naming, clusters,
    heads, O(compose), O(groups) and O(keyed_groups) are applied after the cache, so a cached run
    gives exactly the same inventory as the run that filled the cache, without any HTTP request.
  - Uses a YAML configuration file whose name ends with C(hyperbolic.yml) or C(hyperbolic.yaml).
  - The plugin must be enabled, for example in C(ansible.cfg) with
    C([inventory] enable_plugins = rlinfra.verl.hyperbolic, host_list, script, auto, yaml, ini, toml).
extends_documentation_fragment:
  - constructed
  - inventory_cache
options:
  plugin:
    description: Marks this file as an inventory source for this plugin.
    required: true
    type: str
    choices: [rlinfra.verl.hyperbolic]
  api_key:
    description:
      - "Hyperbolic API key, sent as C(Authorization: Bearer KEY)."
      - Required unless the inventory is served from the cache.
      - Prefer the environment variable (or a vaulted variable referenced as C({{ var }}) and passed
        with C(-e)); the key is never logged, never cached and never part of the inventory.
    type: str
    env:
      - name: HYPERBOLIC_API_KEY
  api_url:
    description: Base URL of the Hyperbolic API.
    type: str
    default: https://api.hyperbolic.xyz
    env:
      - name: HYPERBOLIC_API_URL
  sources:
    description:
      - Which APIs to list instances from (asked concurrently), merged in this order.
      - V(on_demand) is C(GET /v2/on-demand/virtual-machine-rentals), V(marketplace) is
        C(GET /v1/marketplace/instances).
      - A source that answers HTTP 404 (a retired API) is skipped with a warning.
    type: list
    elements: str
    choices: [on_demand, marketplace]
    default: [on_demand, marketplace]
  statuses:
    description:
      - Instance statuses to keep, compared case-insensitively.
      - An empty list, V(all) or V(*) keeps every instance.
    type: list
    elements: str
    default: [running, online]
  name_pattern:
    description:
      - Shell-style glob (C(fnmatch), case-sensitive) an instance's label must match to be kept;
        instances without a label are matched on their id.
    type: str
  cluster_from:
    description:
      - How to derive C(ray_cluster) from an instance.
      - A Jinja template (anything containing C({{) or C({%)) is rendered with the instance's
        C(hyperbolic_*) variables, for example C({{ hyperbolic_label.split('-')[0] }}).
      - Anything else is a Python regular expression searched in the label (or the id when there is
        no label); the named group C(cluster), else the first group, else the whole match is the
        cluster name.
      - Instances for which the result is empty (no match) go to O(default_cluster).
      - A C(ray_cluster) set through O(compose) wins over this option.
    type: str
  default_cluster:
    description: C(ray_cluster) of instances that O(cluster_from) does not place.
    type: str
    default: default
  head_selector:
    description:
      - How each cluster's head is chosen. Members are sorted by host name; V(first) takes the
        first, V(last) the last.
      - Any other value is a glob matched against the label (or id); the first matching member is
        the head. A cluster where nothing matches falls back to V(first), with a warning.
    type: str
    default: first
  group:
    description: Group that holds every host of this source.
    type: str
    default: hyperbolic
  cluster_group_prefix:
    description: Prefix of the per-cluster groups (the cluster name is appended, made group-safe).
    type: str
    default: ray_cluster_
  default_user:
    description: C(ansible_user) for instances whose SSH details name no user.
    type: str
    default: ubuntu
  timeout:
    description: Seconds to wait for each HTTP answer.
    type: float
    default: 30
    env:
      - name: HYPERBOLIC_API_TIMEOUT
  retries:
    description: How many times a timed out, HTTP 429 or HTTP 5xx request is retried.
    type: int
    default: 4
    env:
      - name: HYPERBOLIC_API_RETRIES
  retry_backoff:
    description:
      - First wait between retries, in seconds; it doubles at every retry (with jitter).
      - A C(Retry-After) header from the API is honoured, up to O(retry_max_wait).
    type: float
    default: 1.0
    env:
      - name: HYPERBOLIC_API_RETRY_BACKOFF
  retry_max_wait:
    description: Longest single wait between retries, in seconds.
    type: float
    default: 60
    env:
      - name: HYPERBOLIC_API_RETRY_MAX_WAIT
  validate_certs:
    description: Verify the API's TLS certificate.
    type: bool
    default: true
    env:
      - name: HYPERBOLIC_VALIDATE_CERTS
notes:
  - Errors are raised as inventory parse failures. Set C([inventory] unparsed_is_failed = true) (or
    C(ANSIBLE_INVENTORY_UNPARSED_FAILED=true)) to make C(ansible-playbook) stop on them instead of
    running with an empty inventory.
"""

EXAMPLES = r"""
# inventories/prod.hyperbolic.yml -- minimal; the key comes from HYPERBOLIC_API_KEY
plugin: rlinfra.verl.hyperbolic

---
# Two experiments side by side: labels "exp-a-0", "exp-a-1", "exp-b-0", ... form the Ray
# clusters "a" and "b"; each cluster's head is its member labelled "*-0".
plugin: rlinfra.verl.hyperbolic
name_pattern: "exp-*"
cluster_from: '^exp-(?P<cluster>[^-]+)-'
head_selector: "*-0"

---
# Clusters from a template, only on-demand rentals, cached for 10 minutes,
# plus extra groups by GPU type and region.
plugin: rlinfra.verl.hyperbolic
sources: [on_demand]
cluster_from: "{{ hyperbolic_region | default('default', true) }}"
cache: true
cache_plugin: ansible.builtin.jsonfile
cache_connection: ~/.cache/rlinfra-hyperbolic
cache_timeout: 600
keyed_groups:
  - key: hyperbolic_gpu_type | lower | regex_replace('[^a-z0-9]+', '_')
    prefix: gpu
  - key: hyperbolic_region
    prefix: region
groups:
  big_nodes: hyperbolic_gpu_count >= 8
compose:
  ansible_ssh_private_key_file: "'~/.ssh/hyperbolic_ed25519'"
"""

import fnmatch
import os
import re
import time

from ansible.errors import AnsibleError, AnsibleParserError
from ansible.plugins.inventory import BaseInventoryPlugin, Cacheable, Constructable
from ansible.utils.unsafe_proxy import wrap_var

from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic import (
    DEFAULT_SSH_USER,
    SOURCES,
    HyperbolicClient,
    HyperbolicError,
    normalize_instances,
    status_is_wanted,
)

CACHE_FORMAT = 1

# Ansible tries a source with every enabled plugin until one succeeds, and the ``auto`` plugin
# loads this one again for the same file: without this memo an unreachable API would be asked
# (and waited on, retries included) twice per run. A failure is reused for a few seconds only,
# so a later ``meta: refresh_inventory`` really asks again.
_RECENT_FAILURES = {}
_FAILURE_MEMO_SECONDS = 5.0
_HOST_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_GROUP_UNSAFE = re.compile(r"[^A-Za-z0-9_]+")


class _FetchFailed(Exception):
    """The API could not be read (already a one-line, key-free message)."""

    def __init__(self, message):
        super().__init__(message)
        self.message = message


# ------------------------------------------------------------------------------------------
# Pure helpers (unit-tested without an inventory)
# ------------------------------------------------------------------------------------------
def sanitize_host_name(value):
    """Reduce a label/id to ``[A-Za-z0-9._-]`` (runs of anything else become one ``-``)."""
    if not value:
        return ""
    return _HOST_UNSAFE.sub("-", str(value)).strip("-.")


def sanitize_group_part(value):
    """Reduce a value to ``[A-Za-z0-9_]`` for use inside a group name."""
    return _GROUP_UNSAFE.sub("_", str(value)).strip("_") or "_"


def display_name(record):
    """The name an instance is matched and sorted by: its label, else its id."""
    return record.get("label") or record.get("id") or ""


def filter_records(records, statuses=None, name_pattern=None):
    """Keep instances whose status is wanted and whose label (or id) matches ``name_pattern``."""
    wanted = {str(s).strip().lower() for s in (statuses or [])}
    out = []
    for record in records:
        if not status_is_wanted(record.get("status"), wanted):
            continue
        if name_pattern and not fnmatch.fnmatchcase(display_name(record), name_pattern):
            continue
        out.append(record)
    return out


def assign_host_names(records):
    """Unique, deterministic host names: ``[(name, record), ...]`` sorted by name.

    The base name is the sanitised label, else the sanitised id. Instances are processed in an
    order that depends only on their data (not on the API's ordering), and a clashing name gets
    ``-<id>`` (then ``-2``, ``-3``, ...) appended.
    """
    keyed = []
    for record in records:
        base = sanitize_host_name(record.get("label")) or sanitize_host_name(record.get("id")) or "instance"
        keyed.append((base, str(record.get("source") or ""), str(record.get("id") or ""), record))
    keyed.sort(key=lambda k: k[:3])
    used = set()
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


def cluster_from_regex(regex, record):
    """Cluster name from a compiled regex searched in the label (or id); None when no match."""
    match = regex.search(display_name(record))
    if not match:
        return None
    if "cluster" in regex.groupindex:
        return match.group("cluster")
    if regex.groups:
        return match.group(1)
    return match.group(0)


def choose_heads(clusters, selector="first"):
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
                    "using '%s' (first by name)" % (cluster, selector, head))
        heads[cluster] = head
    return heads, warnings


# ansible-core >= 2.19 (data tagging): a plain, untagged ``str`` is never trusted as a template,
# and ``wrap_var`` returns it unchanged; older cores return an AnsibleUnsafeText. Only values
# that could carry trust (tagged strings, or any string on older cores) need the call.
_PLAIN_STR_IS_UNSAFE = type(wrap_var("x")) is str  # pylint: disable=unidiomatic-typecheck


def unsafe(value):
    """Mark one API value unsafe (``wrap_var``), skipping the no-op case for speed."""
    if value is None or (_PLAIN_STR_IS_UNSAFE and type(value) is str):  # pylint: disable=unidiomatic-typecheck
        return value
    return wrap_var(value)


def host_vars(record):
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
    }


# ------------------------------------------------------------------------------------------
# Plugin
# ------------------------------------------------------------------------------------------
class InventoryModule(BaseInventoryPlugin, Constructable, Cacheable):
    """Hyperbolic GPU instances as a Ray cluster inventory."""

    NAME = "rlinfra.verl.hyperbolic"

    def verify_file(self, path):
        return super().verify_file(path) and str(path).endswith(("hyperbolic.yml", "hyperbolic.yaml"))

    # ---------------------------------------------------------------- options
    def _sources(self):
        sources = self.get_option("sources") or []
        seen = []
        for source in sources:
            source = str(source).strip()
            if source not in SOURCES:
                raise AnsibleParserError(
                    "rlinfra.verl.hyperbolic: unknown source %r (choose from %s)" % (source, ", ".join(SOURCES)))
            if source not in seen:
                seen.append(source)
        if not seen:
            raise AnsibleParserError("rlinfra.verl.hyperbolic: 'sources' is empty")
        return seen

    def _api_key(self):
        key = self.get_option("api_key")
        if key and ("{{" in key or "{%" in key):
            # e.g. api_key: "{{ vault_hyperbolic_api_key }}" with -e @vault.yml
            self.templar.available_variables = self._vars or {}
            key = self.templar.template(key)
        if not key:
            raise AnsibleParserError(
                "rlinfra.verl.hyperbolic: no API key: set HYPERBOLIC_API_KEY or the api_key option")
        return str(key)

    def _client(self):
        return HyperbolicClient(
            api_key=self._api_key(),
            api_url=self.get_option("api_url"),
            timeout=self.get_option("timeout"),
            retries=self.get_option("retries"),
            retry_backoff=self.get_option("retry_backoff"),
            retry_max_wait=self.get_option("retry_max_wait"),
            validate_certs=self.get_option("validate_certs"),
        )

    # ---------------------------------------------------------------- fetch + cache
    def _fetch(self, sources):
        client = self._client()
        try:
            raw = client.fetch(sources)
        except HyperbolicError as exc:
            raise _FetchFailed("rlinfra.verl.hyperbolic: %s" % client.scrub(exc)) from None
        raw["format"] = CACHE_FORMAT
        self.display.vvv("rlinfra.verl.hyperbolic: %d request(s) to %s" % (client.requests_made, client.api_url))
        return raw

    @staticmethod
    def _cache_usable(cached, api_url, sources):
        if not isinstance(cached, dict) or cached.get("format") != CACHE_FORMAT:
            return False
        if str(cached.get("api_url", "")).rstrip("/") != api_url:
            return False
        have = cached.get("sources") or {}
        skipped = cached.get("skipped") or {}
        return all(s in have or s in skipped for s in sources)

    def _raw_results(self, path, cache):
        """Raw API answers, from the cache when allowed and valid, else from the API."""
        sources = self._sources()
        api_url = str(self.get_option("api_url") or "").rstrip("/")
        use_cache = bool(self.get_option("cache"))
        cache_key = self.get_cache_key(path) if use_cache else None
        if use_cache and cache:
            try:
                cached = self._cache[cache_key]
            except KeyError:
                cached = None
            if cached is not None and self._cache_usable(cached, api_url, sources):
                self.display.vvv("rlinfra.verl.hyperbolic: using cached API results for %s" % path)
                return cached, sources
        raw = self._fetch(sources)
        if use_cache:
            self._cache[cache_key] = raw
        return raw, sources

    # ---------------------------------------------------------------- parse
    def parse(self, inventory, loader, path, cache=True):
        super().parse(inventory, loader, path, cache)
        self._read_config_data(path)
        memo_key = os.path.abspath(str(path))
        recent = _RECENT_FAILURES.get(memo_key)
        if recent and time.monotonic() - recent[0] < _FAILURE_MEMO_SECONDS:
            raise AnsibleError(recent[1])
        try:
            raw, sources = self._raw_results(path, cache)
        except _FetchFailed as exc:
            _RECENT_FAILURES[memo_key] = (time.monotonic(), exc.message)
            raise AnsibleError(exc.message) from None
        _RECENT_FAILURES.pop(memo_key, None)
        self._populate(raw, sources)

    def _records(self, raw, sources):
        default_user = self.get_option("default_user") or DEFAULT_SSH_USER
        records = []
        skipped = raw.get("skipped") or {}
        for source in sources:
            if source in skipped:
                self.display.warning(
                    "rlinfra.verl.hyperbolic: source '%s' skipped: %s (retired API?)" % (source, skipped[source]))
                continue
            try:
                records.extend(normalize_instances(source, raw["sources"][source], default_user))
            except HyperbolicError as exc:
                raise AnsibleParserError("rlinfra.verl.hyperbolic: %s" % exc) from None
        if skipped and len(skipped) >= len(sources):
            self.display.warning("rlinfra.verl.hyperbolic: every source answered 404; no hosts from this inventory")
        records = filter_records(records, self.get_option("statuses"), self.get_option("name_pattern"))
        unreachable = [r for r in records if not r.get("ssh")]
        if unreachable:
            ids = ", ".join(sorted(display_name(r) for r in unreachable)[:10])
            self.display.warning(
                "rlinfra.verl.hyperbolic: %d instance(s) without SSH details left out: %s%s"
                % (len(unreachable), ids, " ..." if len(unreachable) > 10 else ""))
            records = [r for r in records if r.get("ssh")]
        return records

    def _cluster_namer(self):
        """Return a function (record, hostvars) -> cluster name or None."""
        spec = self.get_option("cluster_from")
        if not spec:
            return None
        if "{{" in spec or "{%" in spec:
            templar = self.templar
            strict = self.get_option("strict")

            def by_template(record, hvars):
                templar.available_variables = hvars
                try:
                    value = templar.template(spec)
                except Exception as exc:  # pylint: disable=broad-except
                    if strict:
                        raise AnsibleParserError(
                            "rlinfra.verl.hyperbolic: cluster_from failed for %s: %s" % (display_name(record), exc))
                    return None
                return None if value is None else str(value).strip()
            return by_template
        try:
            regex = re.compile(spec)
        except re.error as exc:
            raise AnsibleParserError("rlinfra.verl.hyperbolic: cluster_from is not a valid regex: %s" % exc)
        return lambda record, hvars: cluster_from_regex(regex, record)

    def _populate(self, raw, sources):
        records = self._records(raw, sources)
        named = assign_host_names(records)

        inventory = self.inventory
        group = inventory.add_group(self.get_option("group") or "hyperbolic")
        head_group = inventory.add_group("ray_head")
        workers_group = inventory.add_group("ray_workers")
        # a literal: the group names are built from it now, so it must not be templated later
        default_cluster = unsafe(self.get_option("default_cluster") or "default")
        namer = self._cluster_namer()
        compose = self.get_option("compose") or {}
        groups = self.get_option("groups") or {}
        keyed_groups = self.get_option("keyed_groups") or []
        strict = self.get_option("strict")

        # Host variables go in one dict update per host rather than one set_variable call per
        # variable: on ansible-core 2.19 each set_variable call re-visits (type-checks, copies,
        # origin-tags) the value and untags the key, about 90% of this plugin's time at thousands
        # of hosts. The values are fresh str/int/None objects already marked unsafe and the keys
        # are fixed identifiers, so the result is the same; compose/groups/keyed_groups still go
        # through the regular Constructable helpers.
        clusters = {}
        for name, record in named:
            hvars = host_vars(record)
            cluster = namer(record, hvars) if namer else None
            hvars["ray_cluster"] = unsafe(cluster) if cluster else default_cluster
            inventory.add_host(name, group=group)
            host = inventory.get_host(name)
            if isinstance(getattr(host, "vars", None), dict):
                host.vars.update(hvars)
            else:  # pragma: no cover - defensive, for a future Host without a plain vars dict
                for key, value in hvars.items():
                    inventory.set_variable(name, key, value)
            if compose:
                self._set_composite_vars(compose, inventory.get_host(name).get_vars(), name, strict=strict)
                if "ray_cluster" in compose:
                    composed = inventory.get_host(name).vars.get("ray_cluster")
                    if composed in (None, ""):
                        composed = default_cluster
                    if not isinstance(composed, str):
                        composed = str(composed)
                    hvars["ray_cluster"] = composed
                    inventory.set_variable(name, "ray_cluster", composed)
            clusters.setdefault(str(hvars["ray_cluster"]), []).append((name, display_name(record)))

        heads, warnings = choose_heads(clusters, self.get_option("head_selector"))
        for message in warnings:
            self.display.warning(message)

        prefix = self.get_option("cluster_group_prefix")
        prefix = "ray_cluster_" if prefix is None else prefix
        cluster_groups = {}
        for cluster in sorted(clusters):
            gname = prefix + sanitize_group_part(cluster)
            if gname in cluster_groups.values():
                self.display.warning(
                    "rlinfra.verl.hyperbolic: Ray clusters with similar names share the group %s" % gname)
            cluster_groups[cluster] = inventory.add_group(gname)
            head = heads[cluster]
            for name, _match in clusters[cluster]:
                inventory.add_child(head_group if name == head else workers_group, name)
                inventory.add_child(cluster_groups[cluster], name)

        if groups or keyed_groups:
            for name, _record in named:
                if groups:
                    self._add_host_to_composed_groups(groups, {}, name, strict=strict)
                if keyed_groups:
                    self._add_host_to_keyed_groups(keyed_groups, {}, name, strict=strict)
