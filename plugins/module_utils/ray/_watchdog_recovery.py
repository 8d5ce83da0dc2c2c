# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The watchdog's recovery (module_utils/ray/watchdog.py): what :meth:`Watchdog.recover_once` does once an attempt
has ended in a way ``recovery:`` allows to recover from. Stop what is left of the run, wait for the nodes (replacing
machines gone for good, with ``recovery.replace``), check the checkpoint's shape, resubmit the next attempt; or end
the watch with the line that says why not (the deadline, no nodes, a failed replacement, the checkpoint, the upload,
the submission).

The same state machine as watchdog.py, in the same terms: each function takes the :class:`Watchdog`, yields its
requests (``say``, ``cluster``, ``sleep``, ``stop``, ``replace``, ``checkpoint``, ``upload``, ``submit``) and
receives their answers through ``dog.ask``, and changes the watchdog's state (attempt, events, restarts). Only
watchdog.py calls it (:func:`recover`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from ansible_collections.rlinfra.verl.plugins.module_utils.ray import attempts, recovery
from ansible_collections.rlinfra.verl.plugins.module_utils.verl import experiment_render

if TYPE_CHECKING:
    from ansible_collections.rlinfra.verl.plugins.module_utils.ray.watchdog import End, Steps, Watchdog

# What to do when a machine cannot be replaced from the head.
REPLACE_BY_HAND = (
    "bring the machine back by hand (provision.yml rents what the label lacks, then site.yml), then run "
    "submit.yml again; it attaches to the newest attempt"
)


def recover(dog: Watchdog, why: str, res: Mapping[str, Any]) -> Steps[End | None]:
    """Stop what is left of the run, wait for the nodes, check the checkpoint's shape, resubmit."""
    dog.restarts += 1
    detected = dog.at_s()
    yield from dog.say(
        "attempt %d (%s) ended: %s, at step %s; recovery %d of %d"
        % (
            dog.attempt,
            dog.sid,
            recovery.WHY.get(why, why),
            "-" if res.get("last_step") is None else res["last_step"],
            dog.restarts,
            dog.settings["max_restarts"],
        )
    )
    late = past_deadline(dog)
    if late:
        return ("deadline", late)
    # Never two runs of one experiment at once: stop every attempt of this run that is still active.
    info = yield from dog.ask("cluster", dict(jobs=True, timeout=60, wait_for_nodes=1))
    jobs = attempts.attempts_of(info.get("jobs") or [], dog.base)
    if any(job.get("submission_id") == dog.sid and job.get("status") == "SUCCEEDED" for job in jobs):
        # The end race: the attempt finished between the look that condemned it and the stop. Its run is complete;
        # another attempt would train again from the last checkpoint.
        dog.restarts -= 1
        dog.rows[-1] = recovery.attempt_row(dog.attempt, dog.sid, dict(res, status="SUCCEEDED"), "succeeded")
        yield from dog.say(
            "attempt %d (%s) had SUCCEEDED before it could be stopped: the run is complete, no new "
            "attempt" % (dog.attempt, dog.sid)
        )
        return ("succeeded", None)
    for job in jobs:
        if job.get("status") in recovery.ACTIVE:
            yield from dog.say("stopping %s (still %s) before the next attempt" % (job["submission_id"], job["status"]))
            yield from dog.ask("stop", job["submission_id"])
    if dog.min_nodes is None:
        first = dog.res.get("metadata") or {}
        try:
            dog.min_nodes = int(first.get("rlinfra_nodes") or 0) or len(dog.known) or 1
        except ValueError:
            dog.min_nodes = len(dog.known) or 1
    yield from dog.ask("sleep", float(dog.settings["backoff_s"]))
    info = yield from wait_nodes(dog)
    if isinstance(info, tuple):
        return info
    if info.get("failed"):
        return (
            "no_nodes",
            "Ray job %s was not resubmitted: %s%s. Bring the nodes back (site.yml), then run "
            "submit.yml again; it attaches to the newest attempt"
            % (
                dog.sid,
                info.get("msg"),
                "; lost: %s" % ", ".join(n["label"] for n in dog.lost) if dog.lost else "",
            ),
        )
    nodes = info.get("nodes") or []
    yield from dog.watch_nodes(nodes)
    ckpt = {}
    if dog.opts["checkpoint_dir"]:
        ckpt = yield from dog.ask("checkpoint", dog.opts["checkpoint_dir"])
        if ckpt.get("failed"):
            return (
                "checkpoint",
                "cannot read the checkpoint directory %s on the head: %s"
                % (dog.opts["checkpoint_dir"], ckpt.get("msg")),
            )
    ok, line = recovery.shape_check(ckpt, nodes, dog.settings["allow_reshard"])
    if line:
        yield from dog.say(line)
    if not ok:
        return ("shape", "Ray job %s was not resubmitted: %s" % (dog.sid, line))
    if ckpt.get("incomplete"):  # the tracker's step lacks shards (a node lost mid-save): the newest whole one
        yield from dog.say(recovery.incomplete_line(ckpt))
    return (yield from resubmit(dog, why, nodes, ckpt, detected))


def wait_nodes(dog: Watchdog) -> Steps[dict[str, Any] | End]:
    """Wait for ``min_nodes`` alive nodes; with ``recovery.replace``, a machine still gone after ``replace_after`` is
    replaced (the ``replace`` request: the supervisor rents and converges one) and the wait goes on. The cluster's
    answer, or ``(reason, line)`` when a replacement failed."""
    wait = int(dog.settings["node_wait_timeout"])
    left = dog.settings["max_replacements"] - dog.replaced
    if not dog.settings["replace"] or left <= 0:
        yield from dog.say(
            "waiting up to %ss for %d alive node(s)%s"
            % (
                wait,
                dog.min_nodes,
                "; recovery.max_replacements (%d) used: no machine is replaced again" % dog.settings["max_replacements"]
                if dog.settings["replace"]
                else "",
            )
        )
        return (yield from dog.ask("cluster", dict(wait_for_nodes=dog.min_nodes, timeout=wait)))
    first = min(wait, int(dog.settings["replace_after"]))
    yield from dog.say(
        "waiting up to %ss for %d alive node(s); a machine still gone then is replaced "
        "(recovery.replace, %d left)" % (first, dog.min_nodes, left)
    )
    info = yield from dog.ask("cluster", dict(wait_for_nodes=dog.min_nodes, timeout=first))
    if not info.get("failed"):
        return info
    look = yield from dog.ask("cluster", dict(timeout=30))
    here = set(n.get("node_ip") for n in recovery.alive(look.get("nodes") or []).values())
    missing, seen = [], set()
    for entry in dog.lost:
        if entry["node_ip"] and entry["node_ip"] not in here and entry["node_ip"] not in seen:
            seen.add(entry["node_ip"])
            missing.append(
                dict(
                    label=entry["label"],
                    node_ip=entry["node_ip"],
                    head=entry["head"],
                    name=dog.names.get(entry["node_ip"]) or "",
                )
            )
    missing = missing[:left]
    if not missing:  # back already: the rest of node_wait_timeout, as without replace
        return (yield from dog.ask("cluster", dict(wait_for_nodes=dog.min_nodes, timeout=max(1, wait - first))))
    detected = dog.at_s()
    yield from dog.say(
        "%s still gone after %ss: replacing %s (recovery.replace)"
        % (", ".join(m["label"] for m in missing), first, "it" if len(missing) == 1 else "them")
    )
    done = yield from dog.ask("replace", missing)
    done = done or {}
    replaced = done.get("replaced") or []
    for item in replaced:
        dog.replaced += 1
        if item.get("new_ip") and item.get("name"):
            dog.names[item["new_ip"]] = item["name"]
        dog.events.append(
            dict(
                event="replaced",
                node=item.get("label"),
                new=item.get("name"),
                new_ip=item.get("new_ip"),
                rental=item.get("rental"),
                old_rental=item.get("old_rental"),
                detected_s=detected,
                done_s=dog.at_s(),
            )
        )
    if done.get("failed"):
        return (
            "replace",
            "Ray job %s was not resubmitted: replacing %s failed: %s; %s"
            % (
                dog.sid,
                ", ".join(m["label"] for m in missing),
                done.get("msg"),
                done.get("todo") or REPLACE_BY_HAND,
            ),
        )
    if replaced:
        yield from dog.say(
            "replaced %s in %s; waiting up to %ss for %d alive node(s)"
            % (
                ", ".join("%s by %s (%s)" % (i.get("label"), i.get("name"), i.get("new_ip")) for i in replaced),
                recovery.hms(dog.at_s() - detected),
                wait,
                dog.min_nodes,
            )
        )
    else:
        yield from dog.say(
            "nothing was replaced (%s); waiting up to %ss more for %d alive node(s)"
            % (done.get("msg") or "no machine is gone for good", wait - first, dog.min_nodes)
        )
        wait -= first
    return (yield from dog.ask("cluster", dict(wait_for_nodes=dog.min_nodes, timeout=max(1, wait))))


def resubmit(
    dog: Watchdog, why: str, nodes: list[dict[str, Any]], ckpt: Mapping[str, Any] | None, detected: float
) -> Steps[End | None]:
    """The next attempt: the working_dir package uploaded again, the job re-rendered for ``nodes`` (from the newest
    whole checkpoint when the tracker's lacks shards), submitted; None once it runs, else the end of the watch."""
    job = dog.opts["job"] or {}
    if not job.get("job_template"):
        return (
            why,
            "Ray job %s %s; the wait has no job to resubmit (no job given)" % (dog.sid, recovery.WHY[why]),
        )
    package = job.get("package") or None
    if package:
        up = yield from dog.ask("upload", package)
        if up.get("failed"):
            return (
                "package",
                "the working_dir package %s could not be uploaded again: %s; run submit.yml "
                "again" % (package["uri"], up.get("msg")),
            )
    ckpt = ckpt or {}
    resume_from = (ckpt.get("resume_dir") or "") if ckpt.get("incomplete") else None
    entrypoint = experiment_render.reshape(job["job_template"], nodes, resume_from=resume_from)[0]
    previous, dog.attempt = dog.sid, dog.attempt + 1
    dog.sid = attempts.attempt_id(dog.base, dog.attempt)
    metadata = dict(
        job.get("metadata") or {},
        rlinfra_attempt=str(dog.attempt),
        rlinfra_previous=previous,
        rlinfra_recovered_from=why,
    )
    res = yield from dog.ask("submit", dog.sid, entrypoint, metadata, job.get("resources"))
    if res.get("failed"):
        return ("submit", "attempt %d (%s) could not be submitted: %s" % (dog.attempt, dog.sid, res.get("msg")))
    step = ckpt.get("resume_step") if resume_from is not None else ckpt.get("latest_step")
    dog.expect_from = step
    yield from dog.say(
        "attempt %d (%s) submitted at %s after %s; %s"
        % (
            dog.attempt,
            dog.sid,
            dog.elapsed(),
            why.replace("_", " "),
            "resumes from checkpoint step %s" % step
            if step is not None
            else "no whole checkpoint: starts from scratch"
            if resume_from == ""
            else "no checkpoint yet: starts from scratch",
        )
    )
    dog.events.append(
        dict(
            event="resubmitted",
            after=why,
            detected_s=detected,
            submitted_s=dog.at_s(),
            attempt=dog.attempt,
            resume_step=step,
        )
    )
    dog.new_attempt()
    return None


def past_deadline(dog: Watchdog) -> str | None:
    """The line that ends a recovery the deadline leaves no time for, or None."""
    if dog.deadline is None:
        return None
    margin = dog.settings.get("deadline_margin") or 0
    if dog.now < dog.deadline - margin:
        return None
    dog.events.append(dict(event="deadline", at_s=dog.at_s()))
    return (
        "Ray job %s was not resubmitted: recovery.deadline %s is %s (recovery.deadline_margin %d s): an attempt "
        "could not save before the machines end. On the next machines, run submit.yml -e exp=... again: it "
        "resumes from the newest checkpoint"
        % (
            dog.sid,
            dog.settings["deadline"],
            "past" if dog.now >= dog.deadline else "%d s away" % (dog.deadline - dog.now),
            margin,
        )
    )
