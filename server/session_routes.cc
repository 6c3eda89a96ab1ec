#include "server/session_routes.h"

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "server/api_error.h"

namespace ridge {
namespace {

nlohmann::ordered_json SessionJson(const SessionInfo& s) {
  nlohmann::ordered_json out = {
      {"id", s.id}, {"object", "session"}, {"tokens", s.tokens}, {"in_use", s.in_use}};
  if (!s.path.empty()) out["path"] = s.path;
  return out;
}

HttpReply Reply(const absl::StatusOr<SessionInfo>& result) {
  return result.ok() ? JsonReply(200, SessionJson(*result)) : ErrorReply(result.status());
}

}  // namespace

HttpRoute::Handler SessionRoute(GenerationBackend* backend, const std::string& method,
                                const std::string& path, std::string* allowed) {
  allowed->clear();
  if (path == "/v1/sessions") {
    if (method != "GET" && method != "HEAD") {
      *allowed = "GET";
      return nullptr;
    }
    return [backend](const HttpRequest&, const HttpWake&) -> HttpResult {
      nlohmann::ordered_json data = nlohmann::ordered_json::array();
      for (const SessionInfo& s : backend->ListSessions()) data.push_back(SessionJson(s));
      return JsonReply(200, {{"object", "list"}, {"data", std::move(data)}});
    };
  }
  if (!absl::StartsWith(path, "/v1/sessions/")) return nullptr;
  // /v1/sessions/{id} and /v1/sessions/{id}/{save,load}; an id is one non-empty segment.
  const std::vector<std::string> parts =
      absl::StrSplit(path.substr(std::string("/v1/sessions/").size()), '/');
  if (parts.empty() || parts[0].empty() || parts.size() > 2) return nullptr;
  const std::string id = parts[0];
  if (parts.size() == 1) {
    if (method != "DELETE") {
      *allowed = "DELETE";
      return nullptr;
    }
    return [backend, id](const HttpRequest&, const HttpWake&) -> HttpResult {
      const absl::Status status = backend->DeleteSession(id);
      return Reply(status.ok() ? absl::StatusOr<SessionInfo>(SessionInfo{.id = id})
                               : absl::StatusOr<SessionInfo>(status));
    };
  }
  const bool save = parts[1] == "save";
  if (!save && parts[1] != "load") return nullptr;
  if (method != "POST") {
    *allowed = "POST";
    return nullptr;
  }
  return [backend, id, save](const HttpRequest&, const HttpWake&) -> HttpResult {
    return Reply(save ? backend->SaveSession(id) : backend->LoadSession(id));
  };
}

}  // namespace ridge
