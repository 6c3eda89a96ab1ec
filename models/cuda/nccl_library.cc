#include "models/cuda/nccl_library.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"

namespace ridge::nccl {
namespace {

template <typename Function>
bool Resolve(void* library, const char* name, Function* out, std::string* missing) {
  *out = reinterpret_cast<Function>(dlsym(library, name));
  if (*out == nullptr) absl::StrAppend(missing, missing->empty() ? "" : ", ", name);
  return *out != nullptr;
}

}  // namespace

absl::StatusOr<Api> Open(const std::string& path) {
  // Kept open for the life of the process: communicators may outlive any one caller.
  void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* why = dlerror();
    return absl::NotFoundError(absl::StrCat(
        "NCCL could not be loaded from ", path, " (", why != nullptr ? why : "unknown error",
        "); install libnccl2 or the nvidia-nccl wheel, or point RIDGE_NCCL_LIBRARY at "
        "libnccl.so.2"));
  }
  Api api;
  std::string missing;
  Resolve(library, "ncclGetVersion", &api.GetVersion, &missing);
  Resolve(library, "ncclCommInitAll", &api.CommInitAll, &missing);
  Resolve(library, "ncclCommDestroy", &api.CommDestroy, &missing);
  Resolve(library, "ncclCommAbort", &api.CommAbort, &missing);
  Resolve(library, "ncclCommGetAsyncError", &api.CommGetAsyncError, &missing);
  Resolve(library, "ncclAllReduce", &api.AllReduce, &missing);
  Resolve(library, "ncclGetErrorString", &api.GetErrorString, &missing);
  if (!missing.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is not a usable NCCL: it lacks ", missing));
  }
  if (const Result r = api.GetVersion(&api.version); r != 0 || api.version < 21000) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is NCCL ", api.version, "; the collectives need 2.10 or newer"));
  }
  return api;
}

absl::StatusOr<const Api*> Load() {
  static const absl::StatusOr<Api>* const loaded = new absl::StatusOr<Api>([] {
    const char* chosen = std::getenv("RIDGE_NCCL_LIBRARY");
    return Open(chosen != nullptr && *chosen != '\0' ? chosen : "libnccl.so.2");
  }());
  if (!loaded->ok()) return loaded->status();
  return &**loaded;
}

absl::Status Check(const Api& api, Result result, const char* what) {
  if (result == 0) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(what, ": NCCL error ", result, " (", api.GetErrorString(result), ")"));
}

}  // namespace ridge::nccl
