# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The collection's shared rules: the type vocabulary, settings, numbers, files, masking, secret names, switches and
the plain-module stand-in. Standard library only."""
