"""Every public function of module_utils and plugin_utils is annotated (its parameters and its return), and mypy,
run by scripts/gates.sh, checks them. A public function is one whose name has no leading underscore (methods of
public classes included, ``__init__`` too: its parameters are the class's interface)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted(p for d in ("plugins/module_utils", "plugins/plugin_utils") for p in (ROOT / d).rglob("*.py"))


def public_functions(tree):
    """(qualified name, node) of each public function: module level and in public classes, nested ones left out."""

    def walk(body, prefix):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if not node.name.startswith("_") or node.name == "__init__":
                    yield prefix + node.name, node
            elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                yield from walk(node.body, prefix + node.name + ".")

    return list(walk(tree.body, ""))


def unannotated(node):
    """What of ``node``'s signature has no annotation: parameter names, and 'return'."""
    args = node.args
    params = args.posonlyargs + args.args + args.kwonlyargs
    missing = [
        a.arg for i, a in enumerate(params) if a.annotation is None and not (i == 0 and a.arg in ("self", "cls"))
    ]
    missing += ["*" + a.arg for a in (args.vararg, args.kwarg) if a is not None and a.annotation is None]
    if node.returns is None and node.name != "__init__":
        missing.append("return")
    return missing


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ROOT / "plugins")) for p in FILES])
def test_public_functions_are_annotated(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    gaps = [
        "%s (line %d): %s" % (name, node.lineno, ", ".join(miss))
        for name, node in public_functions(tree)
        if (miss := unannotated(node))
    ]
    assert not gaps, "annotate these public functions of %s:\n  %s" % (path.name, "\n  ".join(gaps))


def test_the_check_finds_a_gap():
    tree = ast.parse(
        "class A:\n    def f(self, x: int):\n        return x\n    def _g(self, y):\n        pass\n"
        "def h(a: int, *rest) -> None:\n    pass\n"
    )
    assert [(n, unannotated(f)) for n, f in public_functions(tree)] == [("A.f", ["return"]), ("h", ["*rest"])]
