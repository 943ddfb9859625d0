/* parallel.c -- the thread pool behind gl_parallel_for (parallel.h): both cores for the
 * elementwise, reduction, softmax, convolution, normalisation, recurrent-gate and optimizer
 * loops that OpenBLAS does not run.
 *
 * One setting, gl_set_threads(n) (glimpse.set_num_threads in Lua; GLIMPSE_THREADS=n in the
 * environment sets the starting value, else the number of online CPUs), gives both the pool
 * and OpenBLAS their thread count.  They never run at once: the pool's workers only run while
 * the calling thread is inside gl_parallel_for, and the engine calls OpenBLAS from the calling
 * thread outside those loops (or, in gl_parallel_blas, with OpenBLAS pinned to one thread).
 * Between loops a worker spins briefly (a loop usually follows a loop) and then sleeps on a
 * condition variable, so a matrix product running on OpenBLAS's threads has the cores.
 *
 * A loop is cut into a few chunks more than there are threads and the chunks are handed out
 * by one atomic ticket, gen << 32 | nchunks << 16 | next: the calling thread takes chunks too,
 * so a worker that the OS is slow to wake (a loaded machine) costs nothing but its share; the
 * caller waits only for chunks a worker has actually taken.  A worker reads the loop's
 * description only after taking a chunk of that generation, and the caller does not return
 * (or change the description) until every taken chunk is done.
 */
#define _GNU_SOURCE
#include "glimpse.h"
#include "parallel.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

/* pause loops a worker spins for the next loop before it sleeps (some tens of microseconds) */
#define WORKER_SPIN 2000
/* most chunks per thread: enough for a late worker to matter little, few enough to be cheap */
#define CHUNKS_PER_THREAD 4

typedef struct {
  gl_range_fn fn;
  void *ctx;
  size_t n;
  int nchunks;
  size_t align;   /* chunk bounds are multiples of this (16 floats: one cache line) */
} job_t;

static job_t job;
static _Atomic uint64_t ticket;       /* gen << 32 | nchunks << 16 | next */
static _Atomic int done_chunks;
static _Atomic int sleepers;
static _Atomic int quit;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static pthread_t workers[GL_PAR_MAX_THREADS];
static int nworkers;                  /* started */
static int nthreads;                  /* wanted (0: not yet read from the environment) */
static atomic_flag busy = ATOMIC_FLAG_INIT;   /* a loop is running (another caller goes serial) */
static _Thread_local int inside;      /* this thread is running a chunk */

static size_t chunk_lo(size_t n, int nchunks, size_t align, int i) {
  size_t lo = (size_t)((double)n * i / nchunks);
  if (i > 0 && i < nchunks) lo -= lo % align;
  return i >= nchunks ? n : lo;
}

/* take and run chunks of generation gen until none is left; returns how many were run */
static int run_chunks(uint32_t gen, int slot) {
  int ran = 0;
  for (;;) {
    uint64_t t = atomic_load_explicit(&ticket, memory_order_acquire);
    if ((uint32_t)(t >> 32) != gen) break;
    int nch = (int)((t >> 16) & 0xffff), next = (int)(t & 0xffff);
    if (next >= nch) break;
    if (!atomic_compare_exchange_weak_explicit(&ticket, &t, t + 1, memory_order_acq_rel,
                                               memory_order_acquire))
      continue;
    size_t lo = chunk_lo(job.n, nch, job.align, next), hi = chunk_lo(job.n, nch, job.align, next + 1);
    if (hi > lo) job.fn(job.ctx, lo, hi, slot);
    atomic_fetch_add_explicit(&done_chunks, 1, memory_order_release);
    ran++;
  }
  return ran;
}

static void *worker_main(void *arg) {
  int slot = (int)(intptr_t)arg;
  inside = 1;   /* a worker's own gl_parallel_for calls (none expected) run serially */
  uint32_t seen = (uint32_t)(atomic_load(&ticket) >> 32);
  for (;;) {
    uint32_t gen = seen;
    for (int i = 0; i < WORKER_SPIN && gen == seen; i++) {
      CPU_RELAX();
      gen = (uint32_t)(atomic_load_explicit(&ticket, memory_order_acquire) >> 32);
    }
    if (gen == seen) {
      pthread_mutex_lock(&mu);
      atomic_fetch_add(&sleepers, 1);
      while (!atomic_load(&quit) && (gen = (uint32_t)(atomic_load(&ticket) >> 32)) == seen)
        pthread_cond_wait(&cv, &mu);
      atomic_fetch_sub(&sleepers, 1);
      pthread_mutex_unlock(&mu);
    }
    if (atomic_load(&quit)) break;
    seen = gen;
    run_chunks(gen, slot);
  }
  return NULL;
}

static void stop_workers(void) {
  if (!nworkers) return;
  pthread_mutex_lock(&mu);
  atomic_store(&quit, 1);
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
  for (int i = 0; i < nworkers; i++) pthread_join(workers[i], NULL);
  nworkers = 0;
  atomic_store(&quit, 0);
}

/* after fork() the child has no workers (threads are not copied): start afresh */
static void after_fork_child(void) {
  nworkers = 0;
  pthread_mutex_init(&mu, NULL);
  pthread_cond_init(&cv, NULL);
  atomic_flag_clear(&busy);
}

static void read_env(void) {
  static int atfork_done;
  if (!atfork_done) {
    pthread_atfork(NULL, NULL, after_fork_child);
    atfork_done = 1;
  }
  const char *e = getenv("GLIMPSE_THREADS");
  long n = e && *e ? strtol(e, NULL, 10) : 0;
  if (n < 1) n = sysconf(_SC_NPROCESSORS_ONLN);
  if (n < 1) n = 1;
  if (n > GL_PAR_MAX_THREADS) n = GL_PAR_MAX_THREADS;
  nthreads = (int)n;
}

int gl_threads(void) {
  if (!nthreads) read_env();
  return nthreads;
}

void gl_set_threads(int n) {
  if (!nthreads) read_env();
  if (n < 1) n = 1;
  if (n > GL_PAR_MAX_THREADS) n = GL_PAR_MAX_THREADS;
  if (n < nworkers + 1) stop_workers();   /* fewer: restart lazily with the new count */
  nthreads = n;
  gl_blas_set_threads(n);
}

int gl_parallel_slots(void) { return inside ? 1 : gl_threads(); }

int gl_parallel_inside(void) { return inside; }

static int start_workers(void) {
  while (nworkers < nthreads - 1) {
    if (pthread_create(&workers[nworkers], NULL, worker_main, (void *)(intptr_t)(nworkers + 1)))
      break;   /* no more threads: run with what there is */
    nworkers++;
  }
  return nworkers;
}

void gl_parallel_for(size_t n, size_t cost, gl_range_fn fn, void *ctx) {
  if (n == 0) return;
  int threads = inside ? 1 : gl_threads();
  size_t work = cost ? n * cost : n;
  if (threads <= 1 || n < 2 || work < GL_PAR_MIN_WORK || atomic_flag_test_and_set(&busy)) {
    int was = inside;
    inside = 1;
    fn(ctx, 0, n, 0);
    inside = was;
    return;
  }
  int avail = start_workers() + 1;
  size_t nch = (size_t)avail * CHUNKS_PER_THREAD;
  size_t by_work = work / (GL_PAR_MIN_WORK / 2);
  if (nch > by_work) nch = by_work;
  if (nch > n) nch = n;
  if (nch < 2) nch = 2;
  job = (job_t){fn, ctx, n, (int)nch, n >= 64 * nch ? 16 : 1};
  atomic_store_explicit(&done_chunks, 0, memory_order_relaxed);
  uint32_t gen = (uint32_t)(atomic_load(&ticket) >> 32) + 1;
  atomic_store(&ticket, (uint64_t)gen << 32 | (uint64_t)nch << 16);   /* seq_cst: publishes job */
  if (atomic_load(&sleepers) > 0) {
    pthread_mutex_lock(&mu);
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
  }
  inside = 1;
  run_chunks(gen, 0);
  inside = 0;
  /* wait for the chunks the workers took (the ticket is spent: no new ones will start) */
  for (int spins = 0; atomic_load_explicit(&done_chunks, memory_order_acquire) < (int)nch; spins++) {
    if (spins < 4096) CPU_RELAX();
    else sched_yield();
  }
  atomic_flag_clear(&busy);
}

void gl_parallel_blas(size_t n, size_t cost, gl_range_fn fn, void *ctx) {
  int prev = gl_blas_pin_serial();
  gl_parallel_for(n, cost, fn, ctx);
  gl_blas_unpin(prev);
}
