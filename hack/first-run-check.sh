#!/usr/bin/env bash
# Runs the README's "First run" block (between <!-- first-run:begin --> and
# <!-- first-run:end -->) exactly as written, line by line as one bash script with
# `set -euo pipefail`, from the repository root, after a clean start (the local state and the
# samples' demo workspace are removed first). A failing line fails the check; the local run
# is always stopped at the end. Used by `make test-first-run` (and CI).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"
script="$(mktemp)"
trap 'rm -f "${script}"; hack/local-down.sh >/dev/null 2>&1 || true' EXIT
{
  echo 'set -euo pipefail'
  echo 'set -x'
  awk '/<!-- first-run:begin -->/{on=1; next} /<!-- first-run:end -->/{on=0} on' README.md |
    sed -e '/^```/d'
} >"${script}"
if ! grep -q 'make run-local' "${script}"; then
  echo "first-run-check: no first-run block found in README.md" >&2
  exit 1
fi
# A clean start: a previous local run's state would make the steps depend on history.
# The demo workspace is the samples' (local-up creates it when missing): start it afresh too,
# so the sample patch applies to the file it was written against.
hack/local-down.sh --purge >/dev/null 2>&1 || true
rm -rf "${LOCAL_WORKSPACES:-/var/lib/workbench/workspaces}/demo"
bash "${script}"
echo "first-run-check: every step of the README's First run passed"
