#!/usr/bin/env bash
# Quality gates: ansible-lint (production profile), ruff (format and check), mypy, ansible-test sanity from an
# ansible_collections/rlinfra/verl layout, Galaxy build + install into an empty path with ansible-doc and a
# syntax check against the installed copy, and the changelog. Fails on the first gate that fails.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export PATH=$ROOT/.venv/bin:$PATH
WORK=${GATES_WORK:-$ROOT/.cache/gates}
PY=${GATES_PYTHON:-3.11}
gate() { printf '\n--- gate: %s\n' "$*"; }

gate "ansible-lint --profile production"
ansible-lint --profile production --offline

gate "ruff format --check, ruff check (pyproject.toml)"
ruff format --check --quiet plugins tests bench scripts
ruff check --quiet plugins tests bench scripts

gate "mypy: module_utils and plugin_utils (every public function annotated: tests/unit/test_typed.py)"
( cd collections && mypy --config-file ../pyproject.toml \
    -p ansible_collections.rlinfra.verl.plugins.module_utils -p ansible_collections.rlinfra.verl.plugins.plugin_utils )

gate "ansible-test sanity"
# ansible-test bootstraps pip in its sanity venvs with a get-pip script from ci-files.testing.ansible.com,
# which this test bed cannot reach; a stand-in in its cache does the same from ensurepip + PyPI.
for v in $(sed -n "s/^ *pip='\([0-9.]*\)',.*/\1/p" "$ROOT"/.venv/lib/python*/site-packages/ansible_test/_internal/python_requirements.py); do
  stub=$HOME/.ansible/test/cache/get_pip_${v//./_}.py
  [ -s "$stub" ] && continue
  mkdir -p "$(dirname "$stub")"
  cat >"$stub" <<'PY'
"""Stand-in for get-pip.py (ci-files.testing.ansible.com is unreachable here): ensurepip, then pip from PyPI."""
import subprocess
import sys
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
subprocess.check_call([sys.executable, "-m", "ensurepip", "--upgrade", "--default-pip"], stdout=subprocess.DEVNULL)
subprocess.check_call([sys.executable, "-m", "pip", "install", "--quiet", *args])
PY
done
rm -rf "$WORK/tree"; mkdir -p "$WORK/tree/ansible_collections/rlinfra"
COLL=$WORK/tree/ansible_collections/rlinfra/verl
# Only what git tracks (plus new, unignored files): the collection as it would be committed.
mkdir -p "$COLL"
git ls-files -z --cached --others --exclude-standard | grep -zv '^collections/' \
  | xargs -0 -I{} cp --parents -P {} "$COLL/" 2>/dev/null || true
( cd "$COLL" && git init -q && git add -A >/dev/null 2>&1 )
( cd "$COLL" && ansible-test sanity --python "$PY" --requirements --color no \
    --exclude tests/fake_hyperbolic/ --exclude bench/ --exclude sandbox/ --exclude scripts/ --exclude tests/vm/ \
    --exclude molecule/ --exclude tests/integration/ --exclude tests/unit/ --exclude tests/conftest.py --exclude tests/__init__.py )

gate "galaxy build + install + ansible-doc + syntax check on the installed copy"
rm -rf "$WORK/build" "$WORK/installed"; mkdir -p "$WORK/build" "$WORK/installed"
ansible-galaxy collection build --output-path "$WORK/build" --force >/dev/null
tarball=$(ls "$WORK"/build/rlinfra-verl-*.tar.gz)
echo "tarball: $(basename "$tarball") $(du -k "$tarball" | cut -f1) KiB, $(tar -tzf "$tarball" | wc -l) entries"
if tar -tzf "$tarball" | grep -E '^(tests|bench|sandbox|molecule|\.sandbox|\.venv|collections)/' ; then
  echo "the tarball carries development files (see build_ignore in galaxy.yml)" >&2; exit 1
fi
(
  # Away from the checkout's ansible.cfg, whose collections path already holds this collection (the
  # install would then be a no-op): an empty config and the empty install path only.
  cd "$WORK/installed"
  : > "$WORK/empty.cfg"
  export ANSIBLE_COLLECTIONS_PATH=$WORK/installed ANSIBLE_CONFIG=$WORK/empty.cfg
  ansible-galaxy collection install --offline -p "$WORK/installed" "$tarball" >/dev/null
  for m in $(ls "$WORK"/installed/ansible_collections/rlinfra/verl/plugins/modules/ | sed -n 's/\.py$//p'); do
    ansible-doc "rlinfra.verl.$m" >/dev/null
  done
  ansible-doc -t inventory rlinfra.verl.hyperbolic >/dev/null
  for f in $(ls "$WORK"/installed/ansible_collections/rlinfra/verl/plugins/filter/*.yml | xargs -n1 basename | sed 's/\.yml$//'); do
    ansible-doc -t filter "rlinfra.verl.$f" >/dev/null
  done
  printf 'all:\n  children:\n    ray_head: {hosts: {h1: {}}}\n    ray_workers: {hosts: {h2: {}}}\n' > inv.yml
  for pb in site submit stop status merge teardown logs provision; do
    ansible-playbook -i inv.yml --syntax-check "rlinfra.verl.$pb" >/dev/null
  done
  echo "ansible-doc and syntax checks passed against the installed collection"
)

gate "module names resolve with ansible-core + galaxy.yml's dependencies only"
# Copies of the declared collections (from the ansible package, as Galaxy is unreachable here) beside the
# installed tarball; the Python environment's other collections are not searched.
rm -rf "$WORK/deps"
for c in $(python3 -c 'import sys, yaml; print(" ".join(yaml.safe_load(open(sys.argv[1]))["dependencies"] or {}))' galaxy.yml); do
  mkdir -p "$WORK/deps/ansible_collections/${c%%.*}"
  cp -r "$(python3 -c 'import ansible_collections, sys; print(ansible_collections.__path__[0])')/${c/.//}" \
    "$WORK/deps/ansible_collections/${c%%.*}/"
done
python3 scripts/check_fqcn.py "$WORK/installed/ansible_collections/rlinfra/verl" "$WORK/installed:$WORK/deps"

gate "changelog"
antsibull-changelog lint
antsibull-changelog generate >/dev/null
git diff --quiet -- CHANGELOG.rst || echo "(CHANGELOG.rst regenerated; commit it)"
echo "all gates passed"
