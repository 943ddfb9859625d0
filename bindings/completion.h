/* completion.h -- Tab completion of Lua names at the REPL (completion.c). */
#ifndef GLIMPSE_COMPLETION_H
#define GLIMPSE_COMPLETION_H

#include <lua.h>

/* lg_complete(text) -> a sorted table of full candidates ("glimpse.nn.Li" ->
 * {"glimpse.nn.Linear"}, "x:su" -> {"x:sum"}).  A lua_CFunction; it runs __index, so call
 * it protected. */
int lg_complete(lua_State *L);

/* Set the global _glimpse_complete(text): lg_complete run protected, {} on any error. */
void lg_register_complete(lua_State *L);

/* Make readline complete Lua names of L: the hook, word breaks, quote characters. */
void lg_readline_complete(lua_State *L);

#endif
