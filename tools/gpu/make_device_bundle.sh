#!/usr/bin/env bash
# Packs the GPU test and benchmark binaries and the server built here (build/) with the shared
# libraries they need beyond the C/C++ runtime and CUDA (abseil, OpenBLAS, gRPC, protobuf, ICU,
# prometheus-cpp, ...; the GPU machine's image lacks them), into .gpu/bundle.tar.xz (ignored by
# git), for the device tool to carry. cuBLAS, the CUDA runtime, libc/libstdc++ and OpenSSL 3
# (libssl.so.3, libcrypto.so.3: its Python has them) are the machine's.
#
#   cmake --build build --target cuda_backend_test cuda_bench && tools/gpu/make_device_bundle.sh
#
# Arguments, if any, name the binaries to pack instead of all of them (a smaller bundle leaves
# room in the device tool's 64 MiB for other things to carry), e.g.
#   tools/gpu/make_device_bundle.sh build/tests/gpu/mesa_kernels_test build/tools/bench/cuda_bench
set -euo pipefail
cd "$(dirname "$0")/../.."
binaries=(build/tests/gpu/cuda_backend_test build/tests/gpu/cuda_backend_mechanics_test
  build/tests/gpu/cuda_engine_test build/tests/gpu/mesa_kernels_test build/tests/gpu/row_kernels_test
  build/tests/gpu/token_sampling_test build/tests/gpu/few_rows_gemm_test build/tests/gpu/gka_recurrence_test
  build/tests/gpu/cuda_hybrid_backend_test build/tests/gpu/cuda_hybrid_graphs_test
  build/tests/gpu/paged_attention_test build/tests/gpu/cuda_prefix_cache_test
  build/tests/gpu/cuda_tensor_parallel_test build/tests/gpu/cuda_prompt_scoring_test
  build/tests/unit/backend_selection_test
  build/tests/unit/tensor_parallel_watchdog_test build/tools/bench/cuda_bench build/tools/bench/cuda_hybrid_bench
  build/tools/bench/gka_kernel_bench
  build/tools/bench/mesa_kernel_bench build/tools/bench/gemm_bench build/server/ridgeserve)
if (($# > 0)); then binaries=("$@"); fi
stage=$(mktemp -d)
mkdir -p "$stage/bin" "$stage/lib"
cp "${binaries[@]}" "$stage/bin/"
# Symbol tables are not needed there; stripped and at xz's strongest preset the bundle leaves
# more of the device tool's 64 MiB to the repository.
strip --strip-unneeded "$stage"/bin/*
for b in "${binaries[@]}"; do
  ldd "$b" | awk '/=>/ {print $3}' |
    grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt|libcublas|libcublasLt|libcudart|libssl|libcrypto)\.so' \
      >>"$stage/libs.txt" || true
done
sort -u "$stage/libs.txt" | xargs -I{} cp -L {} "$stage/lib/"
mkdir -p .gpu
XZ_OPT=-9e tar -C "$stage" -cJf .gpu/bundle.tar.xz bin lib
rm -rf "$stage"
xz -t .gpu/bundle.tar.xz  # a truncated bundle (seen once here) fails now, not on the GPU machine
ls -la .gpu/bundle.tar.xz
