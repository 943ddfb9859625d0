/* ops_sample.c -- sampling from the seeded generator: categorical (multinomial) draws and
 * Bernoulli draws.  Used by hard attention, dropout-like noise and decoding. */
#include "glimpse_internal.h"

#include <math.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* multinomial: probs (..., K) -> (..., n) 0-based indices; rows need not be normalised */

int gl_multinomial(gl_tensor **out, const gl_tensor *probs, int n, int replacement) {
  char b[128];
  if (probs->ndim < 1 || probs->shape[probs->ndim - 1] < 1)
    return gl_fail(GL_ESHAPE, "multinomial: probabilities %s need a non-empty last dim",
                   gl_shape_str(b, sizeof b, probs->ndim, probs->shape));
  int K = probs->shape[probs->ndim - 1];
  if (n < 1) return gl_fail(GL_EARG, "multinomial: number of samples %d must be >= 1", n);
  if (!replacement && n > K)
    return gl_fail(GL_EARG, "multinomial: %d samples without replacement from %d categories", n, K);
  size_t R = probs->numel / (size_t)K;
  for (size_t r = 0; r < R; r++) {
    double s = 0;
    for (int k = 0; k < K; k++) {
      float v = probs->data[r * K + k];
      if (!(v >= 0) || !isfinite(v))
        return gl_fail(GL_EVALUE, "multinomial: row %zu has an invalid probability %g", r + 1, (double)v);
      s += v;
    }
    if (!(s > 0)) return gl_fail(GL_EVALUE, "multinomial: row %zu sums to 0", r + 1);
  }
  int shape[GL_MAX_DIMS];
  memcpy(shape, probs->shape, sizeof shape);
  shape[probs->ndim - 1] = n;
  int st = gl_empty(out, probs->ndim, shape);
  if (st) return st;
  float *w = gl_scratch_alloc((size_t)K);
  if (!w) return gl_fail(GL_ENOMEM, "multinomial: out of memory");
  for (size_t r = 0; r < R; r++) {
    memcpy(w, probs->data + r * K, sizeof(float) * (size_t)K);
    for (int j = 0; j < n; j++) {
      double s = 0;
      for (int k = 0; k < K; k++) s += w[k];
      double u = gl_rand_uniform() * s, c = 0;
      int pick = -1;
      for (int k = 0; k < K; k++) {
        if (w[k] <= 0) continue;
        c += w[k];
        pick = k;
        if (u < c) break;
      }
      if (pick < 0) pick = 0; /* only without replacement once all weight is used */
      (*out)->data[r * (size_t)n + j] = (float)pick;
      if (!replacement) w[pick] = 0;
    }
  }
  gl_scratch_free(w, (size_t)K);
  return GL_OK;
}

/* ------------------------------------------------------------------------ */
/* bernoulli: out_i = 1 with probability p_i */

int gl_bernoulli(gl_tensor **out, const gl_tensor *p) {
  for (size_t i = 0; i < p->numel; i++)
    if (!(p->data[i] >= 0 && p->data[i] <= 1))
      return gl_fail(GL_EVALUE, "bernoulli: probability %g at element %zu is not in [0,1]",
                     (double)p->data[i], i + 1);
  int st = gl_empty_like(out, p);
  if (st) return st;
  for (size_t i = 0; i < p->numel; i++) (*out)->data[i] = gl_rand_uniform() < p->data[i] ? 1.0f : 0.0f;
  return GL_OK;
}

/* ------------------------------------------------------------------------ */
/* beam search's candidates: per item, the n best (score, beam, token) of K rows */

/* candidate (s1, k1, v1) ranks below (s2, k2, v2) */
static int worse(double s1, int k1, int v1, double s2, int k2, int v2) {
  if (s1 != s2) return s1 < s2;
  if (k1 != k2) return k1 > k2;
  return v1 > v2;
}

int gl_beam_candidates(const gl_tensor *lp, const double *scores, int K, int n, double *out_s,
                       int *out_k, int *out_v, int *count, int *positive) {
  char b[128];
  if (lp->ndim != 2)
    return gl_fail(GL_ESHAPE, "beam_candidates: log-probabilities must be (rows, vocab), got %s",
                   gl_shape_str(b, sizeof b, lp->ndim, lp->shape));
  if (K < 1 || n < 1) return gl_fail(GL_EARG, "beam_candidates: beam %d and n %d must be >= 1", K, n);
  int N = lp->shape[0], V = lp->shape[1];
  if (N % K)
    return gl_fail(GL_ESHAPE, "beam_candidates: %d rows are not a whole number of beams of %d", N, K);
  *positive = 0;
  for (int a = 0; a < N / K; a++) {
    double *cs = out_s + (size_t)a * n;
    int *ck = out_k + (size_t)a * n, *cv = out_v + (size_t)a * n, size = 0;
    for (int k = 0; k < K; k++) {
      double sk = scores[(size_t)a * K + k];
      if (!(sk > -INFINITY)) continue;
      const float *row = lp->data + ((size_t)a * K + k) * V;
      for (int v = 0; v < V; v++) {
        float x = row[v];
        if (x > 0) *positive = 1;
        double s = sk + (double)x;
        if (!(s > -INFINITY)) continue;
        if (size == n && !worse(cs[size - 1], ck[size - 1], cv[size - 1], s, k, v)) continue;
        int i = size < n ? size++ : size - 1;   /* a new slot, or the worst's */
        while (i > 0 && worse(cs[i - 1], ck[i - 1], cv[i - 1], s, k, v)) {
          cs[i] = cs[i - 1], ck[i] = ck[i - 1], cv[i] = cv[i - 1];
          i--;
        }
        cs[i] = s, ck[i] = k, cv[i] = v;
      }
    }
    count[a] = size;
  }
  return GL_OK;
}
