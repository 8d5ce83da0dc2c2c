# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Ray: the dashboard client, cluster and job reads, submission, the driver log's incremental read, attempts, recovery
and the watchdog, the node's files, firewall, restart record and converge record."""
