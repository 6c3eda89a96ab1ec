#include "server/chat_request.h"

#include "absl/strings/str_cat.h"
#include "base/json_nesting.h"
#include "base/status_macros.h"
#include "server/api_error.h"
#include "server/request_json.h"

namespace ridge {
namespace {

using json = nlohmann::ordered_json;

absl::Status Invalid(const char* param, const std::string& message) {
  return WithParam(absl::InvalidArgumentError(message), param);
}

// A string, or an array of {"type": "text", "text": ...} parts joined with newlines (as vLLM
// hands text parts to templates that expect a string).
absl::StatusOr<std::string> ReadContent(const json& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) {
    return Invalid("messages",
                   absl::StrCat(where, " must be a string or an array of text parts, got ",
                                Describe(content)));
  }
  std::string text;
  for (size_t j = 0; j < content.size(); ++j) {
    const json& part = content[j];
    const json* type = part.is_object() ? Field(part, "type") : nullptr;
    const json* part_text = part.is_object() ? Field(part, "text") : nullptr;
    if (type == nullptr || !type->is_string() || type->get<std::string>() != "text" ||
        part_text == nullptr || !part_text->is_string()) {
      return Invalid("messages",
                     absl::StrCat(where, "[", j,
                                  "] must be {\"type\": \"text\", \"text\": \"...\"}: only text "
                                  "parts are supported, got ",
                                  Describe(part)));
    }
    if (j > 0) text += "\n";
    text += part_text->get<std::string>();
  }
  return text;
}

absl::StatusOr<json> ReadToolCalls(const json& calls, const std::string& where) {
  if (!calls.is_array()) {
    return Invalid("messages", absl::StrCat(where, " must be an array, got ", Describe(calls)));
  }
  json out = json::array();
  for (size_t j = 0; j < calls.size(); ++j) {
    const std::string at = absl::StrCat(where, "[", j, "]");
    const json& call = calls[j];
    const json* function = call.is_object() ? Field(call, "function") : nullptr;
    const json* name =
        function != nullptr && function->is_object() ? Field(*function, "name") : nullptr;
    if (name == nullptr || !name->is_string() || name->get<std::string>().empty()) {
      return Invalid("messages", absl::StrCat(at,
                                              " must be {\"id\", \"type\": \"function\", "
                                              "\"function\": {\"name\", \"arguments\"}}, got ",
                                              Describe(call)));
    }
    if (const json* type = Field(call, "type");
        type != nullptr && (!type->is_string() || type->get<std::string>() != "function")) {
      return Invalid("messages", absl::StrCat(at, ".type must be \"function\""));
    }
    const json* id = Field(call, "id");
    if (id != nullptr && !id->is_string()) {
      return Invalid("messages", absl::StrCat(at, ".id must be a string"));
    }
    // Templates index into the arguments, so a JSON string becomes the object it holds (vLLM
    // does the same).
    json arguments = json::object();
    if (const json* given = Field(*function, "arguments")) {
      if (given->is_string() &&
          JsonNestsDeeperThan(given->get_ref<const std::string&>(), kMaxJsonInputNesting)) {
        return Invalid("messages", absl::StrCat(at, ".function.arguments nests deeper than ",
                                                kMaxJsonInputNesting, " levels"));
      }
      arguments = given->is_string()
                      ? json::parse(given->get<std::string>(), nullptr, /*allow_exceptions=*/false)
                      : *given;
      if (!arguments.is_object()) {
        return Invalid("messages",
                       absl::StrCat(at,
                                    ".function.arguments must be a JSON object or a string "
                                    "holding one, got ",
                                    Describe(*given)));
      }
    }
    json item = json::object();
    if (id != nullptr) item["id"] = *id;
    item["type"] = "function";
    item["function"] = {{"name", *name}, {"arguments", std::move(arguments)}};
    out.push_back(std::move(item));
  }
  return out;
}

absl::Status ReadMessages(const json& body, ChatFields* out) {
  const json* v = Field(body, "messages");
  if (v == nullptr) return FieldError("messages", "is required");
  if (!v->is_array() || v->empty()) {
    return FieldError("messages", absl::StrCat("must be a non-empty array of {role, content} "
                                               "objects, got ",
                                               Describe(*v)));
  }
  json messages = json::array();
  for (size_t i = 0; i < v->size(); ++i) {
    const json& m = (*v)[i];
    const std::string where = absl::StrCat("messages[", i, "]");
    const json* role = m.is_object() ? Field(m, "role") : nullptr;
    if (role == nullptr || !role->is_string() || role->get<std::string>().empty()) {
      return Invalid("messages", absl::StrCat(where, ".role must be a non-empty string"));
    }
    const std::string name = role->get<std::string>();
    if (name != "system" && name != "user" && name != "assistant" && name != "tool") {
      return Invalid("messages", absl::StrCat(where, ".role is '", name,
                                              "'; the roles supported are system, user, "
                                              "assistant and tool"));
    }
    json message = json::object();
    message["role"] = name;
    const json* tool_calls = Field(m, "tool_calls");
    if (tool_calls != nullptr && name != "assistant") {
      return Invalid("messages", absl::StrCat(where,
                                              ".tool_calls is only allowed on assistant "
                                              "messages"));
    }
    if (const json* content = Field(m, "content")) {
      ASSIGN_OR_RETURN(std::string text, ReadContent(*content, where + ".content"));
      message["content"] = std::move(text);
    } else if (name == "assistant") {
      message["content"] = "";  // a tool-calling reply sent back with content null, as vLLM does
    } else {
      return Invalid("messages", absl::StrCat(where,
                                              ".content is missing or null: give the message's "
                                              "text (only assistant messages may omit it)"));
    }
    for (const char* key : {"name", "tool_call_id", "reasoning_content", "reasoning"}) {
      if (const json* s = Field(m, key)) {
        if (!s->is_string()) {
          return Invalid("messages",
                         absl::StrCat(where, ".", key, " must be a string, got ", Describe(*s)));
        }
        message[key] = *s;
      }
    }
    if (tool_calls != nullptr) {
      ASSIGN_OR_RETURN(message["tool_calls"], ReadToolCalls(*tool_calls, where + ".tool_calls"));
    }
    messages.push_back(std::move(message));
  }
  out->render.messages = std::move(messages);
  return absl::OkStatus();
}

absl::Status ReadTools(const json& body, ChatFields* out) {
  const json* tools = Field(body, "tools");
  if (tools == nullptr) return absl::OkStatus();
  if (!tools->is_array()) {
    return FieldError("tools", absl::StrCat("must be an array of {\"type\": \"function\", "
                                            "\"function\": {...}} objects, got ",
                                            Describe(*tools)));
  }
  for (size_t i = 0; i < tools->size(); ++i) {
    const json& tool = (*tools)[i];
    const std::string at = absl::StrCat("tools[", i, "]");
    const json* type = tool.is_object() ? Field(tool, "type") : nullptr;
    const json* function = tool.is_object() ? Field(tool, "function") : nullptr;
    if (type == nullptr || !type->is_string() || type->get<std::string>() != "function" ||
        function == nullptr || !function->is_object()) {
      return Invalid("tools", absl::StrCat(at,
                                           " must be {\"type\": \"function\", \"function\": "
                                           "{\"name\", \"description\", \"parameters\"}}, got ",
                                           Describe(tool)));
    }
    const json* name = Field(*function, "name");
    if (name == nullptr || !name->is_string() || name->get<std::string>().empty()) {
      return Invalid("tools", absl::StrCat(at, ".function.name must be a non-empty string"));
    }
    if (const json* d = Field(*function, "description"); d != nullptr && !d->is_string()) {
      return Invalid("tools", absl::StrCat(at, ".function.description must be a string"));
    }
    if (const json* strict = Field(*function, "strict");
        strict != nullptr && !strict->is_boolean()) {
      return Invalid("tools", absl::StrCat(at, ".function.strict must be true or false"));
    }
    if (const json* p = Field(*function, "parameters"); p != nullptr && !p->is_object()) {
      return Invalid("tools", absl::StrCat(at,
                                           ".function.parameters must be a JSON Schema "
                                           "object, got ",
                                           Describe(*p)));
    }
  }
  if (!tools->empty()) {
    out->render.tools = *tools;
    out->has_tools = true;
  }
  return absl::OkStatus();
}

absl::Status ReadToolChoice(const json& body, ChatFields* out) {
  const json* choice = Field(body, "tool_choice");
  if (choice == nullptr) return absl::OkStatus();
  if (choice->is_string()) {
    const std::string mode = choice->get<std::string>();
    if (mode == "auto") return absl::OkStatus();
    if (mode == "none") {
      out->tool_choice.mode = ToolChoice::Mode::kNone;
      return absl::OkStatus();
    }
    if (mode == "required") {
      if (!out->has_tools) return FieldError("tool_choice", "\"required\" needs tools");
      out->tool_choice.mode = ToolChoice::Mode::kRequired;
      return absl::OkStatus();
    }
    return FieldError("tool_choice",
                      absl::StrCat("must be \"auto\", \"none\", \"required\" or {\"type\": "
                                   "\"function\", \"function\": {\"name\"}}, got ",
                                   Describe(*choice)));
  }
  const json* function = choice->is_object() ? Field(*choice, "function") : nullptr;
  const json* name =
      function != nullptr && function->is_object() ? Field(*function, "name") : nullptr;
  if (name == nullptr || !name->is_string()) {
    return FieldError("tool_choice",
                      absl::StrCat("must be \"auto\", \"none\", \"required\" or {\"type\": "
                                   "\"function\", \"function\": {\"name\"}}, got ",
                                   Describe(*choice)));
  }
  const std::string wanted = name->get<std::string>();
  bool found = false;
  if (out->has_tools) {
    for (const json& tool : out->render.tools) found = found || tool["function"]["name"] == wanted;
  }
  if (!found) {
    return FieldError("tool_choice", absl::StrCat("names the function '", wanted,
                                                  "', which is not among the request's tools"));
  }
  out->tool_choice.mode = ToolChoice::Mode::kNamed;
  out->tool_choice.function = wanted;
  return absl::OkStatus();
}

absl::Status ReadTemplateSwitches(const json& body, ChatFields* out) {
  for (const char* key : {"add_generation_prompt", "continue_final_message"}) {
    if (const json* v = Field(body, key)) {
      if (!v->is_boolean()) {
        return FieldError(key, absl::StrCat("must be true or false, got ", Describe(*v)));
      }
      (std::string(key) == "add_generation_prompt" ? out->render.add_generation_prompt
                                                   : out->render.continue_final_message) =
          v->get<bool>();
    }
  }
  if (out->render.add_generation_prompt && out->render.continue_final_message) {
    return FieldError("continue_final_message",
                      "cannot be true while add_generation_prompt is true (the default); send "
                      "\"add_generation_prompt\": false to continue the last message");
  }
  if (const json* kwargs = Field(body, "chat_template_kwargs")) {
    if (!kwargs->is_object()) {
      return FieldError("chat_template_kwargs",
                        absl::StrCat("must be an object, got ", Describe(*kwargs)));
    }
    out->render.kwargs = *kwargs;
  }
  if (Field(body, "chat_template") != nullptr) {
    return FieldError("chat_template",
                      "per request is not supported; start the server with --chat-template FILE");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ReadChatFields(const json& body, ChatFields* out) {
  RETURN_IF_ERROR(ReadMessages(body, out));
  RETURN_IF_ERROR(ReadTools(body, out));
  RETURN_IF_ERROR(ReadToolChoice(body, out));
  if (const json* parallel = Field(body, "parallel_tool_calls")) {
    if (!parallel->is_boolean()) {
      return FieldError("parallel_tool_calls",
                        absl::StrCat("must be true or false, got ", Describe(*parallel)));
    }
    out->parallel_tool_calls = parallel->get<bool>();
  }
  return ReadTemplateSwitches(body, out);
}

}  // namespace ridge
