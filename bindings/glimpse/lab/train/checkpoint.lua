--- glimpse.train's checkpoints (a part of the Trainer, merged by train/init.lua).
--
-- One safetensors file: the model under "model.", the optimizer under "optimizer.", the
-- schedule, and the trainer's state as JSON metadata (step, data position, glimpse's global
-- RNG and the data generator's state, the history so far).  A Trainer made the same way
-- resumes from it with the same batches and random draws, so N steps straight and
-- N/2 + resume + N/2 give the same bits.
local glimpse = require "glimpse"
local check = require "glimpse.check"
local util = require "glimpse.util"
local batches = require("glimpse.data").batches

local Trainer = {}
local ints = check.integers

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
--- Data parallel: every rank calls it (it gathers every rank's RNG state); rank 0 writes.
function Trainer:save_checkpoint(path)
  path = path or self.checkpoint
  if type(path) ~= "string" then error("Trainer:save_checkpoint: no path (option 'checkpoint')", 2) end
  -- drop the normal that Box-Muller keeps in hand, here and in the run that resumes alike
  glimpse.set_rng_state(glimpse.rng_state())
  local r1, r2 = glimpse.rng_state()
  local ranks
  if self.bucket then          -- data parallel: every rank's draws (dropout) are its own
    ranks = self.dist.gather_tables({tostring(r1), tostring(r2)})
    if not self:_is_root() then return path end   -- rank 0 writes it
  end
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
              rng = {tostring(r1), tostring(r2)}, rng_ranks = ranks,
              data_rng = self.rng and {tostring(self.rng.state), tostring(self.rng.inc)} or nil,
              eval_pending = self.eval_pending, last_eval = self.last_eval}
  meta.trainer = util.json_encode(st)
  glimpse.save(path, tensors, meta)
  return path
end

local function numbers_only(t)
  local out = {}
  for k, v in pairs(type(t) == "table" and t or {}) do
    if type(v) == "number" then out[k] = v end
  end
  return out
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
  self.step, self.epoch, self.index = ints(st.step), ints(st.epoch), ints(st.index)
  self.seconds = st.seconds
  self.ema = type(st.ema) == "number" and st.ema or nil     -- a NaN comes back as JSON null
  self.ema_stats = numbers_only(st.ema_stats)
  self.acc = st.acc or {n = 0, loss = 0}
  self.acc.n, self.acc.stats = ints(self.acc.n), numbers_only(self.acc.stats)
  local h = check.integers(st.history or {})
  self.history = {losses = h.losses or {}, evals = h.evals or {}, best = h.best,
                  reached = h.reached}
  self.eval_pending = st.eval_pending and ints(st.eval_pending) or nil
  self.last_eval = st.last_eval and ints(st.last_eval) or nil
  -- data parallel on as many ranks as wrote it: this rank's own state; else rank 0's
  local rng = st.rng
  if self.bucket and type(st.rng_ranks) == "table" and #st.rng_ranks == self.world then
    rng = st.rng_ranks[self.rank + 1]
  end
  glimpse.set_rng_state(math.tointeger(tonumber(rng[1])), math.tointeger(tonumber(rng[2])))
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

return Trainer
