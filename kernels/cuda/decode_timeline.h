// Per-block phase clocks of the Mesa decode kernel (mesa_recurrence.cu), for finding where its
// time goes: thread 0 of every block records clock64() at the end of each phase, and the SM and
// %globaltimer at entry and exit. Compiled in only with the CMake option RIDGE_DECODE_TIMELINE;
// without it every macro here is empty and the kernel's code is unchanged. The stamps of CG
// iterations 8 and 16 are zeroed at entry, so a launch with a smaller budget leaves them 0. Read
// the last launch's record with CopyDecodeTimeline (mesa_recurrence.h); `mesa_kernel_bench
// --timeline DIR` writes it and tools/bench/decode_timeline.py summarises it. CUDA code only.
#pragma once

#include <cstdint>

#include "kernels/cuda/mesa_recurrence.h"

namespace ridge::cuda {

#ifdef RIDGE_DECODE_TIMELINE
// The record of the last launch (this header is mesa_recurrence.cu's alone: each includer would
// have its own).
namespace {
__device__ int64_t g_decode_timeline[kDecodeTimelineBlocks * kDecodeTimelineFields];
}  // namespace

__device__ __forceinline__ void RecordDecodeTimeline(int field, int64_t value) {
  if (threadIdx.x == 0 && blockIdx.x < kDecodeTimelineBlocks) {
    g_decode_timeline[blockIdx.x * kDecodeTimelineFields + field] = value;
  }
}
__device__ __forceinline__ int64_t GlobalTimerNs() {
  int64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ int64_t SmId() {
  uint32_t id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}
#define RIDGE_TIMELINE_ENTRY()                                     \
  do {                                                             \
    RecordDecodeTimeline(kDecodeTimelineSm, SmId());               \
    RecordDecodeTimeline(kDecodeTimelineEntryNs, GlobalTimerNs()); \
    RecordDecodeTimeline(kDecodePhaseIteration8, 0);               \
    RecordDecodeTimeline(kDecodePhaseIteration16, 0);              \
    RecordDecodeTimeline(kDecodePhaseEntry, clock64());            \
  } while (0)
#define RIDGE_TIMELINE_PHASE(phase) RecordDecodeTimeline(phase, clock64())
#define RIDGE_TIMELINE_EXIT()                                     \
  do {                                                            \
    RecordDecodeTimeline(kDecodePhaseExit, clock64());            \
    RecordDecodeTimeline(kDecodeTimelineExitNs, GlobalTimerNs()); \
  } while (0)
#else
#define RIDGE_TIMELINE_ENTRY() \
  do {                         \
  } while (0)
#define RIDGE_TIMELINE_PHASE(phase) \
  do {                              \
  } while (0)
#define RIDGE_TIMELINE_EXIT() \
  do {                        \
  } while (0)
#endif

}  // namespace ridge::cuda
