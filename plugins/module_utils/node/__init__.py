# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""A node's own facts and checks: facts, GPU health, fitness (node, network, Ray), the Python environment, storage,
Slurm."""
