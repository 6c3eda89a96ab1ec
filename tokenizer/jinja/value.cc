#include "tokenizer/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace ridge::jinja {

const Value* Object::Find(std::string_view key) const {
  for (const auto& [k, v] : entries) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Object::Set(std::string key, Value value) {
  for (auto& [k, v] : entries) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  entries.emplace_back(std::move(key), std::move(value));
}

namespace {

template <typename JsonT>
Value FromJsonImpl(const JsonT& json) {
  switch (json.type()) {
    case nlohmann::json::value_t::null:
    case nlohmann::json::value_t::discarded:
      return Value::None();
    case nlohmann::json::value_t::boolean:
      return Value(json.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value(json.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      const uint64_t u = json.template get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<int64_t>(u));
      return Value(static_cast<double>(u));
    }
    case nlohmann::json::value_t::number_float:
      return Value(json.template get<double>());
    case nlohmann::json::value_t::string:
      return Value(json.template get<std::string>());
    case nlohmann::json::value_t::array: {
      Array items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(FromJsonImpl(item));
      return Value(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      std::vector<std::pair<std::string, Value>> entries;
      entries.reserve(json.size());
      for (auto it = json.begin(); it != json.end(); ++it) {
        entries.emplace_back(it.key(), FromJsonImpl(it.value()));
      }
      return MakeObject(std::move(entries));
    }
    case nlohmann::json::value_t::binary:
      break;
  }
  return Value::None();
}

// Python's repr of a str: single quotes unless the text holds ' and no ".
std::string PythonQuote(const std::string& s) {
  const bool use_double = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char quote = use_double ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == quote || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  out.push_back(quote);
  return out;
}

void AppendJsonString(const std::string& s, bool ensure_ascii, std::string* out) {
  out->push_back('"');
  const std::vector<std::string_view> points = CodePoints(s);
  for (std::string_view p : points) {
    const unsigned char c = static_cast<unsigned char>(p[0]);
    if (p.size() == 1) {
      switch (c) {
        case '"':
          *out += "\\\"";
          continue;
        case '\\':
          *out += "\\\\";
          continue;
        case '\n':
          *out += "\\n";
          continue;
        case '\r':
          *out += "\\r";
          continue;
        case '\t':
          *out += "\\t";
          continue;
        case '\b':
          *out += "\\b";
          continue;
        case '\f':
          *out += "\\f";
          continue;
        default:
          break;
      }
      if (c < 0x20 || (ensure_ascii && c >= 0x80)) {
        char buf[8];
        std::snprintf(buf, sizeof(buf), "\\u%04x", c);
        *out += buf;
      } else {
        out->push_back(static_cast<char>(c));
      }
      continue;
    }
    if (!ensure_ascii) {
      out->append(p);
      continue;
    }
    // Decode the UTF-8 sequence and write \uXXXX (surrogate pairs above the BMP).
    uint32_t cp = c & (p.size() == 2 ? 0x1F : p.size() == 3 ? 0x0F : 0x07);
    for (size_t i = 1; i < p.size(); ++i) cp = (cp << 6) | (p[i] & 0x3F);
    char buf[16];
    if (cp >= 0x10000) {
      cp -= 0x10000;
      std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
    } else {
      std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
    }
    *out += buf;
  }
  out->push_back('"');
}

absl::Status DumpJson(const Value& v, const JsonDumpOptions& o, int depth, std::string* out) {
  if (depth > 512) return absl::InvalidArgumentError("tojson: value nested too deeply");
  const std::string item_sep =
      !o.item_separator.empty() ? o.item_separator : (o.indent >= 0 ? "," : ", ");
  auto newline = [&](int level) {
    if (o.indent < 0) return;
    out->push_back('\n');
    out->append(static_cast<size_t>(o.indent) * level, ' ');
  };
  switch (v.kind()) {
    case Value::Kind::kNone:
      *out += "null";
      return absl::OkStatus();
    case Value::Kind::kBool:
      *out += v.as_bool() ? "true" : "false";
      return absl::OkStatus();
    case Value::Kind::kInt:
      *out += std::to_string(v.as_int());
      return absl::OkStatus();
    case Value::Kind::kFloat: {
      const double d = v.as_double();
      if (std::isnan(d)) {
        *out += "NaN";
      } else if (std::isinf(d)) {
        *out += d > 0 ? "Infinity" : "-Infinity";
      } else {
        *out += FormatFloat(d);
      }
      return absl::OkStatus();
    }
    case Value::Kind::kString:
      AppendJsonString(v.as_string(), o.ensure_ascii, out);
      return absl::OkStatus();
    case Value::Kind::kArray: {
      const Array& a = v.as_array();
      if (a.empty()) {
        *out += "[]";
        return absl::OkStatus();
      }
      out->push_back('[');
      for (size_t i = 0; i < a.size(); ++i) {
        if (i > 0) *out += item_sep;
        newline(depth + 1);
        if (absl::Status s = DumpJson(a[i], o, depth + 1, out); !s.ok()) return s;
      }
      newline(depth);
      out->push_back(']');
      return absl::OkStatus();
    }
    case Value::Kind::kObject: {
      std::vector<const std::pair<std::string, Value>*> entries;
      for (const auto& e : v.as_object().entries) entries.push_back(&e);
      if (o.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(),
                         [](auto* a, auto* b) { return a->first < b->first; });
      }
      if (entries.empty()) {
        *out += "{}";
        return absl::OkStatus();
      }
      out->push_back('{');
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i > 0) *out += item_sep;
        newline(depth + 1);
        AppendJsonString(entries[i]->first, o.ensure_ascii, out);
        *out += o.key_separator;
        if (absl::Status s = DumpJson(entries[i]->second, o, depth + 1, out); !s.ok()) return s;
      }
      newline(depth);
      out->push_back('}');
      return absl::OkStatus();
    }
    case Value::Kind::kUndefined:
      return absl::InvalidArgumentError(
          absl::StrCat("tojson: '", v.undefined_name(), "' is undefined"));
    case Value::Kind::kCallable:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("tojson: a ", v.TypeName(), " is not JSON serializable"));
}

}  // namespace

Value Value::FromJson(const nlohmann::ordered_json& json) { return FromJsonImpl(json); }
Value Value::FromJson(const nlohmann::json& json) { return FromJsonImpl(json); }

bool Value::Truthy() const {
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return as_bool();
    case Kind::kInt:
      return as_int() != 0;
    case Kind::kFloat:
      return as_double() != 0.0;
    case Kind::kString:
      return !as_string().empty();
    case Kind::kArray:
      return !as_array().empty();
    case Kind::kObject:
      return !as_object().entries.empty();
    case Kind::kCallable:
      return true;
  }
  return false;
}

bool Value::Equals(const Value& other) const {
  if (is_number() && other.is_number()) {
    if (is_float() || other.is_float()) return as_double() == other.as_double();
    return as_int() == other.as_int();
  }
  if (kind() != other.kind()) return false;
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      return as_string() == other.as_string();
    case Kind::kArray: {
      const Array& a = as_array();
      const Array& b = other.as_array();
      if (a.size() != b.size()) return false;
      for (size_t i = 0; i < a.size(); ++i) {
        if (!a[i].Equals(b[i])) return false;
      }
      return true;
    }
    case Kind::kObject: {
      const Object& a = as_object();
      const Object& b = other.as_object();
      if (a.entries.size() != b.entries.size()) return false;
      for (const auto& [k, v] : a.entries) {
        const Value* w = b.Find(k);
        if (w == nullptr || !v.Equals(*w)) return false;
      }
      return true;
    }
    case Kind::kCallable:
      return &as_callable() == &other.as_callable();
    default:
      return false;
  }
}

std::string FormatFloat(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  // Shortest round-trip digits, then Python's layout: positional for 1e-4 <= |d| < 1e16.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  const size_t e_pos = sci.find('e');
  std::string mantissa = sci.substr(0, e_pos);
  const int exponent = std::atoi(sci.c_str() + e_pos + 1);
  const bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits.push_back(c);
  }
  std::string out = negative ? "-" : "";
  if (exponent < -4 || exponent >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exp[16];
    std::snprintf(exp, sizeof(exp), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out + exp;
  }
  if (exponent < 0) {
    return out + "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
  }
  const size_t int_len = static_cast<size_t>(exponent) + 1;
  if (digits.size() <= int_len) {
    return out + digits + std::string(int_len - digits.size(), '0') + ".0";
  }
  return out + digits.substr(0, int_len) + "." + digits.substr(int_len);
}

std::string Value::Str() const {
  switch (kind()) {
    case Kind::kUndefined:
      return "";
    case Kind::kString:
      return as_string();
    default:
      return Repr();
  }
}

std::string Value::Repr() const {
  switch (kind()) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return as_bool() ? "True" : "False";
    case Kind::kInt:
      return std::to_string(as_int());
    case Kind::kFloat:
      return FormatFloat(as_double());
    case Kind::kString:
      return PythonQuote(as_string());
    case Kind::kArray: {
      std::string out = "[";
      for (const Value& v : as_array()) {
        if (out.size() > 1) out += ", ";
        out += v.Repr();
      }
      return out + "]";
    }
    case Kind::kObject: {
      std::string out = "{";
      for (const auto& [k, v] : as_object().entries) {
        if (out.size() > 1) out += ", ";
        out += PythonQuote(k) + ": " + v.Repr();
      }
      return out + "}";
    }
    case Kind::kCallable:
      return "<function " + as_callable().name + ">";
  }
  return "";
}

const char* Value::TypeName() const {
  switch (kind()) {
    case Kind::kUndefined:
      return "undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kArray:
      return "list";
    case Kind::kObject:
      return as_object().is_namespace ? "Namespace" : "dict";
    case Kind::kCallable:
      return "function";
  }
  return "?";
}

absl::StatusOr<std::string> ToJson(const Value& value, const JsonDumpOptions& options) {
  std::string out;
  if (absl::Status s = DumpJson(value, options, 0, &out); !s.ok()) return s;
  return out;
}

std::vector<std::string_view> CodePoints(std::string_view s) {
  std::vector<std::string_view> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80           ? 1
                 : (c >> 5) == 0x6  ? 2
                 : (c >> 4) == 0xE  ? 3
                 : (c >> 3) == 0x1E ? 4
                                    : 1;
    if (i + len > s.size()) len = 1;
    out.push_back(s.substr(i, len));
    i += len;
  }
  return out;
}

}  // namespace ridge::jinja
