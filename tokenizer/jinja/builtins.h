// The filters, tests, global functions and methods templates may use. The parser checks names
// against these lists so that a template using anything else fails when it is loaded.
#pragma once

#include <ctime>
#include <optional>
#include <string_view>

#include "absl/status/statusor.h"
#include "tokenizer/jinja/value.h"

namespace ridge::jinja {

bool IsKnownFilter(std::string_view name);
bool IsKnownTest(std::string_view name);
bool IsKnownGlobal(std::string_view name);
bool IsKnownMethod(std::string_view name);

// Each returns InvalidArgument on a type or argument error (the caller adds the position).
// `apply_filter` lets map() run another filter by name.
absl::StatusOr<Value> ApplyFilter(std::string_view name, const Value& subject, CallArgs& args);
absl::StatusOr<bool> ApplyTest(std::string_view name, const Value& subject, CallArgs& args);
// obj.name as Jinja's getattr does it: a method of str / dict / list first, then a dict key.
Value GetAttribute(const Value& object, const std::string& name);
// obj[key]: a dict key, a list or string index (negative from the end), else a method.
absl::StatusOr<Value> GetItem(const Value& object, const Value& key);
// obj[start:stop:step] with Python's rules (each may be None).
absl::StatusOr<Value> Slice(const Value& object, const Value& start, const Value& stop,
                            const Value& step);
// Items of an iterable as a for loop sees them: list items, dict keys, string characters.
absl::StatusOr<Array> Iterate(const Value& value);
// Python's <, for sorting and comparisons; InvalidArgument for unorderable types.
absl::StatusOr<bool> LessThan(const Value& a, const Value& b);

// a op b for + - * / // % ** ~ == != < > <= >= in notin, as Python computes them; a string
// repetition beyond `max_string_bytes` is refused.
absl::StatusOr<Value> ApplyOperator(const std::string& op, const Value& a, const Value& b,
                                    size_t max_string_bytes);

// The global functions that need no template state: range, namespace, dict, strftime_now,
// raise_exception (which fails with the template's message).
Value GlobalFunction(std::string_view name);

// strftime_now(format): `at` (the wall clock when unset) as local time in strftime's `format`.
// A context variable named strftime_now made from this overrides the global one.
Value StrftimeNow(std::optional<std::time_t> at = std::nullopt);

}  // namespace ridge::jinja
