# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The nodes' utilisation over a run's window from Prometheus, as pure functions: the PromQL of each chart, the
``/api/v1/query_range`` request for a window (its step chosen so that a run of days stays near 1000 points a series),
and the answer read into the run report's plain structure ``{"cpu": {host: [(epoch_s, value), ...]}, "memory": ...,
"gpu": ..., "gpu_memory": ...}``. The HTTP request itself is made elsewhere (on the head, which reaches Prometheus);
nothing here does I/O, so the answers Prometheus documents are enough to test it
(tests/unit/test_observe_prometheus.py).

Sources: node_exporter for CPU and memory (label ``instance``, ``address:port`` of the scrape); GPUs from NVIDIA's DCGM
exporter when it runs (label ``instance``), else Ray's own node metrics, which name the node by the label ``ip`` (Ray's
reporter agent declares its node gauges with the tag keys ``ip``, ``SessionName``, ``GpuIndex``, ``GpuDeviceName``;
``instance`` there is the scrape target of Ray's metrics export port). Each chart lists its expressions in order of
preference: the first that has data wins (:func:`utilisation`)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

KINDS = ("cpu", "memory", "gpu", "gpu_memory")
# The label that names a node, in the order they are looked at: Ray's node address, then the scrape target.
NODE_LABELS = ("ip", "instance")
MAX_POINTS = 1000
MIN_STEP = 15  # Prometheus's usual scrape interval: a finer step only repeats samples
RANGE_PATH = "/api/v1/query_range"


def cpu(window: str = "1m") -> str:
    """Busy CPU % per node: node_exporter's idle seconds' rate over ``window``. A step longer than a minute takes a
    window as long as the step (:func:`queries`), so each point averages its whole step instead of sampling a minute."""
    return '100 * (1 - avg by (instance) (rate(node_cpu_seconds_total{mode="idle"}[%s])))' % window


MEMORY = "100 * (1 - node_memory_MemAvailable_bytes / node_memory_MemTotal_bytes)"
GPU_DCGM = "avg by (instance) (DCGM_FI_DEV_GPU_UTIL)"
GPU_RAY = "avg by (ip) (ray_node_gpus_utilization)"
# Used over used + free/available: a percentage whatever unit the exporter counts in (DCGM and Ray give MiB).
GPU_MEMORY_DCGM = (
    "100 * sum by (instance) (DCGM_FI_DEV_FB_USED) / (sum by (instance) (DCGM_FI_DEV_FB_USED) + "
    "sum by (instance) (DCGM_FI_DEV_FB_FREE))"
)
GPU_MEMORY_RAY = (
    "100 * sum by (ip) (ray_node_gram_used) / (sum by (ip) (ray_node_gram_used) + "
    "sum by (ip) (ray_node_gram_available))"
)


class PrometheusError(ValueError):
    """An answer that is not a matrix: Prometheus's own error (``errorType: error``), or not its JSON at all."""


def window(seconds: float) -> str:
    """A PromQL duration: ``1m`` for a minute or less, else whole seconds (``300s``)."""
    seconds = int(math.ceil(seconds))
    return "1m" if seconds <= 60 else "%ds" % seconds


def queries(step: float = MIN_STEP) -> dict[str, tuple[str, ...]]:
    """``{kind: (expression, fallback, ...)}`` for a query of ``step`` seconds."""
    return dict(
        cpu=(cpu(window(step)),),
        memory=(MEMORY,),
        gpu=(GPU_DCGM, GPU_RAY),
        gpu_memory=(GPU_MEMORY_DCGM, GPU_MEMORY_RAY),
    )


def step_for(start: float, end: float, max_points: int = MAX_POINTS, min_step: float = MIN_STEP) -> int:
    """Whole seconds between points so that ``[start, end]`` gives at most ``max_points`` per series (a query_range
    answer holds ``floor((end - start) / step) + 1``), never below ``min_step``."""
    span = max(0.0, float(end) - float(start))
    return max(int(min_step), int(math.ceil(span / max(1, max_points - 1))))


def query_range(
    base_url: str | None,
    expression: str,
    start: float,
    end: float,
    max_points: int = MAX_POINTS,
    min_step: float = MIN_STEP,
    timeout: float | None = None,
) -> tuple[str, dict[str, str]]:
    """``(url, params)`` of a range query of ``expression`` over ``[start, end]`` (epoch seconds); ``base_url`` is
    Prometheus's (``http://10.0.0.5:9090``, a path prefix kept). An end before the start is a window of one step."""
    start, end = float(start), float(end)
    step = step_for(start, end, max_points, min_step)
    if end < start:
        end = start
    params = dict(query=expression, start=_number(start), end=_number(end), step=str(step))
    if timeout:
        params["timeout"] = "%ds" % int(timeout)
    return (base_url or "").rstrip("/") + RANGE_PATH, params


def range_requests(
    base_url: str | None,
    start: float,
    end: float,
    max_points: int = MAX_POINTS,
    min_step: float = MIN_STEP,
    timeout: float | None = None,
) -> dict[str, list[tuple[str, dict[str, str]]]]:
    """``{kind: [(url, params), ...]}``: every query of the window, each chart's in order of preference."""
    step = step_for(start, end, max_points, min_step)
    return dict(
        (kind, [query_range(base_url, expr, start, end, max_points, min_step, timeout) for expr in exprs])
        for kind, exprs in queries(step).items()
    )


def url(base_url: str | None, expression: str, start: float, end: float, **kwargs: Any) -> str:
    """The range query as one GET URL."""
    path, params = query_range(base_url, expression, start, end, **kwargs)
    return "%s?%s" % (path, urlencode(sorted(params.items())))


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def node_address(value: object) -> str:
    """The address in a label: ``10.0.0.5:9100`` -> ``10.0.0.5``, ``[fd00::5]:9100`` -> ``fd00::5``; a bare IPv6
    address or a name stays as it is."""
    value = str(value or "")
    if value.startswith("["):
        return value[1:].split("]", 1)[0]
    if value.count(":") == 1:
        host, port = value.split(":")
        if port.isdigit():
            return host
    return value


def node_name(metric: Mapping[str, Any] | None, names: Mapping[str, str] | None) -> str | None:
    """The inventory host a series is of: its ``ip`` or ``instance`` label (port stripped) through ``names``
    (address -> host); the address itself when ``names`` does not know it; None without either label."""
    for label in NODE_LABELS:
        value = (metric or {}).get(label)
        if value:
            names = names or {}
            return names.get(value) or names.get(node_address(value)) or node_address(value)
    return None


def _value(text: Any) -> float | None:
    """A sample's value: Prometheus sends them as strings (JSON has no NaN or infinity); those, or anything not a
    number, are None - a gap in the chart, never a zero."""
    try:
        number = float(text)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def decode(body: str | bytes | dict[str, Any]) -> dict[str, Any]:
    """The answer's JSON (str, bytes or already a dict); PrometheusError when it is not one."""
    if isinstance(body, dict):
        return body
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    try:
        data = json.loads(body)
    except (TypeError, ValueError):
        raise PrometheusError("the answer is not Prometheus's JSON: %r" % str(body)[:120]) from None
    if not isinstance(data, dict):
        raise PrometheusError("the answer is not Prometheus's JSON object: %r" % str(body)[:120])
    return data


def parse(
    body: str | bytes | dict[str, Any], names: Mapping[str, str] | None = None
) -> dict[str, list[tuple[float, float | None]]]:
    """``{host: [(epoch_s, value or None), ...]}`` (time order) of a query_range answer; series of one host (two
    scrape jobs, say) are merged, the first one's sample kept at a time both have. PrometheusError for an error
    answer (its ``errorType`` and ``error``) or one that is not a matrix."""
    data = decode(body)
    if data.get("status") != "success":
        raise PrometheusError(
            "Prometheus answered %s: %s"
            % (data.get("errorType") or data.get("status") or "no status", data.get("error") or "no error given")
        )
    inner = data.get("data")
    if not isinstance(inner, dict) or inner.get("resultType") != "matrix" or not isinstance(inner.get("result"), list):
        raise PrometheusError(
            "Prometheus's answer is not a range query's matrix (resultType %r)"
            % (inner.get("resultType") if isinstance(inner, dict) else None)
        )
    out: dict[str, dict[float, float | None]] = {}
    for series in inner["result"]:
        if not isinstance(series, dict):
            continue
        host = node_name(series.get("metric"), names)
        if host is None:
            continue
        points = out.setdefault(host, {})
        for sample in series.get("values") or []:
            try:
                at = float(sample[0])
            except (TypeError, ValueError, IndexError):
                continue
            points.setdefault(at, _value(sample[1]) if len(sample) > 1 else None)
    return dict((host, sorted(points.items())) for host, points in out.items())


def utilisation(
    answers: Mapping[str, Any] | None, names: Mapping[str, str] | None = None
) -> tuple[dict[str, Any], list[str]]:
    """``(structure, problems)`` from ``{kind: [answer of each expression of queries()[kind], ...]}``: each kind's
    first answer that has a series (DCGM before Ray for the GPUs); ``problems`` the lines of the answers that could
    not be read (a kind without any answer is left out, not an error)."""
    out, problems = {}, []
    for kind in KINDS:
        for body in (answers or {}).get(kind) or []:
            if body is None:
                continue
            try:
                parsed = parse(body, names)
            except PrometheusError as e:
                problems.append("%s: %s" % (kind, e))
                continue
            if parsed:
                out[kind] = parsed
                break
    return out, problems
