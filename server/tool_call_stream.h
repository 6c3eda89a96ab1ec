// Tool calls as they stream out of a chat reply: the pieces a call arrives in, and the scanner
// that cuts a constrained list of calls (tool_choice "required") into them as it is generated.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ridge {

// A tool call, or a piece of one while it streams: the piece that opens call `index` (the
// reply's calls are numbered from 0) has its id and name, and every later piece of it only more
// of its arguments' JSON text.
struct ToolCallPiece {
  int index = 0;
  std::string id = {};  // "chatcmpl-tool-" + 24 hex digits; empty after the opening piece
  std::string name = {};
  std::string arguments = {};  // JSON text (a part of it)
  bool opens_call() const { return !id.empty(); }
};

// A new call id, "chatcmpl-tool-" + 24 random hex digits, as vLLM makes them.
std::string NewToolCallId();

// Appends `text` to the arguments of call `index`: to the last piece when it is that call's,
// else as a new piece.
void AppendArguments(std::vector<ToolCallPiece>& pieces, int index, std::string_view text);

// Reads a JSON list of calls, [{"name": "...", "arguments": {...}}, ...], a piece of text at a
// time. A call opens once its "name" string is complete (arguments written before the name wait
// for it); its "arguments" value (any JSON value; an object when the output was constrained) then
// streams as it comes, exactly as written. A call whose object closes without arguments gets
// "{}". Anything else in the text (other keys, items that are not objects, text after the list)
// is skipped: the output was constrained to the list's schema, so there is none.
class CallListStream {
 public:
  // Reads `text`, appending to `out` the pieces of calls it opens or continues.
  void Add(std::string_view text, std::vector<ToolCallPiece>* out);
  int calls() const { return calls_; }

 private:
  enum class ValueKind { kContainer, kString, kLiteral };

  void Step(char c, std::vector<ToolCallPiece>* out);
  bool ClosesString(char c);  // inside a string: follows escapes; true when `c` ends it
  bool StepArguments(char c, std::vector<ToolCallPiece>* out);  // false: c ended a literal
  void StringEnded(std::vector<ToolCallPiece>* out);
  void Arguments(std::string_view text, std::vector<ToolCallPiece>* out);

  int depth_ = 0;  // containers open, the list's included: an item's keys are at depth 2
  bool in_string_ = false;
  bool escaped_ = false;
  std::string string_;  // the string being read outside the arguments, quotes included
  bool expecting_key_ = false;
  std::string key_;                  // the item's last key
  bool awaiting_arguments_ = false;  // after "arguments":, before its value's first character
  bool in_arguments_ = false;
  ValueKind arguments_kind_ = ValueKind::kContainer;
  bool item_has_arguments_ = false;
  bool item_open_ = false;      // the item's call has been opened (its name was complete)
  std::string held_arguments_;  // arguments read before the item's name
  int calls_ = 0;
};

}  // namespace ridge
