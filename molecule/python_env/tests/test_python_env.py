"""The venv holds exactly the pinned set (a stray package removed, the tooling kept) and a fingerprint of the
interpreter and the frozen set."""

import hashlib
import json

VENV = "/opt/rlinfra/venv"


def _frozen(host):
    return [x.strip() for x in host.check_output(f"{VENV}/bin/uv pip freeze --python {VENV}/bin/python").splitlines()
            if x.strip()]


def test_pinned_set_installed(host):
    out = host.check_output(f"{VENV}/bin/python -c 'import ray, mdurl; print(ray.__version__)'")
    assert out.strip() == "2.60.0"


def test_stray_package_removed_tooling_kept(host):
    names = {line.split("==")[0].lower() for line in _frozen(host)}
    assert "iniconfig" not in names  # installed by prepare.yml, in no list
    assert {"uv", "pip", "aiohttp"} <= names  # the venv's tooling; a dependency of ray[default]'s extra


def test_fingerprint_covers_interpreter_and_frozen_set(host):
    version = host.check_output(f"{VENV}/bin/python -VV").splitlines()[0].strip()
    frozen = sorted(_frozen(host))
    want = hashlib.sha256(("python " + version + "\n" + "\n".join(frozen)).encode()).hexdigest()
    lines = host.file(f"{VENV}/rlinfra-fingerprint.txt").content_string.splitlines()
    assert lines[0] == want and lines[1] == "# " + version and lines[2:] == frozen
    state = json.loads(host.file(f"{VENV}/rlinfra-state.json").content_string)
    assert state["fingerprint"] == want and state["python"] == version and len(state["inputs"]) == 64


def test_requirements_file_lists_the_pins(host):
    assert host.file(f"{VENV}/rlinfra-requirements.txt").content_string == "ray[default]==2.60.0\nmdurl==0.1.2\n"
