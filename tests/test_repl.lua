-- tests/test_repl.lua -- the `glimpse` executable (bindings/main.c, completion.c): options,
-- scripts, the REPL, Tab completion.
--
-- The executable is driven as a subprocess: the runner runs this suite as
-- `<exe> tests/run.lua --one tests/test_repl.lua`, so arg[-1] names the executable (checked
-- below).  Piped stdin exercises the REPL's evaluation (auto-print, continuation lines, errors
-- that do not end the session); a pseudo-terminal made by util-linux `script` exercises the
-- readline side (tab completion, the history file, Ctrl-C at the prompt and while running).
-- Completion itself is checked in this process through the hidden global _glimpse_complete.
local lu = require "luaunit"
local glimpse = require "glimpse"
local helpers = require "tests.helpers"
local sh_quote, tmpdir, rmdir = helpers.sh_quote, helpers.tmpdir, helpers.rmdir
local read_file, write_file = helpers.read_file, helpers.write_file

local T = {}

local PTY_TIMEOUT_S = 10     -- how long a terminal session may take to show what we wait for
local POLL_S = 0.05

-- ---------------------------------------------------------------------------------------
-- helpers

-- The executable under test: arg[-1] when that is a glimpse (it answers with its version).
local function find_exe()
  local exe = arg and arg[-1]
  if exe then
    local p = io.popen(sh_quote(exe) .. " -v 2>/dev/null")
    local out = p:read("a")
    p:close()
    if out:match("^glimpse ") then return exe end
  end
  error("test_repl: run this suite with the glimpse executable (arg[-1] = " ..
        tostring(exe) .. " is not one)")
end

local EXE = find_exe()

-- Run the executable with shell-quoted args and optional stdin text.
-- Returns stdout, stderr, exit code.
local function run(args, stdin)
  local d = tmpdir()
  local cmd = {sh_quote(EXE)}
  for _, a in ipairs(args or {}) do cmd[#cmd + 1] = sh_quote(a) end
  local input = "/dev/null"
  if stdin then
    input = d .. "/in"
    write_file(input, stdin)
  end
  local line = string.format("%s < %s > %s 2> %s", table.concat(cmd, " "), sh_quote(input),
                             sh_quote(d .. "/out"), sh_quote(d .. "/err"))
  local ok, how, code = os.execute(line)
  local out, err = read_file(d .. "/out"), read_file(d .. "/err")
  rmdir(d)
  if how == "exit" then return out, err, code end
  return out, err, ok and 0 or 128 + (code or 0)
end

-- find plain text, failing with the whole output when missing; returns the end position
local function assert_has(s, what, from)
  local a, b = s:find(what, from or 1, true)
  if not a then lu.fail(string.format("expected %q in:\n%s", what, s)) end
  return b
end

local function script_available()
  return os.execute("command -v script > /dev/null 2>&1") == true
end

-- A terminal session: util-linux `script` gives the executable a pseudo-terminal; its stdin
-- is a fifo we write keystrokes into, its output a file we poll.
local Pty = {}
Pty.__index = Pty

local function pty_start(hist)
  local self = setmetatable({dir = tmpdir(), pos = 1}, Pty)
  local q = function(name) return sh_quote(self.dir .. "/" .. name) end
  self.fifo, self.out, self.rc = self.dir .. "/in", self.dir .. "/out", self.dir .. "/rc"
  assert(os.execute("mkfifo " .. q("in")))
  -- the background shell keeps none of our descriptors: the runner reads our stdout to its end
  local cmd = string.format("(GLIMPSE_HISTORY=%s TERM=xterm script -qec %s /dev/null" ..
                            " < %s > %s 2>&1 & echo $! > %s; wait $!; echo $? > %s)" ..
                            " < /dev/null > /dev/null 2>&1 &",
                            sh_quote(hist), sh_quote(sh_quote(EXE)), q("in"), q("out"), q("pid"),
                            q("rc"))
  assert(os.execute(cmd))
  self.w = assert(io.open(self.fifo, "w"))   -- waits for `script` to open its stdin
  self.w:setvbuf("no")
  return self
end

function Pty:send(keys)
  self.w:write(keys)
  self.w:flush()
end

-- the output as text: no carriage returns, no terminal control sequences
function Pty:screen()
  local s = read_file(self.out) or ""
  return (s:gsub("\27%[%??[%d;]*%a", ""):gsub("\r", ""))
end

-- Wait until `what` shows in the output after the last thing waited for.
function Pty:expect(what)
  local deadline = os.time() + PTY_TIMEOUT_S
  while true do
    local s = self:screen()
    local a, b = s:find(what, self.pos, true)
    if a then
      self.pos = b + 1
      return
    end
    if os.time() > deadline then
      error(string.format("terminal: waited %d s for %q; the screen so far:\n%s",
                          PTY_TIMEOUT_S, what, s), 2)
    end
    os.execute("sleep " .. POLL_S)
  end
end

-- Close the keyboard, wait for the end (ending it if it hangs); the exit code and screen.
function Pty:finish()
  self.w:close()
  local deadline = os.time() + PTY_TIMEOUT_S
  local rc = read_file(self.rc)
  while not (rc and rc:match("%d")) and os.time() <= deadline do
    os.execute("sleep " .. POLL_S)
    rc = read_file(self.rc)
  end
  if not (rc and rc:match("%d")) then
    local pid = (read_file(self.dir .. "/pid") or ""):match("%d+")
    if pid then os.execute("kill " .. pid .. " 2> /dev/null") end
  end
  local out = self:screen()
  rmdir(self.dir)
  return tonumber(rc and rc:match("%d+")), out
end

-- Run fn(pty) in a terminal session that always ends; returns the exit code and screen.
local function with_pty(hist, fn)
  local p = pty_start(hist)
  local ok, err = pcall(fn, p)
  if not ok then
    p:send("\3\4")
    p:finish()
    error(err, 0)
  end
  return p:finish()
end

-- ---------------------------------------------------------------------------------------
-- the REPL, fed through a pipe

function T.test_repl_prints_the_value_of_an_expression()
  local out = run({"-i", "/dev/null"}, "1+1\nreturn 2*3\n")
  assert_has(out, "\n2\n6\n")
end

function T.test_repl_prints_a_caption_as_one_line_and_a_note_for_an_unfamiliar_image()
  local out, err = run({"-i", "/dev/null"},
    'cap = glimpse.captioner.pretrained("scenes-soft")\n' ..
    'scene = glimpse.data.scenes.generate{split = "test", n = 1, seed = 7}\n' ..
    'cap:caption(scene:image(1))\n' ..
    'cap:caption(glimpse.rand(1, 128, 128))\n' ..
    'cap:caption(glimpse.rand(1, 128, 128), {resize = true})\n')
  local cap = glimpse.captioner.pretrained("scenes-soft")
  local want = cap:caption(glimpse.data.scenes.generate{split = "test", n = 1, seed = 7}:image(1))
  local lines = {}
  for l in out:gsub("^glimpse[^\n]*\n", ""):gmatch("[^\n]+") do lines[#lines + 1] = l end
  lu.assertEquals(lines[1], want)                   -- the caption alone, no maps
  lu.assertEquals(#lines, 2)                        -- the second: the resized noise's caption
  assert_has(err, "the model takes 1x64x64")        -- 128x128 without resize: an error
  assert_has(err, "Captioner:caption: note: the image is unlike the images this model was trained on")
  assert_has(err, "knows only 64x64 grey scenes")
end

function T.test_repl_prints_every_result_of_a_multiple_return()
  local out = run({"-i", "/dev/null"}, "return 1, 'a', nil\n")
  assert_has(out, "1\ta\tnil\n")
end

function T.test_repl_prints_tensors_with_tostring()
  local out = run({"-i", "/dev/null"}, "x = glimpse.zeros(2, 3)\nx\n")
  assert_has(out, tostring(glimpse.zeros(2, 3)))
end

function T.test_repl_statements_print_nothing_and_globals_persist()
  local out = run({"-i", "/dev/null"}, "y = 41\ny + 1\n")
  lu.assertEquals((out:gsub("^glimpse[^\n]*\n", "")), "42\n")
end

function T.test_repl_error_does_not_end_the_session()
  local out, err, code = run({"-i", "/dev/null"},
                             'error("boom")\nglimpse.zeros(-1)\nx = = 1\nprint("alive")\n')
  assert_has(err, "stdin:1: boom")
  assert_has(err, "zeros: size -1 of dim 1 is negative")
  assert_has(err, "unexpected symbol")
  assert_has(err, "stack traceback:")
  assert_has(out, "alive\n")
  lu.assertEquals(code, 0)
end

function T.test_repl_error_object_that_is_not_a_string_is_reported()
  local _, err = run({"-i", "/dev/null"}, "error({})\nerror(setmetatable({}, " ..
                     "{__tostring = function() return 'custom' end}))\n")
  assert_has(err, "(error object is a table value)")
  assert_has(err, "custom")
end

function T.test_repl_continues_an_incomplete_statement_on_more_lines()
  local out = run({"-i", "/dev/null"}, "for i = 1, 3 do\nio.write(i, ' ')\nend\nprint('|')\n")
  assert_has(out, "1 2 3 |\n")
end

function T.test_repl_incomplete_statement_at_end_of_input_is_a_syntax_error()
  local _, err, code = run({"-i", "/dev/null"}, "for i = 1, 2 do\n")
  assert_has(err, "'end' expected")
  lu.assertEquals(code, 0)
end

function T.test_repl_runs_after_the_script_given_with_i()
  local d = tmpdir()
  write_file(d .. "/s.lua", "z = 5\n")
  local out = run({"-i", d .. "/s.lua"}, "z * 2\n")
  rmdir(d)
  assert_has(out, "\n10\n")
end

function T.test_repl_after_a_failed_script_with_i_sees_its_globals_and_exits_1()
  local d = tmpdir()
  write_file(d .. "/s.lua", "partial = 'kept'\nerror('midway')\n")
  local out, err, code = run({"-i", d .. "/s.lua"}, "partial\n")
  rmdir(d)
  assert_has(err, "s.lua:2: midway")
  assert_has(out, "\nkept\n")
  lu.assertEquals(code, 1)
end

-- ---------------------------------------------------------------------------------------
-- scripts and options

function T.test_script_gets_arg_table_and_varargs_like_lua()
  local d = tmpdir()
  local s = d .. "/s.lua"
  write_file(s, "print(arg[0], arg[1], arg[2], #arg, arg[-1], select('#', ...), ...)\n")
  local out, _, code = run({s, "a", "b c"})
  rmdir(d)
  lu.assertEquals(code, 0)
  lu.assertEquals(out, table.concat({s, "a", "b c", "2", EXE, "2", "a", "b c"}, "\t") .. "\n")
end

function T.test_script_error_prints_a_traceback_and_exits_1()
  local d = tmpdir()
  local s = d .. "/bad.lua"
  write_file(s, "local function f() error('broken') end\nf()\n")
  local out, err, code = run({s})
  rmdir(d)
  lu.assertEquals(code, 1)
  lu.assertEquals(out, "")
  assert_has(err, "bad.lua:1: broken")
  assert_has(err, "stack traceback:")
  assert_has(err, "in local 'f'")
end

function T.test_script_syntax_error_and_missing_script_exit_1()
  local d = tmpdir()
  write_file(d .. "/syn.lua", "x = = 1\n")
  local _, err, code = run({d .. "/syn.lua"})
  lu.assertEquals(code, 1)
  assert_has(err, "unexpected symbol")
  _, err, code = run({d .. "/missing.lua"})
  lu.assertEquals(code, 1)
  assert_has(err, "cannot open")
  rmdir(d)
end

function T.test_os_exit_code_comes_through()
  local _, _, code = run({"-e", "os.exit(3)"})
  lu.assertEquals(code, 3)
end

function T.test_e_runs_each_chunk_in_order()
  local out, _, code = run({"-e", "a = 1", "-e", "print(a + 1)", "-eprint(a + 2)"})
  lu.assertEquals(code, 0)
  lu.assertEquals(out, "2\n3\n")
end

function T.test_e_error_exits_1_and_skips_the_rest()
  local out, err, code = run({"-e", "error('nope')", "-e", "print('not reached')"})
  lu.assertEquals(code, 1)
  lu.assertEquals(out, "")
  assert_has(err, "(command line):1: nope")
end

function T.test_e_runs_before_the_script_and_the_script_sees_its_globals()
  local d = tmpdir()
  write_file(d .. "/s.lua", "print(g)\n")
  local out = run({"-e", "g = 'set by -e'", d .. "/s.lua"})
  rmdir(d)
  lu.assertEquals(out, "set by -e\n")
end

function T.test_l_requires_a_module_into_a_global()
  local out = run({"-l", "luaunit", "-e", "print(type(luaunit), luaunit == require 'luaunit')"})
  lu.assertEquals(out, "table\ttrue\n")
end

function T.test_stdin_runs_as_a_script_when_it_is_not_a_terminal()
  local out, _, code = run({}, "print(6 * 7)\n")
  lu.assertEquals(out, "42\n")
  lu.assertEquals(code, 0)
  -- a script, not the REPL: a bare expression is a syntax error, and an error exits 1
  local _, err
  _, err, code = run({}, "1 + 1\n")
  lu.assertEquals(code, 1)
  assert_has(err, "stdin:1: unexpected symbol")
end

function T.test_dash_reads_the_script_from_stdin_with_args()
  local out, _, code = run({"-", "a", "b"}, "print(arg[0], ...)\n")
  lu.assertEquals(code, 0)
  lu.assertEquals(out, "-\ta\tb\n")
end

function T.test_options_after_the_script_are_its_arguments()
  local d = tmpdir()
  local s = d .. "/s.lua"
  write_file(s, "print(...)\n")
  local out = run({s, "-e", "-v"})
  local out2 = run({"--", s, "-i"})
  rmdir(d)
  lu.assertEquals(out, "-e\t-v\n")
  lu.assertEquals(out2, "-i\n")
end

function T.test_v_prints_version_lua_and_blas()
  local out, _, code = run({"-v"})
  lu.assertEquals(code, 0)
  local info = glimpse.blas_info()
  lu.assertStrMatches(out, "glimpse " .. glimpse.version:gsub("%.", "%%.") ..
                           " %(Lua 5%.4[%.%d]*%) %-%- OpenBLAS .*\n")
  assert_has(out, info.core)
end

function T.test_h_prints_usage_and_exits_0()
  local out, _, code = run({"-h"})
  lu.assertEquals(code, 0)
  assert_has(out, "usage:")
  assert_has(out, "-e stat")
end

function T.test_bad_options_print_usage_and_exit_1()
  for _, args in ipairs({{"-x"}, {"-e"}, {"-l"}, {"-ix"}}) do
    local out, err, code = run(args)
    lu.assertEquals(code, 1, table.concat(args, " "))
    lu.assertEquals(out, "")
    assert_has(err, "usage:")
  end
end

function T.test_glimpse_is_preloaded_as_a_global()
  local out = run({"-e", "print(type(glimpse), glimpse == require 'glimpse')"})
  lu.assertEquals(out, "table\ttrue\n")
end

function T.test_package_paths_cover_source_tree_install_dir_and_debian_c_modules()
  local out = run({"-e", "print(package.path) print(package.cpath)"})
  assert_has(out, "/bindings/?.lua;")
  assert_has(out, "/bindings/?/init.lua;")
  assert_has(out, "/share/lua/5.4/?.lua;")
  assert_has(out, "/lua/5.4/?.so")
  -- lua-cjson is a Debian C module the scripts use
  local cj = run({"-e", "print(require('cjson').encode({1, 2}))"})
  lu.assertEquals(cj, "[1,2]\n")
end

-- ---------------------------------------------------------------------------------------
-- completion (the function behind readline's Tab)

local complete = _glimpse_complete   -- luacheck: ignore (a global the executable registers)

local function set_of(t)
  local s = {}
  for _, v in ipairs(t) do s[v] = true end
  return s
end

local function completions(text)
  lu.assertIsFunction(complete, "_glimpse_complete is registered by the glimpse executable")
  return complete(text)
end

function T.test_complete_globals_and_keywords()
  local got = set_of(completions("gli"))
  lu.assertTrue(got.glimpse)
  lu.assertEquals(completions("functio"), {"function"})
  lu.assertEquals(completions("tostr"), {"tostring"})
end

function T.test_complete_module_functions()
  local got = set_of(completions("glimpse.ze"))
  lu.assertTrue(got["glimpse.zeros"])
  for name in pairs(got) do lu.assertStrContains(name, "glimpse.ze") end
  lu.assertTrue(set_of(completions("string.fo"))["string.format"])
end

function T.test_complete_nested_table_fields_sorted()
  _repl_t = {inner = {deep = {leaf = 1, leap = 2, other = 3, [1] = "x", ["not a name"] = 4}}}
  local got = completions("_repl_t.inner.deep.le")
  local all = completions("_repl_t.inner.deep.")
  _repl_t = nil
  lu.assertEquals(got, {"_repl_t.inner.deep.leaf", "_repl_t.inner.deep.leap"})
  lu.assertEquals(all, {"_repl_t.inner.deep.leaf", "_repl_t.inner.deep.leap",
                        "_repl_t.inner.deep.other"})
end

function T.test_complete_glimpse_nn_classes_when_nn_exists()
  local ok = pcall(require, "glimpse.nn")
  lu.skipIf(not ok, "glimpse.nn is not there yet")
  lu.assertTrue(set_of(completions("glimpse.nn.Li"))["glimpse.nn.Linear"])
end

function T.test_complete_tensor_methods_after_colon_and_dot()
  _repl_x = glimpse.zeros(2)
  local methods = getmetatable(_repl_x).__methods
  lu.assertIs(glimpse.Tensor, methods)
  local want = {}
  for k, v in pairs(methods) do
    if type(k) == "string" and type(v) == "function" and k:match("^%a[%w_]*$") then
      want[#want + 1] = "_repl_x:" .. k
    end
  end
  table.sort(want)
  local colon, numel, dot = completions("_repl_x:"), completions("_repl_x:num"),
                            completions("_repl_x.si")
  _repl_x = nil
  lu.assertEquals(colon, want)
  lu.assertEquals(numel, {"_repl_x:numel"})
  lu.assertTrue(set_of(dot)["_repl_x.size"])
end

function T.test_complete_follows_the_index_chain_of_classes()
  local Base = {}
  Base.__index = Base
  function Base.base_method() end
  local Class = setmetatable({}, Base)
  Class.__index = Class
  function Class.method() end
  Class.constant = 1
  _repl_obj = setmetatable({own = true}, Class)
  local dot, colon = completions("_repl_obj."), completions("_repl_obj:")
  local dunder = completions("_repl_obj.__")
  _repl_obj = nil
  lu.assertEquals(dot, {"_repl_obj.base_method", "_repl_obj.constant", "_repl_obj.method",
                        "_repl_obj.own"})
  -- after ':' only what can be called
  lu.assertEquals(colon, {"_repl_obj:base_method", "_repl_obj:method"})
  -- "_" names only when asked for
  lu.assertEquals(dunder, {"_repl_obj.__index"})
end

function T.test_complete_hides_private_names_until_an_underscore_is_typed()
  _repl_p = {_private = 1, public = 2}
  local plain, under = completions("_repl_p."), completions("_repl_p._")
  _repl_p = nil
  lu.assertEquals(plain, {"_repl_p.public"})
  lu.assertEquals(under, {"_repl_p._private"})
end

function T.test_complete_lists_names_a_metatable_declares_in_complete()
  _repl_lazy = setmetatable({}, {__index = function() end, __complete = {later = true}})
  _repl_list = setmetatable({}, {__index = function() end, __complete = {"alpha", "beta"}})
  local lazy, list = completions("_repl_lazy.la"), completions("_repl_list.")
  _repl_lazy, _repl_list = nil, nil
  lu.assertEquals(lazy, {"_repl_lazy.later"})
  lu.assertEquals(list, {"_repl_list.alpha", "_repl_list.beta"})
end

function T.test_complete_asks_a_complete_function_and_a_class_behind_an_index_function()
  -- an object whose fields live in a side table and whose class answers through a function
  local Class = {}
  function Class.method() end
  Class.__index = function(self, k) return rawget(self, "_fields")[k] or Class[k] end
  Class.__complete = function(self)
    local names = {}
    for k in pairs(rawget(self, "_fields")) do names[#names + 1] = k end
    return names
  end
  _repl_obj = setmetatable({_fields = {weight = 1, fn = print}}, Class)
  local dot, colon = completions("_repl_obj."), completions("_repl_obj:")
  _repl_obj = nil
  lu.assertEquals(dot, {"_repl_obj.fn", "_repl_obj.method", "_repl_obj.weight"})
  lu.assertEquals(colon, {"_repl_obj:fn", "_repl_obj:method"})
end

function T.test_complete_string_methods_on_a_string_value()
  _repl_s = "abc"
  local got = completions("_repl_s:up")
  _repl_s = nil
  lu.assertEquals(got, {"_repl_s:upper"})
end

function T.test_complete_gives_nothing_for_bad_paths_and_never_raises()
  _repl_bad = setmetatable({}, {__index = function() error("boom") end})
  for _, text in ipairs({"nosuch.x", "a.b:c.d", "_repl_bad.x.y", "1.5", "x[1].", "glimpse..z",
                         "glimpse:zeros.x"}) do
    lu.assertEquals(completions(text), {}, text)
  end
  _repl_bad = nil
end

-- ---------------------------------------------------------------------------------------
-- the REPL on a terminal (readline)

function T.test_terminal_tab_completes_and_the_history_file_keeps_entries()
  lu.skipIf(not script_available(), "util-linux `script` is not installed")
  local d = tmpdir()
  local hist = d .. "/hist"
  write_file(hist, "#1\nprint('from an earlier session')\n")
  local code, out = with_pty(hist, function(p)
    p:expect("> ")
    p:send("\27[A\r")                        -- Up: the entry from the history file
    p:expect("\nfrom an earlier session")
    p:send("t = glimpse.ze\t3)\r")           -- completes to glimpse.zeros(
    p:expect("> ")
    p:send("t:nu\t)\r")                      -- completes to t:numel(
    p:expect("\n3\n")
    p:send("for i = 1, 2 do\rio.write('<', i, '>')\rend\r")
    p:expect("<1><2>")
    p:send("\4")                             -- Ctrl-D
  end)
  local h = read_file(hist) or ""
  rmdir(d)
  lu.assertEquals(code, 0, out)
  assert_has(out, "t = glimpse.zeros(3)")
  assert_has(h, "\nt = glimpse.zeros(3)\n")
  assert_has(h, "\nt:numel()\n")
  -- a multi-line statement is one entry: its lines follow one time stamp
  assert_has(h, "\nfor i = 1, 2 do\nio.write('<', i, '>')\nend\n")
end

function T.test_terminal_ctrl_c_interrupts_a_running_command_and_drops_a_typed_line()
  lu.skipIf(not script_available(), "util-linux `script` is not installed")
  local d = tmpdir()
  local code, out = with_pty(d .. "/hist", function(p)
    p:expect("> ")
    p:send("print('spinning') while true do end\r")
    p:expect("\nspinning")
    p:send("\3")                             -- Ctrl-C while Lua runs
    p:expect("interrupted!")
    p:expect("> ")
    p:send("for i = 1, 2 do\r")
    p:expect(">> ")
    p:send("half typed")
    p:expect("half typed")
    p:send("\3")                             -- Ctrl-C at the prompt: the statement is dropped
    p:expect("^C")
    p:send("print('still' .. ' here')\r")
    p:expect("\nstill here")
    p:send("\4")
  end)
  rmdir(d)
  lu.assertEquals(code, 0, out)
  lu.assertNotStrContains(out, "syntax error")
  lu.assertNotStrContains(out, "'end' expected")
end

return T
