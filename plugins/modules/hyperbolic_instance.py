#!/usr/bin/python
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: hyperbolic_instance
short_description: Rent Hyperbolic GPU machines for one Ray cluster, or release them
version_added: 0.9.0
description:
  - O(state=present) makes sure O(count) rentals of O(label) exist. It lists the rentals this label already has, picks
    what to rent for the rest (O(gpu_model), O(gpu_count) GPUs, O(region), at most O(max_price) per GPU-hour, cheapest
    first), checks the account can pay for it (the balance, and overdraft, must cover O(min_hours) of the whole
    request; the cluster must stay within O(daily_budget)), rents, then waits (at most O(wait_timeout) seconds) until
    every rental of the label is running and answers SSH. It returns the hosts with their hourly price, ready for
    C(ansible.builtin.add_host) (provision.yml does that, the first by name becomes the head).
  - O(api=on_demand) (the default) uses Hyperbolic's current on-demand rental API (rental options, virtual-machine
    rentals labelled C(<label>-0), C(<label>-1), ..., terminate by the rental's id); O(api=marketplace) the v1
    marketplace (machines, instances tagged in their C(userMetadata)). docs/INVENTORY.md says which shape comes from
    which public client.
  - Only rentals named so (or tagged), or listed in the O(record), are ever counted or released, never others on the
    account. A create whose answer is lost (a timeout, a dropped connection, a 5xx) is never sent again; the rentals
    are listed, and one that appeared with its name is adopted, so one request never rents twice.
  - A second run rents nothing more. "No machine matches", a balance that does not cover the request and a budget it
    would exceed are one line each, and nothing is rented. When a rental, or the wait, fails part-way, what this call
    rented is released again (unless O(keep_partial)) and the one error line says what was released.
  - An API that gives two rentals one id (in the answer to a create, or in the listing of the label's rentals) is
    contradictory, never counted as success. The call fails with one line naming the id, releases what this call
    rented, and names any rental of this call the listing still shows (to release in Hyperbolic's console).
  - O(state=absent) releases exactly the label's rentals and waits until the API no longer lists them; one the API no
    longer knows, or knows as terminated already, counts as released, with a note.
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
  api:
    description: Which rental API (docs/INVENTORY.md).
    type: str
    choices: [on_demand, marketplace]
    default: on_demand
  label:
    description: The tag of this cluster's rentals, also their name prefix (1-40 of a-z, 0-9 and -).
    type: str
    required: true
  count:
    description: How many rentals O(state=present) makes sure exist (1 to 256).
    type: int
    default: 1
  gpu_model:
    description:
      - GPU model to rent, matched ignoring case and punctuation (V(H100) matches the on-demand C(h100) and the
        marketplace's C(NVIDIA-H100-80GB-HBM3)).
      - Required with O(state=present) (empty is refused); V(any) rents any model and then needs O(max_price).
    type: str
    default: ""
  gpu_count:
    description: GPUs per rental (1 to 64).
    type: int
    default: 8
  machine_type:
    description: With O(api=on_demand), the kind of rental (the options' C(machineType)).
    type: str
    choices: [virtual-machine, bare-metal]
    default: virtual-machine
  max_price:
    description:
      - The most to pay, in US dollars per GPU-hour, above 0; unset, any price.
      - Required when O(gpu_model=any).
    type: float
  region:
    description: Only this region; empty, any (on-demand rentals always name the chosen option's region).
    type: str
    default: ""
  min_hours:
    description:
      - Hours of the whole request the balance (with its overdraft) must cover before anything is rented.
    type: float
    default: 1
  daily_budget:
    description:
      - US dollars a day the label's rentals may cost together (those already rented and the new ones); unset, no limit.
    type: float
  ssh_public_key:
    description:
      - With O(api=on_demand), the public key the rentals accept (else the one saved in the account).
    type: str
    default: ""
  record:
    description:
      - A JSON file on the host running the module that keeps the label's rentals (id, name, hourly price, GPUs,
        region, when rented); rentals it lists count as the label's even where the API keeps no name, and their price
        is kept for the run's cost. Written 0600 after O(state=present), emptied of what O(state=absent) released.
      - Empty (the default), no record.
    type: path
    default: ""
  replace:
    description:
      - With O(state=present), rentals of O(label) (their ids) to give back first - unfit machines - and wait until the
        API no longer lists them; what is rented then takes their names again (the lowest free C(<label>-<n>)), so
        the inventory's hosts keep their names on the new machines (provision.yml C(-e replace_unfit=true)).
      - An id that is not a rental of O(label) is refused in one line, and nothing is released or rented.
    type: list
    elements: str
    default: []
  head_record:
    description:
      - The text of the head's copy of the record (provision.yml copies the record to C(/etc/rlinfra/hyperbolic-<label>.json)
        on the cluster's head; teardown.yml reads it there), merged with O(record).
      - Where O(record) does not exist (the controller that rented is gone, for example an AWX job's container), the
        head's copy is written there first. A damaged copy is a warning, and only the API's names count.
    type: str
    default: ""
  wait:
    description: Wait until every rental of the label is running and answers SSH.
    type: bool
    default: true
  wait_timeout:
    description: Seconds to wait for that, or for released rentals to leave the listing (1 to 86400).
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
    description: Lists, picks and checks the money; says what it would rent (RV(would_rent)) or release, and does neither.
  diff_mode:
    support: none
    description: No diff.
seealso:
  - plugin: rlinfra.verl.hyperbolic
    plugin_type: inventory
"""

EXAMPLES = r"""
- name: Rent three 8xH100 machines for Ray cluster "exp-a", if the balance covers two hours of them
  rlinfra.verl.hyperbolic_instance:
    label: exp-a
    count: 3
    gpu_model: H100
    max_price: 3.5
    min_hours: 2
    record: ~/.rlinfra/hyperbolic/exp-a.json
  register: rented

- name: Release them
  rlinfra.verl.hyperbolic_instance:
    label: exp-a
    state: absent
    record: ~/.rlinfra/hyperbolic/exp-a.json

- name: The same on the v1 marketplace
  rlinfra.verl.hyperbolic_instance:
    api: marketplace
    label: exp-b
    count: 2
    gpu_model: H100
"""

RETURN = r"""
replaced:
  description: The rentals given back to be replaced (O(replace)).
  returned: with state=present
  type: list
  elements: str
instances:
  description: Every rental of the label (after the wait, all running and answering SSH), by name, with its price.
  returned: state=present
  type: list
  elements: dict
  sample:
    - name: exp-a-0
      id: "18025"
      status: running
      host: 203.0.113.7
      port: 22
      user: ubuntu
      gpu_model: h100
      gpu_count: 8
      region: us-east-1
      cost_per_hour: 25.52
api:
  description: The API used.
  returned: always
  type: str
cost_per_hour:
  description: US dollars an hour the label's rentals cost together, when their prices are known.
  returned: state=present
  type: float
rented:
  description: Ids of the rentals this call rented (an adopted one, whose answer was lost, included).
  returned: always
  type: list
  elements: str
released:
  description: Ids of the rentals this call released (state=absent, or after a failure part-way).
  returned: always
  type: list
  elements: str
notes:
  description: What a release found (a rental already terminated, or gone).
  returned: state=absent
  type: list
  elements: str
would_rent:
  description: In check mode, what it would rent (name, where, gpu_type, gpu_count, region, price_per_gpu_hour,
    cents_per_hour).
  returned: check mode with state=present
  type: list
  elements: dict
would_release:
  description: In check mode, the ids it would release.
  returned: check mode with state=absent
  type: list
  elements: str
extra:
  description: How many more rentals than O(count) the label has (never released by state=present).
  returned: state=present
  type: int
"""

from ansible.module_utils.basic import AnsibleModule, env_fallback

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic.instance import instance
from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic.rent import (
    APIS,
    GPU_MODEL,
    LABEL,
    MAX_GPUS,
    MAX_INSTANCES,
    MAX_PRICE,
)

ARGS = vocabulary.Args(
    state=vocabulary.Choice(("present", "absent"), default="present"),
    api=vocabulary.Choice(APIS, default="on_demand"),
    label=vocabulary.Text(
        empty=False,
        max_len=40,
        pattern=LABEL,
        required=True,
        what="1-40 lower-case letters, digits and '-' (not at either end)",
        hint=": it names the instances (<label>-0, <label>-1, ...), their Ray cluster and its hosts",
    ),
    count=vocabulary.Int(1, MAX_INSTANCES, default=1),
    # Empty is refused for state=present after the types (a cross-field rule: module_utils/hyperbolic/instance.py's
    # bad_input); "any" takes any model.
    gpu_model=vocabulary.Text(
        max_len=80,
        pattern=GPU_MODEL,
        what="a GPU model such as H100 (letters, digits, space, _ . -), or any",
        default="",
    ),
    gpu_count=vocabulary.Int(1, MAX_GPUS, default=8),
    machine_type=vocabulary.Choice(("virtual-machine", "bare-metal"), default="virtual-machine"),
    max_price=vocabulary.Number(0, MAX_PRICE, above=True, unit="US dollars per GPU-hour"),
    region=vocabulary.Name(empty=True, max_len=64, default=""),
    min_hours=vocabulary.Number(0, 24 * 365, default=1),
    daily_budget=vocabulary.Number(0, above=True, unit="US dollars"),
    ssh_public_key=vocabulary.Text(
        max_len=16384,
        pattern=r"^(ssh|ecdsa)-[A-Za-z0-9-]+ [A-Za-z0-9+/=]+( .*)?$|^$",
        what="one OpenSSH public key line (ssh-ed25519 AAAA... comment)",
        default="",
    ),
    record=vocabulary.AbsPath("writes", empty=True, default=""),
    replace=vocabulary.ListOf(
        vocabulary.Text(empty=False, max_len=80, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]*$", what="a rental id"),
        default=[],
    ),
    head_record=vocabulary.Text(
        max_len=4 * 1024 * 1024, empty=True, default="", lines=True, what="the text of the head's record (JSON)"
    ),
    wait=vocabulary.Switch(default=True),
    wait_timeout=vocabulary.Int(1, 86400, unit="seconds", default=900),
    keep_partial=vocabulary.Switch(default=False),
    api_key=vocabulary.Secret(env="HYPERBOLIC_API_KEY"),
    api_url=vocabulary.Url(schemes=("https", "http"), empty=True, env="HYPERBOLIC_API_URL"),
    validate_certs=vocabulary.Switch(default=True),
    timeout=vocabulary.Seconds(0.1, 600, default=30),
    _env_fallback=env_fallback,
)
ARGUMENT_SPEC = ARGS.spec


def main():
    instance(ARGS.new_module(AnsibleModule))


if __name__ == "__main__":
    main()
