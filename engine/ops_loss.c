/* ops_loss.c -- softmax (with a mask), log_softmax, the losses (cross-entropy with
 * ignore_index and label smoothing, NLL, MSE, BCE) and dropout.
 *
 * Softmax works on (outer, n, inner) views of its dim; rows are shifted by their max so no
 * exp overflows.  A mask zeroes positions exactly (they never enter the normaliser), and a
 * row with every position masked is all zeros rather than NaN.  Softmax and log_softmax,
 * forward and backward, run their rows on the pool (parallel.h), each row whole on one thread.
 */

#include "glimpse_internal.h"
#include "ops_span.h"
#include "parallel.h"

#include <math.h>
#include <string.h>

#define SHAPE(buf, t) gl_shape_str(buf, sizeof buf, (t)->ndim, (t)->shape)

/* a softmax loop over the rows q = o * inner + i of an (outer, n, inner) view */
typedef struct {
  size_t len, inner;
  const float *x, *y, *d, *mask;
  float *o;
} sm_ctx;

/* where row q = o * inner + i of an (outer, len, inner) view starts (its entries are inner
 * apart) */
static inline size_t row_base(size_t q, size_t len, size_t inner) {
  return (q / inner) * len * inner + q % inner;
}

/* Record the dim and keep the output y for backward (an alias: the node must not own the
 * tensor that owns the node). */
/* softmax's and log_softmax's saved state: the dim (the output itself is saved[0]) */
typedef struct { int dim; } softmax_state;

static void save_output(gl_node *n, int dim, gl_tensor *y) {
  if (!n) return;
  gl_input_header_only(n, 0);         /* backward reads y alone */
  GL_NODE_STATE(n, softmax_state)->dim = dim;
  gl_tensor *al = gl_alias(y);
  gl_save(n, al);
  gl_release(al);
}

/* ------------------------------------------------------------------------ */
/* softmax: y_j = m_j exp(x_j - max) / sum_k m_k exp(x_k - max)   (m the 0/1 mask)
 * backward: gx_j += y_j (g_j - sum_k g_k y_k) */

static void softmax_grad_range(void *c, size_t lo, size_t hi, int slot) {
  (void)slot;
  const sm_ctx *k0 = c;
  size_t len = k0->len, inner = k0->inner;
  const float *y = k0->y, *d = k0->d;
  float *gx = k0->o;
  for (size_t q = lo; q < hi; q++) {
    size_t base = row_base(q, len, inner);
    double dot = 0;
    for (size_t j = 0; j < len; j++) dot += (double)d[base + j * inner] * y[base + j * inner];
    for (size_t j = 0; j < len; j++) {
      size_t k = base + j * inner;
      gx[k] += y[k] * (d[k] - (float)dot);
    }
  }
}

static int softmax_backward(gl_node *n, gl_tensor **gout) {
  gl_tensor *g = gl_grad_of(n, 0);
  if (!g) return GL_OK;
  size_t outer, len, inner;
  gl_dim_span(g, GL_NODE_STATE(n, softmax_state)->dim, &outer, &len, &inner);
  sm_ctx c = {len, inner, NULL, n->saved[0]->data, gout[0]->data, NULL, g->data};
  gl_parallel_for(outer * inner, 4 * len, softmax_grad_range, &c);
  return GL_OK;
}

static const gl_op op_softmax = {"softmax", softmax_backward};

static void softmax_range(void *c, size_t lo, size_t hi, int slot) {
  (void)slot;
  const sm_ctx *k0 = c;
  size_t len = k0->len, inner = k0->inner;
  const float *x = k0->x, *mk = k0->mask;
  float *y = k0->o;
  for (size_t q = lo; q < hi; q++) {
    size_t base = row_base(q, len, inner);
    float mx = -INFINITY;
    int nan = 0;
    for (size_t j = 0; j < len; j++) {
      size_t k = base + j * inner;
      if (mk && mk[k] == 0) continue;
      nan |= x[k] != x[k];
      if (x[k] > mx) mx = x[k];
    }
    /* a NaN or +inf among the visible entries: every visible output NaN (PyTorch's
     * softmax gives NaN there too); nothing visible or all -inf: zeros */
    int bad = nan || mx == INFINITY;
    double s = 0;
    for (size_t j = 0; j < len; j++) {
      size_t k = base + j * inner;
      float e = (mk && mk[k] == 0) || (mx == -INFINITY && !bad) ? 0.0f
                : bad ? NAN : expf(x[k] - mx);
      y[k] = e;
      s += e;
    }
    float inv = bad ? 1.0f : s > 0 ? (float)(1.0 / s) : 0.0f;
    for (size_t j = 0; j < len; j++) y[base + j * inner] *= inv;
  }
}

int gl_softmax(gl_tensor **out, gl_tensor *a, int dim, const gl_tensor *mask) {
  char b1[128], b2[128];
  if (dim < 0 || dim >= a->ndim)
    return gl_fail(GL_EARG, "softmax: dim %d out of range for shape %s", dim + 1, SHAPE(b1, a));
  gl_tensor *m = NULL;
  int st;
  if (mask) {
    int nd, shape[GL_MAX_DIMS];
    if ((st = gl_broadcast_shape("softmax", a, mask, &nd, shape))) return st;
    if (nd != a->ndim || memcmp(shape, a->shape, sizeof(int) * (size_t)nd))
      return gl_fail(GL_ESHAPE, "softmax: mask %s does not broadcast to input %s",
                     SHAPE(b1, mask), SHAPE(b2, a));
    int prev = gl_set_grad_enabled(0);
    st = gl_expand(&m, (gl_tensor *)mask, a->ndim, a->shape);
    gl_set_grad_enabled(prev);
    if (st) return st;
  }
  if ((st = gl_empty_like(out, a))) { gl_release(m); return st; }
  size_t outer, len, inner;
  gl_dim_span(a, dim, &outer, &len, &inner);
  sm_ctx c = {len, inner, a->data, NULL, NULL, m ? m->data : NULL, (*out)->data};
  gl_parallel_for(outer * inner, 12 * len, softmax_range, &c);
  gl_release(m);
  save_output(gl_record(&op_softmax, 1, &a, 1, out), dim, *out);
  return GL_OK;
}

/* ------------------------------------------------------------------------ */
/* log_softmax: y_j = x_j - log sum_k exp(x_k)
 * backward: gx_j += g_j - exp(y_j) sum_k g_k */

static void log_softmax_grad_range(void *c, size_t lo, size_t hi, int slot) {
  (void)slot;
  const sm_ctx *k0 = c;
  size_t len = k0->len, inner = k0->inner;
  const float *y = k0->y, *d = k0->d;
  float *gx = k0->o;
  for (size_t q = lo; q < hi; q++) {
    size_t base = row_base(q, len, inner);
    float ymax = -INFINITY;
    for (size_t j = 0; j < len; j++) ymax = y[base + j * inner] > ymax ? y[base + j * inner] : ymax;
    if (ymax == -INFINITY) continue;   /* a fully masked row: no gradient, as softmax's */
    double s = 0;
    for (size_t j = 0; j < len; j++) s += d[base + j * inner];
    for (size_t j = 0; j < len; j++) {
      size_t k = base + j * inner;
      gx[k] += d[k] - expf(y[k]) * (float)s;
    }
  }
}

static int log_softmax_backward(gl_node *n, gl_tensor **gout) {
  gl_tensor *g = gl_grad_of(n, 0);
  if (!g) return GL_OK;
  size_t outer, len, inner;
  gl_dim_span(g, GL_NODE_STATE(n, softmax_state)->dim, &outer, &len, &inner);
  sm_ctx c = {len, inner, NULL, n->saved[0]->data, gout[0]->data, NULL, g->data};
  gl_parallel_for(outer * inner, 12 * len, log_softmax_grad_range, &c);
  return GL_OK;
}

static const gl_op op_log_softmax = {"log_softmax", log_softmax_backward};

static void log_softmax_range(void *c, size_t lo, size_t hi, int slot) {
  (void)slot;
  const sm_ctx *k0 = c;
  size_t len = k0->len, inner = k0->inner;
  const float *x = k0->x;
  float *y = k0->o;
  for (size_t q = lo; q < hi; q++) {
    size_t base = row_base(q, len, inner);
    float mx = -INFINITY;
    for (size_t j = 0; j < len; j++) if (x[base + j * inner] > mx) mx = x[base + j * inner];
    if (mx == -INFINITY) {
      /* every entry -inf (a fully masked row): log of softmax's zeros, -inf everywhere,
       * where PyTorch gives NaN (see docs/api/tensor.md); NaN entries fall through */
      int nan = 0;
      for (size_t j = 0; j < len; j++) nan |= x[base + j * inner] != x[base + j * inner];
      if (!nan) {
        for (size_t j = 0; j < len; j++) y[base + j * inner] = -INFINITY;
        continue;
      }
    }
    double s = 0;
    for (size_t j = 0; j < len; j++) s += exp((double)x[base + j * inner] - mx);
    float lse = mx + (float)log(s);
    for (size_t j = 0; j < len; j++) y[base + j * inner] = x[base + j * inner] - lse;
  }
}

int gl_log_softmax(gl_tensor **out, gl_tensor *a, int dim) {
  char b[128];
  if (dim < 0 || dim >= a->ndim)
    return gl_fail(GL_EARG, "log_softmax: dim %d out of range for shape %s", dim + 1, SHAPE(b, a));
  int st = gl_empty_like(out, a);
  if (st) return st;
  size_t outer, len, inner;
  gl_dim_span(a, dim, &outer, &len, &inner);
  sm_ctx c = {len, inner, a->data, NULL, NULL, NULL, (*out)->data};
  gl_parallel_for(outer * inner, 24 * len, log_softmax_range, &c);
  save_output(gl_record(&op_log_softmax, 1, &a, 1, out), dim, *out);
  return GL_OK;
}

/* ------------------------------------------------------------------------ */
/* reductions of a per-row loss */

static int reduce_rows(gl_tensor **out, const float *per_row, size_t R, size_t count,
                       int reduction, int ndim, const int *shape) {
  if (reduction == GL_REDUCE_NONE) return gl_from_data(out, ndim, shape, per_row);
  double s = 0;
  for (size_t r = 0; r < R; r++) s += per_row[r];
  float v = (float)(reduction == GL_REDUCE_MEAN ? (count ? s / (double)count : 0) : s);
  return gl_from_data(out, 0, NULL, &v);
}

/* the same for the class losses: rows are the logits' leading dims (none for 1-D logits) */
static int reduce_class_rows(gl_tensor **out, const float *per_row, size_t R, size_t count,
                             int reduction, const gl_tensor *logits) {
  int nd = logits->ndim > 1 ? logits->ndim - 1 : 0;
  return reduce_rows(out, per_row, R, count, reduction, nd, logits->shape);
}

/* d(loss)/d(loss_r): gout_r (none), gout / count (mean), gout (sum) */
static float row_weight(const float *gout, size_t r, int reduction, size_t count) {
  if (reduction == GL_REDUCE_NONE) return gout[r];
  return reduction == GL_REDUCE_MEAN ? gout[0] / (float)count : gout[0];
}

/* what a class loss's backward needs: classes, ignore_index, reduction, rows, counted rows */
typedef struct {
  int C, ignore, reduction;
  size_t R, count;       /* rows, and rows that count (not ignored) */
  float eps;             /* label smoothing (cross_entropy) */
} class_loss_state;

static void save_class_args(gl_node *n, int C, int ignore, int reduction, size_t R,
                            size_t count, float eps) {
  class_loss_state *s = GL_NODE_STATE(n, class_loss_state);
  s->C = C; s->ignore = ignore; s->reduction = reduction;
  s->R = R; s->count = count; s->eps = eps;
}

/* ------------------------------------------------------------------------ */
/* cross_entropy: logits (R, C) (leading dims flattened, classes last), targets (R)
 *   loss_r = -(1-eps) log p_r[t_r] - eps/C sum_c log p_r[c],  rows with t_r == ignore skipped
 * backward: glogits[r, c] += w_r (p_r[c] - (1-eps) [c == t_r] - eps/C),
 *   w_r = gout_r (none), gout/count (mean), gout (sum) */

/* cross-entropy's rows on the pool (parallel.h): x the logits (R, C), p the probabilities,
 * t the targets, loss the per-row losses; backward: d the gradient of the loss, g of x */
typedef struct {
  const class_loss_state *cs;
  int C, ignore;
  float eps;
  const float *x, *t, *d;
  float *p, *loss, *g;
} ce_ctx;

static void ce_grad_range(void *c, size_t lo, size_t hi, int slot) {
  (void)slot;
  const ce_ctx *k = c;
  int C = k->C;
  for (size_t r = lo; r < hi; r++) {
    int tr = (int)k->t[r];
    if (tr == k->ignore) continue;
    float w = row_weight(k->d, r, k->cs->reduction, k->cs->count);
    float *gr = k->g + r * (size_t)C;
    const float *pr = k->p + r * (size_t)C;
    for (int j = 0; j < C; j++) gr[j] += w * (pr[j] - k->eps / (float)C);
    gr[tr] -= w * (1 - k->eps);
  }
}

static int ce_backward(gl_node *n, gl_tensor **gout) {
  gl_tensor *g = gl_grad_of(n, 0);
  if (!g) return GL_OK;
  const class_loss_state *cs = GL_NODE_STATE(n, class_loss_state);
  ce_ctx c = {cs, cs->C, cs->ignore, cs->eps, NULL, n->saved[1]->data, gout[0]->data,
              n->saved[0]->data, NULL, g->data};
  gl_parallel_for(cs->R, 2 * (size_t)cs->C, ce_grad_range, &c);
  return GL_OK;
}

static const gl_op op_ce = {"cross_entropy", ce_backward};

static int check_targets(const char *op, const gl_tensor *logits, const gl_tensor *targets,
                         int ignore, size_t *R, int *C) {
  char b1[128], b2[128];
  if (logits->ndim < 1)
    return gl_fail(GL_ESHAPE, "%s: logits must have a class dim, got %s", op, SHAPE(b1, logits));
  *C = logits->shape[logits->ndim - 1];
  *R = *C ? logits->numel / (size_t)*C : 0;
  int ok = logits->ndim == 1 ? targets->numel == 1 : targets->numel == *R;
  if (ok && logits->ndim > 1 && targets->ndim == logits->ndim - 1)
    for (int i = 0; i < targets->ndim; i++) ok &= targets->shape[i] == logits->shape[i];
  else if (ok && logits->ndim > 1 && targets->ndim != 1) ok = 0;
  if (!ok)
    return gl_fail(GL_ESHAPE, "%s: targets %s do not fit logits %s (classes are the last dim)",
                   op, SHAPE(b1, targets), SHAPE(b2, logits));
  if (logits->ndim == 1) *R = 1;
  for (size_t r = 0; r < *R; r++) {
    float v = targets->data[r];
    if (v == (float)ignore) continue;
    if (!(v >= 0 && v < (float)*C) || v != floorf(v))
      return gl_fail(GL_EARG, "%s: target %g out of range (valid 1..%d)", op, (double)v + 1, *C);
  }
  return GL_OK;
}

static void ce_range(void *c, size_t lo, size_t hi, int slot) {
  (void)slot;
  const ce_ctx *k = c;
  int C = k->C;
  float eps = k->eps;
  for (size_t r = lo; r < hi; r++) {
    const float *x = k->x + r * (size_t)C;
    float *pr = k->p + r * (size_t)C;
    float mx = -INFINITY;
    for (int j = 0; j < C; j++) if (x[j] > mx) mx = x[j];
    double s = 0;
    for (int j = 0; j < C; j++) { pr[j] = expf(x[j] - mx); s += pr[j]; }
    float lse = mx + (float)log(s), inv = (float)(1.0 / s);
    for (int j = 0; j < C; j++) pr[j] *= inv;
    int tr = (int)k->t[r];
    if (tr == k->ignore) continue;
    double l = -(1 - eps) * (x[tr] - lse);
    if (eps > 0) {
      double sl = 0;
      for (int j = 0; j < C; j++) sl += x[j] - lse;
      l -= eps / C * sl;
    }
    k->loss[r] = (float)l;
  }
}

int gl_cross_entropy(gl_tensor **out, gl_tensor *logits, const gl_tensor *targets,
                     int ignore_index, int reduction, float eps) {
  size_t R;
  int C;
  int st = check_targets("cross_entropy", logits, targets, ignore_index, &R, &C);
  if (st) return st;
  if (!(eps >= 0 && eps < 1)) return gl_fail(GL_EARG, "cross_entropy: label_smoothing %g not in [0,1)", eps);
  gl_tensor *p, *loss_r, *tc;
  int rs[1] = {(int)R};
  if ((st = gl_empty(&p, logits->ndim, logits->shape))) return st;
  if ((st = gl_zeros(&loss_r, 1, rs))) { gl_release(p); return st; }
  size_t count = 0;
  for (size_t r = 0; r < R; r++) count += (int)targets->data[r] != ignore_index;
  ce_ctx c = {NULL, C, ignore_index, eps, logits->data, targets->data, NULL, p->data,
              loss_r->data, NULL};
  gl_parallel_for(R, 16 * (size_t)C, ce_range, &c);
  st = reduce_class_rows(out, loss_r->data, R, count, reduction, logits);
  gl_release(loss_r);
  if (st) { gl_release(p); return st; }
  gl_node *n = gl_record(&op_ce, 1, &logits, 1, out);
  gl_input_header_only(n, 0);         /* backward reads the saved probabilities */
  if (n) {
    save_class_args(n, C, ignore_index, reduction, R, count, eps);
    if ((st = gl_clone(&tc, targets))) { gl_release(p); return st; }
    gl_save(n, p);
    gl_save(n, tc);
    gl_release(tc);
  }
  gl_release(p);
  return GL_OK;
}

/* ------------------------------------------------------------------------ */
/* nll_loss: logp (R, C), loss_r = -logp[r, t_r]
 * backward: glogp[r, t_r] -= w_r */

static int nll_backward(gl_node *n, gl_tensor **gout) {
  gl_tensor *g = gl_grad_of(n, 0);
  if (!g) return GL_OK;
  const float *t = n->saved[0]->data, *d = gout[0]->data;
  const class_loss_state *cs = GL_NODE_STATE(n, class_loss_state);
  int C = cs->C, ignore = cs->ignore, red = cs->reduction;
  size_t R = cs->R, count = cs->count;
  for (size_t r = 0; r < R; r++) {
    int tr = (int)t[r];
    if (tr == ignore) continue;
    float w = row_weight(d, r, red, count);
    g->data[r * (size_t)C + tr] -= w;
  }
  return GL_OK;
}

static const gl_op op_nll = {"nll_loss", nll_backward};

int gl_nll_loss(gl_tensor **out, gl_tensor *logp, const gl_tensor *targets, int ignore_index,
                int reduction) {
  size_t R;
  int C;
  int st = check_targets("nll_loss", logp, targets, ignore_index, &R, &C);
  if (st) return st;
  gl_tensor *loss_r;
  int rs[1] = {(int)R};
  if ((st = gl_zeros(&loss_r, 1, rs))) return st;
  size_t count = 0;
  for (size_t r = 0; r < R; r++) {
    int tr = (int)targets->data[r];
    if (tr == ignore_index) continue;
    count++;
    loss_r->data[r] = -logp->data[r * (size_t)C + tr];
  }
  st = reduce_class_rows(out, loss_r->data, R, count, reduction, logp);
  gl_release(loss_r);
  if (st) return st;
  gl_node *n = gl_record(&op_nll, 1, &logp, 1, out);
  gl_input_header_only(n, 0);
  if (n) {
    save_class_args(n, C, ignore_index, reduction, R, count, 0.0f);
    gl_tensor *tc;
    if ((st = gl_clone(&tc, targets))) return st;
    gl_save(n, tc);
    gl_release(tc);
  }
  return GL_OK;
}

/* ------------------------------------------------------------------------ */
/* mse_loss: l_i = (a_i - b_i)^2 ; bce_loss: l_i = -(t log p + (1-t) log(1-p)), logs >= -100
 * backward: ga += w 2 (a - b), gb -= w 2 (a - b) ; gp += w (p - t) / max(p (1-p), 1e-12) */

typedef struct { int reduction, bce; } pair_loss_state;

/* the elementwise part of MSE and BCE on the pool: per-element losses l forward, or input
 * `which`'s gradient g backward (the reduction of l stays on one thread) */
typedef struct {
  const float *a, *b, *d;
  float *out;
  int red, bce, which;
  size_t N;
} pw_ctx;

static void pointwise_grad_range(void *ctx, size_t lo, size_t hi, int slot) {
  (void)slot;
  const pw_ctx *c = ctx;
  const float *a = c->a, *b = c->b, *d = c->d;
  int red = c->red, bce = c->bce, which = c->which;
  size_t N = c->N;
  float *g = c->out;
  for (size_t i = lo; i < hi; i++) {
    float w = row_weight(d, i, red, N);
    float v;
    if (!bce) v = 2 * (a[i] - b[i]) * (which ? -1 : 1);
    else if (which == 0) {
      float den = a[i] * (1 - a[i]);
      v = (a[i] - b[i]) / (den > 1e-12f ? den : 1e-12f);
    } else {
      float lp = logf(a[i]), l1p = logf(1 - a[i]);
      v = -((lp < -100 ? -100 : lp) - (l1p < -100 ? -100 : l1p));
    }
    g[i] += w * v;
  }
}

static int pointwise_loss_backward(gl_node *n, gl_tensor **gout) {
  const pair_loss_state *ps = GL_NODE_STATE(n, pair_loss_state);
  for (int which = 0; which < 2; which++) {
    gl_tensor *g = gl_grad_of(n, which);
    if (!g) continue;
    pw_ctx c = {n->in[0]->data, n->in[1]->data, gout[0]->data, g->data, ps->reduction, ps->bce,
                which, n->in[0]->numel};
    gl_parallel_for(c.N, ps->bce ? 40 : 4, pointwise_grad_range, &c);
  }
  return GL_OK;
}

static void pointwise_loss_range(void *ctx, size_t lo, size_t hi, int slot) {
  (void)slot;
  const pw_ctx *c = ctx;
  const float *a = c->a, *b = c->b;
  float *l = c->out;
  for (size_t i = lo; i < hi; i++) {
    if (!c->bce) { float e = a[i] - b[i]; l[i] = e * e; }
    else {
      float lp = logf(a[i]), l1p = logf(1 - a[i]);
      lp = lp < -100 ? -100 : lp;
      l1p = l1p < -100 ? -100 : l1p;
      l[i] = -(b[i] * lp + (1 - b[i]) * l1p);
    }
  }
}

static const gl_op op_pointwise_loss = {"pointwise_loss", pointwise_loss_backward};

static int pointwise_loss(const char *op, int bce, gl_tensor **out, gl_tensor *a, gl_tensor *b,
                          int reduction) {
  char b1[128], b2[128];
  if (!gl_same_shape(a, b))
    return gl_fail(GL_ESHAPE, "%s: input %s and target %s differ in shape", op, SHAPE(b1, a),
                   SHAPE(b2, b));
  if (bce)
    for (size_t i = 0; i < a->numel; i++)
      if (!(a->data[i] >= 0 && a->data[i] <= 1))
        return gl_fail(GL_EVALUE, "%s: input %g is not a probability in [0,1]", op, (double)a->data[i]);
  float *l = gl_scratch_alloc(a->numel);
  if (!l) return gl_fail(GL_ENOMEM, "%s: out of memory", op);
  pw_ctx c = {a->data, b->data, NULL, l, reduction, bce, 0, a->numel};
  gl_parallel_for(a->numel, bce ? 40 : 2, pointwise_loss_range, &c);
  int st = reduce_rows(out, l, a->numel, a->numel, reduction, a->ndim, a->shape);
  gl_scratch_free(l, a->numel);
  if (st) return st;
  gl_tensor *in[2] = {a, b};
  gl_node *n = gl_record(&op_pointwise_loss, 2, in, 1, out);
  if (n) *GL_NODE_STATE(n, pair_loss_state) = (pair_loss_state){reduction, bce};
  return GL_OK;
}

int gl_mse_loss(gl_tensor **out, gl_tensor *a, gl_tensor *b, int reduction) {
  return pointwise_loss("mse_loss", 0, out, a, b, reduction);
}

int gl_bce_loss(gl_tensor **out, gl_tensor *p, gl_tensor *t, int reduction) {
  return pointwise_loss("bce_loss", 1, out, p, t, reduction);
}

/* ------------------------------------------------------------------------ */
/* dropout: y = x m / (1 - p), m ~ Bernoulli(1 - p); identity when not training
 * backward: gx += g m / (1 - p) */

static int dropout_backward(gl_node *n, gl_tensor **gout) {
  gl_tensor *g = gl_grad_of(n, 0);
  if (!g) return GL_OK;
  const float *m = n->saved[0]->data, *d = gout[0]->data;
  for (size_t i = 0; i < g->numel; i++) g->data[i] += d[i] * m[i];
  return GL_OK;
}

static const gl_op op_dropout = {"dropout", dropout_backward};

int gl_dropout(gl_tensor **out, gl_tensor *a, float p, int training) {
  if (!(p >= 0 && p <= 1)) return gl_fail(GL_EARG, "dropout: p = %g is not in [0,1]", p);
  if (!training || p == 0) {
    return gl_reshape(out, a, a->ndim, a->shape);
  }
  gl_tensor *m;
  int st = gl_empty_like(&m, a);
  if (st) return st;
  float scale = p < 1 ? 1.0f / (1.0f - p) : 0.0f;
  for (size_t i = 0; i < a->numel; i++) m->data[i] = gl_rand_uniform() >= p ? scale : 0.0f;
  if ((st = gl_empty_like(out, a))) { gl_release(m); return st; }
  for (size_t i = 0; i < a->numel; i++) (*out)->data[i] = a->data[i] * m->data[i];
  gl_node *n = gl_record(&op_dropout, 1, &a, 1, out);
  gl_input_header_only(n, 0);         /* backward reads the saved mask */
  gl_save(n, m);
  gl_release(m);
  return GL_OK;
}
