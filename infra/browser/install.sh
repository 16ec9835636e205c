#!/usr/bin/env bash
# Headless Chromium and chromedriver from Debian's packages, for the tests that open the trace UI
# (tests/integration/test_trace_ui.py). Installed only where apt-get can run as root; elsewhere
# this says so and those tests skip, naming what is missing. Never fails `make setup`.
set -uo pipefail
if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "infra/browser/install.sh: not root with apt-get: install chromium and chromium-driver" \
    "yourself to run the trace UI tests (they skip without them)" >&2
  exit 0
fi
echo "installing chromium and chromium-driver (Debian packages) for the trace UI tests"
if ! { apt-get update -q >/dev/null && apt-get install -y -q chromium chromium-driver >/dev/null; }; then
  echo "infra/browser/install.sh: apt-get could not install chromium chromium-driver;" \
    "the trace UI tests will skip" >&2
fi
exit 0
