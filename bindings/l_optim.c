/* l_optim.c -- bindings of the optimizer family (engine/optim.c): the fused updates and
 * gradient clipping.
 *
 * These are hidden module fields (glimpse._adam_update ...) with positional arguments;
 * bindings/glimpse/optim.lua wraps them in optimizer classes with option tables, param
 * groups, lazily created state and state_dict.  Optional buffers are passed as nil.
 */
#include "lglimpse.h"

/* An optional tensor: nil -> NULL. */
static gl_tensor *opt_tensor(lua_State *L, int i) {
  return lua_isnoneornil(L, i) ? NULL : lg_check(L, i);
}

/* A step count (>= 1) that fits int64. */
static int64_t check_step(lua_State *L, int i) {
  lua_Integer s = luaL_checkinteger(L, i);
  if (s < 1) luaL_argerror(L, i, "step must be >= 1");
  return (int64_t)s;
}

/* _sgd_update(p, g, buf|nil, first, lr, momentum, dampening, weight_decay, nesterov, maximize) */
static int l_sgd_update(lua_State *L) {
  gl_tensor *p = lg_check(L, 1), *g = lg_check(L, 2), *buf = opt_tensor(L, 3);
  int first = lua_toboolean(L, 4);
  double lr = luaL_checknumber(L, 5), mom = luaL_checknumber(L, 6);
  double damp = luaL_checknumber(L, 7), wd = luaL_checknumber(L, 8);
  LG_TRY(L, "sgd", gl_sgd_update(p, g, buf, first, lr, mom, damp, wd, lua_toboolean(L, 9),
                                 lua_toboolean(L, 10)));
  return 0;
}

/* _adam_update(p, g, exp_avg, exp_avg_sq, max_exp_avg_sq|nil, step, lr, beta1, beta2, eps,
 *              weight_decay, decoupled, maximize) */
static int l_adam_update(lua_State *L) {
  gl_tensor *p = lg_check(L, 1), *g = lg_check(L, 2);
  gl_tensor *m = lg_check(L, 3), *v = lg_check(L, 4), *vmax = opt_tensor(L, 5);
  int64_t step = check_step(L, 6);
  double lr = luaL_checknumber(L, 7), b1 = luaL_checknumber(L, 8);
  double b2 = luaL_checknumber(L, 9), eps = luaL_checknumber(L, 10);
  double wd = luaL_checknumber(L, 11);
  int decoupled = lua_toboolean(L, 12);
  LG_TRY(L, decoupled ? "adamw" : "adam",
         gl_adam_update(p, g, m, v, vmax, step, lr, b1, b2, eps, wd, decoupled,
                        lua_toboolean(L, 13)));
  return 0;
}

/* _rmsprop_update(p, g, square_avg, grad_avg|nil, buf|nil, lr, alpha, eps, weight_decay,
 *                 momentum, maximize) */
static int l_rmsprop_update(lua_State *L) {
  gl_tensor *p = lg_check(L, 1), *g = lg_check(L, 2), *s = lg_check(L, 3);
  gl_tensor *ga = opt_tensor(L, 4), *buf = opt_tensor(L, 5);
  double lr = luaL_checknumber(L, 6), alpha = luaL_checknumber(L, 7);
  double eps = luaL_checknumber(L, 8), wd = luaL_checknumber(L, 9);
  double mom = luaL_checknumber(L, 10);
  LG_TRY(L, "rmsprop", gl_rmsprop_update(p, g, s, ga, buf, lr, alpha, eps, wd, mom,
                                         lua_toboolean(L, 11)));
  return 0;
}

/* _adadelta_update(p, g, square_avg, acc_delta, lr, rho, eps, weight_decay, maximize) */
static int l_adadelta_update(lua_State *L) {
  gl_tensor *p = lg_check(L, 1), *g = lg_check(L, 2);
  gl_tensor *s = lg_check(L, 3), *u = lg_check(L, 4);
  double lr = luaL_checknumber(L, 5), rho = luaL_checknumber(L, 6);
  double eps = luaL_checknumber(L, 7), wd = luaL_checknumber(L, 8);
  LG_TRY(L, "adadelta", gl_adadelta_update(p, g, s, u, lr, rho, eps, wd, lua_toboolean(L, 9)));
  return 0;
}

/* _adagrad_update(p, g, sum, step, lr, lr_decay, eps, weight_decay, maximize) */
static int l_adagrad_update(lua_State *L) {
  gl_tensor *p = lg_check(L, 1), *g = lg_check(L, 2), *s = lg_check(L, 3);
  int64_t step = check_step(L, 4);
  double lr = luaL_checknumber(L, 5), decay = luaL_checknumber(L, 6);
  double eps = luaL_checknumber(L, 7), wd = luaL_checknumber(L, 8);
  LG_TRY(L, "adagrad", gl_adagrad_update(p, g, s, step, lr, decay, eps, wd,
                                         lua_toboolean(L, 9)));
  return 0;
}

/* ------------------------------------------------------------------------ */
/* clipping: the first argument is an array of gradient tensors */

/* The tensors of the array at stack i, in a scratch userdata pushed on the stack (so an error
 * frees it); the array keeps the tensors alive while the engine runs. */
static gl_tensor **tensor_array(lua_State *L, int i, const char *fname, int *n) {
  luaL_checktype(L, i, LUA_TTABLE);
  lua_Integer len = luaL_len(L, i);
  if (len > 1000000) luaL_error(L, "%s: %d tensors is too many", fname, (int)len);
  gl_tensor **ts = lua_newuserdatauv(L, sizeof(gl_tensor *) * (size_t)(len ? len : 1), 0);
  for (lua_Integer k = 1; k <= len; k++) {
    lua_geti(L, i, k);
    ts[k - 1] = lg_test(L, -1);
    if (!ts[k - 1])
      luaL_error(L, "%s: entry %d of the gradient list is a %s, expected a tensor", fname,
                 (int)k, luaL_typename(L, -1));
    lua_pop(L, 1);
  }
  *n = (int)len;
  return ts;
}

/* _clip_grad_norm(grads, max_norm, norm_type) -> total norm before clipping */
static int l_clip_grad_norm(lua_State *L) {
  double max_norm = luaL_checknumber(L, 2), norm_type = luaL_optnumber(L, 3, 2.0);
  int n;
  gl_tensor **ts = tensor_array(L, 1, "clip_grad_norm", &n);
  double total;
  LG_TRY(L, "clip_grad_norm", gl_clip_grad_norm(&total, n, ts, max_norm, norm_type));
  lua_pushnumber(L, total);
  return 1;
}

/* _grads_norm(grads, norm_type) -> joint norm */
static int l_grads_norm(lua_State *L) {
  double norm_type = luaL_optnumber(L, 2, 2.0);
  int n;
  gl_tensor **ts = tensor_array(L, 1, "grads_norm", &n);
  double total;
  LG_TRY(L, "grads_norm", gl_grads_norm(&total, n, ts, norm_type));
  lua_pushnumber(L, total);
  return 1;
}

/* _clip_grad_value(grads, clip) */
static int l_clip_grad_value(lua_State *L) {
  double clip = luaL_checknumber(L, 2);
  int n;
  gl_tensor **ts = tensor_array(L, 1, "clip_grad_value", &n);
  LG_TRY(L, "clip_grad_value", gl_clip_grad_value(n, ts, clip));
  return 0;
}

static const luaL_Reg optim_fns[] = {
    {"_sgd_update", l_sgd_update},         {"_adam_update", l_adam_update},
    {"_rmsprop_update", l_rmsprop_update}, {"_adadelta_update", l_adadelta_update},
    {"_adagrad_update", l_adagrad_update}, {"_clip_grad_norm", l_clip_grad_norm},
    {"_grads_norm", l_grads_norm},         {"_clip_grad_value", l_clip_grad_value},
    {NULL, NULL}};

void lg_open_optim(lua_State *L, int module_idx, int methods_idx) {
  (void)methods_idx;
  lua_pushvalue(L, module_idx);
  luaL_setfuncs(L, optim_fns, 0);
  lua_pop(L, 1);
}
