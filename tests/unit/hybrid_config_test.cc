// hybrid_qwen3 config.json into a ModelSpec: the pattern, gka_config with gka_overrides, rope
// types, eos lists; and every option the spec does not cover refused with a message naming the
// field and its value.
#include <gtest/gtest.h>

#include <filesystem>

#include "models/arch/hybrid_qwen3_config.h"
#include "models/checkpoint.h"

namespace ridge {
namespace {

nlohmann::json BaseConfig() {
  auto json = ReadJsonFile(std::filesystem::path(RIDGE_TEST_DATA_DIR) /
                           "hybrid_qwen3/gka_swa_mix/config.json");
  EXPECT_TRUE(json.ok()) << json.status();
  return *json;
}

TEST(HybridConfigTest, ReadsThePatternAndEveryLayerKind) {
  auto spec = ParseHybridQwen3Config(BaseConfig());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->LayerPattern(), "GKA-*-GKA-SWA");
  EXPECT_EQ(spec->eos_token_ids, (std::vector<int64_t>{2, 3}));
  EXPECT_TRUE(spec->IsEos(3));
  const auto& gka = std::get<GkaSpec>(spec->layers[0].mixer);
  EXPECT_EQ(gka.q_heads, 4);
  EXPECT_EQ(gka.k_heads, 2);
  EXPECT_EQ(gka.expanded_heads(), 4);
  EXPECT_EQ(gka.num_iter, 30);
  const auto& swa = std::get<AttentionSpec>(spec->layers[3].mixer);
  EXPECT_EQ(swa.window, 24);
  EXPECT_EQ(std::get<AttentionSpec>(spec->layers[1].mixer).window, 0);
  EXPECT_EQ(swa.kv_heads, 2);
  EXPECT_EQ(swa.rope.theta, 1e6);
  EXPECT_EQ(DefaultSolverIterations(*spec), 30);
  EXPECT_STREQ(RecurrentLayerType(*spec), "gka");
}

TEST(HybridConfigTest, PatternIsReadNotAssumed) {
  nlohmann::json json = BaseConfig();
  json["hybrid_override_pattern"] = "*-*-GKA-GKA";
  json.erase("layer_types");
  auto spec = ParseHybridQwen3Config(json);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->LayerPattern(), "*-*-GKA-GKA");
  // layer_types alone, with transformers' names.
  json.erase("hybrid_override_pattern");
  json["layer_types"] = {"full_attention", "GKA", "sliding_attention", "GKA"};
  spec = ParseHybridQwen3Config(json);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->LayerPattern(), "*-GKA-SWA-GKA");
}

TEST(HybridConfigTest, AWindowWiderThanTheContextIsTheContext) {
  nlohmann::json json = BaseConfig();
  json["swa_config"]["window_size"] = 1 << 20;  // the ring in the state slot needs 4096 rows
  auto spec = ParseHybridQwen3Config(json);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(std::get<AttentionSpec>(spec->layers[3].mixer).window, 4096);
}

TEST(HybridConfigTest, OverridesApplyOverGkaConfig) {
  nlohmann::json json = BaseConfig();
  json["gka_overrides"] = {{"num_iter", 7}, {"ridge_strength", 0.05}};
  auto spec = ParseHybridQwen3Config(json);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(std::get<GkaSpec>(spec->layers[0].mixer).num_iter, 7);
  EXPECT_DOUBLE_EQ(std::get<GkaSpec>(spec->layers[0].mixer).ridge_strength, 0.05);
  EXPECT_EQ(DefaultSolverIterations(*spec), 7);
  json["gka_overrides"] = {{"num_iter", 0}};  // no solve: requests still get a valid budget
  spec = ParseHybridQwen3Config(json);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(DefaultSolverIterations(*spec), 1);
}

TEST(HybridConfigTest, RopeParametersAndYarn) {
  nlohmann::json json = BaseConfig();
  json.erase("rope_theta");
  json["rope_parameters"] = {{"rope_type", "yarn"},
                             {"rope_theta", 5e5},
                             {"factor", 4.0},
                             {"original_max_position_embeddings", 1024}};
  auto spec = ParseHybridQwen3Config(json);
  ASSERT_TRUE(spec.ok()) << spec.status();
  const RopeSpec& rope = std::get<AttentionSpec>(spec->layers[1].mixer).rope;
  EXPECT_EQ(rope.type, RopeSpec::Type::kYarn);
  EXPECT_EQ(rope.theta, 5e5);
  EXPECT_EQ(rope.original_max_position, 1024);
  EXPECT_NEAR(rope.attention_factor, 0.1 * std::log(4.0) + 1.0, 1e-12);
  EXPECT_EQ(spec->max_position_embeddings, 4096);  // max(4096, 4 x 1024)
  json["rope_parameters"]["original_max_position_embeddings"] = 2048;
  spec = ParseHybridQwen3Config(json);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->max_position_embeddings, 8192);  // yarn stretches the context: 4 x 2048
  json["rope_parameters"]["rope_type"] = "default";
  spec = ParseHybridQwen3Config(json);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(std::get<AttentionSpec>(spec->layers[1].mixer).rope.type, RopeSpec::Type::kDefault);
}

struct BadCase {
  std::string name;
  std::function<void(nlohmann::json&)> mutate;
  std::string expected;  // in the message
};

TEST(HybridConfigTest, UnsupportedOrMalformedConfigsNameTheFieldAndValue) {
  const std::vector<BadCase> cases = {
      {"other mixer", [](auto& j) { j["hybrid_override_pattern"] = "GKA-*-GDN-SWA"; }, "'GDN'"},
      {"unknown symbol", [](auto& j) { j["hybrid_override_pattern"] = "GKA-*-XYZ-SWA"; },
       "unknown layer symbol 'XYZ'"},
      {"pattern length",
       [](auto& j) {
         j["hybrid_override_pattern"] = "GKA-*-GKA";
         j.erase("layer_types");
       },
       "lists 3 layers, but num_hidden_layers is 4"},
      {"empty symbol",
       [](auto& j) {
         j["hybrid_override_pattern"] = "GKA--GKA-SWA";
         j.erase("layer_types");
       },
       "unknown layer symbol ''"},
      {"disagreeing lists",
       [](auto& j) {
         j["layer_types"] = {"GKA", "GKA", "GKA", "SWA"};
       },
       "'layer_types' disagrees"},
      {"no pattern",
       [](auto& j) {
         j.erase("hybrid_override_pattern");
         j.erase("layer_types");
       },
       "'hybrid_override_pattern' is missing"},
      {"kv_proj_rank", [](auto& j) { j["gka_config"]["kv_proj_rank"] = 64; },
       "'gka_config.kv_proj_rank' is 64"},
      {"forgetting gate", [](auto& j) { j["gka_config"]["use_forgetting_gate"] = false; },
       "'gka_config.use_forgetting_gate' is false"},
      {"override off",
       [](auto& j) {
         j["gka_overrides"] = {{"use_forgetting_gate_kk", false}};
       },
       "'gka_config.use_forgetting_gate_kk' is false"},
      {"sketches", [](auto& j) { j["gka_config"]["num_sketches_per_head"] = 2; },
       "'gka_config.num_sketches_per_head' is 2"},
      {"solver", [](auto& j) { j["gka_config"]["solver_type"] = "cg"; },
       "'gka_config.solver_type' is 'cg'"},
      {"heads divide", [](auto& j) { j["gka_config"]["num_k_heads"] = 3; },
       "'gka_config.num_k_heads' is 3"},
      {"rope type",
       [](auto& j) {
         j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8}};
       },
       "'rope_scaling.rope_type' is 'llama3'"},
      {"yarn without factor",
       [](auto& j) {
         j["rope_scaling"] = {{"type", "yarn"}};
       },
       "'rope_scaling.factor' is required"},
      {"window missing", [](auto& j) { j.erase("swa_config"); }, "'sliding_window' is missing"},
      {"window type", [](auto& j) { j["swa_config"]["window_size"] = "big"; },
       "'swa_config.window_size' must be an integer"},
      {"eos outside",
       [](auto& j) {
         j["eos_token_id"] = {2, 999};
       },
       "has 999, outside"},
      {"kv heads divide", [](auto& j) { j["num_key_value_heads"] = 3; },
       "'num_key_value_heads' is 3"},
      {"kv heads zero", [](auto& j) { j["num_key_value_heads"] = 0; },
       "'num_key_value_heads' is 0"},
      {"odd head dim", [](auto& j) { j["head_dim"] = 15; }, "'head_dim' is 15"},
      {"head dim from uneven split",
       [](auto& j) {
         j.erase("head_dim");
         j["hidden_size"] = 62;
       },
       "'head_dim' is missing, and hidden_size 62 does not split into 4 heads"},
      {"zero norm eps", [](auto& j) { j["rms_norm_eps"] = 0; }, "'rms_norm_eps' is 0"},
      {"yarn betas",
       [](auto& j) {
         j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 2.0}, {"beta_fast", 1.0}};
       },
       "'rope_scaling.beta_fast' is 1, not above beta_slow 1"},
      {"activation", [](auto& j) { j["hidden_act"] = "gelu"; }, "'hidden_act' is 'gelu'"},
      {"missing size", [](auto& j) { j.erase("intermediate_size"); },
       "'intermediate_size' is missing"},
      {"model type", [](auto& j) { j["model_type"] = "qwen3"; }, "'model_type' must be"},
      {"gka_config type", [](auto& j) { j["gka_config"] = 5; }, "'gka_config' must be an object"},
  };
  for (const BadCase& c : cases) {
    nlohmann::json json = BaseConfig();
    c.mutate(json);
    const auto spec = ParseHybridQwen3Config(json);
    ASSERT_FALSE(spec.ok()) << c.name;
    EXPECT_NE(spec.status().message().find(c.expected), std::string::npos)
        << c.name << ": " << spec.status().message();
  }
}

TEST(HybridConfigTest, MemoryLayoutsFollowThePattern) {
  auto spec = ParseHybridQwen3Config(BaseConfig());
  ASSERT_TRUE(spec.ok());
  const RecurrentLayout state = PlanRecurrentLayout(*spec);
  // GKA layers 0 and 2: Hs and Ss [4, 16, 16] plus tails [3, (4 + 2 + 2) * 16]; the SWA layer 3:
  // keys and values of its 24-position window, 2 kv heads x 16.
  const int64_t gka_floats = 2 * 4 * 16 * 16 + 3 * 8 * 16;
  EXPECT_EQ(state.layer_offset, (std::vector<int64_t>{0, -1, gka_floats, 2 * gka_floats}));
  EXPECT_EQ(state.floats_per_slot, 2 * gka_floats + 2 * 24 * 2 * 16);
  // Only the full-attention layer 1 has KV blocks.
  const KvLayout kv = PlanKvLayout(*spec, 16);
  EXPECT_EQ(kv.floats_per_token, 2 * 2 * 16);
  EXPECT_EQ(kv.layer_offset, (std::vector<int64_t>{-1, 0, -1, -1}));
  EXPECT_EQ(kv.BlocksFor(33), 3);
  // All sliding windows: no KV cache at all.
  nlohmann::json json = BaseConfig();
  json["hybrid_override_pattern"] = "GKA-SWA-GKA-SWA";
  json.erase("layer_types");
  auto windowed = ParseHybridQwen3Config(json);
  ASSERT_TRUE(windowed.ok()) << windowed.status();
  EXPECT_TRUE(PlanKvLayout(*windowed, 16).empty());
}

}  // namespace
}  // namespace ridge
