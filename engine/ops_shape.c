/* ops_shape.c -- shape ops.  reshape, squeeze/unsqueeze, and select/narrow on the first dim
 * share storage with their input (views); everything that would need strides (transpose,
 * permute, narrow or select on an inner dim) copies.  Also the indexing ops: index_select,
 * gather, scatter_add, embedding, and cat / stack / expand.  permute's copies (multi-head
 * attention's head split and merge) run their rows on the thread pool (parallel.h).
 */
#include "glimpse_internal.h"
#include "ops_span.h"
#include "parallel.h"

#include <math.h>
#include <string.h>

#define SHAPE(buf, t) gl_shape_str(buf, sizeof buf, (t)->ndim, (t)->shape)

static int check_dim(const char *op, const gl_tensor *a, int dim) {
  if (dim < 0 || dim >= a->ndim) {
    char b[128];
    return gl_fail(GL_EARG, "%s: dim %d out of range for shape %s", op, dim + 1, SHAPE(b, a));
  }
  return GL_OK;
}

/* A view: same storage, new shape, data offset by `off` floats. */
static int make_view(gl_tensor **out, gl_tensor *a, int ndim, const int *shape, size_t off) {
  gl_tensor *v = gl_alias(a);
  if (!v) return gl_fail(GL_ENOMEM, "view: out of memory");
  v->ndim = ndim;
  memset(v->shape, 0, sizeof v->shape);
  if (ndim) memcpy(v->shape, shape, sizeof(int) * (size_t)ndim);
  size_t n = 1;
  for (int i = 0; i < ndim; i++) n *= (size_t)shape[i];
  v->numel = n;
  v->data = a->data + off;
  *out = v;
  return GL_OK;
}

/* ------------------------------------------------------------------------ */
/* reshape (a view): out has a's elements in a's order under a new shape
 * backward: ga += gout read with a's shape */

/* dst[o * dstride + i] += src[o * sstride + i] for o < outer, i < width: the gradient adds of
 * the slab ops (reshape, narrow, cat), on the pool by pieces of rows of up to SLAB_PIECE */
#define SLAB_PIECE ((size_t)4096)
typedef struct {
  float *dst;
  const float *src;
  size_t dstride, sstride, width, pieces;   /* pieces per row */
} slab_ctx;

static void slab_add_range(void *ctx, size_t lo, size_t hi, int slot) {
  (void)slot;
  const slab_ctx *c = ctx;
  for (size_t q = lo; q < hi; q++) {
    size_t o = q / c->pieces, i0 = q % c->pieces * SLAB_PIECE;
    size_t i1 = i0 + SLAB_PIECE < c->width ? i0 + SLAB_PIECE : c->width;
    float *restrict d = c->dst + o * c->dstride;
    const float *restrict sp = c->src + o * c->sstride;
    for (size_t i = i0; i < i1; i++) d[i] += sp[i];
  }
}

static void slab_add(float *dst, size_t dstride, const float *src, size_t sstride, size_t outer,
                     size_t width) {
  if (!width || !outer) return;
  size_t pieces = (width + SLAB_PIECE - 1) / SLAB_PIECE;
  slab_ctx c = {dst, src, dstride, sstride, width, pieces};
  gl_parallel_for(outer * pieces, width < SLAB_PIECE ? width : SLAB_PIECE, slab_add_range, &c);
}

static int reshape_backward(gl_node *n, gl_tensor **gout) {
  int fresh;
  gl_tensor *g = gl_grad_slot(n, 0, &fresh);
  if (g && fresh) memcpy(g->data, gout[0]->data, g->numel * sizeof(float));
  else if (g) slab_add(g->data, 0, gout[0]->data, 0, 1, g->numel);
  return GL_OK;
}

static const gl_op op_reshape = {"reshape", reshape_backward};

int gl_reshape(gl_tensor **out, gl_tensor *a, int ndim, const int *shape) {
  char b1[128], b2[128];
  if (ndim < 0 || ndim > GL_MAX_DIMS)
    return gl_fail(GL_EARG, "reshape: %d dims (at most %d)", ndim, GL_MAX_DIMS);
  int s[GL_MAX_DIMS], infer = -1;
  size_t known = 1;
  for (int i = 0; i < ndim; i++) {
    s[i] = shape[i];
    if (s[i] == -1) {
      if (infer >= 0) return gl_fail(GL_EARG, "reshape: only one dim can be -1");
      infer = i;
    } else if (s[i] < 0) {
      return gl_fail(GL_EARG, "reshape: size %d of dim %d is negative", s[i], i + 1);
    } else {
      known *= (size_t)s[i];
      if (known > GL_MAX_NUMEL) return gl_fail(GL_ESHAPE, "reshape: shape too large");
    }
  }
  if (infer >= 0) {
    if (known == 0 || a->numel % known)
      return gl_fail(GL_ESHAPE, "reshape: cannot infer dim %d: %zu elements of %s into %s",
                     infer + 1, a->numel, SHAPE(b1, a), gl_shape_str(b2, sizeof b2, ndim, shape));
    s[infer] = (int)(a->numel / known);
    known *= (size_t)s[infer];
  }
  if (known != a->numel)
    return gl_fail(GL_ESHAPE, "reshape: %s (%zu elements) cannot become %s (%zu elements)",
                   SHAPE(b1, a), a->numel, gl_shape_str(b2, sizeof b2, ndim, shape), known);
  int st = make_view(out, a, ndim, s, 0);
  if (!st) gl_input_header_only(gl_record(&op_reshape, 1, &a, 1, out), 0);
  return st;
}

int gl_unsqueeze(gl_tensor **out, gl_tensor *a, int dim) {
  if (dim < 0 || dim > a->ndim || a->ndim >= GL_MAX_DIMS) {
    char b[128];
    return gl_fail(GL_EARG, "unsqueeze: dim %d out of range for shape %s", dim + 1, SHAPE(b, a));
  }
  int s[GL_MAX_DIMS], k = 0;
  for (int i = 0; i <= a->ndim; i++) s[i] = i == dim ? 1 : a->shape[k++];
  return gl_reshape(out, a, a->ndim + 1, s);
}

int gl_squeeze(gl_tensor **out, gl_tensor *a, int dim) {
  int s[GL_MAX_DIMS], k = 0;
  if (dim >= 0) {
    int st = check_dim("squeeze", a, dim);
    if (st) return st;
  }
  for (int i = 0; i < a->ndim; i++)
    if (!(a->shape[i] == 1 && (dim < 0 || dim == i))) s[k++] = a->shape[i];
  return gl_reshape(out, a, k, s);
}

/* ------------------------------------------------------------------------ */
/* permute: out[i_perm[0], ..., i_perm[n-1]] = a[i_0, ..., i_{n-1}], a copy
 * backward: ga += permute(gout, inverse perm) */

/* The copy's geometry: the output walked row by row (rows of the last out dim), each row
 * read from src with stride ost[nd-1]; rows go to the pool (parallel.h) in ranges. */
typedef struct {
  const float *src;
  float *dst;
  int nd, add;                        /* add: dst += instead of dst = */
  int oshape[GL_MAX_DIMS];
  size_t ost[GL_MAX_DIMS];            /* stride in src for each out dim */
} permute_ctx;

static void permute_range(void *ctx, size_t lo, size_t hi, int slot) {
  (void)slot;
  const permute_ctx *c = ctx;
  int nd = c->nd, inner = c->oshape[nd - 1], idx[GL_MAX_DIMS] = {0};
  size_t is = c->ost[nd - 1], off = 0, r = lo;
  for (int i = nd - 2; i >= 0; i--) {   /* the source offset of row lo */
    idx[i] = (int)(r % (size_t)c->oshape[i]);
    r /= (size_t)c->oshape[i];
    off += c->ost[i] * (size_t)idx[i];
  }
  for (size_t row = lo; row < hi; row++) {
    const float *restrict p = c->src + off;
    float *restrict d = c->dst + row * (size_t)inner;
    if (is == 1 && c->add) for (int j = 0; j < inner; j++) d[j] += p[j];
    else if (is == 1) memcpy(d, p, sizeof(float) * (size_t)inner);
    else if (c->add) for (int j = 0; j < inner; j++) d[j] += p[(size_t)j * is];
    else for (int j = 0; j < inner; j++) d[j] = p[(size_t)j * is];
    for (int i = nd - 2; i >= 0; i--) {
      idx[i]++;
      off += c->ost[i];
      if (idx[i] < c->oshape[i]) break;
      off -= c->ost[i] * (size_t)c->oshape[i];
      idx[i] = 0;
    }
  }
}

/* dst (=, or += when add) src permuted: dst[i_perm[0], ..., i_perm[n-1]] = src[i_0, ...] */
static void permute_copy(const float *src, const int *sshape, int nd, const int *perm, float *dst,
                         int add) {
  permute_ctx c = {src, dst, nd, add, {0}, {0}};
  size_t sst[GL_MAX_DIMS], s = 1;
  for (int i = nd - 1; i >= 0; i--) { sst[i] = s; s *= (size_t)sshape[i]; }
  for (int i = 0; i < nd; i++) { c.oshape[i] = sshape[perm[i]]; c.ost[i] = sst[perm[i]]; }
  if (s == 0) return;
  if (nd == 0) { dst[0] = add ? dst[0] + src[0] : src[0]; return; }
  size_t inner = (size_t)c.oshape[nd - 1];
  gl_parallel_for(s / inner, inner * 2, permute_range, &c);
}

typedef struct { int perm[GL_MAX_DIMS]; } permute_state;

/* the gradient goes straight into its buffer: written when fresh, added otherwise */
static int permute_backward(gl_node *n, gl_tensor **gout) {
  int fresh;
  gl_tensor *g = gl_grad_slot(n, 0, &fresh);
  if (!g) return GL_OK;
  int nd = g->ndim, inv[GL_MAX_DIMS];
  const int *perm = GL_NODE_STATE(n, permute_state)->perm;
  for (int i = 0; i < nd; i++) inv[perm[i]] = i;
  permute_copy(gout[0]->data, gout[0]->shape, nd, inv, g->data, !fresh);
  return GL_OK;
}

static const gl_op op_permute = {"permute", permute_backward};

int gl_permute(gl_tensor **out, gl_tensor *a, const int *perm) {
  int seen[GL_MAX_DIMS] = {0}, shape[GL_MAX_DIMS];
  char b[128];
  for (int i = 0; i < a->ndim; i++) {
    if (perm[i] < 0 || perm[i] >= a->ndim || seen[perm[i]]++)
      return gl_fail(GL_EARG, "permute: not a permutation of the %d dims of %s", a->ndim,
                     SHAPE(b, a));
    shape[i] = a->shape[perm[i]];
  }
  int st = gl_empty(out, a->ndim, shape);
  if (st) return st;
  permute_copy(a->data, a->shape, a->ndim, perm, (*out)->data, 0);
  gl_node *n = gl_record(&op_permute, 1, &a, 1, out);
  gl_input_header_only(n, 0);         /* backward permutes gout back: shapes only */
  if (n) memcpy(GL_NODE_STATE(n, permute_state)->perm, perm, sizeof(int) * (size_t)a->ndim);
  return GL_OK;
}

int gl_transpose(gl_tensor **out, gl_tensor *a, int d0, int d1) {
  int st = check_dim("transpose", a, d0);
  if (!st) st = check_dim("transpose", a, d1);
  if (st) return st;
  int perm[GL_MAX_DIMS];
  for (int i = 0; i < a->ndim; i++) perm[i] = i;
  perm[d0] = d1;
  perm[d1] = d0;
  return gl_permute(out, a, perm);
}

/* ------------------------------------------------------------------------ */
/* narrow: out = a[..., start:start+len, ...] along dim (a view when dim is the first)
 * backward: ga[..., start:start+len, ...] += gout */

typedef struct { int dim, start, len; } narrow_state;

static int narrow_backward(gl_node *n, gl_tensor **gout) {
  gl_tensor *g = gl_grad_of(n, 0);
  if (!g) return GL_OK;
  size_t outer, len, inner;
  const narrow_state *ns = GL_NODE_STATE(n, narrow_state);
  gl_dim_span(g, ns->dim, &outer, &len, &inner);
  size_t start = (size_t)ns->start, cnt = (size_t)ns->len;
  slab_add(g->data + start * inner, len * inner, gout[0]->data, cnt * inner, outer, cnt * inner);
  return GL_OK;
}

static const gl_op op_narrow = {"narrow", narrow_backward};

static int narrow_impl(const char *op, gl_tensor **out, gl_tensor *a, int dim, int start, int len,
                       int drop_dim) {
  int st = check_dim(op, a, dim);
  if (st) return st;
  if (start < 0 || len < 0 || start + len > a->shape[dim] || (drop_dim && start >= a->shape[dim])) {
    char b[128];
    if (drop_dim)
      return gl_fail(GL_EARG, "%s: index %d out of range for dim %d of shape %s (size %d)", op,
                     start + 1, dim + 1, SHAPE(b, a), a->shape[dim]);
    return gl_fail(GL_EARG, "%s: range start %d length %d out of range for dim %d of shape %s",
                   op, start + 1, len, dim + 1, SHAPE(b, a));
  }
  int shape[GL_MAX_DIMS], k = 0;
  for (int i = 0; i < a->ndim; i++) {
    if (i == dim) { if (!drop_dim) shape[k++] = len; }
    else shape[k++] = a->shape[i];
  }
  size_t outer, n, inner;
  gl_dim_span(a, dim, &outer, &n, &inner);
  if (outer == 1) {
    st = make_view(out, a, k, shape, (size_t)start * inner);
  } else {
    if ((st = gl_empty(out, k, shape))) return st;
    for (size_t o = 0; o < outer; o++)
      memcpy((*out)->data + o * (size_t)len * inner, a->data + (o * n + (size_t)start) * inner,
             sizeof(float) * (size_t)len * inner);
  }
  if (st) return st;
  gl_node *nd = gl_record(&op_narrow, 1, &a, 1, out);
  gl_input_header_only(nd, 0);
  if (nd) *GL_NODE_STATE(nd, narrow_state) = (narrow_state){dim, start, len};
  return GL_OK;
}

int gl_narrow(gl_tensor **out, gl_tensor *a, int dim, int start, int len) {
  return narrow_impl("narrow", out, a, dim, start, len, 0);
}

int gl_select(gl_tensor **out, gl_tensor *a, int dim, int index) {
  return narrow_impl("select", out, a, dim, index, 1, 1);
}

/* ------------------------------------------------------------------------ */
/* index validation: idx holds integers in [0, n) */

static int check_index(const char *op, const gl_tensor *idx, int n) {
  for (size_t i = 0; i < idx->numel; i++) {
    float v = idx->data[i];
    if (!(v >= 0 && v < (float)n) || v != floorf(v))
      return gl_fail(GL_EARG, "%s: index %g out of range (valid 1..%d)", op, (double)v + 1, n);
  }
  return GL_OK;
}

/* the index ops' saved state: the dim (index_select, gather, scatter_add) or the padding
 * index (embedding); the index tensor itself is saved[0] */
typedef struct { int arg; } index_state;

/* Record the op's int argument and keep a private copy of idx for backward (the caller owns
 * idx and may rewrite it).  n may be NULL (nothing recorded). */
static int save_index(gl_node *n, int arg, const gl_tensor *idx) {
  if (!n) return GL_OK;
  GL_NODE_STATE(n, index_state)->arg = arg;
  gl_tensor *ic;
  int st = gl_clone(&ic, idx);
  if (st) return st;
  gl_save(n, ic);
  gl_release(ic);
  return GL_OK;
}

/* ------------------------------------------------------------------------ */
/* index_select: out[o, k, i] = a[o, idx[k], i] along dim, idx 1-D
 * backward: ga[o, idx[k], i] += gout[o, k, i] */

static int index_select_backward(gl_node *n, gl_tensor **gout) {
  gl_tensor *g = gl_grad_of(n, 0);
  if (!g) return GL_OK;
  const gl_tensor *idx = n->saved[0];
  size_t outer, len, inner;
  gl_dim_span(g, GL_NODE_STATE(n, index_state)->arg, &outer, &len, &inner);
  size_t K = idx->numel;
  for (size_t o = 0; o < outer; o++)
    for (size_t k = 0; k < K; k++) {
      float *dst = g->data + (o * len + (size_t)idx->data[k]) * inner;
      const float *src = gout[0]->data + (o * K + k) * inner;
      for (size_t i = 0; i < inner; i++) dst[i] += src[i];
    }
  return GL_OK;
}

static const gl_op op_index_select = {"index_select", index_select_backward};

int gl_index_select(gl_tensor **out, gl_tensor *a, int dim, const gl_tensor *idx) {
  int st = check_dim("index_select", a, dim);
  if (st) return st;
  if (idx->ndim > 1) {
    char b[128];
    return gl_fail(GL_ESHAPE, "index_select: index must be 1-D, got %s", SHAPE(b, idx));
  }
  if ((st = check_index("index_select", idx, a->shape[dim]))) return st;
  int shape[GL_MAX_DIMS];
  memcpy(shape, a->shape, sizeof shape);
  shape[dim] = (int)idx->numel;
  if ((st = gl_empty(out, a->ndim, shape))) return st;
  size_t outer, len, inner, K = idx->numel;
  gl_dim_span(a, dim, &outer, &len, &inner);
  for (size_t o = 0; o < outer; o++)
    for (size_t k = 0; k < K; k++)
      memcpy((*out)->data + (o * K + k) * inner, a->data + (o * len + (size_t)idx->data[k]) * inner,
             sizeof(float) * inner);
  gl_node *n = gl_record(&op_index_select, 1, &a, 1, out);
  gl_input_header_only(n, 0);
  return save_index(n, dim, idx);
}

/* ------------------------------------------------------------------------ */
/* gather: out[p] = a[p with coordinate dim replaced by idx[p]], out shaped like idx
 * backward: ga[p with dim -> idx[p]] += gout[p] */


static void strides_of(const gl_tensor *t, size_t *st) {
  size_t s = 1;
  for (int i = t->ndim - 1; i >= 0; i--) { st[i] = s; s *= (size_t)t->shape[i]; }
}

/* for each element p of idx: the offset into `a` of the gathered element */
static void gather_offsets(const gl_tensor *a, int dim, const gl_tensor *idx, size_t *offs) {
  size_t ast[GL_MAX_DIMS];
  strides_of(a, ast);
  int nd = idx->ndim, c[GL_MAX_DIMS] = {0};
  for (size_t p = 0; p < idx->numel; p++) {
    size_t off = 0;
    for (int i = 0; i < nd; i++)
      off += (i == dim ? (size_t)idx->data[p] : (size_t)c[i]) * ast[i];
    offs[p] = off;
    for (int i = nd - 1; i >= 0; i--) {
      if (++c[i] < idx->shape[i]) break;
      c[i] = 0;
    }
  }
}

/* gather_offsets into scratch memory (NULL when out of memory); free with free_offsets */
static size_t *new_offsets(const gl_tensor *a, int dim, const gl_tensor *idx) {
  size_t *offs = (size_t *)gl_scratch_alloc(idx->numel * 2 + 2);
  if (offs) gather_offsets(a, dim, idx, offs);
  return offs;
}

static void free_offsets(size_t *offs, const gl_tensor *idx) {
  gl_scratch_free((float *)offs, idx->numel * 2 + 2);
}

/* the offset in t of element p of idx taken at the same coordinates (t is at least as
 * large as idx in every dim); tst and ist are t's and idx's strides */
static size_t offset_at(const size_t *tst, const size_t *ist, int nd, size_t p) {
  size_t off = 0;
  for (int i = 0; i < nd; i++) { off += (p / ist[i]) * tst[i]; p %= ist[i]; }
  return off;
}

static int check_gather(const char *op, const gl_tensor *a, int dim, const gl_tensor *idx) {
  char b1[128], b2[128];
  int st = check_dim(op, a, dim);
  if (st) return st;
  if (idx->ndim != a->ndim)
    return gl_fail(GL_ESHAPE, "%s: index %s must have as many dims as input %s", op,
                   SHAPE(b1, idx), SHAPE(b2, a));
  for (int i = 0; i < a->ndim; i++)
    if (i != dim && idx->shape[i] > a->shape[i])
      return gl_fail(GL_ESHAPE, "%s: index %s larger than input %s in dim %d", op,
                     SHAPE(b1, idx), SHAPE(b2, a), i + 1);
  return check_index(op, idx, a->shape[dim]);
}

static int gather_backward(gl_node *n, gl_tensor **gout) {
  gl_tensor *g = gl_grad_of(n, 0);
  if (!g) return GL_OK;
  const gl_tensor *idx = n->saved[0];
  size_t *offs = new_offsets(g, GL_NODE_STATE(n, index_state)->arg, idx);
  if (!offs) return gl_fail(GL_ENOMEM, "gather backward: out of memory");
  for (size_t p = 0; p < idx->numel; p++) g->data[offs[p]] += gout[0]->data[p];
  free_offsets(offs, idx);
  return GL_OK;
}

static const gl_op op_gather = {"gather", gather_backward};

int gl_gather(gl_tensor **out, gl_tensor *a, int dim, const gl_tensor *idx) {
  int st = check_gather("gather", a, dim, idx);
  if (st) return st;
  if ((st = gl_empty(out, idx->ndim, idx->shape))) return st;
  size_t *offs = new_offsets(a, dim, idx);
  if (!offs) return gl_fail(GL_ENOMEM, "gather: out of memory");
  for (size_t p = 0; p < idx->numel; p++) (*out)->data[p] = a->data[offs[p]];
  free_offsets(offs, idx);
  gl_node *n = gl_record(&op_gather, 1, &a, 1, out);
  gl_input_header_only(n, 0);
  return save_index(n, dim, idx);
}

/* ------------------------------------------------------------------------ */
/* scatter_add: out = a; out[p with dim -> idx[p]] += src[p]
 * backward: ga += gout; gsrc[p] += gout[p with dim -> idx[p]] */

static int scatter_backward(gl_node *n, gl_tensor **gout) {
  gl_tensor *ga = gl_grad_of(n, 0), *gs = gl_grad_of(n, 1);
  if (ga) for (size_t i = 0; i < ga->numel; i++) ga->data[i] += gout[0]->data[i];
  if (!gs) return GL_OK;
  const gl_tensor *idx = n->saved[0];
  size_t *offs = new_offsets(gout[0], GL_NODE_STATE(n, index_state)->arg, idx);
  if (!offs) return gl_fail(GL_ENOMEM, "scatter_add backward: out of memory");
  size_t sst[GL_MAX_DIMS], ist[GL_MAX_DIMS];
  strides_of(gs, sst);
  strides_of(idx, ist);
  for (size_t p = 0; p < idx->numel; p++)
    gs->data[offset_at(sst, ist, idx->ndim, p)] += gout[0]->data[offs[p]];
  free_offsets(offs, idx);
  return GL_OK;
}

static const gl_op op_scatter = {"scatter_add", scatter_backward};

int gl_scatter_add(gl_tensor **out, gl_tensor *a, int dim, const gl_tensor *idx, gl_tensor *src) {
  int st = check_gather("scatter_add", a, dim, idx);
  if (st) return st;
  char b1[128], b2[128];
  if (src->ndim != idx->ndim)
    return gl_fail(GL_ESHAPE, "scatter_add: src %s and index %s differ in dims", SHAPE(b1, src),
                   SHAPE(b2, idx));
  for (int i = 0; i < idx->ndim; i++)
    if (src->shape[i] < idx->shape[i])
      return gl_fail(GL_ESHAPE, "scatter_add: src %s smaller than index %s", SHAPE(b1, src),
                     SHAPE(b2, idx));
  if ((st = gl_clone(out, a))) return st;
  size_t *offs = new_offsets(a, dim, idx);
  if (!offs) return gl_fail(GL_ENOMEM, "scatter_add: out of memory");
  size_t sst[GL_MAX_DIMS], ist[GL_MAX_DIMS];
  strides_of(src, sst);
  strides_of(idx, ist);
  for (size_t p = 0; p < idx->numel; p++)
    (*out)->data[offs[p]] += src->data[offset_at(sst, ist, idx->ndim, p)];
  free_offsets(offs, idx);
  gl_tensor *in[2] = {a, src};
  return save_index(gl_record(&op_scatter, 2, in, 1, out), dim, idx);
}

/* ------------------------------------------------------------------------ */
/* embedding: out[p, :] = weight[idx[p], :]
 * backward: gweight[idx[p], :] += gout[p, :] unless idx[p] == padding_idx */

static int embedding_backward(gl_node *n, gl_tensor **gout) {
  gl_tensor *g = gl_grad_of(n, 0);
  if (!g) return GL_OK;
  const gl_tensor *idx = n->saved[0];
  int D = g->shape[1], pad = GL_NODE_STATE(n, index_state)->arg;
  for (size_t p = 0; p < idx->numel; p++) {
    int r = (int)idx->data[p];
    if (r == pad) continue;
    float *dst = g->data + (size_t)r * D;
    const float *src = gout[0]->data + p * (size_t)D;
    for (int j = 0; j < D; j++) dst[j] += src[j];
  }
  return GL_OK;
}

static const gl_op op_embedding = {"embedding", embedding_backward};

int gl_embedding(gl_tensor **out, gl_tensor *weight, const gl_tensor *idx, int padding_idx) {
  char b[128];
  if (weight->ndim != 2)
    return gl_fail(GL_ESHAPE, "embedding: weight must be (N, D), got %s", SHAPE(b, weight));
  if (idx->ndim >= GL_MAX_DIMS)
    return gl_fail(GL_ESHAPE, "embedding: index has too many dims %s", SHAPE(b, idx));
  int st = check_index("embedding", idx, weight->shape[0]);
  if (st) return st;
  int shape[GL_MAX_DIMS], D = weight->shape[1];
  memcpy(shape, idx->shape, sizeof(int) * (size_t)idx->ndim);
  shape[idx->ndim] = D;
  if ((st = gl_empty(out, idx->ndim + 1, shape))) return st;
  for (size_t p = 0; p < idx->numel; p++)
    memcpy((*out)->data + p * (size_t)D, weight->data + (size_t)idx->data[p] * D,
           sizeof(float) * (size_t)D);
  return save_index(gl_record(&op_embedding, 1, &weight, 1, out), padding_idx, idx);
}

/* ------------------------------------------------------------------------ */
/* cat: out = [t_0 ; t_1 ; ...] along dim
 * backward: each input's gradient is its slab of gout */

typedef struct { int dim; } cat_state;

static int cat_backward(gl_node *n, gl_tensor **gout) {
  int dim = GL_NODE_STATE(n, cat_state)->dim;
  size_t outer, total, inner, off = 0;
  gl_tensor *go = gout[0];
  gl_dim_span(go, dim, &outer, &total, &inner);
  for (int k = 0; k < n->nin; k++) {
    size_t len = (size_t)n->in[k]->shape[dim];
    gl_tensor *g = gl_grad_of(n, k);
    if (g) slab_add(g->data, len * inner, go->data + off * inner, total * inner, outer, len * inner);
    off += len;
  }
  return GL_OK;
}

static const gl_op op_cat = {"cat", cat_backward};

static int cat_core(const char *op, gl_tensor **out, int n, gl_tensor *const *ts, int dim) {
  char b1[128], b2[128];
  if (n < 1) return gl_fail(GL_EARG, "%s: needs at least one tensor", op);
  const gl_tensor *t0 = ts[0];
  int st = check_dim(op, t0, dim);
  if (st) return st;
  int shape[GL_MAX_DIMS];
  memcpy(shape, t0->shape, sizeof shape);
  shape[dim] = 0;
  for (int k = 0; k < n; k++) {
    const gl_tensor *t = ts[k];
    int ok = t->ndim == t0->ndim;
    for (int i = 0; ok && i < t0->ndim; i++) ok = i == dim || t->shape[i] == t0->shape[i];
    if (!ok)
      return gl_fail(GL_ESHAPE, "%s: tensor %d has shape %s, which does not fit %s along dim %d",
                     op, k + 1, SHAPE(b1, t), SHAPE(b2, t0), dim + 1);
    shape[dim] += t->shape[dim];
  }
  if ((st = gl_empty(out, t0->ndim, shape))) return st;
  size_t outer, total, inner, off = 0;
  gl_dim_span(*out, dim, &outer, &total, &inner);
  for (int k = 0; k < n; k++) {
    size_t len = (size_t)ts[k]->shape[dim];
    for (size_t o = 0; o < outer; o++)
      memcpy((*out)->data + (o * total + off) * inner, ts[k]->data + o * len * inner,
             sizeof(float) * len * inner);
    off += len;
  }
  return GL_OK;
}

int gl_cat(gl_tensor **out, int n, gl_tensor *const *ts, int dim) {
  if (n > GL_MAX_INPUTS) {
    /* a node holds at most GL_MAX_INPUTS inputs: cat in at most that many groups */
    gl_tensor *parts[GL_MAX_INPUTS];
    int per = (n + GL_MAX_INPUTS - 1) / GL_MAX_INPUTS, k = 0, st = GL_OK;
    for (int i = 0; i < n && !st; i += per, k++) {
      st = gl_cat(&parts[k], n - i < per ? n - i : per, ts + i, dim);
      if (st) k--;
    }
    if (!st) st = gl_cat(out, k, parts, dim);
    for (int i = 0; i < k; i++) gl_release(parts[i]);
    return st;
  }
  int st = cat_core("cat", out, n, ts, dim);
  if (st) return st;
  gl_node *nd = gl_record(&op_cat, n, ts, 1, out);
  for (int k = 0; k < n; k++) gl_input_header_only(nd, k);
  if (nd) GL_NODE_STATE(nd, cat_state)->dim = dim;
  return GL_OK;
}

int gl_stack(gl_tensor **out, int n, gl_tensor *const *ts, int dim) {
  char b1[128], b2[128];
  if (n < 1) return gl_fail(GL_EARG, "stack: needs at least one tensor");
  if (dim < 0 || dim > ts[0]->ndim || ts[0]->ndim >= GL_MAX_DIMS)
    return gl_fail(GL_EARG, "stack: dim %d out of range for %d-dim tensors", dim + 1, ts[0]->ndim);
  for (int k = 1; k < n; k++)
    if (!gl_same_shape(ts[k], ts[0]))
      return gl_fail(GL_ESHAPE, "stack: tensor %d has shape %s, tensor 1 has %s", k + 1,
                     SHAPE(b1, ts[k]), SHAPE(b2, ts[0]));
  gl_tensor **us = (gl_tensor **)(void *)gl_scratch_alloc((size_t)n * 2 + 2);
  if (!us) return gl_fail(GL_ENOMEM, "stack: out of memory");
  int st = GL_OK, made = 0;
  for (; made < n && !st; made++) st = gl_unsqueeze(&us[made], ts[made], dim);
  if (st) made--;
  if (!st) st = gl_cat(out, n, us, dim);
  for (int k = 0; k < made; k++) gl_release(us[k]);
  gl_scratch_free((float *)(void *)us, (size_t)n * 2 + 2);
  return st;
}

/* ------------------------------------------------------------------------ */
/* expand: a broadcast to shape, copied
 * backward: ga += sum of gout over the stretched dims */

static int expand_backward(gl_node *n, gl_tensor **gout) {
  gl_tensor *g = gl_grad_of(n, 0);
  return g ? gl_sum_to_add(g, gout[0]) : GL_OK;
}

static const gl_op op_expand = {"expand", expand_backward};

int gl_expand(gl_tensor **out, gl_tensor *a, int ndim, const int *shape) {
  char b1[128], b2[128];
  int n2, s2[GL_MAX_DIMS];
  gl_tensor target = {0};
  target.ndim = ndim;
  if (ndim) memcpy(target.shape, shape, sizeof(int) * (size_t)ndim);
  int st = gl_broadcast_shape("expand", a, &target, &n2, s2);
  if (st) return st;
  if (n2 != ndim || memcmp(s2, shape, sizeof(int) * (size_t)ndim))
    return gl_fail(GL_ESHAPE, "expand: %s cannot expand to %s", SHAPE(b1, a),
                   gl_shape_str(b2, sizeof b2, ndim, shape));
  if ((st = gl_empty(out, ndim, shape))) return st;
  int prev = gl_set_grad_enabled(0);
  st = gl_copy_(*out, a);
  gl_set_grad_enabled(prev);
  if (st) return st;
  gl_input_header_only(gl_record(&op_expand, 1, &a, 1, out), 0);
  return GL_OK;
}
