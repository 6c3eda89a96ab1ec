#include "server/stop_matcher.h"

#include <gtest/gtest.h>

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
