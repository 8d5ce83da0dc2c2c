# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Logical volume step of the rlinfra.verl.storage_lvm role (module rlinfra.verl.storage_lvm_lv): create the
LV, or grow it over free space.

The LV takes all the space of the volume group. Striped: each step stripes over every physical
volume that still has free extents, with the same number of extents on each (so nothing is left
over that a later run would have to pick up); a device added later to a 2-stripe LV makes a new
segment (striped over the new devices, or linear when only one is new). Linear: one
``-l +100%FREE``. Re-runs on a full volume group change nothing.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any, Mapping, Sequence

EXTENT = 4 * 1024 * 1024  # LVM's default extent size, for check-mode estimates only


def run(argv: Sequence[str]) -> tuple[int, str, str]:
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    return proc.returncode, proc.stdout, proc.stderr


def report(argv: list[str], key: str) -> list[dict[str, Any]]:
    rc, out, err = run(argv + ["--reportformat", "json"])
    if rc != 0:
        raise RuntimeError("%s failed: %s" % (" ".join(argv), (err or out).strip().splitlines()[-1:] or rc))
    rows = []
    for part in json.loads(out).get("report", []):
        rows.extend(part.get(key, []))
    return rows


def pv_free(vg: str) -> dict[str, int]:
    """{pv name: free extents} of the volume group's physical volumes."""
    rows = report(
        [
            "pvs",
            "--units",
            "b",
            "--nosuffix",
            "-o",
            "pv_name,vg_name,pv_pe_count,pv_pe_alloc_count",
            "-S",
            "vg_name=%s" % vg,
        ],
        "pv",
    )
    return {r["pv_name"]: int(r["pv_pe_count"]) - int(r["pv_pe_alloc_count"]) for r in rows if r["vg_name"] == vg}


def lv_exists(vg: str, lv: str) -> bool:
    rows = report(["lvs", "-o", "lv_name", "-S", "vg_name=%s" % vg], "lv")
    return any(r["lv_name"] == lv for r in rows)


def segments(vg: str, lv: str) -> list[dict[str, Any]]:
    rows = report(
        [
            "lvs",
            "--units",
            "b",
            "--nosuffix",
            "-o",
            "lv_name,segtype,stripes,seg_size",
            "--segments",
            "%s/%s" % (vg, lv),
        ],
        "seg",
    )
    return [{"segtype": r["segtype"], "stripes": int(r["stripes"]), "size": int(r["seg_size"])} for r in rows]


def next_step(params: Mapping[str, Any], exists: bool, free: dict[str, int]) -> tuple[list[str] | None, dict[str, int]]:
    """The next lvcreate/lvextend argv for the free extents, or None when the VG is full."""
    vg, lv, layout = params["vg"], params["lv"], params.get("layout", "striped")
    with_free = sorted(pv for pv, n in free.items() if n > 0)
    if not with_free:
        return None, free
    stripe_size = ["-I", str(params["stripe_size"])] if params.get("stripe_size") else []
    if layout == "linear":
        size_args, used = ["-l", "100%FREE" if not exists else "+100%FREE"], {pv: free[pv] for pv in with_free}
        shape = []
    elif len(with_free) == 1:
        pv = with_free[0]
        size_args, used = ["-l", ("" if not exists else "+") + str(free[pv])], {pv: free[pv]}
        shape = ["-i", "1"]
    else:
        each = min(free[pv] for pv in with_free)
        size_args = ["-l", ("" if not exists else "+") + str(each * len(with_free))]
        used = {pv: each for pv in with_free}
        shape = ["-i", str(len(with_free))] + stripe_size
    left = dict(free)
    for pv, n in used.items():
        left[pv] -= n
    if not exists:
        argv = ["lvcreate", "--yes", "--wipesignatures", "y", "-n", lv] + shape + size_args + [vg] + with_free
    else:
        argv = ["lvextend"] + shape + size_args + ["%s/%s" % (vg, lv)] + with_free
    return argv, left


def apply(params: Mapping[str, Any], check: bool) -> dict[str, Any]:
    """``params``: vg, lv, layout, stripe_size, planned ({pv: bytes}, counted in check mode). Returns
    {changed, commands (run or planned), error, lv_path, segments, existed}."""
    vg, lv = params["vg"], params["lv"]
    result: dict[str, Any]
    result = {
        "changed": False,
        "commands": [],
        "error": "",
        "lv_path": "/dev/%s/%s" % (vg, lv),
        "segments": [],
        "existed": False,
    }
    try:
        exists = lv_exists(vg, lv)
        result["existed"] = exists
        free = pv_free(vg)
        if check:
            # Check mode: the PVs the lvg task would have added are not there yet; count their space.
            for pv, size in (params.get("planned") or {}).items():
                if pv not in free:
                    free[pv] = max(int(size) // EXTENT - 1, 1)
        for _dummy in range(len(free) + 2):
            argv, left = next_step(params, exists, free)
            if argv is None:
                break
            result["commands"].append(" ".join(argv))
            result["changed"] = True
            if check:
                exists, free = True, left
                continue
            rc, out, err = run(argv)
            if rc != 0:
                detail = " ".join((err or out).split())
                result["error"] = "storage_lvm: %s failed (rc %d): %s" % (" ".join(argv), rc, detail)
                break
            exists, free = True, pv_free(vg)
        if exists and not check:
            result["segments"] = segments(vg, lv)
    except (RuntimeError, ValueError, KeyError) as exc:
        result["error"] = "storage_lvm: %s" % exc
    return result


def lv_module(params: Mapping[str, Any], module: Any) -> dict[str, Any]:
    """The ``storage_lvm_lv`` module's result (:func:`apply`), for plain_module.finish: ``failed`` and ``msg`` when it
    failed."""
    result = apply(params, module.check_mode)
    error = result.pop("error", "")
    if error:
        return dict(result, failed=True, msg=error)
    return result
