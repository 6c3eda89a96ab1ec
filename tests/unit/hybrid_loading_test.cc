// Loading hybrid_qwen3 checkpoints: broken ones fail with a message naming the tensor or field,
// never a crash; weights stay in the checkpoint's dtype; --load-format random builds any config,
// the HQwen3-8B shape included (its spec and memory without its weights).
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>

#include "engine/scoring.h"
#include "models/arch/load_model.h"
#include "models/checkpoint.h"
#include "models/safetensors.h"
#include "tests/unit/test_checkpoint_writer.h"

namespace ridge {
namespace {

using testing::RawTensor;

const std::filesystem::path kCase =
    std::filesystem::path(RIDGE_TEST_DATA_DIR) / "hybrid_qwen3" / "gka_swa_mix";

std::map<std::string, RawTensor> CaseTensors() {
  auto file = SafetensorsFile::Open(kCase / "model.safetensors");
  EXPECT_TRUE(file.ok()) << file.status();
  std::map<std::string, RawTensor> tensors;
  for (const TensorView& t : (*file)->tensors()) {
    tensors[t.name] = {DTypeName(t.dtype),
                       t.shape,
                       {},
                       std::string(reinterpret_cast<const char*>(t.data), t.num_bytes)};
  }
  return tensors;
}

// The case's config and tensors, changed by `edit`, in a fresh folder.
std::filesystem::path BrokenCopy(
    const std::string& name, const std::function<void(nlohmann::json&)>& edit_config,
    const std::function<void(std::map<std::string, RawTensor>&)>& edit) {
  const auto dir = testing::FreshDir("hybrid_" + name);
  auto config = ReadJsonFile(kCase / "config.json");
  EXPECT_TRUE(config.ok());
  edit_config(*config);
  testing::WriteJson(dir / "config.json", *config);
  auto tensors = CaseTensors();
  edit(tensors);
  testing::WriteSafetensors(dir / "model.safetensors", tensors);
  return dir;
}

TEST(HybridLoadingTest, BrokenCheckpointsNameTheProblem) {
  const auto keep_config = [](nlohmann::json&) {};
  const auto keep_tensors = [](std::map<std::string, RawTensor>&) {};
  struct Case {
    std::string name;
    std::filesystem::path dir;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"missing tensor",
       BrokenCopy("missing", keep_config, [](auto& t) { t.erase("model.layers.2.gka.A_log"); }),
       "tensor model.layers.2.gka.A_log is missing"},
      {"misshapen tensor",
       BrokenCopy("shape", keep_config,
                  [](auto& t) {
                    RawTensor& q = t.at("model.layers.1.self_attn.q_proj.weight");
                    q.shape = {32, 128};
                  }),
       "tensor model.layers.1.self_attn.q_proj.weight: expected [64, 64], found [32, 128]"},
      {"unexpected tensor",
       BrokenCopy("extra", keep_config,
                  [](auto& t) {
                    t["model.layers.0.gka.k_up_proj.weight"] = {"F32", {2}, {1.0f, 2.0f}, ""};
                  }),
       "model.layers.0.gka.k_up_proj.weight"},
      {"pattern length",
       BrokenCopy(
           "pattern",
           [](auto& c) {
             c["hybrid_override_pattern"] = "GKA-*-GKA";
             c.erase("layer_types");
           },
           keep_tensors),
       "lists 3 layers, but num_hidden_layers is 4"},
      {"unknown mixer",
       BrokenCopy(
           "mixer",
           [](auto& c) {
             c["hybrid_override_pattern"] = "GKA-*-M2-SWA";
             c.erase("layer_types");
           },
           keep_tensors),
       "layer 'M2'"},
      {"unsupported option",
       BrokenCopy(
           "option",
           [](auto& c) {
             c["gka_overrides"] = {{"solver_type", "cg"}};
           },
           keep_tensors),
       "'gka_config.solver_type' is 'cg'"},
      {"gka layer loaded as attention",
       BrokenCopy(
           "kind",
           [](auto& c) {
             c["hybrid_override_pattern"] = "*-*-GKA-SWA";
             c.erase("layer_types");
           },
           keep_tensors),
       "tensor model.layers.0.self_attn.q_proj.weight is missing"},
      {"model type",
       BrokenCopy(
           "type", [](auto& c) { c["model_type"] = "jamba"; }, keep_tensors),
       "'model_type' is 'jamba'"},
  };
  for (const Case& c : cases) {
    auto model = LoadModel(c.dir, LoadFormat::kCheckpoint);
    ASSERT_FALSE(model.ok()) << c.name;
    EXPECT_NE(model.status().message().find(c.expected), std::string::npos)
        << c.name << ": " << model.status().message();
    std::filesystem::remove_all(c.dir);
  }
}

TEST(HybridLoadingTest, GenerationConfigAddsEndOfSequenceIds) {
  // Qwen's config.json names one eos id, its generation_config.json the list.
  const auto dir = BrokenCopy(
      "eos", [](nlohmann::json& c) { c["eos_token_id"] = 2; },
      [](std::map<std::string, RawTensor>&) {});
  testing::WriteJson(dir / "generation_config.json", {{"eos_token_id", {2, 7}}});
  auto model = LoadModel(dir, LoadFormat::kCheckpoint);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->spec().eos_token_ids, (std::vector<int64_t>{2, 7}));
  testing::WriteJson(dir / "generation_config.json", {{"eos_token_id", 999}});
  model = LoadModel(dir, LoadFormat::kCheckpoint);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("'eos_token_id' has 999"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(HybridLoadingTest, Bf16WeightsAreNotWidenedOnTheHost) {
  // The mapped checkpoint holds the weights: loading adds only the small fp32 vectors.
  auto model = LoadModel(kCase.parent_path() / "all_gka_bf16", LoadFormat::kCheckpoint);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->spec().LayerPattern(), "GKA-GKA-GKA");
  EXPECT_TRUE((*model)->spec().tie_word_embeddings);
}

TEST(HybridLoadingTest, RandomWeightsRunAnyConfig) {
  const auto dir = testing::FreshDir("hybrid_random");
  auto config = ReadJsonFile(kCase / "config.json");
  ASSERT_TRUE(config.ok());
  testing::WriteJson(dir / "config.json", *config);
  auto model = LoadModel(dir, LoadFormat::kRandom);
  ASSERT_TRUE(model.ok()) << model.status();
  const std::vector<int32_t> ids = {1, 5, 9, 200, 17, 3, 88, 41, 7, 7, 7, 12, 100, 99, 98, 97, 96};
  auto scored = ScoreSequence(**model, ids, 9, {0.0f, 30});
  ASSERT_TRUE(scored.ok()) << scored.status();
  for (float logit : scored->logits) ASSERT_TRUE(std::isfinite(logit));
  EXPECT_GT(scored->solver_stats.solves, 0);
  std::filesystem::remove_all(dir);
}

TEST(HybridLoadingTest, TheHQwen3EightBShapeFromItsConfigAlone) {
  const auto config = std::filesystem::path(RIDGE_TEST_DATA_DIR).parent_path().parent_path() /
                      "tools" / "bench" / "configs" / "hqwen3-8b-gka.json";
  auto spec = ReadModelSpec(config);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->layers.size(), 36u);
  EXPECT_EQ(spec->CountLayers(IsGka), 18);
  EXPECT_EQ(spec->CountLayers(IsAttention), 18);
  // BENCHMARKS.md: 72 MiB of GKA state (plus conv tails) and 72 KiB of bf16 KV a token, which
  // is 144 KiB in the CPU's fp32.
  const int64_t tails = 18 * 3 * (32 + 8 + 8) * 128 * 4;
  EXPECT_EQ(PlanRecurrentLayout(*spec).bytes_per_slot(), (int64_t{72} << 20) + tails);
  EXPECT_EQ(PlanKvLayout(*spec, 16).floats_per_token * 2, 72 * 1024);
  EXPECT_NEAR(spec->ParameterCount() / 1e9, 8.2, 0.4);
}

}  // namespace
}  // namespace ridge
