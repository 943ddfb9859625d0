/* blas.c -- OpenBLAS, loaded by the engine itself.
 *
 * Debian's OpenBLAS 0.3.21 does not recognise some AVX-512 CPUs (AMD Zen 4 and later) and
 * falls back to its AVX2 (Haswell) kernels, at about half the speed.  Its AVX-512 kernels
 * (core type SkylakeX) can only be chosen through OPENBLAS_CORETYPE before the library's
 * constructor runs.  So the engine does not link OpenBLAS: on first use it checks the CPU,
 * points the variable at SkylakeX when AVX-512 is there, and only then dlopen()s the
 * library.  This works the same in the `glimpse` executable and in a stock `lua5.4` that
 * loads the module with require.
 *
 * Threads: gl_set_threads(n) (parallel.c, the one setting) caps the threads a product may
 * use (the number of CPUs, or GLIMPSE_THREADS, until then).  A product asks OpenBLAS for them
 * only when it is big enough (M*N*K >= GL_SGEMM_MT_MNK, about 0.7 ms of one core's work).
 * Below that, OpenBLAS's split was measured to cost more than it gained on a small shared
 * machine (the calling thread waits for a worker the OS is slow to run: products of 4M to
 * 42M multiply-adds ran no faster on 2 threads than on 1 at load 2 to 5, ones of 84M and
 * 134M twice as fast when the second core was free).  Mid-size products (GL_SGEMM_POOL_MNK
 * and up) are cut into blocks on the engine's own pool instead, whose calling thread takes
 * blocks too, so a late worker costs only its share; smaller ones run on the calling thread.
 *
 * An OPENBLAS_CORETYPE already naming an AVX2-or-older core (environments often pin
 * "Haswell" as a safe default for CPUs OpenBLAS misdetects) is upgraded too, since on an
 * AVX-512 CPU it only costs speed.  GLIMPSE_BLAS_CORE=<core> is the explicit override: its
 * value is used as is (GLIMPSE_BLAS_CORE=Haswell keeps the AVX2 kernels).
 */
#define _GNU_SOURCE
#include "glimpse.h"
#include "blas_profile.h"
#include "parallel.h"

#include <pthread.h>

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

enum { RowMajor = 101, NoTrans = 111, Trans = 112 };

typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int,
                         const float *, int, float, float *, int);
static sgemm_fn p_sgemm;
static void (*p_set_threads)(int);
static int (*p_get_threads)(void);
static char *(*p_corename)(void);
static char *(*p_config)(void);
static int loaded;          /* 0 not tried, 1 ok, -1 failed */
static int max_threads = 1; /* what gl_set_threads asked for (parallel.c; the CPUs at load) */
static int cur_threads = 1; /* what OpenBLAS is set to now */

/* products with at least this many multiply-adds may use every thread (see the top) */
#define GL_SGEMM_MT_MNK ((double)(1 << 26))
static char load_error[512];
static char core_note[160];

/* cores whose kernels use no AVX-512: worth upgrading on an AVX-512 CPU */
static int core_below_avx512(const char *c) {
  static const char *old[] = {"haswell", "zen", "sandybridge", "nehalem", "core2", "penryn",
                              "dunnington", "atom", "prescott", "katmai", "coppermine",
                              "northwood", "banias", "opteron", "barcelona", "bulldozer",
                              "piledriver", "steamroller", "excavator", "bobcat", NULL};
  for (int i = 0; old[i]; i++)
    if (!strcasecmp(c, old[i])) return 1;
  return 0;
}

static int cpu_has_avx512(void) {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512vl");
#else
  return 0;
#endif
}

int gl_blas_init(void) {
  if (loaded) return loaded > 0 ? GL_OK : gl_fail(GL_EIO, "%s", load_error);
  const char *mine = getenv("GLIMPSE_BLAS_CORE"), *theirs = getenv("OPENBLAS_CORETYPE");
  if (mine && *mine) {
    setenv("OPENBLAS_CORETYPE", mine, 1);
    snprintf(core_note, sizeof core_note, "core %s from GLIMPSE_BLAS_CORE", mine);
  } else if (cpu_has_avx512() && (!theirs || !*theirs || core_below_avx512(theirs))) {
    if (theirs && *theirs)
      snprintf(core_note, sizeof core_note, "OPENBLAS_CORETYPE=%s upgraded to SkylakeX "
               "(AVX-512 CPU; set GLIMPSE_BLAS_CORE to choose)", theirs);
    else
      snprintf(core_note, sizeof core_note, "SkylakeX chosen for this AVX-512 CPU");
    setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
  }
  /* OpenBLAS's idle workers spin (sched_yield) for 2^28 cycles, about 0.1 s, after each
   * threaded product before they sleep: on a small shared machine that burns the core other
   * work needs.  Products only go threaded when they are large (threads_for), so a worker
   * may as well sleep after ~0.3 ms (2^20 cycles) and be woken for the next one.  An
   * explicit OPENBLAS_THREAD_TIMEOUT is left alone. */
  if (!getenv("OPENBLAS_THREAD_TIMEOUT")) setenv("OPENBLAS_THREAD_TIMEOUT", "20", 1);
  static const char *names[] = {"libopenblas.so.0", "libopenblas.so", "libblas.so.3"};
  void *h = NULL;
  for (size_t i = 0; i < sizeof names / sizeof *names && !h; i++)
    h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(load_error, sizeof load_error,
             "blas: cannot load OpenBLAS (install libopenblas0): %s", dlerror());
    loaded = -1;
    return gl_fail(GL_EIO, "%s", load_error);
  }
  *(void **)&p_sgemm = dlsym(h, "cblas_sgemm");
  *(void **)&p_set_threads = dlsym(h, "openblas_set_num_threads");
  *(void **)&p_get_threads = dlsym(h, "openblas_get_num_threads");
  *(void **)&p_corename = dlsym(h, "openblas_get_corename");
  *(void **)&p_config = dlsym(h, "openblas_get_config");
  if (!p_sgemm) {
    snprintf(load_error, sizeof load_error, "blas: the loaded BLAS has no cblas_sgemm");
    loaded = -1;
    return gl_fail(GL_EIO, "%s", load_error);
  }
  cur_threads = p_get_threads ? p_get_threads() : 1;
  if (cur_threads < 1) cur_threads = 1;
  loaded = 1;
  max_threads = gl_threads();   /* the one setting (parallel.c): GLIMPSE_THREADS or the CPUs */
  return GL_OK;
}

const char *gl_blas_core(void) {
  if (gl_blas_init()) return "none";
  return p_corename ? p_corename() : "unknown";
}

const char *gl_blas_note(void) { return core_note; }

const char *gl_blas_config(void) {
  if (gl_blas_init()) return load_error;
  return p_config ? p_config() : "unknown";
}

int gl_blas_threads(void) {
  if (gl_blas_init()) return 0;
  return max_threads;
}

void gl_blas_set_threads(int n) {
  if (gl_blas_init() || !p_set_threads) return;
  max_threads = n < 1 ? 1 : n;
}

/* Inside gl_parallel_blas every pool thread runs its own products on one OpenBLAS thread:
 * the caller pins OpenBLAS to one thread before the loop and restores the cap after. */
int gl_blas_pin_serial(void) {
  int prev = max_threads;
  if (gl_blas_init()) return prev;
  max_threads = 1;
  if (cur_threads != 1 && p_set_threads) {
    p_set_threads(1);
    cur_threads = 1;
  }
  return prev;
}

void gl_blas_unpin(int prev) { max_threads = prev; }

int gl_sgemm_threaded(int M, int N, int K) {
  return max_threads > 1 && (double)M * N * K >= GL_SGEMM_MT_MNK;
}

/* point OpenBLAS at the thread count this product deserves (a store when nothing changes);
 * never from a pool thread: there OpenBLAS is already pinned to one (gl_blas_pin_serial) */
static void threads_for(int M, int N, int K) {
  if (gl_parallel_inside()) return;
  int want = max_threads > 1 && (double)M * N * K >= GL_SGEMM_MT_MNK ? max_threads : 1;
  if (want != cur_threads && p_set_threads) {
    p_set_threads(want);
    cur_threads = want;
  }
}

/* profiling (blas_profile.h): off unless glimpse.blas_profile(true) turned it on */
static int prof_on;
static gl_blas_profile_t prof;

void gl_blas_profile_enable(int on) {
  prof_on = on != 0;
  if (prof_on) prof = (gl_blas_profile_t){0, 0, 0};
}

int gl_blas_profile_enabled(void) { return prof_on; }

gl_blas_profile_t gl_blas_profile_read(void) { return prof; }

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Products between GL_SGEMM_POOL_MNK and GL_SGEMM_MT_MNK multiply-adds (an LSTM step's
 * 64 x 1024 x 320, a convolution's weight gradient) are too small for OpenBLAS's threads to
 * pay but big enough for the pool's: C is cut along its longer side into blocks of at least
 * SPLIT_MIN rows or columns, one OpenBLAS call (on one thread) per block.  OpenBLAS's own
 * threading cuts C the same way and never along K, and each element's sum runs over K in the
 * same order whatever block holds it, so the result is the same bits as one call. */
#define GL_SGEMM_POOL_MNK ((double)(1 << 21))
#define SPLIT_MIN 32

typedef struct {
  int ta, tb, M, N, K;
  float alpha, beta;
  const float *A;
  int lda;
  const float *B;
  int ldb;
  float *C;
  int ldc, split_n, blocks;
} split_ctx;

static void split_range(void *ctx, size_t lo, size_t hi, int slot) {
  (void)slot;
  const split_ctx *c = ctx;
  int len = c->split_n ? c->N : c->M;
  for (size_t b = lo; b < hi; b++) {
    int a0 = (int)((long long)len * (long long)b / c->blocks) & ~15;
    int a1 = b + 1 == (size_t)c->blocks ? len : (int)((long long)len * (long long)(b + 1) / c->blocks) & ~15;
    if (a1 <= a0) continue;
    if (c->split_n) {   /* columns a0..a1 of C: of op(B) too */
      const float *Bb = c->tb ? c->B + (size_t)a0 * c->ldb : c->B + a0;
      p_sgemm(RowMajor, c->ta ? Trans : NoTrans, c->tb ? Trans : NoTrans, c->M, a1 - a0, c->K,
              c->alpha, c->A, c->lda, Bb, c->ldb, c->beta, c->C + a0, c->ldc);
    } else {            /* rows a0..a1 of C: of op(A) too */
      const float *Ab = c->ta ? c->A + a0 : c->A + (size_t)a0 * c->lda;
      p_sgemm(RowMajor, c->ta ? Trans : NoTrans, c->tb ? Trans : NoTrans, a1 - a0, c->N, c->K,
              c->alpha, Ab, c->lda, c->B, c->ldb, c->beta, c->C + (size_t)a0 * c->ldc, c->ldc);
    }
  }
}

/* callers have run gl_blas_init() (the matmul ops do, and report its failure) */
void gl_sgemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) { /* BLAS leaves C alone when K is 0 only if beta == 1 */
    for (int i = 0; i < M; i++)   /* beta 0 assigns: C may hold garbage (NaN * 0 is NaN) */
      for (int j = 0; j < N; j++) C[(size_t)i * ldc + j] = beta == 0 ? 0 : C[(size_t)i * ldc + j] * beta;
    return;
  }
  threads_for(M, N, K);
  double t0 = prof_on ? now_s() : 0;
  double mnk = (double)M * N * K;
  if (max_threads > 1 && mnk >= GL_SGEMM_POOL_MNK && mnk < GL_SGEMM_MT_MNK &&
      (M >= 2 * SPLIT_MIN || N >= 2 * SPLIT_MIN) && !gl_parallel_inside()) {
    /* split along the longer side of C into blocks for the pool's threads */
    int split_n = N >= M, len = split_n ? N : M;
    int blocks = len / SPLIT_MIN < 2 * max_threads ? len / SPLIT_MIN : 2 * max_threads;
    split_ctx c = {ta, tb, M, N, K, alpha, beta, A, lda, B, ldb, C, ldc, split_n, blocks};
    gl_parallel_blas((size_t)blocks, (size_t)(2 * mnk / blocks), split_range, &c);
  } else {
    p_sgemm(RowMajor, ta ? Trans : NoTrans, tb ? Trans : NoTrans, M, N, K, alpha, A, lda, B,
            ldb, beta, C, ldc);
  }
  if (prof_on) {   /* products may run on several pool threads at once (gl_parallel_blas) */
    static pthread_mutex_t prof_mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&prof_mu);
    prof.seconds += now_s() - t0;
    prof.calls++;
    prof.flops += 2.0 * M * N * K;
    pthread_mutex_unlock(&prof_mu);
  }
}

typedef struct {
  int ta, tb, M, N, K;
  float alpha, beta;
  const float *A, *B;
  size_t sA, sB, sC;
  float *C;
} batched_ctx;

static void batched_range(void *c, size_t lo, size_t hi, int slot) {
  (void)slot;
  const batched_ctx *x = c;
  int lda = x->ta ? x->M : x->K, ldb = x->tb ? x->K : x->N;
  for (size_t b = lo; b < hi; b++)
    gl_sgemm(x->ta, x->tb, x->M, x->N, x->K, x->alpha, x->A + b * x->sA, lda, x->B + b * x->sB,
             ldb, x->beta, x->C + b * x->sC, x->N);
}

/* Products too small for OpenBLAS's threads (multi-head attention's per-head products) run
 * side by side on the pool instead, each on one OpenBLAS thread (parallel.h); a product is
 * computed the same way either way, so the result does not depend on the thread count. */
void gl_sgemm_batched(int ta, int tb, int batch, int M, int N, int K, float alpha,
                      const float *A, size_t sA, const float *B, size_t sB, float beta,
                      float *C, size_t sC) {
  batched_ctx c = {ta, tb, M, N, K, alpha, beta, A, B, sA, sB, sC, C};
  if (batch < 2 || (double)M * N * K >= GL_SGEMM_MT_MNK) {
    batched_range(&c, 0, (size_t)(batch > 0 ? batch : 0), 0);
    return;
  }
  gl_parallel_blas((size_t)batch, 2 * (size_t)M * N * (K ? K : 1), batched_range, &c);
}
