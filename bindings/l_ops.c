/* l_ops.c -- bindings of the core ops: arithmetic and its metamethods, unary maths,
 * reductions, matrix products, shape and indexing ops, softmax, losses, dropout, sampling.
 *
 * Index arguments (indices for index_select/gather, class targets, ignore_index) arrive
 * 1-based from Lua as tensors or tables and leave 1-based; the engine sees 0-based.
 */
#include "lglimpse.h"

#include <math.h>
#include <string.h>

#define NO_IGNORE (-1000000)

/* A 0-based index tensor from a 1-based tensor, table or integer at stack i: a scratch box
 * pushed on the stack (borrowed; Lua owns it). */
static gl_tensor *index_arg(lua_State *L, int i) {
  if (lua_isinteger(L, i)) {
    float v = (float)lg_checkint(L, i) - 1;
    gl_tensor **box = lg_newbox(L);
    LG_TRY(L, "index", gl_from_data(box, 1, (int[]){1}, &v));
    return *box;
  }
  gl_tensor *src = lg_arg(L, i);
  gl_tensor **box = lg_newbox(L);
  LG_TRY(L, "index", gl_clone(box, src));
  gl_tensor *t = *box;
  for (size_t k = 0; k < t->numel; k++) t->data[k] -= 1;
  return t;
}

/* ------------------------------------------------------------------------ */
/* arithmetic: tensor OP tensor, tensor OP number, number OP tensor */

typedef int (*binop)(gl_tensor **, gl_tensor *, gl_tensor *);

static int arith(lua_State *L, const char *name, binop f, int sop) {
  gl_tensor *a = lg_test(L, 1), *b = lg_test(L, 2);
  if (a && b) {
    gl_tensor **box = lg_newbox(L);
    if (f(box, a, b)) lg_error(L, name);
    return 1;
  }
  if (a && lua_type(L, 2) == LUA_TNUMBER) {
    float s = (float)lua_tonumber(L, 2);
    gl_tensor **box = lg_newbox(L);
    int st;
    switch (sop) {
      case 0: st = gl_add_scalar(box, a, s); break;
      case 1: st = gl_add_scalar(box, a, -s); break;
      case 2: st = gl_mul_scalar(box, a, s); break;
      case 3: st = gl_mul_scalar(box, a, 1.0f / s); break;
      default: st = gl_pow_scalar(box, a, s); break;
    }
    if (st) lg_error(L, name);
    return 1;
  }
  if (b && lua_type(L, 1) == LUA_TNUMBER) {
    float s = (float)lua_tonumber(L, 1);
    gl_tensor **box = lg_newbox(L);
    int st;
    switch (sop) {
      case 0: st = gl_add_scalar(box, b, s); break;
      case 1: st = gl_rsub_scalar(box, b, s); break;
      case 2: st = gl_mul_scalar(box, b, s); break;
      case 3: st = gl_rdiv_scalar(box, b, s); break;
      default: {
        gl_tensor **sa = lg_newbox(L);   /* scratch, above the result box */
        LG_TRY(L, name, gl_full(sa, 0, NULL, s));
        st = f(box, *sa, b);
        lua_pop(L, 1);
      }
    }
    if (st) lg_error(L, name);
    return 1;
  }
  /* a table on one side: make it a tensor */
  gl_tensor *x = lg_arg(L, 1), *y = lg_arg(L, 2);
  gl_tensor **box = lg_newbox(L);
  if (f(box, x, y)) lg_error(L, name);
  return 1;
}

static int m_add(lua_State *L) { return arith(L, "add", gl_add, 0); }
static int m_sub(lua_State *L) { return arith(L, "sub", gl_sub, 1); }
static int m_mul(lua_State *L) { return arith(L, "mul", gl_mul, 2); }
static int m_div(lua_State *L) { return arith(L, "div", gl_div, 3); }
static int m_pow(lua_State *L) { return arith(L, "pow", gl_pow, 4); }

static int two_tensors(lua_State *L, const char *name, binop f) {
  gl_tensor *a = lg_arg(L, 1), *b = lg_arg(L, 2);
  gl_tensor **box = lg_newbox(L);
  if (f(box, a, b)) lg_error(L, name);
  return 1;
}

static int m_maximum(lua_State *L) { return two_tensors(L, "maximum", gl_maximum); }
static int m_minimum(lua_State *L) { return two_tensors(L, "minimum", gl_minimum); }

static int cmp_with(lua_State *L, const char *how) {
  gl_tensor *a = lg_check(L, 1);
  gl_tensor *b = lg_arg(L, 2);
  gl_tensor **box = lg_newbox(L);
  if (gl_cmp(box, a, b, how)) lg_error(L, how);
  return 1;
}

static int m_eq(lua_State *L) { return cmp_with(L, "eq"); }
static int m_ne(lua_State *L) { return cmp_with(L, "ne"); }
static int m_lt(lua_State *L) { return cmp_with(L, "lt"); }
static int m_le(lua_State *L) { return cmp_with(L, "le"); }
static int m_gt(lua_State *L) { return cmp_with(L, "gt"); }
static int m_ge(lua_State *L) { return cmp_with(L, "ge"); }

static int l_where(lua_State *L) {
  gl_tensor *c = lg_arg(L, 1), *a = lg_arg(L, 2), *b = lg_arg(L, 3);
  gl_tensor **box = lg_newbox(L);
  LG_TRY(L, "where", gl_where(box, c, a, b));
  return 1;
}

/* ------------------------------------------------------------------------ */
/* unary maths */

static int unary(lua_State *L, gl_unary_kind k) {
  gl_tensor *a = lg_check(L, 1);
  gl_tensor **box = lg_newbox(L);
  if (gl_unary(box, a, k)) lg_error(L, gl_unary_name(k));
  return 1;
}

static int m_neg(lua_State *L) { return unary(L, GL_NEG); }
static int m_exp(lua_State *L) { return unary(L, GL_EXP); }
static int m_log(lua_State *L) { return unary(L, GL_LOG); }
static int m_tanh(lua_State *L) { return unary(L, GL_TANH); }
static int m_sigmoid(lua_State *L) { return unary(L, GL_SIGMOID); }
static int m_relu(lua_State *L) { return unary(L, GL_RELU); }
static int m_sqrt(lua_State *L) { return unary(L, GL_SQRT); }
static int m_abs(lua_State *L) { return unary(L, GL_ABS); }
static int m_sin(lua_State *L) { return unary(L, GL_SIN); }
static int m_cos(lua_State *L) { return unary(L, GL_COS); }
static int m_softplus(lua_State *L) { return unary(L, GL_SOFTPLUS); }
static int m_log1p(lua_State *L) { return unary(L, GL_LOG1P); }
static int m_sign(lua_State *L) { return unary(L, GL_SIGN); }
static int m_floor(lua_State *L) { return unary(L, GL_FLOOR); }
static int m_round(lua_State *L) { return unary(L, GL_ROUND); }
static int m_rsqrt(lua_State *L) { return unary(L, GL_RSQRT); }
static int m_gelu(lua_State *L) { return unary(L, GL_GELU); }

static int m_clamp(lua_State *L) {
  gl_tensor *a = lg_check(L, 1);
  float lo = (float)luaL_optnumber(L, 2, -HUGE_VAL), hi = (float)luaL_optnumber(L, 3, HUGE_VAL);
  gl_tensor **box = lg_newbox(L);
  LG_TRY(L, "clamp", gl_clamp(box, a, lo, hi));
  return 1;
}

static int m_leaky_relu(lua_State *L) {
  gl_tensor *a = lg_check(L, 1);
  float s = (float)luaL_optnumber(L, 2, 0.01);
  gl_tensor **box = lg_newbox(L);
  LG_TRY(L, "leaky_relu", gl_leaky_relu(box, a, s));
  return 1;
}

/* ------------------------------------------------------------------------ */
/* reductions: x:sum() over everything (0-dim result), x:sum(dim, keepdim) */

typedef int (*redop)(gl_tensor **, gl_tensor *, int, int);

static int reduction(lua_State *L, const char *name, redop f) {
  gl_tensor *a = lg_check(L, 1);
  int dim = lg_optdim(L, 2, a->ndim, -1);
  int keep = lua_toboolean(L, 3);
  gl_tensor **box = lg_newbox(L);
  if (f(box, a, dim, keep)) lg_error(L, name);
  return 1;
}

static int m_sum(lua_State *L) { return reduction(L, "sum", gl_sum); }
static int m_mean(lua_State *L) { return reduction(L, "mean", gl_mean); }
static int m_logsumexp(lua_State *L) { return reduction(L, "logsumexp", gl_logsumexp); }

/* x:cumsum(dim): the running sum along dim (1-based, negative from the end) */
static int m_cumsum(lua_State *L) {
  gl_tensor *a = lg_check(L, 1);
  int dim = lg_checkdim(L, 2, a->ndim);
  gl_tensor **box = lg_newbox(L);
  LG_TRY(L, "cumsum", gl_cumsum(box, a, dim));
  return 1;
}

static int m_var(lua_State *L) {
  gl_tensor *a = lg_check(L, 1);
  int dim = lg_optdim(L, 2, a->ndim, -1);
  int keep = lua_toboolean(L, 3);
  int unbiased = lua_isnoneornil(L, 4) ? 1 : lua_toboolean(L, 4);
  gl_tensor **box = lg_newbox(L);
  LG_TRY(L, "var", gl_var(box, a, dim, keep, unbiased));
  return 1;
}

static void indices_to_lua(gl_tensor *t) {
  for (size_t k = 0; k < t->numel; k++) t->data[k] += 1;
}

static int extreme(lua_State *L, const char *name, int want_max) {
  gl_tensor *a = lg_check(L, 1);
  int dim = lg_optdim(L, 2, a->ndim, -1);
  int keep = lua_toboolean(L, 3);
  gl_tensor **vals = lg_newbox(L);
  gl_tensor **idx = lg_newbox(L);
  int st = want_max ? gl_max(vals, idx, a, dim, keep) : gl_min(vals, idx, a, dim, keep);
  if (st) lg_error(L, name);
  indices_to_lua(*idx);
  return 2;
}

static int m_max(lua_State *L) { return extreme(L, "max", 1); }
static int m_min(lua_State *L) { return extreme(L, "min", 0); }

static int m_argmax(lua_State *L) {
  gl_tensor *a = lg_check(L, 1);
  int dim = lg_optdim(L, 2, a->ndim, -1), keep = lua_toboolean(L, 3);
  gl_tensor **box = lg_newbox(L);
  LG_TRY(L, "argmax", gl_argmax(box, a, dim, keep));
  indices_to_lua(*box);
  return 1;
}

static int m_argmin(lua_State *L) {
  gl_tensor *a = lg_check(L, 1);
  int dim = lg_optdim(L, 2, a->ndim, -1), keep = lua_toboolean(L, 3);
  gl_tensor **idx = lg_newbox(L);
  LG_TRY(L, "argmin", gl_min(NULL, idx, a, dim, keep));
  indices_to_lua(*idx);
  return 1;
}

static int m_norm(lua_State *L) {
  gl_tensor *a = lg_check(L, 1);
  gl_tensor **box = lg_newbox(L);
  LG_TRY(L, "norm", gl_norm(box, a));
  return 1;
}

/* ------------------------------------------------------------------------ */
/* matrix products */

static int m_matmul(lua_State *L) {
  gl_tensor *a = lg_check(L, 1), *b = lg_check(L, 2);
  int ta = lua_toboolean(L, 3), tb = lua_toboolean(L, 4);
  gl_tensor **box = lg_newbox(L);
  LG_TRY(L, "matmul", gl_matmul_t(box, a, b, ta, tb));
  return 1;
}

static int l_linear(lua_State *L) {
  gl_tensor *x = lg_check(L, 1), *w = lg_check(L, 2);
  gl_tensor *b = lua_isnoneornil(L, 3) ? NULL : lg_check(L, 3);
  gl_tensor **box = lg_newbox(L);
  LG_TRY(L, "linear", gl_linear(box, x, w, b));
  return 1;
}

/* ------------------------------------------------------------------------ */
/* shape ops */

static int m_reshape(lua_State *L) {
  gl_tensor *a = lg_check(L, 1);
  int shape[GL_MAX_DIMS];
  int nd = lg_checkshape(L, 2, shape);
  gl_tensor **box = lg_newbox(L);
  LG_TRY(L, "reshape", gl_reshape(box, a, nd, shape));
  return 1;
}

static int m_flatten(lua_State *L) {
  gl_tensor *a = lg_check(L, 1);
  int start = lg_optdim(L, 2, a->ndim, 0), end = lg_optdim(L, 3, a->ndim, a->ndim - 1);
  if (a->ndim == 0) { start = 0; end = -1; }
  if (end < start) luaL_error(L, "flatten: end dim %d before start dim %d", end + 1, start + 1);
  int shape[GL_MAX_DIMS], k = 0, prod = 1;
  for (int i = 0; i < a->ndim; i++) {
    if (i < start || i > end) shape[k++] = a->shape[i];
    else {
      prod *= a->shape[i];
      if (i == end) shape[k++] = prod;
    }
  }
  if (a->ndim == 0) shape[k++] = 1;
  gl_tensor **box = lg_newbox(L);
  LG_TRY(L, "flatten", gl_reshape(box, a, k, shape));
  return 1;
}

static int m_transpose(lua_State *L) {
  gl_tensor *a = lg_check(L, 1);
  int d0, d1;
  if (lua_isnoneornil(L, 2) && a->ndim == 2) { d0 = 0; d1 = 1; }
  else { d0 = lg_checkdim(L, 2, a->ndim); d1 = lg_checkdim(L, 3, a->ndim); }
  gl_tensor **box = lg_newbox(L);
  LG_TRY(L, "transpose", gl_transpose(box, a, d0, d1));
  return 1;
}

static int m_t(lua_State *L) {
  gl_tensor *a = lg_check(L, 1);
  if (a->ndim != 2) {
    char b[128];
    luaL_error(L, "t: expects a 2-D tensor, got %s", gl_shape_str(b, sizeof b, a->ndim, a->shape));
  }
  gl_tensor **box = lg_newbox(L);
  LG_TRY(L, "t", gl_transpose(box, a, 0, 1));
  return 1;
}

static int m_permute(lua_State *L) {
  gl_tensor *a = lg_check(L, 1);
  int perm[GL_MAX_DIMS], n = 0;
  if (lua_istable(L, 2)) {
    n = (int)luaL_len(L, 2);
    if (n != a->ndim) luaL_argerror(L, 2, "permutation length differs from the tensor's dims");
    for (int k = 0; k < n; k++) {
      lua_geti(L, 2, k + 1);
      perm[k] = lg_checkdim(L, -1, a->ndim);
      lua_pop(L, 1);
    }
  } else {
    n = lua_gettop(L) - 1;
    if (n != a->ndim)
      luaL_error(L, "permute: %d dims given for a %d-dim tensor", n, a->ndim);
    for (int k = 0; k < n; k++) perm[k] = lg_checkdim(L, k + 2, a->ndim);
  }
  gl_tensor **box = lg_newbox(L);
  LG_TRY(L, "permute", gl_permute(box, a, perm));
  return 1;
}

static int m_unsqueeze(lua_State *L) {
  gl_tensor *a = lg_check(L, 1);
  int d = lg_checkdim(L, 2, a->ndim + 1);
  gl_tensor **box = lg_newbox(L);
  LG_TRY(L, "unsqueeze", gl_unsqueeze(box, a, d));
  return 1;
}

static int m_squeeze(lua_State *L) {
  gl_tensor *a = lg_check(L, 1);
  int d = lg_optdim(L, 2, a->ndim, -1);
  gl_tensor **box = lg_newbox(L);
  LG_TRY(L, "squeeze", gl_squeeze(box, a, d));
  return 1;
}

static int m_narrow(lua_State *L) {
  gl_tensor *a = lg_check(L, 1);
  int d = lg_checkdim(L, 2, a->ndim);
  int start = lg_checkint(L, 3), len = lg_checkint(L, 4);
  gl_tensor **box = lg_newbox(L);
  LG_TRY(L, "narrow", gl_narrow(box, a, d, start - 1, len));
  return 1;
}

static int m_select(lua_State *L) {
  gl_tensor *a = lg_check(L, 1);
  int d = lg_checkdim(L, 2, a->ndim);
  int i = lg_checkint(L, 3);
  if (a->ndim == 0) luaL_error(L, "select: cannot index a 0-dim tensor");
  if (i < 0) i += a->shape[d] + 1;   /* -1 is the last */
  gl_tensor **box = lg_newbox(L);
  LG_TRY(L, "select", gl_select(box, a, d, i - 1));
  return 1;
}

static int m_index_select(lua_State *L) {
  gl_tensor *a = lg_check(L, 1);
  int d = lg_checkdim(L, 2, a->ndim);
  gl_tensor *idx = index_arg(L, 3);
  gl_tensor **box = lg_newbox(L);
  LG_TRY(L, "index_select", gl_index_select(box, a, d, idx));
  return 1;
}

static int m_gather(lua_State *L) {
  gl_tensor *a = lg_check(L, 1);
  int d = lg_checkdim(L, 2, a->ndim);
  gl_tensor *idx = index_arg(L, 3);
  gl_tensor **box = lg_newbox(L);
  LG_TRY(L, "gather", gl_gather(box, a, d, idx));
  return 1;
}

static int m_scatter_add(lua_State *L) {
  gl_tensor *a = lg_check(L, 1);
  int d = lg_checkdim(L, 2, a->ndim);
  gl_tensor *idx = index_arg(L, 3);
  gl_tensor *src = lg_check(L, 4);
  gl_tensor **box = lg_newbox(L);
  LG_TRY(L, "scatter_add", gl_scatter_add(box, a, d, idx, src));
  return 1;
}

static int m_expand(lua_State *L) {
  gl_tensor *a = lg_check(L, 1);
  int shape[GL_MAX_DIMS];
  int nd = lg_checkshape(L, 2, shape);
  /* -1 keeps the size */
  for (int k = 0; k < nd; k++) {
    int j = k - (nd - a->ndim);
    if (shape[k] == -1) shape[k] = j >= 0 ? a->shape[j] : 1;
  }
  gl_tensor **box = lg_newbox(L);
  LG_TRY(L, "expand", gl_expand(box, a, nd, shape));
  return 1;
}

static int m_clone(lua_State *L) {
  gl_tensor *a = lg_check(L, 1);
  gl_tensor **box = lg_newbox(L);
  /* a differentiable copy: reshape to the same shape then materialise through add 0 */
  LG_TRY(L, "clone", gl_add_scalar(box, a, 0.0f));
  return 1;
}

static int embedding(lua_State *L) {
  gl_tensor *w = lg_check(L, 1);
  int pad = lua_isnoneornil(L, 3) ? NO_IGNORE : (int)lg_checkinteger(L, 3, 1, 2147483647) - 1;
  gl_tensor *idx = index_arg(L, 2);
  gl_tensor **box = lg_newbox(L);
  LG_TRY(L, "embedding", gl_embedding(box, w, idx, pad));
  return 1;
}

/* cat({a, b, ...}, dim) and stack({a, b, ...}, dim) */
static int joiner(lua_State *L, const char *name, int stack) {
  lua_settop(L, 2);   /* the dim may be left out: slot 2 stays nil, not the list made below */
  luaL_checktype(L, 1, LUA_TTABLE);
  int n = (int)luaL_len(L, 1);
  if (n < 1) luaL_argerror(L, 1, "a non-empty list of tensors expected");
  gl_tensor **ts = lua_newuserdatauv(L, sizeof(gl_tensor *) * (size_t)n, 0); /* freed by GC */
  int tsi = lua_gettop(L);
  for (int k = 0; k < n; k++) {
    lua_geti(L, 1, k + 1);
    ts[k] = lg_test(L, -1);
    if (!ts[k])
      luaL_error(L, "%s: entry %d of the list is a %s, not a tensor", name, k + 1, luaL_typename(L, -1));
    lua_pop(L, 1);   /* the list keeps it alive */
  }
  int nd = ts[0]->ndim + (stack ? 1 : 0);
  int d = lg_optdim(L, 2, nd, 0);
  gl_tensor **box = lg_newbox(L);
  int st = stack ? gl_stack(box, n, ts, d) : gl_cat(box, n, ts, d);
  if (st) lg_error(L, name);
  lua_remove(L, tsi);
  return 1;
}

static int l_cat(lua_State *L) { return joiner(L, "cat", 0); }
static int l_stack(lua_State *L) { return joiner(L, "stack", 1); }

/* ------------------------------------------------------------------------ */
/* in place, outside the graph */

static int m_fill_(lua_State *L) {
  gl_tensor *a = lg_check(L, 1);
  LG_TRY(L, "fill_", gl_fill_(a, (float)luaL_checknumber(L, 2)));
  lua_settop(L, 1);
  return 1;
}

static int m_zero_(lua_State *L) {
  LG_TRY(L, "zero_", gl_fill_(lg_check(L, 1), 0.0f));
  lua_settop(L, 1);
  return 1;
}

static int m_copy_(lua_State *L) {
  gl_tensor *a = lg_check(L, 1);
  gl_tensor *b = lg_arg(L, 2);
  LG_TRY(L, "copy_", gl_copy_(a, b));
  lua_settop(L, 1);
  return 1;
}

static int m_add_(lua_State *L) {
  gl_tensor *a = lg_check(L, 1);
  gl_tensor *b = lg_arg(L, 2);
  LG_TRY(L, "add_", gl_add_(a, b, (float)luaL_optnumber(L, 3, 1.0)));
  lua_settop(L, 1);
  return 1;
}

static int m_relu_(lua_State *L) {
  LG_TRY(L, "relu_", gl_relu_(lg_check(L, 1)));
  lua_settop(L, 1);
  return 1;
}

static int m_mul_(lua_State *L) {
  LG_TRY(L, "mul_", gl_mul_scalar_(lg_check(L, 1), (float)luaL_checknumber(L, 2)));
  lua_settop(L, 1);
  return 1;
}

static int m_uniform_(lua_State *L) {
  gl_tensor *a = lg_check(L, 1);
  float lo = (float)luaL_optnumber(L, 2, 0), hi = (float)luaL_optnumber(L, 3, 1);
  if (gl_grad_enabled() && a->requires_grad && a->node)
    luaL_error(L, "uniform_: in-place change of a non-leaf tensor");
  LG_TRY(L, "uniform_", gl_uniform_(a, lo, hi));
  lua_settop(L, 1);
  return 1;
}

static int m_normal_(lua_State *L) {
  gl_tensor *a = lg_check(L, 1);
  float mu = (float)luaL_optnumber(L, 2, 0), sd = (float)luaL_optnumber(L, 3, 1);
  if (gl_grad_enabled() && a->requires_grad && a->node)
    luaL_error(L, "normal_: in-place change of a non-leaf tensor");
  LG_TRY(L, "normal_", gl_normal_(a, mu, sd));
  lua_settop(L, 1);
  return 1;
}

static int m_has_nan(lua_State *L) {
  lua_pushboolean(L, gl_has_nonfinite(lg_check(L, 1)));
  return 1;
}

/* ------------------------------------------------------------------------ */
/* softmax, losses, dropout, sampling */

static int l_softmax(lua_State *L) {
  gl_tensor *a = lg_check(L, 1);
  int d = lg_optdim(L, 2, a->ndim, a->ndim - 1);
  gl_tensor *mask = lg_optarg(L, 3);
  gl_tensor **box = lg_newbox(L);
  LG_TRY(L, "softmax", gl_softmax(box, a, d, mask));
  return 1;
}

static int l_log_softmax(lua_State *L) {
  gl_tensor *a = lg_check(L, 1);
  int d = lg_optdim(L, 2, a->ndim, a->ndim - 1);
  gl_tensor **box = lg_newbox(L);
  LG_TRY(L, "log_softmax", gl_log_softmax(box, a, d));
  return 1;
}

/* reduction option of the options table at i ("mean" when absent) */
static int opt_reduction(lua_State *L, int i, const char *name) {
  if (lua_isnoneornil(L, i)) return GL_REDUCE_MEAN;
  if (!lua_istable(L, i))
    luaL_argerror(L, i, lua_pushfstring(L, "options table expected, got %s", luaL_typename(L, i)));
  lua_getfield(L, i, "reduction");
  if (lua_isnil(L, -1)) { lua_pop(L, 1); return GL_REDUCE_MEAN; }
  const char *r = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
  int red = !r ? -1 : !strcmp(r, "mean") ? GL_REDUCE_MEAN : !strcmp(r, "sum") ? GL_REDUCE_SUM
                  : !strcmp(r, "none") ? GL_REDUCE_NONE : -1;
  if (red < 0)
    luaL_error(L, "%s: reduction '%s' is not one of mean, sum, none", name,
               luaL_tolstring(L, -1, NULL));
  lua_pop(L, 1);
  return red;
}

/* ignore_index option (1-based) -> 0-based; NO_IGNORE when absent.  Out of int range is
 * an error, not a wrapped class id. */
static int opt_ignore(lua_State *L, int i, const char *name) {
  lua_Integer v = lg_optfield_integer(L, i, "ignore_index", NO_IGNORE, -2147483647, 2147483647,
                                      name);
  return v == NO_IGNORE ? NO_IGNORE : (int)(v - 1);
}

static int l_cross_entropy(lua_State *L) {
  gl_tensor *x = lg_check(L, 1);
  if (lua_isnoneornil(L, 2)) luaL_argerror(L, 2, "targets expected");
  if (!lua_isnoneornil(L, 3)) luaL_checktype(L, 3, LUA_TTABLE);
  int red = opt_reduction(L, 3, "cross_entropy"), ign = opt_ignore(L, 3, "cross_entropy");
  float eps = (float)lg_optfield_number(L, 3, "label_smoothing", 0, "cross_entropy");
  gl_tensor *t = index_arg(L, 2);
  gl_tensor **box = lg_newbox(L);
  LG_TRY(L, "cross_entropy", gl_cross_entropy(box, x, t, ign, red, eps));
  return 1;
}

static int l_nll_loss(lua_State *L) {
  gl_tensor *x = lg_check(L, 1);
  if (lua_isnoneornil(L, 2)) luaL_argerror(L, 2, "targets expected");
  if (!lua_isnoneornil(L, 3)) luaL_checktype(L, 3, LUA_TTABLE);
  int red = opt_reduction(L, 3, "nll_loss"), ign = opt_ignore(L, 3, "nll_loss");
  gl_tensor *t = index_arg(L, 2);
  gl_tensor **box = lg_newbox(L);
  LG_TRY(L, "nll_loss", gl_nll_loss(box, x, t, ign, red));
  return 1;
}

static int pair_loss(lua_State *L, const char *name, int bce) {
  gl_tensor *a = lg_check(L, 1);
  gl_tensor *b = lg_arg(L, 2);
  int red = opt_reduction(L, 3, name);
  gl_tensor **box = lg_newbox(L);
  if (bce ? gl_bce_loss(box, a, b, red) : gl_mse_loss(box, a, b, red)) lg_error(L, name);
  return 1;
}

static int l_mse_loss(lua_State *L) { return pair_loss(L, "mse_loss", 0); }
static int l_bce_loss(lua_State *L) { return pair_loss(L, "bce_loss", 1); }

static int l_dropout(lua_State *L) {
  gl_tensor *a = lg_check(L, 1);
  float p = (float)luaL_optnumber(L, 2, 0.5);
  int training = lua_isnoneornil(L, 3) ? 1 : lua_toboolean(L, 3);
  gl_tensor **box = lg_newbox(L);
  LG_TRY(L, "dropout", gl_dropout(box, a, p, training));
  return 1;
}

static int l_multinomial(lua_State *L) {
  gl_tensor *p = lg_check(L, 1);
  int n = (int)lg_optinteger(L, 2, 1, 1, 2147483647);
  int repl = lua_toboolean(L, 3);
  gl_tensor **box = lg_newbox(L);
  LG_TRY(L, "multinomial", gl_multinomial(box, p, n, repl));
  indices_to_lua(*box);
  return 1;
}

static int l_bernoulli(lua_State *L) {
  gl_tensor *p = lg_check(L, 1);
  gl_tensor **box = lg_newbox(L);
  LG_TRY(L, "bernoulli", gl_bernoulli(box, p));
  return 1;
}

/* glimpse._beam_candidates(lp (A*K, V), scores {A*K numbers}, K, n) -> cs, ck, cv, counts,
 * positive: decode.beam's ranking step (gl_beam_candidates), the n best candidates of each
 * item as flat lists of n slots per item (score, 1-based beam, 1-based token), the number
 * filled per item, and whether a live beam had a log-probability above 0. */
static int l_beam_candidates(lua_State *L) {
  gl_tensor *lp = lg_check(L, 1);
  luaL_checktype(L, 2, LUA_TTABLE);
  int K = (int)lg_optinteger(L, 3, 1, 1, 1 << 20);
  int n = (int)lg_optinteger(L, 4, 2 * K, 1, 1 << 20);
  if (lp->ndim != 2 || lp->shape[0] % K)
    return luaL_error(L, "_beam_candidates: lp must be (items*%d, vocab)", K);
  int N = lp->shape[0], A = N / K;
  size_t slots = (size_t)A * n;
  double *scores = lua_newuserdatauv(L, sizeof(double) * ((size_t)N + slots) + 1, 0);
  double *cs = scores + N;
  int *ki = lua_newuserdatauv(L, sizeof(int) * (2 * slots + (size_t)A) + 1, 0);
  int *cv = ki + slots, *count = cv + slots;
  for (int r = 0; r < N; r++) {
    lua_rawgeti(L, 2, r + 1);
    int isnum;
    scores[r] = lua_tonumberx(L, -1, &isnum);
    if (!isnum) return luaL_error(L, "_beam_candidates: scores[%d] is not a number", r + 1);
    lua_pop(L, 1);
  }
  int positive = 0;
  LG_TRY(L, "_beam_candidates", gl_beam_candidates(lp, scores, K, n, cs, ki, cv, count, &positive));
  lua_createtable(L, (int)slots, 0);
  lua_createtable(L, (int)slots, 0);
  lua_createtable(L, (int)slots, 0);
  lua_createtable(L, A, 0);
  int t_s = lua_gettop(L) - 3, t_k = t_s + 1, t_v = t_s + 2, t_c = t_s + 3;
  for (int a = 0; a < A; a++) {
    lua_pushinteger(L, count[a]);
    lua_rawseti(L, t_c, a + 1);
    for (int i = 0; i < count[a]; i++) {
      size_t j = (size_t)a * n + i;
      lua_pushnumber(L, cs[j]);
      lua_rawseti(L, t_s, (lua_Integer)j + 1);
      lua_pushinteger(L, ki[j] + 1);
      lua_rawseti(L, t_k, (lua_Integer)j + 1);
      lua_pushinteger(L, cv[j] + 1);
      lua_rawseti(L, t_v, (lua_Integer)j + 1);
    }
  }
  lua_pushboolean(L, positive);
  return 5;
}

/* ------------------------------------------------------------------------ */

static const luaL_Reg methods[] = {
    {"add", m_add}, {"sub", m_sub}, {"mul", m_mul}, {"div", m_div}, {"pow", m_pow},
    {"maximum", m_maximum}, {"minimum", m_minimum},
    {"eq", m_eq}, {"ne", m_ne}, {"lt", m_lt}, {"le", m_le}, {"gt", m_gt}, {"ge", m_ge},
    {"neg", m_neg}, {"exp", m_exp}, {"log", m_log}, {"tanh", m_tanh}, {"sigmoid", m_sigmoid},
    {"relu", m_relu}, {"sqrt", m_sqrt}, {"abs", m_abs}, {"sin", m_sin}, {"cos", m_cos},
    {"softplus", m_softplus}, {"log1p", m_log1p}, {"sign", m_sign}, {"floor", m_floor},
    {"round", m_round}, {"rsqrt", m_rsqrt}, {"gelu", m_gelu},
    {"clamp", m_clamp}, {"leaky_relu", m_leaky_relu},
    {"sum", m_sum}, {"mean", m_mean}, {"logsumexp", m_logsumexp}, {"var", m_var},
    {"cumsum", m_cumsum},
    {"max", m_max}, {"min", m_min}, {"argmax", m_argmax}, {"argmin", m_argmin}, {"norm", m_norm},
    {"matmul", m_matmul}, {"mm", m_matmul}, {"bmm", m_matmul},
    {"reshape", m_reshape}, {"view", m_reshape}, {"flatten", m_flatten},
    {"transpose", m_transpose}, {"t", m_t}, {"permute", m_permute},
    {"unsqueeze", m_unsqueeze}, {"squeeze", m_squeeze}, {"narrow", m_narrow},
    {"select", m_select}, {"index_select", m_index_select}, {"gather", m_gather},
    {"scatter_add", m_scatter_add}, {"expand", m_expand}, {"clone", m_clone},
    {"fill_", m_fill_}, {"zero_", m_zero_}, {"copy_", m_copy_}, {"add_", m_add_},
    {"mul_", m_mul_}, {"relu_", m_relu_}, {"uniform_", m_uniform_}, {"normal_", m_normal_},
    {"has_nan", m_has_nan},
    {"softmax", l_softmax}, {"log_softmax", l_log_softmax},
    {"multinomial", l_multinomial}, {"bernoulli", l_bernoulli},
    {NULL, NULL}};

static const luaL_Reg module_fns[] = {
    {"add", m_add}, {"sub", m_sub}, {"mul", m_mul}, {"div", m_div}, {"pow", m_pow},
    {"maximum", m_maximum}, {"minimum", m_minimum}, {"where", l_where},
    {"exp", m_exp}, {"log", m_log}, {"tanh", m_tanh}, {"sigmoid", m_sigmoid}, {"relu", m_relu},
    {"sqrt", m_sqrt}, {"abs", m_abs}, {"gelu", m_gelu}, {"softplus", m_softplus},
    {"matmul", m_matmul}, {"linear", l_linear}, {"embedding", embedding},
    {"cat", l_cat}, {"stack", l_stack},
    {"softmax", l_softmax}, {"log_softmax", l_log_softmax},
    {"cross_entropy", l_cross_entropy}, {"nll_loss", l_nll_loss},
    {"mse_loss", l_mse_loss}, {"bce_loss", l_bce_loss}, {"dropout", l_dropout},
    {"multinomial", l_multinomial}, {"bernoulli", l_bernoulli},
    {"_beam_candidates", l_beam_candidates},
    {NULL, NULL}};

static const luaL_Reg meta[] = {
    {"__add", m_add}, {"__sub", m_sub}, {"__mul", m_mul}, {"__div", m_div},
    {"__pow", m_pow}, {"__unm", m_neg},
    {NULL, NULL}};

void lg_open_ops(lua_State *L, int module_idx, int methods_idx) {
  lua_pushvalue(L, methods_idx);
  luaL_setfuncs(L, methods, 0);
  lua_pop(L, 1);
  lua_pushvalue(L, module_idx);
  luaL_setfuncs(L, module_fns, 0);
  lua_pop(L, 1);
  luaL_getmetatable(L, LG_TENSOR);
  luaL_setfuncs(L, meta, 0);
  lua_pop(L, 1);
}
