/* autograd.c -- the define-by-run tape.
 *
 * An op whose inputs need gradients records a node: the op's descriptor, strong references
 * to its inputs and to whatever it saved, and the shapes of its outputs.  Outputs point to
 * their node (strong); the node never points to its outputs, so there are no cycles.
 * gl_backward orders the nodes reachable from the root topologically, seeds the root's
 * gradient, and runs each node's backward once all of its outputs' gradients are complete.
 * Leaves accumulate into .grad.  Afterwards each node drops its inputs and saved tensors,
 * which frees the intermediate activations even while the Lua handles of outputs live on.
 */
#include "glimpse_internal.h"

#include <stdlib.h>
#include <string.h>

static int grad_on = 1;
static unsigned mark_epoch = 1;
static gl_node *free_nodes;

/* ------------------------------------------------------------------------ */
/* failures inside the tape are errors, never a silently smaller graph */

static int fault_at[GL_FAULT_COUNT];

void gl_fault_inject(int what, int nth) {
  if (what >= 0 && what < GL_FAULT_COUNT) fault_at[what] = nth > 0 ? nth : 0;
}

/* whether the fault of kind `what` fires now (counts down to it) */
static int fault(int what) {
  return fault_at[what] > 0 && --fault_at[what] == 0;
}

/* The outputs of an op whose node could not be allocated point here: a node that is never
 * freed, has no inputs, and makes gl_backward fail with the op's name. */
static const gl_op op_lost = {"lost graph", NULL};
static gl_node lost_node = {.op = &op_lost, .refs = 1 << 30,
                            .broken = "a graph node could not be allocated (out of memory)"};
static const char *lost_op_name = "?";   /* the last op whose node was lost */

/* set when a gradient buffer could not be allocated during the current backward */
static const char *grad_alloc_failed;

int gl_grad_enabled(void) { return grad_on; }

int gl_set_grad_enabled(int on) {
  int prev = grad_on;
  grad_on = on != 0;
  return prev;
}

int gl_needs_grad(int nin, gl_tensor *const *in) {
  if (!grad_on) return 0;
  for (int i = 0; i < nin; i++)
    if (in[i] && in[i]->requires_grad) return 1;
  return 0;
}

void gl_input_header_only(gl_node *n, int i) {
  if (!n || i < 0 || i >= n->nin || (n->hdr_in >> i & 1u)) return;
  n->hdr_in |= 1u << i;
  n->in[i]->hdr_refs++;
}

static void node_drop_graph(gl_node *n) {
  for (int i = 0; i < n->nin; i++) {
    if (n->hdr_in >> i & 1u) n->in[i]->hdr_refs--;
    gl_release(n->in[i]);
    n->in[i] = NULL;
  }
  n->hdr_in = 0;
  for (int i = 0; i < n->nsaved; i++) { gl_release(n->saved[i]); n->saved[i] = NULL; }
  for (int i = 0; i < n->nout; i++) { gl_release(n->gout[i]); n->gout[i] = NULL; }
  if (n->ctx && n->ctx_free) n->ctx_free(n->ctx);
  n->ctx = NULL;
  n->nsaved = 0;
  n->released = 1;
}

void gl_node_release(gl_node *n) {
  if (!n || n == &lost_node || --n->refs > 0) return;
  node_drop_graph(n);
  n->ctx = free_nodes;   /* free list linked through ctx */
  free_nodes = n;
}

gl_node *gl_record(const gl_op *op, int nin, gl_tensor *const *in, int nout, gl_tensor **outs) {
  if (!gl_needs_grad(nin, in)) return NULL;
  gl_node *n = NULL;
  /* (more inputs or outputs than a node holds is an op's bug; it loses the graph loudly) */
  if (nin <= GL_MAX_INPUTS && nout <= GL_MAX_OUTPUTS && !fault(GL_FAULT_NODE)) {
    n = free_nodes;
    if (n) free_nodes = n->ctx;
    else n = malloc(sizeof *n);
  }
  if (!n) {
    /* the op's values are right but its graph is lost: tie the outputs to the marker
     * node, so a backward through them fails instead of silently skipping this op */
    lost_op_name = op->name;
    for (int k = 0; k < nout; k++) {
      outs[k]->node = &lost_node;
      outs[k]->out_index = 0;
      outs[k]->requires_grad = 1;
    }
    return NULL;
  }
  memset(n, 0, sizeof *n);
  n->op = op;
  n->nin = nin;
  for (int i = 0; i < nin; i++) {
    n->in[i] = in[i];
    gl_retain(in[i]);
  }
  n->nout = nout;
  for (int k = 0; k < nout; k++) {
    gl_tensor *o = outs[k];
    n->out_ndim[k] = o->ndim;
    memcpy(n->out_shape[k], o->shape, sizeof o->shape);
    o->node = n;
    o->out_index = k;
    o->requires_grad = 1;
    n->refs++;
  }
  return n;
}

void gl_save(gl_node *n, gl_tensor *t) {
  if (!n) return;
  if (!t || fault(GL_FAULT_SAVE)) {
    n->broken = "a tensor it needs for backward could not be saved (out of memory)";
    return;
  }
  if (n->nsaved == GL_MAX_SAVED) {
    n->broken = "it saved more tensors than a node holds (GL_MAX_SAVED)";
    return;
  }
  n->saved[n->nsaved++] = t;
  t->refs++;
}

/* a gradient buffer for x: zeroed or not; NULL (and the backward marked failed) when it
 * cannot be allocated */
static int alloc_grad(gl_node *n, gl_tensor **slot, const gl_tensor *x, int zero) {
  if (fault(GL_FAULT_GRAD) ||
      (zero ? gl_zeros(slot, x->ndim, x->shape) : gl_empty(slot, x->ndim, x->shape))) {
    *slot = NULL;
    grad_alloc_failed = n->op->name;
    return -1;
  }
  return 0;
}

/* Where input i's gradient goes: the producing node's output-gradient slot, or the leaf's
 * .grad.  NULL when the input does not need one. */
gl_tensor *gl_grad_of(gl_node *n, int i) {
  gl_tensor *x = n->in[i];
  if (!x || !x->requires_grad) return NULL;
  gl_tensor **slot;
  if (x->node) {
    if (x->node->released) return NULL;
    slot = &x->node->gout[x->out_index];
  } else {
    slot = &x->grad;
  }
  if (!*slot && alloc_grad(n, slot, x, 1)) return NULL;
  return *slot;
}

/* gl_grad_of without the zeroing of a new buffer.  A buffer is only handed out fresh when no
 * other input of the node is the same tensor: the op's later gl_grad_of(n, j) for that input
 * would otherwise add into a buffer the op has not yet assigned. */
gl_tensor *gl_grad_slot(gl_node *n, int i, int *fresh) {
  *fresh = 0;
  gl_tensor *x = n->in[i];
  if (!x || !x->requires_grad) return NULL;
  gl_tensor **slot;
  if (x->node) {
    if (x->node->released) return NULL;
    slot = &x->node->gout[x->out_index];
  } else {
    slot = &x->grad;
  }
  if (*slot) return *slot;
  for (int j = 0; j < n->nin; j++)
    if (j != i && n->in[j] == x) return gl_grad_of(n, i);
  if (alloc_grad(n, slot, x, 0)) return NULL;
  *fresh = 1;
  return *slot;
}

int gl_requires_grad_(gl_tensor *t, int on) {
  if (t->node && !on)
    return gl_fail(GL_ESTATE, "requires_grad: only a leaf tensor can stop requiring grad "
                              "(use detach())");
  t->requires_grad = on != 0;
  return GL_OK;
}

int gl_zero_grad(gl_tensor *t) {
  if (t->grad) memset(t->grad->data, 0, t->grad->numel * sizeof(float));
  return GL_OK;
}

int gl_detach(gl_tensor **out, gl_tensor *t) {
  gl_tensor *a = gl_alias(t);
  if (!a) return gl_fail(GL_ENOMEM, "detach: out of memory");
  *out = a;
  return GL_OK;
}

/* ------------------------------------------------------------------------ */
/* backward */

typedef struct { gl_node **v; size_t n, cap; } node_vec;

static int vec_push(node_vec *s, gl_node *n) {
  if (s->n == s->cap) {
    size_t c = s->cap ? s->cap * 2 : 64;
    gl_node **v = realloc(s->v, c * sizeof *v);
    if (!v) return -1;
    s->v = v;
    s->cap = c;
  }
  s->v[s->n++] = n;
  return 0;
}

/* Post-order DFS without recursion (graphs from long unrolled loops are deep). */
static int topo_sort(gl_node *root, node_vec *order) {
  typedef struct { gl_node *n; int next; } frame;
  frame *fr = NULL;
  size_t nfr = 0, capfr = 0;
  unsigned ep = ++mark_epoch;
  int rc = 0;
#define PUSH(node)                                                              \
  do {                                                                          \
    if (nfr == capfr) {                                                         \
      size_t c = capfr ? capfr * 2 : 64;                                        \
      frame *f2 = realloc(fr, c * sizeof *f2);                                  \
      if (!f2) { rc = -1; goto done; }                                          \
      fr = f2; capfr = c;                                                       \
    }                                                                           \
    fr[nfr].n = (node); fr[nfr].next = 0; nfr++; (node)->mark = ep;             \
  } while (0)
  PUSH(root);
  while (nfr) {
    frame *f = &fr[nfr - 1];
    if (f->next < f->n->nin) {
      gl_tensor *x = f->n->in[f->next++];
      if (x && x->node && !x->node->released && x->node->mark != ep) PUSH(x->node);
    } else {
      if (vec_push(order, f->n)) { rc = -1; goto done; }
      nfr--;
    }
  }
done:
#undef PUSH
  free(fr);
  return rc;
}

int gl_backward(gl_tensor *root, gl_tensor *seed, int retain) {
  char b1[128], b2[128];
  if (!root->requires_grad)
    return gl_fail(GL_ESTATE, "backward: the tensor does not require grad (no graph to run)");
  if (!seed && root->numel != 1)
    return gl_fail(GL_ESTATE, "backward: a gradient can only be created implicitly for a "
                              "scalar, got shape %s", gl_shape_str(b1, sizeof b1, root->ndim, root->shape));
  if (seed && seed->numel != root->numel)
    return gl_fail(GL_ESHAPE, "backward: gradient of shape %s for a tensor of shape %s",
                   gl_shape_str(b1, sizeof b1, seed->ndim, seed->shape),
                   gl_shape_str(b2, sizeof b2, root->ndim, root->shape));
  if (!root->node) { /* a leaf: its gradient is the seed */
    if (!root->grad && gl_zeros(&root->grad, root->ndim, root->shape)) return GL_ENOMEM;
    for (size_t i = 0; i < root->numel; i++) root->grad->data[i] += seed ? seed->data[i] : 1.0f;
    return GL_OK;
  }
  gl_node *rn = root->node;
  if (rn == &lost_node)
    return gl_fail(GL_ENOMEM, "backward: the graph of this tensor was lost: out of memory "
                              "while recording op '%s'", lost_op_name);
  if (rn->released)
    return gl_fail(GL_ESTATE, "backward: the graph was already freed by an earlier "
                              "backward (pass retain_graph=true to run it twice)");
  node_vec order = {0};
  if (topo_sort(rn, &order)) { free(order.v); return gl_fail(GL_ENOMEM, "backward: out of memory"); }
  /* a broken node anywhere upstream: fail before any gradient is accumulated */
  for (size_t k = 0; k < order.n; k++) {
    gl_node *n = order.v[k];
    if (!n->broken) continue;
    int st = n == &lost_node
                 ? gl_fail(GL_ENOMEM, "backward: part of the graph was lost: out of memory "
                                      "while recording op '%s'", lost_op_name)
                 : gl_fail(GL_ESTATE, "backward: op '%s' cannot run its backward: %s",
                           n->op->name, n->broken);
    free(order.v);
    return st;
  }
  /* pin every node for the sweep: dropping a node's inputs may free the tensors (and so
   * the nodes) upstream before their turn comes */
  for (size_t k = 0; k < order.n; k++) order.v[k]->refs++;
  gl_tensor **slot = &rn->gout[root->out_index];
  if (!*slot && gl_zeros(slot, root->ndim, root->shape)) {
    for (size_t k = 0; k < order.n; k++) gl_node_release(order.v[k]);
    free(order.v);
    return GL_ENOMEM;
  }
  for (size_t i = 0; i < root->numel; i++) (*slot)->data[i] += seed ? seed->data[i] : 1.0f;

  int prev = gl_set_grad_enabled(0);
  int st = GL_OK;
  grad_alloc_failed = NULL;
  for (size_t k = order.n; k-- > 0;) {
    gl_node *n = order.v[k];
    int any = 0;
    for (int j = 0; j < n->nout; j++) any |= n->gout[j] != NULL;
    if (any && n->op->backward) {
      /* outputs nobody used get a zero gradient so backward code can read every slot */
      for (int j = 0; j < n->nout && !st; j++)
        if (!n->gout[j]) st = gl_zeros(&n->gout[j], n->out_ndim[j], n->out_shape[j]);
      if (!st) st = n->op->backward(n, n->gout);
      if (!st && grad_alloc_failed)
        st = gl_fail(GL_ENOMEM, "backward: out of memory for a gradient buffer in op '%s'",
                     grad_alloc_failed);
      if (st) break;
    }
    if (!retain) {
      node_drop_graph(n);
    } else {
      for (int j = 0; j < n->nout; j++) { gl_release(n->gout[j]); n->gout[j] = NULL; }
    }
  }
  if (st && !retain)
    for (size_t k = 0; k < order.n; k++) node_drop_graph(order.v[k]);
  for (size_t k = 0; k < order.n; k++) gl_node_release(order.v[k]);
  gl_set_grad_enabled(prev);
  free(order.v);
  return st;
}
