-- tests/test_dist.lua -- glimpse.dist (bindings/glimpse/dist.lua, bindings/l_dist.c, the MPI
-- plugin bindings/mpi/dist_mpi.c) and the Trainer's data-parallel mode.
--
-- In this process (no launcher) glimpse.dist is one rank and every call the identity.  The
-- rest runs tests/dist/*.lua under `mpirun -np 2` (as root: --allow-run-as-root, and
-- --oversubscribe for a 2-core machine that is running other work): the collectives' results
-- on 2 ranks, and a small Seq2Seq trained data-parallel for 20 steps whose parameters must
-- equal a single-process run's with the same global batch.  `make test` installs Open MPI
-- (openmpi-bin, libopenmpi-dev), so those tests skip only where mpirun is not installed.
local lu = require "luaunit"
local glimpse = require "glimpse"
local H = require "tests.helpers"
local util = require "glimpse.util"

local T = {}

local PARAM_RTOL = 1e-5        -- data-parallel vs one process: per tensor, max |a-b| / max |a|
local EXE = arg and arg[-1] or "build/glimpse"
local TIMEOUT = 120            -- seconds: a deadlock fails the test instead of hanging the run

local function have_mpirun()
  return os.execute("command -v mpirun > /dev/null 2>&1") == true
end

local function skip_without_mpirun()
  lu.skipIf(not have_mpirun(), "mpirun is not installed (make test installs openmpi-bin and "
                                .. "libopenmpi-dev); the multi-rank tests need it")
end

-- run a command line; returns its output (stdout and stderr) and whether it exited 0
local function sh(line)
  local out = os.tmpname()
  local ok = os.execute(line .. " > " .. H.sh_quote(out) .. " 2>&1")
  local text = H.read_file(out) or ""
  os.remove(out)
  return text, ok == true
end

-- `glimpse args...` under mpirun -np n (or alone when n is nil)
local function glimpse_cmd(n, args)
  local parts = {}
  if n then
    -- Open MPI keeps allocations to the end, in components it has unloaded by then, which
    -- LeakSanitizer cannot even name: under `make asan` the ranks run without leak
    -- detection (AddressSanitizer's other checks stay on; this suite's one-process tests,
    -- which never load MPI, keep it too)
    local asan = (os.getenv("ASAN_OPTIONS") or "") .. ":detect_leaks=0"
    parts = {"ASAN_OPTIONS=" .. H.sh_quote(asan), "timeout", tostring(TIMEOUT), "mpirun", "-np", tostring(n), "--allow-run-as-root",
             "--oversubscribe"}
  else
    parts = {"timeout", tostring(TIMEOUT)}
  end
  parts[#parts + 1] = H.sh_quote(EXE)
  for _, a in ipairs(args) do parts[#parts + 1] = H.sh_quote(a) end
  return table.concat(parts, " ")
end

local function run_glimpse(n, args)
  local out, ok = sh(glimpse_cmd(n, args))
  lu.assertTrue(ok, "glimpse " .. table.concat(args, " ") .. (n and (" on " .. n .. " ranks") or "")
                .. " failed:\n" .. out)
  return out
end

-- a Lua script of this text in a new temporary folder -> its path, the folder
local function script_file(text)
  local d = H.tmpdir()
  H.write_file(d .. "/script.lua", text)
  return d .. "/script.lua", d
end

local function assert_same_params(a_path, b_path, what)
  local a, b = glimpse.load(a_path), glimpse.load(b_path)
  local n = 0
  for name, x in pairs(a) do
    n = n + 1
    lu.assertNotNil(b[name], what .. ": no " .. name)
    local scale = math.max(x:abs():max():item(), 1e-12)
    local rel = (x - b[name]):abs():max():item() / scale
    lu.assertTrue(rel <= PARAM_RTOL, string.format("%s: %s differs by %.3g relative (at most %g)",
                                                   what, name, rel, PARAM_RTOL))
  end
  lu.assertTrue(n > 5, what .. ": the checkpoint holds the model's tensors")
end

-- ---------------------------------------------------------------------------------------
-- one process: one rank, every call the identity

function T.test_single_process_is_rank_0_of_1_without_mpi()
  local dist = glimpse.dist
  local rank, size = dist.init()
  lu.assertEquals({rank, size}, {0, 1})
  lu.assertEquals({dist.init()}, {0, 1})
  lu.assertEquals(dist.rank(), 0)
  lu.assertEquals(dist.size(), 1)
  lu.assertEquals(dist.backend(), "none")
  lu.assertTrue(dist.is_root())
end

function T.test_single_process_calls_are_the_identity()
  local dist = glimpse.dist
  for _, op in ipairs({"sum", "mean", "max", "min"}) do
    local x = glimpse.tensor({{1, -2}, {3.5, 4}})
    lu.assertTrue(rawequal(dist.allreduce(x, op), x))
    lu.assertEquals(x:totable(), {{1, -2}, {3.5, 4}})
  end
  local b = glimpse.tensor({5, 6})
  lu.assertTrue(rawequal(dist.broadcast(b, 0), b))
  lu.assertEquals(b:totable(), {5, 6})
  local g = dist.allgather(glimpse.tensor({{1, 2, 3}}))
  lu.assertEquals(g.shape, {1, 1, 3})
  lu.assertEquals(g:totable(), {{{1, 2, 3}}})
  lu.assertEquals(dist.shard({"a", "b", "c"}), {"a", "b", "c"})
  lu.assertEquals(dist.gather_tables({k = "v", n = 2}), {{k = "v", n = 2}})
  dist.barrier()
end

function T.test_bad_arguments_name_the_call()
  local dist = glimpse.dist
  lu.assertErrorMsgContains("glimpse.dist.allreduce: bad argument #2 (op must be",
                            dist.allreduce, glimpse.ones(2), "prod")
  lu.assertErrorMsgContains("glimpse.dist.allreduce: bad argument #1 (a tensor expected, got table)",
                            dist.allreduce, {1, 2})
  lu.assertErrorMsgContains("glimpse.dist.broadcast: bad argument #2 (root must be a rank 0..0, got 1)",
                            dist.broadcast, glimpse.ones(2), 1)
  lu.assertErrorMsgContains("glimpse.dist.shard: bad argument #1", dist.shard, "abc")
  lu.assertErrorMsgContains("glimpse.dist.gather_tables: the table is not JSON",
                            dist.gather_tables, {f = print})
end

function T.test_trainer_distributed_on_one_rank_equals_the_plain_trainer()
  local d = H.tmpdir()
  run_glimpse(nil, {"tests/dist/train.lua", d .. "/plain.st", "6"})
  run_glimpse(nil, {"tests/dist/train.lua", d .. "/one.st", "6", "--distributed"})
  local a, b = glimpse.load(d .. "/plain.st"), glimpse.load(d .. "/one.st")
  for name, x in pairs(a) do lu.assertEquals(x:totable(), b[name]:totable(), name) end
end

function T.test_experiment_has_the_distributed_flag()
  local experiment = glimpse.experiment
  local p = experiment.parser("t", "a test", {})
  local d = H.tmpdir()
  local args = experiment.parse(p, {"--distributed", "--out", d}, {raise = true})
  lu.assertTrue(args.distributed)
  local run = experiment.start(args, {name = "t", quiet = true})
  lu.assertTrue(run:trainer_options().distributed)
  run:write_metrics({accuracy = 1})               -- one rank: rank 0, which writes
  lu.assertEquals(util.read_json(d .. "/metrics.json").accuracy, 1)
  local plain = experiment.parse(p, {"--out", d}, {raise = true})
  lu.assertTrue(not plain.distributed)
  lu.assertNil(experiment.start(plain, {name = "t", quiet = true}):trainer_options().distributed)
end

-- ---------------------------------------------------------------------------------------
-- two ranks

function T.test_collectives_on_two_ranks()
  skip_without_mpirun()
  local d = H.tmpdir()
  run_glimpse(2, {"tests/dist/collectives.lua", d .. "/seen.json"})
  local seen = util.read_json(d .. "/seen.json")
  lu.assertEquals(#seen, 2)
  for r = 0, 1 do
    local s = seen[r + 1]
    lu.assertEquals({s.rank, s.size, s.backend, s.is_root}, {r, 2, "mpi", r == 0})
    lu.assertEquals(s.init_again, {r, 2})
    -- rank 0 had 1..4 and rank 1 had 2..8; a view of the tensor sees the result (in place)
    lu.assertEquals(s.sum, {3, 6, 9, 12})
    lu.assertEquals(s.mean, {1.5, 3, 4.5, 6})
    lu.assertEquals(s.max, {2, 4, 6, 8})
    lu.assertEquals(s.min, {1, 2, 3, 4})
    for _, op in ipairs({"sum", "mean", "max", "min"}) do
      lu.assertTrue(s[op .. "_returns_its_argument"], op)
    end
    lu.assertEquals(s.broadcast_from_1, {8, 8, 8})
    lu.assertEquals(s.allgather_shape, {2, 1, 3})
    lu.assertEquals(s.allgather, {{0, 0, 0}, {1, 10, 100}})
    lu.assertEquals(s.tables, {{rank = 0, word = "w0", list = {0, 1}},
                               {rank = 1, word = "w1", list = {1, 2}}})
    lu.assertStrContains(s.bad_root, "glimpse.dist.broadcast: bad argument #2 (root must be a rank 0..1, got 2)")
    lu.assertStrContains(s.bad_op, "glimpse.dist.allreduce: bad argument #2")
    lu.assertStrContains(s.generated_data, "Trainer: option 'distributed' needs a dataset")
    lu.assertStrContains(s.small_batch, "Trainer: option 'batch_size' (1) must be at least the "
                                        .. "number of ranks (2)")
  end
  lu.assertEquals(seen[1].shard, {"a", "c", "e"})
  lu.assertEquals(seen[2].shard, {"b", "d"})
end

function T.test_a_failing_rank_ends_the_job_with_an_error()
  skip_without_mpirun()
  local script = script_file([[
    local glimpse = require "glimpse"
    if glimpse.dist.rank() == 1 then error("rank 1 gives up") end
    glimpse.dist.allreduce(glimpse.ones(4))   -- rank 0 waits here for a rank that is gone
  ]])
  local t0 = os.time()
  local out, ok = sh(glimpse_cmd(2, {script}))
  lu.assertFalse(ok)
  lu.assertStrContains(out, "rank 1 gives up")
  -- ended by mpirun when rank 1 exited, not by the timeout while rank 0 waited
  lu.assertTrue(os.time() - t0 < TIMEOUT / 2, out)
end

function T.test_under_a_launcher_without_mpi_glimpse_stops_with_the_reason()
  skip_without_mpirun()
  local script, d = script_file('require("glimpse").dist.init()')
  local out, ok = sh("GLIMPSE_MPI_PLUGIN=" .. H.sh_quote(d .. "/none.so") .. " "
                     .. glimpse_cmd(2, {script}))
  lu.assertFalse(ok)
  lu.assertStrContains(out, "glimpse.dist.init: started by an MPI launcher for 2 ranks but MPI "
                            .. "cannot be loaded: GLIMPSE_MPI_PLUGIN=" .. d .. "/none.so: no such file")
end

function T.test_data_parallel_seq2seq_equals_one_process_with_the_same_global_batch()
  skip_without_mpirun()
  local d = H.tmpdir()
  run_glimpse(nil, {"tests/dist/train.lua", d .. "/one.st", "20"})
  local out = run_glimpse(2, {"tests/dist/train.lua", d .. "/two.st", "20", "--distributed"})
  lu.assertStrContains(out, "rank 0 of 2: 20 steps")
  lu.assertStrContains(out, "rank 1 of 2: 20 steps")
  assert_same_params(d .. "/one.st", d .. "/two.st", "2 ranks")
end

function T.test_a_time_limit_stops_every_rank_at_the_same_step()
  skip_without_mpirun()
  local d = H.tmpdir()
  -- a limit on rank 1 only, passed during the first step: rank 0 must stop after it too,
  -- or it would wait in the next step's allreduce for a rank that has finished
  local out = run_glimpse(2, {"tests/dist/train.lua", d .. "/t.st", "20", "--distributed",
                              "--time-limit", "1e-9", "1"})
  lu.assertStrContains(out, "rank 0 of 2: 1 steps")
  lu.assertStrContains(out, "rank 1 of 2: 1 steps")
  local _, n = out:gsub("stopped by time", "")
  lu.assertEquals(n, 2, out)
end

function T.test_rank_0_decides_an_early_stop_for_every_rank()
  skip_without_mpirun()
  local script = script_file([[
    local glimpse = require "glimpse"
    local ds = {n = 32, collate = function(_, idx) return glimpse.full({#idx, 1}, 1) end}
    local rank = glimpse.dist.rank()
    local h = glimpse.train.Trainer{
      model = glimpse.nn.Linear(1, 1), optimizer = {"SGD", lr = 0.1}, data = ds,
      batch_size = 8, steps = 50, progress = false, distributed = true, eval_every = 5,
      loss = function(m, x) return m(x):pow(2):mean() end,
      -- alone, rank 1 would stop at step 5 and rank 0 at step 10
      evaluate = function(_, step) return {ok = step >= (rank == 0 and 10 or 5) and 1 or 0} end,
      target = {metric = "ok", value = 1}}:fit()
    print(string.format("rank %d stopped at step %d by %s", rank, h.steps, h.stopped))
  ]])
  local out = run_glimpse(2, {script})
  lu.assertStrContains(out, "rank 0 stopped at step 10 by target")
  lu.assertStrContains(out, "rank 1 stopped at step 10 by target")
end

function T.test_resume_on_a_different_number_of_ranks()
  skip_without_mpirun()
  local d = H.tmpdir()
  run_glimpse(nil, {"tests/dist/train.lua", d .. "/straight.st", "20"})
  -- 10 steps on 2 ranks, then 10 more in one process, from rank 0's checkpoint
  local ck = d .. "/a.ckpt"
  local out = run_glimpse(2, {"tests/dist/train.lua", d .. "/x.st", "10", "--distributed",
                              "--checkpoint", ck, "--progress"})
  lu.assertStrContains(out, "rank 1 of 2: 10 steps")
  run_glimpse(nil, {"tests/dist/train.lua", d .. "/a.st", "20", "--distributed",
                    "--checkpoint", ck})
  assert_same_params(d .. "/straight.st", d .. "/a.st", "2 ranks, then 1")
  -- 10 steps in one process, then 10 more on 2 ranks; rank 0 alone says it resumes
  ck = d .. "/b.ckpt"
  run_glimpse(nil, {"tests/dist/train.lua", d .. "/x.st", "10", "--checkpoint", ck})
  out = run_glimpse(2, {"tests/dist/train.lua", d .. "/b.st", "20", "--distributed",
                        "--checkpoint", ck, "--progress"})
  local _, says = out:gsub("resuming from", "")
  lu.assertEquals(says, 1, out)
  assert_same_params(d .. "/straight.st", d .. "/b.st", "1 rank, then 2")
end

-- batch norm: the statistics of the whole global batch on every rank (SyncBatchNorm), so 2
-- ranks train what one process trains; each rank's own statistics drift far from it
function T.test_batchnorm_on_two_ranks_equals_one_process_with_the_same_global_batch()
  skip_without_mpirun()
  local d = H.tmpdir()
  run_glimpse(nil, {"tests/dist/batchnorm.lua", d .. "/one.st", "30"})
  local out = run_glimpse(2, {"tests/dist/batchnorm.lua", d .. "/two.st", "30", "--distributed"})
  lu.assertStrContains(out, "rank 1 of 2: 30 steps")
  assert_same_params(d .. "/one.st", d .. "/two.st", "2 ranks with batch norm")
  run_glimpse(2, {"tests/dist/batchnorm.lua", d .. "/own.st", "30", "--distributed", "--no-sync"})
  local a, b = glimpse.load(d .. "/one.st"), glimpse.load(d .. "/own.st")
  local w = a["fc.weight"]
  lu.assertTrue((w - b["fc.weight"]):abs():max():item() / w:abs():max():item() > 0.05,
                "sync_batchnorm = false: each rank normalises its own shard")
end

-- the settings that must agree are compared when the Trainer is made: one message on every
-- rank naming the setting and the ranks, no hang (with or without a pcall around it)
function T.test_a_trainer_with_different_steps_on_each_rank_fails_on_both_ranks()
  skip_without_mpirun()
  local template = [[
    local glimpse = require "glimpse"
    local rank = glimpse.dist.init()
    local ds = {n = 32, collate = function(_, idx) return glimpse.full({#idx, 1}, 1) end}
    local function make()
      return glimpse.train.Trainer{
        model = glimpse.nn.Linear(1, 1), optimizer = {"SGD", lr = 0.1}, data = ds,
        batch_size = 8, steps = 30 + 10 * rank, progress = false, distributed = true,
        loss = function(m, x) return m(x):pow(2):mean() end}
    end
    %s
  ]]
  local out = run_glimpse(2, {script_file(string.format(template, [[
    local ok, err = pcall(make)
    print(string.format("rank %d: %s", rank, tostring(err)))]]))})
  for r = 0, 1 do
    lu.assertStrContains(out, string.format("rank %d: Trainer: the ranks disagree "
      .. "on a setting (every rank must make the Trainer with the same settings and model): "
      .. "'steps': rank 0 has 30, rank 1 has 40", r))
  end
  local script = script_file(string.format(template, "make():fit()"))
  local failed = sh("{ " .. glimpse_cmd(2, {script}) .. "; echo rc=$?; }")
  local rc = tonumber(failed:match("rc=(%d+)"))
  lu.assertNotEquals(rc, 0, failed)
  lu.assertNotEquals(rc, 124, "the job hung until the timeout:\n" .. failed)
  lu.assertStrContains(failed, "'steps': rank 0 has 30, rank 1 has 40")
end

-- synchronised batch norm needs every rank in every step: a last batch with fewer examples
-- than ranks is refused up front, with the ways out
function T.test_batchnorm_with_a_batch_shorter_than_the_ranks_is_refused()
  skip_without_mpirun()
  local out = run_glimpse(2, {script_file([[
    local glimpse = require "glimpse"
    local rank = glimpse.dist.init()
    local ds = {n = 17, collate = function(_, idx) return glimpse.full({#idx, 2}, 1) end}
    local net = glimpse.nn.Sequential{glimpse.nn.Linear(2, 2), glimpse.nn.BatchNorm1d(2)}
    local ok, err = pcall(glimpse.train.Trainer, {
      model = net, optimizer = {"SGD", lr = 0.1}, data = ds, batch_size = 8, steps = 3,
      progress = false, distributed = true, loss = function(m, x) return m(x):sum() end})
    print(string.format("rank %d: %s", rank, tostring(err)))]])})
  lu.assertStrContains(out, "rank 1: Trainer: option 'distributed' with batch norm "
                       .. "(synchronised over the ranks): the last batch of each epoch has 1 "
                       .. "example for 2 ranks")
  lu.assertStrContains(out, "drop_last = true")
end

function T.test_a_script_on_two_ranks_tests_prints_and_writes_on_rank_0_only()
  skip_without_mpirun()
  local d = H.tmpdir()
  local out = run_glimpse(2, {"scripts/seq2seq.lua", "--distributed", "--quick", "--steps", "4",
                              "--valid", "20", "--train", "200", "--maps", "2", "--out", d .. "/s"})
  -- the summary and the closing line come once (rank 0), not once a rank
  local function count(text)
    local n = 0
    for _ in out:gmatch(text) do n = n + 1 end
    return n
  end
  lu.assertEquals(count("final: exact%-sequence accuracy"), 1, out)
  lu.assertEquals(count("wrote alignment heatmaps"), 1, out)
  local m = util.read_json(d .. "/s/metrics.json")
  lu.assertEquals(m.steps, 4)
  lu.assertTrue(H.read_file(d .. "/s/samples.txt") ~= nil)
  lu.assertTrue(H.read_file(d .. "/s/index.html") ~= nil)
end

-- ---------------------------------------------------------------------------------------
-- compare sweeps over the ranks (scripts/compare.lua, glimpse.compare.run)

local TIMING = {ms_per_step = true, cpu_ms_per_step = true, train_seconds = true,
                wall_seconds = true, cpu_seconds = true, peak_rss_kb = true}  -- measurements

local function without_timing(rows)
  local out = {}
  for i, r in ipairs(rows) do
    out[i] = {}
    for k, v in pairs(r) do if not TIMING[k] then out[i][k] = v end end
  end
  return out
end

function T.test_a_compare_sweep_on_two_ranks_writes_what_one_process_writes()
  skip_without_mpirun()
  local d = H.tmpdir()
  local grid = {"scripts/compare.lua", "--mechanisms", "additive/soft,dot/soft,rnnenc",
                "--tasks", "reversal", "--seeds", "1", "--steps", "40", "--eval-every", "20",
                "--train-n", "200", "--valid-n", "20", "--test-n", "10", "--test-lengths", "10,20"}
  local function with_out(dir)
    local a = table.move(grid, 1, #grid, 1, {})
    a[#a + 1] = "--out"
    a[#a + 1] = dir
    return a
  end
  run_glimpse(nil, with_out(d .. "/one"))
  local out = run_glimpse(2, with_out(d .. "/two"))
  -- three configurations: two on rank 0, one on rank 1, each rank on one worker
  lu.assertStrContains(out, "compare (rank 0 of 2): 2 configurations to run with 1 job")
  lu.assertStrContains(out, "compare (rank 1 of 2): 1 configurations to run with 1 job")
  lu.assertStrContains(out, "compare: 3 results, 0 failed, 0 not run")
  local one, two = util.read_json(d .. "/one/results.json"), util.read_json(d .. "/two/results.json")
  lu.assertEquals(#one.results, 3)
  for _, r in ipairs(two.results) do lu.assertTrue(r.accuracy_mean > 0, r.mechanism) end
  lu.assertEquals(without_timing(two.results), without_timing(one.results))
  lu.assertEquals({two.failures, two.missing, two.skipped}, {one.failures, one.missing, one.skipped})
  -- run again: everything is finished, nothing runs on either rank
  out = run_glimpse(2, with_out(d .. "/two"))
  lu.assertStrContains(out, "compare (rank 0 of 2): 0 configurations to run")
  lu.assertStrContains(out, "compare (rank 1 of 2): 0 configurations to run")
end

function T.test_a_failed_configuration_on_rank_1_is_reported_and_run_again()
  skip_without_mpirun()
  local d = H.tmpdir()
  local out = run_glimpse(2, {"tests/dist/compare.lua", d .. "/c", "--break"})
  local id = out:match("rank 0: 1 records, 1 failed %((reversal%.rnnenc%.s1%.%x+)%)")  -- id: the settings' hash
  lu.assertNotNil(id, out)
  lu.assertStrContains(out, "rank 1: no outputs")
  local failed = util.read_json(d .. "/c/runs/" .. id .. ".json")
  lu.assertStrContains(failed.error, "no-such-task")
  -- the next invocation runs the failed one again (only it), and rank 0 has every result
  out = run_glimpse(2, {"tests/dist/compare.lua", d .. "/c"})
  lu.assertStrContains(out, "rank 0: 2 records, 0 failed ()")
  lu.assertEquals(#util.read_json(d .. "/c/results.json").results, 2)
end

return T
