"""Issue 50 point 6: the task files of the ray and verl_job roles read as a short list of steps - together at most
MAX_LINES lines (raw lines, comments and blank lines included). What chooses, loops, parses or words a line is Python: a
module, an action, a filter or module_utils, with unit tests."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROLES = ("ray", "verl_job")
MAX_LINES = 800


def test_the_ray_and_verl_job_task_files_stay_lean():
    counts = {
        str(path.relative_to(ROOT)): len(path.read_text().splitlines())
        for role in ROLES
        for path in sorted((ROOT / "roles" / role / "tasks").glob("*.yml"))
    }
    total = sum(counts.values())
    table = "\n".join("%5d  %s" % (n, name) for name, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    assert total <= MAX_LINES, (
        "roles/{%s}/tasks/*.yml hold %d lines, more than %d: move the choices (long Jinja, chains of conditions, loops "
        "that select or compute, repeated blocks) into Python.\n%s" % (",".join(ROLES), total, MAX_LINES, table)
    )
