--- glimpse.train's data parallelism (distributed = true; a part of the Trainer, merged by
-- train/init.lua; docs/distributed.md).
--
-- Every rank holds the whole model and takes its share of each global batch (item i of the
-- batch's indices goes to rank (i-1) % size); one allreduce of a flat bucket of gradients
-- per step leaves every rank with the gradient of the whole batch, so every rank makes the
-- same update.  A rank's gradient is weighed by the loss's normaliser on its shard: the
-- stat `tokens` when the loss reports it (a mean over tokens), else its number of examples.
-- Rank 0 alone prints, logs and writes checkpoints.
local glimpse = require "glimpse"

local Trainer = {}

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

return Trainer
