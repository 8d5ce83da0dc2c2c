# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""One vocabulary of value types for every input surface: module and action arguments, experiment keys, role
variables, command-line switches and inventory plugin options.

A surface declares each of its fields with a type from here (``AbsPath()``, ``Url(schemes=("https",))``,
``Secret()``, ``Int(1, 100)``...). The type knows

* what a good value is (:meth:`Type.check`, which returns the value as the code should use it, or raises
  :class:`Bad` with what the value *must* be);
* how to show a bad value in an error line without leaking it (:meth:`Type.shown`: a secret is never shown, a URL
  only as scheme and host);
* its class, by which tests/unit/vocabulary_corpus.py gives it a corpus of bad values of its own kind, from which
  ``tests/unit/test_bad_input_generated.py`` builds a case for every field of every surface, so a field is covered the
  day it is declared (the values live with the tests, so that no node carries them);
* for module arguments, the Ansible argument-spec entry it stands for (:meth:`Type.ansible_spec`).

:class:`Args` is a module's or action's whole argument declaration: ``Args(...).spec`` is the Ansible
``argument_spec``; :meth:`Args.errors` checks parsed parameters (after Ansible's own type conversion) and gives one
line per bad field, ``"<name> must <what it must be>, got <shown value>"``; :func:`enforce` fails a module with them.

Cross-field rules (a merge target that overlaps its checkpoints, a world-open firewall without its explicit switch)
stay with the surface that knows both fields. Standard library only: code that runs on the nodes imports it.

The types lie in this package's private modules, by concern (``_base``, ``_text``, ``_numbers``, ``_paths``,
``_network``, ``_remote``, ``_containers``, ``_declaration``); everything else names them from here.
"""

from __future__ import annotations

from ansible_collections.rlinfra.verl.plugins.module_utils.common.masking import MASK
from ansible_collections.rlinfra.verl.plugins.module_utils.common.vocabulary._base import (
    _CONTROL,
    NOTSET,
    Bad,
    Inner,
    Line,
    Type,
    _short,
    _shown,
    credential_strings,
    one_line,
    type_word,
)
from ansible_collections.rlinfra.verl.plugins.module_utils.common.vocabulary._containers import (
    Custom,
    EnvMap,
    ListOf,
    MapOf,
    OneOf,
    Raw,
    Unshown,
)
from ansible_collections.rlinfra.verl.plugins.module_utils.common.vocabulary._declaration import (
    Args,
    Options,
    Section,
    enforce,
)
from ansible_collections.rlinfra.verl.plugins.module_utils.common.vocabulary._network import (
    LOOPBACK_NAMES,
    WORLD_PREFIX,
    Address,
    Cidr,
    Host,
    HostPort,
    IfName,
    Networks,
    Port,
    ipv4_mapped_network,
    ipv4_part,
    judged,
    unreachable,
)
from ansible_collections.rlinfra.verl.plugins.module_utils.common.vocabulary._numbers import (
    MAX_GPUS,
    YEAR,
    Int,
    Number,
    Seconds,
    Switch,
    Time,
    epoch,
    iso_time,
)
from ansible_collections.rlinfra.verl.plugins.module_utils.common.vocabulary._paths import (
    AbsPath,
    RelPath,
    confine,
    inside,
    leads_outside,
    normpath,
    overlap,
)
from ansible_collections.rlinfra.verl.plugins.module_utils.common.vocabulary._remote import (
    GitRef,
    GitUrl,
    HfRepoId,
    ImageRef,
    PathOrUrl,
    Requirement,
    Url,
    url_shown,
    urlsplit_words,
)
from ansible_collections.rlinfra.verl.plugins.module_utils.common.vocabulary._text import (
    Choice,
    EnvName,
    Name,
    Regex,
    Secret,
    SubmissionId,
    Text,
)

__all__ = [
    # private names other packages read (the shown form of a value, the control characters)
    "_CONTROL",
    "_short",
    "_shown",
    "LOOPBACK_NAMES",
    "MASK",
    "MAX_GPUS",
    "NOTSET",
    "WORLD_PREFIX",
    "YEAR",
    "AbsPath",
    "Address",
    "Args",
    "Bad",
    "Choice",
    "Cidr",
    "Custom",
    "EnvMap",
    "EnvName",
    "GitRef",
    "GitUrl",
    "HfRepoId",
    "Host",
    "HostPort",
    "IfName",
    "ImageRef",
    "Inner",
    "Int",
    "Line",
    "ListOf",
    "MapOf",
    "Name",
    "Networks",
    "Number",
    "OneOf",
    "Options",
    "PathOrUrl",
    "Port",
    "Raw",
    "Regex",
    "RelPath",
    "Requirement",
    "Seconds",
    "Secret",
    "Section",
    "SubmissionId",
    "Switch",
    "Text",
    "Time",
    "Type",
    "Unshown",
    "Url",
    "confine",
    "credential_strings",
    "enforce",
    "epoch",
    "inside",
    "ipv4_mapped_network",
    "ipv4_part",
    "iso_time",
    "judged",
    "leads_outside",
    "normpath",
    "one_line",
    "overlap",
    "type_word",
    "unreachable",
    "url_shown",
    "urlsplit_words",
]
