/* l_dist.c -- glimpse._dist_*: the calls glimpse.dist (bindings/glimpse/dist.lua) makes to
 * MPI, on glimpse tensors in place.
 *
 * MPI is not linked into glimpse: its calls live in a plugin (bindings/mpi/dist_mpi.c,
 * built as libglimpse_mpi.so when the Makefile finds MPI) that _dist_init loads with dlopen,
 * and only when the process runs under an MPI launcher (mpirun, srun, hydra: they set
 * OMPI_COMM_WORLD_SIZE, PMIX_RANK or PMI_SIZE).  So the executable starts as fast as before,
 * runs that never ask for MPI never initialise it (Open MPI keeps allocations to the end,
 * which LeakSanitizer would report), and a process started on its own is one rank of one
 * with no MPI at all.  After a successful MPI_Init, an exit with status 0 calls
 * MPI_Finalize; any other exit leaves it out, so the launcher sees the failure and stops the
 * other ranks instead of waiting on this one in MPI_Finalize.
 *
 * Tensors are contiguous float32, so broadcast and allreduce hand their data pointer to MPI
 * as it is: no copies.  Bindings do no math: the mean of allreduce is dist.lua's division.
 */
#include <dlfcn.h>
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

static void on_process_exit(int status, void *arg) {
  (void)arg;
  if (status == 0 && mpi) mpi->finalize();
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

static int l_barrier(lua_State *L) {
  char err[512];
  need_mpi(L, "barrier");
  if (mpi->barrier(err, sizeof err)) return luaL_error(L, "glimpse.dist.barrier: %s", err);
  return 0;
}

/* _dist_broadcast(t, root): t's data from rank root, in place */
static int l_broadcast(lua_State *L) {
  char err[512];
  gl_tensor *t = lg_check(L, 1);
  int root = lg_checkint(L, 2);
  need_mpi(L, "broadcast");
  if (mpi->bcast(t->data, t->numel, root, err, sizeof err))
    return luaL_error(L, "glimpse.dist.broadcast: %s", err);
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
  if (mpi->allreduce(t->data, t->numel, codes[op], err, sizeof err))
    return luaL_error(L, "glimpse.dist.allreduce: %s", err);
  lua_settop(L, 1);
  return 1;
}

/* _dist_allgather(t) -> (size, t's shape...): every rank's t, in rank order */
static int l_allgather(lua_State *L) {
  char err[512];
  gl_tensor *t = lg_check(L, 1);
  need_mpi(L, "allgather");
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
