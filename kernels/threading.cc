#include "kernels/threading.h"

#include <omp.h>
#include <unistd.h>

#include <cstdlib>

extern "C" void openblas_set_num_threads(int num_threads);

namespace ridge {

void SetComputeThreads(int threads) {
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
}

void ReexecWithPassiveOpenMpWait(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  if (setenv("OMP_WAIT_POLICY", "PASSIVE", 1) != 0) return;
  execv("/proc/self/exe", argv);
}

}  // namespace ridge
