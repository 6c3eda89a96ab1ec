// The ridgeserve binary itself: `score` against the FLA goldens in both modes, `generate`
// determinism, and clear errors for bad flags.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "models/checkpoint.h"
#include "nlohmann/json.hpp"
#include "tests/support/run_command.h"

namespace ridge {
namespace {

// The model the README runs (assets/default-model), with its tokenizer.
const std::string kBundledModel = std::string(RIDGE_TEST_DATA_DIR) + "/../../assets/default-model";
const std::filesystem::path kCase =
    std::filesystem::path(RIDGE_TEST_DATA_DIR) / "mesanet" / "d64_untied";

struct Output {
  int exit_code;
  std::string text;  // stdout and stderr
};

Output RunRidgeserve(const std::string& args, bool with_stderr = true) {
  auto [exit_code, text] =
      testing::RunCommand(std::string(RIDGESERVE_BINARY) + " " + args, with_stderr);
  return {exit_code, std::move(text)};
}

std::vector<float> ReadFloats(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

double RelativeRms(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0, norm = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return std::sqrt(diff / norm);
}

std::string GoldenIds() {
  auto golden = ReadJsonFile(kCase / "golden.json");
  std::string ids;
  for (const auto& id : (*golden)["ids"])
    ids += (ids.empty() ? "" : ",") + std::to_string(id.get<int>());
  return ids;
}

TEST(CliTest, ScoreWritesGoldenLogitsInBothModes) {
  const auto out =
      std::filesystem::temp_directory_path() / ("ridge_cli_" + std::to_string(getpid()));
  std::filesystem::create_directories(out);
  const std::string base = "score --model " + kCase.string() + " --ids " + GoldenIds();

  Output prefill = RunRidgeserve(base + " --output " + (out / "p.f32").string());
  ASSERT_EQ(prefill.exit_code, 0) << prefill.text;
  EXPECT_NE(prefill.text.find("perplexity"), std::string::npos) << prefill.text;
  EXPECT_NE(prefill.text.find("mean iterations 30.00"), std::string::npos) << prefill.text;
  EXPECT_LT(RelativeRms(ReadFloats(out / "p.f32"), ReadFloats(kCase / "logits_prefill.f32")), 2e-3);

  Output decode = RunRidgeserve(base + " --decode-from 70 --output " + (out / "d.f32").string());
  ASSERT_EQ(decode.exit_code, 0) << decode.text;
  EXPECT_LT(RelativeRms(ReadFloats(out / "d.f32"), ReadFloats(kCase / "logits_decode.f32")), 2e-3);

  Output loose =
      RunRidgeserve(base + " --solver-tolerance 1e-2 --output " + (out / "l.f32").string());
  ASSERT_EQ(loose.exit_code, 0) << loose.text;
  EXPECT_EQ(loose.text.find("mean iterations 30.00"), std::string::npos) << loose.text;
  std::filesystem::remove_all(out);
}

TEST(CliTest, GenerateIsDeterministicWithASeed) {
  const std::string args = "generate --model " + kCase.string() +
                           " --prompt-ids 1,5,9,200 --max-tokens 12 --temperature 0.8 --top-p 0.9"
                           " --seed 7 --ignore-eos --log-level error";
  const Output a = RunRidgeserve(args, false), b = RunRidgeserve(args, false);
  ASSERT_EQ(a.exit_code, 0) << a.text;
  EXPECT_EQ(a.text, b.text);
  EXPECT_NE(RunRidgeserve(args).text.find("finish length"), std::string::npos);
  int commas = 0;
  for (char ch : a.text) commas += ch == ',';
  EXPECT_EQ(commas, 11);  // 12 ids
}

TEST(CliTest, GenerateFromTextWithTheBundledModel) {
  const Output out = RunRidgeserve("generate --model " + kBundledModel +
                                       " --prompt 'In the beginning' --max-tokens 8 --seed 3"
                                       " --temperature 0 --log-level error",
                                   false);
  ASSERT_EQ(out.exit_code, 0) << out.text;
  EXPECT_GT(out.text.size(), 8u) << out.text;  // decoded text, not ids
  EXPECT_TRUE(std::any_of(out.text.begin(), out.text.end(), ::isalpha)) << out.text;
}

// --json-object: what the bundled model writes is one JSON object (nlohmann parses it).
TEST(CliTest, GenerateJsonObject) {
  const Output out = RunRidgeserve("generate --model " + kBundledModel +
                                       " --prompt 'A cat, in JSON:' --json-object --max-tokens 200"
                                       " --seed 1 --log-level error",
                                   false);
  ASSERT_EQ(out.exit_code, 0) << out.text;
  EXPECT_TRUE(nlohmann::json::parse(out.text, nullptr, false).is_object()) << out.text;
}

// --json-schema FILE: what the bundled model writes is an instance: the keys in the file's order,
// each value of its type. A keyword not implemented is refused naming it and the file.
TEST(CliTest, GenerateJsonSchema) {
  const auto dir = std::filesystem::temp_directory_path() / "ridge_cli_schema_test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "cat.json") << R"({"type": "object",
      "properties": {"name": {"type": "string"}, "lives": {"type": "integer"},
                     "color": {"enum": ["black", "white", "ginger"]}},
      "required": ["name", "lives", "color"], "additionalProperties": false})";
  const Output out = RunRidgeserve(
      "generate --model " + kBundledModel + " --prompt 'A cat, in JSON:' --json-schema " +
          (dir / "cat.json").string() + " --max-tokens 200 --seed 1 --log-level error",
      false);
  ASSERT_EQ(out.exit_code, 0) << out.text;
  const auto v = nlohmann::ordered_json::parse(out.text, nullptr, false);
  ASSERT_TRUE(v.is_object()) << out.text;
  ASSERT_EQ(v.size(), 3u) << out.text;
  EXPECT_EQ(v.begin().key(), "name");
  EXPECT_TRUE(v.at("name").is_string());
  EXPECT_TRUE(v.at("lives").is_number_integer());
  EXPECT_TRUE(v.at("color") == "black" || v.at("color") == "white" || v.at("color") == "ginger");

  std::ofstream(dir / "bad.json") << R"({"type": "object", "properties": {"n": {"not": {}}}})";
  const Output bad = RunRidgeserve("generate --model " + kBundledModel +
                                   " --prompt x --json-schema " + (dir / "bad.json").string());
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.text.find("bad.json: at #/properties/n: keyword \"not\" is not supported"),
            std::string::npos)
      << bad.text;
  const Output both =
      RunRidgeserve("generate --model " + kBundledModel +
                    " --prompt x --json-object --json-schema " + (dir / "cat.json").string());
  EXPECT_NE(both.text.find("at most one of --json-object and --json-schema"), std::string::npos)
      << both.text;
  const Output missing = RunRidgeserve("generate --model " + kBundledModel +
                                       " --prompt x --json-schema " + (dir / "nope.json").string());
  EXPECT_NE(missing.text.find("--json-schema: cannot read"), std::string::npos) << missing.text;
  std::filesystem::remove_all(dir);
}

TEST(CliTest, BadFlagsGiveClearErrors) {
  const std::string model = " --model " + kCase.string();
  std::string hybrid = " --model ";
  hybrid += (std::filesystem::path(RIDGE_TEST_DATA_DIR) / "hybrid_qwen3" / "gka_swa_mix").string();
  const std::pair<std::string, std::string> cases[] = {
      {"generate" + model + " --prompt-ids 1,x", "'x' is not a token id"},
      {"generate" + model + " --prompt-ids 1,999", "outside the vocabulary"},
      {"generate" + model + " --prompt-ids 1 --temperature -1", "temperature"},
      {"generate" + model + " --prompt-ids 1 --top-p 0", "top_p"},
      {"generate" + model + " --prompt-ids 1 --bogus 3", "unknown flag --bogus"},
      {"score" + model + " --ids 1,2 --output /tmp/x --decode-from 5", "decode_from 5"},
      {"score" + model + " --ids 1,2 --output /tmp/x --solver-tolerance nan", "finite number"},
      {"score" + model + " --ids 1,2 --output /tmp/x --solver-max-iterations 0", "1 to 1000"},
      {"score --model /nonexistent --ids 1 --output /tmp/x", "does not exist"},
      {"frobnicate", "unknown command"},
      {"generate" + model + " --prompt hi --prompt-ids 1", "exactly one of --prompt"},
      {"generate" + model + " --prompt hi", "tokenizer.json"},
      {"generate" + model + " --prompt-ids 1 --json-object", "tokenizer.json"},
      {"generate" + model + " --prompt-ids 1 --kv-cache-dtype int4",
       "--kv-cache-dtype 'int4' must be auto, bf16, fp8 or fp8_e4m3"},
      {"generate" + hybrid + " --prompt-ids 1 --device cpu --kv-cache-dtype fp8",
       "--kv-cache-dtype fp8: the CPU backend keeps fp32 keys and values"},
      {"generate" + hybrid + " --prompt-ids 1 --device cpu --tensor-parallel-size 3",
       "--tensor-parallel-size 3: layer 0 (GKA): 4 heads do not split evenly over 3 ranks"},
      {"generate" + hybrid + " --prompt-ids 1 --tensor-parallel-size 0", "must be in [1, 64]"},
      {"generate" + hybrid + " --prompt-ids 1 --tensor-parallel-size 2 --tensor-parallel-timeout 0",
       "--tensor-parallel-timeout 0 must be 0.1 to 86400 seconds"},
      {"serve" + hybrid + " --tensor-parallel-timeout soon", "--tensor-parallel-timeout"},
      {"generate" + model + " --prompt-ids 1 --device cpu --tensor-parallel-size 2",
       "only hybrid_qwen3 models split over ranks (this is mesanet)"},
  };
  for (const auto& [args, expected] : cases) {
    const Output out = RunRidgeserve(args);
    EXPECT_NE(out.exit_code, 0) << args;
    EXPECT_NE(out.text.find(expected), std::string::npos) << args << "\n" << out.text;
  }
}

TEST(CliTest, HybridCheckpointsRunThroughEveryCommand) {
  const std::filesystem::path hybrid =
      std::filesystem::path(RIDGE_TEST_DATA_DIR) / "hybrid_qwen3" / "gka_swa_mix";
  auto golden = ReadJsonFile(hybrid / "golden.json");
  ASSERT_TRUE(golden.ok());
  std::string ids;
  for (const auto& id : (*golden)["ids"])
    ids += (ids.empty() ? "" : ",") + std::to_string(id.get<int>());
  const std::filesystem::path out =
      std::filesystem::temp_directory_path() / ("ridge_cli_hybrid_" + std::to_string(getpid()));
  // score, both modes, against the float64 reference's logits.
  for (const std::string mode : {"", " --decode-from 60"}) {
    const Output score = RunRidgeserve("score --model " + hybrid.string() + " --ids " + ids +
                                       " --output " + out.string() + " --block-size 8" + mode);
    ASSERT_EQ(score.exit_code, 0) << score.text;
    EXPECT_NE(score.text.find("perplexity"), std::string::npos);
    EXPECT_LT(RelativeRms(ReadFloats(out), ReadFloats(hybrid / "logits.f32")), 5e-5) << mode;
  }
  // Split over 2 ranks (threads): the same logits within fp32 rounding.
  const Output split =
      RunRidgeserve("score --model " + hybrid.string() + " --ids " + ids + " --output " +
                    out.string() + " --block-size 8 --device cpu --tensor-parallel-size 2");
  ASSERT_EQ(split.exit_code, 0) << split.text;
  EXPECT_LT(RelativeRms(ReadFloats(out), ReadFloats(hybrid / "logits.f32")), 5e-5);
  std::filesystem::remove(out);
  const std::string generate_args = "generate --model " + hybrid.string() +
                                    " --prompt-ids 5,6,7,8 --max-tokens 40 --ignore-eos "
                                    "--temperature 0 --device cpu";
  const Output generate = RunRidgeserve(generate_args, /*with_stderr=*/false);
  ASSERT_EQ(generate.exit_code, 0) << generate.text;
  EXPECT_EQ(std::count(generate.text.begin(), generate.text.end(), ','), 39) << generate.text;
  const Output generate_split =
      RunRidgeserve(generate_args + " --tensor-parallel-size 4", /*with_stderr=*/false);
  ASSERT_EQ(generate_split.exit_code, 0) << generate_split.text;
  EXPECT_EQ(generate_split.text, generate.text);
  const Output info = RunRidgeserve("info --model " + hybrid.string());
  ASSERT_EQ(info.exit_code, 0) << info.text;
  EXPECT_NE(info.text.find("hybrid_qwen3: 4 layers"), std::string::npos) << info.text;
  EXPECT_NE(info.text.find("GKA-*-GKA-SWA"), std::string::npos) << info.text;
  // The HQwen3-8B shape from its config alone: 72 MiB of GKA state plus conv tails, and 144 KiB
  // of fp32 KV a token.
  const std::filesystem::path eight_b = std::filesystem::path(RIDGE_TEST_DATA_DIR) / ".." / ".." /
                                        "tools" / "bench" / "configs" / "hqwen3-8b-gka.json";
  const Output big = RunRidgeserve("info --load-format random --model " + eight_b.string());
  ASSERT_EQ(big.exit_code, 0) << big.text;
  EXPECT_NE(big.text.find("76824576 bytes of recurrent state + 147456 bytes of KV cache a token"),
            std::string::npos)
      << big.text;
}

}  // namespace
}  // namespace ridge
