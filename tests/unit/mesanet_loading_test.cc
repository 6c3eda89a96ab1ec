#include <gtest/gtest.h>

#include "models/mesanet_config.h"
#include "models/mesanet_model.h"
#include "tests/unit/test_checkpoint_writer.h"

namespace ridge {
namespace {

using testing::RandomMesaTensors;
using testing::SmallMesaConfig;
using testing::WriteMesaCheckpoint;

std::string LoadError(const nlohmann::json& config,
                      const std::map<std::string, testing::RawTensor>& t) {
  const auto dir = WriteMesaCheckpoint("load_error", config, t);
  auto model = MesaNetModel::Load(dir);
  return model.ok() ? "" : std::string(model.status().message());
}

TEST(MesaNetConfigTest, DefaultsAndDerivedWidth) {
  auto config = ParseMesaNetConfig({{"model_type", "mesa_net"}, {"hidden_size", 768}});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->intermediate_size, 2048);
  EXPECT_EQ(config->num_heads, 16);
  EXPECT_EQ(config->head_dim, 128);
  for (auto [c, i] : {std::pair{256, 768}, {512, 1536}, {1024, 2816}, {2048, 5632}}) {
    EXPECT_EQ(
        ParseMesaNetConfig({{"model_type", "mesa_net"}, {"hidden_size", c}})->intermediate_size, i);
  }
}

TEST(MesaNetConfigTest, LegacyUseGate) {
  auto config = ParseMesaNetConfig({{"model_type", "mesa_net"}, {"use_gate", true}});
  ASSERT_TRUE(config.ok());
  EXPECT_TRUE(config->use_output_gate);
}

TEST(MesaNetConfigTest, RejectsUnsupportedAndInvalid) {
  const std::pair<nlohmann::json, std::string> cases[] = {
      {{{"model_type", "llama"}}, "model_type"},
      {{{"model_type", "mesa_net"}, {"attn", {{"layers", {1}}}}}, "'attn'"},
      {{{"model_type", "mesa_net"}, {"attnres_block_size", 4}}, "attnres_block_size"},
      {{{"model_type", "mesa_net"}, {"hidden_act", "gelu"}}, "hidden_act"},
      {{{"model_type", "mesa_net"}, {"hidden_size", "big"}}, "'hidden_size' must be an integer"},
      {{{"model_type", "mesa_net"}, {"num_heads", 0}}, "'num_heads' is 0"},
      {{{"model_type", "mesa_net"}, {"lambda_lower_bound", -1}}, "lambda_lower_bound"},
      {{{"model_type", "mesa_net"}, {"eos_token_id", 99999}}, "outside the vocabulary"},
      {{{"model_type", "mesa_net"}, {"use_output_gate", 1}}, "true or false"},
  };
  for (const auto& [json, expected] : cases) {
    auto config = ParseMesaNetConfig(json);
    ASSERT_FALSE(config.ok()) << json.dump();
    EXPECT_NE(config.status().message().find(expected), std::string::npos)
        << json.dump() << " -> " << config.status();
  }
}

TEST(MesaNetLoadingTest, LoadsCompleteCheckpoint) {
  for (bool gate : {false, true}) {
    for (bool tied : {false, true}) {
      const auto config = SmallMesaConfig(gate, tied);
      EXPECT_EQ(LoadError(config, RandomMesaTensors(config, 1)), "") << gate << tied;
    }
  }
}

TEST(MesaNetLoadingTest, NamesMissingWrongAndUnexpectedTensors) {
  const auto config = SmallMesaConfig();
  auto missing = RandomMesaTensors(config, 1);
  missing.erase("model.layers.1.attn.k_proj.weight");
  EXPECT_NE(LoadError(config, missing).find("tensor model.layers.1.attn.k_proj.weight is missing"),
            std::string::npos);

  auto transposed = RandomMesaTensors(config, 1);
  transposed["model.layers.0.mlp.down_proj.weight"].shape = {256, 32};
  EXPECT_NE(
      LoadError(config, transposed)
          .find("tensor model.layers.0.mlp.down_proj.weight: expected [32, 256], found [256, 32]"),
      std::string::npos)
      << LoadError(config, transposed);

  auto extra = RandomMesaTensors(config, 1);
  extra["model.layers.0.attn.surprise"] = {"F32", {1}, {0.0f}, ""};
  EXPECT_NE(LoadError(config, extra).find("unexpected tensor(s)"), std::string::npos);

  auto old = RandomMesaTensors(config, 1);
  old["model.layers.0.attn.A_log"] = {"F32", {2}, {0.0f, 0.0f}, ""};
  EXPECT_NE(LoadError(config, old).find("predates"), std::string::npos);
}

}  // namespace
}  // namespace ridge
