--- glimpse.train's bookkeeping (a part of the Trainer, merged by train/init.lua): the loss's
-- moving averages and interval means (history.losses), the evaluations (history.evals,
-- best, the target), the progress bar and the messages.
local glimpse = require "glimpse"
local progress = require "glimpse.lab.progress"

local Trainer = {}

local RESERVED = {step = true, seconds = true, train_loss = true}

local function smooth(old, v, a)
  if old == nil then return v end
  return a * old + (1 - a) * v
end

function Trainer:_record(loss, stats)
  local a = self.smoothing
  self.ema = smooth(self.ema, loss, a)
  local acc = self.acc
  acc.n, acc.loss = acc.n + 1, acc.loss + loss
  for k, v in pairs(stats) do
    self.ema_stats[k] = smooth(self.ema_stats[k], v, a)
    acc.stats[k] = (acc.stats[k] or 0) + v
  end
end

-- one entry of history.losses: means over the interval since the last one
function Trainer:_log_interval()
  local acc = self.acc
  if acc.n == 0 then return end
  local e = {step = self.step, seconds = self:elapsed(), loss = acc.loss / acc.n,
             smooth = self.ema, lr = self.optimizer.param_groups[1].lr}
  for k, v in pairs(acc.stats) do
    if e[k] == nil then e[k] = v / acc.n end
  end
  local losses = self.history.losses
  losses[#losses + 1] = e
  self.acc = {n = 0, loss = 0, stats = {}}
end

--- trainer:elapsed() -> seconds of training so far (evaluation and checkpoints excluded),
--- counting the runs before a resume.
function Trainer:elapsed()
  return self.seconds + (self.timer and self.timer:elapsed() or 0)
end

local function better(spec, a, b)
  if type(b) ~= "number" or b ~= b then return true end     -- none yet (or NaN, JSON null)
  if spec.mode == "max" then return a > b end
  return a < b
end

local function describe(m)
  local keys = {}
  for k, v in pairs(m) do
    if type(v) == "number" and not RESERVED[k] then keys[#keys + 1] = k end
  end
  table.sort(keys)
  local parts = {}
  for _, k in ipairs(keys) do parts[#parts + 1] = string.format("%s %.4g", k, m[k]) end
  return table.concat(parts, ", ")
end

function Trainer:_say(msg)
  if self.bar then self.bar:print(msg) elseif self.progress ~= false then print(msg) end
end

-- run evaluate(model, step) without a tape, in eval mode; record, report, early-stop check
function Trainer:_evaluate()
  local model, step = self.model, self.step
  if self.bucket then self:_sync_buffers() end
  if self.timer then self.timer:pause() end
  if self.bar then self.bar:pause() end
  model:evaluate()
  local metrics = glimpse.no_grad(self.evaluate, model, step)
  model:train()
  if type(metrics) ~= "table" then
    error("Trainer: evaluate(model, step) must return a table of metrics, got " .. type(metrics), 0)
  end
  local entry = {}
  for k, v in pairs(metrics) do
    if RESERVED[k] then
      error("Trainer: evaluate returned the metric '" .. k .. "', a name the history uses "
            .. "itself (step, seconds, train_loss)", 0)
    end
    entry[k] = v
  end
  entry.step, entry.seconds, entry.train_loss = step, self:elapsed(), self.ema
  local evals = self.history.evals
  evals[#evals + 1] = entry
  self.last_eval = step
  local spec = self.best_spec
  if spec then
    local v = entry[spec.metric]
    if type(v) ~= "number" then
      error(string.format("Trainer: evaluate returned no number '%s' (the %s metric)", spec.metric,
                          self.target and "target's" or "best"), 0)
    end
    if better(spec, v, self.history.best and self.history.best[spec.metric]) then
      self.history.best = entry
    end
  end
  local text = self.format_eval and self.format_eval(metrics, step) or describe(metrics)
  self:_say(string.format("  step %d (%.0fs): %s", step, self:elapsed(), text))
  if self.on_eval then self.on_eval(self, step, metrics) end
  if self.bar then self.bar:resume() end
  if self.timer then self.timer:resume() end
  local t = self.target
  if t then
    local v = entry[t.metric]
    local reached = (t.mode == "max" and v >= t.value) or (t.mode == "min" and v <= t.value)
    if self.bucket then reached = self:_root_says(reached) end   -- every rank stops, or none
    if reached then
      self.history.reached = {step = step, seconds = entry.seconds, value = v}
      return true
    end
  end
  return false
end

function Trainer:_make_bar()
  if self.progress == false then return nil end
  local o = {total = math.max(1, self.steps), start = self.step, label = "train", unit = "step",
             every = self.log_every, time_limit = self.time_limit,
             fields = {"epoch", "loss"}, formats = {loss = "%.4f"}}
  if type(self.progress) == "table" then
    for k, v in pairs(self.progress) do o[k] = v end
  end
  return progress.Bar(o)
end

function Trainer:_bar_fields()
  local f = {loss = self.ema}
  if self.dataset then f.epoch = self.epoch end
  for k, v in pairs(self.ema_stats) do f[k] = v end
  return f
end

return Trainer
