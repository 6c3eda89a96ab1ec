#!/usr/bin/env bash
# Copies the ridgeserve binary and the shared libraries it needs beyond the C/C++ runtime into
# one folder (bin/, lib/), so a runtime image takes exactly what the build stage's packages
# (scripts/install_deps.sh, the one package list) provided, without a second list.
#
#   deploy/docker/bundle_runtime.sh build/server/ridgeserve /opt/ridgeserve
set -euo pipefail
binary=$1
out=$2
mkdir -p "$out/bin" "$out/lib"
cp "$binary" "$out/bin/"
ldd "$binary" | awk '/=>/ {print $3}' |
  grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt|ld-linux[^/]*)\.so' |
  sort -u | xargs -r -I{} cp -L {} "$out/lib/"
