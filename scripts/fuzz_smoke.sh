#!/usr/bin/env bash
# The libFuzzer targets of tests/fuzz (the parsers of checkpoints' headers and configs,
# tokenizer.json, tokenizer_config.json with its chat template, OpenAI request bodies, saved
# session files, gRPC GenerateRequest bytes), built with
# Debian's clang into build-fuzz/ and each run briefly: first over its committed corpora (the
# seeds and the inputs of every bug found so far in tests/fuzz/corpus/<target>/, and what the
# 10-minute runs found, minimized, in tests/fuzz/corpus_found.tar.xz), then mutating for
# FUZZ_SECONDS (default 20) into a scratch corpus. Any crash, leak, sanitizer report or
# timeout fails. scripts/test.sh runs this last. Longer runs: tests/fuzz/CMakeLists.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-20}
cmake -S tests/fuzz -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++-14 >/dev/null
cmake --build build-fuzz -j "$(nproc)"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/found"
tar -C "$scratch/found" -xJf tests/fuzz/corpus_found.tar.xz
status=0
for corpus in tests/fuzz/corpus/*/; do
  target=$(basename "$corpus")
  echo "== fuzz smoke: ${target}_fuzz (${seconds} s)"
  mkdir -p "$scratch/$target" "$scratch/found/$target"
  if ! "build-fuzz/${target}_fuzz" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -max_len=65536 -dict=tests/fuzz/json.dict -artifact_prefix="$scratch/" \
    -print_final_stats=0 "$scratch/$target" "$corpus" "$scratch/found/$target" \
    >"$scratch/$target.log" 2>&1; then
    tail -n 40 "$scratch/$target.log"
    echo "fuzz smoke: ${target}_fuzz failed (the input is in its log above)"
    status=1
  fi
done
exit $status
