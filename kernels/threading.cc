#include "kernels/threading.h"

#include <omp.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>

extern "C" void openblas_set_num_threads(int num_threads);

namespace ridge {

namespace {
std::atomic<int> configured_threads{0};  // 0: never set
}  // namespace

void SetComputeThreads(int threads) {
  configured_threads = threads;
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
}

void AdoptComputeThreads() {
  if (const int threads = configured_threads; threads > 0) omp_set_num_threads(threads);
}

void ReexecWithPassiveOpenMpWait(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  if (setenv("OMP_WAIT_POLICY", "PASSIVE", 1) != 0) return;
  execv("/proc/self/exe", argv);
}

}  // namespace ridge
