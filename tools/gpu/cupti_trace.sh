#!/usr/bin/env bash
# Runs a command with every kernel and copy it makes traced by CUPTI (tools/gpu/cupti_trace.c,
# built here on the GPU machine, which has CUPTI but not Nsight Systems), the trace in CSV at $1
# and the host's CUDA runtime calls at $1.api.csv:
#   tools/gpu/cupti_trace.sh trace.csv cuda_hybrid_bench ... &&
#     python3 tools/bench/step_gaps.py trace.csv --api trace.csv.api.csv
set -euo pipefail
out=$1
shift
cuda=${CUDA_HOME:-/usr/local/cuda}
include=$(dirname "$(find "$cuda"/ /usr/include -name cupti.h 2>/dev/null | head -n 1)")
lib=$(dirname "$(find "$cuda"/ /usr/lib -name 'libcupti.so*' 2>/dev/null | head -n 1)")
newest() { grep -ohE "$1[0-9]+" "$include"/cupti_activity*.h | sort -V | tail -n 1; }
build=$(mktemp -d)
gcc -shared -fPIC -O2 -DKERNEL_RECORD="$(newest CUpti_ActivityKernel)" \
  -DMEMCPY_RECORD="$(newest CUpti_ActivityMemcpy)" -I"$include" "$(dirname "$0")/cupti_trace.c" \
  -L"$lib" -lcupti -Wl,-rpath,"$lib" -o "$build/libcupti_trace.so"
CUDA_INJECTION64_PATH=$build/libcupti_trace.so CUPTI_TRACE_OUT=$out "$@"
