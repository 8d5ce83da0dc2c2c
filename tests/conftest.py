"""Make the checkout importable as ``ansible_collections.rlinfra.verl`` for every test."""

from __future__ import annotations

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
COLLECTIONS = str(REPO_ROOT / "collections")
if COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)
