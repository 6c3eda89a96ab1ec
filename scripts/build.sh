#!/usr/bin/env bash
# Installs the Debian packages ridgeserve needs, then configures and builds it in ./build.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install_deps.sh
jobs=$(nproc)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build build -j "$jobs"
