# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""recovery.replace: the run's supervisor on the head replaces a machine gone for good (docs/ARCHITECTURE.md 3.8b).

For each lost node (by address): the inventory host it was (the kit's inventory, written by submit.yml), the rental of
that name; it is gone for good when the API no longer lists it as running (terminated, or not listed), or when its SSH
port answers no banner twice, 30 s apart. Then the rental is given back (when the API still lists it), one of the
same spec is rented under the same name (``Rent.present`` with the label's count: the balance rule and
``daily_budget`` apply; the ceiling is the lost machine's own price), the head's copy of the label's record is
updated, the kit's inventory points the host at the new machine, and the collection's ``site.yml``, installed in the
kit at the controller's version, converges the cluster from the head (``ansible-playbook``, bounded by
``replace_timeout``). Every step is one line (``say``).

The kit (``conf['dir']``, root-only, roles/verl_job/tasks/replace_kit.yml): ``inventory.json``, ``settings.json``
(``min_hours``, ``daily_budget``, ``ssh_public_key``: what the controller rents with), ``ssh_key`` (the dedicated key
the account's new machines accept), ``ansible/`` (a venv with ansible-core), ``collections/``. The kit's inventory
names a replaced host's lost address (``rlinfra_replaces``): a supervisor restarted between the rent and the converge
converges the new machine again instead of renting another. Standard library and the collection's Hyperbolic
client only."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ansible_collections.rlinfra.verl.plugins.module_utils.common.plain_http import open_url
from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic import record as hyperbolic_record
from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic.client import HyperbolicClient, HyperbolicError
from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic.rent import Rent, ssh_banner

# Seconds between the two SSH looks that call an unlisted-but-running machine gone.
PROBE_PAUSE = 30
# What the converge's output keeps for the lines when it fails.
TAIL_LINES = 12


def inventory_hosts(inventory: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """``{host: vars}`` of every host in the kit's inventory (YAML-compatible JSON, as the kit writes it)."""
    out: dict[str, dict[str, Any]] = {}

    def walk(group):
        for name, hostvars in ((group or {}).get("hosts") or {}).items():
            out.setdefault(name, {}).update(hostvars or {})
        for child in ((group or {}).get("children") or {}).values():
            walk(child)

    walk((inventory or {}).get("all") or {})
    return out


def by_address(inventory: Mapping[str, Any] | None) -> dict[str, str]:
    """``{address: host}``: Ray names a node by its private address (``ray_private_ip`` when set), Ansible by its
    ``ansible_host``."""
    out = {}
    for name, hostvars in inventory_hosts(inventory).items():
        out[str(hostvars.get("ansible_host") or name)] = name
        if hostvars.get("ray_private_ip"):
            out[str(hostvars["ray_private_ip"])] = name
    return out


def point_at(inventory: dict[str, Any], name: str, view: Mapping[str, Any], lost: str = "") -> dict[str, Any]:
    """The kit's inventory with ``name`` on the new machine ``view`` in place of the one at ``lost`` (what the old
    machine's addresses were is forgotten)."""

    def walk(group):
        hosts = (group or {}).get("hosts") or {}
        if name in hosts:
            entry = dict(hosts[name] or {})
            entry.update(ansible_host=view["host"], ansible_port=int(view.get("port") or 22))
            if view.get("user"):
                entry["ansible_user"] = view["user"]
            entry.pop("ray_node_ip", None)
            entry.pop("ray_private_ip", None)
            entry.update(hyperbolic_id=str(view["id"]), rlinfra_replaces=lost)
            hosts[name] = entry
        for child in ((group or {}).get("children") or {}).values():
            walk(child)

    walk((inventory or {}).get("all") or {})
    return inventory


def load_json(path: str) -> Any:
    with open(path) as handle:
        return json.load(handle)


def write_private(path: str, data: Any) -> None:
    tmp = path + ".part"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(data, handle, indent=1, sort_keys=True)
    os.replace(tmp, path)


def gone_for_good(
    listed: Mapping[str, Any] | None,
    host: str,
    port: int | str,
    probe: Callable[[str, int | str], str],
    sleep: Callable[[float], None],
) -> str:
    """Why the machine is gone for good ('' when it is not): the API's word, else two SSH looks."""
    if listed is None:
        return "the API no longer lists its rental (terminated)"
    first = probe(host, port)
    if not first:
        return ""
    sleep(PROBE_PAUSE)
    second = probe(host, port)
    return (
        "its rental is listed but SSH does not answer (%s, twice %ds apart)" % (second, PROBE_PAUSE) if second else ""
    )


def converge(
    conf: Mapping[str, Any], limit: Iterable[str], timeout: float, run: Callable[..., Any] = subprocess.run
) -> tuple[bool, str]:
    """``site.yml`` from the kit on ``limit`` (host names): ``(ok, tail)``."""
    kit = conf["dir"]
    env = dict((k, v) for k, v in os.environ.items() if not k.startswith("ANSIBLE_"))
    env.update(
        ANSIBLE_COLLECTIONS_PATH=os.path.join(kit, "collections"),
        ANSIBLE_HOST_KEY_CHECKING="False",
        ANSIBLE_PRIVATE_KEY_FILE=os.path.join(kit, "ssh_key"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_RETRY_FILES_ENABLED="0",
        ANSIBLE_LOCAL_TEMP=os.path.join(kit, "tmp"),
        HOME=kit,
        ANSIBLE_SSH_ARGS="-o ServerAliveInterval=15 "
        "-o ServerAliveCountMax=4 -o UserKnownHostsFile=/dev/null -o StrictHostKeyChecking=no",
    )
    args = [
        os.path.join(kit, "ansible", "bin", "ansible-playbook"),
        "-i",
        os.path.join(kit, "inventory.json"),
        "rlinfra.verl.site",
        "--limit",
        ",".join(limit),
    ]
    try:
        proc = run(args, env=env, cwd=kit, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        return False, "site.yml did not finish within recovery.replace_timeout (%ss); its last lines: %s" % (
            timeout,
            " | ".join(out.strip().splitlines()[-TAIL_LINES:]),
        )
    except OSError as e:
        return False, "site.yml could not be started from the kit (%s)" % e
    lines = (proc.stdout or "").strip().splitlines()
    if proc.returncode != 0:
        wanted = [
            x
            for x in lines + (proc.stderr or "").strip().splitlines()
            if x.startswith(("fatal:", "failed:", "ERROR", "[ERROR]")) or "msg" in x
        ]
        return False, "site.yml failed (exit %d): %s" % (
            proc.returncode,
            " | ".join((wanted or lines + (proc.stderr or "").splitlines())[-TAIL_LINES:])[:3000],
        )
    recap = [x for x in lines if " : ok=" in x]
    return True, "; ".join(" ".join(x.split()) for x in recap)


def replace(
    conf: Mapping[str, Any],
    nodes: Sequence[Mapping[str, Any]],
    say: Callable[[str], None],
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    probe: Callable[[str, int | str], str] = ssh_banner,
    client: HyperbolicClient | None = None,
    run: Callable[..., Any] = subprocess.run,
) -> dict[str, Any]:
    """Replace the machines of ``nodes`` (``[{label, node_ip, head}]``) gone for good; the watchdog's answer."""
    label = conf["label"]
    inventory_path = os.path.join(conf["dir"], "inventory.json")
    try:
        inventory = load_json(inventory_path)
        record = hyperbolic_record.read(conf["record"], label)
    except (OSError, ValueError) as e:
        return dict(failed=True, msg="the replace kit cannot be read (%s)" % e)
    hosts, names = inventory_hosts(inventory), by_address(inventory)
    # The API the label rented on (provision.yml -e api=...), as its record says.
    apis: list[Any]
    apis = [r.get("api") for r in (record.get("rentals") or {}).values() if isinstance(r, dict) and r.get("api")]
    api = conf.get("api") or (apis[0] if apis else "on_demand")
    client = client or HyperbolicClient(conf["api_key"], conf["api_url"], opener=open_url)
    rent = Rent(client, api=api, record_ids=hyperbolic_record.ids(record, api), log=say, sleep=sleep)
    try:
        listed = dict((v["name"], v) for v in rent.views(rent.ours(label), label))
    except HyperbolicError as e:
        return dict(failed=True, msg="the Hyperbolic API could not list the rentals of %s: %s" % (label, e))
    by_name = dict((r.get("name"), (i, r)) for i, r in (record.get("rentals") or {}).items() if isinstance(r, dict))
    todo, again = [], []
    for node in nodes:
        name = node.get("name") or names.get(str(node.get("node_ip")))
        if node.get("head"):
            return dict(
                failed=True,
                msg="the lost machine %s is the head, where this supervisor runs" % node["label"],
                todo="run submit.yml again from the controller: with recovery.replace it rents the cluster again",
            )
        if not name or name not in by_name or name not in hosts:
            return dict(
                failed=True,
                msg="%s is not one of cluster %s's rentals (the kit's inventory and the head's "
                "record name no such machine)" % (node["label"], label),
                todo="bring it back by hand (site.yml --limit %s), then run submit.yml again"
                % (name or node.get("node_ip")),
            )
        old_id, rental = by_name[name]
        view = listed.get(name)
        moved = view is not None and view.get("host") and str(view["host"]) != str(hosts[name].get("ansible_host"))
        if moved or hosts[name].get("rlinfra_replaces") == str(node.get("node_ip")):
            # Rented again before this supervisor restarted (the API, or the kit's inventory, has the new machine under
            # the name): converged again, never rented twice.
            if moved:
                if view is None:  # never: moved only when it is (for the type checker)
                    raise AssertionError("view is set here")
                point_at(inventory, name, view, str(node.get("node_ip")))
                write_private(inventory_path, inventory)
            current = inventory_hosts(inventory)[name]
            say(
                "replace: %s was already rented again (rental %s at %s): converging it"
                % (name, current.get("hyperbolic_id") or old_id, current.get("ansible_host"))
            )
            again.append(
                dict(
                    label=node["label"],
                    name=name,
                    new_ip=str(current.get("ansible_host")),
                    rental=str(current.get("hyperbolic_id") or old_id),
                    old_rental="",
                )
            )
            continue
        host: Any = (view or {}).get("host") or hosts[name].get("ansible_host") or node.get("node_ip")
        port = (view or {}).get("port") or hosts[name].get("ansible_port") or 22
        why = gone_for_good(view, host, port, probe, sleep)
        if not why:
            say(
                "replace: %s (rental %s) still answers SSH at %s:%s: not gone for good, not replaced"
                % (name, old_id, host, port)
            )
            continue
        say("replace: %s (rental %s, %s) is gone for good: %s" % (name, old_id, host, why))
        todo.append(
            dict(
                node=node,
                name=name,
                old_id=str((view or {}).get("id") or old_id),
                listed=view is not None,
                rental=rental,
            )
        )
    if not todo and not again:
        return dict(replaced=[], msg="every lost machine still answers SSH")
    replaced = list(again)
    if todo:
        rented = rent_again(conf, rent, record, todo, inventory, inventory_path, say, clock)
        if rented.get("failed"):
            return rented
        replaced += rented["replaced"]
    lost = set(str(n.get("node_ip")) for n in nodes) - set(r["new_ip"] for r in replaced)
    limit = sorted(h for h, v in inventory_hosts(inventory).items() if str(v.get("ansible_host")) not in lost)
    say(
        "replace: converging cluster %s (%s) from the head with site.yml, up to %ss"
        % (label, ", ".join(limit), conf.get("timeout", 1800))
    )
    t1 = clock()
    ok, tail = converge(conf, limit, int(conf.get("timeout", 1800)), run=run)
    if not ok:
        return dict(
            failed=True,
            replaced=replaced,
            msg="the new machine%s %s could not be converged: %s"
            % ("s" if len(replaced) > 1 else "", ", ".join(r["name"] for r in replaced), tail),
            todo="site.yml from the controller converges it (the label's rentals now include it), then submit.yml",
        )
    say("replace: site.yml converged %s in %ds (%s)" % (", ".join(limit), clock() - t1, tail))
    return dict(replaced=replaced)


def rent_again(
    conf: Mapping[str, Any],
    rent: Rent,
    record: Mapping[str, Any],
    todo: Sequence[Mapping[str, Any]],
    inventory: dict[str, Any],
    inventory_path: str,
    say: Callable[[str], None],
    clock: Callable[[], float],
) -> dict[str, Any]:
    """Give back what the API still lists of ``todo``, rent as many under their names, point the kit's inventory at
    them (written before the converge: a supervisor restarted in it converges them again, never rents twice)."""
    label = conf["label"]
    api = rent.api.name
    settings = kit_settings(conf)
    count = len(record.get("rentals") or {})
    spec = todo[0]["rental"]
    # Never dearer than the machine it replaces: the rental's dollars an hour as Rent's ceiling, dollars a GPU-hour.
    worst = max((t["rental"].get("cost_per_hour") or 0) / float(t["rental"].get("gpu_count") or 1) for t in todo)
    ceiling = worst + 1e-9 if worst > 0 else None  # a price equal to the lost machine's is not dearer
    t0 = clock()
    try:
        result = rent.present(
            label,
            count,
            spec.get("gpu_type") or "",
            int(spec.get("gpu_count") or 8),
            ceiling,
            spec.get("region") or "",
            timeout=int(conf.get("rent_timeout", 900)),
            min_hours=float(settings.get("min_hours", 1)),
            daily_budget=settings.get("daily_budget"),
            replace=[t["old_id"] for t in todo if t["listed"]],
            ssh_public_key=settings.get("ssh_public_key") or "",
        )
    except HyperbolicError as e:
        return dict(failed=True, msg="renting in place of %s failed: %s" % (", ".join(t["name"] for t in todo), e))
    gone = [t["old_id"] for t in todo if not t["listed"]]
    result["released"] = list(result.get("released") or []) + gone
    try:
        hyperbolic_record.update(conf["record"], label, api, result)
    except OSError as e:
        say("replace: the head's record %s could not be written (%s)" % (conf["record"], e))
    views = dict((v["name"], v) for v in result.get("instances") or [])
    replaced = []
    for item in todo:
        view = views.get(item["name"])
        if not view:
            return dict(failed=True, msg="the API lists no new rental named %s after renting" % item["name"])
        say(
            "replace: rented %s again: rental %s at %s:%s (%s x %s, $%s/h) in %ds"
            % (
                item["name"],
                view["id"],
                view["host"],
                view["port"],
                view.get("gpu_count"),
                view.get("gpu_model"),
                view.get("cost_per_hour"),
                clock() - t0,
            )
        )
        point_at(inventory, item["name"], view, str(item["node"].get("node_ip")))
        replaced.append(
            dict(
                label=item["node"]["label"],
                name=item["name"],
                new_ip=view["host"],
                rental=str(view["id"]),
                old_rental=item["old_id"],
            )
        )
    write_private(inventory_path, inventory)
    return dict(replaced=replaced)


def kit_settings(conf: Mapping[str, Any]) -> dict[str, Any]:
    """The kit's ``settings.json`` (what the controller rents with: min_hours, daily_budget, ssh_public_key); {} when
    there is none."""
    try:
        return load_json(os.path.join(conf["dir"], "settings.json"))
    except (OSError, ValueError):
        return {}
