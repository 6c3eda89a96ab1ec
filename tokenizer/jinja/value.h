// The values a Jinja template computes with, modelled on the Python objects Jinja2 sees when
// transformers renders a chat template: undefined, None, bool, int, float, str, list, dict
// (insertion-ordered), and callables (macros, bound methods, globals). Lists and dicts are shared
// and immutable once built, except namespace() objects, which `{% set ns.x = ... %}` updates.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace ridge::jinja {

class Value;
using Array = std::vector<Value>;

// A dict: keys are strings (JSON objects, keyword arguments), kept in insertion order.
struct Object {
  std::vector<std::pair<std::string, Value>> entries;
  bool is_namespace = false;  // created by namespace(): attributes may be assigned

  const Value* Find(std::string_view key) const;
  void Set(std::string key, Value value);
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

struct Callable {
  std::string name;
  std::function<absl::StatusOr<Value>(CallArgs& args)> call;
};

struct Undefined {
  std::string name;  // what was looked up, for error messages
};

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kArray, kObject, kCallable };

  Value() : data_(Undefined{}) {}
  static Value MakeUndefined(std::string name) { return Value(Undefined{std::move(name)}); }
  static Value None() { return Value(nullptr); }
  Value(bool b) : data_(b) {}  // NOLINT: values convert implicitly, as in Python
  Value(int64_t i) : data_(i) {}
  Value(int i) : data_(static_cast<int64_t>(i)) {}
  Value(double d) : data_(d) {}
  Value(std::string s) : data_(std::move(s)) {}
  Value(const char* s) : data_(std::string(s)) {}
  Value(Array a) : data_(std::make_shared<const Array>(std::move(a))) {}
  Value(std::shared_ptr<Object> o) : data_(std::move(o)) {}
  Value(std::shared_ptr<const Callable> c) : data_(std::move(c)) {}

  // JSON -> Value; integers beyond int64 become floats (as a JSON number is to Python).
  static Value FromJson(const nlohmann::ordered_json& json);
  static Value FromJson(const nlohmann::json& json);

  Kind kind() const { return static_cast<Kind>(data_.index()); }
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_bool() const { return kind() == Kind::kBool; }
  bool is_int() const { return kind() == Kind::kInt; }
  bool is_float() const { return kind() == Kind::kFloat; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_array() const { return kind() == Kind::kArray; }
  bool is_object() const { return kind() == Kind::kObject; }
  bool is_callable() const { return kind() == Kind::kCallable; }

  bool as_bool() const { return std::get<bool>(data_); }
  int64_t as_int() const { return is_bool() ? as_bool() : std::get<int64_t>(data_); }
  double as_double() const {
    return is_float() ? std::get<double>(data_) : static_cast<double>(as_int());
  }
  const std::string& as_string() const { return std::get<std::string>(data_); }
  const Array& as_array() const { return *std::get<std::shared_ptr<const Array>>(data_); }
  const Object& as_object() const { return *std::get<std::shared_ptr<Object>>(data_); }
  Object& mutable_object() const { return *std::get<std::shared_ptr<Object>>(data_); }
  const Callable& as_callable() const { return *std::get<std::shared_ptr<const Callable>>(data_); }
  const std::string& undefined_name() const { return std::get<Undefined>(data_).name; }

  // Python truthiness: empty strings, lists and dicts, 0, None and undefined are false.
  bool Truthy() const;
  // Python's ==, with 1 == 1.0 == True.
  bool Equals(const Value& other) const;
  // Python's str(): what {{ value }} prints (None -> "None", lists as repr, undefined -> "").
  std::string Str() const;
  // Python's repr(): strings quoted as Python quotes them.
  std::string Repr() const;
  // The type name Python would report, for error messages ("str", "list", "dict", ...).
  const char* TypeName() const;

 private:
  explicit Value(Undefined u) : data_(std::move(u)) {}
  explicit Value(std::nullptr_t) : data_(nullptr) {}

  std::variant<Undefined, std::nullptr_t, bool, int64_t, double, std::string,
               std::shared_ptr<const Array>, std::shared_ptr<Object>,
               std::shared_ptr<const Callable>>
      data_;
};

inline Value MakeObject(std::vector<std::pair<std::string, Value>> entries = {}) {
  auto o = std::make_shared<Object>();
  o->entries = std::move(entries);
  return Value(std::move(o));
}

// Python's float repr ("1.0", "1e-05", "1e+16").
std::string FormatFloat(double d);

// json.dumps(value, ensure_ascii=False, indent=indent, separators=..., sort_keys=...) as
// transformers' tojson filter calls it. indent < 0: none. Undefined and callables are a
// TypeError (InvalidArgument).
struct JsonDumpOptions {
  int indent = -1;
  std::string item_separator;  // empty: Python's default (", " or "," with indent)
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};
absl::StatusOr<std::string> ToJson(const Value& value, const JsonDumpOptions& options);

// Python string helpers over UTF-8: code points, as Python indexes str.
std::vector<std::string_view> CodePoints(std::string_view s);

}  // namespace ridge::jinja
