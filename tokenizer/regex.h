// A compiled PCRE2 pattern (UTF + Unicode properties, JIT-compiled) used by the pre-tokenizers
// and normalizers. Patterns come from tokenizer.json, where Hugging Face's `tokenizers` runs them
// with Oniguruma; the constructs real tokenizers use (\p{L}, \p{N}, \s, (?i:...), (?!...)) mean
// the same in both engines, and the corpus test checks it.
#pragma once

#include <cstddef>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace ridge {

struct MatchRange {
  size_t begin;
  size_t end;
};

class Regex {
 public:
  // Compiles `pattern`; a syntax error becomes InvalidArgument naming the pattern and offset.
  static absl::StatusOr<std::unique_ptr<Regex>> Compile(std::string_view pattern);
  // A pattern matching `literal` exactly.
  static absl::StatusOr<std::unique_ptr<Regex>> Literal(std::string_view literal);

  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends every non-empty, non-overlapping match in `text` (valid UTF-8), left to right.
  // Safe to call from many threads at once.
  void FindAll(std::string_view text, std::vector<MatchRange>* matches) const;

 private:
  explicit Regex(void* code) : code_(code) {}
  void* code_;  // pcre2_code_8*; kept opaque so pcre2.h stays out of this header.
};

}  // namespace ridge
