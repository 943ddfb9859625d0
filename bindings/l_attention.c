/* l_attention.c -- bindings of the attention family (engine/ops_attention*.c).
 *
 * The raw fused ops go into the table glimpse._attention; bindings/glimpse/attention.lua
 * wraps them into the documented functional API (glimpse.attention) and the nn modules build
 * on that.  Masks and priors may be tensors or nested tables (lg_optarg: a converted table
 * lives in a Lua box); nil means none.  Two-output ops push both result boxes before the
 * engine runs, so an error leaves nothing unowned.
 */
#include "lglimpse.h"

#include <math.h>
#include <string.h>

/* options table at i: temperature (number > 0), normaliser ("softmax" | "sigmoid") */
static void check_opts(lua_State *L, int i, gl_attn_opts *o) {
  o->temperature = 1.0f;
  o->normaliser = GL_ATTN_SOFTMAX;
  if (lua_isnoneornil(L, i)) return;
  luaL_checktype(L, i, LUA_TTABLE);
  lua_getfield(L, i, "temperature");
  if (!lua_isnil(L, -1)) {
    if (!lua_isnumber(L, -1)) luaL_argerror(L, i, "temperature must be a number");
    o->temperature = (float)lua_tonumber(L, -1);
  }
  lua_pop(L, 1);
  lua_getfield(L, i, "normaliser");
  if (!lua_isnil(L, -1)) {
    const char *s = lua_tostring(L, -1);
    if (s && strcmp(s, "softmax") == 0) o->normaliser = GL_ATTN_SOFTMAX;
    else if (s && strcmp(s, "sigmoid") == 0) o->normaliser = GL_ATTN_SIGMOID;
    else luaL_argerror(L, i, "normaliser must be \"softmax\" or \"sigmoid\"");
  }
  lua_pop(L, 1);
}

/* additive(wq (B,H), uk (B,L,H), v (H), values (B,L,Dv), mask, prior, opts) -> ctx, alpha */
static int l_additive(lua_State *L) {
  gl_tensor *wq = lg_check(L, 1), *uk = lg_check(L, 2), *v = lg_check(L, 3);
  gl_tensor *values = lg_check(L, 4);
  gl_tensor *mask = lg_optarg(L, 5), *prior = lg_optarg(L, 6);
  gl_attn_opts o;
  check_opts(L, 7, &o);
  gl_tensor **ctx = lg_newbox(L), **alpha = lg_newbox(L);
  LG_TRY(L, "attn_additive", gl_attn_additive(ctx, alpha, wq, uk, v, values, mask, prior, &o));
  return 2;
}

/* additive_scores(wq (B,H), uk (B,L,H), v (H)) -> e (B,L) */
static int l_additive_scores(lua_State *L) {
  gl_tensor *wq = lg_check(L, 1), *uk = lg_check(L, 2), *v = lg_check(L, 3);
  gl_tensor **e = lg_newbox(L);
  LG_TRY(L, "attn_additive_scores", gl_attn_additive_scores(e, wq, uk, v));
  return 1;
}

/* dot(q (B,D), keys (B,L,D), values (B,L,Dv), mask, prior, scale, opts) -> ctx, alpha */
static int l_dot(lua_State *L) {
  gl_tensor *q = lg_check(L, 1), *keys = lg_check(L, 2), *values = lg_check(L, 3);
  gl_tensor *mask = lg_optarg(L, 4), *prior = lg_optarg(L, 5);
  float scale = (float)luaL_optnumber(L, 6, 1.0);
  gl_attn_opts o;
  check_opts(L, 7, &o);
  gl_tensor **ctx = lg_newbox(L), **alpha = lg_newbox(L);
  LG_TRY(L, "attn_dot", gl_attn_dot(ctx, alpha, q, keys, values, mask, prior, scale, &o));
  return 2;
}

/* context(scores (B,L), values (B,L,Dv), mask, prior, opts) -> ctx, alpha */
static int l_context(lua_State *L) {
  gl_tensor *e = lg_check(L, 1), *values = lg_check(L, 2);
  gl_tensor *mask = lg_optarg(L, 3), *prior = lg_optarg(L, 4);
  gl_attn_opts o;
  check_opts(L, 5, &o);
  gl_tensor **ctx = lg_newbox(L), **alpha = lg_newbox(L);
  LG_TRY(L, "attn_context", gl_attn_context(ctx, alpha, e, values, mask, prior, &o));
  return 2;
}

/* mh_probs(q (N,Tq,d), k (N,Tk,d), mask (B,Tk) or nil, heads, causal, scale) -> (N,Tq,Tk) */
static int l_mh_probs(lua_State *L) {
  gl_tensor *q = lg_check(L, 1), *k = lg_check(L, 2);
  gl_tensor *mask = lg_optarg(L, 3);
  int heads = lg_checkint(L, 4);
  int causal = lua_toboolean(L, 5);
  float scale = (float)luaL_checknumber(L, 6);
  gl_tensor **p = lg_newbox(L);
  LG_TRY(L, "attn_mh_probs", gl_attn_mh_probs(p, q, k, mask, heads, causal, scale));
  return 1;
}

/* mh_packed(qkv (B,T,3d), mask (B,T) or nil, heads, causal, scale, want_probs)
 *   -> ctx (B,T,d), probs (B,heads,T,T) or nil (when want_probs is false) */
static int l_mh_packed(lua_State *L) {
  gl_tensor *qkv = lg_check(L, 1);
  gl_tensor *mask = lg_optarg(L, 2);
  int heads = lg_checkint(L, 3);
  int causal = lua_toboolean(L, 4);
  float scale = (float)luaL_checknumber(L, 5);
  int want = lua_toboolean(L, 6);
  gl_tensor **ctx = lg_newbox(L);
  gl_tensor **probs = want ? lg_newbox(L) : NULL;
  LG_TRY(L, "attn_mh_packed", gl_attn_mh_packed(ctx, probs, qkv, mask, heads, causal, scale));
  if (!want) lua_pushnil(L);
  return 2;
}

/* kv_copy(dst, at, src, from, n): rows [from, from+n) of src's (..., R, d) blocks into rows
 * [at, at+n) of dst's, in place (0-based) -> nothing */
static int l_kv_copy(lua_State *L) {
  gl_tensor *dst = lg_check(L, 1);
  int at = lg_checkint(L, 2);
  gl_tensor *src = lg_check(L, 3);
  int from = lg_checkint(L, 4), n = lg_checkint(L, 5);
  LG_TRY(L, "kv_copy_rows", gl_kv_copy_rows(dst, at, src, from, n));
  return 0;
}

/* mh_cached(q (N,Tq,d), k (N,cap,d), v (N,cap,d), len, mask (B,len) or nil, heads, off, scale)
 *   -> ctx (N,Tq,d), probs (N,Tq,len); off < 0: every valid key visible, else key j to query
 *   i iff j <= off + i */
static int l_mh_cached(lua_State *L) {
  gl_tensor *q = lg_check(L, 1), *k = lg_check(L, 2), *v = lg_check(L, 3);
  int len = lg_checkint(L, 4);
  gl_tensor *mask = lg_optarg(L, 5);
  int heads = lg_checkint(L, 6), off = lg_checkint(L, 7);
  float scale = (float)luaL_checknumber(L, 8);
  gl_tensor **ctx = lg_newbox(L), **probs = lg_newbox(L);
  LG_TRY(L, "attn_mh_cached", gl_attn_mh_cached(ctx, probs, q, k, v, len, mask, heads, off,
                                                scale));
  return 2;
}

/* cosine(k (B,D), mem (B,N,D), beta (B) or nil) -> (B,N) */
static int l_cosine(lua_State *L) {
  gl_tensor *k = lg_check(L, 1), *mem = lg_check(L, 2), *beta = lg_optarg(L, 3);
  gl_tensor **e = lg_newbox(L);
  LG_TRY(L, "attn_cosine", gl_attn_cosine(e, k, mem, beta));
  return 1;
}

/* circular_shift(w (B,N), s (B,S)) -> (B,N) */
static int l_circular_shift(lua_State *L) {
  gl_tensor *w = lg_check(L, 1), *s = lg_check(L, 2);
  gl_tensor **out = lg_newbox(L);
  LG_TRY(L, "attn_circular_shift", gl_attn_circular_shift(out, w, s));
  return 1;
}

/* sharpen(w (B,N), gamma (B)) -> (B,N) */
static int l_sharpen(lua_State *L) {
  gl_tensor *w = lg_check(L, 1), *gamma = lg_check(L, 2);
  gl_tensor **out = lg_newbox(L);
  LG_TRY(L, "attn_sharpen", gl_attn_sharpen(out, w, gamma));
  return 1;
}

static const luaL_Reg attention_fns[] = {
    {"additive", l_additive},   {"additive_scores", l_additive_scores},
    {"dot", l_dot},             {"context", l_context},
    {"mh_probs", l_mh_probs},   {"mh_packed", l_mh_packed},
    {"kv_copy", l_kv_copy},     {"mh_cached", l_mh_cached},
    {"cosine", l_cosine},
    {"circular_shift", l_circular_shift}, {"sharpen", l_sharpen},
    {NULL, NULL}};

void lg_open_attention(lua_State *L, int module_idx, int methods_idx) {
  (void)methods_idx;
  luaL_newlib(L, attention_fns);
  lua_setfield(L, module_idx, "_attention");
}
