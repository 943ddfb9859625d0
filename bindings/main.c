/* main.c -- the `glimpse` executable: the REPL and the script runner.
 *
 * Modelled on Lua's own lua.c (the same options, the same `arg` table, errors with a
 * traceback, Ctrl-C turned into a Lua error by a debug hook) and on Torch7's `th` (the
 * library preloaded as the global `glimpse`, results printed, Tab completion: completion.c).
 *
 *   glimpse                      REPL (or, when stdin is not a terminal, run stdin as a script)
 *   glimpse script.lua a b       run a script: arg[0] = script, arg[1..] = a b, arg[-1] = exe
 *   glimpse -e 'code' -i -l mod -v -h -   (see usage() below)
 *   glimpse caption IMAGE... [--model NAME|PATH] [--beam K] [--overlay DIR]   (cli/caption.lua)
 *
 * The REPL prints results with glimpse.cli.repl's show and answers "?name" with its help.
 * It reads through readline's callback interface, so Ctrl-C at the prompt drops the line
 * being typed instead of ending the session.  History: ~/.glimpse_history or
 * $GLIMPSE_HISTORY (empty disables it), appended after every entry.
 */
#include <ctype.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <unistd.h>

#include <readline/history.h>
#include <readline/readline.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "completion.h"

int luaopen_glimpse_core(lua_State *L);

#define PROMPT1 "> "
#define PROMPT2 ">> "
#define HISTORY_MAX 1000   /* entries kept in the history */
#define HISTORY_FILE_LINES (2 * HISTORY_MAX)   /* a time line and (mostly) one text line each */
#define CHUNK_STDIN "=stdin"
#define EOFMARK "<eof>"    /* the end of a syntax error that only wants more input */

static const char *progname = "glimpse";
static lua_State *globalL;          /* for the signal handler and readline's callbacks */
static const char *hist_path;       /* NULL: no history file */

static void usage(FILE *f) {
  fprintf(f,
          "usage: %s [options] [script [args]]\n"
          "       %s caption IMAGE... [--model NAME|PATH] [--beam K] [--overlay DIR]\n"
          "Available options are:\n"
          "  -e stat   execute string 'stat'\n"
          "  -i        enter interactive mode after executing 'script'\n"
          "  -l mod    require library 'mod' into global 'mod'\n"
          "  -v        show version information\n"
          "  -h        show this help\n"
          "  --        stop handling options\n"
          "  -         stop handling options and execute stdin\n"
          "With no script and a terminal on stdin, start the REPL; otherwise run stdin.\n"
          "In the REPL, ?name prints the documentation of name (?nn.LSTM).\n"
          "'caption' prints one caption per image (image path, tab, caption) with a\n"
          "trained captioner (default: the shipped model scenes-soft); 'caption --help'\n"
          "says more.\n"
          "The global 'glimpse' is preloaded.  REPL history: $GLIMPSE_HISTORY or "
          "~/.glimpse_history.\n",
          progname, progname);
}

static void message(const char *pname, const char *msg) {
  if (pname) fprintf(stderr, "%s: ", pname);
  fprintf(stderr, "%s\n", msg);
  fflush(stderr);
}

/* Print the error on top of the stack (if any) and pop it. */
static int report(lua_State *L, int status) {
  if (status != LUA_OK) {
    const char *msg = lua_tostring(L, -1);
    message(progname, msg ? msg : "(error object is not a string)");
    lua_pop(L, 1);
  }
  return status;
}

/* ------------------------------------------------------------------------ */
/* running code: a traceback on error, Ctrl-C becomes the error "interrupted!" */

/* Set from the signal handler; Lua checks hooks at calls, returns, lines and every
 * instruction, so the running code stops at the next one (lua.c's lstop/laction). */
static void stop_hook(lua_State *L, lua_Debug *ar) {
  (void)ar;
  lua_sethook(L, NULL, 0, 0);
  luaL_error(L, "interrupted!");
}

static void on_sigint_running(int sig) {
  int mask = LUA_MASKCALL | LUA_MASKRET | LUA_MASKLINE | LUA_MASKCOUNT;
  signal(sig, SIG_DFL);   /* a second Ctrl-C ends the process (stuck in a long C call) */
  lua_sethook(globalL, stop_hook, mask, 1);
}

static void set_sigint(void (*handler)(int), struct sigaction *old) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;   /* no SA_RESTART: pselect() at the prompt must see EINTR */
  sigaction(SIGINT, &sa, old);
}

static int msghandler(lua_State *L) {
  const char *msg = lua_tostring(L, 1);
  if (msg == NULL) {
    if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING) return 1;
    msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
  }
  luaL_traceback(L, L, msg, 1);
  return 1;
}

/* Call the function below its narg arguments, with the traceback handler and Ctrl-C armed. */
static int docall(lua_State *L, int narg, int nres) {
  int base = lua_gettop(L) - narg;
  struct sigaction old;
  lua_pushcfunction(L, msghandler);
  lua_insert(L, base);
  globalL = L;
  set_sigint(on_sigint_running, &old);
  int status = lua_pcall(L, narg, nres, base);
  sigaction(SIGINT, &old, NULL);
  /* a Ctrl-C that came after the call ended must not stop the next one */
  if (lua_gethook(L) == stop_hook) lua_sethook(L, NULL, 0, 0);
  lua_remove(L, base);
  return status;
}

static int dochunk(lua_State *L, int status) {
  if (status == LUA_OK) status = docall(L, 0, 0);
  return report(L, status);
}

static int dostring(lua_State *L, const char *s, const char *name) {
  return dochunk(L, luaL_loadbuffer(L, s, strlen(s), name));
}

/* -l mod: global mod = require "mod" */
static int dolibrary(lua_State *L, const char *name) {
  lua_getglobal(L, "require");
  lua_pushstring(L, name);
  int status = docall(L, 1, 1);
  if (status == LUA_OK) lua_setglobal(L, name);
  return report(L, status);
}

/* ------------------------------------------------------------------------ */
/* the banner: version, Lua, BLAS core and threads */

static void print_version(lua_State *L) {
  int top = lua_gettop(L);
  const char *ver = "?", *core = NULL;
  lua_Integer threads = 0;
  lua_getglobal(L, "glimpse");
  if (lua_istable(L, -1)) {
    if (lua_getfield(L, -1, "version") == LUA_TSTRING) ver = lua_tostring(L, -1);
    lua_getfield(L, top + 1, "blas_info");
    if (lua_pcall(L, 0, 1, 0) == LUA_OK && lua_istable(L, -1)) {
      int info = lua_gettop(L);
      if (lua_getfield(L, info, "core") == LUA_TSTRING) core = lua_tostring(L, -1);
      if (lua_getfield(L, info, "threads") == LUA_TNUMBER) threads = lua_tointeger(L, -1);
    }
  }
  printf("glimpse %s (%s)", ver, LUA_RELEASE);
  if (core) printf(" -- OpenBLAS %s, %d thread%s", core, (int)threads, threads == 1 ? "" : "s");
  printf("\n");
  fflush(stdout);
  lua_settop(L, top);
}

/* ------------------------------------------------------------------------ */
/* reading lines: readline on a terminal, plain stdin otherwise */

static int stdin_tty;
static char *line_got;             /* the line readline handed us */
static int line_done;
static volatile sig_atomic_t prompt_interrupted;

static void on_sigint_prompt(int sig) {
  (void)sig;
  prompt_interrupted = 1;
}

static void on_line(char *line) {
  line_got = line;
  line_done = 1;
  rl_callback_handler_remove();
}

/* Ctrl-C at the prompt: show "^C" after what was typed, like a shell, and drop the line */
static void drop_line(void) {
  FILE *out = rl_outstream ? rl_outstream : stdout;
  rl_point = rl_end;
  rl_redisplay();
  fputs("^C", out);
  rl_free_line_state();
  rl_callback_sigcleanup();
  rl_cleanup_after_signal();
  rl_callback_handler_remove();
  fputs("\n", out);
  fflush(out);
}

/* 1: a line (malloc'd, in *out), 0: end of input, -1: Ctrl-C dropped the line.
 * SIGINT stays blocked except inside pselect, so a Ctrl-C is never missed between the
 * check of the flag and the wait. */
static int tty_read(const char *prompt, char **out) {
  struct sigaction old;
  sigset_t block, orig, waitmask;
  int result = 1;
  int fd = fileno(rl_instream ? rl_instream : stdin);
  line_got = NULL;
  line_done = 0;
  prompt_interrupted = 0;
  sigemptyset(&block);
  sigaddset(&block, SIGINT);
  sigprocmask(SIG_BLOCK, &block, &orig);
  waitmask = orig;
  sigdelset(&waitmask, SIGINT);
  set_sigint(on_sigint_prompt, &old);
  rl_callback_handler_install(prompt, on_line);
  while (!line_done) {
    if (prompt_interrupted) {
      drop_line();
      result = -1;
      break;
    }
    fd_set fds;
    FD_ZERO(&fds);
    FD_SET(fd, &fds);
    int r = pselect(fd + 1, &fds, NULL, NULL, NULL, &waitmask);
    if (r > 0) {
      rl_callback_read_char();
    } else if (r < 0 && errno != EINTR) {
      rl_callback_handler_remove();
      result = 0;
      break;
    }
  }
  sigprocmask(SIG_SETMASK, &orig, NULL);   /* a pending Ctrl-C lands in our handler... */
  sigaction(SIGINT, &old, NULL);            /* ...before the old one is back */
  if (result == 1 && !line_got) result = 0;   /* Ctrl-D on an empty line */
  *out = result == 1 ? line_got : NULL;
  return result;
}

static int plain_read(char **out) {
  char *line = NULL;
  size_t cap = 0;
  ssize_t n = getline(&line, &cap, stdin);
  if (n < 0) {
    free(line);
    return 0;
  }
  if (n > 0 && line[n - 1] == '\n') line[--n] = '\0';
  *out = line;
  return 1;
}

static const char *get_prompt(lua_State *L, int first) {
  if (lua_getglobal(L, first ? "_PROMPT" : "_PROMPT2") == LUA_TNIL) {
    lua_pop(L, 1);
    lua_pushstring(L, first ? PROMPT1 : PROMPT2);
  }
  const char *p = luaL_tolstring(L, -1, NULL);
  lua_remove(L, -2);
  return p;   /* kept alive on the stack until the caller pops it */
}

/* Push the next line.  1: pushed, 0: end of input, -1: interrupted (nothing pushed). */
static int pushline(lua_State *L, int first) {
  char *line = NULL;
  int r;
  if (stdin_tty) {
    const char *prompt = get_prompt(L, first);
    r = tty_read(prompt, &line);
    lua_pop(L, 1);
  } else {
    r = plain_read(&line);
  }
  if (r == 1) {
    lua_pushstring(L, line);
    free(line);
  }
  return r;
}

/* add an entry to the history (and its file), skipping blanks and repeats */
static void save_line(const char *line) {
  if (!stdin_tty) return;
  const char *p = line;
  while (isspace((unsigned char)*p)) p++;
  if (!*p) return;
  HIST_ENTRY *last = history_length > 0 ? history_get(history_base + history_length - 1) : NULL;
  if (last && strcmp(last->line, line) == 0) return;
  add_history(line);
  if (hist_path && append_history(1, hist_path) != 0) write_history(hist_path);
}

static void history_start(void) {
  const char *env = getenv("GLIMPSE_HISTORY");
  static char buf[4096];
  if (env) {
    hist_path = *env ? env : NULL;
  } else if (getenv("HOME")) {
    snprintf(buf, sizeof buf, "%s/.glimpse_history", getenv("HOME"));
    hist_path = buf;
  }
  using_history();
  stifle_history(HISTORY_MAX);
  /* a "#time" line before each entry keeps a multi-line statement one entry on reload */
  history_comment_char = '#';
  history_write_timestamps = 1;
  history_multiline_entries = 1;
  if (hist_path) {
    read_history(hist_path);
    history_truncate_file(hist_path, HISTORY_FILE_LINES);
  }
}

static void readline_start(lua_State *L) {
  globalL = L;
  rl_readline_name = "glimpse";   /* for $if glimpse in ~/.inputrc */
  rl_catch_signals = 0;           /* our handler deals with Ctrl-C at the prompt */
  lg_readline_complete(L);
  history_start();
}

/* ------------------------------------------------------------------------ */
/* the read-eval-print loop */

static int incomplete(lua_State *L, int status) {
  if (status == LUA_ERRSYNTAX) {
    size_t lmsg;
    const char *msg = lua_tolstring(L, -1, &lmsg);
    size_t em = sizeof(EOFMARK) - 1;
    if (lmsg >= em && strcmp(msg + lmsg - em, EOFMARK) == 0) {
      lua_pop(L, 1);
      return 1;
    }
  }
  return 0;
}

/* Compile "return <line>;" so expressions print their values; on success the line is
 * replaced by the function. */
static int addreturn(lua_State *L) {
  const char *line = lua_tostring(L, -1);
  const char *code = lua_pushfstring(L, "return %s;", line);
  int status = luaL_loadbuffer(L, code, strlen(code), CHUNK_STDIN);
  if (status == LUA_OK) {
    lua_remove(L, -2);   /* the code string */
    save_line(line);
    lua_remove(L, -2);   /* the line */
  } else {
    lua_pop(L, 2);       /* the error and the code string */
  }
  return status;
}

/* The line on top is not an expression: read lines until the statement compiles or fails
 * for a reason other than a missing end.  -1: Ctrl-C dropped the statement. */
static int multiline(lua_State *L) {
  for (;;) {
    size_t len;
    const char *line = lua_tolstring(L, 1, &len);
    int status = luaL_loadbuffer(L, line, len, CHUNK_STDIN);
    if (!incomplete(L, status)) {
      save_line(line);
      lua_remove(L, 1);
      return status;
    }
    int r = pushline(L, 0);
    if (r == 0) {   /* end of input: report the syntax error */
      status = luaL_loadbuffer(L, line, len, CHUNK_STDIN);
      save_line(line);
      lua_remove(L, 1);
      return status;
    }
    if (r < 0) {
      lua_settop(L, 0);
      return -1;
    }
    lua_pushliteral(L, "\n");
    lua_insert(L, -2);
    lua_concat(L, 3);
  }
}

/* "?name": glimpse.repl.help(name), run like a statement */
static int help_call(lua_State *L) {
  lua_getglobal(L, "require");
  lua_pushliteral(L, "glimpse.cli.repl");
  lua_call(L, 1, 1);
  lua_getfield(L, -1, "help");
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_call(L, 1, 0);
  return 0;
}

/* The line on top starts with '?' (after blanks): replace it by a call of help_call. */
static int helpline(lua_State *L) {
  const char *line = lua_tostring(L, -1);
  const char *p = line;
  while (isspace((unsigned char)*p)) p++;
  if (*p != '?') return 0;
  save_line(line);
  lua_pushstring(L, p + 1);
  lua_pushcclosure(L, help_call, 1);
  lua_remove(L, -2);
  return 1;
}

/* Read and compile one statement.  LUA_OK: the function on the stack; another status: the
 * error message; -1: nothing (interrupted); -2: end of input. */
static int loadline(lua_State *L) {
  lua_settop(L, 0);
  int r = pushline(L, 1);
  if (r == 0) return -2;
  if (r < 0) return -1;
  if (helpline(L)) return LUA_OK;
  int status = addreturn(L);
  if (status != LUA_OK) status = multiline(L);
  return status;
}

/* Push the function that prints results: glimpse.repl.show (tables by their contents), or
 * the global print when that module cannot be loaded. */
static int push_printer(lua_State *L) {
  lua_getglobal(L, "require");
  lua_pushliteral(L, "glimpse.cli.repl");
  if (lua_pcall(L, 1, 1, 0) == LUA_OK && lua_istable(L, -1)) {
    lua_getfield(L, -1, "show");
    lua_remove(L, -2);
    if (lua_isfunction(L, -1)) return 1;
  }
  lua_pop(L, 1);
  lua_getglobal(L, "print");
  return 1;
}

/* Print the values on the stack with glimpse.repl.show (tensors print via __tostring). */
static void print_results(lua_State *L) {
  int n = lua_gettop(L);
  if (n == 0) return;
  luaL_checkstack(L, LUA_MINSTACK, "too many results to print");
  push_printer(L);
  lua_insert(L, 1);
  if (lua_pcall(L, n, 0, 0) != LUA_OK)
    message(progname, lua_pushfstring(L, "error calling 'print' (%s)", lua_tostring(L, -1)));
}

static void doREPL(lua_State *L) {
  const char *oldprog = progname;
  struct sigaction saved;
  progname = NULL;   /* errors in the REPL need no program name */
  if (stdin_tty) {
    readline_start(L);
    /* between reading and running (compiling, printing) a Ctrl-C is ignored, not fatal */
    set_sigint(on_sigint_prompt, &saved);
  }
  for (;;) {
    int status = loadline(L);
    if (status == -2) break;
    if (status == -1) continue;
    if (status == LUA_OK) status = docall(L, 0, LUA_MULTRET);
    if (status == LUA_OK) print_results(L);
    else report(L, status);
    fflush(stdout);
  }
  lua_settop(L, 0);
  if (stdin_tty) {
    sigaction(SIGINT, &saved, NULL);
    fputs("\n", stdout);
    if (hist_path) history_truncate_file(hist_path, HISTORY_FILE_LINES);
  }
  fflush(stdout);
  progname = oldprog;
}

/* ------------------------------------------------------------------------ */
/* the command line */

enum { HAS_ERROR = 1, HAS_I = 2, HAS_V = 4, HAS_E = 8 };

/* Scan the options; *first gets the index of the script (argc: none). */
static int collectargs(char **argv, int *first) {
  int args = 0;
  int i;
  for (i = 1; argv[i] != NULL; i++) {
    *first = i;
    const char *a = argv[i];
    if (a[0] != '-') return args;   /* the script */
    if (!strcmp(a, "--")) {
      *first = i + 1;
      return args;
    }
    if (!strcmp(a, "-")) return args;   /* stdin as the script */
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      exit(EXIT_SUCCESS);
    }
    if (!strcmp(a, "-i")) args |= HAS_I | HAS_V;
    else if (!strcmp(a, "-v") || !strcmp(a, "--version")) args |= HAS_V;
    else if (a[1] == 'e' || a[1] == 'l') {
      if (a[1] == 'e') args |= HAS_E;
      if (a[2] == '\0') {   /* the argument is the next word */
        if (argv[i + 1] == NULL || argv[i + 1][0] == '-') return HAS_ERROR;
        i++;
      }
    } else {
      return HAS_ERROR;
    }
  }
  *first = i;
  return args;
}

/* -e and -l, in their order on the command line */
static int runargs(lua_State *L, char **argv, int n) {
  for (int i = 1; i < n; i++) {
    char opt = argv[i][1];
    if (opt != 'e' && opt != 'l') continue;
    const char *extra = argv[i] + 2;
    if (*extra == '\0') extra = argv[++i];
    int status = opt == 'e' ? dostring(L, extra, "=(command line)") : dolibrary(L, extra);
    if (status != LUA_OK) return 0;
  }
  return 1;
}

/* arg[0] = script, arg[1..] = its arguments, arg[-1..] = the interpreter and options */
static void createargtable(lua_State *L, char **argv, int argc, int script) {
  if (script == argc) script = 0;   /* no script: arg[0] is the interpreter */
  lua_createtable(L, argc - script - 1 > 0 ? argc - script - 1 : 0, script + 1);
  for (int i = 0; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i - script);
  }
  lua_setglobal(L, "arg");
}

static int handle_script(lua_State *L, char **argv) {
  const char *fname = argv[0];
  if (!strcmp(fname, "-") && strcmp(argv[-1], "--") != 0) fname = NULL;   /* stdin */
  int status = luaL_loadfile(L, fname);
  if (status == LUA_OK) {
    int n = 0;
    luaL_checkstack(L, LUA_MINSTACK, "too many script arguments");
    for (char **a = argv + 1; *a; a++, n++) {
      luaL_checkstack(L, 1, "too many script arguments");
      lua_pushstring(L, *a);
    }
    status = docall(L, n, LUA_MULTRET);
  }
  return report(L, status);
}

/* package.path: the source tree first, then the install dir; package.cpath: Debian's dirs
 * for C modules such as lua-cjson, when this Lua was built without them. */
#if defined(__x86_64__)
#define MULTIARCH "x86_64-linux-gnu"
#elif defined(__aarch64__)
#define MULTIARCH "aarch64-linux-gnu"
#endif

static void setup_paths(lua_State *L) {
  lua_getglobal(L, "package");
  int pkg = lua_gettop(L);
  lua_pushstring(L, GLIMPSE_ROOT "/bindings/?.lua;" GLIMPSE_ROOT "/bindings/?/init.lua;"
                    GLIMPSE_ROOT "/?.lua;" GLIMPSE_LUA_DIR "/?.lua;" GLIMPSE_LUA_DIR
                    "/?/init.lua;");
  lua_getfield(L, pkg, "path");
  lua_concat(L, 2);
  lua_setfield(L, pkg, "path");
  static const char *const cdirs[] = {
#ifdef MULTIARCH
      "/usr/lib/" MULTIARCH "/lua/" LUA_VERSION_MAJOR "." LUA_VERSION_MINOR "/?.so",
#endif
      "/usr/lib/lua/" LUA_VERSION_MAJOR "." LUA_VERSION_MINOR "/?.so", NULL};
  for (int i = 0; cdirs[i]; i++) {
    lua_getfield(L, pkg, "cpath");
    const char *cp = lua_tostring(L, -1);
    if (cp && !strstr(cp, cdirs[i])) {
      lua_pushfstring(L, "%s;%s", cp, cdirs[i]);
      lua_setfield(L, pkg, "cpath");
    }
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
}

/* the global `glimpse`, preloaded: the C core is built in as "glimpse.core", and
 * require "glimpse" finds the Lua library's glimpse/init.lua on the path set above; and the
 * completion hook for the tests */
static int open_glimpse(lua_State *L) {
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
  lua_pushcfunction(L, luaopen_glimpse_core);
  lua_setfield(L, -2, "glimpse.core");
  lua_pop(L, 1);
  lua_getglobal(L, "require");
  lua_pushliteral(L, "glimpse");
  int status = docall(L, 1, 1);
  if (status == LUA_OK) lua_setglobal(L, "glimpse");
  lg_register_complete(L);
  return report(L, status);
}

/* glimpse caption ...: require("glimpse.cli.caption").main({...}) -> the exit status */
static int caption_mode(lua_State *L, int argc, char **argv) {
  luaL_openlibs(L);
  setup_paths(L);
  createargtable(L, argv, argc, 1);
  if (open_glimpse(L) != LUA_OK) return EXIT_FAILURE;
  lua_getglobal(L, "require");
  lua_pushliteral(L, "glimpse.cli.caption");
  int status = docall(L, 1, 1);
  if (status != LUA_OK) { report(L, status); return EXIT_FAILURE; }
  lua_getfield(L, -1, "main");
  lua_createtable(L, argc - 2, 0);
  for (int i = 2; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i - 1);
  }
  status = docall(L, 1, 1);
  if (status != LUA_OK) { report(L, status); return EXIT_FAILURE; }
  return lua_isinteger(L, -1) ? (int)lua_tointeger(L, -1) : EXIT_FAILURE;
}

static int pmain(lua_State *L) {
  int argc = (int)lua_tointeger(L, 1);
  char **argv = (char **)lua_touserdata(L, 2);
  int script = argc;
  if (argv[0] && argv[0][0]) progname = argv[0];
  if (argc >= 2 && !strcmp(argv[1], "caption")) {
    lua_pushinteger(L, caption_mode(L, argc, argv));   /* an exit status, not a boolean */
    return 1;
  }
  int args = collectargs(argv, &script);
  if (args == HAS_ERROR) {
    const char *a = argv[script];
    if (a && (a[1] == 'e' || a[1] == 'l') && a[2] == '\0')
      fprintf(stderr, "%s: '%s' needs argument\n", progname, a);
    else
      fprintf(stderr, "%s: unrecognized option '%s'\n", progname, a ? a : "");
    usage(stderr);
    return 0;
  }
  luaL_openlibs(L);
  setup_paths(L);
  createargtable(L, argv, argc, script);
  if (open_glimpse(L) != LUA_OK) return 0;
  stdin_tty = isatty(STDIN_FILENO);
  if (args & HAS_V) print_version(L);
  /* with -i a failed -e or script still leads to the REPL, to look at what it left (as
   * Python's -i does); the exit status still says it failed */
  int ok = runargs(L, argv, script) &&
           (script == argc || handle_script(L, argv + script) == LUA_OK);
  if (!ok && !(args & HAS_I)) return 0;
  if (args & HAS_I) {
    doREPL(L);
  } else if (script == argc && !(args & (HAS_E | HAS_V))) {
    if (stdin_tty) {
      print_version(L);
      doREPL(L);
    } else if (dochunk(L, luaL_loadfile(L, NULL)) != LUA_OK) {
      return 0;
    }
  }
  lua_pushboolean(L, ok);
  return 1;
}

int main(int argc, char **argv) {
  lua_State *L = luaL_newstate();
  if (L == NULL) {
    message(argv[0], "cannot create state: not enough memory");
    return EXIT_FAILURE;
  }
  globalL = L;
  lua_pushcfunction(L, pmain);
  lua_pushinteger(L, argc);
  lua_pushlightuserdata(L, argv);
  int status = lua_pcall(L, 2, 1, 0);
  int ok = lua_toboolean(L, -1);
  int code = lua_isinteger(L, -1) ? (int)lua_tointeger(L, -1) : -1;   /* caption mode */
  report(L, status);
  lua_close(L);
  if (status == LUA_OK && code >= 0) return code;
  return (ok && status == LUA_OK) ? EXIT_SUCCESS : EXIT_FAILURE;
}
