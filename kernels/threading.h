// The CPU backend's worker threads: OpenMP loops and the BLAS library share one setting.
#pragma once

namespace ridge {

void SetComputeThreads(int threads);

}  // namespace ridge
