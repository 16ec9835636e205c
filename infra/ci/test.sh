#!/usr/bin/env bash
# The test run behind `make test`: lint, type check, the import contracts (layers, no cycles:
# pyproject's [tool.importlinter]), the docs site built strictly (a broken link, a missing anchor or
# a page left out of mkdocs.yml's nav fails), then the default pytest suite against the real local
# stack (the session fixture brings Kafka and MinIO up). pytest's exit code 5 (nothing collected)
# is a failure here: a suite that runs no test must not pass.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${VENV:-.venv}/bin

echo "== ruff"
"$BIN/ruff" check .
"$BIN/ruff" format --check .
echo "== mypy"
"$BIN/mypy" rft producers consumers
echo "== import contracts"
"$BIN/lint-imports" --no-cache
echo "== docs"
NO_MKDOCS_2_WARNING=1 "$BIN/mkdocs" build --strict --site-dir site
echo "== pytest"
# The rft processes the tests start import the project's modules afresh each time: compiled
# once here, they need not compile them again where the environment forbids writing bytecode
# (PYTHONDONTWRITEBYTECODE).
"$BIN/python" -m compileall -q rft consumers producers tests >/dev/null
set +e
# Two workers, each test file on one of them (its module fixtures and its tests' order kept):
# much of the suite waits on brokers, timeouts and other processes, so two share the two cores.
# The slowest tests are printed on every run: where to look when the suite nears 20 minutes.
"$BIN/pytest" -q -n "${RFT_TEST_WORKERS:-2}" --dist loadfile --durations=25 tests "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: failing on purpose" >&2
  exit 1
fi
exit "$rc"
