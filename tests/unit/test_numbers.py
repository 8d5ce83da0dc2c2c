"""Numbers read from loose values (module_utils/common/numbers.py): each helper's contract, and that the callers
that moved onto them read what they read before."""

from __future__ import annotations

import math

import pytest

from ansible_collections.rlinfra.verl.plugins.filter.pick_attempt import pick_attempt
from ansible_collections.rlinfra.verl.plugins.module_utils.common import cli, numbers, settings
from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic import _ssh as hyperbolic_ssh
from ansible_collections.rlinfra.verl.plugins.module_utils.ray import firewall
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.cluster_shape import cluster_shape
from ansible_collections.rlinfra.verl.plugins.module_utils.verl import preflight as verl_preflight
from ansible_collections.rlinfra.verl.plugins.module_utils.verl.experiment import SHAPE_KEYS

NAN = float("nan")

# value:               whole_number, int_or_none, loose_count, float_or_none
TABLE = [
    (8, 8, 8, 8, 8.0),
    ("8", 8, 8, 8, 8.0),
    (" 8 ", 8, 8, 8, 8.0),
    ("8\n", 8, 8, 8, 8.0),
    (0, 0, 0, 0, 0.0),
    (-3, -3, -3, None, -3.0),
    ("-3", None, -3, None, -3.0),
    ("+3", None, 3, 3, 3.0),
    (8.0, None, None, 8, 8.0),
    (8.7, None, None, 8, 8.7),
    ("8.0", None, None, 8, 8.0),
    ("8.5", None, None, 8, 8.5),
    ("1e3", None, None, 1000, 1000.0),
    ("1_000", None, 1000, 1000, 1000.0),
    (True, None, None, None, 1.0),
    (False, None, None, None, 0.0),
    (None, None, None, None, None),
    ("", None, None, None, None),
    ("  ", None, None, None, None),
    ("x", None, None, None, None),
    ("\u0663", None, 3, 3, 3.0),  # ARABIC-INDIC DIGIT THREE: int() reads it; a typed setting must not
    ("\u00b2", None, None, None, None),  # SUPERSCRIPT TWO: isdigit() but no int()
    ([8], None, None, None, None),
    ({}, None, None, None, None),
    (float("inf"), None, None, None, float("inf")),
    ("-inf", None, None, None, float("-inf")),
]


@pytest.mark.parametrize("value, whole, as_int, count, as_float", TABLE, ids=[repr(r[0]) for r in TABLE])
def test_each_helper_reads_what_it_says(value, whole, as_int, count, as_float):
    assert numbers.whole_number(value) == whole and type(numbers.whole_number(value)) is type(whole)
    assert numbers.int_or_none(value) == as_int
    assert numbers.loose_count(value) == count
    assert numbers.float_or_none(value) == as_float


def test_nan():
    assert numbers.whole_number(NAN) is None and numbers.int_or_none(NAN) is None and numbers.loose_count(NAN) is None
    assert math.isnan(numbers.float_or_none(NAN)) and math.isnan(numbers.float_or_none("nan"))
    assert numbers.loose_count("1e400") is None  # inf: too large for an int


def test_tidy():
    assert numbers.tidy(8.0) == 8 and type(numbers.tidy(8.0)) is int
    assert (
        numbers.tidy(8.5) == 8.5
        and numbers.tidy(8) == 8
        and numbers.tidy("8.0") == "8.0"
        and numbers.tidy(None) is None
    )
    assert math.isinf(numbers.tidy(float("inf")))


# --- the callers ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, line",
    [
        ("abc", "ray_gcs_port must be a TCP port from 1 to 65535, got 'abc'"),
        (" 80 ", None),
        ("6379", None),
        (6379, None),
        (True, "ray_gcs_port must be a TCP port from 1 to 65535, got True"),
        (6379.0, "ray_gcs_port must be a TCP port from 1 to 65535, got 6379.0"),
        ("+80", "ray_gcs_port must be a TCP port from 1 to 65535, got '+80'"),
        ("\u0663", "ray_gcs_port must be a TCP port from 1 to 65535, got '\u0663'"),
    ],
)
def test_settings_read_whole_numbers_strictly(value, line):
    assert settings.check({"ray_gcs_port": value}) == ([line] if line else [])


def test_settings_range_messages_unchanged():
    line = "ray_start_timeout must be a whole number of seconds from 1 to 86400, got "
    assert settings.check({"ray_start_timeout": -1}) == [line + "-1"]
    assert settings.check({"ray_start_timeout": "-1"}) == [line + "'-1'"]
    # 10**30 seconds overflows the C time types a node's tools take it into: every whole number has a ceiling
    assert settings.check({"ray_start_timeout": 10**30}) == [line + "1000000000000000000000000000000"]
    assert settings.check({"ray_num_gpus": " 8 "}) == []


@pytest.mark.parametrize(
    "value, want",
    [
        ("3", (3, None)),
        (" 3 ", (3, None)),
        (3, (3, None)),
        ("0", (None, "attempt must be a whole number from 1 to 1000000, got '0'")),
        (-2, (None, "attempt must be a whole number from 1 to 1000000, got -2")),
        (2.0, (None, "attempt must be a whole number from 1 to 1000000, got 2.0")),
        (True, (None, "attempt must be a whole number from 1 to 1000000, got True")),
        ("\u00b2", (None, "attempt must be a whole number from 1 to 1000000, got '\u00b2'")),
    ],
)
def test_cli_counts(value, want):
    assert cli._value("attempt", value) == want


def test_pick_attempt_numbers():
    jobs = [dict(submission_id="r", status="FAILED"), dict(submission_id="r-a2", status="RUNNING")]
    assert pick_attempt(jobs, "r", " 2 ")["submission_id"] == "r-a2"
    assert pick_attempt(jobs, "r", 1)["submission_id"] == "r"
    assert pick_attempt(jobs, "r", None)["attempt"] == 2
    for bad in (True, 2.0, "-1", "0", "\u00b2"):  # '\u00b2' once raised a ValueError out of the filter
        assert pick_attempt(jobs, "r", bad)["error"] == (
            "attempt must be a whole number from 1 to 1000000, got %r (-e attempt=K, or leave it out for the newest)"
            % (bad,)
        )


def test_firewall_ports():
    assert firewall.parse_port("gcs", 6379) == (6379, 6379)
    assert firewall.parse_port("gcs", " 6379 ") == (6379, 6379)
    assert firewall.parse_port("workers", "10002-19999") == (10002, 19999)
    assert firewall.parse_port("workers", [10002, 19999]) == (10002, 19999)
    for bad in (True, 6379.0, "\u00b2", "x", "+1"):
        with pytest.raises(firewall.FirewallError, match="^port gcs must be a number or a range low-high"):
            firewall.parse_port("gcs", bad)
    with pytest.raises(firewall.FirewallError, match="^port gcs must lie in 1-65535"):
        firewall.parse_port("gcs", -1)


def test_hyperbolic_ports_and_counts():
    assert (
        hyperbolic_ssh._port(22.0) == 22 and hyperbolic_ssh._port(" 2222 ") == 2222 and hyperbolic_ssh._port("") is None
    )
    for bad in (True, 22.5, "22a", "\u0663"):
        with pytest.raises(ValueError, match="is not a number"):
            hyperbolic_ssh._port(bad)
    with pytest.raises(ValueError, match="out of range"):
        hyperbolic_ssh._port(0)


def test_cluster_shape_reads_resources_as_floats():
    nodes = [{"resources": {"GPU": "8"}}, {"resources": {"GPU": 4.0}}, {"resources": {"GPU": "x"}}, {"resources": {}}]
    assert cluster_shape(nodes) == (2, 4)
    assert cluster_shape([{"resources": {"CPU": 8}}] * 3) == (3, 0)


def test_preflight_names_the_shape_keys_of_the_conventions():
    nodes = [{"resources": {"GPU": 8.0, "CPU": 64.0}}]
    verl = verl_preflight.check_resources("verl", "verl", 2, 8, nodes)
    assert verl["status"] == "failed" and "%s=2 x %s=8" % SHAPE_KEYS["verl"] in verl["message"]
    nemo = verl_preflight.check_resources("nemo_rl", "nemo_rl", 2, 8, nodes)
    assert "%s=2 x %s=8" % SHAPE_KEYS["nemo_rl"] in nemo["message"]
    # conventions: none - the framework's own keys name the shape
    assert "%s=2 x %s=8" % SHAPE_KEYS["verl"] in verl_preflight.check_resources("verl", "none", 2, 8, nodes)["message"]
    assert "GPUs per node [8]" in verl["message"]  # 8.0 shown as 8
