// HTTP routes of saved sessions (extension, not OpenAI's): GET /v1/sessions lists them,
// DELETE /v1/sessions/{id} forgets one, POST /v1/sessions/{id}/save writes it to the server's
// --session-dir and POST /v1/sessions/{id}/load reads it back (also after a restart). Errors are
// OpenAI-style bodies (404 no such session or file, 400 in use / no --session-dir / a file of
// another model or backend, 413 past the model's context, 422 a damaged file, 429 no room).
#pragma once

#include <string>

#include "server/generation_backend.h"
#include "server/http_transport.h"

namespace ridge {

// The session route `method path` names, or a route without a handler when there is none: then
// `*allowed` is the method the path takes (a wrong method), or empty (no such path).
HttpRoute::Handler SessionRoute(GenerationBackend* backend, const std::string& method,
                                const std::string& path, std::string* allowed);

}  // namespace ridge
