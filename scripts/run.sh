#!/usr/bin/env bash
# Installs dependencies, builds, and runs ridgeserve. With no arguments it generates from the
# bundled default model (assets/default-model, a small MesaNet trained in this repository; the
# prompt ids are "It is a truth universally acknowledged, that" in its tokenizer); otherwise the
# arguments are passed to the ridgeserve binary.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh > build.log 2>&1 || { tail -n 50 build.log; exit 1; }
if [ "$#" -eq 0 ]; then
  set -- generate --model assets/default-model \
    --prompt-ids 1490,336,261,1580,381,3259,648,3203,712,1055,14,317 \
    --max-tokens 40 --temperature 0.7 --seed 1
fi
exec ./build/server/ridgeserve "$@"
