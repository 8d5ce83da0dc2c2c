#!/usr/bin/python
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# Documentation stub: the work is done on the controller by plugins/action/run_report.py.

from __future__ import annotations

DOCUMENTATION = r"""
module: run_report
short_description: Adds what a run's nodes' logs say to its report (report.html) on the controller
version_added: 0.9.0
description:
  - M(rlinfra.verl.ray_job_wait) writes a run's report, C(report.html), and the data it was built from,
    C(report.json), in the run's directory C(<artifacts dir>/<experiment>/<first submission id>/). The nodes' logs are
    gathered after the wait ends (a failed submit, or logs.yml), so what they say is added here.
  - "Adds the nodes' kernel events that fall in the run's window - from its start to 5 minutes after its end - as
    events on the report's time axis (for example C(gpu-2: Xid 79 (GPU has fallen off the bus) on 0000:3b:00)), the
    lines saying why the run failed (O(causes)) to its header, and links to every node's saved logs."
  - Kernel events from before the run are left to the failure line; the kernel log reaches back to the node's boot.
  - Rewrites the report only when this adds something; without a report (the run was not waited for) it does nothing.
  - A link in the place of C(report.html) or C(report.json) is refused and left alone.
author:
  - rlinfra maintainers (@rlinfra)
options:
  report_dir:
    description: The run's directory on the controller, where C(report.html) is (relative to the current directory).
    type: path
    required: true
  nodes:
    description:
      - The registered loop of M(rlinfra.verl.ray_node_logs) over the run's nodes (each result's C(item) names its node,
        its C(kernel_events) carry C(epoch)). Failed and unreachable nodes are skipped.
    type: list
    elements: dict
    default: []
  causes:
    description: Why the run failed, one line each (the C(rlinfra.verl.run_causes) filter's lines).
    type: list
    elements: str
    default: []
  unreachable_head:
    description:
      - The head of the run's cluster, when it did not answer. The task then fails with one line naming it, what this
        controller last saw of the run (its status, step and newest checkpoint step, from C(report.json)) and the
        commands that bring the cluster back; the report is left as it is.
    type: str
    version_added: 0.13.0
  error:
    description: What the connection to O(unreachable_head) said (its first line goes into the line).
    type: str
    version_added: 0.13.0
  experiment:
    description: The experiment's name, for the command in the line.
    type: str
    version_added: 0.13.0
  cluster:
    description: The Ray cluster's name, for the line.
    type: str
    version_added: 0.13.0
attributes:
  check_mode:
    support: full
    description: Leaves the report as it is.
  diff_mode:
    support: none
    description: Writes only on the controller.
"""

EXAMPLES = r"""
- name: Add what the nodes' logs say to the run report
  rlinfra.verl.run_report:
    report_dir: artifacts/grpo/rlinfra-grpo-default
    nodes: "{{ collected.results }}"
    causes: "{{ collected.results | rlinfra.verl.run_causes(driver_log) }}"
"""

RETURN = r"""
path:
  description: The report's path, empty when there is none to amend.
  returned: always
  type: str
events:
  description: The events taken from the nodes' kernel logs (the report's text of each).
  returned: always
  type: list
  elements: str
msg:
  description: One line saying what was done.
  returned: always
  type: str
"""
