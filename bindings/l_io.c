/* l_io.c -- bindings of the io family: glimpse.save and glimpse.load (safetensors).
 *
 * The engine's gl_st_file (named tensors + metadata) is held by a small userdata with a
 * __gc, pushed before anything is put into it, so a Lua error raised halfway through
 * building or unpacking a checkpoint (a non-tensor value, a bad metadata key) never leaks it.
 */
#include "lglimpse.h"

#include <string.h>
#include <sys/stat.h>

#define LG_STFILE "glimpse.StFile"

static gl_st_file **st_newbox(lua_State *L) {
  gl_st_file **box = lua_newuserdatauv(L, sizeof(gl_st_file *), 0);
  *box = NULL;
  luaL_setmetatable(L, LG_STFILE);
  return box;
}

static int st_gc(lua_State *L) {
  gl_st_file **box = luaL_checkudata(L, 1, LG_STFILE);
  gl_st_free(*box);
  *box = NULL;
  return 0;
}

/* A string at stack index i that must not hold a NUL (the engine uses C strings). */
static const char *nul_free(lua_State *L, int i, const char *what) {
  size_t n;
  const char *s = lua_tolstring(L, i, &n);
  if (strlen(s) != n) luaL_error(L, "save: %s '%s...' contains a NUL byte", what, s);
  return s;
}

/* ------------------------------------------------------------------------ */
/* glimpse.save(path, tbl, meta)
 *   tbl: name -> tensor (a state_dict); meta: optional string -> string (numbers allowed as
 *   values, written with tostring).  Writes F32 safetensors atomically. */

static int l_save(lua_State *L) {
  size_t plen;
  const char *path = luaL_checklstring(L, 1, &plen);
  if (strlen(path) != plen) luaL_argerror(L, 1, "path contains a NUL byte");
  luaL_checktype(L, 2, LUA_TTABLE);
  if (!lua_isnoneornil(L, 3)) luaL_checktype(L, 3, LUA_TTABLE);
  lua_settop(L, 3);
  gl_st_file **box = st_newbox(L);                     /* index 4 */
  LG_TRY(L, "save", gl_st_new(box));

  lua_pushnil(L);
  while (lua_next(L, 2)) {
    if (lua_type(L, -2) != LUA_TSTRING)
      luaL_error(L, "save: tensor names must be strings, got a %s key", luaL_typename(L, -2));
    const char *name = nul_free(L, -2, "tensor name");
    gl_tensor *t = lg_test(L, -1);
    if (!t && luaL_testudata(L, -1, LG_TENSOR)) luaL_error(L, "save: tensor '%s' was closed", name);
    if (!t) luaL_error(L, "save: value of '%s' is %s, expected a tensor", name,
                       luaL_typename(L, -1));
    LG_TRY(L, "save", gl_st_add_tensor(*box, name, t));
    lua_pop(L, 1);
  }

  if (lua_istable(L, 3)) {
    lua_pushnil(L);
    while (lua_next(L, 3)) {
      if (lua_type(L, -2) != LUA_TSTRING)
        luaL_error(L, "save: metadata keys must be strings, got a %s key", luaL_typename(L, -2));
      const char *key = nul_free(L, -2, "metadata key");
      int vt = lua_type(L, -1);
      if (vt == LUA_TNUMBER) {
        luaL_tolstring(L, -1, NULL);                   /* a copy: the key stays untouched */
        lua_replace(L, -2);
      } else if (vt != LUA_TSTRING) {
        luaL_error(L, "save: metadata value of '%s' is a %s, expected a string or number", key,
                   lua_typename(L, vt));
      }
      const char *value = nul_free(L, -1, "metadata value");
      LG_TRY(L, "save", gl_st_add_meta(*box, key, value));
      lua_pop(L, 1);
    }
  }

  LG_TRY(L, "save", gl_st_save(*box, path));
  gl_st_free(*box);
  *box = NULL;
  return 0;
}

/* ------------------------------------------------------------------------ */
/* sd, meta = glimpse.load(path)
 *   sd: name -> float32 tensor; meta: string -> string (an empty table when the file has
 *   none). */

static int l_load(lua_State *L) {
  size_t plen;
  const char *path = luaL_checklstring(L, 1, &plen);
  if (strlen(path) != plen) luaL_argerror(L, 1, "path contains a NUL byte");
  gl_st_file **box = st_newbox(L);
  LG_TRY(L, "load", gl_st_load(box, path));
  gl_st_file *f = *box;

  size_t n = gl_st_count(f), nm = gl_st_meta_count(f);
  lua_createtable(L, 0, n > 1000000 ? 1000000 : (int)n);
  for (size_t i = 0; i < n; i++) {
    gl_tensor **tb = lg_newbox(L);
    *tb = gl_st_tensor(f, i);
    gl_retain(*tb);
    lua_setfield(L, -2, gl_st_name(f, i));
  }
  lua_createtable(L, 0, nm > 1000000 ? 1000000 : (int)nm);
  for (size_t i = 0; i < nm; i++) {
    lua_pushstring(L, gl_st_meta_value(f, i));
    lua_setfield(L, -2, gl_st_meta_key(f, i));
  }
  gl_st_free(*box);            /* the tensors live on in their Lua boxes */
  *box = NULL;
  return 2;
}

/* glimpse._file_kind(path) -> "file" | "directory" | "fifo" | "other", or nil when nothing
 * is there: what a path names, found without opening it (opening a FIFO would wait) */
static int l_file_kind(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  struct stat sb;
  if (stat(path, &sb) != 0) {
    lua_pushnil(L);
    return 1;
  }
  lua_pushstring(L, S_ISREG(sb.st_mode) ? "file" : S_ISDIR(sb.st_mode) ? "directory"
                    : S_ISFIFO(sb.st_mode) ? "fifo" : "other");
  return 1;
}

void lg_open_io(lua_State *L, int module_idx, int methods_idx) {
  (void)methods_idx;
  if (luaL_newmetatable(L, LG_STFILE)) {
    lua_pushcfunction(L, st_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, st_gc);
    lua_setfield(L, -2, "__close");
  }
  lua_pop(L, 1);
  static const luaL_Reg fns[] = {{"save", l_save}, {"load", l_load},
                                 {"_file_kind", l_file_kind}, {NULL, NULL}};
  lua_pushvalue(L, module_idx);
  luaL_setfuncs(L, fns, 0);
  lua_pop(L, 1);
}
