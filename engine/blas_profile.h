/* blas_profile.h -- run-time counters of the BLAS wrapper (engine/blas.c), for
 * `bench/run.lua --profile` and glimpse.blas_profile.  Off by default: the normal path pays
 * one predictable branch per product. */
#ifndef GLIMPSE_BLAS_PROFILE_H
#define GLIMPSE_BLAS_PROFILE_H

#include <stdint.h>

typedef struct {
  int64_t calls;    /* gl_sgemm calls that did work (M, N > 0) since the last reset */
  double seconds;   /* wall-clock seconds inside them */
  double flops;     /* 2 * M * N * K summed over them */
} gl_blas_profile_t;

/* on != 0: start counting (and zero the counters); 0: stop (the counters stay readable) */
void gl_blas_profile_enable(int on);
int gl_blas_profile_enabled(void);
gl_blas_profile_t gl_blas_profile_read(void);

#endif
