# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""``rlinfra.verl.ray_node_logs``'s work on a node: the job id (given, else from the Jobs API), the values to mask,
the files to collect, the kernel's events and the volumes' free space, and the bundle (the choosing, masking and
packing are module_utils/ray/node_logs.py's). Standard library only: this runs on the nodes."""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any, Mapping

from ansible_collections.rlinfra.verl.plugins.module_utils.common.room import free_space
from ansible_collections.rlinfra.verl.plugins.module_utils.node import kernel_log
from ansible_collections.rlinfra.verl.plugins.module_utils.ray import node_logs
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.client import RayClient, RayError


def lookup_job_id(p: Mapping[str, Any], token: str, notes: list[str]) -> str | None:
    """The hex job id of ``p["submission_id"]`` from the Jobs API at ``p["address"]``, None (with a note) when it
    cannot be read: the logs are still collected, without the worker logs."""
    try:
        job = RayClient(
            p["address"], token=token or None, validate_certs=p["validate_certs"], timeout=15, retries=1
        ).get_job(p["submission_id"])
    except RayError as e:
        notes.append("job id not read from the Jobs API: %s" % e)
        return None
    if job is None:
        notes.append("the Jobs API does not know %s: worker logs left out" % p["submission_id"])
        return None
    job_id = (job or {}).get("job_id") if isinstance(job, dict) else None
    if not job_id:
        notes.append("%s has no job_id yet (not started): worker logs left out" % p["submission_id"])
    return job_id or None


def collect_logs(module: Any) -> None:
    """The module: ``module`` (an AnsibleModule with ARGS's checked params) exits with the bundle's path and what it
    holds, or in check mode with what it would hold."""
    p = module.params
    job_id = (p["job_id"] or "").strip().lower()
    maskers = node_logs.name_maskers(p["secret_name_pattern"])
    fact = node_logs.read_fact()
    temp_dir = p["temp_dir"] or fact.get("temp_dir") or node_logs.DEFAULT_TEMP_DIR
    token_path = p["token_path"] or fact.get("token_path") or node_logs.DEFAULT_TOKEN_PATH
    env_files = p["secret_env_files"]
    if env_files is None:
        env_files = [os.path.join(os.path.dirname(token_path), node_logs.SECRETS_ENV_NAME)]

    # Every value to mask; none of them may reach the result (the no_log values are masked by Ansible
    # too, but the ones read here on the node are not module parameters).
    token = node_logs.read_secret_file(token_path)
    values = list(p["secret_values"]) + [token, p["auth_token"]]
    for path in env_files:
        values += node_logs.read_env_file_values(path)
    for value in values:
        if value:
            module.no_log_values.add(value)
    variants = node_logs.secret_variants(values)

    notes: list[str] = []
    source = "given" if job_id else None
    if not job_id and p["address"]:
        job_id = lookup_job_id(p, p["auth_token"] or token, notes)
        source = "jobs_api" if job_id else None
    elif not job_id:
        notes.append("no job_id and no address to look it up: worker logs left out")
    if job_id and not node_logs.JOB_ID_RE.match(job_id):
        notes.append("the Jobs API gave job_id %r, not hex: worker logs left out" % job_id)
        job_id, source = None, None

    latest, every = node_logs.sessions(temp_dir)
    if not every:
        notes.append("no Ray session under %s (Ray never ran here, or another ray_temp_dir)" % temp_dir)
    entries = node_logs.plan(temp_dir, p["submission_id"], job_id, p["extra_patterns"])
    driver_log = next((e["name"] for e in entries if e["name"].rsplit("/", 1)[-1].startswith("job-driver-")), None)

    kernel_text, kernel_source = None, None
    if p["kernel_lines"]:
        kernel_text, kernel_source, kernel_notes = node_logs.kernel_log(
            lambda argv: module.run_command(argv, errors="surrogate_or_replace"), p["kernel_lines"], module.get_bin_path
        )
        if kernel_text is None:
            notes.append("kernel log unavailable (%s)" % "; ".join(kernel_notes))

    max_file = int(p["max_file_mib"] * node_logs.MIB)
    max_total = int(p["max_total_mib"] * node_logs.MIB)
    # What the failure line says of the node (module_utils/verl/failure_causes.py): its kernel's events (Xid, ECC, the OOM
    # killer, links down) and the free space of the run's volumes.
    events = kernel_log.kernel_events(kernel_text.splitlines())[-50:] if kernel_text else []
    # Placed on the clock here, where the log's time zone and boot time are the node's own (the run report's events).
    boot = node_logs.boot_time() if any(e.get("time") for e in events) else None
    for event in events:
        event["epoch"] = kernel_log.event_epoch(event.get("time"), boot)
    volumes = [dict(path=v, free_bytes=(free_space(v) or (None,))[0]) for v in p["volumes"]]
    result = dict(
        changed=False,
        job_id=job_id or None,
        job_id_source=source,
        temp_dir=temp_dir,
        session=latest,
        driver_log=driver_log,
        kernel_source=kernel_source,
        notes=notes,
        kernel_events=events,
        volumes=volumes,
    )
    if module.check_mode:
        files = [
            dict(
                name=e["name"],
                source=e["source"],
                kind=e["kind"],
                size=e["size"],
                kept_bytes=min(e["size"], max_file),
                truncated=e["size"] > max_file,
                redactions=0,
            )
            for e in entries
        ]
        module.exit_json(files=files, skipped=[], redactions=0, **result)

    files, skipped, blobs = node_logs.collect(
        entries, variants, max_file, max_total, kernel=kernel_text, maskers=maskers
    )
    manifest = dict(
        submission_id=p["submission_id"],
        job_id=job_id or None,
        job_id_source=source,
        temp_dir=temp_dir,
        session=latest,
        files=files,
        skipped=skipped,
        kernel_source=kernel_source,
        notes=notes,
        max_file_bytes=max_file,
        max_total_bytes=max_total,
    )
    if p["dest_dir"]:
        try:
            os.makedirs(p["dest_dir"], mode=0o700, exist_ok=True)
        except OSError as e:
            module.fail_json(msg="cannot create dest_dir %s: %s" % (p["dest_dir"], e.strerror))
    bundle_dir = tempfile.mkdtemp(prefix="rlinfra-logs-", dir=p["dest_dir"] or None)
    bundle = os.path.join(bundle_dir, "logs.tar.gz")
    try:
        size = node_logs.pack(
            bundle, blobs, manifest, mtimes={e["name"]: e["mtime"] for e in entries}, root=p["bundle_root"]
        )
    except (OSError, ValueError) as e:
        shutil.rmtree(bundle_dir, ignore_errors=True)
        module.fail_json(msg="cannot write the log bundle in %s: %s" % (bundle_dir, e))
    module.exit_json(
        bundle=bundle,
        bundle_dir=bundle_dir,
        bundle_size=size,
        files=files,
        skipped=skipped,
        redactions=sum(f["redactions"] for f in files),
        **result,
    )
