// Binary operators with Python's semantics (builtins.h).
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "tokenizer/jinja/builtins.h"

namespace ridge::jinja {
namespace {

absl::Status TypeError(const std::string& message) { return absl::InvalidArgumentError(message); }

}  // namespace

absl::StatusOr<Value> ApplyOperator(const std::string& op, const Value& a, const Value& b,
                                    size_t max_string_bytes) {
  if (op == "~") return Value(a.Str() + b.Str());
  if (op == "==") return Value(a.Equals(b));
  if (op == "!=") return Value(!a.Equals(b));
  if (op == "in" || op == "notin") {
    CallArgs args;
    args.positional.push_back(b);
    if (b.is_string() && !a.is_string()) {
      return TypeError(
          absl::StrCat("'in <string>' requires a string on the left, not '", a.TypeName(), "'"));
    }
    if (!b.is_string() && !b.is_array() && !b.is_object() && !b.is_undefined()) {
      return TypeError(absl::StrCat("argument of type '", b.TypeName(), "' is not iterable"));
    }
    absl::StatusOr<bool> found = ApplyTest("in", a, args);
    if (!found.ok()) return found.status();
    return Value(*found != (op == "notin"));
  }
  for (const Value* v : {&a, &b}) {
    if (v->is_undefined())
      return TypeError(
          absl::StrCat("'" + v->undefined_name() + "' is undefined", " (operator ", op, ")"));
  }
  if (op == "<" || op == ">" || op == "<=" || op == ">=") {
    absl::StatusOr<bool> less = op == "<" || op == ">=" ? LessThan(a, b) : LessThan(b, a);
    if (!less.ok()) return less.status();
    return Value(op == "<" || op == ">" ? *less : !*less);
  }
  const std::string type_error = absl::StrCat("unsupported operand types for ", op, ": '",
                                              a.TypeName(), "' and '", b.TypeName(), "'");
  if (op == "+") {
    if (a.is_string() && b.is_string()) return Value(a.as_string() + b.as_string());
    if (a.is_array() && b.is_array()) {
      Array items = a.as_array();
      items.insert(items.end(), b.as_array().begin(), b.as_array().end());
      return Value(std::move(items));
    }
  }
  if (op == "*" && ((a.is_string() && b.is_int()) || (a.is_int() && b.is_string()))) {
    const std::string& text = a.is_string() ? a.as_string() : b.as_string();
    const int64_t times = a.is_string() ? b.as_int() : a.as_int();
    if (times > 0 && text.size() * static_cast<size_t>(times) > max_string_bytes) {
      return TypeError("string repetition too large");
    }
    std::string out;
    for (int64_t i = 0; i < times; ++i) out += text;
    return Value(std::move(out));
  }
  if (!a.is_number() || !b.is_number()) return TypeError(type_error);
  const bool floats = a.is_float() || b.is_float();
  if (op == "/") {
    if (b.as_double() == 0) return TypeError("division by zero");
    return Value(a.as_double() / b.as_double());
  }
  if (op == "**") {
    if (!floats && b.as_int() >= 0) {
      const double r = std::pow(a.as_double(), b.as_double());
      if (std::fabs(r) < 9e18) return Value(static_cast<int64_t>(std::llround(r)));
    }
    return Value(std::pow(a.as_double(), b.as_double()));
  }
  if (floats) {
    const double x = a.as_double(), y = b.as_double();
    if (op == "+") return Value(x + y);
    if (op == "-") return Value(x - y);
    if (op == "*") return Value(x * y);
    if (y == 0) return TypeError("division by zero");
    if (op == "//") return Value(std::floor(x / y));
    return Value(x - std::floor(x / y) * y);  // %
  }
  const int64_t x = a.as_int(), y = b.as_int();
  if (op == "+") return Value(x + y);
  if (op == "-") return Value(x - y);
  if (op == "*") return Value(x * y);
  if (y == 0) return TypeError("division by zero");
  int64_t q = x / y;
  if ((x % y != 0) && ((x < 0) != (y < 0))) --q;  // Python floors
  if (op == "//") return Value(q);
  return Value(x - q * y);
}

}  // namespace ridge::jinja
