"""Helpers shared by tests/unit/test_hyperbolic_*.py (imported explicitly, not a conftest).

Runs the inventory plugin in-process without installing Ansible's global collection loader
(which would change imports for every other test in the session): the plugin class is imported
through ``collections/`` on sys.path and its option definitions are registered the way the
plugin loader does it.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for _p in (str(ROOT / "collections"), str(ROOT)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hyperbolic"
PLUGIN_NAME = "rlinfra.verl.hyperbolic"


def load_fixture(name):
    return json.loads((FIXTURES / name).read_text())


def raw_answer(on_demand=None, marketplace=None, skipped=None, api_url="http://127.0.0.1:9"):
    """A raw API result exactly as the plugin caches it."""
    from ansible_collections.rlinfra.verl.plugins.inventory import hyperbolic as plugin_mod

    sources = {}
    if on_demand is not None:
        sources["on_demand"] = on_demand
    if marketplace is not None:
        sources["marketplace"] = marketplace
    return {"format": plugin_mod.CACHE_FORMAT, "api_url": api_url, "sources": sources, "skipped": dict(skipped or {})}


def fixture_answer(api_url="http://127.0.0.1:9"):
    return raw_answer(
        on_demand=load_fixture("on_demand_rentals.json"),
        marketplace=load_fixture("marketplace_instances.json")["instances"],
        api_url=api_url,
    )


_DEFS_DONE = False


def _register_definitions(module):
    """What PluginLoader._load_config_defs does, for this one plugin."""
    global _DEFS_DONE
    if _DEFS_DONE:
        return
    import yaml
    from ansible import constants as C
    from ansible.plugins.loader import fragment_loader
    from ansible.utils.plugin_docs import add_fragments

    try:
        from ansible._internal._datatag._tags import TrustedAsTemplate

        doc_src = TrustedAsTemplate().tag(module.DOCUMENTATION)
        from ansible.parsing.yaml.loader import AnsibleLoader

        doc = yaml.load(doc_src, Loader=AnsibleLoader)  # noqa: S506 (Ansible's own safe loader)
    except ImportError:  # older ansible-core
        doc = yaml.safe_load(module.DOCUMENTATION)
    add_fragments(doc, module.__file__, fragment_loader=fragment_loader, is_module=False)
    C.config.initialize_plugin_configuration_definitions("inventory", PLUGIN_NAME, doc["options"])
    _DEFS_DONE = True


class Harness:
    """Run the plugin's parse against canned raw API results, counting API fetches."""

    def __init__(self, tmp_path, raw, monkeypatch):
        from ansible_collections.rlinfra.verl.plugins.inventory import hyperbolic as plugin_mod

        self.mod = plugin_mod
        self.tmp_path = Path(tmp_path)
        self.raw = raw
        self.fetches = 0
        self.warnings = []
        _register_definitions(plugin_mod)
        harness = self

        def fake_fetch(plugin_self, sources):
            harness.fetches += 1
            if isinstance(harness.raw, Exception):
                raise harness.raw
            answer = copy.deepcopy(harness.raw)
            answer["sources"] = {s: v for s, v in answer["sources"].items() if s in sources}
            answer["skipped"] = {s: v for s, v in answer["skipped"].items() if s in sources}
            return answer

        monkeypatch.setattr(plugin_mod.InventoryModule, "_fetch", fake_fetch)

    def write_config(self, options, name="test.hyperbolic.yml"):
        import yaml

        config = {"plugin": PLUGIN_NAME, "api_key": "unit-test-key", "api_url": "http://127.0.0.1:9"}
        config.update(options or {})
        path = self.tmp_path / name
        path.write_text(yaml.safe_dump(config))
        return path

    def parse(self, options=None, cache=True, path=None):
        """Parse and return a plain snapshot {hosts: {name: vars}, groups: {name: [hosts]}}."""
        from ansible.inventory.data import InventoryData
        from ansible.parsing.dataloader import DataLoader

        path = path or self.write_config(options)
        plugin = self.mod.InventoryModule()
        plugin._load_name = PLUGIN_NAME
        warnings = self.warnings

        class _Display:
            def __getattr__(self, name):
                return lambda *a, **k: None

            def warning(self, msg, *a, **k):
                warnings.append(str(msg))

        plugin.display = _Display()
        inventory = InventoryData()
        plugin.parse(inventory, DataLoader(), str(path), cache=cache)
        try:
            plugin.update_cache_if_changed()
        except AttributeError:
            pass
        self.plugin = plugin
        self.inventory = inventory
        return snapshot(inventory)


def snapshot(inventory):
    hosts = {}
    for name, host in inventory.hosts.items():
        hosts[name] = {k: v for k, v in host.vars.items() if k not in ("inventory_file", "inventory_dir")}
    groups = {}
    for name, group in inventory.groups.items():
        if name in ("all", "ungrouped"):
            continue
        groups[name] = sorted(h.name for h in group.hosts)
    return {"hosts": hosts, "groups": groups}
