/* lglimpse.c -- luaopen_glimpse_core (the C module "glimpse.core", which the Lua library's
 * glimpse/init.lua extends into require "glimpse"): the tensor userdata, creation, facts, printing, autograd.
 *
 * A Lua tensor is a full userdata holding one gl_tensor reference (a "box").  The box is
 * pushed before the engine computes into it, so a result is owned by Lua from the moment it
 * exists and an error never leaks it.  The op families live in l_*.c and register themselves
 * through lg_open_<family>().  1-based Lua indices and dims become 0-based here and in those
 * files, nowhere else.
 */
#include "lglimpse.h"
#include "blas_profile.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* the box */

gl_tensor **lg_newbox(lua_State *L) {
  lg_account(L);
  gl_tensor **box = lua_newuserdatauv(L, sizeof(gl_tensor *), 0);
  *box = NULL;
  luaL_setmetatable(L, LG_TENSOR);
  return box;
}

void lg_push(lua_State *L, gl_tensor *t) {
  gl_tensor **box = lg_newbox(L);
  *box = t;
}

gl_tensor *lg_test(lua_State *L, int i) {
  gl_tensor **box = luaL_testudata(L, i, LG_TENSOR);
  return box ? *box : NULL;
}

gl_tensor *lg_check(lua_State *L, int i) {
  gl_tensor **box = luaL_testudata(L, i, LG_TENSOR);
  if (!box) {
    const char *got = luaL_typename(L, i);
    luaL_argerror(L, i, lua_pushfstring(L, "tensor expected, got %s", got));
  }
  if (!*box) luaL_argerror(L, i, "tensor was closed");
  return *box;
}

int lg_error(lua_State *L, const char *fname) {
  const char *msg = gl_last_error();
  /* engine messages already start with the op's name; add the Lua name when it differs */
  size_t n = strlen(fname);
  if (strncmp(msg, fname, n) == 0 && msg[n] == ':') return luaL_error(L, "%s", msg);
  return luaL_error(L, "%s: %s", fname, msg);
}

lua_Integer lg_checkinteger(lua_State *L, int i, lua_Integer lo, lua_Integer hi) {
  int isnum = 0;
  lua_Integer v = lua_tointegerx(L, i, &isnum);
  if (!isnum) {
    if (lua_type(L, i) == LUA_TNUMBER)
      luaL_argerror(L, i, lua_pushfstring(L, "integer expected, got %f", lua_tonumber(L, i)));
    luaL_argerror(L, i, lua_pushfstring(L, "integer expected, got %s", luaL_typename(L, i)));
  }
  if (v < lo || v > hi)
    luaL_argerror(L, i, lua_pushfstring(L, "integer %I out of range [%I, %I]", (LUAI_UACINT)v,
                                        (LUAI_UACINT)lo, (LUAI_UACINT)hi));
  return v;
}

lua_Integer lg_optinteger(lua_State *L, int i, lua_Integer def, lua_Integer lo, lua_Integer hi) {
  return lua_isnoneornil(L, i) ? def : lg_checkinteger(L, i, lo, hi);
}

int lg_checkint(lua_State *L, int i) {
  return (int)lg_checkinteger(L, i, -2147483647, 2147483647);
}

lua_Integer lg_optfield_integer(lua_State *L, int t, const char *key, lua_Integer def,
                                lua_Integer lo, lua_Integer hi, const char *fname) {
  if (!lua_istable(L, t)) return def;
  lua_getfield(L, t, key);
  if (lua_isnil(L, -1)) { lua_pop(L, 1); return def; }
  int isnum = 0;
  lua_Integer v = lua_tointegerx(L, -1, &isnum);
  if (!isnum || v < lo || v > hi)
    luaL_error(L, "%s: option '%s' must be an integer in [%I, %I], got %s", fname, key,
               (LUAI_UACINT)lo, (LUAI_UACINT)hi, luaL_tolstring(L, -1, NULL));
  lua_pop(L, 1);
  return v;
}

double lg_optfield_number(lua_State *L, int t, const char *key, double def, const char *fname) {
  if (!lua_istable(L, t)) return def;
  lua_getfield(L, t, key);
  if (lua_isnil(L, -1)) { lua_pop(L, 1); return def; }
  int isnum = 0;
  lua_Number v = lua_tonumberx(L, -1, &isnum);
  if (!isnum)
    luaL_error(L, "%s: option '%s' must be a number, got %s", fname, key, luaL_typename(L, -1));
  lua_pop(L, 1);
  return v;
}

int lg_checkdim(lua_State *L, int i, int ndim) {
  int d = lg_checkint(L, i);
  int lo = ndim > 0 ? -ndim : -1, hi = ndim > 0 ? ndim : 1;
  if (d == 0 || d < lo || d > hi)
    luaL_argerror(L, i, lua_pushfstring(L, "dim %d out of range for a %d-dim tensor "
                                           "(expected %d..%d, not 0)", d, ndim, lo, hi));
  return d > 0 ? d - 1 : d + (ndim > 0 ? ndim : 1);
}

int lg_optdim(lua_State *L, int i, int ndim, int def) {
  return lua_isnoneornil(L, i) ? def : lg_checkdim(L, i, ndim);
}

int lg_checkshape(lua_State *L, int i, int *shape) {
  int ndim = 0;
  if (lua_istable(L, i)) {
    lua_Integer n = luaL_len(L, i);
    if (n > GL_MAX_DIMS)
      luaL_argerror(L, i, lua_pushfstring(L, "%d dims (at most %d)", (int)n, GL_MAX_DIMS));
    for (lua_Integer k = 1; k <= n; k++) {
      lua_geti(L, i, k);
      int isnum;
      lua_Integer v = lua_tointegerx(L, -1, &isnum);
      if (!isnum || v < -1 || v > 2147483647)
        luaL_argerror(L, i, lua_pushfstring(L, "shape entry %d is not a size (got %s)", (int)k,
                                            luaL_tolstring(L, -1, NULL)));
      shape[ndim++] = (int)v;
      lua_pop(L, 1);
    }
    return ndim;
  }
  int top = lua_gettop(L);
  for (int k = i; k <= top; k++) {
    if (lua_isnil(L, k)) break;
    if (ndim == GL_MAX_DIMS)
      luaL_argerror(L, k, lua_pushfstring(L, "too many dims (at most %d)", GL_MAX_DIMS));
    int isnum;
    lua_Integer v = lua_tointegerx(L, k, &isnum);
    if (!isnum)
      luaL_argerror(L, k, lua_pushfstring(L, "size expected, got %s", luaL_typename(L, k)));
    if (v < -1 || v > 2147483647)
      luaL_argerror(L, k, lua_pushfstring(L, "size %I out of range", (LUAI_UACINT)v));
    shape[ndim++] = (int)v;
  }
  return ndim;
}

/* Tensor bytes live in C where Lua's collector cannot see them: a handle is a few bytes
 * to Lua however large its tensor.  So the collector is driven by tensor allocation: once the
 * engine has handed out GC_STEP_BYTES, or half the bytes live now if that is more, since the
 * previous step, that much counts as Lua allocation (an incremental step of that size, which
 * here completes a cycle), and a full collection runs if the engine ever holds far more than
 * it did after the previous one.  Dead tensors' bytes go back to the cache promptly and a
 * training loop keeps a flat resident size (at most about half as much again as it holds).
 * Why the half: every cycle marks the whole Lua heap and runs the finalizers of the dead
 * handles; with a fixed 1 MB step a training step of W1 (~100 MB of activations and
 * gradients) ran about 45 cycles, 2.2 ms of its ~48 ms, against 3 cycles and 0.7 ms now. */
#define GC_STEP_BYTES ((size_t)1 << 20)
static size_t gc_baseline, gc_handed;

void lg_account(lua_State *L) {
  size_t handed = gl_bytes_handed_out();
  size_t live = gl_bytes_live();
  size_t step = live / 2 > GC_STEP_BYTES ? live / 2 : GC_STEP_BYTES;
  if (handed - gc_handed >= step) {
    lua_gc(L, LUA_GCSTEP, (int)((handed - gc_handed) >> 10));
    gc_handed = handed;
    live = gl_bytes_live();
  }
  if (live > 2 * gc_baseline + ((size_t)256 << 20)) {
    lua_gc(L, LUA_GCCOLLECT);
    gc_baseline = gl_bytes_live();
  }
}

/* ------------------------------------------------------------------------ */
/* tables <-> tensors */

/* Errors name the function being called and its argument `arg` (the table's position). */
static void table_shape(lua_State *L, int arg, int i, int depth, int *ndim, int *shape) {
  if (depth >= GL_MAX_DIMS)
    luaL_argerror(L, arg, lua_pushfstring(L, "table nested deeper than %d", GL_MAX_DIMS));
  lua_Integer n = luaL_len(L, i);
  if (n > 2147483647) luaL_argerror(L, arg, "table too long");
  shape[depth] = (int)n;
  *ndim = depth + 1;
  if (n == 0) return;
  lua_geti(L, i, 1);
  if (lua_istable(L, -1)) table_shape(L, arg, lua_gettop(L), depth + 1, ndim, shape);
  lua_pop(L, 1);
}

static void table_fill(lua_State *L, int arg, int i, int depth, int ndim, const int *shape,
                       float **p) {
  lua_Integer n = luaL_len(L, i);
  if (n != shape[depth])
    luaL_argerror(L, arg, lua_pushfstring(L, "ragged table: a row at depth %d has %d entries, "
                                             "expected %d", depth + 1, (int)n, shape[depth]));
  for (lua_Integer k = 1; k <= n; k++) {
    lua_geti(L, i, k);
    if (depth + 1 < ndim) {
      if (!lua_istable(L, -1))
        luaL_argerror(L, arg, lua_pushfstring(L, "ragged table: expected a table at depth %d, "
                                                 "got %s", depth + 2, luaL_typename(L, -1)));
      table_fill(L, arg, lua_gettop(L), depth + 1, ndim, shape, p);
    } else {
      int isnum;
      lua_Number v = lua_tonumberx(L, -1, &isnum);
      if (!isnum) {
        if (lua_isboolean(L, -1)) v = lua_toboolean(L, -1);
        else luaL_argerror(L, arg, lua_pushfstring(L, "expected a number at depth %d, got %s",
                                                   depth + 1, luaL_typename(L, -1)));
      }
      *(*p)++ = (float)v;
    }
    lua_pop(L, 1);
  }
}

/* Push a new box holding argument i converted to a tensor (number or nested table). */
static gl_tensor *push_converted(lua_State *L, int i) {
  i = lua_absindex(L, i);
  if (lua_type(L, i) == LUA_TNUMBER) {
    float v = (float)lua_tonumber(L, i);
    gl_tensor **box = lg_newbox(L);
    LG_TRY(L, "tensor", gl_from_data(box, 0, NULL, &v));
    return *box;
  }
  if (luaL_testudata(L, i, LG_TENSOR)) luaL_argerror(L, i, "tensor was closed");
  if (!lua_istable(L, i))
    luaL_argerror(L, i, lua_pushfstring(L, "tensor, number or table expected, got %s",
                                        luaL_typename(L, i)));
  int ndim = 0, shape[GL_MAX_DIMS];
  table_shape(L, i, i, 0, &ndim, shape);
  gl_tensor **box = lg_newbox(L);
  LG_TRY(L, "tensor", gl_empty(box, ndim, shape));
  float *p = (*box)->data;
  table_fill(L, i, i, 0, ndim, shape, &p);
  return *box;
}

gl_tensor *lg_arg(lua_State *L, int i) {
  i = lua_absindex(L, i);
  gl_tensor *t = lg_test(L, i);
  if (t) return t;
  t = push_converted(L, i);
  lua_replace(L, i);
  return t;
}

gl_tensor *lg_optarg(lua_State *L, int i) {
  return lua_isnoneornil(L, i) ? NULL : lg_arg(L, i);
}

static void push_table(lua_State *L, const gl_tensor *t, int depth, size_t *off) {
  if (t->ndim == 0) { lua_pushnumber(L, t->data[0]); return; }
  int n = t->shape[depth];
  lua_createtable(L, n, 0);
  for (int k = 0; k < n; k++) {
    if (depth + 1 == t->ndim) lua_pushnumber(L, t->data[(*off)++]);
    else push_table(L, t, depth + 1, off);
    lua_seti(L, -2, k + 1);
  }
}

/* ------------------------------------------------------------------------ */
/* creation */

static int l_tensor(lua_State *L) {
  if (lua_gettop(L) < 1) luaL_argerror(L, 1, "table, number or tensor expected");
  gl_tensor *src = lg_test(L, 1);
  if (src) {
    gl_tensor **box = lg_newbox(L);
    LG_TRY(L, "tensor", gl_clone(box, src));
    return 1;
  }
  lg_arg(L, 1);        /* the converted tensor's box replaces argument 1 */
  lua_settop(L, 1);
  return 1;
}

typedef int (*shape_ctor)(gl_tensor **, int, const int *);

static int make_from_shape(lua_State *L, const char *name, shape_ctor f) {
  int shape[GL_MAX_DIMS];
  int ndim = lg_checkshape(L, 1, shape);
  for (int k = 0; k < ndim; k++)
    if (shape[k] < 0)
      luaL_error(L, "%s: size %d of dim %d is negative", name, shape[k], k + 1);
  gl_tensor **box = lg_newbox(L);
  if (f(box, ndim, shape)) lg_error(L, name);
  return 1;
}

static int l_zeros(lua_State *L) { return make_from_shape(L, "zeros", gl_zeros); }
static int l_empty(lua_State *L) { return make_from_shape(L, "empty", gl_empty); }
static int l_rand(lua_State *L) { return make_from_shape(L, "rand", gl_rand); }
static int l_randn(lua_State *L) { return make_from_shape(L, "randn", gl_randn); }
static int ones_ctor(gl_tensor **o, int n, const int *s) { return gl_full(o, n, s, 1.0f); }
static int l_ones(lua_State *L) { return make_from_shape(L, "ones", ones_ctor); }

static int l_full(lua_State *L) {
  int shape[GL_MAX_DIMS];
  luaL_checktype(L, 1, LUA_TTABLE);
  float v = (float)luaL_checknumber(L, 2);
  int ndim = lg_checkshape(L, 1, shape);
  for (int k = 0; k < ndim; k++)
    if (shape[k] < 0) luaL_error(L, "full: size %d of dim %d is negative", shape[k], k + 1);
  gl_tensor **box = lg_newbox(L);
  LG_TRY(L, "full", gl_full(box, ndim, shape, v));
  return 1;
}

/* arange(n) -> 1..n ; arange(a, b) -> a..b inclusive ; arange(a, b, step) */
static int l_arange(lua_State *L) {
  double a = 1, b, step = 1;
  if (lua_isnoneornil(L, 2)) b = luaL_checknumber(L, 1);
  else {
    a = luaL_checknumber(L, 1);
    b = luaL_checknumber(L, 2);
    step = luaL_optnumber(L, 3, 1);
  }
  if (step == 0) luaL_argerror(L, 3, "step must not be 0");
  gl_tensor **box = lg_newbox(L);
  /* inclusive end, like Lua's numeric for */
  LG_TRY(L, "arange", gl_arange(box, (float)a, (float)(b + step * 0.5), (float)step));
  return 1;
}

static int l_manual_seed(lua_State *L) {
  lua_Integer s = luaL_checkinteger(L, 1);
  gl_manual_seed((uint64_t)s);
  return 0;
}

static int l_rng_state(lua_State *L) {
  uint64_t s[2];
  gl_rng_state_get(s);
  lua_pushinteger(L, (lua_Integer)s[0]);
  lua_pushinteger(L, (lua_Integer)s[1]);
  return 2;
}

static int l_set_rng_state(lua_State *L) {
  uint64_t s[2] = {(uint64_t)luaL_checkinteger(L, 1), (uint64_t)luaL_checkinteger(L, 2)};
  gl_rng_state_set(s);
  return 0;
}

static int l_is_tensor(lua_State *L) {
  lua_pushboolean(L, lg_test(L, 1) != NULL);
  return 1;
}

/* ------------------------------------------------------------------------ */
/* facts */

static void push_shape(lua_State *L, const gl_tensor *t) {
  lua_createtable(L, t->ndim, 0);
  for (int k = 0; k < t->ndim; k++) {
    lua_pushinteger(L, t->shape[k]);
    lua_seti(L, -2, k + 1);
  }
}

static int m_dim(lua_State *L) { lua_pushinteger(L, lg_check(L, 1)->ndim); return 1; }
static int m_numel(lua_State *L) { lua_pushinteger(L, (lua_Integer)lg_check(L, 1)->numel); return 1; }

static int m_size(lua_State *L) {
  gl_tensor *t = lg_check(L, 1);
  if (lua_isnoneornil(L, 2)) { push_shape(L, t); return 1; }
  int d = lg_checkdim(L, 2, t->ndim);
  lua_pushinteger(L, t->ndim ? t->shape[d] : 1);
  return 1;
}

static int m_item(lua_State *L) {
  gl_tensor *t = lg_check(L, 1);
  if (t->numel != 1) {
    char b[128];
    luaL_error(L, "item: tensor of shape %s has %d elements, expected exactly 1",
               gl_shape_str(b, sizeof b, t->ndim, t->shape), (int)t->numel);
  }
  lua_pushnumber(L, t->data[0]);
  return 1;
}

static int m_totable(lua_State *L) {
  gl_tensor *t = lg_check(L, 1);
  size_t off = 0;
  luaL_checkstack(L, t->ndim + 4, "totable");
  push_table(L, t, 0, &off);
  return 1;
}

static int m_len(lua_State *L) {
  gl_tensor *t = lg_check(L, 1);
  lua_pushinteger(L, t->ndim ? t->shape[0] : 1);
  return 1;
}

/* ------------------------------------------------------------------------ */
/* printing, in the manner of Torch7: a common format per tensor, 2-D slices for higher
 * dims, large dims truncated with "...", and a footer with the size */

#define PRINT_EDGE 3          /* entries kept at each end of a truncated dim */
#define PRINT_LIMIT 1000      /* tensors above this many elements are truncated */

typedef struct { int ints; int sci; int width; int prec; } numfmt;

static numfmt choose_format(const gl_tensor *t) {
  numfmt f = {1, 0, 1, 4};
  float amax = 0, amin = INFINITY;
  for (size_t i = 0; i < t->numel; i++) {
    float v = t->data[i];
    if (!isfinite(v)) continue;
    if (v != floorf(v)) f.ints = 0;
    float a = fabsf(v);
    if (a > amax) amax = a;
    if (a > 0 && a < amin) amin = a;
  }
  if (f.ints && amax < 1e9f) {
    f.width = snprintf(NULL, 0, "%.0f", (double)amax) + 1;
  } else if (amax >= 1e5f || (amin < 1e-4f && amax < 1e-3f && amax > 0)) {
    f.ints = 0;
    f.sci = 1;
    f.width = 11;
  } else {
    f.ints = 0;
    f.width = snprintf(NULL, 0, "%.4f", (double)amax) + 1;
  }
  if (f.width < 3) f.width = 3;
  return f;
}

static void fmt_num(luaL_Buffer *b, const numfmt *f, float v) {
  char s[64];
  if (isnan(v)) snprintf(s, sizeof s, "%*s", f->width + 1, "nan");
  else if (isinf(v)) snprintf(s, sizeof s, "%*s", f->width + 1, v > 0 ? "inf" : "-inf");
  else if (f->ints) snprintf(s, sizeof s, "%*.0f", f->width + 1, (double)v);
  else if (f->sci) snprintf(s, sizeof s, "%*.4e", f->width + 1, (double)v);
  else snprintf(s, sizeof s, "%*.*f", f->width + 1, f->prec, (double)v);
  luaL_addstring(b, s);
}

/* the indices of dim `n` to show */
static int shown(int n, int trunc, int *idx) {
  int k = 0;
  if (!trunc || n <= 2 * PRINT_EDGE) {
    for (int i = 0; i < n; i++) idx[k++] = i;
  } else {
    for (int i = 0; i < PRINT_EDGE; i++) idx[k++] = i;
    idx[k++] = -1;
    for (int i = n - PRINT_EDGE; i < n; i++) idx[k++] = i;
  }
  return k;
}

static void print_matrix(luaL_Buffer *b, const float *d, int rows, int cols, const numfmt *f,
                         int trunc) {
  int ri[2 * PRINT_EDGE + 1], ci[2 * PRINT_EDGE + 1];
  int *rix = rows <= 2 * PRINT_EDGE + 1 || !trunc ? NULL : ri;
  int *cix = cols <= 2 * PRINT_EDGE + 1 || !trunc ? NULL : ci;
  int nr = rix ? shown(rows, 1, rix) : rows, nc = cix ? shown(cols, 1, cix) : cols;
  for (int r = 0; r < nr; r++) {
    int rr = rix ? rix[r] : r;
    if (rr < 0) { luaL_addstring(b, " ...\n"); continue; }
    for (int c = 0; c < nc; c++) {
      int cc = cix ? cix[c] : c;
      if (cc < 0) luaL_addstring(b, "  ...");
      else fmt_num(b, f, d[(size_t)rr * cols + cc]);
    }
    luaL_addchar(b, '\n');
  }
}

static void print_slices(luaL_Buffer *b, const gl_tensor *t, int depth, size_t off, int *pos,
                         const numfmt *f, int trunc) {
  if (t->ndim - depth == 2 && depth + 1 < GL_MAX_DIMS) {
    char s[128];
    int k = snprintf(s, sizeof s, "(");
    for (int i = 0; i < depth; i++) k += snprintf(s + k, sizeof s - k, "%d,", pos[i] + 1);
    snprintf(s + k, sizeof s - k, ".,.) =\n");
    luaL_addstring(b, s);
    print_matrix(b, t->data + off, t->shape[depth], t->shape[depth + 1], f, trunc);
    luaL_addchar(b, '\n');
    return;
  }
  size_t inner = 1;
  for (int i = depth + 1; i < t->ndim; i++) inner *= (size_t)t->shape[i];
  int idx[2 * PRINT_EDGE + 1];
  int n = t->shape[depth];
  int k = n > 2 * PRINT_EDGE + 1 && trunc ? shown(n, 1, idx) : n;
  for (int i = 0; i < k; i++) {
    int ii = (n > 2 * PRINT_EDGE + 1 && trunc) ? idx[i] : i;
    if (ii < 0) { luaL_addstring(b, "...\n\n"); continue; }
    pos[depth] = ii;
    print_slices(b, t, depth + 1, off + (size_t)ii * inner, pos, f, trunc);
  }
}

static int m_tostring(lua_State *L) {
  gl_tensor **box = luaL_checkudata(L, 1, LG_TENSOR);
  if (!*box) { lua_pushliteral(L, "[glimpse.Tensor (closed)]"); return 1; }
  gl_tensor *t = *box;
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  numfmt f = choose_format(t);
  int trunc = t->numel > PRINT_LIMIT;
  if (t->numel == 0) {
    luaL_addstring(&b, "[glimpse.Tensor with no elements of size ");
  } else if (t->ndim == 0) {
    fmt_num(&b, &f, t->data[0]);
    luaL_addstring(&b, "\n[glimpse.Tensor of size ");
  } else {
    if (t->ndim == 1) print_matrix(&b, t->data, t->shape[0], 1, &f, trunc);
    else if (t->ndim == 2) print_matrix(&b, t->data, t->shape[0], t->shape[1], &f, trunc);
    else {
      int pos[GL_MAX_DIMS];
      print_slices(&b, t, 0, 0, pos, &f, trunc);
    }
    luaL_addstring(&b, "[glimpse.Tensor of size ");
  }
  char s[32];
  if (t->ndim == 0) luaL_addstring(&b, "()");
  for (int i = 0; i < t->ndim; i++) {
    snprintf(s, sizeof s, i ? "x%d" : "%d", t->shape[i]);
    luaL_addstring(&b, s);
  }
  luaL_addstring(&b, t->requires_grad ? ", requires grad]" : "]");
  luaL_pushresult(&b);
  return 1;
}

/* ------------------------------------------------------------------------ */
/* lifetime */

static int m_gc(lua_State *L) {
  gl_tensor **box = luaL_checkudata(L, 1, LG_TENSOR);
  gl_release(*box);
  *box = NULL;
  return 0;
}

/* ------------------------------------------------------------------------ */
/* autograd */

static int m_requires_grad(lua_State *L) {
  gl_tensor *t = lg_check(L, 1);
  int on = lua_isnoneornil(L, 2) ? 1 : lua_toboolean(L, 2);
  LG_TRY(L, "requires_grad", gl_requires_grad_(t, on));
  lua_settop(L, 1);
  return 1;
}

static int m_backward(lua_State *L) {
  gl_tensor *t = lg_check(L, 1);
  gl_tensor *seed = lua_isnoneornil(L, 2) ? NULL : lg_check(L, 2);
  int retain = 0;
  if (lua_istable(L, 3)) {
    lua_getfield(L, 3, "retain_graph");
    retain = lua_toboolean(L, -1);
    lua_pop(L, 1);
  } else if (lua_isboolean(L, 3)) {
    retain = lua_toboolean(L, 3);
  }
  lg_account(L);
  LG_TRY(L, "backward", gl_backward(t, seed, retain));
  return 0;
}

static int m_zero_grad(lua_State *L) {
  gl_zero_grad(lg_check(L, 1));
  return 0;
}

static int m_detach(lua_State *L) {
  gl_tensor *t = lg_check(L, 1);
  gl_tensor **box = lg_newbox(L);
  LG_TRY(L, "detach", gl_detach(box, t));
  return 1;
}

static int m_is_leaf(lua_State *L) {
  lua_pushboolean(L, lg_check(L, 1)->node == NULL);
  return 1;
}

static int l_no_grad(lua_State *L) {
  luaL_checktype(L, 1, LUA_TFUNCTION);
  int prev = gl_set_grad_enabled(0);
  lua_pushvalue(L, 1);
  lua_insert(L, 2);
  int st = lua_pcall(L, lua_gettop(L) - 2, LUA_MULTRET, 0);
  gl_set_grad_enabled(prev);
  if (st != LUA_OK) return lua_error(L);
  return lua_gettop(L) - 1;
}

/* glimpse._fault(kind, nth): the nth next "node" allocation, "save" or "grad" buffer
 * allocation of the tape fails as if out of memory (nth 0: off).  For the tests. */
static int l_fault(lua_State *L) {
  static const char *const kinds[] = {"node", "save", "grad", NULL};
  int what = luaL_checkoption(L, 1, NULL, kinds);
  gl_fault_inject(what, (int)lg_checkinteger(L, 2, 0, 1000000));
  return 0;
}

static int l_set_grad_enabled(lua_State *L) {
  lua_pushboolean(L, gl_set_grad_enabled(lua_toboolean(L, 1)));
  return 1;
}

static int l_is_grad_enabled(lua_State *L) {
  lua_pushboolean(L, gl_grad_enabled());
  return 1;
}

/* ------------------------------------------------------------------------ */
/* memory and BLAS facts */

static int l_memory(lua_State *L) {
  lua_createtable(L, 0, 3);
  lua_pushinteger(L, (lua_Integer)gl_bytes_live());
  lua_setfield(L, -2, "live");
  lua_pushinteger(L, (lua_Integer)gl_bytes_cached());
  lua_setfield(L, -2, "cached");
  lua_pushinteger(L, (lua_Integer)gl_wino_cache_bytes());
  lua_setfield(L, -2, "winograd_weights");
  return 1;
}

static int l_empty_cache(lua_State *L) {
  (void)L;
  gl_wino_cache_clear();    /* conv2d's kept Winograd weights go back to the cache first */
  gl_empty_cache();
  return 0;
}

static int l_blas_info(lua_State *L) {
  LG_TRY(L, "blas_info", gl_blas_init());
  lua_createtable(L, 0, 3);
  lua_pushstring(L, gl_blas_core());
  lua_setfield(L, -2, "core");
  lua_pushinteger(L, gl_blas_threads());
  lua_setfield(L, -2, "threads");
  lua_pushstring(L, gl_blas_config());
  lua_setfield(L, -2, "config");
  lua_pushstring(L, gl_blas_note());
  lua_setfield(L, -2, "note");
  return 1;
}

/* glimpse.blas_profile([on]) -> {enabled, calls, seconds, flops}: with a boolean, first turns
 * the BLAS wrapper's counters on (zeroing them) or off; then reads them (engine/blas.c) */
static int l_blas_profile(lua_State *L) {
  if (!lua_isnoneornil(L, 1)) {
    if (!lua_isboolean(L, 1))
      return luaL_error(L, "blas_profile: argument #1 (on) must be a boolean or nil, got %s",
                        luaL_typename(L, 1));
    gl_blas_profile_enable(lua_toboolean(L, 1));
  }
  gl_blas_profile_t p = gl_blas_profile_read();
  lua_createtable(L, 0, 4);
  lua_pushboolean(L, gl_blas_profile_enabled());
  lua_setfield(L, -2, "enabled");
  lua_pushinteger(L, (lua_Integer)p.calls);
  lua_setfield(L, -2, "calls");
  lua_pushnumber(L, p.seconds);
  lua_setfield(L, -2, "seconds");
  lua_pushnumber(L, p.flops);
  lua_setfield(L, -2, "flops");
  return 1;
}

/* wall-clock seconds from a monotonic clock, for timing and progress lines */
static int l_clock(lua_State *L) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  lua_pushnumber(L, (lua_Number)ts.tv_sec + (lua_Number)ts.tv_nsec * 1e-9);
  return 1;
}

/* glimpse._isatty(fd): whether a file descriptor (1 stdout, 2 stderr) is a terminal, so
 * glimpse.progress redraws one line there and prints plain periodic lines into pipes and logs */
static int l_isatty(lua_State *L) {
  lua_Integer fd = luaL_checkinteger(L, 1);
  lua_pushboolean(L, fd >= 0 && fd <= 1024 && isatty((int)fd));
  return 1;
}

static int l_set_num_threads(lua_State *L) {
  int n = lg_checkint(L, 1);
  if (n < 1) luaL_argerror(L, 1, "thread count must be >= 1");
  LG_TRY(L, "set_num_threads", gl_blas_init());
  gl_set_threads(n);   /* the engine's loops and OpenBLAS alike */
  return 0;
}

static int l_get_num_threads(lua_State *L) {
  LG_TRY(L, "get_num_threads", gl_blas_init());
  lua_pushinteger(L, gl_threads());
  return 1;
}

/* ------------------------------------------------------------------------ */
/* __index: methods, then fields (shape, grad, requires_grad...), then integer select */

static int m_index(lua_State *L) {
  gl_tensor *t = lg_check(L, 1);
  if (lua_type(L, 2) == LUA_TSTRING) {
    lua_pushvalue(L, 2);
    if (lua_rawget(L, lua_upvalueindex(1)) != LUA_TNIL) return 1;
    lua_pop(L, 1);
    const char *k = lua_tostring(L, 2);
    if (!strcmp(k, "shape")) { push_shape(L, t); return 1; }
    if (!strcmp(k, "grad")) {
      if (!t->grad) return 0;
      gl_retain(t->grad);
      lg_push(L, t->grad);
      return 1;
    }
    if (!strcmp(k, "requires_grad_flag") || !strcmp(k, "is_requires_grad")) {
      lua_pushboolean(L, t->requires_grad);
      return 1;
    }
    if (!strcmp(k, "ndim")) { lua_pushinteger(L, t->ndim); return 1; }
    return 0;
  }
  if (lua_isinteger(L, 2)) {
    /* x[i] selects along dim 1 */
    lua_getfield(L, lua_upvalueindex(1), "select");
    lua_pushvalue(L, 1);
    lua_pushinteger(L, 1);
    lua_pushvalue(L, 2);
    lua_call(L, 3, 1);
    return 1;
  }
  return luaL_error(L, "index: a tensor is indexed by an integer or a method name, got %s",
                    luaL_typename(L, 2));
}

/* x[i] = v copies v (tensor or number) into the i-th slice along dim 1; x.grad = nil drops
 * the gradient. */
static int m_newindex(lua_State *L) {
  gl_tensor *t = lg_check(L, 1);
  if (lua_type(L, 2) == LUA_TSTRING) {
    const char *k = lua_tostring(L, 2);
    if (!strcmp(k, "grad")) {
      if (lua_isnil(L, 3)) { gl_release(t->grad); t->grad = NULL; return 0; }
      gl_tensor *g = lg_check(L, 3);
      if (!gl_same_shape(g, t)) {
        char b1[128], b2[128];
        luaL_error(L, "grad: a gradient of shape %s for a tensor of shape %s",
                   gl_shape_str(b1, sizeof b1, g->ndim, g->shape),
                   gl_shape_str(b2, sizeof b2, t->ndim, t->shape));
      }
      /* .grad keeps a new header over g's storage, outside any graph: holding g itself
       * would make a reference cycle when g is t (x.grad = x), has a .grad of its own or
       * was computed from t, and refcounts never free a cycle */
      gl_tensor *a = gl_alias(g);
      if (!a) luaL_error(L, "grad: out of memory");
      gl_release(t->grad);
      t->grad = a;
      return 0;
    }
    return luaL_error(L, "newindex: cannot set field '%s' of a tensor", k);
  }
  lua_getfield(L, lua_upvalueindex(1), "select");
  lua_pushvalue(L, 1);
  lua_pushinteger(L, 1);
  lua_pushvalue(L, 2);
  lua_call(L, 3, 1);
  gl_tensor *dst = lg_check(L, -1);
  if (lua_type(L, 3) == LUA_TNUMBER) {
    LG_TRY(L, "newindex", gl_fill_(dst, (float)lua_tonumber(L, 3)));
  } else {
    gl_tensor *src = lg_arg(L, 3);
    LG_TRY(L, "newindex", gl_copy_(dst, src));
  }
  return 0;
}

/* ------------------------------------------------------------------------ */

static const luaL_Reg module_fns[] = {
    {"tensor", l_tensor},     {"zeros", l_zeros},
    {"ones", l_ones},         {"empty", l_empty},
    {"full", l_full},         {"arange", l_arange},
    {"rand", l_rand},         {"randn", l_randn},
    {"manual_seed", l_manual_seed}, {"rng_state", l_rng_state},
    {"set_rng_state", l_set_rng_state}, {"is_tensor", l_is_tensor},
    {"no_grad", l_no_grad},   {"set_grad_enabled", l_set_grad_enabled},
    {"is_grad_enabled", l_is_grad_enabled},
    {"memory", l_memory},     {"empty_cache", l_empty_cache},
    {"blas_info", l_blas_info}, {"blas_profile", l_blas_profile},
    {"set_num_threads", l_set_num_threads},
    {"get_num_threads", l_get_num_threads}, {"clock", l_clock},
    {"_isatty", l_isatty},    {"_fault", l_fault},
    {NULL, NULL}};

static const luaL_Reg methods[] = {
    {"dim", m_dim},           {"numel", m_numel},
    {"size", m_size},         {"item", m_item},
    {"totable", m_totable},   {"requires_grad", m_requires_grad},
    {"backward", m_backward}, {"zero_grad", m_zero_grad},
    {"detach", m_detach},     {"is_leaf", m_is_leaf},
    {"close", m_gc},
    {NULL, NULL}};

static const luaL_Reg meta[] = {
    {"__gc", m_gc},       {"__close", m_gc},   {"__len", m_len},
    {"__tostring", m_tostring},
    {NULL, NULL}};

int luaopen_glimpse_core(lua_State *L) {
  luaL_newmetatable(L, LG_TENSOR);           /* 1: metatable */
  int mt = lua_gettop(L);
  luaL_setfuncs(L, meta, 0);
  lua_newtable(L);                           /* methods */
  int mi = lua_gettop(L);
  luaL_setfuncs(L, methods, 0);
  lua_newtable(L);                           /* module */
  int mod = lua_gettop(L);
  luaL_setfuncs(L, module_fns, 0);
  lua_pushliteral(L, "0.1.0");
  lua_setfield(L, mod, "version");

  lg_open_ops(L, mod, mi);
  lg_open_io(L, mod, mi);
  lg_open_image(L, mod, mi);
  lg_open_nn(L, mod, mi);
  lg_open_attention(L, mod, mi);
  lg_open_data(L, mod, mi);
  lg_open_rnn(L, mod, mi);
  lg_open_optim(L, mod, mi);
  lg_open_dist(L, mod, mi);
  lg_open_profile(L, mod, mi);

  lua_pushvalue(L, mi);
  lua_setfield(L, mt, "__methods");          /* for the REPL's completion */
  lua_pushvalue(L, mi);
  lua_pushcclosure(L, m_index, 1);
  lua_setfield(L, mt, "__index");
  lua_pushvalue(L, mi);
  lua_pushcclosure(L, m_newindex, 1);
  lua_setfield(L, mt, "__newindex");
  lua_pushliteral(L, "glimpse.Tensor");
  lua_setfield(L, mt, "__name");

  lua_pushvalue(L, mi);
  lua_setfield(L, mod, "Tensor");            /* glimpse.Tensor: the methods table */
  lua_pushvalue(L, mod);
  return 1;
}
