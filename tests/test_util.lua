-- tests/test_util.lua -- glimpse.util (bindings/glimpse/util.lua): atomic text/JSON files,
-- JSON layout and round trips, mkdir_p, output folders, the Timer, process facts.  Files go
-- to a fresh folder under /tmp that the suite removes at the end.
local lu = require "luaunit"
local glimpse = require "glimpse"
local util = glimpse.util

local T = {}

local TIME_TOL = 1e-9

local function fresh_dir()
  local base = os.tmpname()          -- a unique name; reuse it as a folder
  os.remove(base)
  return util.mkdir_p(base .. "-util")
end

local ROOT = fresh_dir()

local function list(dir)
  local p = io.popen("ls -A " .. util.shell_quote(dir))
  local names = {}
  for l in p:lines() do names[#names + 1] = l end
  p:close()
  table.sort(names)
  return names
end

function T.test_atomic_write_replaces_the_file_and_leaves_no_temp()
  local dir = util.mkdir_p(ROOT .. "/atomic")
  local path = dir .. "/notes.txt"
  util.write_text(path, "first\n")
  util.write_text(path, "second\n")
  lu.assertEquals(util.read_text(path), "second\n")
  util.write_lines(dir .. "/lines.txt", {"a", "b", 3})
  lu.assertEquals(util.read_text(dir .. "/lines.txt"), "a\nb\n3\n")
  lu.assertEquals(list(dir), {"lines.txt", "notes.txt"})
end

function T.test_failed_write_keeps_the_old_file_and_leaves_no_temp()
  local dir = util.mkdir_p(ROOT .. "/failed")
  local path = dir .. "/r.json"
  util.write_json(path, {ok = true})
  lu.assertErrorMsgContains("util.write_json: " .. path .. ": a function at value.fn",
                            util.write_json, path, {fn = print})
  lu.assertEquals(util.read_json(path), {ok = true})
  lu.assertErrorMsgContains("util.write_text: cannot write " .. dir .. "/missing/x.txt",
                            util.write_text, dir .. "/missing/x.txt", "x")
  lu.assertEquals(list(dir), {"r.json"})
end

function T.test_json_round_trip_keeps_values_exactly()
  local v = {name = "run/1 \"quoted\"\n", n = 42, third = 1 / 3, tiny = 1e-300, big = 2 ^ 53,
             neg = -0.1, flags = {true, false}, nested = {list = {1, 2.5, {x = "y"}}, empty = {}},
             utf8 = "héllo"}
  local path = ROOT .. "/round.json"
  util.write_json(path, v)
  local back = util.read_json(path)
  lu.assertEquals(back.name, v.name)
  lu.assertEquals(back.third, v.third)          -- shortest round-trip digits, not 14
  lu.assertEquals(back.tiny, v.tiny)
  lu.assertEquals(back.big, v.big)
  lu.assertEquals(back.neg, v.neg)
  lu.assertEquals(back.flags, v.flags)
  lu.assertEquals(back.nested.list, v.nested.list)
  lu.assertEquals(back.utf8, v.utf8)
  lu.assertEquals(util.json_decode(util.json_encode(v, {indent = 2})).third, v.third)
end

function T.test_json_layout_is_sorted_and_readable()
  lu.assertEquals(util.json_encode({b = 1, a = {2, 3}, c = {d = "x/y"}}),
                  '{"a":[2,3],"b":1,"c":{"d":"x/y"}}')
  lu.assertEquals(util.json_encode({b = 1, a = {2}}, {indent = 2}),
                  '{\n  "a": [\n    2\n  ],\n  "b": 1\n}')
  lu.assertEquals(util.json_encode({loss = 0 / 0, inf = math.huge}), '{"inf":null,"loss":null}')
  lu.assertEquals(util.json_encode(glimpse.tensor({{1, 2}, {3, 4}})), "[[1,2],[3,4]]")
  lu.assertEquals(util.json_encode(0.1), "0.1")
  local t = {}
  t.self = t
  lu.assertErrorMsgContains("contains itself at value.self", util.json_encode, t)
  lu.assertErrorMsgContains("util.json_decode:", util.json_decode, "{not json")
end

function T.test_mkdir_p_creates_parents_and_accepts_existing()
  local deep = ROOT .. "/a/b c/d"
  lu.assertFalse(util.is_dir(deep))
  lu.assertEquals(util.mkdir_p(deep), deep)
  lu.assertTrue(util.is_dir(deep))
  util.mkdir_p(deep)                             -- again: fine
  util.write_text(ROOT .. "/plain", "x")
  lu.assertFalse(util.is_dir(ROOT .. "/plain"))
  lu.assertTrue(util.exists(ROOT .. "/plain"))
  lu.assertErrorMsgContains("util.mkdir_p: cannot create directory '" .. ROOT .. "/plain/sub'",
                            util.mkdir_p, ROOT .. "/plain/sub")
  lu.assertErrorMsgContains("util.mkdir_p: path must be a non-empty string", util.mkdir_p, "")
end

function T.test_output_dir_records_the_command_and_config()
  local dir = util.output_dir(ROOT .. "/runs/exp-1", {seed = 3, lr = 0.001, layers = {64, 32}})
  local run = util.read_json(dir .. "/run.json")
  lu.assertEquals(run.config, {seed = 3, lr = 0.001, layers = {64, 32}})
  lu.assertEquals(run.glimpse, glimpse.version)
  lu.assertEquals(run.command, util.command_line())
  lu.assertStrMatches(run.started, "%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%dZ")
  lu.assertEquals(run.blas.threads, glimpse.get_num_threads())
end

function T.test_shell_quote_survives_the_shell()
  for _, s in ipairs({"plain", "with space", "it's", "$HOME", "a\"b", ""}) do
    local p = io.popen("printf %s " .. util.shell_quote(s))
    lu.assertEquals(p:read("a"), s)
    p:close()
  end
end

function T.test_timer_pauses_and_resets()
  local now = 10
  local t = util.Timer(function() return now end)
  now = 13
  lu.assertAlmostEquals(t:elapsed(), 3, TIME_TOL)
  t:pause()
  now = 50
  lu.assertAlmostEquals(t:elapsed(), 3, TIME_TOL)
  t:resume()
  now = 52
  lu.assertAlmostEquals(t:elapsed(), 5, TIME_TOL)
  t:reset()
  lu.assertAlmostEquals(t:elapsed(), 0, TIME_TOL)
  local secs, a, b = util.time(function(x) return x, x + 1 end, 7)
  lu.assertTrue(secs >= 0)
  lu.assertEquals({a, b}, {7, 8})
end

function T.test_process_facts()
  lu.assertTrue(util.rss_kb() > 0)
  lu.assertTrue(util.peak_rss_kb() > 0)       -- VmHWM is updated lazily: no order with VmRSS
  lu.assertStrMatches(util.loadavg(), "[%d.]+ [%d.]+ [%d.]+ .*")
  lu.assertTrue(math.type(util.pid()) == "integer")
end

-- LuaUnit calls this after the suite's tests
function T.teardownClass()
  os.execute("rm -rf " .. util.shell_quote(ROOT))
end

return T
