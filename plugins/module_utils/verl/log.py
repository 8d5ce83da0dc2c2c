# Copyright: (c) 2025, rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Pure helpers to read verl training progress out of a job's log text.

verl's console logger prints one line per step, built by ``concat_dict_to_str``::

    step:12 - actor/pg_loss:0.1 - critic/score/mean:0.5 - timing_s/gen:3.2

Older verl formats values with ``{v:.3f}``; newer ones use ``pprint.pformat(v)``, which
renders numpy scalars as ``np.float64(0.5)`` under numpy 2. Ray prefixes driver output with
``(TaskRunner pid=123)`` (often in ANSI colour) and may append ``[repeated 2x across cluster]``.
"""

from __future__ import annotations

import re

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_RAY_DEDUP = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")
_STEP = re.compile(r"(?:^|(?<=[\s)\]]))step:(\d+)(?= - |\s*$)")
_VALUE = re.compile(
    r"^(?:np\.\w+\()?\s*"
    r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf(?:inity)?)|true|false)"
    r"\s*\)?$",
    re.IGNORECASE,
)


def _to_float(text: str) -> float | None:
    match = _VALUE.match(text.strip())
    if not match:
        return None
    value = match.group(1).lower()
    if value in ("true", "false"):
        return 1.0 if value == "true" else 0.0
    return float(value)


def parse_progress_line(line: str) -> tuple[int, dict[str, float]] | None:
    """Return ``(step, metrics)`` for a verl progress line, or None for any other line.

    Metrics whose value is not numeric are left out; NaN and infinities are kept as floats.
    """
    line = _RAY_DEDUP.sub("", _ANSI.sub("", line)).rstrip()
    match = _STEP.search(line)
    if not match:
        return None
    metrics = {}
    for part in line[match.end() :].split(" - ")[1:]:
        key, sep, raw = part.rpartition(":")
        key = key.strip()
        value = _to_float(raw) if sep and key else None
        if value is not None:
            metrics[key] = value
    return int(match.group(1)), metrics


def last_progress(text: str | None) -> tuple[int | None, dict[str, float]]:
    """Return ``(last_step, last_metrics)`` from the newest progress line in ``text``.

    ``(None, {})`` when the text holds no progress line yet.
    """
    for line in reversed((text or "").splitlines()):
        if "step:" in line:
            parsed = parse_progress_line(line)
            if parsed:
                return parsed
    return None, {}
