#include "server/cli_args.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace ridge {

absl::StatusOr<CliArgs> CliArgs::Parse(int argc, char** argv, const std::set<std::string>& known,
                                       const std::set<std::string>& switches) {
  CliArgs args;
  for (int i = 0; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", arg, "'"));
    }
    arg = arg.substr(2);
    std::string value;
    const size_t eq = arg.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    }
    if (!known.contains(arg)) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", arg, " (see --help)"));
    }
    if (switches.contains(arg)) {
      if (inline_value)
        return absl::InvalidArgumentError(absl::StrCat("--", arg, " takes no value"));
      value = "true";
    } else if (!inline_value) {
      if (i + 1 >= argc)
        return absl::InvalidArgumentError(absl::StrCat("--", arg, " needs a value"));
      value = argv[++i];
    }
    if (!args.values_.emplace(arg, value).second) {
      return absl::InvalidArgumentError(absl::StrCat("--", arg, " is given twice"));
    }
  }
  return args;
}

absl::StatusOr<std::string> CliArgs::String(const std::string& name) const {
  const auto it = values_.find(name);
  if (it == values_.end())
    return absl::InvalidArgumentError(absl::StrCat("--", name, " is required"));
  return it->second;
}

std::string CliArgs::StringOr(const std::string& name, const std::string& fallback) const {
  const auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

absl::StatusOr<int64_t> CliArgs::Int(const std::string& name, int64_t fallback) const {
  const auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  int64_t value;
  if (!absl::SimpleAtoi(it->second, &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, " expects an integer, got '", it->second, "'"));
  }
  return value;
}

absl::StatusOr<double> CliArgs::Double(const std::string& name, double fallback) const {
  const auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  double value;
  if (!absl::SimpleAtod(it->second, &value) || !std::isfinite(value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, " expects a finite number, got '", it->second, "'"));
  }
  return value;
}

absl::StatusOr<std::vector<int32_t>> CliArgs::IdList(const std::string& name) const {
  const auto it = values_.find(name);
  if (it == values_.end())
    return absl::InvalidArgumentError(absl::StrCat("--", name, " is required"));
  return ParseIdList(it->second, "--" + name);
}

absl::StatusOr<std::vector<double>> CliArgs::NumberList(const std::string& name,
                                                        const std::string& fallback) const {
  const std::string text = StringOr(name, fallback);
  std::vector<double> values;
  for (const auto piece : absl::StrSplit(text, ',')) {
    double v;
    if (!absl::SimpleAtod(piece, &v) || !std::isfinite(v)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, " '", text, "' must be comma-separated numbers"));
    }
    values.push_back(v);
  }
  return values;
}

absl::StatusOr<std::vector<int32_t>> ParseIdList(const std::string& text, const std::string& what) {
  std::vector<int32_t> ids;
  std::string item;
  auto flush = [&]() -> absl::Status {
    if (item.empty()) return absl::OkStatus();
    int64_t id;
    if (!absl::SimpleAtoi(item, &id) || id < 0 || id > std::numeric_limits<int32_t>::max()) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": '", item, "' is not a token id"));
    }
    ids.push_back(static_cast<int32_t>(id));
    item.clear();
    return absl::OkStatus();
  };
  for (char ch : text) {
    if (ch == ',' || ch == ' ' || ch == '\n' || ch == '\t' || ch == '\r') {
      auto status = flush();
      if (!status.ok()) return status;
    } else {
      item.push_back(ch);
    }
  }
  auto status = flush();
  if (!status.ok()) return status;
  if (ids.empty()) return absl::InvalidArgumentError(absl::StrCat(what, ": no token ids given"));
  return ids;
}

}  // namespace ridge
