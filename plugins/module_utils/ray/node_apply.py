# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The work of module rlinfra.verl.ray_node: one Ray node converged in one call - its directories, token, ray.env and
ray-secrets.env, the firewall table (before Ray may start), the unit with the GPU count, the restart decision and its
guard under running jobs, the start, the wait, the local fact and the restart record. GPU detection, files, systemd
and the port wait are module_utils/ray/node.py; the firewall's I/O nft.py; the restart reasons node_state.py.
Standard library only.

It needs AnsibleModule itself (``fail_json``/``exit_json`` end the call, ``_diff`` asks for the files' changes): the
module passes it in (:func:`converge`)."""

from __future__ import annotations

import os
import pwd
import re
import time
from collections.abc import Callable
from typing import Any

from ansible_collections.rlinfra.verl.plugins.module_utils.common import owned, vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.common.files import env_items
from ansible_collections.rlinfra.verl.plugins.module_utils.node import container
from ansible_collections.rlinfra.verl.plugins.module_utils.node.python_env import read_json
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.client import RayAuthError, RayError, client_from_module
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.nft import (
    BOOT_UNIT,
    BOOT_UNIT_NAME,
    Nft,
    ancestor_env,
    install_nft,
    present,
    read_text,
)
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.node import (
    NUM_GPUS_PLACEHOLDER,
    Systemd,
    amd_env,
    close_logs,
    detect_gpus,
    ensure_dir,
    fact_text,
    file_diff,
    open_logs,
    poll_until,
    put,
    wait_for_port,
)
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.node_state import (
    part_digests,
    record_content,
    restart_reasons,
)

# What ray_firewall takes when an option of ray_node's ``firewall`` is not set (the table's path is in config_dir).
FIREWALL_DEFAULTS = dict(
    controller="", ssh_connection="", allow=[], protected_ports=[22], table="rlinfra_ray", members=[]
)
POLL_START = 0.2


def check_num_gpus(value: str) -> str:
    """ray_node's ``num_gpus`` (vocabulary.Custom): ``auto``, or a whole number of GPUs up to vocabulary.MAX_GPUS."""
    if value != "auto" and not (re.fullmatch(r"[0-9]{1,4}", value or "") and int(value) <= vocabulary.MAX_GPUS):
        raise vocabulary.Bad("be auto or a whole number of GPUs from 0 to %d" % vocabulary.MAX_GPUS)
    return value


class Node:
    def __init__(self, module: Any) -> None:
        self.module = module
        self.p = module.params
        self.check = module.check_mode
        self.files: list[str] = []
        # --diff: each file's change, secrets' content hidden
        self.diff: list[dict[str, str]] | None = [] if module._diff else None
        self.parts: dict[str, str] = {}  # set by reasons()
        self.fingerprint: Any = None  # set by reasons()
        try:
            self.uid = pwd.getpwnam(self.p["user"]).pw_uid
        except KeyError:
            module.fail_json(
                msg="ray_user %r does not exist on this node: create it first or set ray_user" % self.p["user"]
            )
        self.unit_path = os.path.join(self.p["unit_dir"], "ray-%s.service" % self.p["role"])
        self.state_path = os.path.join(self.p["config_dir"], "rlinfra-state.json")

    def put(self, path: str, text: str, mode: int, uid: int | None = None) -> bool:
        if put(path, text, mode, uid, self.check, self.diff):
            self.files.append(path)
            return True
        return False

    def ensure_dir(self, path: str, mode: int, uid: int | None = None, keep_mode: bool = False) -> None:
        try:
            changed = ensure_dir(path, mode, uid, self.check, keep_mode)
        except OSError as e:
            self.module.fail_json(msg="%s cannot be used: %s" % (path, e.strerror or e))
        if changed:
            self.files.append(path)

    def firewall(self, systemd: Any) -> dict[str, Any]:
        """Fence Ray's ports before Ray (re)starts, so that it never listens unfenced; the result of the firewall
        part."""
        fw: dict[str, Any] = dict(FIREWALL_DEFAULTS, path=os.path.join(self.p["config_dir"], "rlinfra-firewall.nft"))
        fw.update((k, v) for k, v in self.p["firewall"].items() if v is not None)
        result: dict[str, Any] = dict(changed=False, active=False)
        nft = Nft(self.module)
        if not nft.path:
            result["installed_nft"] = True
            if self.check:
                result["changed"] = True
            else:
                why = install_nft(self.module)
                nft = Nft(self.module)
                result["changed"] = bool(nft.path)
                if why:
                    result["install_error"] = why
        if not fw["controller"] and not fw["ssh_connection"]:
            fw["ssh_connection"] = ancestor_env("SSH_CONNECTION")
        # --diff: the rules file is written by the firewall's own code (nft checks it first), not by put.
        before = read_text(fw["path"]) if self.diff is not None else None
        old_mode = os.stat(fw["path"]).st_mode & 0o7777 if before is not None else None
        present(self.module, nft, fw, result)
        if self.diff is not None and result["active"] and result.get("rules") not in (None, before):
            self.diff.append(file_diff(fw["path"], before, result["rules"], old_mode, 0o600))
        result["nft"] = nft.path
        unit_changed = False
        if result["active"]:
            unit = BOOT_UNIT.format(table=fw["table"], path=fw["path"], nft=nft.path or "/usr/sbin/nft")
            unit_changed = self.put(os.path.join(self.p["unit_dir"], BOOT_UNIT_NAME), unit, 0o644)
            if unit_changed and not self.check:
                systemd.run("daemon-reload")
            if not systemd.enabled(BOOT_UNIT_NAME):
                # Enabled, not started: the table is applied already; the unit only matters at the next boot.
                result["changed"] = True
                if not self.check:
                    systemd.run("enable", BOOT_UNIT_NAME)
        return result

    def reasons(self, active: bool, unit_changed: bool, env_changed: bool, token_changed: bool) -> list[str]:
        p = self.p
        record = read_json(self.state_path) if os.path.exists(self.state_path) else None
        env_record = read_json(p["python_env_state"]) if p["python_env_state"] else None
        self.parts = part_digests(p["restart_inputs"])
        self.fingerprint = (env_record or {}).get("fingerprint")
        if not active:
            return []  # nothing to restart: it starts with what it should run
        reasons = restart_reasons(record, self.parts, self.fingerprint)
        reasons += (["unit file"] if unit_changed else []) + (["environment files"] if env_changed else [])
        reasons += ["token file"] if token_changed else []
        if self.check:
            reasons += [r for r in p["foreseen"] if r not in reasons]
        return reasons

    def guard(self, reasons: list[str]) -> None:
        p = self.p
        if not reasons or not p["running_jobs"] or p["restart_running_jobs"]:
            return
        # The files are new already: without a record the next run foresees the restart (and refuses it or makes it).
        if not self.check and os.path.exists(self.state_path):
            os.unlink(self.state_path)
        self.module.fail_json(
            msg="Ray on this node must restart (%s) but job(s) %s run on its cluster, which the check before the run "
            "did not foresee; its files are updated, Ray is not restarted: stop the job(s) first (ansible-playbook "
            "stop.yml -e exp=NAME) or re-run with -e ray_restart_running_jobs=true to restart anyway."
            % (", ".join(reasons), ", ".join(p["running_jobs"])),
            files=self.files,
            reasons=reasons,
        )

    def wait_container(self, started_at: float) -> None:
        """Container mode: the engine runs the unit's container from the unit's image, within the timeout. Without it
        a head whose old container outlived its stop (or a start that failed) still answers on the GCS port, and a run
        would report a new image that no node runs."""
        p, box = self.p, self.p["fact"].get("container") or {}
        want = str(box.get("image_id") or "").rsplit(":", maxsplit=1)[-1]
        if not want:
            return
        argv = [box["engine_path"], "container", "inspect", "--format", "{{.Image}} {{.State.Running}}", box["name"]]

        def check() -> tuple[bool, str]:
            rc, out, dummy = self.module.run_command(argv)
            words = out.split() if rc == 0 else []
            if len(words) != 2:
                return False, "no container of that name"
            image, running = words[0].rsplit(":", maxsplit=1)[-1], words[1].lower() == "true"
            return image.startswith(want[:12]) and running, "image %s, %s" % (
                image[:12],
                "running" if running else "not running",
            )

        seen = poll_until(check, started_at + p["timeout"], POLL_START)
        if seen:
            self.module.fail_json(
                msg="Ray's container %s on this node is not running image %s %ss after its start (%s): see "
                "journalctl -u ray-%s and %s ps -a, then run site.yml again"
                % (box["name"], want[:12], p["timeout"], seen, p["role"], box["engine_path"]),
                files=self.files,
            )

    def wait_alive(self) -> None:
        p = self.p
        try:
            client = client_from_module(self.module, retries=0)
        except RayError as exc:
            self.module.fail_json(msg=str(exc))

        def check() -> tuple[bool, str]:
            try:
                nodes = client.list_nodes()
            except RayAuthError as exc:
                self.module.fail_json(msg=str(exc))
            except RayError as exc:
                return False, str(exc)
            if any(n.get("node_ip") == p["node_ip"] and n.get("state") == "ALIVE" for n in nodes):
                return True, ""
            return False, "the dashboard does not list %s alive" % p["node_ip"]

        last = poll_until(check, time.monotonic() + p["timeout"], POLL_START)
        if last:
            self.module.fail_json(
                msg="Ray on this node (%s) is not alive in its cluster after %ss: %s; see "
                "journalctl -u ray-%s and %s/session_latest/logs"
                % (p["node_ip"], p["timeout"], last, p["role"], p["temp_dir"]),
                files=self.files,
            )


def rocm_smi(module: Any) -> Callable[[], str | None] | None:
    """A call of ``rocm-smi --showid --json`` when the tool is installed (its output, None when it fails)."""
    path = module.get_bin_path("rocm-smi")
    if not path:
        return None

    def call() -> str | None:
        rc, out, dummy = module.run_command([path, "--showid", "--json"])
        return out if rc == 0 else None

    return call


def converge(module: Any) -> None:
    """The whole of module ray_node for AnsibleModule ``module`` (its arguments checked): ends the module with its
    result."""
    p = module.params
    for wait, key in (("alive", "node_ip"), ("gcs", "gcs_address")):
        if p["wait"] == wait and not p[key].strip():
            module.fail_json(msg="%s must be given with wait=%s (or set wait=none)" % (key, wait), changed=False)
    node = Node(module)
    systemd = Systemd(module)
    service = "ray-%s.service" % p["role"]
    cfg = p["config_dir"]
    vendor, found = detect_gpus(rocm_smi=rocm_smi(module))
    gpus = found if p["num_gpus"] == "auto" else p["num_gpus"]
    env = p["env"]
    if vendor == "amd":
        extra, error = amd_env(env, p["secret_env"], p["rocm_env"], gpus if str(gpus).isdigit() else 0)
        if error:
            module.fail_json(msg=error)
        env += extra

    node.ensure_dir(cfg, 0o755)
    node.ensure_dir(p["temp_dir"], 0o700, node.uid, keep_mode=True)  # Ray loosens its tree on start: left alone then
    if not module.check_mode:
        owned.claim(p["temp_dir"], 0o700)  # a purge removes it only when made here (or empty): owned.claim
    token_changed = bool(p["token"]) and node.put(os.path.join(cfg, "auth_token"), p["token"], 0o600, node.uid)
    if p["metrics_dir"] or p["metrics_password"]:
        node.ensure_dir(os.path.join(cfg, "metrics"), 0o755)
    if p["metrics_password"]:
        # Before the environment that carries it (RAY_PROMETHEUS_HEADERS): a run that fails in between leaves the two
        # in step. Not a reason to restart: Ray reads it from that environment.
        node.put(os.path.join(cfg, "metrics", "password"), p["metrics_password"], 0o600, node.uid)
    env_changed = node.put(os.path.join(cfg, "ray.env"), env, 0o644)
    env_changed = node.put(os.path.join(cfg, "ray-secrets.env"), p["secret_env"], 0o600, node.uid) or env_changed
    firewall = node.firewall(systemd) if p["firewall"] is not None else {}
    unit = p["unit"].replace(NUM_GPUS_PLACEHOLDER, str(gpus))
    if p["container_engine"]:
        names = [name for name, dummy in env_items(env)] + [name for name, dummy in env_items(p["secret_env"])]
        unit = unit.replace(container.ARGS_PLACEHOLDER, container.node_args(p["container_engine"], vendor, gpus, names))
    unit_changed = node.put(node.unit_path, unit, 0o644)

    active = systemd.active(service)
    reasons = node.reasons(active, unit_changed, env_changed, token_changed)
    node.guard(reasons)
    enabled = systemd.enabled(service)
    started = bool(reasons) or not active
    if not module.check_mode:
        if unit_changed:
            systemd.run("daemon-reload")
        if not enabled:
            systemd.run("enable", service)
        if started and p["role"] == "worker" and p["gcs_address"]:
            why = wait_for_port(p["gcs_address"], p["timeout"])
            if why:
                module.fail_json(
                    msg="this worker's Ray was not started: its head's GCS at %s; start the head's Ray "
                    "first (site.yml starts each head before its workers), then run again" % why,
                    files=node.files,
                )
        if started:
            started_at = time.monotonic()
            systemd.run("restart" if reasons else "start", service)
            if p["container_engine"]:
                node.wait_container(started_at)

    opened = [] if module.check_mode else open_logs(p["temp_dir"])
    close_logs(opened)
    node.ensure_dir(os.path.dirname(p["fact_path"]), 0o755)
    node.put(p["fact_path"], fact_text(p["fact"]), 0o644)

    if not module.check_mode and (started or p["wait"] == "alive"):
        if p["wait"] == "alive":
            node.wait_alive()
        elif p["wait"] == "gcs":
            why = wait_for_port(p["gcs_address"], p["timeout"])
            if why:
                module.fail_json(
                    msg="Ray's GCS on this node: %s; see journalctl -u %s" % (why, service), files=node.files
                )
    # What Ray now runs: a run that changed something but failed before this point restarts it next time.
    node.put(node.state_path, record_content(node.parts, node.fingerprint), 0o600)
    changed = bool(node.files or firewall.get("changed") or started or opened or not enabled)
    diff = dict(diff=node.diff) if node.diff else {}
    module.exit_json(
        changed=changed,
        gpus=int(gpus) if str(gpus).isdigit() else gpus,
        gpu_vendor=vendor,
        files=node.files,
        reasons=reasons,
        started=started,
        firewall=firewall,
        closed_logs=len(opened),
        **diff,
    )
