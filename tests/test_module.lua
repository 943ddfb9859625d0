-- tests/test_module.lua -- the module loads into a stock lua5.4 with require "glimpse", gets
-- the same BLAS core as the executable, and finds its Lua sub-modules.
local lu = require "luaunit"
local glimpse = require "glimpse"

local T = {}

local function build_dir()
  local exe = arg and arg[-1] or "build/glimpse"
  return exe:match("^(.*)/[^/]*$") or "."
end

-- LUA_PATH as docs/api/repl.md shows; INSTALLED_PATH adds "?/init.lua" over the same folder, as a
-- stock lua5.4's default path does over the folder `make install` fills
local DEV_PATH = "bindings/?.lua;bindings/?/init.lua;./?.lua;;"
local INSTALLED_PATH = "bindings/?.lua;bindings/?/init.lua;;"

local function run_stock(code, lua_path)
  local cmd = string.format(
    "LUA_CPATH=%q LUA_PATH=%q lua5.4 -e %q 2>&1",
    build_dir() .. "/?.so;;", lua_path or DEV_PATH, code)
  local p = io.popen(cmd)
  local out = p:read("a")
  local ok = p:close()
  return ok, out
end

local function stock_usable()
  if os.getenv("GLIMPSE_SANITIZED") then
    lu.skip("a sanitized glimpse.so cannot load into an uninstrumented lua5.4")
  end
  local f = io.open(build_dir() .. "/glimpse.so")
  if not f then lu.skip("no glimpse.so next to the executable") end
  f:close()
end

function T.test_stock_lua_requires_the_module_and_computes()
  stock_usable()
  local ok, out = run_stock([[local g = require "glimpse"
    local x = g.tensor({{1, 2}, {3, 4}})
    io.write(x:matmul(x):sum():item())]])
  lu.assertTrue(ok, out)
  lu.assertEquals(tonumber(out), 54)
end

function T.test_stock_lua_gets_the_same_blas_core_as_the_executable()
  stock_usable()
  local ok, out = run_stock([[io.write(require("glimpse").blas_info().core)]])
  lu.assertTrue(ok, out)
  lu.assertEquals(out, glimpse.blas_info().core)
end

function T.test_stock_lua_finds_lua_submodules()
  stock_usable()
  local ok, out = run_stock([[local g = require "glimpse"
    io.write(tostring(g.gradcheck(function(a) return a:tanh() end, {g.randn(3):requires_grad()})))]])
  lu.assertTrue(ok, out)
  lu.assertEquals(out, "true")
end

function T.test_stock_lua_finds_the_nn_and_models_packages()
  -- glimpse.nn and glimpse.models are folders (nn/init.lua, models/init.lua); each file of
  -- them may be required first and gives the classes the package publishes
  stock_usable()
  for _, path in ipairs({DEV_PATH, INSTALLED_PATH}) do
    local ok, out = run_stock([[local rnn = require "glimpse.nn.rnn"
      local g = require "glimpse"
      local cap = require "glimpse.models.captioner"
      io.write(tostring(rnn.LSTM == g.nn.LSTM), " ", tostring(g.nn.Linear ~= nil), " ",
               tostring(g.models.Captioner == cap.Captioner), " ",
               tostring(g.models.resnet18 ~= nil))]], path)
    lu.assertTrue(ok, out)
    lu.assertEquals(out, "true true true true", path)
  end
end

function T.test_the_library_init_is_the_module_and_the_c_core_comes_from_glimpse_so()
  -- require "glimpse" finds glimpse/init.lua on the path; it loads the C core as
  -- "glimpse.core", which a stock lua5.4 finds as luaopen_glimpse_core inside glimpse.so
  stock_usable()
  local ok, out = run_stock([[
    io.write(tostring(package.searchpath("glimpse", package.path)), " ")
    local g = require "glimpse"
    io.write(type(g.tensor), " ", tostring(package.loaded.glimpse == g), " ",
             tostring(require("glimpse.core").tensor == g.tensor), " ",
             type(g.init.xavier_uniform_), " ", tostring(g.init == require "glimpse.nn.weight_init"))]],
    INSTALLED_PATH)
  lu.assertTrue(ok, out)
  lu.assertEquals(out, "bindings/glimpse/init.lua function true true function true")
end

function T.test_old_require_names_give_the_same_modules()
  lu.assertIs(require "glimpse.train", glimpse.train)
  lu.assertIs(require "glimpse.optim_base", require "glimpse.optim.base")
  lu.assertIs(require "glimpse.captioner", glimpse.captioner)
  lu.assertIs(require "datasets.vocab", glimpse.data.Vocab)
end

return T
