/* ops_conv.h -- private to engine/ops_conv.c and engine/ops_pool.c: the window geometry
 * convolution and pooling share, kept as their nodes' saved state.
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

#endif
