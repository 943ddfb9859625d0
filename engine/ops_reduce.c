/* ops_reduce.c -- reductions over one dim (or over everything): sum, mean, max/min with
 * indices, argmax, logsumexp, variance, L2 norm; and the running sum cumsum.
 *
 * A reduction over dim d sees the tensor as (outer, n, inner) and writes (outer, inner).
 * Sums accumulate in double so a mean over a large tensor does not drift.
 *
 * Threads (parallel.h): sum, mean and logsumexp and their backwards run on the pool by
 * output elements (each output's sum runs whole on one thread, in the serial order) or by
 * rows of the input; a reduction over everything stays on one thread.
 */
#include "glimpse_internal.h"
#include "ops_span.h"
#include "parallel.h"

#include <float.h>
#include <math.h>
#include <string.h>

typedef struct { size_t outer, n, inner; } span3;

/* dim < 0: all elements, out is 0-dim (or all-ones dims with keepdim) */
static int reduce_shape(const char *op, const gl_tensor *a, int dim, int keepdim, span3 *sp,
                        int *ondim, int *oshape) {
  if (dim < 0) {
    sp->outer = 1; sp->n = a->numel; sp->inner = 1;
    *ondim = keepdim ? a->ndim : 0;
    for (int i = 0; i < *ondim; i++) oshape[i] = 1;
    return GL_OK;
  }
  if (dim >= a->ndim) {
    char b[128];
    return gl_fail(GL_EARG, "%s: dim %d out of range for shape %s", op, dim + 1,
                   gl_shape_str(b, sizeof b, a->ndim, a->shape));
  }
  gl_dim_span(a, dim, &sp->outer, &sp->n, &sp->inner);
  int k = 0;
  for (int i = 0; i < a->ndim; i++) {
    if (i == dim) { if (keepdim) oshape[k++] = 1; }
    else oshape[k++] = a->shape[i];
  }
  *ondim = k;
  return GL_OK;
}

/* a reduction's saved state: the span its backward walks, and the op's one scalar (the
 * mean's 1/n, var's denominator, norm's result) */
typedef struct {
  span3 sp;
  float scalar;
} reduce_state;

static void save_span(gl_node *n, const span3 *sp) {
  GL_NODE_STATE(n, reduce_state)->sp = *sp;
}

/* ------------------------------------------------------------------------ */
/* sum and mean: a (outer, n, inner) -> (outer, inner)
 * backward: ga[o, j, i] += g[o, i] (times 1/n for the mean) */

/* the loops' shared context: x (outer, n, inner) in, y (outer, inner) out (or the reverse
 * for a backward: d the gradient of y, g the one of x) */
typedef struct {
  span3 sp;
  float scale;
  const float *x, *y, *d;
  float *o;
} red_ctx;

/* rows r = o * n + j of ga: ga[r, i] += scale * g[o, i] */
static void summean_grad_range(void *c, size_t lo, size_t hi, int slot) {
  (void)slot;
  const red_ctx *k = c;
  size_t len = k->sp.n, inner = k->sp.inner;
  for (size_t r = lo; r < hi; r++) {
    float *gx = k->o + r * inner;
    const float *dd = k->d + (r / len) * inner;
    for (size_t i = 0; i < inner; i++) gx[i] += k->scale * dd[i];
  }
}

static int summean_backward(gl_node *n, gl_tensor **gout) {
  gl_tensor *g = gl_grad_of(n, 0);
  if (!g) return GL_OK;
  const reduce_state *rs = GL_NODE_STATE(n, reduce_state);
  red_ctx c = {rs->sp, rs->scalar, NULL, NULL, gout[0]->data, g->data};
  gl_parallel_for(rs->sp.outer * rs->sp.n, rs->sp.inner, summean_grad_range, &c);
  return GL_OK;
}

/* outputs k = q * inner + i in [lo, hi): the sum over j in order, times scale */
static void summean_range(void *c, size_t lo, size_t hi, int slot) {
  (void)slot;
  const red_ctx *k = c;
  size_t len = k->sp.n, inner = k->sp.inner;
  float *o = k->o;
  if (inner == 1) {
    for (size_t q = lo; q < hi; q++) {
      const float *x = k->x + q * len;
      double s = 0;
      for (size_t j = 0; j < len; j++) s += x[j];
      o[q] = (float)(s * k->scale);
    }
    return;
  }
  for (size_t q = lo / inner; q * inner < hi; q++) {   /* the part of row q in the range */
    size_t i0 = q * inner < lo ? lo - q * inner : 0;
    size_t i1 = (q + 1) * inner > hi ? hi - q * inner : inner;
    float *oo = o + q * inner;
    memset(oo + i0, 0, (i1 - i0) * sizeof(float));
    for (size_t j = 0; j < len; j++) {
      const float *x = k->x + (q * len + j) * inner;
      for (size_t i = i0; i < i1; i++) oo[i] += x[i];
    }
    for (size_t i = i0; i < i1; i++) oo[i] *= k->scale;
  }
}

static const gl_op op_summean = {"sum", summean_backward};

static int sum_or_mean(const char *name, int mean, gl_tensor **out, gl_tensor *a, int dim,
                       int keepdim) {
  span3 sp;
  int nd = 0, shape[GL_MAX_DIMS];
  int st = reduce_shape(name, a, dim, keepdim, &sp, &nd, shape);
  if (st) return st;
  if (mean && sp.n == 0) {
    char b[128];
    return gl_fail(GL_EARG, "%s: mean over an empty dim of shape %s", name,
                   gl_shape_str(b, sizeof b, a->ndim, a->shape));
  }
  if ((st = gl_empty(out, nd, shape))) return st;
  float scale = mean ? 1.0f / (float)sp.n : 1.0f;
  red_ctx c = {sp, scale, a->data, NULL, NULL, (*out)->data};
  gl_parallel_for(sp.outer * sp.inner, sp.n ? sp.n : 1, summean_range, &c);
  gl_node *n = gl_record(&op_summean, 1, &a, 1, out);
  gl_input_header_only(n, 0);         /* backward spreads gout: shapes only */
  if (n) {
    save_span(n, &sp);
    GL_NODE_STATE(n, reduce_state)->scalar = scale;
  }
  return GL_OK;
}

int gl_sum(gl_tensor **out, gl_tensor *a, int dim, int keepdim) {
  return sum_or_mean("sum", 0, out, a, dim, keepdim);
}

int gl_mean(gl_tensor **out, gl_tensor *a, int dim, int keepdim) {
  return sum_or_mean("mean", 1, out, a, dim, keepdim);
}

/* ------------------------------------------------------------------------ */
/* max / min: values[o, i] = a[o, idx, i] with idx the first extreme position
 * backward: ga[o, idx[o,i], i] += g[o, i] */

static int extreme_backward(gl_node *n, gl_tensor **gout) {
  gl_tensor *g = gl_grad_of(n, 0);
  if (!g) return GL_OK;
  const float *idx = n->saved[0]->data, *d = gout[0]->data;
  const span3 *sp = &GL_NODE_STATE(n, reduce_state)->sp;
  size_t outer = sp->outer, len = sp->n, inner = sp->inner;
  (void)len;
  for (size_t o = 0; o < outer; o++)
    for (size_t i = 0; i < inner; i++) {
      size_t j = (size_t)idx[o * inner + i];
      g->data[(o * len + j) * inner + i] += d[o * inner + i];
    }
  return GL_OK;
}

static const gl_op op_extreme = {"max", extreme_backward};

static int extreme(const char *name, int want_max, gl_tensor **values, gl_tensor **indices,
                   gl_tensor *a, int dim, int keepdim) {
  span3 sp;
  int nd = 0, shape[GL_MAX_DIMS];
  int st = reduce_shape(name, a, dim, keepdim, &sp, &nd, shape);
  if (st) return st;
  if (sp.n == 0) {
    char b[128];
    return gl_fail(GL_EARG, "%s: reduction over an empty dim of shape %s", name,
                   gl_shape_str(b, sizeof b, a->ndim, a->shape));
  }
  gl_tensor *idx;
  if ((st = gl_empty(&idx, nd, shape))) return st;
  if (values && (st = gl_empty(values, nd, shape))) { gl_release(idx); return st; }
  for (size_t o = 0; o < sp.outer; o++)
    for (size_t i = 0; i < sp.inner; i++) {
      const float *x = a->data + o * sp.n * sp.inner + i;
      size_t best = 0;
      float bv = x[0];
      for (size_t j = 1; j < sp.n; j++) {
        float v = x[j * sp.inner];
        if (isnan(bv)) break;                 /* NaN wins, like torch.max */
        if (isnan(v) || (want_max ? v > bv : v < bv)) { bv = v; best = j; }
      }
      idx->data[o * sp.inner + i] = (float)best;
      if (values) (*values)->data[o * sp.inner + i] = bv;
    }
  if (values) {
    gl_node *n = gl_record(&op_extreme, 1, &a, 1, values);
    gl_input_header_only(n, 0);       /* backward reads the saved indices */
    if (n) {
      save_span(n, &sp);
      /* a private copy: the caller owns (and may rewrite) the returned indices */
      gl_tensor *keep;
      if (gl_clone(&keep, idx) == GL_OK) { gl_save(n, keep); gl_release(keep); }
    }
  }
  if (indices) *indices = idx;
  else gl_release(idx);
  return GL_OK;
}

int gl_max(gl_tensor **values, gl_tensor **indices, gl_tensor *a, int dim, int keepdim) {
  return extreme("max", 1, values, indices, a, dim, keepdim);
}

int gl_min(gl_tensor **values, gl_tensor **indices, gl_tensor *a, int dim, int keepdim) {
  return extreme("min", 0, values, indices, a, dim, keepdim);
}

int gl_argmax(gl_tensor **out, gl_tensor *a, int dim, int keepdim) {
  return extreme("argmax", 1, NULL, out, a, dim, keepdim);
}

/* ------------------------------------------------------------------------ */
/* logsumexp: y[o, i] = m + log sum_j exp(a[o, j, i] - m), m the max
 * backward: ga[o, j, i] += g[o, i] * exp(a[o, j, i] - y[o, i]) */

/* rows r = o * n + j of ga: ga[r, i] += g[o, i] exp(a[r, i] - y[o, i]) */
static void lse_grad_range(void *c, size_t lo, size_t hi, int slot) {
  (void)slot;
  const red_ctx *k = c;
  size_t len = k->sp.n, inner = k->sp.inner;
  for (size_t r = lo; r < hi; r++) {
    size_t o = r / len;
    for (size_t i = 0; i < inner; i++)
      k->o[r * inner + i] += k->d[o * inner + i] * expf(k->x[r * inner + i] - k->y[o * inner + i]);
  }
}

/* outputs k = o * inner + i in [lo, hi) */
static void lse_range(void *c, size_t lo, size_t hi, int slot) {
  (void)slot;
  const red_ctx *k = c;
  size_t len = k->sp.n, inner = k->sp.inner;
  for (size_t q = lo; q < hi; q++) {
    size_t o = q / inner, i = q % inner;
    const float *x = k->x + o * len * inner + i;
    float m = -INFINITY;
    for (size_t j = 0; j < len; j++) if (x[j * inner] > m) m = x[j * inner];
    double s = 0;
    if (isfinite(m)) for (size_t j = 0; j < len; j++) s += exp((double)x[j * inner] - m);
    k->o[q] = isfinite(m) ? m + (float)log(s) : m;
  }
}

static int lse_backward(gl_node *n, gl_tensor **gout) {
  gl_tensor *g = gl_grad_of(n, 0);
  if (!g) return GL_OK;
  const span3 *sp = &GL_NODE_STATE(n, reduce_state)->sp;
  red_ctx c = {*sp, 0, n->in[0]->data, n->saved[0]->data, gout[0]->data, g->data};
  gl_parallel_for(sp->outer * sp->n, sp->inner * 16, lse_grad_range, &c);
  return GL_OK;
}

static const gl_op op_lse = {"logsumexp", lse_backward};

int gl_logsumexp(gl_tensor **out, gl_tensor *a, int dim, int keepdim) {
  span3 sp;
  int nd = 0, shape[GL_MAX_DIMS];
  int st = reduce_shape("logsumexp", a, dim, keepdim, &sp, &nd, shape);
  if (st) return st;
  if ((st = gl_empty(out, nd, shape))) return st;
  red_ctx c = {sp, 0, a->data, NULL, NULL, (*out)->data};
  gl_parallel_for(sp.outer * sp.inner, (sp.n ? sp.n : 1) * 24, lse_range, &c);
  gl_node *n = gl_record(&op_lse, 1, &a, 1, out);
  if (n) {
    save_span(n, &sp);
    gl_tensor *al = gl_alias(*out);
    gl_save(n, al);
    gl_release(al);
  }
  return GL_OK;
}

/* ------------------------------------------------------------------------ */
/* cumsum: y[o, j, i] = sum_{m <= j} a[o, m, i]   a and y (outer, n, inner)
 * backward: ga[o, m, i] += sum_{j >= m} g[o, j, i]   (the same running sum, reversed)
 * Running sums accumulate in double.  The work is split in units of (o, a block of up to
 * CUM_BLOCK columns i), each walking its rows in order with a contiguous inner loop. */

#define CUM_BLOCK 256

typedef struct {
  span3 sp;
  const float *x;
  float *y;
  int reverse, add;     /* reverse: from the last row down; add: y += instead of y = */
} cum_ctx;

static size_t cum_blocks(const span3 *sp) { return (sp->inner + CUM_BLOCK - 1) / CUM_BLOCK; }

/* units u = o * blocks + b in [lo, hi) */
static void cum_range(void *c, size_t lo, size_t hi, int slot) {
  (void)slot;
  const cum_ctx *k = c;
  size_t len = k->sp.n, inner = k->sp.inner, blocks = cum_blocks(&k->sp);
  double acc[CUM_BLOCK];
  for (size_t u = lo; u < hi; u++) {
    size_t o = u / blocks, i0 = (u % blocks) * CUM_BLOCK;
    size_t w = inner - i0 < CUM_BLOCK ? inner - i0 : CUM_BLOCK;
    const float *x = k->x + o * len * inner + i0;
    float *y = k->y + o * len * inner + i0;
    for (size_t i = 0; i < w; i++) acc[i] = 0;
    for (size_t t = 0; t < len; t++) {
      size_t j = k->reverse ? len - 1 - t : t;
      const float *xr = x + j * inner;
      float *yr = y + j * inner;
      for (size_t i = 0; i < w; i++) acc[i] += xr[i];
      if (k->add) for (size_t i = 0; i < w; i++) yr[i] += (float)acc[i];
      else for (size_t i = 0; i < w; i++) yr[i] = (float)acc[i];
    }
  }
}

static int cumsum_backward(gl_node *n, gl_tensor **gout) {
  gl_tensor *g = gl_grad_of(n, 0);
  if (!g) return GL_OK;
  const span3 *sp = &GL_NODE_STATE(n, reduce_state)->sp;
  cum_ctx c = {*sp, gout[0]->data, g->data, 1, 1};
  gl_parallel_for(sp->outer * cum_blocks(sp), (sp->n ? sp->n : 1) * CUM_BLOCK, cum_range, &c);
  return GL_OK;
}

static const gl_op op_cumsum = {"cumsum", cumsum_backward};

int gl_cumsum(gl_tensor **out, gl_tensor *a, int dim) {
  if (dim < 0 || dim >= a->ndim) {
    char b[128];
    return gl_fail(GL_EARG, "cumsum: dim %d out of range for shape %s", dim + 1,
                   gl_shape_str(b, sizeof b, a->ndim, a->shape));
  }
  span3 sp;
  gl_dim_span(a, dim, &sp.outer, &sp.n, &sp.inner);
  int st = gl_empty(out, a->ndim, a->shape);
  if (st) return st;
  cum_ctx c = {sp, a->data, (*out)->data, 0, 0};
  gl_parallel_for(sp.outer * cum_blocks(&sp), (sp.n ? sp.n : 1) * CUM_BLOCK, cum_range, &c);
  gl_node *n = gl_record(&op_cumsum, 1, &a, 1, out);
  if (n) save_span(n, &sp);
  return GL_OK;
}

/* ------------------------------------------------------------------------ */
/* variance: v[o, i] = sum_j (a - mean)^2 / (n - unbiased)
 * backward: ga += g * 2 (a - mean) / (n - unbiased) */

static int var_backward(gl_node *n, gl_tensor **gout) {
  gl_tensor *g = gl_grad_of(n, 0);
  if (!g) return GL_OK;
  const float *x = n->in[0]->data, *mu = n->saved[0]->data, *d = gout[0]->data;
  const span3 *sp = &GL_NODE_STATE(n, reduce_state)->sp;
  size_t outer = sp->outer, len = sp->n, inner = sp->inner;
  float denom = GL_NODE_STATE(n, reduce_state)->scalar;
  for (size_t o = 0; o < outer; o++)
    for (size_t j = 0; j < len; j++)
      for (size_t i = 0; i < inner; i++) {
        size_t k = (o * len + j) * inner + i;
        g->data[k] += d[o * inner + i] * 2.0f * (x[k] - mu[o * inner + i]) / denom;
      }
  return GL_OK;
}

static const gl_op op_var = {"var", var_backward};

int gl_var(gl_tensor **out, gl_tensor *a, int dim, int keepdim, int unbiased) {
  span3 sp;
  int nd = 0, shape[GL_MAX_DIMS];
  int st = reduce_shape("var", a, dim, keepdim, &sp, &nd, shape);
  if (st) return st;
  float denom = (float)sp.n - (unbiased ? 1.0f : 0.0f);
  if (denom <= 0) return gl_fail(GL_EARG, "var: %zu elements are too few", sp.n);
  gl_tensor *mu;
  if ((st = gl_empty(&mu, nd, shape))) return st;
  if ((st = gl_empty(out, nd, shape))) { gl_release(mu); return st; }
  for (size_t o = 0; o < sp.outer; o++)
    for (size_t i = 0; i < sp.inner; i++) {
      const float *x = a->data + o * sp.n * sp.inner + i;
      double s = 0, s2 = 0;
      for (size_t j = 0; j < sp.n; j++) s += x[j * sp.inner];
      double m = s / (double)sp.n;
      for (size_t j = 0; j < sp.n; j++) { double e = x[j * sp.inner] - m; s2 += e * e; }
      mu->data[o * sp.inner + i] = (float)m;
      (*out)->data[o * sp.inner + i] = (float)(s2 / denom);
    }
  gl_node *n = gl_record(&op_var, 1, &a, 1, out);
  if (n) {
    save_span(n, &sp);
    GL_NODE_STATE(n, reduce_state)->scalar = denom;
    gl_save(n, mu);
  }
  gl_release(mu);
  return GL_OK;
}

/* ------------------------------------------------------------------------ */
/* norm: y = sqrt(sum a^2)
 * backward: ga += g * a / y */

static int norm_backward(gl_node *n, gl_tensor **gout) {
  gl_tensor *g = gl_grad_of(n, 0);
  if (!g) return GL_OK;
  float y = GL_NODE_STATE(n, reduce_state)->scalar, d = gout[0]->data[0];
  if (y == 0) return GL_OK;
  const float *x = n->in[0]->data;
  for (size_t i = 0; i < g->numel; i++) g->data[i] += d * x[i] / y;
  return GL_OK;
}

static const gl_op op_norm = {"norm", norm_backward};

int gl_norm(gl_tensor **out, gl_tensor *a) {
  double s = 0;
  for (size_t i = 0; i < a->numel; i++) s += (double)a->data[i] * a->data[i];
  float y = (float)sqrt(s);
  int st = gl_from_data(out, 0, NULL, &y);
  if (st) return st;
  gl_node *n = gl_record(&op_norm, 1, &a, 1, out);
  if (n) GL_NODE_STATE(n, reduce_state)->scalar = y;
  return GL_OK;
}
