// HTTP routes of saved sessions (extension, not OpenAI's): GET /v1/sessions lists them,
// DELETE /v1/sessions/{id} forgets one, POST /v1/sessions/{id}/save writes it to the server's
// --session-dir and POST /v1/sessions/{id}/load reads it back (also after a restart). Errors are
// OpenAI-style bodies (404 no such session or file, 400 in use / no --session-dir / a file of
// another model or backend, 413 past the model's context, 422 a damaged file, 429 no room).
#pragma once

#include "server/generation_backend.h"

namespace httplib {
class Server;
}

namespace ridge {

void RegisterSessionRoutes(httplib::Server& server, GenerationBackend* backend);

}  // namespace ridge
