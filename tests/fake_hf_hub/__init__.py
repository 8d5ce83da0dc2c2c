"""Fake Hugging Face Hub download endpoints for tests: ``from tests.fake_hf_hub.server import FakeHub``.

Kept empty of imports so ``python3 tests/fake_hf_hub/server.py`` runs on a sandbox node as a plain script.
"""
