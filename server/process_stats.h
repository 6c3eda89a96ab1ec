// This process's own figures for the standard process_* metrics (as Prometheus' client libraries
// export them): CPU time, memory, descriptors, threads, start time; read from /proc (Linux).
#pragma once

#include <cstdint>

namespace ridge {

struct ProcessStats {
  double cpu_seconds = 0;         // user + system, all threads
  int64_t resident_bytes = 0;     // VmRSS
  int64_t virtual_bytes = 0;      // VmSize
  int64_t open_fds = 0;           // entries of /proc/self/fd
  int64_t max_fds = 0;            // RLIMIT_NOFILE's soft limit
  int64_t threads = 0;            // Threads
  double start_time_seconds = 0;  // since the Unix epoch
};

// What /proc says now; a field it could not read stays 0.
ProcessStats ReadProcessStats();

}  // namespace ridge
