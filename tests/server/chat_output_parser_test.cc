// Reasoning and tool-call extraction from generated text, streamed in every possible split.
#include "server/chat_output_parser.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace ridge {
namespace {

ChatDelta Collect(ChatOutputParser::Options options, const std::vector<std::string>& pieces) {
  ChatOutputParser parser(options);
  ChatDelta all;
  int opened = 0;  // calls opened so far: a later piece continues one of them
  auto take = [&](ChatDelta d) {
    for (const ToolCallPiece& piece : d.tool_calls) {
      if (piece.opens_call()) {
        EXPECT_EQ(piece.index, opened++) << "calls must open in index order";
      } else {
        EXPECT_LT(piece.index, opened) << "a piece of a call not opened yet";
      }
    }
    AppendChatDelta(all, std::move(d));
  };
  for (const std::string& p : pieces) take(parser.Add(p));
  take(parser.Finish());
  EXPECT_EQ(parser.tool_calls_emitted(), opened);
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

// A named tool_choice: the output was constrained to the function's arguments, which stream as
// one call: its first piece names it as soon as the arguments begin, later ones carry more text.
TEST(ChatOutputParserTest, AForcedFunctionStreamsItsArguments) {
  const ChatOutputParser::Options forced{
      .reasoning = true, .tool_calls = true, .forced_function = "get_weather"};
  ChatOutputParser parser(forced);
  EXPECT_TRUE(parser.Add("\n ").empty());  // white space before the arguments: nothing yet
  ChatDelta d = parser.Add("{\"city\": ");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].index, 0);
  EXPECT_EQ(d.tool_calls[0].name, "get_weather");
  EXPECT_EQ(d.tool_calls[0].id.substr(0, 14), "chatcmpl-tool-");
  EXPECT_EQ(d.tool_calls[0].arguments, "{\"city\":");  // the space waits for what follows
  EXPECT_EQ(parser.tool_calls_emitted(), 1);
  d = parser.Add("\"Paris\"}");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_FALSE(d.tool_calls[0].opens_call());
  EXPECT_EQ(d.tool_calls[0].index, 0);
  EXPECT_EQ(d.tool_calls[0].arguments, " \"Paris\"}");
  EXPECT_TRUE(parser.Add("\n").empty());
  EXPECT_TRUE(parser.Finish().empty());  // white space after the arguments is dropped
  EXPECT_TRUE(parser.forced_call());

  const ChatDelta whole = Collect(forced, {"<think>hm</think>\n\n{\"city\": \"Paris\"}\n"});
  EXPECT_EQ(whole.reasoning, "hm");
  EXPECT_EQ(whole.content, "");
  ASSERT_EQ(whole.tool_calls.size(), 1u);
  EXPECT_EQ(whole.tool_calls[0].arguments, R"({"city": "Paris"})");
  // Text that looks like a Hermes block is still the arguments.
  ExpectSplitInvariant(forced, "{\"a\": \"<tool_call>\"}");
  ExpectSplitInvariant(forced, " {\"a\":  \"x y\" }  ");
  // Cut short (max_tokens, a stop string): the call keeps the arguments it has.
  const ChatDelta cut = Collect(forced, {"{\"city\": \"Par"});
  ASSERT_EQ(cut.tool_calls.size(), 1u);
  EXPECT_EQ(cut.tool_calls[0].arguments, "{\"city\": \"Par");
  EXPECT_EQ(cut.content, "");
  EXPECT_TRUE(Collect(forced, {"  "}).tool_calls.empty());
}

// tool_choice "required": the output was constrained to a list of calls, each streaming as one
// (opened when its name is complete); a list cut short before any name is content.
TEST(ChatOutputParserTest, RequiredCallsStreamOneByOne) {
  const ChatOutputParser::Options required{.tool_calls = true, .required_calls = true};
  const std::string list =
      R"([{"name": "get_weather", "arguments": {"city": "Paris", "note": "a \"}\" b"}}, )"
      R"({"name": "now", "arguments": {}}, {"name": "bare"}])";
  ChatDelta d = Collect(required, {list});
  EXPECT_EQ(d.content, "");
  ASSERT_EQ(d.tool_calls.size(), 3u);
  EXPECT_EQ(d.tool_calls[0].index, 0);
  EXPECT_EQ(d.tool_calls[0].name, "get_weather");
  EXPECT_EQ(d.tool_calls[0].arguments, R"({"city": "Paris", "note": "a \"}\" b"})");
  EXPECT_EQ(d.tool_calls[1].index, 1);
  EXPECT_EQ(d.tool_calls[1].name, "now");
  EXPECT_EQ(d.tool_calls[1].arguments, "{}");
  EXPECT_EQ(d.tool_calls[2].name, "bare");
  EXPECT_EQ(d.tool_calls[2].arguments, "{}");
  EXPECT_NE(d.tool_calls[0].id, d.tool_calls[1].id);
  ExpectSplitInvariant(required, list);

  ChatOutputParser parser(required);
  EXPECT_TRUE(parser.Add(R"([{"name": "get_wea)").empty());
  d = parser.Add(R"(ther", "arguments": {"ci)");
  ASSERT_EQ(d.tool_calls.size(), 1u);  // opened by its name, with the arguments so far
  EXPECT_EQ(d.tool_calls[0].name, "get_weather");
  EXPECT_EQ(d.tool_calls[0].arguments, "{\"ci");
  EXPECT_EQ(parser.tool_calls_emitted(), 1);
  d = parser.Add(R"(ty": "Paris"}}, {"name": "now")");
  ASSERT_EQ(d.tool_calls.size(), 2u);  // the first one's rest, then the second opened
  EXPECT_FALSE(d.tool_calls[0].opens_call());
  EXPECT_EQ(d.tool_calls[0].index, 0);
  EXPECT_EQ(d.tool_calls[0].arguments, R"(ty": "Paris"})");
  EXPECT_EQ(d.tool_calls[1].index, 1);
  EXPECT_EQ(d.tool_calls[1].name, "now");
  d = parser.Add("}]");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].arguments, "{}");
  EXPECT_TRUE(parser.Finish().empty());

  // Arguments before the name wait for it; names and keys with escapes are decoded.
  d = Collect(required, {R"([{"arguments": {"x": [1, {"y": 2}]}, "n\u0061me": "f\"g"}])"});
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].name, "f\"g");
  EXPECT_EQ(d.tool_calls[0].arguments, R"({"x": [1, {"y": 2}]})");
  // Cut short inside a call: the calls so far, the last one's arguments cut.
  d = Collect(required, {list.substr(0, list.find("Paris") + 3)});
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].arguments, R"({"city": "Par)");
  // Cut short before any name: the text as content.
  d = Collect(required, {R"([{"name": "get)"});
  EXPECT_TRUE(d.tool_calls.empty());
  EXPECT_EQ(d.content, R"([{"name": "get)");
}

// Random text built of the pieces the parser looks for: every split gives the same reply, and
// every piece continues a call opened before it (checked in Collect), whatever the options.
TEST(ChatOutputParserTest, RandomTextSplitsAlike) {
  const std::vector<std::string> atoms = {"[",       "]",           "{",
                                          "}",       "\"",          "\\",
                                          ":",       ",",           " ",
                                          "\n",      "a",           "1",
                                          "null",    "\"name\"",    "\"arguments\"",
                                          "\"f\"",   "<tool_call>", "</tool_call>",
                                          "<think>", "</think>",    "<tool_"};
  const std::vector<ChatOutputParser::Options> options = {
      {.tool_calls = true},
      {.reasoning = true, .tool_calls = true},
      {.tool_calls = true, .forced_function = "f"},
      {.reasoning = true, .tool_calls = true, .forced_function = "f"},
      {.tool_calls = true, .required_calls = true},
      {.reasoning = true, .tool_calls = true, .required_calls = true}};
  std::mt19937 rng(7);
  for (int round = 0; round < 3000; ++round) {
    std::string text = round % 4 < 2 ? "[{\"name\": \"f\", \"arguments\": " : "";
    const int atoms_count = 1 + static_cast<int>(rng() % 24);
    for (int i = 0; i < atoms_count; ++i) text += atoms[rng() % atoms.size()];
    SCOPED_TRACE(text);
    ExpectSplitInvariant(options[round % options.size()], text);
  }
}

}  // namespace
}  // namespace ridge
