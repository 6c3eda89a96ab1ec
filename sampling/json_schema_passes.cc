// JsonSchemaCompiler's passes over the nodes it has read (sampling/json_schema_compiler.h).
#include <algorithm>
#include <bit>
#include <map>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "sampling/json_schema_compiler.h"

namespace ridge {
namespace {

constexpr int32_t kNoFiniteInstance = 1 << 20;
// A oneOf's leaves (nested alternatives included) CheckOneOf compares two by two. No more can
// compile: Disjoint leaves one string, number, array, 16 objects and 64 enum or const values.
constexpr size_t kMaxOneOfLeaves = 128;

}  // namespace

using Kind = JsonSchema::Kind;

std::vector<int32_t> JsonSchemaCompiler::Leaves(int32_t node) const {
  std::vector<int32_t> leaves, stack = {node};
  std::set<int32_t> seen;
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
  return leaves;
}

absl::Status JsonSchemaCompiler::Flatten() {
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].kind != Kind::kAnyOf) continue;
    std::vector<int32_t> leaves = Leaves(static_cast<int32_t>(i));
    if (leaves.empty()) return Error(paths_[i], "refers only to itself: it has no instance");
    flat_[static_cast<int32_t>(i)] = std::move(leaves);
  }
  for (auto& [i, leaves] : flat_) nodes_[i].children = std::move(leaves);
  return absl::OkStatus();
}

absl::Status JsonSchemaCompiler::MergeLiterals() {
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

absl::Status JsonSchemaCompiler::MergeObjects() {
  // Each anyOf's new children, set once all are merged: NameValue compares property values as
  // read (an anyOf among them merged already would differ from its twin not merged yet).
  std::vector<std::pair<size_t, std::vector<int32_t>>> merged_children;
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
            return Error(paths_[i],
                         absl::StrCat("its object alternatives have more than ",
                                      kMaxSchemaProperties, " different property names together"));
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
    merged_children.emplace_back(i, std::move(children));
  }
  for (auto& [i, children] : merged_children) nodes_[i].children = std::move(children);
  return absl::OkStatus();
}

absl::StatusOr<int32_t> JsonSchemaCompiler::NameValue(int32_t any_of,
                                                      const std::vector<int32_t>& objects,
                                                      const std::string& name,
                                                      const std::vector<size_t>& owners) {
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
    literals = literals && ListOf(values[j]) != nullptr;
  }
  if (differing == 0) return values[0];
  if (!literals) {
    if (std::all_of(owners.begin(), owners.end(),
                    [&](size_t a) { return DecidedBefore(objects, a, name); })) {
      return JsonSchema::kDecidedValue;
    }
    return Error(paths_[any_of],
                 absl::StrCat("its object alternatives ", paths_[objects[owners[0]]], " and ",
                              paths_[objects[owners[differing]]], " give property ", name,
                              " different schemas; objects in one anyOf are supported when a "
                              "property they share has the same schema in each, is an enum or "
                              "const in each (whose value then tells them apart), or comes after "
                              "a discriminator in each (a property it requires, an enum or const "
                              "with values of its own)"));
  }
  Node merged;
  merged.kind = Kind::kLiterals;
  for (size_t j = 0; j < owners.size(); ++j) {
    for (const std::string& v : ListOf(values[j])->literals) {
      auto it = std::find(merged.literals.begin(), merged.literals.end(), v);
      if (it == merged.literals.end()) {
        if (merged.literals.size() == kMaxSchemaEnumValues) {
          return Error(paths_[any_of],
                       absl::StrCat("property ", name, " of its object alternatives has more than ",
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

bool JsonSchemaCompiler::DecidedBefore(const std::vector<int32_t>& objects, size_t a,
                                       const std::string& name) const {
  const Node& own = nodes_[objects[a]];
  for (size_t p = 0; p < own.literals.size() && own.literals[p] != name; ++p) {
    const Node* values = ListOf(own.children[p]);
    if (((own.required >> p) & 1u) == 0 || values == nullptr) continue;
    bool unique = true;  // no other alternative takes one of these values for this property
    for (size_t b = 0; b < objects.size() && unique; ++b) {
      const Node& other = nodes_[objects[b]];
      const auto it = std::find(other.literals.begin(), other.literals.end(), own.literals[p]);
      if (b == a || it == other.literals.end()) continue;  // without it: ended by its name
      const Node* theirs = ListOf(other.children[it - other.literals.begin()]);
      unique =
          theirs != nullptr &&
          std::none_of(values->literals.begin(), values->literals.end(), [&](const std::string& v) {
            return std::find(theirs->literals.begin(), theirs->literals.end(), v) !=
                   theirs->literals.end();
          });
    }
    if (unique) return true;
  }
  return false;
}

const JsonSchema::Node* JsonSchemaCompiler::ListOf(int32_t node) const {
  const Node* n = &nodes_[node];
  // An anyOf of enum, const, null and boolean only: one list since MergeLiterals.
  if (n->kind == Kind::kAnyOf && n->children.size() == 1) n = &nodes_[n->children[0]];
  return n->kind == Kind::kLiterals ? n : nullptr;
}

bool JsonSchemaCompiler::SameNode(int32_t a, int32_t b,
                                  std::set<std::pair<int32_t, int32_t>>* assumed) const {
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
    const int32_t p = x.name_values[k], q = y.name_values[k];
    if (p == JsonSchema::kDecidedValue || q == JsonSchema::kDecidedValue) {
      if (p != q) return false;  // (the alternatives' own values are among the children)
    } else if (!SameNode(p, q, assumed)) {
      return false;
    }
  }
  return true;
}

absl::Status JsonSchemaCompiler::CheckOneOf() {
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].kind != Kind::kAnyOf || !nodes_[i].one_of) continue;
    if (const size_t all = Leaves(static_cast<int32_t>(i)).size(); all > kMaxOneOfLeaves) {
      return Error(paths_[i], absl::StrCat("it opens to ", all,
                                           " alternatives (nested ones included), more than the ",
                                           kMaxOneOfLeaves, " supported"));
    }
    const std::vector<int32_t>& alternatives = nodes_[i].children;
    std::vector<std::vector<int32_t>> leaves;
    for (const int32_t a : alternatives) leaves.push_back(Leaves(a));
    for (size_t p = 0; p < alternatives.size(); ++p) {
      for (size_t q = p + 1; q < alternatives.size(); ++q) {
        for (const int32_t a : leaves[p]) {
          for (const int32_t b : leaves[q]) {
            const std::string overlap = Overlap(a, b);
            if (overlap.empty()) continue;
            return Error(paths_[i], absl::StrCat("its alternatives ", paths_[i], "/oneOf/", p,
                                                 " and ", paths_[i], "/oneOf/", q, " ", overlap,
                                                 "; a oneOf's instance must match exactly one"));
          }
        }
      }
    }
  }
  return absl::OkStatus();
}

std::string JsonSchemaCompiler::Overlap(int32_t a, int32_t b) const {
  if (a == b) return absl::StrCat("both take every instance of ", paths_[a]);
  const Node &x = nodes_[a], &y = nodes_[b];
  if (x.kind == Kind::kLiterals && y.kind == Kind::kLiterals) {
    for (const std::string& v : x.literals) {
      if (std::find(y.literals.begin(), y.literals.end(), v) != y.literals.end()) {
        return absl::StrCat("both take ", v);
      }
    }
    return "";
  }
  if (x.kind == Kind::kObject && y.kind == Kind::kObject) {
    if (Discriminated(x, y)) return "";
    return absl::StrCat("are objects (", paths_[a], " and ", paths_[b],
                        ") with no property that tells them apart: one both require, an enum or "
                        "const in each with no value in common");
  }
  const std::set<uint8_t> first = FirstBytes(x);
  for (const uint8_t c : FirstBytes(y)) {
    if (first.contains(c)) return absl::StrCat("can both begin with '", std::string(1, c), "'");
  }
  return "";
}

bool JsonSchemaCompiler::Discriminated(const Node& x, const Node& y) const {
  for (size_t k = 0; k < x.literals.size(); ++k) {
    const auto it = std::find(y.literals.begin(), y.literals.end(), x.literals[k]);
    if (it == y.literals.end()) continue;
    const size_t m = static_cast<size_t>(it - y.literals.begin());
    if (((x.required >> k) & 1u) == 0 || ((y.required >> m) & 1u) == 0) continue;
    const std::optional<std::set<std::string>> mine = LiteralValues(x.children[k]);
    const std::optional<std::set<std::string>> theirs = LiteralValues(y.children[m]);
    if (!mine || !theirs) continue;
    if (std::none_of(mine->begin(), mine->end(),
                     [&](const std::string& v) { return theirs->contains(v); })) {
      return true;
    }
  }
  return false;
}

std::optional<std::set<std::string>> JsonSchemaCompiler::LiteralValues(int32_t node) const {
  std::set<std::string> values;
  for (const int32_t leaf : Leaves(node)) {
    if (nodes_[leaf].kind != Kind::kLiterals) return std::nullopt;
    values.insert(nodes_[leaf].literals.begin(), nodes_[leaf].literals.end());
  }
  return values;
}

absl::Status JsonSchemaCompiler::Depths() {
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

std::set<uint8_t> JsonSchemaCompiler::FirstBytes(const Node& n) const {
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

absl::Status JsonSchemaCompiler::Disjoint() {
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

}  // namespace ridge
