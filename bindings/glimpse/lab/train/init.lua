--- glimpse.train -- the training loop every experiment shares: the Trainer.
--
--   local trainer = glimpse.train.Trainer{model = model, optimizer = {"Adam", lr = 3e-3},
--                                         data = train_set, batch_size = 32, steps = 2000,
--                                         eval_every = 200, evaluate = function(m, step) ... end}
--   local history = trainer:fit()
--
-- The model contract: model:loss(batch) -> loss (a scalar tensor), stats (nil or numbers).
-- The options are Trainer.options (docs/api/train.md).  The step budget ends a run; a
-- checkpoint resumes a killed or interrupted run with the same batches and draws; Ctrl-C
-- stops at a step boundary (train/interrupt.lua has the rule).  The methods: train/step.lua,
-- log.lua, checkpoint.lua, parallel.lua (distributed = true), interrupt.lua.
local glimpse = require "glimpse"
local check = require "glimpse.check"
local options = require "glimpse.options"
local optim = require "glimpse.optim"
local util = require "glimpse.util"
local whole = require("glimpse.optim.base").whole
local Rng = require("glimpse.data").Rng

local fail = check.fail

local M = {}

local OPTIONS = options.declare("Trainer", {
  {"model", "table", nil, required = true,
   help = "the nn.Module: model:loss(batch) -> loss, stats"},
  {"optimizer", "table", nil, required = true,
   help = "an optimizer, or a spec {\"Adam\", lr = 3e-3} made on model:parameters()"},
  {"data", "table|function", nil, required = true,
   help = "a dataset (collate(indices) and a size) or function(step, rng) -> batch"},
  {"steps", "int", nil, range = {0}, required = true, help = "the step budget"},
  {"batch_size", "int", nil, range = {1}, help = "examples per batch (required with a dataset)"},
  {"seed", "int", 0, range = {0}, help = "the seed of the batch order, or of the data's rng"},
  {"shuffle", "boolean", true, help = "a new random order every epoch (dataset)"},
  {"bucket", "int", nil, range = {1}, help = "sort pools of this many batches by length"},
  {"lengths", "table", nil, help = "the examples' lengths for bucket (default data.lengths)"},
  {"drop_last", "boolean", false, help = "drop each epoch's short last batch"},
  {"rng", "table", nil,
   help = "function data's glimpse.data.Rng (default Rng.new(seed, \"train.data\"))"},
  {"time_limit", "number", nil, range = {0},
   help = "seconds (> 0) after which fit() stops: a guard"},
  {"clip", "number", nil, range = {0}, help = "clip the gradients' global L2 norm to this (> 0)"},
  {"clip_value", "number", nil, range = {0}, help = "clamp each gradient entry to [-v, v] (> 0)"},
  {"schedule", "table|function", nil,
   help = "a schedule, a spec {\"CosineAnnealingLR\"} (T_max: steps) or fn(optimizer)"},
  {"evaluate", "function", nil, help = "function(model, step) -> metrics, run without a tape"},
  {"eval_every", "int", nil, range = {1}, help = "steps between evaluations (needs evaluate)"},
  {"eval_at_end", "boolean", true, help = "evaluate after the last step too"},
  {"target", "table", nil, help = "{metric=, value=, mode=\"max\"}: stop once it is reached"},
  {"best", "table", nil, help = "{metric=, mode=}: which evaluation history.best is"},
  {"log_every", "int", nil, range = {1},
   help = "steps per history.losses entry and progress line (default min(50, steps))"},
  {"smoothing", "number", 0.95, range = {0, 1},
   help = "the loss's moving average: ema = a*ema + (1-a)*loss, a < 1"},
  {"progress", "boolean|table", true, help = "false: silent; a table: progress.Bar options"},
  {"checkpoint", "string", nil,
   help = "a file: resumed from when it exists, written at the end and on Ctrl-C"},
  {"checkpoint_every", "int", nil, range = {1}, help = "steps between checkpoints"},
  {"resume", "boolean", true, help = "false: start afresh even when the checkpoint exists"},
  {"on_step", "function", nil, help = "function(trainer, step, loss, stats) after each step"},
  {"on_eval", "function", nil, help = "function(trainer, step, metrics) after each evaluation"},
  {"loss", "function", nil, help = "function(model, batch, step) -> loss, stats (not model:loss)"},
  {"format_eval", "function", nil, help = "function(metrics, step) -> the evaluation line"},
  {"distributed", "boolean", false, help = "data parallel over the ranks of mpirun or srun"},
  {"sync_batchnorm", "boolean", true,
   help = "distributed: batch norms use the whole global batch's statistics (SyncBatchNorm)"},
})

local Trainer = {options = OPTIONS}
Trainer.__index = Trainer
M.Trainer = Trainer

for _, part in ipairs {"glimpse.lab.train.step", "glimpse.lab.train.log",
                       "glimpse.lab.train.checkpoint", "glimpse.lab.train.parallel",
                       "glimpse.lab.train.interrupt"} do
  for k, v in pairs(require(part)) do
    assert(Trainer[k] == nil, "glimpse.train: two parts define " .. k)
    Trainer[k] = v
  end
end

-- ---------------------------------------------------------------------------------------
-- the constructor

local function dataset_size(ds)
  if type(ds.n) == "number" then return ds.n end
  if type(ds.size) == "function" then return ds:size() end
  return #ds
end

-- the classes of glimpse.optim that have `field` (update: optimizers; lr_at: schedules)
local function classes(field)
  local out = {}
  for k, v in pairs(optim) do
    if type(v) == "table" and rawget(v, field) and rawget(v, "options") then out[#out + 1] = k end
  end
  table.sort(out)
  return out
end

-- an object given as is, or a spec {"Name", opt = ...} made by glimpse.optim's class `Name`
-- (one that has `field`) on `on`; its errors are the option's
local function make(option, kind, field, spec, on, extra, level)
  local name = spec[1]
  local cls = type(name) == "string" and rawget(optim, name)
  if type(cls) ~= "table" or not rawget(cls, field) then
    local names = classes(field)
    local near = check.nearest(tostring(name), names)
    fail(level + 1, "Trainer: option '%s': %s is not %s of glimpse.optim (%s%s)", option,
         check.value(name), kind, near and string.format("did you mean '%s'? ", near) or "",
         table.concat(names, ", "))
  end
  local opts = {}
  for k, v in pairs(spec) do if k ~= 1 then opts[k] = v end end
  for k, v in pairs(extra or {}) do if opts[k] == nil then opts[k] = v end end
  local ok, obj = pcall(cls, on, opts)
  if not ok then check.rethrow("Trainer: option '" .. option .. "'", obj, level + 1) end
  return obj
end

local function check_target(t, name, level)
  if t == nil then return nil end
  if type(t.metric) ~= "string" then
    fail(level + 1, "Trainer: option '%s' must be a table {metric = \"name\", value = x, "
         .. "mode = \"max\"}", name)
  end
  local mode = t.mode or "max"
  if mode ~= "max" and mode ~= "min" then
    fail(level + 1, "Trainer: option '%s': mode must be \"max\" or \"min\", got %s", name,
         tostring(mode))
  end
  if name == "target" and type(t.value) ~= "number" then
    fail(level + 1, "Trainer: option 'target': value must be a number, got %s", tostring(t.value))
  end
  return {metric = t.metric, value = t.value, mode = mode}
end

local function positive(o, name, level)
  local v = o[name]
  if v ~= nil and not (v > 0) then
    fail(level + 1, "Trainer: option '%s' must be a positive number, got %s", name, tostring(v))
  end
  return v
end

--- train.Trainer{model=, optimizer=, data=, steps=, ...} -> trainer.  The options are
--- Trainer.options (`?glimpse.train.Trainer`, docs/api/train.md); an unknown option or a bad
--- value is an error naming it.
setmetatable(Trainer, {__call = function(_, user)
  if type(user) ~= "table" then
    fail(2, "Trainer: expected an options table {model=, optimizer=, ...}, got %s", type(user))
  end
  local o = OPTIONS:check(whole(OPTIONS, user), 2)
  local self = setmetatable({}, Trainer)
  local model = o.model
  if type(model.parameters) ~= "function" then
    fail(2, "Trainer: option 'model' must be an nn.Module, got a table without parameters()")
  end
  self.model = model
  self.loss_fn = o.loss
  if not self.loss_fn and type(model.loss) ~= "function" then
    fail(2, "Trainer: option 'model' has no loss(batch) method (give one, or option 'loss')")
  end
  self.steps = o.steps
  if o.optimizer.param_groups then
    self.optimizer = o.optimizer
  else
    self.optimizer = make("optimizer", "an optimizer", "update", o.optimizer,
                          model:parameters(), nil, 2)
  end
  local sched = o.schedule
  if type(sched) == "function" then
    self.schedule = sched(self.optimizer)
  elseif sched ~= nil then
    self.schedule = sched.lr_at and sched or
      make("schedule", "a schedule", "lr_at", sched, self.optimizer,
           sched[1] == "CosineAnnealingLR" and {T_max = math.max(1, self.steps)} or nil, 2)
  end
  self.params = self.optimizer:parameters()

  local data = o.data
  self.seed = o.seed
  if type(data) == "function" then
    self.generate = data
    self.rng = o.rng or Rng.new(self.seed, "train.data")
    if type(self.rng.state) ~= "number" then
      fail(2, "Trainer: option 'rng' must be a glimpse.data.Rng generator")
    end
  elseif type(data.collate) == "function" then
    self.dataset = data
    self.n = dataset_size(data)
    if math.type(self.n) ~= "integer" or self.n < 1 then
      fail(2, "Trainer: option 'data': the dataset has no examples (size %s)", tostring(self.n))
    end
    self.batch_size = o.batch_size
    if not self.batch_size then
      fail(2, "Trainer: option 'batch_size' is required with a dataset (examples per batch)")
    end
    self.order_opts = {batch_size = self.batch_size, seed = self.seed, shuffle = o.shuffle,
                       bucket = o.bucket, lengths = o.lengths or (o.bucket and data.lengths) or nil,
                       drop_last = o.drop_last}
  else
    fail(2, "Trainer: option 'data' must be a dataset (with collate(indices) and a size) or a "
         .. "function(step, rng) -> batch, got a table without collate")
  end
  if o.rng ~= nil and not self.generate then
    fail(2, "Trainer: option 'rng' goes with generated data (data = function(step, rng))")
  end

  self.time_limit = positive(o, "time_limit", 2)
  self.clip = positive(o, "clip", 2)
  self.clip_value = positive(o, "clip_value", 2)
  self.eval_every = o.eval_every
  self.evaluate = o.evaluate
  if self.eval_every and not self.evaluate then
    fail(2, "Trainer: option 'eval_every' needs option 'evaluate' = function(model, step) -> "
         .. "metrics")
  end
  self.eval_at_end = o.eval_at_end
  self.target = check_target(o.target, "target", 2)
  if self.target and not self.evaluate then
    fail(2, "Trainer: option 'target' needs option 'evaluate' (the metric comes from it)")
  end
  self.best_spec = check_target(o.best, "best", 2) or self.target
  self.log_every = o.log_every or math.min(50, math.max(1, self.steps))
  self.smoothing = o.smoothing
  if self.smoothing >= 1 then
    fail(2, "Trainer: option 'smoothing' must be a number in [0, 1), got %s", tostring(o.smoothing))
  end
  self.progress = o.progress
  if o.checkpoint == "" then fail(2, "Trainer: option 'checkpoint' must be a file path, got ''") end
  self.checkpoint = o.checkpoint
  self.checkpoint_every = o.checkpoint_every
  if self.checkpoint_every and not self.checkpoint then
    fail(2, "Trainer: option 'checkpoint_every' needs option 'checkpoint' (a path)")
  end
  self.resume = o.resume
  self.on_step, self.on_eval, self.format_eval = o.on_step, o.on_eval, o.format_eval
  if o.distributed then self:_distribute(o) end

  -- the state a checkpoint holds
  self.step, self.epoch, self.index = 0, 0, 0
  self.order = nil
  self.seconds = 0
  self.ema, self.ema_stats = nil, {}
  self.acc = {n = 0, loss = 0, stats = {}}
  self.history = {losses = {}, evals = {}}
  return self
end})

-- ---------------------------------------------------------------------------------------
-- the loop

-- the evaluation after `step`, interruptible (one process): a Ctrl-C abandons it, fit()
-- undoes its draws and it runs again on resume (eval_pending is in the checkpoint)
function Trainer:_evaluate_step(step)
  self.eval_pending = step
  self.eval_rng = {glimpse.rng_state()}
  local reached = self:_interruptible(self._evaluate)
  self.eval_pending, self.eval_rng = nil, nil
  return reached
end

-- the steps; returns the reason they stopped.  A Ctrl-C is looked at between steps only.
function Trainer:_loop()
  if self.eval_pending then        -- abandoned by a Ctrl-C before the checkpoint was written
    if self:_evaluate_step(self.eval_pending) then return "target" end
  end
  while self.step < self.steps do
    if self:_time_up() then return "time" end
    local loss, stats = self:_step()
    self:_record(loss, stats)
    local step = self.step
    local last = step >= self.steps
    if step % self.log_every == 0 or last then self:_log_interval() end
    if self.bar then self.bar:update(step, self:_bar_fields()) end
    if self.on_step then self.on_step(self, step, loss, stats) end
    local stop
    local timed_out = self:_time_up()
    if self.evaluate and ((self.eval_every and step % self.eval_every == 0)
                          or ((last or timed_out) and self.eval_at_end)) then
      if self:_evaluate_step(step) then stop = "target" end
    end
    if self.checkpoint_every and step % self.checkpoint_every == 0 and not last then
      self.timer:pause()
      self:save_checkpoint()
      self.timer:resume()
    end
    if stop then return stop end
    if timed_out and not last then return "time" end
    if not last and self:_stop_requested() then return "interrupted" end
  end
  return "steps"
end

-- an error's traceback where it happened (inside fit's coroutine); a Ctrl-C stays as it is
local function traced(err)
  if type(err) == "string" and not Trainer._is_interrupt(err) then
    return debug.traceback(err, 2)
  end
  return err
end

-- fit() inside its coroutine (train/interrupt.lua says why)
function Trainer:_fit()
  self.sigint, self.stop_agreed = nil, nil
  local resume = self.checkpoint and self.resume and util.exists(self.checkpoint)
  if self.bucket then
    resume = self:_start_ranks(resume)           -- agrees on a Ctrl-C that came before
  elseif resume then
    self:load_checkpoint(self.checkpoint)
  end
  if resume then
    self:_say(string.format("resuming from %s at step %d", self.checkpoint, self.step))
  end
  self.model:train()
  self.timer = util.Timer()
  self.bar = self.steps > self.step and self:_make_bar() or nil
  local ok, stopped = true, "interrupted"
  if not self:_stop_requested() then ok, stopped = xpcall(self._loop, traced, self) end
  self:_end_interruptible()
  if not ok then
    if self.sync then self.sync.active, self.sync.pending = false, {} end
    if not Trainer._is_interrupt(stopped) then
      if self.bar then self.bar:finish() end
      error(stopped, 0)
    end
    -- an evaluation abandoned by a Ctrl-C: its draws undone, it runs again on resume
    if self.eval_pending and self.eval_rng then
      glimpse.set_rng_state(self.eval_rng[1], self.eval_rng[2])
      local evals = self.history.evals
      if evals[#evals] and evals[#evals].step == self.eval_pending then evals[#evals] = nil end
    end
    self.model:train()
    stopped = "interrupted"
  end
  local interrupted = self:_agree_interrupt()     -- every rank the same answer
  self.timer:pause()
  if self.bar then self.bar:finish(self:_bar_fields()) end
  -- an interrupted run keeps its loss interval open (the checkpoint holds it), so that the
  -- resumed run logs the entries an uninterrupted one does
  if stopped ~= "interrupted" then self:_log_interval() end
  self.seconds = self:elapsed()
  self.timer = nil
  local h = self.history
  h.steps, h.seconds, h.stopped, h.loss = self.step, self.seconds, stopped, self.ema
  h.interrupted = interrupted
  h.resumed_from = self.resumed_from
  if self.checkpoint then
    self:save_checkpoint()
    h.checkpoint = self.checkpoint
  end
  if self.bucket then self.dist.barrier() end      -- no rank leaves before rank 0 wrote it
  self.eval_pending = nil
  if interrupted and self:_is_root() then  -- said even when progress = false
    print(string.format("interrupted at step %d of %d%s", self.step, self.steps,
                            self.checkpoint and ("; checkpoint " .. self.checkpoint
                                                 .. " (run again to resume)") or ""))
  elseif stopped == "target" then
    self:_say(string.format("stopped at step %d: %s reached %.4g (target %s %g)", self.step,
                            self.target.metric, h.reached.value,
                            self.target.mode == "max" and ">=" or "<=", self.target.value))
  elseif stopped == "time" then
    self:_say(string.format("stopped at step %d of %d: the time limit (%s) ran out", self.step,
                            self.steps, self.time_limit and string.format("%gs", self.time_limit)
                                        or "another rank's"))
  end
  return h
end

--- trainer:fit() -> history: trains until the step budget is spent (or the target is
--- reached, the time guard runs out, or Ctrl-C), resuming first from the checkpoint file
--- when there is one (and resume ~= false).  history = {steps, seconds, losses, evals,
--- stopped = "steps"|"target"|"time"|"interrupted", interrupted, best, reached, loss,
--- resumed_from, checkpoint}.  Ctrl-C stops after the step in progress (train/interrupt.lua);
--- interrupted is true whenever one came during fit(), also after the last step.
function Trainer:fit()
  local co = coroutine.create(Trainer._fit)
  local ok, h = coroutine.resume(co, self)
  if ok then return h end
  if type(h) == "string" and not Trainer._is_interrupt(h)
     and not h:find("\nstack traceback:", 1, true) then
    h = debug.traceback(co, h)
  end
  error(h, 0)
end

return M
