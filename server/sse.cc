#include "server/sse.h"

namespace ridge {

std::string SseEvent(const nlohmann::ordered_json& payload) {
  // error_handler::replace: generated text is valid UTF-8, but never let a stray byte abort a
  // stream.
  return "data: " + payload.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) +
         "\n\n";
}

std::vector<std::string> SseParser::Feed(std::string_view bytes) {
  buffer_.append(bytes);
  std::vector<std::string> events;
  size_t start = 0;
  for (size_t nl; (nl = buffer_.find('\n', start)) != std::string::npos; start = nl + 1) {
    std::string_view line(buffer_.data() + start, nl - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) {  // end of an event
      if (has_data_) events.push_back(std::move(data_));
      data_.clear();
      has_data_ = false;
    } else if (line.starts_with("data:")) {
      line.remove_prefix(5);
      if (line.starts_with(" ")) line.remove_prefix(1);
      if (has_data_) data_ += '\n';
      data_.append(line);
      has_data_ = true;
    }
  }
  buffer_.erase(0, start);
  return events;
}

}  // namespace ridge
