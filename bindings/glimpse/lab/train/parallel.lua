--- glimpse.train's data parallelism (distributed = true; a part of the Trainer, merged by
-- train/init.lua; docs/distributed.md).
--
-- Every rank holds the whole model and takes its share of each global batch (item i of the
-- batch's indices goes to rank (i-1) % size); one allreduce of a flat bucket of gradients
-- per step leaves every rank with the gradient of the whole batch, so every rank makes the
-- same update.  A rank's gradient is weighed by the loss's normaliser on its shard: the
-- stat `tokens` when the loss reports it (a mean over tokens), else its number of examples.
-- Batch norm layers use the whole global batch's statistics (nn/norm.lua's SyncBatchNorm)
-- unless sync_batchnorm = false.  The settings every rank must share are compared when the
-- Trainer is made; the step's allreduce also carries the time guard's and Ctrl-C's flags, so
-- the ranks stop at the same step.  Rank 0 alone prints, logs and writes checkpoints.
local glimpse = require "glimpse"
local check = require "glimpse.check"
local util = require "glimpse.util"

local Trainer = {}

-- ---------------------------------------------------------------------------------------
-- the settings every rank must share

-- name -> a JSON-able value of each setting that changes the collectives or the update
local function shared_settings(self, o)
  local s = {steps = self.steps, batch_size = self.batch_size, seed = self.seed,
             shuffle = o.shuffle, bucket = o.bucket or false, drop_last = o.drop_last,
             ["data size"] = self.n, clip = self.clip or false,
             clip_value = self.clip_value or false, eval_every = self.eval_every or false,
             evaluate = self.evaluate ~= nil, eval_at_end = self.eval_at_end,
             sync_batchnorm = o.sync_batchnorm,
             target = self.target and string.format("%s %s %s", self.target.metric,
                                                    self.target.mode, self.target.value) or false}
  local shapes = {}
  for name, p in self.model:named_parameters() do
    shapes[#shapes + 1] = name .. " " .. table.concat(p.shape, "x")
  end
  s["model parameters"] = table.concat(shapes, ", ")
  if type(self.model.config) == "table" then
    local ok, text = pcall(util.json_encode, self.model.config)
    s["model config"] = ok and text or nil
  end
  local opt = self.optimizer
  s.optimizer = opt.name or "?"
  for i, g in ipairs(opt.param_groups) do
    for k, v in pairs(g) do
      if k ~= "params" and type(v) ~= "function" then
        local ok, text = pcall(util.json_encode, v)
        s[string.format("optimizer group %d %s", i, k)] = ok and text or tostring(v)
      end
    end
    s[string.format("optimizer group %d size", i)] = #g.params
  end
  local sched = self.schedule
  if sched then
    s.schedule = sched.name or "?"
    if type(sched.options) == "table" and sched.options.names then
      for _, k in ipairs(sched.options.names) do
        local ok, text = pcall(util.json_encode, sched[k])
        if ok and type(sched[k]) ~= "function" then s["schedule " .. k] = text end
      end
    end
  end
  return s
end

-- "rank 0 has 30, rank 1 has 40" (ranks with the same value together)
local function who_has(all, key)
  local groups, order = {}, {}
  for r, s in ipairs(all) do
    local v = s[key] == nil and "nothing" or tostring(s[key])
    if not groups[v] then groups[v] = {}; order[#order + 1] = v end
    table.insert(groups[v], r - 1)
  end
  local parts = {}
  for _, v in ipairs(order) do
    local ranks = groups[v]
    local shown = #v > 200 and v:sub(1, 200) .. "..." or v
    parts[#parts + 1] = string.format("rank%s %s %s %s", #ranks > 1 and "s" or "",
                                      table.concat(ranks, ", "), #ranks > 1 and "have" or "has",
                                      shown)
  end
  return table.concat(parts, ", ")
end

-- every rank's settings against every other's: one error, the same on every rank
function Trainer:_check_ranks_agree(o, level)
  local all = check.integers(self.dist.gather_tables(shared_settings(self, o)))
  local keys, seen = {}, {}
  for _, s in ipairs(all) do
    for k in pairs(s) do
      if not seen[k] then seen[k] = true; keys[#keys + 1] = k end
    end
  end
  table.sort(keys)
  local bad = {}
  for _, k in ipairs(keys) do
    local first = all[1][k]
    for r = 2, #all do
      if all[r][k] ~= first then bad[#bad + 1] = k; break end
    end
  end
  if #bad == 0 then return end
  local lines = {}
  for _, k in ipairs(bad) do
    lines[#lines + 1] = string.format("'%s': %s", k, who_has(all, k))
  end
  error(string.format("Trainer: the ranks disagree on %s (every rank must make the Trainer "
                      .. "with the same settings and model): %s",
                      #bad == 1 and "a setting" or (#bad .. " settings"),
                      table.concat(lines, "; ")), level + 1)
end

-- ---------------------------------------------------------------------------------------
-- the ranks

function Trainer:_distribute(o)
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
  self:_check_ranks_agree(o, 3)
  self.bucket = dist.GradBucket(self.params)
  if o.sync_batchnorm then self:_sync_batchnorm(3) end
  if self.rank ~= 0 then self.progress = false end
end

function Trainer:_is_root()
  return not self.bucket or self.rank == 0
end

-- ---------------------------------------------------------------------------------------
-- synchronised batch norm: the context nn/norm.lua's batch norms use while a step runs

local Sync = {}
Sync.__index = Sync

function Sync:gather(t) return self.dist.allgather(t) end
function Sync:sum(t) return self.dist.allreduce(t, "sum") end
function Sync:defer(fn) self.pending[#self.pending + 1] = fn end

-- the deferred backward of every synchronised batch norm of the step, the last one first
function Sync:backward(weight)
  local pending = self.pending
  self.pending = {}
  for i = #pending, 1, -1 do pending[i](weight) end
end

function Trainer:_sync_batchnorm(level)
  local norms = {}
  for _, m in ipairs(self.model:modules()) do
    if m.__name == "BatchNorm1d" or m.__name == "BatchNorm2d" then norms[#norms + 1] = m end
  end
  if #norms == 0 then return end
  -- a rank without examples would miss the batch norms' collectives: only the last batch of
  -- an epoch can be that short
  local last = self.n % self.batch_size
  if not self.order_opts.drop_last and last > 0 and last < self.world then
    error(string.format("Trainer: option 'distributed' with batch norm (synchronised over the "
          .. "ranks): the last batch of each epoch has %d example%s for %d ranks, so a rank "
          .. "would have none; use drop_last = true, another batch_size, or "
          .. "sync_batchnorm = false", last, last == 1 and "" or "s", self.world), level + 1)
  end
  self.sync = setmetatable({dist = self.dist, pending = {}, active = false}, Sync)
  for _, m in ipairs(norms) do m.sync = self.sync end
end

-- ---------------------------------------------------------------------------------------
-- the step

-- this rank's shard: forward, backward (and the synchronised batch norms' backward), then
-- the one allreduce: gradients, loss, and the flags of the time guard and of a Ctrl-C, so
-- that all ranks stop at the same step
function Trainer:_shard_step(batch)
  self.bucket:attach()
  local loss, out, weight = 0, {}, 0
  local sync = self.sync
  if batch ~= nil then
    if sync then sync.active, sync.pending = true, {} end
    loss, out = self:_forward_backward(batch)
    weight = out.tokens or self.shard_size
    if sync then
      sync:backward(weight)
      sync.active = false
    end
  end
  local late = self.time_limit ~= nil and self.timer ~= nil
               and self.timer:elapsed() >= self.time_limit
  local _, mean_loss, any_late, any_stop = self.bucket:average(weight, loss, late,
                                                               self:_interrupt_seen())
  self.time_up, self.stop_agreed = any_late, any_stop
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

-- true on every rank when any rank says yes
function Trainer:_any_rank(yes)
  local flag = glimpse.tensor({yes and 1 or 0})
  self.dist.allreduce(flag, "max")
  return flag:item() > 0
end

function Trainer:_time_up()
  if self.bucket then return self.time_up == true end
  return self.time_limit ~= nil and self.timer:elapsed() >= self.time_limit
end

-- the start of fit() on every rank: resume if rank 0 has a checkpoint, start from rank 0's
-- parameters, check that every rank is at the same step, and agree on a Ctrl-C so far
function Trainer:_start_ranks(resume)
  local dist = self.dist
  self.time_up = nil
  resume = self:_root_says(resume)
  if resume then self:load_checkpoint(self.checkpoint) end
  for _, p in ipairs(self.params) do dist.broadcast(p, 0) end
  self:_sync_buffers()
  local steps = glimpse.tensor({self.step, -self.step, self:_interrupt_seen() and 1 or 0})
  dist.allreduce(steps, "max")
  local t = steps:totable()
  local hi, lo = t[1], -t[2]
  if hi ~= lo then
    error(string.format("Trainer: the ranks start from different steps (%d to %d): every rank "
                        .. "must read the same checkpoint %s (a shared filesystem)", lo, hi,
                        tostring(self.checkpoint)), 0)
  end
  self.stop_agreed = t[3] > 0
  return resume
end

return Trainer
