-- glimpse-scm-1.rockspec -- glimpse as a LuaRocks package, built by the Makefile.
--
--   luarocks --lua-version 5.4 make                      (from a checkout: nothing is fetched)
--   luarocks --lua-version 5.4 --tree DIR make --deps-mode=none
--                                   (offline, using Debian's lua-cjson and lua-argparse)
--
-- It runs `make all` and `make install-lua`: the Lua library (LUADIR/glimpse, with the
-- datasets as glimpse.datasets.*), glimpse.so (LIBDIR: the C core a stock lua5.4 loads) and
-- the `glimpse` executable (BINDIR) go into the tree; the shipped models, the docs and the
-- MPI plugin stay in the rock's own folder (`luarocks show --rock-dir glimpse`): point
-- GLIMPSE_MODELS at its share/glimpse/models (glimpse.captioner's pretrained models) and
-- GLIMPSE_MPI_PLUGIN at its mpi/libglimpse_mpi.so (glimpse.dist).  The engine for C programs
-- (libglimpse, glimpse.h, glimpse.pc) is `make install`'s, not the rock's (docs/api/c.md).
-- The Makefile keeps its own compiler flags (-O3 -march=native).
rockspec_format = "3.0"
package = "glimpse"
version = "scm-1"
source = {
  url = "git+file://.",   -- this checkout: `luarocks make` builds in place, fetches nothing
}
description = {
  summary = "A Lua-scriptable sandbox for attention experiments",
  detailed = [[
A C engine (float32 tensors, reverse-mode autograd, CNN features, recurrent cells, attention
primitives) with Lua 5.4 bindings and a library of attention models, training and reports.]],
  labels = {"attention", "autograd", "neural networks"},
}
dependencies = {
  "lua >= 5.4",
  "lua-cjson",
  "argparse",
}
build = {
  type = "make",
  build_target = "all",
  install_target = "install-lua",
  install_variables = {
    PREFIX = "$(PREFIX)",
    BINDIR = "$(BINDIR)",
    LUA_CDIR = "$(LIBDIR)",
    LUA_DIR = "$(LUADIR)",
    PLUGINDIR = "$(PREFIX)/mpi",   -- beside, not in, LIBDIR: that one is deployed as C modules
  },
}
