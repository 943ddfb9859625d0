/* ops_attention_mh.c -- the multi-head attention core (Vaswani et al. 2017, PyTorch's
 * nn.MultiheadAttention maths): scaled dot-product probabilities for all heads at once, and
 * the whole self-attention block on the packed q|k|v projection.
 *
 *   gl_attn_mh_probs   P = softmax(scale Q K^T + masks), q and k already heads first
 *                      (N = B*heads rows); the general path (cross-attention, dropout) and
 *                      the test oracle of the packed op
 *   gl_attn_mh_packed  ctx = P V with P as above, every head read in place from the packed
 *                      (B,T,3d) projection and the context written merged (B,T,d): no
 *                      head split or merge copies, forward or backward
 *
 * Split from ops_attention.c (the per-step attention of recurrent decoders) by sub-family.
 */
#include "ops_attention.h"
#include "parallel.h"
#include "vmath.h"

#include <math.h>
#include <string.h>

#define SHAPE(buf, t) gl_shape_str(buf, sizeof buf, (t)->ndim, (t)->shape)

/* ------------------------------------------------------------------------ */
/* multi-head probabilities: q (N,Tq,d), k (N,Tk,d), N = B*heads (batch-major: row n is batch
 * item n / heads), mask (B,Tk) 0/1 or NULL, causal (key j visible to query i iff j <= i)
 *   -> P (N,Tq,Tk) = softmax_j(scale q_ni . k_nj) over the visible keys (rows with no visible
 *      key are zeros)
 * backward: gS = P * (gP - rowsum(gP * P));  gq += scale gS k;  gk += scale gS^T q
 * Both directions are batched sgemms over the N heads. */

typedef struct { int N, Tq, Tk, d; float scale; } mh_probs_state;

typedef struct {
  const float *P, *gP, *mask;
  float *out;
  int Tq, Tk, heads, causal;
} mh_ctx;

/* rows r = n Tq + i: gS = P * (gP - rowsum(gP * P)) */
static void mh_grad_range(void *ctx, size_t lo, size_t hi, int slot) {
  (void)slot;
  const mh_ctx *c = ctx;
  int Tk = c->Tk;
  for (size_t r = lo; r < hi; r++) {
    const float *pr = c->P + r * Tk, *gr = c->gP + r * Tk;
    float *sr = c->out + r * Tk;
    float dot = vm_dot(gr, pr, (size_t)Tk);
    for (int j = 0; j < Tk; j++) sr[j] = pr[j] * (gr[j] - dot);
  }
}

/* rows r = n Tq + i of P, softmaxed in place over their visible keys */
static void mh_softmax_range(void *ctx, size_t lo, size_t hi, int slot) {
  (void)slot;
  const mh_ctx *c = ctx;
  int Tq = c->Tq, Tk = c->Tk;
  for (size_t r = lo; r < hi; r++) {
    int nn = (int)(r / (size_t)Tq), i = (int)(r % (size_t)Tq);
    const float *mb = c->mask ? c->mask + (size_t)(nn / c->heads) * Tk : NULL;
    float *row = c->out + r * Tk;
    int lim = c->causal && i + 1 < Tk ? i + 1 : Tk;   /* keys [0, lim) may be visible */
    gl_attn_softmax_row(row, row, Tk, lim, mb, 1.0f);
  }
}

static int mh_probs_backward(gl_node *n, gl_tensor **gout) {
  const mh_probs_state *ms = GL_NODE_STATE(n, mh_probs_state);
  int N = ms->N, Tq = ms->Tq, Tk = ms->Tk, d = ms->d;
  float scale = ms->scale;
  const float *P = n->saved[0]->data, *gP = gout[0]->data;
  gl_tensor *gq = gl_grad_of(n, 0), *gk = gl_grad_of(n, 1);
  if (!gq && !gk) return GL_OK;
  size_t tot = (size_t)N * Tq * Tk;
  float *gS = gl_scratch_alloc(gl_attn_scratch_n(tot));
  if (!gS) return gl_fail(GL_ENOMEM, "attn_mh_probs backward: out of memory");
  mh_ctx c = {P, gP, NULL, gS, Tq, Tk, 0, 0};
  gl_parallel_for((size_t)N * Tq, (size_t)Tk * 4, mh_grad_range, &c);
  if (tot) {
    if (gq)
      gl_sgemm_batched(0, 0, N, Tq, d, Tk, scale, gS, (size_t)Tq * Tk, n->in[1]->data,
                       (size_t)Tk * d, 1.0f, gq->data, (size_t)Tq * d);
    if (gk)
      gl_sgemm_batched(1, 0, N, Tk, d, Tq, scale, gS, (size_t)Tq * Tk, n->in[0]->data,
                       (size_t)Tq * d, 1.0f, gk->data, (size_t)Tk * d);
  }
  gl_scratch_free(gS, gl_attn_scratch_n(tot));
  return GL_OK;
}

static const gl_op op_attn_mh_probs = {"attn_mh_probs", mh_probs_backward};

int gl_attn_mh_probs(gl_tensor **probs, gl_tensor *q, gl_tensor *k, const gl_tensor *mask,
                     int heads, int causal, float scale) {
  const char *op = "attn_mh_probs";
  char b1[128], b2[128];
  int st;
  if (q->ndim != 3 || k->ndim != 3 || q->shape[0] != k->shape[0] || q->shape[2] != k->shape[2])
    return gl_fail(GL_ESHAPE, "%s: q %s and k %s should be (N,Tq,d) and (N,Tk,d)", op,
                   SHAPE(b1, q), SHAPE(b2, k));
  int N = q->shape[0], Tq = q->shape[1], Tk = k->shape[1], d = q->shape[2];
  if (heads < 1 || N % heads)
    return gl_fail(GL_EARG, "%s: %d rows are not a multiple of %d heads", op, N, heads);
  int B = N / heads;
  if (mask && (mask->ndim != 2 || mask->shape[0] != B || mask->shape[1] != Tk))
    return gl_fail(GL_ESHAPE, "%s: key padding mask %s should be (B,Tk) = [%d,%d]", op,
                   SHAPE(b1, mask), B, Tk);
  if ((st = gl_blas_init())) return st;
  if ((st = gl_empty(probs, 3, (int[]){N, Tq, Tk}))) return st;
  float *P = (*probs)->data;
  size_t tot = (size_t)N * Tq * Tk;
  if (!tot) goto record;
  if (d > 0)
    gl_sgemm_batched(0, 1, N, Tq, Tk, d, scale, q->data, (size_t)Tq * d, k->data,
                     (size_t)Tk * d, 0.0f, P, (size_t)Tq * Tk);
  else
    memset(P, 0, tot * sizeof(float));
  mh_ctx c = {NULL, NULL, mask ? mask->data : NULL, P, Tq, Tk, heads, causal};
  gl_parallel_for((size_t)N * Tq, (size_t)Tk * 16, mh_softmax_range, &c);
record:;
  gl_tensor *in[2] = {q, k};
  gl_node *n = gl_record(&op_attn_mh_probs, 2, in, 1, probs);
  if (n) {
    gl_tensor *al = gl_alias(*probs);
    gl_save(n, al);
    gl_release(al);
    *GL_NODE_STATE(n, mh_probs_state) = (mh_probs_state){N, Tq, Tk, d, scale};
  }
  return GL_OK;
}

/* ------------------------------------------------------------------------ */
/* multi-head self-attention on the packed projection, heads read in place:
 *   qkv (B,T,3d), row (b,t) = [q | k | v] (x W_in^T + b_in), head j of each in the columns
 *   j dh .. (j+1) dh - 1, dh = d / heads (PyTorch's layout); mask (B,T) 0/1 or NULL; causal
 *   -> ctx (B,T,d): ctx[b,t, j dh + e] = sum_s P_bj[t,s] v_bj[s,e]   (the heads merged)
 *      P_bj = softmax_s(scale q_bj k_bj^T) over the visible keys, as gl_attn_mh_probs;
 *      saved, and an output (B,heads,T,T) too when the caller asks for it
 * backward, per (b, j), with gC the head's block of gctx:
 *   gP  = gC v^T  (+ the gradient of P when it is an output)
 *   gv += P^T gC;   gS = P * (gP - rowsum(gP * P));   gq += scale gS k;   gk += scale gS^T q
 *
 * Why: the unfused path needs q, k, v heads first, (3,B,h,T,dh), so the projection is
 * permuted into a copy and the context permuted back to (B,T,d): two copies forward, two
 * backward, and zeroed gradients for the selects.  Here every product reads its head where
 * the projection put it (lda 3d) and writes where the output projection reads (ldc d).
 * One (b, j) pair is one unit of work: its products and softmax rows run on one pool thread,
 * so the result is the same on any thread count (and the same sums as the unfused path). */

typedef struct { int B, T, d, heads; float scale; } mh_packed_state;

typedef struct {
  const float *qkv, *mask, *P, *gctx, *gprobs;
  float *Pw, *ctx, *gqkv, *scratch;
  int T, d, heads, causal;
  float scale, beta;
} mh_packed_ctx;

static void mh_packed_fwd_range(void *ctx, size_t lo, size_t hi, int slot) {
  (void)slot;
  const mh_packed_ctx *c = ctx;
  int T = c->T, d = c->d, h = c->heads, dh = d / h, ld = 3 * d;
  for (size_t u = lo; u < hi; u++) {
    int b = (int)(u / (size_t)h), j = (int)(u % (size_t)h);
    const float *q = c->qkv + (size_t)b * T * ld + (size_t)j * dh, *k = q + d, *v = q + 2 * d;
    const float *mb = c->mask ? c->mask + (size_t)b * T : NULL;
    float *P = c->Pw + u * T * T;
    gl_sgemm(0, 1, T, T, dh, c->scale, q, ld, k, ld, 0.0f, P, T);
    for (int i = 0; i < T; i++) {
      int lim = c->causal && i + 1 < T ? i + 1 : T;   /* keys [0, lim) may be visible */
      gl_attn_softmax_row(P + (size_t)i * T, P + (size_t)i * T, T, lim, mb, 1.0f);
    }
    gl_sgemm(0, 0, T, dh, T, 1.0f, P, T, v, ld, 0.0f, c->ctx + (size_t)b * T * d + (size_t)j * dh,
             d);
  }
}

static void mh_packed_bwd_range(void *ctx, size_t lo, size_t hi, int slot) {
  const mh_packed_ctx *c = ctx;
  int T = c->T, d = c->d, h = c->heads, dh = d / h, ld = 3 * d;
  float *gS = c->scratch + (size_t)slot * T * T;
  for (size_t u = lo; u < hi; u++) {
    int b = (int)(u / (size_t)h), j = (int)(u % (size_t)h);
    size_t at = (size_t)b * T * ld + (size_t)j * dh;
    const float *q = c->qkv + at, *k = q + d, *v = q + 2 * d;
    float *gq = c->gqkv + at, *gk = gq + d, *gv = gq + 2 * d;
    const float *P = c->P + u * T * T, *gC = c->gctx + (size_t)b * T * d + (size_t)j * dh;
    gl_sgemm(0, 1, T, T, dh, 1.0f, gC, d, v, ld, 0.0f, gS, T);          /* gP */
    if (c->gprobs) {
      const float *g = c->gprobs + u * T * T;
      for (size_t e = 0; e < (size_t)T * T; e++) gS[e] += g[e];
    }
    gl_sgemm(1, 0, T, dh, T, 1.0f, P, T, gC, d, c->beta, gv, ld);
    for (int i = 0; i < T; i++) {
      const float *pr = P + (size_t)i * T;
      float *sr = gS + (size_t)i * T;
      float dot = vm_dot(sr, pr, (size_t)T);
      for (int s = 0; s < T; s++) sr[s] = pr[s] * (sr[s] - dot);
    }
    gl_sgemm(0, 0, T, dh, T, c->scale, gS, T, k, ld, c->beta, gq, ld);
    gl_sgemm(1, 0, T, dh, T, c->scale, gS, T, q, ld, c->beta, gk, ld);
  }
}

/* Units side by side on the pool, each product on one thread -- unless a head's products
 * are big enough for OpenBLAS's own threads: then the units run one after the other. */
static void mh_packed_run(int units, int T, int dh, gl_range_fn fn, mh_packed_ctx *c) {
  if (gl_sgemm_threaded(T, T, dh > 0 ? dh : 1)) {
    for (int u = 0; u < units; u++) fn(c, (size_t)u, (size_t)u + 1, 0);
    return;
  }
  gl_parallel_blas((size_t)units, 4 * (size_t)T * T * (dh > 0 ? dh : 1), fn, c);
}

static int mh_packed_backward(gl_node *n, gl_tensor **gout) {
  const mh_packed_state *ms = GL_NODE_STATE(n, mh_packed_state);
  int B = ms->B, T = ms->T, d = ms->d, h = ms->heads, units = B * h;
  int fresh = 0;
  gl_tensor *g = gl_grad_slot(n, 0, &fresh);
  if (!g || !units || !T || !d) return GL_OK;
  int slots = gl_sgemm_threaded(T, T, d / h) ? 1 : gl_parallel_slots();
  size_t per = (size_t)T * T;
  float *scratch = gl_scratch_alloc(gl_attn_scratch_n(per * (size_t)slots));
  if (!scratch) return gl_fail(GL_ENOMEM, "attn_mh_packed backward: out of memory");
  mh_packed_ctx c = {n->in[0]->data, NULL, n->saved[0]->data, gout[0]->data,
                     n->nout > 1 ? gout[1]->data : NULL, NULL, NULL, g->data, scratch,
                     T, d, h, 0, ms->scale, fresh ? 0.0f : 1.0f};
  mh_packed_run(units, T, d / h, mh_packed_bwd_range, &c);
  gl_scratch_free(scratch, gl_attn_scratch_n(per * (size_t)slots));
  return GL_OK;
}

static const gl_op op_attn_mh_packed = {"attn_mh_packed", mh_packed_backward};

int gl_attn_mh_packed(gl_tensor **ctx, gl_tensor **probs, gl_tensor *qkv, const gl_tensor *mask,
                      int heads, int causal, float scale) {
  const char *op = "attn_mh_packed";
  char b1[128];
  int st;
  *ctx = NULL;
  if (probs) *probs = NULL;
  if (qkv->ndim != 3 || qkv->shape[2] % 3)
    return gl_fail(GL_ESHAPE, "%s: qkv %s should be (B,T,3d)", op, SHAPE(b1, qkv));
  int B = qkv->shape[0], T = qkv->shape[1], d = qkv->shape[2] / 3;
  if (heads < 1 || d % heads)
    return gl_fail(GL_EARG, "%s: width %d is not a multiple of %d heads", op, d, heads);
  if (mask && (mask->ndim != 2 || mask->shape[0] != B || mask->shape[1] != T))
    return gl_fail(GL_ESHAPE, "%s: key padding mask %s should be (B,T) = [%d,%d]", op,
                   SHAPE(b1, mask), B, T);
  if ((st = gl_blas_init())) return st;
  gl_tensor *P = NULL;
  if ((st = gl_empty(ctx, 3, (int[]){B, T, d}))) return st;
  if ((st = gl_empty(&P, 4, (int[]){B, heads, T, T}))) {
    gl_release(*ctx);
    *ctx = NULL;
    return st;
  }
  if (B > 0 && T > 0 && d > 0) {
    mh_packed_ctx c = {qkv->data, mask ? mask->data : NULL, NULL, NULL, NULL, P->data,
                       (*ctx)->data, NULL, NULL, T, d, heads, causal, scale, 0.0f};
    mh_packed_run(B * heads, T, d / heads, mh_packed_fwd_range, &c);
  } else if (P->numel) {   /* no width: every score is 0, P is the plain softmax of zeros */
    memset(P->data, 0, P->numel * sizeof(float));
    for (size_t r = 0; r < (size_t)B * heads * T; r++) {
      int i = (int)(r % (size_t)T);
      const float *mb = mask ? mask->data + r / ((size_t)heads * T) * T : NULL;
      gl_attn_softmax_row(P->data + r * T, P->data + r * T, T,
                          causal && i + 1 < T ? i + 1 : T, mb, 1.0f);
    }
  }
  gl_tensor *outs[2] = {*ctx, P};
  gl_node *n = gl_record(&op_attn_mh_packed, 1, &qkv, probs ? 2 : 1, outs);
  if (n) {
    /* an output is saved through an alias (no reference cycle through its node) */
    gl_tensor *sv = probs ? gl_alias(P) : P;
    gl_save(n, sv);
    if (probs) gl_release(sv);
    *GL_NODE_STATE(n, mh_packed_state) = (mh_packed_state){B, T, d, heads, scale};
  }
  if (probs) *probs = P;
  else gl_release(P);
  return GL_OK;
}

/* ------------------------------------------------------------------------ */
/* the decoding cache: key and value buffers with room to grow
 *   gl_kv_copy_rows    rows [from, from+n) of every block of src (..., Rs, d) into rows
 *                      [at, at+n) of the same block of dst (..., Rd, d), in place
 *   gl_attn_mh_cached  q's attention over the first len rows of k and v buffers (N,cap,d)
 * Why: a decoder that appends each step's keys by concatenation copies the whole cache at
 * every step, and the caching allocator keeps a block of every length it passed through (at
 * 64 tokens of W8 about four times the live bytes).  Buffers that double when full take a
 * step's rows in place, and the attention reads only their valid rows.  Inference only: the
 * ops record no node (the caller keeps the differentiable path for training). */

/* (N, R, d) view of t: N the product of the leading dims */
static void rows_view(const gl_tensor *t, size_t *N, int *R, int *d) {
  size_t n = 1;
  for (int i = 0; i + 2 < t->ndim; i++) n *= (size_t)t->shape[i];
  *N = n;
  *R = t->shape[t->ndim - 2];
  *d = t->shape[t->ndim - 1];
}

int gl_kv_copy_rows(gl_tensor *dst, int at, const gl_tensor *src, int from, int n) {
  const char *op = "kv_copy_rows";
  char b1[128], b2[128];
  if (gl_grad_enabled() && dst->requires_grad)
    return gl_fail(GL_ESTATE, "%s: in-place change of a tensor that requires grad "
                              "(use glimpse.no_grad or detach())", op);
  int same = dst->ndim == src->ndim && dst->ndim >= 2;
  for (int i = 0; same && i < dst->ndim; i++)
    if (i != dst->ndim - 2 && dst->shape[i] != src->shape[i]) same = 0;
  if (!same)
    return gl_fail(GL_ESHAPE, "%s: dst %s and src %s should be (..., R, d) with the same "
                   "leading dims and d", op, SHAPE(b1, dst), SHAPE(b2, src));
  size_t N;
  int Rd, Rs, d;
  rows_view(dst, &N, &Rd, &d);
  rows_view(src, &N, &Rs, &d);
  if (n < 0 || at < 0 || from < 0 || at > Rd - n || from > Rs - n)
    return gl_fail(GL_EARG, "%s: rows [%d, %d) of src %s into rows [%d, %d) of dst %s are "
                   "out of range", op, from, from + n, SHAPE(b1, src), at, at + n,
                   SHAPE(b2, dst));
  size_t len = (size_t)n * d;
  for (size_t b = 0; b < N && len; b++)
    memmove(dst->data + (b * Rd + at) * d, src->data + (b * Rs + from) * d,
            len * sizeof(float));
  gl_touch(dst);
  return GL_OK;
}

typedef struct {
  const float *q, *k, *v, *mask;
  float *P, *ctx;
  int Tq, cap, len, d, heads, off;
  float scale;
} mh_cached_ctx;

/* rows r = n Tq + i: P_r = softmax over the visible keys, ctx_r = P_r V */
static void mh_cached_range(void *ctx, size_t lo, size_t hi, int slot) {
  (void)slot;
  const mh_cached_ctx *c = ctx;
  int Tq = c->Tq, len = c->len, d = c->d;
  for (size_t r = lo; r < hi; r++) {
    size_t nn = r / (size_t)Tq;
    int i = (int)(r % (size_t)Tq);
    const float *qr = c->q + r * d, *kb = c->k + nn * c->cap * d, *vb = c->v + nn * c->cap * d;
    const float *mb = c->mask ? c->mask + (nn / (size_t)c->heads) * len : NULL;
    float *pr = c->P + r * len, *cr = c->ctx + r * d;
    int lim = c->off >= 0 && c->off + i + 1 < len ? c->off + i + 1 : len;
    for (int j = 0; j < lim; j++) pr[j] = vm_dot(qr, kb + (size_t)j * d, (size_t)d);
    gl_attn_softmax_row(pr, pr, len, lim, mb, c->scale);
    for (int e = 0; e < d; e++) cr[e] = 0.0f;
    for (int j = 0; j < lim; j++) {
      float p = pr[j];
      if (p == 0.0f) continue;
      const float *vr = vb + (size_t)j * d;
      for (int e = 0; e < d; e++) cr[e] += p * vr[e];
    }
  }
}

int gl_attn_mh_cached(gl_tensor **ctx, gl_tensor **probs, const gl_tensor *q, const gl_tensor *k,
                      const gl_tensor *v, int len, const gl_tensor *mask, int heads, int off,
                      float scale) {
  const char *op = "attn_mh_cached";
  char b1[128], b2[128], b3[128];
  if (q->ndim != 3 || k->ndim != 3 || v->ndim != 3 || k->shape[0] != q->shape[0] ||
      v->shape[0] != q->shape[0] || k->shape[2] != q->shape[2] || v->shape[2] != q->shape[2] ||
      v->shape[1] != k->shape[1])
    return gl_fail(GL_ESHAPE, "%s: q %s, k %s and v %s should be (N,Tq,d), (N,cap,d) and "
                   "(N,cap,d)", op, SHAPE(b1, q), SHAPE(b2, k), SHAPE(b3, v));
  int N = q->shape[0], Tq = q->shape[1], cap = k->shape[1], d = q->shape[2];
  if (len < 0 || len > cap)
    return gl_fail(GL_EARG, "%s: %d valid rows in buffers of %d", op, len, cap);
  if (heads < 1 || N % heads)
    return gl_fail(GL_EARG, "%s: %d rows are not a multiple of %d heads", op, N, heads);
  if (mask && (mask->ndim != 2 || mask->shape[0] != N / heads || mask->shape[1] != len))
    return gl_fail(GL_ESHAPE, "%s: key padding mask %s should be (B,len) = [%d,%d]", op,
                   SHAPE(b1, mask), N / heads, len);
  int st;
  if ((st = gl_empty(probs, 3, (int[]){N, Tq, len}))) return st;
  if ((st = gl_empty(ctx, 3, (int[]){N, Tq, d}))) {
    gl_release(*probs);
    *probs = NULL;
    return st;
  }
  mh_cached_ctx c = {q->data, k->data, v->data, mask ? mask->data : NULL, (*probs)->data,
                     (*ctx)->data, Tq, cap, len, d, heads, off, scale};
  gl_parallel_for((size_t)N * Tq, (size_t)len * (size_t)(2 * d + 8), mh_cached_range, &c);
  return GL_OK;
}
