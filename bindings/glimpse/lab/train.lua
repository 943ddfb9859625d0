--- glimpse.train -- the training loop every experiment shares: the Trainer.
--
--   local trainer = glimpse.train.Trainer{model = model, optimizer = {"Adam", lr = 3e-3},
--                                         data = train_set, batch_size = 32, seed = 1,
--                                         steps = 2000, clip = 1.0,
--                                         eval_every = 200, evaluate = function(m, step) ... end}
--   local history = trainer:fit()
--
-- The model contract: an nn.Module with model:loss(batch) -> loss (a scalar tensor), stats
-- (nil or a table of numbers, averaged into the log: nll, reward, baseline ...), and
-- model:train() / model:evaluate().
--
-- Results depend on the step budget, never on the clock: `steps` ends a run, `time_limit` is
-- only a guard.  A checkpoint (one safetensors file: model, optimizer, schedule, step, data
-- position, glimpse's global RNG and the data generator's state, the history so far) lets a
-- killed run resume and continue with the same batches and random draws, so N steps straight
-- and N/2 + resume + N/2 give the same bits.
--
-- Ctrl-C: the glimpse executable turns SIGINT into the error "interrupted!" at the next Lua
-- instruction of the main thread.  Each training step runs in a coroutine, which that hook
-- does not reach, so an interrupt lands between steps, never inside an update; fit() catches
-- it, writes the checkpoint, says where it stopped and returns the history with
-- interrupted = true.  (A second Ctrl-C ends the process, as the executable arranges.)
local glimpse = require "glimpse"
local optim = require "glimpse.optim"
local progress = require "glimpse.lab.progress"
local util = require "glimpse.util"
local gdata = require "glimpse.data"    -- finds datasets/ in the source tree and installed
local batches, Rng = gdata.batches, gdata.Rng

local M = {}

local Trainer = {}
Trainer.__index = Trainer

local SMOOTHING = 0.95         -- moving average of the loss: ema = 0.95 ema + 0.05 loss
local DEFAULT_LOG_EVERY = 50
local RESERVED = {step = true, seconds = true, train_loss = true}

local function fail(fmt, ...)
  error(string.format(fmt, ...), 3)
end

-- every option, with the check of its value (nil: any value of the documented kind)
local OPTIONS = {
  model = true, optimizer = true, data = true, steps = true, batch_size = true, seed = true,
  shuffle = true, bucket = true, lengths = true, drop_last = true, rng = true,
  time_limit = true, clip = true, clip_value = true, schedule = true, eval_every = true,
  evaluate = true, eval_at_end = true, target = true, best = true, log_every = true,
  smoothing = true, progress = true, checkpoint = true, checkpoint_every = true,
  resume = true, on_step = true, on_eval = true, loss = true, format_eval = true,
  distributed = true,
}

local function check_int(name, v, lo, optional)
  if v == nil and optional then return nil end
  if type(v) == "number" and v % 1 == 0 then v = math.tointeger(v) end
  if math.type(v) ~= "integer" or v < lo then
    fail("Trainer: option '%s' must be an integer >= %d, got %s", name, lo, tostring(v))
  end
  return v
end

local function check_positive(name, v)
  if v == nil then return nil end
  if type(v) ~= "number" or not (v > 0) then
    fail("Trainer: option '%s' must be a positive number, got %s", name, tostring(v))
  end
  return v
end

local function check_fn(name, v)
  if v ~= nil and type(v) ~= "function" then
    fail("Trainer: option '%s' must be a function, got %s", name, type(v))
  end
  return v
end

local function dataset_size(ds)
  if type(ds.n) == "number" then return ds.n end
  if type(ds.size) == "function" then return ds:size() end
  return #ds
end

-- an optimizer object, or a spec {"Adam", lr = 1e-3, ...} made on the model's parameters
local function make_optimizer(spec, model)
  if type(spec) ~= "table" then
    fail("Trainer: option 'optimizer' must be an optimizer or a spec like {\"Adam\", lr = 1e-3}, "
         .. "got %s", type(spec))
  end
  if spec.param_groups then return spec end
  local name = spec[1]
  if type(name) ~= "string" or type(optim[name]) ~= "table" or not optim[name].defaults
     or optim[name].lr_at then
    fail("Trainer: option 'optimizer': %s is not an optimizer of glimpse.optim (Adam, SGD, "
         .. "RMSProp, ...)", tostring(name))
  end
  local opts = {}
  for k, v in pairs(spec) do if k ~= 1 then opts[k] = v end end
  return optim[name](model:parameters(), opts)
end

-- a schedule object, a spec {"CosineAnnealingLR", T_max = ...} (T_max defaults to the step
-- budget), or a function(optimizer) -> schedule
local function make_schedule(spec, opt, steps)
  if spec == nil then return nil end
  if type(spec) == "function" then return spec(opt) end
  if type(spec) ~= "table" then
    fail("Trainer: option 'schedule' must be a schedule, a spec like {\"CosineAnnealingLR\"} or "
         .. "a function(optimizer), got %s", type(spec))
  end
  if spec.lr_at then return spec end
  local name = spec[1]
  if type(name) ~= "string" or type(optim[name]) ~= "table" or not optim[name].lr_at then
    fail("Trainer: option 'schedule': %s is not a schedule of glimpse.optim (StepLR, "
         .. "CosineAnnealingLR, LinearWarmup, ...)", tostring(name))
  end
  local opts = {}
  for k, v in pairs(spec) do if k ~= 1 then opts[k] = v end end
  if name == "CosineAnnealingLR" and opts.T_max == nil then opts.T_max = math.max(1, steps) end
  return optim[name](opt, opts)
end

local function check_target(t, name)
  if t == nil then return nil end
  if type(t) ~= "table" or type(t.metric) ~= "string" then
    fail("Trainer: option '%s' must be a table {metric = \"name\", value = x, mode = \"max\"}", name)
  end
  local mode = t.mode or "max"
  if mode ~= "max" and mode ~= "min" then
    fail("Trainer: option '%s': mode must be \"max\" or \"min\", got %s", name, tostring(mode))
  end
  if name == "target" and type(t.value) ~= "number" then
    fail("Trainer: option 'target': value must be a number, got %s", tostring(t.value))
  end
  return {metric = t.metric, value = t.value, mode = mode}
end

--- train.Trainer{model=, optimizer=, data=, steps=, ...} -> trainer.  Options are listed in
--- docs/api/train.md; an unknown option or a bad value is an error naming it.
function M.Trainer(o)
  if type(o) ~= "table" then fail("Trainer: expected an options table {model=, optimizer=, ...}") end
  for k in pairs(o) do
    if not OPTIONS[k] then fail("Trainer: unknown option '%s'", tostring(k)) end
  end
  local self = setmetatable({}, Trainer)
  local model = o.model
  if type(model) ~= "table" or type(model.parameters) ~= "function" then
    fail("Trainer: option 'model' must be an nn.Module, got %s", type(model))
  end
  self.model = model
  self.loss_fn = check_fn("loss", o.loss)
  if not self.loss_fn and type(model.loss) ~= "function" then
    fail("Trainer: option 'model' has no loss(batch) method (give one, or option 'loss')")
  end
  self.steps = check_int("steps", o.steps, 0)
  self.optimizer = make_optimizer(o.optimizer, model)
  self.schedule = make_schedule(o.schedule, self.optimizer, self.steps)
  self.params = self.optimizer:parameters()

  local data = o.data
  self.seed = check_int("seed", o.seed or 0, 0)
  if type(data) == "function" then
    self.generate = data
    self.rng = o.rng or Rng.new(self.seed, "train.data")
    if type(self.rng) ~= "table" or type(self.rng.state) ~= "number" then
      fail("Trainer: option 'rng' must be a glimpse.data.Rng generator")
    end
  elseif type(data) == "table" and type(data.collate) == "function" then
    self.dataset = data
    self.n = dataset_size(data)
    if math.type(self.n) ~= "integer" or self.n < 1 then
      fail("Trainer: option 'data': the dataset has no examples (size %s)", tostring(self.n))
    end
    self.batch_size = check_int("batch_size", o.batch_size, 1)
    if o.lengths ~= nil and type(o.lengths) ~= "table" then
      fail("Trainer: option 'lengths' must be a table of %d numbers", self.n)
    end
    self.order_opts = {batch_size = self.batch_size, seed = self.seed, shuffle = o.shuffle,
                       bucket = check_int("bucket", o.bucket, 1, true),
                       lengths = o.lengths or (o.bucket and data.lengths) or nil,
                       drop_last = o.drop_last}
  else
    fail("Trainer: option 'data' must be a dataset (with collate(indices) and a size) or a "
         .. "function(step, rng) -> batch, got %s", type(data))
  end
  if o.rng ~= nil and not self.generate then
    fail("Trainer: option 'rng' goes with generated data (data = function(step, rng))")
  end

  self.time_limit = check_positive("time_limit", o.time_limit)
  self.clip = check_positive("clip", o.clip)
  self.clip_value = check_positive("clip_value", o.clip_value)
  self.eval_every = check_int("eval_every", o.eval_every, 1, true)
  self.evaluate = check_fn("evaluate", o.evaluate)
  if self.eval_every and not self.evaluate then
    fail("Trainer: option 'eval_every' needs option 'evaluate' = function(model, step) -> metrics")
  end
  self.eval_at_end = o.eval_at_end ~= false
  self.target = check_target(o.target, "target")
  if self.target and not self.evaluate then
    fail("Trainer: option 'target' needs option 'evaluate' (the metric comes from it)")
  end
  self.best_spec = check_target(o.best, "best") or self.target
  self.log_every = check_int("log_every", o.log_every or math.min(DEFAULT_LOG_EVERY,
                                                                 math.max(1, self.steps)), 1)
  self.smoothing = o.smoothing or SMOOTHING
  if type(self.smoothing) ~= "number" or self.smoothing < 0 or self.smoothing >= 1 then
    fail("Trainer: option 'smoothing' must be a number in [0, 1), got %s", tostring(o.smoothing))
  end
  if o.progress ~= nil and type(o.progress) ~= "boolean" and type(o.progress) ~= "table" then
    fail("Trainer: option 'progress' must be false, true or a table of progress.Bar options")
  end
  self.progress = o.progress
  if o.checkpoint ~= nil and (type(o.checkpoint) ~= "string" or o.checkpoint == "") then
    fail("Trainer: option 'checkpoint' must be a file path, got %s", tostring(o.checkpoint))
  end
  self.checkpoint = o.checkpoint
  self.checkpoint_every = check_int("checkpoint_every", o.checkpoint_every, 1, true)
  if self.checkpoint_every and not self.checkpoint then
    fail("Trainer: option 'checkpoint_every' needs option 'checkpoint' (a path)")
  end
  self.resume = o.resume ~= false
  self.on_step = check_fn("on_step", o.on_step)
  self.on_eval = check_fn("on_eval", o.on_eval)
  self.format_eval = check_fn("format_eval", o.format_eval)
  if o.distributed then self:_distribute() end

  -- the state a checkpoint holds
  self.step, self.epoch, self.index = 0, 0, 0
  self.order = nil
  self.seconds = 0
  self.ema, self.ema_stats = nil, {}
  self.acc = {n = 0, loss = 0, stats = {}}
  self.history = {losses = {}, evals = {}}
  return self
end

-- ---------------------------------------------------------------------------------------
-- one step

-- the next batch: generated, or the next one of the epoch's order (a new epoch's order,
-- from (seed, epoch), when the last one ran out)
function Trainer:_next_batch()
  if self.generate then return self.generate(self.step + 1, self.rng) end
  if not self.order or self.index >= #self.order then
    self.epoch, self.index = self.epoch + 1, 0
    self.order = batches.order(self.n, setmetatable({epoch = self.epoch},
                                                    {__index = self.order_opts}))
    if #self.order == 0 then
      error("Trainer: an epoch has no batches (fewer examples than batch_size with drop_last)", 0)
    end
  end
  self.index = self.index + 1
  local indices = self.order[self.index]
  if self.bucket then                          -- data parallel: this rank's share
    indices = self.dist.shard(indices)
    self.shard_size = #indices
    if #indices == 0 then return nil end
  end
  return self.dataset:collate(indices)
end

local function as_number(v, what)
  if glimpse.is_tensor(v) then v = v:item() end
  if type(v) ~= "number" then
    error(string.format("Trainer: %s is a %s, expected a number", what, type(v)), 0)
  end
  return v
end

-- the loss of a batch and its backward; returns the loss and the stats (numbers)
function Trainer:_forward_backward(batch)
  local loss, stats
  if self.loss_fn then loss, stats = self.loss_fn(self.model, batch, self.step + 1)
  else loss, stats = self.model:loss(batch) end
  if not glimpse.is_tensor(loss) or loss:numel() ~= 1 then
    error("Trainer: the loss must be a scalar tensor, got " .. (glimpse.is_tensor(loss)
          and ("shape [" .. table.concat(loss.shape, ",") .. "]") or type(loss)), 0)
  end
  if stats ~= nil and type(stats) ~= "table" then
    error("Trainer: model:loss returned a " .. type(stats) .. " as its second value; expected "
          .. "nil or a table of numbers to log", 0)
  end
  loss:backward()
  local out = {}
  if stats then
    for k, v in pairs(stats) do out[k] = as_number(v, "stat '" .. tostring(k) .. "'") end
  end
  return loss:item(), out
end

-- zero_grad, loss, backward (data parallel: on this rank's shard, then the gradients
-- averaged over the ranks), clip, step, schedule; returns the loss and the stats (numbers)
function Trainer:_step()
  local batch = self:_next_batch()
  local opt = self.optimizer
  opt:zero_grad()
  local loss, out
  if self.bucket then loss, out = self:_shard_step(batch)
  else loss, out = self:_forward_backward(batch) end
  if self.clip then out.grad_norm = optim.clip_grad_norm(self.params, self.clip) end
  if self.clip_value then optim.clip_grad_value(self.params, self.clip_value) end
  opt:step()
  if self.schedule then self.schedule:step() end
  self.step = self.step + 1
  return loss, out
end

-- ---------------------------------------------------------------------------------------
-- data parallel (distributed = true; docs/distributed.md)
--
-- Every rank holds the whole model and takes its share of each global batch (item i of the
-- batch's indices goes to rank (i-1) % size); one allreduce of a flat bucket of gradients
-- per step leaves every rank with the gradient of the whole batch, so every rank makes the
-- same update.  A rank's gradient is weighed by the loss's normaliser on its shard: the
-- stat `tokens` when the loss reports it (a mean over tokens: Seq2Seq's stats hold it, and
-- a loss function around Captioner:loss passes on its info.tokens), else its number of
-- examples.  Rank 0 alone prints, logs and writes checkpoints.

function Trainer:_distribute()
  local dist = require "glimpse.lab.dist"
  self.rank, self.world = dist.init()
  if self.world == 1 then return end           -- one rank: the plain loop, bit for bit
  if self.generate then                        -- level 3: the caller of Trainer{...}
    error(string.format("Trainer: option 'distributed' needs a dataset (data with "
          .. "collate(indices)): generated batches cannot be split over the %d ranks",
          self.world), 3)
  end
  if self.batch_size < self.world then
    error(string.format("Trainer: option 'batch_size' (%d) must be at least the number of ranks "
          .. "(%d) with option 'distributed'", self.batch_size, self.world), 3)
  end
  self.dist = dist
  self.bucket = dist.GradBucket(self.params)
  if self.rank ~= 0 then self.progress = false end
end

function Trainer:_is_root()
  return not self.bucket or self.rank == 0
end

-- this rank's shard: forward, backward, then the one allreduce (gradients, loss, and whether
-- any rank's time guard ran out, so that all ranks stop at the same step)
function Trainer:_shard_step(batch)
  self.bucket:attach()
  local loss, out, weight = 0, {}, 0
  if batch ~= nil then
    loss, out = self:_forward_backward(batch)
    weight = out.tokens or self.shard_size
  end
  local late = self.time_limit ~= nil and self.timer ~= nil
               and self.timer:elapsed() >= self.time_limit
  local _, mean_loss, any_late = self.bucket:average(weight, loss, late)
  self.time_up = any_late
  return mean_loss, out
end

-- buffers (running statistics) follow each rank's own shards: rank 0's go to every rank at
-- the start and before each evaluation, so that every rank evaluates the same model
function Trainer:_sync_buffers()
  if type(self.model.buffers) ~= "function" then return end
  for _, b in ipairs(self.model:buffers()) do self.dist.broadcast(b, 0) end
end

-- rank 0's answer to a yes/no question, on every rank
function Trainer:_root_says(yes)
  local flag = glimpse.tensor({yes and 1 or 0})
  self.dist.broadcast(flag, 0)
  return flag:item() > 0
end

function Trainer:_time_up()
  if self.bucket then return self.time_up == true end
  return self.time_limit ~= nil and self.timer:elapsed() >= self.time_limit
end

-- the start of fit() on every rank: resume if rank 0 has a checkpoint, start from rank 0's
-- parameters, and check that every rank is at the same step
function Trainer:_start_ranks(resume)
  local dist = self.dist
  self.time_up = nil
  resume = self:_root_says(resume)
  if resume then self:load_checkpoint(self.checkpoint) end
  for _, p in ipairs(self.params) do dist.broadcast(p, 0) end
  self:_sync_buffers()
  local steps = glimpse.tensor({self.step, -self.step})
  dist.allreduce(steps, "max")
  local hi, lo = steps:totable()[1], -steps:totable()[2]
  if hi ~= lo then
    error(string.format("Trainer: the ranks start from different steps (%d to %d): every rank "
                        .. "must read the same checkpoint %s (a shared filesystem)", lo, hi,
                        tostring(self.checkpoint)), 0)
  end
  return resume
end

-- ---------------------------------------------------------------------------------------
-- bookkeeping

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

-- ---------------------------------------------------------------------------------------
-- checkpoints

local function split_tensors(sd, prefix)
  local out = {}
  for k, v in pairs(sd) do
    if k:sub(1, #prefix) == prefix then out[k:sub(#prefix + 1)] = v end
  end
  return out
end

--- trainer:save_checkpoint([path]) writes the checkpoint (atomically) to path (default the
--- `checkpoint` option): model under "model.", optimizer under "optimizer.", the schedule,
--- and the trainer's state (step, data position, RNG states, history) as JSON metadata.
function Trainer:save_checkpoint(path)
  path = path or self.checkpoint
  if type(path) ~= "string" then error("Trainer:save_checkpoint: no path (option 'checkpoint')", 2) end
  -- drop the normal that Box-Muller keeps in hand, here and in the run that resumes alike
  glimpse.set_rng_state(glimpse.rng_state())
  if not self:_is_root() then return path end   -- data parallel: rank 0 writes it
  local r1, r2 = glimpse.rng_state()
  local tensors = {}
  for k, v in pairs(self.model:state_dict()) do tensors["model." .. k] = v end
  local ot, meta = self.optimizer:state_dict("optimizer.")
  for k, v in pairs(ot) do tensors[k] = v end
  if self.schedule then
    for k, v in pairs(self.schedule:state_dict("schedule.")) do meta[k] = v end
  end
  local st = {step = self.step, epoch = self.epoch, index = self.index,
              seconds = self:elapsed(), ema = self.ema, ema_stats = self.ema_stats,
              acc = self.acc, history = self.history,
              rng = {tostring(r1), tostring(r2)},
              data_rng = self.rng and {tostring(self.rng.state), tostring(self.rng.inc)} or nil,
              eval_pending = self.eval_pending, last_eval = self.last_eval}
  meta.trainer = util.json_encode(st)
  glimpse.save(path, tensors, meta)
  return path
end

local function int_of(x) return math.tointeger(x) or x end

local function numbers_only(t)
  local out = {}
  for k, v in pairs(type(t) == "table" and t or {}) do
    if type(v) == "number" then out[k] = v end
  end
  return out
end

local function ints(t)
  if type(t) ~= "table" then return t end
  for k, v in pairs(t) do
    if type(v) == "number" then t[k] = int_of(v) elseif type(v) == "table" then ints(v) end
  end
  return t
end

--- trainer:load_checkpoint([path]) restores everything save_checkpoint wrote; the next step
--- is the one after the checkpoint's.  Returns the step it resumes from.
function Trainer:load_checkpoint(path)
  path = path or self.checkpoint
  local tensors, meta = glimpse.load(path)
  if type(meta.trainer) ~= "string" then
    error("Trainer:load_checkpoint: " .. path .. " is not a Trainer checkpoint (no 'trainer' "
          .. "metadata)", 2)
  end
  local st = util.json_decode(meta.trainer)
  self.model:load_state_dict(split_tensors(tensors, "model."))
  self.optimizer:load_state_dict(tensors, meta, "optimizer.")
  if self.schedule then self.schedule:load_state_dict(meta, "schedule.") end
  self.step, self.epoch, self.index = int_of(st.step), int_of(st.epoch), int_of(st.index)
  self.seconds = st.seconds
  self.ema = type(st.ema) == "number" and st.ema or nil     -- a NaN comes back as JSON null
  self.ema_stats = numbers_only(st.ema_stats)
  self.acc = st.acc or {n = 0, loss = 0}
  self.acc.n, self.acc.stats = int_of(self.acc.n), numbers_only(self.acc.stats)
  local h = st.history or {}
  ints(h)
  self.history = {losses = h.losses or {}, evals = h.evals or {}, best = h.best,
                  reached = h.reached}
  self.eval_pending = st.eval_pending and int_of(st.eval_pending) or nil
  self.last_eval = st.last_eval and int_of(st.last_eval) or nil
  glimpse.set_rng_state(math.tointeger(tonumber(st.rng[1])), math.tointeger(tonumber(st.rng[2])))
  if self.rng and st.data_rng then
    self.rng.state = math.tointeger(tonumber(st.data_rng[1]))
    self.rng.inc = math.tointeger(tonumber(st.data_rng[2]))
  end
  self.order = nil
  if self.dataset and self.epoch > 0 then
    self.order = batches.order(self.n, setmetatable({epoch = self.epoch},
                                                    {__index = self.order_opts}))
  end
  self.resumed_from = self.step
  return self.step
end

-- ---------------------------------------------------------------------------------------
-- the loop

local function is_interrupt(err)
  return type(err) == "string" and err:match("interrupted!$") ~= nil
end

-- the step in a coroutine: the interrupt hook is set on the main thread only, so a Ctrl-C
-- takes effect when the step is complete.  (A signal that comes while the coroutine is being
-- made is copied into it and fires at its first instruction, before anything moved: fit()
-- then puts back the data position and the RNG states kept here.)
function Trainer:_step_atomic()
  self.pre_step = {self.epoch, self.index, self.order, self.rng and self.rng.state,
                   {glimpse.rng_state()}}
  local co = coroutine.create(self._step)
  local ok, loss, stats = coroutine.resume(co, self)
  if ok then
    self.pre_step = nil
    return loss, stats
  end
  if type(loss) == "string" and not is_interrupt(loss) then
    error(debug.traceback(co, loss), 0)
  end
  error(loss, 0)
end

function Trainer:_undo_partial_step()
  local s = self.pre_step
  if not s then return end
  self.epoch, self.index, self.order = s[1], s[2], s[3]
  if self.rng then self.rng.state = s[4] end
  glimpse.set_rng_state(s[5][1], s[5][2])
  self.pre_step = nil
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

-- the loop body; returns the reason it stopped
function Trainer:_loop()
  if self.eval_pending then
    self.eval_pending = nil
    if self:_evaluate() then return "target" end
  end
  while self.step < self.steps do
    if self:_time_up() then return "time" end
    local loss, stats = self:_step_atomic()
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
      self.eval_pending = step
      self.eval_rng = {glimpse.rng_state()}
      if self:_evaluate() then stop = "target" end
      self.eval_pending, self.eval_rng = nil, nil
    end
    if self.checkpoint_every and step % self.checkpoint_every == 0 and not last then
      self.timer:pause()
      self:save_checkpoint()
      self.timer:resume()
    end
    if stop then return stop end
    if timed_out and not last then return "time" end
  end
  return "steps"
end

--- trainer:fit() -> history: trains until the step budget is spent (or the target is
--- reached, the time guard runs out, or Ctrl-C), resuming first from the checkpoint file
--- when there is one (and resume ~= false).  history = {steps, seconds, losses, evals,
--- stopped = "steps"|"target"|"time"|"interrupted", interrupted, best, reached, loss,
--- resumed_from, checkpoint}.
function Trainer:fit()
  local resume = self.checkpoint and self.resume and util.exists(self.checkpoint)
  if self.bucket then
    resume = self:_start_ranks(resume)
  elseif resume then
    self:load_checkpoint(self.checkpoint)
  end
  if resume then
    self:_say(string.format("resuming from %s at step %d", self.checkpoint, self.step))
  end
  self.model:train()
  self.timer = util.Timer()
  self.bar = self.steps > self.step and self:_make_bar() or nil
  local ok, stopped = pcall(self._loop, self)
  if not ok then
    if not is_interrupt(stopped) then
      if self.bar then self.bar:finish() end
      error(stopped, 0)
    end
    -- interrupted between steps, or during an evaluation (then its draws are undone and the
    -- evaluation runs again on resume)
    self:_undo_partial_step()
    if self.eval_pending and self.eval_rng then
      glimpse.set_rng_state(self.eval_rng[1], self.eval_rng[2])
      local evals = self.history.evals
      if evals[#evals] and evals[#evals].step == self.eval_pending then evals[#evals] = nil end
    end
    self.model:train()
    stopped = "interrupted"
  end
  self.timer:pause()
  if self.bar then self.bar:finish(self:_bar_fields()) end
  self:_log_interval()
  self.seconds = self:elapsed()
  self.timer = nil
  local h = self.history
  h.steps, h.seconds, h.stopped, h.loss = self.step, self.seconds, stopped, self.ema
  h.interrupted = stopped == "interrupted"
  h.resumed_from = self.resumed_from
  if self.checkpoint then
    self:save_checkpoint()
    h.checkpoint = self.checkpoint
  end
  self.eval_pending = nil
  if stopped == "interrupted" and self:_is_root() then  -- said even when progress = false
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

return M
