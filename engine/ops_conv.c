/* ops_conv.c -- 2-D convolution over (B,C,H,W) images, the CNN feature extractor's main op
 * (pooling is in ops_pool.c; the window geometry both use is in ops_conv.h).
 *
 * conv2d lowers images to columns (im2col) and multiplies them by the weights with one
 * sgemm per chunk: one image when its output is wide enough (the product then writes the
 * output in place), else a few small images together; chunks are sized to stay in cache
 * between im2col, the sgemm and col2im.  Its backward recomputes the columns (cheaper than
 * keeping B*C*kh*kw*Ho*Wo floats alive) for the weight gradient and scatters the column
 * gradient back with col2im.  3x3 stride-1 convolutions with enough channels take
 * Winograd's F(4x4, 3x3) or F(2x2, 3x3) instead for the output and the input gradient
 * (ops_conv_winograd.c).  A direct seven-loop kernel (forward and backward)
 * stays beside them as the oracle the tests hold both fast paths against.
 *
 * Threads (parallel.h): im2col by column-matrix rows, col2im by input channels, the bias
 * and layout loops by channels.  Each output element is computed by one
 * thread in the serial order, so results do not depend on the thread count.
 */
#include "glimpse_internal.h"
#include "ops_conv.h"
#include "parallel.h"
#include "vmath.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SHAPE(buf, t) gl_shape_str(buf, sizeof buf, (t)->ndim, (t)->shape)

/* floats of columns (or transposed output) one chunk of small images may use: 1 MB, about
 * an L2 cache, so im2col's output is still there when sgemm reads it */
#define CONV_CHUNK_FLOATS ((size_t)1 << 18)
/* forward: an image whose columns exceed this many floats (4 MB) is done in bands of output
 * rows (conv_chunks_range) */
#define CONV_BAND_FLOATS ((size_t)1 << 20)
/* output pixels from which an image is a chunk of its own (see chunk_images) */
#define CONV_WIDE_IMAGE 256
/* output pixels below which an image's product is thin whatever the chunk's buffer */
#define CONV_THIN 128

/* conv_geom, its node state and gl_conv_window are shared with pooling: ops_conv.h */

/* Check the window against the input and work out the output size.  `op` names the caller. */
int gl_conv_window(const char *op, const gl_tensor *x, conv_geom *g, int kh, int kw, int sh,
                   int sw, int ph, int pw) {
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

typedef struct {
  const conv_geom *g;
  const float *x;   /* im2col: the images; col2im: the columns */
  float *y;         /* im2col: the columns; col2im: dx */
  int nb;
  int oy0, oy1;     /* im2col: the output rows whose columns are made (all: 0, Ho) */
} cols_ctx;

/* r[ox] = x[2 ox] for ox in [lo, hi) */
static void strided2(float *restrict r, const float *restrict x, int lo, int hi) {
  for (int ox = lo; ox < hi; ox++) r[ox] = x[2 * ox];
}

/* rows [lo, hi) of the column matrix, row r = (c * kh + i) * kw + j */
static void im2col_range(void *ctx, size_t first, size_t last, int slot) {
  (void)slot;
  const cols_ctx *k = ctx;
  const conv_geom *g = k->g;
  const float *x = k->x;
  int nb = k->nb;
  size_t hwo = (size_t)(k->oy1 - k->oy0) * g->Wo, ncol = (size_t)nb * hwo;
  size_t plane = (size_t)g->H * g->W;
  for (size_t q = first; q < last; q++) {
    int j = (int)(q % (size_t)g->kw), i = (int)(q / (size_t)g->kw % (size_t)g->kh);
    int c = (int)(q / ((size_t)g->kw * g->kh));
    float *row = k->y + q * ncol;
    /* the ox range whose input column lies inside the image */
    int lo = 0, hi = g->Wo;
    while (lo < hi && lo * g->sw - g->pw + j < 0) lo++;
    while (hi > lo && (hi - 1) * g->sw - g->pw + j >= g->W) hi--;
    for (int bi = 0; bi < nb; bi++) {
      const float *xp = x + ((size_t)bi * g->C + c) * plane;
      float *r = row + bi * hwo;
      for (int oy = k->oy0; oy < k->oy1; oy++, r += g->Wo) {
        int iy = oy * g->sh - g->ph + i;
        if (iy < 0 || iy >= g->H) {
          memset(r, 0, sizeof(float) * (size_t)g->Wo);
          continue;
        }
        const float *xr = xp + (size_t)iy * g->W - g->pw + j;
        for (int ox = 0; ox < lo; ox++) r[ox] = 0;
        if (g->sw == 1) memcpy(r + lo, xr + lo, sizeof(float) * (size_t)(hi - lo));
        else if (g->sw == 2) strided2(r, xr, lo, hi);   /* a constant stride vectorises */
        else for (int ox = lo; ox < hi; ox++) r[ox] = xr[ox * g->sw];
        for (int ox = hi; ox < g->Wo; ox++) r[ox] = 0;
      }
    }
  }
}

/* the columns of output rows [oy0, oy1) of nb images: col (K, nb * (oy1 - oy0) * Wo) */
static void im2col_rows(const float *x, int nb, const conv_geom *g, int oy0, int oy1, float *col) {
  size_t K = (size_t)g->C * g->kh * g->kw;
  cols_ctx c = {g, x, col, nb, oy0, oy1};
  gl_parallel_for(K, (size_t)nb * (size_t)(oy1 - oy0) * g->Wo, im2col_range, &c);
}

static void im2col(const float *x, int nb, const conv_geom *g, float *col) {
  im2col_rows(x, nb, g, 0, g->Ho, col);
}

/* the adjoint of im2col: dx[image, c, iy, ix] += every column entry that copied it */
/* input channels [lo, hi): each channel's planes gather from its own kh * kw column rows */
static void col2im_range(void *ctx, size_t first, size_t last, int slot) {
  (void)slot;
  const cols_ctx *k = ctx;
  const conv_geom *g = k->g;
  const float *col = k->x;
  float *dx = k->y;
  int nb = k->nb;
  size_t hwo = (size_t)g->Ho * g->Wo, ncol = (size_t)nb * hwo, plane = (size_t)g->H * g->W;
  for (int c = (int)first; c < (int)last; c++)
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

static void col2im_add(const float *col, int nb, const conv_geom *g, float *dx) {
  cols_ctx c = {g, col, dx, nb, 0, g->Ho};
  gl_parallel_for((size_t)g->C, (size_t)g->kh * g->kw * nb * g->Ho * g->Wo, col2im_range, &c);
}

/* Images per chunk.  An image with at least CONV_WIDE_IMAGE output pixels is a chunk of its
 * own: its product W (O,K) @ col (K,HoWo) is wide enough for sgemm, it writes straight into
 * the image's output (O,HoWo) with no transposition, and its columns stay in the L2 cache
 * between im2col, the sgemm and col2im.  Smaller images are batched until the columns (or
 * the transposed output) reach CONV_CHUNK_FLOATS. */
static int chunk_images(const conv_geom *g) {
  size_t K = (size_t)g->C * g->kh * g->kw, hwo = (size_t)g->Ho * g->Wo;
  if (hwo >= CONV_WIDE_IMAGE) return 1;
  size_t per = (K > (size_t)g->O ? K : (size_t)g->O) * hwo;
  size_t nb = per ? CONV_CHUNK_FLOATS / per : (size_t)g->B;
  /* but images of fewer than CONV_THIN pixels go CONV_WIDE_IMAGE columns at a time: their
   * products run far below the BLAS's rate otherwise (ResNet-18's 7 x 7 stride-2 layer at
   * batch 8: 5.4 ms on two threads in chunks of 2 images, 5.0 in 3, 4.3 in 6); from
   * CONV_THIN on the transposition a batched chunk needs costs more than it saves */
  if (hwo < CONV_THIN && nb < (CONV_WIDE_IMAGE + hwo - 1) / hwo)
    nb = (CONV_WIDE_IMAGE + hwo - 1) / hwo;
  if (nb < 1) nb = 1;
  if (nb > (size_t)g->B) nb = (size_t)g->B;
  return (int)nb;
}

static int conv_check(const char *op, const gl_tensor *x, const gl_tensor *w,
                      const gl_tensor *bias, conv_geom *g, int sh, int sw, int ph, int pw) {
  char b1[128], b2[128];
  if (w->ndim != 4)
    return gl_fail(GL_ESHAPE, "%s: weight %s must be (O,C,kh,kw)", op, SHAPE(b1, w));
  int st = gl_conv_window(op, x, g, w->shape[2], w->shape[3], sh, sw, ph, pw);
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
 * per chunk of nb images: Y (O, nb*HoWo) = W (O,K) @ col (K, nb*HoWo) (nb = 1: Y is y[b])
 * backward of Y = W col:  dW += dY col^T,  dcol = W^T dY -> col2im into dx,
 *                          dbias[o] += sum over b, oy, ox of dy[b,o] */

/* whether input i will get a gradient (gl_grad_of's test, without making the buffer) */
static int wants_grad(const gl_node *n, int i) {
  const gl_tensor *x = n->in[i];
  return x && x->requires_grad && !(x->node && x->node->released);
}

/* the per-channel loops of conv2d on the pool: items are output channels o (or, for the
 * layout moves, (image, channel) pairs q = bi * O + o) */
typedef struct {
  const conv_geom *g;
  const float *src, *bias;
  float *dst;
  int b0, nb, fresh;
} chan_ctx;

/* dbias[o] (+)= sum over b, oy, ox of dy[b, o] */
static void bias_grad_range(void *ctx, size_t lo, size_t hi, int slot) {
  (void)slot;
  const chan_ctx *k = ctx;
  const conv_geom *g = k->g;
  size_t hwo = (size_t)g->Ho * g->Wo;
  for (size_t o = lo; o < hi; o++) {
    double s = 0;
    for (int b = 0; b < g->B; b++) s += vm_sum_d(k->src + ((size_t)b * g->O + o) * hwo, hwo);
    if (k->fresh) k->dst[o] = (float)s;
    else k->dst[o] += (float)s;
  }
}

/* (nb, O, HoWo) -> (O, nb*HoWo): dst[o, bi, :] = src[b0 + bi, o, :] */
static void to_channel_major_range(void *ctx, size_t lo, size_t hi, int slot) {
  (void)slot;
  const chan_ctx *k = ctx;
  const conv_geom *g = k->g;
  size_t hwo = (size_t)g->Ho * g->Wo, ncol = (size_t)k->nb * hwo;
  for (size_t q = lo; q < hi; q++) {
    size_t bi = q / (size_t)g->O, o = q % (size_t)g->O;
    memcpy(k->dst + o * ncol + bi * hwo, k->src + ((size_t)(k->b0 + bi) * g->O + o) * hwo,
           sizeof(float) * hwo);
  }
}

/* (O, nb*HoWo) -> (nb, O, HoWo) with the bias: dst[b0 + bi, o, :] = src[o, bi, :] + bias[o];
 * src NULL: the bias alone (nb = 1, before a product that adds into dst) */
static void from_channel_major_range(void *ctx, size_t lo, size_t hi, int slot) {
  (void)slot;
  const chan_ctx *k = ctx;
  const conv_geom *g = k->g;
  size_t hwo = (size_t)g->Ho * g->Wo, ncol = (size_t)k->nb * hwo;
  for (size_t q = lo; q < hi; q++) {
    size_t bi = q / (size_t)g->O, o = q % (size_t)g->O;
    float *d = k->dst + ((size_t)(k->b0 + bi) * g->O + o) * hwo;
    float bo = k->bias ? k->bias[o] : 0.0f;
    if (!k->src) {
      for (size_t i = 0; i < hwo; i++) d[i] = bo;
      continue;
    }
    const float *sp = k->src + o * ncol + bi * hwo;
    for (size_t i = 0; i < hwo; i++) d[i] = sp[i] + bo;
  }
}

/* a 1x1 stride-1 unpadded convolution's columns for one image are the image itself */
static int is_pointwise(const conv_geom *g) {
  return g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 && g->ph == 0 && g->pw == 0;
}

/* The weight gradient dW += sum over chunks of dY col^T as CONV_DW_GROUPS partial sums over
 * fixed runs of chunks, side by side on the pool (each thread its own columns, OpenBLAS on
 * one thread), then added into dW in group order.  The runs depend only on the shapes, so
 * the result is the same bits on any thread count.  For chunks whose product is below
 * CONV_DW_GROUP_MNK; bigger ones run one after the other on OpenBLAS's threads. */
#define CONV_DW_GROUPS 8
#define CONV_DW_GROUP_MNK ((double)(1 << 26))

/* conv2d's chunks of images on the pool, forward (conv_chunks_range) and weight gradient
 * (dw_groups_range): col and yt (the transposed output, or dY in channel-major layout) hold
 * one buffer of ncolf and nytf floats per pool slot */
typedef struct {
  const conv_geom *g;
  const float *x, *w, *bias, *dy;
  float *y, *col, *yt, *part;   /* part: the weight gradient's (O, K) partial sum per group */
  size_t ncolf, nytf;
  int nbmax, nchunks, groups;
} chunks_ctx;

/* the slot's column buffer, and its yt buffer (NULL when there is none) */
static float *slot_buffers(const chunks_ctx *k, int slot, float **yt) {
  *yt = k->yt ? k->yt + (size_t)slot * k->nytf : NULL;
  return k->col + (size_t)slot * k->ncolf;
}

static void dw_groups_range(void *ctx, size_t lo, size_t hi, int slot) {
  const chunks_ctx *k = ctx;
  const conv_geom *g = k->g;
  size_t K = (size_t)g->C * g->kh * g->kw, hwo = (size_t)g->Ho * g->Wo;
  size_t xim = (size_t)g->C * g->H * g->W;
  float *dyt, *col = slot_buffers(k, slot, &dyt);
  for (size_t gi = lo; gi < hi; gi++) {
    int c0 = (int)(gi * (size_t)k->nchunks / (size_t)k->groups);
    int c1 = (int)((gi + 1) * (size_t)k->nchunks / (size_t)k->groups);
    float *part = k->part + gi * (size_t)g->O * K;
    for (int ch = c0; ch < c1; ch++) {
      int b0 = ch * k->nbmax, nb = g->B - b0 < k->nbmax ? g->B - b0 : k->nbmax;
      int ncol = nb * (int)hwo;
      const float *dY = k->dy + (size_t)b0 * g->O * hwo, *cp = col;
      if (nb > 1) {   /* dY (O, nb*HoWo) from dy (nb, O, HoWo) */
        chan_ctx c = {g, k->dy, NULL, dyt, b0, nb, 0};
        to_channel_major_range(&c, 0, (size_t)nb * g->O, slot);
        dY = dyt;
      }
      if (nb == 1 && is_pointwise(g)) cp = k->x + b0 * xim;
      else im2col(k->x + b0 * xim, nb, g, col);
      gl_sgemm(0, 1, g->O, (int)K, ncol, 1.0f, dY, ncol, cp, ncol, ch == c0 ? 0.0f : 1.0f, part,
               (int)K);
    }
  }
}

/* dW[i] += the groups' partial sums at i, in group order */
typedef struct { const float *part; float *gw; size_t n; int groups; } dw_sum_ctx;

static void dw_sum_range(void *ctx, size_t lo, size_t hi, int slot) {
  (void)slot;
  const dw_sum_ctx *k = ctx;
  for (size_t i = lo; i < hi; i++) {
    float s = k->gw[i];
    for (int gi = 0; gi < k->groups; gi++) s += k->part[(size_t)gi * k->n + i];
    k->gw[i] = s;
  }
}

static int conv2d_backward(gl_node *n, gl_tensor **gout) {
  gl_tensor *x = n->in[0], *w = n->in[1];
  conv_geom g = geom_from_node(n);
  size_t K = (size_t)g.C * g.kh * g.kw, hwo = (size_t)g.Ho * g.Wo;
  const float *dy = gout[0]->data;
  int fb, fw, fx;
  gl_tensor *gb = gl_grad_slot(n, 2, &fb);
  if (gb) {
    chan_ctx c = {&g, dy, NULL, gb->data, 0, 0, fb};
    gl_parallel_for((size_t)g.O, (size_t)g.B * hwo, bias_grad_range, &c);
  }
  int want_x = wants_grad(n, 0), want_w = wants_grad(n, 1);
  if (!want_x && !want_w) return GL_OK;
  int wino = want_x && gl_wino_use_dx(&g);   /* dx by Winograd, the rest by columns */
  int cols = want_w || (want_x && !wino);
  int nbmax = chunk_images(&g), nchunks = (g.B + nbmax - 1) / nbmax;
  int groups = nchunks < CONV_DW_GROUPS ? nchunks : CONV_DW_GROUPS;
  int grouped = want_w && groups >= 2 && (double)g.O * K * nbmax * hwo < CONV_DW_GROUP_MNK;
  size_t slots = grouped ? (size_t)gl_parallel_slots() : 1;
  int wm = wino ? gl_wino_tile(g.H, g.W, 0) : 2;
  size_t ncol_max = (size_t)nbmax * hwo, nU = wino ? (size_t)(wm + 2) * (wm + 2) * g.O * g.C : 0;
  size_t ncolf = K * ncol_max, nytf = nbmax > 1 ? (size_t)g.O * ncol_max : 0;
  size_t npart = grouped ? (size_t)groups * g.O * K : 0;
  float *col = cols ? gl_scratch_alloc(ncolf * slots) : NULL;
  float *dyt = cols && nytf ? gl_scratch_alloc(nytf * slots) : NULL;
  float *U = wino ? gl_scratch_alloc(nU) : NULL;
  float *part = grouped ? gl_scratch_alloc(npart) : NULL;
  if ((cols && !col) || (cols && nytf && !dyt) || (wino && !U) || (grouped && !part)) {
    gl_scratch_free(col, ncolf * slots);
    gl_scratch_free(dyt, nytf * slots);
    gl_scratch_free(U, nU);
    gl_scratch_free(part, npart);
    return gl_fail(GL_ENOMEM, "conv2d backward: out of memory for the column buffer");
  }
  /* the gradient buffers are fetched only now that allocation is done: a fresh one must be
   * assigned in full, even when the Winograd buffers below fail */
  gl_tensor *gw = gl_grad_slot(n, 1, &fw), *gx = gl_grad_slot(n, 0, &fx);
  size_t xim = (size_t)g.C * g.H * g.W;
  if (gw && fw) memset(gw->data, 0, gw->numel * sizeof(float));
  int st = GL_OK;
  if (gx && wino) {   /* dx = dy (*) w turned 180 degrees, channels swapped, padding 2 - p */
    gl_wino_weights(w->data, g.O, g.C, 1, wm, U);
    st = gl_wino_conv(dy, g.B, g.O, g.Ho, g.Wo, 2 - g.ph, 2 - g.pw, U, wm, g.C, NULL, !fx,
                       gx->data);
    if (st && fx) memset(gx->data, 0, gx->numel * sizeof(float));
    gx = NULL;
  }
  if (!st && gw && grouped) {
    chunks_ctx c = {&g, x->data, NULL, NULL, dy, NULL, col, dyt, part, ncolf, nytf, nbmax,
                    nchunks, groups};
    gl_parallel_blas((size_t)groups, 2 * (size_t)g.O * K * ncol_max * (size_t)nchunks / groups,
                     dw_groups_range, &c);
    dw_sum_ctx sc = {part, gw->data, gw->numel, groups};
    gl_parallel_for(gw->numel, (size_t)groups, dw_sum_range, &sc);
    gw = NULL;
  }
  for (int b0 = 0; !st && (gw || gx) && b0 < g.B; b0 += nbmax) {
    int nb = g.B - b0 < nbmax ? g.B - b0 : nbmax;
    int ncol = nb * (int)hwo;
    const float *dY = dy + (size_t)b0 * g.O * hwo;   /* one image: (O, HoWo) as it is */
    if (nb > 1) {                                     /* dY (O, nb*HoWo) from dy (nb, O, HoWo) */
      chan_ctx c = {&g, dy, NULL, dyt, b0, nb, 0};
      gl_parallel_for((size_t)nb * g.O, hwo, to_channel_major_range, &c);
      dY = dyt;
    }
    if (gw) {
      const float *cp = col;
      if (nb == 1 && is_pointwise(&g)) cp = x->data + b0 * xim;
      else im2col(x->data + b0 * xim, nb, &g, col);
      gl_sgemm(0, 1, g.O, (int)K, ncol, 1.0f, dY, ncol, cp, ncol, 1.0f, gw->data, (int)K);
    }
    if (gx) {
      float *dx = gx->data + b0 * xim;
      if (nb == 1 && is_pointwise(&g)) {   /* dx (C, HW) is the column gradient itself */
        gl_sgemm(1, 0, (int)K, ncol, g.O, 1.0f, w->data, (int)K, dY, ncol, fx ? 0.0f : 1.0f,
                 dx, ncol);
        continue;
      }
      if (fx) memset(dx, 0, sizeof(float) * xim * (size_t)nb);   /* in cache, just before use */
      gl_sgemm(1, 0, (int)K, ncol, g.O, 1.0f, w->data, (int)K, dY, ncol, 0.0f, col, ncol);
      col2im_add(col, nb, &g, dx);
    }
  }
  gl_scratch_free(col, ncolf * slots);
  gl_scratch_free(dyt, nytf * slots);
  gl_scratch_free(U, nU);
  gl_scratch_free(part, npart);
  return st;
}

static const gl_op op_conv2d = {"conv2d", conv2d_backward};

/* chunks [lo, hi) of nbmax images: im2col, the product, the bias (and layout) */
static void conv_chunks_range(void *ctx, size_t lo, size_t hi, int slot) {
  const chunks_ctx *k = ctx;
  const conv_geom *g = k->g;
  size_t K = (size_t)g->C * g->kh * g->kw, hwo = (size_t)g->Ho * g->Wo;
  size_t xim = (size_t)g->C * g->H * g->W;
  float *yt, *col = slot_buffers(k, slot, &yt);
  for (size_t ch = lo; ch < hi; ch++) {
    int b0 = (int)ch * k->nbmax;
    int nb = g->B - b0 < k->nbmax ? g->B - b0 : k->nbmax;
    int ncol = nb * (int)hwo;
    chan_ctx c = {g, NULL, k->bias, k->y, b0, nb, 0};
    if (nb == 1 && !is_pointwise(g) && K * hwo > CONV_BAND_FLOATS) {
      /* a large image: its columns in bands of output rows that stay in cache between
       * im2col and the product (one image's columns can be 100 MB: VGG's first layers) */
      float *yb = k->y + (size_t)b0 * g->O * hwo;
      int rows = (int)(CONV_BAND_FLOATS / (K * (size_t)g->Wo));
      if (rows < 1) rows = 1;
      if (k->bias) gl_parallel_for((size_t)g->O, hwo, from_channel_major_range, &c);
      for (int oy0 = 0; oy0 < g->Ho; oy0 += rows) {
        int oy1 = oy0 + rows < g->Ho ? oy0 + rows : g->Ho, n = (oy1 - oy0) * g->Wo;
        im2col_rows(k->x + b0 * xim, 1, g, oy0, oy1, col);
        gl_sgemm(0, 0, g->O, n, (int)K, 1.0f, k->w, (int)K, col, n, k->bias ? 1.0f : 0.0f,
                 yb + (size_t)oy0 * g->Wo, (int)hwo);
      }
      continue;
    }
    const float *cp = col;
    if (nb == 1 && is_pointwise(g)) cp = k->x + b0 * xim;   /* no copy needed */
    else im2col(k->x + b0 * xim, nb, g, col);
    if (nb == 1) {   /* one image: its output (O, HoWo) is the product's layout */
      float *yb = k->y + (size_t)b0 * g->O * hwo;
      if (k->bias) gl_parallel_for((size_t)g->O, hwo, from_channel_major_range, &c);
      gl_sgemm(0, 0, g->O, ncol, (int)K, 1.0f, k->w, (int)K, cp, ncol, k->bias ? 1.0f : 0.0f,
               yb, ncol);   /* onto the bias, or (none) straight into the output */
      continue;
    }
    gl_sgemm(0, 0, g->O, ncol, (int)K, 1.0f, k->w, (int)K, cp, ncol, 0.0f, yt, ncol);
    c.src = yt;                             /* (O, nb, HoWo) -> (nb, O, HoWo), + bias */
    gl_parallel_for((size_t)nb * g->O, hwo, from_channel_major_range, &c);
  }
}

int gl_conv2d(gl_tensor **out, gl_tensor *x, gl_tensor *w, gl_tensor *bias, int sh, int sw,
              int ph, int pw) {
  conv_geom g;
  int st = conv_check("conv2d", x, w, bias, &g, sh, sw, ph, pw);
  if (st) return st;
  if ((st = gl_blas_init())) return st;
  if ((st = gl_empty(out, 4, (int[]){g.B, g.O, g.Ho, g.Wo}))) return st;
  size_t K = (size_t)g.C * g.kh * g.kw, hwo = (size_t)g.Ho * g.Wo;
  float *y = (*out)->data;
  if ((*out)->numel > 0 && gl_wino_use(&g)) {
    /* weights no tape will change (inference, or frozen) may keep their transform */
    int keep = !(w->requires_grad && gl_grad_enabled());
    int wm = gl_wino_tile(g.Ho, g.Wo, keep);
    size_t nU = (size_t)(wm + 2) * (wm + 2) * g.O * g.C;
    size_t tiles = (size_t)g.B * ((g.Ho + wm - 1) / wm) * ((g.Wo + wm - 1) / wm);
    const float *kept = keep ? gl_wino_cached_weights(w, g.O, g.C, wm, tiles) : NULL;
    float *U = kept ? NULL : gl_scratch_alloc(nU);
    st = kept || U ? GL_OK : gl_fail(GL_ENOMEM, "conv2d: out of memory for the Winograd weights");
    if (U) gl_wino_weights(w->data, g.O, g.C, 0, wm, U);
    if (!st)
      st = gl_wino_conv(x->data, g.B, g.C, g.H, g.W, g.ph, g.pw, kept ? kept : U, wm, g.O,
                        bias ? bias->data : NULL, 0, y);
    gl_scratch_free(U, nU);
    if (st) {
      gl_release(*out);
      *out = NULL;
      return st;
    }
  } else if ((*out)->numel > 0) {
    int nbmax = chunk_images(&g), nchunks = (g.B + nbmax - 1) / nbmax;
    /* chunks whose product is too small for OpenBLAS's threads run side by side, one per
     * pool thread, each with its own column buffer: no wake-up per im2col, bias fill and
     * product (blocks of one product would need three), and each thread's columns stay in
     * its own cache.  A product is the same bits whichever thread computes it. */
    int side = nchunks >= 2 && !gl_sgemm_threaded(g.O, nbmax * (int)hwo, (int)K);
    size_t slots = side ? (size_t)gl_parallel_slots() : 1;
    size_t ncolf = K * (size_t)nbmax * hwo, nytf = nbmax > 1 ? (size_t)g.O * nbmax * hwo : 0;
    float *col = gl_scratch_alloc(ncolf * slots);
    float *yt = nytf ? gl_scratch_alloc(nytf * slots) : NULL;
    if (!col || (nytf && !yt)) {
      gl_scratch_free(col, ncolf * slots);
      gl_scratch_free(yt, nytf * slots);
      gl_release(*out);
      *out = NULL;
      return gl_fail(GL_ENOMEM, "conv2d: out of memory for the column buffer");
    }
    chunks_ctx c = {&g, x->data, w->data, bias ? bias->data : NULL, NULL, y, col, yt, NULL, ncolf,
                    nytf, nbmax, nchunks, 0};
    if (side) gl_parallel_blas((size_t)nchunks, 2 * (size_t)g.O * nbmax * hwo * K, conv_chunks_range, &c);
    else conv_chunks_range(&c, 0, (size_t)nchunks, 0);
    gl_scratch_free(col, ncolf * slots);
    gl_scratch_free(yt, nytf * slots);
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
  conv_geom g = geom_from_node(n);
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
