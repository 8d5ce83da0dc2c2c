#!/usr/bin/python
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

# Documentation only: the work is done by plugins/action/ray_job_wait.py, which runs
# rlinfra.verl.ray_job_poll on the target host once per progress interval.

from __future__ import annotations

DOCUMENTATION = r"""
module: ray_job_wait
short_description: Wait for a Ray job with a watchdog - progress lines, lost nodes, head restarts, stalls, recovery
version_added: 0.1.0
description:
  - Waits for a Ray job in chunks of O(progress_interval) seconds, each one a run of M(rlinfra.verl.ray_job_poll)
    on the target host (the head), and prints one line per chunk - status, elapsed time, the newest
    C(step:N) line of the log and its key metrics.
  - The watchdog - when a node of the cluster leaves, it prints at once one line naming the inventory host and its
    address, for example V(node rlinfra-sbx-3 at 172.23.0.4 left the cluster at 0:00:46); a job that vanishes once
    the dashboard answers again means the head restarted; no new C(step:N) line for O(stall_timeout) seconds while
    the job runs is a stall; a dashboard that does not answer for O(outage_grace) seconds ends the wait with one line.
  - Recovery (O(recovery)) - on an event listed in C(recovery.on), while C(recovery.max_restarts) allows it, the
    attempt is stopped if it still runs (and every other running attempt of the run - never two at once), the wait
    sleeps C(backoff_s), waits up to C(node_wait_timeout) seconds for C(min_nodes) alive nodes, refuses when the
    latest checkpoint in O(checkpoint_dir) was written by another world size than the cluster now gives (unless
    C(allow_reshard)), uploads the working_dir again when needed and submits the next attempt (C(<id>-a2), ...),
    which resumes from the checkpoint. Every attempt is a line and a row of RV(attempts); each attempt's driver
    log is saved under O(log_dir).
  - The dashboard options go unchanged to the modules it runs on the target - with O(address) empty, each of them
    reads the dashboard address (and, without a token option, the token file) from the target's C(rlinfra_ray) local
    fact; RV(address) and RV(dashboard_url) name the dashboard they used.
  - Fails when the job ends C(FAILED) or C(STOPPED) and is not recovered, or is still running after O(timeout);
    C(msg) is then one line saying what happened and what to do. Never reports success for a job that did
    not succeed.
author:
  - rlinfra maintainers (@rlinfra)
options:
  submission_id:
    description: The attempt to follow (the run's id or one of its C(-aN) attempts).
    type: str
    required: true
  base_submission_id:
    description: The run's submission id (its first attempt); empty for O(submission_id).
    type: str
    default: ""
  timeout:
    description: Seconds to wait in all, recoveries included.
    type: int
    default: 86400
  progress_interval:
    description: Seconds between two progress lines (the length of one watch chunk).
    type: int
    default: 60
  poll_interval:
    description: Seconds between two reads inside a chunk.
    type: float
    default: 5
  stop_on_timeout:
    description: Stop the job when O(timeout) passes.
    type: bool
    default: false
  stall_timeout:
    description: Seconds without a new C(step:N) line, while the job runs, that make a stall; V(0) turns the check off.
    type: int
    default: 0
  outage_grace:
    description: Seconds the dashboard may not answer (a head restarting) before the wait gives up.
    type: int
    default: 300
  logs_tail_lines:
    description: Lines of the log returned in RV(logs_tail).
    type: int
    default: 50
  runtime_env:
    description:
      - The job's runtime_env; a recovery submits the next attempt with it, and the values of its secret
        environment variables are masked in everything returned and saved. Never logged.
    type: dict
  secret_names:
    description: Names of C(env_vars) in O(runtime_env) whose values are masked whatever their names look like.
    type: list
    elements: str
    default: []
  secret_values:
    description:
      - The job's secret values, only to mask them in everything returned and saved (they reach the job by the
        run's secrets file, not by O(runtime_env)). Never logged.
    type: list
    elements: str
    default: []
  label:
    description: Prefix of the progress lines (default the submission id).
    type: str
    default: ""
  metrics:
    description: Metric names to show, first found first.
    type: list
    elements: str
    default: [critic/score/mean, critic/rewards/mean, reward/mean, actor/pg_loss, pg_loss, actor/entropy, response_length/mean, timing_s/step]
  max_metrics:
    description: At most this many metrics per line.
    type: int
    default: 5
  recovery:
    description:
      - The experiment's C(recovery) mapping - C(max_restarts) (default 0, no recovery), C(on) (events among
        C(node_lost), C(head_restart), C(stalled), C(failed); default the first three), C(backoff_s) (default 10),
        C(min_nodes) (default the node count when the run was first submitted), C(node_wait_timeout)
        (default 600), C(allow_reshard) (default false), C(deadline) (when the machines end, ISO 8601 with a zone
        or epoch seconds; no recovery is made within C(deadline_margin) of it, and the watch says where it cuts the
        run), C(deadline_margin) (default 600).
    type: dict
    default: {}
  job:
    description:
      - What a recovery submits - C(job_template) (from M(rlinfra.verl.verl_experiment)), C(metadata),
        C(resources), and C(package) (C(uri) and C(src), the working_dir zip kept on the head) or null.
    type: dict
    default: {}
  checkpoint_dir:
    description: The run's checkpoint directory on the cluster, read before a resubmission (M(rlinfra.verl.verl_checkpoint_info)).
    type: str
    default: ""
  hosts:
    description: Inventory hosts of the cluster, to name lost nodes by host rather than by address.
    type: list
    elements: str
    default: []
  left_out:
    description:
      - "The workers fitness.yml left out of the cluster, one line each as the C(rlinfra.verl.fitness_gate) filter
        gives them (C(left out: gpu-3 (fitness.yml, <time>): <why>)); the run report's header names them."
    type: list
    elements: str
    default: []
  log_dir:
    description:
      - Directory on the controller where each attempt's driver log is saved (C(<submission_id>.log), mode 0600), its
        metrics beside it; the run report is C(<log_dir>/<submission_id>/report.html) (the first attempt's id). Empty
        for none.
    type: str
    default: ""
  experiment:
    description:
      - The job as M(rlinfra.verl.verl_experiment_render) rendered it (its result). Every option not set on the task is
        taken from it - O(base_submission_id), the wait settings (O(timeout), O(progress_interval), O(poll_interval),
        O(stop_on_timeout), O(stall_timeout), O(outage_grace)), O(runtime_env), O(secret_names) (the secrets present), O(label), O(recovery), O(job),
        O(checkpoint_dir) and O(hosts) (the cluster's inventory hosts).
    type: dict
  package_src:
    description: With O(experiment) - where the working_dir zip is kept on the target, for a recovery to upload it again.
    type: str
    default: ""
  supervise:
    description:
      - C(cluster) runs the watchdog and its recovery on the target (the head) as the run's systemd unit
        C(rlinfra-run-<id>.service) (M(rlinfra.verl.ray_run_supervisor)); this action starts it, or attaches to the one
        already there, and only follows it - the run recovers whether or not the playbook runs.
      - C(controller) runs them in this action, as before 0.13.0; the run recovers only while the action runs.
      - With O(experiment), its C(wait.supervise) when not given.
    type: str
    choices: [cluster, controller]
    default: cluster
    version_added: 0.13.0
  follow:
    description: With O(supervise=cluster), false starts the supervisor and returns at once (submit.yml's C(wait=false)).
    type: bool
    default: true
    version_added: 0.13.0
  on_end:
    description:
      - With O(supervise=cluster), the cluster's rentals once the run has ended - C(keep) them, C(release) them after
        SUCCEEDED, C(release_always) also after a failure recovery gave up on (never after a stop by C(stop.yml)). The
        supervisor gives them back after O(release_grace) seconds, in which this action keeps the logs and the report.
      - Empty is the experiment's C(on_end) (C(keep) when it has none).
    type: str
    choices: ["", keep, release, release_always]
    default: ""
    version_added: 0.13.0
  cluster:
    description: The Ray cluster, whose rentals (label) O(on_end) gives back. With O(experiment), its cluster.
    type: str
    default: ""
    version_added: 0.13.0
  hyperbolic_api_key:
    description: The Hyperbolic API key O(on_end) gives the rentals back with (and C(recovery.replace) rents with), kept
      root-only on the head.
    type: str
    default: ""
    version_added: 0.13.0
  hyperbolic_api_url:
    description: The Hyperbolic API (empty is C(https://api.hyperbolic.xyz)).
    type: str
    default: ""
    version_added: 0.13.0
  release_grace:
    description: Seconds between the run's end and the rentals given back (O(on_end)).
    type: int
    default: 60
    version_added: 0.13.0
  replace_dir:
    description:
      - With the experiment's C(recovery.replace), the directory on the head that holds what the run's supervisor
        replaces a machine with (an SSH key, ansible-core, this collection, the cluster's inventory), as
        C(roles/verl_job/tasks/replace_kit.yml) wrote it.
    type: str
    default: ""
    version_added: 0.13.0
  secrets_file:
    description:
      - The run's secrets file on the target, which the supervisor removes once the run has ended. With O(experiment),
        its C(secrets_file).
    type: str
    default: ""
    version_added: 0.13.0
attributes:
  check_mode:
    support: full
    description: One read, no waiting, no recovery.
  diff_mode:
    support: none
    description: Nothing to diff.
seealso:
  - module: rlinfra.verl.ray_job
  - module: rlinfra.verl.ray_job_poll
  - module: rlinfra.verl.verl_checkpoint_info
extends_documentation_fragment:
  - rlinfra.verl.ray_dashboard
  - rlinfra.verl.attributes.action
"""

EXAMPLES = r"""
- name: Wait for the run, one progress line a minute
  rlinfra.verl.ray_job_wait:
    address: http://10.0.0.5:8265
    auth_token: "{{ ray_auth_token }}"
    submission_id: rlinfra-gsm8k_grpo_qwen05b-default
    timeout: 86400
    progress_interval: 60
  no_log: true
  register: waited
# prints e.g.: gsm8k_grpo_qwen05b: RUNNING, 0:42:10, step:120 - critic/score/mean:0.61 - actor/pg_loss:-0.012
"""

RETURN = r"""
status:
  description: Last Ray job status.
  returned: always
  type: str
  sample: SUCCEEDED
message:
  description: Ray's message about the job.
  returned: always
  type: str
last_step:
  description: Newest verl step found in the log, or null.
  returned: always
  type: int
last_metrics:
  description: Metrics of that step.
  returned: always
  type: dict
logs_tail:
  description: End of the driver log.
  returned: always
  type: str
duration_s:
  description: Seconds the job has run.
  returned: always
  type: float
start_time:
  description: Start of the job, ISO 8601 UTC.
  returned: always
  type: str
end_time:
  description: End of the job, ISO 8601 UTC, or null.
  returned: always
  type: str
driver_exit_code:
  description: Exit code of the entrypoint once it ended.
  returned: always
  type: int
dashboard_url:
  description: Link to the job in the Ray dashboard the modules on the target talked to.
  returned: always
  type: str
address:
  description:
    - The dashboard URL the modules on the target talked to - O(address), or the C(dashboard_url) of the target's
      C(rlinfra_ray) local fact when O(address) is empty; empty when no module got that far.
  returned: always
  type: str
  sample: http://10.0.0.5:8265
timed_out:
  description: The job was still running when O(timeout) passed.
  returned: always
  type: bool
attempt:
  description: Number of the last attempt (1 without recovery).
  returned: always
  type: int
attempts:
  description: One row per ended attempt - C(attempt), C(submission_id), C(status), C(why) it ended, C(last_step), times.
  returned: always
  type: list
  elements: dict
lost_nodes:
  description: Every node that left the cluster while waiting - C(label) (host and address), C(at), C(attempt).
  returned: always
  type: list
  elements: dict
events:
  description:
    - Faults and recoveries with their times in seconds since the wait began (detection, resubmission, first new step).
    - A C(resubmitted) event carries C(resume_step), and once the attempt logged a step, C(first_logged_step) and
      C(resume_proven); an attempt that started over adds a C(not_resumed) event.
  returned: always
  type: list
  elements: dict
succeeded:
  description: The job succeeded (after recoveries, if any). Unlike C(failed), not changed by C(failed_when).
  returned: always
  type: bool
reason:
  description:
    - Why the wait ended - C(succeeded), C(failed), C(node_lost), C(head_restart), C(stalled), C(stopped),
      C(timeout), C(unreachable), C(missing), C(shape), C(no_nodes), C(not_resumed) (a resubmitted attempt started
      over instead of resuming from its checkpoint; stopped, no further attempt), ...
  returned: always
  type: str
summary:
  description: The end-of-run summary, one line per item, ready to print.
  returned: always
  type: list
  elements: str
log_path:
  description: The saved driver log of the last attempt, or empty.
  returned: always
  type: str
log_paths:
  description: The saved driver logs of every attempt.
  returned: always
  type: list
  elements: str
report_path:
  description:
    - The run report, C(<log_dir>/<submission_id>/report.html) (one self-contained page, no external request - header, every
      metric's curve, node utilisation, events, links to the logs; docs/OBSERVABILITY.md), or empty when it was not
      written (no O(log_dir), check mode, or the artifacts directory could not be used).
    - It is rewritten while the job runs, with the metrics files, and once more at the end.
  returned: always
  type: str
job_id:
  description: Ray's hex job id of the last attempt.
  returned: always
  type: str
waited_s:
  description: Seconds spent waiting.
  returned: always
  type: float
"""
