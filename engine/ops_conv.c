/* ops_conv.c -- 2-D convolution over (B,C,H,W) images, the CNN feature extractor's main op
 * (pooling is in ops_pool.c; the window geometry both use is in ops_conv.h).
 *
 * conv2d lowers images to columns (im2col) and multiplies them by the weights with one
 * sgemm per chunk: one image when its output is wide enough (the product then writes the
 * output in place), else a few small images together; chunks are sized to stay in cache
 * between im2col, the sgemm and col2im.  Its backward recomputes the columns (cheaper than
 * keeping B*C*kh*kw*Ho*Wo floats alive) for the weight gradient and scatters the column
 * gradient back with col2im.  3x3 stride-1 convolutions with enough channels take
 * Winograd's F(2x2, 3x3) instead for the output and the input gradient (2.25 times fewer
 * multiply-adds; see its section).  A direct seven-loop kernel (forward and backward)
 * stays beside them as the oracle the tests hold both fast paths against.
 *
 * Threads (parallel.h): im2col by column-matrix rows, col2im by input channels, the
 * Winograd transforms by (image, channel) planes with a scratch per pool thread, Winograd's
 * 16 products side by side when each is too small for OpenBLAS's threads, the bias and
 * layout loops by channels.  Each output element is computed by one
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
/* Winograd F(2x2, 3x3) (Lavin and Gray 2016, "Fast algorithms for convolutional neural
 * networks"): a 3x3 stride-1 convolution computed per 2x2 output tile from the 4x4 input
 * tile d under it as
 *     Y = A^T [ (G g G^T) . (B^T d B) ] A,      B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1],
 *     G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1],   A^T = [1 1 1 0; 0 1 -1 -1].
 * Summed over input channels, the elementwise product becomes 16 matrix products
 *     M_k (Co, tiles) = U_k (Co, Ci) @ V_k (Ci, tiles),   k = 4p + q over the 4x4 grid,
 * 16 Co Ci multiply-adds per 4 output pixels instead of 36 Co Ci: 2.25 times fewer, for two
 * transforms made of adds and a little more float rounding (about 1e-6 relative; the tests
 * hold it against the direct loops).  conv2d's forward uses it, and so does its input
 * gradient: the adjoint of a stride-1 convolution is the convolution of dy with the kernel
 * turned 180 degrees, channels swapped, padding 2 - p.  The weight gradient keeps im2col.
 *
 * F(4x4, 3x3), the same on 6x6 input tiles read every 4 pixels, 4x4 output tiles:
 *     B^T = [4 0 -5 0 1 0; 0 -4 -4 1 1 0; 0 4 -4 -1 1 0; 0 -2 -1 2 1 0; 0 2 -1 -2 1 0;
 *            0 4 0 -5 0 1],
 *     G = [1/4 0 0; -1/6 -1/6 -1/6; -1/6 1/6 -1/6; 1/24 1/12 1/6; 1/24 -1/12 1/6; 0 0 1],
 *     A^T = [1 1 1 1 1 0; 0 1 -1 2 -2 0; 0 1 1 4 4 0; 0 1 -1 8 -8 1],
 * 36 products per 16 output pixels (4 times fewer multiply-adds than direct, 1.8 times fewer
 * than F(2x2, 3x3)) and 36 / 16 transformed values per output pixel instead of 4; the larger
 * coefficients round more (within 1e-5 of the largest output in the tests).  Used for outputs
 * of at least WINO4_MIN_SIZE on each side: below it the 36 products have few tiles to run
 * over (at 7 x 7, 512 channels, batch 8: 12.3 ms against F(2x2, 3x3)'s 8.4 on two threads;
 * at 14 x 14 even, from 28 x 28 on F(4x4, 3x3) is 1.3-1.6 times faster). */

#define WINO_MIN_CHANNELS 16                    /* thinner products do not pay */
#define WINO_CHUNK_FLOATS ((size_t)1 << 21)     /* V and M of a chunk: 8 MB (bigger images: bands) */
/* V and M hold 16 planes each; their sizes are often powers of two, so planes lying end to
 * end would map the 16 values of one tile to one cache set: each plane is padded by a cache
 * line (U is laid out row by row instead: see wino_weights) */
#define WINO_PAD ((size_t)16)

/* a Ci -> Co channel convolution to an Ho x Wo output with padding ph, pw */
static int wino_fits(int ci, int co, int Ho, int Wo, int ph, int pw) {
  return ci >= WINO_MIN_CHANNELS && co >= WINO_MIN_CHANNELS && ph <= 2 && pw <= 2 && Ho > 0 &&
         Wo > 0;
}

/* the output tile: 4 x 4 (F(4x4, 3x3)) for outputs of at least WINO4_MIN_SIZE on each side,
 * else 2 x 2; gl_conv_winograd_tile forces one (0: this rule) */
#define WINO4_MIN_SIZE 16
static int wino_forced;

int gl_conv_winograd_tile(int m) {
  int prev = wino_forced;
  if (m == 0 || m == 2 || m == 4) wino_forced = m;
  return prev;
}

static int wino_tile(int Ho, int Wo) {
  if (wino_forced) return wino_forced;
  return Ho >= WINO4_MIN_SIZE && Wo >= WINO4_MIN_SIZE ? 4 : 2;
}

static int is_3x3_s1(const conv_geom *g) {
  return g->kh == 3 && g->kw == 3 && g->sh == 1 && g->sw == 1;
}

static int use_winograd(const conv_geom *g) {        /* x (C) -> y (O) */
  return is_3x3_s1(g) && wino_fits(g->C, g->O, g->Ho, g->Wo, g->ph, g->pw);
}

static int use_winograd_dx(const conv_geom *g) {     /* dy (O) -> dx (C), padding 2 - p */
  return is_3x3_s1(g) && g->ph <= 2 && g->pw <= 2 &&
         wino_fits(g->O, g->C, g->H, g->W, 2 - g->ph, 2 - g->pw);
}

/* U (Co, 16, Ci): U_k[o][c] = (G g G^T)_k for the kernel g = w[o][c] (Co = O, Ci = C), or for
 * the adjoint g = w[c][o] turned 180 degrees (Co = C, Ci = O).  w is (O, C, 3, 3).  Product
 * k reads U_k at U + k Ci with row stride 16 Ci, so each row of U (one output channel's 16
 * transformed kernels) is written as one contiguous run: 16 planes of O*C floats end to end,
 * often a power of two apart, would have put a kernel's 16 values in one cache set. */
typedef struct { const float *w; int O, C, adjoint; float *U; } wino_w_ctx;

/* F(4x4, 3x3)'s G (6x3) applied to (g0, g1, g2): t[0], t[s], ..., t[5 s] */
static void wino4_g(float g0, float g1, float g2, float *t, int s) {
  t[0] = 0.25f * g0;
  t[s] = -(g0 + g1 + g2) / 6.0f;
  t[2 * s] = -(g0 - g1 + g2) / 6.0f;
  t[3 * s] = g0 / 24.0f + g1 / 12.0f + g2 / 6.0f;
  t[4 * s] = g0 / 24.0f - g1 / 12.0f + g2 / 6.0f;
  t[5 * s] = g2;
}

#define WINO_WBLOCK 64

/* rows r of U in [lo, hi), a block of WINO_WBLOCK kernels at a time */
static void wino_weights_range(void *ctx, size_t lo, size_t hi, int slot) {
  (void)slot;
  const wino_w_ctx *x = ctx;
  const float *w = x->w;
  int C = x->C, adjoint = x->adjoint;
  int ci = adjoint ? x->O : C;
  float blk[16][WINO_WBLOCK];
  for (int r = (int)lo; r < (int)hi; r++) {
    float *ur = x->U + (size_t)r * 16 * ci;
    for (int j0 = 0; j0 < ci; j0 += WINO_WBLOCK) {
      int nj = ci - j0 < WINO_WBLOCK ? ci - j0 : WINO_WBLOCK;
      for (int jj = 0; jj < nj; jj++) {
        int o = adjoint ? j0 + jj : r, c = adjoint ? r : j0 + jj;
        const float *k = w + ((size_t)o * C + c) * 9;
        float g[3][3], t[4][3];
        for (int i = 0; i < 3; i++)
          for (int j = 0; j < 3; j++) g[i][j] = adjoint ? k[(2 - i) * 3 + 2 - j] : k[i * 3 + j];
        for (int j = 0; j < 3; j++) {   /* G g */
          t[0][j] = g[0][j];
          t[1][j] = 0.5f * (g[0][j] + g[1][j] + g[2][j]);
          t[2][j] = 0.5f * (g[0][j] - g[1][j] + g[2][j]);
          t[3][j] = g[2][j];
        }
        for (int p = 0; p < 4; p++) {   /* (G g) G^T */
          blk[4 * p + 0][jj] = t[p][0];
          blk[4 * p + 1][jj] = 0.5f * (t[p][0] + t[p][1] + t[p][2]);
          blk[4 * p + 2][jj] = 0.5f * (t[p][0] - t[p][1] + t[p][2]);
          blk[4 * p + 3][jj] = t[p][2];
        }
      }
      for (int q = 0; q < 16; q++)
        memcpy(ur + (size_t)q * ci + j0, blk[q], sizeof(float) * (size_t)nj);
    }
  }
}

/* F(4x4, 3x3)'s G g G^T, 36 values per kernel: rows of U (Co, 36, Ci) as above */
static void wino4_weights_range(void *ctx, size_t lo, size_t hi, int slot) {
  (void)slot;
  const wino_w_ctx *x = ctx;
  const float *w = x->w;
  int C = x->C, adjoint = x->adjoint;
  int ci = adjoint ? x->O : C;
  float blk[36][WINO_WBLOCK];
  for (int r = (int)lo; r < (int)hi; r++) {
    float *ur = x->U + (size_t)r * 36 * ci;
    for (int j0 = 0; j0 < ci; j0 += WINO_WBLOCK) {
      int nj = ci - j0 < WINO_WBLOCK ? ci - j0 : WINO_WBLOCK;
      for (int jj = 0; jj < nj; jj++) {
        int o = adjoint ? j0 + jj : r, c = adjoint ? r : j0 + jj;
        const float *k = w + ((size_t)o * C + c) * 9;
        float g[3][3], t[6][3];
        for (int i = 0; i < 3; i++)
          for (int j = 0; j < 3; j++) g[i][j] = adjoint ? k[(2 - i) * 3 + 2 - j] : k[i * 3 + j];
        for (int j = 0; j < 3; j++) wino4_g(g[0][j], g[1][j], g[2][j], &t[0][j], 3);   /* G g */
        for (int p = 0; p < 6; p++) {                                 /* (G g) G^T */
          float row[6];
          wino4_g(t[p][0], t[p][1], t[p][2], row, 1);
          for (int q = 0; q < 6; q++) blk[6 * p + q][jj] = row[q];
        }
      }
      for (int q = 0; q < 36; q++)
        memcpy(ur + (size_t)q * ci + j0, blk[q], sizeof(float) * (size_t)nj);
    }
  }
}

/* U for output tiles of m x m (2 or 4): (Co, (m+2)^2, Ci) */
static void wino_weights(const float *w, int O, int C, int adjoint, int m, float *U) {
  wino_w_ctx c = {w, O, C, adjoint, U};
  gl_parallel_for((size_t)(adjoint ? C : O), (size_t)(adjoint ? O : C) * (m == 4 ? 90 : 40),
                  m == 4 ? wino4_weights_range : wino_weights_range, &c);
}

/* The transforms' passes, each a loop along a row with restrict pointers so it vectorises:
 * B^T d over four input rows (all columns at once), then d' B over each result row, tile by
 * tile (tile tx reads columns 2tx .. 2tx+3). */
static void wino_bt(int n, const float *restrict r0, const float *restrict r1,
                    const float *restrict r2, const float *restrict r3, float *restrict a0,
                    float *restrict a1, float *restrict a2, float *restrict a3) {
  for (int j = 0; j < n; j++) {
    a0[j] = r0[j] - r2[j];
    a1[j] = r1[j] + r2[j];
    a2[j] = r2[j] - r1[j];
    a3[j] = r1[j] - r3[j];
  }
}

static void wino_b(int tiles, const float *restrict r, float *restrict v0, float *restrict v1,
                   float *restrict v2, float *restrict v3) {
  for (int tx = 0; tx < tiles; tx++) {
    v0[tx] = r[2 * tx] - r[2 * tx + 2];
    v1[tx] = r[2 * tx + 1] + r[2 * tx + 2];
    v2[tx] = r[2 * tx + 2] - r[2 * tx + 1];
    v3[tx] = r[2 * tx + 1] - r[2 * tx + 3];
  }
}

/* A^T m over four rows of tiles, then (A^T m) A into two output rows (2 per tile) */
static void wino_at(int tiles, const float *restrict m0, const float *restrict m1,
                    const float *restrict m2, const float *restrict m3, float *restrict t0,
                    float *restrict t1) {
  for (int tx = 0; tx < tiles; tx++) {
    t0[tx] = m0[tx] + m1[tx] + m2[tx];
    t1[tx] = m1[tx] - m2[tx] - m3[tx];
  }
}

static void wino_a(int tiles, const float *restrict s0, const float *restrict s1,
                   const float *restrict s2, const float *restrict s3, float *restrict o) {
  for (int tx = 0; tx < tiles; tx++) {
    o[2 * tx] = s0[tx] + s1[tx] + s2[tx];
    o[2 * tx + 1] = s1[tx] - s2[tx] - s3[tx];
  }
}

/* One channel plane xc (H,W) -> the B^T d B of its tiles in tile rows [ty0, ty1):
 * v[k * kstride + tile], tiles row-major (the plane has tH x tW).  P: the padded plane (2 tH + 2) x (2 tW + 2), zero outside the image part, which
 * is overwritten here; S: scratch of 4 (2 tW + 2) floats.  Every loop runs along a row (over
 * columns or tiles) so it vectorises. */
static void wino_input(const float *xc, int H, int W, int ph, int pw, int tH, int tW, int ty0,
                       int ty1, float *P, float *S, float *v, size_t kstride) {
  int Hp = 2 * tH + 2, Wp = 2 * tW + 2;
  int ia = ph, ib = H + ph < Hp ? H + ph : Hp, ja = pw, jb = W + pw < Wp ? W + pw : Wp;
  if (ia < 2 * ty0) ia = 2 * ty0;              /* only the rows the band's tiles read */
  if (ib > 2 * ty1 + 2) ib = 2 * ty1 + 2;
  for (int i = ia; i < ib && jb > ja; i++)
    memcpy(P + (size_t)i * Wp + ja, xc + (size_t)(i - ph) * W, sizeof(float) * (size_t)(jb - ja));
  for (int ty = ty0; ty < ty1; ty++) {
    const float *r0 = P + (size_t)(2 * ty) * Wp;
    wino_bt(Wp, r0, r0 + Wp, r0 + 2 * Wp, r0 + 3 * Wp, S, S + Wp, S + 2 * Wp, S + 3 * Wp);
    for (int p = 0; p < 4; p++) {
      float *v0 = v + (size_t)(4 * p) * kstride + (size_t)(ty - ty0) * tW;
      wino_b(tW, S + (size_t)p * Wp, v0, v0 + kstride, v0 + 2 * kstride, v0 + 3 * kstride);
    }
  }
}

/* One output channel, tile rows [ty0, ty1): m[k * kstride + tile] -> A^T m A into yo (Ho,Wo)
 * (output rows 2 ty0 .. 2 ty1 - 1): yo = bo + result,
 * or yo += result when add.  S: scratch of 12 tW floats. */
static void wino_output(const float *m, size_t kstride, int Ho, int Wo, int ty0, int ty1,
                        int tW, float bo, int add, float *S, float *yo) {
  float *o0 = S, *o1 = S + 2 * tW, *s0 = S + 4 * (size_t)tW, *s1 = S + 8 * (size_t)tW;
  for (int ty = ty0; ty < ty1; ty++) {
    const float *mt = m + (size_t)(ty - ty0) * tW;
    for (int q = 0; q < 4; q++) {    /* A^T m: s0[q], s1[q] are rows of tW */
      const float *m0 = mt + (size_t)q * kstride;
      wino_at(tW, m0, m0 + 4 * kstride, m0 + 8 * kstride, m0 + 12 * kstride,
              s0 + (size_t)q * tW, s1 + (size_t)q * tW);
    }
    wino_a(tW, s0, s0 + tW, s0 + 2 * (size_t)tW, s0 + 3 * (size_t)tW, o0);   /* (A^T m) A */
    wino_a(tW, s1, s1 + tW, s1 + 2 * (size_t)tW, s1 + 3 * (size_t)tW, o1);
    for (int i = 0; i < 2 && 2 * ty + i < Ho; i++) {
      const float *restrict src = i ? o1 : o0;
      float *restrict dst = yo + (size_t)(2 * ty + i) * Wo;
      if (add)
        for (int x = 0; x < Wo; x++) dst[x] += src[x];
      else
        for (int x = 0; x < Wo; x++) dst[x] = bo + src[x];
    }
  }
}

/* F(4x4, 3x3): B^T d over six input rows (all columns), then d' B along each result row,
 * tile by tile (tile tx reads columns 4tx .. 4tx+5).  Every array is its own restrict
 * parameter, so the loops vectorise. */
#define F6 float *restrict
#define C6 const float *restrict
static void wino4_bt(int n, C6 r0, C6 r1, C6 r2, C6 r3, C6 r4, C6 r5, F6 a0, F6 a1, F6 a2,
                     F6 a3, F6 a4, F6 a5) {
  for (int j = 0; j < n; j++) {
    float d0 = r0[j], d1 = r1[j], d2 = r2[j], d3 = r3[j], d4 = r4[j], d5 = r5[j];
    a0[j] = 4.0f * d0 - 5.0f * d2 + d4;
    a1[j] = d3 + d4 - 4.0f * (d1 + d2);
    a2[j] = d4 - d3 + 4.0f * (d1 - d2);
    a3[j] = d4 - d2 + 2.0f * (d3 - d1);
    a4[j] = d4 - d2 - 2.0f * (d3 - d1);
    a5[j] = 4.0f * d1 - 5.0f * d3 + d5;
  }
}

/* the six columns each tile of one band reads, as contiguous arrays over the band's tiles:
 * c_j[ty tW + tx] = S[ty Wp + 4 tx + j] (S: one row per tile row, Wp wide) */
static void wino4_split(int rows, int tW, int Wp, C6 S, F6 c0, F6 c1, F6 c2, F6 c3, F6 c4,
                        F6 c5) {
  for (int ty = 0; ty < rows; ty++) {
    const float *r = S + (size_t)ty * Wp;
    size_t o = (size_t)ty * tW;
    for (int tx = 0; tx < tW; tx++) {
      const float *d = r + 4 * tx;
      c0[o + tx] = d[0];
      c1[o + tx] = d[1];
      c2[o + tx] = d[2];
      c3[o + tx] = d[3];
      c4[o + tx] = d[4];
      c5[o + tx] = d[5];
    }
  }
}

/* A^T over six rows of tiles (m0..m5) into four rows (t0..t3); the same maths makes
 * (A^T m) A from the six rows s_q of one output row i into its four column phases */
static void wino4_at(int tiles, C6 m0, C6 m1, C6 m2, C6 m3, C6 m4, C6 m5, F6 t0, F6 t1, F6 t2,
                     F6 t3) {
  for (int tx = 0; tx < tiles; tx++) {
    float s12 = m1[tx] + m2[tx], d12 = m1[tx] - m2[tx];
    float s34 = m3[tx] + m4[tx], d34 = m3[tx] - m4[tx];
    t0[tx] = m0[tx] + s12 + s34;
    t1[tx] = d12 + 2.0f * d34;
    t2[tx] = s12 + 4.0f * s34;
    t3[tx] = d12 + 8.0f * d34 + m5[tx];
  }
}
#undef F6
#undef C6

/* one output row from its four column phases: dst[4 tx + j] = [dst +] o_j[tx] (+ bo) */
static void wino4_store(int tiles, const float *restrict o0, const float *restrict o1,
                        const float *restrict o2, const float *restrict o3, float bo, int add,
                        float *restrict dst) {
  if (add)
    for (int tx = 0; tx < tiles; tx++) {
      dst[4 * tx] += o0[tx];
      dst[4 * tx + 1] += o1[tx];
      dst[4 * tx + 2] += o2[tx];
      dst[4 * tx + 3] += o3[tx];
    }
  else
    for (int tx = 0; tx < tiles; tx++) {
      dst[4 * tx] = bo + o0[tx];
      dst[4 * tx + 1] = bo + o1[tx];
      dst[4 * tx + 2] = bo + o2[tx];
      dst[4 * tx + 3] = bo + o3[tx];
    }
}

/* wino_input for F(4x4, 3x3), a band of tile rows at a time so that every loop runs along
 * the band's tiles: B^T d of each tile row into S (six planes of band x Wp: S_p's row ty is
 * row p of B^T over the six input rows of tile row ty), then, plane by plane, the columns each
 * tile reads split out (c, six arrays of band x tW) and B applied along them, straight into v.
 * P: the padded plane (4 tH + 2) x (4 tW + 2); S: scratch of wino4_scratch(band, tW) floats. */
static size_t wino4_scratch(int band, int tW) {
  size_t n = (size_t)band * tW, Wp = 4 * (size_t)tW + 2;
  size_t in = 6 * (size_t)band * Wp + 6 * n, out = 40 * n;
  return (in > out ? in : out) + 16;
}

static void wino4_input(const float *xc, int H, int W, int ph, int pw, int tH, int tW, int ty0,
                        int ty1, float *P, float *S, float *v, size_t kstride) {
  int Hp = 4 * tH + 2, Wp = 4 * tW + 2, rows = ty1 - ty0;
  int ia = ph, ib = H + ph < Hp ? H + ph : Hp, ja = pw, jb = W + pw < Wp ? W + pw : Wp;
  if (ia < 4 * ty0) ia = 4 * ty0;              /* only the rows the band's tiles read */
  if (ib > 4 * ty1 + 2) ib = 4 * ty1 + 2;
  for (int i = ia; i < ib && jb > ja; i++)
    memcpy(P + (size_t)i * Wp + ja, xc + (size_t)(i - ph) * W, sizeof(float) * (size_t)(jb - ja));
  size_t ps = (size_t)rows * Wp, n = (size_t)rows * tW, ks = kstride;
  for (int ty = ty0; ty < ty1; ty++) {
    const float *r = P + (size_t)(4 * ty) * Wp;
    float *a = S + (size_t)(ty - ty0) * Wp;
    wino4_bt(Wp, r, r + Wp, r + 2 * Wp, r + 3 * Wp, r + 4 * Wp, r + 5 * Wp, a, a + ps,
             a + 2 * ps, a + 3 * ps, a + 4 * ps, a + 5 * ps);
  }
  float *c = S + 6 * ps;
  for (int p = 0; p < 6; p++) {
    float *v0 = v + (size_t)(6 * p) * ks;
    wino4_split(rows, tW, Wp, S + (size_t)p * ps, c, c + n, c + 2 * n, c + 3 * n, c + 4 * n,
                c + 5 * n);
    wino4_bt((int)n, c, c + n, c + 2 * n, c + 3 * n, c + 4 * n, c + 5 * n, v0, v0 + ks,
             v0 + 2 * ks, v0 + 3 * ks, v0 + 4 * ks, v0 + 5 * ks);
  }
}

/* wino_output for F(4x4, 3x3), a band at a time, every loop along the band's tiles: A^T m
 * (s: 4 x 6 arrays, s + (6 i + q) n: row i of A^T m for tile column q), then A (o: 4 x 4
 * arrays, o + (4 i + j) n: output row 4 ty + i, column 4 tx + j of tile (ty, tx)), then the
 * rows written into the image.  S: scratch of wino4_scratch(band, tW) floats. */
static void wino4_output(const float *m, size_t kstride, int Ho, int Wo, int ty0, int ty1,
                         int tW, float bo, int add, float *S, float *yo) {
  size_t n = (size_t)(ty1 - ty0) * tW, ks = 6 * kstride, ts = 6 * n;
  float *s = S, *o = S + 24 * n;
  for (int q = 0; q < 6; q++) {
    const float *m0 = m + (size_t)q * kstride;
    float *t0 = s + (size_t)q * n;
    wino4_at((int)n, m0, m0 + ks, m0 + 2 * ks, m0 + 3 * ks, m0 + 4 * ks, m0 + 5 * ks, t0,
             t0 + ts, t0 + 2 * ts, t0 + 3 * ts);
  }
  for (int i = 0; i < 4; i++) {
    const float *s0 = s + (size_t)i * ts;
    float *o0 = o + (size_t)i * 4 * n;
    wino4_at((int)n, s0, s0 + n, s0 + 2 * n, s0 + 3 * n, s0 + 4 * n, s0 + 5 * n, o0, o0 + n,
             o0 + 2 * n, o0 + 3 * n);
  }
  int full = Wo / 4;                       /* tiles whose four columns all lie in the image */
  for (int ty = ty0; ty < ty1; ty++)
    for (int i = 0; i < 4 && 4 * ty + i < Ho; i++) {
      const float *oi = o + (size_t)(4 * i) * n + (size_t)(ty - ty0) * tW;
      float *dst = yo + (size_t)(4 * ty + i) * Wo;
      wino4_store(full, oi, oi + n, oi + 2 * n, oi + 3 * n, bo, add, dst);
      for (int j = 0; 4 * full + j < Wo; j++) {             /* the last, partial tile */
        float val = oi[(size_t)j * n + (size_t)full];
        dst[4 * full + j] = add ? dst[4 * full + j] + val : bo + val;
      }
    }
}

/* One chunk of Winograd's work on the pool: the input transforms by (image, channel) planes,
 * the 16 products, the output transforms by (image, channel) planes.  P and R hold one
 * padded plane and one row scratch per pool slot. */
typedef struct {
  const float *x, *U, *bias;
  float *y, *V, *M, *P, *R;
  int Ci, H, W, ph, pw, Co, Ho, Wo, tH, tW, add;
  int m, K;                  /* output tiles of m x m, K = (m+2)^2 products */
  size_t T, N, b0, nP, nR;   /* T: an image's tiles in this band */
  size_t vs, ms;   /* plane strides of V and M (padded: WINO_PAD) */
  int ty0, ty1;    /* the band of tile rows */
} wino_ctx;

static void wino_input_range(void *ctx, size_t lo, size_t hi, int slot) {
  const wino_ctx *k = ctx;
  size_t xim = (size_t)k->Ci * k->H * k->W;
  for (size_t q = lo; q < hi; q++) {
    size_t bi = q / (size_t)k->Ci;
    int c = (int)(q % (size_t)k->Ci);
    (k->m == 4 ? wino4_input : wino_input)(
        k->x + (k->b0 + bi) * xim + (size_t)c * k->H * k->W, k->H, k->W, k->ph, k->pw, k->tH,
        k->tW, k->ty0, k->ty1, k->P + (size_t)slot * k->nP, k->R + (size_t)slot * k->nR,
        k->V + (size_t)c * k->N + bi * k->T, k->vs);
  }
}

static void wino_gemm_range(void *ctx, size_t lo, size_t hi, int slot) {
  (void)slot;
  const wino_ctx *w = ctx;
  int Co = w->Co, Ci = w->Ci, N = (int)w->N;
  for (size_t k = lo; k < hi; k++)
    gl_sgemm(0, 0, Co, N, Ci, 1.0f, w->U + k * Ci, w->K * Ci, w->V + k * w->vs, N, 0.0f,
             w->M + k * w->ms, N);
}

static void wino_output_range(void *ctx, size_t lo, size_t hi, int slot) {
  const wino_ctx *k = ctx;
  size_t yim = (size_t)k->Co * k->Ho * k->Wo;
  for (size_t q = lo; q < hi; q++) {
    size_t bi = q / (size_t)k->Co;
    int o = (int)(q % (size_t)k->Co);
    (k->m == 4 ? wino4_output : wino_output)(
        k->M + (size_t)o * k->N + bi * k->T, k->ms, k->Ho, k->Wo, k->ty0, k->ty1, k->tW,
        k->bias ? k->bias[o] : 0.0f, k->add, k->R + (size_t)slot * k->nR,
        k->y + (k->b0 + bi) * yim + (size_t)o * k->Ho * k->Wo);
  }
}

/* y (B, Co, Ho, Wo) = [bias +] the 3x3 stride-1 correlation of x (B, Ci, H, W), padded by
 * ph, pw, with the transformed kernels U (Co, 16, Ci); Ho = H + 2 ph - 2.  add: y += the
 * correlation instead (no bias).  Writes nothing to y when it fails (out of memory). */
static int winograd_conv(const float *x, int B, int Ci, int H, int W, int ph, int pw,
                         const float *U, int m, int Co, const float *bias, int add, float *y) {
  int Ho = H + 2 * ph - 2, Wo = W + 2 * pw - 2, K = (m + 2) * (m + 2);
  int tH = (Ho + m - 1) / m, tW = (Wo + m - 1) / m;
  size_t T = (size_t)tH * tW, per = (size_t)K * (Ci + Co) * T;
  /* an image too big for one chunk goes in bands of tile rows, one image at a time */
  int band = tH;
  if (per > WINO_CHUNK_FLOATS) {
    band = (int)(WINO_CHUNK_FLOATS / ((size_t)K * (Ci + Co) * tW));
    if (band < 1) band = 1;
  }
  size_t Tb = (size_t)band * tW;
  size_t nbmax = band < tH ? 1 : WINO_CHUNK_FLOATS / per;
  if (nbmax < 1) nbmax = 1;
  if (nbmax > (size_t)B) nbmax = (size_t)B;
  size_t slots = (size_t)gl_parallel_slots();
  size_t nV = (size_t)K * ((size_t)Ci * Tb * nbmax + WINO_PAD);
  size_t nM = (size_t)K * ((size_t)Co * Tb * nbmax + WINO_PAD);
  size_t nP = (size_t)(m * tH + 2) * (m * tW + 2);
  size_t nR = m == 4 ? wino4_scratch(band, tW) : 12 * (size_t)tW + 8;
  float *V = gl_scratch_alloc(nV), *M = gl_scratch_alloc(nM), *R = gl_scratch_alloc(nR * slots);
  float *P = gl_scratch_alloc(nP * slots);
  if (!V || !M || !R || !P) {
    gl_scratch_free(V, nV);
    gl_scratch_free(M, nM);
    gl_scratch_free(R, nR * slots);
    gl_scratch_free(P, nP * slots);
    return gl_fail(GL_ENOMEM, "conv2d: out of memory for the Winograd buffers");
  }
  memset(P, 0, sizeof(float) * nP * slots);   /* the padding; wino_input rewrites only the image part */
  wino_ctx k = {x, U, bias, y, V, M, P, R, Ci, H, W, ph, pw, Co, Ho, Wo, tH, tW, add, m, K,
                T, 0, 0, nP, nR, 0, 0, 0, tH};
  for (size_t b0 = 0; b0 < (size_t)B; b0 += nbmax)
    for (int ty0 = 0; ty0 < tH; ty0 += band) {
      size_t nb = (size_t)B - b0 < nbmax ? (size_t)B - b0 : nbmax;
      k.ty0 = ty0;
      k.ty1 = ty0 + band < tH ? ty0 + band : tH;
      k.T = (size_t)(k.ty1 - ty0) * tW;
      size_t N = nb * k.T;
      k.b0 = b0;
      k.N = N;
      k.vs = (size_t)Ci * N + WINO_PAD;
      k.ms = (size_t)Co * N + WINO_PAD;
      gl_parallel_for(nb * (size_t)Ci, (size_t)K * k.T, wino_input_range, &k);
      if (gl_sgemm_threaded(Co, (int)N, Ci)) wino_gemm_range(&k, 0, (size_t)K, 0);
      else gl_parallel_blas((size_t)K, 2 * (size_t)Co * N * Ci, wino_gemm_range, &k);
      gl_parallel_for(nb * (size_t)Co, (size_t)(m == 4 ? 2 : 1) * 12 * k.T, wino_output_range,
                      &k);
    }
  gl_scratch_free(V, nV);
  gl_scratch_free(M, nM);
  gl_scratch_free(R, nR * slots);
  gl_scratch_free(P, nP * slots);
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
  int wino = want_x && use_winograd_dx(&g);   /* dx by Winograd, the rest by columns */
  int cols = want_w || (want_x && !wino);
  int nbmax = chunk_images(&g), nchunks = (g.B + nbmax - 1) / nbmax;
  int groups = nchunks < CONV_DW_GROUPS ? nchunks : CONV_DW_GROUPS;
  int grouped = want_w && groups >= 2 && (double)g.O * K * nbmax * hwo < CONV_DW_GROUP_MNK;
  size_t slots = grouped ? (size_t)gl_parallel_slots() : 1;
  int wm = wino ? wino_tile(g.H, g.W) : 2;
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
    wino_weights(w->data, g.O, g.C, 1, wm, U);
    st = winograd_conv(dy, g.B, g.O, g.Ho, g.Wo, 2 - g.ph, 2 - g.pw, U, wm, g.C, NULL, !fx,
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
  if ((*out)->numel > 0 && use_winograd(&g)) {
    int wm = wino_tile(g.Ho, g.Wo);
    size_t nU = (size_t)(wm + 2) * (wm + 2) * g.O * g.C;
    float *U = gl_scratch_alloc(nU);
    st = U ? GL_OK : gl_fail(GL_ENOMEM, "conv2d: out of memory for the Winograd weights");
    if (U) {
      wino_weights(w->data, g.O, g.C, 0, wm, U);
      st = winograd_conv(x->data, g.B, g.C, g.H, g.W, g.ph, g.pw, U, wm, g.O,
                         bias ? bias->data : NULL, 0, y);
      gl_scratch_free(U, nU);
    }
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
