# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""``rlinfra.verl.ray_package``'s work: a working-directory package (module_utils/ray/package.py) put on the
cluster's GCS through the dashboard, once. Standard library only."""

from __future__ import annotations

import os
from typing import Any

from ansible_collections.rlinfra.verl.plugins.module_utils.ray.client import RayError, client_from_module
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.package import (
    PackageError,
    ensure_package,
    package_name,
    read_package,
)

# Uploads of up to Ray's 100 MiB limit over a slow link take longer than the client's default 30 s.
UPLOAD_TIMEOUT = 300


def upload(module: Any) -> None:
    """The module's work, with its AnsibleModule: the package uploaded unless the cluster has it (only looked for in
    check mode, or when ``src`` is gone); exits through ``module``."""
    p = module.params
    try:
        name = package_name(p["uri"])
        if os.path.exists(p["src"]):
            data = read_package(p["src"])  # a bad src is refused before any request
        client = client_from_module(module, timeout=UPLOAD_TIMEOUT)
        if module.check_mode or not os.path.isfile(p["src"]):
            present = client.has_package(name)
            if present or module.check_mode:
                module.exit_json(changed=not present, uri=p["uri"], uploaded=False)
            module.fail_json(msg="%s is not on the cluster and src %s does not exist" % (p["uri"], p["src"]))
        uploaded = ensure_package(client, p["uri"], data)
    except (PackageError, RayError) as e:
        module.fail_json(msg=str(e), uri=p["uri"])
    module.exit_json(changed=uploaded, uri=p["uri"], uploaded=uploaded, size=len(data))
