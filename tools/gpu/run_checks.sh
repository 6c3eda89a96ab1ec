#!/usr/bin/env bash
# The GPU machine's checks in one device call (docs/gpu.md): every GPU test binary of the bundle,
# then, with --sanitizers, the compute-sanitizer runs gpu.md lists. Each binary's output goes to
# $OUT/checks/<name>.log (or /tmp/gpu_checks), one line a binary to stdout, and the exit status
# is 1 if any failed. Run from the repository root with the bundle carried:
#
#   source tools/gpu/device_env.sh && tools/gpu/run_checks.sh [--sanitizers]
#
# Binaries missing from the bundle are named and skipped (a smaller bundle packs fewer).
set -uo pipefail
sanitizers=0
if [[ ${1:-} == --sanitizers ]]; then sanitizers=1; fi
logs=${OUT:-/tmp/gpu_checks}/checks
mkdir -p "$logs"
status=0

# check NAME LOG COMMAND...: runs COMMAND, its output in $logs/LOG.log, and says how it went.
check() {
  local name=$1 log=$2
  shift 2
  if ! command -v "$1" >/dev/null; then
    echo "missing  $name (not in the bundle)"
    return
  fi
  local start=$SECONDS
  if timeout 540 "$@" >"$logs/$log.log" 2>&1; then
    local skipped
    skipped=$(grep -oE '\[  SKIPPED \] [0-9]+' "$logs/$log.log" | grep -oE '[0-9]+' | head -n 1)
    echo "passed   $name ($((SECONDS - start)) s; ${skipped:-0} skipped)"
  else
    echo "FAILED   $name ($((SECONDS - start)) s): $logs/$log.log"
    tail -n 20 "$logs/$log.log"
    status=1
  fi
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null ||
  echo "no nvidia-smi: the GPU tests will skip"
for test in mesa_kernels_test cuda_backend_test cuda_backend_mechanics_test cuda_engine_test \
  token_sampling_test row_kernels_test few_rows_gemm_test gka_recurrence_test \
  paged_attention_test cuda_hybrid_backend_test cuda_hybrid_graphs_test cuda_prefix_cache_test \
  cuda_tensor_parallel_test cuda_prompt_scoring_test backend_selection_test \
  tensor_parallel_watchdog_test; do
  # By its path: a death test runs the binary again through argv[0], which execv does not look
  # up in PATH.
  check "$test" "$test" "$(command -v "$test" || echo "$test")" --gtest_brief=1
done

if ((sanitizers)); then
  check "memcheck cuda_hybrid_backend_test" memcheck_hybrid_backend \
    compute-sanitizer --tool memcheck cuda_hybrid_backend_test --gtest_filter='-*Health*'
  check "memcheck cuda_hybrid_graphs_test" memcheck_hybrid_graphs \
    compute-sanitizer --tool memcheck cuda_hybrid_graphs_test
  check "racecheck cuda_hybrid_graphs_test" racecheck_hybrid_graphs \
    compute-sanitizer --tool racecheck cuda_hybrid_graphs_test --gtest_filter='*/0:*/3'
  check "memcheck gka_recurrence_test" memcheck_gka compute-sanitizer --tool memcheck \
    gka_recurrence_test
  check "racecheck gka_recurrence_test (chunked)" racecheck_gka compute-sanitizer --tool racecheck \
    gka_recurrence_test --gtest_filter='*_t40_*:*_t20_*'
  check "memcheck cuda_prompt_scoring_test" memcheck_prompt_scoring \
    compute-sanitizer --tool memcheck cuda_prompt_scoring_test
  check "memcheck paged_attention_test (decode)" memcheck_paged compute-sanitizer --tool memcheck \
    paged_attention_test --gtest_filter='*Decode*'
  check "racecheck paged_attention_test" racecheck_paged compute-sanitizer --tool racecheck \
    paged_attention_test --gtest_filter='*Decode*/q32kv8d128bs16:*Decode*/q16kv2d64bs32'
fi
exit $status
