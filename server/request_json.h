// Reading a request's JSON body: a field that may be absent, and a value quoted (shortened) in
// an error message. Shared by the parsers of the OpenAI routes (internal to the HTTP library).
#pragma once

#include <string>

#include "nlohmann/json.hpp"

namespace ridge {

// The field's value, or nullptr when it is absent or null.
inline const nlohmann::ordered_json* Field(const nlohmann::ordered_json& object,
                                           const std::string& name) {
  const auto it = object.find(name);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

// `value` as compact JSON of at most 40 bytes (longer text ends in "..."), for error messages;
// bytes that are not UTF-8 are replaced rather than thrown on.
inline std::string Describe(const nlohmann::ordered_json& value) {
  std::string text = value.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return text;
}

}  // namespace ridge
