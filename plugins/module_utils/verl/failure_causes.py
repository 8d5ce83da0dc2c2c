# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Why a training run died, in one short line per cause, read from its logs:

* :func:`driver_log_causes`: the common causes in a training driver's log (a full volume, CUDA out of memory, an
  NCCL collective that timed out, NCCL losing a connection between nodes), newest first, each once;
* :func:`kernel_causes`: the kernel events of a node (:func:`kernel_log.kernel_events`: Xid errors, the OOM
  killer, links going down, uncorrectable memory errors) as lines naming the node.

A line echoes at most ~120 characters of the log, with anything that looks like a secret (``token=...``,
``HF_TOKEN=...``, ``Bearer ...``, a password in a URL) masked. The log lines these were written against are real,
each with its public source in tests/unit/fixtures/gpu/SOURCES.md.

Standard library only (and the collection's kernel_log.py and secret_names.py, which are too): this runs on the
nodes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from ansible_collections.rlinfra.verl.plugins.module_utils.common.masking import mask_patterns
from ansible_collections.rlinfra.verl.plugins.module_utils.node.kernel_log import XID, occurrence

ECHO = 120  # the most characters of the log a line repeats
NEARLY_FULL = 1 << 30  # a volume with less free space than this is the full one when the log names no path


def _echo(text, width=ECHO):
    """A piece of the log fit to repeat: secrets masked, blanks squeezed, at most ``width`` characters."""
    text = re.sub(r"\s+", " ", mask_patterns(text)).strip()
    return text if len(text) <= width else text[: width - 3] + "..."


def _size(count):
    """``0 B``, ``512 KiB``, ``1.5 GiB``."""
    count = max(int(count), 0)
    if count < 1024:
        return "%d B" % count
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        count /= 1024.0
        if count < 1024 or unit == "TiB":
            break
    return ("%.1f %s" % (count, unit)).replace(".0 ", " ")


def _inside(path, volume):
    volume = volume.rstrip("/") or "/"
    return path == volume or path.startswith(volume if volume.endswith("/") else volume + "/")


# Full volume: "OSError: [Errno 28] No space left on device: '/path'" (the path only when Python has it: open() does,
# torch.save's zip writer does not), safetensors' "IoError(Os { code: 28, kind: StorageFull, ... })", coreutils'
# "error writing '/path': No space left on device" and Go's "write /path: no space left on device".
_ENOSPC = re.compile(
    r"\[Errno 28\] No space left on device(?:: '([^']+)')?|code: 28, kind: StorageFull|No space left on device",
    re.IGNORECASE,
)
_ENOSPC_PATH = re.compile(
    r"(?:error writing|cannot create|write) '?(/[^':\s]+)'?: no space left on device", re.IGNORECASE
)


def _enospc(line, volumes):
    match = _ENOSPC.search(line)
    if not match:
        return None
    path = match.group(1)
    if path is None:
        other = _ENOSPC_PATH.search(line)
        path = other.group(1) if other else None
    volumes = [v for v in volumes or [] if isinstance(v, dict) and v.get("path")]
    volume = None
    if path:
        holding = [v for v in volumes if _inside(path, str(v["path"]))]
        volume = max(holding, key=lambda v: len(str(v["path"])), default=None)
    else:
        full = [v for v in volumes if v.get("free_bytes") is not None and int(v["free_bytes"]) < NEARLY_FULL]
        volume = min(full, key=lambda v: int(v["free_bytes"]), default=None)
    if volume is not None:
        free = " (%s free)" % _size(volume["free_bytes"]) if volume.get("free_bytes") is not None else ""
        return (
            "enospc:" + str(volume["path"]),
            "the checkpoint volume %s is full%s: free space or lower trainer.max_actor_ckpt_to_keep"
            % (_echo(volume["path"]), free),
        )
    if path:
        where = "No space left on device at %s" % _echo(path)
    elif "StorageFull" in line:
        where = "No space left on device writing safetensors"
    else:
        where = "No space left on device"
    return (
        "enospc:" + (path or ""),
        "a volume is full (%s): free space on it, or lower trainer.max_actor_ckpt_to_keep if it holds the checkpoints"
        % where,
    )


# CUDA out of memory: torch >= 2.2 "Tried to allocate 22.00 MiB. GPU 0 has a total capacity ...", torch 1.x-2.1
# "Tried to allocate 1.69 GiB (GPU 0; 14.56 GiB total capacity; ...)"; the class is torch.cuda.OutOfMemoryError,
# torch.OutOfMemoryError (>= 2.4) or RuntimeError.
_CUDA_OOM = re.compile(
    r"CUDA out of memory\. Tried to allocate ([\d.]+ ?[KMGT]?i?B)(?:\.? *(?:GPU (\d+)|\(GPU (\d+);))?"
)


def _cuda_oom(line):
    match = _CUDA_OOM.search(line)
    if not match:
        return None
    gpu = match.group(2) or match.group(3)
    where = "tried to allocate %s%s" % (match.group(1), " on GPU %s" % gpu if gpu else "")
    return (
        "cuda_oom",
        "CUDA out of memory (%s): lower the micro-batch size (e.g. "
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu) or the rollout's gpu_memory_utilization" % where,
    )


# torch.distributed's watchdog: "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=469508,
# OpType=ALLREDUCE, [NumelIn=..., NumelOut=...,] Timeout(ms)=1800000) ran for 1802212 milliseconds before timing out."
_WATCHDOG = re.compile(
    r"Watchdog caught collective operation timeout: WorkNCCL\(([^)]*(?:\)[^)]*)?)\) ran for (\d+) milliseconds"
)


def _nccl_timeout(line):
    match = _WATCHDOG.search(line)
    if not match:
        return None
    fields = match.group(1)
    op = re.search(r"OpType=(\w+)", fields)
    op = op.group(1).strip("_") if op else "collective"
    timeout = re.search(r"Timeout\(ms\)=(\d+)", fields)
    millis = int(timeout.group(1)) if timeout else int(match.group(2))
    seconds = "%g" % (millis / 1000.0)
    return (
        "nccl_timeout:" + op,
        "an NCCL %s timed out after %s s (a node or its network stopped answering; check the "
        "nodes' kernel logs and fitness.yml)" % (op, seconds),
    )


# NCCL losing a peer: "NCCL error in: ...ProcessGroupNCCL.cpp:1333, unhandled system error (run with NCCL_DEBUG=INFO
# for details), NCCL version 2.18.6", "... remote process exited or there was a network error ...", then NCCL's
# "Last error:" line ("socketStartConnect: Connect to 192.168.19.14<52822> failed : No route to host",
# "socketProgressOpt: Call to recv from ... failed : Connection reset by peer", "Net : Connection closed by remote peer").
_NCCL_ANY = re.compile(r"NCCL error\b|\bnccl[A-Z][a-z]*Error\b")
_NCCL_ERROR = re.compile(
    r"NCCL error\b.*?(unhandled system error|remote process exited or there was a network error)"
    r"|\b(ncclSystemError|ncclRemoteError)\b"
)
_CONNECTION = re.compile(
    r"Connection refused|Connection reset by peer|Connection closed by remote peer|No route to host|"
    r"Software caused connection abort|Connection timed out",
    re.IGNORECASE,
)
_NCCL_CONTEXT = 6  # lines after an NCCL error that still belong to it ("Last error:" and its line)


def _nccl_detail(line):
    """The part of an NCCL socket error line worth repeating: without the ``host:pid:tid [rank] file:line NCCL WARN``
    prefix."""
    line = re.sub(r"^.*?\bNCCL WARN\s+", "", line.strip())
    return re.sub(r"^\S+:\d+:\d+ \[\d+\] ", "", line)


def driver_log_causes(text: str | None, volumes: Iterable[Any] | None = None) -> list[str]:
    """The causes found in a training driver's log ``text``, newest first, each once. ``volumes``: the checkpoint
    volumes of the run as ``dict(path, free_bytes)``; a "No space left on device" is put on the one holding the path
    the log names (or, when it names none, on one with less than 1 GiB free)."""
    found = {}  # key -> (line number, cause)
    nccl_until = -1
    for number, line in enumerate(str(text or "").splitlines()):
        hit = _enospc(line, volumes) or _cuda_oom(line) or _nccl_timeout(line)
        if hit is None:
            error = _NCCL_ERROR.search(line)
            connection = _CONNECTION.search(line)
            if _NCCL_ANY.search(line):
                nccl_until = number + _NCCL_CONTEXT
            if connection and (number <= nccl_until or "NCCL WARN" in line):
                hit = ("nccl_connection", "NCCL lost a connection between nodes (%s)" % _echo(_nccl_detail(line)))
            elif error:
                hit = (
                    "nccl_connection",
                    "NCCL lost a connection between nodes (%s)" % _echo(error.group(1) or error.group(2)),
                )
        if hit is not None:
            found[hit[0]] = (number, hit[1])
    causes = []
    for _number, cause in sorted(found.values(), key=lambda item: -item[0]):
        if cause not in causes:
            causes.append(cause)
    return causes


def kernel_line(event: Mapping[str, Any]) -> str | None:
    """What a kernel event (:func:`kernel_log.kernel_events`) says, without its node or time: ``Xid 79 (GPU has fallen
    off the bus) on 0000:2b:00``; None for a kind this does not know."""
    kind = event.get("kind")
    if kind == "xid":
        code: Any = event.get("code")
        meaning = event.get("meaning") or XID.get(code)
        text = "Xid %s (%s)" % (code, meaning) if meaning else "Xid %s" % code
        return text + (" on %s" % event["device"] if event.get("device") else "")
    if kind == "oom":
        return "the OOM killer %s" % (event.get("meaning") or "killed a process")
    if kind == "nic_down":
        return "%s link down" % (event.get("device") or "a network interface")
    if kind == "ecc":
        text = event.get("meaning") or "uncorrectable memory error"
        device = event.get("device")
        return text + (" on %s" % device if device and device not in text else "")
    return None


def kernel_causes(events: Iterable[dict[str, Any]] | None, node: str | None) -> list[str]:
    """One line per kernel event (:func:`kernel_log.kernel_events`), in log order (the first is often the cause of
    the rest: "Xid 45 ... caused by previous Xid 145"): ``gpu-2: Xid 79 (GPU has fallen off the bus) on 0000:2b:00
    at ...``, ``gpu-2: the OOM killer killed python (pid 1234) at ...``, ``gpu-2: eth0 link down at ...``,
    ``gpu-2: uncorrectable memory error (EDAC MC3) at ...``. The same event again (a message repeated, or printed
    over two lines) makes one line: ``... 3 times, first at ...``."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for event in events or []:
        text = kernel_line(event)
        if text is not None:
            groups.setdefault(text, []).append(event)
    return [
        _echo("%s%s%s" % (node + ": " if node else "", text, occurrence(group)), width=240)
        for text, group in groups.items()
    ]
