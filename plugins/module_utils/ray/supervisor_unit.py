# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The run's supervisor as a systemd unit (module ``rlinfra.verl.ray_run_supervisor``): install and start it, read its
state, stop it. Kept apart from module_utils/ray/supervisor.py (the watch itself) so that the module's plain script
carries only this file (plugin_utils/node_script.py) and never the watch's imports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any, Callable, Mapping

RUNS_DIR = "/var/lib/rlinfra/runs"
BUNDLE_DIR = "/var/lib/rlinfra/supervisor"
UNIT_DIR = "/etc/systemd/system"
# systemd's words for a unit that is running or about to.
RUNNING = ("active", "activating", "reloading")


def unit_name(base: str) -> str:
    return "rlinfra-run-%s.service" % base


def run_dir(base: str, root: str = RUNS_DIR) -> str:
    return os.path.join(root, base)


def write_private(path: str, data: Any) -> None:
    """``data`` as JSON in ``path``, 0600, whole or not at all (a reader never sees half of it)."""
    tmp = "%s.%d.tmp" % (path, os.getpid())
    fd: int | None  # None once the file object owns it
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as handle:
            fd = None
            json.dump(data, handle, default=str)
            handle.flush()
            os.fsync(handle.fileno())
    finally:
        if fd is not None:
            os.close(fd)
    os.replace(tmp, path)


def load(path: str) -> dict[str, Any]:
    """The JSON in ``path``, {} when there is none; ValueError when it is not JSON."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        return {}
    return data if isinstance(data, dict) else {}


def _systemctl(*args: str) -> tuple[int, str, str]:
    try:
        proc = subprocess.run(["systemctl"] + list(args), capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return 1, "", str(e)
    return proc.returncode, proc.stdout.strip(), proc.stderr.strip()


# --- on the head, for the controller (module rlinfra.verl.ray_run_supervisor) ----------------------------------

UNIT = """[Unit]
Description=rlinfra.verl supervisor of run %(base)s
Wants=network-online.target
After=network-online.target
StartLimitIntervalSec=600
StartLimitBurst=5

[Service]
Type=simple
ExecStart=%(python)s %(bundle)s %(config)s
Restart=on-failure
RestartSec=10
UMask=0077

[Install]
WantedBy=multi-user.target
"""


def _write_if_changed(path: str, text: str, mode: int) -> bool:
    try:
        with open(path, encoding="utf-8") as handle:
            if handle.read() == text and (os.stat(path).st_mode & 0o777) == mode:
                return False
    except (FileNotFoundError, UnicodeDecodeError):
        pass
    tmp = "%s.%d.tmp" % (path, os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), mode)
    with os.fdopen(fd, "w") as handle:
        os.fchmod(handle.fileno(), mode)
        handle.write(text)
    os.replace(tmp, path)
    return True


def _private_dir(path: str) -> None:
    os.makedirs(path, mode=0o700, exist_ok=True)
    if os.path.islink(path):
        raise OSError("%s is a symbolic link; the supervisor's state is never written through one" % path)
    os.chmod(path, 0o700)


def booted(marker: str = "/run/systemd/system") -> bool:
    """Whether systemd manages this host (sd_booted(3)'s test)."""
    return os.path.isdir(marker)


def manage(
    p: Mapping[str, Any],
    module: Any,
    systemctl: Callable[..., tuple[int, str, str]] | None = None,
    root: str = RUNS_DIR,
    bundle_dir: str = BUNDLE_DIR,
    unit_dir: str = UNIT_DIR,
    systemd: bool | None = None,
) -> dict[str, Any]:
    """The module's work: ``started`` installs and starts the run's unit (or leaves a running one alone: the controller
    attaches), ``read`` gives the state and the lines said since ``since``, ``stopped`` stops the unit and keeps why.
    A head without systemd (a container without an init, a loopback test) gets ``no_systemd``, the line saying so."""
    systemctl = systemctl or _systemctl
    base = p["base"]
    unit = unit_name(base)
    directory = run_dir(base, root)
    if p["state"] == "started" and not (booted() if systemd is None else systemd):
        return dict(
            changed=False,
            unit=unit,
            active=False,
            found=False,
            state={},
            lines=[],
            said=0,
            report=[],
            no_systemd="the head is not run by systemd (no /run/systemd/system), so the run cannot have its "
            "supervisor there: this playbook watches it, and it recovers only while the playbook runs",
        )
    state = load(os.path.join(directory, "state.json")) if os.path.isdir(directory) else {}
    active = systemctl("is-active", unit)[1] in RUNNING
    if p["state"] == "read":
        if p.get("wait") and active and not news(state, p.get("since") or 0):
            state = await_news(
                os.path.join(directory, "state.json"),
                p.get("since") or 0,
                p["wait"],
                lambda: systemctl("is-active", unit)[1] in RUNNING,
            )
            active = systemctl("is-active", unit)[1] in RUNNING
        return view(state, active, p.get("since") or 0, unit)
    if p["state"] == "stopped":
        changed = active
        if not module.check_mode:
            if active:
                systemctl("stop", unit)
            systemctl("disable", unit)
            if state and not state.get("final"):
                state["final"] = dict(
                    reason="stopped",
                    ended_at=time.time(),
                    status=None,
                    line="the supervisor was stopped by stop.yml: no further recovery",
                    summary=[],
                )
                write_private(os.path.join(directory, "state.json"), state)
                changed = True
        return dict(view(state, False, 0, unit), changed=changed)
    # started
    if active or state.get("final"):  # one decider: a running supervisor is followed, never replaced
        return dict(view(state, active, 0, unit), changed=False, attached=bool(state))
    bundle = os.path.join(bundle_dir, "supervisor-%s.py" % p["bundle_id"])
    python = p.get("python") or sys.executable
    unit_text = UNIT % dict(base=base, python=python, bundle=bundle, config=os.path.join(directory, "config.json"))
    if module.check_mode:
        return dict(view(state, False, 0, unit), changed=True, attached=False)
    _private_dir(os.path.dirname(root))
    _private_dir(root)
    _private_dir(directory)
    os.makedirs(bundle_dir, mode=0o755, exist_ok=True)
    _write_if_changed(bundle, p["bundle"], 0o644)
    config = dict(p["config"], secret_values=list(p.get("secret_values") or []))
    if p.get("api_key"):
        config["release"] = dict(config.get("release") or {}, api_key=p["api_key"])
        if config.get("replace"):
            config["replace"] = dict(config["replace"], api_key=p["api_key"])
    _write_if_changed(os.path.join(directory, "config.json"), json.dumps(config, sort_keys=True), 0o600)
    if _write_if_changed(os.path.join(unit_dir, unit), unit_text, 0o644):
        systemctl("daemon-reload")
    rc, out, err = systemctl("enable", "--now", unit)
    if rc != 0:
        return dict(failed=True, changed=True, msg="could not start %s: %s" % (unit, err or out), unit=unit)
    return dict(view(state, True, 0, unit), changed=True, attached=bool(state))


def news(state: Mapping[str, Any], since: int) -> bool:
    """Whether the state has something a follower at line ``since`` has not seen: a new line, or the run's end."""
    return bool(state.get("final")) or (state.get("said") or 0) > since


def await_news(
    path: str,
    since: int,
    seconds: float,
    running: Callable[[], bool],
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Any] = time.sleep,
    pause: float = 0.5,
) -> dict[str, Any]:
    """The state once it has news for a follower at line ``since`` (:func:`news`), the supervisor stopped, or ``seconds``
    passed: one call per follow instead of a read each ``progress_interval``, and the run's end seen when it comes. The
    file is read again only when it changed (its mtime and size)."""
    deadline = clock() + seconds
    seen, state, checks = None, {}, 0
    while True:
        try:
            st = os.stat(path)
            mark = (st.st_mtime_ns, st.st_size)
        except OSError:
            mark = None
        if mark != seen:
            try:
                seen, state = mark, load(path) if mark else {}
            except ValueError:  # written by os.replace, so never half: a damaged file is read again at its next change
                seen, state = mark, {}
            if news(state, since):
                return state
        checks += 1
        if clock() >= deadline or checks % 20 == 0 and not running():
            return state
        sleep(pause)


def view(state: Mapping[str, Any], active: bool, since: int, unit: str) -> dict[str, Any]:
    """What the controller reads: the run's state, only the lines after ``since``, and ``report``: what status.yml
    prints of it."""
    lines = [line for line in state.get("lines") or [] if line[0] > since]
    out = dict((k, v) for k, v in state.items() if k != "lines")
    return dict(
        changed=False,
        unit=unit,
        active=bool(active),
        found=bool(state),
        state=out,
        lines=lines,
        said=state.get("said") or 0,
        report=report(state, active, unit),
    )


def report(state: Mapping[str, Any], active: bool, unit: str, last: int = 5) -> list[str]:
    """status.yml's lines about the supervisor: whether it runs, what it watches or how the run ended, what it said
    last. None of it when the run never had one."""
    if not state:
        return []
    dog, final = state.get("dog") or {}, state.get("final")
    if final:
        head = "ended: %s" % (final.get("line") or "SUCCEEDED")
    elif active:
        head = "running on the head, watching attempt %s (%s)%s" % (
            dog.get("attempt"),
            dog.get("sid"),
            ", %d recovery(ies) so far" % dog["restarts"] if dog.get("restarts") else "",
        )
    else:
        head = (
            "NOT running and the run has not ended: journalctl -u %s on the head says why; submit.yml for the "
            "experiment starts it again, from its state" % unit
        )
    return ["supervisor:    %s %s" % (unit, head)] + [
        "  %s  %s" % (time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at)), text)
        for dummy, at, text in (state.get("lines") or [])[-last:]
    ]
