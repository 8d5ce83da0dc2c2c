"""A git server over smart HTTP for tests: ``from tests.fake_git.server import GitServer``."""
