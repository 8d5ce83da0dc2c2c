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

import os
import traceback

from ansible.errors import AnsibleError, AnsibleParserError
from ansible.plugins.inventory import BaseInventoryPlugin, Cacheable, Constructable

from ansible_collections.rlinfra.verl.plugins.module_utils.common.masking import mask_values
from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic.client import (
    HyperbolicClient,
    HyperbolicError,
    check_api_key,
    one_line,
)
from ansible_collections.rlinfra.verl.plugins.plugin_utils.hyperbolic_hosts import (
    choose_heads,
    cluster_groups,
    cluster_namer,
    display_name,
    host_vars,
    keyed_group_error,
    name_hosts,
    rented_cluster,
    unsafe,
)
from ansible_collections.rlinfra.verl.plugins.plugin_utils.hyperbolic_options import (
    PLUGIN,
    NotOurs,
    check_config_file,
    error_text,
    load_config_file,
    plain_http_warning,
    read_settings,
)
from ansible_collections.rlinfra.verl.plugins.plugin_utils.hyperbolic_records import (
    CACHE_FORMAT,
    from_cache,
    normalize,
    select_records,
)
from ansible_collections.rlinfra.verl.plugins.plugin_utils.inventory_load import failed_before, give_up

# The rules (options, records, names, clusters, groups) live in plugins/plugin_utils/hyperbolic_*.py; this file is
# the Ansible glue: the cache, the inventory, the Constructable options and the one line of a failure.


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
        except NotOurs:
            raise
        except (AnsibleError, HyperbolicError) as exc:
            self._fail(path, error_text(exc))
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
            self.display.warning("%s: could not write the inventory cache: %s" % (PLUGIN, one_line(error_text(exc))))

    def _parse(self, path, cache):
        config = load_config_file(self.loader, path)
        check_config_file(config, getattr(self, "_redirected_names", None) or [self.NAME], self._load_name)
        self._read_config_data(path)
        raw_key = self.get_option("api_key")
        if raw_key:
            self._secrets.append(str(raw_key).strip())
        settings = self._settings()
        records = self._load_records(path, cache, settings)
        self._populate(records, settings)

    # ---------------------------------------------------------------- options, checked before any request
    def _settings(self):
        settings = read_settings(self.get_option)
        settings["cluster_namer"] = cluster_namer(
            self.get_option("cluster_from"), lambda: self.templar, lambda: self.get_option("strict")
        )
        warning = plain_http_warning(settings["api_url"])
        if warning:
            self.display.warning(warning)
        return settings

    def _api_key(self):
        key = self.get_option("api_key")
        if key and ("{{" in key or "{%" in key):
            # e.g. api_key: "{{ vault_hyperbolic_api_key }}" with -e @vault.yml
            self.templar.available_variables = self._vars or {}
            try:
                key = self.templar.template(key)
            except AnsibleError as exc:
                raise HyperbolicError("api_key template failed: %s" % error_text(exc)) from None
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

    # ---------------------------------------------------------------- fetch + cache
    def _fetch(self, sources):
        client = self._client()
        raw = client.fetch(sources)
        raw["format"] = CACHE_FORMAT
        self.display.vvv("%s: %d request(s) to %s" % (PLUGIN, client.requests_made, client.api_url))
        return raw

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
                problem = "unreadable: %s" % one_line(error_text(exc).split(". ")[0], 200)
            if cached is not None:
                result, problem = from_cache(cached, settings["api_url"], sources, settings["default_user"])
                if result is not None:
                    self.display.vvv("%s: using cached API results for %s" % (PLUGIN, path))
                    return result
            if problem:
                self.display.warning(
                    "%s: ignoring the cached API answers for %s (%s); asking the API again"
                    % (PLUGIN, path, one_line(problem, 200))
                )
        raw = self._fetch(sources)
        result = normalize(raw, sources, settings["default_user"])
        if use_cache:
            self._cache[cache_key] = raw
        return result

    # ---------------------------------------------------------------- inventory
    def _populate(self, loaded, settings):
        for note in loaded[1]:
            self.display.warning(note)
        records, warnings = select_records(loaded[0], settings["statuses"], self.get_option("name_pattern"))
        named, more = name_hosts(records, settings["group"])
        for message in warnings + more:
            self.display.warning(message)

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
        group_of, more = cluster_groups(clusters, settings["cluster_group_prefix"], inventory.add_group)
        for message in warnings + more:
            self.display.warning(message)
        for cluster in sorted(clusters):
            for name, _match in clusters[cluster]:
                inventory.add_child(head_group if name == heads[cluster] else workers_group, name)
                inventory.add_child(group_of[cluster], name)

        if groups or keyed_groups:
            for name, _record in named:
                if groups:
                    self._add_host_to_composed_groups(groups, {}, name, strict=strict)
                for index, entry in enumerate(keyed_groups):
                    try:
                        self._add_host_to_keyed_groups([entry], {}, name, strict=strict)
                    except AnsibleParserError as exc:
                        error = keyed_group_error(exc, index, entry, name)
                        if error is None:
                            raise
                        for added, _dummy in named:  # a broken inventory adds no host, even for a moment
                            inventory.remove_host(inventory.get_host(added))
                        raise error from None
