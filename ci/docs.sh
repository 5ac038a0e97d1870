#!/usr/bin/env bash
# Build the documentation (sphinx, docs/ -> docs/_build/html) and fail on any
# warning or unresolved reference (-W -n). Installs sphinx and the theme into
# the project's .venv (pinned in docs/requirements.txt) when missing, and
# documents the working tree's Python packages through ci/dev-env.sh (the
# autodoc imports pyddstore and pyddstore.torch from the checkout, with a
# meson build of libddstore in build-dev/). Safe to run again.
#   bash ci/docs.sh            # needs ci/setup.sh to have created .venv
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

if [ ! -x .venv/bin/python ]; then
  echo "docs: no .venv yet; running ci/setup.sh first"
  bash ci/setup.sh
fi
py=.venv/bin/python
stamp=.venv/.pyddstore-docs-requirements
if ! cmp -s docs/requirements.txt "$stamp" || ! $py -c "import sphinx, furo" >/dev/null 2>&1; then
  echo "docs: installing sphinx and the theme (docs/requirements.txt)"
  $py -m pip install -q -r docs/requirements.txt
  cp docs/requirements.txt "$stamp"
fi

# shellcheck source=ci/dev-env.sh
source ci/dev-env.sh
# Importing pyddstore.torch for autodoc must not start MPI or print anything.
$py -c "import pyddstore, pyddstore.torch" || { echo "docs: pyddstore does not import (see above)"; exit 1; }

rm -rf docs/_build/html docs/_build/doctrees
echo "docs: sphinx-build -W -n -b html docs docs/_build/html"
if ! $py -m sphinx -W -n --keep-going -q -b html -d docs/_build/doctrees docs docs/_build/html; then
  echo "docs: FAILED (warnings above are errors: fix them, the build runs with -W -n)"
  exit 1
fi
echo "docs: built docs/_build/html/index.html ($(find docs/_build/html -name '*.html' | wc -l) pages)"
