"""Helpers for tests that drive the Ansible CLIs against the fake Hyperbolic API."""

from __future__ import annotations

import functools
import ipaddress
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HYPERBOLIC_TEST_KEY = "sk-hyperbolic-TEST-6f1d0c9a7b2e4d3f"


def venv_bin(name):
    """An Ansible CLI next to the running interpreter (wherever its venv lives), else from PATH."""
    path = Path(sys.executable).parent / name
    return str(path) if path.exists() else name


_LOAD_FAILED = re.compile(r"^\[WARNING\]: Failed to parse inventory with '[^']+' plugin: (.*)$", re.M)


def load_failures(stderr, prefix="rlinfra.verl."):
    """The distinct lines the collection's inventory plugins failed a source with, as Ansible warns them (once per
    plugin that tried the file: ours, then 'auto')."""
    return sorted({line for line in _LOAD_FAILED.findall(stderr) if line.startswith(prefix)})


def ansible_env(tmp_path, **extra):
    """Environment for Ansible CLIs run from the repository root (its ansible.cfg applies).

    ``extra`` values of None remove a variable.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HYPERBOLIC_", "ANSIBLE_"))}
    env.update(
        {
            "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
            "ANSIBLE_LOCAL_TEMP": str(Path(tmp_path) / "ansible-tmp"),
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_FORCE_COLOR": "0",
            "HYPERBOLIC_API_KEY": HYPERBOLIC_TEST_KEY,
        }
    )
    for key, value in extra.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = str(value)
    return env


def unwrap(value):
    """Turn the ``{"__ansible_unsafe": "..."}`` markers of ``ansible-inventory --list`` into text."""
    if isinstance(value, dict):
        if set(value) == {"__ansible_unsafe"}:
            return value["__ansible_unsafe"]
        return {k: unwrap(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unwrap(v) for v in value]
    return value


class Result:
    def __init__(self, proc, elapsed):
        self.rc = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        self.elapsed = elapsed

    @property
    def data(self):
        """The ``--list`` JSON (after any -v banner lines), unsafe markers unwrapped."""
        text = self.stdout
        if not text.startswith("{"):
            start = text.find("\n{\n")
            text = text[start + 1 :] if start >= 0 else text
        return unwrap(json.loads(text))


def run(argv, env, timeout=180):
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    return Result(proc, time.monotonic() - start)


@functools.lru_cache(maxsize=None)
def own_address():
    """An IPv4 address of this machine other than loopback, or None when it has none (a container with ``lo`` alone).

    The SSH host the fake API gives rentals a test connects to: the collection refuses loopback as a rental's host
    (SSH there reaches the controller, never a rented machine), so the tests' "machines" are this one, reached by
    another of its own addresses. The source address of the default route first, then any local one
    (/proc/net/fib_trie); each must take a listener (bind) to count."""
    candidates = []
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("198.51.100.1", 9))  # no packet is sent: only the route is looked up
            candidates.append(probe.getsockname()[0])
    except OSError:
        pass
    try:
        with open("/proc/net/fib_trie") as f:
            candidates += re.findall(r"\|-- (\d+\.\d+\.\d+\.\d+)\n\s+/32 host LOCAL", f.read())
    except OSError:
        pass
    for address in dict.fromkeys(candidates):
        if ipaddress.ip_address(address).is_loopback:
            continue
        try:
            with socket.socket() as s:
                s.bind((address, 0))
        except OSError:
            continue
        return address
    return None
