#!/usr/bin/env bash
# Install the Debian packages of the real components the tests run against: Prometheus and Chromium here,
# Slurm and its accounting database through scripts/slurm-up.sh (which the Slurm tests call to
# start the cluster, and which installs its packages when they are missing).
# Idempotent; needs root and apt-get. Without them it says which tests will skip.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "▸ not root or no apt-get: Prometheus, Slurm and browser tests skip unless those are installed" >&2
  exit 0
fi
if ! command -v prometheus >/dev/null 2>&1; then
  echo "▸ installing prometheus (Debian package)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi
if ! command -v chromium >/dev/null 2>&1; then
  # the browser test (tests/dashboards/test_browser.py) drives Debian's Chromium with Playwright;
  # the emoji font draws the dashboards' page icons in its screenshots
  echo "▸ installing chromium (Debian package)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium fonts-noto-color-emoji >/dev/null
fi
