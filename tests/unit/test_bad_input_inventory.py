"""Bad input to the Hyperbolic inventory, one table: every row is one careless or hostile input
(an inventory file, an environment, an API answer, a cache file), the exact line it must give,
and the proof that nothing wrong was produced.

Three kinds of rows:

* ``fatal``: the inventory cannot be loaded. The plugin raises ``AnsibleParserError`` with ONE line,
  ``rlinfra.verl.hyperbolic: cannot load PATH: <cause>``, and adds no host; rows about the file or the
  options make no API request. Ansible warns that line (for our plugin and for ``auto``, which hands the
  file back to it: the API is not asked twice) and goes on with no hosts; a playbook that needs a cluster
  (``site.yml``) then stops at its first task with its own line, and nothing runs.
* ``warn``: one instance (or the cache) is unusable. The inventory loads, with ONE ``[WARNING]``
  line naming the instance, and without that instance: never a wrong host.
* ``quiet``: hostile but harmless data (Jinja, a huge label, wrong-typed fields) loads without
  a line, and the check proves what it became.

Rows run in-process against the fake Hyperbolic API on 127.0.0.1 (``via="plugin"``); the
``via="inventory"`` / ``via="playbook"`` rows run the real ``ansible-inventory --list`` or
``ansible-playbook site.yml`` from the repository root (its ansible.cfg applies) and prove the exit
status, that the warning holds exactly that one line, and that nothing was listed or played.
The API key never appears in any output.
"""

from __future__ import annotations

import collections
import json
import os
import re
import socket

import pytest
import yaml
from ansible.errors import AnsibleParserError
from conftest_hyperbolic import PLUGIN_NAME, _register_definitions, snapshot

from ansible_collections.rlinfra.verl.plugins.inventory import hyperbolic as plugin_mod
from tests.fake_hyperbolic.server import FakeHyperbolic, marketplace_instance, on_demand_rental
from tests.fake_hyperbolic.testing import HYPERBOLIC_TEST_KEY as KEY
from tests.fake_hyperbolic.testing import ansible_env, load_failures, run, venv_bin

OD = "/v2/on-demand/virtual-machine-rentals"
MK = "/v1/marketplace/instances"
FORM = re.escape("is not of the form 'ssh USER@HOST [-p PORT]'")
NO_MACHINE = re.escape(
    "is no machine's address (0.0.0.0, ::, multicast and broadcast name none; SSH to 0.0.0.0 reaches this one)"
)
LOOPBACK = re.escape(
    "is this machine's own loopback: SSH there reaches the controller, not the rented machine; check "
    "the rental's address in Hyperbolic's console"
)
GOOD = on_demand_rental("vm-good", "good-0", "203.0.113.10")

Row = collections.namedtuple("Row", "id kind config setup expect check requests via env")


def row(id, kind, expect, config=None, setup=None, check=None, requests=None, via="plugin", env=None):
    """``expect``: regex for the text after ``rlinfra.verl.hyperbolic: `` (fatal rows: after
    ``cannot load PATH: ``), matched in full; ``{url}`` is the fake API's address. ``requests``:
    how many API requests the row may make (None: any)."""
    return pytest.param(Row(id, kind, config or {}, setup, expect, check, requests, via, env or {}), id=id)


# ----------------------------------------------------------------------------- setups
def fleet(on_demand=(), marketplace=()):
    def setup(fake, ctx):
        fake.set_instances(on_demand=[GOOD] + list(on_demand), marketplace=list(marketplace))

    return setup


def market(ident, command):
    item = marketplace_instance(ident, "198.51.100.7")
    item["sshCommand"] = command
    return fleet(marketplace=[item])


def rental(ident, **networking):
    item = on_demand_rental(ident, ident, "198.51.100.8")
    item["providerData"]["sshNetworking"] = [dict({"host": "198.51.100.8", "port": 22, "user": "ubuntu"}, **networking)]
    return fleet(on_demand=[item])


def raw_body(source, body, status=200):
    def setup(fake, ctx):
        fake.set_instances(on_demand=[GOOD], marketplace=[])
        fake.set_raw_body(source, body, status=status)

    return setup


def wrong_key(status, message=None):
    def setup(fake, ctx):
        fake.set_instances(on_demand=[GOOD], marketplace=[])
        if status == 403:
            fake.auth_status = 403
            fake.auth_message = message
        else:
            ctx.env["HYPERBOLIC_API_KEY"] = "sk-wrong-" + KEY[::-1]

    return setup


def api_down(fake, ctx):
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        ctx.config["api_url"] = "http://127.0.0.1:%d" % s.getsockname()[1]
    ctx.url = ctx.config["api_url"]


def both_404(fake, ctx):
    fake.set_source_status("on_demand", 404)
    fake.set_source_status("marketplace", 404)


def cached(content):
    """Fill the cache from a good answer, then replace what it holds with ``content`` (a JSON
    value, stored the way the jsonfile cache plugin stores values), or the file with ``content``
    (text)."""

    def setup(fake, ctx):
        fake.set_instances(on_demand=[GOOD], marketplace=[])
        first = ctx.run()
        assert first.failed is None and "good-0" in first.snap["hosts"], first
        (cache_file,) = list(ctx.cache_dir.iterdir())
        if isinstance(content, str):
            text = content
        else:
            value = json.loads(json.dumps(content).replace("{url}", ctx.url))
            stored = json.loads(cache_file.read_text())
            if isinstance(stored, dict) and "__payload__" in stored:  # ansible-core >= 2.19
                stored["__payload__"] = json.dumps(value)
            else:
                stored = value
            text = json.dumps(stored)
        cache_file.write_text(text)
        fake.reset_stats()

    return setup


def duplicate(fake, ctx):
    fake.set_instances(on_demand=[GOOD, dict(GOOD), dict(GOOD)], marketplace=[])


def contradictory_twins(fake, ctx):
    twin = dict(GOOD, gpuCount=4, providerData={"sshNetworking": [{"host": "203.0.113.99", "port": 22}]})
    fake.set_instances(on_demand=[GOOD, twin, on_demand_rental("vm-other", "other-0", "203.0.113.11")], marketplace=[])


# ----------------------------------------------------------------------------- checks
def hosts_are(*names):
    def check(out, fake):
        assert sorted(out.snap["hosts"]) == sorted(names), out.snap["hosts"]

    return check


def jinja_stays_text(out, fake):
    (host,) = [h for h in out.snap["hosts"].values() if h["hyperbolic_id"] == "vm-evil"]
    label = JINJA % out.marker
    assert host["hyperbolic_label"] == label and host["ray_cluster"] == label
    try:
        from ansible._internal._datatag._tags import TrustedAsTemplate

        assert not TrustedAsTemplate.is_tagged_on(host["hyperbolic_label"])
    except ImportError:  # older ansible-core: marked unsafe instead
        from ansible.utils.unsafe_proxy import AnsibleUnsafe

        assert isinstance(host["hyperbolic_label"], AnsibleUnsafe)
    assert not out.marker.exists(), "a label was evaluated as a template"


def jinja_stays_text_cli(out, fake):
    (host,) = [h for h in out.snap["hosts"].values() if h["hyperbolic_id"] == "vm-evil"]
    assert host["hyperbolic_label"] == JINJA % out.marker
    assert not out.marker.exists(), "a label was evaluated as a template"


def huge_label(out, fake):
    (name,) = [n for n in out.snap["hosts"] if n != "good-0"]
    assert name == "x" * 64
    assert out.snap["hosts"][name]["hyperbolic_label"] == "x" * 200000  # the API's text, whole


def wrong_types(out, fake):
    host = out.snap["hosts"]["vm-typed"]  # a list as label: named by id
    assert host["hyperbolic_label"] is None and host["hyperbolic_gpu_count"] is None
    assert host["hyperbolic_gpu_type"] is None and host["hyperbolic_region"] is None
    assert host["ansible_port"] == 2200


def localhost_renamed(out, fake):
    assert "localhost" not in out.snap["hosts"]
    assert out.snap["hosts"]["localhost-vm-lh"]["ansible_host"] == "198.51.100.8"


def one_host_for_twins(out, fake):
    assert sorted(out.snap["hosts"]) == ["good-0"]
    assert out.snap["hosts"]["good-0"]["hyperbolic_gpu_count"] == 8
    assert out.snap["groups"]["ray_head"] == ["good-0"]


JINJA = "{{ lookup('pipe', 'touch %s') }}"


def jinja_fleet(fake, ctx):
    fake.set_instances(on_demand=[on_demand_rental("vm-evil", JINJA % ctx.marker, "203.0.113.66")], marketplace=[])
    ctx.config["cluster_from"] = "{{ hyperbolic_label }}"
    ctx.config["compose"] = {"copied_label": "hyperbolic_label"}


def huge(fake, ctx):
    fake.set_instances(on_demand=[GOOD, on_demand_rental("vm-huge", "x" * 200000, "203.0.113.67")], marketplace=[])


def typed(fake, ctx):
    item = {
        "id": "vm-typed",
        "status": "running",
        "label": ["a", "b"],
        "gpuCount": "eight",
        "gpuType": {"m": 1},
        "region": {"r": 1},
        "extra": {"nested": [1, 2, 3]},
        "providerData": {"sshNetworking": [{"host": "203.0.113.70", "port": "2200", "user": "ubuntu"}]},
    }
    fake.set_instances(on_demand=[item], marketplace=[])


# ----------------------------------------------------------------------------- the table
ROWS = [
    # --- the API cannot be read: one line naming the cause, no host ---------------------------------
    row(
        "http-401",
        "fatal",
        r"Hyperbolic API rejected the API key: HTTP 401 Unauthorized on GET "
        + OD
        + r": Invalid API key; check HYPERBOLIC_API_KEY \(or api_key\)",
        setup=wrong_key(401),
        requests=2,
    ),
    row(
        "http-403-escape-codes",
        "fatal",
        r"Hyperbolic API rejected the API key: HTTP 403 Forbidden on GET "
        + OD
        + r": \?\[2J\?\[H key revoked; check HYPERBOLIC_API_KEY \(or api_key\)",
        setup=wrong_key(403, "\x1b[2J\x1b[H key\nrevoked"),
        requests=2,
    ),
    row(
        "api-down",
        "fatal",
        r"Hyperbolic API unreachable at {url}" + OD + r" after 2 attempts: "
        r"\[Errno 111\] Connection refused; check api_url \(or HYPERBOLIC_API_URL\) and the network",
        setup=api_down,
    ),
    row(
        "http-503-forever",
        "fatal",
        r"Hyperbolic API GET {url}" + OD + r" failed after 2 attempts: "
        r"HTTP 503: upstream error \(injected 503\)",
        setup=lambda f, c: f.fail_next(50, status=503),
    ),
    row(
        "malformed-json",
        "fatal",
        r"malformed JSON from {url}" + MK + r": Expecting value: line 1 column 16 "
        r"\(char 15\) \(the answer starts with '\{\"instances\": \['\); is api_url the Hyperbolic API\?",
        setup=raw_body("marketplace", '{"instances": ['),
    ),
    row(
        "html-maintenance-page",
        "fatal",
        r"malformed JSON from {url}" + OD + r": Expecting value: line 1 column 1 "
        r"\(char 0\) \(the answer starts with '<html><h1>Down for maintenance</h1></html>'\); "
        r"is api_url the Hyperbolic API\?",
        setup=raw_body("on_demand", "<html><h1>Down for maintenance</h1></html>"),
    ),
    row(
        "wrong-shape-error-envelope",
        "fatal",
        r"unexpected marketplace answer from {url}"
        + MK
        + r': expected a JSON object \{"instances": \[\.\.\.\]\}, got a JSON object with keys error, status',
        setup=raw_body("marketplace", '{"error": "maintenance", "status": 200}'),
    ),
    row(
        "item-not-an-object",
        "fatal",
        r"unexpected on_demand answer from {url}" + OD + r": item #1 is a number, not a JSON object",
        setup=raw_body("on_demand", '[{"id": "a"}, 42]'),
    ),
    row(
        "item-without-usable-id",
        "fatal",
        r"on_demand item #0 has no usable id \(got a JSON object with keys x\)",
        setup=raw_body("on_demand", '[{"id": {"x": 1}, "status": "running"}]'),
    ),
    row(
        "every-source-404",
        "fatal",
        r"every source answered HTTP 404 \(on_demand: HTTP 404 on GET "
        + OD
        + r": Not Found; marketplace: HTTP 404 on GET "
        + MK
        + r": Not Found\); check api_url "
        r"\(or HYPERBOLIC_API_URL\)",
        setup=both_404,
        requests=2,
    ),
    # --- the key: one line saying what to do, never the key itself ----------------------------------
    row(
        "empty-api-key",
        "fatal",
        r"no API key: set HYPERBOLIC_API_KEY or the api_key option",
        env={"HYPERBOLIC_API_KEY": "  "},
        requests=0,
    ),
    row(
        "api-key-with-newline",
        "fatal",
        r"the API key contains spaces, control or non-ASCII characters; "
        r"set HYPERBOLIC_API_KEY \(or api_key\) to the key alone",
        env={"HYPERBOLIC_API_KEY": KEY + "\nX-Evil: 1"},
        requests=0,
    ),
    # --- the file and its options: checked before any request ---------------------------------------
    row(
        "sources-unknown-name",
        "fatal",
        r"unknown sources entry 'spot'; choose from on_demand, marketplace",
        config={"sources": ["on_demand", "spot"]},
        requests=0,
    ),
    row(
        "sources-empty",
        "fatal",
        r"sources is empty; choose on_demand and/or marketplace",
        config={"sources": []},
        requests=0,
    ),
    row(
        "sources-a-mapping",
        "fatal",
        r"sources must be a list of names, got \"\{'on_demand': True\}\"",
        config={"sources": {"on_demand": True}},
        requests=0,
    ),
    row("statuses-a-number", "fatal", r"statuses must be a list of names, got '5'", config={"statuses": 5}, requests=0),
    row(
        "cluster-from-bad-regex",
        "fatal",
        r"cluster_from is not a valid regular expression: missing \), "
        r"unterminated subpattern at position 4",
        config={"cluster_from": "exp-(", "name_pattern": "*"},
        requests=0,
    ),
    row(
        "cluster-from-bad-template",
        "fatal",
        r"cluster_from is not a valid Jinja template: Syntax error in "
        r"template: unexpected end of template, expected 'name'\.",
        config={"cluster_from": "{{ hyperbolic_label | "},
        requests=0,
    ),
    row(
        "api-url-without-scheme",
        "fatal",
        r"api_url 'api\.hyperbolic\.xyz' is not an http:// or https:// URL "
        r"with a host; set api_url \(or HYPERBOLIC_API_URL\) to a URL such as https://api\.hyperbolic\.xyz",
        config={"api_url": "api.hyperbolic.xyz"},
        requests=0,
    ),
    row(
        "api-url-broken-ipv6",
        "fatal",
        r"api_url is not a valid URL \(invalid ipv6 url; not shown\); set "
        r"api_url \(or HYPERBOLIC_API_URL\) to a URL such as https://api\.hyperbolic\.xyz",
        env={"HYPERBOLIC_API_URL": "http://[::1"},
        config={"api_url": None},
        requests=0,
    ),
    row(
        "api-url-port-out-of-range",
        "fatal",
        r"api_url is not a valid URL "
        r"\(port out of range 0-65535; not shown\); .*",
        config={"api_url": "http://127.0.0.1:99999"},
        requests=0,
    ),
    # A key (hunter2) written where urlsplit reads a port, after a second '@', in a query, or beside a space: never shown.
    row(
        "api-url-key-as-port",
        "fatal",
        r"api_url is not a valid URL \(the port is not a number; not shown\); .*",
        config={"api_url": "https://user:hunter2"},
        requests=0,
    ),
    row(
        "api-url-two-at-signs",
        "fatal",
        r"api_url 'https://\*\*\*@api\.hyperbolic\.xyz' must not contain "
        r"user:password@; the key goes in HYPERBOLIC_API_KEY \(or api_key\)",
        config={"api_url": "https://user@hunter2@api.hyperbolic.xyz"},
        requests=0,
    ),
    row(
        "api-url-key-in-query",
        "fatal",
        r"api_url 'https://api\.hyperbolic\.xyz/v1\?\.\.\.' must not have a "
        r"\?query or #fragment; .*",
        config={"api_url": "https://api.hyperbolic.xyz/v1?api_key=hunter2"},
        requests=0,
    ),
    row(
        "api-url-key-with-space",
        "fatal",
        r"api_url contains spaces or control characters \(not shown\); .*",
        config={"api_url": "https://hunter2 @api.hyperbolic.xyz"},
        requests=0,
    ),
    row(
        "api-url-with-password",
        "fatal",
        r"api_url 'https://\*\*\*@api\.hyperbolic\.xyz' must not contain "
        r"user:password@; the key goes in HYPERBOLIC_API_KEY \(or api_key\)",
        config={"api_url": "https://bob:hunter2@api.hyperbolic.xyz"},
        requests=0,
    ),
    row(
        "api-url-file-scheme",
        "fatal",
        r"api_url 'file:///etc/passwd' is not an http:// or https:// URL with "
        r"a host; .*",
        config={"api_url": "file:///etc/passwd"},
        requests=0,
    ),
    row(
        "misspelt-option",
        "fatal",
        r"unknown option 'name_patern'; did you mean 'name_pattern'\?",
        config={"name_patern": "exp-*"},
        requests=0,
    ),
    row(
        "validate-certs-typo",
        "fatal",
        r"validate_certs must be true or false, got 'ture'",
        config={"validate_certs": "ture"},
        requests=0,
    ),
    row(
        "timeout-zero",
        "fatal",
        r"timeout must be more than 0 and at most 3600, got 0",
        config={"timeout": 0},
        requests=0,
    ),
    row("retries-negative", "fatal", r"retries must be between 0 and 100, got -1", config={"retries": -1}, requests=0),
    row(
        "cache-timeout-negative",
        "fatal",
        r"cache_timeout must be between 0 and 31622400, got -5",
        config={"cache_timeout": -5},
        requests=0,
    ),
    row(
        "max-response-zero",
        "fatal",
        r"max_response_mib must be more than 0 and at most 1024, got 0",
        config={"max_response_mib": 0},
        requests=0,
    ),
    # 1e300 seconds reached the socket as an OverflowError line after the first request: every number has a ceiling.
    row(
        "timeout-huge",
        "fatal",
        r"timeout must be more than 0 and at most 3600, got 1e\+300",
        config={"timeout": 1e300},
        requests=0,
    ),
    row(
        "retry-max-wait-huge",
        "fatal",
        r"retry_max_wait must be between 0 and 3600, got 1e\+300",
        config={"retry_max_wait": 1e300},
        requests=0,
    ),
    row(
        "cache-timeout-huge",
        "fatal",
        r"cache_timeout must be between 0 and 31622400, got 10{30}",
        config={"cache_timeout": 10**30},
        requests=0,
    ),
    # Arrays nested 5000 deep: "failed: RecursionError: ..." before; now the malformed-JSON line.
    row(
        "answer-nested-too-deeply",
        "fatal",
        r"malformed JSON from {url}" + OD + r": nested too deeply \(the answer "
        r"starts with '\[{60}'\); is api_url the Hyperbolic API\?",
        setup=raw_body("on_demand", "[" * 5000 + "]" * 5000),
    ),
    # A 76 MB answer was read whole (65 s, 1.4 GB): now at most max_response_mib, then one line.
    row(
        "answer-over-the-bound",
        "fatal",
        r"the answer to GET " + OD + r" is over 0\.001 MiB, more than an instance "
        r"list can be: not read; if the account really holds that much, raise max_response_mib",
        config={"max_response_mib": 0.001, "sources": ["on_demand"]},
        setup=fleet(on_demand=[on_demand_rental("vm-%d" % i, "n-%d" % i, "203.0.113.%d" % (20 + i)) for i in range(5)]),
    ),
    row(
        "keyed-groups-integer-key",
        "fatal",
        r"keyed_groups\[0\] \(key 'hyperbolic_gpu_count'\) gave a number for "
        r"host 'good-0', and a group name is made from text: end the key with \| string \(e\.g\. key: "
        r"hyperbolic_gpu_count \| string\)",
        config={"keyed_groups": [{"key": "hyperbolic_gpu_count"}]},
        setup=fleet(),
    ),
    row(
        "group-with-space",
        "fatal",
        r"group 'my group' is not a valid group name \(letters, digits and _, "
        r"not starting with a digit\)",
        config={"group": "my group"},
        requests=0,
    ),
    row(
        "plugin-name-typo",
        "fatal",
        r"plugin is 'rlinfra\.verl\.hyperbolc'; a \*hyperbolic\.yml file needs "
        r"'plugin: rlinfra\.verl\.hyperbolic'",
        config={"plugin": "rlinfra.verl.hyperbolc"},
        requests=0,
    ),
    row(
        "yaml-syntax-error",
        "fatal",
        r"not a readable YAML file \(line 3\): YAML parsing failed: While parsing "
        r"a flow sequence did not find expected ',' or '\]'\.",
        config="plugin: rlinfra.verl.hyperbolic\nsources: [on_demand\n",
        requests=0,
    ),
    # --- one instance unusable: one warning naming it, and no host rather than a wrong one ------------
    row(
        "ssh-command-prose",
        "warn",
        r"instance 'm-prose' \(marketplace\) left out: sshCommand "
        r"'please connect via console' " + FORM,
        setup=market("m-prose", "please connect via console"),
        check=hosts_are("good-0"),
    ),
    row(
        "ssh-command-trailing-words",
        "warn",
        r"instance 'm-words' \(marketplace\) left out: sshCommand "
        r"'ssh please connect via console' has words after the destination 'please'; expected "
        r"'ssh USER@HOST \[-p PORT\]'",
        setup=market("m-words", "ssh please connect via console"),
        check=hosts_are("good-0"),
    ),
    row(
        "ssh-command-port-out-of-range",
        "warn",
        r"instance 'm-port' \(marketplace\) left out: sshCommand "
        r"'ssh ubuntu@gpu\.example -p 70000': port 70000 is out of range 1-65535",
        setup=market("m-port", "ssh ubuntu@gpu.example -p 70000"),
        check=hosts_are("good-0"),
    ),
    row(
        "ssh-command-option-as-host",
        "warn",
        r"instance 'm-inject' \(marketplace\) left out: sshCommand "
        r"'ssh ubuntu@-oProxyCommand=id': '-oProxyCommand=id' is not a host name or IP address",
        setup=market("m-inject", "ssh ubuntu@-oProxyCommand=id"),
        check=hosts_are("good-0"),
    ),
    row(
        "ssh-networking-port-zero",
        "warn",
        r"instance 'vm-p0' \(on_demand\) left out: sshNetworking port 0 is "
        r"out of range 1-65535",
        setup=rental("vm-p0", port=0),
        check=hosts_are("good-0"),
    ),
    # SSH to 0.0.0.0 reaches the controller itself: an API answer may never make it a cluster node.
    row(
        "ssh-networking-any-address",
        "warn",
        r"instance 'vm-any' \(on_demand\) left out: sshNetworking host "
        r"'0\.0\.0\.0' " + NO_MACHINE,
        setup=rental("vm-any", host="0.0.0.0"),
        check=hosts_are("good-0"),
    ),
    row(
        "ssh-command-multicast",
        "warn",
        r"instance 'm-mc' \(marketplace\) left out: sshCommand 'ssh "
        r"ubuntu@224\.0\.0\.1': '224\.0\.0\.1' " + NO_MACHINE,
        setup=market("m-mc", "ssh ubuntu@224.0.0.1"),
        check=hosts_are("good-0"),
    ),
    # Loopback as a rental's SSH host is the controller itself: the play would run there, as root maybe.
    row(
        "ssh-networking-loopback",
        "warn",
        r"instance 'vm-lo' \(on_demand\) left out: sshNetworking host "
        r"'127\.0\.0\.1' " + LOOPBACK,
        setup=rental("vm-lo", host="127.0.0.1"),
        check=hosts_are("good-0"),
    ),
    row(
        "ssh-networking-loopback-v6",
        "warn",
        r"instance 'vm-lo6' \(on_demand\) left out: sshNetworking host "
        r"'::1' " + LOOPBACK,
        setup=rental("vm-lo6", host="::1"),
        check=hosts_are("good-0"),
    ),
    row(
        "ssh-networking-mapped-loopback",
        "warn",
        r"instance 'vm-lo4' \(on_demand\) left out: sshNetworking host "
        r"'::ffff:127\.0\.0\.2' " + LOOPBACK,
        setup=rental("vm-lo4", host="::ffff:127.0.0.2"),
        check=hosts_are("good-0"),
    ),
    row(
        "ssh-command-localhost",
        "warn",
        r"instance 'm-lh' \(marketplace\) left out: sshCommand 'ssh "
        r"ubuntu@localhost -p 2222': 'localhost' " + LOOPBACK,
        setup=market("m-lh", "ssh ubuntu@localhost -p 2222"),
        check=hosts_are("good-0"),
    ),
    row(
        "ssh-command-ip6-localhost",
        "warn",
        r"instance 'm-lh6' \(marketplace\) left out: sshCommand 'ssh "
        r"ubuntu@ip6-localhost': 'ip6-localhost' " + LOOPBACK,
        setup=market("m-lh6", "ssh ubuntu@ip6-localhost"),
        check=hosts_are("good-0"),
    ),
    row(
        "ssh-networking-bad-user",
        "warn",
        r"instance 'vm-user' \(on_demand\) left out: sshNetworking user "
        r"'root; reboot' is not a valid user name",
        setup=rental("vm-user", user="root; reboot"),
        check=hosts_are("good-0"),
    ),
    row(
        "duplicate-instance-id",
        "warn",
        r"on_demand instance 'vm-good' is listed 3 times; using one",
        setup=duplicate,
        check=one_host_for_twins,
    ),
    # Copies that disagree (another GPU count, another SSH host): either may be the wrong machine.
    row(
        "duplicate-instance-id-contradictory",
        "warn",
        r"on_demand instance 'vm-good' is listed 2 times with "
        r"different gpu_count, ssh: the provider's answer is contradictory, so which machine it is cannot be known; "
        r"left out - check the rental in Hyperbolic's console",
        setup=contradictory_twins,
        check=hosts_are("other-0"),
    ),
    row(
        "label-localhost",
        "warn",
        r"instance 'vm-lh' is named 'localhost', which Ansible reserves; host name "
        r"localhost-vm-lh used",
        setup=lambda f, c: f.set_instances(
            on_demand=[on_demand_rental("vm-lh", "localhost", "198.51.100.8")], marketplace=[]
        ),
        check=localhost_renamed,
    ),
    row(
        "marketplace-null-list",
        "warn",
        r"marketplace answer from {url}" + MK + r" holds instances: null, read as no "
        r"instances",
        config={"sources": ["on_demand", "marketplace"]},
        setup=raw_body("marketplace", '{"instances": null}'),
        check=hosts_are("good-0"),
    ),
    row(
        "statuses-typo",
        "warn",
        r"none of the 1 instance\(s\) passed statuses \[runing\]; statuses seen: running",
        config={"statuses": ["runing"]},
        setup=fleet(),
        check=hosts_are(),
    ),
    row(
        "cache-valid-json-wrong-content",
        "warn",
        r"ignoring the cached API answers for {path} \(on_demand answer "
        r"is a string, not a list of instances\); asking the API again",
        setup=cached({"format": 1, "api_url": "{url}", "sources": {"on_demand": "garbage"}, "skipped": {}}),
        check=hosts_are("good-0"),
        requests=1,
    ),
    row(
        "cache-not-an-object",
        "warn",
        r"ignoring the cached API answers for {path} \(it is list, not a JSON "
        r"object\); asking the API again",
        setup=cached([1, 2, 3]),
        check=hosts_are("good-0"),
        requests=1,
    ),
    row(
        "cache-file-not-json",
        "warn",
        r"ignoring the cached API answers for {path} \(unreadable: The cache file "
        r"\S+ was corrupt, or did not otherwise contain valid data\); asking the API again",
        setup=cached("{not json"),
        check=hosts_are("good-0"),
        requests=1,
    ),
    # --- hostile but harmless data: loads as plain text ------------------------------------------------
    row("jinja-in-label", "quiet", None, setup=jinja_fleet, check=jinja_stays_text),
    row("huge-label", "quiet", None, setup=huge, check=huge_label),
    row("wrong-typed-fields", "quiet", None, setup=typed, check=wrong_types),
    row(
        "sources-as-a-string",
        "quiet",
        None,
        config={"sources": "on_demand"},
        setup=fleet(marketplace=[marketplace_instance("m-ok", "198.51.100.9")]),
        check=hosts_are("good-0"),
        requests=1,
    ),
    row(
        "duplicate-labels",
        "quiet",
        None,
        setup=lambda f, c: f.set_instances(
            on_demand=[
                on_demand_rental("vm-b", "twin", "198.51.100.2"),
                on_demand_rental("vm-a", "twin", "198.51.100.1"),
            ],
            marketplace=[],
        ),
        check=hosts_are("twin", "twin-vm-b"),
    ),
    # --- the real CLIs: the one line in Ansible's warning, nothing listed; site.yml stops before any host --
    row(
        "cli-inventory-http-401",
        "fatal",
        r"Hyperbolic API rejected the API key: HTTP 401 Unauthorized on GET "
        + OD
        + r": Invalid API key; check HYPERBOLIC_API_KEY \(or api_key\)",
        setup=wrong_key(401),
        via="inventory",
        requests=2,
    ),
    row(
        "cli-playbook-api-down",
        "fatal",
        r"Hyperbolic API unreachable at {url}" + OD + r" after 2 attempts: "
        r"\[Errno 111\] Connection refused; check api_url \(or HYPERBOLIC_API_URL\) and the network",
        setup=api_down,
        via="playbook",
    ),
    row(
        "cli-playbook-malformed-json",
        "fatal",
        r"malformed JSON from {url}" + OD + r": .*",
        setup=raw_body("on_demand", "<html>"),
        via="playbook",
    ),
    row(
        "cli-inventory-unknown-source",
        "fatal",
        r"unknown sources entry 'spot'; choose from on_demand, "
        r"marketplace",
        config={"sources": "on_demand, spot"},
        via="inventory",
        requests=0,
    ),
    row(
        "cli-playbook-empty-key",
        "fatal",
        r"no API key: set HYPERBOLIC_API_KEY or the api_key option",
        env={"HYPERBOLIC_API_KEY": ""},
        via="playbook",
        requests=0,
    ),
    row(
        "cli-inventory-ssh-prose",
        "warn",
        r"instance 'm-prose' \(marketplace\) left out: sshCommand "
        r"'please connect via console' " + FORM,
        setup=market("m-prose", "please connect via console"),
        via="inventory",
        check=hosts_are("good-0"),
    ),
    row("cli-inventory-jinja-label", "quiet", None, setup=jinja_fleet, via="inventory", check=jinja_stays_text_cli),
]


# ----------------------------------------------------------------------------- running a row
class _Capture:
    """Stands in for the plugin's Display: keeps warnings and errors, drops the rest."""

    def __init__(self):
        self.warnings, self.errors = [], []

    def warning(self, msg, *args, **kwargs):
        self.warnings.append(str(msg))

    def error(self, msg, *args, **kwargs):
        self.errors.append(str(msg))

    def __getattr__(self, name):
        return lambda *args, **kwargs: None


Outcome = collections.namedtuple("Outcome", "failed errors warnings snap marker rc stdout stderr")


class Ctx:
    def __init__(self, tmp_path, fake, monkeypatch, row_):
        self.tmp_path = tmp_path
        self.fake = fake
        self.monkeypatch = monkeypatch
        self.url = fake.url
        self.marker = tmp_path / "PWNED"
        self.cache_dir = tmp_path / "cache"
        self.path = tmp_path / "bad.hyperbolic.yml"
        self.env = {"HYPERBOLIC_API_KEY": KEY}
        self.env.update(row_.env)
        if isinstance(row_.config, str):
            self.config = row_.config
        else:
            self.config = {
                "plugin": PLUGIN_NAME,
                "api_url": fake.url,
                "retries": 1,
                "retry_backoff": 0,
                "retry_max_wait": 0,
                "timeout": 5,
            }
            if row_.id.startswith("cache-"):
                self.config.update(
                    cache=True,
                    cache_plugin="jsonfile",
                    cache_connection=str(self.cache_dir),
                    cache_timeout=600,
                    sources=["on_demand"],
                )
            self.config.update(row_.config)
            self.config = {k: v for k, v in self.config.items() if v is not None}

    def write(self):
        text = self.config if isinstance(self.config, str) else yaml.safe_dump(self.config, sort_keys=False)
        self.path.write_text(text.replace("{url}", self.url))

    def run(self):
        """The plugin in-process, as the inventory manager calls it."""
        from ansible.inventory.data import InventoryData
        from ansible.parsing.dataloader import DataLoader

        self.write()
        for name in [n for n in os.environ if n.startswith("HYPERBOLIC_")]:
            self.monkeypatch.delenv(name)
        for name, value in self.env.items():
            self.monkeypatch.setenv(name, value)
        _register_definitions(plugin_mod)
        plugin = plugin_mod.InventoryModule()
        plugin._load_name = PLUGIN_NAME
        plugin.display = capture = _Capture()
        inventory = InventoryData()
        failed = None
        try:
            plugin.parse(inventory, DataLoader(), str(self.path), cache=True)
            try:
                plugin.update_cache_if_changed()
            except AttributeError:  # what the inventory manager does when no cache is in use
                pass
        except AnsibleParserError as exc:
            failed = exc.message
        return Outcome(failed, capture.errors, capture.warnings, snapshot(inventory), self.marker, None, None, "")

    def run_cli(self, via):
        self.write()
        env = ansible_env(self.tmp_path, **{k: v for k, v in self.env.items()})
        if via == "inventory":
            result = run([venv_bin("ansible-inventory"), "-i", str(self.path), "--list"], env)
        else:
            result = run([venv_bin("ansible-playbook"), "-i", str(self.path), "site.yml"], env)
        snap = None
        if result.rc == 0 and via == "inventory":
            data = result.data
            snap = {"hosts": data["_meta"]["hostvars"], "groups": {}}
        failures = load_failures(result.stderr)
        if failures:  # Ansible's warnings span several lines; the one line is what our plugin gave
            return Outcome(
                failures[0] if len(failures) == 1 else failures,
                [],
                [],
                snap,
                self.marker,
                result.rc,
                result.stdout,
                result.stderr,
            )
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        errors = [line[len("[ERROR]: ") :] for line in lines if line.startswith("[ERROR]: ")]
        warnings = [line[len("[WARNING]: ") :] for line in lines if line.startswith("[WARNING]: ")]
        assert len(errors) + len(warnings) == len(lines), result.stderr  # nothing but those lines
        return Outcome(None, errors, warnings, snap, self.marker, result.rc, result.stdout, result.stderr)


@pytest.fixture
def fake():
    with FakeHyperbolic(api_key=KEY) as server:
        server.set_instances(on_demand=[GOOD], marketplace=[])
        yield server


@pytest.mark.parametrize("case", ROWS)
def test_bad_input(case, fake, tmp_path, monkeypatch):
    ctx = Ctx(tmp_path, fake, monkeypatch, case)
    if case.setup:
        case.setup(fake, ctx)
    if isinstance(ctx.config, dict):  # a setup may have filled in a URL
        ctx.config = {k: (v.replace("{url}", ctx.url) if isinstance(v, str) else v) for k, v in ctx.config.items()}
    out = ctx.run() if case.via == "plugin" else ctx.run_cli(case.via)

    expect = None
    if case.expect is not None:
        expect = case.expect.replace("{url}", re.escape(ctx.url)).replace("{path}", re.escape(str(ctx.path)))

    if case.kind == "fatal":
        prefix = re.escape("rlinfra.verl.hyperbolic: cannot load %s: " % ctx.path)
        assert isinstance(out.failed, str), out
        assert re.fullmatch(prefix + expect, out.failed), out.failed
        assert out.errors == [] and out.warnings == [], out
        assert "\n" not in out.failed
        if case.via != "playbook":
            assert out.snap["hosts"] == {}, "a broken inventory added hosts"
        else:
            # site.yml stops at its first task, on localhost, with its one line; no play reaches a host
            assert out.rc == 2, out
            assert (
                "No Ray cluster for site.yml, nothing was done: no host in group ray_head; the inventory (%s) "
                "gave none" % ctx.path
            ) in out.stdout, out.stdout
            assert re.search(r"localhost\s+: ok=0\s+changed=0\s+unreachable=0\s+failed=1", out.stdout), out.stdout
            assert out.stdout.count("PLAY [") == 1 and out.stdout.count("TASK [") == 1, out.stdout
    else:
        assert out.failed is None and out.errors == [], out
        if case.via != "plugin":
            assert out.rc == 0, out
        if case.kind == "warn":
            assert len(out.warnings) == 1, out.warnings
            assert re.fullmatch(re.escape("rlinfra.verl.hyperbolic: ") + expect, out.warnings[0]), out.warnings[0]
        else:
            assert out.warnings == [], out.warnings
    if case.check:
        assert case.check(out, fake) is not False
    if case.requests is not None:
        assert fake.request_count == case.requests, fake.requests
    for text in out.errors + out.warnings + [out.stdout or "", out.stderr or "", str(out.failed or "")]:
        assert KEY not in text and KEY[::-1] not in text and "hunter2" not in text


def test_table_covers_the_surface():
    """About 25-30 in-process rows, a few through the real CLIs, every kind represented."""
    rows = [p.values[0] for p in ROWS]
    assert len({r.id for r in rows}) == len(rows)
    in_process = [r for r in rows if r.via == "plugin"]
    assert len(in_process) >= 25
    assert {r.via for r in rows} == {"plugin", "inventory", "playbook"}
    assert {r.kind for r in rows} == {"fatal", "warn", "quiet"}
