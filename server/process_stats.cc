#include "server/process_stats.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace ridge {
namespace {

// The value of a "Name:   value kB" line of /proc/self/status, in bytes (or as a count).
int64_t StatusField(const std::string& text, const std::string& name, int64_t scale) {
  const size_t at = text.find("\n" + name + ":");
  if (at == std::string::npos) return 0;
  std::istringstream line(text.substr(at + name.size() + 2));
  int64_t value = 0;
  line >> value;
  return value * scale;
}

std::string ReadAll(const char* path) {
  std::ifstream in(path);
  std::stringstream out;
  out << in.rdbuf();
  return out.str();
}

}  // namespace

ProcessStats ReadProcessStats() {
  ProcessStats stats;
  const std::string status = "\n" + ReadAll("/proc/self/status");
  stats.resident_bytes = StatusField(status, "VmRSS", 1024);
  stats.virtual_bytes = StatusField(status, "VmSize", 1024);
  stats.threads = StatusField(status, "Threads", 1);

  // /proc/self/stat: fields after the command's closing parenthesis; utime and stime are the
  // 14th and 15th fields of the line, starttime the 22nd (clock ticks since boot).
  const std::string stat = ReadAll("/proc/self/stat");
  const size_t close = stat.rfind(')');
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  if (close != std::string::npos && ticks > 0) {
    std::istringstream rest(stat.substr(close + 1));
    std::vector<std::string> fields;
    for (std::string f; rest >> f;) fields.push_back(f);
    if (fields.size() > 19) {
      stats.cpu_seconds = (std::stod(fields[11]) + std::stod(fields[12])) / ticks;
      std::istringstream uptime(ReadAll("/proc/uptime"));
      double up = 0;
      uptime >> up;
      const double started_after_boot = std::stod(fields[19]) / ticks;
      stats.start_time_seconds = static_cast<double>(time(nullptr)) - up + started_after_boot;
    }
  }
  if (DIR* dir = opendir("/proc/self/fd")) {
    while (const dirent* entry = readdir(dir)) {
      if (entry->d_name[0] != '.') ++stats.open_fds;
    }
    closedir(dir);
    --stats.open_fds;  // the listing's own descriptor
  }
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0) stats.max_fds = static_cast<int64_t>(files.rlim_cur);
  return stats;
}

}  // namespace ridge
