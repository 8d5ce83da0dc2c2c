# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Filter ``rlinfra.verl.pick_attempt``: which attempt of a run to look at, among the cluster's jobs.

    {{ info.jobs | rlinfra.verl.pick_attempt('rlinfra-smoke-default', attempt) }}

The first submission of a run is its submission id, automatic recoveries are ``<id>-a2``,
``<id>-a3``, ... (module_utils/ray/attempts.py names them). No attempt given: the newest.
"""

from __future__ import annotations

from ansible_collections.rlinfra.verl.plugins.module_utils.common import cli
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.attempts import attempt_id, attempts_of


def _attempt_number(value):
    """(number or None for the newest, error or None)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None, None
    return cli._value("attempt", value)  # the switch's own type: the same line as the first task's


def pick_attempt(jobs, base, attempt=None):
    """``{submission_id, attempt, status, attempts, error}``: the chosen attempt of run ``base`` (the
    newest when ``attempt`` is empty), ``attempts`` the numbers found; ``error`` is one line, '' when fine."""
    found = attempts_of(jobs or [], base)
    numbers = [j["attempt"] for j in found]
    out = dict(submission_id=None, attempt=None, status=None, attempts=numbers, error="")
    number, error = _attempt_number(attempt)
    if error:
        out["error"] = error + " (-e attempt=K, or leave it out for the newest)"
        return out
    if not found:
        out["error"] = (
            "%s was never submitted to this cluster (no job %s or %s-aN in its Jobs API): check -e exp, "
            "-e run and -e cluster" % (base, base, base)
        )
        return out
    if number is None:
        chosen = found[-1]
    else:
        chosen = next((j for j in found if j["attempt"] == number), None)
        if chosen is None:
            out["error"] = "attempt %d of %s (%s) does not exist; its attempts: %s" % (
                number,
                base,
                attempt_id(base, number),
                ", ".join(str(n) for n in numbers),
            )
            return out
    out.update(submission_id=chosen["submission_id"], attempt=chosen["attempt"], status=chosen.get("status"))
    return out


class FilterModule:
    def filters(self):
        return {"pick_attempt": pick_attempt}
