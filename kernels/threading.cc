#include "kernels/threading.h"

#include <omp.h>

extern "C" void openblas_set_num_threads(int num_threads);

namespace ridge {

void SetComputeThreads(int threads) {
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
}

}  // namespace ridge
