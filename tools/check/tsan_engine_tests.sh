#!/usr/bin/env bash
# Builds the engine tests with ThreadSanitizer in build-tsan/ (CPU only, no gRPC) and runs them.
# OMP_NUM_THREADS=1: libgomp is not instrumented, so its barriers are invisible to TSan and every
# OpenMP loop would be reported; with one OpenMP thread what remains are the engine's own threads
# (scheduler, event delivery, submitters, cancellers).
#
#   tools/check/tsan_engine_tests.sh            # about 5 minutes on 2 cores
set -euo pipefail
cd "$(dirname "$0")/../.."
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS="-fsanitize=thread" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" \
  -DRIDGE_WITH_CUDA=OFF -DRIDGE_WITH_GRPC=OFF -DRIDGE_BUILD_TESTS=ON >/dev/null
cmake --build build-tsan -j "$(nproc)" --target engine_test hybrid_engine_test event_delivery_test
export RIDGE_TEST_DATA_DIR=$PWD/tests/data OMP_NUM_THREADS=1 TSAN_OPTIONS=halt_on_error=1
status=0
for t in engine_test hybrid_engine_test event_delivery_test; do
  echo "== $t"
  build-tsan/tests/unit/$t --gtest_brief=1 || status=1
done
exit $status
