#include "server/session_routes.h"

#include <httplib.h>

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

void Reply(httplib::Response& response, const absl::StatusOr<SessionInfo>& result) {
  const int code = result.ok() ? 200 : HttpStatusFor(result.status());
  const nlohmann::ordered_json body =
      result.ok() ? SessionJson(*result) : ErrorBody(result.status());
  response.status = code;
  response.set_content(body.dump(), "application/json");
}

}  // namespace

void RegisterSessionRoutes(httplib::Server& server, GenerationBackend* backend) {
  server.Get("/v1/sessions", [backend](const httplib::Request&, httplib::Response& response) {
    nlohmann::ordered_json data = nlohmann::ordered_json::array();
    for (const SessionInfo& s : backend->ListSessions()) data.push_back(SessionJson(s));
    const nlohmann::ordered_json body = {{"object", "list"}, {"data", std::move(data)}};
    response.set_content(body.dump(), "application/json");
  });
  server.Delete(R"(/v1/sessions/([^/]+))",
                [backend](const httplib::Request& request, httplib::Response& response) {
                  const std::string id = request.matches[1];
                  const absl::Status status = backend->DeleteSession(id);
                  Reply(response, status.ok() ? absl::StatusOr<SessionInfo>(SessionInfo{.id = id})
                                              : absl::StatusOr<SessionInfo>(status));
                });
  server.Post(R"(/v1/sessions/([^/]+)/save)",
              [backend](const httplib::Request& request, httplib::Response& response) {
                Reply(response, backend->SaveSession(request.matches[1]));
              });
  server.Post(R"(/v1/sessions/([^/]+)/load)",
              [backend](const httplib::Request& request, httplib::Response& response) {
                Reply(response, backend->LoadSession(request.matches[1]));
              });
}

}  // namespace ridge
