# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Observing a run: Prometheus queries of the nodes' utilisation and their answers (pure functions), and the run's
self-contained HTML report (curves, utilisation, events) with its vendored chart library."""
