#include "server/backend_selection.h"

#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "base/status_macros.h"
#include "kernels/device_info.h"
#include "models/cpu_backend.h"
#ifdef RIDGE_HAVE_CUDA_BACKEND
#include "models/cuda/cuda_backend.h"
#endif

namespace ridge {

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
      return std::unique_ptr<ModelBackend>(std::make_unique<CpuBackend>(model, num_slots));
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
  return std::unique_ptr<ModelBackend>(std::make_unique<CpuBackend>(model, num_slots));
}

}  // namespace ridge
