# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""``rlinfra.verl.hyperbolic_instance``'s work: its options' cross-field rules, the controller's record (and the
head's copy of it) read, the rentals made or released through module_utils/hyperbolic/rent.py, the record updated."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic import record as hyperbolic_record
from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic.client import (
    DEFAULT_API_URL,
    HyperbolicClient,
    HyperbolicError,
)
from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic.rent import Rent

# gpu_model's word for any model.
ANY = "any"


def bad_input(p: Mapping[str, Any]) -> str:
    """One line for the first bad combination of options (the types checked each one), '' when all are good."""
    if p["state"] == "present":
        model = p["gpu_model"].strip()
        if not model:
            return (
                "gpu_model must name the GPU model to rent (for example H100), or be %s to rent any model, which "
                "then needs max_price (US dollars per GPU-hour)" % ANY
            )
        if model.lower() == ANY and p["max_price"] is None:
            return (
                "gpu_model %s rents any GPU model at any price: set max_price (US dollars per GPU-hour), or name "
                "the model (for example H100)" % ANY
            )
    if not p["api_key"]:
        return "no Hyperbolic API key: set HYPERBOLIC_API_KEY in the controller's environment (or api_key)"
    return ""


def instance(module: Any) -> None:
    """The module's work, with its AnsibleModule (``state``: present rents, absent releases); exits through
    ``module``."""
    p = module.params
    why = bad_input(p)
    if why:
        module.fail_json(msg="hyperbolic_instance: %s; nothing was rented or released" % why)
    try:
        record = hyperbolic_record.read(p["record"], p["label"])
    except ValueError as exc:
        module.fail_json(msg="hyperbolic_instance (label %s): %s; nothing was rented or released" % (p["label"], exc))
    if p["head_record"].strip():
        try:
            head = hyperbolic_record.parse(p["head_record"], p["label"], "the head's copy of the record")
        except ValueError as exc:
            module.warn("%s; using the controller's record and the API's names only" % exc)
            head = {}
        # This API's rentals only: teardown.yml calls once per API with the same copy, and a copy of rentals another
        # call released must not come back.
        head = hyperbolic_record.of_api(head, p["api"])
        # The controller that rented may be gone (an AWX job's container): the head's copy becomes the controller's.
        if head.get("rentals") and p["record"] and not record and not module.check_mode:
            hyperbolic_record.write(p["record"], head)
        record = hyperbolic_record.merged(record, head)
    try:
        client = HyperbolicClient(
            p["api_key"], p["api_url"] or DEFAULT_API_URL, timeout=p["timeout"], validate_certs=p["validate_certs"]
        )
        rent = Rent(client, log=module.log, api=p["api"], record_ids=hyperbolic_record.ids(record, p["api"]))
        if p["state"] == "absent":
            result = rent.absent(p["label"], check_mode=module.check_mode, timeout=p["wait_timeout"])
        else:
            model = "" if p["gpu_model"].strip().lower() == ANY else p["gpu_model"].strip()
            result = rent.present(
                p["label"],
                p["count"],
                model,
                p["gpu_count"],
                p["max_price"],
                p["region"],
                wait=p["wait"],
                timeout=p["wait_timeout"],
                keep_partial=p["keep_partial"],
                check_mode=module.check_mode,
                min_hours=p["min_hours"],
                daily_budget=p["daily_budget"],
                machine_type=p["machine_type"],
                ssh_public_key=p["ssh_public_key"],
                replace=p["replace"],
            )
    except HyperbolicError as exc:
        module.fail_json(msg="hyperbolic_instance (label %s): %s" % (p["label"], exc))
    if p["record"] and not module.check_mode:
        try:
            hyperbolic_record.update(p["record"], p["label"], p["api"], result)
        except OSError as exc:
            module.warn(
                "the record %s could not be written (%s): the rentals are %s"
                % (p["record"], exc.strerror or exc, ", ".join(i["id"] for i in result.get("instances") or []))
            )
    if result.get("instances"):
        result["instances"] = hyperbolic_record.priced(
            result["instances"], hyperbolic_record.read(p["record"], p["label"]) if p["record"] else record
        )
    module.exit_json(**result)
