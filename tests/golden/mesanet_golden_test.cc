// The CPU engine against logits recorded from flash-linear-attention 0.6.0 (tests/data/mesanet,
// made by tools/reference/make_mesanet_goldens.py on the GPU machine). Tolerances come from
// FLA's own spread: its bf16 and fp32 models differ by 1-3% relative RMS on these checkpoints,
// and its fp32 chunk kernel keeps q/k in fp16, so an fp32 engine is expected within ~0.5%.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "engine/scoring.h"
#include "models/checkpoint.h"
#include "models/mesanet_model.h"
#include "tests/support/logit_agreement.h"

namespace ridge {
namespace {

using testing::Agreement;
using testing::Compare;
using testing::ReadFloats;

const std::filesystem::path kDataDir = std::filesystem::path(RIDGE_TEST_DATA_DIR) / "mesanet";

struct GoldenCase {
  std::string name;
  std::string logits_suffix;  // "" for the file's own reference dtype, "_fp32" for extras
  double max_relative_rms;
  double min_top1;
};

class MesaNetGoldenTest : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(MesaNetGoldenTest, PrefillAndDecodeMatchFla) {
  const GoldenCase& c = GetParam();
  const auto dir = kDataDir / c.name;
  auto model = MesaNetModel::Load(dir);
  ASSERT_TRUE(model.ok()) << model.status();
  auto golden = ReadJsonFile(dir / "golden.json");
  ASSERT_TRUE(golden.ok()) << golden.status();
  const std::vector<int32_t> ids = (*golden)["ids"].get<std::vector<int32_t>>();
  const int64_t decode_from = (*golden)["decode_from"].get<int64_t>();
  const int64_t vocab = (*model)->config().vocab_size;
  const SolverOptions fla_budget{0.0f, 30};  // FLA: 30 CG steps, no stopping rule

  for (const bool decode : {false, true}) {
    const std::string file =
        std::string(decode ? "logits_decode" : "logits_prefill") + c.logits_suffix + ".f32";
    auto result =
        ScoreSequence(**model, ids, decode ? std::optional(decode_from) : std::nullopt, fla_budget);
    ASSERT_TRUE(result.ok()) << result.status();
    const Agreement a = Compare(result->logits, ReadFloats(dir / file), vocab);
    std::printf("%s %s: relative RMS %.3e, top-1 agreement %.2f%%\n", c.name.c_str(), file.c_str(),
                a.relative_rms, 100 * a.top1);
    EXPECT_LT(a.relative_rms, c.max_relative_rms) << file;
    EXPECT_GE(a.top1, c.min_top1) << file;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Fla060, MesaNetGoldenTest,
    // Measured: 1.3e-3 / 4.8e-3 / 1.1e-3 / 7.8e-3 relative RMS; the float64 numpy reference of
    // the spec (tools/reference/mesanet_numpy.py) is as far from FLA: 0.8e-3 / 3.9e-3 / 0.8e-3.
    // Bounds sit about 1.5x above the measurement: scaling softplus by 1% breaks them.
    ::testing::Values(GoldenCase{"d64_untied", "", 2e-3, 0.99},
                      GoldenCase{"d64_tied_gate", "", 6.5e-3, 0.98},
                      GoldenCase{"d128_bf16", "_fp32", 2e-3, 0.99},
                      GoldenCase{"d128_bf16", "", 1.2e-2, 0.97}),
    [](const auto& info) {
      return info.param.name + (info.param.logits_suffix.empty() ? "" : "_vs_fp32");
    });

}  // namespace
}  // namespace ridge
