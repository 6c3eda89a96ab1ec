#include "server/stop_matcher.h"

#include <gtest/gtest.h>

#include "server/output_assembler.h"
#include "tests/server/tiny_tokenizer.h"

namespace ridge {
namespace {

// Feeds `pieces` and returns everything emitted (Flush included unless stopped).
std::string Feed(StopStringMatcher& m, const std::vector<std::string>& pieces) {
  std::string out;
  for (const auto& p : pieces) out += m.Add(p);
  out += m.Flush();
  return out;
}

TEST(StopStringMatcherTest, NoStopsPassesEverythingThrough) {
  StopStringMatcher m({});
  EXPECT_EQ(m.Add("abc"), "abc");
  EXPECT_FALSE(m.stopped());
}

TEST(StopStringMatcherTest, MatchInsideOnePiece) {
  StopStringMatcher m({"STOP"});
  EXPECT_EQ(Feed(m, {"hello STOP world"}), "hello ");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.matched(), "STOP");
  EXPECT_EQ(m.Add("more"), "");
}

// Before min_tokens nothing matches, but a suffix that may begin a match is held: a match that
// ends in the first piece that may match counts, one wholly before it does not (vLLM's check).
TEST(StopStringMatcherTest, NoMatchWhileNotAllowed) {
  StopStringMatcher m({"STOP"});
  EXPECT_EQ(m.Add("a STOP b ST", /*may_match=*/false), "a STOP b ");
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.Add("OP c", /*may_match=*/true), "");
  EXPECT_TRUE(m.stopped());
  StopStringMatcher late({"STOP"});
  EXPECT_EQ(late.Add("STOP", false), "STOP");
  EXPECT_EQ(late.Add(" x", true), " x");
  EXPECT_FALSE(late.stopped());
}

TEST(StopStringMatcherTest, MatchSplitAcrossPiecesIsHeldBackThenCut) {
  StopStringMatcher m({"world"});
  EXPECT_EQ(m.Add("hello w"), "hello ");  // "w" could start "world"
  EXPECT_EQ(m.Add("or"), "");
  EXPECT_EQ(m.Add("ld!"), "");
  EXPECT_TRUE(m.stopped());
}

TEST(StopStringMatcherTest, FalseStartIsReleased) {
  StopStringMatcher m({"world"});
  EXPECT_EQ(m.Add("hello wo"), "hello ");
  EXPECT_EQ(m.Add("nder"), "wonder");
  EXPECT_EQ(m.Flush(), "");
  EXPECT_FALSE(m.stopped());
}

TEST(StopStringMatcherTest, HeldBackTextIsFlushedAtTheEnd) {
  StopStringMatcher m({"abc"});
  EXPECT_EQ(Feed(m, {"xa", "b"}), "xab");
  EXPECT_FALSE(m.stopped());
}

TEST(StopStringMatcherTest, EarliestMatchAmongSeveralWins) {
  StopStringMatcher m({"cd", "b"});
  EXPECT_EQ(Feed(m, {"a", "bcd"}), "a");
  EXPECT_EQ(m.matched(), "b");
}

TEST(StopStringMatcherTest, OverlappingPrefixes) {
  StopStringMatcher m({"aab"});
  EXPECT_EQ(Feed(m, {"a", "a", "a", "b", "c"}), "a");
  EXPECT_TRUE(m.stopped());
}

TEST(StopStringMatcherTest, Utf8StopSplitAcrossPiecesNeverEmitsHalfACharacter) {
  // "é" is C3 A9, "日本" is E6 97 A5 E6 9C AC; pieces arrive as whole characters.
  StopStringMatcher m({"日本"});
  std::string out;
  out += m.Add("caf\xC3\xA9 ");
  out += m.Add("\xE6\x97\xA5");  // 日: could start the stop string, held back
  EXPECT_EQ(out, "caf\xC3\xA9 ");
  out += m.Add("\xE6\x9C\xAC");  // 本: match
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(out, "caf\xC3\xA9 ");
}

TEST(StopStringMatcherTest, Utf8FalseStartReleasesWholeCharacters) {
  StopStringMatcher m({"日本"});
  std::string out = m.Add("\xE6\x97\xA5");
  EXPECT_EQ(out, "");
  out += m.Add("\xE6\x9C\x88");  // 月: not the stop string
  EXPECT_EQ(out, "\xE6\x97\xA5\xE6\x9C\x88");
}

TEST(StopStringMatcherTest, StopAtTheVeryStart) {
  StopStringMatcher m({"x"});
  EXPECT_EQ(Feed(m, {"xyz"}), "");
  EXPECT_TRUE(m.stopped());
}

}  // namespace
}  // namespace ridge

namespace ridge {
namespace {

RequestEvent Tokens(const std::string& bytes, std::vector<int32_t> extra = {}) {
  RequestEvent e;
  for (unsigned char c : bytes) e.tokens.push_back(testing::TinyTokenId(c));
  e.tokens.insert(e.tokens.end(), extra.begin(), extra.end());
  return e;
}

TEST(OutputAssemblerTest, HoldsBackSplitCharactersAndSkipsIdsWithoutText) {
  auto tokenizer = *Tokenizer::FromJson(testing::TinyTokenizerJson().dump(), "");
  OutputAssembler a(tokenizer.get(), {});
  EXPECT_EQ(a.Add(Tokens("caf\xC3"))->text, "caf");           // half of "é"
  EXPECT_EQ(a.Add(Tokens("\xA9", {400}))->text, "\xC3\xA9");  // 400: beyond the tokenizer
  EXPECT_EQ(a.tokens_consumed(), 6);
  EXPECT_EQ(a.Finish()->text, "");
}

TEST(OutputAssemblerTest, StopStringAcrossEventsDropsTheRest) {
  auto tokenizer = *Tokenizer::FromJson(testing::TinyTokenizerJson().dump(), "");
  OutputAssembler a(tokenizer.get(), {"lo w"});
  auto first = a.Add(Tokens("Hello"));
  EXPECT_EQ(first->text, "Hel");
  auto second = a.Add(Tokens(" world"));
  EXPECT_EQ(second->text, "");
  EXPECT_EQ(second->tokens.size(), 2u);  // " " and "w" completed the match; the rest is dropped
  EXPECT_TRUE(a.stopped());
  EXPECT_EQ(a.tokens_consumed(), 7);
  EXPECT_EQ(a.Finish()->text, "");
}

// min_tokens: a stop string matches only once that many tokens are out, counting the token that
// completes it (one byte a token here).
TEST(OutputAssemblerTest, StopStringsWaitForMinTokens) {
  auto tokenizer = *Tokenizer::FromJson(testing::TinyTokenizerJson().dump(), "");
  OutputAssembler early(tokenizer.get(), {"ab"}, true, /*min_tokens=*/3);
  EXPECT_EQ(early.Add(Tokens("abxab"))->text, "abx");  // the first "ab" ends at token 2
  EXPECT_TRUE(early.stopped());
  OutputAssembler spanning(tokenizer.get(), {"ab"}, true, /*min_tokens=*/3);
  EXPECT_EQ(spanning.Add(Tokens("xab"))->text, "x");  // "ab" ends at token 3
  EXPECT_TRUE(spanning.stopped());
  OutputAssembler later(tokenizer.get(), {"ab"}, true, /*min_tokens=*/4);
  EXPECT_EQ(later.Add(Tokens("xab"))->text, "xab");
  EXPECT_FALSE(later.stopped());
}

}  // namespace
}  // namespace ridge
