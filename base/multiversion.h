// Hot CPU loops built twice, for AVX2 and for any x86-64, the better one picked at load time
// (GCC's target_clones, an ifunc). ThreadSanitizer builds take the portable version only: an
// ifunc resolver runs before the sanitizer's runtime is up and crashes the program.
#pragma once

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define RIDGE_THREAD_SANITIZER 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define RIDGE_THREAD_SANITIZER 1
#endif

#if defined(__x86_64__) && !defined(RIDGE_THREAD_SANITIZER)
#define RIDGE_AVX2_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define RIDGE_AVX2_CLONES
#endif
