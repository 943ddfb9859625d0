/* ops_attention.c -- the per-step attention hot path as fused ops with hand-written
 * backward, and the batched-sgemm core of multi-head attention.
 *
 * A decoder step of attention is score -> mask -> normalise -> context.  Composed from core
 * ops that is a dozen nodes and as many temporaries per step; here it is one node per step:
 *
 *   gl_attn_additive  e_bl = v . tanh(Wq_b + Uk_bl)        (Bahdanau; also Luong's concat and
 *                                                          Chorowski's location-aware score,
 *                                                          whose extra terms the caller adds to Uk)
 *   gl_attn_dot       e_bl = scale * q_b . k_bl            (dot, scaled_dot, and general with the
 *                                                          keys projected once per sequence)
 *   gl_attn_context   e given                              (any other score: concat, cosine,
 *                                                          location, composed from core ops)
 *
 * each followed by the same normalise-and-read tail:
 *
 *   p_bl     = m_bl exp(e_bl / T) / sum_j m_bj exp(e_bj / T)          normaliser "softmax"
 *            = m_bl sig(e_bl / T) / sum_j m_bj sig(e_bj / T)          normaliser "sigmoid"
 *                                           (the smoothing of Chorowski et al. 2015)
 *   alpha_bl = p_bl * prior_bl     (prior optional: local attention's Gaussian window)
 *   ctx_bd   = sum_l alpha_bl values_bld
 *
 * Masked positions (m == 0) get exactly zero weight and a row with every position masked is
 * all zeros (weights and context).  A NaN (or +inf) score among the visible positions makes
 * the row's weights and context NaN, as in PyTorch, instead of passing for a masked row.  The ops have two outputs, ctx (B,Dv) and alpha (B,L); gradients flow from both.
 *
 * The multi-head core is in ops_attention_mh.c.
 *
 * Threads: the tails, the additive scores and their gradients run on the pool (parallel.h)
 * by batch rows b; the one sum over all rows (the additive score's gv) stays on one thread.
 */
#include "ops_attention.h"
#include "parallel.h"
#include "vmath.h"

#include <math.h>
#include <string.h>

#define SHAPE(buf, t) gl_shape_str(buf, sizeof buf, (t)->ndim, (t)->shape)

/* ------------------------------------------------------------------------ */
/* shared: argument checks, normalise-and-read forward and backward */

typedef struct {
  int B, L, Dv;
  float inv_t;   /* 1 / temperature */
  int norm;      /* GL_ATTN_SOFTMAX or GL_ATTN_SIGMOID */
} tail_geom;

/* The fused ops' saved state: the tail's geometry, where each saved tensor lives in
 * n->saved (at[SI_...], -1: not saved), and the score's own scalar (dot's scale). */
enum { SI_ALPHA = 0, SI_P, SI_S, SI_MASK, SI_EXTRA, SI_COUNT };
typedef struct {
  tail_geom g;
  signed char at[SI_COUNT];
  float scale;
} attn_state;

static int check_opts(const char *op, const gl_attn_opts *o, float *inv_t, int *norm) {
  *inv_t = 1.0f;
  *norm = GL_ATTN_SOFTMAX;
  if (!o) return GL_OK;
  if (!(o->temperature > 0) || !isfinite(o->temperature))
    return gl_fail(GL_EARG, "%s: temperature must be positive and finite, got %g", op,
                   (double)o->temperature);
  if (o->normaliser != GL_ATTN_SOFTMAX && o->normaliser != GL_ATTN_SIGMOID)
    return gl_fail(GL_EARG, "%s: unknown normaliser %d", op, o->normaliser);
  *inv_t = 1.0f / o->temperature;
  *norm = o->normaliser;
  return GL_OK;
}

/* values (B,L,Dv), mask/prior (B,L) or NULL */
static int check_tail(const char *op, const gl_tensor *values, const gl_tensor *mask,
                      const gl_tensor *prior, int B, int L) {
  char b1[128], b2[128];
  if (values->ndim != 3 || values->shape[0] != B || values->shape[1] != L)
    return gl_fail(GL_ESHAPE, "%s: values %s should be (B,L,Dv) with B=%d, L=%d", op,
                   SHAPE(b1, values), B, L);
  if (mask && (mask->ndim != 2 || mask->shape[0] != B || mask->shape[1] != L))
    return gl_fail(GL_ESHAPE, "%s: mask %s should be (B,L) = [%d,%d] (values %s)", op,
                   SHAPE(b1, mask), B, L, SHAPE(b2, values));
  if (prior && (prior->ndim != 2 || prior->shape[0] != B || prior->shape[1] != L))
    return gl_fail(GL_ESHAPE, "%s: prior %s should be (B,L) = [%d,%d]", op, SHAPE(b1, prior), B,
                   L);
  return GL_OK;
}

/* out[0..n) = the softmax of scale * in[j] over the positions j < lim that mask (NULL: every
 * one) leaves visible, 0 elsewhere; all zeros when nothing is visible (every position masked
 * or every visible score -inf).  A NaN among the visible scores, or a +inf (exp(inf - inf)),
 * makes every visible weight NaN, as PyTorch's softmax does: a diverging model must not look
 * like a masked one.  in == out is fine.  Straight passes over the row (max, exp, mask
 * select, sum, scale), so each vectorises. */
void gl_attn_softmax_row(const float *in, float *out, int n, int lim, const float *mask,
                         float scale) {
  float mx = -INFINITY;
  int nan = 0;
  if (mask) {
    for (int j = 0; j < lim; j++) {
      float x = in[j] * scale;
      if (mask[j] != 0) { nan |= x != x; mx = x > mx ? x : mx; }
    }
  } else {
    for (int j = 0; j < lim; j++) {
      float x = in[j] * scale;
      nan |= x != x;
      mx = x > mx ? x : mx;
    }
  }
  if (mx == -INFINITY && !nan) {
    memset(out, 0, sizeof(float) * (size_t)n);
    return;
  }
  if (nan || mx == INFINITY) {
    for (int j = 0; j < lim; j++) out[j] = mask && mask[j] == 0 ? 0.0f : NAN;
    for (int j = lim; j < n; j++) out[j] = 0.0f;
    return;
  }
  for (int j = 0; j < lim; j++) out[j] = vm_exp(in[j] * scale - mx);
  if (mask)
    for (int j = 0; j < lim; j++) out[j] = mask[j] != 0 ? out[j] : 0.0f;
  for (int j = lim; j < n; j++) out[j] = 0.0f;
  double sum = vm_sum_d(out, (size_t)lim);
  float inv = sum > 0 ? (float)(1.0 / sum) : 0.0f;
  for (int j = 0; j < lim; j++) out[j] *= inv;
}

/* e (B,L) -> p (and s, the sigmoids, when the normaliser is "sigmoid"), alpha, ctx */
typedef struct {
  const tail_geom *g;
  const float *e, *mask, *prior, *values;
  float *p, *s, *alpha, *ctx;
} tail_fwd_ctx;

static void tail_forward_range(void *c, size_t lo, size_t hi, int slot) {
  (void)slot;
  const tail_fwd_ctx *k = c;
  const tail_geom *g = k->g;
  const float *e = k->e, *mask = k->mask, *prior = k->prior, *values = k->values;
  float *p = k->p, *s = k->s, *alpha = k->alpha, *ctx = k->ctx;
  int L = g->L, Dv = g->Dv;
  for (int b = (int)lo; b < (int)hi; b++) {
    const float *eb = e + (size_t)b * L, *mb = mask ? mask + (size_t)b * L : NULL;
    float *pb = p + (size_t)b * L;
    if (g->norm == GL_ATTN_SOFTMAX) {
      gl_attn_softmax_row(eb, pb, L, L, mb, g->inv_t);
    } else {
      float *sb = s + (size_t)b * L;
      double sum = 0;
      for (int l = 0; l < L; l++) {
        float x = vm_sigmoid(eb[l] * g->inv_t);
        sb[l] = x;
        if (mb && mb[l] == 0) x = 0.0f;
        pb[l] = x;
        sum += x;
      }
      /* NaN scores give NaN sigmoids and a NaN sum: every visible weight NaN */
      float inv = sum > 0 ? (float)(1.0 / sum) : sum == 0 ? 0.0f : NAN;
      for (int l = 0; l < L; l++) pb[l] = mb && mb[l] == 0 ? 0.0f : pb[l] * inv;
    }
    float *ab = alpha + (size_t)b * L;
    if (prior) {
      const float *rb = prior + (size_t)b * L;
      for (int l = 0; l < L; l++) ab[l] = pb[l] * rb[l];
    } else if (ab != pb) {
      memcpy(ab, pb, sizeof(float) * (size_t)L);
    }
    float *cb = ctx + (size_t)b * Dv;
    memset(cb, 0, sizeof(float) * (size_t)Dv);
    for (int l = 0; l < L; l++) {
      float a = ab[l];
      if (a == 0) continue;
      const float *vl = values + ((size_t)b * L + l) * Dv;
      for (int d = 0; d < Dv; d++) cb[d] += a * vl[d];
    }
  }
}

static void tail_forward(const tail_geom *g, const float *e, const float *mask,
                         const float *prior, const float *values, float *p, float *s,
                         float *alpha, float *ctx) {
  tail_fwd_ctx c = {g, e, mask, prior, values, p, s, alpha, ctx};
  gl_parallel_for((size_t)g->B, (size_t)g->L * (2 * (size_t)g->Dv + 16), tail_forward_range, &c);
}

/* The tail's backward.  Restating the forward:
 *   ctx_bd = sum_l alpha_bl V_bld,  alpha = p * prior,  p = normalise(e / T)
 * derivatives:
 *   ga_bl  = galpha_bl + sum_d gctx_bd V_bld          (total gradient at alpha)
 *   gV_bld += alpha_bl gctx_bd
 *   gprior_bl += ga_bl p_bl,   gp_bl = ga_bl prior_bl
 *   softmax: ge_bl = p_bl (gp_bl - sum_j gp_bj p_bj) / T
 *   sigmoid: ge_bl = p_bl (1 - s_bl) (gp_bl - sum_j gp_bj p_bj) / T
 * ge (B,L) is written (not accumulated); the score's backward takes it from there. */
typedef struct {
  const tail_geom *g;
  const float *values, *alpha, *p, *s, *prior, *gctx, *galpha;
  float *gvalues, *gprior, *ge;
} tail_bwd_ctx;

static void tail_backward_range(void *c, size_t lo, size_t hi, int slot) {
  (void)slot;
  const tail_bwd_ctx *k = c;
  const tail_geom *g = k->g;
  const float *values = k->values, *alpha = k->alpha, *p = k->p, *s = k->s, *prior = k->prior;
  const float *gctx = k->gctx, *galpha = k->galpha;
  float *gvalues = k->gvalues, *gprior = k->gprior, *ge = k->ge;
  int L = g->L, Dv = g->Dv;
  for (int b = (int)lo; b < (int)hi; b++) {
    const float *gc = gctx + (size_t)b * Dv, *ab = alpha + (size_t)b * L;
    const float *pb = p + (size_t)b * L;
    float *geb = ge + (size_t)b * L;
    for (int l = 0; l < L; l++) {
      const float *vl = values + ((size_t)b * L + l) * Dv;
      geb[l] = galpha[(size_t)b * L + l] + vm_dot(gc, vl, (size_t)Dv);   /* ga for now */
      if (gvalues && ab[l] != 0) {
        float *gv = gvalues + ((size_t)b * L + l) * Dv;
        float a = ab[l];
        for (int d = 0; d < Dv; d++) gv[d] += a * gc[d];
      }
    }
    if (prior) {
      const float *rb = prior + (size_t)b * L;
      for (int l = 0; l < L; l++) {
        if (gprior) gprior[(size_t)b * L + l] += geb[l] * pb[l];
        geb[l] *= rb[l];
      }
    }
    double dot = 0;
    for (int l = 0; l < L; l++) dot += (double)geb[l] * pb[l];
    if (g->norm == GL_ATTN_SOFTMAX) {
      for (int l = 0; l < L; l++) geb[l] = pb[l] * (geb[l] - (float)dot) * g->inv_t;
    } else {
      const float *sb = s + (size_t)b * L;
      for (int l = 0; l < L; l++)
        geb[l] = pb[l] * (1.0f - sb[l]) * (geb[l] - (float)dot) * g->inv_t;
    }
  }
}

static void tail_backward(const tail_geom *g, const float *values, const float *alpha,
                          const float *p, const float *s, const float *prior, const float *gctx,
                          const float *galpha, float *gvalues, float *gprior, float *ge) {
  tail_bwd_ctx c = {g, values, alpha, p, s, prior, gctx, galpha, gvalues, gprior, ge};
  gl_parallel_for((size_t)g->B, (size_t)g->L * (4 * (size_t)g->Dv + 8), tail_backward_range, &c);
}

/* Allocate the outputs and the p/s buffers, run the tail, record the node.  `e` is the
 * score buffer (B,L) the caller filled.  in[] are the node's inputs; the value tensor is
 * in[vi], the prior in[pi] (may be NULL).  `extra` is a tensor the score's backward needs
 * (saved at SI_EXTRA), or NULL.  On success *node is the recorded node or NULL. */
static int tail_run(const gl_op *op, const tail_geom *g, const float *e, gl_tensor **ctx,
                    gl_tensor **alpha, int nin, gl_tensor **in, int vi, int pi,
                    const gl_tensor *mask, gl_tensor *extra, gl_node **node) {
  int st;
  int need = gl_needs_grad(nin, in);
  gl_tensor *prior = in[pi];
  *ctx = *alpha = NULL;
  *node = NULL;
  if ((st = gl_empty(ctx, 2, (int[]){g->B, g->Dv}))) return st;
  if ((st = gl_empty(alpha, 2, (int[]){g->B, g->L}))) goto fail;
  gl_tensor *p = NULL, *s = NULL;
  if (prior && (st = gl_empty(&p, 2, (int[]){g->B, g->L}))) goto fail;
  if (g->norm == GL_ATTN_SIGMOID && (st = gl_empty(&s, 2, (int[]){g->B, g->L}))) {
    gl_release(p);
    goto fail;
  }
  tail_forward(g, e, mask ? mask->data : NULL, prior ? prior->data : NULL, in[vi]->data,
               p ? p->data : (*alpha)->data, s ? s->data : NULL, (*alpha)->data, (*ctx)->data);
  if (need) {
    gl_tensor *outs[2] = {*ctx, *alpha};
    gl_node *n = gl_record(op, nin, in, 2, outs);
    if (n) {
      attn_state *as = GL_NODE_STATE(n, attn_state);
      signed char k = 0;
      for (int i = 0; i < SI_COUNT; i++) as->at[i] = -1;
      gl_tensor *al = gl_alias(*alpha);
      gl_save(n, al);
      gl_release(al);
      as->at[SI_ALPHA] = k++;
      if (p) { gl_save(n, p); as->at[SI_P] = k++; }
      if (s) { gl_save(n, s); as->at[SI_S] = k++; }
      if (mask) { gl_save(n, (gl_tensor *)mask); as->at[SI_MASK] = k++; }
      if (extra) { gl_save(n, extra); as->at[SI_EXTRA] = k++; }
      as->g = *g;
      as->scale = 1.0f;
    }
    *node = n;
  }
  gl_release(p);
  gl_release(s);
  return GL_OK;
fail:
  gl_release(*ctx);
  gl_release(*alpha);
  *ctx = *alpha = NULL;
  return st;
}

static gl_tensor *saved_at(gl_node *n, int slot) {
  int k = GL_NODE_STATE(n, attn_state)->at[slot];
  return k >= 0 ? n->saved[k] : NULL;
}

/* Common first half of each op's backward: ge (B,L) scratch, gradients of values/prior. */
static int tail_grad(gl_node *n, gl_tensor **gout, int vi, int pi, float **ge_out) {
  tail_geom g = GL_NODE_STATE(n, attn_state)->g;
  gl_tensor *alpha = saved_at(n, SI_ALPHA), *p = saved_at(n, SI_P), *s = saved_at(n, SI_S);
  gl_tensor *prior = n->in[pi];
  gl_tensor *gv = gl_grad_of(n, vi), *gp = prior ? gl_grad_of(n, pi) : NULL;
  size_t BL = (size_t)g.B * g.L;
  float *ge = gl_scratch_alloc(gl_attn_scratch_n(BL));
  if (!ge) return gl_fail(GL_ENOMEM, "%s backward: out of memory", n->op->name);
  tail_backward(&g, n->in[vi]->data, alpha->data, p ? p->data : alpha->data,
                s ? s->data : NULL, prior ? prior->data : NULL, gout[0]->data, gout[1]->data,
                gv ? gv->data : NULL, gp ? gp->data : NULL, ge);
  *ge_out = ge;
  return GL_OK;
}

/* ------------------------------------------------------------------------ */
/* additive (Bahdanau): wq (B,H), uk (B,L,H), v (H), values (B,L,Dv), mask (B,L), prior (B,L)
 *                      -> ctx (B,Dv), alpha (B,L)
 * forward: t_blh = tanh(wq_bh + uk_blh),  e_bl = sum_h v_h t_blh,  then the tail.
 * backward (from ge): gv_h += sum_bl ge_bl t_blh
 *                     d_blh = ge_bl v_h (1 - t_blh^2);  guk_blh += d_blh;  gwq_bh += sum_l d_blh */

/* The additive score's backward from ge (B,L), shared by both additive ops; gwq, guk, gv may
 * be NULL.  Each inner loop is a plain pass over H that vectorises. */
typedef struct {
  const float *ge, *t, *v, *wq, *uk;
  int L, H, keep;
  float *gwq, *guk, *e;
} additive_ctx;

/* guk and gwq for batch rows [lo, hi): each row's own */
static void additive_grad_range(void *ctx, size_t lo, size_t hi, int slot) {
  (void)slot;
  const additive_ctx *k = ctx;
  const float *ge = k->ge, *t = k->t, *v = k->v;
  int L = k->L, H = k->H;
  float *gwq = k->gwq, *guk = k->guk;
  for (int b = (int)lo; b < (int)hi; b++)
    for (int l = 0; l < L; l++) {
      float c = ge[(size_t)b * L + l];
      if (c == 0) continue;
      const float *restrict tl = t + ((size_t)b * L + l) * H;
      if (guk) {
        float *restrict g = guk + ((size_t)b * L + l) * H;
        for (int h = 0; h < H; h++) g[h] += c * v[h] * (1.0f - tl[h] * tl[h]);
      }
      if (gwq) {
        float *restrict g = gwq + (size_t)b * H;
        for (int h = 0; h < H; h++) g[h] += c * v[h] * (1.0f - tl[h] * tl[h]);
      }
    }
}

static void additive_grad(const float *ge, const float *t, const float *v, int B, int L, int H,
                          float *gwq, float *guk, float *gv) {
  if (gwq || guk) {
    additive_ctx c = {ge, t, v, NULL, NULL, L, H, 0, gwq, guk, NULL};
    gl_parallel_for((size_t)B, (size_t)L * H * 6, additive_grad_range, &c);
  }
  if (gv)   /* a sum over every (b, l): one thread, in order */
    for (int b = 0; b < B; b++)
      for (int l = 0; l < L; l++) {
        float c = ge[(size_t)b * L + l];
        if (c == 0) continue;
        const float *restrict tl = t + ((size_t)b * L + l) * H;
        float *restrict g = gv;
        for (int h = 0; h < H; h++) g[h] += c * tl[h];
      }
}

static float *data_or_null(gl_tensor *t) { return t ? t->data : NULL; }

static int additive_backward(gl_node *n, gl_tensor **gout) {
  float *ge = NULL;
  int st = tail_grad(n, gout, 3, 4, &ge);
  if (st) return st;
  const tail_geom *tg = &GL_NODE_STATE(n, attn_state)->g;
  int B = tg->B, L = tg->L;
  int H = n->in[2]->shape[0];
  additive_grad(ge, saved_at(n, SI_EXTRA)->data, n->in[2]->data, B, L, H,
                data_or_null(gl_grad_of(n, 0)), data_or_null(gl_grad_of(n, 1)),
                data_or_null(gl_grad_of(n, 2)));
  gl_scratch_free(ge, gl_attn_scratch_n((size_t)B * L));
  return GL_OK;
}

static const gl_op op_attn_additive = {"attn_additive", additive_backward};

static int check_additive(const char *op, const gl_tensor *wq, const gl_tensor *uk,
                          const gl_tensor *v) {
  char b1[128], b2[128], b3[128];
  if (wq->ndim != 2 || uk->ndim != 3 || v->ndim != 1 || uk->shape[0] != wq->shape[0] ||
      uk->shape[2] != wq->shape[1] || v->shape[0] != wq->shape[1])
    return gl_fail(GL_ESHAPE, "%s: Wq %s, Uk %s, v %s should be (B,H), (B,L,H), (H)", op,
                   SHAPE(b1, wq), SHAPE(b2, uk), SHAPE(b3, v));
  return GL_OK;
}

/* e_bl = sum_h v_h tanh(wq_bh + uk_blh); t (B,L,H) receives the tanh values (or holds a
 * scratch row of H floats per pool slot when the caller keeps nothing: then `keep` is 0) */
static void additive_scores_range(void *ctx, size_t lo, size_t hi, int slot) {
  const additive_ctx *k = ctx;
  int L = k->L, H = k->H;
  for (int b = (int)lo; b < (int)hi; b++) {
    const float *w = k->wq + (size_t)b * H;
    for (int l = 0; l < L; l++) {
      const float *u = k->uk + ((size_t)b * L + l) * H;
      float *tl = k->keep ? (float *)k->t + ((size_t)b * L + l) * H : (float *)k->t + (size_t)slot * H;
      for (int h = 0; h < H; h++) tl[h] = vm_tanh(w[h] + u[h]);
      k->e[(size_t)b * L + l] = vm_dot(k->v, tl, (size_t)H);
    }
  }
}

/* the number of scratch rows additive_scores needs in t when it keeps nothing */
static int additive_slots(void) { return gl_parallel_slots(); }

static void additive_scores(const float *wq, const float *uk, const float *v, int B, int L,
                            int H, float *e, float *t, int keep) {
  additive_ctx c = {NULL, t, v, wq, uk, L, H, keep, NULL, NULL, e};
  gl_parallel_for((size_t)B, (size_t)L * H * 12, additive_scores_range, &c);
}

int gl_attn_additive(gl_tensor **ctx, gl_tensor **alpha, gl_tensor *wq, gl_tensor *uk,
                     gl_tensor *v, gl_tensor *values, const gl_tensor *mask, gl_tensor *prior,
                     const gl_attn_opts *o) {
  const char *op = "attn_additive";
  int st, norm;
  float inv_t;
  if ((st = check_additive(op, wq, uk, v))) return st;
  int B = uk->shape[0], L = uk->shape[1], H = uk->shape[2];
  if ((st = check_tail(op, values, mask, prior, B, L))) return st;
  if ((st = check_opts(op, o, &inv_t, &norm))) return st;
  tail_geom g = {B, L, values->shape[2], inv_t, norm};
  gl_tensor *in[5] = {wq, uk, v, values, prior};
  gl_tensor *t = NULL, *e = NULL;
  int keep = gl_needs_grad(5, in);
  if ((st = keep ? gl_empty(&t, 3, uk->shape)
                 : gl_empty(&t, 1, (int[]){(H > 0 ? H : 1) * additive_slots()})))
    return st;
  if ((st = gl_empty(&e, 2, (int[]){B, L}))) { gl_release(t); return st; }
  additive_scores(wq->data, uk->data, v->data, B, L, H, e->data, t->data, keep);
  gl_node *n;
  st = tail_run(&op_attn_additive, &g, e->data, ctx, alpha, 5, in, 3, 4, mask, keep ? t : NULL,
                &n);
  gl_release(e);
  gl_release(t);
  return st;
}

/* ------------------------------------------------------------------------ */
/* additive scores alone: wq (B,H), uk (B,L,H), v (H) -> e (B,L)   (pointer networks)
 * backward: as above with ge = gout */

typedef struct { int B, L, H; } additive_scores_state;

static int additive_scores_backward(gl_node *n, gl_tensor **gout) {
  const additive_scores_state *as = GL_NODE_STATE(n, additive_scores_state);
  additive_grad(gout[0]->data, n->saved[0]->data, n->in[2]->data, as->B, as->L,
                as->H, data_or_null(gl_grad_of(n, 0)), data_or_null(gl_grad_of(n, 1)),
                data_or_null(gl_grad_of(n, 2)));
  return GL_OK;
}

static const gl_op op_attn_additive_scores = {"attn_additive_scores", additive_scores_backward};

int gl_attn_additive_scores(gl_tensor **e, gl_tensor *wq, gl_tensor *uk, gl_tensor *v) {
  int st;
  if ((st = check_additive("attn_additive_scores", wq, uk, v))) return st;
  int B = uk->shape[0], L = uk->shape[1], H = uk->shape[2];
  gl_tensor *in[3] = {wq, uk, v};
  gl_tensor *t = NULL;
  int keep = gl_needs_grad(3, in);
  if ((st = keep ? gl_empty(&t, 3, uk->shape)
                 : gl_empty(&t, 1, (int[]){(H > 0 ? H : 1) * additive_slots()})))
    return st;
  if ((st = gl_empty(e, 2, (int[]){B, L}))) { gl_release(t); return st; }
  additive_scores(wq->data, uk->data, v->data, B, L, H, (*e)->data, t->data, keep);
  gl_node *n = gl_record(&op_attn_additive_scores, 3, in, 1, e);
  if (n) {
    gl_save(n, t);
    *GL_NODE_STATE(n, additive_scores_state) = (additive_scores_state){B, L, H};
  }
  gl_release(t);
  return GL_OK;
}

/* ------------------------------------------------------------------------ */
/* dot: q (B,D), keys (B,L,D), values (B,L,Dv), mask, prior -> ctx (B,Dv), alpha (B,L)
 * forward: e_bl = scale sum_d q_bd k_bld, then the tail.  (scaled_dot: scale = 1/sqrt(D);
 *          general: keys = keys W^T projected once per sequence by the caller.)
 * backward (from ge): gq_bd += scale sum_l ge_bl k_bld;  gk_bld += scale ge_bl q_bd */

typedef struct {
  const float *q, *k, *ge;
  int L, D;
  float scale;
  float *gq, *gk;   /* backward; forward: gq is e */
} dot_ctx;

static void dot_grad_range(void *ctx, size_t lo, size_t hi, int slot) {
  (void)slot;
  const dot_ctx *x = ctx;
  int L = x->L, D = x->D;
  for (int b = (int)lo; b < (int)hi; b++)
    for (int l = 0; l < L; l++) {
      float c = x->scale * x->ge[(size_t)b * L + l];
      if (c == 0) continue;
      const float *kl = x->k + ((size_t)b * L + l) * D, *qb = x->q + (size_t)b * D;
      if (x->gq) {
        float *g = x->gq + (size_t)b * D;
        for (int d = 0; d < D; d++) g[d] += c * kl[d];
      }
      if (x->gk) {
        float *g = x->gk + ((size_t)b * L + l) * D;
        for (int d = 0; d < D; d++) g[d] += c * qb[d];
      }
    }
}

static void dot_scores_range(void *ctx, size_t lo, size_t hi, int slot) {
  (void)slot;
  const dot_ctx *x = ctx;
  int L = x->L, D = x->D;
  for (int b = (int)lo; b < (int)hi; b++) {
    const float *qb = x->q + (size_t)b * D;
    for (int l = 0; l < L; l++) {
      const float *kl = x->k + ((size_t)b * L + l) * D;
      x->gq[(size_t)b * L + l] = x->scale * vm_dot(qb, kl, (size_t)D);
    }
  }
}

static int dot_backward(gl_node *n, gl_tensor **gout) {
  float *ge = NULL;
  int st = tail_grad(n, gout, 2, 3, &ge);
  if (st) return st;
  const tail_geom *tg = &GL_NODE_STATE(n, attn_state)->g;
  int B = tg->B, L = tg->L;
  int D = n->in[0]->shape[1];
  float scale = GL_NODE_STATE(n, attn_state)->scale;
  const float *q = n->in[0]->data, *k = n->in[1]->data;
  gl_tensor *gq = gl_grad_of(n, 0), *gk = gl_grad_of(n, 1);
  dot_ctx c = {q, k, ge, L, D, scale, gq ? gq->data : NULL, gk ? gk->data : NULL};
  gl_parallel_for((size_t)B, (size_t)L * D * 4, dot_grad_range, &c);
  gl_scratch_free(ge, gl_attn_scratch_n((size_t)B * L));
  return GL_OK;
}

static const gl_op op_attn_dot = {"attn_dot", dot_backward};

int gl_attn_dot(gl_tensor **ctx, gl_tensor **alpha, gl_tensor *q, gl_tensor *keys,
                gl_tensor *values, const gl_tensor *mask, gl_tensor *prior, float scale,
                const gl_attn_opts *o) {
  const char *op = "attn_dot";
  char b1[128], b2[128];
  int st, norm;
  float inv_t;
  if (q->ndim != 2 || keys->ndim != 3 || keys->shape[0] != q->shape[0] ||
      keys->shape[2] != q->shape[1])
    return gl_fail(GL_ESHAPE, "%s: query %s and keys %s should be (B,D) and (B,L,D)", op,
                   SHAPE(b1, q), SHAPE(b2, keys));
  int B = keys->shape[0], L = keys->shape[1], D = keys->shape[2];
  if ((st = check_tail(op, values, mask, prior, B, L))) return st;
  if ((st = check_opts(op, o, &inv_t, &norm))) return st;
  tail_geom g = {B, L, values->shape[2], inv_t, norm};
  gl_tensor *e = NULL;
  if ((st = gl_empty(&e, 2, (int[]){B, L}))) return st;
  dot_ctx c = {q->data, keys->data, NULL, L, D, scale, e->data, NULL};
  gl_parallel_for((size_t)B, (size_t)L * D * 2, dot_scores_range, &c);
  gl_tensor *in[4] = {q, keys, values, prior};
  gl_node *n;
  st = tail_run(&op_attn_dot, &g, e->data, ctx, alpha, 4, in, 2, 3, mask, NULL, &n);
  if (n) GL_NODE_STATE(n, attn_state)->scale = scale;
  gl_release(e);
  return st;
}

/* ------------------------------------------------------------------------ */
/* context from given scores: e (B,L), values (B,L,Dv), mask, prior -> ctx (B,Dv), alpha (B,L)
 * backward: ge_bl += (the tail's ge) */

static void context_grad_range(void *ctx, size_t lo, size_t hi, int slot) {
  (void)slot;
  const dot_ctx *c = ctx;
  for (size_t i = lo; i < hi; i++) c->gq[i] += c->ge[i];
}

static int context_backward(gl_node *n, gl_tensor **gout) {
  float *ge = NULL;
  int st = tail_grad(n, gout, 1, 2, &ge);
  if (st) return st;
  const tail_geom *tg = &GL_NODE_STATE(n, attn_state)->g;
  size_t BL = (size_t)tg->B * tg->L;
  gl_tensor *gs = gl_grad_of(n, 0);
  if (gs) gl_parallel_for(BL, 1, context_grad_range, &(dot_ctx){NULL, NULL, ge, 0, 0, 0, gs->data, NULL});
  gl_scratch_free(ge, gl_attn_scratch_n(BL));
  return GL_OK;
}

static const gl_op op_attn_context = {"attn_context", context_backward};

int gl_attn_context(gl_tensor **ctx, gl_tensor **alpha, gl_tensor *scores, gl_tensor *values,
                    const gl_tensor *mask, gl_tensor *prior, const gl_attn_opts *o) {
  const char *op = "attn_context";
  char b1[128];
  int st, norm;
  float inv_t;
  if (scores->ndim != 2)
    return gl_fail(GL_ESHAPE, "%s: scores %s should be (B,L)", op, SHAPE(b1, scores));
  int B = scores->shape[0], L = scores->shape[1];
  if ((st = check_tail(op, values, mask, prior, B, L))) return st;
  if ((st = check_opts(op, o, &inv_t, &norm))) return st;
  tail_geom g = {B, L, values->shape[2], inv_t, norm};
  gl_tensor *in[3] = {scores, values, prior};
  gl_node *n;
  return tail_run(&op_attn_context, &g, scores->data, ctx, alpha, 3, in, 1, 2, mask, NULL, &n);
}
