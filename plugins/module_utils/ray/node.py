# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""What ``rlinfra.verl.ray_node`` decides and does on a node, as small functions tested in tests/unit:
counting GPUs (NVIDIA and AMD) and the ROCm environment, writing a file only when its content, mode or owner differ, closing Ray's older session logs,
the systemd calls, waiting for the node. Standard library only (it runs on the nodes)."""

from __future__ import annotations

import json
import os
import re
import socket
import time
from typing import Any, Callable, Iterable, Mapping

from ansible_collections.rlinfra.verl.plugins.module_utils.common.files import (
    env_items,
    no_follow,
    refuse_link,
    write_atomic,
)
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.nft import read_text

NUM_GPUS_PLACEHOLDER = "@NUM_GPUS@"
_NVIDIA = re.compile(r"^nvidia[0-9]+$")
_RENDER = re.compile(r"^renderD[0-9]+$")
_SMI_CARD = re.compile(r"^card[0-9]+$")
AMD_PCI_VENDOR = "0x1002"
# On an AMD node Ray hands each worker its GPUs through HIP_VISIBLE_DEVICES alone, and verl (worker.py) refuses
# ROCR_VISIBLE_DEVICES beside it and asserts CUDA_VISIBLE_DEVICES equals it: set in Ray's own environment, either
# would hold every worker to the whole list while Ray narrows HIP_VISIBLE_DEVICES, and verl's workers would fail.
HIP_VISIBLE = "HIP_VISIBLE_DEVICES"
AMD_FORBIDDEN = ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")


def count_gpus(dev: str = "/dev") -> int:
    """NVIDIA GPUs of this node: the /dev/nvidiaN device nodes."""
    try:
        return sum(1 for name in os.listdir(dev) if _NVIDIA.match(name))
    except OSError:
        return 0


def _read(path: str) -> str | None:
    text = read_text(path)
    return None if text is None else text.strip()


def rocm_smi_count(output: str) -> int | None:
    """GPUs in ``rocm-smi --showid --json`` output ({"card0": {...}, ...}); None when it is not that shape."""
    try:
        cards = json.loads(output)
    except ValueError:
        return None
    if not isinstance(cards, dict):
        return None
    return sum(1 for name in cards if _SMI_CARD.match(name))


def kfd_gpu_count(sys_root: str = "/sys") -> int | None:
    """GPU nodes of the KFD topology (a non-zero gpu_id; CPU nodes have 0), as ROCm's own tools count them;
    None when the topology cannot be read."""
    nodes = os.path.join(sys_root, "class/kfd/kfd/topology/nodes")
    try:
        names = os.listdir(nodes)
    except OSError:
        return None
    ids = [_read(os.path.join(nodes, name, "gpu_id")) for name in names]
    if any(value is None for value in ids):
        return None
    return sum(1 for value in ids if value not in ("", "0"))


def render_count(dev: str = "/dev", sys_root: str = "/sys") -> int:
    """Render nodes under /dev/dri, leaving out those sysfs says belong to another vendor than AMD
    (a server's BMC display); a node whose vendor cannot be read counts."""
    try:
        names = [name for name in os.listdir(os.path.join(dev, "dri")) if _RENDER.match(name)]
    except OSError:
        return 0
    return sum(
        1
        for name in names
        if _read(os.path.join(sys_root, "class/drm", name, "device/vendor")) in (None, AMD_PCI_VENDOR)
    )


def amd_gpus(dev: str = "/dev", sys_root: str = "/sys", rocm_smi: Callable[[], str | None] | None = None) -> int | None:
    """AMD GPUs of this node, or None when it has no /dev/kfd (ROCm's compute device): ``rocm_smi()``'s count
    when that is given and answers (it returns the tool's JSON output, or None), else the KFD topology's GPU
    nodes, else the render nodes."""
    if not os.path.exists(os.path.join(dev, "kfd")):
        return None
    output = rocm_smi() if rocm_smi else None
    counted = rocm_smi_count(output) if output else None
    if counted is None:
        counted = kfd_gpu_count(sys_root)
    if counted is None:
        counted = render_count(dev, sys_root)
    return counted


def detect_gpus(
    dev: str = "/dev", sys_root: str = "/sys", rocm_smi: Callable[[], str | None] | None = None
) -> tuple[str, int]:
    """(vendor, count) of this node's GPUs: ("nvidia", n) when it has /dev/nvidiaN, else ("amd", n) when it has
    /dev/kfd, else ("", 0)."""
    nvidia = count_gpus(dev)
    if nvidia:
        return "nvidia", nvidia
    amd = amd_gpus(dev, sys_root, rocm_smi)
    if amd is not None:
        return "amd", amd
    return "", 0


def env_names(text: str) -> dict[str, str]:
    """{name: value} of an environment file as templates/ray.env.j2 writes it."""
    return dict(env_items(text))


def amd_env(env_text: str, secret_text: str, presets: Mapping[str, Any] | None, gpus: int | str) -> tuple[str, str]:
    """What an AMD node's public environment file gains: each preset (ray_rocm_env) that ray_env does not set,
    and HIP_VISIBLE_DEVICES naming the GPUs Ray is given (0..gpus-1) unless ray_env names them. Returns
    (lines to append, error); the error is one line when ray_env sets what breaks verl's workers there."""
    given = env_names(env_text)
    given.update(env_names(secret_text))
    bad = [name for name in AMD_FORBIDDEN if name in given]
    if bad:
        return "", (
            "ray_env sets %s on this AMD node: Ray gives each worker its GPUs through HIP_VISIBLE_DEVICES and "
            "verl refuses %s beside it; name the GPUs with HIP_VISIBLE_DEVICES instead (or leave it out: "
            "the node's GPUs are used)" % (" and ".join(bad), " and ".join(bad))
        )
    add = dict((name, str(value)) for name, value in (presets or {}).items() if name not in given)
    if HIP_VISIBLE not in given and int(gpus) > 0:
        add[HIP_VISIBLE] = ",".join(str(i) for i in range(int(gpus)))
    if not add:
        return "", ""
    lines = ["# AMD GPUs on this node: ROCm settings (ray_rocm_env) and the GPUs Ray hands out"]
    lines += ["%s=%s" % (name, json.dumps(add[name])) for name in sorted(add)]
    return "\n".join(lines) + "\n", ""


def fact_text(fact: Any) -> str:
    """The local fact file as Ansible's to_nice_json writes it."""
    return json.dumps(fact, indent=4, sort_keys=True, separators=(",", ": ")) + "\n"


SECRET_BEFORE = "(a secret file: its content is not shown)\n"
SECRET_AFTER = "(a secret file: its new content is not shown)\n"


def file_diff(path: str, before: str | None, after: str, old_mode: int | None, mode: int) -> dict[str, str]:
    """One entry of a module's ``diff`` (what ``--diff`` prints) for ``path``; a file only its owner may read (mode
    0600 and the like: a token, the secrets' environment) shows that it changes, never its content."""
    secret = not mode & 0o077
    header = "%s (mode %04o)" % (path, mode) if old_mode != mode else path
    return dict(
        before_header=path if before is not None else "%s (absent)" % path,
        after_header=header,
        before="" if before is None else (SECRET_BEFORE if secret else before),
        after=(SECRET_AFTER if before != after else SECRET_BEFORE) if secret else after,
    )


def put(
    path: str,
    text: str,
    mode: int,
    uid: int | None = None,
    check_mode: bool = False,
    diff: list[dict[str, str]] | None = None,
) -> bool:
    """Write ``text`` whole (files.write_atomic) unless ``path`` holds it with ``mode`` (and owner ``uid``);
    True when it (would have) changed. A secret gets its mode before its first byte, its owner right after.
    ``diff``: a list that gets the change as :func:`file_diff` shows it."""
    before = old_mode = None
    try:
        # Never through a link (--diff would show what it points at): a link is replaced by write_atomic.
        with open(path, opener=no_follow) as handle:
            before = handle.read()
        st = os.stat(path)
        old_mode = st.st_mode & 0o7777
        same = before == text and old_mode == mode and (uid is None or st.st_uid == uid)
    except OSError:
        same = False
    if same:
        return False
    if diff is not None:
        diff.append(file_diff(path, before, text, old_mode, mode))
    if not check_mode:
        write_atomic(path, text, mode)
        if uid is not None and os.stat(path).st_uid != uid:
            os.chown(path, uid, -1)
    return True


def ensure_dir(path: str, mode: int, uid: int | None = None, check_mode: bool = False, keep_mode: bool = False) -> bool:
    """Create ``path`` with ``mode`` (and owner) when missing; fix the mode of an existing one unless ``keep_mode``.
    True when it (would have) changed. Never a link (files.refuse_link: /etc/ray made a link to /etc would be chmodded).
    """
    refuse_link(path)
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


def open_logs(temp_dir: str) -> list[str]:
    """Files under a ``logs`` directory of ``temp_dir`` (same filesystem) that others may read, write or run."""
    found: list[str] = []
    try:
        device = os.stat(temp_dir).st_dev
    except OSError:
        return found
    for root, dirs, files in os.walk(temp_dir):
        dirs[:] = [
            d
            for d in dirs
            if not os.path.islink(os.path.join(root, d)) and os.lstat(os.path.join(root, d)).st_dev == device
        ]
        if "logs" not in os.path.relpath(root, temp_dir).split(os.sep):
            continue
        for name in files:
            path = os.path.join(root, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            # os.path.stat is the stat module os.path (posixpath) imports; typeshed does not declare it
            if os.path.stat.S_ISREG(st.st_mode) and st.st_mode & 0o007:  # type: ignore[attr-defined]
                found.append(path)
    return found


def close_logs(paths: Iterable[str]) -> None:
    for path in paths:
        try:
            os.chmod(path, os.lstat(path).st_mode & 0o7770)
        except OSError:
            pass


class Systemd:
    """The few systemctl calls ray_node makes."""

    def __init__(self, module: Any):
        self.module = module
        self.path = module.get_bin_path("systemctl", required=True)

    def run(self, *args: str) -> str:
        rc, out, err = self.module.run_command([self.path] + list(args))
        if rc != 0:
            self.module.fail_json(
                msg="systemctl %s failed: %s" % (" ".join(args), (err or out).strip().replace("\n", " | "))
            )
        return out

    def query(self, verb: str, unit: str) -> str:
        rc, out, dummy = self.module.run_command([self.path, verb, unit])
        return out.strip() if rc == 0 else ""

    def active(self, unit: str) -> bool:
        return self.query("is-active", unit) == "active"

    def enabled(self, unit: str) -> bool:
        return self.query("is-enabled", unit) in ("enabled", "enabled-runtime", "static", "alias")


def poll_until(
    check: Callable[[], tuple[bool, str]],
    deadline: float,
    first: float = 0.1,
    sleep: Callable[[float], Any] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> str:
    """Call ``check`` (``(done, what it saw)``) until it is done or ``clock()`` passes ``deadline``, the pauses growing
    from ``first`` to 1 s; '' when done, else what the last call saw."""
    delay = first
    while True:
        done, seen = check()
        if done:
            return ""
        if clock() >= deadline:
            return seen
        sleep(delay)
        delay = min(delay * 1.6, 1.0)


def wait_for_port(
    address: str,
    timeout: float,
    sleep: Callable[[float], Any] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    connect: Callable[..., Any] = socket.create_connection,
) -> str:
    """Wait until ``host:port`` accepts a TCP connection; '' when it does, else why not (one line)."""
    host, dummy, port = address.rpartition(":")

    def check() -> tuple[bool, str]:
        try:
            connect((host.strip("[]"), int(port)), timeout=2).close()
            return True, ""
        except (OSError, ValueError) as exc:
            return False, str(exc)

    last = poll_until(check, clock() + timeout, sleep=sleep, clock=clock)
    return "%s did not accept connections within %ss (%s)" % (address, timeout, last) if last else ""
