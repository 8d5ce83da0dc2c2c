#!/usr/bin/python
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: ray_node_logs
short_description: Collect one Ray job's logs on a node, secrets masked, into a private tar.gz
version_added: 0.2.0
description:
  - Runs on each node of a Ray cluster and packs, from Ray's newest session under O(temp_dir)
    (C(session_latest/logs)), the node's C(raylet) and C(gcs_server) logs, the job's driver log
    (C(job-driver-<submission_id>.log)), the job's worker logs (C(worker-<worker id>-<job id>-<pid>.out/.err))
    and runtime_env setup log, and the tail of the kernel log (C(dmesg), else C(journalctl -k); OOM kills
    and GPU Xid errors show there). Files of an older session in which the job ran (the node restarted since)
    are added under C(<session directory>/).
  - Each file is cut to its last O(max_file_mib) MiB (at a line boundary) and every secret value is masked
    with C(********) before anything is written - the values of O(secret_values), the cluster's Ray token
    (read from O(token_path) on the node) and the values of the node's secret Ray environment
    (O(secret_env_files)). A value is also masked where it appears JSON-escaped, and values of variables
    named like secrets are masked too (O(secret_name_pattern)).
  - Ray's C(runtime_env_agent.log) is not collected by default - it records the env_vars of every job on the
    node, other experiments' secrets included.
  - The bundle is a C(.tar.gz) (files mode 0600, directories 0700, plus a C(MANIFEST.json) saying what was
    collected, cut, masked and skipped) in a new private directory; the caller fetches it and removes
    RV(bundle_dir).
  - Without O(job_id), and with O(address), the job's hex id is read from the Ray Jobs API
    (C(GET /api/jobs/<submission_id>)); without either, the worker logs cannot be told apart and are left out.
author:
  - rlinfra maintainers (@rlinfra)
options:
  submission_id:
    description:
      - Submission id of the job (the name of its driver log).
    type: str
    required: true
  job_id:
    description:
      - Hex Ray job id of the job (C(job_id) in the Jobs API record, for example C(02000000)); names its worker logs.
    type: str
    default: ""
  address:
    description:
      - Ray dashboard URL, to look up O(job_id) when it is not given. Empty for no lookup.
    type: str
    default: ""
  auth_token:
    description:
      - Ray token for the lookup; empty to read the node's token file (O(token_path)). Never logged nor returned.
    type: str
    default: ""
  validate_certs:
    description:
      - Verify the dashboard's TLS certificate when O(address) is C(https://).
    type: bool
    default: true
  temp_dir:
    description:
      - Ray's temp dir on the node. Empty for the C(temp_dir) of the node's C(rlinfra_ray) local fact, else
        C(/workspace/ray).
    type: path
    default: ""
  secret_values:
    description:
      - Values to mask (the experiment's secrets). Never logged nor returned.
    type: list
    elements: str
    default: []
  secret_name_pattern:
    description:
      - Regular expression on variable names; wherever a log shows such a variable as a mapping entry
        (a JSON or Python dict entry whose key is C(HF_TOKEN)) or an assignment (C(HF_TOKEN=...), upper-case names), its value is masked
        whether it is known or not - a node's Ray logs may print other jobs' runtime_envs. Also masks
        C(Bearer <token>). Empty to turn this off.
    type: str
    default: TOKEN(?!IZER)|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH
  token_path:
    description:
      - File holding the cluster's Ray token on the node; its content is masked. Empty for the C(token_path) of
        the node's C(rlinfra_ray) local fact, else C(/etc/ray/auth_token). A missing file is skipped.
    type: path
    default: ""
  secret_env_files:
    description:
      - C(KEY=VALUE) files whose values are masked. Null for C(ray-secrets.env) next to O(token_path).
        Missing files are skipped.
    type: list
    elements: path
  max_file_mib:
    description:
      - Keep at most the last this many MiB of each file; from V(0.001) to V(1024).
    type: float
    default: 8
  max_total_mib:
    description:
      - Stop adding files once this many MiB are kept on the node (the rest is listed as skipped); from V(0.001) to
        V(16384).
    type: float
    default: 64
  kernel_lines:
    description:
      - Lines of the kernel log to keep, at most 1000000; 0 for none. A kernel log that cannot be read (containers) is
        noted, not an error.
    type: int
    default: 2000
  volumes:
    description:
      - Paths whose free space to report (RV(volumes)), for the run's failure line (a full checkpoint volume).
    type: list
    elements: path
    default: []
  extra_patterns:
    description:
      - Regular expressions (full match) on file names in the session's C(logs) directory to collect as well.
    type: list
    elements: str
    default: []
  bundle_root:
    description:
      - Directory every file is put under inside the bundle (for example the inventory host name), so the bundles
        of several nodes unpack side by side. Empty for none. Letters, digits, C(.), C(_) and C(-) only.
    type: str
    default: ""
  dest_dir:
    description:
      - Directory where the bundle's private directory is made. Empty for the system's temporary directory.
    type: path
    default: ""
  dest:
    description:
      - A directory on the controller. When set, the task (an action) brings the bundle back, removes it from
        the node, and unpacks it there - directories 0700, files 0600, nothing outside it (absolute names,
        C(..), links and devices are left out and listed in RV(refused)). Empty to leave the bundle on the node.
      - A bundle that cannot be brought back is reported in RV(fetch_error); the task does not fail for it.
    type: path
    default: ""
attributes:
  check_mode:
    support: full
    description: Lists what would be collected (names and sizes) and writes nothing.
  diff_mode:
    support: none
    description: Nothing to diff.
notes:
  - Reading Ray's session logs needs root on nodes where Ray runs as root (C(become=true)).
  - The module reports C(changed=false) - its bundle is a temporary file for the caller to fetch and remove.
seealso:
  - module: rlinfra.verl.ray_job
"""

EXAMPLES = r"""
- name: Pack the logs of the job on this node
  rlinfra.verl.ray_node_logs:
    submission_id: rlinfra-smoke-default
    job_id: "02000000"
    secret_values: "{{ [hf_token] }}"
  become: true
  register: node_logs
  no_log: true

- name: Bring the bundle to the controller
  ansible.builtin.fetch:
    src: "{{ node_logs.bundle }}"
    dest: "artifacts/smoke/rlinfra-smoke-default/{{ inventory_hostname }}.tar.gz"
    flat: true
  become: true

- name: Remove the bundle from the node
  ansible.builtin.file:
    path: "{{ node_logs.bundle_dir }}"
    state: absent
  become: true
"""

RETURN = r"""
kernel_events:
  description:
    - The kernel log's Xid errors, uncorrectable memory errors, OOM kills and links going down (the last 50).
    - Each has C(epoch), the line's time in epoch seconds read in the node's time zone (plain dmesg's from its boot
      time), or null when the line has none.
  returned: always
  type: list
  elements: dict
volumes:
  description: One C({path, free_bytes}) per O(volumes) (C(free_bytes) null when it cannot be read).
  returned: always
  type: list
  elements: dict
fetched:
  description: With O(dest) - whether the bundle was brought back and unpacked.
  returned: when dest is set, not in check mode
  type: bool
unpacked:
  description: With O(dest) - the number of files unpacked.
  returned: when the bundle was brought back
  type: int
refused:
  description: With O(dest) - names in the bundle that were left out.
  returned: when the bundle was brought back
  type: list
  elements: str
fetch_error:
  description: With O(dest) - why the bundle could not be brought back.
  returned: when it could not
  type: str
bundle:
  description: Path of the tar.gz on the node.
  returned: success, not in check mode
  type: str
  sample: /tmp/rlinfra-logs-x1y2z3/logs.tar.gz
bundle_dir:
  description: The private directory holding RV(bundle); remove it once fetched.
  returned: success, not in check mode
  type: str
  sample: /tmp/rlinfra-logs-x1y2z3
bundle_size:
  description: Size of RV(bundle) in bytes.
  returned: success, not in check mode
  type: int
job_id:
  description: The hex job id used to pick worker logs, or null when unknown.
  returned: always
  type: str
  sample: "02000000"
job_id_source:
  description: Where RV(job_id) came from - C(given), C(jobs_api), or null.
  returned: always
  type: str
temp_dir:
  description: Ray's temp dir that was read.
  returned: always
  type: str
  sample: /workspace/ray
session:
  description: The newest session directory, null when Ray never ran on the node.
  returned: always
  type: str
  sample: /workspace/ray/session_2026-01-01_00-00-00_000000_1234
files:
  description: What the bundle holds (besides MANIFEST.json).
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: Name in the bundle.
      type: str
    source:
      description: File on the node (null for the kernel log).
      type: str
    kind:
      description: C(ray) (raylet, gcs_server), C(job) (driver, workers, runtime_env), C(kernel) or C(extra).
      type: str
    size:
      description: Size of the source in bytes.
      type: int
    kept_bytes:
      description: Bytes kept after cutting and masking (the planned size in check mode).
      type: int
    truncated:
      description: Whether only the tail was kept.
      type: bool
    redactions:
      description: Number of masked values in the file.
      type: int
skipped:
  description: Files left out (budget reached, unreadable), with the reason.
  returned: always
  type: list
  elements: dict
driver_log:
  description: Name of the job's driver log in the bundle, null when the driver did not run on this node.
  returned: always
  type: str
  sample: job-driver-rlinfra-smoke-default.log
kernel_source:
  description: Command the kernel log came from, or null when it could not be read.
  returned: always
  type: str
  sample: dmesg -T
redactions:
  description: Total number of masked values.
  returned: always
  type: int
notes:
  description: What could not be done (kernel log unavailable, job id unknown, ...); none is an error.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.ray import node_logs
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.node_logs_module import collect_logs

ARGS = vocabulary.Args(
    # Ray's submission ids are free text; the driver log of any id of these characters can be named.
    submission_id=vocabulary.Text(
        empty=False,
        max_len=201,
        pattern=node_logs.SUBMISSION_ID_RE,
        required=True,
        sample="rlinfra-sample",
        what="a Ray submission id (letters, digits, '_', '.', ':', '-', starting with a letter or digit)",
    ),
    job_id=vocabulary.Text(
        max_len=80,
        pattern=r"^\s*[0-9A-Fa-f]{2,64}\s*$",
        default="",
        what="a hex Ray job id (e.g. 02000000, the job_id of GET /api/jobs/<id>)",
    ),
    address=vocabulary.Url(schemes=("http", "https"), path=False, default_scheme="http", empty=True, default=""),
    auth_token=vocabulary.Secret(default=""),
    validate_certs=vocabulary.Switch(default=True),
    temp_dir=vocabulary.AbsPath("reads", empty=True, default=""),
    secret_values=vocabulary.ListOf(vocabulary.Secret(multiline=True), default=[]),
    # Names and paths of secrets, not secrets.
    secret_name_pattern=vocabulary.Regex(
        compiler=node_logs.name_maskers, default=node_logs.DEFAULT_SECRET_NAME_PATTERN, no_log=False
    ),
    token_path=vocabulary.AbsPath("reads", empty=True, default=""),
    secret_env_files=vocabulary.ListOf(vocabulary.AbsPath("reads"), no_log=False),
    max_file_mib=vocabulary.Number(0.001, 1024, unit="MiB", default=8),
    max_total_mib=vocabulary.Number(0.001, 16384, unit="MiB", default=64),
    kernel_lines=vocabulary.Int(0, 1000000, default=2000),
    volumes=vocabulary.ListOf(vocabulary.AbsPath("reads"), default=[]),
    extra_patterns=vocabulary.ListOf(vocabulary.Regex(empty=False), default=[]),
    bundle_root=vocabulary.Text(
        max_len=200,
        pattern=node_logs.BUNDLE_ROOT_RE,
        default="",
        what="a plain directory name (letters, digits, '.', '_', '-'; not . or ..)",
    ),
    dest_dir=vocabulary.AbsPath("local", empty=True, default=""),
    # Read by the action of the same name (the controller side); the module leaves it alone.
    dest=vocabulary.AbsPath("local", empty=True, default=""),
)
ARGUMENT_SPEC = ARGS.spec


def main():
    collect_logs(ARGS.new_module(AnsibleModule))  # the ids, the expressions, the sizes and bundle_root, by their types


if __name__ == "__main__":
    main()
