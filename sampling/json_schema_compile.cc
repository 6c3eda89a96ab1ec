// JsonSchema::Compile: a JSON Schema (the subset in sampling/json_schema.h) to a table of nodes,
// with every refusal naming the keyword and its place.
#include <algorithm>
#include <bit>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "base/json_nesting.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"
#include "sampling/json_schema.h"
#include "sampling/json_schema_compiler.h"

namespace ridge {

using json = nlohmann::ordered_json;
using Kind = JsonSchema::Kind;

namespace {

// Keywords that say nothing about which texts are instances.
const std::set<std::string>& Annotations() {
  // "discriminator" (OpenAPI's, which Pydantic writes beside a oneOf) only names the property
  // that tells a oneOf's objects apart; the compiler finds it itself.
  static const auto* const kSet = new std::set<std::string>{
      "description", "title", "default", "examples", "$schema", "$comment", "discriminator"};
  return *kSet;
}

const std::set<std::string>& Understood() {
  static const auto* const kSet =
      new std::set<std::string>{"type",  "properties", "required", "additionalProperties",
                                "items", "minItems",   "maxItems", "enum",
                                "const", "anyOf",      "oneOf",    "$ref",
                                "$defs", "definitions"};
  return *kSet;
}

// The keywords each type reads.
const std::map<std::string, std::set<std::string>>& TypeKeywords() {
  static const auto* const kMap = new std::map<std::string, std::set<std::string>>{
      {"object", {"properties", "required", "additionalProperties"}},
      {"array", {"items", "minItems", "maxItems"}},
      {"string", {}},
      {"number", {}},
      {"integer", {}},
      {"boolean", {}},
      {"null", {}}};
  return *kMap;
}

std::string PointerToken(const std::string& name) {
  return absl::StrReplaceAll(name, {{"~", "~0"}, {"/", "~1"}});
}

}  // namespace

absl::StatusOr<std::shared_ptr<const JsonSchema>> JsonSchemaCompiler::Run() {
  if (!root_.is_object()) return Error("#", "the schema must be an object");
  refs_["#"] = 0;
  RETURN_IF_ERROR(Allocate("#").status());
  RETURN_IF_ERROR(Fill(0, root_, "#", 0));
  for (const char* defs : {"$defs", "definitions"}) {
    if (!root_.contains(defs)) continue;
    const json& d = root_.at(defs);
    if (!d.is_object()) return Error(absl::StrCat("#/", defs), "must be an object of schemas");
    for (const auto& [name, unused] : d.items()) {
      RETURN_IF_ERROR(Ref(absl::StrCat("#/", defs, "/", PointerToken(name)), 1).status());
    }
  }
  RETURN_IF_ERROR(CheckOneOf());
  RETURN_IF_ERROR(Flatten());
  RETURN_IF_ERROR(MergeLiterals());
  RETURN_IF_ERROR(MergeObjects());
  RETURN_IF_ERROR(Depths());
  RETURN_IF_ERROR(Disjoint());
  const bool array = top_ == JsonSchemaTop::kObjectOrArray && nodes_[0].kind == Kind::kArray;
  if (nodes_[0].kind != Kind::kObject && !array) {
    return Error("#", "the top level must be {\"type\": \"object\"} (as OpenAI requires)");
  }
  if (nodes_[0].min_depth > kMaxSchemaDepth) {
    return Error("#", absl::StrCat("every instance nests deeper than ", kMaxSchemaDepth,
                                   " containers, the most the output may"));
  }
  std::shared_ptr<JsonSchema> schema(new JsonSchema());
  schema->nodes_ = std::move(nodes_);
  return std::shared_ptr<const JsonSchema>(std::move(schema));
}

absl::Status JsonSchemaCompiler::Error(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("at ", path, ": ", what));
}

absl::StatusOr<int32_t> JsonSchemaCompiler::Allocate(const std::string& path) {
  if (nodes_.size() >= kMaxSchemaNodes) {
    return Error(path, absl::StrCat("the schema has more than ", kMaxSchemaNodes, " parts"));
  }
  nodes_.emplace_back();
  paths_.push_back(path);
  return static_cast<int32_t>(nodes_.size() - 1);
}

absl::StatusOr<int32_t> JsonSchemaCompiler::Compile(const json& schema, const std::string& path,
                                                    int nesting) {
  if (schema.is_object() && schema.contains("$ref") && OnlyRef(schema)) {
    if (!schema.at("$ref").is_string()) return Error(path + "/$ref", "must be a string");
    return Ref(schema.at("$ref").get<std::string>(), nesting + 1);
  }
  ASSIGN_OR_RETURN(const int32_t slot, Allocate(path));
  RETURN_IF_ERROR(Fill(slot, schema, path, nesting));
  return slot;
}

bool JsonSchemaCompiler::OnlyRef(const json& schema) {
  for (const auto& [key, unused] : schema.items()) {
    if (key != "$ref" && !Annotations().contains(key)) return false;
  }
  return true;
}

absl::StatusOr<int32_t> JsonSchemaCompiler::Ref(const std::string& ref, int nesting) {
  if (auto it = refs_.find(ref); it != refs_.end()) return it->second;
  const bool local = ref.rfind("#/$defs/", 0) == 0 || ref.rfind("#/definitions/", 0) == 0;
  const size_t slash = ref.find('/', ref.find('/', 2) + 1);
  if (!local || slash != std::string::npos) {
    return Error(ref, "$ref must be \"#\", \"#/$defs/NAME\" or \"#/definitions/NAME\"");
  }
  const json* target = nullptr;
  try {
    target = &root_.at(json::json_pointer(ref.substr(1)));
  } catch (const json::exception&) {
    return Error(ref, "$ref names no schema");
  }
  ASSIGN_OR_RETURN(const int32_t slot, Allocate(ref));
  refs_[ref] = slot;
  RETURN_IF_ERROR(Fill(slot, *target, ref, nesting));
  return slot;
}

absl::Status JsonSchemaCompiler::Fill(int32_t slot, const json& s, const std::string& path,
                                      int nesting) {
  if (nesting > kMaxSchemaNesting) {
    return Error(path, absl::StrCat("the schema nests deeper than ", kMaxSchemaNesting));
  }
  if (!s.is_object()) return Error(path, "a schema must be an object");
  for (const auto& [key, unused] : s.items()) {
    if (!Understood().contains(key) && !Annotations().contains(key)) {
      return Error(path, absl::StrCat("keyword \"", key, "\" is not supported"));
    }
    if ((key == "$defs" || key == "definitions") && path != "#") {
      return Error(path, absl::StrCat("\"", key, "\" is supported at the top level only"));
    }
  }
  if (s.contains("$ref")) return RefusedRef(s, path);
  if (s.contains("anyOf")) return FillAnyOf(slot, s, "anyOf", path, nesting);
  if (s.contains("oneOf")) return FillAnyOf(slot, s, "oneOf", path, nesting);
  if (s.contains("enum") || s.contains("const")) return FillLiterals(slot, s, path);
  if (!s.contains("type")) {
    return Error(path,
                 "a schema needs \"type\", \"enum\", \"const\", \"anyOf\" or \"$ref\" (one that "
                 "takes any value is not supported)");
  }
  std::vector<std::string> types;
  RETURN_IF_ERROR(ReadTypes(s, path, &types));
  // Each keyword must apply to one of the types.
  for (const auto& item : s.items()) {
    const std::string& key = item.key();
    if (key == "type" || Annotations().contains(key) || key == "$defs" || key == "definitions") {
      continue;
    }
    if (std::none_of(types.begin(), types.end(),
                     [&](const std::string& t) { return TypeKeywords().at(t).contains(key); })) {
      return Error(
          path, absl::StrCat("\"", key, "\" does not apply to type ", absl::StrJoin(types, ", ")));
    }
  }
  if (types.size() == 1) return FillType(slot, types[0], s, path, nesting);
  // A list of types: an anyOf of one node each ("number" takes the integers too).
  std::vector<int32_t> children;
  const bool number = std::find(types.begin(), types.end(), "number") != types.end();
  for (const std::string& t : types) {
    if (t == "integer" && number) continue;
    ASSIGN_OR_RETURN(const int32_t child, Allocate(path));
    RETURN_IF_ERROR(FillType(child, t, s, path, nesting));
    children.push_back(child);
  }
  nodes_[slot].kind = Kind::kAnyOf;
  nodes_[slot].children = std::move(children);
  return absl::OkStatus();
}

absl::Status JsonSchemaCompiler::RefusedRef(const json& s, const std::string& path) {
  for (const auto& [key, unused] : s.items()) {
    // "$defs" and "definitions" are at the top level (Fill refused them anywhere else).
    if (key != "$ref" && key != "$defs" && key != "definitions" && !Annotations().contains(key)) {
      return Error(path, absl::StrCat("\"$ref\" beside \"", key, "\" is not supported"));
    }
  }
  if (path == "#") {
    return Error(path,
                 "\"$ref\" at the top level is not supported: the top level must be the "
                 "{\"type\": \"object\"} schema itself");
  }
  const json& ref = s.at("$ref");
  if (!ref.is_string()) return Error(path + "/$ref", "must be a string");
  return Error(path, absl::StrCat("a definition that is only a \"$ref\" (an alias of ", ref.dump(),
                                  ") is not supported: refer to ", ref.dump(), " directly"));
}

absl::Status JsonSchemaCompiler::ReadTypes(const json& s, const std::string& path,
                                           std::vector<std::string>* types) {
  const json& t = s.at("type");
  const std::string where = path + "/type";
  if (t.is_string()) {
    types->push_back(t.get<std::string>());
  } else if (t.is_array() && !t.empty()) {
    for (const json& e : t) {
      if (!e.is_string()) return Error(where, "must be a type name or a list of them");
      types->push_back(e.get<std::string>());
    }
  } else {
    return Error(where, "must be a type name or a non-empty list of them");
  }
  std::set<std::string> seen;
  for (const std::string& name : *types) {
    if (!TypeKeywords().contains(name)) {
      return Error(where, absl::StrCat("unknown type \"", name, "\""));
    }
    if (!seen.insert(name).second) return Error(where, absl::StrCat("\"", name, "\" twice"));
  }
  return absl::OkStatus();
}

absl::Status JsonSchemaCompiler::FillType(int32_t slot, const std::string& type, const json& s,
                                          const std::string& path, int nesting) {
  if (type == "object") return FillObject(slot, s, path, nesting);
  if (type == "array") return FillArray(slot, s, path, nesting);
  Kind kind = Kind::kString;
  if (type == "number") kind = Kind::kNumber;
  if (type == "integer") kind = Kind::kInteger;
  if (type == "boolean" || type == "null") {
    kind = Kind::kLiterals;
    nodes_[slot].literals = type == "null" ? std::vector<std::string>{"null"}
                                           : std::vector<std::string>{"true", "false"};
  }
  nodes_[slot].kind = kind;
  return absl::OkStatus();
}

absl::Status JsonSchemaCompiler::FillObject(int32_t slot, const json& s, const std::string& path,
                                            int nesting) {
  if (s.contains("additionalProperties") && s.at("additionalProperties") != json(false)) {
    return Error(path + "/additionalProperties",
                 "only false is supported (absent counts as false: no other properties)");
  }
  std::vector<std::string> names;
  std::vector<int32_t> children;
  if (s.contains("properties")) {
    const json& p = s.at("properties");
    if (!p.is_object()) return Error(path + "/properties", "must be an object of schemas");
    if (p.size() > kMaxSchemaProperties) {
      return Error(path + "/properties",
                   absl::StrCat("more than ", kMaxSchemaProperties, " properties"));
    }
    for (const auto& [name, schema] : p.items()) {
      const std::string where = absl::StrCat(path, "/properties/", PointerToken(name));
      std::string encoded = json(name).dump();
      if (encoded.size() > kMaxSchemaLiteralBytes) return Error(where, "the name is too long");
      names.push_back(std::move(encoded));
      ASSIGN_OR_RETURN(const int32_t child, Compile(schema, where, nesting + 1));
      children.push_back(child);
    }
  }
  uint64_t required = 0;
  if (s.contains("required")) {
    const json& r = s.at("required");
    if (!r.is_array()) return Error(path + "/required", "must be a list of property names");
    for (const json& name : r) {
      const auto it =
          name.is_string() ? std::find(names.begin(), names.end(), json(name).dump()) : names.end();
      if (it == names.end()) {
        return Error(path + "/required",
                     absl::StrCat(name.dump(), " is not a property of \"properties\""));
      }
      const uint64_t bit = uint64_t{1} << (it - names.begin());
      if (required & bit) return Error(path + "/required", name.dump() + " appears twice");
      required |= bit;
    }
  }
  Node& n = nodes_[slot];
  n.kind = Kind::kObject;
  n.literals = std::move(names);
  n.children = std::move(children);
  n.required = required;
  return absl::OkStatus();
}

absl::Status JsonSchemaCompiler::FillArray(int32_t slot, const json& s, const std::string& path,
                                           int nesting) {
  if (!s.contains("items") || !s.at("items").is_object()) {
    return Error(path + "/items", "an array needs \"items\", one schema for every item");
  }
  int32_t bounds[2] = {0, -1};
  const char* names[2] = {"minItems", "maxItems"};
  for (int i = 0; i < 2; ++i) {
    if (!s.contains(names[i])) continue;
    const json& v = s.at(names[i]);
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > kMaxSchemaItems) {
      return Error(path + "/" + names[i],
                   absl::StrCat("must be an integer in [0, ", kMaxSchemaItems, "]"));
    }
    bounds[i] = static_cast<int32_t>(v.get<int64_t>());
  }
  if (bounds[1] >= 0 && bounds[0] > bounds[1]) {
    return Error(path + "/minItems", "is more than maxItems");
  }
  ASSIGN_OR_RETURN(const int32_t items, Compile(s.at("items"), path + "/items", nesting + 1));
  Node& n = nodes_[slot];
  n.kind = Kind::kArray;
  n.children = {items};
  n.min_items = bounds[0];
  n.max_items = bounds[1];
  return absl::OkStatus();
}

absl::Status JsonSchemaCompiler::FillAnyOf(int32_t slot, const json& s, const char* keyword,
                                           const std::string& path, int nesting) {
  for (const auto& [key, unused] : s.items()) {
    if (key != keyword && !Annotations().contains(key) && key != "$defs" && key != "definitions") {
      return Error(path, absl::StrCat("\"", keyword, "\" beside \"", key, "\" is not supported"));
    }
  }
  const json& a = s.at(keyword);
  if (!a.is_array() || a.empty()) {
    return Error(absl::StrCat(path, "/", keyword), "must be a non-empty list");
  }
  std::vector<int32_t> children;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSIGN_OR_RETURN(const int32_t child,
                     Compile(a[i], absl::StrCat(path, "/", keyword, "/", i), nesting + 1));
    children.push_back(child);
  }
  nodes_[slot].kind = Kind::kAnyOf;
  nodes_[slot].one_of = std::string_view(keyword) == "oneOf";
  nodes_[slot].children = std::move(children);
  return absl::OkStatus();
}

absl::Status JsonSchemaCompiler::FillLiterals(int32_t slot, const json& s,
                                              const std::string& path) {
  if (s.contains("enum") && s.contains("const")) {
    return Error(path, "\"enum\" beside \"const\" is not supported");
  }
  const std::string key = s.contains("enum") ? "enum" : "const";
  const std::string where = path + "/" + key;
  json values = key == "enum" ? s.at("enum") : json::array({s.at("const")});
  if (!values.is_array() || values.empty() || values.size() > kMaxSchemaEnumValues) {
    return Error(where, absl::StrCat("must be a list of 1 to ", kMaxSchemaEnumValues, " values"));
  }
  std::vector<std::string> types;
  if (s.contains("type")) RETURN_IF_ERROR(ReadTypes(s, path, &types));
  for (const auto& [k, unused] : s.items()) {
    if (k != key && k != "type" && !Annotations().contains(k) && k != "$defs" &&
        k != "definitions") {
      return Error(path, absl::StrCat("\"", key, "\" beside \"", k, "\" is not supported"));
    }
  }
  std::vector<std::string> literals;
  for (const json& v : values) {
    const char* type = v.is_string()           ? "string"
                       : v.is_number_integer() ? "integer"
                       : v.is_boolean()        ? "boolean"
                       : v.is_null()           ? "null"
                                               : nullptr;
    if (type == nullptr) {
      return Error(where, absl::StrCat("values must be strings, integers, booleans or null, not ",
                                       v.dump()));
    }
    if (!types.empty() && std::none_of(types.begin(), types.end(), [&](const std::string& t) {
          return t == type || (t == "number" && std::string(type) == "integer");
        })) {
      return Error(where, absl::StrCat(v.dump(), " is not of the schema's type"));
    }
    std::string text = v.dump();
    if (text.size() > kMaxSchemaLiteralBytes) return Error(where, "a value is too long");
    if (std::find(literals.begin(), literals.end(), text) != literals.end()) {
      return Error(where, absl::StrCat(text, " appears twice"));
    }
    literals.push_back(std::move(text));
  }
  nodes_[slot].kind = Kind::kLiterals;
  nodes_[slot].literals = std::move(literals);
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const JsonSchema>> JsonSchema::Compile(const json& schema,
                                                                      JsonSchemaTop top) {
  try {  // dump() throws on strings that are not UTF-8, which a parsed text never has
    if (schema.dump().size() > kMaxSchemaBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("the schema is longer than ", kMaxSchemaBytes, " bytes as compact JSON"));
    }
    return JsonSchemaCompiler(schema, top).Run();
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("the schema cannot be read: ", e.what()));
  }
}

absl::StatusOr<std::shared_ptr<const JsonSchema>> JsonSchema::Parse(std::string_view text) {
  if (text.size() > 4 * kMaxSchemaBytes) {  // room for whitespace; compact, it must fit the bound
    return absl::InvalidArgumentError(
        absl::StrCat("the schema text is longer than ", 4 * kMaxSchemaBytes, " bytes"));
  }
  // Dumping and copying a parsed value recurse once per level (base/json_nesting.h).
  RETURN_IF_ERROR(CheckJsonNesting(text, kMaxSchemaNesting, "the schema"));
  json schema;
  try {
    schema = json::parse(text);
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("the schema is not JSON: ", e.what()));
  }
  return Compile(schema);
}

}  // namespace ridge
