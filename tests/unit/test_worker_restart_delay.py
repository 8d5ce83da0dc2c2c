"""The Ray worker unit's growing restart delay (roles/ray/templates/ray.service.j2): a worker that failed to join
waits (NRestarts - 1) x 10 s plus a per-node offset (its index among the workers mod 8, x 3 s), at most 60 s: not at
all on a start that was not an automatic restart, nor on its first restart (a lone failure rejoins at once). The line is rendered from the template with Jinja, unescaped as
systemd does ($$ -> $, %n -> the unit's name) and run by /bin/sh with stand-ins for systemctl and sleep."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import jinja2
import pytest

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "roles" / "ray" / "templates" / "ray.service.j2"


def _pre_line(role, host, workers):
    text = TEMPLATE.read_text()
    block = re.search(r"\{% if ray_node_role == 'worker' %\}\n(.*?)\{% endif %\}", text, re.S)
    assert block, "the worker-only block is gone from ray.service.j2"
    lines = [ln for ln in block.group(1).splitlines() if ln.startswith("ExecStartPre=")]
    assert len(lines) == 1, lines
    rendered = (
        jinja2.Environment()
        .from_string(lines[0])
        .render(ray_node_role=role, inventory_hostname=host, groups={"ray_workers": workers})
    )
    assert "{{" not in rendered
    return rendered


def _run(line, restarts, tmp_path):
    # What systemd executes: the '+' prefix dropped, $$ and %n unescaped.
    command = line[len("ExecStartPre=") :].lstrip("+").replace("$$", "$").replace("%n", "ray-worker.service")
    argv = re.match(r"^/bin/sh -c '(.*)'$", command)
    assert argv, command
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    log = tmp_path / "slept"
    (bin_dir / "systemctl").write_text(
        '#!/bin/sh\n[ "$*" = "show -p NRestarts --value ray-worker.service" ] || exit 3\necho %d\n' % restarts
    )
    (bin_dir / "sleep").write_text('#!/bin/sh\necho "$1" >> %s\n' % log)
    for f in ("systemctl", "sleep"):
        (bin_dir / f).chmod(0o755)
    env = dict(os.environ, PATH="%s:/usr/bin:/bin" % bin_dir)
    proc = subprocess.run(["/bin/sh", "-c", argv.group(1)], env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    slept = log.read_text().split() if log.exists() else []
    log.unlink(missing_ok=True)
    return [int(s) for s in slept]


WORKERS = ["w%02d" % i for i in range(11)]


@pytest.mark.parametrize(
    "host, restarts, want",
    [
        ("w00", 0, []),  # a start that was not an automatic restart: no wait at all
        ("w03", 1, []),  # the first restart: RestartSec alone (the head restarted; rejoin at once)
        ("w00", 2, [10]),
        ("w01", 2, [13]),  # the per-node offset: index 1 x 3 s
        ("w09", 3, [23]),  # index 9 mod 8 = 1
        ("w07", 4, [51]),
        ("w05", 6, [60]),  # at most a minute, within the unit's start timeout
    ],
)
def test_a_worker_that_failed_to_join_waits_longer_at_each_restart(tmp_path, host, restarts, want):
    assert _run(_pre_line("worker", host, WORKERS), restarts, tmp_path) == want


def test_workers_that_failed_together_do_not_retry_in_step(tmp_path):
    delays = {h: _run(_pre_line("worker", h, WORKERS), 2, tmp_path)[0] for h in WORKERS}
    assert len(set(delays.values())) == 8, delays  # eight offsets among eleven workers


def test_the_head_unit_has_no_delay():
    text = jinja2.Environment().from_string(TEMPLATE.read_text().split("[Service]")[1].split("Restart=")[0])
    assert "ExecStartPre=+" not in text.render(
        ray_node_role="head",
        ray__container=False,
        ray_node_start_args=[],
        groups={"ray_workers": WORKERS},
        inventory_hostname="h",
    )
