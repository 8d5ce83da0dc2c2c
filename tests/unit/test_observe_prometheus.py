"""The nodes' utilisation from Prometheus (module_utils/observe/prometheus.py): the PromQL, the query_range request and
the answer read into the run report's structure.

The answers are shaped as Prometheus's HTTP API documents them:
https://prometheus.io/docs/prometheus/latest/querying/api/
("Format overview": the ``status``/``data``/``errorType``/``error``/``warnings`` envelope; "Range queries": ``GET
/api/v1/query_range`` with ``query``, ``start``, ``end``, ``step``, answered with ``resultType: "matrix"``; "Range
vectors": ``{"metric": {...}, "values": [[<unix_time>, "<sample_value>"], ...]}``; "Expression query result formats":
sample values are strings because JSON has no NaN, Inf and -Inf).
"""

from __future__ import annotations

import json
from urllib.parse import parse_qs, urlsplit

import pytest

from ansible_collections.rlinfra.verl.plugins.module_utils.observe import prometheus as P

NAMES = {"10.0.0.5": "gpu-0", "10.0.0.6": "gpu-1"}

# The documentation's range query example, with node_exporter's and Ray's labels.
MATRIX = {
    "status": "success",
    "data": {
        "resultType": "matrix",
        "result": [
            {
                "metric": {"instance": "10.0.0.5:9100", "job": "node"},
                "values": [[1435781430.781, "1"], [1435781445.781, "1"], [1435781460.781, "1"]],
            },
            {
                "metric": {"instance": "10.0.0.6:9100", "job": "node"},
                "values": [[1435781430.781, "0"], [1435781445.781, "NaN"], [1435781460.781, "+Inf"]],
            },
        ],
    },
}
RAY_GPU = {
    "status": "success",
    "data": {
        "resultType": "matrix",
        "result": [
            {"metric": {"ip": "10.0.0.5"}, "values": [[1700000000, "87.5"], [1700000015, "90"]]},
            {"metric": {"ip": "10.0.0.9"}, "values": [[1700000000, "12"]]},
        ],
    },
}
EMPTY = {"status": "success", "data": {"resultType": "matrix", "result": []}}
ERROR = {
    "status": "error",
    "errorType": "bad_data",
    "error": 'invalid parameter "query": 1:8: parse error: unexpected end of input',
}
TOO_MANY = {
    "status": "error",
    "errorType": "bad_data",
    "error": "exceeded maximum resolution of 11,000 points per timeseries. Try decreasing the query resolution "
    "(?step=XX)",
}


def test_the_expressions():
    q = P.queries()
    assert q["cpu"] == ('100 * (1 - avg by (instance) (rate(node_cpu_seconds_total{mode="idle"}[1m])))',)
    assert q["memory"] == ("100 * (1 - node_memory_MemAvailable_bytes / node_memory_MemTotal_bytes)",)
    # DCGM first, Ray's own gauges (named by their ``ip`` label) when DCGM has nothing.
    assert q["gpu"] == ("avg by (instance) (DCGM_FI_DEV_GPU_UTIL)", "avg by (ip) (ray_node_gpus_utilization)")
    assert "DCGM_FI_DEV_FB_USED" in q["gpu_memory"][0] and "DCGM_FI_DEV_FB_FREE" in q["gpu_memory"][0]
    assert "ray_node_gram_used" in q["gpu_memory"][1] and "ray_node_gram_available" in q["gpu_memory"][1]
    # A step of 5 minutes: the CPU's rate covers the whole step.
    assert "[300s]" in P.queries(300)["cpu"][0]


def test_the_range_request_and_its_step():
    path, params = P.query_range("http://10.0.0.5:9090/", P.MEMORY, 1700000000, 1700003600)
    assert path == "http://10.0.0.5:9090/api/v1/query_range"
    assert params == dict(query=P.MEMORY, start="1700000000", end="1700003600", step="15")
    # Three days: at most 1000 points a series.
    start, end = 1700000000, 1700000000 + 3 * 86400
    step = int(P.query_range("http://p:9090", P.MEMORY, start, end)[1]["step"])
    assert (end - start) // step + 1 <= 1000 and step == 260
    assert P.step_for(0, 10) == 15 and P.step_for(0, 999 * 15) == 15 and P.step_for(0, 999 * 15 + 1) == 16
    url = P.url("http://p:9090/prom", P.cpu(), 1.5, 100, timeout=30)
    parts = urlsplit(url)
    assert parts.path == "/prom/api/v1/query_range"
    assert parse_qs(parts.query) == dict(query=[P.cpu()], start=["1.5"], end=["100"], step=["15"], timeout=["30s"])
    every = P.range_requests("http://p:9090", start, end)
    assert sorted(every) == sorted(P.KINDS) and len(every["gpu"]) == 2
    assert every["cpu"][0][1]["query"].endswith("[260s])))")


def test_a_matrix_maps_addresses_to_hosts_and_non_numbers_to_gaps():
    out = P.parse(json.dumps(MATRIX), NAMES)
    assert out == {
        "gpu-0": [(1435781430.781, 1.0), (1435781445.781, 1.0), (1435781460.781, 1.0)],
        "gpu-1": [(1435781430.781, 0.0), (1435781445.781, None), (1435781460.781, None)],
    }
    # Ray's ``ip``; a node the inventory does not name keeps its address.
    assert P.parse(RAY_GPU, NAMES) == {
        "gpu-0": [(1700000000.0, 87.5), (1700000015.0, 90.0)],
        "10.0.0.9": [(1700000000.0, 12.0)],
    }
    assert P.parse(EMPTY, NAMES) == {} and P.parse(json.dumps(MATRIX).encode(), {})["10.0.0.5"][0][1] == 1.0


def test_addresses_in_labels():
    assert P.node_address("10.0.0.5:9100") == "10.0.0.5"
    assert P.node_address("[fd00::5]:9100") == "fd00::5"
    assert P.node_address("fd00::5") == "fd00::5"
    assert P.node_address("gpu-0.example:9400") == "gpu-0.example"
    assert P.node_name({"instance": "gpu-0:9400"}, {"gpu-0": "head"}) == "head"
    assert P.node_name({"job": "x"}, NAMES) is None


@pytest.mark.parametrize(
    "body, line",
    [
        (ERROR, 'Prometheus answered bad_data: invalid parameter "query": 1:8: parse error: unexpected end of input'),
        (TOO_MANY, "Prometheus answered bad_data: exceeded maximum resolution of 11,000 points per timeseries"),
        ("<html>502 Bad Gateway</html>", "the answer is not Prometheus's JSON"),
        ('["not", "an", "object"]', "the answer is not Prometheus's JSON object"),
        (
            {"status": "success", "data": {"resultType": "vector", "result": []}},
            "Prometheus's answer is not a range query's matrix (resultType 'vector')",
        ),
    ],
)
def test_errors_are_one_line(body, line):
    with pytest.raises(P.PrometheusError) as e:
        P.parse(body, NAMES)
    assert str(e.value).startswith(line)


def test_warnings_do_not_hide_the_data():
    body = dict(RAY_GPU, warnings=["PromQL info: metric might not be a counter"])
    assert list(P.parse(body, NAMES)) == ["gpu-0", "10.0.0.9"]


def test_the_first_expression_with_data_wins():
    answers = dict(cpu=[MATRIX], memory=[ERROR], gpu=[EMPTY, RAY_GPU], gpu_memory=[EMPTY, EMPTY])
    out, problems = P.utilisation(answers, NAMES)
    assert sorted(out) == ["cpu", "gpu"]
    assert out["gpu"]["gpu-0"][0] == (1700000000.0, 87.5)
    assert problems == [
        'memory: Prometheus answered bad_data: invalid parameter "query": 1:8: parse error: unexpected end of input'
    ]
    assert P.utilisation({}, NAMES) == ({}, [])


def test_the_dcgm_queries_name_what_a_real_exporter_serves():
    """The DCGM series the GPU charts ask for are in a real dcgm-exporter answer (fixtures/gpu/SOURCES.md), which the
    sandbox's stand-in exporter serves to a real Prometheus (test_sandbox_ops)."""
    import os
    import re

    path = os.path.join(
        os.path.dirname(os.path.abspath(__file__)),
        "fixtures",
        "gpu",
        "dcgm_exporter_metrics_t4_drv460_datadog_EXCERPT.txt",
    )
    with open(path) as f:
        served = set(re.findall(r"^(DCGM_FI_\w+)\{", f.read(), re.M))
    asked = set(re.findall(r"\bDCGM_FI_\w+", " ".join(P.GPU_DCGM.split() + P.GPU_MEMORY_DCGM.split())))
    assert asked == {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE"} and asked <= served
