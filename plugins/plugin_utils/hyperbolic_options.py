# Copyright: (c) 2025, rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The ``rlinfra.verl.hyperbolic`` inventory's configuration file and options, checked before any API request.

* ``load_config_file``: the file read as a YAML mapping, with one line for an empty, unreadable or non-mapping file.
* ``check_config_file``: checks on the file's own text, before Ansible converts it (a wrong ``plugin:``, a misspelt
  option, a list or number or boolean option that is not one); ``NotOurs`` marks a file that names another plugin.
* ``read_settings``: the options the plugin needs, read through its ``get_option`` and checked;
  ``plain_http_warning``: the line for an ``api_url`` that sends the key over plain http.
* ``shown`` and ``error_text``: how API text and exceptions are quoted in the plugin's one-line messages.

The plugin (plugins/inventory/hyperbolic.py) keeps the Ansible glue; the rules are here.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable, Iterable
from typing import Any

from ansible import constants as C
from ansible.errors import AnsibleParserError
from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic.client import (
    DEFAULT_SSH_USER,
    SOURCES,
    HyperbolicError,
    check_api_url,
    check_number,
    one_line,
    redact_url,
    url_is_plain_remote_http,
    valid_ssh_user,
)

PLUGIN = "rlinfra.verl.hyperbolic"

GROUP_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
GROUP_PREFIX = re.compile(r"[A-Za-z0-9_]*")
BOOL_OPTIONS = ("validate_certs", "cache", "strict", "use_extra_vars", "leading_separator")
# Every number has a ceiling: a timeout or wait of 1e300 seconds overflows the C time types the socket and sleep take.
NUMBER_OPTIONS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("timeout", {"above": True, "maximum": 3600}),
    ("retries", {"maximum": 100, "integer": True}),
    ("retry_backoff", {"maximum": 3600}),
    ("retry_max_wait", {"maximum": 3600}),
    ("max_response_mib", {"above": True, "maximum": 1024}),
    ("cache_timeout", {"integer": True, "maximum": 366 * 86400}),
)


class NotOurs(AnsibleParserError):
    """A file named like ours that names another plugin: the next enabled plugin may read it."""


def shown(value: object, limit: int = 60) -> str:
    """API text quoted for a warning: one line, bounded, quotes added."""
    return one_line(repr(str(value)), limit)


def error_text(exc: BaseException) -> str:
    """One line from an exception: Ansible's own message (without its source excerpt) or str()."""
    text = getattr(exc, "message", None)
    if not isinstance(text, str) or not text:
        text = str(exc)
    cause = getattr(exc, "__cause__", None)
    # a YAML error says "Syntax error while loading YAML." and keeps the problem in its cause
    if cause is not None and len(text) < 40:
        detail = getattr(cause, "problem", None) or getattr(cause, "message", None) or str(cause)
        if detail and str(detail) not in text:
            text = "%s %s" % (text.rstrip("."), "(%s)" % one_line(detail, 120))
    return text


def as_name_list(option: str, value: Any, known: Iterable[str] | None = None) -> list[str]:
    """A list of names from a YAML list or a comma-separated string; HyperbolicError otherwise."""
    if isinstance(value, str):
        value = [v for v in (p.strip() for p in value.split(",")) if v]
    if not isinstance(value, (list, tuple)):
        raise HyperbolicError("%s must be a list of names, got %s" % (option, shown(value, 60)))
    names = []
    for item in value:
        if not isinstance(item, str) or not item.strip():
            raise HyperbolicError("%s must be a list of names; %s is not a name" % (option, shown(item, 40)))
        names.append(item.strip())
    if known is not None:
        known = list(known)
        for name in names:
            if name not in known:
                raise HyperbolicError(
                    "unknown %s entry %s; choose from %s" % (option, shown(name, 40), ", ".join(known))
                )
    return names


def strict_bool(option: str, value: Any) -> None:
    """HyperbolicError unless ``value`` is one of YAML's true or false words (Ansible reads any other as false)."""
    try:
        boolean(value, strict=True)
    except TypeError:
        raise HyperbolicError("%s must be true or false, got %s" % (option, shown(value, 40))) from None


def load_config_file(loader: Any, path: str) -> dict[Any, Any]:
    """The inventory file as a mapping, read with Ansible's ``loader``; AnsibleParserError with one line otherwise."""
    try:
        try:
            config = loader.load_from_file(path, cache="none", trusted_as_template=True)
        except TypeError:  # ansible-core < 2.19
            config = loader.load_from_file(path, cache="none")
    except Exception as exc:  # pylint: disable=broad-except
        line = getattr(getattr(exc, "obj", None), "line_num", None)
        where = " (line %s)" % line if isinstance(line, int) else ""
        raise AnsibleParserError("not a readable YAML file%s: %s" % (where, error_text(exc))) from None
    if config is None or config == "":
        raise AnsibleParserError("the file is empty; it needs at least the line 'plugin: %s'" % PLUGIN)
    if not isinstance(config, dict):
        kinds: tuple[tuple[type | tuple[type, ...], str], ...] = (
            (list, "a list"),
            (str, "a string"),
            (bool, "a boolean"),
            ((int, float), "a number"),
        )
        kind = next((name for cls, name in kinds if isinstance(config, cls)), "a scalar")
        raise AnsibleParserError("the file must be a YAML mapping of options, not %s" % kind)
    return config


def _known_options(load_name: str) -> set[str]:
    try:
        return set(C.config.get_configuration_definitions("inventory", load_name) or ())
    except Exception:  # pylint: disable=broad-except
        return set()


def check_config_file(config: dict[Any, Any], names: Iterable[str], load_name: str) -> None:
    """Checks on the file's own text, before Ansible converts it (and loses what was written).

    ``names`` are the plugin names the file may give (``plugin:``), ``load_name`` the name Ansible loaded the plugin
    by (its option definitions are registered under it). Raises ``NotOurs`` for a file of another plugin,
    HyperbolicError for a mistake in ours.
    """
    plugin = config.get("plugin")
    if plugin not in list(names):
        text = str(plugin).lower()
        if plugin is not None and "hyperbol" not in text and difflib.SequenceMatcher(None, text, PLUGIN).ratio() < 0.75:
            raise NotOurs("Incorrect plugin name in file: %s" % plugin)
        raise HyperbolicError(
            "plugin is %s; a *hyperbolic.yml file needs 'plugin: %s'"
            % ("missing" if plugin is None else shown(plugin, 60), PLUGIN)
        )
    known = _known_options(load_name)
    if known:
        # a misspelt option (name_patern:) would otherwise be ignored: every instance of the
        # account would become a host
        for key in sorted(str(k) for k in config):
            if key not in known:
                close = difflib.get_close_matches(key, sorted(known), n=1)
                raise HyperbolicError(
                    "unknown option %s%s"
                    % (
                        shown(key, 40),
                        "; did you mean '%s'?" % close[0] if close else "; see ansible-doc -t inventory %s" % PLUGIN,
                    )
                )
    if "sources" in config:
        if not as_name_list("sources", config["sources"], known=list(SOURCES)):
            raise HyperbolicError("sources is empty; choose on_demand and/or marketplace")
    if "statuses" in config and config["statuses"] is not None:
        as_name_list("statuses", config["statuses"])
    for option, kwargs in NUMBER_OPTIONS:
        if config.get(option) is not None:
            check_number(option, config[option], **kwargs)
    # Ansible reads any unknown word as false: "validate_certs: ture" would turn TLS checks off
    for option in BOOL_OPTIONS:
        if option in config and config[option] is not None:
            strict_bool(option, config[option])
    if "validate_certs" not in config and os.environ.get("HYPERBOLIC_VALIDATE_CERTS", "").strip():
        strict_bool("HYPERBOLIC_VALIDATE_CERTS", os.environ["HYPERBOLIC_VALIDATE_CERTS"])


def read_sources(value: Any) -> list[str]:
    """The ``sources`` option as a list of known source names without repeats; HyperbolicError when empty."""
    sources = as_name_list("sources", value or [], known=list(SOURCES))
    if not sources:
        raise HyperbolicError("sources is empty; choose on_demand and/or marketplace")
    return list(dict.fromkeys(sources))


def read_settings(get_option: Callable[[str], Any]) -> dict[str, Any]:
    """The checked options the plugin works from (``cluster_namer`` aside), read through ``get_option``.

    Keys: ``sources``, ``statuses``, ``api_url``, each of ``NUMBER_OPTIONS``, ``group``, ``cluster_group_prefix``,
    ``default_user``. Raises HyperbolicError naming the first option that is wrong.
    """
    settings: dict[str, Any] = {}
    settings["sources"] = read_sources(get_option("sources"))
    statuses = get_option("statuses")
    settings["statuses"] = as_name_list("statuses", [] if statuses is None else statuses)
    settings["api_url"] = check_api_url(get_option("api_url"))
    for option, kwargs in NUMBER_OPTIONS:
        settings[option] = check_number(option, get_option(option), **kwargs)
    group = get_option("group") or "hyperbolic"
    if not GROUP_NAME.fullmatch(group):
        raise HyperbolicError(
            "group %s is not a valid group name (letters, digits and _, not starting with a digit)" % shown(group, 60)
        )
    settings["group"] = group
    prefix = get_option("cluster_group_prefix")
    prefix = "ray_cluster_" if prefix is None else prefix
    if not GROUP_PREFIX.fullmatch(prefix):
        raise HyperbolicError("cluster_group_prefix %s may only hold letters, digits and _" % shown(prefix, 60))
    settings["cluster_group_prefix"] = prefix
    default_user = get_option("default_user") or DEFAULT_SSH_USER
    if not valid_ssh_user(default_user):
        raise HyperbolicError("default_user %s is not a valid user name" % shown(default_user, 40))
    settings["default_user"] = default_user
    return settings


def plain_http_warning(api_url: str) -> str | None:
    """The warning for an ``api_url`` that sends the key unencrypted to a remote host, else None."""
    if not url_is_plain_remote_http(api_url):
        return None
    return "%s: api_url %s is plain http to a remote host: the API key crosses the network unencrypted; use https" % (
        PLUGIN,
        redact_url(api_url),
    )
