#include "server/backend_selection.h"

#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "base/status_macros.h"
#include "kernels/device_info.h"
#include "models/cpu_backend.h"
#ifdef RIDGE_HAVE_CUDA_BACKEND
#include "models/cuda/cuda_backend.h"
#endif

namespace ridge {
namespace {

// The CPU backend's pool is allocated up front in host memory: at most as many states as fit in
// half of the memory available now (at least one), with a warning, instead of failing later.
std::unique_ptr<ModelBackend> CpuBackendThatFits(const MesaNetModel* model, int64_t num_slots) {
  const int64_t state_bytes = std::max<int64_t>(model->config().StateBytes(), 1);
  const long pages = sysconf(_SC_AVPHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page_size > 0) {  // else unknown: no clamp
    const int64_t available = static_cast<int64_t>(pages) * page_size;
    const int64_t fit = std::max<int64_t>(1, available / 2 / state_bytes);
    if (num_slots > fit) {
      Log(LogLevel::kWarning, "--slots ", num_slots, ": only ", fit, " states of ", state_bytes,
          " bytes fit in half of the available memory; using ", fit);
      num_slots = fit;
    }
  }
  return std::make_unique<CpuBackend>(model, num_slots);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ModelBackend>> CreateBackendFromFlags(const CliArgs& args,
                                                                     const MesaNetModel* model,
                                                                     int64_t num_slots) {
  const std::string device = args.StringOr("device", "auto");
  if (device != "auto" && device != "cpu" && device != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("--device '", device, "' must be auto, cpu or cuda"));
  }
  ASSIGN_OR_RETURN(const int64_t cuda_device, args.Int("cuda-device", 0));
  const std::vector<CudaDeviceInfo> gpus = QueryCudaDevices();
  bool use_cuda = device == "cuda";
  if (device == "auto") use_cuda = !gpus.empty();
  if (use_cuda) {
#ifdef RIDGE_HAVE_CUDA_BACKEND
    if (cuda_device < 0 || cuda_device >= static_cast<int64_t>(gpus.size())) {
      return absl::FailedPreconditionError(absl::StrCat("--device ", device, ": CUDA device ",
                                                        cuda_device, " is not present (",
                                                        gpus.size(), " found)"));
    }
    auto backend =
        CudaBackend::Create(model->config(), model->weights(),
                            {.device = static_cast<int>(cuda_device), .num_slots = num_slots});
    const absl::StatusCode code = backend.status().code();
    if (!backend.ok() && device == "auto" &&
        (code == absl::StatusCode::kFailedPrecondition ||
         code == absl::StatusCode::kUnimplemented)) {
      // This GPU cannot run this model (an older GPU, an unsupported head_dim): use the CPU.
      Log(LogLevel::kWarning, "--device auto: not using the GPU (",
          std::string(backend.status().message()), "); running on the CPU");
      return CpuBackendThatFits(model, num_slots);
    }
    if (!backend.ok()) {
      return absl::Status(code,
                          absl::StrCat("--device ", device, ": ", backend.status().message()));
    }
    const CudaDeviceInfo& gpu = gpus[cuda_device];
    Log(LogLevel::kInfo, "backend: CUDA on device ", cuda_device, " (", gpu.name,
        "): ", (*backend)->weight_bytes(), " bytes of bf16 weights, ", (*backend)->num_slots(),
        " state slots of ", (*backend)->state_bytes_per_slot(), " bytes in GPU memory");
    return std::unique_ptr<ModelBackend>(std::move(*backend));
#else
    if (device == "cuda") {
      return absl::FailedPreconditionError("--device cuda: this build has no CUDA support");
    }
#endif
  }
  Log(LogLevel::kInfo, "backend: CPU", gpus.empty() ? "" : " (--device cpu)");
  return CpuBackendThatFits(model, num_slots);
}

}  // namespace ridge
