/* main.c -- the `glimpse` executable (minimal runner; the REPL comes next). */
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdio.h>

int luaopen_glimpse(lua_State *L);

int main(int argc, char **argv) {
  lua_State *L = luaL_newstate();
  luaL_openlibs(L);
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
  lua_pushcfunction(L, luaopen_glimpse);
  lua_setfield(L, -2, "glimpse");
  lua_pop(L, 1);
  lua_getglobal(L, "package");
  lua_pushfstring(L, "%s/bindings/?.lua;%s/?.lua;", GLIMPSE_ROOT, GLIMPSE_ROOT);
  lua_getfield(L, -2, "path");
  lua_concat(L, 2);
  lua_setfield(L, -2, "path");
  lua_pop(L, 1);
  lua_getglobal(L, "require");
  lua_pushliteral(L, "glimpse");
  lua_call(L, 1, 1);
  lua_setglobal(L, "glimpse");
  if (argc < 2) { fprintf(stderr, "usage: glimpse script.lua\n"); return 1; }
  lua_createtable(L, argc, 0);
  for (int i = 0; i < argc; i++) { lua_pushstring(L, argv[i]); lua_seti(L, -2, i - 1); }
  lua_setglobal(L, "arg");
  if (luaL_loadfile(L, argv[1]) != LUA_OK) { fprintf(stderr, "glimpse: %s\n", lua_tostring(L, -1)); return 1; }
  for (int i = 2; i < argc; i++) lua_pushstring(L, argv[i]);
  if (lua_pcall(L, argc - 2, 0, 0) != LUA_OK) { fprintf(stderr, "glimpse: %s\n", lua_tostring(L, -1)); return 1; }
  lua_close(L);
  return 0;
}
