--- glimpse.compare -- attention mechanisms side by side: a grid of configurations (mechanism
-- x task x seed), each trained on a step budget with a fixed seed in its own worker process,
-- measured the same way, gathered into results.json, results.md and an HTML page.
--
--   local s = compare.settings{steps = 600}
--   local configs, skipped = compare.grid{mechanisms = {"additive/soft", "rnnenc"},
--                                         tasks = {"reversal"}, seeds = 2, settings = s}
--   compare.run{configs = configs, out = "out/compare", jobs = 2}   -- resumable
--
--   compare.grid{task_files = {"my_task.lua"}, mechanisms = "dot/soft,mine/soft"}  -- one's own
--
-- The parts: compare/grid.lua (settings, mechanisms, grid, shard), tasks.lua (the task
-- contract: define_task, register_task, task files), measure.lua (run_config), records.lua
-- (what a runs/<id>.json must hold: validate, inspect), lock.lua (one compare per output
-- folder), scheduler.lua (pending, run_local, work, gather), summary.lua, page.lua
-- (markdown, write).
-- The options of settings, grid, run and run_local are compare.<name>_options.
local check = require "glimpse.check"
local options = require "glimpse.options"
local util = require "glimpse.util"
local grid = require "glimpse.lab.compare.grid"
local measure = require "glimpse.lab.compare.measure"
local scheduler = require "glimpse.lab.compare.scheduler"
local summary = require "glimpse.lab.compare.summary"
local page = require "glimpse.lab.compare.page"
local records = require "glimpse.lab.compare.records"
local lock = require "glimpse.lab.compare.lock"
local own = require "glimpse.lab.compare.tasks"

local M = {}

--- The default mechanisms: Luong's scores with global attention (dot, general, location),
--- Bahdanau's additive, the convolutional score, Luong's local modes, monotonic and supervised
--- attention and the two baselines (the rest of the grid by flags).
M.MECHANISMS = {"additive/soft", "dot/soft", "general/soft", "location/soft", "conv/soft",
                "general/local-m", "general/local-p", "additive/monotonic", "additive/soft+sup",
                "rnnenc", "transformer"}

M.settings, M.settings_options = grid.settings, grid.SETTINGS
M.settings_key, M.settings_hash = grid.settings_key, grid.settings_hash
M.validate, M.inspect, M.same_config = records.validate, records.inspect, records.same_config
M.parse_mechanism, M.grid, M.grid_options, M.shard = grid.parse_mechanism, grid.grid, grid.GRID,
                                                     grid.shard
M.GRIDS, M.named_grid, M.grid_flags, M.apply_grid = grid.GRIDS, grid.named_grid,
                                                    grid.grid_flags, grid.apply_grid
M.TRANSFORMER_POSITIONS, M.TRANSFORMER_VARIANTS = grid.TRANSFORMER_POSITIONS,
                                                  grid.TRANSFORMER_VARIANTS
M.run_config = measure.run_config
M.pending, M.work, M.cores = scheduler.pending, scheduler.work, scheduler.cores
M.is_interrupt = scheduler.is_interrupt
M.run_local, M.run_local_options, M.gather = scheduler.run_local, scheduler.RUN_LOCAL,
                                             scheduler.gather
M.summarise = summary.summarise
M.markdown, M.charts, M.write = page.markdown, page.charts, page.write
M.write_meta, M.heatmap_options = page.write_meta, page.heatmap_options
M.define_task, M.register_task, M.load_task_file = own.define_task, own.register_task,
                                                   own.load_task_file
M.ensure_task_files, M.score_file, M.digest = own.ensure_task_files, own.score_file, own.digest
M.TASK_FIELDS = own.SPEC_FIELDS
M.RECORD_FIELDS, M.OPTIONAL_FIELDS, M.ROW_FIELDS = records.FIELDS, records.OPTIONAL,
                                                   summary.ROW_FIELDS
M.complete, M.null = records.complete, records.null

--- compare.DEFAULTS: the settings' defaults (compare.settings_options holds them with their
--- types, ranges and help)
M.DEFAULTS = grid.SETTINGS:check({})

M.run_options = options.declare("compare.run", {
  {"configs", "table", nil, required = true, help = "the configurations (compare.grid)"},
  {"out", "string", nil, required = true, help = "the output folder (resumable)"},
  {"jobs", "int", nil, range = {1}, help = "worker processes (default: the cores; MPI: 1)"},
  {"threads", "int", 1, range = {1}, help = "engine and BLAS threads of each worker"},
  {"time_limit", "number", nil, range = {0}, finite = true,
   help = "each configuration's most training seconds (a guard: a run it stops fails)"},
  {"skipped", "table", nil, help = "grid's skipped mechanisms, listed on the page"},
  {"command", "string", nil, help = "the command line, shown on the page"},
  {"say", "function", nil, help = "function(line) for the progress lines (default print)"},
  {"run", "boolean", true, help = "false: run nothing, write the outputs of what is finished"},
})

-- ---------------------------------------------------------------------------------------
-- the whole run

-- glimpse.dist when this process is one of several MPI ranks, else nil
local function distributed()
  local ok, dist = pcall(require, "glimpse.lab.dist")
  if not ok or type(dist) ~= "table" then return nil end
  if dist.init then pcall(dist.init) end
  local okr, size = pcall(dist.size)
  if not okr or type(size) ~= "number" or size <= 1 then return nil end
  return dist
end

local function check_configs(configs)
  if #configs == 0 then
    check.fail(3, "compare.run: no configurations (an empty grid): nothing is run or written")
  end
  local ids = {}
  for i, c in ipairs(configs) do
    if type(c) ~= "table" or type(c.id) ~= "string" or type(c.settings) ~= "table" then
      check.fail(3, "compare.run: configs[%d] is not a configuration from compare.grid", i)
    end
    if ids[c.id] then check.fail(3, "compare.run: two configurations have the id '%s'", c.id) end
    ids[c.id] = true
  end
end

-- the part of run that holds the lock (on rank 0 under MPI)
local function run_locked(o, say, dist, lock)
  local jobs = dist and 1 or o.jobs or scheduler.cores()  -- under MPI: one worker process per rank
  -- what is left to run, seed by seed: a run cut short still covers every task and
  -- mechanism with its first seeds.  Under MPI rank 0's folder decides, and the ranks split
  -- the pending list (item i to rank (i - 1) % size), so a resumed run stays balanced.
  local waiting = {}
  if not dist or dist.is_root() then
    local notes
    waiting, notes = scheduler.pending(o.configs, o.out)
    for _, n in ipairs(notes) do
      if n.state == "other" then
        check.fail(3, "compare: %s holds a finished record of %s made with other settings; it " ..
                   "is not overwritten: move it away or choose another --out", n.path, n.id)
      end
    end
    for _, n in ipairs(notes) do
      if o.run ~= false then
        say(string.format("compare: %s is malformed (%s): it runs again", n.path, n.why))
      end
    end
    local index = {}
    for i, c in ipairs(waiting) do index[c] = i end
    table.sort(waiting, function(a, b)
      if a.seed ~= b.seed then return a.seed < b.seed end
      return index[a] < index[b]
    end)
  end
  if dist then
    local ids = {}
    for i, c in ipairs(waiting) do ids[i] = c.id end
    local by_id = {}
    for _, c in ipairs(o.configs) do by_id[c.id] = c end
    waiting = {}
    for _, id in ipairs(dist.gather_tables({ids = ids})[1].ids or {}) do
      waiting[#waiting + 1] = by_id[id]
    end
    waiting = dist.shard(waiting)
  end
  local todo = o.run == false and {} or waiting  -- run = false: gather and write only
  local who = dist and string.format("compare (rank %d of %d)", dist.rank(), dist.size())
              or "compare"
  if dist then
    say(string.format("%s: %d configurations to run with 1 job", who, #todo))
  else
    say(string.format("compare: %d configurations, %d finished already, %d to run with %d jobs",
                      #o.configs, #o.configs - #waiting, #todo, jobs))
  end
  local timer, k, done = util.Timer(), 0, {}
  local _, interrupted = scheduler.run_local(todo, o.out, {
    jobs = jobs, threads = o.threads, time_limit = o.time_limit,
    on_start = lock and function(pgid) lock:set_workers(pgid) end,
    on_done = function(c, r)
      k = k + 1
      if r.error then
        say(string.format("[%d/%d] %s FAILED: %s", k, #todo, c.id, tostring(r.error):match("[^\n]*")))
        r = {error = tostring(r.error), id = c.id, task = c.task, mechanism = c.mechanism,
             seed = c.seed, config = c}
      elseif r.interrupted then
        say(string.format("[%d/%d] %s interrupted at step %s", k, #todo, c.id, tostring(r.steps)))
      else
        local long = 0
        for _, e in ipairs(r.accuracy_by_length) do long = math.max(long, e.length) end
        say(string.format("[%d/%d] %s: exact %s%% at length %d, %.1f ms/step, %.0f s (%.0f s so far)",
                          k, #todo, c.id, page.pct(r.accuracy_by_length[1].exact),
                          r.accuracy_by_length[1].length, r.ms_per_step, r.wall_seconds,
                          timer:elapsed()))
      end
      done[#done + 1] = r
    end})
  if dist then
    -- every rank's results (finished or failed) to rank 0, which keeps them in its runs/
    -- folder: the ranks need not share a file system, and a failure is re-run next time
    local all = dist.gather_tables({results = done})
    if not dist.is_root() then return nil end
    for _, part in ipairs(all) do
      for _, r in ipairs(part.results or {}) do
        if r.config then util.write_json(scheduler.result_path(o.out, r.config), r) end
      end
    end
  end
  local found, failures, missing = scheduler.gather(o.configs, o.out)
  local rows = summary.summarise(found)
  page.write(o.out, rows, found, {skipped = o.skipped, failures = failures, missing = missing,
                                  command = o.command, seconds = timer:elapsed(),
                                  jobs = dist and dist.size() or jobs, interrupted = interrupted})
  return rows, found, failures, missing, interrupted
end

--- compare.run{configs=, out=, jobs=cores, threads=1, time_limit=, skipped=, command=,
--- say=print, run=true} -> rows, records, failures, missing, interrupted: runs the pending
--- configurations (resuming: finished ones are kept; seed by seed, so that a run cut short
--- covers the whole grid with its first seeds), gathers every result and writes the outputs.
--- Every runs/<id>.json is checked on read: a malformed one is named and runs again.  The
--- output folder is locked (OUT/compare.lock): a second compare on it is refused, the lock
--- of a compare that died is taken over.  A Ctrl-C stops the workers (their runs are
--- recorded as interrupted, never as finished), writes the outputs of what finished and
--- returns interrupted = true.  threads: each worker's threads; time_limit: each
--- configuration's time guard in seconds (a run it stops is a failure).  Under MPI
--- (glimpse.dist with size > 1) the ranks split rank 0's pending list (dist.shard), each runs
--- its part on one worker (jobs is ignored), and rank 0 gathers the records
--- (dist.gather_tables) and writes.  run = false runs nothing: the outputs of the
--- configurations finished so far (the rest are `missing`).  No configurations is an error.
function M.run(user)
  local o = M.run_options:check(user, 2)
  check_configs(o.configs)
  if o.time_limit and o.time_limit <= 0 then
    check.fail(2, "compare.run: option 'time_limit' must be a positive number, got %s",
               check.value(o.time_limit))
  end
  local say = o.say or print
  local dist = distributed()
  util.mkdir_p(o.out)
  local held = (not dist or dist.is_root()) and lock.acquire(o.out, say) or nil
  local res = table.pack(pcall(run_locked, o, say, dist, held))
  if held then held:release() end
  if not res[1] then error(res[2], 0) end
  return table.unpack(res, 2, res.n)
end

return M
