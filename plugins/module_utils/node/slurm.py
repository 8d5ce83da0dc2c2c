# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# mypy: allow-redefinition
# (Slurm.call rebinds its *argv, a tuple, to the list of the command's words)
"""A Slurm job's nodes, read through Slurm's own client tools, for the ``rlinfra.verl.slurm`` inventory plugin.

``scontrol show job`` (``--json`` where the installed Slurm offers it, else its one-line ``-o`` form),
``squeue`` to find a job by name, ``scontrol show hostnames`` to expand the node list exactly as Slurm does and
``scontrol show node -o`` for each node's address. The tools run on the controller, or on a login node over SSH
(``login_host``) when the controller has none. A job that is pending, has ended or is unknown is one line saying
so and what to do.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from typing import Any, Callable, Iterable, Mapping, Sequence

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary

RUNNING = ("RUNNING",)
WAITING = (
    "PENDING",
    "CONFIGURING",
    "REQUEUED",
    "REQUEUE_HOLD",
    "REQUEUE_FED",
    "RESIZING",
    "SUSPENDED",
    "STOPPED",
    "SIGNALING",
    "STAGE_OUT",
)
JOB_ID_RE = re.compile(r"^[0-9]+(?:_[0-9]+)?$")
# "Key=value Key2=value with spaces ..." (scontrol -o): a key is a word followed by '=' after a space.
_FIELD_RE = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_:/.]*)=")


class SlurmError(Exception):
    """One clear line: what Slurm said about the job, and what to do."""


def parse_oneliner(line: str) -> dict[str, str]:
    """``scontrol show ... -o`` output (one record) -> dict of its fields."""
    out = {}
    marks = list(_FIELD_RE.finditer(line))
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(line)
        out[m.group(1)] = line[m.end() : end].strip()
    return out


def _state(value: object) -> str:
    """The base state of a state word (text gives RUNNING)."""
    return str(value or "").split()[0].upper() if value else ""


def _json_state(job: Mapping[str, Any], job_id: str) -> str:
    """The state of ``scontrol --json`` / ``squeue --json``: "RUNNING" before 23.02, ["RUNNING"] since (the base state
    first, flags such as COMPLETING after it). Anything else is refused: read as a state, a mapping or a number was
    "has ended" (or, by some other reading, running)."""
    value = job.get("job_state")
    words = value if isinstance(value, list) else [value]
    if words and all(isinstance(w, str) and w.strip() for w in words):
        return _state(words[0])
    fix = "neither running nor ended is read from it; see the job with scontrol show job %s" % job_id
    if "job_state" not in job:
        raise SlurmError("Slurm answered no job_state for job %s: %s" % (job_id, fix))
    if isinstance(value, list):
        bad = next((w for w in value if not isinstance(w, str) or not w.strip()), None) if value else None
        kind = (
            "an empty list"
            if not value
            else "a list holding %s" % ("empty text" if isinstance(bad, str) else vocabulary.type_word(bad))
        )
    else:
        kind = "empty text" if isinstance(value, str) else vocabulary.type_word(value)
    shown = (
        ""
        if value in (None, "", []) or vocabulary.credential_strings(value)
        else " (%s)" % vocabulary._short(repr(value), 60)
    )
    raise SlurmError(
        'Slurm answered job_state as %s for job %s%s, which is not a state ("RUNNING", or '
        '["RUNNING", ...] from Slurm 23.02 on): %s' % (kind, job_id, shown, fix)
    )


def job_from_json(data: Any, job_id: str) -> dict[str, Any] | None:
    """The job of ``scontrol --json show job ID``, as the fields the inventory needs."""
    jobs = data.get("jobs") if isinstance(data, dict) else None
    # Another shape (a mapping, a string, an item that is no mapping) is an answer this reader does not know: the
    # text form is read instead, as for a Slurm without --json.
    if not isinstance(jobs, list) or not jobs or not isinstance(jobs[0], dict):
        return None
    j = jobs[0]
    gpus = gpus_from_tres(str(j.get("tres_per_node") or ""), str(j.get("tres_alloc_str") or ""), j.get("node_count"))

    def text(key):  # a field of another type (a mapping where text belongs) reads as missing
        return j.get(key) if isinstance(j.get(key), str) else ""

    return {
        "job_id": str(j.get("job_id", job_id)),
        "name": text("name"),
        "state": _json_state(j, job_id),
        "reason": text("state_reason"),
        "partition": text("partition"),
        "nodes": text("nodes"),
        "user": text("user_name"),
        "gpus_per_node": gpus,
    }


def job_from_text(text: str, job_id: str) -> dict[str, Any] | None:
    """The job of ``scontrol show job -o ID``."""
    line = next((line for line in text.splitlines() if line.strip().startswith("JobId=")), None)
    if line is None:
        return None
    f = parse_oneliner(line.strip())
    nodes = f.get("NodeList") or ""
    gpus = gpus_from_tres(f.get("TresPerNode") or "", f.get("AllocTRES") or f.get("TRES") or "", f.get("NumNodes"))
    return {
        "job_id": f.get("JobId", job_id),
        "name": f.get("JobName") or "",
        "state": _state(f.get("JobState")),
        "reason": f.get("Reason") or "",
        "partition": f.get("Partition") or "",
        "nodes": "" if nodes in ("(null)", "None assigned") else nodes,
        "user": (f.get("UserId") or "").split("(")[0],
        "gpus_per_node": gpus,
    }


def gpus_from_tres(per_node: str | None, alloc: str | None, node_count: object) -> int:
    """GPUs per node: the job's per-node request (``gres:gpu:8``, ``gres/gpu:h100:8``), else its allocation
    (``gres/gpu=16``) over its nodes; 0 without GPUs."""
    m = re.search(r"gres[:/]gpu(?::[A-Za-z0-9_.-]+)?[:=](\d+)", per_node or "")
    if m:
        return int(m.group(1))
    m = re.search(r"gres/gpu=(\d+)", alloc or "")
    try:
        nodes = int(str(node_count).split("-", maxsplit=1)[0]) if node_count not in (None, "") else 1
    except ValueError:
        nodes = 1
    if m and nodes > 0:
        return int(m.group(1)) // nodes
    return 0


def check_state(job: Mapping[str, Any]) -> None:
    """Raise the one line for a job whose nodes cannot be used now."""
    state, ident = job["state"], "Slurm job %s%s" % (job["job_id"], " (%s)" % job["name"] if job["name"] else "")
    if state in RUNNING and job["nodes"]:
        return
    if state in WAITING or (state in RUNNING and not job["nodes"]):
        raise SlurmError(
            "%s is %s%s: it has no nodes yet; wait until it runs (squeue -j %s), then re-run"
            % (
                ident,
                state or "not running",
                " (reason: %s)" % job["reason"] if job["reason"] not in ("", "None") else "",
                job["job_id"],
            )
        )
    raise SlurmError(
        "%s has ended (%s): allocate again (salloc, or sbatch --wrap 'sleep infinity') and point the "
        "inventory at the new job" % (ident, state or "no state")
    )


class Slurm:
    """Slurm's client tools, here or on ``login_host`` over ssh."""

    def __init__(
        self,
        login_host: str = "",
        ssh_args: Iterable[str] | None = None,
        timeout: float = 30,
        run: Callable[[Sequence[str], float], tuple[int, str, str]] | None = None,
    ):
        self.login_host = login_host or ""
        self.ssh_args = list(ssh_args or [])
        self.timeout = timeout
        self._run = run or _run

    def call(self, *argv: str) -> tuple[int, str, str]:
        """(rc, stdout, stderr) of one Slurm command."""
        argv = list(argv)
        where = "on %s" % self.login_host if self.login_host else "here"
        if self.login_host:
            argv = ["ssh", *self.ssh_args, self.login_host, "--", " ".join(shlex.quote(a) for a in argv)]
        try:
            rc, out, err = self._run(argv, self.timeout)
        except FileNotFoundError:
            raise SlurmError(
                "%s is not installed %s: install Slurm's client tools (slurm-client) or set login_host to a "
                "node that has them" % (argv[0], where)
            ) from None
        except subprocess.TimeoutExpired:
            raise SlurmError(
                "%s %s gave no answer in %d s: is slurmctld up (scontrol ping)?" % (argv[0], where, self.timeout)
            ) from None
        if self.login_host and rc == 255:
            raise SlurmError("cannot reach the login node %s over ssh: %s" % (self.login_host, _last(err)))
        if self.login_host and rc == 127:
            raise SlurmError(
                "%s is not installed on %s: install Slurm's client tools there" % (argv[-1].split()[0], self.login_host)
            )
        return rc, out, err

    def job(self, job_id: str | int) -> dict[str, Any]:
        job_id = str(job_id).strip()
        if not JOB_ID_RE.match(job_id):
            raise SlurmError("job_id %r is not a Slurm job id (digits, e.g. 4242)" % job_id)
        rc, out, err = self.call("scontrol", "--json", "show", "job", job_id)
        if rc == 0:
            try:
                job = job_from_json(json.loads(out), job_id)
            except ValueError:
                job = None
            if job is not None:
                return job
        rc, out, err = self.call("scontrol", "-o", "show", "job", job_id)
        if rc != 0 or not out.strip():
            if "invalid job id" in (err + out).lower():
                raise SlurmError(
                    "Slurm job %s is unknown to slurmctld (it ended long ago, or never existed): check the id "
                    "with squeue --me" % job_id
                )
            raise SlurmError("scontrol show job %s failed: %s" % (job_id, _last(err or out)))
        job = job_from_text(out, job_id)
        if job is None:
            raise SlurmError("scontrol show job %s answered no job: %s" % (job_id, _last(out)))
        return job

    def job_id_by_name(self, name: str) -> str:
        rc, out, err = self.call(
            "squeue",
            "--noheader",
            "--name",
            name,
            "--format",
            "%i %T",
            "--states",
            "PENDING,RUNNING,CONFIGURING,SUSPENDED,REQUEUED",
        )
        if rc != 0:
            raise SlurmError("squeue --name %s failed: %s" % (name, _last(err or out)))
        # "%i %T": the id and the state; a line of another shape is shown as it is, never unpacked
        found = sorted(
            ((line.split() + [""])[:2] for line in out.splitlines() if line.strip()),
            key=lambda f: [int(x) for x in re.findall(r"\d+", f[0])],
        )
        if not found:
            raise SlurmError(
                "no pending or running Slurm job is named %r (squeue --name %s): allocate one, e.g. "
                "sbatch --job-name %s --nodes N --wrap 'sleep infinity'" % (name, name, name)
            )
        if len(found) > 1:
            raise SlurmError(
                "%d Slurm jobs are named %r (%s): set job_id to the one to use"
                % (len(found), name, ", ".join("%s %s" % (i, s) for i, s in found))
            )
        return found[0][0]

    def hostnames(self, nodelist: str) -> list[str]:
        rc, out, err = self.call("scontrol", "show", "hostnames", nodelist)
        names = out.split()
        if rc != 0 or not names:
            raise SlurmError("scontrol show hostnames %s failed: %s" % (nodelist, _last(err or out)))
        for name in names:
            _check_host("node name", name)
        return names

    def addresses(self, names: Iterable[str]) -> dict[str, dict[str, str]]:
        """{node name: {"addr", "hostname"}} from ``scontrol show node -o``."""
        rc, out, err = self.call("scontrol", "-o", "show", "node", ",".join(names))
        if rc != 0:
            raise SlurmError("scontrol show node failed: %s" % _last(err or out))
        found = {}
        for line in out.splitlines():
            f = parse_oneliner(line.strip())
            if f.get("NodeName"):
                found[f["NodeName"]] = {
                    "addr": f.get("NodeAddr") or f["NodeName"],
                    "hostname": f.get("NodeHostName") or "",
                }
        for name, node in found.items():
            _check_host("NodeAddr of node %s" % _shown(name), node["addr"], loopback=False)
        return found

    def allocation(self, job_id: str | int = "", job_name: str = "") -> tuple[dict[str, Any], list[dict[str, str]]]:
        """The job (checked running) and its nodes in Slurm's order: [{"name", "addr", "hostname"}]."""
        if not job_id and not job_name:
            raise SlurmError(
                "no Slurm job given: set job_id or job_name in the inventory file, or run inside an "
                "allocation (SLURM_JOB_ID)"
            )
        job = self.job(job_id or self.job_id_by_name(job_name))
        check_state(job)
        names = self.hostnames(job["nodes"])
        addrs = self.addresses(names)
        missing = [n for n in names if n not in addrs]
        if missing:
            raise SlurmError(
                "scontrol show node did not describe %s of Slurm job %s" % (", ".join(missing), job["job_id"])
            )
        return job, [dict(addrs[n], name=n) for n in names]


def _shown(text: str) -> str:
    return repr(text if len(text) <= 80 else text[:77] + "...")


def _check_host(what: str, value: str, loopback: bool = True) -> None:
    """A node's name or address becomes an inventory host and ansible_host, which ssh reads as its destination: a host
    name or IP address (never ``-oProxyCommand=...``) that names a machine (not 0.0.0.0; with ``loopback=False``,
    for an address, not this machine's own loopback either: the play would run on the controller), else the one
    line."""
    try:
        vocabulary.Host().check(value)
        why = vocabulary.unreachable(value, loopback=loopback)
        if why:
            raise vocabulary.Bad("be a machine's address, %s" % why)
    except vocabulary.Bad as e:
        raise SlurmError(
            "Slurm gave %s %s, which must %s: check the node's definition in slurm.conf (scontrol show node)"
            % (what, _shown(value), e)
        ) from e


def _run(argv: Sequence[str], timeout: float) -> tuple[int, str, str]:
    proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout, check=False)
    return proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace")


def _last(text: str | None) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else "no output"
