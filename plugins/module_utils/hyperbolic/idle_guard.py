# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The idle guard: run by a systemd timer on a cluster's head, it stops Ray and releases the cluster's Hyperbolic
instances once no Ray job has run for ``idle_release_after`` seconds.

    python3 /opt/rlinfra/idle-guard/idle-guard.py CONFIG

Standard library plus the collection's Hyperbolic and Ray clients, all in that one file (:data:`PROGRAM`, which the
role ray_head copies to the head through filter node_program); the node's own python3, not Ansible. CONFIG (root-only
JSON) holds the label, the limit, the API URL and key, the head's dashboard URL and token path. Every run prints one
line saying what it saw and did (the journal keeps it).

Idle means: no job PENDING or RUNNING, and the later of the last job's end and Ray's start is longer ago than the
limit. When Ray's jobs cannot be read, it does nothing but say so: a guard never releases on a guess.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from ansible_collections.rlinfra.verl.plugins.module_utils.common.plain_http import open_url
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.client import RayClient

ACTIVE = ("PENDING", "RUNNING")
UNIT = "ray-head.service"
RECORD = "/etc/rlinfra/hyperbolic-%s.json"  # provision.yml's copy of the label's record
# The program of the head's rlinfra-idle-guard.service (plugin_utils/node_script.py's program(), through filter
# node_program): this module's main and the module_utils it imports; the Hyperbolic client imports Ansible only for an
# opener it is never given here.
PROGRAM = ("hyperbolic.idle_guard", "main", ("hyperbolic.client",))


def since_ray_started(show_text: str, uptime_text: str) -> float | None:
    """Seconds since the unit became active, from ``systemctl show -p ActiveEnterTimestampMonotonic`` and /proc/uptime;
    None when it is not known."""
    try:
        mono = int(show_text.strip().split("=", 1)[-1])
        uptime = float(uptime_text.split()[0])
    except (ValueError, IndexError):
        return None
    return uptime - mono / 1e6 if mono else None


def decide(jobs: Sequence[Mapping[str, Any]], now: float, ray_up_for: float | None, limit: int) -> tuple[bool, str]:
    """``(release, line)``: whether to release, and the line that says why. ``jobs``: Ray's job list (start_time and
    end_time in ms since the epoch); ``now``: seconds since the epoch; ``ray_up_for``: seconds since Ray started."""
    active = [j.get("submission_id") or j.get("job_id") or "?" for j in jobs if str(j.get("status")) in ACTIVE]
    if active:
        return False, "busy: job(s) %s running or pending; nothing to do" % ", ".join(sorted(active))
    ended = [j for j in jobs if j.get("end_time")]
    last = max(ended, key=lambda j: j["end_time"]) if ended else None
    idle_job: Any  # set whenever ``last`` is, as ``what`` reads it
    idle_job = now - last["end_time"] / 1000.0 if last else None
    candidates = [x for x in (idle_job, ray_up_for) if x is not None]
    if not candidates:
        return (
            False,
            "cannot tell how long the cluster has been idle (no job ever ended, Ray's start unknown); nothing to do",
        )
    idle = min(candidates)
    what = (
        ("the last job, %s, ended %ds ago" % (last.get("submission_id") or last.get("job_id"), idle_job))
        if last
        else "no job has run since Ray started %ds ago" % cast(float, ray_up_for)
    )  # a candidate when no job ended
    if idle < limit:
        return False, "idle for %ds (%s), below the limit of %ds; nothing to do" % (idle, what, limit)
    return (
        True,
        "idle for %ds (%s), at or over the limit of %ds (idle_release_after): stopping Ray and releasing the "
        "cluster's instances" % (idle, what, limit),
    )


def list_jobs(dashboard: str, token: str | None, timeout: float = 10) -> list[Any]:
    """The head's own dashboard, through the collection's one Ray client (its token never in an error line)."""
    data = RayClient(dashboard, token=token or None, timeout=timeout, retries=2, backoff=0.5).list_jobs()
    return data if isinstance(data, list) else []


def say(line: str) -> None:
    """One line to the journal (the service's standard output)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def run(
    config: Mapping[str, Any],
    out: Callable[[str], None] = say,
    systemctl: Callable[..., Any] | None = None,
    now: Callable[[], float] = time.time,
) -> int:
    """One check. Returns the process exit code: 0 when it decided (released or not), 1 when it could not look."""

    def call(*args):
        return (
            systemctl
            or (lambda a: subprocess.run(["systemctl"] + list(a), capture_output=True, text=True, check=False))
        )(args)

    label, limit = config["label"], int(config["idle_release_after"])
    try:
        with open(config["token_path"]) as handle:
            token = handle.read().strip()
    except OSError:
        token = ""
    try:
        jobs = list_jobs(config["dashboard_url"], token)
    except Exception as exc:  # pylint: disable=broad-except
        out(
            "idle guard (%s): cannot read Ray's jobs at %s (%s); not releasing anything"
            % (label, config["dashboard_url"], exc)
        )
        return 1
    shown = call("show", "-p", "ActiveEnterTimestampMonotonic", UNIT)
    try:
        with open("/proc/uptime") as handle:
            uptime = handle.read()
    except OSError:
        uptime = ""
    release, line = decide(jobs, now(), since_ray_started(getattr(shown, "stdout", ""), uptime), limit)
    out("idle guard (%s): %s" % (label, line))
    if not release:
        return 0
    stopped = call("stop", UNIT)
    out(
        "idle guard (%s): %s"
        % (
            label,
            "Ray stopped"
            if getattr(stopped, "returncode", 1) == 0
            else "stopping Ray failed (%s); releasing anyway" % getattr(stopped, "stderr", "").strip(),
        )
    )
    released, ok = release_rentals(config, out)
    out(
        "idle guard (%s): released %s"
        % (label, ", ".join(released) or "nothing (no rental is named or tagged %s)" % label)
    )
    return 0 if ok else 1


def release_rentals(config: Mapping[str, Any], out: Callable[[str], None]) -> tuple[list[str], bool]:
    """``(released ids, whether every API answered)``: the rentals of ``config['label']`` given back on both APIs - those
    named or tagged so, or in the head's record (``config['record']``). The idle guard's end, and a run's (on_end)."""
    from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic import record as hyperbolic_record
    from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic.client import (
        HyperbolicClient,
        HyperbolicError,
    )
    from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic.rent import Rent

    label = config["label"]
    released = []
    try:  # the rentals the API keeps no name for are the record's
        record = hyperbolic_record.read(config.get("record") or RECORD % label, label)
    except ValueError as exc:
        out("%s (%s): %s; releasing by name only" % (config.get("who", "idle guard"), label, exc))
        record = {}
    # Both APIs: the guard must find the cluster's rentals wherever provision.yml made them (an API that answers 404
    # has none).
    for api in ("on_demand", "marketplace"):
        try:
            client = HyperbolicClient(config["api_key"], config["api_url"], opener=open_url)
            rent = Rent(client, api=api, record_ids=hyperbolic_record.ids(record, api))
            released += rent.absent(label, timeout=int(config.get("release_timeout", 300)))["released"]
        except HyperbolicError as exc:
            out("%s (%s): releasing on the %s API failed: %s" % (config.get("who", "idle guard"), label, api, exc))
            return released, False
    return released, True


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    with open(argv[0]) as handle:
        config = json.load(handle)
    return run(config)


if __name__ == "__main__":
    raise SystemExit(main())
