/* ops_conv.c -- 2-D convolution and pooling over (B,C,H,W) images, the CNN feature
 * extractor's ops.
 *
 * conv2d lowers a chunk of images to columns (im2col) and does the whole chunk with one
 * sgemm; its backward recomputes the columns (cheaper than keeping B*C*kh*kw*Ho*Wo floats
 * alive) for the weight gradient and scatters the column gradient back with col2im.  A
 * direct seven-loop kernel (forward and backward) stays beside it as the oracle the tests
 * hold the fast one against.  Pooling keeps the argmax of each window (max) or spreads the
 * gradient evenly (average, padding counted in the divisor as PyTorch does by default).
 */
#include "glimpse.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SHAPE(buf, t) gl_shape_str(buf, sizeof buf, (t)->ndim, (t)->shape)

/* floats of scratch one im2col chunk may use (col plus the transposed output): 16 MB */
#define CONV_CHUNK_FLOATS ((size_t)1 << 22)

/* The geometry every conv/pool op shares. */
typedef struct {
  int B, C, H, W;       /* input */
  int O, kh, kw;        /* output channels, window */
  int sh, sw, ph, pw;   /* stride, zero padding */
  int Ho, Wo;           /* output size */
} conv_geom;

static void geom_to_node(gl_node *n, const conv_geom *g) {
  n->ints[0] = g->kh; n->ints[1] = g->kw; n->ints[2] = g->sh;
  n->ints[3] = g->sw; n->ints[4] = g->ph; n->ints[5] = g->pw;
}

/* Rebuild the geometry from the input and a node's saved window parameters. */
static conv_geom geom_from_node(const gl_node *n, const gl_tensor *x, int O) {
  conv_geom g;
  g.B = x->shape[0]; g.C = x->shape[1]; g.H = x->shape[2]; g.W = x->shape[3];
  g.O = O; g.kh = n->ints[0]; g.kw = n->ints[1]; g.sh = n->ints[2];
  g.sw = n->ints[3]; g.ph = n->ints[4]; g.pw = n->ints[5];
  g.Ho = (g.H + 2 * g.ph - g.kh) / g.sh + 1;
  g.Wo = (g.W + 2 * g.pw - g.kw) / g.sw + 1;
  return g;
}

/* Check the window against the input and work out the output size.  `op` names the caller. */
static int window_geometry(const char *op, const gl_tensor *x, conv_geom *g, int kh, int kw,
                           int sh, int sw, int ph, int pw) {
  char b1[128];
  if (x->ndim != 4)
    return gl_fail(GL_ESHAPE, "%s: input %s must be (B,C,H,W)", op, SHAPE(b1, x));
  if (kh < 1 || kw < 1 || sh < 1 || sw < 1 || ph < 0 || pw < 0)
    return gl_fail(GL_EARG, "%s: kernel %dx%d, stride %dx%d, padding %dx%d: kernel and stride "
                            "must be >= 1, padding >= 0", op, kh, kw, sh, sw, ph, pw);
  g->B = x->shape[0]; g->C = x->shape[1]; g->H = x->shape[2]; g->W = x->shape[3];
  g->kh = kh; g->kw = kw; g->sh = sh; g->sw = sw; g->ph = ph; g->pw = pw;
  int hh = g->H + 2 * ph - kh, ww = g->W + 2 * pw - kw;
  if (hh < 0 || ww < 0)
    return gl_fail(GL_ESHAPE, "%s: input %s with padding %dx%d is smaller than the %dx%d kernel",
                   op, SHAPE(b1, x), ph, pw, kh, kw);
  g->Ho = hh / sh + 1;
  g->Wo = ww / sw + 1;
  return GL_OK;
}

/* ------------------------------------------------------------------------ */
/* im2col / col2im for nb images of (C,H,W) starting at x.
 * col is (K = C*kh*kw, nb*Ho*Wo): row (c,i,j), column (image, oy, ox) holds
 * x[image, c, oy*sh - ph + i, ox*sw - pw + j], or 0 where that falls in the padding. */

static void im2col(const float *x, int nb, const conv_geom *g, float *col) {
  size_t hwo = (size_t)g->Ho * g->Wo, ncol = (size_t)nb * hwo, plane = (size_t)g->H * g->W;
  for (int c = 0; c < g->C; c++)
    for (int i = 0; i < g->kh; i++)
      for (int j = 0; j < g->kw; j++) {
        float *row = col + ((size_t)(c * g->kh + i) * g->kw + j) * ncol;
        /* the ox range whose input column lies inside the image */
        int lo = 0, hi = g->Wo;
        while (lo < hi && lo * g->sw - g->pw + j < 0) lo++;
        while (hi > lo && (hi - 1) * g->sw - g->pw + j >= g->W) hi--;
        for (int bi = 0; bi < nb; bi++) {
          const float *xp = x + ((size_t)bi * g->C + c) * plane;
          float *r = row + bi * hwo;
          for (int oy = 0; oy < g->Ho; oy++, r += g->Wo) {
            int iy = oy * g->sh - g->ph + i;
            if (iy < 0 || iy >= g->H) {
              memset(r, 0, sizeof(float) * (size_t)g->Wo);
              continue;
            }
            const float *xr = xp + (size_t)iy * g->W - g->pw + j;
            for (int ox = 0; ox < lo; ox++) r[ox] = 0;
            if (g->sw == 1) memcpy(r + lo, xr + lo, sizeof(float) * (size_t)(hi - lo));
            else for (int ox = lo; ox < hi; ox++) r[ox] = xr[ox * g->sw];
            for (int ox = hi; ox < g->Wo; ox++) r[ox] = 0;
          }
        }
      }
}

/* the adjoint of im2col: dx[image, c, iy, ix] += every column entry that copied it */
static void col2im_add(const float *col, int nb, const conv_geom *g, float *dx) {
  size_t hwo = (size_t)g->Ho * g->Wo, ncol = (size_t)nb * hwo, plane = (size_t)g->H * g->W;
  for (int c = 0; c < g->C; c++)
    for (int i = 0; i < g->kh; i++)
      for (int j = 0; j < g->kw; j++) {
        const float *row = col + ((size_t)(c * g->kh + i) * g->kw + j) * ncol;
        int lo = 0, hi = g->Wo;
        while (lo < hi && lo * g->sw - g->pw + j < 0) lo++;
        while (hi > lo && (hi - 1) * g->sw - g->pw + j >= g->W) hi--;
        for (int bi = 0; bi < nb; bi++) {
          float *xp = dx + ((size_t)bi * g->C + c) * plane;
          const float *r = row + bi * hwo;
          for (int oy = 0; oy < g->Ho; oy++, r += g->Wo) {
            int iy = oy * g->sh - g->ph + i;
            if (iy < 0 || iy >= g->H) continue;
            float *xr = xp + (size_t)iy * g->W - g->pw + j;
            for (int ox = lo; ox < hi; ox++) xr[ox * g->sw] += r[ox];
          }
        }
      }
}

/* images per chunk: the columns (K x nb*HoWo) and the transposed output (O x nb*HoWo) fit the
 * scratch budget, at least one image */
static int chunk_images(const conv_geom *g) {
  size_t K = (size_t)g->C * g->kh * g->kw, hwo = (size_t)g->Ho * g->Wo;
  size_t per = (K > (size_t)g->O ? K : (size_t)g->O) * hwo;
  size_t nb = per ? CONV_CHUNK_FLOATS / per : (size_t)g->B;
  if (nb < 1) nb = 1;
  if (nb > (size_t)g->B) nb = (size_t)g->B;
  return (int)nb;
}

static int conv_check(const char *op, const gl_tensor *x, const gl_tensor *w,
                      const gl_tensor *bias, conv_geom *g, int sh, int sw, int ph, int pw) {
  char b1[128], b2[128];
  if (w->ndim != 4)
    return gl_fail(GL_ESHAPE, "%s: weight %s must be (O,C,kh,kw)", op, SHAPE(b1, w));
  int st = window_geometry(op, x, g, w->shape[2], w->shape[3], sh, sw, ph, pw);
  if (st) return st;
  if (w->shape[1] != g->C)
    return gl_fail(GL_ESHAPE, "%s: input %s has %d channels but weight %s expects %d", op,
                   SHAPE(b1, x), g->C, SHAPE(b2, w), w->shape[1]);
  g->O = w->shape[0];
  if (bias && (bias->ndim != 1 || bias->shape[0] != g->O))
    return gl_fail(GL_ESHAPE, "%s: bias %s must be (%d) for weight %s", op, SHAPE(b1, bias),
                   g->O, SHAPE(b2, w));
  return GL_OK;
}

/* ------------------------------------------------------------------------ */
/* conv2d: x (B,C,H,W), w (O,C,kh,kw), bias (O) or NULL -> y (B,O,Ho,Wo)
 *   y[b,o] = bias[o] + sum_{c,i,j} w[o,c,i,j] x[b, c, oy*sh-ph+i, ox*sw-pw+j]
 * per chunk of nb images: Y (O, nb*HoWo) = W (O,K) @ col (K, nb*HoWo)
 * backward of Y = W col:  dW += dY col^T,  dcol = W^T dY -> col2im into dx,
 *                          dbias[o] += sum over b, oy, ox of dy[b,o] */

static int conv2d_backward(gl_node *n, gl_tensor **gout) {
  gl_tensor *x = n->in[0], *w = n->in[1];
  gl_tensor *gx = gl_grad_of(n, 0), *gw = gl_grad_of(n, 1), *gb = gl_grad_of(n, 2);
  conv_geom g = geom_from_node(n, x, w->shape[0]);
  size_t K = (size_t)g.C * g.kh * g.kw, hwo = (size_t)g.Ho * g.Wo;
  const float *dy = gout[0]->data;
  if (gb)
    for (int b = 0; b < g.B; b++)
      for (int o = 0; o < g.O; o++) {
        const float *p = dy + ((size_t)b * g.O + o) * hwo;
        double s = 0;
        for (size_t k = 0; k < hwo; k++) s += p[k];
        gb->data[o] += (float)s;
      }
  if (!gx && !gw) return GL_OK;
  int nbmax = chunk_images(&g);
  float *col = gl_scratch_alloc(K * (size_t)nbmax * hwo);
  float *dyt = gl_scratch_alloc((size_t)g.O * nbmax * hwo);
  if (!col || !dyt) {
    gl_scratch_free(col, K * (size_t)nbmax * hwo);
    gl_scratch_free(dyt, (size_t)g.O * nbmax * hwo);
    return gl_fail(GL_ENOMEM, "conv2d backward: out of memory for the column buffer");
  }
  size_t xim = (size_t)g.C * g.H * g.W;
  for (int b0 = 0; b0 < g.B; b0 += nbmax) {
    int nb = g.B - b0 < nbmax ? g.B - b0 : nbmax;
    int ncol = nb * (int)hwo;
    for (int bi = 0; bi < nb; bi++)            /* dY (O, nb*HoWo) from dy (nb, O, HoWo) */
      for (int o = 0; o < g.O; o++)
        memcpy(dyt + (size_t)o * ncol + bi * hwo, dy + ((size_t)(b0 + bi) * g.O + o) * hwo,
               sizeof(float) * hwo);
    if (gw) {
      im2col(x->data + b0 * xim, nb, &g, col);
      gl_sgemm(0, 1, g.O, (int)K, ncol, 1.0f, dyt, ncol, col, ncol, 1.0f, gw->data, (int)K);
    }
    if (gx) {
      gl_sgemm(1, 0, (int)K, ncol, g.O, 1.0f, w->data, (int)K, dyt, ncol, 0.0f, col, ncol);
      col2im_add(col, nb, &g, gx->data + b0 * xim);
    }
  }
  gl_scratch_free(col, K * (size_t)nbmax * hwo);
  gl_scratch_free(dyt, (size_t)g.O * nbmax * hwo);
  return GL_OK;
}

static const gl_op op_conv2d = {"conv2d", conv2d_backward};

int gl_conv2d(gl_tensor **out, gl_tensor *x, gl_tensor *w, gl_tensor *bias, int sh, int sw,
              int ph, int pw) {
  conv_geom g;
  int st = conv_check("conv2d", x, w, bias, &g, sh, sw, ph, pw);
  if (st) return st;
  if ((st = gl_blas_init())) return st;
  if ((st = gl_empty(out, 4, (int[]){g.B, g.O, g.Ho, g.Wo}))) return st;
  size_t K = (size_t)g.C * g.kh * g.kw, hwo = (size_t)g.Ho * g.Wo;
  float *y = (*out)->data;
  if ((*out)->numel > 0) {
    int nbmax = chunk_images(&g);
    float *col = gl_scratch_alloc(K * (size_t)nbmax * hwo);
    float *yt = gl_scratch_alloc((size_t)g.O * nbmax * hwo);
    if (!col || !yt) {
      gl_scratch_free(col, K * (size_t)nbmax * hwo);
      gl_scratch_free(yt, (size_t)g.O * nbmax * hwo);
      gl_release(*out);
      *out = NULL;
      return gl_fail(GL_ENOMEM, "conv2d: out of memory for the column buffer");
    }
    size_t xim = (size_t)g.C * g.H * g.W;
    for (int b0 = 0; b0 < g.B; b0 += nbmax) {
      int nb = g.B - b0 < nbmax ? g.B - b0 : nbmax;
      int ncol = nb * (int)hwo;
      im2col(x->data + b0 * xim, nb, &g, col);
      if (K == 0) memset(yt, 0, sizeof(float) * (size_t)g.O * ncol);
      else gl_sgemm(0, 0, g.O, ncol, (int)K, 1.0f, w->data, (int)K, col, ncol, 0.0f, yt, ncol);
      for (int bi = 0; bi < nb; bi++)         /* (O, nb, HoWo) -> (nb, O, HoWo), + bias */
        for (int o = 0; o < g.O; o++) {
          float *d = y + ((size_t)(b0 + bi) * g.O + o) * hwo;
          const float *s = yt + (size_t)o * ncol + bi * hwo;
          float bo = bias ? bias->data[o] : 0.0f;
          for (size_t k = 0; k < hwo; k++) d[k] = s[k] + bo;
        }
    }
    gl_scratch_free(col, K * (size_t)nbmax * hwo);
    gl_scratch_free(yt, (size_t)g.O * nbmax * hwo);
  }
  gl_tensor *in[3] = {x, w, bias};
  gl_node *n = gl_record(&op_conv2d, 3, in, 1, out);
  if (n) geom_to_node(n, &g);
  return GL_OK;
}

/* ------------------------------------------------------------------------ */
/* conv2d_naive: the same convolution as direct loops (forward and backward), kept as the
 * oracle for the im2col kernel.  Same shapes and semantics as gl_conv2d.
 * backward of y[b,o,oy,ox] = bias[o] + sum w[o,c,i,j] x[b,c,iy,ix]:
 *   dx[b,c,iy,ix] += w[o,c,i,j] dy;  dw[o,c,i,j] += x[b,c,iy,ix] dy;  dbias[o] += dy */

static int conv2d_naive_backward(gl_node *n, gl_tensor **gout) {
  gl_tensor *x = n->in[0], *w = n->in[1];
  gl_tensor *gx = gl_grad_of(n, 0), *gw = gl_grad_of(n, 1), *gb = gl_grad_of(n, 2);
  conv_geom g = geom_from_node(n, x, w->shape[0]);
  const float *dy = gout[0]->data;
  for (int b = 0; b < g.B; b++)
    for (int o = 0; o < g.O; o++)
      for (int oy = 0; oy < g.Ho; oy++)
        for (int ox = 0; ox < g.Wo; ox++) {
          float d = dy[(((size_t)b * g.O + o) * g.Ho + oy) * g.Wo + ox];
          if (gb) gb->data[o] += d;
          for (int c = 0; c < g.C; c++)
            for (int i = 0; i < g.kh; i++) {
              int iy = oy * g.sh - g.ph + i;
              if (iy < 0 || iy >= g.H) continue;
              for (int j = 0; j < g.kw; j++) {
                int ix = ox * g.sw - g.pw + j;
                if (ix < 0 || ix >= g.W) continue;
                size_t xi = (((size_t)b * g.C + c) * g.H + iy) * g.W + ix;
                size_t wi = (((size_t)o * g.C + c) * g.kh + i) * g.kw + j;
                if (gx) gx->data[xi] += w->data[wi] * d;
                if (gw) gw->data[wi] += x->data[xi] * d;
              }
            }
        }
  return GL_OK;
}

static const gl_op op_conv2d_naive = {"conv2d_naive", conv2d_naive_backward};

int gl_conv2d_naive(gl_tensor **out, gl_tensor *x, gl_tensor *w, gl_tensor *bias, int sh,
                    int sw, int ph, int pw) {
  conv_geom g;
  int st = conv_check("conv2d_naive", x, w, bias, &g, sh, sw, ph, pw);
  if (st) return st;
  if ((st = gl_empty(out, 4, (int[]){g.B, g.O, g.Ho, g.Wo}))) return st;
  float *y = (*out)->data;
  for (int b = 0; b < g.B; b++)
    for (int o = 0; o < g.O; o++)
      for (int oy = 0; oy < g.Ho; oy++)
        for (int ox = 0; ox < g.Wo; ox++) {
          double s = bias ? bias->data[o] : 0.0;
          for (int c = 0; c < g.C; c++)
            for (int i = 0; i < g.kh; i++) {
              int iy = oy * g.sh - g.ph + i;
              if (iy < 0 || iy >= g.H) continue;
              for (int j = 0; j < g.kw; j++) {
                int ix = ox * g.sw - g.pw + j;
                if (ix < 0 || ix >= g.W) continue;
                s += (double)w->data[(((size_t)o * g.C + c) * g.kh + i) * g.kw + j] *
                     x->data[(((size_t)b * g.C + c) * g.H + iy) * g.W + ix];
              }
            }
          y[(((size_t)b * g.O + o) * g.Ho + oy) * g.Wo + ox] = (float)s;
        }
  gl_tensor *in[3] = {x, w, bias};
  gl_node *n = gl_record(&op_conv2d_naive, 3, in, 1, out);
  if (n) geom_to_node(n, &g);
  return GL_OK;
}

/* ------------------------------------------------------------------------ */
/* pooling windows: PyTorch's rule that padding is at most half the kernel keeps every
 * window overlapping the image, so a max always exists */

static int pool_check(const char *op, const gl_tensor *x, conv_geom *g, int kh, int kw, int sh,
                      int sw, int ph, int pw) {
  int st = window_geometry(op, x, g, kh, kw, sh, sw, ph, pw);
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

static void avg2x2_row(const float *r0, const float *r1, int Wo, float *y) {
  for (int ox = 0; ox < Wo; ox++)
    y[ox] = (r0[2 * ox] + r0[2 * ox + 1] + r1[2 * ox] + r1[2 * ox + 1]) * 0.25f;
}

/* ------------------------------------------------------------------------ */
/* max_pool2d: x (B,C,H,W) -> y (B,C,Ho,Wo), y = max over the window (padding never wins);
 * the flat in-plane index of each maximum is kept (first one on ties).
 * backward of y[p] = x[argmax(p)]:  dx[argmax(p)] += dy[p] */

static int max_pool2d_backward(gl_node *n, gl_tensor **gout) {
  gl_tensor *gx = gl_grad_of(n, 0);
  if (!gx) return GL_OK;
  const float *arg = n->saved[0]->data;
  const gl_tensor *x = n->in[0];
  size_t planes = (size_t)x->shape[0] * x->shape[1], plane = (size_t)x->shape[2] * x->shape[3];
  size_t hwo = gout[0]->numel / (planes ? planes : 1);
  const float *dy = gout[0]->data;
  for (size_t p = 0; p < planes; p++)
    for (size_t k = 0; k < hwo; k++)
      gx->data[p * plane + (size_t)arg[p * hwo + k]] += dy[p * hwo + k];
  return GL_OK;
}

static const gl_op op_max_pool2d = {"max_pool2d", max_pool2d_backward};

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
  float *y = (*out)->data, *arg = idx ? idx->data : NULL;
  for (size_t p = 0; p < planes; p++) {
    const float *xp = x->data + p * plane;
    for (int oy = 0; oy < g.Ho; oy++) {
      size_t o = p * hwo + (size_t)oy * g.Wo;
      if (is_2x2(&g) && !max2x2_row(xp + 2 * oy * g.W, xp + (2 * oy + 1) * g.W, g.W, g.Wo,
                                    2 * oy * g.W, y + o, arg ? arg + o : NULL))
        continue;
      for (int ox = 0; ox < g.Wo; ox++) {
        int y0 = oy * g.sh - g.ph, x0 = ox * g.sw - g.pw;
        int ya = y0 < 0 ? 0 : y0, yb = y0 + g.kh > g.H ? g.H : y0 + g.kh;
        int xa = x0 < 0 ? 0 : x0, xb = x0 + g.kw > g.W ? g.W : x0 + g.kw;
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
        y[o + ox] = best;
        if (arg) arg[o + ox] = (float)bi;
      }
    }
  }
  gl_node *n = gl_record(&op_max_pool2d, 1, &x, 1, out);
  gl_save(n, idx);
  gl_release(idx);
  return GL_OK;
}

/* ------------------------------------------------------------------------ */
/* avg_pool2d: x (B,C,H,W) -> y (B,C,Ho,Wo), y = (sum over the window's image part) / (kh*kw)
 * (zero padding counts in the divisor: PyTorch's count_include_pad=True).
 * backward: dx[q] += dy[p] / (kh*kw) for every q in window p */

static int avg_pool2d_backward(gl_node *n, gl_tensor **gout) {
  gl_tensor *gx = gl_grad_of(n, 0);
  if (!gx) return GL_OK;
  conv_geom g = geom_from_node(n, n->in[0], n->in[0]->shape[1]);
  size_t planes = (size_t)g.B * g.C, plane = (size_t)g.H * g.W, hwo = (size_t)g.Ho * g.Wo;
  float inv = 1.0f / (float)(g.kh * g.kw);
  const float *dy = gout[0]->data;
  for (size_t p = 0; p < planes; p++) {
    float *dx = gx->data + p * plane;
    for (int oy = 0; oy < g.Ho; oy++)
      for (int ox = 0; ox < g.Wo; ox++) {
        int y0 = oy * g.sh - g.ph, x0 = ox * g.sw - g.pw;
        int ya = y0 < 0 ? 0 : y0, yb = y0 + g.kh > g.H ? g.H : y0 + g.kh;
        int xa = x0 < 0 ? 0 : x0, xb = x0 + g.kw > g.W ? g.W : x0 + g.kw;
        float d = dy[p * hwo + (size_t)oy * g.Wo + ox] * inv;
        for (int iy = ya; iy < yb; iy++)
          for (int ix = xa; ix < xb; ix++) dx[iy * g.W + ix] += d;
      }
  }
  return GL_OK;
}

static const gl_op op_avg_pool2d = {"avg_pool2d", avg_pool2d_backward};

int gl_avg_pool2d(gl_tensor **out, gl_tensor *x, int kh, int kw, int sh, int sw, int ph,
                  int pw) {
  conv_geom g;
  int st = pool_check("avg_pool2d", x, &g, kh, kw, sh, sw, ph, pw);
  if (st) return st;
  if ((st = gl_empty(out, 4, (int[]){g.B, g.C, g.Ho, g.Wo}))) return st;
  size_t planes = (size_t)g.B * g.C, plane = (size_t)g.H * g.W, hwo = (size_t)g.Ho * g.Wo;
  float inv = 1.0f / (float)(kh * kw);
  float *y = (*out)->data;
  for (size_t p = 0; p < planes; p++) {
    const float *xp = x->data + p * plane;
    for (int oy = 0; oy < g.Ho; oy++) {
      if (is_2x2(&g)) {
        avg2x2_row(xp + 2 * oy * g.W, xp + (2 * oy + 1) * g.W, g.Wo,
                   y + p * hwo + (size_t)oy * g.Wo);
        continue;
      }
      for (int ox = 0; ox < g.Wo; ox++) {
        int y0 = oy * g.sh - g.ph, x0 = ox * g.sw - g.pw;
        int ya = y0 < 0 ? 0 : y0, yb = y0 + g.kh > g.H ? g.H : y0 + g.kh;
        int xa = x0 < 0 ? 0 : x0, xb = x0 + g.kw > g.W ? g.W : x0 + g.kw;
        float s = 0;
        for (int iy = ya; iy < yb; iy++)
          for (int ix = xa; ix < xb; ix++) s += xp[iy * g.W + ix];
        y[p * hwo + (size_t)oy * g.Wo + ox] = s * inv;
      }
    }
  }
  gl_node *n = gl_record(&op_avg_pool2d, 1, &x, 1, out);
  if (n) geom_to_node(n, &g);
  return GL_OK;
}
