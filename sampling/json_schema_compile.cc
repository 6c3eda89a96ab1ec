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

namespace ridge {

using json = nlohmann::ordered_json;
using Kind = JsonSchema::Kind;

namespace {

constexpr int32_t kNoFiniteInstance = 1 << 20;

// Keywords that say nothing about which texts are instances.
const std::set<std::string>& Annotations() {
  static const auto* const kSet = new std::set<std::string>{"description", "title",   "default",
                                                            "examples",    "$schema", "$comment"};
  return *kSet;
}

const std::set<std::string>& Understood() {
  static const auto* const kSet =
      new std::set<std::string>{"type",       "properties", "required", "additionalProperties",
                                "items",      "minItems",   "maxItems", "enum",
                                "const",      "anyOf",      "$ref",     "$defs",
                                "definitions"};
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

class JsonSchemaCompiler {
  using Node = JsonSchema::Node;

 public:
  explicit JsonSchemaCompiler(const json& root) : root_(root) {}

  absl::StatusOr<std::shared_ptr<const JsonSchema>> Run() {
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
    RETURN_IF_ERROR(Flatten());
    RETURN_IF_ERROR(MergeLiterals());
    RETURN_IF_ERROR(MergeObjects());
    RETURN_IF_ERROR(Depths());
    RETURN_IF_ERROR(Disjoint());
    if (nodes_[0].kind != Kind::kObject) {
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

 private:
  static absl::Status Error(const std::string& path, const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("at ", path, ": ", what));
  }

  absl::StatusOr<int32_t> Allocate(const std::string& path) {
    if (nodes_.size() >= kMaxSchemaNodes) {
      return Error(path, absl::StrCat("the schema has more than ", kMaxSchemaNodes, " parts"));
    }
    nodes_.emplace_back();
    paths_.push_back(path);
    return static_cast<int32_t>(nodes_.size() - 1);
  }

  // The node of `schema`: a $ref alone is its target's node, anything else a new one.
  absl::StatusOr<int32_t> Compile(const json& schema, const std::string& path, int nesting) {
    if (schema.is_object() && schema.contains("$ref") && OnlyRef(schema)) {
      if (!schema.at("$ref").is_string()) return Error(path + "/$ref", "must be a string");
      return Ref(schema.at("$ref").get<std::string>(), nesting + 1);
    }
    ASSIGN_OR_RETURN(const int32_t slot, Allocate(path));
    RETURN_IF_ERROR(Fill(slot, schema, path, nesting));
    return slot;
  }

  static bool OnlyRef(const json& schema) {
    for (const auto& [key, unused] : schema.items()) {
      if (key != "$ref" && !Annotations().contains(key)) return false;
    }
    return true;
  }

  // The node of a local reference: "#", "#/$defs/NAME" or "#/definitions/NAME".
  absl::StatusOr<int32_t> Ref(const std::string& ref, int nesting) {
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

  absl::Status Fill(int32_t slot, const json& s, const std::string& path, int nesting) {
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
    if (s.contains("anyOf")) return FillAnyOf(slot, s, path, nesting);
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
        return Error(path, absl::StrCat("\"", key, "\" does not apply to type ",
                                        absl::StrJoin(types, ", ")));
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

  // A schema with "$ref" that Fill was given: Compile takes a $ref alone (annotations aside) as
  // its target's node, so this is a "$ref" beside keywords that say something, the top level,
  // or a definition reached through Ref (which fills a target in place) that is itself only a
  // "$ref". Each is refused naming what is not supported.
  static absl::Status RefusedRef(const json& s, const std::string& path) {
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
    return Error(path,
                 absl::StrCat("a definition that is only a \"$ref\" (an alias of ", ref.dump(),
                              ") is not supported: refer to ", ref.dump(), " directly"));
  }

  absl::Status ReadTypes(const json& s, const std::string& path, std::vector<std::string>* types) {
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

  absl::Status FillType(int32_t slot, const std::string& type, const json& s,
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

  absl::Status FillObject(int32_t slot, const json& s, const std::string& path, int nesting) {
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
        const auto it = name.is_string() ? std::find(names.begin(), names.end(), json(name).dump())
                                         : names.end();
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

  absl::Status FillArray(int32_t slot, const json& s, const std::string& path, int nesting) {
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

  absl::Status FillAnyOf(int32_t slot, const json& s, const std::string& path, int nesting) {
    for (const auto& [key, unused] : s.items()) {
      if (key != "anyOf" && !Annotations().contains(key) && key != "$defs" &&
          key != "definitions") {
        return Error(path, absl::StrCat("\"anyOf\" beside \"", key, "\" is not supported"));
      }
    }
    const json& a = s.at("anyOf");
    if (!a.is_array() || a.empty()) return Error(path + "/anyOf", "must be a non-empty list");
    std::vector<int32_t> children;
    for (size_t i = 0; i < a.size(); ++i) {
      ASSIGN_OR_RETURN(const int32_t child,
                       Compile(a[i], absl::StrCat(path, "/anyOf/", i), nesting + 1));
      children.push_back(child);
    }
    nodes_[slot].kind = Kind::kAnyOf;
    nodes_[slot].children = std::move(children);
    return absl::OkStatus();
  }

  absl::Status FillLiterals(int32_t slot, const json& s, const std::string& path) {
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

  // Each anyOf's alternatives as nodes that are not anyOf (nested ones and $ref chains opened).
  absl::Status Flatten() {
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (nodes_[i].kind != Kind::kAnyOf) continue;
      std::vector<int32_t> leaves, stack(nodes_[i].children.rbegin(), nodes_[i].children.rend());
      std::set<int32_t> seen = {static_cast<int32_t>(i)};
      while (!stack.empty()) {
        const int32_t n = stack.back();
        stack.pop_back();
        if (!seen.insert(n).second) continue;
        if (nodes_[n].kind != Kind::kAnyOf) {
          leaves.push_back(n);
          continue;
        }
        stack.insert(stack.end(), nodes_[n].children.rbegin(), nodes_[n].children.rend());
      }
      if (leaves.empty()) return Error(paths_[i], "refers only to itself: it has no instance");
      flat_[static_cast<int32_t>(i)] = std::move(leaves);
    }
    for (auto& [i, leaves] : flat_) nodes_[i].children = std::move(leaves);
    return absl::OkStatus();
  }

  // In each anyOf with two or more alternatives that are lists of values (enum, const, and the
  // types null and boolean), those alternatives as one new list holding all their values, each
  // once and in the order first seen, in the place of the first: two strings or two numbers
  // begin with the same byte, which Disjoint refuses between alternatives, and the literal
  // automaton tells values apart by all their bytes. The leaves stay as they are, since one may
  // be used elsewhere (a definition, an anyOf inside another).
  absl::Status MergeLiterals() {
    const size_t before = nodes_.size();  // the merged nodes are not anyOf
    for (size_t i = 0; i < before; ++i) {
      if (nodes_[i].kind != Kind::kAnyOf) continue;
      std::vector<int32_t> children;
      std::vector<std::string> values;
      size_t lists = 0, at = 0;
      for (const int32_t leaf : nodes_[i].children) {
        if (nodes_[leaf].kind != Kind::kLiterals) {
          children.push_back(leaf);
          continue;
        }
        if (lists++ == 0) at = children.size();
        for (const std::string& v : nodes_[leaf].literals) {
          if (std::find(values.begin(), values.end(), v) == values.end()) values.push_back(v);
        }
      }
      if (lists < 2) continue;
      if (values.size() > kMaxSchemaEnumValues) {
        return Error(paths_[i], absl::StrCat("its enum and const alternatives have ", values.size(),
                                             " different values together, more than the ",
                                             kMaxSchemaEnumValues, " supported"));
      }
      // Allocate may move nodes_: no reference into it is held across the call.
      ASSIGN_OR_RETURN(const int32_t merged,
                       Allocate(absl::StrCat(paths_[i], " (its enum and const alternatives)")));
      nodes_[merged].kind = Kind::kLiterals;
      nodes_[merged].literals = std::move(values);
      children.insert(children.begin() + static_cast<std::ptrdiff_t>(at), merged);
      nodes_[i].children = std::move(children);
    }
    return absl::OkStatus();
  }

  // In each anyOf with two or more object alternatives, those alternatives as one kObjectUnion
  // in the place of the first (see json_schema.h): every name of theirs once, each name's value
  // node (the one they share, or the kLiterals of all their values with which alternatives allow
  // each), and each alternative's names in its order.
  absl::Status MergeObjects() {
    const size_t before = nodes_.size();
    for (size_t i = 0; i < before; ++i) {
      if (nodes_[i].kind != Kind::kAnyOf) continue;
      std::vector<int32_t> objects, children;
      size_t at = 0;
      for (const int32_t leaf : nodes_[i].children) {
        if (nodes_[leaf].kind != Kind::kObject) {
          children.push_back(leaf);
          continue;
        }
        if (objects.empty()) at = children.size();
        objects.push_back(leaf);
      }
      if (objects.size() < 2) continue;
      if (objects.size() > kMaxSchemaObjectAlternatives) {
        return Error(paths_[i], absl::StrCat("it has ", objects.size(),
                                             " object alternatives, more "
                                             "than the ",
                                             kMaxSchemaObjectAlternatives, " supported"));
      }
      Node u;
      u.kind = Kind::kObjectUnion;
      u.children = objects;
      std::vector<std::vector<size_t>> owners;  // per name: the alternatives that have it
      for (size_t a = 0; a < objects.size(); ++a) {
        u.member_begin.push_back(static_cast<uint16_t>(u.member_names.size()));
        const Node& alternative = nodes_[objects[a]];
        for (const std::string& name : alternative.literals) {
          const auto it = std::find(u.literals.begin(), u.literals.end(), name);
          const size_t m = static_cast<size_t>(it - u.literals.begin());
          if (it == u.literals.end()) {
            if (u.literals.size() == kMaxSchemaProperties) {
              return Error(paths_[i], absl::StrCat("its object alternatives have more than ",
                                                   kMaxSchemaProperties,
                                                   " different property names together"));
            }
            u.literals.push_back(name);
            owners.emplace_back();
          }
          owners[m].push_back(a);
          u.member_names.push_back(static_cast<uint8_t>(m));
        }
      }
      u.member_begin.push_back(static_cast<uint16_t>(u.member_names.size()));
      for (size_t m = 0; m < u.literals.size(); ++m) {
        ASSIGN_OR_RETURN(const int32_t value,
                         NameValue(static_cast<int32_t>(i), objects, u.literals[m], owners[m]));
        u.name_values.push_back(value);
      }
      // Allocate may move nodes_: no reference into it is held across the call.
      ASSIGN_OR_RETURN(const int32_t merged,
                       Allocate(absl::StrCat(paths_[i], " (its object alternatives)")));
      nodes_[merged] = std::move(u);
      children.insert(children.begin() + static_cast<std::ptrdiff_t>(at), merged);
      nodes_[i].children = std::move(children);
    }
    return absl::OkStatus();
  }

  // The value node of property `name` in a union of the object alternatives `objects` of anyOf
  // `any_of`, which `owners` (indices into `objects`) have.
  absl::StatusOr<int32_t> NameValue(int32_t any_of, const std::vector<int32_t>& objects,
                                    const std::string& name, const std::vector<size_t>& owners) {
    std::vector<int32_t> values;
    for (const size_t a : owners) {
      const Node& o = nodes_[objects[a]];
      const size_t k = static_cast<size_t>(std::find(o.literals.begin(), o.literals.end(), name) -
                                           o.literals.begin());
      values.push_back(o.children[k]);
    }
    size_t differing = 0;  // the first owner whose value differs from the first's
    bool literals = true;
    for (size_t j = 0; j < values.size(); ++j) {
      std::set<std::pair<int32_t, int32_t>> assumed;
      if (differing == 0 && !SameNode(values[0], values[j], &assumed)) differing = j;
      literals = literals && nodes_[values[j]].kind == Kind::kLiterals;
    }
    if (differing == 0) return values[0];
    if (!literals) {
      return Error(paths_[any_of],
                   absl::StrCat("its object alternatives ", paths_[objects[owners[0]]], " and ",
                                paths_[objects[owners[differing]]], " give property ", name,
                                " different schemas; objects in one anyOf are supported when a "
                                "property they share has the same schema in each, or is an enum "
                                "or const in each (whose value then tells them apart)"));
    }
    Node merged;
    merged.kind = Kind::kLiterals;
    for (size_t j = 0; j < owners.size(); ++j) {
      for (const std::string& v : nodes_[values[j]].literals) {
        auto it = std::find(merged.literals.begin(), merged.literals.end(), v);
        if (it == merged.literals.end()) {
          if (merged.literals.size() == kMaxSchemaEnumValues) {
            return Error(paths_[any_of], absl::StrCat("property ", name,
                                                      " of its object "
                                                      "alternatives has more than ",
                                                      kMaxSchemaEnumValues, " values together"));
          }
          merged.literals.push_back(v);
          merged.allowed_by.push_back(0);
          it = merged.literals.end() - 1;
        }
        merged.allowed_by[it - merged.literals.begin()] |= static_cast<uint16_t>(1u << owners[j]);
      }
    }
    ASSIGN_OR_RETURN(const int32_t slot, Allocate(absl::StrCat(paths_[any_of], " (property ", name,
                                                               " of its object alternatives)")));
    nodes_[slot] = std::move(merged);
    return slot;
  }

  // Whether nodes a and b take the same instances in the same form: equal but for annotations
  // (pairs met again, through recursion, are assumed equal).
  bool SameNode(int32_t a, int32_t b, std::set<std::pair<int32_t, int32_t>>* assumed) const {
    if (a == b || !assumed->emplace(a, b).second) return true;
    const Node &x = nodes_[a], &y = nodes_[b];
    if (x.kind != y.kind || x.literals != y.literals || x.required != y.required ||
        x.min_items != y.min_items || x.max_items != y.max_items ||
        x.children.size() != y.children.size() || x.name_values.size() != y.name_values.size() ||
        x.member_names != y.member_names || x.member_begin != y.member_begin ||
        x.allowed_by != y.allowed_by) {
      return false;
    }
    for (size_t k = 0; k < x.children.size(); ++k) {
      if (!SameNode(x.children[k], y.children[k], assumed)) return false;
    }
    for (size_t k = 0; k < x.name_values.size(); ++k) {
      if (!SameNode(x.name_values[k], y.name_values[k], assumed)) return false;
    }
    return true;
  }

  // The fewest containers an instance of each node needs (to a fixed point, as $ref may recurse);
  // a node with no finite instance is refused.
  absl::Status Depths() {
    for (Node& n : nodes_) n.min_depth = kNoFiniteInstance;
    for (bool changed = true; changed;) {
      changed = false;
      for (Node& n : nodes_) {
        int32_t d = 0;
        switch (n.kind) {
          case Kind::kObject:
            for (size_t i = 0; i < n.children.size(); ++i) {
              if ((n.required >> i) & 1u) d = std::max(d, nodes_[n.children[i]].min_depth);
            }
            d = std::min(d + 1, kNoFiniteInstance);
            break;
          case Kind::kArray:
            d = std::min(1 + (n.min_items > 0 ? nodes_[n.children[0]].min_depth : 0),
                         kNoFiniteInstance);
            break;
          case Kind::kAnyOf:
          case Kind::kObjectUnion:
            d = kNoFiniteInstance;
            for (int32_t c : n.children) d = std::min(d, nodes_[c].min_depth);
            break;
          default:
            break;
        }
        if (d < n.min_depth) {
          n.min_depth = d;
          changed = true;
        }
      }
    }
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (nodes_[i].min_depth >= kNoFiniteInstance) {
        return Error(paths_[i],
                     "has no finite instance (it recurses through required properties or "
                     "minItems)");
      }
    }
    return absl::OkStatus();
  }

  // The bytes an instance of a node that is not an anyOf may begin with.
  std::set<uint8_t> FirstBytes(const Node& n) const {
    switch (n.kind) {
      case Kind::kObject:
      case Kind::kObjectUnion:
        return {'{'};
      case Kind::kArray:
        return {'['};
      case Kind::kString:
        return {'"'};
      case Kind::kNumber:
      case Kind::kInteger:
        return {'-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9'};
      default: {
        std::set<uint8_t> first;
        for (const std::string& l : n.literals) first.insert(static_cast<uint8_t>(l[0]));
        return first;
      }
    }
  }

  absl::Status Disjoint() {
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (nodes_[i].kind != Kind::kAnyOf) continue;
      std::map<uint8_t, int32_t> owner;
      for (int32_t leaf : nodes_[i].children) {
        for (uint8_t c : FirstBytes(nodes_[leaf])) {
          if (auto [it, fresh] = owner.emplace(c, leaf); !fresh) {
            return Error(paths_[i],
                         absl::StrCat("alternatives ", paths_[it->second], " and ", paths_[leaf],
                                      " can both begin with '", std::string(1, c),
                                      "'; anyOf (or a list of types) is supported when its "
                                      "alternatives begin differently (one array, one string, "
                                      "one number...; its enum and const alternatives count as "
                                      "one, holding all their values, and so do its objects)"));
          }
        }
      }
    }
    return absl::OkStatus();
  }

  const json& root_;
  std::vector<Node> nodes_;
  std::vector<std::string> paths_;  // where each node's schema is
  std::map<std::string, int32_t> refs_;
  std::map<int32_t, std::vector<int32_t>> flat_;
};

absl::StatusOr<std::shared_ptr<const JsonSchema>> JsonSchema::Compile(const json& schema) {
  try {  // dump() throws on strings that are not UTF-8, which a parsed text never has
    if (schema.dump().size() > kMaxSchemaBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("the schema is longer than ", kMaxSchemaBytes, " bytes as compact JSON"));
    }
    return JsonSchemaCompiler(schema).Run();
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
