# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Options of every module that talks to the Ray dashboard (module_utils/ray/client.py)."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  address:
    description:
      - URL of the Ray dashboard on the head node, as seen from the host that runs the module,
        for example C(http://10.0.0.5:8265).
      - C(http://) is assumed when no scheme is given. Only scheme, host and port; a path, query, fragment or
        credentials are refused.
      - Empty (the default) for the C(dashboard_url) of the C(rlinfra_ray) local fact of the host that runs the
        module (C(/etc/ansible/facts.d/rlinfra_ray.fact), written by site.yml on every node of a cluster). A host
        without that fact, or whose fact is not valid JSON, fails with one line naming the file.
    type: str
    default: ""
  auth_token:
    description:
      - Ray token (clusters started with C(RAY_AUTH_MODE=token)), sent in the C(Authorization) header as a Bearer token.
      - When not set, the file O(auth_token_path) is read; when that is not set either, the C(token_path) of the
        C(rlinfra_ray) local fact; then the E(RAY_AUTH_TOKEN) environment variable, then the file named by
        E(RAY_AUTH_TOKEN_PATH) (the environment of the host that runs the module).
      - Never logged nor returned.
    type: str
  auth_token_path:
    description:
      - File holding the Ray token, read on the host that runs the module (C(/etc/ray/auth_token) on the cluster's
        nodes, written by site.yml), so that the token never travels through the controller.
      - Used when O(auth_token) is not set. An unreadable file is an error.
      - When neither this nor O(auth_token) is set, the C(token_path) of the C(rlinfra_ray) local fact is used.
    type: path
  validate_certs:
    description:
      - Verify the dashboard's TLS certificate when O(address) is C(https://).
    type: bool
    default: true
"""
