/* ops_attention.h -- private to engine/ops_attention*.c: what the attention files share.
 */
#ifndef GLIMPSE_OPS_ATTENTION_H
#define GLIMPSE_OPS_ATTENTION_H

#include "glimpse_internal.h"

#include <stddef.h>

/* out[0..n) = softmax(scale * in) over the positions [0, lim) that mask (NULL: all) leaves
 * visible, 0 elsewhere (see ops_attention.c for NaN and fully masked rows); in == out is
 * fine. */
void gl_attn_softmax_row(const float *in, float *out, int n, int lim, const float *mask,
                         float scale);

/* scratch sizes are never 0 (the allocator wants a real bucket) */
static inline size_t gl_attn_scratch_n(size_t n) { return n ? n : 1; }

#endif
