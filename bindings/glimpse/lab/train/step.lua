--- glimpse.train's step (a part of the Trainer; train/init.lua merges its methods): the next
-- batch, the loss and its backward, clipping, the optimizer and schedule steps.
--
-- Ctrl-C: the glimpse executable turns SIGINT into the error "interrupted!" at the next Lua
-- instruction of the main thread.  Each step runs in a coroutine, which that hook does not
-- reach, so an interrupt lands between steps, never inside an update; fit() catches it,
-- writes the checkpoint and returns the history with interrupted = true.
local glimpse = require "glimpse"
local check = require "glimpse.check"
local optim = require "glimpse.optim"
local batches = require("glimpse.data").batches

local Trainer = {}

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
          and ("shape " .. check.shape(loss)) or type(loss)), 0)
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

--- Trainer._is_interrupt(err) -> whether err is the executable's Ctrl-C error
function Trainer._is_interrupt(err)
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
  if type(loss) == "string" and not Trainer._is_interrupt(loss) then
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

return Trainer
