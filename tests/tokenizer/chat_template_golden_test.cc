// Real chat templates (tests/data/chat_templates/*.jinja) rendered by ChatTemplate must match
// transformers' apply_chat_template byte for byte (golden.json, made by
// tools/reference/make_chat_template_golden.py), and fail where transformers fails. The golden
// was rendered with strftime_now reading a pinned time (strftime_now_at), which we pass too, so
// templates that print today's date match on any day.
#include <gtest/gtest.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "nlohmann/json.hpp"
#include "tokenizer/chat_template.h"

namespace ridge {
namespace {

const std::filesystem::path kDir = std::filesystem::path(RIDGE_TEST_DATA_DIR) / "chat_templates";

std::string ReadText(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::optional<std::string> Token(const nlohmann::ordered_json& tokens, const char* key) {
  auto it = tokens.find(key);
  if (it == tokens.end()) return std::nullopt;
  return it->get<std::string>();
}

TEST(ChatTemplateGoldenTest, MatchesTransformers) {
  const auto golden = nlohmann::ordered_json::parse(ReadText(kDir / "golden.json"));
  const std::time_t now = golden["strftime_now_at"].get<std::time_t>();
  int rendered = 0, refused = 0;
  for (const auto& t : golden["templates"]) {
    const std::string name = t["name"];
    SCOPED_TRACE(name);
    const auto& special = t["special_tokens"];
    ChatSpecialTokens tokens{Token(special, "bos_token"), Token(special, "eos_token"),
                             Token(special, "unk_token"), Token(special, "pad_token")};
    absl::StatusOr<ChatTemplate> tmpl =
        ChatTemplate::FromSource(name, ReadText(kDir / t["file"].get<std::string>()), tokens);
    ASSERT_TRUE(tmpl.ok()) << tmpl.status();
    for (const auto& c : t["cases"]) {
      SCOPED_TRACE(c["name"].get<std::string>());
      ChatRenderInput input;
      input.messages = c["messages"];
      input.tools = c["tools"];
      input.add_generation_prompt = c["add_generation_prompt"];
      input.continue_final_message = c["continue_final_message"];
      input.kwargs = c["kwargs"];
      input.now = now;
      absl::StatusOr<std::string> prompt = tmpl->Render(input);
      if (c.contains("error")) {
        EXPECT_FALSE(prompt.ok()) << "transformers failed with " << c["error"] << " but we gave\n"
                                  << *prompt;
        if (!prompt.ok()) {
          EXPECT_EQ(prompt.status().code(), absl::StatusCode::kInvalidArgument);
        }
        ++refused;
        continue;
      }
      ASSERT_TRUE(prompt.ok()) << prompt.status();
      EXPECT_EQ(*prompt, c["expected"].get<std::string>());
      ++rendered;
    }
  }
  EXPECT_GE(rendered, 400);
  EXPECT_GE(refused, 20);
}

std::string LocalDate(std::time_t at) {
  std::tm local{};
  localtime_r(&at, &local);
  char buf[32];
  return std::string(buf, std::strftime(buf, sizeof(buf), "%Y-%m-%d", &local));
}

// strftime_now formats the time the input names, else the wall clock.
TEST(ChatTemplateGoldenTest, StrftimeNowReadsTheGivenTimeElseTheClock) {
  absl::StatusOr<ChatTemplate> tmpl =
      ChatTemplate::FromSource("dated", "{{ strftime_now('%Y-%m-%d') }}|{{ messages[0].content }}");
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  ChatRenderInput input;
  input.messages = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "hi"}])");
  input.add_generation_prompt = false;
  input.now = 1796212800;  // 2026-12-02 12:00 UTC
  absl::StatusOr<std::string> pinned = tmpl->Render(input);
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  EXPECT_EQ(*pinned, LocalDate(1796212800) + "|hi");

  input.now.reset();
  const std::time_t before = std::time(nullptr);
  absl::StatusOr<std::string> today = tmpl->Render(input);
  const std::time_t after = std::time(nullptr);
  ASSERT_TRUE(today.ok()) << today.status();
  EXPECT_TRUE(*today == LocalDate(before) + "|hi" || *today == LocalDate(after) + "|hi") << *today;
}

// The template's own refusals reach the caller with the template's message.
TEST(ChatTemplateGoldenTest, RaiseExceptionMessageIsKept) {
  const auto golden = nlohmann::ordered_json::parse(ReadText(kDir / "golden.json"));
  for (const auto& t : golden["templates"]) {
    if (t["name"] != "gemma2") continue;
    absl::StatusOr<ChatTemplate> tmpl =
        ChatTemplate::FromSource("gemma2", ReadText(kDir / "gemma2.jinja"));
    ASSERT_TRUE(tmpl.ok()) << tmpl.status();
    ChatRenderInput input;
    input.messages = nlohmann::ordered_json::parse(
        R"([{"role": "system", "content": "x"}, {"role": "user", "content": "y"}])");
    absl::StatusOr<std::string> prompt = tmpl->Render(input);
    ASSERT_FALSE(prompt.ok());
    EXPECT_EQ(prompt.status().message(),
              "chat template 'gemma2': the template raised: System role not supported");
    return;
  }
  FAIL() << "gemma2 missing from golden.json";
}

}  // namespace
}  // namespace ridge
