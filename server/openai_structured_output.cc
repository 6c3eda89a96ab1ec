#include "server/openai_structured_output.h"

#include <memory>
#include <set>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "sampling/json_schema.h"
#include "server/api_error.h"
#include "server/request_json.h"

namespace ridge {
namespace {

using json = nlohmann::ordered_json;

// OpenAI's {"json_schema": {"name": ..., "schema": {...}, "strict": ...}}: the schema compiled
// (sampling/json_schema.h), or a 400 naming the field and, for the schema, the keyword and where.
absl::Status ReadJsonSchema(const json& format, OpenAiRequest* out) {
  const json* v = Field(format, "json_schema");
  if (v == nullptr || !v->is_object()) {
    return FieldError("response_format.json_schema",
                      absl::StrCat("must be an object with \"name\" and \"schema\", got ",
                                   v == nullptr ? "nothing" : Describe(*v)));
  }
  const json* name = Field(*v, "name");
  const std::string name_text =
      name != nullptr && name->is_string() ? name->get<std::string>() : "";
  const bool name_ok =
      !name_text.empty() && name_text.size() <= 64 &&
      std::all_of(name_text.begin(), name_text.end(), [](char c) {
        return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
      });
  if (!name_ok) {
    return FieldError("response_format.json_schema.name",
                      "must be 1 to 64 characters of a-z, A-Z, 0-9, '_' and '-' (as OpenAI "
                      "requires)");
  }
  if (const json* strict = Field(*v, "strict"); strict != nullptr && !strict->is_boolean()) {
    return FieldError("response_format.json_schema.strict",
                      absl::StrCat("must be a boolean, got ", Describe(*strict)));
  }
  const json* schema = Field(*v, "schema");
  if (schema == nullptr) return FieldError("response_format.json_schema.schema", "is required");
  auto compiled = JsonSchema::Compile(*schema);
  if (!compiled.ok()) {
    return FieldError("response_format.json_schema.schema",
                      std::string(compiled.status().message()));
  }
  out->json_schema = *std::move(compiled);
  return absl::OkStatus();
}

// A function's parameters as a schema its arguments are constrained to (absent or {}: no
// arguments, "{}"), and compiled; or a 400 on tool_choice naming the function and the problem.
struct Parameters {
  json schema;
  std::shared_ptr<const JsonSchema> compiled;
};
absl::StatusOr<Parameters> ParametersOf(const json& function) {
  const json* given = Field(function, "parameters");
  Parameters p{given == nullptr || given->empty() ? json{{"type", "object"}} : *given, nullptr};
  auto compiled = JsonSchema::Compile(p.schema);
  if (!compiled.ok()) {
    return FieldError(
        "tool_choice",
        absl::StrCat("the parameters of '", function.at("name").get<std::string>(),
                     "' cannot constrain its arguments: ", compiled.status().message()));
  }
  p.compiled = *std::move(compiled);
  return p;
}

// `schema`'s local references ("#", "#/$defs/...", "#/definitions/...") as they read once its
// root is the definition `prefix` of a larger schema, its "$defs" there `prefix`.name and its
// "definitions" `prefix`:name.
constexpr std::pair<const char*, const char*> kDefinitionKeywords[] = {{"$defs", "."},
                                                                       {"definitions", ":"}};

void MoveReferences(json& schema, const std::string& prefix) {
  if (schema.is_array()) {
    for (json& item : schema) MoveReferences(item, prefix);
    return;
  }
  if (!schema.is_object()) return;
  for (auto& [key, value] : schema.items()) {
    if (key != "$ref" || !value.is_string()) {
      MoveReferences(value, prefix);
      continue;
    }
    const std::string ref = value;
    for (const auto& [defs, separator] : kDefinitionKeywords) {
      const std::string from = absl::StrCat("#/", defs, "/");
      if (ref.starts_with(from)) {
        value = absl::StrCat("#/$defs/", prefix, separator, ref.substr(from.size()));
      }
    }
    if (ref == "#") value = absl::StrCat("#/$defs/", prefix);
  }
}

// tool_choice "required": a list of calls (one when parallel_tool_calls is false), each
// {"name": one of the tools, "arguments": its parameters'}, as vLLM constrains it. Each tool's
// parameters, and its definitions, move to the list's definitions ("tool<i>", "tool<i>.<name>").
absl::StatusOr<std::shared_ptr<const JsonSchema>> RequiredCalls(const ChatFields& chat) {
  json calls = json::array(), definitions = json::object();
  std::set<std::string> names;
  for (const json& tool : chat.render.tools) {
    const json& function = tool.at("function");
    const std::string name = function.at("name");
    if (!names.insert(name).second) {
      return FieldError("tool_choice", absl::StrCat("\"required\" needs the tools' names to "
                                                    "differ; two are named '",
                                                    name, "'"));
    }
    ASSIGN_OR_RETURN(Parameters arguments, ParametersOf(function));
    const std::string prefix = absl::StrCat("tool", calls.size());
    json& parameters = arguments.schema;
    MoveReferences(parameters, prefix);
    for (const auto& [defs, separator] : kDefinitionKeywords) {
      if (!parameters.contains(defs)) continue;
      for (auto& [key, value] : parameters[defs].items()) {
        definitions[absl::StrCat(prefix, separator, key)] = std::move(value);
      }
      parameters.erase(defs);
    }
    definitions[prefix] = std::move(parameters);
    calls.push_back({{"type", "object"},
                     {"properties",
                      {{"name", {{"const", name}}},
                       {"arguments", {{"$ref", absl::StrCat("#/$defs/", prefix)}}}}},
                     {"required", {"name", "arguments"}}});
  }
  json list = {{"type", "array"},
               {"minItems", 1},
               {"items", {{"anyOf", std::move(calls)}}},
               {"$defs", std::move(definitions)}};
  if (!chat.parallel_tool_calls) list["maxItems"] = 1;
  auto compiled = JsonSchema::Compile(list, JsonSchemaTop::kObjectOrArray);
  if (!compiled.ok()) {
    return FieldError("tool_choice", absl::StrCat("\"required\" cannot constrain the output to "
                                                  "calls of these tools: ",
                                                  compiled.status().message()));
  }
  return *std::move(compiled);
}

}  // namespace

// {"type": "text"} (the default), {"type": "json_object"} or {"type": "json_schema"}.
absl::Status ReadResponseFormat(const json& body, OpenAiRequest* out) {
  const json* v = Field(body, "response_format");
  if (v == nullptr) return absl::OkStatus();
  const json* type = v->is_object() ? Field(*v, "type") : nullptr;
  if (type == nullptr || !type->is_string()) {
    return FieldError("response_format",
                      absl::StrCat("must be an object with a \"type\", got ", Describe(*v)));
  }
  const std::string name = type->get<std::string>();
  if (name != "text" && name != "json_object" && name != "json_schema") {
    return FieldError("response_format",
                      absl::StrCat("type must be \"text\", \"json_object\" or \"json_schema\", "
                                   "got \"",
                                   name, "\""));
  }
  if (name == "json_schema") RETURN_IF_ERROR(ReadJsonSchema(*v, out));
  out->json_object = name == "json_object";
  if (name != "text" && out->chat.has_tools &&
      out->chat.tool_choice.mode != ToolChoice::Mode::kNone) {
    return FieldError("response_format",
                      absl::StrCat(name,
                                   " cannot be combined with tools: the output could not be a tool "
                                   "call (send tool_choice \"none\", or no response_format)"));
  }
  return absl::OkStatus();
}

// A named tool_choice constrains the output to its function's arguments; "required" to a list
// of calls.
absl::Status ReadToolArguments(OpenAiRequest* out) {
  const ToolChoice& choice = out->chat.tool_choice;
  if (choice.mode == ToolChoice::Mode::kRequired) {
    ASSIGN_OR_RETURN(out->tool_arguments, RequiredCalls(out->chat));
    return absl::OkStatus();
  }
  if (choice.mode != ToolChoice::Mode::kNamed) return absl::OkStatus();
  for (const json& tool : out->chat.render.tools) {
    const json& function = tool.at("function");
    if (function.at("name") != choice.function) continue;
    absl::StatusOr<Parameters> arguments = ParametersOf(function);
    if (arguments.ok()) {
      out->tool_arguments = std::move(arguments->compiled);
    } else if (function.value("strict", false)) {
      return arguments.status();
    }
    // Not strict, and parameters the constraint cannot take: the choice is rendered, the output
    // not constrained, as OpenAI treats a function without "strict" (best effort).
    return absl::OkStatus();
  }
  return FieldError("tool_choice",
                    absl::StrCat("names '", choice.function, "', not among the tools"));
}

}  // namespace ridge
