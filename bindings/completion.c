/* completion.c -- Tab completion of Lua names at the REPL: "glimpse.nn.Li" -> glimpse.nn.Linear,
 * "x:su" -> x:sum.
 *
 * Plain C over the Lua state, in the spirit of Python's rlcompleter: the names of a table, of
 * its metatable's __methods (tensors) and __index chain (classes), and what a metatable's
 * __complete declares (names only an __index function knows: lazily loaded modules, fields
 * kept in side tables).  Looking names up runs __index, so everything here runs protected.
 *
 *   lg_complete(L)              text -> sorted table of candidates (a lua_CFunction)
 *   lg_register_complete(L)     the global _glimpse_complete(text), for tests without a terminal
 *   lg_readline_complete(L)     make readline complete with it (main.c's REPL)
 */
#include <ctype.h>
#include <stdio.h>   /* before readline.h, which uses FILE */
#include <stdlib.h>
#include <string.h>

#include <readline/readline.h>

#include <lauxlib.h>
#include <lua.h>

#include "completion.h"

#define CHAIN_DEPTH 8   /* how far completion follows __index tables */

static lua_State *rl_L;   /* the state readline's hook completes in */

/* ------------------------------------------------------------------------ */
/* names */

static const char *const keywords[] = {
    "and", "break", "do", "else", "elseif", "end", "false", "for", "function", "goto", "if",
    "in", "local", "nil", "not", "or", "repeat", "return", "then", "true", "until", "while",
    NULL};

static int is_keyword(const char *s, size_t n) {
  for (int i = 0; keywords[i]; i++)
    if (strlen(keywords[i]) == n && memcmp(keywords[i], s, n) == 0) return 1;
  return 0;
}

/* a name usable after '.' or ':' */
static int is_name(const char *s, size_t n) {
  if (n == 0 || !(isalpha((unsigned char)s[0]) || s[0] == '_')) return 0;
  for (size_t i = 1; i < n; i++)
    if (!(isalnum((unsigned char)s[i]) || s[i] == '_')) return 0;
  return !is_keyword(s, n);
}

static int is_callable(lua_State *L, int i) {
  if (lua_type(L, i) == LUA_TFUNCTION) return 1;
  int callable = luaL_getmetafield(L, i, "__call") != LUA_TNIL;
  if (callable) lua_pop(L, 1);
  return callable;
}

/* a key that completes word: a name starting with it; private "_x" names only when word
 * starts with "_" (as Python's completer does) */
static int wanted(const char *k, size_t kl, const char *word, size_t wl) {
  if (kl < wl || memcmp(k, word, wl) != 0 || !is_name(k, kl)) return 0;
  return word[0] == '_' || k[0] != '_';
}

/* set[name] = true for the string at index k when it completes word (and, after ':', when
 * the value at index v is callable, or, with v == 0, when obj[name] is) */
static void add_name(lua_State *L, int set, int k, int v, int obj, const char *word, size_t wl,
                     int only_callable) {
  size_t kl;
  const char *name = lua_tolstring(L, k, &kl);
  if (!wanted(name, kl, word, wl)) return;
  if (only_callable) {
    if (v) {
      if (!is_callable(L, v)) return;
    } else {
      lua_pushvalue(L, k);
      lua_gettable(L, obj);   /* may run __index: we run protected */
      int ok = is_callable(L, -1);
      lua_pop(L, 1);
      if (!ok) return;
    }
  }
  lua_pushvalue(L, k);
  lua_pushboolean(L, 1);
  lua_rawset(L, set);
}

/* Add to the set at `set` the names of the value at v that start with word: its own string
 * keys when it is a table; then, from its metatable, the keys of __methods (tensors), of
 * __index when a table (classes, strings; followed down the chain) or of the metatable
 * itself when __index is a function (a class that answers through a function), and the
 * names __complete declares: a table of names (as keys or as array items) or a function
 * of the value returning one (for what only an __index function knows, such as lazily
 * loaded modules or an object's fields kept in side tables). */
static void add_fields(lua_State *L, int v, int set, const char *word, size_t wl,
                       int only_callable, int depth) {
  if (depth > CHAIN_DEPTH) return;
  v = lua_absindex(L, v);
  luaL_checkstack(L, 8, "completion");
  if (lua_type(L, v) == LUA_TTABLE) {
    lua_pushnil(L);
    while (lua_next(L, v)) {
      int top = lua_gettop(L);
      if (lua_type(L, top - 1) == LUA_TSTRING)
        add_name(L, set, top - 1, top, v, word, wl, only_callable);
      lua_pop(L, 1);
    }
  }
  if (!lua_getmetatable(L, v)) return;
  int mt = lua_gettop(L);
  lua_pushliteral(L, "__methods");   /* metafields are looked up raw, as Lua does */
  if (lua_rawget(L, mt) == LUA_TTABLE)
    add_fields(L, -1, set, word, wl, only_callable, depth + 1);
  lua_pop(L, 1);
  lua_pushliteral(L, "__index");
  int t = lua_rawget(L, mt);
  if (t == LUA_TTABLE && !lua_rawequal(L, -1, v))
    add_fields(L, -1, set, word, wl, only_callable, depth + 1);
  else if (t == LUA_TFUNCTION && !lua_rawequal(L, mt, v))
    add_fields(L, mt, set, word, wl, only_callable, depth + 1);
  lua_pop(L, 1);
  lua_pushliteral(L, "__complete");
  if (lua_rawget(L, mt) == LUA_TFUNCTION) {
    lua_pushvalue(L, v);
    lua_call(L, 1, 1);
  }
  if (lua_istable(L, -1)) {
    int names = lua_gettop(L);
    lua_pushnil(L);
    while (lua_next(L, names)) {
      int top = lua_gettop(L);
      if (lua_type(L, top - 1) == LUA_TSTRING)   /* {name = true} */
        add_name(L, set, top - 1, 0, v, word, wl, only_callable);
      else if (lua_type(L, top) == LUA_TSTRING)   /* {"name", ...} */
        add_name(L, set, top, 0, v, word, wl, only_callable);
      lua_pop(L, 1);
    }
  }
  lua_pop(L, 2);
}

/* Push the value of a dotted path of names ("glimpse.nn") looked up from the globals the
 * way Lua would (so lazy sub-modules load); nil when the path is not a plain name path. */
static void resolve(lua_State *L, const char *path, size_t n) {
  lua_pushglobaltable(L);
  for (size_t i = 0;;) {
    size_t j = i;
    while (j < n && path[j] != '.') j++;
    if (!is_name(path + i, j - i) || lua_isnil(L, -1)) {
      lua_pop(L, 1);
      lua_pushnil(L);
      return;
    }
    lua_pushlstring(L, path + i, j - i);
    lua_gettable(L, -2);   /* may run __index; the caller runs us protected */
    lua_remove(L, -2);
    if (j == n) return;
    i = j + 1;
  }
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* lg_complete(text) -> sorted table of full candidates.  Run it protected. */
int lg_complete(lua_State *L) {
  size_t n;
  const char *text = luaL_checklstring(L, 1, &n);
  size_t cut = n;   /* index of the last '.' or ':' */
  while (cut > 0 && text[cut - 1] != '.' && text[cut - 1] != ':') cut--;
  const char *word = text + cut;
  size_t wl = n - cut;
  int colon = cut > 0 && text[cut - 1] == ':';
  lua_newtable(L);
  int set = lua_gettop(L);
  if (cut == 0) {
    lua_pushglobaltable(L);
    add_fields(L, -1, set, word, wl, 0, 0);
    lua_pop(L, 1);
    for (int i = 0; keywords[i]; i++)
      if (strncmp(keywords[i], word, wl) == 0) {
        lua_pushboolean(L, 1);
        lua_setfield(L, set, keywords[i]);
      }
  } else {
    /* the head before the last separator is a path of names joined by '.' */
    if (memchr(text, ':', cut - 1) == NULL) {
      resolve(L, text, cut - 1);
      if (!lua_isnil(L, -1)) add_fields(L, -1, set, word, wl, colon, 0);
      lua_pop(L, 1);
    }
  }
  /* sort the names, then prefix them with the head */
  int count = 0;
  lua_pushnil(L);
  while (lua_next(L, set)) { count++; lua_pop(L, 1); }
  const char **names = lua_newuserdatauv(L, (count ? count : 1) * sizeof *names, 0);
  int k = 0;
  lua_pushnil(L);
  while (lua_next(L, set)) {
    names[k++] = lua_tostring(L, -2);   /* anchored in the set */
    lua_pop(L, 1);
  }
  qsort(names, (size_t)count, sizeof *names, cmp_str);
  lua_createtable(L, count, 0);
  for (int i = 0; i < count; i++) {
    lua_pushlstring(L, text, cut);
    lua_pushstring(L, names[i]);
    lua_concat(L, 2);
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

/* ------------------------------------------------------------------------ */
/* the Lua entry and readline's hook */

/* _glimpse_complete(text): the candidates, or {} when anything goes wrong */
static int complete_or_nothing(lua_State *L) {
  luaL_checkstring(L, 1);
  lua_pushcfunction(L, lg_complete);
  lua_pushvalue(L, 1);
  if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
    lua_pop(L, 1);
    lua_newtable(L);
  }
  return 1;
}

/* What readline appends after a single match: "(" to what can be called (a function, a
 * class), "." to another table, " " to a keyword.  Resolving runs __index: run protected. */
static int completion_suffix(lua_State *L) {
  size_t n;
  const char *s = lua_tolstring(L, 1, &n);
  if (is_keyword(s, n)) { lua_pushinteger(L, ' '); return 1; }
  for (size_t i = 0; i < n; i++) {
    if (s[i] == ':') { lua_pushinteger(L, '('); return 1; }
  }
  resolve(L, s, n);
  if (is_callable(L, -1)) lua_pushinteger(L, '(');   /* functions, classes */
  else lua_pushinteger(L, lua_istable(L, -1) ? '.' : '\0');
  return 1;
}

/* readline: show candidates by their last name only ("Linear", not "glimpse.nn.Linear") */
static void display_matches(char **matches, int n, int maxlen) {
  (void)maxlen;
  const char *s = matches[1];
  size_t skip = 0;
  for (size_t i = 0; s[i]; i++)
    if (s[i] == '.' || s[i] == ':') skip = i + 1;
  char **shown = malloc((size_t)(n + 2) * sizeof *shown);
  if (!shown) return;
  int width = 0;
  shown[0] = matches[0];
  for (int i = 1; i <= n; i++) {
    shown[i] = strlen(matches[i]) >= skip ? matches[i] + skip : matches[i];
    int w = (int)strlen(shown[i]);
    if (w > width) width = w;
  }
  shown[n + 1] = NULL;
  rl_display_match_list(shown, n, width);
  rl_forced_update_display();
  free(shown);
}

/* readline's hook: the candidates for text (m[0] what replaces it), or NULL for none */
static char **complete_hook(const char *text, int start, int end) {
  (void)start;
  (void)end;
  rl_completion_display_matches_hook = NULL;
  if (rl_completion_quote_character) return NULL;   /* inside a string: file names */
  rl_attempted_completion_over = 1;
  rl_completion_append_character = '\0';
  lua_State *L = rl_L;
  int top = lua_gettop(L);
  lua_pushcfunction(L, lg_complete);
  lua_pushstring(L, text);
  if (lua_pcall(L, 1, 1, 0) != LUA_OK) { lua_settop(L, top); return NULL; }
  int n = (int)lua_rawlen(L, -1);
  char **m = n ? calloc((size_t)n + 2, sizeof *m) : NULL;
  if (!m) { lua_settop(L, top); return NULL; }
  for (int i = 0; i < n; i++) {
    lua_rawgeti(L, -1, i + 1);
    m[n == 1 ? 0 : i + 1] = strdup(lua_tostring(L, -1));
    lua_pop(L, 1);
  }
  if (n == 1) {
    lua_pushcfunction(L, completion_suffix);
    lua_pushstring(L, m[0]);
    if (lua_pcall(L, 1, 1, 0) == LUA_OK) rl_completion_append_character = (int)lua_tointeger(L, -1);
  } else {
    /* m[0]: the longest common prefix, which readline puts in place of the text */
    size_t lcp = strlen(m[1]);
    for (int i = 2; i <= n; i++) {
      size_t j = 0;
      while (j < lcp && m[i][j] == m[1][j]) j++;
      lcp = j;
    }
    m[0] = strndup(m[1], lcp);
    rl_completion_display_matches_hook = display_matches;
  }
  lua_settop(L, top);
  return m;
}

void lg_register_complete(lua_State *L) {
  lua_pushcfunction(L, complete_or_nothing);
  lua_setglobal(L, "_glimpse_complete");
}

void lg_readline_complete(lua_State *L) {
  rl_L = L;
  rl_attempted_completion_function = complete_hook;
  rl_completer_word_break_characters = " \t\n\"'`@$><=;|&{(+-*/%^~#,[]})";
  rl_completer_quote_characters = "\"'";
}
