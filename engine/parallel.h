/* parallel.h -- private to the engine: the thread pool the ops' loops run on (parallel.c).
 *
 *   gl_parallel_for(n, cost, fn, ctx)
 *
 * runs fn(ctx, lo, hi, slot) over ranges [lo, hi) that cover 0 .. n-1 once each, on up to
 * gl_threads() threads (the caller is one of them).  `cost` is a rough count of simple
 * float operations per item; below GL_PAR_MIN_WORK in all (n * cost) the caller runs
 * fn(ctx, 0, n, 0) alone, so small tensors never pay for a wake-up.  `slot` (0 .. threads-1)
 * names the thread that runs the range, for per-thread scratch the caller prepared.
 *
 * Rules for fn: it may not allocate through the engine's caching allocator (gl_scratch_alloc,
 * gl_empty: they are not thread-safe; prepare buffers before), may not record on the tape,
 * and must write only what its range owns.  Every item must come out the same whichever
 * thread computes it and however the range is cut: a reduction is never split across
 * ranges (one item is one whole row's sum), so results are bitwise identical on 1 and N
 * threads.  A gl_parallel_for inside fn runs serially.  fn may call gl_sgemm only inside
 * gl_parallel_blas (below).
 */
#ifndef GLIMPSE_PARALLEL_H
#define GLIMPSE_PARALLEL_H

#include <stddef.h>

/* below this many operations in all a loop runs on the calling thread alone (about 10 to
 * 20 microseconds of one core's work: waking a sleeping thread costs a few) */
#define GL_PAR_MIN_WORK ((size_t)1 << 15)
/* the most threads the pool runs (the caller and GL_PAR_MAX_THREADS - 1 workers) */
#define GL_PAR_MAX_THREADS 64

typedef void (*gl_range_fn)(void *ctx, size_t lo, size_t hi, int slot);

void gl_parallel_for(size_t n, size_t cost, gl_range_fn fn, void *ctx);
/* The same, for loops whose ranges call gl_sgemm: OpenBLAS is held at one thread for the
 * duration, so each pool thread runs its products alone and the two never oversubscribe. */
void gl_parallel_blas(size_t n, size_t cost, gl_range_fn fn, void *ctx);
/* How many slots a gl_parallel_for may use now (1 inside a parallel region): the number of
 * per-thread scratch buffers a caller must prepare. */
int gl_parallel_slots(void);
/* whether this thread is running a chunk of a loop now */
int gl_parallel_inside(void);

/* blas.c: whether an M x N x K product is big enough to run on OpenBLAS's threads (then a
 * caller runs such products one after the other rather than side by side on the pool) */
int gl_sgemm_threaded(int M, int N, int K);
/* blas.c: pin OpenBLAS to one thread (returns the previous setting to restore). */
int gl_blas_pin_serial(void);
void gl_blas_unpin(int prev);

#endif
