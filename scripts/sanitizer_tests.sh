#!/usr/bin/env bash
# The test suite under sanitizers (CPU only): every test under AddressSanitizer and
# UndefinedBehaviorSanitizer (build-asan/; leaks and any undefined behaviour fail), then the
# engine's, the HTTP server's and the tensor-parallel ranks' threaded tests under
# ThreadSanitizer (build-tsan/; one OpenMP thread: libgomp itself is not instrumented, so its
# barriers would be reported). The presets are in CMakePresets.json: -O1 -g1 (line tables), which
# halves the compile time of -O2 -g and still names the file and line of every frame in a report.
# scripts/test.sh runs this after the plain suite; on 2 cores from nothing (no ccache), about 22
# minutes to build and 3.5 to run under ASan-UBSan, 6 and 1.5 under TSan.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
cmake --preset asan-ubsan >/dev/null
cmake --build --preset asan-ubsan -j "$jobs"
ctest --preset asan-ubsan -j "$jobs"

cmake --preset tsan >/dev/null
cmake --build --preset tsan -j "$jobs"
# scripts/tsan.supp: the one report that comes from an uninstrumented library (absl::Status).
export RIDGE_TEST_DATA_DIR=$PWD/tests/data OMP_NUM_THREADS=1
export TSAN_OPTIONS="halt_on_error=1 suppressions=$PWD/scripts/tsan.supp"
# The prefix-cache and session tests compare results to the bit across batchings: OpenBLAS's
# batch-invariant kernels, as CTest gives them (BLAS_CORE in tests/CMakeLists.txt).
export OPENBLAS_CORETYPE=Sandybridge
status=0
for test in tests/unit/engine_test tests/unit/hybrid_engine_test tests/unit/prefix_cache_engine_test \
  tests/unit/session_test \
  tests/unit/event_delivery_test \
  tests/server/http_server_test tests/server/http_transport_test \
  tests/unit/thread_collectives_test tests/unit/tensor_parallel_cpu_backend_test \
  tests/unit/tensor_parallel_watchdog_test; do
  echo "== ThreadSanitizer: $test"
  "build-tsan/$test" --gtest_brief=1 || status=1
done
exit $status
