#!/usr/bin/python
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: ray_run_supervisor
short_description: Start, read or stop the supervisor of a run on the Ray head (a systemd unit per run)
version_added: 0.13.0
description:
  - The supervisor is the run's watchdog (recovery included) running on the head as C(rlinfra-run-<id>.service), so
    that the run recovers whether or not a controller watches it. M(rlinfra.verl.ray_job_wait) starts it and follows
    it; C(status.yml) reads it; C(stop.yml) stops it before the job.
  - With O(state=started) writes the unit, its program (O(bundle)) and its configuration (mode 0600 in a 0700
    directory under C(/var/lib/rlinfra/runs)) and starts it, enabled so that it comes back after a reboot. A
    supervisor that runs already, or whose run has ended, is left as it is (one decider); the result is its state.
  - With O(state=read) (read-only) returns the run's state and the lines the supervisor said after O(since).
  - With O(state=stopped) stops and disables the unit and marks the run's state as stopped, so that it does not
    recover a job that C(stop.yml) stops next.
author:
  - rlinfra maintainers (@rlinfra)
options:
  base:
    description: The run's submission id (its first attempt's).
    type: str
    required: true
  state:
    description: What to do.
    type: str
    choices: [started, read, stopped]
    default: read
  config:
    description:
      - The supervisor's configuration (M(rlinfra.verl.ray_job_wait) makes it), written root-only.
    type: dict
  secret_values:
    description: The run's secret values, kept in the configuration only to mask them in what the supervisor says.
    type: list
    elements: str
    default: []
  api_key:
    description:
      - The Hyperbolic API key, kept in the root-only configuration when the run gives its machines back at its end
        (C(on_end)), as the idle guard keeps it.
    type: str
    default: ""
  bundle:
    description: The supervisor's program, one self-contained Python file (the action makes it).
    type: str
  bundle_id:
    description: The program's digest, part of its file name.
    type: str
  python:
    description: The Python that runs the unit; the one running this module when not given.
    type: path
  since:
    description: With O(state=read), only the lines numbered above this.
    type: int
    default: 0
  wait:
    description:
      - With O(state=read), wait up to this many seconds on the head for a line numbered above O(since) or the run's
        end (while the supervisor runs), then answer. A follower so sees the run's end when it comes, in one call.
    type: int
    default: 0
    version_added: 0.13.0
attributes:
  check_mode:
    support: full
    description: Reports whether the supervisor would be started or stopped; changes nothing.
  diff_mode:
    support: none
    description: The configuration holds secret values; no diff is shown.
seealso:
  - module: rlinfra.verl.ray_job_wait
"""

EXAMPLES = r"""
- name: Read the state of a run's supervisor
  rlinfra.verl.ray_run_supervisor:
    base: rlinfra-grpo-default
    state: read
  become: true
  register: supervised
"""

RETURN = r"""
unit:
  description: The supervisor's systemd unit.
  returned: always
  type: str
  sample: rlinfra-run-rlinfra-grpo-default.service
active:
  description: Whether the unit is running.
  returned: always
  type: bool
found:
  description: Whether the run has a state on this head.
  returned: always
  type: bool
state:
  description:
    - The run's state without its lines. C(dog) is the watchdog's (attempts, lost nodes, events), C(final) the
      end once the run has ended (reason, line, status, summary), C(progress) the newest progress line.
  returned: always
  type: dict
lines:
  description: The lines said after O(since), each C([number, epoch seconds, text]).
  returned: always
  type: list
  elements: list
said:
  description: How many lines the supervisor has said in all.
  returned: always
  type: int
report:
  description: What status.yml prints of the supervisor - whether it runs, what it watches or how the run ended, its last lines.
  returned: always
  type: list
  elements: str
no_systemd:
  description: The line saying that the head is not run by systemd, so the run cannot have a supervisor there.
  returned: when the head has no systemd
  type: str
attached:
  description: With O(state=started), whether a state was there already (a restart or a re-run attaches).
  returned: when state is started
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.common.plain_module import run_module
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.supervisor_unit import manage

ARGS = vocabulary.Args(
    base=vocabulary.SubmissionId(required=True),
    state=vocabulary.Choice(("started", "read", "stopped"), default="read"),
    config=vocabulary.Raw(
        "ray_job_wait's own configuration of the supervisor (made there, not by users)", ansible="dict"
    ),
    secret_values=vocabulary.ListOf(vocabulary.Secret(multiline=True), default=[], no_log=True),
    api_key=vocabulary.Secret(default=""),
    bundle=vocabulary.Raw("the supervisor's program, made by the action", ansible="str"),
    bundle_id=vocabulary.Text(empty=False, max_len=64, pattern=r"^[0-9a-f]{8,64}$", what="a hex digest"),
    python=vocabulary.AbsPath("reads"),
    since=vocabulary.Int(0, default=0),
    wait=vocabulary.Seconds(0, 3600, integer=True, default=0),
)
ARGUMENT_SPEC = ARGS.spec


def main():
    run_module(AnsibleModule, ARGS, manage)


if __name__ == "__main__":
    main()
