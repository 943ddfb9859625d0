/* optim.c -- fused optimizer updates and gradient clipping.
 *
 * One loop per parameter tensor and step: the update reads the gradient and the optimizer's
 * buffers once, writes the parameter and the buffers once, and allocates nothing.  The Lua
 * side (bindings/glimpse/optim.lua) owns the bookkeeping -- param groups, step counts, lazily
 * created buffers, state_dict -- and calls one of these per parameter.
 *
 * The arithmetic follows PyTorch 1.13's single-tensor CPU implementations (torch/optim/<name>.py,
 * foreach=False) operation by operation: scalar coefficients are formed in double precision
 * (as Python does) and rounded to float once, tensor arithmetic is float32 in the same order
 * (addcmul is `s + (v*a)*b`, addcdiv is `s + (v*a)/b`), so a glimpse run tracks a PyTorch run
 * to float rounding.  References:
 *   SGD with momentum/Nesterov: Sutskever et al. 2013, in PyTorch's formulation.
 *   Adam: Kingma & Ba 2015, Algorithm 1; AMSGrad: Reddi et al. 2018.
 *   AdamW: Loshchilov & Hutter 2019 (decoupled weight decay, p *= 1 - lr*wd).
 *   RMSProp: Hinton's lecture 6e; centered variant: Graves 2013, eq. 38-45.
 *   AdaDelta: Zeiler 2012, Algorithm 1;  Adagrad: Duchi et al. 2011.
 *
 * Every update bumps the version of the tensors it writes, like any other in-place write.
 * The updates run whether or not grad mode is on: they are outside the graph by nature.
 * SGD and Adam/AdamW run large tensors on the thread pool (parallel.h) by ranges of elements
 * (Adam's by whole blocks); every element's arithmetic is the same on any thread.
 */
#include "glimpse.h"
#include "parallel.h"

#include <math.h>
#include <string.h>

#if defined(__AVX__) || defined(__SSE__)
#include <immintrin.h>
#elif defined(__ARM_NEON) && defined(__aarch64__)
#include <arm_neon.h>
#endif

/* ------------------------------------------------------------------------ */
/* checks */

/* t must hold as many elements as the parameter (state buffers are created with its shape). */
static int check_like(const char *op, const gl_tensor *p, const gl_tensor *t, const char *what) {
  if (!t) return gl_fail(GL_EARG, "%s: %s is missing", op, what);
  if (!gl_same_shape(p, t)) {
    char s1[128], s2[128];
    return gl_fail(GL_ESHAPE, "%s: %s has shape %s, the parameter %s", op, what,
                   gl_shape_str(s1, sizeof s1, t->ndim, t->shape),
                   gl_shape_str(s2, sizeof s2, p->ndim, p->shape));
  }
  return GL_OK;
}

#define CHECK(call)              \
  do {                           \
    int st_ = (call);            \
    if (st_ != GL_OK) return st_; \
  } while (0)

/* How the loops are built.
 *
 * Optional buffers come with a flag: each update's loop body is a static inline function, and
 * the public function calls it with constant flags, so every combination compiles to its own
 * branch-free loop.  (Testing a NULL buffer inside the loop let GCC turn the test into masked
 * vector loads through the NULL pointer, each one a microcode assist: 60x slower.)
 *
 * Updates that take square roots run in blocks of BLOCK elements, three passes per block
 * over data that stays in L1: moments (vectorised), square roots (sqrt_block), the parameter
 * (vectorised).  A plain sqrtf inside the loop keeps the compiler from vectorising it at all:
 * with -fmath-errno, the C default, every call keeps a scalar path that sets errno.  The
 * passes do the same float operations in the same order as one fused loop would, so the
 * results are the same bits. */
#define INLINE static inline __attribute__((always_inline))
#define BLOCK 256

/* d[i] = sqrt(d[i]), i < k.  IEEE square root on every path (NaN for negatives). */
static void sqrt_block(float *d, size_t k) {
  size_t i = 0;
#if defined(__AVX__)
  for (; i + 8 <= k; i += 8) _mm256_storeu_ps(d + i, _mm256_sqrt_ps(_mm256_loadu_ps(d + i)));
#elif defined(__SSE__)
  for (; i + 4 <= k; i += 4) _mm_storeu_ps(d + i, _mm_sqrt_ps(_mm_loadu_ps(d + i)));
#elif defined(__ARM_NEON) && defined(__aarch64__)
  for (; i + 4 <= k; i += 4) vst1q_f32(d + i, vsqrtq_f32(vld1q_f32(d + i)));
#endif
  for (; i < k; i++) d[i] = sqrtf(d[i]);
}

/* ------------------------------------------------------------------------ */
/* SGD:  d = g + wd*p;  buf = first ? d : momentum*buf + (1-dampening)*d;
 *       d = nesterov ? d + momentum*buf : buf;  p -= lr*d
 * p, g, buf: any shape, all the same.  buf is NULL when momentum == 0.  `first` marks the
 * step that creates the buffer: it is a copy of d, without dampening. */

typedef struct { float wd, mom, keep, neg_lr; int use_wd, nesterov, maximize; } sgd_hp;

INLINE void sgd_loop(size_t n, float *restrict pd, const float *restrict gd,
                     float *restrict bd, const sgd_hp h, const int has_buf, const int first) {
  for (size_t i = 0; i < n; i++) {
    float d = h.maximize ? -gd[i] : gd[i];
    if (h.use_wd) d = d + h.wd * pd[i];
    if (has_buf) {
      float b = first ? d : bd[i] * h.mom + h.keep * d;
      bd[i] = b;
      d = h.nesterov ? d + h.mom * b : b;
    }
    pd[i] = pd[i] + h.neg_lr * d;
  }
}

typedef struct {
  float *p, *buf, *m, *v, *vmax;
  const float *g;
  const void *hp;
  int first;
  size_t n;   /* Adam: the element count */
} optim_ctx;

static void sgd_range(void *ctx, size_t lo, size_t hi, int slot) {
  (void)slot;
  const optim_ctx *c = ctx;
  const sgd_hp h = *(const sgd_hp *)c->hp;
  size_t n = hi - lo;
  if (!c->buf) sgd_loop(n, c->p + lo, c->g + lo, NULL, h, 0, 0);
  else if (c->first) sgd_loop(n, c->p + lo, c->g + lo, c->buf + lo, h, 1, 1);
  else sgd_loop(n, c->p + lo, c->g + lo, c->buf + lo, h, 1, 0);
}

int gl_sgd_update(gl_tensor *p, const gl_tensor *g, gl_tensor *buf, int first, double lr,
                  double momentum, double dampening, double weight_decay, int nesterov,
                  int maximize) {
  CHECK(check_like("sgd", p, g, "the gradient"));
  if (momentum != 0) CHECK(check_like("sgd", p, buf, "momentum_buffer"));
  const sgd_hp h = {(float)weight_decay, (float)momentum, (float)(1.0 - dampening),
                    (float)(-lr), weight_decay != 0, nesterov, maximize};
  optim_ctx c = {p->data, momentum == 0 ? NULL : buf->data, NULL, NULL, NULL, g->data, &h,
                 first, p->numel};
  gl_parallel_for(p->numel, 4, sgd_range, &c);
  gl_touch(p);
  if (momentum != 0) gl_touch(buf);
  return GL_OK;
}

/* ------------------------------------------------------------------------ */
/* Adam / AdamW at step t (1-based, already counted):
 *   AdamW: p *= 1 - lr*wd            Adam: g = g + wd*p
 *   m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g*g;  vmax = max(vmax, v) (amsgrad)
 *   p -= lr/(1-b1^t) * m / (sqrt(v or vmax)/sqrt(1-b2^t) + eps)
 * max_exp_avg_sq is NULL unless amsgrad. */

typedef struct {
  float b1, c1, b2, c2, eps, bc2_sqrt, neg_step, wd, shrink;
  int decoupled, use_wd, maximize;
} adam_hp;

/* one block of k elements; d: BLOCK floats of scratch */
INLINE void adam_block(size_t k, float *restrict pd, const float *restrict gd,
                       float *restrict m, float *restrict v, float *restrict vmax,
                       float *restrict d, const adam_hp h, const int amsgrad) {
  for (size_t i = 0; i < k; i++) {
    float gi = h.maximize ? -gd[i] : gd[i];
    if (!h.decoupled && h.use_wd) gi = gi + h.wd * pd[i];
    float vi = v[i] * h.b2 + h.c2 * gi * gi;
    m[i] = m[i] * h.b1 + h.c1 * gi;
    v[i] = vi;
    if (amsgrad) {
      float vm = vmax[i];
      vi = (vi > vm || vi != vi) ? vi : vm;      /* torch.maximum: NaN wins */
      vmax[i] = vi;
    }
    d[i] = vi;
  }
  sqrt_block(d, k);
  for (size_t i = 0; i < k; i++) {
    float pi = h.decoupled ? pd[i] * h.shrink : pd[i];
    float denom = d[i] / h.bc2_sqrt + h.eps;
    pd[i] = pi + h.neg_step * m[i] / denom;
  }
}

/* blocks [lo, hi) of BLOCK elements */
static void adam_range(void *ctx, size_t lo, size_t hi, int slot) {
  (void)slot;
  const optim_ctx *c = ctx;
  const adam_hp h = *(const adam_hp *)c->hp;
  size_t n = c->n;
  float d[BLOCK];
  for (size_t s = lo * BLOCK; s < hi * BLOCK && s < n; s += BLOCK) {
    size_t k = n - s < BLOCK ? n - s : BLOCK;
    if (c->vmax) adam_block(k, c->p + s, c->g + s, c->m + s, c->v + s, c->vmax + s, d, h, 1);
    else adam_block(k, c->p + s, c->g + s, c->m + s, c->v + s, NULL, d, h, 0);
  }
}

int gl_adam_update(gl_tensor *p, const gl_tensor *g, gl_tensor *exp_avg, gl_tensor *exp_avg_sq,
                   gl_tensor *max_exp_avg_sq, int64_t step, double lr, double beta1,
                   double beta2, double eps, double weight_decay, int decoupled, int maximize) {
  const char *op = decoupled ? "adamw" : "adam";
  CHECK(check_like(op, p, g, "the gradient"));
  CHECK(check_like(op, p, exp_avg, "exp_avg"));
  CHECK(check_like(op, p, exp_avg_sq, "exp_avg_sq"));
  if (max_exp_avg_sq) CHECK(check_like(op, p, max_exp_avg_sq, "max_exp_avg_sq"));
  if (step < 1) return gl_fail(GL_EARG, "%s: step %lld must be >= 1", op, (long long)step);
  const double bc1 = 1.0 - pow(beta1, (double)step);
  const double bc2 = 1.0 - pow(beta2, (double)step);
  const adam_hp h = {(float)beta1, (float)(1.0 - beta1), (float)beta2, (float)(1.0 - beta2),
                     (float)eps, (float)sqrt(bc2), (float)(-(lr / bc1)), (float)weight_decay,
                     (float)(1.0 - lr * weight_decay), decoupled, weight_decay != 0, maximize};
  optim_ctx c = {p->data, NULL, exp_avg->data, exp_avg_sq->data,
                 max_exp_avg_sq ? max_exp_avg_sq->data : NULL, g->data, &h, 0, p->numel};
  gl_parallel_for((p->numel + BLOCK - 1) / BLOCK, 12 * BLOCK, adam_range, &c);
  gl_touch(p);
  gl_touch(exp_avg);
  gl_touch(exp_avg_sq);
  if (max_exp_avg_sq) gl_touch(max_exp_avg_sq);
  return GL_OK;
}

/* ------------------------------------------------------------------------ */
/* RMSProp:  g = g + wd*p;  s = alpha*s + (1-alpha)*g*g
 *   centered: a = alpha*a + (1-alpha)*g;  avg = sqrt(s - a*a) + eps   else avg = sqrt(s) + eps
 *   momentum > 0: buf = momentum*buf + g/avg;  p -= lr*buf          else p -= lr*g/avg
 * grad_avg is NULL unless centered, buf NULL unless momentum > 0. */

typedef struct { float a, ca, eps, wd, mom, neg_lr; int use_wd, maximize; } rmsprop_hp;

INLINE float rmsprop_grad(float g, float p, const rmsprop_hp h) {
  float gi = h.maximize ? -g : g;
  return h.use_wd ? gi + h.wd * p : gi;
}

INLINE void rmsprop_block(size_t k, float *restrict pd, const float *restrict gd,
                          float *restrict s, float *restrict ga, float *restrict bd,
                          float *restrict d, const rmsprop_hp h, const int centered,
                          const int has_buf) {
  for (size_t i = 0; i < k; i++) {
    float gi = rmsprop_grad(gd[i], pd[i], h);
    float si = s[i] * h.a + h.ca * gi * gi;
    s[i] = si;
    if (centered) {
      float gai = ga[i] * h.a + h.ca * gi;
      ga[i] = gai;
      d[i] = si + -1.0f * gai * gai;
    } else {
      d[i] = si;
    }
  }
  sqrt_block(d, k);
  for (size_t i = 0; i < k; i++) {
    float gi = rmsprop_grad(gd[i], pd[i], h);    /* the same value as above: p is unchanged */
    float avg = d[i] + h.eps;
    if (has_buf) {
      float b = bd[i] * h.mom + 1.0f * gi / avg;
      bd[i] = b;
      pd[i] = pd[i] + h.neg_lr * b;
    } else {
      pd[i] = pd[i] + h.neg_lr * gi / avg;
    }
  }
}

int gl_rmsprop_update(gl_tensor *p, const gl_tensor *g, gl_tensor *square_avg,
                      gl_tensor *grad_avg, gl_tensor *buf, double lr, double alpha, double eps,
                      double weight_decay, double momentum, int maximize) {
  CHECK(check_like("rmsprop", p, g, "the gradient"));
  CHECK(check_like("rmsprop", p, square_avg, "square_avg"));
  if (grad_avg) CHECK(check_like("rmsprop", p, grad_avg, "grad_avg"));
  if (momentum > 0) CHECK(check_like("rmsprop", p, buf, "momentum_buffer"));
  const rmsprop_hp h = {(float)alpha, (float)(1.0 - alpha), (float)eps, (float)weight_decay,
                        (float)momentum, (float)(-lr), weight_decay != 0, maximize};
  float d[BLOCK];
  float *pd = p->data, *sq = square_avg->data;
  float *ga = grad_avg ? grad_avg->data : NULL, *bd = momentum > 0 ? buf->data : NULL;
  const float *gd = g->data;
  for (size_t s = 0; s < p->numel; s += BLOCK) {
    size_t k = p->numel - s < BLOCK ? p->numel - s : BLOCK;
    if (ga && bd) rmsprop_block(k, pd + s, gd + s, sq + s, ga + s, bd + s, d, h, 1, 1);
    else if (ga) rmsprop_block(k, pd + s, gd + s, sq + s, ga + s, NULL, d, h, 1, 0);
    else if (bd) rmsprop_block(k, pd + s, gd + s, sq + s, NULL, bd + s, d, h, 0, 1);
    else rmsprop_block(k, pd + s, gd + s, sq + s, NULL, NULL, d, h, 0, 0);
  }
  gl_touch(p);
  gl_touch(square_avg);
  if (ga) gl_touch(grad_avg);
  if (bd) gl_touch(buf);
  return GL_OK;
}

/* ------------------------------------------------------------------------ */
/* AdaDelta:  g = g + wd*p;  s = rho*s + (1-rho)*g*g
 *   delta = sqrt(u + eps) / sqrt(s + eps) * g;  u = rho*u + (1-rho)*delta*delta;
 *   p -= lr*delta
 * (s: square_avg, u: acc_delta) */

int gl_adadelta_update(gl_tensor *p, const gl_tensor *g, gl_tensor *square_avg,
                       gl_tensor *acc_delta, double lr, double rho, double eps,
                       double weight_decay, int maximize) {
  CHECK(check_like("adadelta", p, g, "the gradient"));
  CHECK(check_like("adadelta", p, square_avg, "square_avg"));
  CHECK(check_like("adadelta", p, acc_delta, "acc_delta"));
  const float r = (float)rho, cr = (float)(1.0 - rho), feps = (float)eps;
  const float wd = (float)weight_decay, neg_lr = (float)(-lr);
  const int use_wd = weight_decay != 0;
  float std[BLOCK], rms[BLOCK], gs[BLOCK];
  for (size_t o = 0; o < p->numel; o += BLOCK) {
    size_t k = p->numel - o < BLOCK ? p->numel - o : BLOCK;
    float *restrict pd = p->data + o, *restrict s = square_avg->data + o;
    float *restrict u = acc_delta->data + o;
    const float *restrict gd = g->data + o;
    for (size_t i = 0; i < k; i++) {
      float gi = maximize ? -gd[i] : gd[i];
      if (use_wd) gi = gi + wd * pd[i];
      gs[i] = gi;
      float si = s[i] * r + cr * gi * gi;
      s[i] = si;
      std[i] = si + feps;
      rms[i] = u[i] + feps;
    }
    sqrt_block(std, k);
    sqrt_block(rms, k);
    for (size_t i = 0; i < k; i++) {
      float delta = rms[i] / std[i] * gs[i];
      u[i] = u[i] * r + cr * delta * delta;
      pd[i] = pd[i] + neg_lr * delta;
    }
  }
  gl_touch(p);
  gl_touch(square_avg);
  gl_touch(acc_delta);
  return GL_OK;
}

/* ------------------------------------------------------------------------ */
/* Adagrad at step t (1-based, already counted):
 *   g = g + wd*p;  clr = lr / (1 + (t-1)*lr_decay);  sum += g*g;  p -= clr * g / (sqrt(sum) + eps) */

int gl_adagrad_update(gl_tensor *p, const gl_tensor *g, gl_tensor *sum, int64_t step, double lr,
                      double lr_decay, double eps, double weight_decay, int maximize) {
  CHECK(check_like("adagrad", p, g, "the gradient"));
  CHECK(check_like("adagrad", p, sum, "sum"));
  if (step < 1) return gl_fail(GL_EARG, "adagrad: step %lld must be >= 1", (long long)step);
  const double clr = lr / (1.0 + (double)(step - 1) * lr_decay);
  const float neg_clr = (float)(-clr), feps = (float)eps, wd = (float)weight_decay;
  const int use_wd = weight_decay != 0;
  float d[BLOCK], gs[BLOCK];
  for (size_t o = 0; o < p->numel; o += BLOCK) {
    size_t k = p->numel - o < BLOCK ? p->numel - o : BLOCK;
    float *restrict pd = p->data + o, *restrict s = sum->data + o;
    const float *restrict gd = g->data + o;
    for (size_t i = 0; i < k; i++) {
      float gi = maximize ? -gd[i] : gd[i];
      if (use_wd) gi = gi + wd * pd[i];
      gs[i] = gi;
      float si = s[i] + 1.0f * gi * gi;
      s[i] = si;
      d[i] = si;
    }
    sqrt_block(d, k);
    for (size_t i = 0; i < k; i++) {
      float std = d[i] + feps;
      pd[i] = pd[i] + neg_clr * gs[i] / std;
    }
  }
  gl_touch(p);
  gl_touch(sum);
  return GL_OK;
}

/* ------------------------------------------------------------------------ */
/* gradient clipping */

/* The norm of all n tensors taken together as one vector: (sum |x|^q)^(1/q); q = inf: max |x|.
 * Accumulated in double.  q must be > 0 (or inf). */
int gl_grads_norm(double *out, int n, gl_tensor *const *ts, double norm_type) {
  if (!(norm_type > 0) || isnan(norm_type))
    return gl_fail(GL_EARG, "clip_grad_norm: norm_type %g must be > 0 (or inf)", norm_type);
  double acc = 0;
  int inf_norm = isinf(norm_type);
  for (int k = 0; k < n; k++) {
    const gl_tensor *t = ts[k];
    if (!t) continue;
    const float *d = t->data;
    if (inf_norm) {
      for (size_t i = 0; i < t->numel; i++) {
        double a = fabs((double)d[i]);
        if (a > acc || isnan(a)) acc = a;
      }
    } else if (norm_type == 2) {
      for (size_t i = 0; i < t->numel; i++) acc += (double)d[i] * (double)d[i];
    } else if (norm_type == 1) {
      for (size_t i = 0; i < t->numel; i++) acc += fabs((double)d[i]);
    } else {
      for (size_t i = 0; i < t->numel; i++) acc += pow(fabs((double)d[i]), norm_type);
    }
  }
  if (inf_norm || norm_type == 1) *out = acc;
  else if (norm_type == 2) *out = sqrt(acc);
  else *out = pow(acc, 1.0 / norm_type);
  return GL_OK;
}

/* Scale the gradients so that their joint norm is at most max_norm:
 *   coef = max_norm / (total + 1e-6);  g *= min(coef, 1)
 * *total gets the norm before clipping.  The coefficient is formed in float, as PyTorch's
 * clip_grad_norm_ forms it from a float32 norm. */
int gl_clip_grad_norm(double *total, int n, gl_tensor *const *grads, double max_norm,
                      double norm_type) {
  double norm;
  CHECK(gl_grads_norm(&norm, n, grads, norm_type));
  if (total) *total = norm;
  float coef = (float)max_norm / ((float)norm + 1e-6f);
  if (coef >= 1.0f) return GL_OK;      /* multiplying by 1 changes nothing; NaN scales, as in PyTorch */
  for (int k = 0; k < n; k++) {
    gl_tensor *t = grads[k];
    if (!t) continue;
    for (size_t i = 0; i < t->numel; i++) t->data[i] *= coef;
    gl_touch(t);
  }
  return GL_OK;
}

/* Clamp every gradient entry into [-clip, clip] (NaN stays NaN). */
int gl_clip_grad_value(int n, gl_tensor *const *grads, double clip) {
  if (!(clip >= 0))
    return gl_fail(GL_EARG, "clip_grad_value: clip value %g must be >= 0", clip);
  const float hi = (float)clip, lo = -hi;
  for (int k = 0; k < n; k++) {
    gl_tensor *t = grads[k];
    if (!t) continue;
    for (size_t i = 0; i < t->numel; i++) {
      float v = t->data[i];
      t->data[i] = v < lo ? lo : (v > hi ? hi : v);
    }
    gl_touch(t);
  }
  return GL_OK;
}
