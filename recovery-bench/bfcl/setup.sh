#!/bin/sh
# Installs what the BFCL multi-turn bench needs into the venv given as $1: BFCL's own package
# (its tasks, ground truth, simulators and checker) and mpmath (its math simulator). Its other
# declared dependencies serve model handlers the bench does not use, hence --no-deps.
# Idempotent: a venv that already imports both is left as it is.
set -eu
venv="$1"
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import bfcl_eval, mpmath" 2>/dev/null; then
    exit 0
fi
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps \
    "bfcl-eval==2026.3.23" "mpmath==1.4.1"
