# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Filter ``rlinfra.verl.redact``: mask secret values in a text (e.g. a job log before it is saved).

    {{ log_text | rlinfra.verl.redact(secret_values) }}

``secret_values`` is a list of strings or a mapping whose values are masked; every occurrence
becomes ``********`` (longest values first, empty values ignored).
"""

from __future__ import annotations

from ansible_collections.rlinfra.verl.plugins.module_utils.common.masking import MASK, mask_values


def redact(text, values, mask=MASK):
    if isinstance(values, dict):
        values = list(values.values())
    elif isinstance(values, str):
        values = [values]
    return mask_values("" if text is None else str(text), [str(v) for v in (values or []) if v], mask)


class FilterModule:
    def filters(self):
        return {"redact": redact}
