"""GPU health (module_utils/node/gpu_health.py): reading ``nvidia-smi -q -x`` in every schema seen (drivers 460 to 595),
the ``nvidia-smi`` banner (R610's ``CUDA UMD Version`` included), torch's ``version.py``, ``dcgmi diag`` as a table
and as JSON, ``amd-smi metric --json`` and ``rocm-smi --json``, kernel log lines (module_utils/node/kernel_log.py: Xid,
EDAC/AER, OOM killer, link down), the severe-Xid rule against NVIDIA's catalog, and the judgement's exact lines.

Every fixture is a real output with its public source in tests/unit/fixtures/gpu/SOURCES.md; the bad cases are
labelled VARIANTs of real ones (a few values edited, each edit listed there). Inputs built in this file say what
they are where they are.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from ansible_collections.rlinfra.verl.plugins.module_utils.node import gpu_health, kernel_log

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "gpu"


def fixture(name):
    return (FIXTURES / name).read_text(encoding="utf-8")


def xml(name):
    return gpu_health.parse_nvidia_xml(fixture(name))


def log_lines(name):
    """The log lines of a fixture, without its ``#`` comment and source lines."""
    return [line for line in fixture(name).splitlines() if line.strip() and not line.startswith("#")]


# Xid catalog --------------------------------------------------------------------------------------------------

CATALOG = {int(k): v for k, v in json.loads(fixture("xid_meanings.json")).items() if not k.startswith("_")}
# The rule of XID_SEVERE, from the catalog's "Immediate Action" column (see gpu_health.py); the NVLink5 errors
# (WORKFLOW_NVLINK5_ERR) and 154 depend on their message.
SEVERE_ACTIONS = {"RESET_GPU", "RESTART_BM", "RESTART_VM", "CONTACT_SUPPORT", "WORKFLOW_XID_48", "WORKFLOW_NVLINK_ERR"}
BY_MESSAGE = set(range(144, 151)) | {154}


def test_xid_table_names_every_code_asked_for():
    for code in (
        13,
        31,
        43,
        45,
        48,
        61,
        62,
        63,
        64,
        68,
        69,
        74,
        79,
        92,
        94,
        95,
        109,
        119,
        120,
        121,
        140,
        143,
        145,
        149,
    ):
        assert kernel_log.XID[code]


@pytest.mark.parametrize("code", sorted(CATALOG))
def test_xid_meanings_are_the_catalog_descriptions(code):
    if code == 61:  # "Unused" on Ampere and later: the older table's meaning is kept
        assert kernel_log.XID[61] == "Internal micro-controller breakpoint/warning"
        return
    description = CATALOG[code]["short"].split("\n")[0].split(" -- ")[0].strip()
    assert kernel_log.XID[code] == description


@pytest.mark.parametrize("code", sorted(set(CATALOG) - BY_MESSAGE))
def test_severe_xids_follow_the_catalog_immediate_action(code):
    assert (code in kernel_log.XID_SEVERE) == (CATALOG[code]["immediate_action"] in SEVERE_ACTIONS)


def test_severe_and_not_severe_xids():
    assert {48, 62, 64, 74, 79, 95, 109, 119, 120, 140, 143} <= kernel_log.XID_SEVERE
    # application faults, cleanup after another Xid, a row marked for remapping, correctable errors, contained errors
    assert not {13, 31, 43, 45, 63, 68, 69, 92, 94, 121, 154} & kernel_log.XID_SEVERE
    assert not BY_MESSAGE & kernel_log.XID_SEVERE


def test_nvlink5_xids_are_severe_when_fatal():
    events = [e for e in kernel_log.kernel_events(log_lines("kernel_lines.txt")) if e["code"] in (145, 149)]
    assert [(e["code"], kernel_log.xid_severe(e)) for e in events] == [(145, False), (149, True), (149, True)]
    assert "RLW_RXPIPE Nonfatal" in events[0]["line"]
    assert "NETIR Fatal" in events[1]["line"] and "NETIR_LINK_EVT Fatal" in events[2]["line"]
    assert kernel_log.xid_severe({"code": 79, "line": ""}) and not kernel_log.xid_severe({"code": 13, "line": ""})


def test_xid_154_is_severe_unless_no_action_is_required():
    # The Xid 154 message as NVIDIA's tooling tests write it (no capture with a source was found): built here.
    reset = "[Sat Jul 11 05:52:47 2026] NVRM: Xid (PCI:0000:2a:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"
    none = "NVRM: Xid (PCI:0000:2a:00): 154, GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)"
    events = kernel_log.kernel_events([reset, none])
    assert len(events) == 2
    first, second = events[0], events[1]
    assert (first["code"], first["meaning"], first["device"]) == (
        154,
        "GPU recovery action changed to GPU Reset Required",
        "0000:2a:00",
    )
    assert second["meaning"] == "GPU recovery action changed to None"
    assert kernel_log.xid_severe(first) and not kernel_log.xid_severe(second)
    report = {"gpus": [{"index": 0, "bus_id": "00000000:2A:00.0", "persistence_mode": True}]}
    assert gpu_health.gpu_lines(report, xid_events=[first, second], node="gpu-2") == [
        "gpu-2 GPU 0 (00000000:2A:00.0): Xid 154 (GPU recovery action changed to GPU Reset Required) at Sat Jul 11 05:52:47 2026"
    ]


# nvidia-smi -q -x ---------------------------------------------------------------------------------------------

V100S_BUS = [
    "00000000:00:0D.0",
    "00000000:00:0E.0",
    "00000000:00:0F.0",
    "00000000:00:10.0",
    "00000000:00:11.0",
    "00000000:00:12.0",
    "00000000:00:13.0",
    "00000000:00:14.0",
]


def test_v100s_8_gpus_driver_460_schema_v11():
    report = xml("nvidia_smi_q_x_v100s_8gpu_drv460_TRIMMED.xml")
    assert report["driver_version"] == "460.73.01"
    assert report["cuda_version"] == "11.2"
    gpus = report["gpus"]
    assert [g["index"] for g in gpus] == list(range(8))
    assert [g["bus_id"] for g in gpus] == V100S_BUS
    assert [g["temperature"] for g in gpus] == [66, 58, 57, 61, 59, 64, 61, 57]
    assert gpus[0] == {
        "index": 0,
        "name": "Tesla V100S-PCIE-32GB",
        "uuid": "GPU-76098dc1-d3bc-9a1b-7ea6-f7b48837829e",
        "bus_id": "00000000:00:0D.0",
        "persistence_mode": False,
        "ecc_mode": True,
        "ecc_uncorrectable_volatile": 0,
        "ecc_uncorrectable_aggregate": 0,
        "retired_pending": False,
        "remap_pending": None,
        "remap_failure": None,  # <remapped_rows>N/A</remapped_rows>
        "hw_slowdown": False,
        "hw_thermal_slowdown": False,
        "sw_thermal_slowdown": False,
        "temperature": 66,
    }
    assert gpus[7]["uuid"] == "GPU-1d955959-c95b-4f40-2cac-100d3006ffe2"


def test_a100_mig_driver_535_clocks_event_reasons_and_dram_counts():
    report = xml("nvidia_smi_q_x_a100_sxm4_mig_drv535.xml")
    assert (report["driver_version"], report["cuda_version"]) == ("535.54.03", "12.2")
    assert report["gpus"] == [
        {
            "index": 1,  # <minor_number>1</minor_number>
            "name": "NVIDIA A100-SXM4-80GB",
            "uuid": "GPU-513536b6-7d19-9063-b049-1e69664bb298",
            "bus_id": "00000000:01:00.0",
            "persistence_mode": False,
            "ecc_mode": True,
            "ecc_uncorrectable_volatile": 0,
            "ecc_uncorrectable_aggregate": 0,
            "retired_pending": None,
            "remap_pending": None,
            "remap_failure": None,  # N/A: MIG is on
            "hw_slowdown": False,
            "hw_thermal_slowdown": False,
            "sw_thermal_slowdown": False,
            "temperature": 27,
        }
    ]


def test_a10g_driver_515_clocks_throttle_reasons_and_remapped_rows():
    report = xml("nvidia_smi_q_x_a10g_drv515.xml")
    assert (report["driver_version"], report["cuda_version"]) == ("515.105.01", "11.7")
    assert report["gpus"] == [
        {
            "index": 0,
            "name": "NVIDIA A10G",
            "uuid": "GPU-9a9a6c50-2a47-2f51-a902-b82c3b127e94",
            "bus_id": "00000000:00:1E.0",
            "persistence_mode": False,
            "ecc_mode": True,
            "ecc_uncorrectable_volatile": 0,
            "ecc_uncorrectable_aggregate": 0,
            "retired_pending": None,
            "remap_pending": False,
            "remap_failure": False,
            "hw_slowdown": False,
            "hw_thermal_slowdown": False,
            "sw_thermal_slowdown": False,
            "temperature": 17,
        }
    ]


def test_rtx4000_ada_driver_595_schema_v13_ecc_off():
    report = xml("nvidia_smi_q_x_rtx4000_sff_ada_drv595_TRIMMED.xml")
    assert (report["driver_version"], report["cuda_version"]) == ("595.84", "13.2")
    assert report["gpus"] == [
        {
            "index": 0,
            "name": "NVIDIA RTX 4000 SFF Ada Generation",
            "uuid": "GPU-37037c3f-65c8-ec4d-24a9-420204ad8026",
            "bus_id": "00000000:06:00.0",
            "persistence_mode": True,
            "ecc_mode": False,
            "ecc_uncorrectable_volatile": None,
            "ecc_uncorrectable_aggregate": None,  # every count N/A with ECC off
            "retired_pending": None,
            "remap_pending": False,
            "remap_failure": False,
            "hw_slowdown": False,
            "hw_thermal_slowdown": False,
            "sw_thermal_slowdown": False,
            "temperature": 38,
        }
    ]


def test_variants_read_their_edited_values():
    bad = xml("nvidia_smi_q_x_v100s_8gpu_drv460_TRIMMED_VARIANT_bad.xml")["gpus"]
    assert [g["ecc_uncorrectable_volatile"] for g in bad] == [0, 0, 0, 2, 0, 0, 0, 0]
    assert [g["ecc_uncorrectable_aggregate"] for g in bad] == [0, 0, 0, 2, 0, 0, 0, 0]
    assert [g["retired_pending"] for g in bad] == [False, True] + [False] * 6
    assert [(g["hw_slowdown"], g["hw_thermal_slowdown"]) for g in bad][5:7] == [(True, True), (True, False)]
    remap = xml("nvidia_smi_q_x_a10g_drv515_VARIANT_remap.xml")["gpus"][0]
    assert (remap["remap_pending"], remap["remap_failure"]) == (True, True)
    a100 = xml("nvidia_smi_q_x_a100_sxm4_mig_drv535_VARIANT_ecc_thermal.xml")["gpus"][0]
    assert (a100["ecc_uncorrectable_volatile"], a100["ecc_uncorrectable_aggregate"], a100["sw_thermal_slowdown"]) == (
        1,
        1,
        True,
    )


def test_v13_sram_parity_and_secded_counts_are_added():
    # The v13 volatile block (RTX 4000 fixture) with numbers where the GPU printed N/A: an input built here.
    text = fixture("nvidia_smi_q_x_rtx4000_sff_ada_drv595_TRIMMED.xml")
    text = text.replace(
        "<sram_uncorrectable_parity>N/A</sram_uncorrectable_parity>",
        "<sram_uncorrectable_parity>1</sram_uncorrectable_parity>",
        1,
    )
    text = text.replace(
        "<sram_uncorrectable_secded>N/A</sram_uncorrectable_secded>",
        "<sram_uncorrectable_secded>2</sram_uncorrectable_secded>",
        1,
    )
    text = text.replace("<dram_uncorrectable>N/A</dram_uncorrectable>", "<dram_uncorrectable>4</dram_uncorrectable>", 1)
    gpu = gpu_health.parse_nvidia_xml(text)["gpus"][0]
    assert (gpu["ecc_uncorrectable_volatile"], gpu["ecc_uncorrectable_aggregate"]) == (7, None)


def test_r610_kmd_version_when_driver_version_is_deprecated():
    # Assumed R610 XML (no capture found): the CSV of 610.57.04 has kmd_version next to driver_version, and its
    # --version prints "DRIVER version : Deprecated, see "KMD version" instead". Built from the RTX 4000 file.
    text = fixture("nvidia_smi_q_x_rtx4000_sff_ada_drv595_TRIMMED.xml").replace(
        "<driver_version>595.84</driver_version>",
        '<driver_version>Deprecated, see "KMD version" instead</driver_version>\n\t<kmd_version>610.57.04</kmd_version>',
    )
    assert gpu_health.parse_nvidia_xml(text)["driver_version"] == "610.57.04"


def test_index_is_the_position_when_minor_number_is_not_a_number():
    text = fixture("nvidia_smi_q_x_v100s_8gpu_drv460_TRIMMED.xml").replace(
        "<minor_number>0</minor_number>", "<minor_number>N/A</minor_number>"
    )
    assert [g["index"] for g in gpu_health.parse_nvidia_xml(text)["gpus"]] == list(range(8))


@pytest.mark.parametrize(
    "text, pattern",
    [
        ("", r"not nvidia-smi XML: the output is empty$"),
        (
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver "
            "is installed and running.\n\n",
            r"not nvidia-smi XML \(.+\): NVIDIA-SMI has failed because it couldn't .{40,}\.\.\.$",
        ),
        ("<html><body>502</body></html>", r"not nvidia-smi XML: the root element is <html>, not <nvidia_smi_log>$"),
        ('{"gpus": []}', r'not nvidia-smi XML \(.+\): \{"gpus": \[\]\}$'),
        (
            fixture("nvidia_smi_q_x_a10g_drv515.xml")[:5000],
            r'not nvidia-smi XML \(.+\): <\?xml version="1.0" \?>$',
        ),  # cut short
    ],
)
def test_not_nvidia_smi_xml_is_one_line_value_error(text, pattern):
    with pytest.raises(ValueError) as info:
        gpu_health.parse_nvidia_xml(text)
    message = str(info.value)
    assert re.match(pattern, message), message
    assert "\n" not in message and len(message) < 200


# Banner, torch, CUDA mismatch ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, cuda",
    [
        ("nvidia_smi_a10_drv550_cuda12.4_gpud.txt", "12.4"),
        ("nvidia_smi_h100_drv590_cuda13.1.txt", "13.1"),
        ("nvidia_smi_rtx2080s_drv610_kmd_umd_header.txt", "13.3"),  # KMD Version / CUDA UMD Version
        ("nvidia_smi_version_drv590.txt", "13.1"),
        ("nvidia_smi_version_drv610.txt", "13.3"),  # skips "CUDA version : Deprecated, see ..."
        ("nvidia_smi_q_x_a10g_drv515.xml", None),
    ],
)
def test_banner_cuda_version(name, cuda):
    assert gpu_health.parse_nvidia_banner(fixture(name)) == cuda


def test_banner_lines_of_every_layout():
    banners = [line for line in log_lines("nvidia_smi_header_lines_variants.txt") if line.startswith("|")]
    assert [gpu_health.parse_nvidia_banner(line) for line in banners] == [
        "11.7",
        "12.1",
        "12.2",
        "12.4",
        "13.0",
        "13.3",
    ]
    assert gpu_health.parse_nvidia_banner("") is None


def test_torch_cuda_from_version_py():
    assert gpu_health.torch_cuda(fixture("torch_version_py_2.13.0_cpu.txt")) is None
    assert gpu_health.torch_cuda(fixture("torch_version_py_2.13.0_VARIANT_cu126.txt")) == "12.6"
    # torch 1.x wrote plain assignments (input built here)
    assert (
        gpu_health.torch_cuda("__version__ = '1.7.1'\ndebug = False\ncuda = '10.2'\ngit_version = 'x'\nhip = None\n")
        == "10.2"
    )
    assert gpu_health.torch_cuda("hip: Optional[str] = '6.2'\n") is None
    assert gpu_health.torch_cuda("garbage") is None


MISMATCH_11_4 = (
    "the driver supports CUDA 11.4, older than the CUDA 12.1 torch in the environment was built for: "
    "update the NVIDIA driver or install a torch built for CUDA 11"
)


@pytest.mark.parametrize(
    "driver, torch, phrase",
    [
        ("11.4", "12.1", MISMATCH_11_4),
        ("12.2", "12.4", ""),  # same major, older minor: CUDA minor version compatibility
        ("12.4", "12.1", ""),
        ("13.1", "12.6", ""),
        (None, "12.4", ""),
        ("12.4", None, ""),  # a CPU torch
        ("junk", "12.4", ""),
    ],
)
def test_cuda_mismatch(driver, torch, phrase):
    assert gpu_health.cuda_mismatch(driver, torch) == phrase


# dcgmi diag ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["dcgmi_diag_r2_pass_a100x8_dcgm3.3.3_awsome.txt", "dcgmi_diag_r1_pass_a100x8_dcgm3.3.3_TRIMMED_from_r2.txt"],
)
def test_dcgmi_diag_pass(name):
    assert gpu_health.parse_dcgmi_diag(fixture(name)) == {"passed": True, "failures": []}


def test_dcgmi_diag_fail_names_the_gpu_and_skips_the_warning():
    assert gpu_health.parse_dcgmi_diag(fixture("dcgmi_diag_r2_fail_gpu_memory_thermal_stas00_EXCERPT.txt")) == {
        "passed": False,
        "failures": [{"test": "GPU Memory", "gpu": "0", "detail": ""}],
    }


def test_dcgmi_diag_error_row_joined_across_its_wrapped_lines():
    assert gpu_health.parse_dcgmi_diag(fixture("dcgmi_diag_fail_xid64_rowremap_pending_stas00_EXCERPT.txt")) == {
        "passed": False,
        "failures": [
            {
                "test": "Deployment",
                "gpu": "3",
                "detail": "GPU 3 has uncorrectable memory errors and row remappings are pending",
            }
        ],
    }


def test_dcgmi_diag_error_rows_belong_to_the_fail_above():
    assert gpu_health.parse_dcgmi_diag(fixture("dcgmi_diag_r1_a100x8_dcgm3.3.3_VARIANT_fail_rowremap.txt")) == {
        "passed": False,
        "failures": [
            {
                "test": "Page Retirement/Row Remap",
                "gpu": "3",
                "detail": "GPU 3 has uncorrectable memory errors and row remappings are pending",
            }
        ],
    }


def test_dcgmi_diag_without_a_table():
    with pytest.raises(
        ValueError, match=r"^not dcgmi diag output \(no result table\): bash: dcgmi: command not found$"
    ):
        gpu_health.parse_dcgmi_diag("bash: dcgmi: command not found\n")


@pytest.mark.parametrize(
    "name",
    ["dcgmi_diag_json_dcgm3.1.0_8gpu_pass.json", "dcgmi_diag_json_dcgm3.1.0_8gpu_pass_raw_with_warning_prefix.txt"],
)
def test_dcgmi_diag_json_pass(name):
    assert gpu_health.parse_dcgmi_diag_json(fixture(name)) == {"passed": True, "failures": []}


def test_dcgmi_diag_json_fail():
    assert gpu_health.parse_dcgmi_diag_json(fixture("dcgmi_diag_json_dcgm3.1.0_8gpu_VARIANT_fail_gpu3.json")) == {
        "passed": False,
        "failures": [
            {
                "test": "Page Retirement/Row Remap",
                "gpu": "3",
                "detail": "GPU 3 has uncorrectable memory errors and row remappings are pending",
            }
        ],
    }


def test_dcgmi_diag_json_dcgm4_shape():
    # Built here in the shape of NVIDIA/DCGM testing/python3/dcgm_diag_schema.json (DCGM 4.x): no real capture found.
    data = {
        "DCGM Diagnostic": {
            "test_categories": [
                {
                    "category": "Hardware",
                    "tests": [
                        {
                            "name": "memory",
                            "test_summary": {"status": "Fail"},
                            "results": [
                                {"entity_group": "GPU", "entity_group_id": 1, "entity_id": 0, "status": "Pass"},
                                {
                                    "entity_group": "GPU",
                                    "entity_group_id": 1,
                                    "entity_id": 1,
                                    "status": "Fail",
                                    "warnings": [
                                        {
                                            "error_category": 1,
                                            "error_id": 95,
                                            "error_severity": 2,
                                            "warning": "GPU 1 has uncorrectable memory errors",
                                        }
                                    ],
                                },
                            ],
                        },
                        {"name": "pcie", "test_summary": {"status": "Fail"}, "results": []},
                    ],
                }
            ]
        },
        "metadata": {"version": "4.2.3"},
    }
    assert gpu_health.parse_dcgmi_diag_json(json.dumps(data)) == {
        "passed": False,
        "failures": [
            {"test": "memory", "gpu": "1", "detail": "GPU 1 has uncorrectable memory errors"},
            {"test": "pcie", "gpu": None, "detail": ""},
        ],
    }
    runtime = {"DCGM GPU Diagnostic": {"version": "3.1.2", "runtime_error": "Runtime error message"}}
    assert gpu_health.parse_dcgmi_diag_json(json.dumps(runtime)) == {
        "passed": False,
        "failures": [{"test": "runtime", "gpu": None, "detail": "Runtime error message"}],
    }


@pytest.mark.parametrize("text", ["", "Error: unable to connect", '{"other": 1}', "[1, 2]"])
def test_dcgmi_diag_json_garbage(text):
    with pytest.raises(ValueError, match=r"^not dcgmi diag JSON"):
        gpu_health.parse_dcgmi_diag_json(text)


# AMD ----------------------------------------------------------------------------------------------------------


def test_amd_smi_metric():
    expected = [
        {
            "index": 0,
            "ecc_uncorrectable": 0,
            "ecc_correctable": 0,
            "ecc_deferred": 0,
            "hw_slowdown": None,
            "throttled": False,
            "temperature_edge": 36,
            "temperature_hotspot": 37,
            "temperature_mem": 32,
            "vram_total_mb": 8176,
            "vram_used_mb": 202,
        }
    ]
    text = fixture("amd_smi_metric_json_rx6600_luckylinux.json")
    assert gpu_health.parse_amd_smi_metric(text) == expected
    # newer amd-smi wraps the list (seen in third-party parsers, not in a capture): the same list wrapped here
    assert gpu_health.parse_amd_smi_metric(json.dumps({"gpu_data": json.loads(text)})) == expected
    for garbage in ("", "amd-smi: command not found", '{"card0": {}}'):
        with pytest.raises(ValueError, match=r"^not amd-smi metric JSON"):
            gpu_health.parse_amd_smi_metric(garbage)


def test_rocm_smi_mi100():
    gpus = gpu_health.parse_rocm_smi(fixture("rocm_smi_json_mi100x4_rocm602_telegraf.json"))
    assert [g["index"] for g in gpus] == [0, 1, 2, 3]
    assert [g["bus_id"] for g in gpus] == ["0000:83:00.0", "0000:A3:00.0", "0000:C3:00.0", "0000:E3:00.0"]
    assert gpus[0] == {
        "index": 0,
        "name": "Arcturus GL-XL [Instinct MI100]",
        "bus_id": "0000:83:00.0",
        "temperature_edge": 53,
        "temperature_junction": 55,
        "temperature_memory": 53,
        "vram_total_bytes": 34342961152,
        "vram_used_bytes": 6750208,
        "pcie_replay_count": 0,
        "gpu_use_percent": 0,
    }


def test_rocm_smi_radeon_and_showallinfo():
    assert gpu_health.parse_rocm_smi(fixture("rocm_smi_json_rx6700xt_rocm612_telegraf.json")) == [
        {
            "index": 0,
            "name": "Navi 22 [Radeon RX 6700/6700 XT / 6800M]",
            "bus_id": "0000:07:00.0",
            "temperature_edge": 45,
            "temperature_junction": 47,
            "temperature_memory": 46,
            "vram_total_bytes": 12868124672,
            "vram_used_bytes": 1572745216,
            "pcie_replay_count": 0,
            "gpu_use_percent": 0,
        }
    ]
    assert gpu_health.parse_rocm_smi(fixture("rocm_smi_showallinfo_json_rx6600_jq_reformatted_luckylinux.json")) == [
        {
            "index": 0,
            "name": "Navi 23 [Radeon RX 6600/6600 XT/6600M]",
            "bus_id": "0000:0B:00.0",
            "temperature_edge": None,
            "temperature_junction": None,
            "temperature_memory": None,
            "vram_total_bytes": None,
            "vram_used_bytes": None,
            "pcie_replay_count": None,
            "gpu_use_percent": 0,
        }
    ]
    with pytest.raises(ValueError, match=r"^not rocm-smi JSON"):
        gpu_health.parse_rocm_smi(fixture("amd_smi_metric_json_rx6600_luckylinux.json"))


# Kernel log ---------------------------------------------------------------------------------------------------

KERNEL_EVENTS = [
    ("xid", "Fri Aug 30 11:43:09 2024", 13, "0000:cb:00"),
    ("xid", "Fri Aug 30 11:43:09 2024", 13, "0000:cb:00"),
    ("xid", "Fri Aug 30 11:43:09 2024", 13, "0000:cb:00"),
    ("xid", "2025-01-21T04:41:44+00:00", 13, "0000:38:00"),
    ("xid", "31609.615230", 13, "0000:01:00"),
    ("xid", "22859.081860", 31, "0000:01:00"),
    ("xid", "14328.198504", 31, "0000:0a:00"),
    ("xid", None, 31, "0000:01:00"),
    ("xid", "2025-01-21T04:41:44+00:00", 43, "0000:38:00"),
    ("xid", None, 45, "0000:dc:00"),
    ("xid", None, 45, "0000:ed:00"),
    ("xid", "14370.688139", 45, "0000:0a:00"),
    ("xid", "Dec 2 11:38:47", 48, "0000:07:00"),
    ("xid", "14370.687545", 62, "0000:0a:00"),
    ("xid", None, 63, "0000:10:1c"),
    ("xid", "Dec 2 11:38:47", 64, "0000:07:00"),
    ("xid", "74889.644138", 79, "0000:02:00"),
    ("xid", "May 18 19:02:39", 79, "0000:2b:00"),
    ("xid", "May 18 19:02:39", 79, "0000:2b:00"),  # "NVRM: GPU 0000:2b:00.0: GPU has fallen off the bus."
    ("xid", "1843.308145", 79, "0000:b3:00"),  # the three-line message without an Xid
    ("xid", None, 94, "0000:01:00"),
    ("xid", None, 94, "0000:01:00"),
    ("xid", None, 95, "0000:01:00"),
    ("xid", "Fri Aug 30 11:43:14 2024", 109, "0000:cb:00"),
    ("xid", "Sun Feb 23 16:24:18 2025", 119, "0000:9b:00"),
    ("xid", "Sun Feb 23 16:30:13 2025", 119, "0000:9b:00"),
    ("xid", "Sun Apr 26 23:12:26 2026", 119, "0001:6c:00"),
    ("xid", None, 145, "0018:01:00"),
    ("xid", None, 149, "0019:01:00"),
    ("xid", None, 149, "0000:00:00"),
    ("oom", "May 15 23:09:30", None, None),
    ("oom", "Sun Mar 30 08:24:00 2025", None, None),
    ("oom", "Thu Mar 14 01:57:54 2019", None, None),
    ("nic_down", "28432.122502", None, "eth0"),
    ("nic_down", "Nov 17 13:16:56", None, "eth11"),
    ("nic_down", "Sun Jun 11 23:02:41 2023", None, "eth5"),
    ("ecc", "74889.542031", None, "0000:00:02.0"),
    ("ecc", "74889.542044", None, "0000:00:02.0"),
    ("ecc", None, None, "0000:00:03.0"),  # dmesg -H relative stamps are no time
    ("ecc", None, None, "0000:00:03.0"),
    ("ecc", "11189.970968", None, "MC3"),
]


def test_kernel_events_of_the_real_lines():
    events = kernel_log.kernel_events(log_lines("kernel_lines.txt"))
    assert [(e["kind"], e["time"], e["code"], e["device"]) for e in events] == KERNEL_EVENTS
    by_line = {e["line"]: e for e in events}
    assert (
        by_line["[74889.644138] NVRM: Xid (PCI:0000:02:00): 79, GPU has fallen off the bus."]["meaning"]
        == "GPU has fallen off the bus"
    )
    oom = [e["meaning"] for e in events if e["kind"] == "oom"]
    assert oom == ["killed python3 (pid 15784)", "killed python (pid 7899)", "killed python (pid 89746)"]
    ecc = sorted({e["meaning"] for e in events if e["kind"] == "ecc"})
    assert ecc == ["uncorrectable memory error (EDAC MC3)", "uncorrected PCIe error (AER)"]
    assert all(e["meaning"] == "link down" for e in events if e["kind"] == "nic_down")
    off_bus = [e for e in events if e["time"] == "1843.308145"][0]
    assert off_bus["line"] == (
        "[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0 NVRM: (PCI ID: 10de:26b5) installed in this system has "
        "NVRM: fallen off the bus and is not responding to commands."
    )


def test_kernel_events_ignore_the_rest():
    ignored = [
        "[Sun Feb 23 16:24:36 2025] NVRM: Rate limiting GSP RPC error prints for GPU at PCI:0000:9b:00 (printing 1 of every 30).  "
        "The GPU likely needs to be reset.",
        "May 15 23:09:30 ubuntu-s-1vcpu-2gb-ams3-01 kernel: [  518.053407] oom_reaper: reaped process 15784 (python3), "
        "now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB",
        "Feb 14 05:03:41 000-000-00000-1-gpu-1 kernel: mlx5_core 0000:ab:00.0 mlx5_5: Port: 1 Link INIT",
        "[74785.660366] pcieport 0000:00:02.0: AER: Corrected error received: id=0010",
        "May  7 06:45:12 errol kernel: [21584690.529877] EDAC MC0: 4 CE error on CPU#0Channel#2_DIMM#0 "
        "(channel:2 slot:0 page:0x0 offset:0x0 grain:8 syndrome:0x0)",
        "[  +0.000921] nvidia 0000:03:00.0: AER: can't recover (no error_detected callback)",
        "[Thu Mar 14 01:57:55 2019] Killed process 89746 (python) total-vm:118026216kB, anon-rss:109819332kB, "
        "file-rss:3324kB, shmem-rss:0kB",
    ]
    assert all(line in fixture("kernel_lines.txt") for line in ignored)
    assert not kernel_log.kernel_events(ignored)


def test_kernel_events_journalctl_short_iso_and_a_text_block():
    # journalctl -k -o short-iso prefix on a real Xid line (no short-iso capture was found: the prefix is built here)
    line = "2026-11-26T12:03:44+0000 gpu-2 kernel: NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus."
    assert kernel_log.kernel_events(line + "\n") == [
        {
            "kind": "xid",
            "time": "2026-11-26T12:03:44+0000",
            "code": 79,
            "meaning": "GPU has fallen off the bus",
            "device": "0000:2b:00",
            "line": line,
        }
    ]
    assert kernel_log.when("2026-11-26T12:03:44+0000") == "at 2026-11-26T12:03:44+0000"
    assert kernel_log.when("74889.644138") == "74889 s after boot"
    assert kernel_log.when(None) == ""


# Judgement ----------------------------------------------------------------------------------------------------


def test_pci_addresses_match_across_case_and_domain_width():
    assert gpu_health._pci_key("00000000:3B:00.0") == gpu_health._pci_key("0000:3b:00") == (0, 0x3B, 0)  # pylint: disable=protected-access
    assert gpu_health._pci_key("00000001:6C:00.0") == gpu_health._pci_key("0001:6c:00")  # pylint: disable=protected-access
    assert gpu_health._pci_key("00000000:3B:00.0") != gpu_health._pci_key("0001:3b:00")  # pylint: disable=protected-access
    assert gpu_health._pci_key("GPU-76098dc1") is None  # pylint: disable=protected-access


def test_healthy_node_gives_no_lines():
    report = xml("nvidia_smi_q_x_rtx4000_sff_ada_drv595_TRIMMED.xml")  # persistence on, ECC off, no slowdown
    dcgm = gpu_health.parse_dcgmi_diag(fixture("dcgmi_diag_r2_pass_a100x8_dcgm3.3.3_awsome.txt"))
    # real Xid 13 / 31 lines (application faults, not severe) with the address changed to this GPU's
    events = kernel_log.kernel_events(
        [
            "[31609.615230] NVRM: Xid (PCI:0000:06:00): 13, Graphics Exception: Class 0x0 Subchannel 0x0 Mismatch",
            "[22859.081860] NVRM: Xid (PCI:0000:06:00): 31, pid=14292, name=python, Ch 00000030, intr 00000000. MMU Fault: ENGINE HOST0 "
            "HUBCLIENT_ESC faulted @ 0x10_00200000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
        ]
    )
    assert [e["code"] for e in events] == [13, 31]
    assert not gpu_health.gpu_lines(
        report, expected_count=1, xid_events=events, dcgm=dcgm, torch_cuda="12.6", node="gpu-2"
    )
    assert not gpu_health.gpu_lines(report)


def test_real_fixtures_only_lack_persistence_mode():
    assert gpu_health.gpu_lines(
        xml("nvidia_smi_q_x_v100s_8gpu_drv460_TRIMMED.xml"), expected_count=8, node="gpu-2"
    ) == ["gpu-2: persistence mode is off on GPUs 0, 1, 2, 3, 4, 5, 6, 7"]
    assert gpu_health.gpu_lines(xml("nvidia_smi_q_x_a10g_drv515.xml"), expected_count=1, node="gpu-2") == [
        "gpu-2: persistence mode is off on GPU 0"
    ]
    # the telegraf file holds 1 of the 4 attached GPUs
    assert gpu_health.gpu_lines(xml("nvidia_smi_q_x_a100_sxm4_mig_drv535.xml"), expected_count=4, node="gpu-2") == [
        "gpu-2: 1 GPU answers nvidia-smi, Ray will be offered 4",
        "gpu-2: persistence mode is off on GPU 1",
    ]


def test_bad_v100s_node_every_line():
    report = xml("nvidia_smi_q_x_v100s_8gpu_drv460_TRIMMED_VARIANT_bad.xml")
    # Real Xid lines with the PCI address changed to GPU 0 of this node (0000:00:0d; nvidia-smi writes 00000000:00:0D.0),
    # plus real lines for GPUs this node does not have.
    kernel = [
        "[74889.644138] NVRM: Xid (PCI:0000:00:0d): 79, GPU has fallen off the bus.",
        "[31609.615230] NVRM: Xid (PCI:0000:00:0d): 13, Graphics Exception: Class 0x0 Subchannel 0x0 Mismatch",
        "Dec  2 11:38:47 worker4 kernel: [  219.470994] NVRM: Xid (PCI:0000:00:10): 48, pid='<unknown>', name=<unknown>, An uncorrectable double "
        "bit error (DBE) has been detected on GPU in the framebuffer at physAddr 0x7fffa8860 partition 7, subpartition 1.",
        "May 18 19:02:39 kernel: NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.",
        "May 18 19:02:39 kernel: NVRM: GPU 0000:2b:00.0: GPU has fallen off the bus.",
        "NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate.",
    ]
    dcgm = gpu_health.parse_dcgmi_diag(fixture("dcgmi_diag_r2_fail_gpu_memory_thermal_stas00_EXCERPT.txt"))
    torch = gpu_health.torch_cuda(fixture("torch_version_py_2.13.0_VARIANT_cu126.txt"))
    assert gpu_health.gpu_lines(
        report, expected_count=8, xid_events=kernel_log.kernel_events(kernel), dcgm=dcgm, torch_cuda=torch, node="gpu-2"
    ) == [
        "gpu-2: the driver supports CUDA 11.2, older than the CUDA 12.6 torch in the environment was built for: "
        "update the NVIDIA driver or install a torch built for CUDA 11",
        "gpu-2: persistence mode is off on GPUs 0, 1, 2, 3, 4, 5, 6, 7",
        "gpu-2 GPU 0 (00000000:00:0D.0): Xid 79 (GPU has fallen off the bus) 74889 s after boot",
        "gpu-2 GPU 1 (00000000:00:0E.0): retired pages pending (reset the GPU)",
        "gpu-2 GPU 3 (00000000:00:10.0): 2 uncorrectable ECC errors since the driver loaded",
        "gpu-2 GPU 3 (00000000:00:10.0): Xid 48 (Double Bit ECC Error) at Dec 2 11:38:47",
        "gpu-2 GPU 5 (00000000:00:12.0): thermal slowdown active",
        "gpu-2 GPU 6 (00000000:00:13.0): hardware slowdown active",
        "gpu-2 GPU 0000:2b:00 (not listed by nvidia-smi): Xid 79 (GPU has fallen off the bus) at May 18 19:02:39",
        "gpu-2: dcgmi diag: GPU Memory failed on GPU 0",
    ]


def test_seven_gpus_answer_and_no_node_name():
    report = xml("nvidia_smi_q_x_v100s_8gpu_drv460_TRIMMED.xml")
    report["gpus"] = [g for g in report["gpus"] if g["index"] != 7]  # GPU 7 gone from nvidia-smi (edited here)
    for gpu in report["gpus"]:
        gpu["persistence_mode"] = True
    assert gpu_health.gpu_lines(report, expected_count=8, node="gpu-2") == [
        "gpu-2: 7 GPUs answer nvidia-smi, Ray will be offered 8"
    ]
    assert gpu_health.gpu_lines(report, expected_count=8) == ["7 GPUs answer nvidia-smi, Ray will be offered 8"]


def test_remap_and_ecc_thermal_variants():
    assert gpu_health.gpu_lines(
        xml("nvidia_smi_q_x_a10g_drv515_VARIANT_remap.xml"), expected_count=1, node="gpu-2"
    ) == [
        "gpu-2: persistence mode is off on GPU 0",
        "gpu-2 GPU 0 (00000000:00:1E.0): row remapping failed",
        "gpu-2 GPU 0 (00000000:00:1E.0): row remapping pending (reset the GPU)",
    ]
    assert gpu_health.gpu_lines(xml("nvidia_smi_q_x_a100_sxm4_mig_drv535_VARIANT_ecc_thermal.xml")) == [
        "persistence mode is off on GPU 1",
        "GPU 1 (00000000:01:00.0): 1 uncorrectable ECC error since the driver loaded",
        "GPU 1 (00000000:01:00.0): thermal slowdown active",
    ]


def test_repeated_xids_on_one_gpu_make_one_line():
    # The two real Xid 119 lines (0000:9b:00) judged against a GPU at that address; the report is built here.
    report = {
        "driver_version": "550.127.08",
        "cuda_version": "12.4",
        "gpus": [
            {
                "index": 4,
                "name": "NVIDIA H100 80GB HBM3",
                "uuid": None,
                "bus_id": "00000000:9B:00.0",
                "persistence_mode": True,
            }
        ],
    }
    events = kernel_log.kernel_events(log_lines("kernel_lines.txt"))
    assert gpu_health.gpu_lines(report, xid_events=events, node="gpu-2") == [
        "gpu-2 GPU 4 (00000000:9B:00.0): Xid 119 (GSP RPC Timeout) 2 times, first at Sun Feb 23 16:24:18 2025",
        "gpu-2 GPU 0000:07:00 (not listed by nvidia-smi): Xid 48 (Double Bit ECC Error) at Dec 2 11:38:47",
        "gpu-2 GPU 0000:0a:00 (not listed by nvidia-smi): Xid 62 (Internal micro-controller halt) 14370 s after boot",
        "gpu-2 GPU 0000:07:00 (not listed by nvidia-smi): Xid 64 (GPU memory remapping failure) at Dec 2 11:38:47",
        "gpu-2 GPU 0000:02:00 (not listed by nvidia-smi): Xid 79 (GPU has fallen off the bus) 74889 s after boot",
        "gpu-2 GPU 0000:2b:00 (not listed by nvidia-smi): Xid 79 (GPU has fallen off the bus) at May 18 19:02:39",
        "gpu-2 GPU 0000:b3:00 (not listed by nvidia-smi): Xid 79 (GPU has fallen off the bus) 1843 s after boot",
        "gpu-2 GPU 0000:01:00 (not listed by nvidia-smi): Xid 95 (Uncontained memory error)",
        "gpu-2 GPU 0000:cb:00 (not listed by nvidia-smi): Xid 109 (Context Switch Timeout Error) at Fri Aug 30 11:43:14 2024",
        "gpu-2 GPU 0001:6c:00 (not listed by nvidia-smi): Xid 119 (GSP RPC Timeout) at Sun Apr 26 23:12:26 2026",
        "gpu-2 GPU 0019:01:00 (not listed by nvidia-smi): Xid 149 (NVLINK: NETIR Error)",
        "gpu-2 GPU 0000:00:00 (not listed by nvidia-smi): Xid 149 (NVLINK: NETIR Error)",
    ]


def test_dcgm_lines():
    report = xml("nvidia_smi_q_x_rtx4000_sff_ada_drv595_TRIMMED.xml")
    json_fail = gpu_health.parse_dcgmi_diag_json(fixture("dcgmi_diag_json_dcgm3.1.0_8gpu_VARIANT_fail_gpu3.json"))
    assert gpu_health.gpu_lines(report, dcgm=json_fail, node="gpu-2") == [
        "gpu-2: dcgmi diag: Page Retirement/Row Remap failed on GPU 3 (GPU 3 has uncorrectable memory errors and row remappings are pending)"
    ]
    long = {"passed": False, "failures": [{"test": "Persistence Mode", "gpu": "0, 1, 2", "detail": "x" * 300}]}
    line = gpu_health.gpu_lines(report, dcgm=long)[0]
    assert line == "dcgmi diag: Persistence Mode failed on GPUs 0, 1, 2 (%s...)" % ("x" * 117)
    assert gpu_health.gpu_lines(report, dcgm={"passed": False, "failures": []}, node="gpu-2") == [
        "gpu-2: dcgmi diag failed"
    ]
    every = {"passed": False, "failures": [{"test": "PCIe", "gpu": "All", "detail": ""}]}
    assert gpu_health.gpu_lines(report, dcgm=every) == ["dcgmi diag: PCIe failed on all GPUs"]


def test_kernel_event_times_on_the_clock(monkeypatch):
    """Each format the kernel log comes in placed on the clock where it was written (the node's zone and boot)."""
    assert kernel_log.event_epoch("2026-11-26T12:03:44+0000") == 1795694624.0
    assert kernel_log.event_epoch("2026-11-26T12:03:44Z") == 1795694624.0
    assert kernel_log.event_epoch("2026-11-26T17:33:44+05:30") == 1795694624.0
    assert kernel_log.event_epoch("2026-11-26T07:03:44-05:00") == 1795694624.0
    assert kernel_log.event_epoch("74889.644138", boot=1795600000.0) == pytest.approx(1795674889.644138)
    assert kernel_log.event_epoch("74889.644138") is None  # seconds after a boot not known
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        # dmesg -T and syslog print the node's local time (EST is UTC-5 in November)
        assert kernel_log.event_epoch("Thu Nov 26 07:03:44 2026") == 1795694624.0
        assert kernel_log.event_epoch("2026-11-26T07:03:44") == 1795694624.0
        now = 1795694624.0 + 3600
        assert kernel_log.event_epoch("Nov 26 07:03:44", now=now) == 1795694624.0
        # syslog has no year: a date later than now is last year's
        assert kernel_log.event_epoch("Dec 31 23:00:00", now=now) < now - 300 * 86400
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    for bad in (None, "", "yesterday", "Foo 31 23:00:00", "2026-13-40T99:00:00Z"):
        assert kernel_log.event_epoch(bad, boot=0) is None
    # The times kernel_events keeps are the ones this reads.
    line = "2026-11-26T12:03:44,000000+00:00 NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus."
    assert kernel_log.event_epoch(kernel_log.kernel_events([line])[0]["time"]) == 1795694624.0
