-- scripts/compare.lua -- attention mechanisms side by side in one command: every mechanism
-- (score/mode, supervised attention, the RNNenc and Transformer baselines) on every task of
-- datasets/compare_tasks.lua (trained on lengths 5-20, tested up to 50), or on tasks of
-- one's own (--task-file FILE: docs/api/compare.md#your-own-task), with several seeds, each
-- configuration on a step budget with a fixed seed in its own worker process, so the same
-- command gives the same table on any machine.  Writes DIR/results.json, results.md and
-- index.html.  Re-running resumes (DIR/runs/ keeps finished configurations); one compare at a
-- time writes DIR (a lock); Ctrl-C stops the workers, records their runs as interrupted and
-- writes what finished.  Exit status: 0 when every configuration finished, 1 when any failed,
-- 130 after a Ctrl-C.  --seed S: seeds S..S+N-1 (--seeds N); --threads: each worker's
-- threads; --time-limit: each configuration's time guard (a run it stops counts as failed).
--
--   glimpse scripts/compare.lua --quick --out out/compare-quick       (about 2 minutes)
--   glimpse scripts/compare.lua --out out/compare                      (the default grid)
--   glimpse scripts/compare.lua --task-file my_task.lua --quick \
--                               --mechanisms dot/soft,general/soft,additive/soft,mine/soft
--   glimpse scripts/compare.lua --grid length --out out/compare-length    (Transformer positions)
-- The library under it is glimpse.compare (docs/api/compare.md).
local glimpse = require "glimpse"
local experiment, compare, util = glimpse.experiment, glimpse.compare, glimpse.util

-- --quick: the 11 mechanisms, 1 seed, 600 steps on these (ranks as the default run: compare.md)
local QUICK_TASKS = "reversal,sorting,dates"
local SETTINGS = {"batch", "lr", "hidden", "train_n", "valid_n", "test_n", "supervise"}
local GRID = {"mechanisms", "scores", "modes", "baselines", "tasks", "seeds"}
local TASKS = table.concat(glimpse.data.compare.TASKS, ",")

local parser = experiment.parser("compare", "Compare attention mechanisms on tasks that " ..
                                 "separate them.", {
  steps = compare.DEFAULTS.steps, eval_every = compare.DEFAULTS.eval_every,
  quick = {steps = 600, seeds = 1, train_n = 3000, valid_n = 100, test_n = 50,
           test_lengths = "10,30,40,50", eval_every = 100}})
experiment.add_flags(parser, compare.grid_options, GRID, {
  mechanisms = {help = "comma list of score/mode[+sup], rnnenc, transformer[-positions]" ..
                       "[+variant...] (default: the standard grid)"},
  scores = {help = "comma list of scores (with --modes: every pair): " ..
                   table.concat(glimpse.attention.SCORES, ",")},
  modes = {default = "soft", help = "comma list of modes: " ..
                                    table.concat(glimpse.attention.MODES, ",")},
  baselines = {default = "rnnenc,transformer",
               help = "with --scores: comma list of rnnenc, transformer, transformer-learned"},
  tasks = {help = "comma list of tasks (" .. TASKS .. ", " ..
                  table.concat(glimpse.data.compare.MORE_TASKS, ",") .. ") or task files " ..
                  "(default: the --task-file tasks, else " .. TASKS .. "; --quick: " ..
                  QUICK_TASKS .. ")"},
  seeds = {help = "seeds per configuration (1..N)"}})
experiment.add_flags(parser, compare.run_options, {"jobs"},
                     {jobs = {help = "worker processes (default: one per core)"}})
experiment.add_flags(parser, compare.settings_options, SETTINGS)
parser:option("--test-lengths", "comma list of test source lengths", "10,20,30,40,50")
parser:option("--task-file", "a Lua file defining tasks (and scores) of one's own; " ..
              "several allowed"):count("*")
parser:flag("--report-only", "run nothing: write the outputs from the configurations " ..
            "finished so far in --out")
parser:option("--grid", "a named grid's flags where none are given: length"):choices({"length"})
local args = experiment.parse(parser)
if args.grid then compare.apply_grid(args, args.grid) end
if args.steps < 1 then parser:error("--steps must be at least 1") end

-- everything is checked before anything is written: a bad list or an empty grid is refused
local given = compare.settings_options:from_args(args, SETTINGS)
given.steps, given.eval_every = args.steps, args.eval_every
given.test_lengths = experiment.int_list(parser, "--test-lengths", args.test_lengths, 1)
if #given.test_lengths == 0 then parser:error("--test-lengths must list at least one length") end
local ok, settings = pcall(compare.settings, given)
if not ok then parser:error(glimpse.check.strip(settings)) end

local o = compare.grid_options:from_args(args, GRID)
if not o.mechanisms and not o.scores then o.mechanisms = compare.MECHANISMS end
-- task files: --task-file (task_file in --config), and --config when its tasks hold tables
o.task_files = type(args.task_file) == "string" and {args.task_file} or args.task_file or {}
for i, t in ipairs(type(o.tasks) == "table" and o.tasks or {}) do
  if type(t) == "table" then o.tasks[i], o.task_files[#o.task_files + 1] = t.name, args.config end
end
if not o.tasks and #o.task_files == 0 and args.quick then o.tasks = QUICK_TASKS end
o.settings = settings
o.seeds = {}                                  -- --seeds N from --seed: seed .. seed + N - 1
for i = 1, args.seeds do o.seeds[i] = args.seed + i - 1 end
local configs, skipped
ok, configs, skipped = pcall(compare.grid, o)
if not ok then parser:error(glimpse.check.strip(configs)) end
if #configs == 0 then
  local why = {}
  for _, s in ipairs(skipped) do why[#why + 1] = s.mechanism .. ": " .. s.reason end
  parser:error("no configuration to run: every mechanism was skipped (" .. table.concat(why, "; ") .. ")")
end
-- under mpirun each rank runs its share of the grid on one worker; rank 0 writes and prints
local rank, ranks = glimpse.dist.init()
for _, s in ipairs(rank == 0 and skipped or {}) do
  print(string.format("compare: skipping %s%s: %s", s.mechanism, s.task and " on " .. s.task or "",
                      s.reason))
end
local jobs = args.jobs or compare.cores()
if ranks > 1 then jobs = 1 end
-- --threads N: N threads in each worker (0: one); the numbers do not depend on it
local threads = args.threads > 0 and args.threads or 1

util.mkdir_p(args.out)
local run = experiment.start(args, {name = "compare", config = settings, quiet = true})
local tasks, seen = {}, {}                    -- the grid's tasks, in order
for _, c in ipairs(configs) do
  if not seen[c.task] then seen[c.task], tasks[#tasks + 1] = true, c.task end
end
if rank == 0 then
  print(string.format("compare: %d configurations (tasks %s, seeds %d..%d), %d steps each, %s, " ..
                      "%d thread%s each, out %s", #configs, table.concat(tasks, ","), args.seed,
                      args.seed + args.seeds - 1, args.steps,
                      ranks > 1 and ranks .. " ranks" or jobs .. " jobs", threads,
                      threads == 1 and "" or "s", args.out))
end
local done, rows, records, failures, missing, interrupted = pcall(compare.run, {
  configs = configs, out = args.out, jobs = jobs, threads = threads,
  time_limit = args.time_limit, skipped = skipped, command = util.command_line(),
  run = not args.report_only})
if not done then                               -- the folder is locked, a record is not ours...
  io.stderr:write(glimpse.check.strip(rows):match("^[^\n]*"), "\n")
  os.exit(glimpse.compare.is_interrupt(rows) and 130 or 1)
end
if not rows then return end                    -- another MPI rank: rank 0 writes
run:write_run_json({configurations = #configs, failed = #failures, interrupted = interrupted})

-- the table's extremes on the long lengths: how far apart the mechanisms are
for _, task in ipairs(tasks) do
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
-- the exit status says whether the table is whole: 130 after a Ctrl-C, 1 when a
-- configuration failed (or, in a run, ended without a record)
if interrupted then
  print(string.format("compare: interrupted: %d configurations not finished; the same command " ..
                      "resumes", #missing))
  os.exit(130)
end
if #failures > 0 or (not args.report_only and #missing > 0) then os.exit(1) end
