// Command-line flags of the ridgeserve subcommands: `--name value` or `--name=value`, checked
// against the flags a subcommand declares so a typo is an error, not a silent default.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ridge {

class CliArgs {
 public:
  // `known`: flag names without dashes; `switches`: those that take no value.
  static absl::StatusOr<CliArgs> Parse(int argc, char** argv, const std::set<std::string>& known,
                                       const std::set<std::string>& switches = {});

  bool Has(const std::string& name) const { return values_.contains(name); }
  absl::StatusOr<std::string> String(const std::string& name) const;  // required
  std::string StringOr(const std::string& name, const std::string& fallback) const;
  absl::StatusOr<int64_t> Int(const std::string& name, int64_t fallback) const;
  absl::StatusOr<double> Double(const std::string& name, double fallback) const;
  absl::StatusOr<std::vector<int32_t>> IdList(const std::string& name) const;
  // "1,16,64" or "0,1e-3": comma-separated finite numbers; `fallback` when the flag is absent.
  absl::StatusOr<std::vector<double>> NumberList(const std::string& name,
                                                 const std::string& fallback) const;

 private:
  std::map<std::string, std::string> values_;
};

// Parses "1,2,3" (commas and/or whitespace) into token ids; each must fit in int32 and be >= 0.
absl::StatusOr<std::vector<int32_t>> ParseIdList(const std::string& text, const std::string& what);

}  // namespace ridge
