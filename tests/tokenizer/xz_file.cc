#include "tests/tokenizer/xz_file.h"

#include <lzma.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace ridge {

absl::StatusOr<std::string> ReadXzFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path.string()));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  const std::string compressed = buffer.str();

  lzma_stream stream = LZMA_STREAM_INIT;
  if (lzma_stream_decoder(&stream, UINT64_MAX, 0) != LZMA_OK) {
    return absl::InternalError("lzma_stream_decoder failed");
  }
  std::string out;
  char chunk[1 << 16];
  stream.next_in = reinterpret_cast<const uint8_t*>(compressed.data());
  stream.avail_in = compressed.size();
  lzma_ret ret = LZMA_OK;
  while (ret == LZMA_OK) {
    stream.next_out = reinterpret_cast<uint8_t*>(chunk);
    stream.avail_out = sizeof(chunk);
    ret = lzma_code(&stream, LZMA_FINISH);
    out.append(chunk, sizeof(chunk) - stream.avail_out);
  }
  lzma_end(&stream);
  if (ret != LZMA_STREAM_END) {
    return absl::DataLossError(absl::StrCat(path.string(), ": xz decode error ", ret));
  }
  return out;
}

}  // namespace ridge
