#include "base/build_info.h"

#include "ridge_revision.h"  // generated at every build (cmake/write_revision.cmake)

namespace ridge {

const BuildInfo& GetBuildInfo() {
  static const BuildInfo info = {
      .version = RIDGE_VERSION,
      .revision = RIDGE_REVISION,
      .build_type = RIDGE_BUILD_TYPE,
      .compiler = RIDGE_COMPILER,
      .cuda = RIDGE_BUILT_WITH_CUDA != 0,
  };
  return info;
}

}  // namespace ridge
