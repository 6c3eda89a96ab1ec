// `--device auto|cpu|cuda` (and `--cuda-device N`, `--gpu-memory-utilization F`): which backend
// runs the model and holds the state pool. auto takes the GPU when this build has CUDA and a device
// is present.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "models/model.h"
#include "models/model_backend.h"
#include "server/cli_args.h"

namespace ridge {

// The flags this adds to a command.
inline constexpr const char* kBackendFlags[] = {
    "device",         "cuda-device",          "gpu-memory-utilization",
    "kv-cache-dtype", "tensor-parallel-size", "tensor-parallel-timeout"};

// `model` must outlive the returned backend (the CPU backend runs it; the CUDA backend copies
// its weights to the GPU). The backend may hold fewer than `num_slots` states and
// `num_kv_blocks` KV blocks (0: as many as PlanMemory gives by default) as fit where its pools
// live (half of the available host memory, or --gpu-memory-utilization of the GPU's), with a
// warning; num_slots() and num_kv_blocks() say. On the GPU, MesaNet runs on CudaBackend and
// hybrid_qwen3 on CudaHybridBackend (whose KV pool fills
// what the utilization leaves unless --kv-blocks or --kv-cache-memory is given); where the GPU
// cannot run a model, --device auto uses the CPU and --device cuda is an error.
// --tensor-parallel-size N (hybrid_qwen3) splits the model over N ranks, threads of this process:
// on the CPU, TensorParallelCpuBackend; on GPUs, TensorParallelCudaBackend with rank r on GPU
// (--cuda-device + r) modulo the GPUs present (ranks share GPUs when there are fewer, with a
// warning), its collectives NCCL's when each rank has a GPU of its own, else through host memory.
// --tensor-parallel-timeout S: a step still running after S seconds fails (the watchdog aborts the
// collectives), as does a rank waiting S seconds in a host collective.
// The bytes one slot's state takes in the backend these flags pick (the GPU's layouts pack Hs; a
// tensor-parallel slot is every rank's part, replicated heads included), for sizing memory flags
// (--prefix-cache-memory) before the backend exists. Once it does, its state_bytes_per_slot() is
// the truth (they differ when --device auto falls back to the CPU).
absl::StatusOr<int64_t> StateBytesPerSlotFromFlags(const CliArgs& args, const Model* model);

absl::StatusOr<std::unique_ptr<ModelBackend>> CreateBackendFromFlags(const CliArgs& args,
                                                                     const Model* model,
                                                                     int64_t num_slots,
                                                                     int64_t num_kv_blocks);

}  // namespace ridge
