// Reasoning and tool-call extraction from generated text, streamed in every possible split.
#include "server/chat_output_parser.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace ridge {
namespace {

ChatDelta Collect(ChatOutputParser::Options options, const std::vector<std::string>& pieces) {
  ChatOutputParser parser(options);
  ChatDelta all;
  auto merge = [&all](ChatDelta d) {
    all.content += d.content;
    all.reasoning += d.reasoning;
    for (auto& c : d.tool_calls) all.tool_calls.push_back(std::move(c));
  };
  for (const std::string& p : pieces) merge(parser.Add(p));
  merge(parser.Finish());
  return all;
}

// Every split of `text` into two pieces, and one character at a time, must give `whole`'s result.
void ExpectSplitInvariant(ChatOutputParser::Options options, const std::string& text) {
  const ChatDelta whole = Collect(options, {text});
  std::vector<std::string> chars;
  for (char c : text) chars.emplace_back(1, c);
  std::vector<std::vector<std::string>> splits = {chars};
  for (size_t i = 0; i <= text.size(); ++i) splits.push_back({text.substr(0, i), text.substr(i)});
  for (const auto& pieces : splits) {
    const ChatDelta d = Collect(options, pieces);
    EXPECT_EQ(d.content, whole.content);
    EXPECT_EQ(d.reasoning, whole.reasoning);
    ASSERT_EQ(d.tool_calls.size(), whole.tool_calls.size());
    for (size_t k = 0; k < d.tool_calls.size(); ++k) {
      EXPECT_EQ(d.tool_calls[k].name, whole.tool_calls[k].name);
      EXPECT_EQ(d.tool_calls[k].arguments, whole.tool_calls[k].arguments);
    }
  }
}

TEST(ChatOutputParserTest, SplitsReasoningFromContent) {
  const ChatOutputParser::Options reasoning{.reasoning = true};
  ChatDelta d = Collect(reasoning, {"<think>\nSix sevens.\n</think>\n\n42"});
  EXPECT_EQ(d.reasoning, "\nSix sevens.\n");
  EXPECT_EQ(d.content, "\n\n42");
  // No "<think>" at the start: all content (thinking disabled in the template).
  d = Collect(reasoning, {"42 <think>not reasoning</think>"});
  EXPECT_EQ(d.reasoning, "");
  EXPECT_EQ(d.content, "42 <think>not reasoning</think>");
  // Cut off while thinking: all reasoning.
  d = Collect(reasoning, {"<think>still going"});
  EXPECT_EQ(d.reasoning, "still going");
  EXPECT_EQ(d.content, "");
  // A short output that is a prefix of the tag is content at the end.
  d = Collect(reasoning, {"<thi"});
  EXPECT_EQ(d.content, "<thi");
  // Without the parser, the tags are content.
  d = Collect({}, {"<think>x</think>y"});
  EXPECT_EQ(d.content, "<think>x</think>y");
  ExpectSplitInvariant(reasoning, "<think>\nSix sevens.\n</think>\n\n42");
  ExpectSplitInvariant(reasoning, "<think>a</thin</think>b</think>");
}

TEST(ChatOutputParserTest, ParsesHermesToolCalls) {
  const ChatOutputParser::Options tools{.reasoning = true, .tool_calls = true};
  const std::string text =
      "<think>need weather</think>\n\nLet me check.\n<tool_call>\n{\"name\": \"get_weather\", "
      "\"arguments\": {\"city\": \"Paris\", \"days\": [1, 2]}}\n</tool_call>\n<tool_call>\n"
      "{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>\n";
  ChatDelta d = Collect(tools, {text});
  EXPECT_EQ(d.reasoning, "need weather");
  EXPECT_EQ(d.content, "\n\nLet me check.\n");
  ASSERT_EQ(d.tool_calls.size(), 2u);
  EXPECT_EQ(d.tool_calls[0].name, "get_weather");
  EXPECT_EQ(d.tool_calls[0].arguments, R"({"city": "Paris", "days": [1, 2]})");
  EXPECT_EQ(d.tool_calls[0].id.substr(0, 14), "chatcmpl-tool-");
  EXPECT_NE(d.tool_calls[0].id, d.tool_calls[1].id);
  EXPECT_EQ(d.tool_calls[1].arguments, "{}");
  ExpectSplitInvariant(tools, text);
}

TEST(ChatOutputParserTest, MalformedCallsStayContent) {
  const ChatOutputParser::Options tools{.tool_calls = true};
  const std::string bad = "<tool_call>\n{\"name\": \"f\", \"arguments\": {oops}\n</tool_call>";
  ChatDelta d = Collect(tools, {bad});
  EXPECT_TRUE(d.tool_calls.empty());
  EXPECT_EQ(d.content, bad);
  d = Collect(tools, {"<tool_call>[1, 2]</tool_call>"});  // JSON, but not a call
  EXPECT_TRUE(d.tool_calls.empty());
  EXPECT_EQ(d.content, "<tool_call>[1, 2]</tool_call>");
  // Unclosed at the end: parsed when complete JSON, content otherwise.
  d = Collect(tools, {"<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}"});
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].arguments, "{\"a\": 1}");
  d = Collect(tools, {"<tool_call>{\"name\": \"f\""});
  EXPECT_TRUE(d.tool_calls.empty());
  EXPECT_EQ(d.content, "<tool_call>{\"name\": \"f\"");
  // Text that only looks like the start of a tag is released at the end.
  d = Collect(tools, {"a <tool_ca"});
  EXPECT_EQ(d.content, "a <tool_ca");
  ExpectSplitInvariant(tools, bad + " tail");
}

// A named tool_choice: the output was constrained to the function's arguments, which become one
// call, given whole at the end (nothing before: a piece could still be cut short).
TEST(ChatOutputParserTest, AForcedFunctionTakesTheWholeContent) {
  const ChatOutputParser::Options forced{
      .reasoning = true, .tool_calls = true, .forced_function = "get_weather"};
  ChatOutputParser parser(forced);
  EXPECT_TRUE(parser.Add("{\"city\": ").empty());
  EXPECT_TRUE(parser.Add("\"Paris\"}").empty());
  const ChatDelta d = parser.Finish();
  EXPECT_EQ(d.content, "");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].name, "get_weather");
  EXPECT_EQ(d.tool_calls[0].arguments, R"({"city": "Paris"})");
  EXPECT_EQ(d.tool_calls[0].id.substr(0, 14), "chatcmpl-tool-");
  EXPECT_TRUE(parser.forced_call());
  EXPECT_EQ(parser.tool_calls_emitted(), 1);
  // Text that looks like a Hermes block is still the arguments.
  ExpectSplitInvariant(forced, "{\"a\": \"<tool_call>\"}");
  // Cut short (max_tokens, a stop string): not a call, the text as content.
  const ChatDelta cut = Collect(forced, {"{\"city\": \"Par"});
  EXPECT_TRUE(cut.tool_calls.empty());
  EXPECT_EQ(cut.content, "{\"city\": \"Par");
}

// tool_choice "required": the output was constrained to a list of calls, each becoming one; a
// list cut short (max_tokens) is content, as the text it is.
TEST(ChatOutputParserTest, RequiredCallsAreTheWholeList) {
  const ChatOutputParser::Options required{.tool_calls = true, .required_calls = true};
  const std::string list =
      R"([{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "now", )"
      R"("arguments": {}}])";
  ChatDelta d = Collect(required, {list});
  EXPECT_EQ(d.content, "");
  ASSERT_EQ(d.tool_calls.size(), 2u);
  EXPECT_EQ(d.tool_calls[0].name, "get_weather");
  EXPECT_EQ(d.tool_calls[0].arguments, R"({"city": "Paris"})");
  EXPECT_EQ(d.tool_calls[1].name, "now");
  EXPECT_EQ(d.tool_calls[1].arguments, "{}");
  ExpectSplitInvariant(required, list);
  const std::string cut = list.substr(0, 30);
  d = Collect(required, {cut});
  EXPECT_TRUE(d.tool_calls.empty());
  EXPECT_EQ(d.content, cut);
  d = Collect(required, {R"([{"name": "f", "arguments": {}}, 1])"});  // not all calls
  EXPECT_TRUE(d.tool_calls.empty());
}

}  // namespace
}  // namespace ridge
