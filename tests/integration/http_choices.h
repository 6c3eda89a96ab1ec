// Each choice's text and finish_reason from a completions or chat request, unary or streamed
// (the chunks' pieces joined): what the JSON-mode tests check.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "tests/server/http_test_client.h"

namespace ridge::testing {

struct Choices {
  int status = 0;
  std::string raw;                    // the reply's body, for messages
  std::map<int, std::string> texts;   // by index
  std::map<int, std::string> finish;  // finish_reason by index
};

inline Choices PostForChoices(httplib::Client& client, const std::string& path,
                              const nlohmann::json& body) {
  using nlohmann::json;
  const bool completions = path == "/v1/completions";
  Choices out;
  if (body.value("stream", false)) {
    const auto r = PostStream(client, path, body);
    out.status = r.status;
    out.raw = r.raw;
    for (const auto& chunk : r.chunks) {
      for (const auto& c : chunk.value("choices", json::array())) {
        const int i = c.at("index");
        // (A chunk's delta may lack "content"; at() rather than a const operator[].)
        const json piece = completions ? c.value("text", json())
                                       : c.value("delta", json::object()).value("content", json());
        if (piece.is_string()) out.texts[i] += piece.get<std::string>();
        if (c.value("finish_reason", json()).is_string()) out.finish[i] = c.at("finish_reason");
      }
    }
    return out;
  }
  const auto r = PostJson(client, path, body);
  out.status = r.status;
  out.raw = r.body.dump();
  if (r.status != 200) return out;
  for (const auto& c : r.body.at("choices")) {
    const int i = c.at("index");
    out.texts[i] = completions ? c.at("text") : c.at("message").at("content");
    out.finish[i] = c.at("finish_reason");
  }
  return out;
}

}  // namespace ridge::testing
