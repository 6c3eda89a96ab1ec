#!/usr/bin/env bash
# Installs dependencies, builds, and runs ridgeserve. With no arguments it serves the bundled
# MesaNet test checkpoint over HTTP on 127.0.0.1:8000 (Ctrl-C drains and exits); otherwise the
# arguments are passed to the ridgeserve binary.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh > build.log 2>&1 || { tail -n 50 build.log; exit 1; }
if [ "$#" -eq 0 ]; then
  set -- serve --model tests/data/mesanet/d64_untied --tokenizer tests/data/tiny_byte_tokenizer \
    --http-port 8000
fi
exec ./build/server/ridgeserve "$@"
