// HTTP client helpers for the server tests: JSON posts and SSE streams over httplib::Client.
#pragma once

#include <httplib.h>

#include <functional>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "server/sse.h"

namespace ridge::testing {

struct JsonReply {
  int status = 0;  // 0: no response (connection failed)
  nlohmann::json body;
};

inline JsonReply PostJson(httplib::Client& client, const std::string& path,
                          const nlohmann::json& body) {
  auto result = client.Post(path.c_str(), body.dump(), "application/json");
  if (!result) return {0, "[client error: " + httplib::to_string(result.error()) + "]"};
  nlohmann::json parsed = nlohmann::json::parse(result->body, nullptr, false);
  return {result->status, parsed.is_discarded() ? nlohmann::json(result->body) : parsed};
}

struct StreamReply {
  int status = 0;
  std::vector<nlohmann::json> chunks;  // every data event but [DONE], parsed
  bool done = false;                   // saw data: [DONE]
  std::string raw;
  bool aborted = false;  // on_chunk returned false
};

// Posts `body` and parses the SSE response. `on_chunk` (optional) sees each chunk as it
// arrives; returning false closes the connection.
inline StreamReply PostStream(httplib::Client& client, const std::string& path,
                              const nlohmann::json& body,
                              std::function<bool(const nlohmann::json&)> on_chunk = nullptr) {
  StreamReply reply;
  SseParser parser;
  httplib::Request request;
  request.method = "POST";
  request.path = path;
  request.body = body.dump();
  request.set_header("Content-Type", "application/json");
  request.set_header("Accept", "text/event-stream");
  request.content_receiver = [&](const char* data, size_t length, uint64_t, uint64_t) {
    reply.raw.append(data, length);
    for (const std::string& event : parser.Feed(std::string_view(data, length))) {
      if (event == "[DONE]") {
        reply.done = true;
        continue;
      }
      reply.chunks.push_back(nlohmann::json::parse(event, nullptr, false));
      if (on_chunk && !on_chunk(reply.chunks.back())) {
        reply.aborted = true;
        return false;
      }
    }
    return true;
  };
  auto result = client.send(request);
  if (result) {
    reply.status = result->status;
    if (reply.raw.empty()) reply.raw = result->body;
  } else if (!reply.aborted) {
    reply.raw += "[client error: " + httplib::to_string(result.error()) + "]";
  }
  return reply;
}

// The text of a stream: completion "text" or chat "delta.content" concatenated.
inline std::string StreamText(const StreamReply& reply) {
  std::string text;
  for (const auto& chunk : reply.chunks) {
    if (!chunk.contains("choices")) continue;
    for (const auto& choice : chunk["choices"]) {
      if (choice.contains("text")) text += choice["text"].get<std::string>();
      if (choice.contains("delta") && choice["delta"].contains("content") &&
          choice["delta"]["content"].is_string()) {
        text += choice["delta"]["content"].get<std::string>();
      }
    }
  }
  return text;
}

}  // namespace ridge::testing
