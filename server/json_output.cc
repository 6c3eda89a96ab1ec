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

absl::StatusOr<std::shared_ptr<const JsonVocabulary>> LazyJsonVocabulary::Get() const {
  std::call_once(once_, [this] {
    if (tokenizer_ == nullptr) {
      vocabulary_ = absl::FailedPreconditionError(
          "JSON output needs the tokenizer (start the server with --tokenizer DIR)");
    } else {
      vocabulary_ = JsonVocabularyOf(*tokenizer_, model_vocab_size_);
    }
  });
  return vocabulary_;
}

}  // namespace ridge
