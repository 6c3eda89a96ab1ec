// --threads (SetComputeThreads) reaches the threads that run the model: OpenMP's thread count is
// a setting of each thread, so a thread started later (the engine's) begins with the process's
// default until it adopts the setting.
#include "kernels/threading.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <thread>

namespace ridge {
namespace {

int TeamSize() {
  std::atomic<int> members{0};
#pragma omp parallel
  ++members;
  return members;
}

TEST(ThreadingTest, ALaterThreadAdoptsTheSetting) {
  SetComputeThreads(1);
  EXPECT_EQ(TeamSize(), 1);
  int before = 0, after = 0, team = 0;
  std::thread later([&] {
    omp_set_num_threads(4);  // whatever this thread had before (its default: all cores)
    before = omp_get_max_threads();
    AdoptComputeThreads();
    after = omp_get_max_threads();
    team = TeamSize();
  });
  later.join();
  EXPECT_EQ(before, 4);
  EXPECT_EQ(after, 1);
  EXPECT_EQ(team, 1);
}

}  // namespace
}  // namespace ridge
