// Runs a shell command for a test (a binary of the project, promtool, ...) and returns its exit
// code (-1 when it did not exit normally or no shell ran) and what it printed: stdout and, unless
// with_stderr is false (then discarded), stderr.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>
#include <utility>

namespace ridge::testing {

inline std::pair<int, std::string> RunCommand(const std::string& command, bool with_stderr = true) {
  std::string output;
  FILE* pipe = popen((command + (with_stderr ? " 2>&1" : " 2>/dev/null")).c_str(), "r");
  if (pipe == nullptr) return {-1, output};
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

}  // namespace ridge::testing
