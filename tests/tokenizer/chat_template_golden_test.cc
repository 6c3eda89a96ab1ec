// Real chat templates (tests/data/chat_templates/*.jinja) rendered by ChatTemplate must match
// transformers' apply_chat_template byte for byte (golden.json, made by
// tools/reference/make_chat_template_golden.py), and fail where transformers fails. The golden
// was rendered with strftime_now reading a pinned time (strftime_now_at), which we pass too, so
// templates that print today's date match on any day.
#include <gtest/gtest.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
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

std::string Strip(std::string_view s) {
  const size_t begin = s.find_first_not_of(" \t\n\r");
  if (begin == std::string_view::npos) return "";
  return std::string(s.substr(begin, s.find_last_not_of(" \t\n\r") - begin + 1));
}

// A message's text: its content, or the last text part of a list of them.
std::string FinalText(const nlohmann::ordered_json& message) {
  const auto& content = message["content"];
  if (content.is_string()) return content;
  for (auto it = content.rbegin(); it != content.rend(); ++it) {
    if (it->is_object() && it->contains("text")) return (*it)["text"];
  }
  return "";
}

TEST(ChatTemplateGoldenTest, MatchesTransformers) {
  const auto golden = nlohmann::ordered_json::parse(ReadText(kDir / "golden.json"));
  const std::time_t now = golden["strftime_now_at"].get<std::time_t>();
  int rendered = 0, refused = 0, continued_cases = 0;
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
      std::optional<std::string> continued;
      absl::StatusOr<std::string> prompt = tmpl->Render(input, &continued);
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
      if (input.continue_final_message) {
        // What the output goes on from: the final message's text, which the prompt ends with.
        ASSERT_TRUE(continued.has_value());
        EXPECT_TRUE(prompt->ends_with(*continued)) << *continued;
        EXPECT_EQ(Strip(*continued), Strip(FinalText(input.messages.back())));
        ++continued_cases;
      }
    }
  }
  EXPECT_GE(rendered, 400);
  EXPECT_GE(refused, 20);
  EXPECT_GE(continued_cases, 10);
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

// continue_final_message: the final message's text as the prompt ends with it, from its first
// non-space byte; none when the template changed it (here its "a"s; an earlier message holds
// the text unchanged, so the prompt still holds it).
TEST(ChatTemplateGoldenTest, TheContinuedTextIsTheFinalMessagesAsWritten) {
  struct Case {
    const char* source;
    const char* final_text;
    std::optional<std::string> continued;
  };
  const Case cases[] = {
      {"{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}", R"(  {"a": 1, )",
       R"({"a": 1, )"},
      {"{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}\n{% endfor %}", " [1, \n",
       "[1,"},
      {"{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}", "  ", ""},
      {"{% for m in messages %}<{{ m.role }}>{% if m.role == 'user' %}{{ m.content }}{% else "
       "%}{{ m.content | replace('a', 'b') }}{% endif %}{% endfor %}",
       R"({"a)", std::nullopt},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.source);
    absl::StatusOr<ChatTemplate> tmpl = ChatTemplate::FromSource("t", c.source);
    ASSERT_TRUE(tmpl.ok()) << tmpl.status();
    ChatRenderInput input;
    input.messages = nlohmann::ordered_json::array();
    input.messages.push_back({{"role", "user"}, {"content", R"({"a)"}});
    input.messages.push_back({{"role", "assistant"}, {"content", c.final_text}});
    input.add_generation_prompt = false;
    input.continue_final_message = true;
    std::optional<std::string> continued = "unset";
    absl::StatusOr<std::string> prompt = tmpl->Render(input, &continued);
    ASSERT_TRUE(prompt.ok()) << prompt.status();
    EXPECT_EQ(continued, c.continued) << *prompt;
  }
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
