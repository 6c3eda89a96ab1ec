#include "models/safetensors.h"

#include <gtest/gtest.h>

#include "base/half.h"
#include "models/checkpoint.h"
#include "tests/unit/test_checkpoint_writer.h"

namespace ridge {
namespace {

using testing::BuildSafetensors;
using testing::FreshDir;
using testing::RawTensor;
using testing::WriteRawSafetensors;
using testing::WriteSafetensors;

std::string ErrorOf(const std::filesystem::path& path) {
  auto file = SafetensorsFile::Open(path);
  return file.ok() ? "" : std::string(file.status().message());
}

TEST(SafetensorsTest, ReadsAllDtypes) {
  const auto dir = FreshDir("st_dtypes");
  RawTensor bf16{"BF16", {2}, {}, ""};
  const uint16_t b[2] = {FloatToBf16(1.5f), FloatToBf16(-2.0f)};
  bf16.raw_bytes.assign(reinterpret_cast<const char*>(b), sizeof(b));
  RawTensor f16{"F16", {2}, {}, std::string("\x00\x3c\x00\xc0", 4)};  // 1.0, -2.0
  WriteSafetensors(dir / "a.safetensors",
                   {{"f32", {"F32", {1, 3}, {1, 2, 3}, ""}}, {"bf16", bf16}, {"f16", f16}});
  auto file = SafetensorsFile::Open(dir / "a.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  std::map<std::string, std::vector<float>> values;
  for (const auto& t : (*file)->tensors()) {
    std::vector<float> v(t.NumElements());
    CopyToFloat(t, v.data());
    values[t.name] = v;
  }
  EXPECT_EQ(values["f32"], (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(values["bf16"], (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(values["f16"], (std::vector<float>{1.0f, -2.0f}));
}

TEST(SafetensorsTest, F16Subnormal) {
  EXPECT_FLOAT_EQ(F16ToFloat(0x0001), 5.9604645e-8f);
  EXPECT_FLOAT_EQ(F16ToFloat(0x7bff), 65504.0f);
}

TEST(SafetensorsTest, RejectsTruncatedData) {
  const auto dir = FreshDir("st_trunc");
  nlohmann::json header;
  std::string payload;
  BuildSafetensors({{"w", {"F32", {4}, {1, 2, 3, 4}, ""}}}, &header, &payload);
  const std::string text = header.dump();
  WriteRawSafetensors(dir / "t.safetensors", text, payload.substr(0, 10), text.size());
  {
    const std::string error = ErrorOf(dir / "t.safetensors");
    EXPECT_NE(error.find("tensor w"), std::string::npos) << error;
    EXPECT_NE(error.find("beyond"), std::string::npos) << error;
  }
}

TEST(SafetensorsTest, RejectsHugeHeaderLength) {
  const auto dir = FreshDir("st_huge");
  WriteRawSafetensors(dir / "h.safetensors", "{}", "", 1ull << 62);
  EXPECT_NE(ErrorOf(dir / "h.safetensors").find("header length"), std::string::npos);
  WriteRawSafetensors(dir / "h2.safetensors", "{}", "", 1000);
  EXPECT_NE(ErrorOf(dir / "h2.safetensors").find("exceeds the file size"), std::string::npos);
}

TEST(SafetensorsTest, RejectsShortFileAndBadJson) {
  const auto dir = FreshDir("st_short");
  std::ofstream(dir / "s.safetensors") << "abc";
  EXPECT_NE(ErrorOf(dir / "s.safetensors").find("too short"), std::string::npos);
  WriteRawSafetensors(dir / "j.safetensors", "{not json", "", 9);
  EXPECT_NE(ErrorOf(dir / "j.safetensors").find("not valid JSON"), std::string::npos);
  WriteRawSafetensors(dir / "a.safetensors", "[1,2]", "", 5);
  EXPECT_NE(ErrorOf(dir / "a.safetensors").find("not a JSON object"), std::string::npos);
  EXPECT_NE(ErrorOf(dir / "missing.safetensors").find("cannot open"), std::string::npos);
}

TEST(SafetensorsTest, RejectsOverlappingOffsets) {
  const auto dir = FreshDir("st_overlap");
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  WriteRawSafetensors(dir / "o.safetensors", header, std::string(12, '\0'), header.size());
  const std::string error = ErrorOf(dir / "o.safetensors");
  EXPECT_NE(error.find("overlap"), std::string::npos) << error;
}

TEST(SafetensorsTest, RejectsBadEntries) {
  const auto dir = FreshDir("st_entries");
  struct Case {
    std::string entry;
    std::string expected;
  } cases[] = {
      {R"({"dtype":"I64","shape":[1],"data_offsets":[0,8]})", "dtype I64 is not supported"},
      {R"({"dtype":"F32","shape":[3],"data_offsets":[0,8]})", "needs 12 bytes"},
      {R"({"dtype":"F32","shape":[-1],"data_offsets":[0,8]})", "non-negative"},
      {R"({"dtype":"F32","shape":[2],"data_offsets":[8,0]})", "reversed"},
      {R"({"dtype":"F32","shape":[2]})", "data_offsets"},
      {R"({"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,8]})",
       "overflows"},
      {R"({"shape":[2],"data_offsets":[0,8]})", "dtype"},
      {R"(7)", "not an object"},
  };
  for (const Case& c : cases) {
    const std::string header = R"({"x":)" + c.entry + "}";
    WriteRawSafetensors(dir / "e.safetensors", header, std::string(8, '\0'), header.size());
    const std::string error = ErrorOf(dir / "e.safetensors");
    EXPECT_NE(error.find(c.expected), std::string::npos) << c.entry << " -> " << error;
    EXPECT_NE(error.find("tensor x"), std::string::npos) << error;
  }
}

TEST(CheckpointTest, ShardedIndex) {
  const auto dir = FreshDir("ckpt_shards");
  WriteSafetensors(dir / "s1.safetensors", {{"a", {"F32", {1}, {1}, ""}}});
  WriteSafetensors(dir / "s2.safetensors", {{"b", {"F32", {1}, {2}, ""}}});
  testing::WriteJson(dir / "config.json", {{"model_type", "mesa_net"}});
  testing::WriteJson(dir / "model.safetensors.index.json",
                     {{"weight_map", {{"a", "s1.safetensors"}, {"b", "s2.safetensors"}}}});
  auto checkpoint = Checkpoint::Open(dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_NE((*checkpoint)->Find("a"), nullptr);
  EXPECT_NE((*checkpoint)->Find("b"), nullptr);
  EXPECT_EQ((*checkpoint)->Find("c"), nullptr);
}

TEST(CheckpointTest, RejectsHostileOrInconsistentIndex) {
  const auto dir = FreshDir("ckpt_bad_index");
  WriteSafetensors(dir / "s1.safetensors", {{"a", {"F32", {1}, {1}, ""}}});
  testing::WriteJson(dir / "config.json", {{"model_type", "mesa_net"}});
  const std::pair<nlohmann::json, std::string> cases[] = {
      {{{"weight_map", {{"a", "../s1.safetensors"}}}}, "must be a file name"},
      {{{"weight_map", {{"a", "/etc/passwd"}}}}, "must be a file name"},
      {{{"weight_map", {{"a", "nope.safetensors"}}}}, "does not exist"},
      {{{"weight_map", {{"z", "s1.safetensors"}}}}, "but not found there"},
      {{{"weight_map", {{"a", 3}}}}, "not a string"},
      {{{"nothing", 1}}, "weight_map"},
  };
  for (const auto& [index, expected] : cases) {
    testing::WriteJson(dir / "model.safetensors.index.json", index);
    auto checkpoint = Checkpoint::Open(dir);
    ASSERT_FALSE(checkpoint.ok()) << index.dump();
    EXPECT_NE(checkpoint.status().message().find(expected), std::string::npos)
        << index.dump() << " -> " << checkpoint.status();
  }
}

TEST(CheckpointTest, MissingFilesAreNamed) {
  const auto dir = FreshDir("ckpt_missing");
  EXPECT_NE(Checkpoint::Open(dir).status().message().find("config.json"), std::string::npos);
  testing::WriteJson(dir / "config.json", {{"model_type", "mesa_net"}});
  EXPECT_NE(Checkpoint::Open(dir).status().message().find("model.safetensors"), std::string::npos);
  EXPECT_NE(Checkpoint::Open(dir / "nope").status().message().find("does not exist"),
            std::string::npos);
}

}  // namespace
}  // namespace ridge
