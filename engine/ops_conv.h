/* ops_conv.h -- private to engine/ops_conv.c, ops_conv_winograd.c and ops_pool.c: the
 * window geometry convolution and pooling share, kept as their nodes' saved state, and
 * conv2d's Winograd path.
 */
#ifndef GLIMPSE_OPS_CONV_H
#define GLIMPSE_OPS_CONV_H

#include "glimpse_internal.h"

/* The geometry every conv/pool op shares. */
typedef struct {
  int B, C, H, W;       /* input */
  int O, kh, kw;        /* output channels, window */
  int sh, sw, ph, pw;   /* stride, zero padding */
  int Ho, Wo;           /* output size */
} conv_geom;

/* A conv/pool node's saved state is its whole geometry. */
static inline void geom_to_node(gl_node *n, const conv_geom *g) {
  *GL_NODE_STATE(n, conv_geom) = *g;
}

static inline conv_geom geom_from_node(gl_node *n) {
  return *GL_NODE_STATE(n, conv_geom);
}

/* Check the window (kernel kh x kw, stride, zero padding) against the input x (B,C,H,W)
 * and fill g's input and output sizes; `op` names the caller in the message. */
int gl_conv_window(const char *op, const gl_tensor *x, conv_geom *g, int kh, int kw, int sh,
                   int sw, int ph, int pw);

/* Winograd (ops_conv_winograd.c): does the 3x3 stride-1 convolution g take it for its output
 * (gl_wino_use) or its input gradient (gl_wino_use_dx); the output tile m (2 or 4) for an
 * Ho x Wo output; the transformed kernels U (Co, (m+2)^2, Ci) of w (O,C,3,3) (adjoint: for the
 * input gradient; kept: the call's weights may be kept, see gl_wino_cached_weights); y (B,Co,Ho,Wo) = [bias +] the correlation of x (B,Ci,H,W) padded by ph, pw
 * with U (add: y += it), GL_ENOMEM (y untouched) when its buffers cannot be had. */
int gl_wino_use(const conv_geom *g);
int gl_wino_use_dx(const conv_geom *g);
int gl_wino_tile(int Ho, int Wo, int kept);
void gl_wino_weights(const float *w, int O, int C, int adjoint, int m, float *U);
int gl_wino_conv(const float *x, int B, int Ci, int H, int W, int ph, int pw, const float *U,
                 int m, int Co, const float *bias, int add, float *y);
/* The forward U of w (O,C,3,3) for tile m, kept between calls, for a call over `tiles` output
 * tiles (batch x an image's): the cache's copy when w's storage has not been written since
 * (gl_touch), made and kept when there is room, or NULL (the caller transforms into scratch
 * of its own).  Only for calls whose weights no tape will change (the caller's test) and
 * with few tiles, where the transform is a large share of the work (see WINO_CACHE_TILES). */
const float *gl_wino_cached_weights(const gl_tensor *w, int O, int C, int m, size_t tiles);

#endif
