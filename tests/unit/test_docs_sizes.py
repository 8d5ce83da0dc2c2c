"""docs/ARCHITECTURE.md's sizes (how many modules, actions, module_utils files...; the largest files) are the tree's:
the table between its ``<!-- sizes`` markers is checked here, so it cannot drift again (issue 50 point 5). Counts must
match exactly; a largest file's line count within 10 % (a few lines' edit is no drift; a split or a doubling is)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "ARCHITECTURE.md"
PLUGINS = ROOT / "plugins"


def _py(directory, recursive=False):
    found = (directory.rglob if recursive else directory.glob)("*.py")
    return [p for p in found if p.name != "__init__.py" and "__pycache__" not in p.parts and "vendor" not in p.parts]


def lines(path):
    return len(path.read_text(encoding="utf-8").splitlines())


def actual():
    """What the table states, measured: {label: count}, and the files of plugins/ over 600 lines {path: lines}."""
    counts = {
        "modules": len(_py(PLUGINS / "modules")),
        "action plugins": len(_py(PLUGINS / "action")),
        "filters (documented)": len(list((PLUGINS / "filter").glob("*.yml"))),
        "inventory plugins": len(_py(PLUGINS / "inventory")),
        "module_utils files": len(_py(PLUGINS / "module_utils", recursive=True)),
        "plugin_utils files": len(_py(PLUGINS / "plugin_utils")),
        "roles": len([p for p in (ROOT / "roles").iterdir() if (p / "tasks").is_dir()]),
        "playbooks": len(list((ROOT / "playbooks").glob("*.yml"))),
    }
    large = {str(p.relative_to(ROOT)): lines(p) for p in _py(PLUGINS, recursive=True) if lines(p) > 600}
    return counts, large


def stated():
    text = DOC.read_text(encoding="utf-8")
    block = re.search(r"<!-- sizes -->\n(.*?)<!-- /sizes -->", text, re.S)
    assert block, "docs/ARCHITECTURE.md lost its <!-- sizes --> table"
    counts, large = {}, {}
    for row in re.findall(r"^\| (.+?) \| (\d+) \|$", block.group(1), re.M):
        label, number = row[0].strip(), int(row[1])
        path = re.fullmatch(r"`(plugins/\S+\.py)` \(lines\)", label)
        if path:
            large[path.group(1)] = number
        else:
            counts[label] = number
    return counts, large


def test_architecture_sizes_are_the_trees():
    want_counts, want_large = actual()
    got_counts, got_large = stated()
    assert got_counts == want_counts, "docs/ARCHITECTURE.md's sizes table says %s; the tree has %s" % (
        got_counts,
        want_counts,
    )
    assert set(got_large) == set(want_large), (
        "files of plugins/ over 600 lines: the table lists %s; the tree has %s" % (sorted(got_large), want_large)
    )
    off = {p: (got_large[p], n) for p, n in want_large.items() if abs(got_large[p] - n) > 0.1 * n}
    assert not off, "line counts off by more than 10 %% (stated, actual): %s" % off


def test_the_table_is_read_as_written():
    text = "| modules | 3 |\n| `plugins/a/b.py` (lines) | 700 |\n"
    rows = re.findall(r"^\| (.+?) \| (\d+) \|$", text, re.M)
    assert rows == [("modules", "3"), ("`plugins/a/b.py` (lines)", "700")]
