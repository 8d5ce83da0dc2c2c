# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The roles' variables as values, checked before a role changes anything.

Argument specs check types (``ray_gcs_port=abc`` is refused by Ansible itself); these rules check
what a type cannot say: an address Ray can bind to, a port in range and not taken twice, a GPU count,
a mount option string that mount(8) and /etc/fstab accept, and, above all, no newline or control
character in anything that lands in a systemd unit, an environment file or fstab (a newline in
``ray_private_ip`` would add an ``ExecStartPre=`` line to the unit).

``check(settings)`` -> one line per bad variable, each naming the variable, what it must be and the
value it got. Rules are keyed by variable name, each a type of module_utils/common/vocabulary/ (or one of the roles' own
kinds below, built the same way; their bad values for tests/unit/test_bad_input_generated.py are
tests/unit/vocabulary_corpus.py's); the role a variable belongs to is its prefix.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.common.numbers import whole_number

# "hyperbolic": provision.yml's and teardown.yml's variables (hyperbolic_*), checked the same way; "rlinfra": the
# playbooks' own (rlinfra_*), checked with every playbook's command line.
ROLES = ("storage_lvm", "nfs_mount", "python_env", "ray", "hyperbolic", "fitness", "rlinfra")

_USER = re.compile(r"^[a-z_][a-z0-9_-]{0,31}\$?$")
_UMASK = re.compile(r"^0?[0-7]{3}$")
_MODE = re.compile(r"^0?[0-7]{3,4}$")
_RESOURCE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:/-]{0,63}$")
_LVM_NAME = re.compile(r"^(?!\.\.?$)[A-Za-z0-9+_.][A-Za-z0-9+_.-]{0,127}$")
_SIZE = re.compile(r"^[0-9]+(\.[0-9]+)?[KMGTP]?i?B?$", re.IGNORECASE)
_STRIPE = re.compile(r"^([0-9]+[kKmM]?)?$")
_OPTION = re.compile(r"^[A-Za-z0-9_.:/=+@-]+$")
# Prometheus's durations (15d, 1h30m): they land in the unit's ExecStart line and the scrape config.
_DURATION = r"^([0-9]+(ms|s|m|h|d|w|y))+$"
# Anything written to a systemd unit, an environment file or fstab: one line (a newline in ray_private_ip would add
# an ExecStartPre= line to the unit).
ONE_LINE = "be one line without control characters"
# What systemd reads in a unit line before the program sees it: % starts a specifier (%n: the unit's name), $ a
# variable, \ an escape, quotes group words and vanish, and ` ; are shell words a reader would take as such. One rule
# for every value a role writes into the unit's lines (paths, Ray's extra arguments).
_UNIT_SPECIAL = re.compile(r"[%$\\'\"`;]")
UNIT_CHARS = "% $ \\ ' \" ` ;"
# The most that means anything for a resource limit (Linux's largest fs.nr_open) and for a wait on a node (a day).
_LIMIT_MAX = 1073741816
_DAY = 86400

Bad = vocabulary.Bad


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise Bad("be text")
    if vocabulary._CONTROL.search(value):
        raise Bad(ONE_LINE)
    return value


# ---- the kinds of the roles' own values, beside the vocabulary's ----------------------------------------------


class PrivateIp(vocabulary.Address):
    """The address Ray binds to and advertises."""

    what = "this node's private IP address (for example 10.0.0.5)"
    reach = "be an address the other nodes can reach (Ray advertises it), %s"

    def check(self, value: Any) -> Any:
        if not _text(value).strip():
            raise Bad("be this node's private IP address (the node's facts showed none: set it in the inventory)")
        super().check(value)
        return value


class _Pattern(vocabulary.Type):
    """Text of one line matching ``pattern``, else :class:`Bad` with ``words``."""

    def __init__(
        self, pattern: re.Pattern[str], words: str, bad: Iterable[Any] = (), typed_ok: bool = False, **kw: Any
    ):
        super().__init__(**kw)
        self.pattern, self.words_, self.bad, self.typed_ok = pattern, words, bad, typed_ok

    def check(self, value: Any) -> Any:
        text = (
            str(value) if self.typed_ok and isinstance(value, (int, float)) and not isinstance(value, bool) else value
        )
        if not self.pattern.match(_text(text)):
            raise Bad(self.words_)
        return value


class _Whole(vocabulary.Type):
    """A whole number from ``low`` to ``high`` written as settings are (an int or digits), else ``must``. Every one
    has a ``high``: 10**30 seconds overflows the C time types the node's tools take it into."""

    def __init__(self, low: int, must: str, high: int, **kw: Any):
        super().__init__(must=must, **kw)
        self.low, self.high = low, high

    def check(self, value: Any) -> Any:
        number = whole_number(value)
        if number is None or not self.low <= number <= self.high:
            raise Bad(self.must)
        return number


class _Either(_Whole):
    """A word (``auto``, ``infinity``, empty) or a whole number from ``low`` to ``high``."""

    def __init__(self, words: Collection[Any], low: int, must: str, high: int, **kw: Any):
        super().__init__(low, must, high, **kw)
        self.words_ = words

    def check(self, value: Any) -> Any:
        return value if value in self.words_ else super().check(value)


class _Path(vocabulary.Type):
    """An absolute path without spaces (it lands in a unit or fstab), shorter than ``max_len``, without what systemd
    reads in a unit line (:data:`UNIT_CHARS`) or ``:``, which splits a container mount (``--volume SRC:DST``) and
    the unit's PATH; kept where its ``purpose`` allows (module_utils/common/paths.py)."""

    def __init__(self, purpose: str, max_len: int | None = None, **kw: Any):
        super().__init__(**kw)
        self.purpose, self.max_len = purpose, max_len
        self.sample_value = "/data/sample"

    def check(self, value: Any) -> Any:
        text = _text(value)
        if not text.startswith("/") or re.search(r"\s", text) or ".." in text.split("/"):
            raise Bad("be an absolute path without spaces or '..'")
        if _UNIT_SPECIAL.search(text) or ":" in text:
            raise Bad(
                "be an absolute path without : or any of %s (systemd reads them in a unit line, a container "
                "mount splits at :)" % UNIT_CHARS
            )
        if self.max_len and len(text) >= self.max_len:
            raise Bad(
                "be an absolute path shorter than %d characters (Ray's socket paths must fit in 107)" % self.max_len
            )
        return vocabulary.confine(text, self.purpose)


class _Umask(vocabulary.Type):
    """The umask Ray's processes run with: octal, and never letting others write what they make (the checkpoints, the
    logs and the secrets files Ray writes would be anyone's to change)."""

    def check(self, value: Any) -> Any:
        if not isinstance(value, str) or not _UMASK.match(_text(value)):
            raise Bad("be an octal umask such as 0027")
        if not int(value, 8) & 0o002:
            raise Bad(
                "be a umask that keeps others from writing (its last digit 2, 3, 6 or 7, such as 0022 or 0027): "
                "anything else makes every file Ray writes writable by any user"
            )
        return value


class _MountOptions(vocabulary.Type):
    def check(self, value: Any) -> Any:
        text = _text(value)
        words = text.split(",")
        if not text or any(not w or not _OPTION.match(w) for w in words):
            raise Bad("be comma-separated mount options without spaces, for example defaults,noatime")
        return text


class _Mode(vocabulary.Type):
    def check(self, value: Any) -> Any:
        if not isinstance(value, str):
            raise Bad("be an octal mode in quotes such as '0755' (unquoted, YAML reads a number)")
        if not _MODE.match(_text(value)):
            raise Bad("be an octal mode such as 0755, quoted")
        return value


class _RayEnv(vocabulary.EnvMap):
    """ray_env: variable names to one-line text or numbers (they land in an environment file); a kind of its own so
    that the generated tests feed it what an environment file must never get (tests/unit/vocabulary_corpus.py)."""


class _SecretPattern(vocabulary.Type):
    """Empty (the collection's rule for secret names) or the user's own regular expression."""

    def check(self, value: Any) -> Any:
        if value in ("", None):
            return ""
        try:
            re.compile(_text(value))
        except re.error as e:
            raise Bad("be empty (the collection's rule for secret names) or a regular expression (%s)" % e) from e
        return value


class _Resources(vocabulary.Type):
    def check(self, value: Any) -> Any:
        if not isinstance(value, dict):
            raise Bad("be a mapping of custom resource names to amounts")
        for name, amount in value.items():
            if not isinstance(name, str) or not _RESOURCE.match(name):
                raise Bad(
                    "be a mapping of resource names (letters, digits, _ . : / -) to amounts; %s is not one"
                    % vocabulary._shown(name)
                )
            if name in ("CPU", "GPU", "memory", "object_store_memory"):
                raise Bad(
                    "be custom resources only; %s is set with its own variable (ray_num_cpus, ray_num_gpus)" % name
                )
            if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not 0 <= amount < float("inf"):
                raise Bad("be a mapping to amounts of 0 or more; %s has %s" % (name, vocabulary._shown(amount)))
        return value


class _Devices(vocabulary.Type):
    def check(self, value: Any) -> Any:
        if value == "auto":
            return value
        if not isinstance(value, list):
            raise Bad("be auto or a list of block devices (for example [/dev/nvme1n1])")
        for item in value:
            if not isinstance(item, str) or not re.match(r"^/dev/[A-Za-z0-9/_.:-]+$", item) or ".." in item.split("/"):
                raise Bad("be a list of block devices under /dev; %s is not one" % vocabulary._shown(item))
        return value


# ray start's options the roles set themselves, each with the variable that sets it: given again in extra args, the
# later one wins (--dashboard-host=0.0.0.0 would bind the dashboard on every address, --temp-dir would leave the one
# teardown purges).
ROLE_OPTIONS = {
    "--node-ip-address": "ray_private_ip",
    "--dashboard-host": "ray_head_dashboard_host",
    "--temp-dir": "ray_temp_dir",
    "--port": "ray_gcs_port",
    "--dashboard-port": "ray_dashboard_port",
    "--node-manager-port": "ray_node_manager_port",
    "--object-manager-port": "ray_object_manager_port",
    "--dashboard-agent-grpc-port": "ray_dashboard_agent_grpc_port",
    "--dashboard-agent-listen-port": "ray_dashboard_agent_listen_port",
    "--runtime-env-agent-port": "ray_runtime_env_agent_port",
    "--metrics-export-port": "ray_metrics_export_port",
    "--min-worker-port": "ray_min_worker_port",
    "--max-worker-port": "ray_max_worker_port",
    "--ray-client-server-port": "ray_client_server_port",
    "--num-cpus": "ray_num_cpus",
    "--num-gpus": "ray_num_gpus",
    "--resources": "ray_resources",
    "--include-dashboard": "ray_head_include_dashboard",
    "--address": "the inventory",
    "--head": "the inventory",
    "--block": "the role",
}


class _RayArg(vocabulary.Text):
    """One argument of ``ray start`` in the unit's ExecStart line: one word systemd passes as it is, and none of the
    options the roles set (:data:`ROLE_OPTIONS`)."""

    def __init__(self, **kw: Any):
        super().__init__(empty=False, max_len=4096, what="one argument of ray start", **kw)

    def check_text(self, value: str) -> str:
        if re.search(r"\s", value) or _UNIT_SPECIAL.search(value):
            raise Bad(
                "be one argument of ray start, without spaces or any of %s (systemd reads them in the unit's "
                "ExecStart line)" % UNIT_CHARS
            )
        option = value.split("=", 1)[0]
        if option in ROLE_OPTIONS:
            raise Bad("not be %s, which the role sets itself (from %s)" % (option, ROLE_OPTIONS[option]))
        return value


# ---- the rules: every variable a role checks, with its type ----------------------------------------------------

PORTS = (
    "ray_gcs_port",
    "ray_dashboard_port",
    "ray_node_manager_port",
    "ray_object_manager_port",
    "ray_dashboard_agent_grpc_port",
    "ray_runtime_env_agent_port",
    "ray_metrics_export_port",
    "ray_dashboard_agent_listen_port",
    "ray_client_server_port",
    "ray_autoscaler_metrics_port",
    "ray_dashboard_metrics_port",
    "ray_min_worker_port",
    "ray_max_worker_port",
    "ray_fitness_port",
    "ray_fitness_store_port",
    "ray_metrics_node_exporter_port",
    "ray_metrics_prometheus_port",
    "ray_metrics_dcgm_port",
)

_CREDENTIALS_HINT = " (credentials for a private index go in the nodes' ~/.netrc, which uv reads)"

RULES = {
    "ray_private_ip": PrivateIp(),
    "ray_net_ifname": vocabulary.Text(
        empty=False,
        max_len=256,
        pattern=r"^(auto|none|\^?=?[A-Za-z0-9_.:-]{1,15}(,[A-Za-z0-9_.:-]{1,15})*)$",
        what="auto, none, or interface names in NCCL_SOCKET_IFNAME's syntax (eth0, ens,eth, ^docker,lo, =ens5)",
    ),
    "ray_cluster": vocabulary.Name(),
    "ray_env": _RayEnv(),
    "ray_rocm_env": _RayEnv(),
    "ray_env_secret_pattern": _SecretPattern(),
    "ray_temp_dir": _Path("owns", 60),
    "ray_config_dir": _Path("config"),
    "ray_venv": _Path("owns"),
    "ray_umask": _Umask(),
    "ray_user": _Pattern(_USER, "be a user name (lowercase letters, digits, _ and -)", ["ray user", "Root"]),
    "ray_num_cpus": _Either(("", None), 0, "be empty (Ray detects it) or a whole number from 0 to 65536", 65536),
    "ray_num_gpus": _Either(
        ("auto",), 0, "be auto or a whole number from 0 to %d" % vocabulary.MAX_GPUS, vocabulary.MAX_GPUS
    ),
    "ray_resources": _Resources(),
    "ray_extra_args": vocabulary.ListOf(_RayArg()),
    "ray_head_extra_args": vocabulary.ListOf(_RayArg()),
    "ray_worker_extra_args": vocabulary.ListOf(_RayArg()),
    "ray_worker_join_wave": _Whole(0, "be a whole number of workers, 0 to start them all at once, at most 1000", 1000),
    # Where the dashboard (and the Jobs API) binds; empty: ray_private_ip. Never every address (0.0.0.0).
    "ray_head_dashboard_host": vocabulary.Address(
        empty=True, hint=" (empty: the node's private address; reach the dashboard through an SSH tunnel)"
    ),
    "ray_limit_nofile": _Either(
        ("infinity",), 1, "be infinity or a whole number from 1 to %d" % _LIMIT_MAX, _LIMIT_MAX
    ),
    "ray_limit_nproc": _Either(("infinity",), 1, "be infinity or a whole number from 1 to %d" % _LIMIT_MAX, _LIMIT_MAX),
    "ray_start_timeout": _Whole(1, "be a whole number of seconds from 1 to %d" % _DAY, _DAY),
    "ray_head_idle_release_after": _Whole(
        0, "be a whole number of seconds, 0 for off, at most %d (a year)" % vocabulary.YEAR, vocabulary.YEAR
    ),
    "ray_head_idle_check_every": _Whole(10, "be a whole number of seconds from 10 to %d" % _DAY, _DAY),
    "ray_container_image": vocabulary.ImageRef(empty=True),
    "ray_container_image_archive": vocabulary.AbsPath("reads", empty=True),
    "ray_container_image_store": vocabulary.AbsPath("owns", empty=True, spaces=False),
    "ray_container_engine": vocabulary.Choice(("auto", "podman", "docker")),
    "ray_container_registry_username": vocabulary.Text(
        max_len=256, pattern=r"^[^\s:]*$", what="a registry user name (no spaces or colons)"
    ),
    "ray_container_registry_password": vocabulary.Secret(),
    "ray_container_mounts": vocabulary.ListOf(_Path("mounts"), unique=True),
    "ray_firewall_controller": vocabulary.Address(empty=True),
    "ray_firewall": vocabulary.Switch(),
    "ray_firewall_allow": vocabulary.Networks(world_switch="ray_firewall_allow_world"),
    "ray_firewall_allow_world": vocabulary.Switch(),
    # Metrics (docs/OBSERVABILITY-metrics.md): node_exporter everywhere, Prometheus on the head; the ports are in PORTS.
    "ray_metrics": vocabulary.Switch(),
    "ray_metrics_storage_dir": _Path("owns"),
    "ray_metrics_retention": vocabulary.Text(
        empty=False, max_len=32, pattern=_DURATION, what="a Prometheus duration such as 15d, 12h or 1w"
    ),
    "ray_metrics_dashboards_dir": vocabulary.AbsPath("local", relative=True, spaces=False),
    "ray_metrics_scrape_interval": vocabulary.Text(
        empty=False, max_len=32, pattern=_DURATION, what="a Prometheus duration such as 15s or 1m"
    ),
    # Lands in the head's environment file (RAY_GRAFANA_HOST): a URL without credentials, or empty for none.
    "ray_grafana_url": vocabulary.Url(schemes=("http", "https"), empty=True, hint=" (empty: no Grafana)"),
    "nfs_mount_server": vocabulary.Host(empty=True),
    "nfs_mount_export": _Path("remote"),
    "nfs_mount_path": _Path("writes"),
    "nfs_mount_probe_file": vocabulary.RelPath(),
    "nfs_mount_options": _MountOptions(),
    "nfs_mount_connect_timeout": _Whole(1, "be a whole number of seconds from 1 to %d" % _DAY, _DAY),
    "nfs_mount_probe_timeout": _Whole(1, "be a whole number of seconds from 1 to %d" % _DAY, _DAY),
    "storage_lvm_devices": _Devices(),
    "storage_lvm_vg_name": _Pattern(
        _LVM_NAME, "be an LVM name (letters, digits, + _ . -, not starting with -)", ["-vg", "my lv", ".."]
    ),
    "storage_lvm_lv_name": _Pattern(
        _LVM_NAME, "be an LVM name (letters, digits, + _ . -, not starting with -)", ["-lv", "my lv"]
    ),
    "storage_lvm_stripe_size": _Pattern(_STRIPE, "be empty or a size such as 256k", ["256 kb", "big"], typed_ok=True),
    "storage_lvm_mount_point": _Path("writes"),
    "storage_lvm_mount_options": _MountOptions(),
    "storage_lvm_mount_mode": _Mode(),
    "storage_lvm_mount_owner": _Pattern(_USER, "be a user name (lowercase letters, digits, _ and -)", ["a b"]),
    "storage_lvm_mount_group": _Pattern(_USER, "be a user name (lowercase letters, digits, _ and -)", ["a b"]),
    "storage_lvm_discover_min_size": _Pattern(_SIZE, "be a size such as 1G or 500M", ["big", "1 G"], typed_ok=True),
    "python_env_path": _Path("owns"),
    "python_env_python": _Path("reads"),
    "python_env_wheelhouse": _Path("writes"),
    "python_env_packages": vocabulary.ListOf(vocabulary.Requirement()),
    "python_env_index_url": vocabulary.Url(schemes=("https", "http", "file"), empty=True, hint=_CREDENTIALS_HINT),
    "python_env_extra_index_urls": vocabulary.ListOf(
        vocabulary.Url(schemes=("https", "http", "file"), hint=_CREDENTIALS_HINT)
    ),
    "ray_fitness_check": vocabulary.Switch(),
    "fitness_min_gbit": vocabulary.Number(0, 1e5, unit="Gbit/s"),
    "fitness_ray_min_gbit": vocabulary.Number(0, 1e5, unit="Gbit/s"),
    "fitness_allreduce_min_busbw": vocabulary.Number(0, 1e5, unit="GB/s"),
    "fitness_allreduce": vocabulary.Choice(("auto", "gloo", "off")),
    "fitness_seconds": vocabulary.Number(0.1, 60, unit="seconds"),
    "fitness_pairs_max": vocabulary.Int(0, 64),
    "fitness_ray_object_mib": vocabulary.Int(1, 4096, unit="MiB"),
    "fitness_ray_timeout": vocabulary.Int(10, 86400, unit="seconds"),
    "fitness_gpu": vocabulary.Choice(("auto", "off")),
    "fitness_dcgm": vocabulary.Switch(),
    "fitness_min_free_gib": vocabulary.Number(0, 1e6, unit="GiB"),
    "fitness_min_scratch_free_gib": vocabulary.Number(0, 1e6, unit="GiB"),
    "fitness_shared_path": vocabulary.AbsPath("writes", spaces=False),
    "fitness_scratch_path": vocabulary.AbsPath("writes", spaces=False),
    "fitness_exclude_unfit": vocabulary.Switch(),
    "fitness_report_only": vocabulary.Switch(),
    "fitness_artifacts_dir": vocabulary.AbsPath("local", relative=True, spaces=False),
    "hyperbolic_min_hours": vocabulary.Number(0, 24 * 365, unit="hours"),
    "hyperbolic_daily_budget": vocabulary.Number(0, above=True, unit="US dollars a day"),
    "hyperbolic_ssh_public_key": vocabulary.Text(
        max_len=16384,
        pattern=r"^(ssh|ecdsa)-[A-Za-z0-9-]+ [A-Za-z0-9+/=]+( .*)?$|^$",
        what="one OpenSSH public key line (ssh-ed25519 AAAA... comment)",
    ),
    "hyperbolic_record_dir": vocabulary.AbsPath("local", spaces=False),
    # recovery.replace: the private key (on the controller) the run's supervisor reaches new machines with.
    "hyperbolic_replace_ssh_key": vocabulary.AbsPath("local", spaces=False),
    # The bound of every step on a node in site.yml, fitness.yml and submit.yml (the play keyword timeout).
    "rlinfra_step_timeout": _Whole(60, "be a whole number of seconds from 60 to %d (a week)" % (7 * _DAY), 7 * _DAY),
}
RULES.update((name, vocabulary.Port()) for name in PORTS)


def owner(name: str) -> str | None:
    """The role a variable belongs to: the longest role prefix it starts with (None when none)."""
    owners = [r for r in ROLES if name.startswith(r + "_")]
    return max(owners, key=len) if owners else None


def names_for(roles: Collection[str]) -> list[str]:
    """The checked variables of the given roles."""
    unknown = [r for r in roles if r not in ROLES]
    if unknown:
        raise ValueError("unknown role(s) %s; known: %s" % (", ".join(unknown), ", ".join(ROLES)))
    return sorted(n for n in RULES if owner(n) in roles)


def plain(value: Any) -> Any:
    """The value with Ansible's tagged types turned into Python's own (so that a line shows ``int``)."""
    if isinstance(value, dict):
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    for kind in (bool, int, float, str):
        if isinstance(value, kind):
            return kind(value)
    return value


def null_ok(rule: vocabulary.Type) -> bool:
    """Whether a role variable of this rule may be null: only where its kind reads null as one of its words
    (ray_num_cpus: Ray detects it)."""
    try:
        rule.check(None)
    # Any refusal, or a kind that cannot read None at all, means no.
    except Exception:  # pylint: disable=broad-except
        return False
    return True


def check(settings: dict[str, Any]) -> list[str]:
    """``{name: value}`` -> list of error lines (empty when every value is good). Unknown names are ignored."""
    settings = plain(settings)
    errors = []
    for name in sorted(settings):
        rule = RULES.get(name)
        if rule is None:
            continue
        if settings[name] is None and not null_ok(rule):
            # A YAML key with no value (ray_metrics:) reads as null: it is no setting, and a template would fail on it.
            errors.append(
                "%s must be set: it is null (a key with no value); give it a value, or leave it out for the "
                "role's default" % name
            )
            continue
        try:
            rule.validate(settings[name], settings)
        except Bad as e:
            errors.append(rule.line(name, settings[name], e))
    errors.extend(_port_clashes(settings))
    if not errors:  # a pair is judged once each value is good (one line per mistake)
        errors.extend(_container_pairs(settings))
        errors.extend(_owned_overlaps(settings))
    return errors


# Directories the roles own under two names on purpose: the ray role runs the venv python_env makes.
_SAME_OWNED = {frozenset(("python_env_path", "ray_venv"))}


def _owned_overlaps(settings: Mapping[str, Any]) -> list[str]:
    """Two directories the roles own (and a purge removes) that are one, or one inside the other: removing either
    would take the other with it (ray_temp_dir=/workspace/ray with ray_metrics_storage_dir=/workspace/ray/prom)."""
    owned = sorted(
        (name, settings[name])
        for name, rule in RULES.items()
        if getattr(rule, "purpose", None) == "owns" and settings.get(name)
    )
    errors = []
    for i, (a, path_a) in enumerate(owned):
        for b, path_b in owned[i + 1 :]:
            if frozenset((a, b)) in _SAME_OWNED and vocabulary.normpath(path_a) == vocabulary.normpath(path_b):
                continue
            if vocabulary.overlap(path_a, path_b):
                errors.append(
                    "%s (%s) and %s (%s) %s: each is a directory of its own, which teardown's purge removes "
                    "whole; give them separate places"
                    % (
                        a,
                        path_a,
                        b,
                        path_b,
                        "are the same directory"
                        if vocabulary.normpath(path_a) == vocabulary.normpath(path_b)
                        else "lie one inside the other",
                    )
                )
    return errors


def _container_pairs(settings: Mapping[str, Any]) -> list[str]:
    """Container settings that mean nothing alone: said, rather than quietly running the venv path."""
    errors = []
    image = settings.get("ray_container_image")
    if settings.get("ray_container_image_archive") and not image:
        errors.append(
            "ray_container_image_archive is set but ray_container_image is not: set ray_container_image to the "
            "reference the archive holds (docker save's name:tag), which is what switches the cluster to "
            "container mode"
        )
    if settings.get("ray_container_image_store") and not image:
        errors.append(
            "ray_container_image_store is set but ray_container_image is not: set ray_container_image (the "
            "image the store is to hold), or unset ray_container_image_store"
        )
    user, password = settings.get("ray_container_registry_username"), settings.get("ray_container_registry_password")
    if bool(user) != bool(password):
        errors.append(
            "ray_container_registry_username and ray_container_registry_password go together: set both "
            "(the password through Ansible Vault), or neither for a public image"
        )
    return errors


def _port_clashes(settings: Mapping[str, Any]) -> list[str]:
    given = {}
    for name in PORTS:
        if name in settings:
            try:
                given[name] = vocabulary.Port().validate(settings[name])
            except Bad:
                return []  # already reported
    errors = []
    by_number: dict[int, list[str]] = {}
    for name, number in given.items():
        by_number.setdefault(number, []).append(name)
    for number, names in sorted(by_number.items()):
        if len(names) > 1:
            errors.append("%s all use port %d: give each its own port" % (" and ".join(sorted(names)), number))
    low, high = given.get("ray_min_worker_port"), given.get("ray_max_worker_port")
    if low is not None and high is not None:
        if low > high:
            errors.append("ray_min_worker_port (%d) must not be above ray_max_worker_port (%d)" % (low, high))
        else:
            inside = sorted(
                n
                for n, p in given.items()
                if low <= p <= high and n not in ("ray_min_worker_port", "ray_max_worker_port")
            )
            if inside:
                errors.append(
                    "%s fall%s inside the worker port range %d-%d (ray_min_worker_port..ray_max_worker_port): "
                    "move %s or the range"
                    % (
                        ", ".join(inside),
                        "s" if len(inside) == 1 else "",
                        low,
                        high,
                        "it" if len(inside) == 1 else "them",
                    )
                )
    return errors
