#include "server/turn_boundaries.h"

#include <algorithm>
#include <map>

namespace ridge {

std::optional<int32_t> FindTurnStartToken(const ChatTemplate& chat_template,
                                          const Tokenizer& tokenizer) {
  ChatRenderInput input;
  input.messages = nlohmann::ordered_json::array({{{"role", "user"}, {"content", "a"}},
                                                  {{"role", "assistant"}, {"content", "b"}},
                                                  {{"role", "user"}, {"content", "c"}}});
  input.add_generation_prompt = false;
  const absl::StatusOr<std::string> text = chat_template.Render(input);
  if (!text.ok()) return std::nullopt;
  const absl::StatusOr<std::vector<int32_t>> ids =
      tokenizer.Encode(*text, /*add_special_tokens=*/false);
  if (!ids.ok()) return std::nullopt;
  std::map<int32_t, int> count;
  for (int32_t id : *ids) {
    if (tokenizer.IsSpecial(id)) ++count[id];
  }
  for (int32_t id : *ids) {
    if (tokenizer.IsSpecial(id) && count[id] == 3) return id;
  }
  return std::nullopt;
}

std::vector<int64_t> TurnBoundaries(std::span<const int32_t> ids, int32_t turn_start, int count) {
  std::vector<int64_t> out;
  for (int64_t p = static_cast<int64_t>(ids.size()) - 1; p > 0 && count > 0; --p) {
    if (ids[p] != turn_start) continue;
    out.push_back(p);
    --count;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

}  // namespace ridge
