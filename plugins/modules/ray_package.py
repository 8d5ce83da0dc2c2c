#!/usr/bin/python
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: ray_package
short_description: Upload a working_dir zip to a Ray cluster through the dashboard's package API
version_added: 0.1.0
description:
  - "Makes a zip (built by M(rlinfra.verl.verl_experiment) on the controller and copied to the head)
    available to Ray jobs as C(runtime_env.working_dir: gcs://_ray_pkg_<sha1>.zip), the way
    C(ray job submit --working-dir) does, over plain HTTP (no C(ray) package needed)."
  - C(GET /api/packages/gcs/<name>) tells whether the cluster has it (200) or not (404); when absent
    the zip bytes are sent with C(PUT). Present packages are not sent again (not changed).
  - Ray accepts at most 100 MiB through the dashboard (its aiohttp C(client_max_size)).
author:
  - rlinfra maintainers (@rlinfra)
options:
  uri:
    description:
      - The package URI, C(gcs://_ray_pkg_<sha1 of the zip>.zip).
    type: str
    required: true
  src:
    description:
      - Path of the zip on the host that runs the module. Its sha1 must match O(uri).
      - Only read when the cluster does not have the package yet.
    type: path
    required: true
attributes:
  check_mode:
    support: full
    description: Reports whether the package would be uploaded; uploads nothing.
  diff_mode:
    support: none
    description: Nothing to diff.
seealso:
  - module: rlinfra.verl.ray_job
  - module: rlinfra.verl.verl_experiment
extends_documentation_fragment:
  - rlinfra.verl.ray_dashboard
"""

EXAMPLES = r"""
- name: Make the experiment's working_dir available to Ray jobs
  rlinfra.verl.ray_package:
    address: http://10.0.0.5:8265
    auth_token: "{{ ray_auth_token }}"
    uri: gcs://_ray_pkg_858e70ffff9ae01c139ecdb576950ab8dec0e371.zip
    src: /tmp/_ray_pkg_858e70ffff9ae01c139ecdb576950ab8dec0e371.zip
"""

RETURN = r"""
uri:
  description: The package URI, to use as C(runtime_env.working_dir).
  returned: always
  type: str
  sample: gcs://_ray_pkg_858e70ffff9ae01c139ecdb576950ab8dec0e371.zip
uploaded:
  description: Whether the zip was sent (false when the cluster had it already).
  returned: always
  type: bool
size:
  description: Size of the zip in bytes, when it was read.
  returned: when uploaded
  type: int
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.client import DASHBOARD_ARGS
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.package import RAY_PKG_PREFIX
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.package_upload import upload

ARGS = vocabulary.Args(
    uri=vocabulary.Text(
        empty=False,
        max_len=200,
        pattern=r"^gcs://%s[0-9a-f]{40}\.zip$" % RAY_PKG_PREFIX,
        required=True,
        what="a package URI made by rlinfra, gcs://%s<sha1 of the zip>.zip" % RAY_PKG_PREFIX,
        sample="gcs://%s%s.zip" % (RAY_PKG_PREFIX, "0" * 40),
    ),
    src=vocabulary.AbsPath("reads", required=True),
    **DASHBOARD_ARGS,
)
ARGUMENT_SPEC = ARGS.spec


def main():
    upload(ARGS.new_module(AnsibleModule))


if __name__ == "__main__":
    main()
