"""galaxy.yml's version says what the collection is: no module, plugin or option was added in a later version
(``version_added``), the changelog's last release is not newer, and a released version has its section in
CHANGELOG.rst (antsibull-changelog ``release``; scripts/gates.sh lints and regenerates it)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
ADDED = re.compile(r"""^\s*version_added:\s*['"]?([0-9][0-9.]*)['"]?\s*$""", re.M)


def version(text):
    return tuple(int(part) for part in text.split("."))


def added_versions():
    """(file, version) of every version_added in the plugins' documentation and the roles' argument specs."""
    files = [p for p in (ROOT / "plugins").rglob("*") if p.suffix in (".py", ".yml") and "__pycache__" not in p.parts]
    files += list((ROOT / "roles").glob("*/meta/argument_specs.yml"))
    return [(p.relative_to(ROOT), m) for p in files for m in ADDED.findall(p.read_text(encoding="utf-8"))]


def test_galaxy_version_is_the_newest_version_added_and_released():
    galaxy = yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"]
    found = added_versions()
    assert found, "no version_added found: the pattern no longer matches the docs"
    late = ["%s: %s" % item for item in found if version(item[1]) > version(galaxy)]
    assert not late, "version_added newer than galaxy.yml's %s (raise galaxy.yml's version):\n%s" % (
        galaxy,
        "\n".join(late),
    )
    releases = sorted(yaml.safe_load((ROOT / "changelogs/changelog.yaml").read_text())["releases"], key=version)
    assert version(releases[-1]) <= version(galaxy), (releases[-1], galaxy)
    if galaxy in releases:
        assert re.search(r"^v%s\n=+$" % re.escape(galaxy), (ROOT / "CHANGELOG.rst").read_text(), re.M), (
            "CHANGELOG.rst has no section for %s: run antsibull-changelog generate" % galaxy
        )
        newest = max((v for dummy, v in found), key=version)
        assert newest == galaxy, "galaxy.yml says %s but the newest version_added is %s" % (galaxy, newest)


def test_the_check_reads_version_added_as_the_docs_write_it():
    assert ADDED.findall("options:\n  x:\n    version_added: 0.13.0\n    version_added: '0.2.1'\n") == [
        "0.13.0",
        "0.2.1",
    ]
