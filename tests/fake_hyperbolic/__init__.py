"""Fake Hyperbolic API for tests: ``from tests.fake_hyperbolic.server import FakeHyperbolic``.

Kept empty of imports so ``python -m tests.fake_hyperbolic.server`` runs cleanly.
"""
