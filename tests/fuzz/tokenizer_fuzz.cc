// libFuzzer target: tokenizer.json. The input is split at its first NUL byte into tokenizer.json
// and tokenizer_config.json; a tokenizer that loads must encode and decode a few texts (and the
// input's own bytes, when they are UTF-8) without crashing.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t split = input.find('\0');
  const std::string_view tokenizer_json = input.substr(0, split);
  const std::string_view config_json =
      split == std::string_view::npos ? std::string_view() : input.substr(split + 1);
  auto tokenizer = ridge::Tokenizer::FromJson(tokenizer_json, config_json);
  if (!tokenizer.ok()) return 0;
  for (std::string_view text :
       {std::string_view("Hello, world! 123"), std::string_view(" \n\t"),
        std::string_view("caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87"), tokenizer_json.substr(0, 64)}) {
    auto ids = (*tokenizer)->Encode(text, /*add_special_tokens=*/true);
    if (!ids.ok()) continue;
    (void)(*tokenizer)->Decode(*ids, /*skip_special_tokens=*/false);
    (void)(*tokenizer)->Decode(*ids, /*skip_special_tokens=*/true);
  }
  return 0;
}
