/* ops_pool.c -- max and average pooling over (B,C,H,W) images, split from ops_conv.c (the
 * window geometry they share is in ops_conv.h).  Max pooling keeps the argmax of each window
 * for backward (the first maximum in scan order; NaN propagates); without a graph (inference)
 * windows other than 2x2 take a separable two-pass max.  Average pooling spreads the gradient
 * evenly (padding counted in the divisor, as PyTorch does by default).  Planes run on the
 * thread pool (parallel.h).
 */
#include "glimpse_internal.h"
#include "ops_conv.h"
#include "parallel.h"

#include <math.h>
#include <string.h>

#define SHAPE(buf, t) gl_shape_str(buf, sizeof buf, (t)->ndim, (t)->shape)

/* ------------------------------------------------------------------------ */
/* pooling windows: PyTorch's rule that padding is at most half the kernel keeps every
 * window overlapping the image, so a max always exists */

static int pool_check(const char *op, const gl_tensor *x, conv_geom *g, int kh, int kw, int sh,
                      int sw, int ph, int pw) {
  int st = gl_conv_window(op, x, g, kh, kw, sh, sw, ph, pw);
  if (st) return st;
  if (2 * ph > kh || 2 * pw > kw)
    return gl_fail(GL_EARG, "%s: padding %dx%d must be at most half the %dx%d kernel", op, ph,
                   pw, kh, kw);
  g->O = g->C;
  return GL_OK;
}

/* ------------------------------------------------------------------------ */
/* the common 2x2 window with stride 2 and no padding, one output row at a time, written
 * so the compiler vectorises it (the general loops spend most of their time on window
 * bookkeeping).  r0, r1: the two input rows; base: r0's in-plane offset. */

/* the part [*a, *b) of a window that starts at s (size k) inside [0, n): padding cut off */
static inline void clip_window(int s, int k, int n, int *a, int *b) {
  *a = s < 0 ? 0 : s;
  *b = s + k > n ? n : s + k;
}

static int is_2x2(const conv_geom *g) {
  return g->kh == 2 && g->kw == 2 && g->sh == 2 && g->sw == 2 && g->ph == 0 && g->pw == 0;
}

/* max with the first maximum in scan order (a, b, c, d) on ties; returns nonzero when the
 * row holds a NaN (the caller redoes it the general way, which propagates NaN) */
static int max2x2_row(const float *r0, const float *r1, int W, int Wo, int base, float *y,
                      float *arg) {
  int nan = 0;
  if (!arg) {
    for (int ox = 0; ox < Wo; ox++) {
      float a = r0[2 * ox], b = r0[2 * ox + 1], c = r1[2 * ox], d = r1[2 * ox + 1];
      nan |= (a != a) | (b != b) | (c != c) | (d != d);
      float m1 = b > a ? b : a, m2 = d > c ? d : c;
      y[ox] = m2 > m1 ? m2 : m1;
    }
    return nan;
  }
  /* the index as float selects (exact below 2^24), which vectorise like the values */
  float fw = (float)W, fbase = (float)base;
  for (int ox = 0; ox < Wo; ox++) {
    float a = r0[2 * ox], b = r0[2 * ox + 1], c = r1[2 * ox], d = r1[2 * ox + 1];
    nan |= (a != a) | (b != b) | (c != c) | (d != d);
    float m1 = b > a ? b : a, m2 = d > c ? d : c;
    float o1 = b > a ? 1.0f : 0.0f, o2 = d > c ? fw + 1.0f : fw;
    y[ox] = m2 > m1 ? m2 : m1;
    arg[ox] = fbase + (float)(2 * ox) + (m2 > m1 ? o2 : o1);
  }
  return nan;
}

/* The 2x2 window's backward written outright (fresh gradient rows d0, d1 of the window's
 * two input rows): dy to the position arg names, 0 to the other three; an odd last column
 * gets 0.  base: r0's in-plane offset, as in max2x2_row. */
static void max2x2_row_backward(const float *restrict arg, const float *restrict dy, int W,
                                int Wo, int base, float *restrict d0, float *restrict d1) {
  float fw = (float)W, fbase = (float)base;
  for (int ox = 0; ox < Wo; ox++) {
    float rel = arg[ox] - fbase - (float)(2 * ox), g = dy[ox];   /* 0, 1, W or W + 1 */
    d0[2 * ox] = rel == 0.0f ? g : 0.0f;
    d0[2 * ox + 1] = rel == 1.0f ? g : 0.0f;
    d1[2 * ox] = rel == fw ? g : 0.0f;
    d1[2 * ox + 1] = rel == fw + 1.0f ? g : 0.0f;
  }
  if (W % 2) d0[W - 1] = d1[W - 1] = 0.0f;
}

static void avg2x2_row(const float *r0, const float *r1, int Wo, float *y) {
  for (int ox = 0; ox < Wo; ox++)
    y[ox] = (r0[2 * ox] + r0[2 * ox + 1] + r1[2 * ox] + r1[2 * ox + 1]) * 0.25f;
}

/* ------------------------------------------------------------------------ */
/* max_pool2d: x (B,C,H,W) -> y (B,C,Ho,Wo), y = max over the window (padding never wins);
 * the flat in-plane index of each maximum is kept (first one on ties).
 * backward of y[p] = x[argmax(p)]:  dx[argmax(p)] += dy[p] */

/* pooling on the pool (parallel.h), by (image, channel) planes: a, b the inputs of the
 * loop (x; or arg and dy), out its output */
typedef struct {
  const conv_geom *g;
  const float *a, *b;
  float *out, *arg;
  int fresh;
  float *tmp;   /* max pooling without indices: a row-max scratch per pool slot */
} pool_ctx;

static void max_pool_grad_range(void *ctx, size_t lo, size_t hi, int slot) {
  (void)slot;
  const pool_ctx *k = ctx;
  const conv_geom g = *k->g;
  size_t plane = (size_t)g.H * g.W, hwo = (size_t)g.Ho * g.Wo;
  const float *arg = k->a, *dy = k->b;
  int fresh = k->fresh;
  for (size_t p = lo; p < hi; p++) {
    float *dx = k->out + p * plane;
    if (fresh && is_2x2(&g)) {   /* every input pixel written once: no zeroing pass */
      const float *ap = arg + p * hwo, *dp = dy + p * hwo;
      for (int oy = 0; oy < g.Ho; oy++)
        max2x2_row_backward(ap + (size_t)oy * g.Wo, dp + (size_t)oy * g.Wo, g.W, g.Wo,
                            2 * oy * g.W, dx + (size_t)2 * oy * g.W, dx + (size_t)(2 * oy + 1) * g.W);
      if (g.H % 2) memset(dx + (size_t)(g.H - 1) * g.W, 0, sizeof(float) * (size_t)g.W);
      continue;
    }
    if (fresh) memset(dx, 0, sizeof(float) * plane);   /* plane by plane: still in cache */
    for (size_t q = 0; q < hwo; q++) dx[(size_t)arg[p * hwo + q]] += dy[p * hwo + q];
  }
}

static int max_pool2d_backward(gl_node *n, gl_tensor **gout) {
  int fresh;
  gl_tensor *gx = gl_grad_slot(n, 0, &fresh);
  if (!gx) return GL_OK;
  conv_geom g = geom_from_node(n);
  size_t planes = (size_t)g.B * g.C;
  pool_ctx c = {&g, n->saved[0]->data, gout[0]->data, gx->data, NULL, fresh, NULL};
  gl_parallel_for(planes, (size_t)g.H * g.W + (size_t)g.Ho * g.Wo, max_pool_grad_range, &c);
  return GL_OK;
}

static const gl_op op_max_pool2d = {"max_pool2d", max_pool2d_backward};

/* one plane the general way: every window scanned, its first maximum's index kept */
static void max_pool_plane(const conv_geom *gp, const float *xp, float *yp, float *ap) {
  const conv_geom g = *gp;
  for (int oy = 0; oy < g.Ho; oy++) {
    size_t o = (size_t)oy * g.Wo;
    if (is_2x2(&g) && !max2x2_row(xp + 2 * oy * g.W, xp + (2 * oy + 1) * g.W, g.W, g.Wo,
                                  2 * oy * g.W, yp + o, ap ? ap + o : NULL))
      continue;
    for (int ox = 0; ox < g.Wo; ox++) {
      int y0 = oy * g.sh - g.ph, x0 = ox * g.sw - g.pw;
      int ya, yb, xa, xb;
      clip_window(y0, g.kh, g.H, &ya, &yb);
      clip_window(x0, g.kw, g.W, &xa, &xb);
      /* branch-free selects (random data mispredicts an if); NaNs are noted and handled
       * after the window, so the hot loop stays a max */
      float best = -INFINITY;
      int bi = ya * g.W + xa, nan = 0;
      for (int iy = ya; iy < yb; iy++) {
        const float *row = xp + iy * g.W;
        for (int ix = xa; ix < xb; ix++) {
          float v = row[ix];
          int gt = v > best;
          bi = gt ? iy * g.W + ix : bi;
          best = gt ? v : best;
          nan |= v != v;
        }
      }
      if (nan) /* NaN propagates, as in PyTorch: the first NaN of the window wins */
        for (int iy = ya; iy < yb && nan; iy++)
          for (int ix = xa; ix < xb; ix++)
            if (xp[iy * g.W + ix] != xp[iy * g.W + ix]) {
              best = xp[iy * g.W + ix];
              bi = iy * g.W + ix;
              nan = 0;
              break;
            }
      yp[o + ox] = best;
      if (ap) ap[o + ox] = (float)bi;
    }
  }
}

/* One plane without indices (inference) in two passes: the max over each window's columns
 * for every input row (R, H x Wo), then over its rows.  A max is exact, so the order does not
 * change it; a plane holding a NaN is redone the general way, which propagates it. */
/* the column pass of a 3-wide window over the outputs [a, b) whose windows lie inside the
 * row (x0 = ox sw - pw >= 0, x0 + 3 <= W), for stride s: a loop along the outputs with no
 * clipping, which vectorises; returns whether a NaN was seen */
static int max3_cols2(const float *restrict row, float *restrict r, int a, int b, int pw) {
  int nan = 0;
  for (int ox = a; ox < b; ox++) {                  /* stride 2 (ResNet's): constant */
    const float *p = row + 2 * ox - pw;
    float v0 = p[0], v1 = p[1], v2 = p[2];
    nan |= (v0 != v0) | (v1 != v1) | (v2 != v2);
    float m = v1 > v0 ? v1 : v0;
    r[ox] = v2 > m ? v2 : m;
  }
  return nan;
}

static int max3_cols(const float *restrict row, float *restrict r, int a, int b, int s, int pw) {
  if (s == 2) return max3_cols2(row, r, a, b, pw);
  int nan = 0;
  for (int ox = a; ox < b; ox++) {
    const float *p = row + ox * s - pw;
    float v0 = p[0], v1 = p[1], v2 = p[2];
    nan |= (v0 != v0) | (v1 != v1) | (v2 != v2);
    float m = v1 > v0 ? v1 : v0;
    r[ox] = v2 > m ? v2 : m;
  }
  return nan;
}

static void max_pool_plane_separable(const conv_geom *gp, const float *xp, float *yp, float *R) {
  const conv_geom g = *gp;
  int nan = 0;
  /* the outputs whose windows lie inside a row (3-wide windows take the fast loop there) */
  int inner_a = (g.pw + g.sw - 1) / g.sw, inner_b = g.W - g.kw + g.pw < 0 ? 0
                                                    : (g.W - g.kw + g.pw) / g.sw + 1;
  if (inner_b > g.Wo) inner_b = g.Wo;
  if (g.kw != 3 || inner_a >= inner_b) inner_a = inner_b = 0;
  for (int iy = 0; iy < g.H; iy++) {
    const float *row = xp + (size_t)iy * g.W;
    float *r = R + (size_t)iy * g.Wo;
    if (inner_b > inner_a) nan |= max3_cols(row, r, inner_a, inner_b, g.sw, g.pw);
    for (int ox = 0; ox < g.Wo; ox++) {
      if (ox == inner_a && inner_b > inner_a) ox = inner_b;
      if (ox >= g.Wo) break;
      int x0 = ox * g.sw - g.pw;
      int xa, xb;
      clip_window(x0, g.kw, g.W, &xa, &xb);
      float best = -INFINITY;
      for (int ix = xa; ix < xb; ix++) {
        float v = row[ix];
        nan |= v != v;
        best = v > best ? v : best;
      }
      r[ox] = best;
    }
  }
  if (nan) {
    max_pool_plane(gp, xp, yp, NULL);
    return;
  }
  for (int oy = 0; oy < g.Ho; oy++) {
    int y0 = oy * g.sh - g.ph;
    int ya, yb;
    clip_window(y0, g.kh, g.H, &ya, &yb);
    float *restrict o = yp + (size_t)oy * g.Wo;
    for (int ox = 0; ox < g.Wo; ox++) o[ox] = -INFINITY;
    for (int iy = ya; iy < yb; iy++) {
      const float *restrict r = R + (size_t)iy * g.Wo;
      for (int ox = 0; ox < g.Wo; ox++) o[ox] = r[ox] > o[ox] ? r[ox] : o[ox];
    }
  }
}

static void max_pool_range(void *ctx, size_t lo, size_t hi, int slot) {
  const pool_ctx *k = ctx;
  const conv_geom *g = k->g;
  size_t plane = (size_t)g->H * g->W, hwo = (size_t)g->Ho * g->Wo;
  for (size_t p = lo; p < hi; p++) {
    if (k->tmp)
      max_pool_plane_separable(g, k->a + p * plane, k->out + p * hwo,
                               k->tmp + (size_t)slot * g->H * g->Wo);
    else
      max_pool_plane(g, k->a + p * plane, k->out + p * hwo, k->arg ? k->arg + p * hwo : NULL);
  }
}

/* The in-plane index of each maximum is kept as a float (a tensor from the caching
 * allocator, saved with the node); floats hold integers exactly up to 2^24. */
#define POOL_MAX_PLANE (1 << 24)

int gl_max_pool2d(gl_tensor **out, gl_tensor *x, int kh, int kw, int sh, int sw, int ph,
                  int pw) {
  char b1[128];
  conv_geom g;
  int st = pool_check("max_pool2d", x, &g, kh, kw, sh, sw, ph, pw);
  if (st) return st;
  if ((size_t)g.H * g.W > POOL_MAX_PLANE)
    return gl_fail(GL_ESHAPE, "max_pool2d: input %s: planes of more than %d pixels are not "
                              "supported", SHAPE(b1, x), POOL_MAX_PLANE);
  size_t planes = (size_t)g.B * g.C, plane = (size_t)g.H * g.W, hwo = (size_t)g.Ho * g.Wo;
  gl_tensor *idx = NULL;
  if (gl_needs_grad(1, &x) && (st = gl_empty(&idx, 4, (int[]){g.B, g.C, g.Ho, g.Wo})))
    return st;
  if ((st = gl_empty(out, 4, (int[]){g.B, g.C, g.Ho, g.Wo}))) {
    gl_release(idx);
    return st;
  }
  /* inference (no indices) on windows other than 2x2 goes the separable way, with a scratch
   * of H x Wo per pool slot (none: the general way) */
  size_t slots = (size_t)gl_parallel_slots(), ntmp = (size_t)g.H * g.Wo * slots;
  float *tmp = !idx && !is_2x2(&g) && ntmp ? gl_scratch_alloc(ntmp) : NULL;
  pool_ctx c = {&g, x->data, NULL, (*out)->data, idx ? idx->data : NULL, 0, tmp};
  gl_parallel_for(planes, plane + hwo * 2, max_pool_range, &c);
  gl_scratch_free(tmp, ntmp);
  gl_node *n = gl_record(&op_max_pool2d, 1, &x, 1, out);
  if (n) geom_to_node(n, &g);
  gl_save(n, idx);
  gl_release(idx);
  return GL_OK;
}

/* ------------------------------------------------------------------------ */
/* avg_pool2d: x (B,C,H,W) -> y (B,C,Ho,Wo), y = (sum over the window's image part) / (kh*kw)
 * (zero padding counts in the divisor: PyTorch's count_include_pad=True).
 * backward: dx[q] += dy[p] / (kh*kw) for every q in window p */

static void avg_pool_grad_range(void *ctx, size_t lo, size_t hi, int slot) {
  (void)slot;
  const pool_ctx *k = ctx;
  const conv_geom g = *k->g;
  size_t plane = (size_t)g.H * g.W, hwo = (size_t)g.Ho * g.Wo;
  float inv = 1.0f / (float)(g.kh * g.kw);
  const float *dy = k->b;
  for (size_t p = lo; p < hi; p++) {
    float *dx = k->out + p * plane;
    for (int oy = 0; oy < g.Ho; oy++)
      for (int ox = 0; ox < g.Wo; ox++) {
        int y0 = oy * g.sh - g.ph, x0 = ox * g.sw - g.pw;
        int ya, yb, xa, xb;
        clip_window(y0, g.kh, g.H, &ya, &yb);
        clip_window(x0, g.kw, g.W, &xa, &xb);
        float d = dy[p * hwo + (size_t)oy * g.Wo + ox] * inv;
        for (int iy = ya; iy < yb; iy++)
          for (int ix = xa; ix < xb; ix++) dx[iy * g.W + ix] += d;
      }
  }
}

static int avg_pool2d_backward(gl_node *n, gl_tensor **gout) {
  gl_tensor *gx = gl_grad_of(n, 0);
  if (!gx) return GL_OK;
  conv_geom g = geom_from_node(n);
  pool_ctx c = {&g, NULL, gout[0]->data, gx->data, NULL, 0, NULL};
  gl_parallel_for((size_t)g.B * g.C, (size_t)g.Ho * g.Wo * g.kh * g.kw, avg_pool_grad_range, &c);
  return GL_OK;
}

static const gl_op op_avg_pool2d = {"avg_pool2d", avg_pool2d_backward};

static void avg_pool_range(void *ctx, size_t lo, size_t hi, int slot) {
  (void)slot;
  const pool_ctx *k = ctx;
  const conv_geom g = *k->g;
  size_t plane = (size_t)g.H * g.W, hwo = (size_t)g.Ho * g.Wo;
  float inv = 1.0f / (float)(g.kh * g.kw);
  float *y = k->out;
  for (size_t p = lo; p < hi; p++) {
    const float *xp = k->a + p * plane;
    for (int oy = 0; oy < g.Ho; oy++) {
      if (is_2x2(&g)) {
        avg2x2_row(xp + 2 * oy * g.W, xp + (2 * oy + 1) * g.W, g.Wo,
                   y + p * hwo + (size_t)oy * g.Wo);
        continue;
      }
      for (int ox = 0; ox < g.Wo; ox++) {
        int y0 = oy * g.sh - g.ph, x0 = ox * g.sw - g.pw;
        int ya, yb, xa, xb;
        clip_window(y0, g.kh, g.H, &ya, &yb);
        clip_window(x0, g.kw, g.W, &xa, &xb);
        float s = 0;
        for (int iy = ya; iy < yb; iy++)
          for (int ix = xa; ix < xb; ix++) s += xp[iy * g.W + ix];
        y[p * hwo + (size_t)oy * g.Wo + ox] = s * inv;
      }
    }
  }
}

int gl_avg_pool2d(gl_tensor **out, gl_tensor *x, int kh, int kw, int sh, int sw, int ph,
                  int pw) {
  conv_geom g;
  int st = pool_check("avg_pool2d", x, &g, kh, kw, sh, sw, ph, pw);
  if (st) return st;
  if ((st = gl_empty(out, 4, (int[]){g.B, g.C, g.Ho, g.Wo}))) return st;
  pool_ctx c = {&g, x->data, NULL, (*out)->data, NULL, 0, NULL};
  gl_parallel_for((size_t)g.B * g.C, (size_t)g.Ho * g.Wo * kh * kw, avg_pool_range, &c);
  gl_node *n = gl_record(&op_avg_pool2d, 1, &x, 1, out);
  if (n) geom_to_node(n, &g);
  return GL_OK;
}
