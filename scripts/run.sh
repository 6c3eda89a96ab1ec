#!/usr/bin/env bash
# Installs dependencies, builds, and runs ridgeserve. With no arguments it generates from the
# bundled MesaNet checkpoint; otherwise the arguments are passed to the ridgeserve binary.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh > build.log 2>&1 || { tail -n 50 build.log; exit 1; }
if [ "$#" -eq 0 ]; then
  set -- generate --model tests/data/mesanet/d64_untied --prompt-ids 1,259,7,393 \
    --max-tokens 32 --temperature 0.7 --seed 1
fi
exec ./build/server/ridgeserve "$@"
