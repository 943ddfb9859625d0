/* lglimpse.h -- private glue shared by the binding files (not a public header).
 *
 * The bindings are split by family (lglimpse.c: the tensor userdata and core ops,
 * l_*.c: one family each).  Each family file exports one lg_open_<family>() that adds its
 * functions to the module table and its methods to the tensor methods table.
 */
#ifndef LGLIMPSE_H
#define LGLIMPSE_H

#include <lauxlib.h>
#include <lua.h>

#include "glimpse.h"

#define LG_TENSOR "glimpse.Tensor"

/* The tensor at stack index i, or a Lua argument error naming the function. */
gl_tensor *lg_check(lua_State *L, int i);
/* The tensor at i, or NULL when the value is not a tensor. */
gl_tensor *lg_test(lua_State *L, int i);
/* ---- temporaries: the one rule of the bindings ----
 * Every tensor a binding makes or converts lives in a Lua-owned box on the stack for the
 * whole call, so an error raised at any point (a bad argument, an engine failure, a memory
 * error) releases everything through the box's __gc.  A binding never holds a gl_tensor
 * reference of its own across a call that can raise: arguments come through lg_arg /
 * lg_optarg, results and scratch tensors go into lg_newbox boxes pushed before the engine
 * fills them. */

/* The tensor for argument i, borrowed (no release): a tensor is returned as it is; a number
 * (a 0-dim tensor) or a nested table is converted into a new box that REPLACES argument i
 * on the stack, so Lua owns it for the rest of the call.  Other values raise
 * "bad argument #i to 'fn' (tensor, number or table expected, got ...)". */
gl_tensor *lg_arg(lua_State *L, int i);
/* lg_arg, or NULL when argument i is none or nil. */
gl_tensor *lg_optarg(lua_State *L, int i);
/* Push an empty tensor box; the engine fills *box.  Push it BEFORE calling the engine so
 * the result (or a scratch tensor) is owned by Lua the moment it exists. */
gl_tensor **lg_newbox(lua_State *L);
/* Push t as a new Lua tensor, taking over the caller's reference. */
void lg_push(lua_State *L, gl_tensor *t);
/* Raise the engine's last error as a Lua error "fname: message". */
int lg_error(lua_State *L, const char *fname);
/* Check an engine status: on failure raise the engine's message. */
#define LG_TRY(L, fname, call)                 \
  do {                                         \
    if ((call) != GL_OK) lg_error(L, (fname)); \
  } while (0)

/* A 1-based (negative: from the end) dim at stack i for a tensor of `ndim` dims -> 0-based. */
int lg_checkdim(lua_State *L, int i, int ndim);
/* Same, with a default (0-based) when the argument is absent or nil. */
int lg_optdim(lua_State *L, int i, int ndim, int def);
/* A shape from varargs of integers starting at stack i, or from a table at i.
 * Returns ndim; fills shape[GL_MAX_DIMS]. */
int lg_checkshape(lua_State *L, int i, int *shape);
/* ---- integers from Lua: every int a binding reads goes through one of these ----
 * A Lua integer, or a float with an integral value, inside [lo, hi]; anything else (a
 * fraction, NaN, 2^32 + 1 for an int, a string) raises an argument error naming the
 * argument and the range.  No silent truncation. */
lua_Integer lg_checkinteger(lua_State *L, int i, lua_Integer lo, lua_Integer hi);
/* lg_checkinteger when present, def when none or nil. */
lua_Integer lg_optinteger(lua_State *L, int i, lua_Integer def, lua_Integer lo, lua_Integer hi);
/* An integer argument that must fit an int (errors name the argument). */
int lg_checkint(lua_State *L, int i);
/* Field `key` of the options table at stack t (t may be none/nil: def): an integer in
 * [lo, hi].  Errors read "fname: option 'key' must be an integer in [lo, hi], got v". */
lua_Integer lg_optfield_integer(lua_State *L, int t, const char *key, lua_Integer def,
                                lua_Integer lo, lua_Integer hi, const char *fname);
/* A number field of the options table at t (def when absent); errors name fname and key. */
double lg_optfield_number(lua_State *L, int t, const char *key, double def, const char *fname);
/* Bytes newly allocated by the engine are reported to Lua's GC (see lglimpse.c). */
void lg_account(lua_State *L);

/* family registration: fns go into the table at module_idx, methods into methods_idx */
void lg_open_ops(lua_State *L, int module_idx, int methods_idx);      /* l_ops.c */
void lg_open_io(lua_State *L, int module_idx, int methods_idx);       /* l_io.c */
void lg_open_image(lua_State *L, int module_idx, int methods_idx);    /* l_image.c */
void lg_open_nn(lua_State *L, int module_idx, int methods_idx);       /* l_nn.c */
void lg_open_attention(lua_State *L, int module_idx, int methods_idx);/* l_attention.c */
void lg_open_data(lua_State *L, int module_idx, int methods_idx);     /* l_data.c */
void lg_open_rnn(lua_State *L, int module_idx, int methods_idx);      /* l_rnn.c */
void lg_open_optim(lua_State *L, int module_idx, int methods_idx);    /* l_optim.c */
void lg_open_dist(lua_State *L, int module_idx, int methods_idx);     /* l_dist.c */
void lg_open_profile(lua_State *L, int module_idx, int methods_idx);  /* l_profile.c */

#endif
