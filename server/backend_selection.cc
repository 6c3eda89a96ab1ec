#include "server/backend_selection.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/logging.h"
#include "base/status_macros.h"
#include "engine/memory_plan.h"
#include "kernels/device_info.h"
#include "models/cpu_backend.h"
#include "models/mesanet_model.h"
#include "models/slot_packing.h"
#include "models/tensor_parallel.h"
#include "models/tensor_parallel_cpu_backend.h"
#include "server/command_support.h"
#ifdef RIDGE_HAVE_CUDA_BACKEND
#include "models/cuda/cuda_backend.h"
#include "models/cuda/hybrid_backend.h"
#include "models/cuda/tensor_parallel_cuda_backend.h"
#endif

namespace ridge {
namespace {

// The CPU backend's pools are allocated up front in host memory: at most as many states and
// blocks as fit in half of the memory available now (at least one of each), with a warning,
// instead of failing later; an error when not even one sequence's state fits. With
// `tensor_parallel` ranks above 1, the ranks are threads of this process, each with its share of
// every state and block (TensorParallelCpuBackend).
absl::StatusOr<std::unique_ptr<ModelBackend>> CpuBackendThatFits(
    const Model* model, int64_t num_slots, int64_t num_kv_blocks, int32_t tensor_parallel,
    std::chrono::milliseconds tensor_parallel_timeout) {
  const CpuDecoder& decoder = model->decoder();
  const KvLayout& kv = decoder.kv_layout();
  MemoryRequest request{
      .budget_bytes = std::numeric_limits<int64_t>::max() / 4,
      .state_bytes_per_slot = decoder.recurrent_layout().bytes_per_slot(),
      .kv_bytes_per_block = kv.floats_per_block() * static_cast<int64_t>(sizeof(float)),
      .kv_block_size = kv.block_size,
      .slots = num_slots,
      .kv_blocks = num_kv_blocks};
  if (tensor_parallel > 1) {
    if (model->hybrid_weights() == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tensor-parallel-size ", tensor_parallel,
                       ": only hybrid_qwen3 models split over ranks (this is ",
                       model->spec().architecture, ")"));
    }
    const absl::StatusOr<TensorParallelFootprint> footprint =
        TensorParallelCpuBackend::Footprint(model->spec(), tensor_parallel, kv.block_size);
    if (!footprint.ok()) {
      return absl::Status(footprint.status().code(),
                          absl::StrCat("--tensor-parallel-size ", tensor_parallel, ": ",
                                       footprint.status().message()));
    }
    request.state_bytes_per_slot = footprint->state_bytes_per_slot;
    request.kv_bytes_per_block = footprint->kv_bytes_per_block;
  }
  const long pages = sysconf(_SC_AVPHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page_size > 0) {  // else unknown: no clamp
    request.budget_bytes = static_cast<int64_t>(pages) * page_size / 2;
  }
  if (request.state_bytes_per_slot + request.kv_bytes_per_block > request.budget_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "one sequence's state (", request.state_bytes_per_slot, " bytes) and one KV block (",
        request.kv_bytes_per_block, " bytes) do not fit in half of the available host memory (",
        request.budget_bytes, " bytes)"));
  }
  const MemoryPlan plan = PlanMemory(request);
  for (const std::string& warning : plan.warnings) {
    Log(LogLevel::kWarning, warning, " (half of the available host memory)");
  }
  if (tensor_parallel > 1) {
    ASSIGN_OR_RETURN(
        std::unique_ptr<TensorParallelCpuBackend> backend,
        TensorParallelCpuBackend::Create(model->spec(), *model->hybrid_weights(),
                                         {.ranks = tensor_parallel,
                                          .num_slots = plan.slots,
                                          .num_kv_blocks = plan.kv_blocks,
                                          .kv_block_size = kv.block_size,
                                          .collective_timeout = tensor_parallel_timeout}));
    Log(LogLevel::kInfo, "backend: CPU, tensor parallel over ", tensor_parallel,
        " ranks (threads of this process)");
    return std::unique_ptr<ModelBackend>(std::move(backend));
  }
  return std::unique_ptr<ModelBackend>(
      std::make_unique<CpuBackend>(&decoder, plan.slots, plan.kv_blocks));
}

#ifdef RIDGE_HAVE_CUDA_BACKEND
// --tensor-parallel-size over GPUs: rank r on GPU (first + r) modulo the GPUs present.
absl::StatusOr<std::unique_ptr<ModelBackend>> SplitOverGpus(const Model* model,
                                                            const CudaHybridOptions& options,
                                                            int32_t ranks, int32_t gpus,
                                                            std::chrono::milliseconds timeout,
                                                            int64_t* weight_bytes) {
  TensorParallelCudaOptions split{.ranks = ranks, .backend = options};
  split.collective_timeout = timeout;
  split.devices.clear();
  for (int32_t r = 0; r < std::min(ranks, gpus); ++r) {
    split.devices.push_back((options.device + r) % gpus);
  }
  if (ranks > gpus) {
    Log(LogLevel::kWarning, "--tensor-parallel-size ", ranks, ": ", gpus,
        " GPU(s), so ranks share them (each its share of the memory); this checks a split, it "
        "does not speed anything up");
  }
  auto backend = TensorParallelCudaBackend::Create(model->spec(), *model->hybrid_weights(), split);
  if (!backend.ok()) {
    return absl::Status(backend.status().code(), absl::StrCat("--tensor-parallel-size ", ranks,
                                                              ": ", backend.status().message()));
  }
  *weight_bytes = (*backend)->weight_bytes();
  Log(LogLevel::kInfo, "backend: CUDA, tensor parallel over ", ranks,
      " ranks (threads of this process) on GPU ", absl::StrJoin(split.devices, ", "),
      "; collectives through ", (*backend)->collectives());
  return std::unique_ptr<ModelBackend>(std::move(*backend));
}
#endif

// --device cuda, or auto when a GPU is present.
bool PicksCuda(const std::string& device, const std::vector<CudaDeviceInfo>& gpus) {
  return device == "cuda" || (device == "auto" && !gpus.empty());
}

absl::StatusOr<int64_t> TensorParallelFromFlags(const CliArgs& args) {
  ASSIGN_OR_RETURN(const int64_t ranks, args.Int("tensor-parallel-size", 1));
  if (ranks < 1 || ranks > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tensor-parallel-size ", ranks, " must be in [1, 64]"));
  }
  return ranks;
}

// Every rank's share of a slot, each laid out by `layout` (the CPU's or the GPU's).
absl::StatusOr<int64_t> SplitStateBytes(const ModelSpec& spec, int32_t ranks,
                                        RecurrentLayout (*layout)(const ModelSpec&)) {
  const absl::StatusOr<std::vector<RankShard>> plan = PlanTensorParallel(spec, ranks);
  if (!plan.ok()) {
    return absl::Status(plan.status().code(), absl::StrCat("--tensor-parallel-size ", ranks, ": ",
                                                           plan.status().message()));
  }
  int64_t bytes = 0;
  for (const RankShard& shard : *plan) bytes += layout(RankSpec(spec, shard)).bytes_per_slot();
  return bytes;
}

}  // namespace

absl::StatusOr<int64_t> StateBytesPerSlotFromFlags(const CliArgs& args, const Model* model) {
  ASSIGN_OR_RETURN(const int64_t ranks, TensorParallelFromFlags(args));
  const ModelSpec& spec = model->spec();
  const bool split = ranks > 1 && model->hybrid_weights() != nullptr;
  const std::string device = args.StringOr("device", "auto");
  const bool gpu = PicksCuda(device, QueryCudaDevices());
#ifdef RIDGE_HAVE_CUDA_BACKEND
  if (gpu && model->mesanet() != nullptr) {
    return SlotShape::Of(model->mesanet()->config()).packed_slot_floats() * int64_t{sizeof(float)};
  }
  if (gpu && model->hybrid_weights() != nullptr) {
    if (split) return SplitStateBytes(spec, static_cast<int32_t>(ranks), PlanDeviceRecurrentLayout);
    return PlanDeviceRecurrentLayout(spec).bytes_per_slot();
  }
#else
  (void)gpu;
#endif
  if (split) return SplitStateBytes(spec, static_cast<int32_t>(ranks), PlanRecurrentLayout);
  return model->decoder().recurrent_layout().bytes_per_slot();
}

absl::StatusOr<std::unique_ptr<ModelBackend>> CreateBackendFromFlags(const CliArgs& args,
                                                                     const Model* model,
                                                                     int64_t num_slots,
                                                                     int64_t num_kv_blocks) {
  const std::string device = args.StringOr("device", "auto");
  if (device != "auto" && device != "cpu" && device != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("--device '", device, "' must be auto, cpu or cuda"));
  }
  // As vLLM's flag: auto keeps the backend's own type (fp32 on the CPU, bf16 on the GPU).
  const std::string kv_dtype = args.StringOr("kv-cache-dtype", "auto");
  const bool fp8_kv = kv_dtype == "fp8" || kv_dtype == "fp8_e4m3";
  if (kv_dtype != "auto" && kv_dtype != "bf16" && !fp8_kv) {
    return absl::InvalidArgumentError(
        absl::StrCat("--kv-cache-dtype '", kv_dtype, "' must be auto, bf16, fp8 or fp8_e4m3"));
  }
  ASSIGN_OR_RETURN(const int64_t tensor_parallel, TensorParallelFromFlags(args));
  ASSIGN_OR_RETURN(const double timeout_seconds, args.Double("tensor-parallel-timeout", 600.0));
  if (!(timeout_seconds >= 0.1 && timeout_seconds <= 86400.0)) {
    return absl::InvalidArgumentError(absl::StrCat("--tensor-parallel-timeout ", timeout_seconds,
                                                   " must be 0.1 to 86400 seconds"));
  }
  const auto tensor_parallel_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(std::llround(timeout_seconds * 1000.0)));
  const bool has_kv = !model->decoder().kv_layout().empty();
  const auto on_the_cpu = [&]() -> absl::StatusOr<std::unique_ptr<ModelBackend>> {
    if (kv_dtype != "auto" && has_kv) {
      return absl::InvalidArgumentError(
          absl::StrCat("--kv-cache-dtype ", kv_dtype,
                       ": the CPU backend keeps fp32 keys and values (give auto)"));
    }
    return CpuBackendThatFits(model, num_slots, num_kv_blocks,
                              static_cast<int32_t>(tensor_parallel), tensor_parallel_timeout);
  };
  ASSIGN_OR_RETURN(const int64_t cuda_device, args.Int("cuda-device", 0));
  const std::vector<CudaDeviceInfo> gpus = QueryCudaDevices();
  if (PicksCuda(device, gpus)) {
#ifdef RIDGE_HAVE_CUDA_BACKEND
    if (cuda_device < 0 || cuda_device >= static_cast<int64_t>(gpus.size())) {
      return absl::FailedPreconditionError(absl::StrCat("--device ", device, ": CUDA device ",
                                                        cuda_device, " is not present (",
                                                        gpus.size(), " found)"));
    }
    ASSIGN_OR_RETURN(const double utilization, args.Double("gpu-memory-utilization", 0.9));
    if (!(utilization > 0.0 && utilization <= 1.0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--gpu-memory-utilization ", utilization, " must be in (0, 1]"));
    }
    absl::StatusOr<std::unique_ptr<ModelBackend>> backend = absl::UnimplementedError(
        absl::StrCat("the CUDA backend does not run ", model->spec().architecture, " models"));
    int64_t weight_bytes = 0;
    if (kv_dtype != "auto" && !has_kv) {
      Log(LogLevel::kWarning, "--kv-cache-dtype ", kv_dtype,
          ": the model has no full-attention layers, so no KV cache");
    }
    if (tensor_parallel > 1 && model->hybrid_weights() == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tensor-parallel-size ", tensor_parallel,
                       ": only hybrid_qwen3 models split over ranks (this is ",
                       model->spec().architecture, ")"));
    }
    if (const MesaNetModel* mesa = model->mesanet(); mesa != nullptr) {
      auto mesa_backend =
          CudaBackend::Create(mesa->config(), mesa->HostWeights(),
                              {.device = static_cast<int>(cuda_device), .num_slots = num_slots});
      if (mesa_backend.ok()) weight_bytes = (*mesa_backend)->weight_bytes();
      backend = std::move(mesa_backend);
    } else if (const HybridWeights* weights = model->hybrid_weights(); weights != nullptr) {
      // --kv-cache-memory counts the GPU's blocks (bf16 or fp8, not the CPU's fp32).
      const int64_t block_size = model->decoder().kv_layout().block_size;
      const KvCacheDtype dtype = fp8_kv ? KvCacheDtype::kFp8E4m3 : KvCacheDtype::kBf16;
      int64_t blocks = num_kv_blocks;
      if (args.Has("kv-cache-memory")) {
        ASSIGN_OR_RETURN(
            blocks,
            KvBlocksFromFlags(
                args, PlanDeviceKvLayout(model->spec(), block_size, dtype).bytes_per_block()));
      }
      CudaHybridOptions options;
      options.device = static_cast<int>(cuda_device);
      options.num_slots = num_slots;
      options.num_kv_blocks = blocks;
      options.kv_block_size = block_size;
      options.kv_cache_dtype = dtype;
      options.gpu_memory_utilization = utilization;
      if (tensor_parallel > 1) {
        // Its errors are reported as they are: whoever asks for ranks over GPUs wants the GPUs,
        // not a fallback to the CPU.
        ASSIGN_OR_RETURN(std::unique_ptr<ModelBackend> split,
                         SplitOverGpus(model, options, static_cast<int32_t>(tensor_parallel),
                                       static_cast<int32_t>(gpus.size()), tensor_parallel_timeout,
                                       &weight_bytes));
        backend = std::move(split);
      } else {
        auto hybrid_backend = CudaHybridBackend::Create(model->spec(), *weights, options);
        if (hybrid_backend.ok()) weight_bytes = (*hybrid_backend)->weight_bytes();
        backend = std::move(hybrid_backend);
      }
    }
    const absl::StatusCode code = backend.status().code();
    if (!backend.ok() && device == "auto" &&
        (code == absl::StatusCode::kFailedPrecondition ||
         code == absl::StatusCode::kUnimplemented)) {
      // This GPU cannot run this model (an older GPU, an unsupported head_dim): use the CPU.
      Log(LogLevel::kWarning, "--device auto: not using the GPU (",
          std::string(backend.status().message()), "); running on the CPU");
      return on_the_cpu();
    }
    if (!backend.ok()) {
      return absl::Status(code,
                          absl::StrCat("--device ", device, ": ", backend.status().message()));
    }
    const CudaDeviceInfo& gpu = gpus[cuda_device];
    if (tensor_parallel > 1) {  // SplitOverGpus named the ranks' devices
      Log(LogLevel::kInfo, "backend: CUDA over ", tensor_parallel, " ranks: ", weight_bytes,
          " bytes of bf16 weights, ", (*backend)->num_slots(), " state slots of ",
          (*backend)->state_bytes_per_slot(), " bytes (every rank's part) in GPU memory");
    } else {
      Log(LogLevel::kInfo, "backend: CUDA on device ", cuda_device, " (", gpu.name,
          "): ", weight_bytes, " bytes of bf16 weights, ", (*backend)->num_slots(),
          " state slots of ", (*backend)->state_bytes_per_slot(), " bytes in GPU memory");
    }
    return std::move(*backend);
#else
    if (device == "cuda") {
      return absl::FailedPreconditionError("--device cuda: this build has no CUDA support");
    }
#endif
  }
  Log(LogLevel::kInfo, "backend: CPU", gpus.empty() ? "" : " (--device cpu)");
  return on_the_cpu();
}

}  // namespace ridge
