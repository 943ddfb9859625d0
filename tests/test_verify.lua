-- tests/test_verify.lua -- `make verify` (reproduce.verify, scripts/reproduce.lua --verify): a
-- tiny reproduction keeps its checkpoints (and a compare table's results) in its models
-- folder with a sidecar, and verify re-scores every row to the recorded number; a tampered
-- number fails with its row named, a missing checkpoint or an older record is "not
-- shipped", the models folder has a size limit, and the repository's own records load.
-- Verify needs only the records and the kept files (the runs' own outputs removed first).
local lu = require "luaunit"
local reproduce = require "glimpse.lab.reproduce"
local verify = require "glimpse.lab.reproduce_verify"
local util = require "glimpse.util"
local H = require "tests.helpers"
local function exe() return arg and arg[-1] or "build/glimpse" end

local T = {}
local TABLES = "pointer_sort,luong_local"

local shared
local function tiny()
  if not shared then
    local dir = H.tmpdir() .. "/verify"
    local rec = reproduce.run{mode = "tiny", out = dir .. "/out", results = dir .. "/results",
                              doc = dir .. "/results.md", tables = TABLES, exe = exe(),
                              log = function() end}
    shared = {dir = dir, rec = rec, models = dir .. "/out/models"}
  end
  return shared
end

-- verify of s's run on the records in results (default the run's own); returns report, log
local function check(s, o)
  local lines = {}
  o = o or {}
  local report = reproduce.verify{mode = "tiny", out = s.dir .. "/out", results = o.results or
    (s.dir .. "/results"), models = s.models, tables = TABLES, exe = exe(), limit_mb = o.limit_mb,
    log = function(l) lines[#lines + 1] = l end}
  return report, table.concat(lines, "\n")
end

-- a copy of the run's records with edit(record of table name) applied; returns the folder
local function edited(s, name, edit)
  local dir = H.tmpdir() .. "/edited"
  util.mkdir_p(dir)
  for t in TABLES:gmatch("[^,]+") do
    local j = util.read_json(s.dir .. "/results/" .. t .. ".json")
    if t == name then edit(j) end
    util.write_json(dir .. "/" .. t .. ".json", j)
  end
  return dir
end

function T.test_runs_keep_their_checkpoints_with_a_sidecar()
  local s = tiny()
  local r = s.rec.pointer_sort.runs.n5
  lu.assertEquals(r.status, "done", tostring(r.reason))
  lu.assertEquals(r.shipped, s.models .. "/pointer_sort/n5.safetensors")
  lu.assertEquals(r.checkpoint, r.shipped)
  lu.assertTrue(util.exists(r.shipped))
  lu.assertFalse(util.exists(s.dir .. "/out/pointer_sort/n5/model.safetensors"))  -- moved, not copied
  lu.assertStrContains(r.eval_command, "--load " .. r.shipped)
  local side = util.read_json(s.models .. "/pointer_sort/n5.json")
  lu.assertEquals(side.command, r.command)
  lu.assertEquals(side.eval_command, r.eval_command)
  lu.assertEquals(side.rows, r.rows)
  lu.assertEquals(side.table, "pointer_sort")
  lu.assertStrMatches(side.date, "%d+%-%d+%-%d+T.*Z")
  lu.assertNotNil(side.commit)
  local c = s.rec.luong_local.runs.dates                    -- compare: its results.json kept
  lu.assertEquals(c.shipped, s.models .. "/luong_local/dates.results.json")
  lu.assertTrue(util.exists(c.shipped))
  local page = H.read_file(s.dir .. "/results.md")
  lu.assertStrContains(page, "`make verify TINY=1`")
  lu.assertStrContains(page, "  - kept: `" .. r.shipped .. "`")
  lu.assertEquals(reproduce.models_of("full", "out/reproduce"), "models/reproduce")
  lu.assertEquals(reproduce.models_of("quick", "out/reproduce-quick"), "out/reproduce-quick/models")
end

function T.test_verify_rescores_every_row_to_the_recorded_number()
  local s = tiny()
  -- as in a fresh clone: the records and the kept files, none of the runs' own outputs
  for _, t in ipairs({"pointer_sort", "luong_local"}) do
    os.execute("rm -rf " .. util.shell_quote(s.dir .. "/out/" .. t))
  end
  local report, log = check(s)
  lu.assertTrue(report.ok, log)
  local rows = #s.rec.pointer_sort.runs.n5.rows + #s.rec.luong_local.runs.dates.rows
  lu.assertEquals(report.counts, {ok = rows, mismatch = 0, failed = 0, not_shipped = 0})
  lu.assertStrContains(log, "| run | row | paper | recorded | re-scored | ok |")
  lu.assertStrContains(log, "| pointer_sort/n5 | sort n=5, exact (greedy) | — | ")
  lu.assertStrContains(log, "| luong_local/dates | general/local-p: token accuracy")
  lu.assertStrContains(log, string.format("verify (tiny): %d rows agree, 0 mismatch", rows))
  lu.assertTrue(util.exists(s.dir .. "/out/pointer_sort/n5/eval/metrics.json"))
end

function T.test_tsp20_keeps_its_test_tours_beside_the_checkpoint()
  -- the re-evaluation reads its exact tours from MODELS/pointer_tsp/n20-cache, not solving them
  local dir = H.tmpdir() .. "/tsp20"
  local rec = reproduce.run{mode = "tiny", out = dir .. "/out", results = dir .. "/results",
                            doc = dir .. "/results.md", tables = "pointer_tsp", runs = "n20",
                            exe = exe(), log = function() end}
  local r = rec.pointer_tsp.runs.n20
  lu.assertEquals(r.status, "done", tostring(r.reason))
  local cache = dir .. "/out/models/pointer_tsp/n20-cache"
  lu.assertStrContains(r.eval_command, "--label-cache " .. cache)
  lu.assertStrContains(r.eval_command, "--train 0")
  local p = assert(io.popen("ls " .. util.shell_quote(cache)))
  local files = p:read("a")
  p:close()
  lu.assertStrContains(files, "seed7920")                   -- validation
  lu.assertStrContains(files, "seed104730")                 -- test
  local lines = {}
  local report = reproduce.verify{mode = "tiny", out = dir .. "/out", results = dir .. "/results",
                                  tables = "pointer_tsp", exe = exe(),
                                  log = function(l) lines[#lines + 1] = l end}
  lu.assertTrue(report.ok, table.concat(lines, "\n"))
  lu.assertEquals(report.counts.ok, #r.rows)
  lu.assertEquals(report.counts.not_shipped, 0)             -- n5, n10 were not run: no record
  lu.assertStrContains(H.read_file(dir .. "/out/pointer_tsp/n20/eval/verify-log.txt"), "(tours read)")
end

function T.test_a_tampered_number_fails_with_its_row_named()
  local s = tiny()
  local dir = edited(s, "pointer_sort", function(j) j.runs.n5.rows[1].glimpse = "57.3%" end)
  local report, log = check(s, {results = dir})
  lu.assertFalse(report.ok)
  lu.assertEquals(report.counts.mismatch, 1)
  lu.assertStrMatches(log, ".*| pointer_sort/n5 | sort n=5, exact %(greedy%) | — | 57.3%% | [%d.]+%% | MISMATCH |.*")
  -- the command line exits non-zero
  local cmd = string.format("%s scripts/reproduce.lua --verify --mode tiny --out %s --results %s " ..
                            "--models %s --tables pointer_sort 2>&1", util.shell_quote(exe()),
                            util.shell_quote(s.dir .. "/out"), util.shell_quote(dir),
                            util.shell_quote(s.models))
  local p = assert(io.popen(cmd))
  local out = p:read("a")
  lu.assertFalse(p:close() == true, out)
  lu.assertStrContains(out, "MISMATCH")
end

function T.test_a_missing_checkpoint_or_an_older_record_is_not_shipped()
  local s = tiny()
  local dir = edited(s, "pointer_sort", function(j)
    j.runs.n5.shipped = s.models .. "/pointer_sort/gone.safetensors"
  end)
  local report, log = check(s, {results = dir})
  lu.assertTrue(report.ok, log)                              -- said, not a failure
  lu.assertEquals(report.counts.not_shipped, 1)
  lu.assertStrContains(log, "not shipped: pointer_sort/n5 (" .. s.models .. "/pointer_sort/gone.safetensors missing)")
  lu.assertStrContains(log, "1 runs not shipped")
  dir = edited(s, "pointer_sort", function(j) j.runs.n5.shipped = nil end)   -- the older format
  report, log = check(s, {results = dir})
  lu.assertEquals(report.counts.not_shipped, 1)
  lu.assertStrContains(log, "not shipped: pointer_sort/n5 (recorded before checkpoints were kept)")
end

function T.test_the_models_folder_has_a_size_limit()
  local s = tiny()
  local report, log = check(s, {limit_mb = 0.001})
  lu.assertFalse(report.ok)
  lu.assertTrue(report.bytes > 1000)
  lu.assertStrContains(log, "TOO LARGE")
  lu.assertEquals(report.counts.mismatch, 0)
end

function T.test_the_repositorys_records_load_and_say_what_is_shipped()
  -- every table's record loads; a run without its kept file is named; the folder's size
  local lines = {}
  -- (a subset: the compare tables re-score from their kept results, sorting in seconds)
  local report = reproduce.verify{mode = "full", exe = exe(), log = function(l) lines[#lines + 1] = l end,
                                  tables = "pointer_sort,bahdanau_length,luong_local"}
  local log = table.concat(lines, "\n")
  lu.assertTrue(report.ok, log)
  lu.assertTrue(report.bytes <= 25e6)
  lu.assertStrContains(log, "models/reproduce: ")
  if report.counts.ok == 0 then lu.assertStrContains(log, "nothing was re-scored") end
end

function T.test_agree_allows_one_unit_of_the_last_digit()
  lu.assertTrue(verify.agree("12.3%", "12.3%"))
  lu.assertTrue(verify.agree("12.3%", "12.4%"))
  lu.assertFalse(verify.agree("12.3%", "12.5%"))
  lu.assertTrue(verify.agree("2.197 (optimal 2.103, +4.45%)", "2.198 (optimal 2.103, +4.46%)"))
  lu.assertFalse(verify.agree("2.197 (optimal 2.103)", "2.197 (optimum 2.103)"))
  lu.assertFalse(verify.agree("3, 4 of 5", "3, 4 of 5, 6"))
  lu.assertFalse(verify.agree("12.3%", nil))
  lu.assertTrue(verify.agree(0.125, 0.125))
end

function T.test_bad_options_are_refused_by_name()
  local ok, err = pcall(reproduce.verify, {mode = "huge"})
  lu.assertFalse(ok)
  lu.assertStrContains(err, "reproduce.verify: unknown mode 'huge'")
  ok, err = pcall(reproduce.verify, {tables = "nope"})
  lu.assertFalse(ok)
  lu.assertStrContains(err, "unknown table 'nope'")
end

return T
