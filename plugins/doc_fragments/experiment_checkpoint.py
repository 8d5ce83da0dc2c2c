# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Options of the modules that place an experiment's checkpoints (plugin_utils/experiment_task.py checkpoint_args)."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  checkpoint_root:
    description: Checkpoints go to C(<checkpoint_root>/<project>/<cluster>/<experiment>) on the shared volume.
    type: str
    default: /data/checkpoints
  checkpoint_cluster:
    description:
      - The cluster named in the checkpoint directory; empty for the cluster the run goes to. Set it to resume
        another cluster's checkpoints on purpose.
    type: str
    default: ""
"""
