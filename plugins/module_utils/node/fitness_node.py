# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""One node's part of fitness.yml, in one round trip: start the network agent (fitness_net.start_agent), read the
GPUs (nvidia-smi -q -x, dcgmi diag -r 1 where DCGM is installed, amd-smi or rocm-smi on AMD), the kernel log since
boot (dmesg, else journalctl -k), the CUDA torch in the node's environment was built for, and the room left on the
volumes a run writes to; judge them (module_utils/node/gpu_health.py, module_utils/common/room.py). Standard library only.
"""

from __future__ import annotations

import glob
import os
from typing import Any, Mapping, Sequence

from ansible_collections.rlinfra.verl.plugins.module_utils.common import room
from ansible_collections.rlinfra.verl.plugins.module_utils.node import gpu_health, kernel_log
from ansible_collections.rlinfra.verl.plugins.module_utils.node.fitness_net import start_agent
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.node import detect_gpus


def _run(module: Any, argv: Sequence[str], timeout: float | None = None) -> tuple[int, str, str] | None:
    path = module.get_bin_path(argv[0])
    if not path:
        return None
    rc, out, err = module.run_command([path] + list(argv[1:]))
    return rc, out, err


def kernel_lines(module: Any) -> tuple[list[str], str]:
    """The kernel log since boot: ``(lines, source)``; ([], why) when neither dmesg nor journalctl can read it."""
    for argv in (["dmesg", "--time-format", "iso"], ["journalctl", "-k", "-b", "-o", "short-iso", "--no-pager", "-q"]):
        got = _run(module, argv)
        if got and got[0] == 0 and got[1].strip():
            return got[1].splitlines(), argv[0]
    return [], "the kernel log could not be read (dmesg and journalctl -k gave nothing)"


def torch_cuda_of(venv: str) -> tuple[str | None, bool]:
    for path in sorted(glob.glob(os.path.join(venv, "lib", "python*", "site-packages", "torch", "version.py"))):
        try:
            with open(path, encoding="utf-8") as handle:
                return gpu_health.torch_cuda(handle.read()), True
        except OSError:
            continue
    return None, False


def gpu_report(params: Mapping[str, Any], module: Any, node: str) -> dict[str, Any]:
    """``{vendor, count, expected, driver, cuda, torch_cuda, gpus, lines, notes}`` of this node's GPUs."""
    vendor, count = detect_gpus()
    expected = params.get("expected_gpus")
    expected = count if expected in (None, "", "auto") else int(expected)
    out: dict[str, Any]
    out = dict(
        vendor=vendor,
        count=count,
        expected=expected,
        driver=None,
        cuda=None,
        torch_cuda=None,
        gpus=[],
        lines=[],
        notes=[],
        kernel_source="",
        kernel_events=[],
    )
    if params.get("gpu") == "off":
        return out
    lines_kernel, source = kernel_lines(module)
    events = kernel_log.kernel_events(lines_kernel)
    out["kernel_source"] = source
    out["kernel_events"] = events[-50:]
    torch_cuda, has_torch = torch_cuda_of(params.get("venv") or "")
    out["torch_cuda"] = torch_cuda
    if vendor == "nvidia" or module.get_bin_path("nvidia-smi"):
        got = _run(module, ["nvidia-smi", "-q", "-x"])
        if got is None:
            out["lines"].append(
                "%s: %d NVIDIA GPU device(s) but no nvidia-smi: install the NVIDIA driver's utilities" % (node, count)
            )
            return out
        if got[0] != 0:
            out["lines"].append(
                "%s: nvidia-smi failed (%s): the driver is not loaded or a GPU is lost"
                % (
                    node,
                    (got[2] or got[1]).strip().splitlines()[-1][:200]
                    if (got[2] or got[1]).strip()
                    else "rc %d" % got[0],
                )
            )
            return out
        try:
            report = gpu_health.parse_nvidia_xml(got[1])
        except ValueError as exc:
            out["lines"].append("%s: %s" % (node, exc))
            return out
        out.update(driver=report.get("driver_version"), cuda=report.get("cuda_version"), gpus=report["gpus"])
        dcgm = None
        if params.get("dcgm", True) and module.get_bin_path("dcgmi"):
            diag = _run(module, ["dcgmi", "diag", "-r", "1"])
            if diag is not None:
                try:
                    dcgm = gpu_health.parse_dcgmi_diag(diag[1])
                except ValueError as exc:
                    out["notes"].append("dcgmi diag: %s" % exc)
        out["lines"] += gpu_health.gpu_lines(
            report,
            expected_count=expected,
            xid_events=[e for e in events if e.get("kind") == "xid"],
            dcgm=dcgm,
            torch_cuda=torch_cuda if has_torch else None,
            node=node,
        )
    elif vendor == "amd":
        got = _run(module, ["amd-smi", "metric", "--json"])
        if got is not None and got[0] == 0:
            try:
                gpus = gpu_health.parse_amd_smi_metric(got[1])
            except ValueError as exc:
                out["notes"].append("amd-smi: %s" % exc)
                gpus = []
            out["gpus"] = gpus
            for g in gpus:
                if g.get("ecc_uncorrectable"):
                    out["lines"].append(
                        "%s GPU %s: %d uncorrectable ECC errors" % (node, g.get("index"), g["ecc_uncorrectable"])
                    )
            if expected is not None and gpus and len(gpus) != expected:
                out["lines"].append("%s: %d GPUs answer amd-smi, Ray will be offered %d" % (node, len(gpus), expected))
        else:
            out["notes"].append("amd-smi is not installed: only the GPU count was checked")
    elif expected:
        out["lines"].append(
            "%s: Ray will be offered %d GPU(s) but the node shows none (/dev/nvidia*, /dev/kfd)" % (node, expected)
        )
    return out


def check(params: Mapping[str, Any], module: Any) -> dict[str, Any]:
    """The node's check: ``{changed: False, listening, gpu, volumes, lines}``; ``lines`` name what makes it unfit."""
    node = params["node"]
    agent = (
        start_agent(
            dict(ip=params["ip"], port=params["port"], nonce=params["nonce"], lifetime=params["lifetime"]), module
        )
        if params.get("ip")
        else dict(listening="", skipped=True)
    )
    if agent.get("failed"):
        return dict(agent, msg="%s: %s" % (node, agent["msg"]))
    gpu = gpu_report(params, module, node)
    rows, room_lines = room.check_volumes(params.get("volumes") or [], node)
    return dict(
        changed=False, listening=agent.get("listening", ""), gpu=gpu, volumes=rows, lines=gpu["lines"] + room_lines
    )
