--- glimpse.compare's summaries (part of glimpse.compare; compare/init.lua publishes
-- summarise): the records of one (task, mechanism) over its seeds, as means and standard
-- deviations.
local tasks = require("glimpse").data.compare

local S = {}

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

-- a record's training lengths: its configuration's (grids since task files), or its task's
local function train_lengths(r)
  local tl = type(r.config) == "table" and r.config.train_lengths
  if type(tl) == "table" and tl[1] and tl[2] then return {tl[1], tl[2]} end
  local ok, task = pcall(tasks.task, r.task)
  if ok then return {task.train_lengths[1], task.train_lengths[2]} end
  return {5, 20}
end

--- compare.ROW_FIELDS: every field of a summary row; results.json writes null for those
--- without a value (steps_to_90 when no seed got there, alignment_accuracy of a task
--- without alignments, long_accuracy_mean without test lengths past training...)
S.ROW_FIELDS = {"task", "mechanism", "kind", "score", "mode", "seeds", "train_lengths",
                "accuracy_mean", "accuracy_std", "exact_mean", "exact_std", "long_accuracy_mean",
                "long_accuracy_std", "accuracy_by_length", "steps_to_90", "steps_to_99",
                "reached_90", "reached_99", "curve", "alignment_accuracy", "alignment_accuracy_std",
                "attention_entropy", "centre_error", "ms_per_step", "cpu_ms_per_step", "params",
                "train_seconds", "wall_seconds", "cpu_seconds", "peak_rss_kb", "config"}

--- compare.summarise(records) -> rows, one per (task, mechanism) in first-seen order:
--- score, mode, task, mechanism, kind, seeds, train_lengths, accuracy_mean/std (token accuracy over every
--- test length), exact_mean/std (exact-sequence), long_accuracy_mean/std (token accuracy on
--- the lengths past training), accuracy_by_length ({length, exact_mean, exact_std,
--- token_mean, token_std}), steps_to_90 / steps_to_99 (mean over the seeds that got there;
--- nil when none did) with reached_90 / reached_99 (how many), curve (mean validation
--- accuracy per evaluation step), alignment_accuracy, attention_entropy, centre_error,
--- ms_per_step, cpu_ms_per_step, params, train_seconds, wall_seconds, cpu_seconds,
--- peak_rss_kb (means over the seeds that have it),
--- config (the settings)
function S.summarise(records)
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
    local tl = train_lengths(f)
    local train_max = tl[2]
    local row = {task = f.task, mechanism = f.mechanism, kind = f.kind, score = f.score,
                 mode = f.mode, seeds = {}, config = f.config.settings, train_lengths = tl,
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
                          "wall_seconds", "cpu_seconds", "peak_rss_kb"}) do
      row[key] = mean_of(g, function(r) return r[key] end)
    end
    row.alignment_accuracy_std = select(2, mean_of(g, function(r) return r.alignment_accuracy end))
    rows[#rows + 1] = row
  end
  return rows
end

return S
