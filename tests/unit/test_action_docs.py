"""Each action plugin's ``ARGUMENT_SPEC`` (what it accepts) and its module stub's ``DOCUMENTATION`` (what
``ansible-doc`` and the gates' validate-modules read) describe the same options: names, types, element
types, required, defaults and choices. A hand copy that drifts shows up here, not in a user's run."""

from __future__ import annotations

import glob
import importlib
import os

import pytest
import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
ACTIONS = sorted(
    os.path.basename(p)[:-3]
    for p in glob.glob(os.path.join(ROOT, "plugins", "action", "*.py"))
    if not p.endswith("__init__.py")
)


def _spec(name):
    return importlib.import_module("ansible_collections.rlinfra.verl.plugins.action." + name).ARGUMENT_SPEC


def _doc(name):
    module = importlib.import_module("ansible_collections.rlinfra.verl.plugins.modules." + name)
    doc = yaml.safe_load(module.DOCUMENTATION)
    options = dict(doc.get("options") or {})
    for fragment in doc.get("extends_documentation_fragment") or []:
        namespace, collection, rest = fragment.split(".", 2)
        assert (namespace, collection) == ("rlinfra", "verl"), fragment
        frag_name, _, attr = rest.partition(".")
        frag = importlib.import_module("ansible_collections.rlinfra.verl.plugins.doc_fragments." + frag_name)
        # A fragment may bring only attributes (rlinfra.verl.attributes), no option.
        options.update(
            yaml.safe_load(getattr(frag.ModuleDocFragment, attr.upper() or "DOCUMENTATION")).get("options") or {}
        )
    return options


def _norm(option, doc):
    out = {
        "type": option.get("type", "str"),
        "required": bool(option.get("required", False)),
        "elements": option.get("elements"),
        "choices": sorted(option.get("choices") or []) or None,
    }
    if not doc or "default" in option:
        out["default"] = option.get("default")
    return out


def test_every_action_has_a_documented_stub():
    assert ACTIONS, "no action plugins found"
    for name in ACTIONS:
        assert os.path.exists(os.path.join(ROOT, "plugins", "modules", name + ".py")), name


@pytest.mark.parametrize("name", ACTIONS)
def test_argument_spec_matches_documentation(name):
    spec, doc = _spec(name), _doc(name)
    assert sorted(spec) == sorted(doc), "options differ: only in spec %s, only in doc %s" % (
        sorted(set(spec) - set(doc)),
        sorted(set(doc) - set(spec)),
    )
    for option in spec:
        got, want = _norm(spec[option], False), _norm(doc[option], True)
        if "default" not in want:  # the doc leaves it out: only a spec without a default agrees
            want["default"] = None
        assert got == want, "%s.%s: spec %s, doc %s" % (name, option, got, want)
