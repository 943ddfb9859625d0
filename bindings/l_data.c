/* l_data.c -- bindings of the data family: gzip and IDX files (engine/io_gz.c), and two small
 * helpers that move flat Lua arrays in and out of a tensor's storage.
 *
 * These are hidden module fields (glimpse._read_idx ...); bindings/glimpse/data.lua wraps
 * them with option tables and documentation.  The dataset generators build images in Lua and
 * write each one into a preallocated tensor with _data_set, so a thousand scenes never pass
 * through one giant nested table.  Positions are 1-based flat element indices here and
 * 0-based offsets in the engine.
 */
#include "lglimpse.h"

#include <stdlib.h>

#define LG_BYTES "glimpse.bytes"
/* read_gz's default limit on the decompressed size */
#define READ_GZ_DEFAULT_MAX ((size_t)1 << 31)

/* A buffer the engine malloc'd, held by a userdata so a Lua error cannot leak it. */
typedef struct { unsigned char *p; } lg_bytes;

static int bytes_gc(lua_State *L) {
  lg_bytes *b = luaL_checkudata(L, 1, LG_BYTES);
  gl_gz_free(b->p);
  b->p = NULL;
  return 0;
}

/* _read_gz(path [, max_bytes]) -> string: the whole file, decompressed when gzipped */
static int l_read_gz(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  lua_Integer max = luaL_optinteger(L, 2, (lua_Integer)READ_GZ_DEFAULT_MAX);
  if (max < 1) luaL_argerror(L, 2, "size limit must be positive");
  lg_bytes *b = lua_newuserdatauv(L, sizeof *b, 0);
  b->p = NULL;
  luaL_setmetatable(L, LG_BYTES);
  size_t n;
  LG_TRY(L, "read_gz", gl_read_gz(path, (size_t)max, &b->p, &n));
  lua_pushlstring(L, (const char *)b->p, n);
  gl_gz_free(b->p);
  b->p = NULL;
  return 1;
}

/* _idx_info(path) -> {type=, shape={...}, numel=} */
static int l_idx_info(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  gl_idx_info info;
  LG_TRY(L, "read_idx", gl_read_idx_info(path, &info));
  lua_createtable(L, 0, 3);
  lua_pushinteger(L, info.type);
  lua_setfield(L, -2, "type");
  lua_pushinteger(L, (lua_Integer)info.numel);
  lua_setfield(L, -2, "numel");
  lua_createtable(L, info.ndim, 0);
  for (int d = 0; d < info.ndim; d++) {
    lua_pushinteger(L, info.shape[d]);
    lua_seti(L, -2, d + 1);
  }
  lua_setfield(L, -2, "shape");
  return 1;
}

/* _read_idx(path [, first=1 [, limit=all [, scale=false [, item_shape]]]]) -> tensor of items
 * first..first+limit-1; item_shape (a table) gives each item a new shape of the same size,
 * e.g. {1,28,28} for images with a channel dim. */
static int l_read_idx(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  lua_Integer first = luaL_optinteger(L, 2, 1);
  lua_Integer limit = lua_isnoneornil(L, 3) ? 0 : luaL_checkinteger(L, 3);
  int scale = lua_toboolean(L, 4);
  int item[GL_MAX_DIMS], nitem = -1;
  if (first < 1) luaL_argerror(L, 2, "first item must be >= 1");
  if (!lua_isnoneornil(L, 3) && limit < 1) luaL_argerror(L, 3, "limit must be >= 1");
  if (!lua_isnoneornil(L, 5)) {
    luaL_checktype(L, 5, LUA_TTABLE);
    nitem = lg_checkshape(L, 5, item);
    if (nitem + 1 > GL_MAX_DIMS) luaL_argerror(L, 5, "too many dims");
  }
  gl_tensor **box = lg_newbox(L);
  LG_TRY(L, "read_idx", gl_read_idx(box, path, (size_t)(first - 1), (size_t)limit, scale));
  if (nitem >= 0) {
    gl_tensor *t = *box;
    size_t per = 1, have = 1;
    for (int d = 0; d < nitem; d++) per *= (size_t)(item[d] < 0 ? 0 : item[d]);
    for (int d = 1; d < t->ndim; d++) have *= (size_t)t->shape[d];
    if (per != have)
      luaL_error(L, "read_idx: item shape of %d elements for items of %d elements", (int)per,
                 (int)have);
    for (int d = 0; d < nitem; d++) t->shape[d + 1] = item[d];
    t->ndim = nitem + 1;
  }
  lg_account(L);
  return 1;
}

/* the flat range [pos, pos+count) of t, checked without overflow for any Lua integers;
 * returns the 0-based offset */
static size_t check_range(lua_State *L, gl_tensor *t, int argpos, lua_Integer pos,
                          lua_Integer count) {
  lua_Integer numel = (lua_Integer)t->numel;
  if (pos < 1 || pos > numel + 1 || count < 0 || count > numel - (pos - 1)) {
    if (pos < 1 || pos > numel + 1)
      luaL_argerror(L, argpos, lua_pushfstring(L, "position %I out of range for a tensor of "
                                                  "%I elements", (LUAI_UACINT)pos,
                                               (LUAI_UACINT)numel));
    luaL_argerror(L, argpos, lua_pushfstring(L, "%I elements from position %I out of range "
                                                "for a tensor of %I elements",
                                             (LUAI_UACINT)count, (LUAI_UACINT)pos,
                                             (LUAI_UACINT)numel));
  }
  return (size_t)(pos - 1);
}

/* _data_set(t, pos, values): t's flat elements pos.. = values[1..#values] (in place) */
static int l_data_set(lua_State *L) {
  gl_tensor *t = lg_check(L, 1);
  lua_Integer pos = lg_checkinteger(L, 2, 1, (lua_Integer)t->numel + 1);
  luaL_checktype(L, 3, LUA_TTABLE);
  lua_Integer n = luaL_len(L, 3);
  size_t off = check_range(L, t, 2, pos, n);
  if (t->requires_grad && gl_grad_enabled())
    luaL_error(L, "data_set: cannot write into a tensor that requires grad");
  float *d = t->data + off;
  for (lua_Integer k = 1; k <= n; k++) {
    int isnum;
    lua_Number v = lua_tonumberx(L, (lua_rawgeti(L, 3, k), -1), &isnum);
    if (!isnum) luaL_error(L, "data_set: values[%d] is %s, not a number", (int)k,
                           luaL_typename(L, -1));
    d[k - 1] = (float)v;
    lua_pop(L, 1);
  }
  gl_touch(t);
  return 0;
}

/* _data_get(t [, pos=1 [, count=all after pos]]) -> flat table of t's elements */
static int l_data_get(lua_State *L) {
  gl_tensor *t = lg_check(L, 1);
  lua_Integer numel = (lua_Integer)t->numel;
  lua_Integer pos = lg_optinteger(L, 2, 1, 1, numel + 1);
  lua_Integer count = lg_optinteger(L, 3, numel - (pos - 1), 0, numel - (pos - 1));
  size_t off = check_range(L, t, 2, pos, count);
  lua_createtable(L, (int)count, 0);
  const float *d = t->data + off;
  for (lua_Integer k = 1; k <= count; k++) {
    lua_pushnumber(L, d[k - 1]);
    lua_rawseti(L, -2, k);
  }
  return 1;
}

/* _tsp_solve(ns, xy) -> tours, lengths: ns {count} city counts, xy the 2 * sum(ns)
 * coordinates x1, y1, x2, ... of all instances one after the other; tours the sum(ns)
 * 1-based cities of the optimal tours one after the other, lengths {count} */
static int l_tsp_solve(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  luaL_checktype(L, 2, LUA_TTABLE);
  lua_Integer count = (lua_Integer)luaL_len(L, 1);
  if (count > (1 << 24)) luaL_argerror(L, 1, "too many instances");
  size_t total = 0;
  int *n = lua_newuserdatauv(L, (size_t)(count ? count : 1) * sizeof(int), 0);
  for (lua_Integer i = 1; i <= count; i++) {
    lua_rawgeti(L, 1, i);
    int isint;
    lua_Integer v = lua_tointegerx(L, -1, &isint);
    lua_pop(L, 1);
    if (!isint || v < 2 || v > GL_TSP_MAX_N)
      return luaL_error(L, "_tsp_solve: instance %d has a size outside 2..%d", (int)i,
                        GL_TSP_MAX_N);
    n[i - 1] = (int)v;
    total += (size_t)v;
  }
  if ((size_t)luaL_len(L, 2) != 2 * total)
    return luaL_error(L, "_tsp_solve: %I coordinates for %I cities", (lua_Integer)luaL_len(L, 2),
                      (lua_Integer)total);
  double *xy = lua_newuserdatauv(L, 2 * (total ? total : 1) * sizeof(double), 0);
  for (size_t k = 0; k < 2 * total; k++) {
    lua_rawgeti(L, 2, (lua_Integer)k + 1);
    int isnum;
    xy[k] = lua_tonumberx(L, -1, &isnum);
    lua_pop(L, 1);
    if (!isnum) return luaL_error(L, "_tsp_solve: coordinate %I is not a number", (lua_Integer)k + 1);
  }
  int *tours = lua_newuserdatauv(L, (total ? total : 1) * sizeof(int), 0);
  double *lengths = lua_newuserdatauv(L, (size_t)(count ? count : 1) * sizeof(double), 0);
  LG_TRY(L, "tsp_solve", gl_tsp_solve((int)count, n, xy, tours, lengths));
  lua_createtable(L, (int)total, 0);
  for (size_t k = 0; k < total; k++) {
    lua_pushinteger(L, tours[k] + 1);
    lua_rawseti(L, -2, (lua_Integer)k + 1);
  }
  lua_createtable(L, (int)count, 0);
  for (lua_Integer i = 0; i < count; i++) {
    lua_pushnumber(L, lengths[i]);
    lua_rawseti(L, -2, i + 1);
  }
  return 2;
}

static const luaL_Reg data_fns[] = {
    {"_read_gz", l_read_gz},   {"_idx_info", l_idx_info}, {"_read_idx", l_read_idx},
    {"_data_set", l_data_set}, {"_data_get", l_data_get},
    {"_tsp_solve", l_tsp_solve}, {NULL, NULL}};

void lg_open_data(lua_State *L, int module_idx, int methods_idx) {
  (void)methods_idx;
  if (luaL_newmetatable(L, LG_BYTES)) {
    lua_pushcfunction(L, bytes_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_pop(L, 1);
  lua_pushvalue(L, module_idx);
  luaL_setfuncs(L, data_fns, 0);
  lua_pop(L, 1);
}
