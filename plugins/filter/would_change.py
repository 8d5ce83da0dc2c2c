# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""``{{ inventory_hostname | rlinfra.verl.would_change(python_env__sync, ray__node, ray__image) }}``: in check mode, one line per
node saying what the run would change there, from what the roles' modules reported (nothing was changed)."""

from __future__ import annotations


def _result(res):
    return res if isinstance(res, dict) and not res.get("skipped") else {}


def would_change(host, env=None, node=None, image=None):
    env, node, image = _result(env), _result(node), _result(image)
    parts = []
    if image.get("installed"):
        parts.append("%s installed" % image.get("engine", "podman"))
    if image.get("loaded") and image.get("image_store"):
        parts.append(
            "the image loaded from its archive into the shared store %s (once, by the first node there)"
            % image["image_store"]
        )
    elif image.get("loaded"):
        parts.append("the image loaded from its archive")
    elif image.get("pulled"):
        parts.append("the image pulled")
    if env.get("changed"):
        if not env.get("fingerprint"):
            parts.append("a new Python environment with the pinned package set")
        else:
            add, drop = env.get("installed") or [], env.get("removed") or []
            parts.append(
                "its Python environment changed (%s)"
                % (
                    "; ".join(
                        x
                        for x in (
                            "install %s" % ", ".join(add[:8]) + (" ..." if len(add) > 8 else "") if add else "",
                            "remove %s" % ", ".join(drop[:8]) + (" ..." if len(drop) > 8 else "") if drop else "",
                        )
                        if x
                    )
                    or "its records rewritten"
                )
            )
    files = node.get("files") or []
    if files:
        parts.append(
            "%d file(s) written: %s" % (len(files), ", ".join(files[:12]) + (" ..." if len(files) > 12 else ""))
        )
    firewall = node.get("firewall") or {}
    if firewall.get("changed"):
        parts.append(
            "the firewall table inet rlinfra_ray (Ray's ports %s for %s)"
            % (
                ", ".join(str(p) for p in firewall.get("ports") or []) or "-",
                ", ".join((firewall.get("allowed_v4") or []) + (firewall.get("allowed_v6") or [])) or "nobody",
            )
        )
    if node.get("reasons"):
        parts.append("Ray restarted (%s)" % "; ".join(node["reasons"]))
    elif node.get("started"):
        parts.append("Ray started")
    if not parts:
        return "%s: nothing would change" % host
    return "%s would get: %s" % (host, "; ".join(parts))


class FilterModule:
    def filters(self):
        return {"would_change": would_change}
