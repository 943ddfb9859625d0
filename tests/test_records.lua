-- tests/test_records.lua -- nothing lost, nothing silently wrong (issue 30, items 2-7): the
-- records compare and reproduce keep, as a user who interrupts, re-runs and makes mistakes
-- would meet them.  compare: a Ctrl-C records its runs as interrupted (never finished) and
-- the same command runs them again; ids hash the settings, so a changed flag on the same
-- --out keeps the old records; one compare per folder (a lock; a dead owner's lock is taken
-- over) and kill -9 of compare leaves no worker running; every runs/*.json is checked on
-- read (a malformed one is named and runs again); empty grids and bad lists are refused
-- before anything is written; a failed configuration is a non-zero exit; --seed,
-- --time-limit and --threads are used; --config values are type-checked.  reproduce: each
-- mode its own folders; an interrupted run keeps the done record; --load refuses an
-- architecture flag the checkpoint contradicts; "done" compares normalized commands;
-- results files are checked with the file named; unknown run ids are refused.
-- Every run is tiny (a few steps of an 8-wide model), so the suite takes seconds.
local lu = require "luaunit"
local glimpse = require "glimpse"
local H = require "tests.helpers"
local util = glimpse.util
local compare = glimpse.compare
local lock = require "glimpse.lab.compare.lock"
local reproduce = require "glimpse.lab.reproduce"

local T = {}

local WAIT = 60            -- seconds a background compare may take to react (a loaded machine)

local function exe() return arg and arg[-1] or "build/glimpse" end
local function q(s) return util.shell_quote(s) end

local function sleep(s) os.execute("sleep " .. s) end

local wait_for = H.wait_for   -- pred() true within `seconds`

local run = H.run   -- runs a script, returns ok, exit code, output

-- the compare script on a tiny grid: one 8-wide model on lookup; extra: more flags
local function compare_cmd(out, extra)
  return string.format("%s scripts/compare.lua --mechanisms dot/soft --tasks lookup --seeds 1 " ..
                       "--train-n 32 --valid-n 4 --test-n 4 --test-lengths 8 --hidden 8 " ..
                       "--jobs 1 --out %s %s", q(exe()), q(out), extra or "")
end

-- the compare script in the background: returns a function() -> exit code or nil (running)
local function background(cmd, dir)
  local rc, log = dir .. "/rc", dir .. "/log"
  -- the subshell's own output to /dev/null: a pipe it held would keep the runner waiting
  os.execute(string.format("sh -c %s", q(string.format("(%s > %s 2>&1; echo $? > %s) " ..
                                                         "> /dev/null 2>&1 &", cmd, q(log), q(rc)))))
  return function()
    local f = io.open(rc)
    local s = f and f:read("l")
    if f then f:close() end
    return s and math.tointeger(tonumber(s)) or nil
  end, log
end

local function owner(out)
  local ok, o = pcall(util.read_json, out .. "/compare.lock/owner.json")
  return ok and type(o) == "table" and glimpse.check.integers(o) or nil
end

local function records_in(out)
  local t = {}
  for _, f in ipairs(H.ls(out .. "/runs")) do
    if f:match("%.json$") and not f:match("%.config%.json$") then
      t[#t + 1] = util.read_json(out .. "/runs/" .. f)
    end
  end
  return t
end

local function tiny_settings(steps)
  return compare.settings{steps = steps or 4, eval_every = 2, train_n = 32, valid_n = 4,
                          test_n = 4, test_lengths = {8}, heatmap_length = 8, hidden = 8,
                          attn_hidden = 4, emb = 4, batch = 8}
end

local function tiny_grid(steps)
  return compare.grid{mechanisms = {"dot/soft"}, tasks = {"lookup"}, seeds = 1,
                      settings = tiny_settings(steps)}
end

local function quiet() return function() end end

-- ---------------------------------------------------------------------------------------
-- compare (items 2-5)

function T.test_compare_ctrl_c_records_runs_as_interrupted_and_the_same_command_runs_them_again()
  local d = H.tmpdir()
  local out = d .. "/out"
  local cmd = compare_cmd(out, "--steps 2000 --eval-every 1000")
  local rc = background(cmd, d)
  lu.assertTrue(wait_for(function() return util.is_dir(out .. "/runs") and #H.ls(out .. "/runs") >= 2 and owner(out) end, WAIT),
                "the worker did not start")
  sleep(1)                                   -- the worker is training
  os.execute("kill -INT " .. owner(out).pid)
  lu.assertTrue(wait_for(rc, WAIT), "compare did not stop after Ctrl-C")
  lu.assertEquals(rc(), 130)
  local log = H.read_file(d .. "/log")
  lu.assertStrContains(log, "compare: interrupted")
  local recs = records_in(out)
  lu.assertEquals(#recs, 1, log)
  lu.assertTrue(recs[1].interrupted, "an interrupted run is recorded as interrupted")
  lu.assertNil(recs[1].accuracy_by_length, "an interrupted worker does not evaluate")
  lu.assertTrue((recs[1].steps or 0) < 2000)
  lu.assertEquals(#util.read_json(out .. "/results.json").results, 0)
  lu.assertStrContains(H.read_file(out .. "/index.html"), "interrupted")
  lu.assertFalse(util.exists(out .. "/compare.lock"), "the lock is released")
  -- the same command runs it again, to the end of its budget
  local ok, _, text = run(cmd .. " --steps 2000 --eval-every 1000")
  lu.assertTrue(ok, text)
  lu.assertStrContains(text, "0 finished already, 1 to run")
  recs = records_in(out)
  lu.assertEquals(recs[1].steps, 2000)
  lu.assertNil(recs[1].interrupted)
  H.rmdir(d)
end

function T.test_compare_kill_9_leaves_no_worker_and_the_rerun_takes_the_lock_over()
  local d = H.tmpdir()
  local out = d .. "/out"
  local rc = background(compare_cmd(out, "--steps 100000"), d)
  lu.assertTrue(wait_for(function() local o = owner(out) return o and o.workers end, WAIT),
                "the workers did not start")
  local o = owner(out)
  lu.assertTrue(lock.group_alive(o.workers))
  os.execute("kill -9 " .. o.pid)
  lu.assertTrue(wait_for(rc, WAIT))
  lu.assertTrue(wait_for(function() return not lock.group_alive(o.workers) end, 10),
                "the workers run on after kill -9 of compare")
  lu.assertTrue(util.exists(out .. "/compare.lock"), "a stale lock is left")
  local ok, _, text = run(compare_cmd(out, "--steps 4"))
  lu.assertTrue(ok, text)
  lu.assertStrContains(text, "took over the lock of compare pid " .. o.pid)
  lu.assertStrContains(text, "1 results, 0 failed")
  H.rmdir(d)
end

function T.test_compare_refuses_a_folder_another_compare_holds()
  local out = H.tmpdir() .. "/out"
  util.mkdir_p(out .. "/compare.lock")
  local me = lock.proc(util.pid())
  util.write_json(out .. "/compare.lock/owner.json", {pid = util.pid(), start = me.start,
                                                      host = util.read_text("/proc/sys/kernel/hostname"):match("[^\n]*")})
  local configs = tiny_grid()
  lu.assertErrorMsgContains("is in use by another compare (pid " .. util.pid(), compare.run,
                            {configs = configs, out = out, jobs = 1, say = quiet()})
  lu.assertFalse(util.exists(out .. "/runs"), "nothing written")
  local ok, code, text = run(compare_cmd(out, "--steps 4"))
  lu.assertFalse(ok)
  lu.assertEquals(code, 1)
  lu.assertStrContains(text, "is in use by another compare")
  -- the lock of a process that is gone is taken over
  local p = io.popen("sh -c 'echo $$'")
  local dead = math.tointeger(tonumber(p:read("l")))
  p:close()
  util.write_json(out .. "/compare.lock/owner.json", {pid = dead, start = "1",
                                                      host = util.read_text("/proc/sys/kernel/hostname"):match("[^\n]*")})
  local said = {}
  local _, recs = compare.run{configs = configs, out = out, jobs = 1,
                              say = function(s) said[#said + 1] = s end}
  lu.assertEquals(#recs, 1)
  lu.assertStrContains(said[1], "took over the lock of compare pid " .. dead)
  lu.assertFalse(util.exists(out .. "/compare.lock"))
end

function T.test_compare_ids_hash_the_settings_and_a_changed_flag_keeps_the_old_records()
  local out = H.tmpdir() .. "/out"
  local a, b = tiny_grid(4), tiny_grid(6)
  lu.assertNotEquals(a[1].id, b[1].id)
  lu.assertStrContains(a[1].id, "lookup.dot-soft.s1.")
  lu.assertEquals(a[1].id, tiny_grid(4)[1].id, "the same settings give the same id")
  -- what does not change a result is not in the hash: the worker's threads and time guard
  compare.run{configs = a, out = out, jobs = 1, say = quiet()}
  local first = util.read_json(out .. "/runs/" .. a[1].id .. ".json")
  compare.run{configs = b, out = out, jobs = 1, say = quiet()}
  lu.assertEquals(util.read_json(out .. "/runs/" .. a[1].id .. ".json"), first, "not overwritten")
  lu.assertEquals(util.read_json(out .. "/results.json").results[1].config.steps, 6)
  local said = {}
  compare.run{configs = a, out = out, jobs = 1, say = function(s) said[#said + 1] = s end}
  lu.assertStrContains(said[1], "1 finished already, 0 to run")
  -- a finished record of other settings under the same id (an older one, a collision) is
  -- never overwritten: the run is refused with the file named
  local path = out .. "/runs/" .. a[1].id .. ".json"
  local r = util.read_json(path)
  r.config.settings.lr = 0.5
  util.write_json(path, r)
  lu.assertErrorMsgContains(path .. " holds a finished record of " .. a[1].id ..
                            " made with other settings", compare.run,
                            {configs = a, out = out, jobs = 1, say = quiet()})
  lu.assertEquals(util.read_json(path).config.settings.lr, 0.5)
  lu.assertFalse(util.exists(out .. "/compare.lock"), "the lock is released after an error")
end

function T.test_compare_a_malformed_record_is_named_and_runs_again()
  local out = H.tmpdir() .. "/out"
  local configs = tiny_grid()
  compare.run{configs = configs, out = out, jobs = 1, say = quiet()}
  local path = out .. "/runs/" .. configs[1].id .. ".json"
  local good = util.read_json(path)
  local function corrupt(f)
    local r = util.read_json(path)
    f(r)
    util.write_json(path, r)
  end
  for _, case in ipairs({
      {function(r) r.accuracy_by_length[1].exact = "x" end, "accuracy_by_length[1].exact is 'x'"},
      {function(r) r.accuracy_by_length = {} end, "accuracy_by_length must list the 1 test lengths"},
      {function(r) r.ms_per_step = nil end, "ms_per_step is nil"},
      {function(r) r.steps = 2 end, "steps is 2, not the budget 4"},
      {function(r) r.heatmap.alpha[1] = "row" end, "heatmap.alpha[1] is not a row"}}) do
    util.write_json(path, good)
    corrupt(case[1])
    local state, _, why = compare.inspect(out, configs[1])
    lu.assertEquals(state, "malformed")
    lu.assertStrContains(why, case[2])
    -- the summary does not crash: the configuration is missing from the table
    local rows, recs, failures, missing = compare.run{configs = configs, out = out, run = false,
                                                      say = quiet()}
    lu.assertEquals(#rows, 0)
    lu.assertEquals(#recs + #failures, 0)
    lu.assertEquals(missing, {configs[1].id})
  end
  -- a NaN written as null in an optional field: dropped, the record stays finished
  util.write_json(path, good)
  local text, n = util.read_text(path):gsub('"attention_entropy":[^,}]+', '"attention_entropy":null')
  lu.assertEquals(n, 1)
  util.write_text(path, text)
  local state, r = compare.inspect(out, configs[1])
  lu.assertEquals(state, "finished")
  lu.assertNil(r.attention_entropy)
  util.write_text(path, "{not json")
  local said = {}
  local _, recs = compare.run{configs = configs, out = out, jobs = 1,
                              say = function(s) said[#said + 1] = s end}
  lu.assertStrContains(said[1], path .. " is malformed (")
  lu.assertStrContains(said[1], "it runs again")
  lu.assertEquals(#recs, 1)
  lu.assertEquals(recs[1].accuracy_by_length, good.accuracy_by_length)  -- fixed seed: same numbers
end

function T.test_compare_refuses_empty_grids_and_bad_lists_before_writing()
  local d = H.tmpdir()
  local out = d .. "/out"
  for _, case in ipairs({{"--mechanisms ''", "no mechanisms"}, {"--tasks ''", "no tasks"},
                         {"--test-lengths ''", "--test-lengths must list at least one length"},
                         {"--test-lengths 8,x", "--test-lengths must list integers"},
                         {"--test-lengths 500", "task 'lookup' makes sources of lengths 4..80, not 500"},
                         {"--mechanisms dot/location", "every mechanism was skipped"},
                         {"--lr=-1", "option 'lr' must be a number >= 0, got -1"},
                         {"--supervise=-1", "option 'supervise' must be a number >= 0, got -1"},
                         {"--seeds 0", "seeds"}}) do
    local ok, _, text = run(string.format("%s scripts/compare.lua --tasks lookup --out %s %s",
                                          q(exe()), q(out), case[1]))
    lu.assertFalse(ok, case[1])
    lu.assertStrContains(text, case[2])
    lu.assertFalse(util.exists(out), case[1] .. ": nothing is written")
  end
  lu.assertErrorMsgContains("no configurations (an empty grid)", compare.run,
                            {configs = {}, out = out})
  lu.assertErrorMsgContains("test_lengths' must be a non-empty list", compare.settings,
                            {test_lengths = {}})
  lu.assertErrorMsgContains("test_lengths' must be a non-empty list", compare.settings,
                            {test_lengths = {8, "x"}})
  lu.assertFalse(util.exists(out))
  H.rmdir(d)
end

function T.test_compare_exits_non_zero_when_a_configuration_fails_and_the_time_limit_is_used()
  local out = H.tmpdir() .. "/out"
  -- --time-limit is each configuration's guard: a run it stops is a failure, not a record
  local ok, code, text = run(compare_cmd(out, "--steps 500 --time-limit 0.000001"))
  lu.assertFalse(ok)
  lu.assertEquals(code, 1)
  lu.assertStrContains(text, "FAILED")
  lu.assertStrContains(text, "the time limit of 1e-06s")
  lu.assertStrContains(text, "0 results, 1 failed")
  -- the report of a folder with a failure says so too
  ok, code, text = run(compare_cmd(out, "--steps 500 --time-limit 0.000001 --report-only"))
  lu.assertEquals(code, 1, text)
end

local function numbers(out)
  local t = {}
  for _, r in ipairs(util.read_json(out .. "/results.json").results) do
    t[#t + 1] = {r.mechanism, r.accuracy_by_length, r.curve, r.alignment_accuracy, r.params}
  end
  return t
end

function T.test_compare_seed_and_threads_flags_are_used_and_threads_keep_the_numbers()
  local d = H.tmpdir()
  -- --seed S with --seeds N: seeds S..S+N-1 (report only: nothing runs, the ids are missing)
  local ok, _, text = run(compare_cmd(d .. "/seeds", "--steps 4 --seed 3 --seeds 2 --report-only"))
  lu.assertTrue(ok, text)
  lu.assertStrContains(text, "seeds 3..4")
  local missing = util.read_json(d .. "/seeds/results.json").missing
  lu.assertStrContains(missing[1], "lookup.dot-soft.s3.")
  lu.assertStrContains(missing[2], "lookup.dot-soft.s4.")
  -- --threads N: each worker's threads; the same numbers as one thread
  ok, _, text = run(compare_cmd(d .. "/t1", "--steps 6 --eval-every 3 --threads 1"))
  lu.assertTrue(ok, text)
  ok, _, text = run(compare_cmd(d .. "/t2", "--steps 6 --eval-every 3 --threads 2"))
  lu.assertTrue(ok, text)
  lu.assertStrContains(text, "2 threads each")
  local jobs = {}
  for _, f in ipairs(H.ls(d .. "/t2/runs")) do
    if f:match("%.config%.json$") then jobs[#jobs + 1] = util.read_json(d .. "/t2/runs/" .. f) end
  end
  lu.assertEquals(jobs[1].worker.threads, 2)
  lu.assertEquals(numbers(d .. "/t1"), numbers(d .. "/t2"))
  H.rmdir(d)
end

function T.test_config_file_values_are_type_checked()
  local d = H.tmpdir()
  for _, case in ipairs({{"report_only = 'no'", "--report-only is a flag: its value must be true or false, got 'no'"},
                         {"report_only = 1", "--report-only is a flag"},
                         {"test_lengths = {8, 16}", "--test-lengths takes a string"},
                         {"batch = 'two'", "--batch"},
                         {"steps = 'many'", "--steps"}}) do
    H.write_file(d .. "/c.lua", "return {" .. case[1] .. "}")
    local ok, _, text = run(compare_cmd(d .. "/out", "--config " .. q(d .. "/c.lua")))
    lu.assertFalse(ok, case[1])
    lu.assertStrContains(text, case[2])
    lu.assertFalse(util.exists(d .. "/out"), case[1])
  end
  -- the right types pass (a flag's boolean, a number given as text)
  local experiment = glimpse.experiment
  local parser = experiment.parser("toy", "", {})
  parser:flag("--fast", "")
  parser:option("--size", "", "1"):convert(tonumber)
  H.write_file(d .. "/ok.lua", "return {fast = true, size = '12'}")
  local a = experiment.parse(parser, {"--config", d .. "/ok.lua"}, {raise = true})
  lu.assertEquals(a.fast, true)
  lu.assertEquals(a.size, 12)
  H.rmdir(d)
end

-- ---------------------------------------------------------------------------------------
-- reproduce (items 6 and 7)

local POINTER = {"--task", "sort", "--n", 4, "--hidden", 4, "--emb", 4, "--batch", 2,
                 "--valid", 2, "--test", 2, "--beam", 1, "--pictures", 0}

-- runs f with tbl among reproduce.TABLES
local function with_table(tbl, f, ...)
  table.insert(reproduce.TABLES, tbl)
  local res = table.pack(pcall(f, ...))
  table.remove(reproduce.TABLES)
  if not res[1] then error(res[2], 0) end
  return table.unpack(res, 2, res.n)
end

local function tiny_run(dir, tables, runs, log)
  return reproduce.run{mode = "tiny", out = dir .. "/out", results = dir .. "/results",
                       doc = dir .. "/results.md", tables = tables, runs = runs, exe = exe(),
                       log = log or function() end}
end

function T.test_reproduce_modes_keep_their_own_folders()
  -- the script's folders: full, quick and tiny apart
  local _, _, text = run(q(exe()) .. " scripts/reproduce.lua --quick --list")
  lu.assertStrContains(text, "mode quick: outputs in out/reproduce-quick, checkpoints kept in " ..
                             "out/reproduce-quick/models, records in out/reproduce-quick/results, " ..
                             "page out/reproduce-quick/results.md")
  _, _, text = run(q(exe()) .. " scripts/reproduce.lua --list")
  lu.assertStrContains(text, "mode full: outputs in out/reproduce, checkpoints kept in " ..
                             "models/reproduce, records in results, page docs/results.md")
  -- the full records refuse another mode's runs, and so does a full run's checkpoint folder
  local d = H.tmpdir()
  util.mkdir_p(d .. "/results")
  util.write_text(d .. "/results/pointer_sort.json", util.read_text("results/pointer_sort.json"))
  local ok, err = pcall(tiny_run, d, "pointer_sort")
  lu.assertFalse(ok)
  lu.assertStrContains(err, d .. "/results/pointer_sort.json holds full runs")
  lu.assertFalse(util.exists(d .. "/out"), "nothing ran")
  lu.assertEquals(util.read_text(d .. "/results/pointer_sort.json"),
                  util.read_text("results/pointer_sort.json"))
  local e = H.tmpdir()
  util.mkdir_p(e .. "/out")
  util.write_json(e .. "/out/mode.json", {mode = "full"})
  ok, err = pcall(tiny_run, e, "pointer_sort")
  lu.assertFalse(ok)
  lu.assertStrContains(err, e .. "/out holds the checkpoints of full runs")
  H.rmdir(d)
  H.rmdir(e)
end

function T.test_reproduce_interrupted_run_keeps_the_done_record()
  local d = H.tmpdir()
  local script = d .. "/stops.lua"         -- a run cut short by ^C: the Trainer's words, exit 130
  H.write_file(script, 'print("interrupted at step 1 of 2"); os.exit(130)')
  local tbl = {name = "stop_test", title = "stop", paper = "-",
               runs = {{id = "r", script = script, steps = {tiny = 2},
                        flags = function() return {} end, rows = function() return {} end}}}
  local path = d .. "/results/stop_test.json"
  util.mkdir_p(d .. "/results")
  local done = {id = "r", status = "done", command = "elsewhere", mode = "tiny", rows = {{label = "x"}}}
  util.write_json(path, {table = "stop_test", mode = "tiny", runs = {r = done}})
  local ok, err = pcall(with_table, tbl, tiny_run, d, "stop_test")
  lu.assertFalse(ok)
  lu.assertStrContains(err, "interrupted during stop_test/r")
  lu.assertEquals(util.read_json(path).runs.r, done)
  -- with no done record, the run is recorded as interrupted (not failed)
  os.remove(path)
  ok = pcall(with_table, tbl, tiny_run, d, "stop_test")
  lu.assertFalse(ok)
  lu.assertEquals(util.read_json(path).runs.r.status, "interrupted")
  H.rmdir(d)
end

function T.test_load_refuses_an_architecture_flag_the_checkpoint_contradicts()
  local d = H.tmpdir()
  local words = {q(exe()), "scripts/pointer.lua"}
  for _, w in ipairs(POINTER) do words[#words + 1] = tostring(w) end
  local base = table.concat(words, " ")
  local ok, _, text = run(base .. " --steps 2 --out " .. q(d .. "/m"))
  lu.assertTrue(ok, text)
  local ckpt = d .. "/m/model.safetensors"
  ok, _, text = run(base .. " --steps 0 --out " .. q(d .. "/e1") .. " --load " .. q(ckpt))
  lu.assertTrue(ok, text)
  ok, _, text = run(base .. " --steps 0 --hidden 8 --out " .. q(d .. "/e2") .. " --load " .. q(ckpt))
  lu.assertFalse(ok)
  lu.assertStrContains(text, "pointer: --hidden 8 does not match the checkpoint " .. ckpt ..
                             " (hidden 4)")
  lu.assertFalse(util.exists(d .. "/e2/metrics.json"))
  H.rmdir(d)
end

function T.test_reproduce_done_is_decided_by_the_normalized_command()
  lu.assertEquals(reproduce.normalize("build/glimpse scripts/pointer.lua --task hull --n 10 --cosine --lr 0.003"),
                  reproduce.normalize("/opt/x/glimpse ./scripts/pointer.lua --lr=3e-3 --cosine --task 'hull' --n 10"))
  lu.assertNotEquals(reproduce.normalize("g scripts/pointer.lua --n 10"),
                     reproduce.normalize("g scripts/pointer.lua --n 11"))
  lu.assertNotEquals(reproduce.normalize("g scripts/pointer.lua --n 10"),
                     reproduce.normalize("g scripts/ntm_copy.lua --n 10"))
  -- a done record whose command differs in the executable and the flags' order is kept
  local d = H.tmpdir()
  local tbl = {name = "norm_test", title = "norm", paper = "-",
               runs = {{id = "r", script = "scripts/pointer.lua", steps = {tiny = 2},
                        flags = function() return POINTER end, rows = function() return {} end}}}
  local words = {"/somewhere/else/glimpse", "./scripts/pointer.lua", "--out=" .. d .. "/out/norm_test/r",
                 "--seed", "1", "--steps", "2"}
  for i = #POINTER - 1, 1, -2 do
    words[#words + 1], words[#words + 2] = POINTER[i], tostring(POINTER[i + 1])
  end
  local cmd = {}
  for i, w in ipairs(words) do cmd[i] = util.shell_quote(w) end
  util.mkdir_p(d .. "/results")
  local kept = d .. "/models/norm_test/r.safetensors"      -- its kept file, there
  util.mkdir_p(d .. "/models/norm_test")
  util.write_text(kept, "x")
  util.write_json(d .. "/results/norm_test.json", {table = "norm_test", mode = "tiny", runs = {
    r = {id = "r", status = "done", mode = "tiny", command = table.concat(cmd, " "), rows = {},
         shipped = kept}}})
  local lines = {}
  with_table(tbl, tiny_run, d, "norm_test", nil, function(s) lines[#lines + 1] = s end)
  local log = table.concat(lines, "\n")
  lu.assertStrContains(log, "norm_test/r: done before, kept")
  lu.assertFalse(util.exists(d .. "/out/norm_test/r"), "nothing ran")
  H.rmdir(d)
end

function T.test_reproduce_results_files_are_checked_with_the_file_named()
  local d = H.tmpdir()
  local path = d .. "/results/pointer_sort.json"
  util.mkdir_p(d .. "/results")
  for _, case in ipairs({{"null", "expected a JSON object {table=, runs={}}, got null"},
                         {'"text"', "expected a JSON object {table=, runs={}}, got 'text'"},
                         {"{not json", "is not a results file"},
                         {'{"runs": 5}', "'runs' must be an object of run records, got 5"},
                         {'{"runs": [1, 2]}', "'runs' must be an object keyed by run ids"},
                         {'{"runs": {"n5": "done"}}', "runs.n5 must be a run record, got 'done'"},
                         {'{"runs": {"n5": {"status": "ok"}}}', "runs.n5.status is 'ok'"},
                         {'{"runs": {"n5": {"status": "done", "command": "x", "rows": 3}}}',
                          "runs.n5.rows is 3"}}) do
    util.write_text(path, case[1])
    local ok, err = pcall(tiny_run, d, "pointer_sort")
    lu.assertFalse(ok, case[1])
    lu.assertStrContains(err, path)
    lu.assertStrContains(err, case[2])
  end
  lu.assertFalse(util.exists(d .. "/out/pointer_sort"), "nothing ran")
  H.rmdir(d)
end

function T.test_reproduce_refuses_unknown_run_ids()
  local d = H.tmpdir()
  local ok, err = pcall(tiny_run, d, "pointer_sort,pointer_hull", "n5,n7")
  lu.assertFalse(ok)
  lu.assertStrContains(err, "unknown run 'n7' (the tables asked for have pointer_sort: n5; " ..
                            "pointer_hull: n5, n10, n5-50, n50)")
  lu.assertFalse(util.exists(d .. "/out"))
  local text
  ok, _, text = run(q(exe()) .. " scripts/reproduce.lua --tiny --tables pointer_sort --runs nope " ..
                    "--out " .. q(d .. "/o"))
  lu.assertFalse(ok)
  lu.assertStrContains(text, "unknown run 'nope'")
  H.rmdir(d)
end

return T
