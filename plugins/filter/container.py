# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Filter ``rlinfra.verl.container_run``: the start of the Ray unit's ``<engine> run`` line in container mode
(roles/ray/templates/ray.service.j2); the rule lives in plugins/module_utils/node/container.py."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.rlinfra.verl.plugins.module_utils.node import container


def container_run(engine, engine_path, name, mounts, read_only=(), env_names=(), nofile=None):
    """The run line's start, up to the node's own part (``@CONTAINER_ARGS@``, filled in by rlinfra.verl.ray_node)."""
    for label, value in (("mounts", mounts), ("read_only", read_only), ("env_names", env_names)):
        if not isinstance(value, (list, tuple)):
            raise AnsibleFilterError("container_run: %s must be a list, got %s" % (label, type(value).__name__))
    if not str(engine_path or "").startswith("/"):
        raise AnsibleFilterError(
            "container_run: the engine's path must be absolute, got %r (run the ray role's "
            "container entry point first: site.yml does)" % (engine_path,)
        )
    try:
        return container.run_prefix(
            engine,
            engine_path,
            name,
            [str(m) for m in mounts],
            [str(m) for m in read_only],
            [str(e) for e in env_names],
            nofile,
        )
    except container.ContainerError as exc:
        raise AnsibleFilterError("container_run: %s" % exc) from exc


class FilterModule:
    def filters(self):
        return {"container_run": container_run}
