-- tests/test_install.lua -- glimpse installs the way Lua and C people install things:
-- `luarocks make` from the checkout into a tree a stock lua5.4 then uses; `make install` with
-- DESTDIR puts the engine (libglimpse, glimpse.h, glimpse.pc) where pkg-config finds it, and
-- the C example (examples/linear_grad.c) builds and runs against it; `make uninstall` takes
-- every file back.  A missing tool (luarocks, pkg-config) skips its test with a message, and
-- fails under CI=true (`make test` installs luarocks).
--
-- luarocks runs offline with --deps-mode=none: the rockspec names lua-cjson and argparse,
-- which Debian provides as system packages (lua-cjson, lua-argparse) outside any rocks tree,
-- so luarocks would otherwise try to fetch them.
local lu = require "luaunit"
local H = require "tests.helpers"

local T = {}

local EXAMPLE = "examples/linear_grad.c"
local EXPECT_LOSS = "loss 0.565763"             -- what linear_grad prints (engine-computed)

local function build_dir()
  local exe = arg and arg[-1] or "build/glimpse"
  return exe:match("^(.*)/[^/]*$") or "."
end

local function have(tool)
  local ok = H.run("command -v " .. tool .. " > /dev/null")
  return ok
end

local function need(tool, package)
  if have(tool) then return end
  local msg = string.format("%s is not installed (Debian package %s; make test installs it)",
                            tool, package)
  if os.getenv("CI") == "true" then lu.fail(msg) end
  lu.skip(msg .. ": skipped")
end

local function plain_build()
  -- a sanitized build cannot load into (or be linked by) uninstrumented programs
  if os.getenv("GLIMPSE_SANITIZED") then lu.skip("sanitized build: install tests skipped") end
end

--- run a shell command; fail the test with its output when it fails
local function sh(cmd)
  local ok, code, out = H.run(cmd)
  lu.assertTrue(ok, string.format("`%s` exited %s:\n%s", cmd, tostring(code), out:sub(-3000)))
  return out
end

--- every file and link below dir (directories left out), relative to it, sorted
local function files_below(dir)
  local out = sh("cd " .. H.sh_quote(dir) .. " && find . ! -type d | sort")
  local list = {}
  for line in out:gmatch("[^\n]+") do list[#list + 1] = line:sub(3) end
  return list
end

function T.test_luarocks_make_installs_a_tree_a_stock_lua_uses()
  plain_build()
  need("luarocks", "luarocks")
  lu.assertEquals(build_dir(), "build", "the rockspec builds into build/")
  local tree, home = H.tmpdir(), H.tmpdir()
  local env = "HOME=" .. H.sh_quote(home) .. " "   -- luarocks' cache and config stay in here
  sh(env .. "nice luarocks --lua-version 5.4 --tree " .. H.sh_quote(tree)
     .. " make --deps-mode=none glimpse-scm-1.rockspec")
  for _, f in ipairs({"bin/glimpse", "lib/lua/5.4/glimpse.so", "share/lua/5.4/glimpse/init.lua",
                      "share/lua/5.4/glimpse/nn/init.lua", "share/lua/5.4/glimpse/datasets"}) do
    lu.assertNotNil(io.open(tree .. "/" .. f), "the rock did not install " .. f)
  end
  local paths = sh(env .. "luarocks --lua-version 5.4 --tree " .. H.sh_quote(tree) .. " path")
  -- a stock lua5.4 run from elsewhere, with only the tree's paths (and Debian's)
  local script = [[
local g = require "glimpse"
g.manual_seed(1)
local lin = g.nn.Linear(3, 2)
local loss = lin(g.tensor({{1, 2, 3}})):tanh():sum(); loss:backward()
print(package.searchpath("glimpse", package.path), package.searchpath("glimpse", package.cpath), #lin.weight.grad:totable())]]
  local out = sh(paths:gsub("\n", "; ") .. " cd " .. H.sh_quote(home) .. " && lua5.4 -e "
                 .. H.sh_quote(script))
  local lua_file, c_file, rows = out:match("^(%S+)%s+(%S+)%s+(%d+)")
  lu.assertEquals(lua_file, tree .. "/share/lua/5.4/glimpse/init.lua", out)
  lu.assertEquals(c_file, tree .. "/lib/lua/5.4/glimpse.so", out)
  lu.assertEquals(tonumber(rows), 2, out)
  -- the rock's own registry knows it, and removes it
  sh(env .. "luarocks --lua-version 5.4 --tree " .. H.sh_quote(tree) .. " remove glimpse")
  lu.assertNil(io.open(tree .. "/lib/lua/5.4/glimpse.so"), "luarocks remove left glimpse.so")
end

function T.test_make_install_then_the_c_example_builds_through_pkg_config_and_uninstall_empties()
  plain_build()
  need("pkg-config", "pkg-config")
  local dest = H.tmpdir()
  local make = "nice make --no-print-directory BUILD=" .. H.sh_quote(build_dir())
               .. " PREFIX=/usr/local DESTDIR=" .. H.sh_quote(dest)
  sh(make .. " install")
  local root = dest .. "/usr/local"
  -- the old layout is all there, and the engine beside it
  for _, f in ipairs({"bin/glimpse", "lib/lua/5.4/glimpse.so", "share/lua/5.4/glimpse/init.lua",
                      "share/lua/5.4/glimpse/datasets", "share/glimpse/docs/api/c.md",
                      "lib/libglimpse.a", "lib/libglimpse.so", "lib/libglimpse.so.0",
                      "include/glimpse.h", "lib/pkgconfig/glimpse.pc"}) do
    lu.assertNotNil(io.open(root .. "/" .. f), "make install did not write " .. f)
  end
  lu.assertNil(io.open(root .. "/include/glimpse_internal.h"), "the internal header is private")
  if io.open(build_dir() .. "/libglimpse_mpi.so") then
    lu.assertNotNil(io.open(root .. "/lib/glimpse/libglimpse_mpi.so"), "no MPI plugin installed")
  end
  lu.assertStrContains(sh("readelf -d " .. H.sh_quote(root .. "/lib/libglimpse.so")),
                       "Library soname: [libglimpse.so.0]")

  -- the C example through pkg-config, against the shared library and against the archive
  local pc = "PKG_CONFIG_PATH=" .. H.sh_quote(root .. "/lib/pkgconfig") .. " pkg-config --define-prefix "
  lu.assertEquals(sh(pc .. "--modversion glimpse"):match("%S+"), "0.1.0")
  local exe, exe_static = dest .. "/linear_grad", dest .. "/linear_grad_static"
  sh("cc -std=c11 -Wall -Wextra -Werror " .. EXAMPLE .. " -o " .. H.sh_quote(exe)
     .. " $(" .. pc .. "--cflags --libs glimpse)")
  lu.assertStrContains(sh("readelf -d " .. H.sh_quote(exe)), "[libglimpse.so.0]")
  local out = sh("LD_LIBRARY_PATH=" .. H.sh_quote(root .. "/lib") .. " " .. H.sh_quote(exe))
  lu.assertStrContains(out, EXPECT_LOSS)
  lu.assertStrContains(out, "matmul: [2,3] x [2,3]: inner dims 3 != 2")
  lu.assertStrContains(out, "live bytes after release: 0")
  sh("cc -std=c11 " .. EXAMPLE .. " -o " .. H.sh_quote(exe_static) .. " $(" .. pc
     .. "--cflags glimpse) " .. H.sh_quote(root .. "/lib/libglimpse.a") .. " $(" .. pc
     .. "--static --libs-only-l glimpse | sed 's/-lglimpse//')")
  lu.assertStrContains(sh(H.sh_quote(exe_static)), EXPECT_LOSS)

  -- uninstall: not one glimpse file left (empty standard folders may stay)
  sh(make .. " uninstall")
  lu.assertEquals(files_below(dest), {"linear_grad", "linear_grad_static"})
end

return T
