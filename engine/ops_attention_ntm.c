/* ops_attention_ntm.c -- the addressing steps of the Neural Turing Machine (Graves et al.
 * 2014, section 3.3) that do not compose well from core ops:
 *
 *   gl_attn_cosine          content scores e_bn = beta_b cos(k_b, M_bn)   (eq. 5-6 before the
 *                           softmax; also the "cosine" score of the attention library)
 *   gl_attn_circular_shift  w~_i = sum_j w_j s_(i - j mod N)               (eq. 8)
 *   gl_attn_sharpen         w_i = w~_i^gamma / sum_j w~_j^gamma           (eq. 9)
 *
 * The interpolation gate, read, erase and add are plain broadcasting arithmetic and live in
 * bindings/glimpse/attention.lua.  Sharpening works in log space (softmax of gamma log w~) so
 * large gamma never overflows and zero weights stay exactly zero.
 */
#include "glimpse_internal.h"

#include <math.h>
#include <string.h>

#define SHAPE(buf, t) gl_shape_str(buf, sizeof buf, (t)->ndim, (t)->shape)
#define COS_EPS 1e-8f


/* the NTM ops' saved state: batch B, memory slots N, and k = the key width D (cosine) or
 * the shift kernel width S (circular shift); unused (0) by sharpen */
typedef struct { int B, N, k; } ntm_state;

/* ------------------------------------------------------------------------ */
/* cosine: k (B,D), mem (B,N,D), beta (B) or NULL (= 1) -> e (B,N) = beta_b cos(k_b, M_bn)
 * cos = k.m / (|k|' |m|')  with |x|' = max(|x|, eps)
 * backward: gbeta_b += sum_n ge_bn cos_bn;  c_bn = ge_bn beta_b
 *           gk_b  += sum_n c_bn (m_bn / (|k|'|m|') - cos_bn k_b / |k|^2 [|k| > eps])
 *           gm_bn += c_bn (k_b / (|k|'|m|') - cos_bn m_bn / |m|^2 [|m| > eps]) */

static float norm2(const float *x, int D) {
  double s = 0;
  for (int d = 0; d < D; d++) s += (double)x[d] * x[d];
  return (float)sqrt(s);
}

static int cosine_backward(gl_node *n, gl_tensor **gout) {
  const ntm_state *ns = GL_NODE_STATE(n, ntm_state);
  int B = ns->B, N = ns->N, D = ns->k;
  const float *k = n->in[0]->data, *m = n->in[1]->data, *cs = n->saved[0]->data;
  const float *ge = gout[0]->data;
  gl_tensor *beta = n->nin > 2 ? n->in[2] : NULL;
  gl_tensor *gk = gl_grad_of(n, 0), *gm = gl_grad_of(n, 1);
  gl_tensor *gb = beta ? gl_grad_of(n, 2) : NULL;
  for (int b = 0; b < B; b++) {
    const float *kb = k + (size_t)b * D;
    float nk = norm2(kb, D), nk_ = nk > COS_EPS ? nk : COS_EPS;
    float bb = beta ? beta->data[b] : 1.0f;
    for (int i = 0; i < N; i++) {
      size_t bi = (size_t)b * N + i;
      if (gb) gb->data[b] += ge[bi] * cs[bi];
      float c = ge[bi] * bb;
      if (c == 0) continue;
      const float *mi = m + bi * D;
      float nm = norm2(mi, D), nm_ = nm > COS_EPS ? nm : COS_EPS;
      float inv = 1.0f / (nk_ * nm_);
      float ck = nk > COS_EPS ? cs[bi] / (nk * nk) : 0.0f;
      float cm = nm > COS_EPS ? cs[bi] / (nm * nm) : 0.0f;
      if (gk) {
        float *g = gk->data + (size_t)b * D;
        for (int d = 0; d < D; d++) g[d] += c * (mi[d] * inv - ck * kb[d]);
      }
      if (gm) {
        float *g = gm->data + bi * D;
        for (int d = 0; d < D; d++) g[d] += c * (kb[d] * inv - cm * mi[d]);
      }
    }
  }
  return GL_OK;
}

static const gl_op op_attn_cosine = {"attn_cosine", cosine_backward};

int gl_attn_cosine(gl_tensor **scores, gl_tensor *k, gl_tensor *mem, gl_tensor *beta) {
  char b1[128], b2[128], b3[128];
  int st;
  if (k->ndim != 2 || mem->ndim != 3 || mem->shape[0] != k->shape[0] ||
      mem->shape[2] != k->shape[1])
    return gl_fail(GL_ESHAPE, "attn_cosine: key %s and memory %s should be (B,D) and (B,N,D)",
                   SHAPE(b1, k), SHAPE(b2, mem));
  int B = mem->shape[0], N = mem->shape[1], D = mem->shape[2];
  if (beta && beta->numel != (size_t)B)
    return gl_fail(GL_ESHAPE, "attn_cosine: beta %s should hold one strength per row (B=%d), "
                   "memory %s", SHAPE(b3, beta), B, SHAPE(b2, mem));
  gl_tensor *cs = NULL;
  if ((st = gl_empty(&cs, 2, (int[]){B, N}))) return st;
  if ((st = gl_empty(scores, 2, (int[]){B, N}))) { gl_release(cs); return st; }
  for (int b = 0; b < B; b++) {
    const float *kb = k->data + (size_t)b * D;
    float nk = norm2(kb, D);
    if (nk < COS_EPS) nk = COS_EPS;
    float bb = beta ? beta->data[b] : 1.0f;
    for (int i = 0; i < N; i++) {
      const float *mi = mem->data + ((size_t)b * N + i) * D;
      float nm = norm2(mi, D);
      if (nm < COS_EPS) nm = COS_EPS;
      double dot = 0;
      for (int d = 0; d < D; d++) dot += (double)kb[d] * mi[d];
      float c = (float)(dot / ((double)nk * nm));
      cs->data[(size_t)b * N + i] = c;
      (*scores)->data[(size_t)b * N + i] = bb * c;
    }
  }
  gl_tensor *in[3] = {k, mem, beta};
  gl_node *n = gl_record(&op_attn_cosine, beta ? 3 : 2, in, 1, scores);
  if (n) {
    gl_save(n, cs);
    *GL_NODE_STATE(n, ntm_state) = (ntm_state){B, N, D};
  }
  gl_release(cs);
  return GL_OK;
}

/* ------------------------------------------------------------------------ */
/* circular shift: w (B,N), s (B,S), S odd, shifts -K..K with K = (S-1)/2
 *   out_bi = sum_k s_b(k+K) w_b((i - k) mod N)        (a one-hot s at k = +1 moves w up one slot)
 * backward: gw_b((i - k) mod N) += g_bi s_b(k+K);  gs_b(k+K) += sum_i g_bi w_b((i - k) mod N) */

static int wrap(int i, int N) {
  int r = i % N;
  return r < 0 ? r + N : r;
}

static int shift_backward(gl_node *n, gl_tensor **gout) {
  const ntm_state *ns = GL_NODE_STATE(n, ntm_state);
  int B = ns->B, N = ns->N, S = ns->k, K = (S - 1) / 2;
  const float *w = n->in[0]->data, *s = n->in[1]->data, *g = gout[0]->data;
  gl_tensor *gw = gl_grad_of(n, 0), *gs = gl_grad_of(n, 1);
  for (int b = 0; b < B; b++)
    for (int k = -K; k <= K; k++) {
      float sk = s[(size_t)b * S + k + K];
      double acc = 0;
      for (int i = 0; i < N; i++) {
        int j = wrap(i - k, N);
        float gi = g[(size_t)b * N + i];
        if (gw) gw->data[(size_t)b * N + j] += gi * sk;
        acc += (double)gi * w[(size_t)b * N + j];
      }
      if (gs) gs->data[(size_t)b * S + k + K] += (float)acc;
    }
  return GL_OK;
}

static const gl_op op_attn_shift = {"attn_circular_shift", shift_backward};

int gl_attn_circular_shift(gl_tensor **out, gl_tensor *w, gl_tensor *s) {
  char b1[128], b2[128];
  int st;
  if (w->ndim != 2 || s->ndim != 2 || s->shape[0] != w->shape[0] || s->shape[1] % 2 == 0 ||
      w->shape[1] < 1)
    return gl_fail(GL_ESHAPE, "attn_circular_shift: weights %s and kernel %s should be (B,N) "
                   "and (B,S) with S odd", SHAPE(b1, w), SHAPE(b2, s));
  int B = w->shape[0], N = w->shape[1], S = s->shape[1], K = (S - 1) / 2;
  if ((st = gl_zeros(out, 2, w->shape))) return st;
  float *o = (*out)->data;
  for (int b = 0; b < B; b++)
    for (int k = -K; k <= K; k++) {
      float sk = s->data[(size_t)b * S + k + K];
      if (sk == 0) continue;
      for (int i = 0; i < N; i++) o[(size_t)b * N + i] += sk * w->data[(size_t)b * N + wrap(i - k, N)];
    }
  gl_tensor *in[2] = {w, s};
  gl_node *n = gl_record(&op_attn_shift, 2, in, 1, out);
  if (n) {
    *GL_NODE_STATE(n, ntm_state) = (ntm_state){B, N, S};
  }
  return GL_OK;
}

/* ------------------------------------------------------------------------ */
/* sharpen: w (B,N) >= 0, gamma (B) -> out_bi = w_bi^g_b / sum_j w_bj^g_b
 * computed as softmax_i(z_bi), z_bi = g_b log w_bi over the positive entries (zeros stay zero)
 * backward: gz_bi = out_bi (gout_bi - sum_j gout_bj out_bj)
 *           gw_bi += gz_bi g_b / w_bi  (w_bi > 0);   ggamma_b += sum_i gz_bi log w_bi */

static int sharpen_backward(gl_node *n, gl_tensor **gout) {
  const ntm_state *ns = GL_NODE_STATE(n, ntm_state);
  int B = ns->B, N = ns->N;
  const float *w = n->in[0]->data, *gam = n->in[1]->data, *y = n->saved[0]->data;
  const float *g = gout[0]->data;
  gl_tensor *gw = gl_grad_of(n, 0), *gg = gl_grad_of(n, 1);
  for (int b = 0; b < B; b++) {
    const float *yb = y + (size_t)b * N, *gb = g + (size_t)b * N, *wb = w + (size_t)b * N;
    double dot = 0;
    for (int i = 0; i < N; i++) dot += (double)gb[i] * yb[i];
    double acc = 0;
    for (int i = 0; i < N; i++) {
      if (!(wb[i] > 0) || yb[i] == 0) continue;
      float gz = yb[i] * (gb[i] - (float)dot);
      if (gw) gw->data[(size_t)b * N + i] += gz * gam[b] / wb[i];
      acc += (double)gz * logf(wb[i]);
    }
    if (gg) gg->data[b] += (float)acc;
  }
  return GL_OK;
}

static const gl_op op_attn_sharpen = {"attn_sharpen", sharpen_backward};

int gl_attn_sharpen(gl_tensor **out, gl_tensor *w, gl_tensor *gamma) {
  char b1[128], b2[128];
  int st;
  if (w->ndim != 2 || gamma->numel != (size_t)w->shape[0])
    return gl_fail(GL_ESHAPE, "attn_sharpen: weights %s should be (B,N) and gamma %s hold B "
                   "values", SHAPE(b1, w), SHAPE(b2, gamma));
  int B = w->shape[0], N = w->shape[1];
  for (size_t i = 0; i < w->numel; i++)
    if (w->data[i] < 0 || !isfinite(w->data[i]))
      return gl_fail(GL_EVALUE, "attn_sharpen: weights must be finite and >= 0 (got %g)",
                     (double)w->data[i]);
  if ((st = gl_empty(out, 2, w->shape))) return st;
  for (int b = 0; b < B; b++) {
    const float *wb = w->data + (size_t)b * N;
    float *yb = (*out)->data + (size_t)b * N;
    float gm = gamma->data[b], mx = -INFINITY;
    for (int i = 0; i < N; i++)
      if (wb[i] > 0 && gm * logf(wb[i]) > mx) mx = gm * logf(wb[i]);
    double sum = 0;
    for (int i = 0; i < N; i++) {
      yb[i] = wb[i] > 0 && mx > -INFINITY ? expf(gm * logf(wb[i]) - mx) : 0.0f;
      sum += yb[i];
    }
    float inv = sum > 0 ? (float)(1.0 / sum) : 0.0f;
    for (int i = 0; i < N; i++) yb[i] *= inv;
  }
  gl_tensor *in[2] = {w, gamma};
  gl_node *n = gl_record(&op_attn_sharpen, 2, in, 1, out);
  if (n) {
    gl_tensor *al = gl_alias(*out);
    gl_save(n, al);
    gl_release(al);
    *GL_NODE_STATE(n, ntm_state) = (ntm_state){B, N, 0};
  }
  return GL_OK;
}
