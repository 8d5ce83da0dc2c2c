#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: hyperbolic_instance
short_description: Rent Hyperbolic marketplace GPU machines for one Ray cluster, or release them
version_added: 0.9.0
description:
  - O(state=present) makes sure O(count) instances tagged with O(label) are rented. It lists the instances this
    label already has, picks machines for the rest from the marketplace (O(gpu_model), O(gpu_count) free GPUs,
    O(region), at most O(max_price) per GPU-hour, cheapest first), rents them, then waits (at most O(wait_timeout)
    seconds) until every instance of the label is online and answers SSH. It returns the hosts, ready for
    C(ansible.builtin.add_host) (provision.yml does that, the first by name becomes the head).
  - Instances are named C(<label>-0), C(<label>-1), ... and tagged in their C(userMetadata) (C(rlinfra.label),
    C(rlinfra.name)); only instances with this tag are ever counted or released, never others on the account.
  - A second run rents nothing more. "No machine matches" is one line counting what matched at each step, and
    nothing is rented. When a rental, or the wait, fails part-way, what this call rented is released again (unless
    O(keep_partial)) and the one error line says what was released.
  - O(state=absent) releases exactly the instances tagged with O(label) and waits until the API no longer lists them.
  - The API key goes only into the C(Authorization) header of requests to O(api_url); it is never in a message.
  - Runs where the task runs (the controller, in provision.yml and teardown.yml).
author:
  - rlinfra maintainers (@rlinfra)
options:
  state:
    description: Rented or released.
    type: str
    choices: [present, absent]
    default: present
  label:
    description: The tag of this cluster's instances, also the instances' name prefix (1-40 of a-z, 0-9 and -).
    type: str
    required: true
  count:
    description: How many instances O(state=present) makes sure are rented (1 to 256).
    type: int
    default: 1
  gpu_model:
    description:
      - GPU model to rent, matched in the machine's model ignoring case and punctuation (V(H100) matches
        C(NVIDIA-H100-80GB-HBM3)).
      - Required with O(state=present) (empty is refused); V(any) rents any model and then needs O(max_price).
    type: str
    default: ""
  gpu_count:
    description: GPUs per instance (1 to 64); a machine needs that many free.
    type: int
    default: 8
  max_price:
    description:
      - The most to pay, in US dollars per GPU-hour (the listing gives cents per GPU-hour), above 0; unset, any price.
      - Required when O(gpu_model=any).
    type: float
  region:
    description: Only machines in this region (the listing's C(location.region)); empty, any.
    type: str
    default: ""
  wait:
    description: Wait until every instance of the label is online and answers SSH.
    type: bool
    default: true
  wait_timeout:
    description: Seconds to wait for that, or for released instances to leave the listing (1 to 86400).
    type: int
    default: 900
  keep_partial:
    description: When renting fails part-way, keep what this call rented instead of releasing it.
    type: bool
    default: false
  api_key:
    description: Hyperbolic API key. Defaults to the E(HYPERBOLIC_API_KEY) environment variable.
    type: str
  api_url:
    description: Base URL of the API. Defaults to E(HYPERBOLIC_API_URL), else the public API.
    type: str
  validate_certs:
    description: Verify the API's TLS certificate.
    type: bool
    default: true
  timeout:
    description: Seconds per HTTP request (0.1 to 600).
    type: float
    default: 30
attributes:
  check_mode:
    support: full
    description: Lists and picks; says what it would rent (RV(would_rent)) or release, and does neither.
  diff_mode:
    support: none
    description: No diff.
seealso:
  - plugin: rlinfra.verl.hyperbolic
    plugin_type: inventory
"""

EXAMPLES = r"""
- name: Rent three 8xH100 machines for Ray cluster "exp-a"
  rlinfra.verl.hyperbolic_instance:
    label: exp-a
    count: 3
    gpu_model: H100
    max_price: 2.5
  register: rented

- name: Release them
  rlinfra.verl.hyperbolic_instance:
    label: exp-a
    state: absent
"""

RETURN = r"""
instances:
  description: Every instance tagged with the label (after the wait, all online and answering SSH), by name.
  returned: state=present
  type: list
  elements: dict
  sample:
    - name: exp-a-0
      id: respectful-rose-pelican
      status: online
      host: 203.0.113.7
      port: 31522
      user: ubuntu
      gpu_model: NVIDIA-H100-80GB-HBM3
      gpu_count: 8
      region: us-central-1
rented:
  description: Ids of the instances this call rented.
  returned: always
  type: list
  elements: str
released:
  description: Ids of the instances this call released (state=absent, or after a failure part-way).
  returned: always
  type: list
  elements: str
would_rent:
  description: In check mode, the machines it would rent (name, cluster_name, node_name, price_per_gpu_hour).
  returned: check mode with state=present
  type: list
  elements: dict
would_release:
  description: In check mode, the ids it would release.
  returned: check mode with state=absent
  type: list
  elements: str
extra:
  description: How many more instances than O(count) the label has (never released by state=present).
  returned: state=present
  type: int
"""

from ansible.module_utils.basic import AnsibleModule, env_fallback
from ansible_collections.rlinfra.verl.plugins.module_utils import vocabulary as V
from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic import DEFAULT_API_URL, HyperbolicClient, HyperbolicError
from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic_rent import LABEL, Rent


ANY = "any"
ARGS = V.Args(
    state=V.Choice(("present", "absent"), default="present"),
    label=V.Text(empty=False, max_len=40, pattern=LABEL, required=True,
                 what="1-40 lower-case letters, digits and '-' (not at either end)",
                 hint=": it names the instances (<label>-0, <label>-1, ...), their Ray cluster and its hosts"),
    count=V.Int(1, 256, default=1),
    # Empty is refused for state=present after the types (a cross-field rule: main); "any" takes any model.
    gpu_model=V.Text(max_len=80, pattern=r"^[A-Za-z0-9][A-Za-z0-9 _.-]*$",
                     what="a GPU model such as H100 (letters, digits, space, _ . -), or any", default=""),
    gpu_count=V.Int(1, 64, default=8),
    max_price=V.Number(0, above=True, unit="US dollars per GPU-hour"),
    region=V.Name(empty=True, max_len=64, default=""),
    wait=V.Switch(default=True),
    wait_timeout=V.Int(1, 86400, unit="seconds", default=900),
    keep_partial=V.Switch(default=False),
    api_key=V.Secret(env="HYPERBOLIC_API_KEY"),
    api_url=V.Url(schemes=("https", "http"), empty=True, env="HYPERBOLIC_API_URL"),
    validate_certs=V.Switch(default=True),
    timeout=V.Seconds(0.1, 600, default=30),
    _env_fallback=env_fallback,
)
ARGUMENT_SPEC = ARGS.spec


def bad_input(p):
    """One line for the first bad combination of options (the types checked each one), '' when all are good."""
    if p["state"] == "present":
        model = p["gpu_model"].strip()
        if not model:
            return ("gpu_model must name the GPU model to rent (for example H100), or be %s to rent any model, which "
                    "then needs max_price (US dollars per GPU-hour)" % ANY)
        if model.lower() == ANY and p["max_price"] is None:
            return ("gpu_model %s rents any GPU model at any price: set max_price (US dollars per GPU-hour), or name "
                    "the model (for example H100)" % ANY)
    if not p["api_key"]:
        return "no Hyperbolic API key: set HYPERBOLIC_API_KEY in the controller's environment (or api_key)"
    return ""


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    V.enforce(module, ARGS)
    p = module.params
    why = bad_input(p)
    if why:
        module.fail_json(msg="hyperbolic_instance: %s; nothing was rented or released" % why)
    try:
        client = HyperbolicClient(p["api_key"], p["api_url"] or DEFAULT_API_URL, timeout=p["timeout"], validate_certs=p["validate_certs"])
        rent = Rent(client, log=module.log)
        if p["state"] == "absent":
            result = rent.absent(p["label"], check_mode=module.check_mode, timeout=p["wait_timeout"])
        else:
            model = "" if p["gpu_model"].strip().lower() == ANY else p["gpu_model"].strip()
            result = rent.present(p["label"], p["count"], model, p["gpu_count"], p["max_price"], p["region"],
                                  wait=p["wait"], timeout=p["wait_timeout"], keep_partial=p["keep_partial"],
                                  check_mode=module.check_mode)
    except HyperbolicError as exc:
        module.fail_json(msg="hyperbolic_instance (label %s): %s" % (p["label"], exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
