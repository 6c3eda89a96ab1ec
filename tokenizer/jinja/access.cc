// Attribute, item and slice access, iteration, ordering, methods of str and dict, and the
// global functions (builtins.h).
#include <algorithm>
#include <cctype>
#include <ctime>

#include "absl/strings/str_cat.h"
#include "tokenizer/jinja/builtins.h"

namespace ridge::jinja {
namespace {

absl::Status TypeError(const std::string& message) { return absl::InvalidArgumentError(message); }

bool IsPySpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

std::string Strip(const std::string& s, const Value& chars, bool left, bool right) {
  auto strip_char = [&](char c) {
    return chars.is_string() ? chars.as_string().find(c) != std::string::npos : IsPySpace(c);
  };
  size_t b = 0, e = s.size();
  if (left) {
    while (b < e && strip_char(s[b])) ++b;
  }
  if (right) {
    while (e > b && strip_char(s[e - 1])) --e;
  }
  return s.substr(b, e - b);
}

// str.split / str.rsplit with Python's rules (no separator: runs of whitespace, no empties).
Array Split(const std::string& s, const Value& sep, int64_t maxsplit, bool from_right) {
  std::vector<std::string> parts;
  if (!sep.is_string()) {
    std::vector<std::pair<size_t, size_t>> words;
    size_t i = 0;
    while (i < s.size()) {
      while (i < s.size() && IsPySpace(s[i])) ++i;
      if (i >= s.size()) break;
      size_t j = i;
      while (j < s.size() && !IsPySpace(s[j])) ++j;
      words.emplace_back(i, j);
      i = j;
    }
    if (maxsplit < 0 || static_cast<size_t>(maxsplit) + 1 >= words.size()) {
      for (auto [b, e] : words) parts.push_back(s.substr(b, e - b));
    } else if (!from_right) {
      for (int64_t k = 0; k < maxsplit; ++k)
        parts.push_back(s.substr(words[k].first, words[k].second - words[k].first));
      parts.push_back(Strip(s.substr(words[maxsplit].first), Value(), false, true));
    } else {
      const size_t keep = words.size() - static_cast<size_t>(maxsplit);
      parts.push_back(Strip(s.substr(0, words[keep - 1].second), Value(), true, false));
      for (size_t k = keep; k < words.size(); ++k)
        parts.push_back(s.substr(words[k].first, words[k].second - words[k].first));
    }
  } else {
    const std::string& d = sep.as_string();
    if (!from_right) {
      size_t start = 0;
      int64_t splits = 0;
      while (maxsplit < 0 || splits < maxsplit) {
        const size_t at = s.find(d, start);
        if (at == std::string::npos) break;
        parts.push_back(s.substr(start, at - start));
        start = at + d.size();
        ++splits;
      }
      parts.push_back(s.substr(start));
    } else {
      size_t end = s.size();
      int64_t splits = 0;
      std::vector<std::string> reversed;
      while (maxsplit < 0 || splits < maxsplit) {
        if (end < d.size()) break;
        const size_t at = s.rfind(d, end - d.size());
        if (at == std::string::npos) break;
        reversed.push_back(s.substr(at + d.size(), end - at - d.size()));
        end = at;
        ++splits;
      }
      reversed.push_back(s.substr(0, end));
      parts.assign(reversed.rbegin(), reversed.rend());
    }
  }
  Array out;
  for (std::string& p : parts) out.emplace_back(std::move(p));
  return out;
}

std::string Replace(const std::string& s, const std::string& from, const std::string& to,
                    int64_t count) {
  std::string out;
  if (from.empty()) {  // Python inserts `to` between every character (and at both ends)
    const auto points = CodePoints(s);
    int64_t done = 0;
    for (std::string_view p : points) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      out.append(p);
    }
    if (count < 0 || done < count) out += to;
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t at = s.find(from, start);
    if (at == std::string::npos) break;
    out.append(s, start, at - start).append(to);
    start = at + from.size();
    ++done;
  }
  return out.append(s, start, std::string::npos);
}

std::string Title(const std::string& s) {
  std::string out = s;
  bool prev_cased = false;
  for (char& c : out) {
    const bool alpha = std::isalpha(static_cast<unsigned char>(c)) != 0;
    c = static_cast<char>(prev_cased ? std::tolower(static_cast<unsigned char>(c))
                                     : std::toupper(static_cast<unsigned char>(c)));
    prev_cased = alpha;
  }
  return out;
}

const Value& Arg(CallArgs& args, size_t i, std::string_view keyword) {
  static const Value kMissing;
  if (i < args.positional.size()) return args.positional[i];
  for (const auto& [k, v] : args.keyword) {
    if (k == keyword) return v;
  }
  return kMissing;
}

absl::StatusOr<std::string> StringArg(CallArgs& args, size_t i, std::string_view keyword,
                                      const std::string& method) {
  const Value& v = Arg(args, i, keyword);
  if (!v.is_string()) {
    return TypeError(absl::StrCat(method, "() argument must be a str, not ", v.TypeName()));
  }
  return v.as_string();
}

Value BoundMethod(std::string name, std::function<absl::StatusOr<Value>(CallArgs&)> call) {
  return Value(std::make_shared<const Callable>(Callable{std::move(name), std::move(call)}));
}

Value StringMethod(const std::string& s, const std::string& name) {
  auto method = [&](auto fn) { return BoundMethod(name, fn); };
  if (name == "startswith" || name == "endswith") {
    const bool start = name == "startswith";
    return method([s, start, name](CallArgs& a) -> absl::StatusOr<Value> {
      const Value& arg = Arg(a, 0, "prefix");
      std::vector<std::string> options;
      if (arg.is_string()) {
        options.push_back(arg.as_string());
      } else if (arg.is_array()) {
        for (const Value& v : arg.as_array()) {
          if (!v.is_string()) return TypeError(name + "() tuple items must be str");
          options.push_back(v.as_string());
        }
      } else {
        return TypeError(name + "() argument must be a str or a tuple of str");
      }
      for (const std::string& o : options) {
        if (o.size() <= s.size() && (start ? s.compare(0, o.size(), o) == 0
                                           : s.compare(s.size() - o.size(), o.size(), o) == 0)) {
          return Value(true);
        }
      }
      return Value(false);
    });
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    return method([s, name](CallArgs& a) -> absl::StatusOr<Value> {
      const Value& chars = Arg(a, 0, "chars");
      return Value(Strip(s, chars, name != "rstrip", name != "lstrip"));
    });
  }
  if (name == "split" || name == "rsplit") {
    return method([s, name](CallArgs& a) -> absl::StatusOr<Value> {
      const Value& sep = Arg(a, 0, "sep");
      const Value& max = Arg(a, 1, "maxsplit");
      if (sep.is_string() && sep.as_string().empty()) return TypeError("empty separator");
      return Value(Split(s, sep, max.is_int() ? max.as_int() : -1, name == "rsplit"));
    });
  }
  if (name == "replace") {
    return method([s](CallArgs& a) -> absl::StatusOr<Value> {
      absl::StatusOr<std::string> from = StringArg(a, 0, "old", "replace");
      absl::StatusOr<std::string> to = StringArg(a, 1, "new", "replace");
      if (!from.ok()) return from.status();
      if (!to.ok()) return to.status();
      const Value& count = Arg(a, 2, "count");
      return Value(Replace(s, *from, *to, count.is_int() ? count.as_int() : -1));
    });
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    return method([s, name](CallArgs&) -> absl::StatusOr<Value> {
      std::string out = s;
      if (name == "title") return Value(Title(s));
      for (size_t i = 0; i < out.size(); ++i) {
        const unsigned char c = static_cast<unsigned char>(out[i]);
        const bool up = name == "upper" || (name == "capitalize" && i == 0);
        out[i] = static_cast<char>(up ? std::toupper(c) : std::tolower(c));
      }
      return Value(std::move(out));
    });
  }
  if (name == "find" || name == "rfind" || name == "count") {
    return method([s, name](CallArgs& a) -> absl::StatusOr<Value> {
      absl::StatusOr<std::string> sub = StringArg(a, 0, "sub", name);
      if (!sub.ok()) return sub.status();
      if (name == "count") {
        if (sub->empty()) return Value(static_cast<int64_t>(CodePoints(s).size() + 1));
        int64_t n = 0;
        for (size_t at = s.find(*sub); at != std::string::npos; at = s.find(*sub, at + sub->size()))
          ++n;
        return Value(n);
      }
      const size_t at = name == "find" ? s.find(*sub) : s.rfind(*sub);
      if (at == std::string::npos) return Value(static_cast<int64_t>(-1));
      return Value(static_cast<int64_t>(CodePoints(s.substr(0, at)).size()));
    });
  }
  if (name == "join") {
    return method([s](CallArgs& a) -> absl::StatusOr<Value> {
      absl::StatusOr<Array> items = Iterate(Arg(a, 0, "iterable"));
      if (!items.ok()) return items.status();
      std::string out;
      for (size_t i = 0; i < items->size(); ++i) {
        if (!(*items)[i].is_string()) return TypeError("join() items must be str");
        if (i > 0) out += s;
        out += (*items)[i].as_string();
      }
      return Value(std::move(out));
    });
  }
  if (name == "splitlines") {
    return method([s](CallArgs&) -> absl::StatusOr<Value> {
      Array out;
      size_t start = 0;
      for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\n' || s[i] == '\r') {
          out.emplace_back(s.substr(start, i - start));
          if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
          start = i + 1;
        }
      }
      if (start < s.size()) out.emplace_back(s.substr(start));
      return Value(std::move(out));
    });
  }
  if (name == "isdigit" || name == "isalpha" || name == "isspace" || name == "isalnum") {
    return method([s, name](CallArgs&) -> absl::StatusOr<Value> {
      if (s.empty()) return Value(false);
      for (unsigned char c : s) {
        const bool ok = name == "isdigit"   ? std::isdigit(c) != 0
                        : name == "isalpha" ? std::isalpha(c) != 0
                        : name == "isspace" ? IsPySpace(static_cast<char>(c))
                                            : std::isalnum(c) != 0;
        if (!ok) return Value(false);
      }
      return Value(true);
    });
  }
  return Value::MakeUndefined(name);
}

Value DictMethod(const Value& dict, const std::string& name) {
  if (name == "items" || name == "keys" || name == "values") {
    return BoundMethod(name, [dict, name](CallArgs&) -> absl::StatusOr<Value> {
      Array out;
      for (const auto& [k, v] : dict.as_object().entries) {
        if (name == "items") {
          out.emplace_back(Array{Value(k), v});
        } else {
          out.push_back(name == "keys" ? Value(k) : v);
        }
      }
      return Value(std::move(out));
    });
  }
  if (name == "get") {
    return BoundMethod(name, [dict](CallArgs& a) -> absl::StatusOr<Value> {
      const Value& key = Arg(a, 0, "key");
      if (key.is_string()) {
        if (const Value* v = dict.as_object().Find(key.as_string())) return *v;
      }
      const Value& fallback = Arg(a, 1, "default");
      return fallback.is_undefined() ? Value::None() : fallback;
    });
  }
  return Value::MakeUndefined(name);
}

int64_t NormalizeIndex(int64_t i, int64_t size) { return i < 0 ? i + size : i; }

}  // namespace

bool IsKnownMethod(std::string_view name) {
  static constexpr std::string_view kMethods[] = {
      "startswith", "endswith", "strip",      "lstrip",  "rstrip",     "split",   "rsplit",
      "replace",    "upper",    "lower",      "title",   "capitalize", "find",    "rfind",
      "count",      "join",     "splitlines", "isdigit", "isalpha",    "isspace", "isalnum",
      "items",      "keys",     "values",     "get",     "cycle"};
  return std::find(std::begin(kMethods), std::end(kMethods), name) != std::end(kMethods);
}

Value GetAttribute(const Value& object, const std::string& name) {
  if (object.is_string()) return StringMethod(object.as_string(), name);
  if (object.is_object()) {
    if (!object.as_object().is_namespace) {
      Value method = DictMethod(object, name);
      if (!method.is_undefined()) return method;
    }
    if (const Value* v = object.as_object().Find(name)) return *v;
  }
  return Value::MakeUndefined(name);
}

absl::StatusOr<Value> GetItem(const Value& object, const Value& key) {
  if (object.is_object()) {
    if (key.is_string()) {
      if (const Value* v = object.as_object().Find(key.as_string())) return *v;
      return GetAttribute(object, key.as_string());
    }
    return Value::MakeUndefined(key.Repr());
  }
  if ((object.is_array() || object.is_string()) && key.is_number() && !key.is_float()) {
    if (object.is_array()) {
      const Array& a = object.as_array();
      const int64_t i = NormalizeIndex(key.as_int(), static_cast<int64_t>(a.size()));
      if (i < 0 || i >= static_cast<int64_t>(a.size())) return Value::MakeUndefined(key.Repr());
      return a[static_cast<size_t>(i)];
    }
    const auto points = CodePoints(object.as_string());
    const int64_t i = NormalizeIndex(key.as_int(), static_cast<int64_t>(points.size()));
    if (i < 0 || i >= static_cast<int64_t>(points.size())) return Value::MakeUndefined(key.Repr());
    return Value(std::string(points[static_cast<size_t>(i)]));
  }
  if (key.is_string()) return GetAttribute(object, key.as_string());
  return Value::MakeUndefined(key.Repr());
}

absl::StatusOr<Value> Slice(const Value& object, const Value& start, const Value& stop,
                            const Value& step) {
  auto as_index = [](const Value& v, const char* what) -> absl::StatusOr<std::optional<int64_t>> {
    if (v.is_none() || v.is_undefined()) return std::optional<int64_t>();
    if (!v.is_number() || v.is_float()) {
      return TypeError(absl::StrCat("slice ", what, " must be an integer or None"));
    }
    return std::optional<int64_t>(v.as_int());
  };
  absl::StatusOr<std::optional<int64_t>> b = as_index(start, "start");
  absl::StatusOr<std::optional<int64_t>> e = as_index(stop, "stop");
  absl::StatusOr<std::optional<int64_t>> s = as_index(step, "step");
  if (!b.ok()) return b.status();
  if (!e.ok()) return e.status();
  if (!s.ok()) return s.status();
  const int64_t st = s->value_or(1);
  if (st == 0) return TypeError("slice step cannot be zero");
  std::vector<Value> items;
  std::vector<std::string_view> points;
  if (object.is_array()) {
    items = object.as_array();
  } else if (object.is_string()) {
    points = CodePoints(object.as_string());
  } else {
    return TypeError(absl::StrCat("'", object.TypeName(), "' object is not subscriptable"));
  }
  const int64_t n = static_cast<int64_t>(object.is_array() ? items.size() : points.size());
  auto clamp = [&](std::optional<int64_t> v, int64_t fallback) {
    if (!v) return fallback;
    int64_t x = *v < 0 ? *v + n : *v;
    if (st > 0) return std::clamp<int64_t>(x, 0, n);
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  const int64_t from = clamp(*b, st > 0 ? 0 : n - 1);
  const int64_t to = clamp(*e, st > 0 ? n : -1);
  Array out_items;
  std::string out_text;
  for (int64_t i = from; st > 0 ? i < to : i > to; i += st) {
    if (object.is_array()) {
      out_items.push_back(items[static_cast<size_t>(i)]);
    } else {
      out_text.append(points[static_cast<size_t>(i)]);
    }
  }
  if (object.is_array()) return Value(std::move(out_items));
  return Value(std::move(out_text));
}

absl::StatusOr<Array> Iterate(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return Array{};
    case Value::Kind::kArray:
      return value.as_array();
    case Value::Kind::kObject: {
      Array keys;
      for (const auto& [k, v] : value.as_object().entries) keys.emplace_back(k);
      return keys;
    }
    case Value::Kind::kString: {
      Array chars;
      for (std::string_view p : CodePoints(value.as_string())) chars.emplace_back(std::string(p));
      return chars;
    }
    default:
      return TypeError(absl::StrCat("'", value.TypeName(), "' object is not iterable"));
  }
}

absl::StatusOr<bool> LessThan(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();
  if (a.is_array() && b.is_array()) {
    const Array& x = a.as_array();
    const Array& y = b.as_array();
    for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) {
      if (x[i].Equals(y[i])) continue;
      return LessThan(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  return TypeError(absl::StrCat("'<' not supported between instances of '", a.TypeName(), "' and '",
                                b.TypeName(), "'"));
}

bool IsKnownGlobal(std::string_view name) {
  return name == "range" || name == "namespace" || name == "dict" || name == "strftime_now" ||
         name == "raise_exception";
}

Value StrftimeNow(std::optional<std::time_t> at) {
  return BoundMethod("strftime_now", [at](CallArgs& a) -> absl::StatusOr<Value> {
    absl::StatusOr<std::string> format = StringArg(a, 0, "format", "strftime_now");
    if (!format.ok()) return format.status();
    const std::time_t now = at.has_value() ? *at : std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char buf[256];
    const size_t n = std::strftime(buf, sizeof(buf), format->c_str(), &local);
    return Value(std::string(buf, n));
  });
}

Value GlobalFunction(std::string_view name) {
  if (name == "range") {
    return BoundMethod("range", [](CallArgs& a) -> absl::StatusOr<Value> {
      std::vector<int64_t> n;
      for (const Value& v : a.positional) {
        if (!v.is_number() || v.is_float()) return TypeError("range() arguments must be integers");
        n.push_back(v.as_int());
      }
      if (n.empty() || n.size() > 3) return TypeError("range() takes 1 to 3 arguments");
      const int64_t start = n.size() == 1 ? 0 : n[0];
      const int64_t stop = n.size() == 1 ? n[0] : n[1];
      const int64_t step = n.size() == 3 ? n[2] : 1;
      if (step == 0) return TypeError("range() step must not be zero");
      Array out;
      for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
        if (out.size() >= 100000) return TypeError("range() is limited to 100000 items");
        out.emplace_back(i);
      }
      return Value(std::move(out));
    });
  }
  if (name == "namespace" || name == "dict") {
    const bool is_namespace = name == "namespace";
    return BoundMethod(std::string(name), [is_namespace](CallArgs& a) -> absl::StatusOr<Value> {
      auto o = std::make_shared<Object>();
      o->is_namespace = is_namespace;
      for (const Value& v : a.positional) {
        if (!v.is_object()) return TypeError("namespace()/dict() takes a dict or keywords");
        for (const auto& [k, x] : v.as_object().entries) o->Set(k, x);
      }
      for (auto& [k, v] : a.keyword) o->Set(k, v);
      return Value(std::move(o));
    });
  }
  if (name == "strftime_now") return StrftimeNow();
  if (name == "raise_exception") {
    return BoundMethod("raise_exception", [](CallArgs& a) -> absl::StatusOr<Value> {
      const Value& message = Arg(a, 0, "message");
      // Aborted marks the template's own refusal; Template::Render reports it as such.
      return absl::AbortedError(message.Str());
    });
  }
  return Value::MakeUndefined(std::string(name));
}

}  // namespace ridge::jinja
