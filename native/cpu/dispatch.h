// Code paths by instruction set: a function marked KOKORO_CPU_CLONES is
// compiled for x86-64-v3 (AVX2 and FMA) and for the baseline, the loader
// picking the best the CPU has (GCC's function multiversioning), so that one
// build runs everywhere and vectorises where it can. Its helpers are inlined
// into each clone (KOKORO_CPU_INLINE) and compiled for that clone's ISA.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define KOKORO_CPU_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define KOKORO_CPU_CLONES
#endif
#define KOKORO_CPU_INLINE [[gnu::always_inline]] inline
