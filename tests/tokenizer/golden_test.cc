// Encodes the whole test corpus (~10 MB, tests/data/tokenizer/corpus.bin.xz) with each committed
// tokenizer and compares with what Hugging Face's `tokenizers` produced
// (tools/reference/make_golden.py): every id for a subset, an FNV-1a hash per document for the
// rest, and the decoded text (with and without special tokens) for every document.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/tokenizer/xz_file.h"
#include "tokenizer/incremental_decoder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace ridge {
namespace {

const std::filesystem::path kDataDir = std::filesystem::path(RIDGE_TEST_DATA_DIR) / "tokenizer";

uint64_t Fnv1a(const void* data, size_t size) {
  uint64_t h = 0xCBF29CE484222325ull;
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < size; ++i) h = (h ^ p[i]) * 0x100000001B3ull;
  return h;
}

uint64_t HashIds(const std::vector<int32_t>& ids) {
  std::vector<uint32_t> le(ids.begin(), ids.end());  // the golden hashes u32 little-endian
  return Fnv1a(le.data(), le.size() * sizeof(uint32_t));
}

// Reads little-endian fields; running past the end is a test failure, never a crash.
class Reader {
 public:
  explicit Reader(const std::string& data) : data_(data) {}
  template <typename T>
  T Get() {
    T v{};
    if (!Available(sizeof(T))) return v;
    std::memcpy(&v, data_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string Bytes(size_t n) {
    if (!Available(n)) return std::string();
    std::string s = data_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  bool done() const { return pos_ == data_.size(); }

 private:
  bool Available(size_t n) {
    if (n <= data_.size() - pos_) return true;
    ADD_FAILURE() << "truncated file";
    pos_ = data_.size();
    return false;
  }
  const std::string& data_;
  size_t pos_ = 0;
};

std::vector<std::string> LoadCorpus() {
  absl::StatusOr<std::string> data = ReadXzFile(kDataDir / "corpus.bin.xz");
  EXPECT_TRUE(data.ok()) << data.status();
  if (!data.ok()) return {};
  Reader r(*data);
  EXPECT_EQ(r.Bytes(4), "RTKC");
  const auto n = r.Get<uint32_t>();
  std::vector<std::string> docs;
  for (uint32_t i = 0; i < n; ++i) docs.push_back(r.Bytes(r.Get<uint32_t>()));
  EXPECT_TRUE(r.done());
  return docs;
}

const std::vector<std::string>& Corpus() {
  static const auto* const corpus = new std::vector<std::string>(LoadCorpus());
  return *corpus;
}

class GoldenTest : public testing::TestWithParam<std::string> {};

TEST_P(GoldenTest, MatchesHuggingFaceTokenizers) {
  const std::string name = GetParam();
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::Load(kDataDir / name);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  absl::StatusOr<std::string> golden = ReadXzFile(kDataDir / ("golden_" + name + ".bin.xz"));
  ASSERT_TRUE(golden.ok()) << golden.status();
  const std::vector<std::string>& corpus = Corpus();
  ASSERT_GE(corpus.size(), 1000u);

  Reader r(*golden);
  ASSERT_EQ(r.Bytes(4), "RTKG");
  ASSERT_EQ(r.Get<uint32_t>(), 1u);
  ASSERT_EQ(r.Get<uint32_t>(), corpus.size());
  size_t id_mismatches = 0, decode_mismatches = 0, full_docs = 0, total_ids = 0;
  for (size_t i = 0; i < corpus.size(); ++i) {
    const auto flags = r.Get<uint8_t>();
    const auto count = r.Get<uint32_t>();
    const auto ids_hash = r.Get<uint64_t>();
    const auto decode_hash = r.Get<uint64_t>();
    const auto decode_skip_hash = r.Get<uint64_t>();
    std::vector<int32_t> expected;
    if (flags & 2) {
      for (uint32_t k = 0; k < count; ++k)
        expected.push_back(static_cast<int32_t>(r.Get<uint32_t>()));
      ++full_docs;
    }
    const bool add_special = flags & 1;
    std::string text = corpus[i];
    if (flags & 4) {
      // Invalid UTF-8 is an error, and the cleaned text is what Python tokenized.
      EXPECT_FALSE((*tokenizer)->Encode(text, add_special).ok()) << "document " << i;
      text = ReplaceInvalidUtf8(text);
    } else {
      ASSERT_TRUE(IsValidUtf8(text)) << "document " << i;
    }
    absl::StatusOr<std::vector<int32_t>> ids = (*tokenizer)->Encode(text, add_special);
    ASSERT_TRUE(ids.ok()) << ids.status();
    total_ids += ids->size();
    if (flags & 2) {
      if (*ids != expected) {
        ++id_mismatches;
        size_t k = 0;
        while (k < ids->size() && k < expected.size() && (*ids)[k] == expected[k]) ++k;
        ADD_FAILURE() << name << " document " << i << ": first differing id at " << k << " of "
                      << expected.size() << " (got " << ids->size() << " ids)";
      }
    } else if (ids->size() != count || HashIds(*ids) != ids_hash) {
      ++id_mismatches;
      ADD_FAILURE() << name << " document " << i << ": ids differ (" << ids->size() << " vs "
                    << count << ")";
    }
    absl::StatusOr<std::string> decoded = (*tokenizer)->Decode(*ids, false);
    absl::StatusOr<std::string> decoded_skip = (*tokenizer)->Decode(*ids, true);
    ASSERT_TRUE(decoded.ok() && decoded_skip.ok());
    if (Fnv1a(decoded->data(), decoded->size()) != decode_hash ||
        Fnv1a(decoded_skip->data(), decoded_skip->size()) != decode_skip_hash) {
      ++decode_mismatches;
      ADD_FAILURE() << name << " document " << i << ": decoded text differs";
    }
    if ((flags & 2) && i % 8 == 0) {
      // Streaming the same ids must give the same text, piece by piece.
      IncrementalDecoder stream(**tokenizer, /*skip_special_tokens=*/false);
      std::string streamed;
      for (int32_t id : *ids) streamed += *stream.Add(id);
      streamed += *stream.Finish();
      if (streamed != *decoded) {
        ++decode_mismatches;
        ADD_FAILURE() << name << " document " << i << ": streamed text differs from Decode";
      }
    }
    if (id_mismatches + decode_mismatches > 20) FAIL() << "too many mismatches, stopping";
  }
  EXPECT_TRUE(r.done());
  EXPECT_EQ(id_mismatches, 0u);
  EXPECT_EQ(decode_mismatches, 0u);
  EXPECT_GT(full_docs, 50u);
  std::printf("%s: %zu documents, %zu ids, %zu with full ids\n", name.c_str(), corpus.size(),
              total_ids, full_docs);
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, GoldenTest,
                         testing::Values("gpt2", "mistral_v1", "mistral_v1_metaspace",
                                         "qwen_style"));

}  // namespace
}  // namespace ridge
