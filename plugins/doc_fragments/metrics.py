# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Options of the modules that read or remove a node's metrics stack (ray_metrics, ray_metrics_info): where its files
and units are."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  config_dir:
    description: Ray's configuration directory; the metrics files (web configs, scrape config, password) are in its
      C(metrics) subdirectory.
    type: path
    default: /etc/ray
  unit_dir:
    description: Where the systemd units are.
    type: path
    default: /etc/systemd/system
"""
