# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Hyperbolic: the API client, renting (on-demand and marketplace), the rental record, run cost, the idle guard."""
