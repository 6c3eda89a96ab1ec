// Stop strings matched on generated text that arrives in pieces (one piece per token, say). Text
// that could still be the start of a stop string is held back until later pieces decide, so a
// match split across tokens is found and nothing after the match start is ever emitted. Stop
// strings are valid UTF-8 (JSON guarantees it), so a held-back suffix always begins at a
// character boundary and emitted text never ends inside a character the input did not split.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ridge {

class StopStringMatcher {
 public:
  explicit StopStringMatcher(std::vector<std::string> stops);

  // Appends `piece` and returns the text that is now final. On a match, returns the text
  // before the match and stopped() becomes true; later calls return "". With may_match false
  // (before a request's min_tokens) nothing matches: the text is final but for a suffix a match
  // may still start in, as vLLM checks only the text from there on.
  std::string Add(std::string_view piece, bool may_match = true);
  // The end of generation: returns the held-back text ("" after a match).
  std::string Flush();

  bool stopped() const { return stopped_; }
  const std::string& matched() const { return matched_; }  // the stop string that matched

 private:
  std::vector<std::string> stops_;
  std::string pending_;  // text in which a stop string may still start
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace ridge
