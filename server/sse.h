// Server-sent events as the OpenAI API streams them: `data: {json}\n\n` per chunk and a final
// `data: [DONE]\n\n`; and a small incremental parser for clients and tests.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "nlohmann/json.hpp"

namespace ridge {

inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

// One event carrying `payload` as compact JSON (which never contains a newline).
std::string SseEvent(const nlohmann::ordered_json& payload);

// Splits a byte stream into events and returns each event's data (lines joined by "\n", as the
// SSE specification says). Comment lines (":...") and other fields are skipped.
class SseParser {
 public:
  // Feeds bytes; returns the data of every event completed by them.
  std::vector<std::string> Feed(std::string_view bytes);

 private:
  std::string buffer_;
  std::string data_;
  bool has_data_ = false;
};

}  // namespace ridge
