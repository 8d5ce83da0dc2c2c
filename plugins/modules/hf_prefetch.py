#!/usr/bin/python
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: hf_prefetch
short_description: Download Hugging Face models and datasets once into the Hub cache on the shared volume
version_added: 0.3.0
description:
  - Brings each listed model and dataset repository, at a branch, tag or commit, into the Hugging Face Hub cache
    under O(hf_home) (C(<hf_home>/hub), or O(hub_cache)) in huggingface_hub's own layout (C(blobs/), C(snapshots/<commit>/),
    C(refs/<revision>)), so that transformers, datasets and vLLM on every node find the files offline.
  - Run on one node of the cluster before a job starts, so that eight nodes do not download the same files at once;
    C(submit.yml) does so for an experiment's C(prefetch) section (docs/EXPERIMENTS.md).
  - A repository already complete at the revision's commit downloads nothing (changed=false); a pinned commit found
    complete is not even asked of the Hub, and a branch or tag whose commit is complete in the cache is used when
    the Hub cannot be reached.
  - Every file is checked against its size and its sha256 (LFS) or git blob id before it is put in place; a dropped
    download resumes with a Range request (O(retries) attempts per file, each logged); a partial file is never
    visible under C(snapshots/).
  - The token is sent only to O(endpoint)'s host (never to the CDN a large file is redirected to), and never written
    to a file, a process argument or a message.
  - Uses only Python's standard library on the node (not huggingface_hub).
author:
  - rlinfra maintainers (@rlinfra)
options:
  models:
    description:
      - Model repositories, each C(org/name) (at C(main)) or a mapping with C(repo), C(revision) (branch, tag or commit),
        C(allow_patterns), C(ignore_patterns) (file patterns as in huggingface_hub's C(snapshot_download)).
    type: list
    elements: raw
    default: []
  datasets:
    description: Dataset repositories, written like O(models).
    type: list
    elements: raw
    default: []
  hf_home:
    description: The C(HF_HOME) the jobs use, on the shared volume.
    type: path
    required: true
  hub_cache:
    description: The Hub cache directory when the jobs set C(HF_HUB_CACHE); default C(<hf_home>/hub).
    type: path
  endpoint:
    description: The Hub's address (C(HF_ENDPOINT)), for a mirror or a private Hub.
    type: str
    default: https://huggingface.co
  token:
    description: A Hugging Face token (C(HF_TOKEN)) for private or gated repositories. Never logged.
    type: str
    default: ""
  timeout:
    description: Seconds one request may wait for the Hub to answer.
    type: int
    default: 60
  retries:
    description: Attempts per file before the download fails.
    type: int
    default: 3
  lock_timeout:
    description: Seconds to wait for another prefetch of the same repository (another submit) to finish.
    type: int
    default: 3600
  shared_path:
    description:
      - A path on the shared volume every node of the cluster mounts (submit.yml gives the checkpoint root). When set,
        O(hf_home) must be on that same file system or on a network file system, else the task fails with one line
        before anything is fetched (the other nodes would not find the files).
    type: path
    default: ""
attributes:
  check_mode:
    support: full
    description: Asks the Hub what would be downloaded and writes nothing.
  diff_mode:
    support: none
    description: Nothing to show.
"""

EXAMPLES = r"""
- name: Fetch the model and the dataset once, on the head
  rlinfra.verl.hf_prefetch:
    models:
      - Qwen/Qwen2.5-0.5B-Instruct
      - repo: Qwen/Qwen2.5-7B-Instruct
        revision: a09a35458c702b33eeacc393d103063234e8bc28
        allow_patterns: ["*.json", "*.safetensors", "tokenizer*"]
    datasets:
      - openai/gsm8k
    hf_home: /data/hf_home
    token: "{{ lookup('ansible.builtin.env', 'HF_TOKEN') }}"
"""

RETURN = r"""
items:
  description: One entry per repository.
  returned: always
  type: list
  elements: dict
  contains:
    kind:
      description: V(model) or V(dataset).
      type: str
      returned: always
    repo:
      description: The repository id.
      type: str
      returned: always
    revision:
      description: The revision asked for.
      type: str
      returned: always
    commit:
      description: The commit the revision named, whose files are in the cache.
      type: str
      returned: always
    files:
      description: Files of the commit selected by the patterns.
      type: int
      returned: always
    downloaded_files:
      description: Files downloaded (or that would be, in check mode).
      type: int
      returned: always
    downloaded_bytes:
      description: Their size in bytes.
      type: int
      returned: always
    status:
      description: V(downloaded), V(present) (nothing to do), V(ref) (only the branch's ref moved), V(cached) (the Hub did not
        answer; the cached commit of the branch is complete).
      type: str
      returned: always
lines:
  description: One line per repository (and one per retried download), for the play's output.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.verl import hf_prefetch, hf_prefetch_module

ARGS = vocabulary.Args(
    models=hf_prefetch_module.repo_list("models"),
    datasets=hf_prefetch_module.repo_list("datasets"),
    hf_home=vocabulary.AbsPath("writes", required=True),
    hub_cache=vocabulary.AbsPath("writes"),
    # Not file:// (it would read the node's own files), no credentials or query (the token has its own option).
    endpoint=vocabulary.Url(schemes=("https", "http"), default=hf_prefetch.DEFAULT_ENDPOINT),
    token=vocabulary.Secret(default=""),
    timeout=vocabulary.Int(1, 3600, unit="seconds", default=60),
    retries=vocabulary.Int(1, 100, default=3),
    lock_timeout=vocabulary.Int(0, 7 * 86400, unit="seconds", default=3600),
    shared_path=vocabulary.AbsPath("reads", empty=True, default=""),
)
ARGUMENT_SPEC = ARGS.spec


def main():
    hf_prefetch_module.run(ARGS.new_module(AnsibleModule))


if __name__ == "__main__":
    main()
