"""module_utils layout (docs/ARCHITECTURE.md, "module_utils layout"): a file named ``_name.py`` is a private helper of
its sub-package, so nothing outside that sub-package names it - no plugin, no other sub-package, no role or playbook.
The unit tests and the benchmarks may (they exercise the helper itself)."""

from __future__ import annotations

import os
import re
import subprocess

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MODULE_UTILS = os.path.join(ROOT, "plugins", "module_utils")
# Tests and benchmarks exercise a helper itself; changelog fragments are prose that may name a renamed file.
ALLOWED = ("tests/", "bench/", "changelogs/")


def private_helpers():
    return sorted(
        (package, name[:-3])
        for package in os.listdir(MODULE_UTILS)
        if os.path.isdir(os.path.join(MODULE_UTILS, package))
        for name in os.listdir(os.path.join(MODULE_UTILS, package))
        if name.startswith("_") and name.endswith(".py") and name != "__init__.py"
    )


def tracked():
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [path for path in out.splitlines() if path.endswith((".py", ".yml", ".yaml", ".j2", ".sh", ".cfg"))]


def test_private_helpers_are_named_only_inside_their_package():
    helpers = private_helpers()
    assert helpers, "no _name.py helper in module_utils: drop this test or the paragraph in docs/ARCHITECTURE.md"
    files = tracked()
    wrong = []
    for package, name in helpers:
        # "verl._experiment_yaml", "verl import _experiment_yaml", "verl/_experiment_yaml"
        named = re.compile(r"\b%s(?:\.|/|\s+import\s+(?:\([^)]*)?)\b%s\b" % (package, name))
        for path in files:
            if path.startswith(ALLOWED) or path.startswith("plugins/module_utils/%s/" % package):
                continue
            try:
                with open(os.path.join(ROOT, path), encoding="utf-8") as handle:
                    text = handle.read()
            except (OSError, UnicodeDecodeError):
                continue
            if named.search(text):
                wrong.append("%s names %s/%s.py" % (path, package, name))
    assert not wrong, "private module_utils helpers used outside their package:\n" + "\n".join(wrong)
