# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Whether a node's GPUs are fit to train on: the outputs of the GPU tools read into plain dicts, and the
judgement, one line per problem, in words an operator acts on.

Read here (parse only, no command is run):

* ``nvidia-smi -q -x`` (:func:`parse_nvidia_xml`): every XML schema seen from driver 460 to 595
  (``nvsmi_device_v11`` .. ``v13``: ``clocks_throttle_reasons`` / ``clocks_event_reasons``, per-location or
  ``double_bit/total`` ECC counts, ``retired_pages`` and ``remapped_rows`` as values or ``N/A``);
* the plain ``nvidia-smi`` banner and ``nvidia-smi --version`` (:func:`parse_nvidia_banner`), R610's
  ``CUDA UMD Version`` included; torch's ``torch/version.py`` (:func:`torch_cuda`), without importing torch;
* ``dcgmi diag -r 1|2`` as a table (:func:`parse_dcgmi_diag`) or ``-j`` JSON (:func:`parse_dcgmi_diag_json`,
  DCGM 3.x and the 4.x shape);
* ``amd-smi metric --json`` and ``rocm-smi --json`` (:func:`parse_amd_smi_metric`, :func:`parse_rocm_smi`):
  only the fields those outputs carry.

:func:`gpu_lines` judges one node from those and from its kernel log's Xid errors (read by
module_utils/node/kernel_log.py's :func:`kernel_events`; which Xids make a GPU unfit is its :func:`xid_severe`).
Every format was checked against real outputs; each one's public source is listed in
tests/unit/fixtures/gpu/SOURCES.md.

Standard library only, and from the collection only node/kernel_log.py (standard library only too): this file runs
on the nodes under a plain python3.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from typing import Any, Iterable, Mapping

from ansible_collections.rlinfra.verl.plugins.module_utils.node.kernel_log import XID, occurrence, xid_severe


def _text(elem: ET.Element | None, path: str) -> str | None:
    """The stripped text at ``path`` under ``elem``; None when missing, empty or N/A."""
    if elem is None:
        return None
    found = elem.find(path)
    if found is None or found.text is None:
        return None
    value = found.text.strip()
    if not value or value.upper() in ("N/A", "[N/A]") or value.startswith(("Requested functionality", "Unknown Error")):
        return None
    return value


def _yes(
    value: str | None,
    yes: tuple[str, ...] = ("yes", "enabled", "active"),
    no: tuple[str, ...] = ("no", "disabled", "not active"),
) -> bool | None:
    if value is None:
        return None
    value = value.strip().lower()
    if value in yes:
        return True
    if value in no:
        return False
    return None


def _int(value: object) -> int | None:
    """The leading whole number of ``value`` (``"66 C"`` -> 66, ``"2"`` -> 2), None when there is none."""
    if value is None:
        return None
    match = re.match(r"\s*(-?\d+)", str(value))
    return int(match.group(1)) if match else None


def _version(value: str | None) -> str | None:
    """``value`` when it reads as a version (``535.54.03``, ``12.2``), else None (R610 prints "Deprecated, ..."
    where a version used to be)."""
    return value if value and re.match(r"\d+(\.\d+)*$", value) else None


def _first_line(text: object, width: int = 100) -> str:
    for line in str(text or "").splitlines():
        if line.strip():
            line = line.strip()
            return line if len(line) <= width else line[: width - 3] + "..."
    return "(empty)"


def _uncorrectable(counts):
    """Uncorrectable ECC errors of one ``<volatile>`` or ``<aggregate>`` element: ``double_bit/total`` in the
    v11 schema (Volta and older), the sum of the ``*_uncorrectable*`` locations in later ones (``sram_uncorrectable``
    and ``dram_uncorrectable``; v13 splits SRAM into ``_parity`` and ``_secded``); None when none is a number."""
    if counts is None:
        return None
    if counts.find("double_bit") is not None:
        return _int(_text(counts, "double_bit/total"))
    tags = [child.tag for child in counts if "uncorrectable" in child.tag]
    if "sram_uncorrectable" in tags:  # a total of its own: never add the parts to it as well
        tags = [t for t in tags if not t.startswith("sram_uncorrectable_")]
    values = [_int(_text(counts, tag)) for tag in tags]
    values = [v for v in values if v is not None]
    return sum(values) if values else None


def _reason(reasons, name):
    """One clocks event (throttle) reason: True when Active, False when Not Active, None when not reported."""
    if reasons is None:
        return None
    for child in reasons:
        if child.tag.endswith("_" + name):
            return _yes(child.text)
    return None


def _gpu(elem, position):
    minor = _int(_text(elem, "minor_number"))
    retired = [_yes(_text(elem, "retired_pages/" + tag)) for tag in ("pending_blacklist", "pending_retirement")]
    retired = True if True in retired else (False if False in retired else None)
    reasons = elem.find("clocks_event_reasons")
    if reasons is None:
        reasons = elem.find("clocks_throttle_reasons")
    return {
        "index": minor if minor is not None else position,
        "name": _text(elem, "product_name") or "",
        "uuid": _text(elem, "uuid"),
        "bus_id": elem.get("id") or _text(elem, "pci/pci_bus_id"),
        "persistence_mode": _yes(_text(elem, "persistence_mode")),
        "ecc_mode": _yes(_text(elem, "ecc_mode/current_ecc")),
        "ecc_uncorrectable_volatile": _uncorrectable(elem.find("ecc_errors/volatile")),
        "ecc_uncorrectable_aggregate": _uncorrectable(elem.find("ecc_errors/aggregate")),
        "retired_pending": retired,
        "remap_pending": _yes(_text(elem, "remapped_rows/remapped_row_pending")),
        "remap_failure": _yes(_text(elem, "remapped_rows/remapped_row_failure")),
        "hw_slowdown": _reason(reasons, "hw_slowdown"),
        "hw_thermal_slowdown": _reason(reasons, "hw_thermal_slowdown"),
        "sw_thermal_slowdown": _reason(reasons, "sw_thermal_slowdown"),
        "temperature": _int(_text(elem, "temperature/gpu_temp")),
    }


def parse_nvidia_xml(text: str | None) -> dict[str, Any]:
    """``nvidia-smi -q -x`` read into ``dict(driver_version, cuda_version, gpus)``; each GPU a dict of
    ``index`` (``<minor_number>``, else its position), ``name``, ``uuid``, ``bus_id``, ``persistence_mode``,
    ``ecc_mode``, ``ecc_uncorrectable_volatile`` / ``_aggregate``, ``retired_pending``, ``remap_pending``,
    ``remap_failure``, ``hw_slowdown``, ``hw_thermal_slowdown``, ``sw_thermal_slowdown``, ``temperature``
    (None wherever the GPU reports N/A). ValueError, one line, for anything that is not that XML."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("not nvidia-smi XML: the output is empty")
    try:
        root = ET.fromstring(text.strip())
    except ET.ParseError as e:
        raise ValueError("not nvidia-smi XML (%s): %s" % (e, _first_line(text))) from None
    if root.tag != "nvidia_smi_log":
        raise ValueError("not nvidia-smi XML: the root element is <%s>, not <nvidia_smi_log>" % root.tag[:40])
    return {
        # R610 deprecates "driver version" for "KMD version"
        "driver_version": _version(_text(root, "driver_version")) or _version(_text(root, "kmd_version")),
        "cuda_version": _version(_text(root, "cuda_version")) or _version(_text(root, "cuda_umd_version")),
        "gpus": [_gpu(elem, position) for position, elem in enumerate(root.findall("gpu"))],
    }


_BANNER_CUDA = re.compile(r"CUDA (?:UMD )?Version\s*:\s*(\d+\.\d+)", re.IGNORECASE)


def parse_nvidia_banner(text: str | None) -> str | None:
    """The CUDA version the driver supports, from plain ``nvidia-smi`` (``CUDA Version: 12.4``, R610's
    ``CUDA UMD Version: 13.3``) or ``nvidia-smi --version``; None when the text has none."""
    match = _BANNER_CUDA.search(str(text or ""))
    return match.group(1) if match else None


_TORCH_CUDA = re.compile(r"""^cuda\s*(?::[^=\n]*)?=\s*(?:'([^'\n]*)'|"([^"\n]*)"|None\b)""", re.MULTILINE)


def torch_cuda(version_py_text: str | None) -> str | None:
    """The CUDA version torch was built for, from the text of ``torch/version.py`` (``cuda: Optional[str] =
    '12.4'``; torch 1.x wrote ``cuda = '10.2'``); None for a CPU or ROCm build or an unreadable file."""
    match = _TORCH_CUDA.search(str(version_py_text or ""))
    if not match:
        return None
    return _version(match.group(1) or match.group(2))


def _major_minor(version):
    match = re.match(r"\s*(\d+)(?:\.(\d+))?", str(version or ""))
    return (int(match.group(1)), int(match.group(2) or 0)) if match else None


def cuda_mismatch(driver_cuda: str | None, torch_cuda: str | None) -> str:  # pylint: disable=redefined-outer-name
    """'' when a torch built for CUDA ``torch_cuda`` runs on a driver that supports CUDA ``driver_cuda``; else
    the problem in a phrase. A driver of the same major version but a lower minor is fine (CUDA minor version
    compatibility); unknown versions are not judged."""
    driver, built = _major_minor(driver_cuda), _major_minor(torch_cuda)
    if driver is None or built is None or driver[0] >= built[0]:
        return ""
    return (
        "the driver supports CUDA %s, older than the CUDA %s torch in the environment was built for: update the "
        "NVIDIA driver or install a torch built for CUDA %d" % (driver_cuda, torch_cuda, driver[0])
    )


# dcgmi diag ------------------------------------------------------------------------------------------------------


def _gpus_named(text):
    found = []
    for number in re.findall(r"\bGPU\s*(\d+)\b", text):
        if number not in found:
            found.append(number)
    return ", ".join(found) or None


def _cells(line):
    """(name cell, raw result cell) of a table row ``| name | result |``; the last row of a cut table may lack
    its closing bar."""
    parts = line.split("|")
    if len(parts) < 3:
        return None
    result = parts[2]
    if len(parts) >= 4:  # "| " + text + "  |": DCGM pads one blank before and two after
        result = result[1:-2] if len(result) >= 3 else result.strip()
    else:
        result = result[1:].rstrip()
    return parts[1].strip(), result


def _dcgm_row(state, name, raw):
    """One row ``| name | raw |`` of a dcgmi diag table into ``state`` (current test, continuation mode, the
    failure that continuation rows extend, the failures)."""
    failures = state["failures"]
    if name == "Error":
        state["mode"] = "error"
        current = state["test"]
        if not (failures and current and failures[-1]["test"] == current and not failures[-1]["_raw"]):
            failures.append({"test": current or state["category"] or "Error", "gpu": None, "_raw": ""})
        state["target"] = failures[-1]  # the Fail just before, or a failure of its own
        state["target"]["_raw"] += raw
        return
    if name == "Warning":
        state.update(mode="warning", target=None)
        return
    if name:
        state.update(test=name, mode="result", target=None)
        state["rows"] += 1
    if state["mode"] == "error" and state["target"] is not None:
        state["target"]["_raw"] += raw  # an Error's next line (DCGM wraps at the column width, mid-word)
    elif state["mode"] == "result":
        value = raw.strip()
        fail = re.match(r"Fail\b(?:\s*-\s*(?:GPUs?\s*:\s*)?(.*))?", value) or re.match(
            r"GPU\s*(\d+)\s*:\s*Fail\b", value
        )
        if fail:
            state["target"] = {"test": state["test"], "gpu": (fail.group(1) or "").strip() or None, "_raw": ""}
            failures.append(state["target"])


def parse_dcgmi_diag(text: str | None) -> dict[str, Any]:
    """The table ``dcgmi diag -r 1`` / ``-r 2`` prints, read into ``dict(passed, failures)``; each failure
    ``dict(test, gpu, detail)``: a ``Fail`` result (``Fail - GPU: 0`` names the GPUs) with the ``Error`` rows that
    follow it as ``detail`` (DCGM wraps them mid-word at the column width; they are joined back), or an ``Error``
    row of its own. ``gpu`` is None when neither the result nor the error names a GPU. ValueError when the text
    has no result table (``dcgmi`` printing only an error, for one)."""
    text = str(text or "")
    state: dict[str, Any] = {"category": None, "test": None, "mode": None, "target": None, "rows": 0, "failures": []}
    for line in text.splitlines():
        stripped = line.strip()
        header = re.match(r"[|+]-+\s+(\S.*?)\s+-+[+|]", stripped)
        if header:
            state.update(category=header.group(1), test=None, mode=None, target=None)
            continue
        cells = _cells(stripped) if stripped.startswith("|") and not stripped.startswith("|=") else None
        if cells is not None and cells[0] != "Diagnostic" and state["category"] != "Metadata":
            _dcgm_row(state, *cells)
    failures = state["failures"]
    if state["rows"] == 0 and not failures:
        raise ValueError("not dcgmi diag output (no result table): %s" % _first_line(text))
    for failure in failures:
        failure["detail"] = re.sub(r"\s+", " ", failure.pop("_raw")).strip()
        if failure["gpu"] is None:
            failure["gpu"] = _gpus_named(failure["detail"])
    return {"passed": not failures, "failures": failures}


def _warnings(result):
    texts = []
    for warning in result.get("warnings") or []:
        if isinstance(warning, dict):
            warning = warning.get("warning") or warning.get("message")
        if warning:
            texts.append(str(warning))
    return " ".join(texts)


def _result_gpu(result):
    if "gpu_ids" in result:
        return str(result["gpu_ids"]).replace(",", ", ") if result["gpu_ids"] not in (None, "") else None
    if "entity_id" in result:  # DCGM 4.x
        group = str(result.get("entity_group") or "GPU")
        return str(result["entity_id"]) if group.upper() == "GPU" else "%s %s" % (group, result["entity_id"])
    return None


def parse_dcgmi_diag_json(text: str | None) -> dict[str, Any]:
    """``dcgmi diag -j`` read into ``dict(passed, failures)`` like :func:`parse_dcgmi_diag`. DCGM 3.x writes
    ``{"DCGM GPU Diagnostic": {"test_categories": [...]}}`` with ``gpu_ids`` per result (and ``null`` between
    tests); 4.x ``{"DCGM Diagnostic": ...}`` with ``entity_group`` / ``entity_id`` and a ``test_summary``.
    Text before the JSON (dcgmi prints warnings there) is skipped. ValueError for anything else."""
    text = str(text or "")
    start, end = text.find("{"), text.rfind("}")
    try:
        data = json.loads(text[start : end + 1]) if 0 <= start < end else None
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise ValueError("not dcgmi diag JSON: %s" % _first_line(text))
    diag = data.get("DCGM GPU Diagnostic", data.get("DCGM Diagnostic"))
    if not isinstance(diag, dict):
        raise ValueError('not dcgmi diag JSON: no "DCGM GPU Diagnostic" or "DCGM Diagnostic" object')
    failures = []
    if diag.get("runtime_error"):
        failures.append({"test": "runtime", "gpu": None, "detail": str(diag["runtime_error"])})
    for category in diag.get("test_categories") or []:
        for test in (category or {}).get("tests") or []:
            if not isinstance(test, dict):
                continue
            name = str(test.get("name") or category.get("category") or "?")
            failed = []
            for result in test.get("results") or []:
                if isinstance(result, dict) and str(result.get("status", "")).upper() == "FAIL":
                    failed.append({"test": name, "gpu": _result_gpu(result), "detail": _warnings(result)})
            summary = test.get("test_summary") or {}
            if not failed and str(summary.get("status", "")).upper() == "FAIL":
                failed.append({"test": name, "gpu": None, "detail": ""})
            failures.extend(failed)
    return {"passed": not failures, "failures": failures}


# AMD -------------------------------------------------------------------------------------------------------------


def _json(text, what):
    try:
        return json.loads(str(text or ""))
    except ValueError:
        raise ValueError("not %s JSON: %s" % (what, _first_line(text))) from None


def _amd_value(value):
    """amd-smi's ``{"value": 36, "unit": "C"}`` or bare ``36`` as a number; None for ``"N/A"``."""
    if isinstance(value, dict):
        value = value.get("value")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value


def _section(item, name):
    """A section of amd-smi's entry for a GPU (``ecc``, ``power``...); {} when it is missing or not an object."""
    value = item.get(name)
    return value if isinstance(value, dict) else {}


# The numbers parse_amd_smi_metric reads: its key -> (the section of amd-smi's entry for a GPU, the key in it).
AMD_SMI_METRICS = {
    "ecc_uncorrectable": ("ecc", "total_uncorrectable_count"),
    "ecc_correctable": ("ecc", "total_correctable_count"),
    "ecc_deferred": ("ecc", "total_deferred_count"),
    "temperature_edge": ("temperature", "edge"),
    "temperature_hotspot": ("temperature", "hotspot"),
    "temperature_mem": ("temperature", "mem"),
    "vram_total_mb": ("mem_usage", "total_vram"),
    "vram_used_mb": ("mem_usage", "used_vram"),
}


def parse_amd_smi_metric(text: str | None) -> list[dict[str, Any]]:
    """``amd-smi metric --json`` read into one dict per GPU: ``index``, ``ecc_uncorrectable``, ``ecc_correctable``,
    ``ecc_deferred`` (amd-smi's ``ecc.total_*_count``), ``throttled`` (``power.throttle_status``),
    ``temperature_edge`` / ``_hotspot`` / ``_mem`` (C), ``vram_total_mb``, ``vram_used_mb``; ``hw_slowdown`` is
    always None (amd-smi does not tell a hardware slowdown apart). Accepts the list and ``{"gpu_data": [...]}``."""
    data = _json(text, "amd-smi metric")
    if isinstance(data, dict) and isinstance(data.get("gpu_data"), list):
        data = data["gpu_data"]
    if not isinstance(data, list) or not all(isinstance(item, dict) and "gpu" in item for item in data):
        raise ValueError('not amd-smi metric JSON: expected a list of {"gpu": N, ...}')
    gpus = []
    for item in data:
        status = str(_section(item, "power").get("throttle_status") or "").upper()
        gpu = {
            "index": int(item["gpu"]),
            "hw_slowdown": None,
            "throttled": {"THROTTLED": True, "UNTHROTTLED": False}.get(status),
        }
        gpu.update((key, _amd_value(_section(item, part).get(name))) for key, (part, name) in AMD_SMI_METRICS.items())
        gpus.append(gpu)
    return gpus


def _number(value):
    try:
        number = float(str(value).strip())
    except (TypeError, ValueError):
        return None
    return int(number) if number.is_integer() else number


# The numbers parse_rocm_smi reads: its key -> rocm-smi's key for a card (in lower case).
ROCM_SMI_NUMBERS = {
    "temperature_edge": "temperature (sensor edge) (c)",
    "temperature_junction": "temperature (sensor junction) (c)",
    "temperature_memory": "temperature (sensor memory) (c)",
    "vram_total_bytes": "vram total memory (b)",
    "vram_used_bytes": "vram total used memory (b)",
    "pcie_replay_count": "pcie replay count",
    "gpu_use_percent": "gpu use (%)",
}


def parse_rocm_smi(text: str | None) -> list[dict[str, Any]]:
    """``rocm-smi --json`` (any set of ``--show...`` options, ``--showallinfo`` included) read into one dict per
    ``cardN``, by N: ``index``, ``name`` (``Device Name``, else ``Card series``), ``bus_id`` (``PCI Bus``),
    ``temperature_edge`` / ``_junction`` / ``_memory`` (C), ``vram_total_bytes``, ``vram_used_bytes``,
    ``pcie_replay_count``, ``gpu_use_percent``; None for what the options did not ask for."""
    data = _json(text, "rocm-smi")
    if not isinstance(data, dict) or not any(re.match(r"card\d+$", str(k)) for k in data):
        raise ValueError('not rocm-smi JSON: expected {"card0": {...}, ...}')
    gpus = []
    for key in sorted((k for k in data if re.match(r"card\d+$", k)), key=lambda k: int(k[4:])):
        card = {str(k).lower(): v for k, v in (data[key] or {}).items()}
        name = card.get("device name") or card.get("card series")
        gpu = {
            "index": int(key[4:]),
            "name": str(name) if name not in (None, "", "N/A") else None,
            "bus_id": card.get("pci bus"),
        }
        gpu.update((out, _number(card.get(source))) for out, source in ROCM_SMI_NUMBERS.items())
        gpus.append(gpu)
    return gpus


# Judgement -------------------------------------------------------------------------------------------------------


def _pci_key(bus_id):
    """(domain, bus, device) of a PCI address as nvidia-smi (``00000000:3B:00.0``) or an Xid (``0000:3b:00``)
    writes it; None when it is not one."""
    match = re.match(
        r"\s*(?:([0-9A-Fa-f]{1,8}):)?([0-9A-Fa-f]{1,2}):([0-9A-Fa-f]{1,2})(?:\.[0-7])?\s*$", str(bus_id or "")
    )
    if not match:
        return None
    return int(match.group(1) or "0", 16), int(match.group(2), 16), int(match.group(3), 16)


def _plural(count, word, plural=None):
    return "%d %s" % (count, word if count == 1 else (plural or word + "s"))


def _numbers(values):
    values = [str(v) for v in values]
    return ("GPU " if len(values) == 1 else "GPUs ") + ", ".join(values)


def _clip(text, width=120):
    text = re.sub(r"\s+", " ", str(text)).strip()
    return text if len(text) <= width else text[: width - 3] + "..."


def _xid_text(event):
    code = event.get("code")
    meaning = event.get("meaning") or XID.get(code)
    return "Xid %s (%s)" % (code, meaning) if meaning else "Xid %s" % code


def _dcgm_line(failure):
    gpu = failure.get("gpu")
    if gpu:
        gpu = " on all GPUs" if str(gpu).lower() == "all" else " on " + _numbers(re.split(r"\s*,\s*", str(gpu)))
    detail = failure.get("detail")
    return "dcgmi diag: %s failed%s%s" % (
        failure.get("test") or "a test",
        gpu or "",
        " (%s)" % _clip(detail) if detail else "",
    )


def _node_lines(report, gpus, expected_count, torch_version, at_node):
    lines = []
    if expected_count is not None and len(gpus) != int(expected_count):
        answer = "answers" if len(gpus) == 1 else "answer"
        lines.append(
            "%s%s %s nvidia-smi, Ray will be offered %d"
            % (at_node, _plural(len(gpus), "GPU"), answer, int(expected_count))
        )
    mismatch = cuda_mismatch(report.get("cuda_version"), torch_version)
    if mismatch:
        lines.append(at_node + mismatch)
    off = [g.get("index") for g in gpus if g.get("persistence_mode") is False]
    if off:
        lines.append("%spersistence mode is off on %s" % (at_node, _numbers(off)))
    return lines


def _gpu_problems(gpu):
    problems = []
    ecc = gpu.get("ecc_uncorrectable_volatile")
    if ecc:
        problems.append("%s since the driver loaded" % _plural(ecc, "uncorrectable ECC error"))
    if gpu.get("retired_pending"):
        problems.append("retired pages pending (reset the GPU)")
    if gpu.get("remap_failure"):
        problems.append("row remapping failed")
    if gpu.get("remap_pending"):
        problems.append("row remapping pending (reset the GPU)")
    if gpu.get("hw_slowdown") and not gpu.get("hw_thermal_slowdown"):  # HW Slowdown is also on for a thermal one
        problems.append("hardware slowdown active")
    if gpu.get("hw_thermal_slowdown") or gpu.get("sw_thermal_slowdown"):
        problems.append("thermal slowdown active")
    return problems


def _severe_xids(gpus, xid_events):
    """The severe Xid events by (owner, code), in log order; owner is ``("gpu", index)`` for a GPU nvidia-smi
    lists at the Xid's PCI address, else ``("pci", address)``."""
    by_key = {}
    for gpu in gpus:
        key = _pci_key(gpu.get("bus_id"))
        if key is not None:
            by_key.setdefault(key, gpu)
    xids = {}
    for event in xid_events or ():
        if event.get("kind", "xid") != "xid" or not xid_severe(event):
            continue
        gpu = by_key.get(_pci_key(event.get("device")))
        owner = ("gpu", gpu.get("index")) if gpu is not None else ("pci", str(event.get("device") or "?").lower())
        xids.setdefault((owner, event["code"]), []).append(event)
    return xids


def gpu_lines(
    report: Mapping[str, Any] | None,  # pylint: disable=too-many-arguments,too-many-positional-arguments
    expected_count: int | str | None = None,
    xid_events: Iterable[Mapping[str, Any]] = (),
    dcgm: Mapping[str, Any] | None = None,
    torch_cuda: str | None = None,
    node: str = "",
) -> list[str]:  # pylint: disable=redefined-outer-name
    """What is wrong with one node's GPUs, one line per problem (none: an empty list). ``report`` is
    :func:`parse_nvidia_xml`'s dict; ``expected_count`` the GPUs Ray will offer; ``xid_events`` from
    :func:`kernel_events` (only the severe ones count, see :func:`xid_severe`, put on a GPU by PCI address: nvidia-smi's
    ``00000000:3B:00.0`` is the Xid's ``0000:3b:00``); ``dcgm`` from :func:`parse_dcgmi_diag` /
    :func:`parse_dcgmi_diag_json`; ``torch_cuda`` the CUDA version the environment's torch was built for.

    Lines start with ``node`` when given: node-level ones ``gpu-2: ...`` (GPU count, CUDA mismatch, persistence
    mode, dcgmi), a GPU's ``gpu-2 GPU 3 (00000000:3B:00.0): ...`` (ECC errors, retired pages or row remapping,
    slowdowns, severe Xids), an Xid on a GPU nvidia-smi does not list ``gpu-2 GPU 0000:3b:00 (not listed by
    nvidia-smi): ...``."""
    report = report or {}
    gpus = sorted(report.get("gpus") or [], key=lambda g: g.get("index", 0))
    at_node = (node + ": ") if node else ""
    on_node = (node + " ") if node else ""
    lines = _node_lines(report, gpus, expected_count, torch_cuda, at_node)
    xids = _severe_xids(gpus, xid_events)
    for gpu in gpus:
        prefix = "%sGPU %s (%s): " % (on_node, gpu.get("index"), gpu.get("bus_id") or "?")
        lines.extend(prefix + problem for problem in _gpu_problems(gpu))
        lines.extend(
            prefix + _xid_text(events[0]) + occurrence(events)
            for (owner, _code), events in xids.items()
            if owner == ("gpu", gpu.get("index"))
        )
    lines.extend(
        "%sGPU %s (not listed by nvidia-smi): %s%s" % (on_node, owner[1], _xid_text(events[0]), occurrence(events))
        for (owner, _code), events in xids.items()
        if owner[0] == "pci"
    )
    if dcgm:
        failures = dcgm.get("failures") or []
        lines.extend(at_node + _dcgm_line(failure) for failure in failures)
        if not failures and dcgm.get("passed") is False:
            lines.append(at_node + "dcgmi diag failed")
    return lines
