// Single-thread encode throughput of ridge::Tokenizer, to compare with Hugging Face `tokenizers`
// (tokenizer_bench.py runs both on the same documents; see RESULTS.md).
//
// Usage: tokenizer_bench TOKENIZER_DIR DOCS_FILE [PASSES]
// DOCS_FILE: b"RTKC", u32 count, then u32 length + UTF-8 bytes per document (written by
// tokenizer_bench.py). One untimed pass warms the word cache, as it is warm in a server.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace {

std::vector<std::string> ReadDocs(const char* path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  const std::string data = s.str();
  std::vector<std::string> docs;
  if (data.size() < 8 || data.compare(0, 4, "RTKC") != 0) return docs;
  uint32_t count;
  std::memcpy(&count, data.data() + 4, 4);
  size_t pos = 8;
  for (uint32_t i = 0; i < count && pos + 4 <= data.size(); ++i) {
    uint32_t len;
    std::memcpy(&len, data.data() + pos, 4);
    docs.push_back(data.substr(pos + 4, len));
    pos += 4 + len;
  }
  return docs;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s TOKENIZER_DIR DOCS_FILE [PASSES]\n", argv[0]);
    return 2;
  }
  const int passes = argc > 3 ? std::atoi(argv[3]) : 5;
  auto tokenizer = ridge::Tokenizer::Load(argv[1]);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "%s\n", std::string(tokenizer.status().message()).c_str());
    return 1;
  }
  const std::vector<std::string> docs = ReadDocs(argv[2]);
  size_t bytes = 0;
  for (const auto& d : docs) bytes += d.size();
  if (docs.empty()) {
    std::fprintf(stderr, "no documents in %s\n", argv[2]);
    return 1;
  }
  std::vector<double> rates;
  size_t ids = 0;
  for (int pass = 0; pass <= passes; ++pass) {
    const auto start = std::chrono::steady_clock::now();
    ids = 0;
    for (const auto& d : docs) {
      auto encoded = (*tokenizer)->Encode(d, false);
      if (!encoded.ok()) {
        std::fprintf(stderr, "encode failed: %s\n",
                     std::string(encoded.status().message()).c_str());
        return 1;
      }
      ids += encoded->size();
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (pass > 0) rates.push_back(bytes / seconds / 1e6);  // pass 0 warms the cache
  }
  std::sort(rates.begin(), rates.end());
  std::printf("ridge %s: %zu docs, %.2f MB, %zu ids, median %.2f MB/s, best %.2f MB/s\n", argv[1],
              docs.size(), bytes / 1e6, ids, rates[rates.size() / 2], rates.back());
  return 0;
}
