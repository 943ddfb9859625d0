-- scripts/compare.lua -- attention mechanisms side by side in one command: every mechanism
-- (score/mode, supervised attention, the RNNenc and Transformer baselines) on every task of
-- datasets/compare_tasks.lua (trained on lengths 5-20, tested up to 50) with several seeds,
-- each configuration on a step budget with a fixed seed in its own worker process, so the
-- same command gives the same table on any machine.  Writes DIR/results.json, results.md and
-- index.html (tables, accuracy-against-length and learning-curve charts, a grid of alignment
-- heatmaps of one test example under every mechanism).  Re-running resumes: finished
-- configurations are kept in DIR/runs/ and skipped.
--
--   glimpse scripts/compare.lua --quick --out out/compare-quick       (about 2-3 minutes)
--   glimpse scripts/compare.lua --out out/compare                      (the default grid)
--   glimpse scripts/compare.lua --scores dot,general,additive --modes soft,local-p \
--                               --baselines rnnenc --tasks reversal,lookup --seeds 2
--   glimpse scripts/compare.lua --mechanisms additive/monotonic,transformer-learned
--
-- The library under it is glimpse.compare (docs/api/compare.md).
local glimpse = require "glimpse"
local experiment, compare, util = glimpse.experiment, glimpse.compare, glimpse.util

local QUICK_MECHANISMS = "additive/soft,dot/soft,general/local-m,general/local-p," ..
                         "additive/monotonic,rnnenc,transformer"

local parser = experiment.parser("compare", "Compare attention mechanisms on tasks that " ..
                                 "separate them.", {
  steps = compare.DEFAULTS.steps, eval_every = compare.DEFAULTS.eval_every,
  quick = {steps = 250, mechanisms = QUICK_MECHANISMS, tasks = "reversal", seeds = 2,
           train_n = 3000, valid_n = 100, test_n = 50, test_lengths = "10,30,50",
           eval_every = 100}})
parser:option("--mechanisms", "comma list of score/mode[+sup], rnnenc, transformer, " ..
              "transformer-learned (default: the standard grid)")
parser:option("--scores", "comma list of scores (with --modes: every pair): " ..
              table.concat(glimpse.attention.SCORES, ","))
parser:option("--modes", "comma list of modes: " .. table.concat(glimpse.attention.MODES, ","),
              "soft")
parser:option("--baselines", "with --scores: comma list of rnnenc, transformer, " ..
              "transformer-learned", "rnnenc,transformer")
parser:option("--tasks", "comma list: " .. table.concat(glimpse.data.compare.TASKS, ","),
              table.concat(glimpse.data.compare.TASKS, ","))
parser:option("--seeds", "seeds per configuration (1..N)", "3"):convert(tonumber)
parser:option("--jobs", "worker processes (default: one per core)"):convert(tonumber)
parser:option("--batch", "batch size", tostring(compare.DEFAULTS.batch)):convert(tonumber)
parser:option("--lr", "Adam learning rate (RNN models)", tostring(compare.DEFAULTS.lr))
  :convert(tonumber)
parser:option("--hidden", "RNN decoder size", tostring(compare.DEFAULTS.hidden)):convert(tonumber)
parser:option("--train-n", "training examples", tostring(compare.DEFAULTS.train_n))
  :convert(tonumber)
parser:option("--valid-n", "validation examples (training lengths)",
              tostring(compare.DEFAULTS.valid_n)):convert(tonumber)
parser:option("--test-n", "test examples per length", tostring(compare.DEFAULTS.test_n))
  :convert(tonumber)
parser:option("--test-lengths", "comma list of test source lengths", "10,20,30,40,50")
parser:option("--supervise", "weight of the supervised-attention loss (+sup mechanisms)",
              tostring(compare.DEFAULTS.supervise)):convert(tonumber)
parser:flag("--report-only", "run nothing: write the outputs from the configurations " ..
            "finished so far in --out")
local args = experiment.parse(parser)

local function ints(s, what)
  local t = {}
  for x in tostring(s):gmatch("[^,%s]+") do
    local n = math.tointeger(tonumber(x))
    if not n or n < 1 then parser:error(what .. ": '" .. x .. "' is not a positive integer") end
    t[#t + 1] = n
  end
  return t
end

local function whole(v, what)
  local n = math.tointeger(v)
  if not n or n < 1 then parser:error(what .. " must be a positive integer") end
  return n
end

local settings = compare.settings{
  steps = args.steps, eval_every = args.eval_every, batch = whole(args.batch, "--batch"),
  lr = args.lr, hidden = whole(args.hidden, "--hidden"), train_n = whole(args.train_n, "--train-n"),
  valid_n = whole(args.valid_n, "--valid-n"), test_n = whole(args.test_n, "--test-n"),
  test_lengths = ints(args.test_lengths, "--test-lengths"), supervise = args.supervise}
if args.steps < 1 then parser:error("--steps must be at least 1") end

local mechanisms = args.mechanisms
if not mechanisms and not args.scores then mechanisms = compare.MECHANISMS end
local ok, configs, skipped = pcall(compare.grid, {
  mechanisms = mechanisms, scores = args.scores, modes = args.modes,
  baselines = args.baselines, tasks = args.tasks, seeds = whole(args.seeds, "--seeds"),
  settings = settings})
if not ok then parser:error(tostring(configs):gsub("^.-:%d+: ", "")) end
-- under mpirun each rank runs its share of the grid on one worker; rank 0 writes and prints
local rank, ranks = glimpse.dist.init()
for _, s in ipairs(skipped) do
  if rank == 0 then print(string.format("compare: skipping %s: %s", s.mechanism, s.reason)) end
end
local jobs = args.jobs and whole(args.jobs, "--jobs") or compare.cores()
if ranks > 1 then jobs = 1 end

util.mkdir_p(args.out)
local run = experiment.start(args, {name = "compare", config = settings, quiet = true})
if rank == 0 then
  print(string.format("compare: %d configurations (tasks %s, %d seeds), %d steps each, %s, " ..
                      "out %s", #configs, args.tasks, args.seeds, args.steps,
                      ranks > 1 and ranks .. " ranks" or jobs .. " jobs", args.out))
end
local rows, records, failures, missing = compare.run{configs = configs, out = args.out, jobs = jobs,
                                            skipped = skipped, command = util.command_line(),
                                            run = not args.report_only}
if not rows then return end                    -- another MPI rank: rank 0 writes
run:write_run_json({configurations = #configs, failed = #failures})

-- the table's extremes on the long lengths, the number the issue asks to separate
for _, task in ipairs(glimpse.data.compare.TASKS) do
  local best, worst
  for _, r in ipairs(rows) do
    if r.task == task and r.long_accuracy_mean then
      if not best or r.long_accuracy_mean > best.long_accuracy_mean then best = r end
      if not worst or r.long_accuracy_mean < worst.long_accuracy_mean then worst = r end
    end
  end
  if best then
    print(string.format("%s: long-length token accuracy best %s %.1f%%, worst %s %.1f%% " ..
                        "(%.1f points apart)", task, best.mechanism, 100 * best.long_accuracy_mean,
                        worst.mechanism, 100 * worst.long_accuracy_mean,
                        100 * (best.long_accuracy_mean - worst.long_accuracy_mean)))
  end
end
for _, f in ipairs(failures) do
  print(string.format("FAILED %s: %s", f.id, tostring(f.error):match("[^\n]*")))
end
print(string.format("compare: %d results, %d failed, %d not run; wrote %s/results.json, " ..
                    "results.md, index.html", #records, #failures, #missing, args.out))
