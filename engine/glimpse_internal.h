/* glimpse_internal.h -- what op authors need and users of the engine do not: the tape's
 * nodes, their saved state, and the calls an op makes to record itself and, in backward,
 * to find its inputs' gradient buffers.  Included by autograd.c and the ops_*.c files only;
 * glimpse.h (the public header) sees gl_node as an opaque type.
 *
 * Saved state.  An op keeps the tensors its backward needs with gl_save (in n->saved, in the
 * order saved) and its scalar arguments in a typed struct of its own inside the node:
 *
 *   typedef struct { int dim; } softmax_state;
 *   softmax_state *s = GL_NODE_STATE(n, softmax_state);   (forward: fill it; backward: read)
 *
 * GL_NODE_STATE checks at compile time that the struct fits GL_NODE_STATE_BYTES.  Ops that
 * need more (variable-length plans) use n->ctx with n->ctx_free.  Every op family keeps its
 * scalars this way (there are no untyped integer slots).
 *
 * Errors inside the tape are never silent: a node that could not be allocated, a tensor that
 * could not be saved (allocation failure or more than GL_MAX_SAVED) and a gradient buffer
 * that could not be allocated each make the next gl_backward through that graph fail with a
 * message naming the op, instead of dropping the graph or looking like "no gradient needed".
 */
#ifndef GLIMPSE_INTERNAL_H
#define GLIMPSE_INTERNAL_H

#include "glimpse.h"

#define GL_MAX_INPUTS 8
#define GL_MAX_OUTPUTS 4
#define GL_MAX_SAVED 8
#define GL_NODE_STATE_BYTES 64

/* Backward adds d(loss)/d(input) into the buffers gl_grad_of(n, i) returns. */
typedef int (*gl_backward_fn)(gl_node *n, gl_tensor **gout);

typedef struct gl_op {
  const char *name;
  gl_backward_fn backward;
} gl_op;

struct gl_node {
  const gl_op *op;
  int refs;
  int nin, nout, nsaved;
  gl_tensor *in[GL_MAX_INPUTS];
  gl_tensor *saved[GL_MAX_SAVED];
  gl_tensor *gout[GL_MAX_OUTPUTS];   /* gradient w.r.t. each output, filled during backward */
  int out_shape[GL_MAX_OUTPUTS][GL_MAX_DIMS];
  int out_ndim[GL_MAX_OUTPUTS];
  _Alignas(16) unsigned char state[GL_NODE_STATE_BYTES];  /* the op's typed struct */
  void *ctx;                          /* op-owned extra state, freed with ctx_free */
  void (*ctx_free)(void *);
  const char *broken;                 /* why backward through this node must fail, or NULL */
  int released;
  unsigned hdr_in;                    /* bit i: in[i] is held for its header only */
  unsigned mark;                      /* traversal bookkeeping */
};

/* The op's typed saved state inside node n (a T *); T must fit GL_NODE_STATE_BYTES. */
#define GL_NODE_STATE(n, T)                                                        \
  ((void)sizeof(struct { _Static_assert(sizeof(T) <= GL_NODE_STATE_BYTES,           \
                                        #T " does not fit a node's state"); int x; }), \
   (T *)(void *)(n)->state)

/* Input i of node n is held for its header only (shape, the node that made it, where its
 * gradient goes): the op's backward never reads its data, so once nothing else holds the
 * tensor its bytes go back to the allocator (an activation used only by an add or a relu is
 * not kept until backward).  No-op when n is NULL. */
void gl_input_header_only(gl_node *n, int i);

/* Drop a reference to a node (tensor.c, when an output dies); frees it at zero. */
void gl_node_release(gl_node *n);
/* Does an op over these inputs need a node? (grad enabled and some input requires grad) */
int gl_needs_grad(int nin, gl_tensor *const *in);
/* Record `op` as the maker of outs[0..nout-1] from inputs in[0..nin-1]; returns the node
 * (for saving tensors and parameters) or NULL when no recording is needed -- or when the
 * node could not be allocated: then the outputs are tied to a "lost graph" marker and a
 * backward through them fails with "out of memory while recording <op>". */
gl_node *gl_record(const gl_op *op, int nin, gl_tensor *const *in, int nout, gl_tensor **outs);
/* Keep a tensor for backward (takes a new reference; pass gl_alias(out) to save an output).
 * t == NULL (a failed gl_alias) or more than GL_MAX_SAVED tensors mark the node broken:
 * its backward fails with a message instead of reading a missing tensor. */
void gl_save(gl_node *n, gl_tensor *t);
/* The buffer to add input i's gradient into, allocated zeroed on first use;
 * NULL when input i does not need a gradient.  A failed allocation also returns NULL but
 * fails the whole gl_backward (with its message) once the op's backward returns. */
gl_tensor *gl_grad_of(gl_node *n, int i);
/* The same buffer for a backward that can write its gradient outright: when it is new,
 * *fresh = 1 and it is NOT zeroed (the caller must assign every element); otherwise
 * *fresh = 0 and it holds earlier gradient (the caller adds).  Saves a zeroing pass. */
gl_tensor *gl_grad_slot(gl_node *n, int i, int *fresh);

/* open(path) for reading that never waits: the file is opened O_NONBLOCK (a FIFO with no
 * writer, or a device, opens at once, so the caller's fstat can refuse it) and a regular
 * file gets blocking reads back.  -1 with errno as open's.  (io.c) */
int gl_open_read(const char *path);

/* conv2d's kept Winograd weights (ops_conv_winograd.c): drop those of a storage that dies */
void gl_wino_cache_forget(uint64_t storage_id);

#endif
