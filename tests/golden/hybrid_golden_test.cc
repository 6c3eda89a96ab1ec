// The CPU engine on hybrid_qwen3 checkpoints against logits of an independent float64 reference
// of shared/specs/gka-hybrid-qwen3.md (tools/reference/gka_hybrid_reference.py; data made by
// tools/reference/make_hybrid_goldens.py, see tests/data/hybrid_qwen3/README.md), through the
// prefill path and through prefill then one-token decode steps; the all-attention case also
// against transformers' own Qwen3ForCausalLM with the same weights.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/scoring.h"
#include "models/arch/load_model.h"
#include "models/checkpoint.h"
#include "models/cpu_backend.h"
#include "models/tensor_parallel.h"
#include "models/tensor_parallel_cpu_backend.h"
#include "tests/support/logit_agreement.h"

namespace ridge {
namespace {

using testing::Agreement;
using testing::Compare;
using testing::ReadFloats;

const std::filesystem::path kDataDir = std::filesystem::path(RIDGE_TEST_DATA_DIR) / "hybrid_qwen3";

struct GoldenCase {
  std::string name;
  std::string logits_file;
  double max_relative_rms;
};

class HybridGoldenTest : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(HybridGoldenTest, PrefillAndDecodeMatchTheReference) {
  const GoldenCase& c = GetParam();
  const auto dir = kDataDir / c.name;
  auto model = LoadModel(dir, LoadFormat::kCheckpoint);
  ASSERT_TRUE(model.ok()) << model.status();
  auto golden = ReadJsonFile(dir / "golden.json");
  ASSERT_TRUE(golden.ok()) << golden.status();
  const std::vector<int32_t> ids = (*golden)["ids"].get<std::vector<int32_t>>();
  const int64_t decode_from = (*golden)["decode_from"].get<int64_t>();
  const int64_t vocab = (*model)->spec().vocab_size;
  // The reference runs the config's fixed iteration count.
  const SolverOptions budget{0.0f, DefaultSolverIterations((*model)->spec())};
  const std::vector<float> want = ReadFloats(dir / c.logits_file);
  for (const bool decode : {false, true}) {
    auto result =
        ScoreSequence(**model, ids, decode ? std::optional(decode_from) : std::nullopt, budget);
    ASSERT_TRUE(result.ok()) << result.status();
    const Agreement a = Compare(result->logits, want, vocab);
    std::printf("%s %s (%s): relative RMS %.3e, top-1 agreement %.2f%%\n", c.name.c_str(),
                c.logits_file.c_str(), decode ? "decode" : "prefill", a.relative_rms, 100 * a.top1);
    EXPECT_LT(a.relative_rms, c.max_relative_rms) << (decode ? "decode" : "prefill");
    EXPECT_GE(a.top1, 0.99) << (decode ? "decode" : "prefill");
  }
}

// A golden checkpoint loaded with KV blocks of 8 tokens, its token ids and the reference's
// logits of every position.
struct GoldenCheckpoint {
  std::unique_ptr<Model> model;
  std::vector<int32_t> ids;
  int64_t decode_from = 0;
  std::vector<float> logits;
};

GoldenCheckpoint LoadGolden(const std::string& name) {
  const auto dir = kDataDir / name;
  GoldenCheckpoint out;
  auto model = LoadModel(dir, LoadFormat::kCheckpoint, /*kv_block_size=*/8);
  EXPECT_TRUE(model.ok()) << name << ": " << model.status();
  auto golden = ReadJsonFile(dir / "golden.json");
  EXPECT_TRUE(golden.ok()) << name << ": " << golden.status();
  if (!model.ok() || !golden.ok()) return out;
  out.model = std::move(*model);
  out.ids = (*golden)["ids"].get<std::vector<int32_t>>();
  out.decode_from = (*golden)["decode_from"].get<int64_t>();
  out.logits = ReadFloats(dir / "logits.f32");
  return out;
}

// Prompt pieces shorter and longer than the window (24 in gka_swa_mix, 20 in yarn_swa) and than
// a KV block, as the engine's prefill budget cuts them: the sliding-window ring and the blocks
// carry each piece's keys to the next.
TEST(HybridChunkedPrefillTest, PiecesOfAnySizeGiveTheSameLogits) {
  for (const std::string name : {"gka_swa_mix", "yarn_swa"}) {
    const GoldenCheckpoint golden = LoadGolden(name);
    ASSERT_NE(golden.model, nullptr);
    const std::vector<int32_t>& ids = golden.ids;
    const Model* model = golden.model.get();
    const int64_t total = static_cast<int64_t>(ids.size());
    const KvLayout& kv = model->decoder().kv_layout();
    CpuBackend backend(&model->decoder(), 1, kv.BlocksFor(total));
    std::vector<int32_t> table;
    for (int32_t b = 0; b < kv.BlocksFor(total); ++b) table.push_back(b);
    std::vector<float> all, piece;
    int64_t done = 0;
    for (const int64_t size : {10, 30, 5, 40, 1, 1, 7}) {
      SlotChunk chunk{0, std::span<const int32_t>(ids).subspan(done, size),
                      SolverOptions{0.0f, DefaultSolverIterations(model->spec())}};
      chunk.kv_blocks = table;
      ASSERT_TRUE(backend.Forward({&chunk, 1}, LogitsFor::kAllTokens, &piece).ok());
      all.insert(all.end(), piece.begin(), piece.end());
      done += size;
    }
    const Agreement a = Compare(all, std::span<const float>(golden.logits).first(all.size()),
                                model->spec().vocab_size);
    EXPECT_LT(a.relative_rms, 5e-5) << name;
    EXPECT_EQ(a.top1, 1.0) << name;
  }
}

// The model split over 2 and 4 ranks (threads, TensorParallelCpuBackend), wherever its heads
// split that way, against the same reference: the whole prompt in one step, then decode steps.
TEST(HybridTensorParallelGoldenTest, SplitsMatchTheReference) {
  int runs = 0;
  for (const std::string name : {"gka_swa_mix", "all_gka_bf16", "all_attn", "yarn_swa"}) {
    const GoldenCheckpoint golden = LoadGolden(name);
    ASSERT_NE(golden.model, nullptr);
    const Model* model = golden.model.get();
    const std::vector<int32_t>& ids = golden.ids;
    const int64_t total = static_cast<int64_t>(ids.size());
    const ModelSpec& spec = model->spec();
    for (const int32_t ranks : {2, 4}) {
      if (!PlanTensorParallel(spec, ranks).ok()) continue;
      const int64_t blocks = model->decoder().kv_layout().BlocksFor(total);
      auto backend = TensorParallelCpuBackend::Create(
          spec, *model->hybrid_weights(),
          {.ranks = ranks, .num_slots = 1, .num_kv_blocks = blocks, .kv_block_size = 8});
      ASSERT_TRUE(backend.ok()) << backend.status();
      std::vector<int32_t> table;
      for (int32_t b = 0; b < blocks; ++b) table.push_back(b);
      std::vector<float> all, piece;
      const SolverOptions budget{0.0f, DefaultSolverIterations(spec)};
      for (int64_t done = 0; done < total;) {
        const int64_t size = done == 0 ? golden.decode_from : 1;
        SlotChunk chunk{0, std::span<const int32_t>(ids).subspan(done, size), budget};
        chunk.kv_blocks = table;
        ASSERT_TRUE((*backend)->Forward({&chunk, 1}, LogitsFor::kAllTokens, &piece).ok());
        all.insert(all.end(), piece.begin(), piece.end());
        done += size;
      }
      const Agreement a = Compare(all, golden.logits, spec.vocab_size);
      std::printf("%s over %d ranks: relative RMS %.3e, top-1 agreement %.2f%%\n", name.c_str(),
                  ranks, a.relative_rms, 100 * a.top1);
      EXPECT_LT(a.relative_rms, 5e-5) << name << " over " << ranks << " ranks";
      EXPECT_GE(a.top1, 0.99) << name << " over " << ranks << " ranks";
      ++runs;
    }
  }
  EXPECT_GE(runs, 4);  // every checkpoint splits over 2 at least
}

INSTANTIATE_TEST_SUITE_P(
    Reference, HybridGoldenTest,
    // One Chebyshev iteration more or less moves these logits by 1.2e-4 to 3.2e-4, a window one
    // token wider by 4e-2 (golden.json, sensitivity_vs_golden): bounds of 5e-5 catch both.
    ::testing::Values(GoldenCase{"gka_swa_mix", "logits.f32", 5e-5},
                      GoldenCase{"all_gka_bf16", "logits.f32", 5e-5},
                      GoldenCase{"all_attn", "logits.f32", 5e-5},
                      GoldenCase{"all_attn", "logits_transformers.f32", 5e-5},
                      GoldenCase{"yarn_swa", "logits.f32", 5e-5}),
    [](const auto& info) {
      return info.param.name +
             (info.param.logits_file == "logits.f32" ? std::string() : "_vs_transformers");
    });

}  // namespace
}  // namespace ridge
