/* ops_norm.c -- layer normalisation (over the last dim) and batch normalisation (over the
 * batch and every dim after the channel), each one fused op with a hand-written backward.
 *
 * Both normalise x to xhat = (x - mean) * rstd, rstd = 1/sqrt(var + eps) with the biased
 * variance, then scale and shift by an optional per-feature weight and bias.  The statistics
 * are taken in double (two passes) so float32 inputs with a large mean keep their precision;
 * mean and rstd are saved for backward.  Batch norm's running statistics are updated in place
 * in training mode (PyTorch's rule: the running variance takes the unbiased estimate).
 *
 * Threads (parallel.h): layer norm runs its rows on the pool (its weight and bias gradients,
 * sums over rows, stay on one thread), batch norm its channels, forward and backward.
 */

#include "glimpse_internal.h"
#include "parallel.h"

#include <math.h>
#include <string.h>

#define SHAPE(buf, t) gl_shape_str(buf, sizeof buf, (t)->ndim, (t)->shape)

/* the loops' shared arguments: x in, y out (forward; stats the table of mean and rstd), or
 * dy in, gx/gw/gb out (backward) */
typedef struct {
  const float *x, *w, *b, *dy;
  float *y, *stats, *gx, *gw, *gb, *rmean, *rvar;
  size_t B, C, S;   /* layer norm: C = D, the row width */
  int batch_stats, training, relu;   /* relu: batch_norm_eval_'s fused ReLU */
  float eps, momentum;
} norm_ctx;

/* Sums in double over 8 independent accumulators: no serial chain of dependent adds (which
 * made batch norm latency-bound), and the compiler can vectorise the 8 lanes. */
static double sum_f(const float *x, size_t n) {
  double a[8] = {0}, s = 0;
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; k++) a[k] += x[i + k];
  for (; i < n; i++) s += x[i];
  for (int k = 0; k < 8; k++) s += a[k];
  return s;
}

/* sum (x - mu)^2 */
static double sumsq_dev(const float *x, size_t n, double mu) {
  double a[8] = {0}, s = 0;
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; k++) {
      double d = x[i + k] - mu;
      a[k] += d * d;
    }
  for (; i < n; i++) s += (x[i] - mu) * (x[i] - mu);
  for (int k = 0; k < 8; k++) s += a[k];
  return s;
}

/* *sg += sum g,  *sgx += sum g * (x - mu) */
static void sum_and_dot(const float *g, const float *x, size_t n, float mu, double *sg,
                        double *sgx) {
  double a[8] = {0}, b[8] = {0}, s = 0, t = 0;
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; k++) {
      a[k] += g[i + k];
      b[k] += (double)g[i + k] * (x[i + k] - mu);
    }
  for (; i < n; i++) {
    s += g[i];
    t += (double)g[i] * (x[i] - mu);
  }
  for (int k = 0; k < 8; k++) {
    s += a[k];
    t += b[k];
  }
  *sg += s;
  *sgx += t;
}

/* A per-feature vector argument must be absent or have shape (n). */
static int check_vec(const char *op, const char *what, const gl_tensor *v, int n,
                     const gl_tensor *x) {
  char b1[128], b2[128];
  if (v && (v->ndim != 1 || v->shape[0] != n))
    return gl_fail(GL_ESHAPE, "%s: %s %s must be (%d) for input %s", op, what, SHAPE(b1, v), n,
                   SHAPE(b2, x));
  return GL_OK;
}

/* ------------------------------------------------------------------------ */
/* layer_norm: x (...,D), w (D) or NULL, b (D) or NULL -> y (...,D)
 *   per row: xhat = (x - mean) * rstd,  y = xhat * w + b   (Ba, Kiros & Hinton 2016)
 * backward of y = xhat*w + b, with g = dy * w:
 *   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),  dw += sum_rows dy*xhat,  db += sum_rows dy
 * saved: the (rows, 2) table of mean and rstd */

static void layer_norm_grad_range(void *ctx, size_t lo, size_t hi, int slot) {
  (void)slot;
  const norm_ctx *k = ctx;
  int D = (int)k->C;
  const float *w = k->w;
  for (size_t r = lo; r < hi; r++) {
    const float *xr = k->x + r * D, *dyr = k->dy + r * D;
    float mu = k->stats[2 * r], rs = k->stats[2 * r + 1];
    double sg = 0, sgx = 0;
    for (int j = 0; j < D; j++) {
      float g = dyr[j] * (w ? w[j] : 1.0f);
      sg += g;
      sgx += (double)g * (xr[j] - mu);
    }
    float mg = (float)(sg / D), mgx = (float)(sgx * rs / D);
    float *gxr = k->gx + r * D;
    for (int j = 0; j < D; j++) {
      float g = dyr[j] * (w ? w[j] : 1.0f);
      gxr[j] += rs * (g - mg - (xr[j] - mu) * rs * mgx);
    }
  }
}

static void layer_norm_range(void *ctx, size_t lo, size_t hi, int slot) {
  (void)slot;
  const norm_ctx *k = ctx;
  int D = (int)k->C;
  const float *w = k->w, *b = k->b;
  for (size_t r = lo; r < hi; r++) {
    const float *xr = k->x + r * D;
    double mu = sum_f(xr, (size_t)D) / D;
    double v = sumsq_dev(xr, (size_t)D, mu);
    float rs = (float)(1.0 / sqrt(v / D + k->eps));
    k->stats[2 * r] = (float)mu;
    k->stats[2 * r + 1] = rs;
    float *yr = k->y + r * D;
    for (int j = 0; j < D; j++) {
      float h = (xr[j] - (float)mu) * rs;
      yr[j] = h * (w ? w[j] : 1.0f) + (b ? b[j] : 0.0f);
    }
  }
}

static int layer_norm_backward(gl_node *n, gl_tensor **gout) {
  gl_tensor *x = n->in[0], *w = n->in[1];
  gl_tensor *gx = gl_grad_of(n, 0), *gw = gl_grad_of(n, 1), *gb = gl_grad_of(n, 2);
  const float *stats = n->saved[0]->data, *dy = gout[0]->data;
  int D = x->shape[x->ndim - 1];
  size_t rows = D ? x->numel / (size_t)D : 0;
  if (gw || gb)   /* sums over the rows: one thread, in order */
    for (size_t r = 0; r < rows; r++) {
      const float *xr = x->data + r * D, *dyr = dy + r * D;
      float mu = stats[2 * r], rs = stats[2 * r + 1];
      for (int j = 0; j < D; j++) {
        if (gw) gw->data[j] += dyr[j] * (xr[j] - mu) * rs;
        if (gb) gb->data[j] += dyr[j];
      }
    }
  if (gx) {
    norm_ctx c = {.x = x->data, .w = w ? w->data : NULL, .dy = dy, .stats = (float *)stats,
                  .gx = gx->data, .C = (size_t)D};
    gl_parallel_for(rows, 8 * (size_t)D, layer_norm_grad_range, &c);
  }
  return GL_OK;
}

static const gl_op op_layer_norm = {"layer_norm", layer_norm_backward};

int gl_layer_norm(gl_tensor **out, gl_tensor *x, gl_tensor *w, gl_tensor *b, float eps) {
  char b1[128];
  if (x->ndim < 1)
    return gl_fail(GL_ESHAPE, "layer_norm: input %s needs at least 1 dim", SHAPE(b1, x));
  if (!(eps >= 0)) return gl_fail(GL_EARG, "layer_norm: eps = %g must be >= 0", eps);
  int D = x->shape[x->ndim - 1], st;
  if ((st = check_vec("layer_norm", "weight", w, D, x))) return st;
  if ((st = check_vec("layer_norm", "bias", b, D, x))) return st;
  size_t rows = D ? x->numel / (size_t)D : 0;
  gl_tensor *stats;
  if ((st = gl_empty(&stats, 2, (int[]){(int)rows, 2}))) return st;
  if ((st = gl_empty_like(out, x))) { gl_release(stats); return st; }
  norm_ctx c = {.x = x->data, .w = w ? w->data : NULL, .b = b ? b->data : NULL,
                .y = (*out)->data, .stats = stats->data, .C = (size_t)D, .eps = eps};
  gl_parallel_for(rows, 8 * (size_t)D, layer_norm_range, &c);
  gl_tensor *in[3] = {x, w, b};
  gl_node *n = gl_record(&op_layer_norm, 3, in, 1, out);
  gl_save(n, stats);
  gl_release(stats);
  return GL_OK;
}

/* ------------------------------------------------------------------------ */
/* batch_norm: x (B,C,...) , w/b (C) or NULL, running_mean/var (C) or NULL -> y (B,C,...)
 * (Ioffe & Szegedy 2015).  Per channel c over the N = B * prod(spatial) values:
 *   training (or no running stats): mean, var = the batch's (biased var);
 *     running_mean = (1-m) running_mean + m mean,  running_var = (1-m) running_var + m var*N/(N-1)
 *   evaluation: mean, var = running_mean, running_var
 *   xhat = (x - mean) * rstd, rstd = 1/sqrt(var + eps),  y = xhat * w + b
 * backward of y = xhat*w + b, with g = dy * w:
 *   batch statistics: dx = rstd * (g - mean_c(g) - xhat * mean_c(g * xhat))
 *   fixed statistics: dx = rstd * g
 *   dw += sum_c dy*xhat,  db += sum_c dy
 * saved: the (C, 2) table of mean and rstd; state: whether batch statistics were used */
typedef struct { int batch_stats; } batch_norm_state;

static void bn_geom(const gl_tensor *x, size_t *B, size_t *C, size_t *S) {
  *B = (size_t)x->shape[0];
  *C = (size_t)x->shape[1];
  *S = 1;
  for (int i = 2; i < x->ndim; i++) *S *= (size_t)x->shape[i];
}

static void batch_norm_grad_range(void *ctx, size_t lo, size_t hi, int slot);

static int batch_norm_backward(gl_node *n, gl_tensor **gout) {
  gl_tensor *x = n->in[0], *w = n->in[1];
  gl_tensor *gx = gl_grad_of(n, 0), *gw = gl_grad_of(n, 1), *gb = gl_grad_of(n, 2);
  const float *stats = n->saved[0]->data, *dy = gout[0]->data;
  int batch_stats = GL_NODE_STATE(n, batch_norm_state)->batch_stats;
  size_t B, C, S;
  bn_geom(x, &B, &C, &S);
  norm_ctx k = {.x = x->data, .w = w ? w->data : NULL, .dy = dy, .stats = (float *)stats,
                .gx = gx ? gx->data : NULL, .gw = gw ? gw->data : NULL,
                .gb = gb ? gb->data : NULL, .B = B, .C = C, .S = S, .batch_stats = batch_stats};
  gl_parallel_for(C, 8 * B * S, batch_norm_grad_range, &k);
  return GL_OK;
}

static void batch_norm_grad_range(void *ctx, size_t lo, size_t hi, int slot) {
  (void)slot;
  const norm_ctx *k = ctx;
  size_t B = k->B, C = k->C, S = k->S;
  const float *stats = k->stats, *dy = k->dy, *xd = k->x;
  int batch_stats = k->batch_stats;
  double N = (double)B * S;
  for (size_t c = lo; c < hi; c++) {
    float mu = stats[2 * c], rs = stats[2 * c + 1], wc = k->w ? k->w[c] : 1.0f;
    double sdy = 0, sdyx = 0;
    for (size_t b = 0; b < B; b++)
      sum_and_dot(dy + (b * C + c) * S, xd + (b * C + c) * S, S, mu, &sdy, &sdyx);
    sdyx *= rs;
    if (k->gw) k->gw[c] += (float)sdyx;
    if (k->gb) k->gb[c] += (float)sdy;
    if (!k->gx) continue;
    float mg = batch_stats ? (float)(sdy * wc / N) : 0.0f;
    float mgx = batch_stats ? (float)(sdyx * wc / N) : 0.0f;
    for (size_t b = 0; b < B; b++) {
      const float *xp = xd + (b * C + c) * S, *dp = dy + (b * C + c) * S;
      float *gp = k->gx + (b * C + c) * S;
      for (size_t s = 0; s < S; s++)
        gp[s] += rs * (dp[s] * wc - mg - (xp[s] - mu) * rs * mgx);
    }
  }
}

static const gl_op op_batch_norm = {"batch_norm", batch_norm_backward};

static void batch_norm_range(void *ctx, size_t lo, size_t hi, int slot) {
  (void)slot;
  const norm_ctx *k = ctx;
  size_t B = k->B, C = k->C, S = k->S, N = B * S;
  for (size_t c = lo; c < hi; c++) {
    double mu, var;
    if (k->batch_stats) {
      double s = 0, v = 0;
      for (size_t bb = 0; bb < B; bb++) s += sum_f(k->x + (bb * C + c) * S, S);
      mu = N ? s / (double)N : 0.0;
      for (size_t bb = 0; bb < B; bb++) v += sumsq_dev(k->x + (bb * C + c) * S, S, mu);
      var = N ? v / (double)N : 0.0;
      if (k->training && k->rmean) {
        double unbiased = N > 1 ? v / (double)(N - 1) : var;
        k->rmean[c] = (float)((1 - k->momentum) * k->rmean[c] + k->momentum * mu);
        k->rvar[c] = (float)((1 - k->momentum) * k->rvar[c] + k->momentum * unbiased);
      }
    } else {
      mu = k->rmean[c];
      var = k->rvar[c];
    }
    float rs = (float)(1.0 / sqrt(var + k->eps)), m = (float)mu;
    if (k->stats) {
      k->stats[2 * c] = m;
      k->stats[2 * c + 1] = rs;
    }
    float wc = k->w ? k->w[c] : 1.0f, bc = k->b ? k->b[c] : 0.0f;
    for (size_t bb = 0; bb < B; bb++) {
      const float *xp = k->x + (bb * C + c) * S;   /* y may be x (batch_norm_eval_) */
      float *yp = k->y + (bb * C + c) * S;
      if (k->relu)
        for (size_t i = 0; i < S; i++) {
          float v = (xp[i] - m) * rs * wc + bc;
          yp[i] = v > 0 ? v : 0;
        }
      else
        for (size_t i = 0; i < S; i++) yp[i] = (xp[i] - m) * rs * wc + bc;
    }
  }
}

int gl_batch_norm(gl_tensor **out, gl_tensor *x, gl_tensor *w, gl_tensor *b,
                  gl_tensor *running_mean, gl_tensor *running_var, int training,
                  float momentum, float eps) {
  char b1[128];
  if (x->ndim < 2)
    return gl_fail(GL_ESHAPE, "batch_norm: input %s must be (B,C,...)", SHAPE(b1, x));
  if (!(eps >= 0)) return gl_fail(GL_EARG, "batch_norm: eps = %g must be >= 0", eps);
  if (!(momentum >= 0 && momentum <= 1))
    return gl_fail(GL_EARG, "batch_norm: momentum = %g is not in [0,1]", momentum);
  if ((running_mean == NULL) != (running_var == NULL))
    return gl_fail(GL_EARG, "batch_norm: give both running_mean and running_var, or neither");
  size_t B, C, S;
  bn_geom(x, &B, &C, &S);
  int st;
  if ((st = check_vec("batch_norm", "weight", w, (int)C, x)) ||
      (st = check_vec("batch_norm", "bias", b, (int)C, x)) ||
      (st = check_vec("batch_norm", "running_mean", running_mean, (int)C, x)) ||
      (st = check_vec("batch_norm", "running_var", running_var, (int)C, x)))
    return st;
  int batch_stats = training || !running_mean;
  size_t N = B * S;
  if (batch_stats && N < 2 && training)
    return gl_fail(GL_EVALUE, "batch_norm: input %s: expected more than 1 value per channel "
                              "when training", SHAPE(b1, x));
  gl_tensor *stats;
  if ((st = gl_empty(&stats, 2, (int[]){(int)C, 2}))) return st;
  if ((st = gl_empty_like(out, x))) { gl_release(stats); return st; }
  norm_ctx k = {.x = x->data, .w = w ? w->data : NULL, .b = b ? b->data : NULL,
                .y = (*out)->data, .stats = stats->data,
                .rmean = running_mean ? running_mean->data : NULL,
                .rvar = running_var ? running_var->data : NULL, .B = B, .C = C, .S = S,
                .batch_stats = batch_stats, .training = training, .eps = eps,
                .momentum = momentum};
  gl_parallel_for(C, 6 * N, batch_norm_range, &k);
  if (training && running_mean) {
    gl_touch(running_mean);
    gl_touch(running_var);
  }
  gl_tensor *in[3] = {x, w, b};
  gl_node *n = gl_record(&op_batch_norm, 3, in, 1, out);
  if (n) GL_NODE_STATE(n, batch_norm_state)->batch_stats = batch_stats;
  gl_save(n, stats);
  gl_release(stats);
  return GL_OK;
}

/* batch_norm_eval_: x = batch_norm(x) with the running statistics, then max(x, 0) when relu,
 * in place and outside the graph: inference's BN (+ ReLU) after a convolution in one pass
 * over the map, with no second map.  The same float operations as batch_norm's evaluation
 * (and relu), so the same bits. */
int gl_batch_norm_eval_(gl_tensor *x, gl_tensor *w, gl_tensor *b, gl_tensor *running_mean,
                        gl_tensor *running_var, float eps, int relu) {
  char b1[128];
  if (gl_grad_enabled())
    return gl_fail(GL_ESTATE, "batch_norm_eval_: works in place, only without a tape "
                              "(glimpse.no_grad)");
  if (x->ndim < 2)
    return gl_fail(GL_ESHAPE, "batch_norm_eval_: input %s must be (B,C,...)", SHAPE(b1, x));
  if (!(eps >= 0)) return gl_fail(GL_EARG, "batch_norm_eval_: eps = %g must be >= 0", eps);
  if (!running_mean || !running_var)
    return gl_fail(GL_EARG, "batch_norm_eval_: running_mean and running_var are needed");
  size_t B, C, S;
  bn_geom(x, &B, &C, &S);
  int st;
  if ((st = check_vec("batch_norm_eval_", "weight", w, (int)C, x)) ||
      (st = check_vec("batch_norm_eval_", "bias", b, (int)C, x)) ||
      (st = check_vec("batch_norm_eval_", "running_mean", running_mean, (int)C, x)) ||
      (st = check_vec("batch_norm_eval_", "running_var", running_var, (int)C, x)))
    return st;
  norm_ctx k = {.x = x->data, .w = w ? w->data : NULL, .b = b ? b->data : NULL,
                .y = x->data, .rmean = running_mean->data, .rvar = running_var->data,
                .B = B, .C = C, .S = S, .eps = eps, .relu = relu != 0};
  gl_parallel_for(C, 6 * B * S, batch_norm_range, &k);
  gl_touch(x);
  return GL_OK;
}
