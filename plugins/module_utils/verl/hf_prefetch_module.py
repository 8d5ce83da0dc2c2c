# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""``rlinfra.verl.hf_prefetch``'s argument types for its repository lists and its work (the rules and the download
are module_utils/verl/hf_prefetch.py's). Standard library only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.verl import hf_prefetch


def repos(plural: str) -> Callable[[Any], list[str]]:
    """The rule of an experiment's ``prefetch.<plural>`` (module_utils/verl/hf_prefetch.py), its lines naming the option."""

    def problems(value: Any) -> list[str]:
        errors: list[str] = []
        hf_prefetch.normalize({plural: value}, errors.append)
        return [e[len("prefetch.") :] if e.startswith("prefetch.") else e for e in errors]

    return problems


def repo_list(plural: str) -> Any:
    """The module's ``models`` or ``datasets`` option: a list of repositories by :func:`repos`."""
    bad = [
        ("path", ["../../etc"]),
        ("url", ["https://huggingface.co/org/x"]),
        ("revision", [{"repo": "org/x", "revision": "a..b"}]),
        ("unknown_key", [{"repo": "org/x", "branch": "main"}]),
        ("number", [5]),
        ("twice", ["org/x", "org/x"]),
        ("patterns", [{"repo": "org/x", "allow_patterns": []}]),
    ]
    return vocabulary.Custom("list", vocabulary.Custom.lines(repos(plural)), bad, [], elements="raw", default=[])


def run(module: Any) -> None:
    """The module's work, with its AnsibleModule: the lists normalized, ``hf_home`` checked against
    ``shared_path``, then :func:`hf_prefetch.prefetch`; exits through ``module``."""
    p = module.params
    errors: list[str] = []
    items, dummy = hf_prefetch.normalize({"models": p["models"], "datasets": p["datasets"]}, errors.append)
    if errors:  # the types checked each list already; kept for a rule of normalize the lists do not see
        module.fail_json(msg=errors[0], errors=errors)
    if p["shared_path"]:
        problem = hf_prefetch.not_shared(p["hf_home"], p["shared_path"])
        if problem:
            module.fail_json(msg=problem)
    try:
        changed, results, lines = hf_prefetch.prefetch(
            items,
            p["hf_home"],
            p["hub_cache"],
            p["endpoint"],
            p["token"],
            p["timeout"],
            p["retries"],
            module.check_mode,
            p["lock_timeout"],
        )
    except hf_prefetch.PrefetchError as e:
        module.fail_json(msg="prefetch: %s" % e)
    except OSError as e:
        module.fail_json(msg="prefetch into %s: %s" % (p["hf_home"], e))
    module.exit_json(changed=changed, items=results, lines=lines)
