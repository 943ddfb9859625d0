/* l_profile.c -- glimpse.cpu_profile: a sampling profiler of where the CPU time goes, for
 * `bench/run.lua --profile`.
 *
 * Off by default and free then: nothing in the normal path looks at it.  Turned on, a
 * timer on the monotonic clock (timer_create, every `interval` microseconds of wall-clock
 * time) sends SIGPROF to the thread that turned it on -- the one running Lua, whose time is
 * the step's time -- and the handler records the interrupted instruction address into a
 * preallocated buffer.  A product that OpenBLAS splits over threads shows as the calling
 * thread's time in OpenBLAS (its share of the work and its wait for the workers).  (A CPU-time
 * timer, ITIMER_PROF, fires only every few tens of milliseconds on the virtual machines this
 * was written on: too coarse for a step of 10 ms.)  Reading the profile sorts the addresses and names each one:
 * the shared object it lies in (OpenBLAS, the Lua interpreter, libc, libm, the glimpse
 * executable or module) and, inside glimpse, the function (from the object file's own ELF
 * symbol table, static functions included, read once when a profile is first read).  The categories:
 *   blas      OpenBLAS (the matrix products)
 *   memory    libc's memcpy/memmove/memset and the allocator, and glimpse functions that
 *             only move data (copy, contiguous, cat, stack, gather, index, transpose, ...)
 *   engine    every other glimpse engine function (elementwise, reductions, softmax,
 *             attention, convolution transforms, LSTM gates, optimizers) and libm
 *   lua       the Lua interpreter, its libraries and the bindings' glue (l_*, lg_*, m_*)
 *   other     the rest (the kernel's vDSO, the dynamic loader, addresses in no object)
 * x86-64 Linux with glibc only (the interrupted address comes from the signal's ucontext);
 * elsewhere glimpse.cpu_profile says it is unavailable.
 */
#define _GNU_SOURCE
#include "lglimpse.h"

#include <lauxlib.h>
#include <lua.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__linux__) && defined(__GLIBC__)
#define GL_PROFILER 1
#include <elf.h>
#include <link.h>
#include <stdio.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>
#endif

#ifdef GL_PROFILER
enum { CAT_BLAS, CAT_MEMORY, CAT_ENGINE, CAT_LUA, CAT_OTHER, NCAT };
static const char *cat_name[NCAT] = {"blas", "memory", "engine", "lua", "other"};

#define MAX_SAMPLES (1 << 20)
static uintptr_t *samples;
static volatile int64_t nsamples, dropped;
static int running;
static long interval_us;
static timer_t timer;
static struct sigaction old_action;

static void on_sigprof(int sig, siginfo_t *si, void *uc) {
  (void)sig;
  (void)si;
  uintptr_t ip = (uintptr_t)((ucontext_t *)uc)->uc_mcontext.gregs[REG_RIP];
  int64_t i = __atomic_fetch_add(&nsamples, 1, __ATOMIC_RELAXED);
  if (i < MAX_SAMPLES) samples[i] = ip;
  else __atomic_fetch_add(&dropped, 1, __ATOMIC_RELAXED);
}

/* the executable segments of every loaded object, with its category */
typedef struct {
  uintptr_t lo, hi, base;
  int cat;      /* CAT_* or -1: glimpse itself (named per function) */
  char path[256];
} segment_t;
static segment_t segs[256];
static int nsegs;

static int object_cat(const char *name) {
  if (!name || !*name || strstr(name, "glimpse")) return -1;  /* "" is the executable */
  if (strstr(name, "openblas") || strstr(name, "libblas") || strstr(name, "libgfortran"))
    return CAT_BLAS;
  if (strstr(name, "liblua") || strstr(name, "cjson") || strstr(name, "lpeg")) return CAT_LUA;
  if (strstr(name, "libc.so")) return CAT_MEMORY;  /* memcpy/memset/malloc, mostly */
  if (strstr(name, "libm.so")) return CAT_ENGINE;
  return CAT_OTHER;
}

static int add_object(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  (void)data;
  for (int i = 0; i < info->dlpi_phnum && nsegs < (int)(sizeof segs / sizeof *segs); i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X)) continue;
    segment_t *g = &segs[nsegs++];
    g->base = info->dlpi_addr;
    g->lo = info->dlpi_addr + ph->p_vaddr;
    g->hi = g->lo + ph->p_memsz;
    g->cat = object_cat(info->dlpi_name);
    snprintf(g->path, sizeof g->path, "%s",
             info->dlpi_name && *info->dlpi_name ? info->dlpi_name : "/proc/self/exe");
  }
  return 0;
}

/* the functions of glimpse's own object (executable or module), from its ELF symbol table */
typedef struct {
  uintptr_t lo, hi;
  const char *name;
} func_t;
static func_t *funcs;
static int nfuncs;
static char *strtab_copy;
static char funcs_path[256];

static int cmp_func(const void *a, const void *b) {
  uintptr_t x = ((const func_t *)a)->lo, y = ((const func_t *)b)->lo;
  return x < y ? -1 : x > y;
}

static void load_functions(const segment_t *g) {
  if (funcs && !strcmp(funcs_path, g->path)) return;
  free(funcs), free(strtab_copy);
  funcs = NULL, strtab_copy = NULL, nfuncs = 0;
  snprintf(funcs_path, sizeof funcs_path, "%s", g->path);
  FILE *f = fopen(g->path, "rb");
  if (!f) return;
  char *buf = NULL;
  long n = -1;
  if (!fseek(f, 0, SEEK_END) && (n = ftell(f)) > (long)sizeof(ElfW(Ehdr)) && !fseek(f, 0, SEEK_SET)) {
    buf = malloc((size_t)n);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) free(buf), buf = NULL;
  }
  fclose(f);
  if (!buf) return;
  const ElfW(Ehdr) *eh = (const ElfW(Ehdr) *)buf;
  if (memcmp(eh->e_ident, ELFMAG, SELFMAG) || eh->e_shoff == 0 ||
      eh->e_shoff + (size_t)eh->e_shnum * sizeof(ElfW(Shdr)) > (size_t)n) { free(buf); return; }
  const ElfW(Shdr) *sh = (const ElfW(Shdr) *)(buf + eh->e_shoff);
  int pick = -1;
  for (int i = 0; i < eh->e_shnum; i++)
    if (sh[i].sh_type == SHT_SYMTAB || (pick < 0 && sh[i].sh_type == SHT_DYNSYM)) pick = i;
  if (pick < 0 || sh[pick].sh_link >= eh->e_shnum) { free(buf); return; }
  const ElfW(Shdr) *st = &sh[pick], *str = &sh[st->sh_link];
  if (st->sh_offset + st->sh_size > (size_t)n || str->sh_offset + str->sh_size > (size_t)n) {
    free(buf);
    return;
  }
  size_t nsym = st->sh_size / sizeof(ElfW(Sym));
  const ElfW(Sym) *sym = (const ElfW(Sym) *)(buf + st->sh_offset);
  funcs = malloc((nsym + 1) * sizeof *funcs);
  strtab_copy = malloc(str->sh_size + 1);
  if (!funcs || !strtab_copy) { free(buf); return; }
  memcpy(strtab_copy, buf + str->sh_offset, str->sh_size);
  strtab_copy[str->sh_size] = 0;
  for (size_t i = 0; i < nsym; i++) {
    if (ELF64_ST_TYPE(sym[i].st_info) != STT_FUNC || !sym[i].st_size || !sym[i].st_value) continue;
    if (sym[i].st_name >= str->sh_size) continue;
    func_t *fn = &funcs[nfuncs++];
    fn->lo = g->base + sym[i].st_value;
    fn->hi = fn->lo + sym[i].st_size;
    fn->name = strtab_copy + sym[i].st_name;
  }
  free(buf);
  qsort(funcs, (size_t)nfuncs, sizeof *funcs, cmp_func);
}

/* the glimpse function holding ip, or NULL */
static const func_t *function_at(uintptr_t ip) {
  int lo = 0, hi = nfuncs - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    if (ip < funcs[mid].lo) hi = mid - 1;
    else if (ip >= funcs[mid].hi) lo = mid + 1;
    else return &funcs[mid];
  }
  return NULL;
}

static const segment_t *segment_at(uintptr_t ip) {
  for (int i = 0; i < nsegs; i++)
    if (ip >= segs[i].lo && ip < segs[i].hi) return &segs[i];
  return NULL;
}

/* a glimpse function's category from its name */
static int function_cat(const char *name) {
  if (!name) return CAT_ENGINE;
  if (!strncmp(name, "l_", 2) || !strncmp(name, "lg_", 3) || !strncmp(name, "m_", 2) ||
      !strncmp(name, "luaopen", 7))  /* the bindings: module functions, tensor methods */
    return CAT_LUA;
  static const char *movers[] = {"copy", "contig", "_cat", "stack", "gather", "scatter",
                                 "index", "transpose", "permute", "narrow", "expand", "clone", "reshape",
                                 "pad", "im2col", "col2im", "memcpy", "alloc", "free", NULL};
  for (int i = 0; movers[i]; i++)
    if (strstr(name, movers[i])) return CAT_MEMORY;
  return CAT_ENGINE;
}

static int cmp_ip(const void *a, const void *b) {
  uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
  return x < y ? -1 : x > y;
}

typedef struct {
  const char *name;
  int64_t n;
  int cat;
} fn_count_t;

static int cmp_count(const void *a, const void *b) {
  int64_t x = ((const fn_count_t *)a)->n, y = ((const fn_count_t *)b)->n;
  return x > y ? -1 : x < y;
}

static void stop_timer(void) {
  timer_delete(timer);
  sigaction(SIGPROF, &old_action, NULL);
  running = 0;
}

/* push {interval_s, samples, dropped, blas=, memory=, engine=, lua=, other=,
 *       top = {{name=, samples=, category=}, ...}} */
static int push_profile(lua_State *L) {
  int64_t n = nsamples < MAX_SAMPLES ? nsamples : MAX_SAMPLES;
  int64_t counts[NCAT] = {0};
  fn_count_t *fns = NULL;
  int nfns = 0, capfns = 0;
  if (n > 0) {
    nsegs = 0;                           /* again: OpenBLAS may have been loaded meanwhile */
    dl_iterate_phdr(add_object, NULL);
    qsort(samples, (size_t)n, sizeof *samples, cmp_ip);
    const func_t *prev = NULL;
    int cur = -1;
    for (int64_t i = 0; i < n; i++) {
      uintptr_t ip = samples[i];
      const segment_t *g = segment_at(ip);
      if (!g || g->cat >= 0) { counts[g ? g->cat : CAT_OTHER]++; continue; }
      if (!prev || ip < prev->lo || ip >= prev->hi || cur < 0) {
        load_functions(g);
        const func_t *fn = function_at(ip);
        const char *name = fn ? fn->name : NULL;
        prev = fn;
        cur = -1;
        for (int k = 0; k < nfns; k++)
          if (fns[k].name == name) cur = k;
        if (cur < 0) {
          if (nfns == capfns) {
            capfns = capfns ? 2 * capfns : 64;
            fn_count_t *more = realloc(fns, (size_t)capfns * sizeof *fns);
            if (!more) { free(fns); return luaL_error(L, "cpu_profile: out of memory"); }
            fns = more;
          }
          fns[nfns] = (fn_count_t){name, 0, function_cat(name)};
          cur = nfns++;
        }
      }
      fns[cur].n++;
      counts[fns[cur].cat]++;
    }
  }
  lua_createtable(L, 0, 10);
  lua_pushnumber(L, interval_us * 1e-6);
  lua_setfield(L, -2, "interval_s");
  lua_pushinteger(L, (lua_Integer)n);
  lua_setfield(L, -2, "samples");
  lua_pushinteger(L, (lua_Integer)dropped);
  lua_setfield(L, -2, "dropped");
  for (int c = 0; c < NCAT; c++) {
    lua_pushinteger(L, (lua_Integer)counts[c]);
    lua_setfield(L, -2, cat_name[c]);
  }
  if (nfns) qsort(fns, (size_t)nfns, sizeof *fns, cmp_count);
  int top = nfns < 12 ? nfns : 12;
  lua_createtable(L, top, 0);
  for (int k = 0; k < top; k++) {
    lua_createtable(L, 0, 3);
    lua_pushstring(L, fns[k].name ? fns[k].name : "?");
    lua_setfield(L, -2, "name");
    lua_pushinteger(L, (lua_Integer)fns[k].n);
    lua_setfield(L, -2, "samples");
    lua_pushstring(L, cat_name[fns[k].cat]);
    lua_setfield(L, -2, "category");
    lua_rawseti(L, -2, k + 1);
  }
  lua_setfield(L, -2, "top");
  free(fns);
  return 1;
}
#endif

/* glimpse.cpu_profile(true [, interval_us = 500]) starts sampling this thread (forgetting earlier
 * samples); glimpse.cpu_profile(false) stops and returns the profile (see the top);
 * glimpse.cpu_profile() returns it without stopping. */
static int l_cpu_profile(lua_State *L) {
#ifdef GL_PROFILER
  if (lua_isnoneornil(L, 1)) {
    if (!samples) return luaL_error(L, "cpu_profile: not started (cpu_profile(true) first)");
    return push_profile(L);
  }
  if (!lua_isboolean(L, 1))
    return luaL_error(L, "cpu_profile: argument #1 (on) must be a boolean or nil, got %s",
                      luaL_typename(L, 1));
  if (lua_toboolean(L, 1)) {
    lua_Integer us = luaL_optinteger(L, 2, 500);
    if (us < 50 || us > 1000000)
      return luaL_error(L, "cpu_profile: argument #2 (interval_us) must be in [50, 1000000], "
                           "got %d", (int)us);
    if (running) stop_timer();
    if (!samples && !(samples = malloc(MAX_SAMPLES * sizeof *samples)))
      return luaL_error(L, "cpu_profile: out of memory");
    nsamples = dropped = 0;
    interval_us = (long)us;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigprof;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGPROF, &sa, &old_action))
      return luaL_error(L, "cpu_profile: cannot install the SIGPROF handler");
    struct sigevent ev;
    memset(&ev, 0, sizeof ev);
    ev.sigev_notify = SIGEV_THREAD_ID;
    ev.sigev_signo = SIGPROF;
    ev._sigev_un._tid = (pid_t)syscall(SYS_gettid);
    struct itimerspec it = {{0, interval_us * 1000}, {0, interval_us * 1000}};
    if (timer_create(CLOCK_MONOTONIC, &ev, &timer)) {
      sigaction(SIGPROF, &old_action, NULL);
      return luaL_error(L, "cpu_profile: cannot create the profiling timer");
    }
    if (timer_settime(timer, 0, &it, NULL)) {
      timer_delete(timer);
      sigaction(SIGPROF, &old_action, NULL);
      return luaL_error(L, "cpu_profile: cannot start the profiling timer");
    }
    running = 1;
    lua_pushboolean(L, 1);
    return 1;
  }
  if (!samples) return luaL_error(L, "cpu_profile: not started (cpu_profile(true) first)");
  if (running) stop_timer();
  return push_profile(L);
#else
  return luaL_error(L, "cpu_profile: unavailable on this platform (x86-64 Linux with glibc only)");
#endif
}

void lg_open_profile(lua_State *L, int module_idx, int methods_idx) {
  (void)methods_idx;
  lua_pushcfunction(L, l_cpu_profile);
  lua_setfield(L, module_idx, "cpu_profile");
}
