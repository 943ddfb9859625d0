/* l_rnn.c -- bindings of the recurrent family (engine/ops_rnn.c): the fused LSTM, GRU and
 * Elman RNN steps (cells) and whole-sequence runs.  The nn modules in glimpse/nn/rnn.lua are
 * built on these; they are also usable directly:
 *
 *   h, c = glimpse.lstm_cell(xp, h, c, w_hh, b_hh, mask)
 *   h    = glimpse.gru_cell(xp, h, w_hh, b_hh, mask)
 *   h    = glimpse.rnn_cell(xp, h, w_hh, b_hh, mask, "tanh"|"relu")
 *   y, h, c = glimpse.lstm_seq(xp, h0, c0, w_hh, b_hh, mask, reverse)
 *   y, h    = glimpse.gru_seq(xp, h0, w_hh, b_hh, mask, reverse)
 *   y, h    = glimpse.rnn_seq(xp, h0, w_hh, b_hh, mask, reverse, "tanh"|"relu")
 *
 * xp is the input projection x W_ih^T + b_ih: (B,G) for a cell, (B,T,G) for a sequence.
 * h, c, b_hh and mask may be nil (zeros / no bias / every row active).
 */
#include "lglimpse.h"

#include <string.h>

/* A tensor or nil at stack i (states and weights must be tensors). */
static gl_tensor *opt_tensor(lua_State *L, int i) {
  return lua_isnoneornil(L, i) ? NULL : lg_check(L, i);
}

static int opt_relu(lua_State *L, int i) {
  static const char *const names[] = {"tanh", "relu", NULL};
  return luaL_checkoption(L, i, "tanh", names);
}

/* ------------------------------------------------------------------------ */
/* cells */

static int l_lstm_cell(lua_State *L) {
  gl_tensor *xp = lg_check(L, 1), *h = opt_tensor(L, 2), *c = opt_tensor(L, 3);
  gl_tensor *w = lg_check(L, 4), *b = opt_tensor(L, 5), *m = lg_optarg(L, 6);
  gl_tensor **hb = lg_newbox(L), **cb = lg_newbox(L);
  LG_TRY(L, "lstm_cell", gl_lstm_cell(hb, cb, xp, h, c, w, b, m));
  return 2;
}

static int l_gru_cell(lua_State *L) {
  gl_tensor *xp = lg_check(L, 1), *h = opt_tensor(L, 2), *w = lg_check(L, 3);
  gl_tensor *b = opt_tensor(L, 4), *m = lg_optarg(L, 5);
  gl_tensor **hb = lg_newbox(L);
  LG_TRY(L, "gru_cell", gl_gru_cell(hb, xp, h, w, b, m));
  return 1;
}

static int l_rnn_cell(lua_State *L) {
  gl_tensor *xp = lg_check(L, 1), *h = opt_tensor(L, 2), *w = lg_check(L, 3);
  gl_tensor *b = opt_tensor(L, 4), *m = lg_optarg(L, 5);
  int relu = opt_relu(L, 6);
  gl_tensor **hb = lg_newbox(L);
  LG_TRY(L, "rnn_cell", gl_rnn_cell(hb, xp, h, w, b, m, relu));
  return 1;
}

/* ------------------------------------------------------------------------ */
/* sequences */

static int l_lstm_seq(lua_State *L) {
  gl_tensor *xp = lg_check(L, 1), *h = opt_tensor(L, 2), *c = opt_tensor(L, 3);
  gl_tensor *w = lg_check(L, 4), *b = opt_tensor(L, 5), *m = lg_optarg(L, 6);
  int reverse = lua_toboolean(L, 7);
  gl_tensor **yb = lg_newbox(L), **hb = lg_newbox(L), **cb = lg_newbox(L);
  LG_TRY(L, "lstm_seq", gl_lstm_seq(yb, hb, cb, xp, h, c, w, b, m, reverse));
  return 3;
}

static int l_gru_seq(lua_State *L) {
  gl_tensor *xp = lg_check(L, 1), *h = opt_tensor(L, 2), *w = lg_check(L, 3);
  gl_tensor *b = opt_tensor(L, 4), *m = lg_optarg(L, 5);
  int reverse = lua_toboolean(L, 6);
  gl_tensor **yb = lg_newbox(L), **hb = lg_newbox(L);
  LG_TRY(L, "gru_seq", gl_gru_seq(yb, hb, xp, h, w, b, m, reverse));
  return 2;
}

static int l_rnn_seq(lua_State *L) {
  gl_tensor *xp = lg_check(L, 1), *h = opt_tensor(L, 2), *w = lg_check(L, 3);
  gl_tensor *b = opt_tensor(L, 4), *m = lg_optarg(L, 5);
  int reverse = lua_toboolean(L, 6);
  int relu = opt_relu(L, 7);
  gl_tensor **yb = lg_newbox(L), **hb = lg_newbox(L);
  LG_TRY(L, "rnn_seq", gl_rnn_seq(yb, hb, xp, h, w, b, m, reverse, relu));
  return 2;
}

/* ------------------------------------------------------------------------ */

static const luaL_Reg module_fns[] = {
    {"lstm_cell", l_lstm_cell}, {"gru_cell", l_gru_cell}, {"rnn_cell", l_rnn_cell},
    {"lstm_seq", l_lstm_seq},   {"gru_seq", l_gru_seq},   {"rnn_seq", l_rnn_seq},
    {NULL, NULL}};

void lg_open_rnn(lua_State *L, int module_idx, int methods_idx) {
  (void)methods_idx;
  lua_pushvalue(L, module_idx);
  luaL_setfuncs(L, module_fns, 0);
  lua_pop(L, 1);
}
