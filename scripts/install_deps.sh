#!/usr/bin/env bash
# Installs every Debian 12 package that building and testing ridgeserve needs.
# The one place where the project's system dependencies are listed.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config git python3
  libabsl-dev nlohmann-json3-dev
  libprotobuf-dev protobuf-compiler libgrpc++-dev protobuf-compiler-grpc
  prometheus-cpp-dev libcpp-httplib-dev
  libopenblas-openmp-dev libpcre2-dev libicu-dev liblzma-dev
  libgtest-dev libgmock-dev
)

if [ "$(id -u)" -ne 0 ]; then
  SUDO=sudo
else
  SUDO=
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ "${#missing[@]}" -gt 0 ]; then
  echo "install_deps: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install_deps: all packages present"
fi
