/* tensor.c -- errors, the caching allocator, tensor headers, creation and the RNG.
 *
 * Everything that owns bytes lives here.  Tensor data comes from a size-classed cache so a
 * training loop, which asks for the same sizes every step, stops calling malloc after its
 * first step; headers and storages come from free lists for the same reason.
 */
#include "glimpse_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* errors */

static _Thread_local char errmsg[1024];

const char *gl_last_error(void) { return errmsg; }

int gl_fail(int status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(errmsg, sizeof errmsg, fmt, ap);
  va_end(ap);
  return status;
}

char *gl_shape_str(char *buf, size_t n, int ndim, const int *shape) {
  size_t k = 0;
  if (n == 0) return buf;
  buf[k++] = '[';
  for (int i = 0; i < ndim && k + 16 < n; i++)
    k += (size_t)snprintf(buf + k, n - k, i ? ",%d" : "%d", shape[i]);
  if (k + 2 <= n) buf[k++] = ']';
  buf[k < n ? k : n - 1] = 0;
  return buf;
}

/* ------------------------------------------------------------------------ */
/* the caching allocator
 *
 * Size classes: 16 floats and below share one class; above, four classes per power of two
 * (2^k, 1.25, 1.5, 1.75 x 2^k), so a request wastes at most 25%.  A freed block goes on its
 * class's list (the link lives in the block's own first bytes) unless the cache already holds
 * CACHE_LIMIT bytes, in which case it is returned to the system.
 */

#define NCLASSES 160
#define CACHE_LIMIT ((size_t)1 << 30)

static void *freelist[NCLASSES];
static size_t bytes_live, bytes_cached, bytes_handed_out;

static int size_class(size_t n, size_t *cap) {
  if (n <= 16) { *cap = 16; return 0; }
  int k = 63 - __builtin_clzll((unsigned long long)(n - 1)); /* 2^k < n <= 2^(k+1) */
  size_t base = (size_t)1 << k, step = base / 4;
  size_t q = (n - base + step - 1) / step;                   /* 1..4 */
  *cap = base + q * step;
  return 1 + (k - 4) * 4 + (int)(q - 1);
}

/* the capacity of class c (the inverse of size_class) */
static size_t class_cap(int c) {
  if (c == 0) return 16;
  size_t base = (size_t)1 << (4 + (c - 1) / 4);
  return base + (size_t)((c - 1) % 4 + 1) * (base / 4);
}

/* A block of at least BORROW_MIN floats (4 MB) whose class is empty takes a
 * cached block of one of the next BORROW_CLASSES classes (at most four times its size) before
 * asking the system: a network's maps shrink layer by layer (VGG's halve at each pool), and
 * each size otherwise keeps its own blocks cached, so the resident size grows to the sum of
 * every layer's maps.  A tensor's storage records the block's own capacity (a scratch block
 * in its first cache line), so the block goes back to its own class. */
#define BORROW_MIN ((size_t)1 << 20)
#define BORROW_CLASSES 8

static float *raw_alloc(size_t n, size_t *cap) {
  int c = size_class(n, cap);
  if (n >= BORROW_MIN && c < NCLASSES && !freelist[c])
    for (int d = c + 1; d <= c + BORROW_CLASSES && d < NCLASSES; d++)
      if (freelist[d]) {
        c = d;
        *cap = class_cap(d);
        break;
      }
  if (c < NCLASSES && freelist[c]) {
    void *p = freelist[c];
    freelist[c] = *(void **)p;
    bytes_cached -= *cap * sizeof(float);
    bytes_live += *cap * sizeof(float);
    bytes_handed_out += *cap * sizeof(float);
    return p;
  }
  void *p = NULL;
  if (*cap > GL_MAX_NUMEL + 1024) return NULL;
  if (posix_memalign(&p, 64, *cap * sizeof(float)) != 0) {
    gl_empty_cache();                    /* give the cache back and try once more */
    if (posix_memalign(&p, 64, *cap * sizeof(float)) != 0) return NULL;
  }
  bytes_live += *cap * sizeof(float);
  bytes_handed_out += *cap * sizeof(float);
  return p;
}

static void raw_free(float *p, size_t cap) {
  size_t dummy;
  int c = size_class(cap, &dummy);
  bytes_live -= cap * sizeof(float);
  if (c < NCLASSES && bytes_cached + cap * sizeof(float) <= CACHE_LIMIT) {
    *(void **)p = freelist[c];
    freelist[c] = p;
    bytes_cached += cap * sizeof(float);
  } else {
    free(p);
  }
}

size_t gl_bytes_live(void) { return bytes_live; }
size_t gl_bytes_cached(void) { return bytes_cached; }
size_t gl_bytes_handed_out(void) { return bytes_handed_out; }

void gl_empty_cache(void) {
  for (int c = 0; c < NCLASSES; c++) {
    while (freelist[c]) {
      void *p = freelist[c];
      freelist[c] = *(void **)p;
      free(p);
    }
  }
  bytes_cached = 0;
}

/* A scratch block starts with a cache line that records its capacity, so that it too can
 * borrow a bigger cached block (gl_scratch_free is told only the size asked for). */
#define SCRATCH_HEAD 16

float *gl_scratch_alloc(size_t n) {
  size_t cap;
  float *p = raw_alloc(n + SCRATCH_HEAD, &cap);
  if (!p) return NULL;
  *(size_t *)(void *)p = cap;
  return p + SCRATCH_HEAD;
}

void gl_scratch_free(float *p, size_t n) {
  (void)n;
  if (!p) return;
  p -= SCRATCH_HEAD;
  raw_free(p, *(size_t *)(void *)p);
}

/* free lists of headers */
static gl_storage *free_storages;   /* linked through ->data */
static gl_tensor *free_tensors;     /* linked through ->grad */

static uint64_t storage_ids;

static gl_storage *storage_new(size_t n) {
  size_t cap;
  float *d = raw_alloc(n ? n : 1, &cap);
  if (!d) return NULL;
  gl_storage *s = free_storages;
  if (s) free_storages = (gl_storage *)(void *)s->data;
  else if (!(s = malloc(sizeof *s))) { raw_free(d, cap); return NULL; }
  s->data = d;
  s->cap = cap;
  s->refs = 1;
  s->version = 0;
  s->id = ++storage_ids;
  return s;
}

static void storage_release(gl_storage *s) {
  if (!s || --s->refs > 0) return;
  gl_wino_cache_forget(s->id);           /* its transformed weights, if conv2d kept any */
  raw_free(s->data, s->cap);
  s->data = (float *)(void *)free_storages;
  free_storages = s;
}

static gl_tensor *header_new(void) {
  gl_tensor *t = free_tensors;
  if (t) free_tensors = t->grad;
  else if (!(t = malloc(sizeof *t))) return NULL;
  memset(t, 0, sizeof *t);
  t->refs = 1;
  return t;
}


void gl_touch(gl_tensor *t) {
  t->version++;
  if (t->st) t->st->version++;
}

void gl_retain(gl_tensor *t) {
  if (t) t->refs++;
}

void gl_release(gl_tensor *t) {
  if (!t) return;
  if (--t->refs > 0) {
    if (t->refs == t->hdr_refs && t->st) {     /* only nodes that never read the data left */
      storage_release(t->st);
      t->st = NULL;
      t->data = NULL;
    }
    return;
  }
  storage_release(t->st);
  gl_release(t->grad);
  if (t->node) gl_node_release(t->node);
  t->grad = free_tensors;
  free_tensors = t;
}

/* ------------------------------------------------------------------------ */
/* creation */

int gl_check_shape(const char *op, int ndim, const int *shape, size_t *numel) {
  char b[128];
  if (ndim < 0 || ndim > GL_MAX_DIMS)
    return gl_fail(GL_EARG, "%s: %d dims (at most %d)", op, ndim, GL_MAX_DIMS);
  size_t n = 1;
  int zero = 0;    /* a zero anywhere makes an empty tensor, whatever the other sizes */
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0)
      return gl_fail(GL_EARG, "%s: size %d of dim %d is negative in %s", op, shape[i], i + 1,
                     gl_shape_str(b, sizeof b, ndim, shape));
    zero |= shape[i] == 0;
  }
  for (int i = 0; i < ndim && !zero; i++) {
    if (n > GL_MAX_NUMEL / (size_t)shape[i])
      return gl_fail(GL_ENOMEM, "%s: shape %s is too large (more than %zu elements)", op,
                     gl_shape_str(b, sizeof b, ndim, shape), GL_MAX_NUMEL);
    n *= (size_t)shape[i];
  }
  if (zero) n = 0;
  if (numel) *numel = n;
  return GL_OK;
}

int gl_empty(gl_tensor **out, int ndim, const int *shape) {
  size_t n;
  int st = gl_check_shape("empty", ndim, shape, &n);
  if (st) return st;
  gl_tensor *t = header_new();
  if (!t) return gl_fail(GL_ENOMEM, "out of memory");
  t->st = storage_new(n);
  if (!t->st) {
    char b[128];
    t->refs = 0;
    t->grad = free_tensors;
    free_tensors = t;
    return gl_fail(GL_ENOMEM, "out of memory allocating a tensor of shape %s (%zu bytes)",
                   gl_shape_str(b, sizeof b, ndim, shape), n * sizeof(float));
  }
  t->data = t->st->data;
  t->ndim = ndim;
  if (ndim) memcpy(t->shape, shape, sizeof(int) * (size_t)ndim);
  t->numel = n;
  *out = t;
  return GL_OK;
}

int gl_zeros(gl_tensor **out, int ndim, const int *shape) {
  int st = gl_empty(out, ndim, shape);
  if (!st) memset((*out)->data, 0, (*out)->numel * sizeof(float));
  return st;
}

int gl_full(gl_tensor **out, int ndim, const int *shape, float v) {
  int st = gl_empty(out, ndim, shape);
  if (st) return st;
  float *d = (*out)->data;
  for (size_t i = 0; i < (*out)->numel; i++) d[i] = v;
  return GL_OK;
}

int gl_from_data(gl_tensor **out, int ndim, const int *shape, const float *data) {
  int st = gl_empty(out, ndim, shape);
  if (!st && (*out)->numel) memcpy((*out)->data, data, (*out)->numel * sizeof(float));
  return st;
}

int gl_arange(gl_tensor **out, float start, float stop, float step) {
  if (step == 0 || !isfinite(start) || !isfinite(stop) || !isfinite(step))
    return gl_fail(GL_EARG, "arange: bad range start=%g stop=%g step=%g", start, stop, step);
  double n = ceil(((double)stop - start) / step);
  if (n < 0) n = 0;
  if (n > (double)GL_MAX_NUMEL)
    return gl_fail(GL_ENOMEM, "arange: %.0f elements is too many", n);
  int shape[1] = {(int)n};
  int st = gl_empty(out, 1, shape);
  if (st) return st;
  for (int i = 0; i < shape[0]; i++) (*out)->data[i] = (float)(start + (double)i * step);
  return GL_OK;
}

int gl_empty_like(gl_tensor **out, const gl_tensor *t) { return gl_empty(out, t->ndim, t->shape); }
int gl_zeros_like(gl_tensor **out, const gl_tensor *t) { return gl_zeros(out, t->ndim, t->shape); }

int gl_clone(gl_tensor **out, const gl_tensor *t) {
  return gl_from_data(out, t->ndim, t->shape, t->data);
}

gl_tensor *gl_alias(gl_tensor *t) {
  gl_tensor *a = header_new();
  if (!a) return NULL;
  a->ndim = t->ndim;
  memcpy(a->shape, t->shape, sizeof a->shape);
  a->numel = t->numel;
  a->st = t->st;
  a->st->refs++;
  a->data = t->data;
  return a;
}

int gl_same_shape(const gl_tensor *a, const gl_tensor *b) {
  if (a->ndim != b->ndim) return 0;
  for (int i = 0; i < a->ndim; i++)
    if (a->shape[i] != b->shape[i]) return 0;
  return 1;
}

int gl_has_nonfinite(const gl_tensor *t) {
  for (size_t i = 0; i < t->numel; i++)
    if (!isfinite(t->data[i])) return 1;
  return 0;
}

/* ------------------------------------------------------------------------ */
/* RNG: xoshiro128** (Blackman & Vigna), seeded through splitmix64.  Pure integer
 * arithmetic, so the same seed gives the same numbers on every machine; normals by
 * Box-Muller from two uniforms, computed in double and rounded. */

static uint32_t rs[4] = {0x9e3779b9u, 0x243f6a88u, 0xb7e15162u, 0x85a308d3u};
static int have_spare;
static float spare;

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void gl_manual_seed(uint64_t seed) {
  uint64_t x = seed;
  uint64_t a = splitmix64(&x), b = splitmix64(&x);
  rs[0] = (uint32_t)a; rs[1] = (uint32_t)(a >> 32);
  rs[2] = (uint32_t)b; rs[3] = (uint32_t)(b >> 32);
  if (!(rs[0] | rs[1] | rs[2] | rs[3])) rs[0] = 1;
  have_spare = 0;
}

uint64_t gl_rng_state_get(uint64_t *s) {
  s[0] = (uint64_t)rs[0] | (uint64_t)rs[1] << 32;
  s[1] = (uint64_t)rs[2] | (uint64_t)rs[3] << 32;
  return s[0];
}

void gl_rng_state_set(const uint64_t *s) {
  rs[0] = (uint32_t)s[0]; rs[1] = (uint32_t)(s[0] >> 32);
  rs[2] = (uint32_t)s[1]; rs[3] = (uint32_t)(s[1] >> 32);
  if (!(rs[0] | rs[1] | rs[2] | rs[3])) rs[0] = 1;
  have_spare = 0;
}

static inline uint32_t rotl(uint32_t x, int k) { return (x << k) | (x >> (32 - k)); }

uint32_t gl_rand_u32(void) {
  uint32_t r = rotl(rs[1] * 5, 7) * 9, t = rs[1] << 9;
  rs[2] ^= rs[0]; rs[3] ^= rs[1]; rs[1] ^= rs[2]; rs[0] ^= rs[3];
  rs[2] ^= t; rs[3] = rotl(rs[3], 11);
  return r;
}

float gl_rand_uniform(void) { return (float)(gl_rand_u32() >> 8) * (1.0f / 16777216.0f); }

float gl_rand_normal(void) {
  if (have_spare) { have_spare = 0; return spare; }
  double u1, u2;
  do u1 = (gl_rand_u32() >> 8) * (1.0 / 16777216.0); while (u1 <= 0);
  u2 = (gl_rand_u32() >> 8) * (1.0 / 16777216.0);
  double r = sqrt(-2.0 * log(u1)), th = 6.283185307179586 * u2;
  spare = (float)(r * sin(th));
  have_spare = 1;
  return (float)(r * cos(th));
}

int gl_uniform_(gl_tensor *t, float lo, float hi) {
  if (!isfinite(lo) || !isfinite(hi) || lo > hi)
    return gl_fail(GL_EARG, "uniform_: the range [%g, %g) needs finite bounds with low <= high",
                   (double)lo, (double)hi);
  for (size_t i = 0; i < t->numel; i++) t->data[i] = lo + (hi - lo) * gl_rand_uniform();
  gl_touch(t);
  return GL_OK;
}

int gl_normal_(gl_tensor *t, float mean, float std) {
  if (!isfinite(mean) || !isfinite(std) || std < 0)
    return gl_fail(GL_EARG, "normal_: mean %g and std %g must be finite with std >= 0",
                   (double)mean, (double)std);
  for (size_t i = 0; i < t->numel; i++) t->data[i] = mean + std * gl_rand_normal();
  gl_touch(t);
  return GL_OK;
}

int gl_rand(gl_tensor **out, int ndim, const int *shape) {
  int st = gl_empty(out, ndim, shape);
  return st ? st : gl_uniform_(*out, 0, 1);
}

int gl_randn(gl_tensor **out, int ndim, const int *shape) {
  int st = gl_empty(out, ndim, shape);
  return st ? st : gl_normal_(*out, 0, 1);
}
