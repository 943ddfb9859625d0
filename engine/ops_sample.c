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
