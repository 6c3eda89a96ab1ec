// TensorParallelBackend's step watchdog and health (models/tensor_parallel_backend.h), with rank
// backends that stand in for GPU ranks: one stuck in a collective that only an abort ends (as an
// NCCL kernel waiting for a peer is ended by ncclCommAbort), the others finishing at once.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include "models/model_backend.h"
#include "models/tensor_parallel_backend.h"
#include "models/thread_collectives.h"
#include "tests/unit/small_hybrid_spec.h"

namespace ridge {
namespace {

using std::chrono::milliseconds;

// A rank that does no work: Forward returns at once, or, while stalled, waits until Release
// (its on_failure) or 20 s pass. It answers kLastToken logits of zeros.
class FakeRank : public ModelBackend {
 public:
  explicit FakeRank(const ModelSpec& spec) : spec_(spec), kv_(PlanKvLayout(spec, 16)) {}

  std::string_view name() const override { return "fake"; }
  const ModelSpec& spec() const override { return spec_; }
  int64_t num_slots() const override { return 2; }
  int64_t state_bytes_per_slot() const override { return 8; }
  const KvLayout& kv_layout() const override { return kv_; }
  int64_t num_kv_blocks() const override { return 4; }
  int64_t SlotPosition(int64_t) const override { return 0; }
  absl::Status Health() const override { return health_; }
  absl::Status ResetSlot(int64_t) override { return absl::OkStatus(); }
  absl::Status CopySlot(int64_t, int64_t) override { return absl::OkStatus(); }
  absl::Status Forward(std::span<const SlotChunk> chunks, LogitsFor,
                       std::vector<float>* logits) override {
    logits->assign(chunks.size() * spec_.vocab_size, 0.0f);
    std::unique_lock<std::mutex> lock(mutex_);
    if (stalled_) {
      released_.wait_for(lock, std::chrono::seconds(20), [&] { return !stalled_; });
    }
    return absl::OkStatus();
  }

  void Stall() {
    std::lock_guard<std::mutex> lock(mutex_);
    stalled_ = true;
  }
  void Release() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stalled_ = false;
    }
    released_.notify_all();
  }
  void SetHealth(absl::Status health) { health_ = std::move(health); }

 private:
  ModelSpec spec_;
  KvLayout kv_;
  std::mutex mutex_;
  std::condition_variable released_;
  bool stalled_ = false;
  absl::Status health_;
};

class WatchedGroup : public TensorParallelBackend {
 public:
  WatchedGroup(const ModelSpec& spec, int32_t ranks, milliseconds step_timeout)
      : TensorParallelBackend(spec, std::make_unique<ThreadCollectives>(ranks, step_timeout),
                              step_timeout) {
    std::vector<Rank> group;
    for (int32_t r = 0; r < ranks; ++r) {
      auto rank = std::make_unique<FakeRank>(spec);
      fakes_.push_back(rank.get());
      group.push_back({.owned = nullptr,
                       .backend = std::move(rank),
                       .on_failure =
                           [this, r](const absl::Status&) {
                             ++aborts_;
                             fakes_[r]->Release();
                           },
                       .health = nullptr});
    }
    const absl::Status set = SetRanks(std::move(group));
    EXPECT_TRUE(set.ok()) << set;
  }

  FakeRank& fake(int32_t r) { return *fakes_[r]; }
  int aborts() const { return aborts_.load(); }

 private:
  std::vector<FakeRank*> fakes_;
  std::atomic<int> aborts_{0};
};

absl::Status Step(ModelBackend& backend) {
  static const int32_t kToken = 5;
  static const int32_t kBlocks[] = {0};
  const SlotChunk chunk{.slot = 0,
                        .tokens = std::span<const int32_t>(&kToken, 1),
                        .solver = {0.0f, 4},
                        .phase = SolvePhase::kDecode,
                        .kv_blocks = kBlocks};
  std::vector<float> logits;
  return backend.Forward(std::span<const SlotChunk>(&chunk, 1), LogitsFor::kLastToken, &logits);
}

TEST(TensorParallelWatchdogTest, AStuckRankFailsTheStepAtTheTimeoutNamingIt) {
  WatchedGroup group(SmallHybrid(), 3, milliseconds(200));
  group.fake(2).Stall();
  const auto start = std::chrono::steady_clock::now();
  const absl::Status step = Step(group);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(step.code(), absl::StatusCode::kDeadlineExceeded) << step;
  EXPECT_NE(step.message().find("within 0.2 s (still running: rank 2)"), std::string::npos) << step;
  EXPECT_GE(seconds, 0.2);
  EXPECT_LT(seconds, 5.0);       // released by the abort, not by its own 20 s
  EXPECT_EQ(group.aborts(), 3);  // every rank's collectives (NCCL's: one AbortAll each)

  // The next step runs normally (the host collectives are reset; NCCL's would report through
  // Health instead).
  EXPECT_TRUE(Step(group).ok());
  EXPECT_EQ(group.aborts(), 3);
}

TEST(TensorParallelWatchdogTest, StepsWithinTheTimeoutAreLeftAlone) {
  WatchedGroup group(SmallHybrid(), 4, milliseconds(1000));
  for (int i = 0; i < 300; ++i) ASSERT_TRUE(Step(group).ok()) << i;
  EXPECT_EQ(group.aborts(), 0);
}

TEST(TensorParallelWatchdogTest, NoTimeoutWaitsForTheRanks) {
  WatchedGroup group(SmallHybrid(), 2, milliseconds(0));
  group.fake(1).Stall();
  std::thread release([&] {
    std::this_thread::sleep_for(milliseconds(300));
    group.fake(1).Release();
  });
  EXPECT_TRUE(Step(group).ok());
  release.join();
  EXPECT_EQ(group.aborts(), 0);
}

TEST(TensorParallelWatchdogTest, HealthNamesTheFirstBrokenRank) {
  WatchedGroup group(SmallHybrid(), 3, milliseconds(1000));
  EXPECT_TRUE(group.Health().ok());
  group.fake(1).SetHealth(absl::UnavailableError("communicator aborted"));
  group.fake(2).SetHealth(absl::UnavailableError("also broken"));
  EXPECT_EQ(group.Health().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(group.Health().message(), "rank 1: communicator aborted");
}

}  // namespace
}  // namespace ridge
