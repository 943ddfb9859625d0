--- glimpse.train's step (a part of the Trainer; train/init.lua merges its methods): the next
-- batch, the loss and its backward, clipping, the optimizer and schedule steps.  A step is
-- one unit: fit() runs it in a coroutine that a Ctrl-C does not reach (train/interrupt.lua).
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
  -- synchronised batch norms (parallel.lua) continue the backward from their inputs: the
  -- graph stays until then
  loss:backward(nil, self.sync ~= nil)
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

return Trainer
