/* ops_conv_winograd.c -- Winograd's fast 3x3 stride-1 convolution for conv2d (ops_conv.c):
 * F(2x2, 3x3) and F(4x4, 3x3), the forward pass and the input gradient.  Split from
 * ops_conv.c by sub-family; the entry points are declared in ops_conv.h.
 *
 * Threads (parallel.h): the transforms by (image, channel) planes with a scratch per pool
 * thread, the 16 or 36 products side by side when each is too small for OpenBLAS's threads.
 * Each output element is computed by one thread in the serial order.
 */
#include "glimpse_internal.h"
#include "ops_conv.h"
#include "parallel.h"

#include <stdlib.h>
#include <string.h>

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
 * else 2 x 2; gl_conv_winograd_tile forces one (0: this rule; -1: no Winograd, im2col).
 * A call whose transformed weights may be kept between calls (inference) takes F(4x4, 3x3)
 * from WINO4_MIN_SIZE_KEPT: without its larger weight transform at every call it is the
 * faster at 14 x 14 too (ResNet-18's 256-channel layers at batch 8, two threads: 4.2 ms
 * against 4.9) */
#define WINO4_MIN_SIZE 16
#define WINO4_MIN_SIZE_KEPT 12
static int wino_forced;

int gl_conv_winograd_tile(int m) {
  int prev = wino_forced;
  if (m == -1 || m == 0 || m == 2 || m == 4) wino_forced = m;
  return prev;
}

int gl_wino_tile(int Ho, int Wo, int kept) {
  if (wino_forced) return wino_forced;
  int min = kept ? WINO4_MIN_SIZE_KEPT : WINO4_MIN_SIZE;
  return Ho >= min && Wo >= min ? 4 : 2;
}

static int is_3x3_s1(const conv_geom *g) {
  return g->kh == 3 && g->kw == 3 && g->sh == 1 && g->sw == 1;
}

int gl_wino_use(const conv_geom *g) {        /* x (C) -> y (O) */
  return wino_forced >= 0 && is_3x3_s1(g) && wino_fits(g->C, g->O, g->Ho, g->Wo, g->ph, g->pw);
}

int gl_wino_use_dx(const conv_geom *g) {     /* dy (O) -> dx (C), padding 2 - p */
  return wino_forced >= 0 && is_3x3_s1(g) && g->ph <= 2 && g->pw <= 2 &&
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
void gl_wino_weights(const float *w, int O, int C, int adjoint, int m, float *U) {
  wino_w_ctx c = {w, O, C, adjoint, U};
  gl_parallel_for((size_t)(adjoint ? C : O), (size_t)(adjoint ? O : C) * (m == 4 ? 90 : 40),
                  m == 4 ? wino4_weights_range : wino_weights_range, &c);
}

/* F(2x2, 3x3)'s transforms a band of tile rows at a time, so that every loop runs along the
 * band's tiles (at 7 x 7 and 14 x 14 an image's tile row is only 4 or 7 tiles): B^T over
 * four rows (wino_bt: a0 = r0 - r2, a1 = r1 + r2, a2 = r2 - r1, a3 = r1 - r3; applied along
 * columns it is d B), A^T over four rows (wino_at: t0 = m0 + m1 + m2, t1 = m1 - m2 - m3;
 * along columns (A^T m) A).  Every array is its own restrict parameter, so they vectorise. */
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

static void wino_at(int n, const float *restrict m0, const float *restrict m1,
                    const float *restrict m2, const float *restrict m3, float *restrict t0,
                    float *restrict t1) {
  for (int j = 0; j < n; j++) {
    t0[j] = m0[j] + m1[j] + m2[j];
    t1[j] = m1[j] - m2[j] - m3[j];
  }
}

/* the four columns each tile of one band reads, as contiguous arrays over the band's tiles:
 * c_j[ty tW + tx] = S[ty Wp + 2 tx + j] (S: one row per tile row, Wp wide) */
static void wino_split(int rows, int tW, int Wp, const float *restrict S, float *restrict c0,
                       float *restrict c1, float *restrict c2, float *restrict c3) {
  for (int ty = 0; ty < rows; ty++) {
    const float *r = S + (size_t)ty * Wp;
    size_t o = (size_t)ty * tW;
    for (int tx = 0; tx < tW; tx++) {
      c0[o + tx] = r[2 * tx];
      c1[o + tx] = r[2 * tx + 1];
      c2[o + tx] = r[2 * tx + 2];
      c3[o + tx] = r[2 * tx + 3];
    }
  }
}

/* one output row from its two column phases: dst[2 tx + j] = [dst +] o_j[tx] (+ bo) */
static void wino_store(int tiles, const float *restrict o0, const float *restrict o1, float bo,
                       int add, float *restrict dst) {
  if (add)
    for (int tx = 0; tx < tiles; tx++) {
      dst[2 * tx] += o0[tx];
      dst[2 * tx + 1] += o1[tx];
    }
  else
    for (int tx = 0; tx < tiles; tx++) {
      dst[2 * tx] = bo + o0[tx];
      dst[2 * tx + 1] = bo + o1[tx];
    }
}

/* the scratch of wino_input and wino_output for a band of tile rows, tW tiles wide */
static size_t wino_scratch(int band, int tW) {
  size_t n = (size_t)band * tW, Wp = 2 * (size_t)tW + 2;
  size_t in = 4 * (size_t)band * Wp + 4 * n, out = 12 * n;
  return (in > out ? in : out) + 16;
}

/* One channel plane xc (H,W) -> the B^T d B of its tiles in tile rows [ty0, ty1):
 * v[k * kstride + tile], k = 4 p + q, tiles row-major from the band's first.  P: the padded
 * plane (2 tH + 2) x (2 tW + 2), zero outside the image part, which is overwritten here; S:
 * wino_scratch(band, tW) floats.  B^T d of each tile row into S (four planes of band x Wp),
 * then plane by plane the columns each tile reads split out and B applied along them. */
static void wino_input(const float *xc, int H, int W, int ph, int pw, int tH, int tW, int ty0,
                       int ty1, float *P, float *S, float *v, size_t kstride) {
  int Hp = 2 * tH + 2, Wp = 2 * tW + 2, rows = ty1 - ty0;
  int ia = ph, ib = H + ph < Hp ? H + ph : Hp, ja = pw, jb = W + pw < Wp ? W + pw : Wp;
  if (ia < 2 * ty0) ia = 2 * ty0;              /* only the rows the band's tiles read */
  if (ib > 2 * ty1 + 2) ib = 2 * ty1 + 2;
  for (int i = ia; i < ib && jb > ja; i++)
    memcpy(P + (size_t)i * Wp + ja, xc + (size_t)(i - ph) * W, sizeof(float) * (size_t)(jb - ja));
  size_t ps = (size_t)rows * Wp, n = (size_t)rows * tW, ks = kstride;
  for (int ty = ty0; ty < ty1; ty++) {
    const float *r = P + (size_t)(2 * ty) * Wp;
    float *a = S + (size_t)(ty - ty0) * Wp;
    wino_bt(Wp, r, r + Wp, r + 2 * Wp, r + 3 * Wp, a, a + ps, a + 2 * ps, a + 3 * ps);
  }
  float *c = S + 4 * ps;
  for (int p = 0; p < 4; p++) {
    float *v0 = v + (size_t)(4 * p) * ks;
    wino_split(rows, tW, Wp, S + (size_t)p * ps, c, c + n, c + 2 * n, c + 3 * n);
    wino_bt((int)n, c, c + n, c + 2 * n, c + 3 * n, v0, v0 + ks, v0 + 2 * ks, v0 + 3 * ks);
  }
}

/* One output channel, tile rows [ty0, ty1): m[k * kstride + tile] -> A^T m A into yo (Ho,Wo)
 * (output rows 2 ty0 .. 2 ty1 - 1): yo = bo + result, or yo += result when add.  A^T m
 * (s: 2 x 4 arrays, s + (4 i + q) n: row i for tile column q), then A (o: 2 x 2 arrays,
 * o + (2 i + j) n), then the rows written.  S: wino_scratch(band, tW) floats. */
static void wino_output(const float *m, size_t kstride, int Ho, int Wo, int ty0, int ty1,
                        int tW, float bo, int add, float *S, float *yo) {
  size_t n = (size_t)(ty1 - ty0) * tW, ks = 4 * kstride;
  float *s = S, *o = S + 8 * n;
  for (int q = 0; q < 4; q++) {
    const float *m0 = m + (size_t)q * kstride;
    wino_at((int)n, m0, m0 + ks, m0 + 2 * ks, m0 + 3 * ks, s + (size_t)q * n,
            s + (size_t)(4 + q) * n);
  }
  for (int i = 0; i < 2; i++) {
    const float *s0 = s + (size_t)(4 * i) * n;
    wino_at((int)n, s0, s0 + n, s0 + 2 * n, s0 + 3 * n, o + (size_t)(2 * i) * n,
            o + (size_t)(2 * i + 1) * n);
  }
  int full = Wo / 2;                       /* tiles whose two columns both lie in the image */
  for (int ty = ty0; ty < ty1; ty++)
    for (int i = 0; i < 2 && 2 * ty + i < Ho; i++) {
      const float *oi = o + (size_t)(2 * i) * n + (size_t)(ty - ty0) * tW;
      float *dst = yo + (size_t)(2 * ty + i) * Wo;
      wino_store(full, oi, oi + n, bo, add, dst);
      if (Wo % 2) dst[Wo - 1] = add ? dst[Wo - 1] + oi[full] : bo + oi[full];
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
int gl_wino_conv(const float *x, int B, int Ci, int H, int W, int ph, int pw, const float *U,
                 int m, int Co, const float *bias, int add, float *y) {
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
  size_t nR = m == 4 ? wino4_scratch(band, tW) : wino_scratch(band, tW);
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
/* Transformed weights kept between calls.  A call's weight transform writes (m+2)^2 O C
 * floats, its products do 2 (m+2)^2 O C N multiply-adds over N output tiles: with few tiles
 * (ResNet-18's 7 x 7 layers at batch 8: 128; any layer at batch 1) the transform is a large
 * share of the call, and at inference the weights do not change between calls.  The cache
 * keys an entry on the weight's storage (its id, never reused), its data and shape and the
 * tile, and keeps the storage's version: any in-place write through any view of it
 * (gl_touch) makes the entry stale, and it is transformed again on its next use.  A storage
 * that dies takes its entries with it (gl_wino_cache_forget).  Entries are made while they
 * fit in WINO_CACHE_BYTES and never evicted otherwise, so a network bigger than the cache
 * keeps its first layers and transforms the rest per call, as without the cache. */
#define WINO_CACHE_TILES 256
#define WINO_CACHE_BYTES ((size_t)64 << 20)
#define WINO_CACHE_SLOTS 64

typedef struct {
  uint64_t id;          /* the weight's storage; 0: a free slot */
  unsigned version;
  const float *data;
  int O, C, m;
  float *U;
  size_t n;             /* floats in U */
} wino_entry;

static wino_entry wcache[WINO_CACHE_SLOTS];
static size_t wcache_floats;

static void wino_entry_drop(wino_entry *e) {
  free(e->U);
  wcache_floats -= e->n;
  memset(e, 0, sizeof *e);
}

void gl_wino_cache_forget(uint64_t storage_id) {
  if (!wcache_floats) return;
  for (int i = 0; i < WINO_CACHE_SLOTS; i++)
    if (wcache[i].id == storage_id) wino_entry_drop(&wcache[i]);
}

void gl_wino_cache_clear(void) {
  for (int i = 0; i < WINO_CACHE_SLOTS; i++)
    if (wcache[i].id) wino_entry_drop(&wcache[i]);
}

size_t gl_wino_cache_bytes(void) { return wcache_floats * sizeof(float); }

const float *gl_wino_cached_weights(const gl_tensor *w, int O, int C, int m, size_t tiles) {
  if (tiles > WINO_CACHE_TILES || !w->st) return NULL;
  size_t n = (size_t)(m + 2) * (m + 2) * O * C;
  wino_entry *e = NULL, *free_slot = NULL;
  for (int i = 0; i < WINO_CACHE_SLOTS && !e; i++) {
    wino_entry *c = &wcache[i];
    if (!c->id) {
      if (!free_slot) free_slot = c;
    } else if (c->id == w->st->id && c->data == w->data && c->O == O && c->C == C && c->m == m) {
      e = c;
    }
  }
  if (e && e->version == w->st->version) return e->U;
  if (!e) {                                           /* a new entry, if it fits */
    if (!free_slot || (wcache_floats + n) * sizeof(float) > WINO_CACHE_BYTES) return NULL;
    /* exact-size memory of its own: the caching allocator's size classes would round an
     * entry up, and a block it holds for good could not serve the activations */
    void *p = NULL;
    if (posix_memalign(&p, 64, n * sizeof(float)) != 0) return NULL;
    float *U = p;
    e = free_slot;
    *e = (wino_entry){w->st->id, 0, w->data, O, C, m, U, n};
    wcache_floats += n;
  }
  gl_wino_weights(w->data, O, C, 0, m, e->U);        /* new, or written since */
  e->version = w->st->version;
  return e->U;
}
