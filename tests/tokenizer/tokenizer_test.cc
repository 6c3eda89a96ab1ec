// Unit tests of the tokenizer module: UTF-8 handling, load-time errors, streaming decode,
// chat templates, metadata and thread safety. Identity with `tokenizers` on the full corpus is
// golden_test.cc.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "nlohmann/json.hpp"
#include "tokenizer/chat_template.h"
#include "tokenizer/incremental_decoder.h"
#include "tokenizer/utf8.h"

namespace ridge {
namespace {

const std::filesystem::path kDataDir = std::filesystem::path(RIDGE_TEST_DATA_DIR) / "tokenizer";

std::string ReadText(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::unique_ptr<Tokenizer> MustLoad(const std::string& name) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::Load(kDataDir / name);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

TEST(Utf8Test, ReplacesMaximalSubpartsLikePython) {
  // Expected values from Python: bytes.decode("utf-8", errors="replace").
  EXPECT_EQ(ReplaceInvalidUtf8("a\xFF"
                               "b"),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(ReplaceInvalidUtf8("\xE2\x82"), "\xEF\xBF\xBD");  // truncated: one U+FFFD
  EXPECT_EQ(
      ReplaceInvalidUtf8("\xED\xA0\x80"),
      std::string(3 * 3, 0).replace(0, 9, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"));  // surrogate
  EXPECT_EQ(ReplaceInvalidUtf8("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");             // overlong
  EXPECT_EQ(ReplaceInvalidUtf8("\xF0\x9F\x98"
                               "x"),
            "\xEF\xBF\xBD"
            "x");
  EXPECT_EQ(ReplaceInvalidUtf8("ok \xC3\xA9"), "ok \xC3\xA9");
  EXPECT_TRUE(IsValidUtf8("\xF0\x9F\xA4\x96"));
  EXPECT_FALSE(IsValidUtf8("\xF4\x90\x80\x80"));
}

TEST(Utf8Test, FindsIncompleteTail) {
  EXPECT_EQ(IncompleteUtf8TailLength("abc"), 0u);
  EXPECT_EQ(IncompleteUtf8TailLength("ab\xE4"), 1u);
  EXPECT_EQ(IncompleteUtf8TailLength("ab\xE4\xBD"), 2u);
  EXPECT_EQ(IncompleteUtf8TailLength("ab\xE4\xBD\xA0"), 0u);
  EXPECT_EQ(IncompleteUtf8TailLength("\xF0\x9F\xA4"), 3u);
  EXPECT_EQ(IncompleteUtf8TailLength("a\xFF"), 0u);  // invalid, not unfinished
}

TEST(TokenizerTest, Metadata) {
  auto gpt2 = MustLoad("gpt2");
  ASSERT_NE(gpt2, nullptr);
  EXPECT_EQ(gpt2->vocab_size(), 50257);
  EXPECT_EQ(gpt2->eos_id(), 50256);
  EXPECT_EQ(gpt2->bos_id(), 50256);
  EXPECT_EQ(gpt2->TokenToId("Hello"), 15496);
  EXPECT_EQ(gpt2->IdToToken(15496), "Hello");
  EXPECT_TRUE(gpt2->IsSpecial(50256));
  EXPECT_EQ(*gpt2->Encode("Hello world", true), (std::vector<int32_t>{15496, 995}));

  auto mistral = MustLoad("mistral_v1");
  ASSERT_NE(mistral, nullptr);
  EXPECT_EQ(mistral->vocab_size(), 32000);
  EXPECT_EQ(mistral->bos_id(), 1);
  EXPECT_EQ(mistral->eos_id(), 2);
  // Values from `tokenizers`: bos added, "<s>" in text is the special token.
  EXPECT_EQ(*mistral->Encode("Hello <s> world</s>x", true),
            (std::vector<int32_t>{1, 22557, 28705, 1, 28705, 1526, 2, 1318}));
  EXPECT_EQ(*mistral->Encode("", true), (std::vector<int32_t>{1}));
  EXPECT_EQ(*mistral->Decode(std::vector<int32_t>{22557, 1, 22557}, false), "Hello<s> Hello");

  auto qwen = MustLoad("qwen_style");
  ASSERT_NE(qwen, nullptr);
  EXPECT_EQ(qwen->bos_id(), std::nullopt);
  EXPECT_EQ(qwen->eos_id(), qwen->TokenToId("<|im_end|>"));
  // "[MASK]" strips the spaces to its left (lstrip); "<tool_call>" is not special.
  auto ids = *qwen->Encode("hi <tool_call> x  [MASK] y<|im_end|>", true);
  EXPECT_EQ(*qwen->Decode(ids, false), "hi <tool_call> x[MASK] y<|im_end|>");
  EXPECT_EQ(*qwen->Decode(ids, true), "hi <tool_call> x y");
}

TEST(TokenizerTest, RejectsInvalidUtf8Prompt) {
  auto gpt2 = MustLoad("gpt2");
  ASSERT_NE(gpt2, nullptr);
  absl::StatusOr<std::vector<int32_t>> ids = gpt2->Encode("ok \xC3 bad", false);
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(ids.status().message().find("not valid UTF-8"), std::string::npos);
  EXPECT_EQ(gpt2->Decode(std::vector<int32_t>{5, 999999}, false).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(gpt2->Decode(std::vector<int32_t>{-1}, false).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Loads the qwen_style tokenizer.json after `edit`, expecting an error mentioning `needle`.
void ExpectLoadError(const std::function<void(nlohmann::json&)>& edit, const std::string& needle) {
  nlohmann::json j = nlohmann::json::parse(ReadText(kDataDir / "qwen_style" / "tokenizer.json"));
  edit(j);
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::FromJson(j.dump(), "");
  ASSERT_FALSE(t.ok()) << "expected an error containing '" << needle << "'";
  EXPECT_NE(t.status().message().find(needle), std::string::npos) << t.status();
}

TEST(TokenizerTest, RejectsMalformedFiles) {
  EXPECT_FALSE(Tokenizer::FromJson("{not json", "").ok());
  EXPECT_FALSE(Tokenizer::FromJson("[1, 2]", "").ok());
  EXPECT_FALSE(Tokenizer::FromJson("{}", "").ok());
  EXPECT_EQ(Tokenizer::Load(kDataDir / "no_such_dir").status().code(), absl::StatusCode::kNotFound);
  ExpectLoadError([](auto& j) { j["model"]["type"] = "WordPiece"; },
                  "unsupported model type 'WordPiece'");
  ExpectLoadError([](auto& j) { j["model"]["type"] = "Unigram"; },
                  "unsupported model type 'Unigram'");
  ExpectLoadError([](auto& j) { j["model"]["vocab"] = 3; }, "vocab");
  ExpectLoadError([](auto& j) { j["model"]["vocab"]["x"] = "seven"; }, "no valid id");
  ExpectLoadError([](auto& j) { j["model"]["vocab"] = nlohmann::json::object(); },
                  "the vocabulary is empty");
  ExpectLoadError(
      [](auto& j) {
        const auto first = j["model"]["vocab"].begin();
        j["model"]["vocab"]["a duplicate"] = first.value();
      },
      "share the id");
  ExpectLoadError([](auto& j) { j["model"]["merges"][0] = "nospace"; }, "malformed merge");
  ExpectLoadError([](auto& j) { j["model"]["merges"][0] = "zzq\xC3\xA9 qq"; },
                  "not in the vocabulary");
  ExpectLoadError([](auto& j) { j["model"]["dropout"] = 0.1; }, "dropout");
  ExpectLoadError([](auto& j) { j["model"]["vocab"]["huge"] = 1 << 29; }, "only");
  ExpectLoadError([](auto& j) { j["model"]["unk_token"] = "<nope>"; }, "unk_token");
  ExpectLoadError(
      [](auto& j) {
        j["normalizer"] = {{"type", "Lowercase"}};
      },
      "unsupported normalizer type 'Lowercase'");
  ExpectLoadError([](auto& j) { j["normalizer"] = 5; }, "normalizer");
  ExpectLoadError(
      [](auto& j) {
        j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", "(unclosed"}};
      },
      "invalid regex");
  ExpectLoadError([](auto& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Sideways"; },
                  "Sideways");
  ExpectLoadError(
      [](auto& j) {
        j["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
      },
      "unsupported pre_tokenizer");
  ExpectLoadError([](auto& j) { j["decoder"] = {{"type", "WordPiece"}}; }, "unsupported decoder");
  ExpectLoadError(
      [](auto& j) {
        j["post_processor"] = {{"type", "Mystery"}};
      },
      "unsupported post_processor");
  // Found by tests/fuzz/tokenizer_fuzz: a special token that is not an object, and ids out of
  // range, once read through nlohmann's unchecked operator[].
  const auto template_with = [](nlohmann::json special) {
    return [special](auto& j) {
      j["post_processor"] = {{"type", "TemplateProcessing"},
                             {"single", {{{"SpecialToken", {{"id", "<s>"}}}}, {{"Sequence", {}}}}},
                             {"special_tokens", {{"<s>", special}}}};
    };
  };
  ExpectLoadError(template_with(5), "special_tokens.ids");
  ExpectLoadError(template_with({{"id", "<s>"}}), "special_tokens.ids");
  ExpectLoadError(template_with({{"ids", {-1}}}), "token ids in [0, 2^31)");
  ExpectLoadError(template_with({{"ids", {int64_t{1} << 40}}}), "token ids in [0, 2^31)");
  ExpectLoadError([](auto& j) { j["added_tokens"][0]["content"] = 7; }, "content");
  ExpectLoadError([](auto& j) { j["added_tokens"] = "x"; }, "added_tokens");
}

TEST(TokenizerTest, TruncatedFilesNeverCrash) {
  const std::string text = ReadText(kDataDir / "qwen_style" / "tokenizer.json");
  for (size_t cut = 0; cut < text.size(); cut += text.size() / 97 + 1) {
    EXPECT_FALSE(Tokenizer::FromJson(text.substr(0, cut), "").ok()) << cut;
  }
}

TEST(TokenizerTest, RejectsBadConfig) {
  const std::string tok = ReadText(kDataDir / "gpt2" / "tokenizer.json");
  EXPECT_FALSE(Tokenizer::FromJson(tok, "{").ok());
  EXPECT_FALSE(Tokenizer::FromJson(tok, R"({"bos_token": "<nope>"})").ok());
  EXPECT_FALSE(Tokenizer::FromJson(tok, R"({"add_bos_token": "yes"})").ok());
  EXPECT_FALSE(Tokenizer::FromJson(tok, R"({"chat_template": 3})").ok());
  EXPECT_TRUE(Tokenizer::FromJson(tok, R"({"bos_token": {"content": "<|endoftext|>"}})").ok());
}

TEST(TokenizerTest, EncodeIsThreadSafe) {
  auto qwen = MustLoad("qwen_style");
  ASSERT_NE(qwen, nullptr);
  std::vector<std::string> texts;
  for (int i = 0; i < 200; ++i) {
    texts.push_back("Document " + std::to_string(i) + ": naïve café 世界 " +
                    std::string(i % 7, ' ') + std::to_string(i * 7919));
  }
  std::vector<std::vector<int32_t>> expected;
  for (const auto& t : texts) expected.push_back(*qwen->Encode(t, true));
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      for (int round = 0; round < 20; ++round) {
        for (size_t i = 0; i < texts.size(); ++i) {
          const size_t j = (i * (k + 1) + round) % texts.size();
          if (*qwen->Encode(texts[j], true) != expected[j]) ++mismatches;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 0);
}

// Streams `ids` through an IncrementalDecoder and checks the pieces against Decode.
void ExpectStreamMatchesDecode(const Tokenizer& tokenizer, const std::vector<int32_t>& ids,
                               bool skip_special) {
  IncrementalDecoder decoder(tokenizer, skip_special);
  std::string streamed;
  for (int32_t id : ids) {
    absl::StatusOr<std::string> piece = decoder.Add(id);
    ASSERT_TRUE(piece.ok()) << piece.status();
    EXPECT_TRUE(IsValidUtf8(*piece));
    EXPECT_EQ(IncompleteUtf8TailLength(*piece), 0u);
    streamed += *piece;
  }
  absl::StatusOr<std::string> rest = decoder.Finish();
  ASSERT_TRUE(rest.ok());
  streamed += *rest;
  EXPECT_EQ(streamed, *tokenizer.Decode(ids, skip_special));
}

TEST(IncrementalDecoderTest, MatchesFullDecode) {
  const std::vector<std::string> texts = {
      "Hello world, this is streaming.",
      "Multi-byte: 你好，世界！ 🤖👨‍👩‍👧‍👦 ﬁ é ✓ 𝒜𝒷𝒸 𠀀",
      "  leading spaces and <s> specials </s> <|im_start|>user\nhi<|im_end|> [MASK] end ",
      "ᚠᛇᚻ ᛒᛦᚦ ⴰⵣⵓⵍ ꦲꦏ꧀ꦱꦫ  ",  // rare scripts: byte-level pieces and byte fallback
      "\t\n\r\n  \x01\x7f tail",
  };
  for (const std::string name : {"gpt2", "mistral_v1", "mistral_v1_metaspace", "qwen_style"}) {
    SCOPED_TRACE(name);
    auto tokenizer = MustLoad(name);
    ASSERT_NE(tokenizer, nullptr);
    for (const std::string& text : texts) {
      const std::vector<int32_t> ids = *tokenizer->Encode(text, true);
      ExpectStreamMatchesDecode(*tokenizer, ids, false);
      ExpectStreamMatchesDecode(*tokenizer, ids, true);
    }
  }
}

TEST(IncrementalDecoderTest, HoldsBackSplitCharacters) {
  auto mistral = MustLoad("mistral_v1");
  ASSERT_NE(mistral, nullptr);
  // "𠀀" is not in Mistral's vocabulary: four byte-fallback tokens.
  const std::vector<int32_t> ids = *mistral->Encode("a𠀀", false);
  ASSERT_GE(ids.size(), 5u);
  IncrementalDecoder decoder(*mistral, false);
  std::vector<std::string> pieces;
  for (int32_t id : ids) pieces.push_back(*decoder.Add(id));
  EXPECT_EQ(pieces[ids.size() - 4], "");
  EXPECT_EQ(pieces[ids.size() - 2], "");
  EXPECT_EQ(pieces.back(), "\xF0\xA0\x80\x80");
  EXPECT_EQ(*decoder.Finish(), "");

  // Unfinished bytes at the end come out as U+FFFD on Finish, like Decode.
  IncrementalDecoder partial(*mistral, false);
  EXPECT_EQ(*partial.Add(*mistral->TokenToId("<0xF0>")), "");
  EXPECT_EQ(*partial.Add(*mistral->TokenToId("<0xA0>")), "");
  EXPECT_EQ(*partial.Finish(), *mistral->Decode(std::vector<int32_t>{*mistral->TokenToId("<0xF0>"),
                                                                     *mistral->TokenToId("<0xA0>")},
                                                false));
  EXPECT_FALSE(partial.Add(123456).ok());
}

TEST(ChatTemplateTest, MatchesJinjaRendering) {
  const nlohmann::json golden = nlohmann::json::parse(ReadText(kDataDir / "chat_golden.json"));
  int rendered = 0;
  for (const auto& t : golden["templates"]) {
    const std::string name = t["name"];
    SCOPED_TRACE(name);
    absl::StatusOr<ChatTemplate> tmpl = ChatTemplate::FromSource(
        name, t["source"].get<std::string>(), {.bos_token = "<s>", .eos_token = "</s>"});
    ASSERT_TRUE(tmpl.ok()) << tmpl.status();
    for (const auto& c : t["cases"]) {
      ChatRenderInput input;
      input.messages = c["messages"];
      input.add_generation_prompt = c["add_generation_prompt"].get<bool>();
      absl::StatusOr<std::string> prompt = tmpl->Render(input);
      if (c["messages"].empty()) {  // as in transformers: nothing to render
        EXPECT_EQ(prompt.status().code(), absl::StatusCode::kInvalidArgument);
        continue;
      }
      ASSERT_TRUE(prompt.ok()) << prompt.status();
      EXPECT_EQ(*prompt, c["expected"].get<std::string>());
      ++rendered;
    }
  }
  EXPECT_GE(rendered, 50);
}

TEST(ChatTemplateTest, LoadsFromTokenizerConfig) {
  auto qwen = MustLoad("qwen_style");
  ASSERT_NE(qwen, nullptr);
  ASSERT_EQ(qwen->config().chat_templates.size(), 1u);
  absl::StatusOr<ChatTemplate> tmpl = LoadChatTemplate(qwen->config());
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  ChatRenderInput input;
  input.messages = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "Hi"}])");
  EXPECT_EQ(*tmpl->Render(input),
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(LoadChatTemplate(qwen->config(), "tool_use").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(LoadChatTemplate(MustLoad("gpt2")->config()).status().code(),
            absl::StatusCode::kNotFound);
  // Unsupported constructs fail when the template is loaded, with the line and column.
  EXPECT_EQ(
      ChatTemplate::FromSource("tool_use", "{{ messages }}\n{% include 'x' %}").status().message(),
      "chat template 'tool_use': cannot be loaded: line 2, column 4: unsupported statement "
      "'{% include %}' (supported: if, for, set, macro, call, filter, break, continue, "
      "generation)");
}

}  // namespace
}  // namespace ridge

namespace ridge {
namespace {

// Expected ids from `tokenizers` with the same edits to Mistral's file.
TEST(TokenizerTest, UnknownCharactersWithoutByteFallback) {
  nlohmann::json j = nlohmann::json::parse(ReadText(kDataDir / "mistral_v1" / "tokenizer.json"));
  j["model"]["byte_fallback"] = false;
  auto fused = Tokenizer::FromJson(j.dump(), "");
  ASSERT_TRUE(fused.ok()) << fused.status();
  EXPECT_EQ(*(*fused)->Encode("a𠀀𠀁b 𠀀 x", true),
            (std::vector<int32_t>{1, 264, 0, 28726, 28705, 0, 1318}));
  EXPECT_EQ(*(*fused)->Encode("ᚠᛇᚻ", true), (std::vector<int32_t>{1, 28705, 0}));
  j["model"]["fuse_unk"] = false;
  auto unfused = Tokenizer::FromJson(j.dump(), "");
  ASSERT_TRUE(unfused.ok()) << unfused.status();
  EXPECT_EQ(*(*unfused)->Encode("a𠀀𠀁b 𠀀 x", true),
            (std::vector<int32_t>{1, 264, 0, 0, 28726, 28705, 0, 1318}));
  EXPECT_EQ(*(*unfused)->Encode("ᚠᛇᚻ", true), (std::vector<int32_t>{1, 28705, 0, 0, 0}));
}

}  // namespace
}  // namespace ridge

namespace ridge {
namespace {

// Random bytes and random ids, as a fuzzer would send: errors are fine, crashes are not, and
// every text that comes out is valid UTF-8.
TEST(TokenizerTest, RandomInputNeverCrashes) {
  std::mt19937 rng(1234);
  const std::vector<std::string> fragments = {"<s>",
                                              "</s>",
                                              "<|im_start|>",
                                              "[MASK]",
                                              " ",
                                              "\n",
                                              "\xE4\xBD\xA0",
                                              "\xF0\x9F\xA4\x96",
                                              "\xC3",
                                              "\xFF",
                                              "a",
                                              "'s",
                                              "▁",
                                              "\r\n",
                                              "  ",
                                              "\xCC\x81"};
  for (const std::string name : {"gpt2", "mistral_v1", "mistral_v1_metaspace", "qwen_style"}) {
    SCOPED_TRACE(name);
    auto tokenizer = MustLoad(name);
    ASSERT_NE(tokenizer, nullptr);
    for (int round = 0; round < 300; ++round) {
      std::string text;
      const int parts = static_cast<int>(rng() % 40);
      for (int k = 0; k < parts; ++k) {
        if (rng() % 3 == 0) {
          text.push_back(static_cast<char>(rng() % 256));
        } else {
          text += fragments[rng() % fragments.size()];
        }
      }
      absl::StatusOr<std::vector<int32_t>> ids = tokenizer->Encode(text, rng() % 2 == 0);
      EXPECT_EQ(ids.ok(), IsValidUtf8(text));
      if (!ids.ok()) ids = tokenizer->Encode(ReplaceInvalidUtf8(text), true);
      ASSERT_TRUE(ids.ok()) << ids.status();

      std::vector<int32_t> random_ids;
      for (int k = 0; k < 20; ++k) {
        random_ids.push_back(static_cast<int32_t>(rng() % tokenizer->vocab_size()));
      }
      IncrementalDecoder stream(*tokenizer, rng() % 2 == 0);
      std::string streamed;
      for (int32_t id : random_ids) {
        absl::StatusOr<std::string> piece = stream.Add(id);
        ASSERT_TRUE(piece.ok()) << piece.status();
        EXPECT_TRUE(IsValidUtf8(*piece));
        streamed += *piece;
      }
      streamed += *stream.Finish();
      EXPECT_TRUE(IsValidUtf8(streamed));
      absl::StatusOr<std::string> decoded = tokenizer->Decode(random_ids, false);
      ASSERT_TRUE(decoded.ok());
      EXPECT_TRUE(IsValidUtf8(*decoded));
    }
  }
}

}  // namespace
}  // namespace ridge

namespace ridge {
namespace {

// TokenBytes is what a token adds to the decoded text after the first token: the text of
// [first, ids...] is the first token's text followed by the ids' bytes whenever those bytes are
// whole characters (so that Decode replaces nothing). Byte tokens give their raw byte.
TEST(TokenizerTest, TokenBytesAreWhatATokenAddsToTheText) {
  std::mt19937 rng(99);
  for (const std::string name : {"gpt2", "mistral_v1", "mistral_v1_metaspace", "qwen_style"}) {
    SCOPED_TRACE(name);
    auto tokenizer = MustLoad(name);
    ASSERT_NE(tokenizer, nullptr);
    auto plain_id = [&] {
      while (true) {
        const auto id = static_cast<int32_t>(rng() % tokenizer->vocab_size());
        if (!tokenizer->IsSpecial(id)) return id;
      }
    };
    int checked = 0;
    for (int round = 0; round < 3000; ++round) {
      std::vector<int32_t> ids = {plain_id()};
      std::string tail;
      const int more = 1 + static_cast<int>(rng() % 5);
      for (int k = 0; k < more; ++k) {
        ids.push_back(plain_id());
        tail += tokenizer->TokenBytes(ids.back());
      }
      const std::string first = *tokenizer->Decode({ids.data(), 1}, false);
      if (!IsValidUtf8(tail) || !IsValidUtf8(tokenizer->TokenBytes(ids[0]))) continue;
      ASSERT_EQ(*tokenizer->Decode(ids, false), first + tail) << "ids from " << ids[1];
      ++checked;
    }
    EXPECT_GT(checked, 1000);
  }
  auto mistral = MustLoad("mistral_v1");
  ASSERT_NE(mistral, nullptr);
  EXPECT_EQ(mistral->TokenBytes(*mistral->TokenToId("<0xE2>")), "\xE2");
  EXPECT_EQ(mistral->TokenBytes(*mistral->TokenToId("\u2581the")), " the");
  EXPECT_EQ(mistral->TokenBytes(*mistral->TokenToId("</s>")), "</s>");
  auto gpt2 = MustLoad("gpt2");
  ASSERT_NE(gpt2, nullptr);
  EXPECT_EQ(gpt2->TokenBytes(*gpt2->TokenToId("\u0120the")), " the");
  EXPECT_EQ(gpt2->TokenBytes(*gpt2->TokenToId("\u00e2")), "\xE2");  // half of a character
  EXPECT_EQ(gpt2->TokenBytes(-1), "");
  // An added token goes through the decoder as Decode sends it: one spelled in the byte-level
  // alphabet gives those bytes ("\u010a" is the newline).
  nlohmann::json with_added = nlohmann::json::parse(ReadText(kDataDir / "gpt2" / "tokenizer.json"));
  with_added["added_tokens"].push_back({{"id", 50257},
                                        {"content", "\u010a"},
                                        {"single_word", false},
                                        {"lstrip", false},
                                        {"rstrip", false},
                                        {"normalized", false},
                                        {"special", false}});
  auto added = Tokenizer::FromJson(with_added.dump(), "");
  ASSERT_TRUE(added.ok()) << added.status();
  EXPECT_EQ((*added)->TokenBytes(50257), "\n");
  const std::vector<int32_t> ids = {*gpt2->TokenToId("a"), 50257};
  EXPECT_EQ(*(*added)->Decode(ids, false), "a\n");
}

}  // namespace
}  // namespace ridge
