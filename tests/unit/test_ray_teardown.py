"""rlinfra.verl.systemd_units and rlinfra.verl.ray_config_dir (module_utils/ray/teardown.py): what a teardown takes off a
node besides the other modules' own - units stopped, disabled, removed and forgotten; the collection's files of Ray's
configuration directory, the directory only once nothing else is in it. Against a fake systemctl on real trees."""

from __future__ import annotations

import os

import pytest

from ansible_collections.rlinfra.verl.plugins.module_utils.ray import teardown
from ansible_collections.rlinfra.verl.plugins.modules import ray_config_dir, systemd_units

FAKE_SYSTEMCTL = """#!/bin/sh
echo "$*" >> "$FAKE_SYSTEMD/calls"
case "$1" in
  is-active) if [ -e "$FAKE_SYSTEMD/active-$2" ]; then echo active; else echo inactive; exit 3; fi ;;
  is-enabled) if [ -e "$FAKE_SYSTEMD/enabled-$2" ]; then echo enabled; else echo disabled; exit 1; fi ;;
  stop) if [ -e "$FAKE_SYSTEMD/stuck-$2" ]; then echo "Job for $2 failed" >&2; exit 1; fi; rm -f "$FAKE_SYSTEMD/active-$2" ;;
  disable) rm -f "$FAKE_SYSTEMD/enabled-$2" ;;
esac
exit 0
"""


@pytest.fixture
def systemd(tmp_path, monkeypatch):
    state, bin_dir, units = tmp_path / "systemd", tmp_path / "bin", tmp_path / "units"
    for d in (state, bin_dir, units):
        d.mkdir()
    (bin_dir / "systemctl").write_text(FAKE_SYSTEMCTL)
    (bin_dir / "systemctl").chmod(0o755)
    monkeypatch.setenv("PATH", "%s:%s" % (bin_dir, os.environ["PATH"]))
    monkeypatch.setenv("FAKE_SYSTEMD", str(state))

    class Systemd:
        dir = units

        @staticmethod
        def unit(name, active=False, enabled=False):
            (units / name).write_text("[Unit]\n")
            if active:
                (state / ("active-" + name)).write_text("")
            if enabled:
                (state / ("enabled-" + name)).write_text("")

        @staticmethod
        def stuck(name):
            (state / ("stuck-" + name)).write_text("")

        @staticmethod
        def calls():
            path = state / "calls"
            return path.read_text().splitlines() if path.exists() else []

    return Systemd


def test_units_go_in_order_then_one_reload_and_their_failed_state_is_cleared(systemd, module_runner):
    systemd.unit("rlinfra-run-b.service", active=True, enabled=True)
    systemd.unit("rlinfra-run-a.service", enabled=True)
    systemd.unit("ray-head.service", active=True)
    out = module_runner(systemd_units.main, dict(names=["rlinfra-run-*.service"], unit_dir=str(systemd.dir)))
    assert out["changed"] and out["removed"] == ["rlinfra-run-a.service", "rlinfra-run-b.service"]
    assert out["stopped"] == ["rlinfra-run-b.service"]
    assert out["disabled"] == ["rlinfra-run-a.service", "rlinfra-run-b.service"]
    assert sorted(os.listdir(systemd.dir)) == ["ray-head.service"]
    assert systemd.calls() == [
        "is-active rlinfra-run-a.service",
        "is-enabled rlinfra-run-a.service",
        "disable rlinfra-run-a.service",
        "is-active rlinfra-run-b.service",
        "stop rlinfra-run-b.service",
        "is-enabled rlinfra-run-b.service",
        "disable rlinfra-run-b.service",
        "daemon-reload",
        "reset-failed rlinfra-run-a.service",
        "reset-failed rlinfra-run-b.service",
    ]


def test_no_unit_is_no_change_and_no_systemctl_call(systemd, module_runner):
    out = module_runner(systemd_units.main, dict(names=["ray-worker.service"], unit_dir=str(systemd.dir)))
    assert not out["changed"] and out["removed"] == [] and systemd.calls() == []
    gone = module_runner(systemd_units.main, dict(names=["ray-worker.service"], unit_dir=str(systemd.dir / "none")))
    assert not gone["changed"] and gone["removed"] == []


def test_check_mode_says_what_would_go_and_changes_nothing(systemd, module_runner):
    systemd.unit("ray-worker.service", active=True, enabled=True)
    out = module_runner(
        systemd_units.main, dict(names=["ray-worker.service"], unit_dir=str(systemd.dir)), check_mode=True
    )
    assert out["changed"] and out["removed"] == out["stopped"] == out["disabled"] == ["ray-worker.service"]
    assert os.listdir(systemd.dir) == ["ray-worker.service"]
    assert systemd.calls() == ["is-active ray-worker.service", "is-enabled ray-worker.service"]


def test_a_unit_that_will_not_stop_is_one_line_and_stays(systemd, module_runner):
    systemd.unit("ray-head.service", active=True, enabled=True)
    systemd.stuck("ray-head.service")
    out = module_runner(systemd_units.main, dict(names=["ray-head.service"], unit_dir=str(systemd.dir)))
    assert out["failed"] and out["msg"] == "Unable to stop service ray-head.service: Job for ray-head.service failed"
    assert os.listdir(systemd.dir) == ["ray-head.service"]


def test_matching_units_keeps_the_order_of_the_names_each_once(tmp_path):
    for name in ("b.service", "a.service", "a.timer"):
        (tmp_path / name).write_text("")
    assert teardown.matching_units(["b.service", "*.service", "c.service"], str(tmp_path)) == ["b.service", "a.service"]


@pytest.mark.parametrize("name", ["", "../x.service", "a b.service", "ray-head", "x.service\nExecStart=/bin/sh"])
def test_a_bad_unit_name_is_refused(systemd, module_runner, name):
    out = module_runner(systemd_units.main, dict(names=[name], unit_dir=str(systemd.dir)))
    assert out["failed"] and "names" in out["msg"] and systemd.calls() == []


def _config(tmp_path, others=()):
    conf = tmp_path / "ray"
    (conf / "registry").mkdir(parents=True)
    (conf / "registry" / "auth.json").write_text("{}")
    for name in ("auth_token", "ray.env", "ray-secrets.env", "rlinfra-state.json", "rlinfra-image.json", *others):
        (conf / name).write_text("x")
    fact = tmp_path / "facts.d" / "rlinfra_ray.fact"
    fact.parent.mkdir()
    fact.write_text("{}")
    return conf, fact


def test_the_configuration_directory_goes_with_the_fact_when_it_holds_only_ours(tmp_path, module_runner):
    conf, fact = _config(tmp_path)
    args = dict(path=str(conf), files=[str(fact)])
    planned = module_runner(ray_config_dir.main, args, check_mode=True)
    assert planned["changed"] and planned["kept"] == [] and conf.is_dir() and fact.exists()
    out = module_runner(ray_config_dir.main, args)
    assert out["changed"] and out["kept"] == [] and out["removed"][-1] == str(conf)
    assert not conf.exists() and not fact.exists()
    again = module_runner(ray_config_dir.main, args)
    assert not again["changed"] and again["removed"] == again["kept"] == []


def test_anything_else_keeps_the_directory_and_is_named(tmp_path, module_runner):
    conf, fact = _config(tmp_path, others=("tls.pem", ".hidden"))
    out = module_runner(ray_config_dir.main, dict(path=str(conf), files=[str(fact)]))
    assert out["changed"] and out["kept"] == [str(conf / ".hidden"), str(conf / "tls.pem")]
    assert sorted(os.listdir(conf)) == [".hidden", "tls.pem"] and not fact.exists()
    again = module_runner(ray_config_dir.main, dict(path=str(conf), files=[str(fact)]))
    assert not again["changed"] and again["kept"] == out["kept"]


def test_ours_is_the_token_the_env_files_the_registry_and_the_records():
    assert [
        n
        for n in ("auth_token", "ray.env", "ray-secrets.env", "registry", "rlinfra-x", "metrics", "ray.env.bak")
        if teardown.OURS.match(n)
    ] == ["auth_token", "ray.env", "ray-secrets.env", "registry", "rlinfra-x"]
