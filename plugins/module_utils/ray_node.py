# -*- coding: utf-8 -*-
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""What ``rlinfra.verl.ray_node`` decides and does on a node, as small functions tested in tests/unit:
counting GPUs, writing a file only when its content, mode or owner differ, closing Ray's older session logs,
the systemd calls, waiting for the node. Standard library only (it runs on the nodes)."""

from __future__ import annotations

import json
import os
import re
import socket
import time

from ansible_collections.rlinfra.verl.plugins.module_utils.files import write_atomic

NUM_GPUS_PLACEHOLDER = "@NUM_GPUS@"
_NVIDIA = re.compile(r"^nvidia[0-9]+$")


def count_gpus(dev="/dev"):
    """NVIDIA GPUs of this node: the /dev/nvidiaN device nodes."""
    try:
        return sum(1 for name in os.listdir(dev) if _NVIDIA.match(name))
    except OSError:
        return 0


def fact_text(fact):
    """The local fact file as Ansible's to_nice_json writes it."""
    return json.dumps(fact, indent=4, sort_keys=True, separators=(",", ": ")) + "\n"


def put(path, text, mode, uid=None, check_mode=False):
    """Write ``text`` whole (files.write_atomic) unless ``path`` holds it with ``mode`` (and owner ``uid``);
    True when it (would have) changed. A secret gets its mode before its first byte, its owner right after."""
    try:
        with open(path) as handle:
            same = handle.read() == text
        st = os.stat(path)
        same = same and (st.st_mode & 0o7777) == mode and (uid is None or st.st_uid == uid)
    except OSError:
        same = False
    if same:
        return False
    if not check_mode:
        write_atomic(path, text, mode)
        if uid is not None and os.stat(path).st_uid != uid:
            os.chown(path, uid, -1)
    return True


def ensure_dir(path, mode, uid=None, check_mode=False, keep_mode=False):
    """Create ``path`` with ``mode`` (and owner) when missing; fix the mode of an existing one unless ``keep_mode``.
    True when it (would have) changed."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if not check_mode:
            os.makedirs(path, mode)
            os.chmod(path, mode)
            if uid is not None:
                os.chown(path, uid, -1)
        return True
    if keep_mode or (st.st_mode & 0o7777) == mode:
        return False
    if not check_mode:
        os.chmod(path, mode)
    return True


def open_logs(temp_dir):
    """Files under a ``logs`` directory of ``temp_dir`` (same filesystem) that others may read, write or run."""
    found = []
    try:
        device = os.stat(temp_dir).st_dev
    except OSError:
        return found
    for root, dirs, files in os.walk(temp_dir):
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(root, d))
                   and os.lstat(os.path.join(root, d)).st_dev == device]
        if "logs" not in os.path.relpath(root, temp_dir).split(os.sep):
            continue
        for name in files:
            path = os.path.join(root, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if os.path.stat.S_ISREG(st.st_mode) and st.st_mode & 0o007:
                found.append(path)
    return found


def close_logs(paths):
    for path in paths:
        try:
            os.chmod(path, os.lstat(path).st_mode & 0o7770)
        except OSError:
            pass


class Systemd:
    """The few systemctl calls ray_node makes."""

    def __init__(self, module):
        self.module = module
        self.path = module.get_bin_path("systemctl", required=True)

    def run(self, *args):
        rc, out, err = self.module.run_command([self.path] + list(args))
        if rc != 0:
            self.module.fail_json(msg="systemctl %s failed: %s" % (" ".join(args), (err or out).strip().replace("\n", " | ")))
        return out

    def query(self, verb, unit):
        rc, out, dummy = self.module.run_command([self.path, verb, unit])
        return out.strip() if rc == 0 else ""

    def active(self, unit):
        return self.query("is-active", unit) == "active"

    def enabled(self, unit):
        return self.query("is-enabled", unit) in ("enabled", "enabled-runtime", "static", "alias")


def wait_for_port(address, timeout, sleep=time.sleep, clock=time.monotonic, connect=socket.create_connection):
    """Wait until ``host:port`` accepts a TCP connection; '' when it does, else why not (one line)."""
    host, dummy, port = address.rpartition(":")
    deadline = clock() + timeout
    delay, last = 0.1, "no attempt"
    while True:
        try:
            connect((host.strip("[]"), int(port)), timeout=2).close()
            return ""
        except (OSError, ValueError) as exc:
            last = str(exc)
        if clock() >= deadline:
            return "%s did not accept connections within %ss (%s)" % (address, timeout, last)
        sleep(delay)
        delay = min(delay * 1.6, 1.0)
