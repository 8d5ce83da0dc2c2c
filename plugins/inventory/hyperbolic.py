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
    C(hyperbolic_region), C(hyperbolic_source), C(hyperbolic_kind) (V(virtual-machine) or V(bare-metal)),
    C(hyperbolic_node) (the node's index in a bare-metal rental of several nodes, else null),
    C(hyperbolic_private_ip) (the rental's internal address, when the API gives one),
    C(hyperbolic_cost_per_hour) (dollars an hour, when the API gives the price), C(hyperbolic_user_metadata)
    (the rental's C(meta.userMetadata), when the earlier shape carries it) and C(ray_cluster).
  - On-demand rentals are read in both shapes the public clients read (docs/INVENTORY.md names them), the current
    one (C(providerData.sshNetworking), C(gpuType), C(gpuCount), C(currentTerm.costPerHourCents)) and the earlier
    one (C(meta.ssh_command), C(meta.resources.gpus), C(meta.gpu_count), C(meta.userMetadata), C(costPerHour) in
    cents). A bare-metal rental of several nodes (C(meta.node_networking)) becomes one host per node, named
    C(<label>-node<i>).
  - Without O(cluster_from), an instance this collection rented for a cluster (C(userMetadata.rlinfra.label))
    goes to that cluster; on-demand rentals keep only their label, C(<cluster>-<n>), so place them by setting
    O(cluster_from) to C(^(?P<cluster>.+)-[0-9]+$).
  - Every value that comes from the API is marked unsafe, so Jinja in an instance label (or any
    other API field) is never evaluated.
  - The inventory cache (O(cache)) stores the raw API answers only; filtering, naming, clusters,
    heads, O(compose), O(groups) and O(keyed_groups) are applied after the cache, so a cached run
    gives exactly the same inventory as the run that filled the cache, without any HTTP request.
  - An inventory that cannot be loaded adds no host and fails with one line naming the file and the cause
    (a rejected key with the HTTP status and the API's message, an unreachable API, malformed JSON, an
    answer of the wrong shape, every source answering 404, an unknown or invalid option); Ansible shows
    it as a warning, and the collection's playbooks that need a cluster then stop with one line when no
    host is in C(ray_head). File and option errors are found before any API request.
  - An instance whose SSH details cannot be used (an C(sshCommand) that is not
    C(ssh USER@HOST [-p PORT]), a port out of range, a host or user that is not a name, a host that names no
    machine such as C(0.0.0.0), or this machine's own loopback such as C(127.0.0.1), C(::1) or C(localhost)) is left
    out with one warning naming its id; it never becomes a host with a guessed address, nor the controller.
  - An instance the API lists more than once is one host when the copies agree, and is left out with one warning
    naming its id and the fields that differ when they do not (the answer contradicts itself).
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
      - A source that answers HTTP 404 (a retired API) is skipped with a warning; when every source
        answers 404 the inventory fails (the O(api_url) is most likely wrong).
      - A comma-separated string is read as a list.
    type: list
    elements: str
    choices: [on_demand, marketplace]
    default: [on_demand, marketplace]
  statuses:
    description:
      - Instance statuses to keep, compared case-insensitively.
      - An empty list, V(all) or V(*) keeps every instance.
      - When instances exist but none passes this filter (and O(name_pattern)), a warning lists the
        statuses seen, so a misspelt status does not pass for an empty account.
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
    description: Group that holds every host of this source (letters, digits and C(_)).
    type: str
    default: hyperbolic
  cluster_group_prefix:
    description: Prefix of the per-cluster groups (the cluster name is appended, made group-safe).
    type: str
    default: ray_cluster_
  default_user:
    description:
      - C(ansible_user) for instances whose SSH details name no user.
      - An C(sshCommand) without a user is only accepted when its host is an IP address or a dotted name.
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
  max_response_mib:
    description:
      - Largest API answer read, in MiB; a larger one fails the inventory with one line instead of being read whole.
    type: float
    default: 16
    env:
      - name: HYPERBOLIC_API_MAX_RESPONSE_MIB
  validate_certs:
    description: Verify the API's TLS certificate.
    type: bool
    default: true
    env:
      - name: HYPERBOLIC_VALIDATE_CERTS
notes:
  - A failure ends the process (status 1) right after its error line, whatever
    C([inventory] unparsed_is_failed) says, so no other inventory plugin retries the file and no
    playbook runs on a partial or empty inventory.
  - "Unknown options (a misspelt C(name_patern)) and boolean options that are neither true nor false
    (C(validate_certs: ture)) are errors, not silently ignored or read as false."
  - A cache entry that cannot be read or does not hold valid API answers is ignored with a warning
    and the API is asked again.
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

import difflib
import fnmatch
import os
import re
import traceback

from ansible import constants as C
from ansible.errors import AnsibleError, AnsibleParserError
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.inventory import BaseInventoryPlugin, Cacheable, Constructable
from ansible.utils.unsafe_proxy import wrap_var

from ansible_collections.rlinfra.verl.plugins.module_utils.common.masking import mask_values
from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic.client import (
    DEFAULT_SSH_USER,
    SOURCES,
    HyperbolicClient,
    HyperbolicError,
    check_api_key,
    check_api_url,
    check_number,
    expand_nodes,
    normalize_instances,
    one_line,
    redact_url,
    status_is_wanted,
    url_is_plain_remote_http,
    valid_ssh_user,
)
from ansible_collections.rlinfra.verl.plugins.plugin_utils.inventory_load import failed_before, give_up

try:  # ansible-core >= 2.19
    from ansible.errors import AnsibleTemplateSyntaxError
except ImportError:  # pragma: no cover - older cores report syntax errors as plain AnsibleError
    AnsibleTemplateSyntaxError = ()

CACHE_FORMAT = 1
PLUGIN = "rlinfra.verl.hyperbolic"

_HOST_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_GROUP_UNSAFE = re.compile(r"[^A-Za-z0-9_]+")
_GROUP_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_GROUP_PREFIX = re.compile(r"[A-Za-z0-9_]*")
# Host names are for people and `--limit`; the API's label stays complete in hyperbolic_label.
_MAX_NAME = 64
# Names Ansible gives a meaning of its own: a host called "localhost" would receive every
# `delegate_to: localhost` task, over SSH, on the rented machine.
_RESERVED_HOSTS = frozenset(("localhost", "127.0.0.1", "all", "ungrouped", "ray_head", "ray_workers"))
_BOOL_OPTIONS = ("validate_certs", "cache", "strict", "use_extra_vars", "leading_separator")
_MAX_SSH_WARNINGS = 5
# Every number has a ceiling: a timeout or wait of 1e300 seconds overflows the C time types the socket and sleep take.
_NUMBER_OPTIONS = (
    ("timeout", {"above": True, "maximum": 3600}),
    ("retries", {"maximum": 100, "integer": True}),
    ("retry_backoff", {"maximum": 3600}),
    ("retry_max_wait", {"maximum": 3600}),
    ("max_response_mib", {"above": True, "maximum": 1024}),
    ("cache_timeout", {"integer": True, "maximum": 366 * 86400}),
)


class _NotOurs(AnsibleParserError):
    """A file named like ours that names another plugin: the next enabled plugin may read it."""


# ------------------------------------------------------------------------------------------
# Pure helpers (unit-tested without an inventory)
# ------------------------------------------------------------------------------------------
def sanitize_host_name(value):
    """Reduce a label/id to ``[A-Za-z0-9._-]`` (runs of anything else become one ``-``), at most 64 characters."""
    if not value:
        return ""
    return _HOST_UNSAFE.sub("-", str(value)[: _MAX_NAME * 4]).strip("-.")[:_MAX_NAME].rstrip("-.")


def sanitize_group_part(value):
    """Reduce a value to ``[A-Za-z0-9_]`` for use inside a group name."""
    return _GROUP_UNSAFE.sub("_", str(value)[: _MAX_NAME * 4]).strip("_")[:_MAX_NAME] or "_"


def display_name(record):
    """The name an instance is matched and sorted by: its label, else its id."""
    return record.get("label") or record.get("id") or ""


def shown(value, limit=60):
    """API text quoted for a warning: one line, bounded, quotes added."""
    return one_line(repr(str(value)), limit)


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


def base_host_name(record):
    return sanitize_host_name(record.get("label")) or sanitize_host_name(record.get("id")) or "instance"


def assign_host_names(records, reserved=()):
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
                    "using '%s' (first by name)" % (one_line(cluster, 80), selector, head)
                )
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
        "hyperbolic_kind": unsafe(record.get("kind")),
        "hyperbolic_node": record.get("node"),
        "hyperbolic_private_ip": unsafe(record.get("private_ip")),
        "hyperbolic_cost_per_hour": record.get("cost_per_hour"),
        "hyperbolic_user_metadata": wrap_var(record["user_metadata"]) if record.get("user_metadata") else None,
    }


def rented_cluster(record):
    """The cluster the collection rented an instance for (``userMetadata.rlinfra.label``), else None."""
    meta = record.get("user_metadata") or {}
    ours = meta.get("rlinfra") if isinstance(meta.get("rlinfra"), dict) else {}
    label = ours.get("label")
    return label if isinstance(label, str) and label else None


def _error_text(exc):
    """One line from an exception: Ansible's own message (without its source excerpt) or str()."""
    text = getattr(exc, "message", None)
    if not isinstance(text, str) or not text:
        text = str(exc)
    cause = getattr(exc, "__cause__", None)
    # a YAML error says "Syntax error while loading YAML." and keeps the problem in its cause
    if cause is not None and len(text) < 40:
        detail = getattr(cause, "problem", None) or getattr(cause, "message", None) or str(cause)
        if detail and str(detail) not in text:
            text = "%s %s" % (text.rstrip("."), "(%s)" % one_line(detail, 120))
    return text


def _as_name_list(option, value, known=None):
    """A list of names from a YAML list or a comma-separated string; HyperbolicError otherwise."""
    if isinstance(value, str):
        value = [v for v in (p.strip() for p in value.split(",")) if v]
    if not isinstance(value, (list, tuple)):
        raise HyperbolicError("%s must be a list of names, got %s" % (option, shown(value, 60)))
    names = []
    for item in value:
        if not isinstance(item, str) or not item.strip():
            raise HyperbolicError("%s must be a list of names; %s is not a name" % (option, shown(item, 40)))
        names.append(item.strip())
    if known is not None:
        for name in names:
            if name not in known:
                raise HyperbolicError(
                    "unknown %s entry %s; choose from %s" % (option, shown(name, 40), ", ".join(known))
                )
    return names


# ------------------------------------------------------------------------------------------
# Plugin
# ------------------------------------------------------------------------------------------
class InventoryModule(BaseInventoryPlugin, Constructable, Cacheable):
    """Hyperbolic GPU instances as a Ray cluster inventory."""

    NAME = PLUGIN

    def verify_file(self, path):
        return super().verify_file(path) and str(path).endswith(("hyperbolic.yml", "hyperbolic.yaml"))

    # ---------------------------------------------------------------- entry point
    def parse(self, inventory, loader, path, cache=True):
        super().parse(inventory, loader, path, cache)
        self._secrets = []
        failed_before(inventory, path)
        try:
            self._parse(path, cache)
        except _NotOurs:
            raise
        except (AnsibleError, HyperbolicError) as exc:
            self._fail(path, _error_text(exc))
        except Exception as exc:  # pylint: disable=broad-except
            # still one line (and key-free); the traceback is there for a bug report
            self.display.vvv(self._scrub(traceback.format_exc()))
            self._fail(
                path, "unexpected %s: %s (a bug in the plugin? run with -vvv and report it)" % (type(exc).__name__, exc)
            )

    def _fail(self, path, message):
        give_up(self.inventory, path, "%s: cannot load %s: %s" % (PLUGIN, path, one_line(self._scrub(message), 1000)))

    def _scrub(self, text):
        # 4 characters at least: a shorter "secret" (a placeholder) would mask ordinary words of the message.
        secrets = [s for s in self._secrets + [os.environ.get("HYPERBOLIC_API_KEY")] if s and len(s) >= 4]
        return mask_values(str(text), secrets)

    def update_cache_if_changed(self):
        # the inventory is complete at this point: a cache that cannot be written costs the next
        # run an API call, it must not throw away this run's inventory
        try:
            super().update_cache_if_changed()
        except AttributeError:
            raise  # no cache in use: the inventory manager expects exactly this
        except Exception as exc:  # pylint: disable=broad-except
            self.display.warning("%s: could not write the inventory cache: %s" % (PLUGIN, one_line(_error_text(exc))))

    def _parse(self, path, cache):
        config = self._load_config_file(path)
        self._check_config_file(config)
        self._read_config_data(path)
        raw_key = self.get_option("api_key")
        if raw_key:
            self._secrets.append(str(raw_key).strip())
        settings = self._settings()
        records = self._load_records(path, cache, settings)
        self._populate(records, settings)

    # ---------------------------------------------------------------- the configuration file
    def _load_config_file(self, path):
        try:
            try:
                config = self.loader.load_from_file(path, cache="none", trusted_as_template=True)
            except TypeError:  # ansible-core < 2.19
                config = self.loader.load_from_file(path, cache="none")
        except Exception as exc:  # pylint: disable=broad-except
            line = getattr(getattr(exc, "obj", None), "line_num", None)
            where = " (line %s)" % line if isinstance(line, int) else ""
            raise AnsibleParserError("not a readable YAML file%s: %s" % (where, _error_text(exc))) from None
        if config is None or config == "":
            raise AnsibleParserError("the file is empty; it needs at least the line 'plugin: %s'" % PLUGIN)
        if not isinstance(config, dict):
            kinds = ((list, "a list"), (str, "a string"), (bool, "a boolean"), ((int, float), "a number"))
            kind = next((name for cls, name in kinds if isinstance(config, cls)), "a scalar")
            raise AnsibleParserError("the file must be a YAML mapping of options, not %s" % kind)
        return config

    def _check_config_file(self, config):
        """Checks on the file's own text, before Ansible converts it (and loses what was written)."""
        names = getattr(self, "_redirected_names", None) or [self.NAME]
        plugin = config.get("plugin")
        if plugin not in names:
            text = str(plugin).lower()
            if (
                plugin is not None
                and "hyperbol" not in text
                and difflib.SequenceMatcher(None, text, PLUGIN).ratio() < 0.75
            ):
                raise _NotOurs("Incorrect plugin name in file: %s" % plugin)
            raise HyperbolicError(
                "plugin is %s; a *hyperbolic.yml file needs 'plugin: %s'"
                % ("missing" if plugin is None else shown(plugin, 60), PLUGIN)
            )
        try:
            known = set(C.config.get_configuration_definitions("inventory", self._load_name) or ())
        except Exception:  # pylint: disable=broad-except
            known = set()
        if known:
            # a misspelt option (name_patern:) would otherwise be ignored: every instance of the
            # account would become a host
            for key in sorted(str(k) for k in config):
                if key not in known:
                    close = difflib.get_close_matches(key, sorted(known), n=1)
                    raise HyperbolicError(
                        "unknown option %s%s"
                        % (
                            shown(key, 40),
                            "; did you mean '%s'?" % close[0]
                            if close
                            else "; see ansible-doc -t inventory %s" % PLUGIN,
                        )
                    )
        if "sources" in config:
            if not _as_name_list("sources", config["sources"], known=list(SOURCES)):
                raise HyperbolicError("sources is empty; choose on_demand and/or marketplace")
        if "statuses" in config and config["statuses"] is not None:
            _as_name_list("statuses", config["statuses"])
        for option, kwargs in _NUMBER_OPTIONS:
            if config.get(option) is not None:
                check_number(option, config[option], **kwargs)
        # Ansible reads any unknown word as false: "validate_certs: ture" would turn TLS checks off
        for option in _BOOL_OPTIONS:
            if option in config and config[option] is not None:
                self._strict_bool(option, config[option])
        if "validate_certs" not in config and os.environ.get("HYPERBOLIC_VALIDATE_CERTS", "").strip():
            self._strict_bool("HYPERBOLIC_VALIDATE_CERTS", os.environ["HYPERBOLIC_VALIDATE_CERTS"])

    @staticmethod
    def _strict_bool(option, value):
        try:
            boolean(value, strict=True)
        except TypeError:
            raise HyperbolicError("%s must be true or false, got %s" % (option, shown(value, 40))) from None

    # ---------------------------------------------------------------- options, checked before any request
    def _settings(self):
        settings = {}
        settings["sources"] = self._sources()
        statuses = self.get_option("statuses")
        settings["statuses"] = _as_name_list("statuses", [] if statuses is None else statuses)
        settings["api_url"] = check_api_url(self.get_option("api_url"))
        for option, kwargs in _NUMBER_OPTIONS:
            settings[option] = check_number(option, self.get_option(option), **kwargs)
        group = self.get_option("group") or "hyperbolic"
        if not _GROUP_NAME.fullmatch(group):
            raise HyperbolicError(
                "group %s is not a valid group name (letters, digits and _, not "
                "starting with a digit)" % shown(group, 60)
            )
        settings["group"] = group
        prefix = self.get_option("cluster_group_prefix")
        prefix = "ray_cluster_" if prefix is None else prefix
        if not _GROUP_PREFIX.fullmatch(prefix):
            raise HyperbolicError("cluster_group_prefix %s may only hold letters, digits and _" % shown(prefix, 60))
        settings["cluster_group_prefix"] = prefix
        default_user = self.get_option("default_user") or DEFAULT_SSH_USER
        if not valid_ssh_user(default_user):
            raise HyperbolicError("default_user %s is not a valid user name" % shown(default_user, 40))
        settings["default_user"] = default_user
        settings["cluster_namer"] = self._cluster_namer()
        if url_is_plain_remote_http(settings["api_url"]):
            self.display.warning(
                "%s: api_url %s is plain http to a remote host: the API key crosses the "
                "network unencrypted; use https" % (PLUGIN, redact_url(settings["api_url"]))
            )
        return settings

    def _sources(self):
        sources = _as_name_list("sources", self.get_option("sources") or [], known=list(SOURCES))
        if not sources:
            raise HyperbolicError("sources is empty; choose on_demand and/or marketplace")
        return list(dict.fromkeys(sources))

    def _api_key(self):
        key = self.get_option("api_key")
        if key and ("{{" in key or "{%" in key):
            # e.g. api_key: "{{ vault_hyperbolic_api_key }}" with -e @vault.yml
            self.templar.available_variables = self._vars or {}
            try:
                key = self.templar.template(key)
            except AnsibleError as exc:
                raise HyperbolicError("api_key template failed: %s" % _error_text(exc)) from None
        if key:
            self._secrets.append(str(key).strip())
        return check_api_key(key)

    def _client(self):
        return HyperbolicClient(
            api_key=self._api_key(),
            api_url=self.get_option("api_url"),
            timeout=self.get_option("timeout"),
            retries=self.get_option("retries"),
            retry_backoff=self.get_option("retry_backoff"),
            retry_max_wait=self.get_option("retry_max_wait"),
            # null (validate_certs: with nothing after it) is the default, never "off"
            validate_certs=self.get_option("validate_certs") is not False,
            max_response_mib=self.get_option("max_response_mib"),
        )

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
                except AnsibleTemplateSyntaxError as exc:
                    # the option is broken for every instance: not a per-instance miss
                    raise HyperbolicError("cluster_from is not a valid Jinja template: %s" % _error_text(exc)) from None
                except Exception as exc:  # pylint: disable=broad-except
                    if strict:
                        raise AnsibleParserError(
                            "cluster_from failed for %s: %s" % (shown(display_name(record)), _error_text(exc))
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
        try:
            regex = re.compile(spec)
        except re.error as exc:
            raise HyperbolicError("cluster_from is not a valid regular expression: %s" % exc) from None
        return lambda record, hvars: cluster_from_regex(regex, record)

    # ---------------------------------------------------------------- fetch + cache
    def _fetch(self, sources):
        client = self._client()
        raw = client.fetch(sources)
        raw["format"] = CACHE_FORMAT
        self.display.vvv("%s: %d request(s) to %s" % (PLUGIN, client.requests_made, client.api_url))
        return raw

    @staticmethod
    def _cache_miss_reason(cached, api_url, sources):
        """None for a usable entry, ``(False, why)`` for a stale one, ``(True, why)`` for a broken one."""
        if not isinstance(cached, dict):
            return True, "it is %s, not a JSON object" % type(cached).__name__
        if "format" not in cached or not isinstance(cached.get("api_url"), str):
            return True, "it lacks format/api_url"
        if cached.get("format") != CACHE_FORMAT:
            return False, "written by another version"
        if cached["api_url"].rstrip("/") != api_url:
            return False, "api_url changed"
        have = cached.get("sources")
        skipped = cached.get("skipped", {})
        if not isinstance(have, dict) or not isinstance(skipped, dict):
            return True, "sources/skipped are not JSON objects"
        if not all(isinstance(v, str) for v in skipped.values()):
            return True, "skipped holds something other than messages"
        if not all(s in have or s in skipped for s in sources):
            return False, "a requested source is not cached"
        return None

    def _load_records(self, path, cache, settings):
        """``(records, notes)`` from the cache when it is usable, else from the API.

        Raw answers are normalised before anything is shown or stored, so a broken answer (from
        the API or from the cache) never yields a partial inventory and is never cached.
        """
        sources = settings["sources"]
        use_cache = bool(self.get_option("cache"))
        cache_key = self.get_cache_key(path) if use_cache else None
        if use_cache and cache:
            problem = None
            try:
                cached = self._cache[cache_key]
            except KeyError:
                cached = None
            except Exception as exc:  # pylint: disable=broad-except
                # an unreadable cache file must cost an API call, not the inventory
                cached = None
                problem = "unreadable: %s" % one_line(_error_text(exc).split(". ")[0], 200)
            if cached is not None:
                miss = self._cache_miss_reason(cached, settings["api_url"], sources)
                problem = miss[1] if miss and miss[0] else None
                if miss is None:
                    try:
                        result = self._normalize(cached, sources, settings["default_user"])
                        self.display.vvv("%s: using cached API results for %s" % (PLUGIN, path))
                        return result
                    except HyperbolicError as exc:
                        problem = str(exc)
            if problem:
                self.display.warning(
                    "%s: ignoring the cached API answers for %s (%s); asking the API again"
                    % (PLUGIN, path, one_line(problem, 200))
                )
        raw = self._fetch(sources)
        result = self._normalize(raw, sources, settings["default_user"])
        if use_cache:
            self._cache[cache_key] = raw
        return result

    @staticmethod
    def _normalize(raw, sources, default_user):
        """Validated records of every requested source, plus the warnings they call for."""
        skipped = raw.get("skipped") or {}
        records, notes = [], []
        for source in sources:
            note = (raw.get("notes") or {}).get(source)
            if isinstance(note, str):
                notes.append("%s: %s" % (PLUGIN, one_line(note, 300)))
        for source in sources:
            if source in skipped:
                notes.append("%s: source '%s' skipped: %s (retired API?)" % (PLUGIN, source, one_line(skipped[source])))
                continue
            items = raw["sources"][source]
            by_id = {}
            for record in normalize_instances(source, items, default_user):
                by_id.setdefault(record["id"], []).append(record)
            for ident in sorted(by_id):
                copies = by_id[ident]
                if len(copies) > 1:
                    differ = sorted({k for c in copies for k in c if c.get(k) != copies[0].get(k)})
                    if differ:
                        # Two machines under one id, or one described two ways: either copy may be the wrong host.
                        notes.append(
                            "%s: %s instance %s is listed %d times with different %s: the provider's answer "
                            "is contradictory, so which machine it is cannot be known; left out - check the "
                            "rental in Hyperbolic's console"
                            % (PLUGIN, source, shown(ident), len(copies), ", ".join(differ))
                        )
                        continue
                    # the same machine listed twice must not become two Ray nodes
                    notes.append(
                        "%s: %s instance %s is listed %d times; using one" % (PLUGIN, source, shown(ident), len(copies))
                    )
                records.extend(expand_nodes(copies[:1]))
        if all(s in skipped for s in sources):
            raise HyperbolicError(
                "every source answered HTTP 404 (%s); check api_url (or HYPERBOLIC_API_URL)"
                % ("; ".join("%s: %s" % (s, one_line(skipped[s], 120)) for s in sources))
            )
        return records, notes

    def _select(self, records, notes, settings):
        for note in notes:
            self.display.warning(note)
        kept = filter_records(records, settings["statuses"], self.get_option("name_pattern"))
        if records and not kept:
            # a misspelt status or pattern looks exactly like an empty account otherwise
            pattern = self.get_option("name_pattern")
            filters = ["statuses [%s]" % ", ".join(settings["statuses"])] if settings["statuses"] else []
            filters += ["name_pattern %s" % shown(pattern)] if pattern else []
            seen = sorted({(r.get("status") or "").strip().lower() or "(none)" for r in records})
            self.display.warning(
                "%s: none of the %d instance(s) passed %s; statuses seen: %s"
                % (PLUGIN, len(records), " and ".join(filters), one_line(", ".join(seen), 120))
            )
        broken = [r for r in kept if not r.get("ssh") and r.get("ssh_error")]
        for record in sorted(broken, key=lambda r: (r["source"], r["id"]))[:_MAX_SSH_WARNINGS]:
            self.display.warning(
                "%s: instance %s (%s) left out: %s"
                % (PLUGIN, shown(record["id"]), record["source"], one_line(record["ssh_error"], 300))
            )
        if len(broken) > _MAX_SSH_WARNINGS:
            self.display.warning(
                "%s: %d more instance(s) with unusable SSH details left out" % (PLUGIN, len(broken) - _MAX_SSH_WARNINGS)
            )
        unreachable = [r for r in kept if not r.get("ssh") and not r.get("ssh_error")]
        if unreachable:
            ids = ", ".join(shown(n, 40)[1:-1] for n in sorted(display_name(r) for r in unreachable)[:10])
            self.display.warning(
                "%s: %d instance(s) without SSH details left out: %s%s"
                % (PLUGIN, len(unreachable), ids, " ..." if len(unreachable) > 10 else "")
            )
        return [r for r in kept if r.get("ssh")]

    # ---------------------------------------------------------------- inventory
    def _populate(self, loaded, settings):
        records = self._select(loaded[0], loaded[1], settings)
        reserved = _RESERVED_HOSTS | {settings["group"]}
        named = assign_host_names(records, reserved)
        for name, record in named:
            base = base_host_name(record)
            if base in reserved and name != base:
                self.display.warning(
                    "%s: instance %s is named %s, which Ansible reserves; host name %s used"
                    % (PLUGIN, shown(record["id"]), shown(base), name)
                )

        inventory = self.inventory
        group = inventory.add_group(settings["group"])
        head_group = inventory.add_group("ray_head")
        workers_group = inventory.add_group("ray_workers")
        # a literal: the group names are built from it now, so it must not be templated later
        default_cluster = unsafe(self.get_option("default_cluster") or "default")
        namer = settings["cluster_namer"]
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
            cluster = namer(record, hvars) if namer else rented_cluster(record)
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

        prefix = settings["cluster_group_prefix"]
        cluster_groups = {}
        for cluster in sorted(clusters):
            gname = prefix + sanitize_group_part(cluster)
            if gname in cluster_groups.values():
                self.display.warning("%s: Ray clusters with similar names share the group %s" % (PLUGIN, gname))
            cluster_groups[cluster] = inventory.add_group(gname)
            head = heads[cluster]
            for name, _match in clusters[cluster]:
                inventory.add_child(head_group if name == head else workers_group, name)
                inventory.add_child(cluster_groups[cluster], name)

        if groups or keyed_groups:
            for name, _record in named:
                if groups:
                    self._add_host_to_composed_groups(groups, {}, name, strict=strict)
                for index, entry in enumerate(keyed_groups):
                    try:
                        self._add_host_to_keyed_groups([entry], {}, name, strict=strict)
                    except AnsibleParserError as exc:
                        kind = re.search(r"got: <class '([\w.]+)'>", str(exc))
                        if not kind:
                            raise
                        for added, _dummy in named:  # a broken inventory adds no host, even for a moment
                            inventory.remove_host(inventory.get_host(added))
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
                        raise HyperbolicError(
                            "keyed_groups[%d] (key %s) gave %s for host %s, and a group name is made from text: "
                            "end the key with | string (e.g. key: hyperbolic_gpu_count | string)"
                            % (
                                index,
                                shown(entry.get("key") if isinstance(entry, dict) else entry, 60),
                                word,
                                shown(name, 60),
                            )
                        ) from None
