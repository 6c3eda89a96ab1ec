// The CPU backend's worker threads: OpenMP loops and the BLAS library share one setting.
#pragma once

namespace ridge {

void SetComputeThreads(int threads);

// libgomp's default wait policy spins between parallel regions; when another process wants one
// of the cores, the spinning worker keeps it from the thread that has work, and a decode step
// measured 6-15x slower on 2 busy cores. The policy is read once, when libgomp loads, so the
// only way to change it from inside is to re-execute the program with OMP_WAIT_POLICY=PASSIVE.
// Call first thing in main; returns at once when the variable is already set (the user's
// choice wins) or if re-execution fails.
void ReexecWithPassiveOpenMpWait(char** argv);

}  // namespace ridge
