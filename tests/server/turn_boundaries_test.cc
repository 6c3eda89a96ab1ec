// Where the prefix cache keeps states inside a chat prompt: the bundled model's ChatML template
// opens every message with <|im_start|>, found from the template and the tokenizer alone; the
// boundaries are the last turns' starts.
#include "server/turn_boundaries.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace ridge {
namespace {

std::string Read(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(TurnBoundariesTest, TheBundledTemplateOpensEachMessageWithImStart) {
  const std::filesystem::path dir =
      std::filesystem::path(RIDGE_TEST_DATA_DIR) / ".." / ".." / "assets" / "default-model";
  auto tokenizer =
      Tokenizer::FromJson(Read(dir / "tokenizer.json"), Read(dir / "tokenizer_config.json"));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const TokenizerConfig& config = (*tokenizer)->config();
  ASSERT_FALSE(config.chat_templates.empty());
  auto chat = ChatTemplate::FromSource("default", config.chat_templates[0].source,
                                       ChatSpecialTokens::FromConfig(config));
  ASSERT_TRUE(chat.ok()) << chat.status();
  const std::optional<int32_t> start = FindTurnStartToken(*chat, **tokenizer);
  ASSERT_TRUE(start.has_value());
  EXPECT_EQ((*tokenizer)->IdToToken(*start).value_or(""), "<|im_start|>");

  ChatRenderInput input;
  for (int i = 0; i < 5; ++i) {
    input.messages.push_back({{"role", i % 2 == 0 ? "user" : "assistant"},
                              {"content", "message number " + std::to_string(i)}});
  }
  auto text = chat->Render(input);
  ASSERT_TRUE(text.ok()) << text.status();
  auto ids = (*tokenizer)->Encode(*text, false);
  ASSERT_TRUE(ids.ok()) << ids.status();
  std::vector<int64_t> all;
  for (size_t p = 1; p < ids->size(); ++p) {
    if ((*ids)[p] == *start) all.push_back(static_cast<int64_t>(p));
  }
  ASSERT_EQ(all.size(), 5u);  // four more messages and the generation prompt
  const std::vector<int64_t> last = TurnBoundaries(*ids, *start, 3);
  EXPECT_EQ(last, std::vector<int64_t>(all.end() - 3, all.end()));
  EXPECT_EQ(TurnBoundaries(*ids, *start, 10), all);  // never position 0
}

}  // namespace
}  // namespace ridge
