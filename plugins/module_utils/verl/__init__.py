# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""verl and NeMo RL runs: experiment files (find, read, validate, render, quote), checkpoints, the driver log's steps
and metrics, preflight, code checkouts, Hugging Face prefetch, the run's secrets, failure causes."""
