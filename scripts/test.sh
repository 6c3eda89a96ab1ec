#!/usr/bin/env bash
# Installs dependencies, builds everything and runs the whole test suite, then the CPU tests
# again under sanitizers (scripts/sanitizer_tests.sh) and a short run of each fuzz target
# (scripts/fuzz_smoke.sh). What CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh -DRIDGE_BUILD_TESTS=ON
ctest --test-dir build --output-on-failure -j "$(nproc)" --timeout 900
./scripts/sanitizer_tests.sh
./scripts/fuzz_smoke.sh
