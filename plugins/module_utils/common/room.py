# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Room to run: free space on the volumes a run writes to, against thresholds, one rule for fitness.yml and for
submit.yml's check before a run. Standard library only (it runs on the nodes)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

GIB = 1024**3


def human(n: float) -> str:
    """Bytes as a short size (``0 B``, ``812 MiB``, ``1.5 GiB``, ``2.0 TiB``)."""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return ("%d %s" % (n, unit)) if unit in ("B", "KiB", "MiB") else "%.1f %s" % (n, unit)
        n /= 1024
    return "%.1f TiB" % n


def free_space(path: str) -> tuple[int, int] | None:
    """``(free bytes, total bytes)`` of the filesystem holding ``path`` (its nearest existing parent); None when it
    cannot be read."""
    probe = os.path.abspath(path)
    while probe and not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    try:
        st = os.statvfs(probe)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize


def _tree_size(path: str) -> int:
    total = 0
    for base, _dummy, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(base, name)).st_size
            except OSError:
                continue
    return total


def checkpoint_need(checkpoint_dir: str) -> tuple[int, str]:
    """``(bytes, why)``: room for one more checkpoint like the newest ``global_step_N`` under ``checkpoint_dir`` (verl
    writes the new one before it removes the oldest it keeps); (0, '') without one."""
    try:
        steps = [
            (int(n.split("_")[-1]), n)
            for n in os.listdir(checkpoint_dir)
            if n.startswith("global_step_") and n.split("_")[-1].isdigit()
        ]
    except OSError:
        return 0, ""
    if not steps:
        return 0, ""
    newest = os.path.join(checkpoint_dir, max(steps)[1])
    size = _tree_size(newest)
    return size, "room for one more checkpoint like %s, %s" % (os.path.basename(newest), human(size))


def check_volumes(
    volumes: Iterable[dict[str, Any]] | None, node: str = "", stat: Callable[[str], tuple[int, int] | None] = free_space
) -> tuple[list[dict[str, Any]], list[str]]:
    """``(rows, lines)`` for ``volumes`` [{what, path, min_free_gib, need_bytes?}]: each row {what, path, free_bytes,
    total_bytes, min_free_bytes}, one line per volume short of room. ``need_bytes`` (an estimate of what the run
    writes, e.g. its checkpoints) raises the bar above the fixed minimum."""
    rows, lines = [], []
    prefix = "%s: " % node if node else ""
    for vol in volumes or []:
        if vol.get("estimate") == "checkpoints" and not vol.get("need_bytes"):
            vol = dict(vol)
            vol["need_bytes"], vol["why"] = checkpoint_need(vol["path"])
        got = stat(vol["path"])
        minimum = int(float(vol.get("min_free_gib") or 0) * GIB)
        need = max(minimum, int(vol.get("need_bytes") or 0))
        row = dict(
            what=vol.get("what") or "volume", path=vol["path"], free_bytes=None, total_bytes=None, min_free_bytes=need
        )
        if got is None:
            lines.append("%s%s %s cannot be read" % (prefix, row["what"], vol["path"]))
        else:
            row["free_bytes"], row["total_bytes"] = got
            if got[0] < need:
                why = " (%s)" % vol["why"] if vol.get("why") else ""
                lines.append(
                    "%sthe %s %s has %s free, below %s%s: free space there or lower what the run keeps"
                    % (prefix, row["what"], vol["path"], human(got[0]), human(need), why)
                )
        rows.append(row)
    return rows, lines
