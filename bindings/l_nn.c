/* l_nn.c -- bindings of the nn family: convolution, pooling and normalisation ops that the
 * Lua modules in bindings/glimpse/nn/ are built on.
 *
 *   glimpse.conv2d(x, w, b, {stride=1, padding=0})      x (B,C,H,W), w (O,C,kh,kw), b (O)/nil
 *   glimpse.max_pool2d(x, k, stride=k, padding=0)       k, stride, padding: n or {h, w}
 *   glimpse.avg_pool2d(x, k, stride=k, padding=0)
 *   glimpse.layer_norm(x, w, b, eps=1e-5)               over the last dim; w, b (D)/nil
 *   glimpse.batch_norm2d(x, w, b, running_mean, running_var, training=true, momentum=0.1,
 *                        eps=1e-5)                      x (B,C,...); every vector (C)/nil
 *   glimpse.batch_norm_eval_(x, w, b, running_mean, running_var, eps=1e-5, relu=false)
 *                                                       the same in evaluation, in place
 *                                                       (no tape), with the ReLU fused -> x
 *   glimpse._conv2d_naive(...)                          conv2d's direct-loop oracle, for tests
 *   glimpse._winograd_tile(m)                           Winograd's tile: 2, 4, 0 (by size), -1 (off)
 */
#include "lglimpse.h"

/* A size pair at stack index i: an integer n (-> n, n) or a table {h, w}; nil gives def. */
static void pair_at(lua_State *L, int i, const char *fname, const char *what, int def, int *h,
                    int *w) {
  if (lua_isnoneornil(L, i)) {
    *h = *w = def;
    return;
  }
  if (lua_isinteger(L, i)) {
    lua_Integer v = lua_tointeger(L, i);
    if (v < 0 || v > 65535) luaL_error(L, "%s: %s %d out of range", fname, what, (int)v);
    *h = *w = (int)v;
    return;
  }
  if (lua_istable(L, i) && luaL_len(L, i) == 2) {
    int v[2];
    for (int k = 0; k < 2; k++) {
      lua_geti(L, i, k + 1);
      int isint;
      lua_Integer x = lua_tointegerx(L, -1, &isint);
      if (!isint || x < 0 || x > 65535)
        luaL_error(L, "%s: %s must be an integer or {h, w} of integers, got entry %s", fname,
                   what, luaL_tolstring(L, -1, NULL));
      v[k] = (int)x;
      lua_pop(L, 1);
    }
    *h = v[0];
    *w = v[1];
    return;
  }
  luaL_error(L, "%s: %s must be an integer or {h, w}, got %s", fname, what, luaL_typename(L, i));
}

/* A field of the options table at stack index opts (absent table: the default). */
static void pair_field(lua_State *L, int opts, const char *field, const char *fname, int def,
                       int *h, int *w) {
  if (!lua_istable(L, opts)) {
    *h = *w = def;
    return;
  }
  lua_getfield(L, opts, field);
  pair_at(L, lua_gettop(L), fname, field, def, h, w);
  lua_pop(L, 1);
}

/* An optional tensor (nil allowed) at stack index i. */
static gl_tensor *opt_tensor(lua_State *L, int i) {
  return lua_isnoneornil(L, i) ? NULL : lg_check(L, i);
}

typedef int (*conv_fn)(gl_tensor **, gl_tensor *, gl_tensor *, gl_tensor *, int, int, int, int);

static int conv_common(lua_State *L, const char *fname, conv_fn f) {
  gl_tensor *x = lg_check(L, 1), *w = lg_check(L, 2), *b = opt_tensor(L, 3);
  if (!lua_isnoneornil(L, 4)) luaL_checktype(L, 4, LUA_TTABLE);
  int sh, sw, ph, pw;
  pair_field(L, 4, "stride", fname, 1, &sh, &sw);
  pair_field(L, 4, "padding", fname, 0, &ph, &pw);
  gl_tensor **box = lg_newbox(L);
  LG_TRY(L, fname, f(box, x, w, b, sh, sw, ph, pw));
  return 1;
}

static int l_conv2d(lua_State *L) { return conv_common(L, "conv2d", gl_conv2d); }
static int l_conv2d_naive(lua_State *L) { return conv_common(L, "conv2d_naive", gl_conv2d_naive); }

typedef int (*pool_fn)(gl_tensor **, gl_tensor *, int, int, int, int, int, int);

static int pool_common(lua_State *L, const char *fname, pool_fn f) {
  gl_tensor *x = lg_check(L, 1);
  if (lua_isnoneornil(L, 2)) luaL_argerror(L, 2, "kernel size expected");
  int kh, kw, sh, sw, ph, pw;
  pair_at(L, 2, fname, "kernel size", 0, &kh, &kw);
  pair_at(L, 3, fname, "stride", -1, &sh, &sw);
  if (sh < 0) { sh = kh; sw = kw; }
  pair_at(L, 4, fname, "padding", 0, &ph, &pw);
  gl_tensor **box = lg_newbox(L);
  LG_TRY(L, fname, f(box, x, kh, kw, sh, sw, ph, pw));
  return 1;
}

static int l_max_pool2d(lua_State *L) { return pool_common(L, "max_pool2d", gl_max_pool2d); }
static int l_avg_pool2d(lua_State *L) { return pool_common(L, "avg_pool2d", gl_avg_pool2d); }

static int l_layer_norm(lua_State *L) {
  gl_tensor *x = lg_check(L, 1), *w = opt_tensor(L, 2), *b = opt_tensor(L, 3);
  float eps = (float)luaL_optnumber(L, 4, 1e-5);
  gl_tensor **box = lg_newbox(L);
  LG_TRY(L, "layer_norm", gl_layer_norm(box, x, w, b, eps));
  return 1;
}

static int l_batch_norm(lua_State *L) {
  gl_tensor *x = lg_check(L, 1), *w = opt_tensor(L, 2), *b = opt_tensor(L, 3);
  gl_tensor *rm = opt_tensor(L, 4), *rv = opt_tensor(L, 5);
  int training = lua_isnoneornil(L, 6) ? 1 : lua_toboolean(L, 6);
  float momentum = (float)luaL_optnumber(L, 7, 0.1);
  float eps = (float)luaL_optnumber(L, 8, 1e-5);
  gl_tensor **box = lg_newbox(L);
  LG_TRY(L, "batch_norm2d", gl_batch_norm(box, x, w, b, rm, rv, training, momentum, eps));
  return 1;
}

static int l_batch_norm_eval_(lua_State *L) {
  gl_tensor *x = lg_check(L, 1), *w = opt_tensor(L, 2), *b = opt_tensor(L, 3);
  gl_tensor *rm = lg_check(L, 4), *rv = lg_check(L, 5);
  float eps = (float)luaL_optnumber(L, 6, 1e-5);
  int relu = lua_toboolean(L, 7);
  LG_TRY(L, "batch_norm_eval_", gl_batch_norm_eval_(x, w, b, rm, rv, eps, relu));
  lua_settop(L, 1);
  return 1;
}

/* _winograd_tile(m): Winograd's output tile for 3x3 stride-1 convolutions, 2, 4 or 0 (by
 * size; the default), or -1 (no Winograd: im2col) -> the previous setting (tests and
 * measurements force one) */
static int l_winograd_tile(lua_State *L) {
  lua_Integer m = luaL_checkinteger(L, 1);
  if (m != -1 && m != 0 && m != 2 && m != 4)
    return luaL_error(L, "_winograd_tile: tile must be 0 (by size), 2, 4 or -1 (off), got %d",
                      (int)m);
  lua_pushinteger(L, gl_conv_winograd_tile((int)m));
  return 1;
}

static const luaL_Reg nn_fns[] = {
    {"conv2d", l_conv2d},         {"_conv2d_naive", l_conv2d_naive},
    {"_winograd_tile", l_winograd_tile},
    {"max_pool2d", l_max_pool2d}, {"avg_pool2d", l_avg_pool2d},
    {"layer_norm", l_layer_norm}, {"batch_norm2d", l_batch_norm},
    {"batch_norm", l_batch_norm}, {"batch_norm_eval_", l_batch_norm_eval_},
    {NULL, NULL}};

static const luaL_Reg nn_methods[] = {
    {"conv2d", l_conv2d},         {"max_pool2d", l_max_pool2d},
    {"avg_pool2d", l_avg_pool2d}, {"layer_norm", l_layer_norm},
    {NULL, NULL}};

void lg_open_nn(lua_State *L, int module_idx, int methods_idx) {
  lua_pushvalue(L, module_idx);
  luaL_setfuncs(L, nn_fns, 0);
  lua_pop(L, 1);
  lua_pushvalue(L, methods_idx);
  luaL_setfuncs(L, nn_methods, 0);
  lua_pop(L, 1);
}
