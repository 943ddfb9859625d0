/* l_dist.c -- glimpse._dist_*: the calls glimpse.dist (bindings/glimpse/lab/dist.lua) makes to
 * MPI, on glimpse tensors in place.
 *
 * MPI is not linked into glimpse: its calls live in a plugin (bindings/mpi/dist_mpi.c,
 * built as libglimpse_mpi.so when the Makefile finds MPI) that _dist_init loads with dlopen,
 * and only when the process runs under an MPI launcher (mpirun, srun, hydra: they set
 * OMPI_COMM_WORLD_SIZE, PMIX_RANK or PMI_SIZE).  So the executable starts as fast as before,
 * runs that never ask for MPI never initialise it (Open MPI keeps allocations to the end,
 * which LeakSanitizer would report), and a process started on its own is one rank of one
 * with no MPI at all.
 *
 * Every collective first exchanges a small header (which call, the op, the root, the shape)
 * between the ranks, so ranks that disagree -- different calls, shapes, element counts or
 * ops, or one rank ending its script while another waits in a collective -- fail on every
 * rank with one message instead of hanging or returning wrong values.  A process that exits
 * with status 0 makes a last such exchange (the "end of the script") and then MPI_Finalize;
 * a rank that fails, or finds at its end that another rank is still in a collective, ends
 * the whole job with MPI_Abort, so no rank is left waiting.
 *
 * Ctrl-C on mpirun reaches the ranks as SIGTERM (then SIGKILL, odls_base_sigkill_timeout
 * seconds later: 1 by default); under a launcher a SIGTERM is therefore an interrupt like
 * the executable's SIGINT: a hook on the main thread that raises "interrupted!" at its next
 * instruction, which the Trainer takes at a step boundary and agrees on with the other ranks
 * (bindings/glimpse/lab/train/interrupt.lua).  A second SIGTERM ends the process.
 *
 * Tensors are contiguous float32, so broadcast and allreduce hand their data pointer to MPI
 * as it is: no copies.  Bindings do no math: the mean of allreduce is dist.lua's division.
 */
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lglimpse.h"
#include "mpi/dist_mpi.h"

#ifndef GLIMPSE_MPI_PLUGIN
#define GLIMPSE_MPI_PLUGIN ""
#endif
#ifndef GLIMPSE_MPI_PLUGIN_INSTALLED
#define GLIMPSE_MPI_PLUGIN_INSTALLED ""
#endif

static const gl_mpi_api *mpi;        /* set once MPI is initialised */
static int inited, d_rank, d_size = 1;
static char d_backend[16] = "none";

/* the launcher's world size from the environment, 0 when there is no launcher */
static int launcher_size(void) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", NULL};
  for (int i = 0; vars[i]; i++) {
    const char *v = getenv(vars[i]);
    if (v && *v) return atoi(v) > 0 ? atoi(v) : 1;
  }
  if (getenv("PMIX_RANK") || getenv("PMI_RANK")) return -1;   /* a launcher, size unknown */
  return 0;
}

/* ------------------------------------------------------------------------ */
/* headers: every rank says what it is about to do, and all of them check */

enum { CALL_BARRIER = 1, CALL_BROADCAST, CALL_ALLREDUCE, CALL_ALLGATHER, CALL_GATHER_TABLES,
       CALL_END };
static const char *const call_names[] = {"calls ?", "calls barrier", "calls broadcast",
                                         "calls allreduce", "calls allgather",
                                         "calls gather_tables", "is at the end of its script"};
static const char *const op_names[] = {"sum", "max", "min"};
#define HDR (4 + GL_MAX_DIMS)        /* call, op, root, ndim, shape */

/* one rank's header as text: "calls allreduce (sum) of [4,2]" */
static void header_text(const int *h, char *out, size_t len) {
  int n = snprintf(out, len, "%s", call_names[h[0] >= 1 && h[0] <= CALL_END ? h[0] : 0]);
  if (h[0] == CALL_ALLREDUCE && h[1] >= 0 && h[1] <= 2)
    n += snprintf(out + n, len - (size_t)n, " (%s)", op_names[h[1]]);
  if (h[0] == CALL_BROADCAST) n += snprintf(out + n, len - (size_t)n, " from rank %d", h[2]);
  if (h[0] == CALL_BROADCAST || h[0] == CALL_ALLREDUCE || h[0] == CALL_ALLGATHER) {
    n += snprintf(out + n, len - (size_t)n, " of [");
    for (int k = 0; k < h[3] && k < GL_MAX_DIMS && (size_t)n < len; k++)
      n += snprintf(out + n, len - (size_t)n, k ? ",%d" : "%d", h[4 + k]);
    if ((size_t)n < len) snprintf(out + n, len - (size_t)n, "]");
  }
}

/* Exchange headers; 0 when every rank's equals this one's, else 1 with the same message on
 * every rank in msg: "the ranks disagree: rank 0 calls allreduce (sum) of [4]; rank 1 ..."
 * The cost is one allgather of 12 ints per collective. */
static int agree(int call, int op, int root, const gl_tensor *t, char *msg, size_t len) {
  int h[HDR] = {call, op, root, t ? t->ndim : 0};
  for (int k = 0; t && k < t->ndim; k++) h[4 + k] = t->shape[k];
  int *all = malloc((size_t)d_size * HDR * sizeof(int));
  if (!all) return snprintf(msg, len, "out of memory for %d headers", d_size), 1;
  char err[512];
  if (mpi->allgather_ints(h, HDR, all, err, sizeof err)) {
    free(all);
    snprintf(msg, len, "%s", err);
    return 1;
  }
  int same = 1;
  for (int r = 1; r < d_size && same; r++) same = !memcmp(all, all + r * HDR, sizeof h);
  if (!same) {
    size_t n = (size_t)snprintf(msg, len, "the ranks disagree:");
    for (int r = 0; r < d_size && n < len; r++) {
      char one[256];
      header_text(all + r * HDR, one, sizeof one);
      if (r == 4 && d_size > 5) {
        n += (size_t)snprintf(msg + n, len - n, " ... (%d ranks)", d_size);
        break;
      }
      n += (size_t)snprintf(msg + n, len - n, "%s rank %d %s", r ? ";" : "", r, one);
    }
  }
  free(all);
  return !same;
}

static void on_process_exit(int status, void *arg) {
  (void)arg;
  if (!mpi) return;
  if (status == 0) {
    char msg[2048];
    if (!agree(CALL_END, 0, 0, NULL, msg, sizeof msg)) {
      mpi->finalize();
      return;
    }
    fprintf(stderr, "glimpse.dist: rank %d ended its script while another rank waits in a "
                    "collective; the job ends (%s)\n", d_rank, msg);
  }
  mpi->abort(status ? status : 1);
}

/* SIGTERM under a launcher: the interrupt hook (as the executable's SIGINT, bindings/main.c) */
static lua_State *main_thread;

static void term_hook(lua_State *L, lua_Debug *ar) {
  (void)ar;
  lua_sethook(L, NULL, 0, 0);
  luaL_error(L, "interrupted!");
}

static void on_sigterm(int sig) {
  signal(sig, SIG_DFL);   /* a second one ends the process */
  lua_sethook(main_thread, term_hook, LUA_MASKCALL | LUA_MASKRET | LUA_MASKLINE | LUA_MASKCOUNT, 1);
}

static void catch_sigterm(lua_State *L) {
  struct sigaction sa, old;
  lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
  main_thread = lua_tothread(L, -1);
  lua_pop(L, 1);
  if (sigaction(SIGTERM, NULL, &old) != 0 || old.sa_handler != SIG_DFL) return;  /* someone's */
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigterm;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
}

/* dlopen the plugin: $GLIMPSE_MPI_PLUGIN, the build's, then the installed one */
static const gl_mpi_api *load_plugin(char *why, size_t whylen) {
  const char *paths[3] = {getenv("GLIMPSE_MPI_PLUGIN"), GLIMPSE_MPI_PLUGIN,
                          GLIMPSE_MPI_PLUGIN_INSTALLED};
  why[0] = 0;
  if (paths[0] && *paths[0] && access(paths[0], F_OK) != 0) {   /* named, so no fallback */
    snprintf(why, whylen, "GLIMPSE_MPI_PLUGIN=%s: no such file", paths[0]);
    return NULL;
  }
  for (int i = 0; i < 3; i++) {
    if (!paths[i] || !*paths[i] || access(paths[i], F_OK) != 0) continue;
    /* RTLD_GLOBAL: Open MPI's own components look up libmpi's symbols globally */
    void *h = dlopen(paths[i], RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
      snprintf(why, whylen, "%s", dlerror());
      continue;
    }
    const gl_mpi_api *api = dlsym(h, "gl_mpi_plugin");
    if (api && api->version == GL_MPI_API_VERSION) return api;
    snprintf(why, whylen, "%s is not a glimpse MPI plugin of this version", paths[i]);
    dlclose(h);
  }
  if (!why[0])
    snprintf(why, whylen, "glimpse was built without MPI (make found no mpicc or mpi.h): no "
             "plugin at %s or %s", GLIMPSE_MPI_PLUGIN, GLIMPSE_MPI_PLUGIN_INSTALLED);
  return NULL;
}

/* _dist_init() -> rank, size, backend ("mpi" or "none"); idempotent */
static int l_init(lua_State *L) {
  if (!inited) {
    int n = launcher_size();
    if (n != 0 && n != 1) {
      char why[512], err[512];
      const gl_mpi_api *api = load_plugin(why, sizeof why);
      if (!api)
        return luaL_error(L, "glimpse.dist.init: started by an MPI launcher for %d ranks but "
                             "MPI cannot be loaded: %s", n, why);
      if (api->init(&d_rank, &d_size, err, sizeof err))
        return luaL_error(L, "glimpse.dist.init: %s", err);
      mpi = api;
      on_exit(on_process_exit, NULL);
      catch_sigterm(L);
      snprintf(d_backend, sizeof d_backend, "mpi");
    }
    inited = 1;
  }
  lua_pushinteger(L, d_rank);
  lua_pushinteger(L, d_size);
  lua_pushstring(L, d_backend);
  return 3;
}

static void need_mpi(lua_State *L, const char *fname) {
  if (!mpi) luaL_error(L, "glimpse.dist.%s: MPI is not initialised (glimpse.dist.init first)", fname);
}

/* the header exchange of a collective; an error on every rank when they disagree */
static void check_agree(lua_State *L, const char *fname, int call, int op, int root,
                        const gl_tensor *t) {
  char msg[2048];
  if (agree(call, op, root, t, msg, sizeof msg))
    luaL_error(L, "glimpse.dist.%s: %s", fname, msg);
}

static int l_barrier(lua_State *L) {
  char err[512];
  need_mpi(L, "barrier");
  check_agree(L, "barrier", CALL_BARRIER, 0, 0, NULL);
  if (mpi->barrier(err, sizeof err)) return luaL_error(L, "glimpse.dist.barrier: %s", err);
  return 0;
}

/* _dist_broadcast(t, root): t's data from rank root, in place */
static int l_broadcast(lua_State *L) {
  char err[512];
  gl_tensor *t = lg_check(L, 1);
  int root = lg_checkint(L, 2);
  need_mpi(L, "broadcast");
  check_agree(L, "broadcast", CALL_BROADCAST, 0, root, t);
  if (root < 0 || root >= d_size)
    return luaL_error(L, "glimpse.dist.broadcast: root %d is not a rank (0..%d)", root, d_size - 1);
  if (mpi->bcast(t->data, t->numel, root, err, sizeof err))
    return luaL_error(L, "glimpse.dist.broadcast: %s", err);
  gl_touch(t);
  lua_settop(L, 1);
  return 1;
}

/* _dist_allreduce(t, "sum"|"max"|"min"): in place */
static int l_allreduce(lua_State *L) {
  static const char *const ops[] = {"sum", "max", "min", NULL};
  static const int codes[] = {GL_MPI_SUM, GL_MPI_MAX, GL_MPI_MIN};
  char err[512];
  gl_tensor *t = lg_check(L, 1);
  int op = luaL_checkoption(L, 2, NULL, ops);
  need_mpi(L, "allreduce");
  check_agree(L, "allreduce", CALL_ALLREDUCE, codes[op], 0, t);
  if (mpi->allreduce(t->data, t->numel, codes[op], err, sizeof err))
    return luaL_error(L, "glimpse.dist.allreduce: %s", err);
  gl_touch(t);
  lua_settop(L, 1);
  return 1;
}

/* _dist_allgather(t) -> (size, t's shape...): every rank's t, in rank order */
static int l_allgather(lua_State *L) {
  char err[512];
  gl_tensor *t = lg_check(L, 1);
  need_mpi(L, "allgather");
  check_agree(L, "allgather", CALL_ALLGATHER, 0, 0, t);
  if (t->ndim >= GL_MAX_DIMS)
    return luaL_error(L, "glimpse.dist.allgather: a tensor of %d dims has no room for the rank "
                         "dim (at most %d dims)", t->ndim, GL_MAX_DIMS);
  int shape[GL_MAX_DIMS];
  shape[0] = d_size;
  for (int k = 0; k < t->ndim; k++) shape[k + 1] = t->shape[k];
  gl_tensor **box = lg_newbox(L);
  LG_TRY(L, "glimpse.dist.allgather", gl_empty(box, t->ndim + 1, shape));
  if (mpi->allgather(t->data, t->numel, (*box)->data, err, sizeof err))
    return luaL_error(L, "glimpse.dist.allgather: %s", err);
  return 1;
}

/* _dist_allgather_strings(s) -> {rank 0's s, rank 1's s, ...} */
static int l_allgather_strings(lua_State *L) {
  char err[512];
  size_t len;
  const char *s = luaL_checklstring(L, 1, &len);
  need_mpi(L, "gather_tables");
  if (len > 0x7fffffff) return luaL_error(L, "glimpse.dist.gather_tables: %zu bytes is too much", len);
  check_agree(L, "gather_tables", CALL_GATHER_TABLES, 0, 0, NULL);
  int *counts = lua_newuserdatauv(L, 2 * (size_t)d_size * sizeof(int), 0);
  int *displs = counts + d_size;
  if (mpi->allgather_counts((int)len, counts, err, sizeof err))
    return luaL_error(L, "glimpse.dist.gather_tables: %s", err);
  size_t total = 0;
  for (int r = 0; r < d_size; r++) {
    displs[r] = (int)total;
    total += (size_t)counts[r];
    if (total > 0x7fffffff) return luaL_error(L, "glimpse.dist.gather_tables: more than 2 GiB in all");
  }
  char *recv = lua_newuserdatauv(L, total ? total : 1, 0);
  if (mpi->allgather_bytes(s, (int)len, recv, counts, displs, err, sizeof err))
    return luaL_error(L, "glimpse.dist.gather_tables: %s", err);
  lua_createtable(L, d_size, 0);
  for (int r = 0; r < d_size; r++) {
    lua_pushlstring(L, recv + displs[r], (size_t)counts[r]);
    lua_rawseti(L, -2, r + 1);
  }
  return 1;
}

void lg_open_dist(lua_State *L, int module_idx, int methods_idx) {
  (void)methods_idx;
  static const luaL_Reg fns[] = {
      {"_dist_init", l_init},           {"_dist_barrier", l_barrier},
      {"_dist_broadcast", l_broadcast}, {"_dist_allreduce", l_allreduce},
      {"_dist_allgather", l_allgather}, {"_dist_allgather_strings", l_allgather_strings},
      {NULL, NULL}};
  lua_pushvalue(L, module_idx);
  luaL_setfuncs(L, fns, 0);
  lua_pop(L, 1);
}
