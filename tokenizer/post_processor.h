// tokenizer.json "post_processor" for a single sequence: the special ids placed before and after
// the encoded text when add_special_tokens is set. Supported: TemplateProcessing, ByteLevel (no
// ids), BertProcessing, RobertaProcessing, Sequence.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "tokenizer/json_fields.h"

namespace ridge {

struct SpecialTokenFrame {
  std::vector<int32_t> prefix;
  std::vector<int32_t> suffix;
};

absl::StatusOr<SpecialTokenFrame> ParsePostProcessor(const Json& json);

}  // namespace ridge
