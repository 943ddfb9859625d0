/* ops_matmul.c -- matrix products through OpenBLAS sgemm: matmul (2-D, batched 3-D, and
 * (...,M,K) @ (K,N)), with transposition flags the kernel takes itself, and the Linear
 * layer x W^T + b as one op.
 */
#include "glimpse_internal.h"
#include "parallel.h"

#include <string.h>

/* Resolve the product's geometry: batch count, M, K, N, and whether b is shared across the
 * batch (a (...,M,K) @ b (K,N) flattens a's leading dims into M). */
typedef struct { int batch, M, K, N, bshared, ta, tb; } mm_geom;

static int mm_geometry(const gl_tensor *a, const gl_tensor *b, int ta, int tb, mm_geom *g,
                       int *ondim, int *oshape) {
  char s1[128], s2[128];
#define SHAPES gl_shape_str(s1, sizeof s1, a->ndim, a->shape), gl_shape_str(s2, sizeof s2, b->ndim, b->shape)
  memset(g, 0, sizeof *g);
  g->ta = ta;
  g->tb = tb;
  if (a->ndim < 2 || b->ndim < 2)
    return gl_fail(GL_ESHAPE, "matmul: %s x %s: both operands need at least 2 dims", SHAPES);
  int ak = a->shape[a->ndim - 1], am = a->shape[a->ndim - 2];
  if (ta) { int t = ak; ak = am; am = t; }
  int bk = b->shape[b->ndim - 2], bn = b->shape[b->ndim - 1];
  if (tb) { int t = bk; bk = bn; bn = t; }
  if (ak != bk)
    return gl_fail(GL_ESHAPE, "matmul: %s x %s: inner dims %d != %d", SHAPES, ak, bk);
  g->K = ak;
  g->N = bn;
  if (b->ndim == 2) {
    if (ta && a->ndim > 2) {
      /* a transposed per batch cannot be flattened into M */
      g->batch = 1;
      for (int i = 0; i < a->ndim - 2; i++) g->batch *= a->shape[i];
      g->M = am;
      g->bshared = 1;
    } else {
      g->batch = 1;
      g->M = am;
      for (int i = 0; i < a->ndim - 2; i++) g->M *= a->shape[i];
      g->bshared = 1;
    }
    *ondim = a->ndim;
    memcpy(oshape, a->shape, sizeof(int) * (size_t)a->ndim);
    oshape[a->ndim - 2] = am;
    oshape[a->ndim - 1] = bn;
    return GL_OK;
  }
  if (a->ndim != b->ndim)
    return gl_fail(GL_ESHAPE, "matmul: %s x %s: batched operands need the same number of dims",
                   SHAPES);
  int batch = 1;
  for (int i = 0; i < a->ndim - 2; i++) {
    if (a->shape[i] != b->shape[i])
      return gl_fail(GL_ESHAPE, "matmul: %s x %s: batch dim %d differs (%d vs %d)", SHAPES, i + 1,
                     a->shape[i], b->shape[i]);
    batch *= a->shape[i];
  }
  g->batch = batch;
  g->M = am;
  *ondim = a->ndim;
  memcpy(oshape, a->shape, sizeof(int) * (size_t)a->ndim);
  oshape[a->ndim - 2] = am;
  oshape[a->ndim - 1] = bn;
  return GL_OK;
#undef SHAPES
}

/* C (batch, M, N) (+)= op(A) op(B) */
static void mm_run(const mm_geom *g, const float *A, const float *B, float *C, float beta) {
  size_t sA = (size_t)g->M * g->K, sB = g->bshared ? 0 : (size_t)g->K * g->N;
  size_t sC = (size_t)g->M * g->N;
  if (g->batch == 1) {
    gl_sgemm(g->ta, g->tb, g->M, g->N, g->K, 1.0f, A, g->ta ? g->M : g->K, B,
             g->tb ? g->K : g->N, beta, C, g->N);
    return;
  }
  gl_sgemm_batched(g->ta, g->tb, g->batch, g->M, g->N, g->K, 1.0f, A, sA, B, sB, beta, C, sC);
}

/* ------------------------------------------------------------------------ */
/* matmul: C = op(A) op(B)
 * backward: with C = A B:      dA += dC B^T,  dB += A^T dC
 *           with C = A^T B:    dA += B dC^T,  dB += A dC
 *           with C = A B^T:    dA += dC B,    dB += dC^T A
 *           with C = A^T B^T:  dA += B^T dC^T, dB += dC^T A^T
 * For a shared B (flattened or per-batch), dB sums over the batch (beta = 1 accumulation). */

typedef struct {
  const mm_geom *g;
  const float *A, *B, *dC;
  float *dA, *dB;   /* NULL: not wanted in this pass */
  int fA, fB;
} mm_grad_ctx;

/* batch items [lo, hi) of the backward products */
static void mm_grad_range(void *ctx, size_t lo, size_t hi, int slot) {
  (void)slot;
  const mm_grad_ctx *c = ctx;
  const mm_geom *g = c->g;
  int M = g->M, N = g->N, K = g->K;
  size_t sA = (size_t)M * K, sB = g->bshared ? 0 : (size_t)K * N, sC = (size_t)M * N;
  for (size_t b = lo; b < hi; b++) {
    const float *Ab = c->A + b * sA, *Bb = c->B + b * sB, *dCb = c->dC + b * sC;
    int lda = g->ta ? M : K, ldb = g->tb ? K : N;
    if (c->dA) {
      float *dA = c->dA + b * sA, beta = c->fA ? 0 : 1;
      if (!g->ta) gl_sgemm(0, !g->tb, M, K, N, 1, dCb, N, Bb, ldb, beta, dA, lda);   /* dC op(B)^T */
      else gl_sgemm(g->tb, 1, K, M, N, 1, Bb, ldb, dCb, N, beta, dA, lda);          /* op(B) dC^T */
    }
    if (c->dB) {
      float *dB = c->dB + b * sB, beta = c->fB && (b == 0 || !g->bshared) ? 0 : 1;
      if (!g->tb) gl_sgemm(!g->ta, 0, K, N, M, 1, Ab, lda, dCb, N, beta, dB, ldb);   /* op(A)^T dC */
      else gl_sgemm(1, g->ta, N, K, M, 1, dCb, N, Ab, lda, beta, dB, ldb);          /* dC^T op(A) */
    }
  }
}

static int matmul_backward(gl_node *n, gl_tensor **gout) {
  mm_geom g = *GL_NODE_STATE(n, mm_geom);
  /* a fresh gradient buffer is assigned (beta 0) where nothing was added before: each dA
   * block once, a shared dB only by the first batch item */
  int fA, fB;
  gl_tensor *gA = gl_grad_slot(n, 0, &fA);
  gl_tensor *gB = gl_grad_slot(n, 1, &fB);
  mm_grad_ctx c = {&g, n->in[0]->data, n->in[1]->data, gout[0]->data, gA ? gA->data : NULL,
                   gB ? gB->data : NULL, fA, fB};
  /* products too small for OpenBLAS's threads run side by side on the pool, one batch item
   * each; a shared B's gradient sums over the items, so it keeps to one thread, in order */
  if (g.batch >= 2 && !gl_sgemm_threaded(g.M, g.N, g.K)) {
    if (g.bshared) c.dB = NULL;
    gl_parallel_blas((size_t)g.batch, 4 * (size_t)g.M * g.N * (g.K ? g.K : 1), mm_grad_range, &c);
    if (g.bshared && gB) {
      c.dA = NULL;
      c.dB = gB->data;
      mm_grad_range(&c, 0, (size_t)g.batch, 0);
    }
  } else {
    mm_grad_range(&c, 0, (size_t)(g.batch > 0 ? g.batch : 0), 0);
  }
  if (g.batch == 0) {   /* nothing was written: a fresh buffer must still hold zeros */
    if (gA && fA) memset(gA->data, 0, gA->numel * sizeof(float));
    if (gB && fB) memset(gB->data, 0, gB->numel * sizeof(float));
  }
  return GL_OK;
}

static const gl_op op_matmul = {"matmul", matmul_backward};

int gl_matmul_t(gl_tensor **out, gl_tensor *a, gl_tensor *b, int ta, int tb) {
  mm_geom g;
  int nd = 0, shape[GL_MAX_DIMS];
  int st = mm_geometry(a, b, ta, tb, &g, &nd, shape);
  if (st) return st;
  if ((st = gl_blas_init())) return st;
  if ((st = gl_empty(out, nd, shape))) return st;
  if ((*out)->numel) mm_run(&g, a->data, b->data, (*out)->data, 0.0f);
  gl_tensor *in[2] = {a, b};
  gl_node *n = gl_record(&op_matmul, 2, in, 1, out);
  if (n) *GL_NODE_STATE(n, mm_geom) = g;
  return GL_OK;
}

int gl_matmul(gl_tensor **out, gl_tensor *a, gl_tensor *b) { return gl_matmul_t(out, a, b, 0, 0); }

/* ------------------------------------------------------------------------ */
/* linear: y (R, Out) = x (R, In) W^T + b, x's leading dims flattened into R
 * backward: dx += dy W,  dW += dy^T x,  db += sum_rows dy */

typedef struct { int R, In, Out; } linear_state;

static int linear_backward(gl_node *n, gl_tensor **gout) {
  gl_tensor *x = n->in[0], *w = n->in[1];
  const linear_state *ls = GL_NODE_STATE(n, linear_state);
  int R = ls->R, In = ls->In, Out = ls->Out;
  const float *dy = gout[0]->data;
  int fx, fw, fb;   /* a fresh gradient buffer is assigned (beta 0), an older one added to */
  gl_tensor *gx = gl_grad_slot(n, 0, &fx);
  if (gx) gl_sgemm(0, 0, R, In, Out, 1, dy, Out, w->data, In, fx ? 0 : 1, gx->data, In);
  gl_tensor *gw = gl_grad_slot(n, 1, &fw);
  if (gw) gl_sgemm(1, 0, Out, In, R, 1, dy, Out, x->data, In, fw ? 0 : 1, gw->data, In);
  gl_tensor *gb = n->nin > 2 ? gl_grad_slot(n, 2, &fb) : NULL;
  if (gb) {
    if (fb) memset(gb->data, 0, sizeof(float) * (size_t)Out);
    for (int r = 0; r < R; r++) {   /* row by row: each pass over gb vectorises */
      const float *restrict d = dy + (size_t)r * Out;
      float *restrict b = gb->data;
      for (int o = 0; o < Out; o++) b[o] += d[o];
    }
  }
  return GL_OK;
}

static const gl_op op_linear = {"linear", linear_backward};

int gl_linear(gl_tensor **out, gl_tensor *x, gl_tensor *w, gl_tensor *bias) {
  char s1[128], s2[128], s3[128];
  if (w->ndim != 2 || x->ndim < 1 || x->shape[x->ndim - 1] != w->shape[1])
    return gl_fail(GL_ESHAPE, "linear: input %s does not fit weight %s (Out, In)",
                   gl_shape_str(s1, sizeof s1, x->ndim, x->shape),
                   gl_shape_str(s2, sizeof s2, w->ndim, w->shape));
  int In = w->shape[1], Out = w->shape[0];
  if (bias && (bias->numel != (size_t)Out || bias->ndim != 1))
    return gl_fail(GL_ESHAPE, "linear: bias %s does not fit weight %s",
                   gl_shape_str(s3, sizeof s3, bias->ndim, bias->shape),
                   gl_shape_str(s2, sizeof s2, w->ndim, w->shape));
  int st = gl_blas_init();
  if (st) return st;
  int shape[GL_MAX_DIMS];
  memcpy(shape, x->shape, sizeof(int) * (size_t)x->ndim);
  shape[x->ndim - 1] = Out;
  if ((st = gl_empty(out, x->ndim, shape))) return st;
  int R = 1;
  for (int i = 0; i < x->ndim - 1; i++) R *= x->shape[i];
  float *y = (*out)->data;
  if (bias)
    for (int r = 0; r < R; r++) memcpy(y + (size_t)r * Out, bias->data, sizeof(float) * (size_t)Out);
  /* gl_sgemm scales C by beta when In is 0, so a missing bias must start from zeros */
  if (!bias && In == 0) memset(y, 0, (*out)->numel * sizeof(float));
  if ((*out)->numel) gl_sgemm(0, 1, R, Out, In, 1, x->data, In, w->data, In, bias ? 1 : 0, y, Out);
  gl_tensor *in[3] = {x, w, bias};
  gl_node *n = gl_record(&op_linear, bias ? 3 : 2, in, 1, out);
  if (n) *GL_NODE_STATE(n, linear_state) = (linear_state){R, In, Out};
  return GL_OK;
}
