// The CPU backend's worker threads: OpenMP loops and the BLAS library share one setting.
#pragma once

namespace ridge {

void SetComputeThreads(int threads);
// OpenMP's thread count is a setting of each thread, and a thread started later begins with the
// process's default (all cores, or OMP_NUM_THREADS), not with what SetComputeThreads set on
// another thread: a thread that runs the model calls this first to take the SetComputeThreads
// setting (nothing when it was never called).
void AdoptComputeThreads();

// libgomp's default wait policy spins between parallel regions; when another process wants one
// of the cores, the spinning worker keeps it from the thread that has work, and a decode step
// measured 6-15x slower on 2 busy cores. The policy is read once, when libgomp loads, so the
// only way to change it from inside is to re-execute the program with OMP_WAIT_POLICY=PASSIVE.
// Call first thing in main; returns at once when the variable is already set (the user's
// choice wins) or if re-execution fails.
void ReexecWithPassiveOpenMpWait(char** argv);

}  // namespace ridge
