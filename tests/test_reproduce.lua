-- tests/test_reproduce.lua -- glimpse.reproduce and scripts/reproduce.lua (`make reproduce`) on
-- the tiny budget: the tables' runs (scripts in a fresh process of the executable running
-- this suite) write RESULTS/<table>.json and the results page; a second run keeps what is
-- done; a run lost to a kill (missing from the JSON) or failed runs again, alone; a
-- checkpoint re-evaluated with --steps 0 --load gives the recorded numbers; a run stopped
-- short of its step budget is not taken as done; the compare tables run too.
local lu = require "luaunit"
local reproduce = require "glimpse.lab.reproduce"
local util = require "glimpse.util"
local H = require "tests.helpers"
local function exe() return arg and arg[-1] or "build/glimpse" end

local T = {}

local TABLES = "pointer_sort,pointer_hull,ntm_copy,luong_local"

-- one tiny reproduction into dir; returns the records and the log lines
local function tiny(dir, tables)
  local lines = {}
  local rec = reproduce.run{mode = "tiny", out = dir .. "/out", results = dir .. "/results",
                            doc = dir .. "/results.md", tables = tables or TABLES, exe = exe(),
                            log = function(s) lines[#lines + 1] = s end}
  return rec, table.concat(lines, "\n")
end

local shared
local function first_run()
  if not shared then
    local dir = H.tmpdir() .. "/reproduce"
    local rec, log = tiny(dir)
    shared = {dir = dir, rec = rec, log = log}
  end
  return shared
end

function T.test_tiny_run_writes_json_per_table_and_the_page()
  local s = first_run()
  for name in TABLES:gmatch("[^,]+") do
    local j = util.read_json(s.dir .. "/results/" .. name .. ".json")
    lu.assertEquals(j.table, name)
    lu.assertTrue(next(j.runs) ~= nil, name .. ": no runs recorded")
  end
  local hull = s.rec.pointer_hull.runs.n10
  lu.assertEquals(s.rec.pointer_hull.runs.n5.status, "done")
  lu.assertEquals(hull.status, "done", tostring(hull.reason))
  lu.assertEquals(hull.steps, 2)
  lu.assertTrue(hull.seconds >= 0 and hull.machine.cores >= 1)
  lu.assertEquals(#hull.rows, 3)                        -- n=10: greedy, beam, area
  lu.assertEquals(hull.rows[1].paper, "87.0%")
  lu.assertStrMatches(hull.rows[1].glimpse, "%d+%.%d%%")
  local page = H.read_file(s.dir .. "/results.md")
  lu.assertStrContains(page, "mode **tiny**")
  lu.assertStrContains(page, "| hull n=10, exact (greedy) | 87.0% | ")
  lu.assertStrContains(page, "NTM copy vs LSTM")
  lu.assertStrContains(page, "re-evaluate: `")
  lu.assertStrContains(page, hull.command)
end

function T.test_compare_tables_run()
  local r = first_run().rec.luong_local.runs.dates
  lu.assertEquals(r.status, "done", tostring(r.reason))
  lu.assertTrue(#r.rows >= 3)
end

function T.test_second_run_keeps_finished_runs_and_reruns_the_lost_one()
  local s = first_run()
  local path = s.dir .. "/results/pointer_hull.json"
  local _, log = tiny(s.dir)
  lu.assertStrContains(log, "pointer_sort/n5: done before, kept")
  lu.assertStrContains(log, "pointer_hull/n10: done before, kept")
  lu.assertNotStrContains(log, "scripts/pointer.lua")  -- nothing ran
  -- a kill during a run leaves it out of the JSON (written after each run): it runs again,
  -- the finished one is kept
  local j = util.read_json(path)
  j.runs.n10 = nil
  j.runs["gone"] = {id = "gone", status = "done", rows = {}}   -- a run the table no longer has
  util.write_json(path, j)
  local sort = util.read_json(s.dir .. "/results/pointer_sort.json")
  sort.runs.n5.status = "failed"
  util.write_json(s.dir .. "/results/pointer_sort.json", sort)
  _, log = tiny(s.dir)
  lu.assertStrContains(log, "pointer_hull/n10: done in")
  lu.assertStrContains(log, "pointer_hull/n5: done before, kept")
  lu.assertStrContains(log, "pointer_sort/n5: done in")
  j = util.read_json(path)
  lu.assertEquals(j.runs.n10.status, "done")
  lu.assertNil(j.runs.gone)
  -- a run done before whose kept file is gone (as a record made before the checkpoints were
  -- kept has none) runs again: that file is what verify re-scores
  os.remove(j.runs.n5.shipped)
  _, log = tiny(s.dir)
  lu.assertStrContains(log, "pointer_hull/n5: done in")
  lu.assertStrContains(log, "pointer_hull/n10: done before, kept")
  lu.assertTrue(util.exists(util.read_json(path).runs.n5.shipped))
end

function T.test_a_run_of_some_tables_keeps_the_others_on_the_page()
  local s = first_run()
  local _, log = tiny(s.dir, "pointer_sort")
  lu.assertStrContains(log, "pointer_sort/n5: done before, kept")
  local page = H.read_file(s.dir .. "/results.md")
  lu.assertStrContains(page, "Ptr-Net: sorting points")
  lu.assertStrContains(page, "NTM copy vs LSTM")           -- from its JSON, not run now
  lu.assertStrContains(page, "| hull n=10, exact (greedy) | 87.0% | ")
  lu.assertNotStrContains(page, "Ptr-Net: TSP")             -- no record: not on the page
end

function T.test_checkpoint_reevaluation_gives_the_recorded_numbers()
  local s = first_run()
  local r = s.rec.ntm_copy.runs.ntm
  lu.assertEquals(r.status, "done", tostring(r.reason))
  lu.assertStrContains(r.eval_command, "--steps 0")
  lu.assertTrue(util.exists(r.checkpoint), "no checkpoint " .. tostring(r.checkpoint))
  lu.assertTrue(os.execute(r.eval_command .. " > /dev/null 2>&1") == true, r.eval_command)
  local m = util.read_json(s.dir .. "/out/ntm_copy/ntm/eval/metrics.json")
  lu.assertEquals(m.steps, 0)
  local again = {}
  for _, t in ipairs(m.tests) do
    again[#again + 1] = {length = t.length, bits = t.bit_errors_per_sequence}
  end
  local before = util.read_json(s.dir .. "/out/ntm_copy/ntm/metrics.json")
  for i, t in ipairs(before.tests) do
    lu.assertEquals(again[i].length, t.length)
    lu.assertAlmostEquals(again[i].bits, t.bit_errors_per_sequence, 1e-6)
  end
end

function T.test_captioner_checkpoint_reevaluation_gives_the_recorded_bleu()
  local dir = H.tmpdir() .. "/sat"
  local rec = tiny(dir, "sat_scenes")
  for _, kind in ipairs({"soft", "hard"}) do
    local r = rec.sat_scenes.runs[kind]
    lu.assertEquals(r.status, "done", tostring(r.reason))
    lu.assertStrContains(r.eval_command, "--steps 0")
    lu.assertTrue(os.execute(r.eval_command .. " > /dev/null 2>&1") == true, r.eval_command)
    local m = util.read_json(dir .. "/out/sat_scenes/" .. kind .. "/eval/metrics.json")
    lu.assertEquals(m.steps, 0)
    lu.assertEquals(m.attention, kind)
    local before = util.read_json(dir .. "/out/sat_scenes/" .. kind .. "/metrics.json")
    lu.assertEquals(m.test_bleu, before.test_bleu)
    lu.assertEquals(m.test_loss, before.test_loss)
    lu.assertEquals(m.test_cider, before.test_cider)
    lu.assertEquals(m.test_semantics, before.test_semantics)
    -- the table's rows: BLEU against every phrasing, CIDEr-D / ROUGE-L, the meaning
    local labels = {}
    for _, row in ipairs(r.rows) do labels[#labels + 1] = row.label end
    labels = table.concat(labels, "\n")
    lu.assertStrContains(labels, kind .. " attention, test CIDEr-D / ROUGE-L (greedy)")
    lu.assertStrContains(labels, kind .. " attention, items / relations named right")
  end
end

function T.test_runs_option_runs_those_alone_and_keeps_what_another_driver_wrote()
  local function run(id)
    return {id = id, script = "scripts/pointer.lua", steps = {tiny = 2},
            flags = function() return {"--task", "sort", "--n", 4, "--hidden", 4, "--emb", 4,
                                       "--batch", 2, "--valid", 2, "--test", 2, "--beam", 1,
                                       "--pictures", 0} end,
            rows = function() return {} end}
  end
  local two = {name = "two_test", title = "two", paper = "-", runs = {run("a"), run("b")}}
  local dir = H.tmpdir() .. "/two"
  local path = dir .. "/results/two_test.json"
  table.insert(reproduce.TABLES, two)
  local ok, rec = pcall(reproduce.run, {mode = "tiny", out = dir .. "/out", results = dir .. "/results",
    doc = dir .. "/results.md", tables = "two_test", runs = "b", exe = exe(), log = function(s)
      if s:find("two_test/b: " .. exe(), 1, true) then   -- b starts: another driver finishes a
        util.write_json(path, {table = "two_test", runs = {a = {id = "a", status = "done",
                                                                 command = "elsewhere", mode = "tiny", rows = {}}}})
      end
    end})
  table.remove(reproduce.TABLES)
  lu.assertTrue(ok, tostring(rec))
  local j = util.read_json(path)
  lu.assertEquals(j.runs.b.status, "done", tostring(j.runs.b.reason))
  lu.assertEquals(j.runs.a.command, "elsewhere")
  lu.assertFalse(util.exists(dir .. "/out/two_test/a"))
end

function T.test_a_run_stopped_short_of_its_budget_is_not_done()
  -- the time-limit guard (or ^C) ends the script early: its numbers are not the budget's
  local short = {name = "short_test", title = "short", paper = "-",
    runs = {{id = "r", script = "scripts/pointer.lua", steps = {tiny = 50},
             flags = function() return {"--task", "sort", "--n", 4, "--hidden", 4, "--emb", 4,
                                        "--batch", 2, "--valid", 2, "--test", 2, "--beam", 1,
                                        "--pictures", 0, "--time-limit", 1e-6} end,
             rows = function() return {} end}}}
  table.insert(reproduce.TABLES, short)
  local ok, rec = pcall(tiny, H.tmpdir() .. "/short", "short_test")
  table.remove(reproduce.TABLES)
  lu.assertTrue(ok, tostring(rec))
  lu.assertEquals(rec.short_test.runs.r.status, "failed")
  lu.assertStrContains(rec.short_test.runs.r.reason, "stopped at step 0 of 50")
end

function T.test_page_writes_step_budgets_as_integers()
  local tbl = reproduce.select("pointer_sort")[1]
  local path = H.tmpdir() .. "/page.md"
  reproduce.write_page(path, {tbl}, {pointer_sort = {runs = {n5 = {status = "done", steps = 20000.0,
    mode = "full", seconds = 12.5, command = "x", rows = {{label = "l", paper = "p", glimpse = 0.125}}}}}},
    {mode = "full"})
  local page = H.read_file(path)
  lu.assertStrContains(page, "`n5`: 20000 steps (mode full), 12 s wall")   -- not 2e+04
  lu.assertStrContains(page, "| l | p | 0.125 | n5 |")
end

function T.test_bad_input_is_refused_by_name()
  local ok, err = pcall(reproduce.select, "pointer_sort,nope")
  lu.assertFalse(ok)
  lu.assertStrContains(err, "unknown table 'nope'")
  ok, err = pcall(reproduce.run, {mode = "huge", out = "x", results = "y", doc = "z"})
  lu.assertFalse(ok)
  lu.assertStrContains(err, "reproduce.run: unknown mode 'huge' (one of full, quick, tiny)")
  ok, err = pcall(reproduce.run, {mode = "tiny", results = "y", doc = "z"})
  lu.assertFalse(ok)
  lu.assertStrContains(err, "option 'out'")
  local p = assert(io.popen(util.shell_quote(exe()) .. " scripts/reproduce.lua --tables nope 2>&1"))
  local out = p:read("a")
  lu.assertFalse(p:close() == true)
  lu.assertStrContains(out, "unknown table 'nope'")
end

function T.test_list_names_every_table()
  local p = assert(io.popen(util.shell_quote(exe()) .. " scripts/reproduce.lua --list 2>&1"))
  local out = p:read("a")
  lu.assertTrue(p:close() == true, out)
  for _, t in ipairs(reproduce.TABLES) do lu.assertStrContains(out, t.name) end
  lu.assertEquals(#reproduce.TABLES, 7)
end

return T
