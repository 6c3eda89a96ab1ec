#!/usr/bin/env bash
# Installs dependencies, builds, and runs ridgeserve. With no arguments it serves the bundled
# default model (assets/default-model, a small MesaNet trained in this repository, with its
# tokenizer) over HTTP on 127.0.0.1:8000 and gRPC on 127.0.0.1:9000 until Ctrl-C (which drains and exits 0); otherwise the
# arguments are passed to the ridgeserve binary, e.g. `./scripts/run.sh generate --model
# assets/default-model --prompt-ids 1490,336,261,1580 --max-tokens 40`.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh > build.log 2>&1 || { tail -n 50 build.log; exit 1; }
if [ "$#" -eq 0 ]; then
  set -- serve --model assets/default-model --http-port 8000 --grpc-port 9000
fi
exec ./build/server/ridgeserve "$@"
