// JsonSchemaCompiler: JsonSchema::Compile's work (sampling/json_schema.h), internal to the
// sampling library. json_schema_compile.cc reads the schema into nodes (each refusal naming the
// keyword and its place); json_schema_passes.cc then opens nested anyOf, merges an anyOf's
// literal and object alternatives, proves a oneOf's alternatives exclusive, computes depths and
// checks that an anyOf's alternatives begin differently.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "sampling/json_schema.h"

namespace ridge {

class JsonSchemaCompiler {
  using json = nlohmann::ordered_json;
  using Kind = JsonSchema::Kind;
  using Node = JsonSchema::Node;

 public:
  JsonSchemaCompiler(const json& root, JsonSchemaTop top) : root_(root), top_(top) {}

  absl::StatusOr<std::shared_ptr<const JsonSchema>> Run();

 private:
  static absl::Status Error(const std::string& path, const std::string& what);

  absl::StatusOr<int32_t> Allocate(const std::string& path);

  // The node of `schema`: a $ref alone is its target's node, anything else a new one.
  absl::StatusOr<int32_t> Compile(const json& schema, const std::string& path, int nesting);

  static bool OnlyRef(const json& schema);

  // The node of a local reference: "#", "#/$defs/NAME" or "#/definitions/NAME".
  absl::StatusOr<int32_t> Ref(const std::string& ref, int nesting);

  absl::Status Fill(int32_t slot, const json& s, const std::string& path, int nesting);

  // A schema with "$ref" that Fill was given: Compile takes a $ref alone (annotations aside) as
  // its target's node, so this is a "$ref" beside keywords that say something, the top level,
  // or a definition reached through Ref (which fills a target in place) that is itself only a
  // "$ref". Each is refused naming what is not supported.
  static absl::Status RefusedRef(const json& s, const std::string& path);

  absl::Status ReadTypes(const json& s, const std::string& path, std::vector<std::string>* types);

  absl::Status FillType(int32_t slot, const std::string& type, const json& s,
                        const std::string& path, int nesting);

  absl::Status FillObject(int32_t slot, const json& s, const std::string& path, int nesting);

  absl::Status FillArray(int32_t slot, const json& s, const std::string& path, int nesting);

  // "anyOf", or "oneOf" (the same node, whose alternatives CheckOneOf then proves exclusive).
  absl::Status FillAnyOf(int32_t slot, const json& s, const char* keyword, const std::string& path,
                         int nesting);

  absl::Status FillLiterals(int32_t slot, const json& s, const std::string& path);

  // The nodes that are not anyOf that `node` is, or opens to (nested anyOf and oneOf and $ref
  // chains opened), each once, in order.
  std::vector<int32_t> Leaves(int32_t node) const;

  // Each anyOf's alternatives as nodes that are not anyOf (its Leaves).
  absl::Status Flatten();

  // In each anyOf with two or more alternatives that are lists of values (enum, const, and the
  // types null and boolean), those alternatives as one new list holding all their values, each
  // once and in the order first seen, in the place of the first: two strings or two numbers
  // begin with the same byte, which Disjoint refuses between alternatives, and the literal
  // automaton tells values apart by all their bytes. The leaves stay as they are, since one may
  // be used elsewhere (a definition, an anyOf inside another).
  absl::Status MergeLiterals();

  // In each anyOf with two or more object alternatives, those alternatives as one kObjectUnion
  // in the place of the first (see json_schema.h): every name of theirs once, each name's value
  // node (the one they share, the kLiterals of all their values with which alternatives allow
  // each, or kDecidedValue when a discriminator before it decides), and each alternative's names
  // in its order.
  absl::Status MergeObjects();

  // The value node of property `name` in a union of the object alternatives `objects` of anyOf
  // `any_of`, which `owners` (indices into `objects`) have.
  absl::StatusOr<int32_t> NameValue(int32_t any_of, const std::vector<int32_t>& objects,
                                    const std::string& name, const std::vector<size_t>& owners);

  // Whether alternative a of `objects` writes, before property `name`, a discriminator: a
  // property it requires, an enum or const none of whose values another alternative takes for
  // it. Reading it leaves a alone alive, so `name` may have a schema of a's own.
  bool DecidedBefore(const std::vector<int32_t>& objects, size_t a, const std::string& name) const;

  // The list of values a node is (an enum or const, or an anyOf of them, after MergeLiterals),
  // or null when it is not one.
  const Node* ListOf(int32_t node) const;

  // Whether nodes a and b take the same instances in the same form: equal but for annotations,
  // anyOf or oneOf alike (pairs met again, through recursion, are assumed equal).
  bool SameNode(int32_t a, int32_t b, std::set<std::pair<int32_t, int32_t>>* assumed) const;

  // A oneOf's instance must match exactly one alternative, and the automaton writes an instance
  // of one. Run before Flatten, on the alternatives as written: each leaf of one (see Leaves)
  // must exclude each leaf of every other (Overlap says how they may not), so that a nested
  // oneOf or anyOf is one alternative (its own leaves may overlap; a nested oneOf's are checked
  // on its own node).
  absl::Status CheckOneOf();

  // Empty when no instance matches both leaves a and b, which holds when they begin
  // differently, are enum or const lists with no value in common, or are objects told apart by
  // a discriminator (Discriminated); otherwise how an instance may match both.
  std::string Overlap(int32_t a, int32_t b) const;

  // Whether objects x and y both require a property that is an enum or const in each (through
  // anyOf too), with no value in common.
  bool Discriminated(const Node& x, const Node& y) const;

  // The values of a node that is enum or const lists only (through anyOf), or none.
  std::optional<std::set<std::string>> LiteralValues(int32_t node) const;

  // The fewest containers an instance of each node needs (to a fixed point, as $ref may recurse);
  // a node with no finite instance is refused.
  absl::Status Depths();

  // The bytes an instance of a node that is not an anyOf may begin with.
  std::set<uint8_t> FirstBytes(const Node& n) const;

  absl::Status Disjoint();

  const json& root_;
  const JsonSchemaTop top_;
  std::vector<Node> nodes_;
  std::vector<std::string> paths_;  // where each node's schema is
  std::map<std::string, int32_t> refs_;
  std::map<int32_t, std::vector<int32_t>> flat_;
};

}  // namespace ridge
