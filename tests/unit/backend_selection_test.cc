// The state bytes serve sizes --prefix-cache-memory with (StateBytesPerSlotFromFlags) are those of
// the backend the same flags create: the CPU's, the ranks' parts of a tensor-parallel slot
// (replicated heads counted on every rank), and, on a GPU, the packed layouts.
#include "server/backend_selection.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "kernels/device_info.h"
#include "models/arch/load_model.h"
#include "server/command_support.h"

namespace ridge {
namespace {

CliArgs Flags(std::vector<std::string> words) {
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  std::set<std::string> known(std::begin(kBackendFlags), std::end(kBackendFlags));
  known.insert({"prefix-cache-memory", "no-prefix-cache"});
  absl::StatusOr<CliArgs> args =
      CliArgs::Parse(static_cast<int>(argv.size()), argv.data(), known, {"no-prefix-cache"});
  EXPECT_TRUE(args.ok()) << args.status();
  return *args;
}

class BackendSelectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // 8 GKA heads over 2 key heads and 8 attention heads over 2 key/value heads: at 4 ranks
    // both are replicated, so a split slot is larger than the whole model's.
    // RIDGE_TEST_DATA_DIR in the environment where the binary runs elsewhere (the GPU machine).
    const char* data = std::getenv("RIDGE_TEST_DATA_DIR");
    auto model = LoadModel(std::filesystem::path(data != nullptr ? data : RIDGE_TEST_DATA_DIR) /
                               "../../tools/bench/configs/hybrid-small-8l.json",
                           LoadFormat::kRandom, 16, 7);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
  }

  // StateBytesPerSlotFromFlags, and the state bytes of the backend the same flags create.
  std::pair<int64_t, int64_t> PlannedAndCreated(const std::vector<std::string>& words) {
    const CliArgs args = Flags(words);
    absl::StatusOr<int64_t> planned = StateBytesPerSlotFromFlags(args, model_.get());
    EXPECT_TRUE(planned.ok()) << planned.status();
    auto backend = CreateBackendFromFlags(args, model_.get(), 2, 8);
    EXPECT_TRUE(backend.ok()) << backend.status();
    if (!planned.ok() || !backend.ok()) return {-1, -2};
    return {*planned, (*backend)->state_bytes_per_slot()};
  }

  std::unique_ptr<Model> model_;
};

TEST_F(BackendSelectionTest, CpuStatesAsTheBackendStoresThem) {
  const int64_t whole = model_->decoder().recurrent_layout().bytes_per_slot();
  const auto [planned, created] = PlannedAndCreated({"--device", "cpu"});
  EXPECT_EQ(planned, whole);
  EXPECT_EQ(created, whole);

  const auto [split_planned, split_created] =
      PlannedAndCreated({"--device", "cpu", "--tensor-parallel-size", "4"});
  EXPECT_EQ(split_planned, split_created);
  EXPECT_GT(split_planned, whole);  // the replicated key heads' conv tails, on every rank
}

TEST_F(BackendSelectionTest, ASplitThatDoesNotDivideIsNamed) {
  const absl::StatusOr<int64_t> bytes = StateBytesPerSlotFromFlags(
      Flags({"--device", "cpu", "--tensor-parallel-size", "3"}), model_.get());
  EXPECT_EQ(bytes.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bytes.status().message().find("--tensor-parallel-size 3: "), std::string::npos)
      << bytes.status();
}

TEST_F(BackendSelectionTest, GpuStatesAsTheBackendStoresThem) {
  if (QueryCudaDevices().empty()) GTEST_SKIP() << "no CUDA device";
  const auto [planned, created] = PlannedAndCreated({"--device", "cuda"});
  EXPECT_EQ(planned, created);
  EXPECT_LT(planned, model_->decoder().recurrent_layout().bytes_per_slot());  // Hs packed
  const auto [split_planned, split_created] =
      PlannedAndCreated({"--device", "cuda", "--tensor-parallel-size", "2"});
  EXPECT_EQ(split_planned, split_created);
}

TEST(PrefixCacheSlotsTest, MemoryOverStateBytes) {
  EXPECT_EQ(*PrefixCacheSlotsFromFlags(Flags({}), 12, 1000), 12);  // default: as many as slots
  EXPECT_EQ(*PrefixCacheSlotsFromFlags(Flags({"--prefix-cache-memory", "1M"}), 12, 1000), 1048);
  EXPECT_EQ(*PrefixCacheSlotsFromFlags(Flags({"--prefix-cache-memory", "0"}), 12, 1000), 0);
  EXPECT_EQ(*PrefixCacheSlotsFromFlags(Flags({"--no-prefix-cache"}), 12, 1000), 0);
  const auto too_small =
      PrefixCacheSlotsFromFlags(Flags({"--prefix-cache-memory", "999"}), 12, 1000);
  EXPECT_EQ(too_small.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(too_small.status().message().find("less than one state (1000 bytes)"),
            std::string::npos)
      << too_small.status();
}

}  // namespace
}  // namespace ridge
