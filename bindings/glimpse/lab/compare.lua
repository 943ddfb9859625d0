--- glimpse.compare -- attention mechanisms side by side: a grid of configurations (mechanism
-- x task x seed), each trained on a step budget with a fixed seed in its own worker process,
-- measured the same way, gathered into results.json, results.md and an HTML page.
--
--   local compare = glimpse.compare
--   local s = compare.settings{steps = 600}                         -- training and test sizes
--   local configs, skipped = compare.grid{mechanisms = {"additive/soft", "rnnenc"},
--                                         tasks = {"reversal"}, seeds = 2, settings = s}
--   local record = compare.run_config(configs[1])                   -- one, in this process
--   compare.run{configs = configs, out = "out/compare", jobs = 2}   -- all, resumable
--
-- A mechanism is "score/mode" (any of glimpse.attention.SCORES / MODES, on models.Seq2Seq),
-- "score/mode+sup" (the same with supervised attention on the true alignment), "rnnenc" (no
-- attention: Bahdanau et al.'s RNNenc, the encoder's last states as the only context) or
-- "transformer" / "transformer-learned" (models.Transformer, sinusoidal / learned positions).
--
-- The pieces, so that another driver (an MPI layer) can split the work differently:
--   grid          the configurations, with the invalid pairs set aside and why
--   shard         which configurations one process (rank r of n) runs: i % n == r
--   pending       those without a finished result in the output folder (resuming)
--   run_local     runs configurations in parallel worker processes (xargs -P)
--   work          the worker: one configuration file in, one result file out
--   gather        reads the per-configuration results back (finished and failed)
--   summarise     mean and standard deviation over seeds, per task and mechanism
--   write         results.json, results.md, index.html and the heatmap pictures
local glimpse = require "glimpse"
local util = require "glimpse.util"
local att = require "glimpse.attention"
local models = require "glimpse.models"
local report = require "glimpse.lab.report"
local viz = require "glimpse.plot.viz"
local train = require "glimpse.lab.train"
local experiment = require "glimpse.lab.experiment"
local gdata = require "glimpse.data"
local tasks = require("glimpse").data.compare

local M = {}

--- The default mechanisms: Luong's scores with global attention (dot, general, location),
--- Bahdanau's additive, the convolutional score, Luong's local modes, monotonic and supervised
--- attention and the two baselines (the rest of the grid by flags: it would not fit the
--- default run's 30 minutes on two cores).
M.MECHANISMS = {"additive/soft", "dot/soft", "general/soft", "location/soft", "conv/soft",
                "general/local-m", "general/local-p", "additive/monotonic", "additive/soft+sup",
                "rnnenc", "transformer"}

--- compare.settings(o) -> the full settings table (o's entries over the defaults): what every
--- configuration of a grid shares.  An unknown key is an error.
M.DEFAULTS = {steps = 800, batch = 32, lr = 3e-3, clip = 5, emb = 16, hidden = 64,
              attn_hidden = 32, window = 3, kernel = 3, supervise = 0.5, d_model = 32,
              heads = 4, layers = 2, ff = 64, transformer_lr = 3e-3, train_n = 10000,
              valid_n = 200, test_n = 100, test_lengths = {10, 20, 30, 40, 50},
              eval_every = 100, heatmap_length = 20, data_seed = 1}

function M.settings(o)
  o = o or {}
  if type(o) ~= "table" then error("compare.settings: expected a table, got " .. type(o), 2) end
  local s = {}
  for k, v in pairs(M.DEFAULTS) do s[k] = v end
  for k, v in pairs(o) do
    if M.DEFAULTS[k] == nil then error("compare.settings: unknown setting '" .. tostring(k) .. "'", 2) end
    if type(v) ~= type(M.DEFAULTS[k]) then
      error(string.format("compare.settings: '%s' must be a %s, got %s", k, type(M.DEFAULTS[k]),
                          type(v)), 2)
    end
    s[k] = v
  end
  return s
end

-- ---------------------------------------------------------------------------------------
-- mechanisms and the grid

--- compare.parse_mechanism(name) -> {name=, kind="rnn"|"rnnenc"|"transformer", score=,
--- mode=, supervise=bool, positions=}; an error for a malformed name or an unknown part
function M.parse_mechanism(name)
  if type(name) ~= "string" then error("compare.parse_mechanism: name must be a string", 2) end
  if name == "rnnenc" then return {name = name, kind = "rnnenc", score = "none", mode = "none"} end
  if name == "transformer" or name == "transformer-learned" then
    return {name = name, kind = "transformer", score = "scaled_dot", mode = "multi-head",
            positions = name == "transformer" and "sinusoidal" or "learned"}
  end
  local score, mode, sup = name:match("^([%w_]+)/([%w%-]+)(%+?s?u?p?)$")
  if not score or (sup ~= "" and sup ~= "+sup") then
    error("compare: mechanism '" .. name .. "' is not score/mode[+sup], rnnenc or transformer", 2)
  end
  local function known(v, list, what)
    for _, x in ipairs(list) do if x == v then return end end
    error(string.format("compare: unknown %s '%s' in '%s' (have %s)", what, v, name,
                        table.concat(list, ", ")), 3)
  end
  known(score, att.SCORES, "score")
  known(mode, att.MODES, "mode")
  return {name = name, kind = "rnn", score = score, mode = mode, supervise = sup == "+sup"}
end

-- why a mechanism cannot be built (nil when it can): the model's own argument checks on a
-- tiny vocabulary
local function invalid(mech, s)
  if mech.kind ~= "rnn" then return nil end
  local ok, err = pcall(models.Seq2Seq, {src_vocab = {"a", "b"}, tgt_vocab = {"a", "b"},
                                         score = mech.score, mode = mech.mode, hidden = 4,
                                         emb = 2, attn_hidden = 2, kernel = s.kernel,
                                         window = s.window, max_src = 4})
  if ok then return nil end
  return (tostring(err):gsub("^.-:%d+: ", ""))
end

local function list_of(v, what)
  if type(v) == "string" then
    local t = {}
    for x in v:gmatch("[^,%s]+") do t[#t + 1] = x end
    return t
  end
  if type(v) ~= "table" then error("compare.grid: " .. what .. " must be a list or a comma list", 3) end
  return v
end

--- compare.grid{mechanisms= | scores=, modes=, baselines=, tasks=, seeds=3 | {list},
---   settings=} -> configs, skipped
-- mechanisms: names (see the top); or scores x modes (every pair) plus baselines (names).
-- configs: one table per (task, mechanism, seed) in that order, with id, task, mechanism,
-- kind, score, mode, supervise, positions, seed and settings.  skipped: {mechanism=, reason=}
-- for the pairs the model refuses (e.g. location mode with the dot score).
function M.grid(o)
  if type(o) ~= "table" then error("compare.grid: expected an options table", 2) end
  local s = o.settings or M.settings()
  local names = {}
  if o.mechanisms then
    names = list_of(o.mechanisms, "mechanisms")
  else
    for _, sc in ipairs(list_of(o.scores or {"additive"}, "scores")) do
      for _, md in ipairs(list_of(o.modes or {"soft"}, "modes")) do names[#names + 1] = sc .. "/" .. md end
    end
    for _, b in ipairs(list_of(o.baselines or {}, "baselines")) do names[#names + 1] = b end
  end
  local seeds = o.seeds or 3
  if math.type(seeds) == "integer" then
    local t = {}
    for i = 1, seeds do t[i] = i end
    seeds = t
  end
  seeds = list_of(seeds, "seeds")
  local task_names = list_of(o.tasks or tasks.TASKS, "tasks")
  for _, t in ipairs(task_names) do tasks.task(t) end            -- unknown task: an error
  local mechs, skipped, seen = {}, {}, {}
  for _, n in ipairs(names) do
    if not seen[n] then
      seen[n] = true
      local m = M.parse_mechanism(n)
      local why = invalid(m, s)
      if why then skipped[#skipped + 1] = {mechanism = n, reason = why}
      else mechs[#mechs + 1] = m end
    end
  end
  local configs = {}
  for _, t in ipairs(task_names) do
    for _, m in ipairs(mechs) do
      for _, seed in ipairs(seeds) do
        seed = math.tointeger(tonumber(seed))
        if not seed then error("compare.grid: seeds must be integers", 2) end
        configs[#configs + 1] = {
          id = string.format("%s.%s.s%d", t, m.name:gsub("[/+]", "-"), seed),
          task = t, mechanism = m.name, kind = m.kind, score = m.score, mode = m.mode,
          supervise = m.supervise or false, positions = m.positions, seed = seed,
          settings = s}
      end
    end
  end
  return configs, skipped
end

--- compare.shard(configs, rank, size) -> the configurations of process `rank` (0-based) out
--- of `size`: those at 1-based index i with (i - 1) % size == rank
function M.shard(configs, rank, size)
  if math.type(rank) ~= "integer" or math.type(size) ~= "integer" or size < 1 or rank < 0
     or rank >= size then
    error(string.format("compare.shard: need 0 <= rank < size, got rank %s size %s",
                        tostring(rank), tostring(size)), 2)
  end
  local out = {}
  for i, c in ipairs(configs) do if (i - 1) % size == rank then out[#out + 1] = c end end
  return out
end

-- ---------------------------------------------------------------------------------------
-- one configuration

local function build_model(c, train_set)
  local s = c.settings
  if c.kind == "transformer" then
    return models.Transformer{dataset = train_set, d = s.d_model, heads = s.heads,
                              layers = s.layers, ff = s.ff, positions = c.positions,
                              max_len = 2 * math.max(s.test_lengths[#s.test_lengths], 20) + 8}
  end
  local maxlen = 0
  for _, L in ipairs(s.test_lengths) do maxlen = math.max(maxlen, L) end
  return models.Seq2Seq{dataset = train_set, emb = s.emb, hidden = s.hidden,
                        attn_hidden = s.attn_hidden, score = c.kind == "rnn" and c.score or nil,
                        mode = c.kind == "rnn" and c.mode or nil, window = s.window,
                        kernel = s.kernel, max_src = maxlen + 2,
                        attention = c.kind ~= "rnnenc",
                        supervise = c.supervise and s.supervise or 0}
end

local function all_indices(n, from, to)
  local t = {}
  for i = from or 1, math.min(n, to or n) do t[#t + 1] = i end
  return t
end

-- alignment accuracy, entropy and local-p's centre error of a model on a dataset, under
-- teacher forcing: over the target steps with a true source position (align > 0)
local function alignment_stats(model, ds, acc)
  for s = 1, ds.n, 100 do
    local b = ds:collate(all_indices(ds.n, s, s + 99))
    local alpha, centres = model:alignments(b)
    if not alpha then return acc end
    local a, al = alpha:totable(), b.align:totable()
    local cs = centres and centres:totable()
    for i = 1, #al do
      for t = 1, #al[i] do
        local j = al[i][t]
        if j > 0 then
          local row, best, bj, H = a[i][t], -1, 0, 0
          for k = 1, #row do
            local p = row[k]
            if p > best then best, bj = p, k end
            if p > 0 then H = H - p * math.log(p) end
          end
          acc.n = acc.n + 1
          if bj == math.tointeger(j) then acc.right = acc.right + 1 end
          acc.entropy = acc.entropy + H
          if cs then acc.centre = acc.centre + math.abs(cs[i][t] - j) end
        end
      end
    end
    acc.has_centres = acc.has_centres or cs ~= nil
  end
  return acc
end

-- the alignment map of example 1 of a test set: rows = target steps (with <end>)
local function heatmap(model, ds, c)
  local b = ds:collate({1})
  local alpha = model:alignments(b)
  if not alpha then return nil end
  local T = #ds.tgt_ids[1] + 1
  local S = #ds.src_ids[1]
  local rows = {}
  local a = alpha:totable()[1]
  for t = 1, T do rows[t] = table.move(a[t], 1, S, 1, {}) end
  local src, tgt = {}, {}
  for ch in ds.src[1]:gmatch(".") do src[#src + 1] = ch == " " and "_" or ch end
  for ch in ds.tgt[1]:gmatch(".") do tgt[#tgt + 1] = ch end
  tgt[#tgt + 1] = "<end>"
  return {alpha = rows, src = src, tgt = tgt, mechanism = c.mechanism}
end

--- compare.run_config(config) -> record: trains config's model on its step budget (seeded by
--- config.seed, one process, no progress bar) and measures it: accuracy_by_length (exact and
--- token accuracy of greedy decoding at each test length), curve ({step, accuracy} of the
--- validation set), steps_to_90 / steps_to_99, alignment_accuracy, attention_entropy,
--- centre_error (local-p), ms_per_step (wall clock) and cpu_ms_per_step (CPU time: what a
--- loaded machine does not change), params, train_seconds, wall_seconds, cpu_seconds (the
--- process's CPU time for the configuration), heatmap (first seed).
-- whole numbers back to integers (a configuration read from JSON has 4000.0 for 4000)
local function integers(t)
  local out = {}
  for k, v in pairs(t) do
    if type(v) == "table" then v = integers(v)
    elseif math.type(v) == "float" and v == math.floor(v) then v = math.tointeger(v) end
    out[k] = v
  end
  return out
end

function M.run_config(c)
  if type(c) ~= "table" or type(c.settings) ~= "table" or not c.task then
    error("compare.run_config: expected a configuration from compare.grid", 2)
  end
  c = integers(c)
  local s = c.settings
  local task = tasks.task(c.task)
  local train_set = task:train_set(s.train_n, s.data_seed + c.seed - 1)
  local lo, hi = task.train_lengths[1], task.train_lengths[2]
  local valid = task:make(s.valid_n, lo, hi, s.data_seed, "compare.valid")
  local tests = task:test_sets(s.test_lengths, s.test_n, s.data_seed)
  local cpu0 = os.clock()
  glimpse.manual_seed(c.seed)
  local model = build_model(c, train_set)
  local lr = c.kind == "transformer" and s.transformer_lr or s.lr
  local timer = util.Timer()
  local eval_cpu, fit_cpu = 0, os.clock()
  local history = train.Trainer{
    model = model, optimizer = {"Adam", lr = lr}, data = train_set, batch_size = s.batch,
    seed = c.seed, steps = s.steps, clip = s.clip, eval_every = s.eval_every, progress = false,
    evaluate = function(m)
      local t0 = os.clock()
      local a = models.eval.sequence_accuracy(m, valid, {bleu = false}).exact
      eval_cpu = eval_cpu + os.clock() - t0
      return {accuracy = a}
    end,
  }:fit()
  fit_cpu = os.clock() - fit_cpu - eval_cpu            -- training steps only
  local r = {id = c.id, task = c.task, mechanism = c.mechanism, kind = c.kind, score = c.score,
             mode = c.mode, seed = c.seed, steps = history.steps,
             params = experiment.count_params(model),
             train_seconds = history.seconds,
             ms_per_step = 1000 * history.seconds / math.max(1, history.steps),
             cpu_ms_per_step = 1000 * fit_cpu / math.max(1, history.steps),
             curve = {}, accuracy_by_length = {}, config = c}
  for _, e in ipairs(history.evals) do
    r.curve[#r.curve + 1] = {e.step, e.accuracy}
    if not r.steps_to_90 and e.accuracy >= 0.9 then r.steps_to_90 = e.step end
    if not r.steps_to_99 and e.accuracy >= 0.99 then r.steps_to_99 = e.step end
  end
  local acc = {n = 0, right = 0, entropy = 0, centre = 0}
  for _, L in ipairs(s.test_lengths) do
    local e = models.eval.sequence_accuracy(model, tests[L], {bleu = false})
    r.accuracy_by_length[#r.accuracy_by_length + 1] = {length = L, exact = e.exact, token = e.token}
    alignment_stats(model, tests[L], acc)
  end
  if c.kind ~= "rnnenc" and acc.n > 0 then
    r.alignment_accuracy = acc.right / acc.n
    r.attention_entropy = acc.entropy / acc.n
    if acc.has_centres then r.centre_error = acc.centre / acc.n end
  end
  local hl = s.heatmap_length
  local hm_set = tests[hl] or task:test_set(hl, 1, s.data_seed)
  r.heatmap = heatmap(model, hm_set, c)
  r.wall_seconds = timer:elapsed()
  r.cpu_seconds = os.clock() - cpu0              -- what the machine's load does not change
  return r
end

-- ---------------------------------------------------------------------------------------
-- the output folder: runs/<id>.config.json (the job), runs/<id>.json (the result)

local function job_path(dir, c) return string.format("%s/runs/%s.config.json", dir, c.id) end
local function result_path(dir, c) return string.format("%s/runs/%s.json", dir, c.id) end

local function same_config(a, b)
  return util.json_encode(a) == util.json_encode(b)
end

-- the finished result of c in dir, or nil (absent, failed, or made with other settings)
local function finished(dir, c)
  local p = result_path(dir, c)
  if not util.exists(p) then return nil end
  local ok, r = pcall(util.read_json, p)
  if not ok or type(r) ~= "table" or r.error or not r.config then return nil end
  if not same_config(r.config, c) then return nil end
  return r
end

--- compare.pending(configs, dir) -> the configurations without a finished result in dir
--- (a result made with other settings, or a failed one, counts as not finished)
function M.pending(configs, dir)
  local out = {}
  for _, c in ipairs(configs) do if not finished(dir, c) then out[#out + 1] = c end end
  return out
end

--- compare.work(job_file) -- the worker: runs the configuration in job_file (JSON, as
--- compare.grid made it) and writes its record, with `config`, to the result file beside it;
--- a failure writes {error=, config=} instead.  One BLAS thread.
function M.work(job)
  glimpse.set_num_threads(1)
  local c = util.read_json(job)
  local out = job:gsub("%.config%.json$", ".json")
  local ok, r = xpcall(M.run_config, debug.traceback, c)
  if not ok then
    r = {error = tostring(r), id = c.id, task = c.task, mechanism = c.mechanism, seed = c.seed}
  end
  r.config = c
  util.write_json(out, r)
  if not ok then error(r.error, 0) end
end

local function executable()
  if arg and arg[-1] and util.exists(arg[-1]) and not arg[-1]:match("^%-") then
    local p = io.popen("readlink -f " .. util.shell_quote(arg[-1]))
    local path = p:read("l")
    p:close()
    if path and path ~= "" then return path end
  end
  local p = io.popen("readlink /proc/" .. tostring(util.pid()) .. "/exe")
  local path = p:read("l")
  p:close()
  if path and path ~= "" then return path end
  error("compare: cannot find the glimpse executable to start workers", 3)
end

--- compare.cores() -> the number of processors (nproc), at least 1
function M.cores()
  local p = io.popen("nproc 2>/dev/null")
  local n = tonumber(p:read("l") or "")
  p:close()
  return math.max(1, math.tointeger(n) or 1)
end

--- compare.run_local(configs, dir, {jobs=cores, on_done=function(config, record)}) ->
--- number of failed configurations.  Each configuration runs in its own worker process
--- (`glimpse -e`, one BLAS thread), `jobs` at a time (xargs -P); its log goes to
--- runs/<id>.log.  on_done is called as each one finishes, in finishing order.
function M.run_local(configs, dir, o)
  o = o or {}
  local jobs = o.jobs or M.cores()
  if math.type(jobs) ~= "integer" or jobs < 1 then
    error("compare.run_local: jobs must be a positive integer, got " .. tostring(jobs), 2)
  end
  if #configs == 0 then return 0 end
  util.mkdir_p(dir .. "/runs")
  local by_job, list = {}, {}
  for _, c in ipairs(configs) do
    local jp = job_path(dir, c)
    util.write_json(jp, c)
    by_job[jp], list[#list + 1] = c, jp
  end
  local listfile = os.tmpname()                  -- this process's own: MPI ranks share dir
  util.write_lines(listfile, list)
  local code = 'require("glimpse.lab.compare").work(os.getenv("GLIMPSE_COMPARE_JOB"))'
  local inner = 'GLIMPSE_COMPARE_JOB="$1" OPENBLAS_NUM_THREADS=1 ' ..
                util.shell_quote(executable()) .. " -e " .. util.shell_quote(code) ..
                ' > "${1%.config.json}.log" 2>&1; echo "$? $1"'
  local cmd = string.format("xargs -P %d -n 1 sh -c %s _ < %s", jobs, util.shell_quote(inner),
                            util.shell_quote(listfile))
  local p = io.popen(cmd)
  local failed = 0
  for line in p:lines() do
    local rc, jp = line:match("^(%d+) (.+)$")
    local c = jp and by_job[jp]
    if c then
      local ok, r = pcall(util.read_json, result_path(dir, c))
      if not ok then r = {error = "no result file (exit status " .. rc .. ")"} end
      if r.error then failed = failed + 1 end
      if o.on_done then o.on_done(c, r) end
    end
  end
  p:close()
  os.remove(listfile)
  return failed
end

--- compare.gather(configs, dir) -> records (finished, in grid order), failures ({id=,
--- mechanism=, task=, seed=, error=} for each configuration whose result is an error),
--- missing (the ids of the configurations with no result yet)
function M.gather(configs, dir)
  local records, failures, missing = {}, {}, {}
  for _, c in ipairs(configs) do
    local r = finished(dir, c)
    if r then
      records[#records + 1] = r
    else
      local ok, e = pcall(util.read_json, result_path(dir, c))
      if ok and type(e) == "table" and e.error then
        failures[#failures + 1] = {id = c.id, mechanism = c.mechanism, task = c.task,
                                   seed = c.seed, error = e.error}
      else
        missing[#missing + 1] = c.id
      end
    end
  end
  return records, failures, missing
end

-- ---------------------------------------------------------------------------------------
-- summaries

local function mean_std(xs)
  local n = #xs
  if n == 0 then return nil, nil end
  local m = 0
  for _, x in ipairs(xs) do m = m + x end
  m = m / n
  local v = 0
  for _, x in ipairs(xs) do v = v + (x - m) ^ 2 end
  return m, n > 1 and math.sqrt(v / (n - 1)) or 0
end

local function mean_of(records, f)
  local xs = {}
  for _, r in ipairs(records) do
    local v = f(r)
    if v ~= nil then xs[#xs + 1] = v end
  end
  return mean_std(xs)
end

--- compare.summarise(records) -> rows, one per (task, mechanism) in first-seen order:
--- score, mode, task, mechanism, kind, seeds, accuracy_mean/std (token accuracy over every
--- test length), exact_mean/std (exact-sequence), long_accuracy_mean/std (token accuracy on
--- the lengths past training), accuracy_by_length ({length, exact_mean, exact_std,
--- token_mean, token_std}), steps_to_90 / steps_to_99 (mean over the seeds that got there;
--- nil when none did) with reached_90 / reached_99 (how many), curve (mean validation
--- accuracy per evaluation step), alignment_accuracy, attention_entropy, centre_error,
--- ms_per_step, cpu_ms_per_step, params, train_seconds, wall_seconds, cpu_seconds (means),
--- config (the settings)
function M.summarise(records)
  local groups, order = {}, {}
  for _, r in ipairs(records) do
    local k = r.task .. "\0" .. r.mechanism
    if not groups[k] then groups[k] = {}; order[#order + 1] = k end
    table.insert(groups[k], r)
  end
  local rows = {}
  for _, k in ipairs(order) do
    local g = groups[k]
    local f = g[1]
    local train_max = f.config.settings and tasks.task(f.task).train_lengths[2] or 20
    local row = {task = f.task, mechanism = f.mechanism, kind = f.kind, score = f.score,
                 mode = f.mode, seeds = {}, config = f.config.settings,
                 accuracy_by_length = {}, curve = {}}
    for _, r in ipairs(g) do row.seeds[#row.seeds + 1] = r.seed end
    local function avg_len(r, key, long)
      local sum, n = 0, 0
      for _, e in ipairs(r.accuracy_by_length) do
        if not long or e.length > train_max then sum, n = sum + e[key], n + 1 end
      end
      return n > 0 and sum / n or nil
    end
    row.accuracy_mean, row.accuracy_std = mean_of(g, function(r) return avg_len(r, "token") end)
    row.exact_mean, row.exact_std = mean_of(g, function(r) return avg_len(r, "exact") end)
    row.long_accuracy_mean, row.long_accuracy_std =
      mean_of(g, function(r) return avg_len(r, "token", true) end)
    for i, e in ipairs(f.accuracy_by_length) do
      local x = {length = e.length}
      x.exact_mean, x.exact_std = mean_of(g, function(r) return r.accuracy_by_length[i].exact end)
      x.token_mean, x.token_std = mean_of(g, function(r) return r.accuracy_by_length[i].token end)
      row.accuracy_by_length[i] = x
    end
    for _, key in ipairs({"90", "99"}) do
      local n = 0
      for _, r in ipairs(g) do if r["steps_to_" .. key] then n = n + 1 end end
      row["reached_" .. key] = n
      row["steps_to_" .. key] = mean_of(g, function(r) return r["steps_to_" .. key] end)
    end
    for i, pt in ipairs(f.curve) do
      row.curve[i] = {pt[1], (mean_of(g, function(r) return r.curve[i] and r.curve[i][2] end))}
    end
    for _, key in ipairs({"alignment_accuracy", "attention_entropy", "centre_error",
                          "ms_per_step", "cpu_ms_per_step", "params", "train_seconds",
                          "wall_seconds", "cpu_seconds"}) do
      row[key] = mean_of(g, function(r) return r[key] end)
    end
    row.alignment_accuracy_std = select(2, mean_of(g, function(r) return r.alignment_accuracy end))
    rows[#rows + 1] = row
  end
  return rows
end

-- ---------------------------------------------------------------------------------------
-- writing

local function pct(x) return x and string.format("%.1f", 100 * x) or "-" end
local function pm(m, s) return m and string.format("%.1f ± %.1f", 100 * m, 100 * (s or 0)) or "-" end

local function by_task(rows)
  local order, groups = {}, {}
  for _, r in ipairs(rows) do
    if not groups[r.task] then groups[r.task] = {}; order[#order + 1] = r.task end
    table.insert(groups[r.task], r)
  end
  return order, groups
end

local function table_rows(rows)
  local lengths = rows[1] and rows[1].accuracy_by_length or {}
  local head = {"mechanism", "params", "CPU ms/step", "steps to 90%", "token acc", "long token acc",
                "exact"}
  for _, e in ipairs(lengths) do head[#head + 1] = string.format("@%d", e.length) end
  head[#head + 1] = "align acc"
  head[#head + 1] = "entropy"
  local out = {head}
  for _, r in ipairs(rows) do
    local line = {r.mechanism, math.floor(r.params + 0.5),
                  r.cpu_ms_per_step and string.format("%.1f", r.cpu_ms_per_step) or "-",
                  r.steps_to_90 and string.format("%d (%d/%d)", math.floor(r.steps_to_90 + 0.5),
                                                  r.reached_90, #r.seeds)
                  or string.format("- (0/%d)", #r.seeds),
                  pm(r.accuracy_mean, r.accuracy_std), pm(r.long_accuracy_mean, r.long_accuracy_std),
                  pm(r.exact_mean, r.exact_std)}
    for _, e in ipairs(r.accuracy_by_length) do line[#line + 1] = pct(e.token_mean) end
    line[#line + 1] = pct(r.alignment_accuracy)
    line[#line + 1] = r.attention_entropy and string.format("%.2f", r.attention_entropy) or "-"
    out[#out + 1] = line
  end
  return out
end

--- compare.markdown(rows, meta) -> the results table(s) as Markdown text, one per task
function M.markdown(rows, meta)
  meta = meta or {}
  local lines = {}
  if meta.command then lines[#lines + 1] = "Command: `" .. meta.command .. "`\n" end
  local order, groups = by_task(rows)
  for _, t in ipairs(order) do
    lines[#lines + 1] = "### " .. t .. "\n"
    local tr = table_rows(groups[t])
    for i, r in ipairs(tr) do
      local cells = {}
      for j, v in ipairs(r) do cells[j] = tostring(v) end
      lines[#lines + 1] = "| " .. table.concat(cells, " | ") .. " |"
      if i == 1 then lines[#lines + 1] = "|" .. string.rep("---|", #r) end
    end
    lines[#lines + 1] = ""
  end
  lines[#lines + 1] = "token acc / exact: token and exact-sequence accuracy of greedy decoding, " ..
    "averaged over the test lengths; long: the lengths past training; @L: token accuracy at " ..
    "length L; align acc: share of target steps whose attention argmax is the true source " ..
    "position (teacher forcing); mean ± std over seeds, in %. CPU ms/step: the CPU time " ..
    "of a training step (one thread; wall-clock times are in results.json)."
  return table.concat(lines, "\n") .. "\n"
end

--- compare.charts(rows, task) -> {{series, opts}, {series, opts}}: the two charts of a task
--- (its summary rows): token accuracy against test length, and the learning curves
--- (validation exact-sequence accuracy against step), one line per mechanism; for
--- page:chart or report.chart_svg
-- more colours than the report's ten, so that the default grid's lines all differ
local COLOURS = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
                 "#7f7f7f", "#bcbd22", "#17becf", "#000000", "#aec7e8", "#98df8a", "#ffbb78"}

function M.charts(rows, task)
  local acc, curves = {}, {}
  for _, r in ipairs(rows) do
    if r.task == task then
      local pts = {}
      for _, e in ipairs(r.accuracy_by_length) do pts[#pts + 1] = {e.length, e.token_mean} end
      local colour = COLOURS[#acc % #COLOURS + 1]
      acc[#acc + 1] = {name = r.mechanism, points = pts, color = colour}
      curves[#curves + 1] = {name = r.mechanism, points = r.curve, color = colour}
    end
  end
  return {{acc, {title = task .. ": token accuracy against test length",
                 xlabel = "source length", ylabel = "token accuracy", ymin = 0, ymax = 1}},
          {curves, {title = task .. ": validation exact-sequence accuracy (training lengths)",
                    xlabel = "step", ylabel = "exact accuracy", ymin = 0, ymax = 1}}}
end

--- compare.write(dir, rows, records, {skipped=, failures=, missing=, command=, seconds=,
--- jobs=}) -> paths: results.json, results.md, index.html (SVG charts inline) and
--- heatmaps/*.png
function M.write(dir, rows, records, meta)
  meta = meta or {}
  util.mkdir_p(dir .. "/heatmaps")
  util.write_json(dir .. "/results.json", {results = rows, skipped = meta.skipped or {},
                                           failures = meta.failures or {},
                                           missing = meta.missing or {},
                                           command = meta.command, seconds = meta.seconds,
                                           jobs = meta.jobs}, {indent = 1})
  util.write_text(dir .. "/results.md", M.markdown(rows, meta))
  local page = report.Page{title = "glimpse compare: attention mechanisms"}
  if meta.command then page:pre(meta.command) end
  local cpu, timed = 0, 0
  for _, r in ipairs(records) do
    if r.cpu_seconds then cpu, timed = cpu + r.cpu_seconds, timed + 1 end
  end
  page:paragraph(string.format("%d configurations, %s seconds of wall time with %s worker " ..
                               "processes (this call; %.0f CPU seconds over the %d configurations " ..
                               "that recorded it). Accuracy is greedy decoding on held-out sets " ..
                               "at each test length (training lengths 5-20); mean ± std over " ..
                               "seeds.", #records,
                               meta.seconds and string.format("%.0f", meta.seconds) or "?",
                               tostring(meta.jobs or "?"), cpu, timed))
  local order, groups = by_task(rows)
  for _, t in ipairs(order) do
    local g = groups[t]
    page:heading("Task: " .. t)
    page:table(table_rows(g), {header = true})
    for _, ch in ipairs(M.charts(g, t)) do page:chart(ch[1], ch[2]) end
    local pics = {}
    for _, rec in ipairs(records) do
      if rec.task == t and rec.heatmap and rec.seed == rows[1].seeds[1] then
        local h = rec.heatmap
        local name = string.format("heatmaps/%s.png", rec.id)
        viz.alignment(h.alpha, h.src, h.tgt, dir .. "/" .. name,
                      {title = rec.mechanism, cell = 8, scale = 1})
        pics[#pics + 1] = {path = name, caption = rec.mechanism}
      end
    end
    if #pics > 0 then
      page:heading(string.format("Alignments of one test example (seed %d)",
                                 math.floor(rows[1].seeds[1])), 3)
      page:images(pics, {width = 260})
    end
  end
  if meta.skipped and #meta.skipped > 0 then
    page:heading("Skipped")
    local t = {{"mechanism", "reason"}}
    for _, s in ipairs(meta.skipped) do t[#t + 1] = {s.mechanism, s.reason} end
    page:table(t, {header = true})
  end
  if meta.missing and #meta.missing > 0 then
    page:paragraph(string.format("%d configurations have no result yet (not run, or still " ..
                                 "running): %s.", #meta.missing, table.concat(meta.missing, ", ")))
  end
  if meta.failures and #meta.failures > 0 then
    page:heading("Failed")
    local t = {{"configuration", "error"}}
    for _, f in ipairs(meta.failures) do t[#t + 1] = {f.id, tostring(f.error):sub(1, 300)} end
    page:table(t, {header = true})
  end
  page:write(dir .. "/index.html")
  return {dir .. "/results.json", dir .. "/results.md", dir .. "/index.html"}
end

-- ---------------------------------------------------------------------------------------
-- the whole run

-- glimpse.dist when this process is one of several MPI ranks, else nil
local function distributed()
  local ok, dist = pcall(require, "glimpse.dist")
  if not ok or type(dist) ~= "table" then return nil end
  if dist.init then pcall(dist.init) end
  local okr, size = pcall(dist.size)
  if not okr or type(size) ~= "number" or size <= 1 then return nil end
  return dist
end

--- compare.run{configs=, out=, jobs=cores, skipped=, command=, say=print, run=true} ->
--- rows, records, failures, missing: runs the pending configurations (resuming: finished
--- ones are kept; seed by seed, so that a run cut short covers the whole grid with its
--- first seeds), gathers every result and writes the outputs.  Under MPI (glimpse.dist with
--- size > 1) the ranks split rank 0's pending list (dist.shard), each runs its part on one
--- worker (jobs is ignored), and rank 0 gathers the records (dist.gather_tables) and writes.  run = false runs
--- nothing: the outputs of the configurations finished so far (the rest are `missing`).
function M.run(o)
  if type(o) ~= "table" or type(o.configs) ~= "table" or type(o.out) ~= "string" then
    error("compare.run: expected {configs=, out=}", 2)
  end
  local say = o.say or print
  util.mkdir_p(o.out .. "/runs")
  local dist = distributed()
  local jobs = dist and 1 or o.jobs or M.cores()  -- under MPI: one worker process per rank
  -- what is left to run, seed by seed: a run cut short still covers every task and
  -- mechanism with its first seeds.  Under MPI rank 0's folder decides, and the ranks split
  -- the pending list (item i to rank (i - 1) % size), so a resumed run stays balanced.
  local waiting = {}
  if not dist or dist.is_root() then
    waiting = M.pending(o.configs, o.out)
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
  M.run_local(todo, o.out, {jobs = jobs, on_done = function(c, r)
    k = k + 1
    if r.error then
      say(string.format("[%d/%d] %s FAILED: %s", k, #todo, c.id, tostring(r.error):match("[^\n]*")))
      r = {error = tostring(r.error), id = c.id, task = c.task, mechanism = c.mechanism,
           seed = c.seed, config = c}
    else
      local long = 0
      for _, e in ipairs(r.accuracy_by_length) do long = math.max(long, e.length) end
      say(string.format("[%d/%d] %s: exact %s%% at length %d, %.1f ms/step, %.0f s (%.0f s so far)",
                        k, #todo, c.id, pct(r.accuracy_by_length[1].exact),
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
      for _, r in ipairs(part.results or {}) do util.write_json(result_path(o.out, r.config), r) end
    end
  end
  local records, failures, missing = M.gather(o.configs, o.out)
  local rows = M.summarise(records)
  M.write(o.out, rows, records, {skipped = o.skipped, failures = failures, missing = missing,
                                 command = o.command, seconds = timer:elapsed(),
                                 jobs = dist and dist.size() or jobs})
  return rows, records, failures, missing
end

return M
