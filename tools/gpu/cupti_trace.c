/* A CUPTI injection library: loaded by the CUDA driver through CUDA_INJECTION64_PATH, it
 * records every kernel's and copy's start, duration and name (graph replays' kernels one by
 * one) as CSV, in the columns tools/bench/step_gaps.py reads, in $CUPTI_TRACE_OUT, and every
 * CUDA runtime call the host makes (start, duration, function) in $CUPTI_TRACE_OUT.api.csv.
 * For GPU machines without Nsight Systems. Built on the GPU machine by tools/gpu/cupti_trace.sh;
 * KERNEL_RECORD and MEMCPY_RECORD name the header's newest records of those kinds. */
#include <cupti.h>
#include <stdio.h>
#include <stdlib.h>

static FILE* trace_out;
static FILE* api_out;

static void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = 16u << 20;
  *buffer = (uint8_t*)aligned_alloc(8, *size);
  *max_records = 0;
}

static void CUPTIAPI BufferCompleted(CUcontext context, uint32_t stream, uint8_t* buffer,
                                     size_t size, size_t valid) {
  CUpti_Activity* record = NULL;
  (void)context;
  (void)stream;
  (void)size;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
      const KERNEL_RECORD* k = (const KERNEL_RECORD*)record;
      fprintf(trace_out, "%llu,%llu,%u,\"%s\"\n", (unsigned long long)k->start,
              (unsigned long long)(k->end - k->start), k->correlationId, k->name);
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      const MEMCPY_RECORD* m = (const MEMCPY_RECORD*)record;
      fprintf(trace_out, "%llu,%llu,%u,\"memcpy kind %u, %llu bytes\"\n",
              (unsigned long long)m->start, (unsigned long long)(m->end - m->start),
              m->correlationId, (unsigned)m->copyKind, (unsigned long long)m->bytes);
    } else if (record->kind == CUPTI_ACTIVITY_KIND_RUNTIME) {
      const CUpti_ActivityAPI* a = (const CUpti_ActivityAPI*)record;
      const char* name = "?";
      cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, a->cbid, &name);
      fprintf(api_out, "%llu,%llu,%u,\"%s\"\n", (unsigned long long)a->start,
              (unsigned long long)(a->end - a->start), a->correlationId, name);
    }
  }
  free(buffer);
}

static void Flush(void) {
  cuptiActivityFlushAll(1);
  fclose(trace_out);
  fclose(api_out);
}

int InitializeInjection(void) {
  const char* path = getenv("CUPTI_TRACE_OUT");
  char api_path[4096];
  if (path == NULL) path = "cupti_trace.csv";
  snprintf(api_path, sizeof(api_path), "%s.api.csv", path);
  trace_out = fopen(path, "w");
  api_out = fopen(api_path, "w");
  if (trace_out == NULL || api_out == NULL) return 0;
  fprintf(trace_out, "Start (ns),Duration (ns),CorrId,Name\n");
  fprintf(api_out, "Start (ns),Duration (ns),CorrId,Name\n");
  cuptiActivityRegisterCallbacks(BufferRequested, BufferCompleted);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME);
  atexit(Flush);
  return 1;
}
