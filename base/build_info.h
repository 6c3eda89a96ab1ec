// What this binary is: the project's version, the git revision it was built from, the build type,
// the compiler and whether CUDA kernels are in it. Shown by `ridgeserve --version` and exported as
// ridgeserve_build_info.
#pragma once

#include <string>

namespace ridge {

struct BuildInfo {
  std::string version;     // the CMake project's VERSION
  std::string revision;    // `git describe --always --dirty`, "unknown" outside a checkout
  std::string build_type;  // Release, Debug, ...
  std::string compiler;    // e.g. "GNU 12.2.0"
  bool cuda = false;       // built with the CUDA backends
};

const BuildInfo& GetBuildInfo();

}  // namespace ridge
