# -*- coding: utf-8 -*-
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Attempts of one run: the first submission keeps the run's submission id (``rlinfra-smoke-default``),
each automatic recovery submits the next attempt as ``<id>-a2``, ``<id>-a3``, ... The one place that
names attempts and finds them among a cluster's jobs (the Jobs API list)."""

from __future__ import annotations

import re

ATTEMPT_SUFFIX = "-a"


def attempt_id(base, number):
    """Submission id of attempt ``number`` (1-based) of the run ``base``."""
    number = int(number)
    return base if number <= 1 else "%s%s%d" % (base, ATTEMPT_SUFFIX, number)


def attempt_number(submission_id, base):
    """1 for ``base`` itself, N for ``base-aN``, None for any other id."""
    if submission_id == base:
        return 1
    match = re.match(re.escape(base + ATTEMPT_SUFFIX) + r"([2-9]|[1-9][0-9]+)$", submission_id or "")
    return int(match.group(1)) if match else None


def attempts_of(jobs, base):
    """The jobs (dicts with ``submission_id``) that are attempts of ``base``, by attempt number,
    each with its ``attempt`` number added."""
    out = []
    for job in jobs or []:
        number = attempt_number((job or {}).get("submission_id"), base)
        if number is not None:
            out.append(dict(job, attempt=number))
    return sorted(out, key=lambda j: j["attempt"])


def newest_attempt(jobs, base):
    """The newest attempt of ``base`` among ``jobs``, or None when the run was never submitted."""
    found = attempts_of(jobs, base)
    return found[-1] if found else None
