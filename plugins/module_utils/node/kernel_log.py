# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The kernel log lines that matter for training, read into plain dicts: NVIDIA Xid errors (with NVIDIA's Xid catalog
and which codes make a GPU unfit), uncorrectable memory / PCIe errors, the OOM killer, network links going down.

* :func:`kernel_events` reads ``dmesg``, ``dmesg -T``, ``dmesg --time-format iso`` and ``journalctl -k -o short-iso``
  lines (parse only, no command is run);
* :data:`XID` and :func:`xid_severe`: what an Xid code means, and whether it leaves its GPU unfit until someone acts
  on the machine;
* :func:`when`, :func:`occurrence` and :func:`event_epoch`: an event's time in a sentence, and in epoch seconds.

module_utils/node/gpu_health.py judges a node's GPUs with the Xids; verl/failure_causes.py names the events when a run
dies; module ray_node_logs puts them on the clock for the run report. Every format was checked against real outputs; each one's public source is listed in
tests/unit/fixtures/gpu/SOURCES.md.

Standard library only, and nothing from the collection: this file runs on the nodes under a plain python3.
"""

from __future__ import annotations

import datetime as _dt
import re
import time as _clock
from typing import Any, Iterable, Mapping

# Xid codes and their meaning: NVIDIA's Xid catalog, https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html
# (the "Description" column; transcribed through leptonai/gpud's catalog_generated.go, generated from NVIDIA's
# Xid-Catalog.xlsx). 61 is "Unused" on Ampere and later; the meaning given is the older table's.
XID = {
    8: "GPU stopped processing",
    13: "Graphics Engine Exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    45: "Preemptive cleanup, due to previous errors",
    46: "GPU stopped processing",
    48: "Double Bit ECC Error",
    61: "Internal micro-controller breakpoint/warning",
    62: "Internal micro-controller halt",
    63: "GPU memory remapping event",
    64: "GPU memory remapping failure",
    68: "NVDEC0 Exception",
    69: "Graphics Engine class error",
    74: "NVLINK Error",
    79: "GPU has fallen off the bus",
    92: "High single-bit ECC error rate",
    94: "Contained memory error",
    95: "Uncontained memory error",
    109: "Context Switch Timeout Error",
    110: "Security Fault Error",
    119: "GSP RPC Timeout",
    120: "GSP Error",
    121: "C2C Error",
    136: "Link Training Failed",
    140: "ECC Unrecovered Error",
    143: "GPU Initialization Error",
    144: "NVLINK: SAW Error",
    145: "NVLINK: RLW Error",
    146: "NVLINK: TLW Error",
    147: "NVLINK: TREX Error",
    148: "NVLINK: NVLPW_CTRL Error",
    149: "NVLINK: NETIR Error",
    150: "NVLINK: MSE Error",
    151: "Key rotation Error",
    154: "GPU Recovery Action Changed",
    155: "NVLINK: SW Defined Error",
    156: "Resource Retirement Event",
    158: "GPU Fatal Timeout",
}

# The Xids after which a GPU is unfit until someone acts on the machine. The rule, from the catalog's
# "Resolution Bucket (Immediate Action)" column: an action on the machine makes an Xid severe, an action on the
# application does not.
#
# * RESET_GPU, RESTART_BM (reboot the machine), RESTART_VM and CONTACT_SUPPORT (a code that should never appear) are
#   severe: 46, 61, 62, 64, 79, 95, 109, 110, 119, 120, 136, 140, 143, 151, 155, 156, 158; so are the workflows that
#   end in a GPU reset: 48 (WORKFLOW_XID_48, a double-bit ECC error: its row is retired or remapped at the next
#   reset) and 74 (WORKFLOW_NVLINK_ERR, a fatal NVLink error);
# * RESTART_APP and IGNORE are not: the application's own faults (13, 31, 68, 69), 43, 45 (cleanup after another
#   Xid, which is judged itself), 63 (a row marked for remapping: nvidia-smi's remapped_rows tells whether a reset
#   is pending, and gpu_lines reports that), 92 (correctable errors), 94 (a contained error: the application dies,
#   the GPU is fine), 121 (C2C);
# * two depend on the message (see xid_severe): the NVLink5 errors 144-150 (WORKFLOW_NVLINK5_ERR) are severe when the
#   driver calls them Fatal ("NETIR Fatal"; the catalog's decode table resets the GPU for those and ignores the
#   non-fatal ones, which at worst crash the application: "Xid 45 ... caused by previous Xid 145"), and 154 names
#   the recovery action the driver now requires ("... to 0x1 (GPU Reset Required)"): severe unless that is None.
XID_SEVERE = frozenset({46, 48, 61, 62, 64, 74, 79, 95, 109, 110, 119, 120, 136, 140, 143, 151, 155, 156, 158})
XID_SEVERE_WHEN_FATAL = frozenset(range(144, 151))
_RECOVERY_ACTION = re.compile(r"recovery action changed from .*? to (0x[0-9A-Fa-f]+) \(([^)]*)\)")


def xid_severe(event: Mapping[str, Any]) -> bool:
    """Whether the Xid ``event`` (of :func:`kernel_events`) makes its GPU unfit: its code is in :data:`XID_SEVERE`,
    or an NVLink5 error (144-150) the driver calls Fatal, or an Xid 154 whose new recovery action is not None."""
    code, line = event.get("code"), event.get("line") or ""
    if code in XID_SEVERE:
        return True
    if code in XID_SEVERE_WHEN_FATAL:
        return re.search(r"\bFatal\b", line) is not None  # "Nonfatal" / "Non-fatal" are not
    if code == 154:
        action = _RECOVERY_ACTION.search(line)
        return action is not None and int(action.group(1), 16) != 0
    return False


# Kernel log ------------------------------------------------------------------------------------------------------

_MONTH = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_DAY = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)"
_TIMES = [
    # dmesg -T: [Fri Aug 30 11:43:09 2024]
    re.compile(r"^\[(%s %s +\d+ \d\d:\d\d:\d\d \d{4})\]" % (_DAY, _MONTH)),
    # dmesg --time-format iso (with --decode: "kern  :warn  : "), journalctl -o short-iso
    re.compile(r"^(?:\w+\s*:\s*\w+\s*:\s*)?(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:[.,]\d+)?(Z|[+-]\d\d:?\d\d)?\s"),
    # syslog / journalctl short: "May 18 19:02:39 host kernel: ..."
    re.compile(r"^(%s +\d+ \d\d:\d\d:\d\d)\s" % _MONTH),
    # OpenWrt logread: "Sun Jun 11 23:02:41 2023 kern.info kernel: ..."
    re.compile(r"^(%s %s +\d+ \d\d:\d\d:\d\d \d{4})\s" % (_DAY, _MONTH)),
    # plain dmesg: seconds since boot; "[  +0.000001]" (dmesg -d / -H deltas) is no time at all
    re.compile(r"^\[\s*(\d+\.\d+)\]"),
]


def _time(line):
    for regex in _TIMES:
        match = regex.match(line)
        if match:
            return re.sub(r"\s+", " ", "".join(g for g in match.groups() if g))
    return None


def when(time: str | None) -> str:
    """How a kernel event's ``time`` reads in a sentence: ``at 2025-01-21T04:41:44+00:00``, ``74889 s after boot``
    for plain dmesg's seconds, '' when unknown."""
    if not time:
        return ""
    if re.match(r"\d+(\.\d+)?$", time):
        return "%d s after boot" % int(float(time))
    return "at " + time


def event_epoch(time: str | None, boot: float | str | None = None, now: float | None = None) -> float | None:
    """Epoch seconds of a kernel event's ``time`` (:func:`kernel_events`), read where the log was written: ISO times
    with their offset; ``dmesg -T``'s and syslog's in the node's local time zone (syslog's lack a year: this one, or
    the last when that would be in the future); plain dmesg's seconds after ``boot`` (epoch seconds, /proc/stat's
    btime). None when the time cannot be placed."""
    if not time:
        return None
    time = str(time)

    def local(text, layout):
        return _clock.mktime(_clock.strptime(text, layout))

    try:
        if re.match(r"\d+(\.\d+)?$", time):
            return None if boot is None else float(boot) + float(time)
        iso = re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(Z|[+-]\d\d:?\d\d)?$", time)
        if iso:  # %z reads Z, +0000 and +00:00
            return (
                _dt.datetime.strptime(time, "%Y-%m-%dT%H:%M:%S%z").timestamp()
                if iso.group(1)
                else local(time, "%Y-%m-%dT%H:%M:%S")
            )
        words = time.split()
        if len(words) == 5:  # Fri Aug 30 11:43:09 2024
            return local(" ".join(words[1:]), "%b %d %H:%M:%S %Y")
        if len(words) == 3:  # May 18 19:02:39
            now = _clock.time() if now is None else now
            year = _clock.localtime(now).tm_year
            at = local("%s %d" % (time, year), "%b %d %H:%M:%S %Y")
            return at if at <= now + 86400 else local("%s %d" % (time, year - 1), "%b %d %H:%M:%S %Y")
    except (ValueError, OverflowError):
        return None
    return None


_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})[^)]*\):\s*(\d+)")
_OFF_BUS = re.compile(
    r"NVRM: GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.\d)?: GPU has fallen off the bus"
)
_THE_GPU = re.compile(r"NVRM: The NVIDIA GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.\d)?\s*$")
_EDAC_UE = re.compile(r"\bEDAC (\S+?):.*\b(?:UE|[Uu]ncorrected|[Uu]ncorrectable)\b")
_AER_UE = re.compile(r"(?:(\S+): )?(?:AER: (?:Multiple )?Uncorrect(?:ed|able) \(|PCIe Bus Error: severity=Uncorrect)")
_OOM = re.compile(r"[Oo]ut of memory: Kill(?:ed)? process (\d+) \(([^)]*)\)")
_LINK_DOWN = re.compile(r"([A-Za-z0-9_.@-]+):?\s+(?:NIC\s+)?Link is Down|([A-Za-z0-9_.@-]+): Port: \d+ Link DOWN\b")


def _event(kind, line, time, **fields):
    event = {"kind": kind, "time": time, "code": None, "meaning": None, "device": None, "line": line.strip()}
    event.update(fields)
    return event


def _xid_fields(match):
    code = int(match.group(2))
    meaning = XID.get(code)
    action = _RECOVERY_ACTION.search(match.string) if code == 154 else None
    if action:
        meaning = "GPU recovery action changed to %s" % action.group(2)
    return {"kind": "xid", "code": code, "meaning": meaning, "device": match.group(1)}


def _aer_device(match):
    device = match.group(1)
    return device if device and re.match(r"[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:", device) else None


# (expression, the event's fields from its match), first match wins
_LINE_EVENTS = (
    (_XID, _xid_fields),
    (_OFF_BUS, lambda m: {"kind": "xid", "code": 79, "meaning": XID[79], "device": m.group(1)}),
    (
        _EDAC_UE,
        lambda m: {"kind": "ecc", "meaning": "uncorrectable memory error (EDAC %s)" % m.group(1), "device": m.group(1)},
    ),
    (_AER_UE, lambda m: {"kind": "ecc", "meaning": "uncorrected PCIe error (AER)", "device": _aer_device(m)}),
    (_OOM, lambda m: {"kind": "oom", "meaning": "killed %s (pid %s)" % (m.group(2), m.group(1))}),
    (_LINK_DOWN, lambda m: {"kind": "nic_down", "meaning": "link down", "device": m.group(1) or m.group(2)}),
)


def _line_event(line, time):
    """The event one kernel log line reports, None for the lines that do not matter."""
    for regex, fields in _LINE_EVENTS:
        match = regex.search(line)
        if match:
            fields = fields(match)
            return _event(fields.pop("kind"), line, time, **fields)
    return None


def kernel_events(lines: str | Iterable[str] | None) -> list[dict[str, Any]]:
    """The kernel log lines that matter for training, as dicts ``kind, time, code, meaning, device, line``:

    * ``xid``: ``NVRM: Xid (PCI:0000:3b:00): 79, ...`` (code, its :data:`XID` meaning, the PCI address as
      ``device``). The driver's "GPU has fallen off the bus" message counts as Xid 79 whether or not the Xid line
      was logged with it (it is also printed alone, over three lines);
    * ``ecc``: uncorrectable host memory errors (EDAC ``UE``) and uncorrected PCIe errors (AER);
    * ``oom``: the OOM killer killing a process (``meaning`` names it and its pid);
    * ``nic_down``: a network interface losing its link (``device`` is the interface).

    ``time`` is the line's timestamp as printed, ISO ones cut to the second, plain dmesg's seconds since boot as
    a number (see :func:`when`), None when the line has none. Everything else is ignored."""
    if isinstance(lines, str):
        lines = lines.splitlines()
    events = []
    # "NVRM: The NVIDIA GPU <address>" waiting for its "fallen off the bus" two lines later
    off_bus: dict[str, Any] = {"device": None, "time": None, "lines": []}
    for raw in lines or []:
        line = str(raw).rstrip("\n")
        time = _time(line)
        if off_bus["device"]:
            off_bus["lines"].append(line.strip())
            if "fallen off the bus" in line:
                events.append(
                    _event(
                        "xid",
                        " ".join(off_bus["lines"]),
                        off_bus["time"],
                        code=79,
                        meaning=XID[79],
                        device=off_bus["device"],
                    )
                )
                off_bus["device"] = None
                continue
            if len(off_bus["lines"]) >= 4:
                off_bus["device"] = None
        match = _THE_GPU.search(line)
        if match:
            off_bus.update(device=match.group(1), time=time, lines=[line.strip()])
            continue
        event = _line_event(line, time)
        if event is not None:
            events.append(event)
    return events


def occurrence(events: Iterable[Mapping[str, Any]] | None) -> str:
    """When ``events`` (of one kind, code and device) happened, to follow their description: `` at T``;
    `` 3 times, first at T`` when they happened at several times (the same time twice, as a message printed over
    two lines, counts once); '' when no time is known."""
    times = []
    for event in events or ():
        time = when(event.get("time"))
        if time not in times:
            times.append(time)
    first = times[0] if times else ""
    if len(times) > 1:
        return " %d times%s" % (len(times), ", first " + first if first else "")
    return " " + first if first else ""
