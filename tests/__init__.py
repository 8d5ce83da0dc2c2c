# Makes this directory a regular package so ``python -m tests.fake_hyperbolic.server`` (run from
# the repository root) resolves here and not to a stray top-level ``tests`` package that some
# wheels (e.g. verl) install into site-packages.
