"""The venv holds the pinned set, uv, and a fingerprint that matches the frozen set."""

import hashlib

VENV = "/opt/rlinfra/venv"


def test_pinned_ray_installed(host):
    out = host.check_output(f"{VENV}/bin/python -c 'import ray; print(ray.__version__)'")
    assert out.strip() == "2.60.0"


def test_fingerprint_matches_frozen_set(host):
    frozen = host.check_output(f"{VENV}/bin/uv pip freeze --python {VENV}/bin/python").splitlines()
    want = hashlib.sha256("\n".join(sorted(x.strip() for x in frozen if x.strip())).encode()).hexdigest()
    first_line = host.file(f"{VENV}/rlinfra-fingerprint.txt").content_string.splitlines()[0]
    assert first_line == want


def test_requirements_file_lists_the_pins(host):
    assert "ray[default]==2.60.0" in host.file(f"{VENV}/rlinfra-requirements.txt").content_string
