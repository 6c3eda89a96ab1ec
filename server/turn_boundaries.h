// Where the turns of a chat prompt begin, so the prefix cache can keep states there (a later
// request that edits the last message or re-renders an answer differently still reuses the
// history before it).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ridge {

// The token that opens every message of `chat_template`'s prompts (Qwen's <|im_start|>, Llama
// 3's <|start_header_id|>): of the special tokens that occur once per message in a rendered
// three-message conversation, the first; nullopt when none does.
std::optional<int32_t> FindTurnStartToken(const ChatTemplate& chat_template,
                                          const Tokenizer& tokenizer);

// The positions of the last `count` occurrences of `turn_start` in `ids` (each the end of the
// history before that turn), leaving out position 0 and the prompt's end.
std::vector<int64_t> TurnBoundaries(std::span<const int32_t> ids, int32_t turn_start, int count);

}  // namespace ridge
