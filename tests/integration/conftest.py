"""Fixtures for the integration tests: the fake Hyperbolic API and an ansible-inventory runner."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
for _p in (str(ROOT / "collections"), str(ROOT)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from tests.fake_hyperbolic.server import FakeHyperbolic  # noqa: E402
from tests.fake_hyperbolic.testing import HYPERBOLIC_TEST_KEY, ansible_env, run, venv_bin  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line("markers", "sandbox: the test runs on the shared sandbox cluster (set from its fixtures)")


def pytest_collection_modifyitems(config, items):  # pylint: disable=unused-argument
    # The split of scripts/test.sh's two integration stages: the tests on the sandbox (-m sandbox) run alone in the
    # critical lane; the rest (loopback Ray, the fake API, FSDP shards: -m "not sandbox") beside it. It is read off
    # the fixtures each test uses, so a new test lands in one of the two, never in neither.
    for item in items:
        if "sandbox" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.sandbox)
    # The AWX test runs in the execution environment, which scripts/test.sh's side lane builds meanwhile: last.
    items.sort(key=lambda item: "ee_image" in getattr(item, "fixturenames", ()))


@pytest.fixture
def fake_hyperbolic():
    """A fresh fake Hyperbolic API on 127.0.0.1 (random port) for one test."""
    with FakeHyperbolic(api_key=HYPERBOLIC_TEST_KEY) as fake:
        yield fake


@pytest.fixture
def inventory_file(tmp_path, fake_hyperbolic):
    """Returns a writer of ``<tmp>/x.hyperbolic.yml`` files pointing at the fake API."""

    def write(options=None, name="x.hyperbolic.yml", api_url=None):
        import yaml

        config = {
            "plugin": "rlinfra.verl.hyperbolic",
            "api_url": api_url or fake_hyperbolic.url,
            "retries": 2,
            "retry_backoff": 0.05,
            "retry_max_wait": 2,
            "timeout": 5,
        }
        config.update(options or {})
        path = tmp_path / name
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path

    return write


@pytest.fixture
def ansible_inventory(tmp_path):
    """Run ``ansible-inventory -i PATH --list [args]`` from the repository root."""

    def invoke(path, *args, env=None, **env_extra):
        argv = [venv_bin("ansible-inventory"), "-i", str(path), "--list", *args]
        return run(argv, env or ansible_env(tmp_path, **env_extra))

    return invoke


# SANDBOX_STATE / SANDBOX_PREFIX (read by sandbox/sandbox.sh too) give a developer a second sandbox.
SANDBOX = Path(os.environ.get("SANDBOX_STATE") or ROOT / ".sandbox")
SANDBOX_INVENTORY = SANDBOX / "inventory.yml"
SANDBOX_STATE = SANDBOX / "state.json"


def sandbox_nodes():
    """The sandbox's nodes from its state.json: [{"name", "ip", "role", ...}], [] when it has none."""
    if not (SANDBOX_INVENTORY.is_file() and SANDBOX_STATE.is_file() and (SANDBOX / "id_ed25519").is_file()):
        return []
    return json.loads(SANDBOX_STATE.read_text()).get("nodes", [])


def _sandbox_is_up():
    names = [n["name"] for n in sandbox_nodes()]
    if not names:
        return False
    proc = subprocess.run(
        ["docker", "inspect", "-f", "{{.State.Running}}", *names], capture_output=True, text=True, check=False
    )
    return proc.returncode == 0 and proc.stdout.split() == ["true"] * len(names)


@pytest.fixture(scope="session")
def sandbox():
    """The sandbox's inventory; `sandbox/sandbox.sh up` (idempotent) when it is not running."""
    import yaml

    if not _sandbox_is_up():
        proc = subprocess.run(
            [str(ROOT / "sandbox" / "sandbox.sh"), "up"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=1800,
            check=False,
        )
        assert proc.returncode == 0, "sandbox/sandbox.sh up failed:\n%s\n%s" % (
            proc.stdout[-3000:],
            proc.stderr[-3000:],
        )
        assert _sandbox_is_up(), "the sandbox is still not up after sandbox/sandbox.sh up"
    return yaml.safe_load(SANDBOX_INVENTORY.read_text())


@pytest.fixture(autouse=True)
def _no_unfit_verdict_left(request):
    """Between sandbox tests: a fitness verdict that found the cluster unfit (a test that failed before putting its
    fault back) would refuse every later submit; it is removed, with a line saying so, and the test that left it
    still fails on its own assertions."""
    yield
    if "sandbox" not in request.fixturenames:
        return
    heads = [n["name"] for n in sandbox_nodes() if n.get("role") == "head"]
    for head in heads:
        proc = subprocess.run(
            ["docker", "exec", head, "cat", "/etc/ray/rlinfra-fitness.json"],
            capture_output=True,
            text=True,
            check=False,
        )
        try:
            fit = json.loads(proc.stdout).get("fit", True) if proc.returncode == 0 else True
        except ValueError:
            fit = False
        if fit is not True:
            subprocess.run(["docker", "exec", head, "rm", "-f", "/etc/ray/rlinfra-fitness.json"], check=False)
            print("\n[reset] %s left an unfit fitness verdict on %s: removed" % (request.node.name, head))


def sandbox_playbook(name, *extra, env=None):
    """``ansible-playbook NAME -e EXTRA...`` on the sandbox as a user runs it (no ANSIBLE_* from the test's
    environment; ``env`` adds or replaces variables, e.g. a token the run reads from the controller's environment).
    The result has ``output`` (stdout + stderr)."""
    args = [venv_bin("ansible-playbook"), "-i", str(SANDBOX_INVENTORY), name]
    for item in extra:
        args += [item] if item.startswith("--") else ["-e", item]  # a flag (--check) as it is, else extra vars
    full = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_") and k not in (env or {})}
    full.update(ANSIBLE_NOCOLOR="1", **(env or {}))
    proc = subprocess.run(args, cwd=ROOT, env=full, capture_output=True, text=True, timeout=1200)
    proc.output = proc.stdout + proc.stderr
    return proc


def report_of(exp, run=None):
    """The run report's page data (report.html's JSON) and its path, of the experiment's one run (or of ``run``)."""
    found = sorted(
        (ROOT / "artifacts" / exp).glob("%s/report.html" % ("rlinfra-%s-default-%s" % (exp, run) if run else "*"))
    )
    assert len(found) == 1, found
    text = found[0].read_text()
    data = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', text, re.S).group(1)
    return json.loads(data), found[0]
