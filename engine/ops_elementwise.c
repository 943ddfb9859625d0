/* ops_elementwise.c -- binary ops with numpy broadcasting, scalar ops, unary maths, and the
 * in-place helpers the bindings and optimizers use.
 *
 * Broadcasting: shapes are aligned at the right; a dim of size 1 (or a missing one) stretches.
 * Kernels walk the output with a per-dim counter and two stride vectors whose broadcast
 * entries are 0, so nothing is ever materialised.  Backward computes the full-size product
 * and sums it back down to each input's shape (gl_sum_to_add).
 *
 * Threads: every loop here that computes each output element on its own runs on the pool
 * (parallel.h) by ranges of elements or of rows; the sums that fold a broadcast gradient
 * back down stay on one thread, so results do not depend on the thread count.
 */
#include "glimpse_internal.h"
#include "parallel.h"
#include "vmath.h"

#include <math.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* broadcasting plumbing */

int gl_broadcast_shape(const char *op, const gl_tensor *a, const gl_tensor *b, int *ndim,
                       int *shape) {
  int n = a->ndim > b->ndim ? a->ndim : b->ndim;
  for (int i = 0; i < n; i++) {
    int da = i < n - a->ndim ? 1 : a->shape[i - (n - a->ndim)];
    int db = i < n - b->ndim ? 1 : b->shape[i - (n - b->ndim)];
    if (da != db && da != 1 && db != 1) {
      char s1[128], s2[128];
      return gl_fail(GL_ESHAPE, "%s: shapes %s and %s do not broadcast (dim %d: %d vs %d)", op,
                     gl_shape_str(s1, sizeof s1, a->ndim, a->shape),
                     gl_shape_str(s2, sizeof s2, b->ndim, b->shape), i + 1, da, db);
    }
    shape[i] = da == 1 ? db : da;
  }
  *ndim = n;
  return GL_OK;
}

/* strides of t seen through an n-dim broadcast shape: 0 on stretched dims */
static void bstrides(const gl_tensor *t, int n, size_t *st) {
  size_t s = 1;
  for (int i = n - 1; i >= 0; i--) {
    int k = i - (n - t->ndim);
    if (k < 0 || t->shape[k] == 1) st[i] = 0;
    else { st[i] = s; s *= (size_t)t->shape[k]; }
  }
}

/* Walk `out` (ndim, shape) row by row: for each row of the last dim, report offsets into a
 * and b.  Implemented as an explicit counter over the leading dims. */
typedef struct {
  int n, shape[GL_MAX_DIMS];
  size_t sa[GL_MAX_DIMS], sb[GL_MAX_DIMS];
  int idx[GL_MAX_DIMS];
  size_t oa, ob, rows, row;
} walker;

static void walk_init(walker *w, int n, const int *shape, const gl_tensor *a, const gl_tensor *b) {
  memset(w, 0, sizeof *w);
  w->n = n;
  memcpy(w->shape, shape, sizeof(int) * (size_t)n);
  bstrides(a, n, w->sa);
  if (b) bstrides(b, n, w->sb);
  w->rows = 1;
  for (int i = 0; i < n - 1; i++) w->rows *= (size_t)shape[i];
}

/* position w at row r (0 <= r < rows), as r calls of walk_next from the start would */
static void walk_seek(walker *w, size_t r) {
  w->oa = w->ob = 0;
  for (int i = w->n - 2; i >= 0; i--) {
    w->idx[i] = (int)(r % (size_t)w->shape[i]);
    r /= (size_t)w->shape[i];
    w->oa += w->sa[i] * (size_t)w->idx[i];
    w->ob += w->sb[i] * (size_t)w->idx[i];
  }
}

static void walk_next(walker *w) {
  for (int i = w->n - 2; i >= 0; i--) {
    w->idx[i]++;
    w->oa += w->sa[i];
    w->ob += w->sb[i];
    if (w->idx[i] < w->shape[i]) return;
    w->oa -= w->sa[i] * (size_t)w->shape[i];
    w->ob -= w->sb[i] * (size_t)w->shape[i];
    w->idx[i] = 0;
  }
}

typedef struct { float *d; const float *s; } acc_ctx;

static void acc_range(void *c, size_t lo, size_t hi, int slot) {
  (void)slot;
  acc_ctx *a = c;
  for (size_t i = lo; i < hi; i++) a->d[i] += a->s[i];
}

int gl_sum_to_add(gl_tensor *dst, const gl_tensor *g) {
  if (gl_same_shape(dst, g)) {
    gl_parallel_for(g->numel, 1, acc_range, &(acc_ctx){dst->data, g->data});
    return GL_OK;
  }
  if (dst->numel == 1) {
    double s = 0;
    for (size_t i = 0; i < g->numel; i++) s += g->data[i];
    dst->data[0] += (float)s;
    return GL_OK;
  }
  walker w;
  walk_init(&w, g->ndim, g->shape, dst, NULL);
  int inner = g->ndim ? g->shape[g->ndim - 1] : 1;
  size_t s = g->ndim ? w.sa[g->ndim - 1] : 0;
  const float *src = g->data;
  for (size_t r = 0; r < w.rows; r++, walk_next(&w), src += inner) {
    float *d = dst->data + w.oa;
    if (s) for (int j = 0; j < inner; j++) d[j] += src[j];
    else { float acc = 0; for (int j = 0; j < inner; j++) acc += src[j]; d[0] += acc; }
  }
  return GL_OK;
}

/* ------------------------------------------------------------------------ */
/* binary kernels: a (broadcast) OP b (broadcast) -> out */

enum { B_ADD, B_SUB, B_MUL, B_DIV, B_POW, B_MAX, B_MIN, B_EQ, B_NE, B_LT, B_LE, B_GT, B_GE };

static inline float bin1(int op, float x, float y) {
  switch (op) {
    case B_ADD: return x + y;
    case B_SUB: return x - y;
    case B_MUL: return x * y;
    case B_DIV: return x / y;
    case B_POW: return powf(x, y);
    case B_MAX: return x >= y ? x : y;
    case B_MIN: return x <= y ? x : y;
    case B_EQ: return x == y;
    case B_NE: return x != y;
    case B_LT: return x < y;
    case B_LE: return x <= y;
    case B_GT: return x > y;
    default: return x >= y;
  }
}

static void bin_row(int op, float *o, const float *a, size_t sa, const float *b, size_t sb, int n) {
  /* the common cases get loops the compiler vectorises */
  if (sa == 1 && sb == 1) {
    switch (op) {
      case B_ADD: for (int j = 0; j < n; j++) o[j] = a[j] + b[j]; return;
      case B_SUB: for (int j = 0; j < n; j++) o[j] = a[j] - b[j]; return;
      case B_MUL: for (int j = 0; j < n; j++) o[j] = a[j] * b[j]; return;
      case B_DIV: for (int j = 0; j < n; j++) o[j] = a[j] / b[j]; return;
      default: break;
    }
  } else if (sa == 1 && sb == 0) {
    float y = b[0];
    switch (op) {
      case B_ADD: for (int j = 0; j < n; j++) o[j] = a[j] + y; return;
      case B_SUB: for (int j = 0; j < n; j++) o[j] = a[j] - y; return;
      case B_MUL: for (int j = 0; j < n; j++) o[j] = a[j] * y; return;
      case B_DIV: for (int j = 0; j < n; j++) o[j] = a[j] / y; return;
      default: break;
    }
  }
  for (int j = 0; j < n; j++) o[j] = bin1(op, a[j * sa], b[j * sb]);
}

typedef struct {
  int op;
  const walker *w;       /* NULL: a and b have the output's shape, ranges are of elements */
  const float *a, *b;
  float *o;
} binary_ctx;

static void binary_range(void *c, size_t lo, size_t hi, int slot) {
  (void)slot;
  const binary_ctx *x = c;
  if (!x->w) {
    for (size_t i = lo; i < hi; i += (size_t)1 << 30) {   /* bin_row counts in int */
      size_t m = hi - i < (size_t)1 << 30 ? hi - i : (size_t)1 << 30;
      bin_row(x->op, x->o + i, x->a + i, 1, x->b + i, 1, (int)m);
    }
    return;
  }
  walker w = *x->w;
  walk_seek(&w, lo);
  int n = w.n, inner = w.shape[n - 1];
  size_t sa = w.sa[n - 1], sb = w.sb[n - 1];
  float *po = x->o + lo * (size_t)inner;
  for (size_t r = lo; r < hi; r++, walk_next(&w), po += inner)
    bin_row(x->op, po, x->a + w.oa, sa, x->b + w.ob, sb, inner);
}

static int binary_forward(const char *name, int op, gl_tensor **out, gl_tensor *a, gl_tensor *b) {
  int n, shape[GL_MAX_DIMS];
  int st = gl_broadcast_shape(name, a, b, &n, shape);
  if (st) return st;
  if ((st = gl_empty(out, n, shape))) return st;
  gl_tensor *o = *out;
  if (o->numel == 0) return GL_OK;
  if (n == 0) { o->data[0] = bin1(op, a->data[0], b->data[0]); return GL_OK; }
  size_t cost = op == B_POW ? 16 : 1;
  if (a->numel == o->numel && b->numel == o->numel) {   /* no broadcasting: flat ranges */
    gl_parallel_for(o->numel, cost, binary_range, &(binary_ctx){op, NULL, a->data, b->data, o->data});
    return GL_OK;
  }
  walker w;
  walk_init(&w, n, shape, a, b);
  gl_parallel_for(w.rows, cost * (size_t)shape[n - 1], binary_range,
                  &(binary_ctx){op, &w, a->data, b->data, o->data});
  return GL_OK;
}

/* tmp = g * f(a, b) over the broadcast shape of g, for input `which` (0: a, 1: b) */
typedef struct {
  int op, which, inner;
  const walker *w;
  const float *g, *a, *b, *out;
  float *tmp;
} bgrad_ctx;

static void bgrad_range(void *c, size_t lo, size_t hi, int slot) {
  (void)slot;
  const bgrad_ctx *x = c;
  walker w = *x->w;
  int n = w.n, inner = x->inner, op = x->op, which = x->which;
  if (n) walk_seek(&w, lo);
  size_t sa = n ? w.sa[n - 1] : 0, sb = n ? w.sb[n - 1] : 0;
  const float *pg = x->g + lo * (size_t)inner, *po = x->out ? x->out + lo * (size_t)inner : NULL;
  float *pt = x->tmp + lo * (size_t)inner;
  for (size_t r = lo; r < hi; r++, walk_next(&w), pg += inner, pt += inner) {
    const float *pa = x->a + w.oa, *pb = x->b + w.ob;
    for (int j = 0; j < inner; j++) {
      float xa = pa[j * sa], y = pb[j * sb], d = pg[j];
      float r2;
      switch (op) {
        case B_SUB: r2 = -d; break;
        case B_MUL: r2 = which ? d * xa : d * y; break;
        case B_DIV: r2 = which ? -d * xa / (y * y) : d / y; break;
        case B_POW:
          if (which) r2 = xa > 0 ? d * po[j] * logf(xa) : 0;
          else r2 = (y == 0) ? 0 : d * y * powf(xa, y - 1);
          break;
        case B_MAX: r2 = which ? (y > xa ? d : (y == xa ? 0.5f * d : 0)) : (xa > y ? d : (xa == y ? 0.5f * d : 0)); break;
        case B_MIN: r2 = which ? (y < xa ? d : (y == xa ? 0.5f * d : 0)) : (xa < y ? d : (xa == y ? 0.5f * d : 0)); break;
        default: r2 = 0;
      }
      pt[j] = r2;
    }
    if (po) po += inner;
  }
}

static int binary_grad(int op, int which, const gl_tensor *g, const gl_tensor *a,
                       const gl_tensor *b, const gl_tensor *out, gl_tensor *dst) {
  if (op == B_ADD || (op == B_SUB && which == 0)) return gl_sum_to_add(dst, g);
  gl_tensor *tmp;
  int st = gl_empty(&tmp, g->ndim, g->shape);
  if (st) return st;
  if (g->numel) {
    walker w;
    int n = g->ndim;
    walk_init(&w, n, g->shape, a, b);
    int inner = n ? g->shape[n - 1] : 1;
    bgrad_ctx c = {op, which, inner, &w, g->data, a->data, b->data, out ? out->data : NULL,
                   tmp->data};
    gl_parallel_for(n ? w.rows : 1, (size_t)inner * (op == B_POW ? 16 : 2), bgrad_range, &c);
  }
  st = gl_sum_to_add(dst, tmp);
  gl_release(tmp);
  return st;
}

/* ------------------------------------------------------------------------ */
/* add, sub, mul, div, pow, maximum, minimum: out = a OP b
 * backward: d/da and d/db of the op, times gout, summed back to each input's shape */

typedef struct { int op; } binary_state;   /* which B_* op */

static int binary_backward(gl_node *n, gl_tensor **gout) {
  int op = GL_NODE_STATE(n, binary_state)->op;
  gl_tensor *a = n->in[0], *b = n->in[1];
  gl_tensor *out = n->nsaved ? n->saved[0] : NULL;
  for (int i = 0; i < 2; i++) {
    gl_tensor *g = gl_grad_of(n, i);
    if (!g) continue;
    int st = binary_grad(op, i, gout[0], a, b, out, g);
    if (st) return st;
  }
  return GL_OK;
}

static const gl_op op_binary = {"binary", binary_backward};

static int binary(const char *name, int op, gl_tensor **out, gl_tensor *a, gl_tensor *b) {
  int st = binary_forward(name, op, out, a, b);
  if (st) return st;
  gl_tensor *in[2] = {a, b};
  gl_node *n = gl_record(&op_binary, 2, in, 1, out);
  if (n) {
    GL_NODE_STATE(n, binary_state)->op = op;
    if (op == B_ADD) {                 /* the gradient is gout's, summed to each shape */
      gl_input_header_only(n, 0);
      gl_input_header_only(n, 1);
    }
    if (op == B_POW) {
      gl_tensor *al = gl_alias(*out);
      gl_save(n, al);
      gl_release(al);
    }
  }
  return GL_OK;
}

int gl_add(gl_tensor **o, gl_tensor *a, gl_tensor *b) { return binary("add", B_ADD, o, a, b); }
int gl_sub(gl_tensor **o, gl_tensor *a, gl_tensor *b) { return binary("sub", B_SUB, o, a, b); }
int gl_mul(gl_tensor **o, gl_tensor *a, gl_tensor *b) { return binary("mul", B_MUL, o, a, b); }
int gl_div(gl_tensor **o, gl_tensor *a, gl_tensor *b) { return binary("div", B_DIV, o, a, b); }
int gl_pow(gl_tensor **o, gl_tensor *a, gl_tensor *b) { return binary("pow", B_POW, o, a, b); }
int gl_maximum(gl_tensor **o, gl_tensor *a, gl_tensor *b) { return binary("maximum", B_MAX, o, a, b); }
int gl_minimum(gl_tensor **o, gl_tensor *a, gl_tensor *b) { return binary("minimum", B_MIN, o, a, b); }

int gl_cmp(gl_tensor **out, gl_tensor *a, gl_tensor *b, const char *how) {
  static const char *names[] = {"eq", "ne", "lt", "le", "gt", "ge"};
  for (int i = 0; i < 6; i++)
    if (!strcmp(how, names[i])) return binary_forward(names[i], B_EQ + i, out, a, b);
  return gl_fail(GL_EARG, "cmp: unknown comparison '%s'", how);
}

/* ------------------------------------------------------------------------ */
/* where(cond, a, b): cond != 0 ? a : b, all broadcast to one shape
 * backward: ga += g where cond, gb += g elsewhere */

static int where_backward(gl_node *n, gl_tensor **gout) {
  gl_tensor *c = n->saved[0];
  for (int i = 1; i < 3; i++) {
    gl_tensor *g = gl_grad_of(n, i);
    if (!g) continue;
    gl_tensor *tmp;
    int st = gl_empty(&tmp, gout[0]->ndim, gout[0]->shape);
    if (st) return st;
    for (size_t k = 0; k < tmp->numel; k++)
      tmp->data[k] = ((c->data[k] != 0) == (i == 1)) ? gout[0]->data[k] : 0;
    st = gl_sum_to_add(g, tmp);
    gl_release(tmp);
    if (st) return st;
  }
  return GL_OK;
}

static const gl_op op_where = {"where", where_backward};

int gl_where(gl_tensor **out, gl_tensor *cond, gl_tensor *a, gl_tensor *b) {
  int n1, s1[GL_MAX_DIMS], n, shape[GL_MAX_DIMS];
  int st = gl_broadcast_shape("where", a, b, &n1, s1);
  if (st) return st;
  gl_tensor tmp = {0};
  tmp.ndim = n1;
  memcpy(tmp.shape, s1, sizeof s1);
  if ((st = gl_broadcast_shape("where", cond, &tmp, &n, shape))) return st;
  gl_tensor *ce, *ae, *be;
  if ((st = gl_expand(&ce, cond, n, shape))) return st;
  int prev = gl_set_grad_enabled(0);
  st = gl_expand(&ae, a, n, shape);
  if (!st && (st = gl_expand(&be, b, n, shape))) gl_release(ae);
  gl_set_grad_enabled(prev);
  if (st) { gl_release(ce); return st; }
  if (!(st = gl_empty(out, n, shape))) {
    for (size_t k = 0; k < (*out)->numel; k++)
      (*out)->data[k] = ce->data[k] != 0 ? ae->data[k] : be->data[k];
    gl_tensor *in[3] = {cond, a, b};
    gl_node *nd = gl_record(&op_where, 3, in, 1, out);
    gl_save(nd, ce);
  }
  gl_release(ce);
  gl_release(ae);
  gl_release(be);
  return st;
}

/* ------------------------------------------------------------------------ */
/* scalar ops: a + s, a * s, a ^ p, s - a, s / a
 * backward: 1, s, p a^(p-1), -1, -s / a^2 */

enum { S_ADD, S_MUL, S_POW, S_RSUB, S_RDIV };

typedef struct { int kind; float s; } scalar_state;   /* S_* op and its scalar */

/* one context for the elementwise loops over flat ranges: y[i] = f(x[i]) forward, or
 * gx[i] (+)= d[i] f'(x[i], y[i]) backward */
typedef struct {
  int kind;
  float s, hi;                /* the scalar (or clamp's bounds lo = s, hi) */
  const float *x, *y, *d;
  float *o;
} flat_ctx;

static void scalar_grad_range(void *c, size_t lo, size_t hi, int slot) {
  (void)slot;
  const flat_ctx *f = c;
  const float *d = f->d, *x = f->x;
  float s = f->s, *g = f->o;
  switch (f->kind) {
    case S_ADD: for (size_t i = lo; i < hi; i++) g[i] += d[i]; break;
    case S_MUL: for (size_t i = lo; i < hi; i++) g[i] += s * d[i]; break;
    case S_POW:
      if (s == 2) for (size_t i = lo; i < hi; i++) g[i] += 2 * x[i] * d[i];
      else for (size_t i = lo; i < hi; i++) g[i] += s == 0 ? 0 : s * powf(x[i], s - 1) * d[i];
      break;
    case S_RSUB: for (size_t i = lo; i < hi; i++) g[i] -= d[i]; break;
    default: for (size_t i = lo; i < hi; i++) g[i] -= s * d[i] / (x[i] * x[i]); break;
  }
}

static int scalar_backward(gl_node *n, gl_tensor **gout) {
  gl_tensor *g = gl_grad_of(n, 0);
  if (!g) return GL_OK;
  const scalar_state *ss = GL_NODE_STATE(n, scalar_state);
  flat_ctx c = {ss->kind, ss->s, 0, n->in[0]->data, NULL, gout[0]->data, g->data};
  gl_parallel_for(g->numel, ss->kind == S_POW ? 16 : 2, scalar_grad_range, &c);
  return GL_OK;
}

static const gl_op op_scalar = {"scalar", scalar_backward};

static void scalar_range(void *c, size_t lo, size_t hi, int slot) {
  (void)slot;
  const flat_ctx *f = c;
  const float *x = f->x;
  float s = f->s, *o = f->o;
  switch (f->kind) {
    case S_ADD: for (size_t i = lo; i < hi; i++) o[i] = x[i] + s; break;
    case S_MUL: for (size_t i = lo; i < hi; i++) o[i] = x[i] * s; break;
    case S_POW:
      if (s == 2) for (size_t i = lo; i < hi; i++) o[i] = x[i] * x[i];
      else if (s == 0.5f) for (size_t i = lo; i < hi; i++) o[i] = sqrtf(x[i]);
      else for (size_t i = lo; i < hi; i++) o[i] = powf(x[i], s);
      break;
    case S_RSUB: for (size_t i = lo; i < hi; i++) o[i] = s - x[i]; break;
    default: for (size_t i = lo; i < hi; i++) o[i] = s / x[i]; break;
  }
}

static int scalar_op(int kind, gl_tensor **out, gl_tensor *a, float s) {
  int st = gl_empty_like(out, a);
  if (st) return st;
  flat_ctx c = {kind, s, 0, a->data, NULL, NULL, (*out)->data};
  gl_parallel_for(a->numel, kind == S_POW && s != 2 ? 16 : 1, scalar_range, &c);
  gl_node *n = gl_record(&op_scalar, 1, &a, 1, out);
  if (n) *GL_NODE_STATE(n, scalar_state) = (scalar_state){kind, s};
  if (kind == S_ADD || kind == S_MUL || kind == S_RSUB) gl_input_header_only(n, 0);
  return GL_OK;
}

int gl_add_scalar(gl_tensor **o, gl_tensor *a, float s) { return scalar_op(S_ADD, o, a, s); }
int gl_mul_scalar(gl_tensor **o, gl_tensor *a, float s) { return scalar_op(S_MUL, o, a, s); }
int gl_pow_scalar(gl_tensor **o, gl_tensor *a, float p) { return scalar_op(S_POW, o, a, p); }
int gl_rsub_scalar(gl_tensor **o, gl_tensor *a, float s) { return scalar_op(S_RSUB, o, a, s); }
int gl_rdiv_scalar(gl_tensor **o, gl_tensor *a, float s) { return scalar_op(S_RDIV, o, a, s); }

/* ------------------------------------------------------------------------ */
/* unary maths: y = f(x)
 * backward: gx += gy * f'(x), written with y where that is cheaper (exp, tanh, sigmoid)
 * exp, tanh and sigmoid use vmath.h's vectorising versions (libm's are scalar calls, ten
 * times slower); the test suite holds them against libm. */

static const char *unary_names[GL_UNARY_COUNT] = {
    "neg", "exp", "log", "tanh", "sigmoid", "relu", "sqrt", "abs", "sin", "cos",
    "softplus", "log1p", "sign", "floor", "round", "rsqrt", "gelu"};

const char *gl_unary_name(gl_unary_kind k) {
  return (unsigned)k < GL_UNARY_COUNT ? unary_names[k] : "unary";
}

static inline float gelu_f(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678f)); }

/* gx[0..N) = gy * f'(x) (assigned, not added) */
static void unary_grad(int kind, const float *x, const float *y, const float *d, float *gx,
                       size_t N) {
  switch (kind) {
    case GL_NEG: for (size_t i = 0; i < N; i++) gx[i] = -d[i]; break;
    case GL_EXP: for (size_t i = 0; i < N; i++) gx[i] = d[i] * y[i]; break;
    case GL_LOG: for (size_t i = 0; i < N; i++) gx[i] = d[i] / x[i]; break;
    case GL_TANH: for (size_t i = 0; i < N; i++) gx[i] = d[i] * (1 - y[i] * y[i]); break;
    case GL_SIGMOID: for (size_t i = 0; i < N; i++) gx[i] = d[i] * y[i] * (1 - y[i]); break;
    case GL_RELU: for (size_t i = 0; i < N; i++) gx[i] = y[i] > 0 ? d[i] : 0; break;
    case GL_SQRT: for (size_t i = 0; i < N; i++) gx[i] = d[i] * 0.5f / y[i]; break;
    case GL_ABS: for (size_t i = 0; i < N; i++) gx[i] = x[i] > 0 ? d[i] : (x[i] < 0 ? -d[i] : 0); break;
    case GL_SIN: for (size_t i = 0; i < N; i++) gx[i] = d[i] * cosf(x[i]); break;
    case GL_COS: for (size_t i = 0; i < N; i++) gx[i] = -d[i] * sinf(x[i]); break;
    case GL_SOFTPLUS: for (size_t i = 0; i < N; i++) gx[i] = d[i] * vm_sigmoid(x[i]); break;
    case GL_LOG1P: for (size_t i = 0; i < N; i++) gx[i] = d[i] / (1 + x[i]); break;
    case GL_RSQRT: for (size_t i = 0; i < N; i++) gx[i] = d[i] * -0.5f * y[i] * y[i] * y[i]; break;
    case GL_GELU:
      for (size_t i = 0; i < N; i++) {
        float cdf = 0.5f * (1.0f + erff(x[i] * 0.70710678f));
        float pdf = 0.39894228f * expf(-0.5f * x[i] * x[i]);
        gx[i] = d[i] * (cdf + x[i] * pdf);
      }
      break;
    default: memset(gx, 0, N * sizeof(float)); break; /* sign, floor, round: zero gradient */
  }
}

/* A fresh gradient buffer (the common case: most tensors have one consumer) is written
 * outright, with no zeroing pass; an existing one gets the gradient added a block at a time
 * from a stack buffer that stays in L1. */
#define UNARY_BLOCK 2048

typedef struct { gl_unary_kind kind; } unary_state;

/* rough operations per element, for the pool's threshold */
static size_t unary_cost(int kind) {
  switch (kind) {
    case GL_NEG: case GL_RELU: case GL_ABS: case GL_SIGN: case GL_FLOOR: case GL_ROUND:
      return 1;
    case GL_EXP: case GL_TANH: case GL_SIGMOID: case GL_SQRT: case GL_RSQRT: return 8;
    default: return 24;
  }
}

/* f->hi != 0: the gradient buffer is fresh (assign); else add, a block at a time */
static void unary_grad_range(void *c, size_t lo, size_t hi, int slot) {
  (void)slot;
  const flat_ctx *f = c;
  if (f->hi != 0) {
    unary_grad(f->kind, f->x ? f->x + lo : NULL, f->y + lo, f->d + lo, f->o + lo, hi - lo);
    return;
  }
  float tmp[UNARY_BLOCK];
  for (size_t i0 = lo; i0 < hi; i0 += UNARY_BLOCK) {
    size_t m = hi - i0 < UNARY_BLOCK ? hi - i0 : UNARY_BLOCK;
    unary_grad(f->kind, f->x ? f->x + i0 : NULL, f->y + i0, f->d + i0, tmp, m);
    float *restrict gx = f->o + i0;
    for (size_t i = 0; i < m; i++) gx[i] += tmp[i];
  }
}

static int unary_backward(gl_node *n, gl_tensor **gout) {
  int kind = (int)GL_NODE_STATE(n, unary_state)->kind;
  int fresh;
  gl_tensor *g = gl_grad_slot(n, 0, &fresh);
  if (!g) return GL_OK;
  flat_ctx c = {kind, 0, (float)fresh, n->in[0]->data, n->saved[0]->data, gout[0]->data,
               g->data};
  gl_parallel_for(g->numel, unary_cost(kind), unary_grad_range, &c);
  return GL_OK;
}

static const gl_op op_unary = {"unary", unary_backward};

static void unary_range(void *c, size_t lo, size_t hi, int slot) {
  (void)slot;
  const flat_ctx *f = c;
  const float *x = f->x;
  float *y = f->o;
  switch (f->kind) {
    case GL_NEG: for (size_t i = lo; i < hi; i++) y[i] = -x[i]; break;
    case GL_EXP: for (size_t i = lo; i < hi; i++) y[i] = vm_exp(x[i]); break;
    case GL_LOG: for (size_t i = lo; i < hi; i++) y[i] = logf(x[i]); break;
    case GL_TANH: for (size_t i = lo; i < hi; i++) y[i] = vm_tanh(x[i]); break;
    case GL_SIGMOID: for (size_t i = lo; i < hi; i++) y[i] = vm_sigmoid(x[i]); break;
    case GL_RELU: for (size_t i = lo; i < hi; i++) y[i] = x[i] > 0 ? x[i] : 0; break;
    case GL_SQRT: for (size_t i = lo; i < hi; i++) y[i] = sqrtf(x[i]); break;
    case GL_ABS: for (size_t i = lo; i < hi; i++) y[i] = fabsf(x[i]); break;
    case GL_SIN: for (size_t i = lo; i < hi; i++) y[i] = sinf(x[i]); break;
    case GL_COS: for (size_t i = lo; i < hi; i++) y[i] = cosf(x[i]); break;
    case GL_SOFTPLUS:
      for (size_t i = lo; i < hi; i++) y[i] = x[i] > 20 ? x[i] : log1pf(expf(x[i]));
      break;
    case GL_LOG1P: for (size_t i = lo; i < hi; i++) y[i] = log1pf(x[i]); break;
    case GL_SIGN: for (size_t i = lo; i < hi; i++) y[i] = (float)((x[i] > 0) - (x[i] < 0)); break;
    case GL_FLOOR: for (size_t i = lo; i < hi; i++) y[i] = floorf(x[i]); break;
    case GL_ROUND: for (size_t i = lo; i < hi; i++) y[i] = roundf(x[i]); break;
    case GL_RSQRT: for (size_t i = lo; i < hi; i++) y[i] = 1.0f / sqrtf(x[i]); break;
    case GL_GELU: for (size_t i = lo; i < hi; i++) y[i] = gelu_f(x[i]); break;
    default: break;
  }
}

int gl_unary(gl_tensor **out, gl_tensor *a, gl_unary_kind k) {
  if ((unsigned)k >= GL_UNARY_COUNT) return gl_fail(GL_EARG, "unary: unknown op %d", (int)k);
  int st = gl_empty_like(out, a);
  if (st) return st;
  flat_ctx c = {(int)k, 0, 0, a->data, NULL, NULL, (*out)->data};
  gl_parallel_for(a->numel, unary_cost(k), unary_range, &c);
  gl_node *n = gl_record(&op_unary, 1, &a, 1, out);
  if (n) {
    GL_NODE_STATE(n, unary_state)->kind = k;
    gl_tensor *al = gl_alias(*out);
    gl_save(n, al);
    gl_release(al);
    /* the kinds whose gradient reads only y (saved) keep x's header alone */
    if (k == GL_NEG || k == GL_EXP || k == GL_TANH || k == GL_SIGMOID || k == GL_RELU ||
        k == GL_SQRT || k == GL_RSQRT)
      gl_input_header_only(n, 0);
  }
  return GL_OK;
}

/* ------------------------------------------------------------------------ */
/* clamp(x, lo, hi) and leaky_relu(x, slope)
 * backward: gradient passes where x is inside [lo, hi]; slope where x < 0 */

/* clamp: [lo, hi]; leaky relu: leaky = 1 and lo is the slope */
typedef struct { float lo, hi; int leaky; } clamp_state;

/* kind 1: leaky relu (slope f->s), 0: clamp to [f->s, f->hi]; o: y forward, gx backward */
static void clamp_range(void *c, size_t i0, size_t i1, int slot) {
  (void)slot;
  const flat_ctx *f = c;
  const float *x = f->x, *d = f->d;
  float lo = f->s, hi = f->hi, *o = f->o;
  if (d && f->kind)
    for (size_t i = i0; i < i1; i++) o[i] += x[i] > 0 ? d[i] : lo * d[i];
  else if (d)
    for (size_t i = i0; i < i1; i++) o[i] += (x[i] >= lo && x[i] <= hi) ? d[i] : 0;
  else if (f->kind)
    for (size_t i = i0; i < i1; i++) o[i] = x[i] > 0 ? x[i] : lo * x[i];
  else
    for (size_t i = i0; i < i1; i++) o[i] = x[i] < lo ? lo : (x[i] > hi ? hi : x[i]);
}

static int clamp_backward(gl_node *n, gl_tensor **gout) {
  gl_tensor *g = gl_grad_of(n, 0);
  if (!g) return GL_OK;
  const clamp_state *cs = GL_NODE_STATE(n, clamp_state);
  flat_ctx c = {cs->leaky, cs->lo, cs->hi, n->in[0]->data, NULL, gout[0]->data, g->data};
  gl_parallel_for(g->numel, 1, clamp_range, &c);
  return GL_OK;
}

static const gl_op op_clamp = {"clamp", clamp_backward};

int gl_clamp(gl_tensor **out, gl_tensor *a, float lo, float hi) {
  if (isnan(lo) || isnan(hi) || lo > hi)
    return gl_fail(GL_EARG, "clamp: bad bounds [%g, %g]", lo, hi);
  int st = gl_empty_like(out, a);
  if (st) return st;
  gl_parallel_for(a->numel, 1, clamp_range, &(flat_ctx){0, lo, hi, a->data, NULL, NULL, (*out)->data});
  gl_node *n = gl_record(&op_clamp, 1, &a, 1, out);
  if (n) *GL_NODE_STATE(n, clamp_state) = (clamp_state){lo, hi, 0};
  return GL_OK;
}

int gl_leaky_relu(gl_tensor **out, gl_tensor *a, float slope) {
  int st = gl_empty_like(out, a);
  if (st) return st;
  gl_parallel_for(a->numel, 1, clamp_range, &(flat_ctx){1, slope, 0, a->data, NULL, NULL, (*out)->data});
  gl_node *n = gl_record(&op_clamp, 1, &a, 1, out);
  if (n) *GL_NODE_STATE(n, clamp_state) = (clamp_state){slope, 0.0f, 1};
  return GL_OK;
}

/* ------------------------------------------------------------------------ */
/* in-place helpers: outside the graph */

static int check_inplace(const char *op, const gl_tensor *t) {
  if (gl_grad_enabled() && t->requires_grad)
    return gl_fail(GL_ESTATE, "%s: in-place change of a tensor that requires grad "
                              "(use glimpse.no_grad or detach())", op);
  return GL_OK;
}

int gl_fill_(gl_tensor *t, float v) {
  int st = check_inplace("fill_", t);
  if (st) return st;
  for (size_t i = 0; i < t->numel; i++) t->data[i] = v;
  gl_touch(t);
  return GL_OK;
}

int gl_copy_(gl_tensor *dst, const gl_tensor *src) {
  int st = check_inplace("copy_", dst);
  if (st) return st;
  int n, shape[GL_MAX_DIMS];
  if ((st = gl_broadcast_shape("copy_", dst, src, &n, shape))) return st;
  if (n != dst->ndim || memcmp(shape, dst->shape, sizeof(int) * (size_t)n)) {
    char s1[128], s2[128];
    return gl_fail(GL_ESHAPE, "copy_: cannot copy a %s tensor into a %s tensor",
                   gl_shape_str(s1, sizeof s1, src->ndim, src->shape),
                   gl_shape_str(s2, sizeof s2, dst->ndim, dst->shape));
  }
  if (src->numel == dst->numel) {
    memmove(dst->data, src->data, dst->numel * sizeof(float));
  } else if (dst->numel) {
    walker w;
    walk_init(&w, n, shape, src, NULL);
    int inner = n ? shape[n - 1] : 1;
    size_t s = n ? w.sa[n - 1] : 0;
    float *o = dst->data;
    for (size_t r = 0; r < (n ? w.rows : 1); r++, walk_next(&w), o += inner)
      for (int j = 0; j < inner; j++) o[j] = src->data[w.oa + j * s];
  }
  gl_touch(dst);
  return GL_OK;
}

int gl_add_(gl_tensor *dst, const gl_tensor *src, float alpha) {
  int st = check_inplace("add_", dst);
  if (st) return st;
  if (!gl_same_shape(dst, src) && src->numel != 1) {
    char s1[128], s2[128];
    return gl_fail(GL_ESHAPE, "add_: %s into %s", gl_shape_str(s1, sizeof s1, src->ndim, src->shape),
                   gl_shape_str(s2, sizeof s2, dst->ndim, dst->shape));
  }
  if (src->numel == 1) for (size_t i = 0; i < dst->numel; i++) dst->data[i] += alpha * src->data[0];
  else gl_parallel_for(dst->numel, 1, scalar_grad_range,
                       &(flat_ctx){S_MUL, alpha, 0, NULL, NULL, src->data, dst->data});
  gl_touch(dst);
  return GL_OK;
}

/* relu_: t = max(t, 0) in place (inference: no second activation-sized buffer) */
int gl_relu_(gl_tensor *t) {
  int st = check_inplace("relu_", t);
  if (st) return st;
  flat_ctx c = {GL_RELU, 0, 0, t->data, NULL, NULL, t->data};
  gl_parallel_for(t->numel, unary_cost(GL_RELU), unary_range, &c);
  gl_touch(t);
  return GL_OK;
}

int gl_mul_scalar_(gl_tensor *t, float s) {
  int st = check_inplace("mul_", t);
  if (st) return st;
  for (size_t i = 0; i < t->numel; i++) t->data[i] *= s;
  gl_touch(t);
  return GL_OK;
}
