// The collectives between threads that the CPU's tensor-parallel backend steps with
// (models/thread_collectives.h): sums and gathers over 4 ranks on 4 threads, every rank getting
// the same bits; a rank that fails or never arrives fails the collective on every rank, naming
// it, within the time-out instead of hanging; and the group works again after Reset.
#include "models/thread_collectives.h"

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <latch>
#include <memory>
#include <thread>
#include <vector>

namespace ridge {
namespace {

using Clock = std::chrono::steady_clock;

// Runs body(rank) on one thread per rank and waits for all.
void OnEveryRank(int32_t ranks, const std::function<void(int32_t)>& body) {
  std::vector<std::thread> threads;
  for (int32_t r = 0; r < ranks; ++r) threads.emplace_back(body, r);
  for (std::thread& t : threads) t.join();
}

TEST(ThreadCollectivesTest, AllReduceSumGivesEveryRankTheSameSum) {
  constexpr int32_t kRanks = 4;
  ThreadCollectives group(kRanks, std::chrono::seconds(30));
  // Sizes below, at and above the number of ranks, and 0.
  const std::vector<int64_t> counts = {1, 3, 4, 0, 1000, 7, 4097};
  std::vector<std::vector<std::vector<float>>> results(kRanks);
  OnEveryRank(kRanks, [&](int32_t r) {
    for (size_t round = 0; round < counts.size(); ++round) {
      std::vector<float> data(counts[round]);
      // Values whose sum depends on the order of the additions: every rank must add the same way.
      for (int64_t i = 0; i < counts[round]; ++i)
        data[i] = 1.0f / float(1 + r * 7 + i % 13 + round);
      ASSERT_TRUE(group.rank(r).AllReduceSum(data.data(), counts[round]).ok());
      results[r].push_back(data);
    }
  });
  for (size_t round = 0; round < counts.size(); ++round) {
    for (int64_t i = 0; i < counts[round]; ++i) {
      float expected = 0.0f;
      for (int32_t r = 0; r < kRanks; ++r) expected += 1.0f / float(1 + r * 7 + i % 13 + round);
      EXPECT_EQ(results[0][round][i], expected) << "round " << round << " element " << i;
      for (int32_t r = 1; r < kRanks; ++r) EXPECT_EQ(results[r][round][i], results[0][round][i]);
    }
  }
}

TEST(ThreadCollectivesTest, GatherColumnsPutsEachRanksColumnsInPlace) {
  constexpr int32_t kRanks = 4;
  constexpr int64_t kRows = 3, kColumns = 10;  // 3, 3, 2, 2 columns
  const int64_t first[] = {0, 3, 6, 8}, width[] = {3, 3, 2, 2};
  ThreadCollectives group(kRanks, std::chrono::seconds(30));
  std::vector<float> full(kRows * kColumns, -1.0f);
  OnEveryRank(kRanks, [&](int32_t r) {
    std::vector<float> local(kRows * width[r]);
    for (int64_t row = 0; row < kRows; ++row) {
      for (int64_t c = 0; c < width[r]; ++c)
        local[row * width[r] + c] = float(row * 100 + first[r] + c);
    }
    ASSERT_TRUE(group.rank(r)
                    .GatherColumns(local.data(), kRows, first[r], width[r],
                                   r == 0 ? full.data() : nullptr, kColumns)
                    .ok());
  });
  for (int64_t row = 0; row < kRows; ++row) {
    for (int64_t c = 0; c < kColumns; ++c)
      EXPECT_EQ(full[row * kColumns + c], float(row * 100 + c));
  }
}

TEST(ThreadCollectivesTest, ARankThatFailsReleasesTheOthersAtOnce) {
  constexpr int32_t kRanks = 4;
  ThreadCollectives group(kRanks, std::chrono::seconds(60));
  std::vector<absl::Status> got(kRanks);
  const auto start = Clock::now();
  OnEveryRank(kRanks, [&](int32_t r) {
    std::vector<float> data(16, 1.0f);
    if (r == 2) {
      group.rank(r).Abort(absl::ResourceExhaustedError("rank 2: out of memory"));
      return;
    }
    got[r] = group.rank(r).AllReduceSum(data.data(), 16);
  });
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  for (int32_t r : {0, 1, 3}) {
    EXPECT_EQ(got[r].code(), absl::StatusCode::kResourceExhausted) << got[r];
    EXPECT_EQ(got[r].message(), "rank 2: out of memory");
  }
  // Failed until Reset; then whole again.
  std::vector<float> one(1, 1.0f);
  EXPECT_FALSE(group.rank(0).AllReduceSum(one.data(), 1).ok());
  group.Reset();
  OnEveryRank(kRanks, [&](int32_t r) {
    std::vector<float> data(5, float(r));
    ASSERT_TRUE(group.rank(r).AllReduceSum(data.data(), 5).ok());
    EXPECT_EQ(data[4], 6.0f);
  });
}

// An abort (the step watchdog's) that lands while the ranks read each other's buffers lets none
// of them leave (and free its buffer) before all have read: every rank frees its buffer as soon as
// its call returns, and the abort comes from another thread at growing delays after the ranks
// start, early rounds landing before or during the sums, late ones after. Either every rank
// completes the sum or every rank fails; one leaving early showed as a mix of the two (and as a
// use of freed memory under AddressSanitizer).
TEST(ThreadCollectivesTest, AnAbortWhileRanksReadLetsNoneLeaveEarly) {
  constexpr int32_t kRanks = 4;
  constexpr int64_t kCount = int64_t{1} << 22;  // 16 MB a rank
  ThreadCollectives group(kRanks, std::chrono::seconds(30));
  int completed_rounds = 0;
  for (const int delay_ms : {0, 1, 2, 4, 7, 11, 16, 25, 40}) {
    std::vector<absl::Status> results(kRanks);
    std::vector<float> last(kRanks, 0.0f);
    std::latch start(kRanks + 1);
    std::thread abort([&] {
      start.arrive_and_wait();
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      group.rank(1).Abort(absl::DeadlineExceededError("watchdog"));
    });
    OnEveryRank(kRanks, [&](int32_t r) {
      auto data = std::make_unique<std::vector<float>>(kCount, float(r + 1));
      start.arrive_and_wait();
      results[r] = group.rank(r).AllReduceSum(data->data(), kCount);
      last[r] = (*data)[kCount - 1];
      data.reset();  // freed at once, as a rank's step buffers are when its step returns
    });
    abort.join();
    int ok = 0;
    for (int32_t r = 0; r < kRanks; ++r) {
      if (results[r].ok()) {
        ++ok;
        EXPECT_EQ(last[r], 10.0f) << "rank " << r << " after " << delay_ms << " ms";
      } else {
        EXPECT_EQ(results[r].code(), absl::StatusCode::kDeadlineExceeded) << results[r];
      }
    }
    EXPECT_TRUE(ok == 0 || ok == kRanks)
        << ok << " of " << kRanks << " ranks completed the sum (" << delay_ms << " ms)";
    if (ok == kRanks) ++completed_rounds;
    group.Reset();
  }
  EXPECT_GT(completed_rounds, 0);
}

TEST(ThreadCollectivesTest, ARankThatNeverArrivesTimesOutNamingIt) {
  constexpr int32_t kRanks = 4;
  ThreadCollectives group(kRanks, std::chrono::milliseconds(300));
  std::vector<absl::Status> got(kRanks);
  const auto start = Clock::now();
  OnEveryRank(kRanks, [&](int32_t r) {
    if (r == 3) return;  // hangs elsewhere
    std::vector<float> data(8, 1.0f);
    got[r] = group.rank(r).AllReduceSum(data.data(), 8);
  });
  const auto waited = Clock::now() - start;
  EXPECT_GE(waited, std::chrono::milliseconds(250));
  EXPECT_LT(waited, std::chrono::seconds(5));
  for (int32_t r = 0; r < 3; ++r) {
    EXPECT_EQ(got[r].code(), absl::StatusCode::kDeadlineExceeded) << got[r];
    EXPECT_NE(got[r].message().find("in a collective for rank 3"), std::string::npos) << got[r];
  }
}

TEST(ThreadCollectivesTest, RanksThatDisagreeOnTheSizeAllFail) {
  constexpr int32_t kRanks = 3;
  ThreadCollectives group(kRanks, std::chrono::seconds(30));
  std::vector<absl::Status> got(kRanks);
  OnEveryRank(kRanks, [&](int32_t r) {
    std::vector<float> data(10, 1.0f);
    got[r] = group.rank(r).AllReduceSum(data.data(), r == 1 ? 9 : 10);
  });
  for (int32_t r = 0; r < kRanks; ++r) {
    EXPECT_EQ(got[r].code(), absl::StatusCode::kInternal) << got[r];
    EXPECT_NE(got[r].message().find("different sizes (10, 9, 10)"), std::string::npos) << got[r];
  }
}

}  // namespace
}  // namespace ridge
