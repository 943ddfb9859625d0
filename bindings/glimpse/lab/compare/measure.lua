--- glimpse.compare's measurements of one configuration (part of glimpse.compare;
-- compare/init.lua publishes run_config): its model trained on its step budget with its
-- seed, then decoded at every test length, its alignments scored against the true ones.
local glimpse = require "glimpse"
local check = require "glimpse.check"
local util = require "glimpse.util"
local models = require "glimpse.models"
local train = require "glimpse.lab.train"
local experiment = require "glimpse.lab.experiment"
local tasks = require("glimpse").data.compare
local own = require "glimpse.lab.compare.tasks"

local R = {}

local function build_model(c, train_set)
  local s = c.settings
  local maxlen = 0
  for _, L in ipairs(s.test_lengths) do maxlen = math.max(maxlen, L) end
  if c.kind == "transformer" then
    -- the name's model options (positions, kv_heads, window, top_k, attention: grid's
    -- parse_mechanism); a configuration from before them has positions alone
    local o = {dataset = train_set, d = s.d_model, heads = s.heads, layers = s.layers, ff = s.ff,
               positions = c.positions,
               max_len = 2 * math.max(s.test_lengths[#s.test_lengths], 20) + 8}
    for k, v in pairs(type(c.transformer) == "table" and c.transformer or {}) do o[k] = v end
    return models.Transformer(o)
  end
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
-- teacher forcing: over the target steps with a true source position (align > 0); a task
-- without alignments gives the entropy alone, over every target step
local function alignment_stats(model, ds, acc)
  for s = 1, ds.n, 100 do
    local b = ds:collate(all_indices(ds.n, s, s + 99))
    local alpha, centres = model:alignments(b)
    if not alpha then return acc end
    local a = alpha:totable()
    local al = b.align and b.align:totable()
    local mask = b.tgt_mask:totable()
    local cs = centres and centres:totable()
    for i = 1, #a do
      for t = 1, #mask[i] do
        local j = al and al[i][t] or (mask[i][t] > 0 and -1 or 0)
        if j ~= 0 then
          local row, best, bj, H = a[i][t], -1, 0, 0
          for k = 1, #row do
            local p = row[k]
            if p > best then best, bj = p, k end
            if p > 0 then H = H - p * math.log(p) end
          end
          acc.n = acc.n + 1
          acc.entropy = acc.entropy + H
          if j > 0 then
            acc.aligned = acc.aligned + 1
            if bj == math.tointeger(j) then acc.right = acc.right + 1 end
            if cs then acc.centre = acc.centre + math.abs(cs[i][t] - j) end
          end
        end
      end
    end
    acc.has_centres = acc.has_centres or cs ~= nil
  end
  return acc
end

-- a dataset's example i as tokens: its token lists (a task of one's own) or its characters
-- (a space shown as "_")
local function tokens(ds, side, i)
  local list = ds[side .. "_tokens"]
  if list then return table.move(list[i], 1, #list[i], 1, {}) end
  local out = {}
  for ch in ds[side][i]:gmatch(".") do out[#out + 1] = (side == "src" and ch == " ") and "_" or ch end
  return out
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
  local tgt = tokens(ds, "tgt", 1)
  tgt[#tgt + 1] = "<end>"
  return {alpha = rows, src = tokens(ds, "src", 1), tgt = tgt, mechanism = c.mechanism}
end

--- compare.run_config(config) -> record: trains config's model on its step budget (seeded by
--- config.seed, one process, no progress bar) and measures it: accuracy_by_length (exact and
--- token accuracy of greedy decoding at each test length), curve ({step, accuracy} of the
--- validation set), steps_to_90 / steps_to_99, alignment_accuracy, attention_entropy,
--- centre_error (local-p), ms_per_step (wall clock) and cpu_ms_per_step (CPU time: what a
--- loaded machine does not change), params, train_seconds, wall_seconds, cpu_seconds (the
--- process's CPU time for the configuration), peak_rss_kb (the process's peak resident
--- memory, training and tests: a worker runs one configuration), heatmap (first seed).  A field without a value
--- (steps_to_90 never reached, alignment_accuracy of a task without alignments...) is nil
--- here and null in runs/<id>.json (compare.RECORD_FIELDS).  config.task_files are loaded
--- first (compare.ensure_task_files).
--- opts.time_limit: the Trainer's time guard in seconds (a run it stops is an error: its
--- numbers are not the budget's).  A Ctrl-C during training gives {interrupted = true, id=,
--- steps=, config=} instead, with nothing evaluated: an interrupted run is never a record.
function R.run_config(c, opts)
  if type(c) ~= "table" or type(c.settings) ~= "table" or not c.task then
    check.fail(2, "compare.run_config: expected a configuration from compare.grid")
  end
  if opts ~= nil and type(opts) ~= "table" then
    check.fail(2, "compare.run_config: opts must be a table {time_limit=}, got %s", type(opts))
  end
  local time_limit = opts and opts.time_limit
  if time_limit ~= nil and not (type(time_limit) == "number" and time_limit > 0) then
    check.fail(2, "compare.run_config: time_limit must be a positive number, got %s",
               check.value(time_limit))
  end
  c = check.integers(c)               -- a configuration read from JSON has 4000.0 for 4000
  local s = c.settings
  own.ensure_task_files(c.task_files)  -- its tasks and scores, as the grid had them
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
    time_limit = time_limit,
    evaluate = function(m)
      local t0 = os.clock()
      local a = models.eval.sequence_accuracy(m, valid, {bleu = false}).exact
      eval_cpu = eval_cpu + os.clock() - t0
      return {accuracy = a}
    end,
  }:fit()
  fit_cpu = os.clock() - fit_cpu - eval_cpu            -- training steps only
  if history.interrupted then
    return {interrupted = true, id = c.id, task = c.task, mechanism = c.mechanism, seed = c.seed,
            steps = history.steps, config = c}
  end
  if history.steps < s.steps then
    error(string.format("compare.run_config: %s stopped at step %d of %d (%s): not the step " ..
                        "budget's numbers", c.id, history.steps, s.steps,
                        history.stopped == "time" and string.format("the time limit of %gs",
                                                                    time_limit)
                        or tostring(history.stopped)), 0)
  end
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
  local acc = {n = 0, aligned = 0, right = 0, entropy = 0, centre = 0}
  for _, L in ipairs(s.test_lengths) do
    local e = models.eval.sequence_accuracy(model, tests[L], {bleu = false})
    r.accuracy_by_length[#r.accuracy_by_length + 1] = {length = L, exact = e.exact, token = e.token}
    alignment_stats(model, tests[L], acc)
  end
  if c.kind ~= "rnnenc" and acc.n > 0 then
    r.attention_entropy = acc.entropy / acc.n
    if acc.aligned > 0 then
      r.alignment_accuracy = acc.right / acc.aligned
      if acc.has_centres then r.centre_error = acc.centre / acc.aligned end
    end
  end
  local hl = s.heatmap_length
  local hm_set = tests[hl] or task:test_set(hl, 1, s.data_seed)
  r.heatmap = heatmap(model, hm_set, c)
  r.wall_seconds = timer:elapsed()
  r.cpu_seconds = os.clock() - cpu0              -- what the machine's load does not change
  r.peak_rss_kb = util.peak_rss_kb()             -- the worker's peak memory (one per config)
  return r
end

return R
