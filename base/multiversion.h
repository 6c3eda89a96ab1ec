// Hot CPU loops built twice, for AVX2 and for any x86-64, the better one picked at load time
// (GCC's target_clones, an ifunc). ThreadSanitizer builds take the portable version only: an
// ifunc resolver runs before the sanitizer's runtime is up and crashes the program.
#pragma once

#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__) && !defined(__clang__)
#define RIDGE_AVX2_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define RIDGE_AVX2_CLONES
#endif
