#include "server/json_output.h"

#include <algorithm>
#include <string>
#include <vector>

namespace ridge {

absl::StatusOr<std::shared_ptr<const JsonVocabulary>> JsonVocabularyOf(const Tokenizer& tokenizer,
                                                                       int32_t model_vocab_size) {
  std::vector<std::string> bytes(static_cast<size_t>(model_vocab_size));
  const int32_t known = std::min(model_vocab_size, tokenizer.vocab_size());
  for (int32_t id = 0; id < known; ++id) {
    if (!tokenizer.IsSpecial(id)) bytes[id] = tokenizer.TokenBytes(id);
  }
  return JsonVocabulary::Create(bytes);
}

}  // namespace ridge
