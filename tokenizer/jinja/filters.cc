// Filters and tests (builtins.h), with Jinja2's semantics as transformers configures it (its
// tojson keeps non-ASCII text and takes json.dumps' indent / separators / sort_keys).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "tokenizer/jinja/builtins.h"

namespace ridge::jinja {
namespace {

absl::Status TypeError(const std::string& message) { return absl::InvalidArgumentError(message); }

constexpr std::string_view kFilters[] = {
    "tojson", "trim",   "length",  "count",    "default", "d",          "selectattr", "rejectattr",
    "select", "reject", "map",     "join",     "first",   "last",       "lower",      "upper",
    "string", "int",    "float",   "list",     "items",   "capitalize", "replace",    "safe",
    "title",  "abs",    "reverse", "unique",   "sort",    "e",          "escape",     "indent",
    "min",    "max",    "sum",     "dictsort", "round",   "wordcount",  "striptags"};

constexpr std::string_view kTests[] = {
    "defined",     "undefined", "none",        "string",   "mapping", "iterable", "sequence",
    "number",      "integer",   "float",       "boolean",  "true",    "false",    "equalto",
    "eq",          "==",        "ne",          "!=",       "in",      "odd",      "even",
    "divisibleby", "callable",  "sameas",      "lower",    "upper",   "gt",       "lt",
    "ge",          "le",        "greaterthan", "lessthan", "filter",  "test",     "escaped"};

const Value& Arg(CallArgs& args, size_t i, std::string_view keyword) {
  static const Value kMissing;
  if (i < args.positional.size()) return args.positional[i];
  for (const auto& [k, v] : args.keyword) {
    if (k == keyword) return v;
  }
  return kMissing;
}

int64_t Length(const Value& v) {
  if (v.is_string()) return static_cast<int64_t>(CodePoints(v.as_string()).size());
  if (v.is_array()) return static_cast<int64_t>(v.as_array().size());
  if (v.is_object()) return static_cast<int64_t>(v.as_object().entries.size());
  return 0;
}

// The value of attribute "a.b.c" (dots walk into dicts; numbers index lists), as Jinja's
// make_attrgetter does.
absl::StatusOr<Value> AttributePath(const Value& item, const Value& path) {
  if (path.is_number() && !path.is_float()) return GetItem(item, path);
  if (!path.is_string()) return TypeError("attribute names must be strings");
  Value current = item;
  const std::string& p = path.as_string();
  size_t start = 0;
  while (true) {
    const size_t dot = p.find('.', start);
    const std::string part =
        p.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    absl::StatusOr<Value> next =
        numeric ? GetItem(current, Value(static_cast<int64_t>(std::atoll(part.c_str()))))
                : GetItem(current, Value(part));
    if (!next.ok()) return next.status();
    current = *std::move(next);
    if (dot == std::string::npos) return current;
    start = dot + 1;
  }
}

// select / reject / selectattr / rejectattr.
absl::StatusOr<Value> SelectFilter(std::string_view name, const Value& subject, CallArgs& args) {
  const bool by_attribute = name == "selectattr" || name == "rejectattr";
  const bool keep_when = name == "select" || name == "selectattr";
  absl::StatusOr<Array> items = Iterate(subject);
  if (!items.ok()) return items.status();
  size_t next = 0;
  Value attribute;
  if (by_attribute) {
    if (args.positional.empty())
      return TypeError(absl::StrCat(std::string(name), " needs an attribute"));
    attribute = args.positional[next++];
  }
  std::string test;
  if (next < args.positional.size()) {
    if (!args.positional[next].is_string()) return TypeError("test names must be strings");
    test = args.positional[next++].as_string();
    if (!IsKnownTest(test)) return TypeError(absl::StrCat("unsupported test '", test, "'"));
  }
  CallArgs test_args;
  test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(next),
                              args.positional.end());
  Array out;
  for (const Value& item : *items) {
    Value checked = item;
    if (by_attribute) {
      absl::StatusOr<Value> v = AttributePath(item, attribute);
      if (!v.ok()) return v.status();
      checked = *std::move(v);
    }
    bool passes = checked.Truthy();
    if (!test.empty()) {
      CallArgs copy = test_args;
      absl::StatusOr<bool> r = ApplyTest(test, checked, copy);
      if (!r.ok()) return r.status();
      passes = *r;
    }
    if (passes == keep_when) out.push_back(item);
  }
  return Value(std::move(out));
}

absl::StatusOr<Value> MapFilter(const Value& subject, CallArgs& args) {
  absl::StatusOr<Array> items = Iterate(subject);
  if (!items.ok()) return items.status();
  const Value& attribute = Arg(args, 99, "attribute");
  Array out;
  if (!attribute.is_undefined()) {
    const Value& fallback = Arg(args, 99, "default");
    for (const Value& item : *items) {
      absl::StatusOr<Value> v = AttributePath(item, attribute);
      if (!v.ok()) return v.status();
      out.push_back(v->is_undefined() && !fallback.is_undefined() ? fallback : *v);
    }
    return Value(std::move(out));
  }
  if (args.positional.empty() || !args.positional[0].is_string()) {
    return TypeError("map() needs a filter name or attribute=");
  }
  const std::string filter = args.positional[0].as_string();
  if (!IsKnownFilter(filter)) return TypeError(absl::StrCat("unsupported filter '", filter, "'"));
  for (const Value& item : *items) {
    CallArgs rest;
    rest.positional.assign(args.positional.begin() + 1, args.positional.end());
    rest.keyword = args.keyword;
    absl::StatusOr<Value> v = ApplyFilter(filter, item, rest);
    if (!v.ok()) return v.status();
    out.push_back(*std::move(v));
  }
  return Value(std::move(out));
}

absl::StatusOr<Value> SortFilter(const Value& subject, CallArgs& args, bool unique_only) {
  absl::StatusOr<Array> items = Iterate(subject);
  if (!items.ok()) return items.status();
  const Value& attribute = Arg(args, unique_only ? 1 : 2, "attribute");
  const bool reverse = !unique_only && Arg(args, 0, "reverse").Truthy();
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& item : *items) {
    Value key = item;
    if (!attribute.is_undefined()) {
      absl::StatusOr<Value> v = AttributePath(item, attribute);
      if (!v.ok()) return v.status();
      key = *v;
    }
    if (key.is_string() && !Arg(args, unique_only ? 0 : 1, "case_sensitive").Truthy()) {
      std::string lower = key.as_string();
      for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      key = Value(std::move(lower));
    }
    keyed.emplace_back(std::move(key), item);
  }
  Array out;
  if (unique_only) {
    std::vector<Value> seen;
    for (auto& entry : keyed) {
      const Value& key = entry.first;  // (clang 14 cannot capture a structured binding)
      if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return s.Equals(key); }))
        continue;
      seen.push_back(key);
      out.push_back(entry.second);
    }
    return Value(std::move(out));
  }
  absl::Status error;
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    absl::StatusOr<bool> less = reverse ? LessThan(b.first, a.first) : LessThan(a.first, b.first);
    if (!less.ok()) error = less.status();
    return less.ok() && *less;
  });
  if (!error.ok()) return error;
  for (auto& [key, item] : keyed) out.push_back(item);
  return Value(std::move(out));
}

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

absl::StatusOr<Value> ToJsonFilter(const Value& subject, CallArgs& args) {
  JsonDumpOptions o;
  const Value& indent = Arg(args, 0, "indent");
  if (indent.is_number() && !indent.is_float()) {
    o.indent = static_cast<int>(std::clamp<int64_t>(indent.as_int(), 0, 64));
  } else if (!indent.is_undefined() && !indent.is_none()) {
    return TypeError("tojson: indent must be an integer");
  }
  const Value& separators = Arg(args, 99, "separators");
  if (separators.is_array() && separators.as_array().size() == 2 &&
      separators.as_array()[0].is_string() && separators.as_array()[1].is_string()) {
    o.item_separator = separators.as_array()[0].as_string();
    o.key_separator = separators.as_array()[1].as_string();
    if (o.item_separator.empty()) o.item_separator = std::string();
  } else if (!separators.is_undefined() && !separators.is_none()) {
    return TypeError("tojson: separators must be a pair of strings");
  }
  o.sort_keys = Arg(args, 99, "sort_keys").Truthy();
  o.ensure_ascii = Arg(args, 99, "ensure_ascii").Truthy();
  absl::StatusOr<std::string> text = ToJson(subject, o);
  if (!text.ok()) return text.status();
  return Value(*std::move(text));
}

absl::StatusOr<Value> NumberFilter(const Value& subject, CallArgs& args, bool integer) {
  const Value& fallback = Arg(args, 0, "default");
  if (subject.is_number()) {
    if (integer)
      return Value(subject.is_float() ? static_cast<int64_t>(subject.as_double())
                                      : subject.as_int());
    return Value(subject.as_double());
  }
  if (subject.is_string()) {
    const std::string& s = subject.as_string();
    char* end = nullptr;
    if (integer) {
      const long long v = std::strtoll(s.c_str(), &end, 10);
      if (end != s.c_str() && *end == '\0') return Value(static_cast<int64_t>(v));
      const double d = std::strtod(s.c_str(), &end);  // Jinja's int() also reads "3.7"
      if (end != s.c_str() && *end == '\0' && std::isfinite(d))
        return Value(static_cast<int64_t>(d));
    } else {
      const double d = std::strtod(s.c_str(), &end);
      if (end != s.c_str() && *end == '\0') return Value(d);
    }
  }
  if (!fallback.is_undefined()) return fallback;
  return integer ? Value(static_cast<int64_t>(0)) : Value(0.0);
}

}  // namespace

bool IsKnownFilter(std::string_view name) {
  return std::find(std::begin(kFilters), std::end(kFilters), name) != std::end(kFilters);
}

bool IsKnownTest(std::string_view name) {
  return std::find(std::begin(kTests), std::end(kTests), name) != std::end(kTests);
}

absl::StatusOr<Value> ApplyFilter(std::string_view name, const Value& subject, CallArgs& args) {
  if (name == "default" || name == "d") {
    const Value& fallback = Arg(args, 0, "default_value");
    const bool boolean = Arg(args, 1, "boolean").Truthy();
    if (subject.is_undefined() || (boolean && !subject.Truthy())) {
      return fallback.is_undefined() ? Value(std::string()) : fallback;
    }
    return subject;
  }
  if (name == "selectattr" || name == "rejectattr" || name == "select" || name == "reject") {
    return SelectFilter(name, subject, args);
  }
  if (name == "map") return MapFilter(subject, args);
  if (name == "tojson") return ToJsonFilter(subject, args);
  if (name == "safe") return subject;
  if (name == "length" || name == "count") {
    if (!subject.is_string() && !subject.is_array() && !subject.is_object() &&
        !subject.is_undefined()) {
      return TypeError(absl::StrCat("object of type '", subject.TypeName(), "' has no len()"));
    }
    return Value(Length(subject));
  }
  if (name == "string") return Value(subject.Str());
  if (name == "int") return NumberFilter(subject, args, true);
  if (name == "float") return NumberFilter(subject, args, false);
  if (name == "list") {
    absl::StatusOr<Array> items = Iterate(subject);
    if (!items.ok()) return items.status();
    return Value(*std::move(items));
  }
  if (name == "items" || name == "dictsort") {
    if (subject.is_undefined()) return Value(Array{});
    if (!subject.is_object()) return TypeError(absl::StrCat(std::string(name), " needs a dict"));
    Array out;
    for (const auto& [k, v] : subject.as_object().entries) out.emplace_back(Array{Value(k), v});
    if (name == "dictsort") {
      std::stable_sort(out.begin(), out.end(), [](const Value& a, const Value& b) {
        return a.as_array()[0].as_string() < b.as_array()[0].as_string();
      });
    }
    return Value(std::move(out));
  }
  if (name == "first" || name == "last") {
    absl::StatusOr<Array> items = Iterate(subject);
    if (!items.ok()) return items.status();
    if (items->empty()) return Value::MakeUndefined(std::string(name));
    return name == "first" ? items->front() : items->back();
  }
  if (name == "join") {
    absl::StatusOr<Array> items = Iterate(subject);
    if (!items.ok()) return items.status();
    const Value& sep = Arg(args, 0, "d");
    const Value& attribute = Arg(args, 1, "attribute");
    std::string out;
    for (size_t i = 0; i < items->size(); ++i) {
      if (i > 0) out += sep.is_undefined() ? "" : sep.Str();
      Value item = (*items)[i];
      if (!attribute.is_undefined()) {
        absl::StatusOr<Value> v = AttributePath(item, attribute);
        if (!v.ok()) return v.status();
        item = *v;
      }
      out += item.Str();
    }
    return Value(std::move(out));
  }
  if (name == "reverse") {
    if (subject.is_string()) return Slice(subject, Value::None(), Value::None(), Value(-1));
    absl::StatusOr<Array> items = Iterate(subject);
    if (!items.ok()) return items.status();
    std::reverse(items->begin(), items->end());
    return Value(*std::move(items));
  }
  if (name == "sort") return SortFilter(subject, args, false);
  if (name == "unique") return SortFilter(subject, args, true);
  if (name == "min" || name == "max" || name == "sum") {
    absl::StatusOr<Array> items = Iterate(subject);
    if (!items.ok()) return items.status();
    if (name == "sum") {
      Value total = Arg(args, 1, "start").is_undefined() ? Value(static_cast<int64_t>(0))
                                                         : Arg(args, 1, "start");
      for (const Value& v : *items) {
        if (!v.is_number() || !total.is_number()) return TypeError("sum() needs numbers");
        total = total.is_float() || v.is_float() ? Value(total.as_double() + v.as_double())
                                                 : Value(total.as_int() + v.as_int());
      }
      return total;
    }
    if (items->empty()) return Value::MakeUndefined(std::string(name));
    Value best = items->front();
    for (const Value& v : *items) {
      absl::StatusOr<bool> less = name == "min" ? LessThan(v, best) : LessThan(best, v);
      if (!less.ok()) return less.status();
      if (*less) best = v;
    }
    return best;
  }
  if (name == "abs") {
    if (!subject.is_number()) return TypeError("abs() needs a number");
    return subject.is_float() ? Value(std::fabs(subject.as_double()))
                              : Value(subject.as_int() < 0 ? -subject.as_int() : subject.as_int());
  }
  if (name == "round") {
    if (!subject.is_number()) return TypeError("round() needs a number");
    const Value& precision = Arg(args, 0, "precision");
    const double scale = std::pow(10.0, precision.is_number() ? precision.as_int() : 0);
    return Value(std::nearbyint(subject.as_double() * scale) / scale);
  }
  // The remaining filters work on the value's text.
  const std::string text = subject.Str();
  if (name == "trim") {
    CallArgs strip_args;
    strip_args.positional.push_back(Arg(args, 0, "chars"));
    return GetAttribute(Value(text), "strip").as_callable().call(strip_args);
  }
  if (name == "lower" || name == "upper" || name == "title" || name == "capitalize") {
    CallArgs none;
    return GetAttribute(Value(text), std::string(name)).as_callable().call(none);
  }
  if (name == "replace") {
    CallArgs replace_args;
    replace_args.positional = {Arg(args, 0, "old"), Arg(args, 1, "new")};
    if (!Arg(args, 2, "count").is_undefined())
      replace_args.positional.push_back(Arg(args, 2, "count"));
    return GetAttribute(Value(text), "replace").as_callable().call(replace_args);
  }
  if (name == "e" || name == "escape") return Value(Escape(text));
  if (name == "striptags") return Value(text);
  if (name == "wordcount") {
    CallArgs none;
    absl::StatusOr<Value> words = GetAttribute(Value(text), "split").as_callable().call(none);
    if (!words.ok()) return words.status();
    return Value(static_cast<int64_t>(words->as_array().size()));
  }
  if (name == "indent") {
    const Value& width = Arg(args, 0, "width");
    const std::string pad =
        width.is_string()
            ? width.as_string()
            : std::string(width.is_number()
                              ? static_cast<size_t>(std::clamp<int64_t>(width.as_int(), 0, 256))
                              : 4,
                          ' ');
    const bool first = Arg(args, 1, "first").Truthy();
    const bool blank = Arg(args, 2, "blank").Truthy();
    std::string out;
    size_t start = 0;
    bool first_line = true;
    while (start <= text.size()) {
      size_t end = text.find('\n', start);
      const bool last = end == std::string::npos;
      if (last) end = text.size();
      const std::string line = text.substr(start, end - start);
      if ((!first_line || first) && (blank || !line.empty())) out += pad;
      out += line;
      if (last) break;
      out += "\n";
      start = end + 1;
      first_line = false;
    }
    return Value(std::move(out));
  }
  return TypeError(absl::StrCat("unsupported filter '", std::string(name), "'"));
}

absl::StatusOr<bool> ApplyTest(std::string_view name, const Value& subject, CallArgs& args) {
  const Value& other = Arg(args, 0, "value");
  if (name == "defined") return !subject.is_undefined();
  if (name == "undefined") return subject.is_undefined();
  if (name == "none") return subject.is_none();
  if (name == "string") return subject.is_string();
  if (name == "mapping") return subject.is_object();
  if (name == "iterable")
    return subject.is_array() || subject.is_object() || subject.is_string() ||
           subject.is_undefined();
  if (name == "sequence") return subject.is_array() || subject.is_object() || subject.is_string();
  if (name == "number") return subject.is_number();
  if (name == "integer") return subject.is_int();
  if (name == "float") return subject.is_float();
  if (name == "boolean") return subject.is_bool();
  if (name == "true") return subject.is_bool() && subject.as_bool();
  if (name == "false") return subject.is_bool() && !subject.as_bool();
  if (name == "callable") return subject.is_callable();
  if (name == "escaped") return false;
  if (name == "filter") return subject.is_string() && IsKnownFilter(subject.as_string());
  if (name == "test") return subject.is_string() && IsKnownTest(subject.as_string());
  if (name == "equalto" || name == "eq" || name == "==") return subject.Equals(other);
  if (name == "ne" || name == "!=") return !subject.Equals(other);
  if (name == "sameas") {
    if (subject.is_none() || subject.is_bool())
      return subject.kind() == other.kind() && subject.Equals(other);
    return subject.kind() == other.kind() && subject.Equals(other);
  }
  if (name == "lower" || name == "upper") {
    if (!subject.is_string()) return false;
    const std::string& s = subject.as_string();
    bool cased = false;
    for (unsigned char c : s) {
      if (std::isalpha(c)) {
        cased = true;
        if ((name == "lower") != (std::islower(c) != 0)) return false;
      }
    }
    return cased;
  }
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (!subject.is_number() || subject.is_float())
      return TypeError(absl::StrCat("'", std::string(name), "' needs an integer"));
    if (name == "divisibleby") {
      if (!other.is_number() || other.is_float() || other.as_int() == 0)
        return TypeError("divisibleby needs a non-zero integer");
      return subject.as_int() % other.as_int() == 0;
    }
    return (subject.as_int() % 2 != 0) == (name == "odd");
  }
  if (name == "in") {
    if (other.is_string() && subject.is_string())
      return other.as_string().find(subject.as_string()) != std::string::npos;
    if (other.is_object())
      return subject.is_string() && other.as_object().Find(subject.as_string()) != nullptr;
    absl::StatusOr<Array> items = Iterate(other);
    if (!items.ok()) return items.status();
    return std::any_of(items->begin(), items->end(),
                       [&](const Value& v) { return v.Equals(subject); });
  }
  absl::StatusOr<bool> less;
  if (name == "lt" || name == "lessthan") return LessThan(subject, other);
  if (name == "gt" || name == "greaterthan") return LessThan(other, subject);
  if (name == "le") {
    less = LessThan(other, subject);
    if (!less.ok()) return less.status();
    return !*less;
  }
  if (name == "ge") {
    less = LessThan(subject, other);
    if (!less.ok()) return less.status();
    return !*less;
  }
  return TypeError(absl::StrCat("unsupported test '", std::string(name), "'"));
}

}  // namespace ridge::jinja
