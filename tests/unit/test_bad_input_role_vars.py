"""Bad role variables, one table: every row is one careless or hostile value a user can put in an
inventory, group_vars or ``-e``, and the exact line it must give. Nothing may be changed by it.

Two kinds of rows:

* ``rule``: what a type cannot say (an address Ray can bind to, ports, counts, mount options, no newline
  in anything written to a unit, an environment file or fstab). Checked by
  ``rlinfra.verl.check_settings`` (rules in ``module_utils/common/settings.py``), the first task of every role
  entry point, and by site.yml before any role runs.
* ``spec``: a wrong type or choice, refused by the role's ``meta/argument_specs.yml`` entry point (which
  Ansible applies only when ``tasks_from`` names the entry point exactly: see
  ``test_every_tasks_from_names_an_entry_point``).

Every row is checked twice: in-process against the rule or the entry point's spec, and for real, one
host per row, in ONE ``ansible-playbook`` run over a local inventory (check mode, so that a value
wrongly let through could still change nothing), where each host must fail with its row's line.
"""

from __future__ import annotations

import collections
import glob
import json
import os
import subprocess
import sys

import pytest
import yaml
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.rlinfra.verl.plugins.module_utils.common import settings

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PORT_LINE = "must be a TCP port from 1 to 65535"
IP_LINE = "must be this node's private IP address (for example 10.0.0.5)"
ONE_LINE = "must be one line without control characters"
OPTIONS = "must be comma-separated mount options without spaces, for example defaults,noatime"
ABS = "must be an absolute path without spaces"
# What a role would write into a unit line, and systemd (or the container engine's --volume) would read itself.
UNIT_PATH = "without : or any of % $ \\ ' \" ` ; (systemd reads them in a unit line, a container mount splits at :)"
RAY_ARG = "without spaces or any of % $ \\ ' \" ` ; (systemd reads them in the unit's ExecStart line)"

Row = collections.namedtuple("Row", "id kind given expect entry")


def rule(id, given, expect):
    """``expect``: the whole line ``check`` gives; ``{v}`` stands for the shown value."""
    return Row(id, "rule", given, expect, None)


def spec(id, entry, given, expect):
    """``entry``: role/entry point whose argument spec refuses ``given`` with a message containing ``expect``."""
    return Row(id, "spec", given, expect, entry)


NL = "10.0.0.5\nExecStartPre=/bin/touch /tmp/rlinfra-pwned"
ROWS = [
    # -- ray: the node address Ray binds to and advertises ------------------------------------------------
    rule(
        "ip_unspecified",
        {"ray_private_ip": "0.0.0.0"},
        "ray_private_ip must be an address the other nodes can reach (Ray advertises it), not 0.0.0.0, got '0.0.0.0'",
    ),
    rule(
        "ip_unspecified_v6",
        {"ray_private_ip": "::"},
        "ray_private_ip must be an address the other nodes can reach (Ray advertises it), not ::, got '::'",
    ),
    rule("ip_newline_injects_unit_line", {"ray_private_ip": NL}, "ray_private_ip %s, got %r" % (ONE_LINE, NL)),
    rule(
        "ip_empty_no_facts",
        {"ray_private_ip": ""},
        "ray_private_ip must be this node's private IP address (the node's facts showed none: set it in the "
        "inventory), got ''",
    ),
    rule("ip_hostname", {"ray_private_ip": "node-1"}, "ray_private_ip %s, got 'node-1'" % IP_LINE),
    rule("ip_octet_out_of_range", {"ray_private_ip": "10.0.0.256"}, "ray_private_ip %s, got '10.0.0.256'" % IP_LINE),
    rule(
        "ip_multicast",
        {"ray_private_ip": "224.0.0.1"},
        "ray_private_ip must be an address the other nodes can reach (Ray advertises it), not 224.0.0.1, "
        "got '224.0.0.1'",
    ),
    rule("ip_with_port", {"ray_private_ip": "10.0.0.5:6379"}, "ray_private_ip %s, got '10.0.0.5:6379'" % IP_LINE),
    rule("ip_as_number", {"ray_private_ip": 167772165}, "ray_private_ip must be text, got 167772165"),
    # -- ray: ports ----------------------------------------------------------------------------------------
    rule("gcs_port_word", {"ray_gcs_port": "abc"}, "ray_gcs_port %s, got 'abc'" % PORT_LINE),
    rule("gcs_port_zero", {"ray_gcs_port": 0}, "ray_gcs_port must be a TCP port from 1 to 65535, got 0"),
    rule("gcs_port_too_high", {"ray_gcs_port": 70000}, "ray_gcs_port must be a TCP port from 1 to 65535, got 70000"),
    rule(
        "dashboard_port_negative",
        {"ray_dashboard_port": -1},
        "ray_dashboard_port must be a TCP port from 1 to 65535, got -1",
    ),
    rule(
        "port_boolean",
        {"ray_metrics_export_port": True},
        "ray_metrics_export_port must be a TCP port from 1 to 65535, got True",
    ),
    rule(
        "two_ports_same_number",
        {"ray_gcs_port": 6379, "ray_dashboard_port": 6379},
        "ray_dashboard_port and ray_gcs_port all use port 6379: give each its own port",
    ),
    rule(
        "worker_range_inverted",
        {"ray_min_worker_port": 20000, "ray_max_worker_port": 19999},
        "ray_min_worker_port (20000) must not be above ray_max_worker_port (19999)",
    ),
    rule(
        "port_inside_worker_range",
        {"ray_client_server_port": 15000, "ray_min_worker_port": 10002, "ray_max_worker_port": 19999},
        "ray_client_server_port falls inside the worker port range 10002-19999 (ray_min_worker_port.."
        "ray_max_worker_port): move it or the range",
    ),
    # -- ray: counts and limits ----------------------------------------------------------------------------
    rule(
        "gpus_word", {"ray_num_gpus": "lots"}, "ray_num_gpus must be auto or a whole number from 0 to 1024, got 'lots'"
    ),
    rule("gpus_negative", {"ray_num_gpus": -1}, "ray_num_gpus must be auto or a whole number from 0 to 1024, got -1"),
    rule("gpus_fraction", {"ray_num_gpus": 1.5}, "ray_num_gpus must be auto or a whole number from 0 to 1024, got 1.5"),
    rule(
        "gpus_AUTO_upper",
        {"ray_num_gpus": "AUTO"},
        "ray_num_gpus must be auto or a whole number from 0 to 1024, got 'AUTO'",
    ),
    rule(
        "cpus_word",
        {"ray_num_cpus": "many"},
        "ray_num_cpus must be empty (Ray detects it) or a whole number from 0 to 65536, got 'many'",
    ),
    rule(
        "nofile_unlimited",
        {"ray_limit_nofile": "unlimited"},
        "ray_limit_nofile must be infinity or a whole number from 1 to 1073741816, got 'unlimited'",
    ),
    rule(
        "nproc_zero",
        {"ray_limit_nproc": 0},
        "ray_limit_nproc must be infinity or a whole number from 1 to 1073741816, got 0",
    ),
    rule(
        "start_timeout_zero",
        {"ray_start_timeout": 0},
        "ray_start_timeout must be a whole number of seconds from 1 to 86400, got 0",
    ),
    rule(
        "idle_release_words",
        {"ray_head_idle_release_after": "2h"},
        "ray_head_idle_release_after must be a whole number of seconds, 0 for off, at most 31622400 (a year), got '2h'",
    ),
    rule(
        "join_wave_negative",
        {"ray_worker_join_wave": -1},
        "ray_worker_join_wave must be a whole number of workers, 0 to start them all at once, at most 1000, got -1",
    ),
    rule(
        "idle_check_too_often",
        {"ray_head_idle_check_every": 1},
        "ray_head_idle_check_every must be a whole number of seconds from 10 to 86400, got 1",
    ),
    # -- ray: what lands in the unit and its files ---------------------------------------------------------
    rule("umask_not_octal", {"ray_umask": "0999"}, "ray_umask must be an octal umask such as 0027, got '0999'"),
    rule(
        "umask_world_writable",
        {"ray_umask": "0000"},
        "ray_umask must be a umask that keeps others from writing (its last digit 2, 3, 6 or 7, such as 0022 or 0027): "
        "anything else makes every file Ray writes writable by any user, got '0000'",
    ),
    # -- paths the collection writes into: never /, a system directory or one under it, nor one of others' -----
    rule(
        "venv_in_usr",
        {"python_env_path": "/usr"},
        "python_env_path must be a directory of the collection's own, outside the system's directories (/usr, /etc, "
        "/proc, ...): /usr is one, got '/usr'",
    ),
    rule(
        "venv_in_opt",
        {"python_env_path": "/opt"},
        "python_env_path must be a directory of the collection's own below /opt (such as /opt/rlinfra), not /opt "
        "itself, which holds others' directories, got '/opt'",
    ),
    rule(
        "metrics_storage_root",
        {"ray_metrics_storage_dir": "/"},
        "ray_metrics_storage_dir must be a directory of the collection's own, not /, got '/'",
    ),
    rule(
        "mount_point_root",
        {"storage_lvm_mount_point": "/"},
        "storage_lvm_mount_point must be a place the collection may write into, not /, got '/'",
    ),
    rule(
        "mount_point_etc",
        {"storage_lvm_mount_point": "/etc"},
        "storage_lvm_mount_point must be a place the collection may write into, outside the system's directories "
        "(/usr, /etc, /proc, ...): /etc is one, got '/etc'",
    ),
    rule(
        "mount_point_double_slash_etc",
        {"storage_lvm_mount_point": "//etc"},
        "storage_lvm_mount_point must be a place the collection may write into, outside the system's directories "
        "(/usr, /etc, /proc, ...): /etc is one, got '//etc'",
    ),
    rule(
        "nfs_path_under_proc",
        {"nfs_mount_path": "/proc/data"},
        "nfs_mount_path must be a place the collection may write into, outside the system's directories (/usr, "
        "/etc, /proc, ...): /proc/data is under /proc, got '/proc/data'",
    ),
    rule(
        "config_dir_etc",
        {"ray_config_dir": "/etc"},
        "ray_config_dir must be a place of the collection's own below /etc (such as /etc/ray), not /etc itself, got "
        "'/etc'",
    ),
    rule(
        "temp_dir_and_metrics_nested",
        {"ray_temp_dir": "/workspace/ray", "ray_metrics_storage_dir": "/workspace/ray/p"},
        "ray_metrics_storage_dir (/workspace/ray/p) and ray_temp_dir (/workspace/ray) lie one inside the other: each "
        "is a directory of its own, which teardown's purge removes whole; give them separate places",
    ),
    rule(
        "container_mount_root",
        {"ray_container_mounts": ["/"]},
        "ray_container_mounts[0] must be a directory the container may write into, not /, got '/'",
    ),
    rule(
        "container_mount_twice",
        {"ray_container_mounts": ["/data", "/data"]},
        "ray_container_mounts must hold each item once ('/data' is given twice), got ['/data', '/data'] (a list)",
    ),
    rule(
        "metrics_null",
        {"ray_metrics": None},
        "ray_metrics must be set: it is null (a key with no value); give it a value, or leave it out for the role's "
        "default",
    ),
    rule(
        "cluster_token",
        {"ray_cluster": "hf_" + "s3cr3t" * 6},
        "ray_cluster must be a name of letters, digits, _ . - (starting with a letter or digit, at most 80), not a "
        "credential: secrets have fields of their own (an experiment's secrets:, Ansible Vault), got a value that "
        "looks like it holds a credential (not shown)",
    ),
    rule("fitness_gbit_word", {"fitness_min_gbit": "fast"}, "fitness_min_gbit must be a number, got 'fast'"),
    rule(
        "step_timeout_too_short",
        {"rlinfra_step_timeout": 10},
        "rlinfra_step_timeout must be a whole number of seconds from 60 to 604800 (a week), got 10",
    ),
    rule(
        "probe_file_absolute",
        {"nfs_mount_probe_file": "/etc/x"},
        "nfs_mount_probe_file must be a relative path inside its base (not starting with /, no '..'), got '/etc/x'",
    ),
    rule(
        "user_with_space",
        {"ray_user": "ray user"},
        "ray_user must be a user name (lowercase letters, digits, _ and -), got 'ray user'",
    ),
    rule(
        "user_newline",
        {"ray_user": "root\nExecStartPre=/bin/sh"},
        "ray_user %s, got 'root\\nExecStartPre=/bin/sh'" % ONE_LINE,
    ),
    rule(
        "temp_dir_relative",
        {"ray_temp_dir": "ray"},
        "ray_temp_dir must be an absolute path without spaces or '..', got 'ray'",
    ),
    rule(
        "temp_dir_too_long",
        {"ray_temp_dir": "/" + "x" * 60},
        "ray_temp_dir must be an absolute path shorter than 60 characters (Ray's socket paths must fit in 107), "
        "got '/%s'" % ("x" * 60),
    ),
    rule(
        "temp_dir_space",
        {"ray_temp_dir": "/work space/ray"},
        "ray_temp_dir must be an absolute path without spaces or '..', got '/work space/ray'",
    ),
    rule(
        "config_dir_relative",
        {"ray_config_dir": "etc/ray"},
        "ray_config_dir must be an absolute path without spaces or '..', got 'etc/ray'",
    ),
    rule("venv_relative", {"ray_venv": "venv"}, "ray_venv must be an absolute path without spaces or '..', got 'venv'"),
    rule(
        "env_bad_name",
        {"ray_env": {"BAD-NAME": "x"}},
        "ray_env (a key) must be an environment variable name (letters, digits, _; not starting with a digit), got "
        "'BAD-NAME'",
    ),
    rule(
        "env_value_newline",
        {"ray_env": {"X": "a\nLD_PRELOAD=/evil.so"}},
        "ray_env.X must be one line of text without line breaks or control characters, got 'a\\nLD_PRELOAD=/evil.so'",
    ),
    # A secret's value (by the collection's name rule) is refused like any other, but never shown.
    rule(
        "env_secret_value_newline",
        {"ray_env": {"HF_TOKEN": "hf_s3cr3t\n"}},
        "ray_env.HF_TOKEN must be one line of text without line breaks or control characters (the value is not shown)",
    ),
    rule(
        "env_secret_value_list",
        {"ray_env": {"wandbApiKey": ["s3cr3t"]}},
        "ray_env.wandbApiKey must be one line of text (the value is not shown)",
    ),
    rule(
        "image_credentials_after_tag",
        {"ray_container_image": "registry.example/x:1@user:s3cr3t"},
        "ray_container_image must be a container image reference without credentials: set "
        "ray_container_registry_username and ray_container_registry_password instead (the value, which may hold "
        "credentials, is not shown)",
    ),
    rule(
        "index_url_without_slashes",
        {"python_env_index_url": "https:user:s3cr3t@pypi.example/simple"},
        "python_env_index_url must be an https:// or http:// or file:// URL with a host, got a value that is not a "
        "URL (not shown) (credentials for a private index go in the nodes' ~/.netrc, which uv reads)",
    ),
    rule(
        "private_key_for_public",
        {"hyperbolic_ssh_public_key": "-----BEGIN OPENSSH PRIVATE KEY-----\ns3cr3t\n"},
        "hyperbolic_ssh_public_key must be one OpenSSH public key line (ssh-ed25519 AAAA... comment) without line "
        "breaks or control characters, got a value that looks like it holds a credential (not shown)",
    ),
    rule("env_nested", {"ray_env": {"X": {"y": 1}}}, "ray_env.X must be one line of text, got {'y': 1} (a mapping)"),
    rule("env_as_string", {"ray_env": "A=1"}, "ray_env must be a mapping, got 'A=1'"),
    rule(
        "rocm_env_nested",
        {"ray_rocm_env": {"GPU_MAX_HW_QUEUES": [2]}},
        "ray_rocm_env.GPU_MAX_HW_QUEUES must be one line of text, got [2] (a list)",
    ),
    rule(
        "env_secret_pattern_unbalanced",
        {"ray_env_secret_pattern": "(TOKEN"},
        "ray_env_secret_pattern must be empty (the collection's rule for secret names) or a regular expression "
        "(missing ), unterminated subpattern at position 0), got '(TOKEN'",
    ),
    rule(
        "resources_gpu",
        {"ray_resources": {"GPU": 2}},
        "ray_resources must be custom resources only; GPU is set with its own variable (ray_num_cpus, "
        "ray_num_gpus), got {'GPU': 2} (a mapping)",
    ),
    rule(
        "resources_word_amount",
        {"ray_resources": {"accel": "lots"}},
        "ray_resources must be a mapping to amounts of 0 or more; accel has 'lots', got {'accel': 'lots'} (a mapping)",
    ),
    rule(
        "resources_negative",
        {"ray_resources": {"accel": -1}},
        "ray_resources must be a mapping to amounts of 0 or more; accel has -1, got {'accel': -1} (a mapping)",
    ),
    rule("extra_args_string", {"ray_extra_args": "--num-gpus=2"}, "ray_extra_args must be a list, got '--num-gpus=2'"),
    rule(
        "extra_args_newline",
        {"ray_extra_args": ["--x\nExecStartPre=/bin/sh"]},
        "ray_extra_args[0] must be one argument of ray start without line breaks or control characters, got "
        "'--x\\nExecStartPre=/bin/sh'",
    ),
    rule(
        "cluster_space",
        {"ray_cluster": "my cluster"},
        "ray_cluster must be a name of letters, digits, _ . - (starting with a letter or digit, at most 80), "
        "got 'my cluster'",
    ),
    # -- ray: container mode --------------------------------------------------------------------------------------
    rule(
        "container_image_credentials",
        {"ray_container_image": "user:s3cr3tPass@registry.example/verl:1"},
        "ray_container_image must be a container image reference without credentials: set "
        "ray_container_registry_username and ray_container_registry_password instead (the value, which may hold "
        "credentials, is not shown)",
    ),
    rule(
        "container_image_uppercase",
        {"ray_container_image": "Verl/Verl:1"},
        "ray_container_image must be a container image reference ([registry/]name[:tag][@sha256:digest], for example "
        "docker.io/verlai/verl:app-verl0.5-vllm0.10.0-mcore0.13.0-te2.2), got 'Verl/Verl:1'",
    ),
    rule(
        "container_archive_relative",
        {"ray_container_image_archive": "images/verl.tar"},
        "ray_container_image_archive must be an absolute path (starting with /), got 'images/verl.tar'",
    ),
    rule(
        "container_engine_typo",
        {"ray_container_engine": "podmn"},
        "ray_container_engine must be one of auto, podman, docker (did you mean 'podman'?), got 'podmn'",
    ),
    rule(
        "container_registry_user_space",
        {"ray_container_registry_username": "a b"},
        "ray_container_registry_username must be a registry user name (no spaces or colons), got 'a b'",
    ),
    rule(
        "container_registry_password_newline",
        {"ray_container_registry_password": "a\nb"},
        "ray_container_registry_password must be the secret alone, without spaces, line breaks or other characters a "
        "token cannot have (the value is not shown)",
    ),
    rule(
        "container_archive_without_image",
        {"ray_container_image_archive": "/data/images/verl.tar"},
        "ray_container_image_archive is set but ray_container_image is not: set ray_container_image to the reference "
        "the archive holds (docker save's name:tag), which is what switches the cluster to container mode",
    ),
    rule(
        "container_store_relative",
        {"ray_container_image": "registry.example/verl:1", "ray_container_image_store": "rlinfra-images"},
        "ray_container_image_store must be an absolute path (starting with /), got 'rlinfra-images'",
    ),
    rule(
        "container_store_without_image",
        {"ray_container_image_store": "/data/rlinfra-images"},
        "ray_container_image_store is set but ray_container_image is not: set ray_container_image (the image the "
        "store is to hold), or unset ray_container_image_store",
    ),
    rule(
        "container_registry_user_alone",
        {"ray_container_image": "registry.example/verl:1", "ray_container_registry_username": "bot"},
        "ray_container_registry_username and ray_container_registry_password go together: set both (the password "
        "through Ansible Vault), or neither for a public image",
    ),
    rule(
        "container_mount_relative",
        {"ray_container_mounts": ["/data", "data2"]},
        "ray_container_mounts[1] must be an absolute path without spaces or '..', got 'data2'",
    ),
    rule(
        "firewall_controller_any",
        {"ray_firewall_controller": "0.0.0.0"},
        "ray_firewall_controller must be an address the other nodes can reach, not 0.0.0.0, got '0.0.0.0'",
    ),
    rule(
        "firewall_allow_bad_prefix",
        {"ray_firewall_allow": ["10.0.0.0/33"]},
        "ray_firewall_allow[0] must be an IP address or network (for example 10.0.0.0/24), got '10.0.0.0/33'",
    ),
    rule(
        "firewall_switch_typo",
        {"ray_firewall": "ture"},
        "ray_firewall must be true or false (also yes/no/1/0, any case), got 'ture'",
    ),
    rule(
        "firewall_allow_string",
        {"ray_firewall_allow": "10.0.0.0/24"},
        "ray_firewall_allow must be a list, got '10.0.0.0/24'",
    ),
    rule(
        "firewall_allow_world",
        {"ray_firewall_allow": ["10.0.0.0/24", "0.0.0.0/0"]},
        "ray_firewall_allow[1] must be a network narrower than /8: 0.0.0.0/0 opens to the whole internet or a large "
        "part of it (set ray_firewall_allow_world: true if that is really meant), got '0.0.0.0/0'",
    ),
    rule(
        "firewall_allow_world_v6",
        {"ray_firewall_allow": ["::/0"]},
        "ray_firewall_allow[0] must be a network narrower than /16: ::/0 opens to the whole internet or a large part "
        "of it (set ray_firewall_allow_world: true if that is really meant), got '::/0'",
    ),
    rule(
        "firewall_allow_world_typo",
        {"ray_firewall_allow_world": "yse"},
        "ray_firewall_allow_world must be true or false (also yes/no/1/0, any case), got 'yse'",
    ),
    # -- fresh forms (hardening review): what systemd, the container engine or the firewall would read otherwise ---
    rule(
        "ip_scoped_specifier",
        {"ray_private_ip": "fe80::1%eth0"},
        "ray_private_ip must be an address the other nodes can reach (Ray advertises it), without a %scope "
        "(fe80::1%eth0 is this node's own link-local name), got 'fe80::1%eth0'",
    ),
    rule(
        "ip_broadcast",
        {"ray_private_ip": "255.255.255.255"},
        "ray_private_ip must be an address the other nodes can reach (Ray advertises it), not 255.255.255.255, got "
        "'255.255.255.255'",
    ),
    rule(
        "ip_mapped_any",
        {"ray_private_ip": "::ffff:0.0.0.0"},
        "ray_private_ip must be an address the other nodes can reach (Ray advertises it), not ::ffff:0:0, got "
        "'::ffff:0.0.0.0'",
    ),
    rule("ip_leading_space", {"ray_private_ip": " 10.0.0.5"}, "ray_private_ip %s, got ' 10.0.0.5'" % IP_LINE),
    rule(
        "dashboard_host_any",
        {"ray_head_dashboard_host": "0.0.0.0"},
        "ray_head_dashboard_host must be an address the other nodes can reach, not 0.0.0.0, got '0.0.0.0' (empty: the "
        "node's private address; reach the dashboard through an SSH tunnel)",
    ),
    rule(
        "dashboard_host_newline",
        {"ray_head_dashboard_host": NL},
        "ray_head_dashboard_host must be an IP address (for example 10.0.0.5) without line breaks or control "
        "characters, got %r (empty: the node's private address; reach the dashboard through an SSH tunnel)" % NL,
    ),
    rule(
        "head_extra_args_newline",
        {"ray_head_extra_args": ["--x\nExecStartPre=/bin/sh"]},
        "ray_head_extra_args[0] must be one argument of ray start without line breaks or control characters, got "
        "'--x\\nExecStartPre=/bin/sh'",
    ),
    rule(
        "extra_args_rebind_dashboard",
        {"ray_head_extra_args": ["--dashboard-host=0.0.0.0"]},
        "ray_head_extra_args[0] must not be --dashboard-host, which the role sets itself (from "
        "ray_head_dashboard_host), got '--dashboard-host=0.0.0.0'",
    ),
    rule(
        "worker_extra_args_node_ip",
        {"ray_worker_extra_args": ["--node-ip-address", "0.0.0.0"]},
        "ray_worker_extra_args[0] must not be --node-ip-address, which the role sets itself (from ray_private_ip), "
        "got '--node-ip-address'",
    ),
    rule(
        "extra_args_specifier",
        {"ray_extra_args": ["--labels=%n"]},
        "ray_extra_args[0] must be one argument of ray start, " + RAY_ARG + ", got '--labels=%n'",
    ),
    rule(
        "extra_args_variable",
        {"ray_extra_args": ["--object-store-memory=$MEM"]},
        "ray_extra_args[0] must be one argument of ray start, " + RAY_ARG + ", got '--object-store-memory=$MEM'",
    ),
    rule(
        "extra_args_two_words",
        {"ray_extra_args": ["--system-config {}"]},
        "ray_extra_args[0] must be one argument of ray start, " + RAY_ARG + ", got '--system-config {}'",
    ),
    rule(
        "temp_dir_specifier",
        {"ray_temp_dir": "/tmp/ray-%i"},
        "ray_temp_dir must be an absolute path " + UNIT_PATH + ", got '/tmp/ray-%i'",
    ),
    rule(
        "venv_variable",
        {"ray_venv": "/opt/$USER/venv"},
        "ray_venv must be an absolute path " + UNIT_PATH + ", got '/opt/$USER/venv'",
    ),
    rule(
        "config_dir_backslash",
        {"ray_config_dir": "/etc/ray\\x"},
        "ray_config_dir must be an absolute path " + UNIT_PATH + ", got '/etc/ray\\\\x'",
    ),
    rule(
        "container_mount_two_paths",
        {"ray_container_mounts": ["/data:/etc"]},
        "ray_container_mounts[0] must be an absolute path " + UNIT_PATH + ", got '/data:/etc'",
    ),
    rule(
        "container_mount_selinux_option",
        {"ray_container_mounts": ["/data:/x:z"]},
        "ray_container_mounts[0] must be an absolute path " + UNIT_PATH + ", got '/data:/x:z'",
    ),
    rule(
        "resources_infinite",
        {"ray_resources": {"accel": float("inf")}},
        "ray_resources must be a mapping to amounts of 0 or more; accel has inf, got {'accel': inf} (a mapping)",
    ),
    rule(
        "gpus_a_billion",
        {"ray_num_gpus": 10**9},
        "ray_num_gpus must be auto or a whole number from 0 to 1024, got 1000000000",
    ),
    rule(
        "start_timeout_huge",
        {"ray_start_timeout": 10**30},
        "ray_start_timeout must be a whole number of seconds from 1 to 86400, got 1000000000000000000000000000000",
    ),
    rule(
        "nofile_exponent",
        {"ray_limit_nofile": "1e400"},
        "ray_limit_nofile must be infinity or a whole number from 1 to 1073741816, got '1e400'",
    ),
    rule(
        "firewall_allow_mapped_world",
        {"ray_firewall_allow": ["::ffff:0:0/96"]},
        "ray_firewall_allow[0] must be a network narrower than /8: ::ffff:0:0/96 (all of 0.0.0.0/0) opens to the "
        "whole internet or a large part of it (set ray_firewall_allow_world: true if that is really meant), got "
        "'::ffff:0:0/96'",
    ),
    rule(
        "firewall_allow_nat64_world",
        {"ray_firewall_allow": ["64:ff9b::/96"]},
        "ray_firewall_allow[0] must be a network narrower than /8: 64:ff9b::/96 (all of 0.0.0.0/0) opens to the "
        "whole internet or a large part of it (set ray_firewall_allow_world: true if that is really meant), got "
        "'64:ff9b::/96'",
    ),
    rule(
        "firewall_allow_host_bits",
        {"ray_firewall_allow": ["203.0.113.7/8"]},
        "ray_firewall_allow[0] must be an IP address or network (for example 10.0.0.0/24) without bits set after the "
        "prefix (203.0.113.7/8 is inside 203.0.0.0/8: write 203.0.113.7 for one address, or 203.0.0.0/8 for the "
        "network), got '203.0.113.7/8'",
    ),
    rule(
        "firewall_allow_halves",
        {"ray_firewall_allow": ["128.0.0.0/1", "0.0.0.0/1"]},
        "ray_firewall_allow[0] must be a network narrower than /8: 128.0.0.0/1 opens to the whole internet or a "
        "large part of it (set ray_firewall_allow_world: true if that is really meant), got '128.0.0.0/1'",
    ),
    rule(
        "firewall_allow_every_eight",
        {"ray_firewall_allow": ["%d.0.0.0/8" % i for i in range(256)]},
        "ray_firewall_allow must be networks that together stay narrower than /8: these 256 networks together open "
        "to the whole internet or a large part of it (set ray_firewall_allow_world: true if that is really meant), "
        "got ['0.0.0.0/8', '1.0.0.0/8', '2.0.0.0/8', '3.0.0.0/8', '4.0... (a list)",
    ),
    rule(
        "firewall_controller_broadcast",
        {"ray_firewall_controller": "255.255.255.255"},
        "ray_firewall_controller must be an address the other nodes can reach, not 255.255.255.255, got "
        "'255.255.255.255'",
    ),
    # -- nfs_mount -----------------------------------------------------------------------------------------
    rule("nfs_options_empty", {"nfs_mount_options": ""}, "nfs_mount_options %s, got ''" % OPTIONS),
    rule("nfs_options_space", {"nfs_mount_options": "rw, hard"}, "nfs_mount_options %s, got 'rw, hard'" % OPTIONS),
    rule("nfs_options_empty_word", {"nfs_mount_options": "rw,,hard"}, "nfs_mount_options %s, got 'rw,,hard'" % OPTIONS),
    rule(
        "nfs_options_newline",
        {"nfs_mount_options": "rw\n/dev/sda / ext4 defaults 0 0"},
        "nfs_mount_options %s, got 'rw\\n/dev/sda / ext4 defaults 0 0'" % ONE_LINE,
    ),
    rule(
        "nfs_server_space",
        {"nfs_mount_server": "nfs server"},
        "nfs_mount_server must be a host name or IP address, got 'nfs server'",
    ),
    rule(
        "nfs_server_url",
        {"nfs_mount_server": "nfs://10.0.0.9"},
        "nfs_mount_server must be a host name or IP address, got 'nfs://10.0.0.9'",
    ),
    rule(
        "nfs_path_relative",
        {"nfs_mount_path": "data"},
        "nfs_mount_path must be an absolute path without spaces or '..', got 'data'",
    ),
    rule(
        "nfs_path_space",
        {"nfs_mount_path": "/mnt/my data"},
        "nfs_mount_path must be an absolute path without spaces or '..', got '/mnt/my data'",
    ),
    rule("nfs_export_newline", {"nfs_mount_export": "/export\nx"}, "nfs_mount_export %s, got '/export\\nx'" % ONE_LINE),
    rule(
        "nfs_timeout_zero",
        {"nfs_mount_connect_timeout": 0},
        "nfs_mount_connect_timeout must be a whole number of seconds from 1 to 86400, got 0",
    ),
    # -- storage_lvm ---------------------------------------------------------------------------------------
    rule(
        "lvm_devices_string",
        {"storage_lvm_devices": "/dev/sdb"},
        "storage_lvm_devices must be auto or a list of block devices (for example [/dev/nvme1n1]), got '/dev/sdb'",
    ),
    rule(
        "lvm_devices_no_dev",
        {"storage_lvm_devices": ["sdb"]},
        "storage_lvm_devices must be a list of block devices under /dev; 'sdb' is not one, got ['sdb'] (a list)",
    ),
    rule(
        "lvm_vg_dash",
        {"storage_lvm_vg_name": "-vg"},
        "storage_lvm_vg_name must be an LVM name (letters, digits, + _ . -, not starting with -), got '-vg'",
    ),
    rule(
        "lvm_lv_space",
        {"storage_lvm_lv_name": "my lv"},
        "storage_lvm_lv_name must be an LVM name (letters, digits, + _ . -, not starting with -), got 'my lv'",
    ),
    rule(
        "lvm_stripe_words",
        {"storage_lvm_stripe_size": "256 kb"},
        "storage_lvm_stripe_size must be empty or a size such as 256k, got '256 kb'",
    ),
    rule(
        "lvm_mount_point_relative",
        {"storage_lvm_mount_point": "workspace"},
        "storage_lvm_mount_point must be an absolute path without spaces or '..', got 'workspace'",
    ),
    rule(
        "lvm_mount_options_space",
        {"storage_lvm_mount_options": "defaults noatime"},
        "storage_lvm_mount_options %s, got 'defaults noatime'" % OPTIONS,
    ),
    rule(
        "lvm_mode_unquoted",
        {"storage_lvm_mount_mode": 755},
        "storage_lvm_mount_mode must be an octal mode in quotes such as '0755' (unquoted, YAML reads a number), got "
        "755",
    ),
    rule(
        "lvm_min_size_word",
        {"storage_lvm_discover_min_size": "big"},
        "storage_lvm_discover_min_size must be a size such as 1G or 500M, got 'big'",
    ),
    # -- python_env ----------------------------------------------------------------------------------------
    rule(
        "venv_path_relative",
        {"python_env_path": "venv"},
        "python_env_path must be an absolute path without spaces or '..', got 'venv'",
    ),
    rule(
        "packages_string",
        {"python_env_packages": "ray==2.60.0"},
        "python_env_packages must be a list, got 'ray==2.60.0'",
    ),
    rule(
        "packages_newline_option",
        {"python_env_packages": ["ray\n--index-url http://x"]},
        "python_env_packages[0] must be a requirement such as 'ray[default]==2.60.0' (not an option line such as "
        "--index-url or -r FILE) without line breaks or control characters, got 'ray\\n--index-url http://x'",
    ),
    rule(
        "packages_option_line",
        {"python_env_packages": ["ray==2.60.0", "--extra-index-url=https://evil.example/s"]},
        "python_env_packages[1] must be a requirement such as 'ray[default]==2.60.0' (not an option line such as "
        "--index-url or -r FILE), got '--extra-index-url=https://evil.example/s'",
    ),
    rule(
        "packages_requirements_file",
        {"python_env_packages": ["-r /etc/shadow"]},
        "python_env_packages[0] must be a requirement such as 'ray[default]==2.60.0' (not an option line such as "
        "--index-url or -r FILE), got '-r /etc/shadow'",
    ),
    rule(
        "index_url_token",
        {"python_env_index_url": "https://user:s3cr3t@pypi.example/simple"},
        "python_env_index_url must be an https:// or http:// or file:// URL without credentials before '@' (give a "
        "token through its own secret option), got https://********@pypi.example/... (credentials for a private "
        "index go in the nodes' ~/.netrc, which uv reads)",
    ),
    rule(
        "index_url_no_scheme",
        {"python_env_index_url": "pypi.org/simple"},
        "python_env_index_url must be an https:// or http:// or file:// URL, got a value that is not a URL (not "
        "shown) (credentials for a private index go in the nodes' ~/.netrc, which uv reads)",
    ),
    rule(
        "extra_index_string",
        {"python_env_extra_index_urls": "http://x"},
        "python_env_extra_index_urls must be a list, got 'http://x'",
    ),
    rule(
        "net_ifname_spaces",
        {"ray_net_ifname": "eth0 eth1"},
        "ray_net_ifname must be auto, none, or interface names in NCCL_SOCKET_IFNAME's syntax (eth0, ens,eth, ^docker,lo, "
        "=ens5), got 'eth0 eth1'",
    ),
    rule(
        "fitness_check_typo",
        {"ray_fitness_check": "ture"},
        "ray_fitness_check must be true or false (also yes/no/1/0, any case), got 'ture'",
    ),
    # -- fitness.yml's thresholds and switches (role fitness) -----------------------------------------------------
    rule(
        "fitness_min_gbit_negative",
        {"fitness_min_gbit": -1},
        "fitness_min_gbit must be a number of Gbit/s from 0 to 100000.0, got -1",
    ),
    rule(
        "fitness_ray_min_gbit_negative",
        {"fitness_ray_min_gbit": -0.5},
        "fitness_ray_min_gbit must be a number of Gbit/s from 0 to 100000.0, got -0.5",
    ),
    rule(
        "fitness_busbw_negative",
        {"fitness_allreduce_min_busbw": -1},
        "fitness_allreduce_min_busbw must be a number of GB/s from 0 to 100000.0, got -1",
    ),
    spec(
        "fitness_allreduce_choice",
        "fitness/main",
        {"fitness_allreduce": "nccl"},
        "value of fitness_allreduce must be one of: auto, gloo, off, got: nccl",
    ),
    rule(
        "fitness_seconds_zero",
        {"fitness_seconds": 0},
        "fitness_seconds must be a number of seconds from 0.1 to 60, got 0",
    ),
    rule(
        "fitness_pairs_max_big",
        {"fitness_pairs_max": 65},
        "fitness_pairs_max must be a whole number from 0 to 64, got 65",
    ),
    rule(
        "fitness_object_zero",
        {"fitness_ray_object_mib": 0},
        "fitness_ray_object_mib must be a whole number of MiB from 1 to 4096, got 0",
    ),
    rule(
        "fitness_ray_timeout_short",
        {"fitness_ray_timeout": 5},
        "fitness_ray_timeout must be a whole number of seconds from 10 to 86400, got 5",
    ),
    spec(
        "fitness_gpu_choice",
        "fitness/main",
        {"fitness_gpu": "nvidia"},
        "value of fitness_gpu must be one of: auto, off, got: nvidia",
    ),
    rule(
        "fitness_dcgm_typo",
        {"fitness_dcgm": "yes please"},
        "fitness_dcgm must be true or false (also yes/no/1/0, any case), got 'yes please'",
    ),
    rule(
        "fitness_free_negative",
        {"fitness_min_free_gib": -1},
        "fitness_min_free_gib must be a number of GiB from 0 to 1000000.0, got -1",
    ),
    rule(
        "fitness_scratch_free_negative",
        {"fitness_min_scratch_free_gib": -2},
        "fitness_min_scratch_free_gib must be a number of GiB from 0 to 1000000.0, got -2",
    ),
    spec(
        "fitness_min_gbit_word",
        "fitness/main",
        {"fitness_min_gbit": "fast"},
        "argument 'fitness_min_gbit' is of type str and we were unable to convert to float",
    ),
    rule(
        "fitness_shared_relative",
        {"fitness_shared_path": "data"},
        "fitness_shared_path must be an absolute path (starting with /), got 'data'",
    ),
    rule(
        "fitness_scratch_relative",
        {"fitness_scratch_path": "scratch"},
        "fitness_scratch_path must be an absolute path (starting with /), got 'scratch'",
    ),
    rule(
        "fitness_exclude_typo",
        {"fitness_exclude_unfit": "ture"},
        "fitness_exclude_unfit must be true or false (also yes/no/1/0, any case), got 'ture'",
    ),
    rule(
        "fitness_report_only_typo",
        {"fitness_report_only": "flase"},
        "fitness_report_only must be true or false (also yes/no/1/0, any case), got 'flase'",
    ),
    rule(
        "fitness_artifacts_spaces",
        {"fitness_artifacts_dir": "my dir"},
        "fitness_artifacts_dir must be a path without spaces, got 'my dir'",
    ),
    # -- ray: metrics (ray_metrics, docs/OBSERVABILITY.md) -------------------------------------------------
    rule(
        "metrics_typo",
        {"ray_metrics": "ture"},
        "ray_metrics must be true or false (also yes/no/1/0, any case), got 'ture'",
    ),
    rule(
        "metrics_retention_words",
        {"ray_metrics_retention": "15 days"},
        "ray_metrics_retention must be a Prometheus duration such as 15d, 12h or 1w, got '15 days'",
    ),
    rule(
        "metrics_retention_newline_injects_unit_line",
        {"ray_metrics_retention": "15d\nExecStartPre=/bin/true"},
        "ray_metrics_retention must be a Prometheus duration such as 15d, 12h or 1w without line breaks or control "
        "characters, got '15d\\nExecStartPre=/bin/true'",
    ),
    rule(
        "metrics_scrape_interval_number",
        {"ray_metrics_scrape_interval": 15},
        "ray_metrics_scrape_interval must be a Prometheus duration such as 15s or 1m, got 15",
    ),
    rule(
        "metrics_storage_relative",
        {"ray_metrics_storage_dir": "prometheus"},
        "ray_metrics_storage_dir must be an absolute path without spaces or '..', got 'prometheus'",
    ),
    rule(
        "metrics_storage_specifier",
        {"ray_metrics_storage_dir": "/workspace/%n"},
        "ray_metrics_storage_dir must be an absolute path %s, got '/workspace/%%n'" % UNIT_PATH,
    ),
    rule(
        "metrics_port_on_the_dashboards",
        {"ray_metrics_prometheus_port": 8265, "ray_dashboard_port": 8265},
        "ray_dashboard_port and ray_metrics_prometheus_port all use port 8265: give each its own port",
    ),
    rule(
        "metrics_exporter_port_word",
        {"ray_metrics_node_exporter_port": "nine"},
        "ray_metrics_node_exporter_port %s, got 'nine'" % PORT_LINE,
    ),
    rule(
        "metrics_dashboards_spaces",
        {"ray_metrics_dashboards_dir": "my dashboards"},
        "ray_metrics_dashboards_dir must be a path without spaces, got 'my dashboards'",
    ),
    rule(
        "grafana_url_credentials",
        {"ray_grafana_url": "http://admin:s3cr3t@grafana:3000"},
        "ray_grafana_url must be an http:// or https:// URL without credentials before '@' (give a token through its "
        "own secret option), got http://********@grafana:3000 (empty: no Grafana)",
    ),
    rule(
        "grafana_url_scheme",
        {"ray_grafana_url": "ftp://grafana"},
        "ray_grafana_url must be an http:// or https:// URL, got ftp://grafana (empty: no Grafana)",
    ),
    # ray/preflight, as the row above: in the one real run, hosts that include the ray role with different entry points
    # are validated against one of those entry points' specs only.
    spec(
        "metrics_port_type",
        "ray/preflight",
        {"ray_metrics_prometheus_port": "abc"},
        "argument 'ray_metrics_prometheus_port' is of type str and we were unable to convert to int",
    ),
    # -- provision.yml's and teardown.yml's hyperbolic_* variables --------------------------------------------
    rule("min_hours_word", {"hyperbolic_min_hours": "two"}, "hyperbolic_min_hours must be a number, got 'two'"),
    rule(
        "daily_budget_zero",
        {"hyperbolic_daily_budget": 0},
        "hyperbolic_daily_budget must be a number of US dollars a day above 0, got 0",
    ),
    rule(
        "ssh_public_key_not_a_key",
        {"hyperbolic_ssh_public_key": "not a key"},
        "hyperbolic_ssh_public_key must be one OpenSSH public key line (ssh-ed25519 AAAA... comment), got 'not a key'",
    ),
    rule(
        "record_dir_tilde",
        {"hyperbolic_record_dir": "~/.rlinfra"},
        "hyperbolic_record_dir must be an absolute path (starting with /), got '~/.rlinfra'",
    ),
    rule(
        "replace_key_relative",
        {"hyperbolic_replace_ssh_key": "keys/replace"},
        "hyperbolic_replace_ssh_key must be an absolute path (starting with /), got 'keys/replace'",
    ),
    # -- types and choices: the entry points' argument specs -----------------------------------------------
    spec(
        "auth_mode_choice",
        "ray_head/main",
        {"ray_auth_mode": "maybe"},
        "value of ray_auth_mode must be one of: token, disabled, got: maybe",
    ),
    spec(
        "dashboard_port_type",
        "ray/preflight",
        {"ray_dashboard_port": "abc"},
        "argument 'ray_dashboard_port' is of type str and we were unable to convert to int",
    ),
    spec(
        "tail_lines_type",
        "verl_job/status",
        {"verl_job_logs_tail_lines": "abc"},
        "argument 'verl_job_logs_tail_lines' is of type str and we were unable to convert to int",
    ),
    spec(
        "lvm_force_typo",
        "storage_lvm/main",
        {"storage_lvm_force": "treu", "storage_lvm_devices": ["/dev/x"]},
        "argument 'storage_lvm_force' is of type str and we were unable to convert to bool",
    ),
    spec(
        "lvm_fstype_choice",
        "storage_lvm/main",
        {"storage_lvm_fstype": "btrfs", "storage_lvm_devices": ["/dev/x"]},
        "value of storage_lvm_fstype must be one of: ext4, xfs, got: btrfs",
    ),
    spec(
        "lvm_layout_choice",
        "storage_lvm/main",
        {"storage_lvm_layout": "raid5", "storage_lvm_devices": ["/dev/x"]},
        "value of storage_lvm_layout must be one of: striped, linear, plain, got: raid5",
    ),
    spec(
        "nfs_probe_typo",
        "nfs_mount/main",
        {"nfs_mount_probe": "ture", "nfs_mount_server": "192.0.2.1"},
        "argument 'nfs_mount_probe' is of type str and we were unable to convert to bool",
    ),
    spec(
        "python_prune_typo",
        "python_env/main",
        {"python_env_prune": "flase"},
        "argument 'python_env_prune' is of type str and we were unable to convert to bool",
    ),
    spec(
        "head_dashboard_typo",
        "ray_head/main",
        {"ray_head_include_dashboard": "yse"},
        "argument 'ray_head_include_dashboard' is of type str and we were unable to convert to bool",
    ),
    spec(
        "worker_extra_args_dict",
        "ray_worker/main",
        {"ray_worker_extra_args": {"a": 1}},
        "argument 'ray_worker_extra_args' is of type",
    ),
]


def _spec(entry):
    role, point = entry.split("/")
    with open(os.path.join(ROOT, "roles", role, "meta", "argument_specs.yml")) as f:
        return yaml.safe_load(f)["argument_specs"][point]["options"]


@pytest.mark.parametrize("r", ROWS, ids=[r.id for r in ROWS])
def test_one_clear_line(r):
    if r.kind == "rule":
        assert settings.check(r.given) == [r.expect]
    else:
        errors = ArgumentSpecValidator(_spec(r.entry)).validate(dict(r.given)).error_messages
        errors = [e for e in errors if not e.startswith("missing required arguments")]
        assert len(errors) == 1 and r.expect in errors[0], errors


def test_table_is_large_enough():
    assert len(ROWS) >= 60
    assert len({r.id for r in ROWS}) == len(ROWS)
    # Every rule is exercised by at least one row, so a rule cannot rot unseen.
    tried = {name for r in ROWS if r.kind == "rule" for name in r.given}
    assert (
        not set(settings.RULES)
        - tried
        - set(settings.PORTS)
        - {
            "ray_config_dir",
            "nfs_mount_probe_timeout",
            "storage_lvm_mount_owner",
            "storage_lvm_mount_group",
            "python_env_python",
            "python_env_wheelhouse",
            # choices the argument spec refuses first (spec rows above)
            "fitness_allreduce",
            "fitness_gpu",
        }
    )


def test_good_defaults_pass():
    """The roles' own defaults are good values (a rule that refused them would break every run)."""
    values = {}
    for role in ("ray", "ray_metrics", "nfs_mount", "storage_lvm", "python_env"):
        with open(os.path.join(ROOT, "roles", role, "defaults", "main.yml")) as f:
            values.update({k: v for k, v in yaml.safe_load(f).items() if "{{" not in str(v)})
    values.update(ray_private_ip="10.0.0.5", nfs_mount_server="nfs-1.internal", storage_lvm_devices=["/dev/nvme1n1"])
    assert settings.check(values) == []
    assert (
        settings.check(
            {
                "ray_private_ip": "127.0.0.1",
                "ray_num_gpus": "8",
                "ray_limit_nofile": "infinity",
                "storage_lvm_devices": "auto",
                "ray_firewall_allow": ["10.0.0.0/8", "fd00::1"],
            }
        )
        == []
    )
    assert settings.check({"ray_firewall_allow": ["0.0.0.0/0", "::/0"], "ray_firewall_allow_world": True}) == []


# ---- the same rows, for real -------------------------------------------------------------------------------

ENTRY_OF = {
    "ray": "ray_head/main",
    "nfs_mount": "nfs_mount/main",
    "storage_lvm": "storage_lvm/main",
    "python_env": "python_env/main",
    "fitness": "fitness/main",
}
# What a host needs so that its role gets past "nothing to do" (an empty server or device list ends the role).
CONTEXT = {"nfs_mount/main": {"nfs_mount_server": "192.0.2.1"}, "storage_lvm/main": {"storage_lvm_devices": ["/dev/x"]}}

PLAY = """
- name: Bad role variables, one host per row
  hosts: all
  gather_facts: false
  tasks:
    - name: Run the role entry point of this host's row
      ansible.builtin.include_role:
        name: "rlinfra.verl.{{ row_role }}"
        tasks_from: "{{ row_entry }}"
"""


def _entry(r):
    if r.entry:
        return r.entry
    return ENTRY_OF[settings.owner(sorted(r.given)[0])]


# provision.yml's and teardown.yml's variables are checked by those playbooks, not by a role (test below); the fitness
# role's argument spec refuses a wrong type before the role's check, so fitness.yml and site.yml check first (below).
PLAYBOOK_ROWS = {"fitness_gbit_word"}
ROLE_ROWS = [
    r for r in ROWS if (r.entry or settings.owner(sorted(r.given)[0]) in ENTRY_OF) and r.id not in PLAYBOOK_ROWS
]


@pytest.fixture(scope="module")
def played(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("role_vars")
    hosts = {}
    for r in ROLE_ROWS:
        entry = _entry(r)
        hostvars = dict(CONTEXT.get(entry, {}))
        hostvars.update(r.given)
        role, point = entry.split("/")
        hostvars.update(
            row_role=role,
            row_entry=point,
            # Where a value wrongly let through would write: under this test's directory.
            ray_config_dir=hostvars.get("ray_config_dir", str(tmp / r.id / "etc-ray")),
            verl_job_experiment="smoke",
        )
        hosts[r.id] = hostvars
    inventory = {
        "all": {"vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}, "hosts": hosts}
    }
    (tmp / "inventory.yml").write_text(json.dumps(inventory))
    (tmp / "play.yml").write_text(PLAY)
    env = dict(
        os.environ,
        ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
        ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
        ANSIBLE_FORKS="20",
    )
    proc = subprocess.run(
        [
            os.path.join(os.path.dirname(sys.executable), "ansible-playbook"),
            "--check",
            "-i",
            str(tmp / "inventory.yml"),
            str(tmp / "play.yml"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = json.loads(proc.stdout)
    failures = {}
    for play in out["plays"]:
        for task in play["tasks"]:
            for host, res in task["hosts"].items():
                if res.get("failed"):
                    failures.setdefault(host, (task["task"]["name"], res.get("msg", "")))
    return proc, out, failures, tmp


@pytest.mark.parametrize("r", ROLE_ROWS, ids=[r.id for r in ROLE_ROWS])
def test_each_host_stops_with_its_line(played, r):
    proc, out, failures, tmp = played
    assert proc.returncode != 0
    assert r.id in failures, "%s was not refused: %s" % (r.id, out["stats"].get(r.id))
    task, msg = failures[r.id]
    if r.kind == "rule":
        assert msg == "Bad setting for %s (nothing was changed): %s" % (r.id, r.expect), (task, msg)
    else:
        assert "Validating arguments against arg spec '%s'" % r.entry.split("/")[1] in task, (task, msg)
        assert r.expect in msg, msg
    assert out["stats"][r.id]["changed"] == 0
    assert not (tmp / r.id).exists()


# ---- the wiring ----------------------------------------------------------------------------------------------


def _yaml_files():
    for path in sorted(
        glob.glob(os.path.join(ROOT, "playbooks", "*.yml"))
        + glob.glob(os.path.join(ROOT, "roles", "*", "tasks", "*.yml"))
    ):
        with open(path) as f:
            yield path, yaml.safe_load(f) or []


def _tasks(node):
    if isinstance(node, list):
        for item in node:
            yield from _tasks(item)
    elif isinstance(node, dict):
        yield node
        for key in ("tasks", "pre_tasks", "post_tasks", "handlers", "block", "rescue", "always"):
            if key in node:
                yield from _tasks(node[key])


def test_every_tasks_from_names_an_entry_point():
    """Ansible applies an entry point's argument spec only when tasks_from names it exactly (``select_head``,
    not ``select_head.yml``): every include of another role's tasks file must name one that has a spec."""
    seen = 0
    for path, data in _yaml_files():
        for task in _tasks(data):
            for key in ("ansible.builtin.include_role", "ansible.builtin.import_role"):
                args = task.get(key)
                if isinstance(args, dict) and "tasks_from" in args:
                    seen += 1
                    role = args["name"].split(".")[-1]
                    specs = yaml.safe_load(open(os.path.join(ROOT, "roles", role, "meta", "argument_specs.yml")))
                    assert args["tasks_from"] in specs["argument_specs"], (path, args)
    assert seen >= 10


@pytest.mark.parametrize(
    "path,roles",
    [
        ("roles/ray/tasks/node.yml", ["ray"]),
        ("roles/ray/tasks/preflight.yml", ["ray"]),
        ("roles/ray_head/tasks/main.yml", ["ray"]),
        ("roles/ray_head/tasks/idle_guard.yml", ["ray"]),
        ("roles/ray_metrics/tasks/main.yml", ["ray"]),
        ("roles/ray_worker/tasks/main.yml", ["ray"]),
        ("roles/nfs_mount/tasks/main.yml", ["nfs_mount"]),
        ("roles/storage_lvm/tasks/main.yml", ["storage_lvm"]),
        ("roles/python_env/tasks/main.yml", ["python_env"]),
        ("roles/python_env/tasks/plan.yml", ["python_env"]),
    ],
)
def test_settings_are_checked_before_anything_changes(path, roles):
    """The check is the first task that can act (after at most a "nothing to do" end_role)."""
    with open(os.path.join(ROOT, path)) as f:
        tasks = [t for t in yaml.safe_load(f) if "ansible.builtin.meta" not in t]
    assert tasks[0].get("rlinfra.verl.check_settings") == {"roles": roles}, (path, tasks[0])


def test_site_checks_every_role_before_any_role_runs():
    with open(os.path.join(ROOT, "playbooks", "site.yml")) as f:
        plays = yaml.safe_load(f)
    first_changing = next(p for p in plays if p.get("become"))
    # The check comes first, before even the read-only comparison with the converge record: a typo stops an
    # unchanged re-run too.
    tasks = first_changing["tasks"]
    assert tasks[0]["rlinfra.verl.converge_record"]["settings"] == [
        "storage_lvm",
        "nfs_mount",
        "python_env",
        "ray",
        "fitness",
    ]


@pytest.mark.parametrize("playbook", ["provision.yml", "teardown.yml"])
def test_the_hyperbolic_variables_stop_their_playbook_before_the_api_is_asked(playbook, tmp_path):
    """One line naming the variable; the API (an address nothing answers on) is never asked, nothing is written."""
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
        ANSIBLE_NOCOLOR="1",
        HYPERBOLIC_API_KEY="hb-test-key-not-real",
        HYPERBOLIC_API_URL="http://127.0.0.1:9",
        HOME=str(tmp_path),
    )
    inventory = tmp_path / "inv.yml"
    inventory.write_text(json.dumps({"all": {"children": {"ray_head": {"hosts": {"h0": {"ray_cluster": "c"}}}}}}))
    switches = ["-e", "nodes=1", "-e", "gpu=H100"] if playbook == "provision.yml" else ["-e", "release=true"]
    proc = subprocess.run(
        [
            os.path.join(os.path.dirname(sys.executable), "ansible-playbook"),
            "-i",
            str(inventory),
            playbook,
            "-e",
            "hyperbolic_min_hours=two",
        ]
        + switches,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "hyperbolic_min_hours must be a number, got 'two'" in out, out[-3000:]
    assert "127.0.0.1:9" not in out and not (tmp_path / ".rlinfra").exists()


def test_fitness_yml_checks_its_settings_before_the_role(tmp_path):
    """fitness_min_gbit=fast: one line naming the variable, from the play's own check, before the fitness role's
    argument spec could answer with Ansible's conversion error and the whole spec."""
    row = next(r for r in ROWS if r.id in PLAYBOOK_ROWS)
    env = dict(
        os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json"
    )
    inventory = {
        "all": {
            "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
            "children": {"ray_head": {"hosts": {"h0": {"ray_cluster": "c"}}}},
        }
    }
    path = str(tmp_path / "inventory.json")
    with open(path, "w") as f:
        json.dump(inventory, f)
    proc = subprocess.run(
        [
            os.path.join(os.path.dirname(sys.executable), "ansible-playbook"),
            "--check",
            "-i",
            path,
            "fitness.yml",
            "-e",
            json.dumps(row.given),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = json.loads(proc.stdout)
    failed = [
        (t["task"]["name"], res["msg"])
        for p in out["plays"]
        for t in p["tasks"]
        for h, res in t["hosts"].items()
        if res.get("failed")
    ]
    assert proc.returncode != 0
    assert failed == [("Check the fitness settings", "Bad setting for h0 (nothing was changed): " + row.expect)], failed
