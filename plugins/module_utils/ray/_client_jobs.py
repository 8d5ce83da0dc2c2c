# Copyright: (c) 2025, rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The Ray Jobs REST API (module_utils/ray/client.py's :class:`RayClient` is built on it): list, read, submit, stop
and delete jobs, the working_dir packages, the driver's log, and the wait for a job's end with its poll pauses.

Standard library only: the client runs in plain node scripts too."""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any
from urllib.parse import quote

from ansible_collections.rlinfra.verl.plugins.module_utils.ray._client_checks import check_submission_id
from ansible_collections.rlinfra.verl.plugins.module_utils.ray._client_http import (
    DashboardTransport,
    RayError,
    RayHTTPError,
    RayUnreachableError,
)

TERMINAL_STATUSES = frozenset(("SUCCEEDED", "FAILED", "STOPPED"))
ACTIVE_STATUSES = frozenset(("PENDING", "RUNNING"))
# Ray answers a re-used submission_id with HTTP 500 and a traceback ending in this sentence.
EXISTS_MARKER = "Please use a different submission_id"


def ms_to_iso(ms: float | None) -> str | None:
    if ms is None:
        return None
    stamp = datetime.datetime.fromtimestamp(ms / 1000.0, datetime.timezone.utc)
    return stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")


# A short job ends within seconds of its start, a long one runs for hours: poll early and often, then back
# off so that each pause is about a tenth of the time waited so far, up to the caller's poll_interval. A
# job is then seen ending at most ~10% (plus 0.1 s) after it did, at a cost of a few dozen reads.
FIRST_POLL_PAUSE = 0.1
POLL_BACKOFF = 1.1


def poll_pauses(poll_interval: float, waited: float = 0.0) -> Iterator[float]:
    """The pauses between polls of a job that has been waited on (or has run) for ``waited`` seconds:
    0.1 s for a new one, then x1.1 per poll (a job that ends is seen within a tenth of its age), never more
    than ``poll_interval``."""
    pause = min(poll_interval, max(FIRST_POLL_PAUSE, waited * (POLL_BACKOFF - 1)))
    while True:
        yield pause
        pause = min(poll_interval, pause * POLL_BACKOFF)


class JobsAPI(DashboardTransport):
    """The Jobs API's calls, on the dashboard transport."""

    # Jobs API -------------------------------------------------------------------------------

    def version(self) -> Any:
        return self.request("GET", "/api/version")

    def list_jobs(self) -> list[Any]:
        return self.request("GET", "/api/jobs/") or []

    def job_summaries(self) -> list[dict[str, Any]]:
        """Every job Ray knows (submitted through the Jobs API), oldest first, as
        ``{submission_id, status, job_id, start_time, end_time, metadata, message}`` with ISO times."""
        rows = []
        for job in self.list_jobs():
            if not isinstance(job, dict) or not job.get("submission_id"):
                continue  # drivers started by hand (ray.init) have no submission id
            rows.append(
                dict(
                    submission_id=job["submission_id"],
                    status=job.get("status"),
                    job_id=job.get("job_id"),
                    start_time=ms_to_iso(job.get("start_time")),
                    end_time=ms_to_iso(job.get("end_time")),
                    metadata=job.get("metadata") or {},
                    message=(job.get("message") or "")[:300],
                    _start=job.get("start_time") or 0,
                )
            )
        rows.sort(key=lambda r: r.pop("_start"))
        return rows

    def lookup(self, method: str, path: str) -> tuple[bool, Any]:
        """``(True, the answer)`` of :meth:`request`, or ``(False, None)`` where Ray answers HTTP 404: no such job or
        package, which its callers answer themselves."""
        try:
            return True, self.request(method, path)
        except RayHTTPError as e:
            if e.status == 404:
                return False, None
            raise

    def get_job(self, submission_id: str) -> dict[str, Any] | None:
        """Job details dict, or None when Ray does not know the id."""
        check_submission_id(submission_id)
        return self.lookup("GET", "/api/jobs/" + quote(submission_id, safe=""))[1]

    def submit_job(
        self,
        submission_id: str,
        entrypoint: str,
        runtime_env: Mapping[str, Any] | None = None,
        metadata: Mapping[str, Any] | None = None,
        entrypoint_num_cpus: float | None = None,
        entrypoint_num_gpus: float | None = None,
        entrypoint_memory: float | None = None,
        entrypoint_resources: Mapping[str, Any] | None = None,
    ) -> bool:
        """Create the job; True if created, False if a job with that id already exists."""
        check_submission_id(submission_id)
        payload = dict(
            submission_id=submission_id,
            entrypoint=entrypoint,
            runtime_env=runtime_env,
            metadata=metadata,
            entrypoint_num_cpus=entrypoint_num_cpus,
            entrypoint_num_gpus=entrypoint_num_gpus,
            entrypoint_memory=entrypoint_memory,
            entrypoint_resources=entrypoint_resources,
        )
        try:
            self.request("POST", "/api/jobs/", {k: v for k, v in payload.items() if v is not None})
        except RayHTTPError as e:
            if EXISTS_MARKER in (e.body or ""):
                return False
            raise
        return True

    def stop_job(self, submission_id: str) -> bool:
        """Ask Ray to stop the job; True if a stop was sent to a running job."""
        check_submission_id(submission_id)
        resp = self.lookup("POST", "/api/jobs/%s/stop" % quote(submission_id, safe=""))[1]
        return bool(isinstance(resp, dict) and resp.get("stopped"))

    def delete_job(self, submission_id: str, settle: float = 2.0, rounds: int = 4) -> bool:
        """Delete a finished job's record; True if deleted, False if it did not exist.

        Ray's job monitor can write a record back (as FAILED, "Job supervisor actor died") when the
        job is deleted just after it ended, so the deletion is checked after ``settle`` seconds,
        longer than the monitor's 1 s loop, and repeated if the record came back.
        """
        check_submission_id(submission_id)
        deleted = False
        for _dummy in range(rounds):
            resp = self.lookup("DELETE", "/api/jobs/" + quote(submission_id, safe=""))[1]
            if not (isinstance(resp, dict) and resp.get("deleted")):
                return deleted
            deleted = True
            if not settle:
                break
            self._sleep(settle)
            if self.get_job(submission_id) is None:
                break
        return deleted

    # Package API (working_dir uploads) ------------------------------------------------------

    def has_package(self, name: str) -> bool:
        """True when the cluster holds ``gcs://<name>``; the GET also pins the package for a few
        minutes, which the Ray SDK relies on between upload and submission."""
        return self.lookup("GET", "/api/packages/gcs/" + quote(name, safe=""))[0]

    def upload_package(self, name: str, data: bytes) -> None:
        self.request("PUT", "/api/packages/gcs/" + quote(name, safe=""), data)

    def get_logs(self, submission_id: str) -> str:
        """The job's whole driver log ('' before it starts or when the job is unknown)."""
        check_submission_id(submission_id)
        resp = self.lookup("GET", "/api/jobs/%s/logs" % quote(submission_id, safe=""))[1]
        if isinstance(resp, dict):
            return resp.get("logs") or ""
        return str(resp or "")

    def wait_for_job(
        self,
        submission_id: str,
        timeout: float,
        poll_interval: float = 5.0,
        on_poll: Callable[[dict[str, Any]], Any] | None = None,
        outage_grace: float = 120.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> tuple[dict[str, Any], bool]:
        """Poll until the job reaches a terminal status or ``timeout`` seconds pass.

        Returns ``(job, timed_out)``. ``on_poll(job)`` is called after every poll. A dashboard
        that goes away for less than ``outage_grace`` seconds (a head restart under systemd)
        does not end the wait.
        """
        deadline = clock() + timeout
        outage_since = None
        job = None
        pauses = poll_pauses(poll_interval)
        while True:
            try:
                job = self.get_job(submission_id)
                outage_since = None
            except (RayUnreachableError, RayHTTPError) as e:
                if isinstance(e, RayHTTPError) and (e.status or 0) < 500:
                    raise
                outage_since = outage_since if outage_since is not None else clock()
                if clock() - outage_since > outage_grace or clock() >= deadline:
                    raise
                self._sleep(poll_interval)
                continue
            if job is None:
                raise self._fail(RayError, "Ray job %s disappeared while waiting for it (deleted?)" % submission_id)
            if on_poll:
                on_poll(job)
            if job.get("status") in TERMINAL_STATUSES:
                return job, False
            remaining = deadline - clock()
            if remaining <= 0:
                return job, True
            self._sleep(min(next(pauses), remaining))

    def job_url(self, submission_id: str) -> str:
        return "%s/#/jobs/%s" % (self.address, quote(submission_id, safe=""))


def tail_lines(text: str | None, n: int) -> str:
    if not text or n <= 0:
        return ""
    return "\n".join(text.splitlines()[-n:])
