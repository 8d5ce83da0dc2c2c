"""Which module_utils files may run on a node, decided from the import graph (read with ast, nothing imported).

The graph starts at every module in plugins/modules/ (AnsiballZ ships what a module imports from module_utils) and
at every entry of ``SCRIPTED`` in plugins/plugin_utils/node_script.py, with ``common.plain_module`` that every script
loads (docs/ARCHITECTURE.md 3.1); it follows the collection's module_utils imports - absolute and relative,
``from <package> import <submodule>`` too, in a function as well as at the top - transitively.

- A file reached from a ``SCRIPTED`` entry runs as a plain script, where no Ansible exists: it imports the standard
  library (``sys.stdlib_module_names``) and module_utils only. An import of anything else inside a function (loaded
  only when called) is allowed only where listed in ``LAZY``: verl/config_check.py's hydra and omegaconf, today.
  ``hyperbolic/client.py``'s ``open_url`` (``ansible.module_utils.urls``, imported on the first request) is reached
  from modules only (hyperbolic_instance), where AnsiballZ ships it, and from the idle guard's program, which
  node_script.closure is told about (``lazy_ansible``); no ``SCRIPTED`` entry reaches it, and this test keeps it so.
- A file reached from a module runs under AnsiballZ, which ships ``ansible.module_utils`` and the collection's
  module_utils, nothing else: at import time it may use those and the standard library; a third-party import or
  another part of Ansible inside a function only where listed in ``LAZY``.
- A module file is its documentation, its ``ARGS`` and ``main()`` calling a module_utils function: it holds no class
  and no function but ``main``, and ``main`` is one statement (``test_a_module_file_holds_no_logic``, every module
  file; ``test_the_module_check_finds_logic`` shows the check finds each kind of logic).
"""

from __future__ import annotations

import ast
import functools
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLUGINS = ROOT / "plugins"
MODULES = PLUGINS / "modules"
MODULE_UTILS = PLUGINS / "module_utils"
NODE_SCRIPT = PLUGINS / "plugin_utils" / "node_script.py"
COLLECTION = "ansible_collections.rlinfra.verl"
PACKAGE = COLLECTION + ".plugins.module_utils"
STDLIB = frozenset(sys.stdlib_module_names) | {"__future__"}

# (module_utils file, what it imports) allowed inside a function although not where it runs (see the docstring):
# verl/config_check.py imports hydra and omegaconf in check_verl_config only, and says "skipped" without them; it
# runs in the controller's Python or in the head's image (verl/image_config_check.py sends its source there).
LAZY: frozenset[tuple[str, str]] = frozenset(
    {
        ("verl/config_check.py", "hydra"),
        ("verl/config_check.py", "hydra.core.global_hydra"),
        ("verl/config_check.py", "omegaconf"),
    }
)


@dataclass(frozen=True)
class Import:
    target: str  # the dotted module name
    lazy: bool  # inside a function: loaded only when it runs
    line: int


def module_name(path: Path) -> str:
    """The dotted name of a file of the collection's plugins (a package's ``__init__.py``: the package)."""
    parts = list(path.relative_to(PLUGINS).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([COLLECTION, "plugins"] + parts)


def utils_file(name: str) -> Path | None:
    """The file of module_utils module or package ``name`` (dotted, from ``ansible_collections``), None if none."""
    if name != PACKAGE and not name.startswith(PACKAGE + "."):
        return None
    base = MODULE_UTILS.joinpath(*name[len(PACKAGE) + 1 :].split(".")) if name != PACKAGE else MODULE_UTILS
    for path in (base.with_suffix(".py") if name != PACKAGE else None, base / "__init__.py"):
        if path is not None and path.is_file():
            return path
    return None


def is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(source: str, name: str, package: bool = False) -> list[Import]:
    """Every import of module ``name``'s ``source``: relative ones resolved, ``from X import y`` giving X and, where
    X.y is a module_utils file, X.y too; ``if TYPE_CHECKING:`` blocks left out (they never run)."""
    here = name if package else name.rpartition(".")[0]
    found: list[Import] = []

    def visit(node: ast.AST, lazy: bool) -> None:
        if isinstance(node, ast.If) and _type_checking(node.test):
            for child in node.orelse:
                visit(child, lazy)
            return
        if isinstance(node, ast.Import):
            found.extend(Import(alias.name, lazy, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = here.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            found.append(Import(base, lazy, node.lineno))
            for alias in node.names:
                if alias.name != "*" and utils_file(base + "." + alias.name) is not None:
                    found.append(Import(base + "." + alias.name, lazy, node.lineno))
        lazy = lazy or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for child in ast.iter_child_nodes(node):
            visit(child, lazy)

    visit(ast.parse(source), False)
    return found


def kind(target: str) -> str:
    """stdlib, module_utils, ansible.module_utils, ansible (the rest of it), collection (other plugins), third-party."""
    top = target.split(".")[0]
    if top in STDLIB:
        return "stdlib"
    if target == PACKAGE or target.startswith(PACKAGE + "."):
        return "module_utils"
    if target == "ansible.module_utils" or target.startswith("ansible.module_utils."):
        return "ansible.module_utils"
    if top == "ansible":
        return "ansible"
    if top == "ansible_collections":
        return "collection"
    return "third-party"


def with_packages(name: str) -> list[str]:
    """``name`` and the packages above it, below module_utils (importing a module runs their ``__init__``)."""
    parts = name[len(PACKAGE) + 1 :].split(".")
    return [".".join([PACKAGE] + parts[:n]) for n in range(1, len(parts) + 1)]


def reach(starts: list[str]) -> dict[str, Path]:
    """{module name: file} of the module_utils ``starts`` and every module_utils file they import, at any depth."""
    return dict(_reach(tuple(starts)))


@functools.lru_cache(maxsize=None)
def _reach(starts: tuple[str, ...]) -> tuple[tuple[str, Path], ...]:
    seen: dict[str, Path] = {}
    todo = [n for start in starts for n in with_packages(start)]
    while todo:
        name = todo.pop()
        path = utils_file(name)
        if name in seen or path is None:
            continue
        seen[name] = path
        for imp in imports(path.read_text(encoding="utf-8"), name, is_package(path)):
            if kind(imp.target) == "module_utils":
                todo.extend(with_packages(imp.target))
    return tuple(sorted(seen.items()))


@functools.lru_cache(maxsize=None)
def node_script_value(name: str) -> Any:
    """The literal value node_script.py assigns to ``name`` at its top level, read from its source."""
    tree = ast.parse(NODE_SCRIPT.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError("no %s in %s" % (name, NODE_SCRIPT))


def scripted() -> dict[str, tuple[str, str]]:
    """node_script.SCRIPTED: {module: (module_utils module, dotted below module_utils, function)}."""
    return node_script_value("SCRIPTED")


def plain_module() -> str:
    """node_script.PLAIN_MODULE: the module every script loads besides the function's."""
    return node_script_value("PLAIN_MODULE")


def scripted_starts() -> list[str]:
    return sorted(
        {"%s.%s" % (PACKAGE, utils) for utils, dummy in scripted().values()} | {"%s.%s" % (PACKAGE, plain_module())}
    )


def module_files() -> list[Path]:
    return sorted(p for p in MODULES.glob("*.py") if p.name != "__init__.py")


def module_starts() -> list[str]:
    return sorted(
        {
            imp.target
            for path in module_files()
            for imp in imports(path.read_text(encoding="utf-8"), module_name(path))
            if kind(imp.target) == "module_utils"
        }
    )


def relative(path: Path) -> str:
    return path.relative_to(MODULE_UTILS).as_posix()


def problems(
    source: str,
    name: str,
    package: bool,
    where: str,
    allowed: tuple[str, ...],
    lazy_allowed: frozenset[tuple[str, str]] = LAZY,
) -> list[str]:
    """One line per import of ``source`` (module ``name``, file ``where`` below module_utils) that is not of a kind in
    ``allowed``; one inside a function passes when ``(where, target)`` is in ``lazy_allowed``."""
    out = []
    for imp in imports(source, name, package):
        found = kind(imp.target)
        if found in allowed or (imp.lazy and (where, imp.target) in lazy_allowed):
            continue
        out.append(
            "%s:%d imports %s (%s%s)" % (where, imp.line, imp.target, found, ", in a function" if imp.lazy else "")
        )
    return out


SCRIPT_SAFE = ("stdlib", "module_utils")
ANSIBALLZ_SAFE = ("stdlib", "module_utils", "ansible.module_utils")


def test_the_graph_reaches_what_the_scripts_carry():
    """Each SCRIPTED entry's files are the ones node_script.closure finds (with its regular expressions) and puts in
    the script, and its function is defined there. A package below module_utils' sub-packages (common.vocabulary)
    comes with its ``__init__.py`` (``common.vocabulary.__init__``); the sub-packages' own (a docstring) do not."""
    from ansible_collections.rlinfra.verl.plugins.plugin_utils import node_script

    names = reach(scripted_starts())
    assert "%s.common.plain_module" % PACKAGE in names and "%s.ray.client" % PACKAGE in names
    assert "%s.common.vocabulary" % PACKAGE in names and "%s.common.vocabulary._text" % PACKAGE in names
    for module, (utils, function) in scripted().items():
        starts = ["%s.%s" % (PACKAGE, utils), "%s.%s" % (PACKAGE, plain_module())]
        files = {
            name[len(PACKAGE) + 1 :] + (".__init__" if is_package(path) else "")
            for name, path in reach(starts).items()
            if not is_package(path) or name.count(".") > PACKAGE.count(".") + 1
        }
        assert files == set(node_script.closure([utils, plain_module()])), module
        path = utils_file("%s.%s" % (PACKAGE, utils))
        assert path is not None, "%s: module_utils/%s.py is missing" % (module, utils.replace(".", "/"))
        defined = {n.name for n in ast.parse(path.read_text(encoding="utf-8")).body if isinstance(n, ast.FunctionDef)}
        assert function in defined, "%s: %s() is not defined in %s" % (module, function, relative(path))


def test_scripted_code_imports_only_the_standard_library_and_module_utils():
    lines = []
    for name, path in sorted(reach(scripted_starts()).items()):
        lines += problems(path.read_text(encoding="utf-8"), name, is_package(path), relative(path), SCRIPT_SAFE)
    assert not lines, "code a SCRIPTED module runs as a plain script imports what a node may not have:\n" + "\n".join(
        lines
    )


def test_module_code_imports_only_what_ansiballz_ships():
    names = reach(module_starts())
    assert len(names) > 20, sorted(names)
    lines = []
    for name, path in sorted(names.items()):
        lines += problems(path.read_text(encoding="utf-8"), name, is_package(path), relative(path), ANSIBALLZ_SAFE)
    assert not lines, "module_utils a module imports use what AnsiballZ does not ship:\n" + "\n".join(lines)


def test_hyperbolic_clients_lazy_open_url_stays_off_the_script_route():
    client = "%s.hyperbolic.client" % PACKAGE
    path = utils_file(client)
    assert path is not None
    lazy = [
        imp
        for imp in imports(path.read_text(encoding="utf-8"), client)
        if kind(imp.target) != "stdlib" and kind(imp.target) != "module_utils"
    ]
    assert [(imp.target, imp.lazy) for imp in lazy] == [("ansible.module_utils.urls", True)]
    assert client not in reach(scripted_starts())


def logic(source: str) -> set[str]:
    """What a module file holds besides documentation, its argument spec and a one-statement ``main``."""
    out = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef):
            out.add("class %s" % node.name)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.name != "main":
                out.add("function %s" % node.name)
            else:
                body = [s for s in node.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
                if len(body) != 1:
                    out.add("main: %d statements" % len(body))
    return out


@pytest.mark.parametrize("path", module_files(), ids=[p.name for p in module_files()])
def test_a_module_file_holds_no_logic(path):
    found = logic(path.read_text(encoding="utf-8"))
    assert not found, (
        "%s: a module file is its documentation, its ARGS and a one-statement main() calling module_utils; found %s "
        "(move the logic to module_utils)" % (path.name, sorted(found))
    )


def test_module_files_import_only_what_ansiballz_ships():
    lines = []
    for path in module_files():
        lines += problems(path.read_text(encoding="utf-8"), module_name(path), False, path.name, ANSIBALLZ_SAFE)
    assert not lines, "\n".join(lines)


# ---- the checks find what they look for ----------------------------------------------------------------------

SYNTHETIC_UTILS = """
from __future__ import annotations
import json, os.path
from typing import TYPE_CHECKING
import yaml
from ansible.module_utils.basic import AnsibleModule
from . import client
from ..common import vocabulary, masking as m
from ansible_collections.rlinfra.verl.plugins.module_utils.common.files import write_atomic
if TYPE_CHECKING:
    import requests

def later():
    from ansible.module_utils.urls import open_url
    import numpy
    return open_url, numpy
"""


def test_the_import_check_finds_a_violation():
    name = PACKAGE + ".ray.synthetic"
    got = [(imp.target, imp.lazy) for imp in imports(SYNTHETIC_UTILS, name)]
    assert ("%s.ray" % PACKAGE, False) in got and ("%s.ray.client" % PACKAGE, False) in got  # from . import client
    assert ("%s.common.vocabulary" % PACKAGE, False) in got and ("%s.common.masking" % PACKAGE, False) in got
    assert ("%s.common.files" % PACKAGE, False) in got and ("requests", False) not in got  # TYPE_CHECKING
    lines = problems(SYNTHETIC_UTILS, name, False, "ray/synthetic.py", SCRIPT_SAFE)
    assert [line.split(" imports ")[1] for line in lines] == [
        "yaml (third-party)",
        "ansible.module_utils.basic (ansible.module_utils)",
        "ansible.module_utils.urls (ansible.module_utils, in a function)",
        "numpy (third-party, in a function)",
    ]
    allowed = frozenset({("ray/synthetic.py", "ansible.module_utils.urls")})
    lines = problems(SYNTHETIC_UTILS, name, False, "ray/synthetic.py", SCRIPT_SAFE, lazy_allowed=allowed)
    assert len(lines) == 3 and not any("urls" in line for line in lines)
    assert problems(SYNTHETIC_UTILS, name, False, "ray/synthetic.py", ANSIBALLZ_SAFE) == [
        line
        for line in problems(SYNTHETIC_UTILS, name, False, "ray/synthetic.py", SCRIPT_SAFE)
        if "yaml" in line or "numpy" in line
    ]


def test_the_graph_follows_a_submodule_named_in_from_import():
    # ray_node imports "from ...module_utils.ray.node_apply import ..."; node_apply imports "from ...common import
    # owned, vocabulary" (a package and two of its modules).
    names = reach(["%s.ray.node_apply" % PACKAGE])
    assert {"%s.common.owned" % PACKAGE, "%s.common.vocabulary" % PACKAGE, "%s.ray.client" % PACKAGE} <= set(names)


def test_the_module_check_finds_logic():
    source = (
        'DOCUMENTATION = "x"\nARGS = None\nclass Node:\n    pass\ndef helper():\n    pass\n'
        'def main():\n    """Doc."""\n    module = ARGS.new_module(None)\n    helper(module)\n'
    )
    assert logic(source) == {"class Node", "function helper", "main: 2 statements"}
    assert logic("ARGS = None\ndef main():\n    run(ARGS.new_module(None))\n") == set()
