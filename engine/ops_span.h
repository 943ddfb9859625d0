/* ops_span.h -- private to the ops_*.c files: the (outer, n, inner) view of a tensor around
 * one dim, which softmax, the losses, the reductions and the slab ops (narrow, index_select,
 * cat) all walk.  A tensor of shape (s_0, ..., s_{k-1}) seen around dim d has
 * outer = s_0 ... s_{d-1}, n = s_d and inner = s_{d+1} ... s_{k-1}; its element (o, j, i)
 * sits at (o n + j) inner + i.
 */
#ifndef GLIMPSE_OPS_SPAN_H
#define GLIMPSE_OPS_SPAN_H

#include "glimpse.h"

#include <stddef.h>

/* dim must be valid for a (0 <= dim < a->ndim); the callers check it first */
static inline void gl_dim_span(const gl_tensor *a, int dim, size_t *outer, size_t *n,
                               size_t *inner) {
  *outer = *inner = 1;
  for (int i = 0; i < dim; i++) *outer *= (size_t)a->shape[i];
  for (int i = dim + 1; i < a->ndim; i++) *inner *= (size_t)a->shape[i];
  *n = (size_t)a->shape[dim];
}

#endif
