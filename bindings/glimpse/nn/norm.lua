--- glimpse.nn.norm -- normalisation layers: nn.LayerNorm, nn.BatchNorm2d, nn.BatchNorm1d.
local glimpse = require "glimpse"
local check = require "glimpse.check"
local options = require "glimpse.options"
local base = require "glimpse.nn.module"

local Module, is_tensor = base.Module, base.is_tensor

local M = {}

-- ---------------------------------------------------------------------------------------
-- LayerNorm: x (..., *shape) normalised over the trailing dims `shape` (Ba et al. 2016)

local LayerNorm = Module:extend("LayerNorm")
M.LayerNorm = LayerNorm

LayerNorm.options = options.declare("nn.LayerNorm", {
  {"eps", "number", 1e-5, range = {0}, help = "added to the variance"},
  {"elementwise_affine", "boolean", true, help = "learn a scale (weight) and shift (bias)"},
})

--- nn.LayerNorm(d, {eps=1e-5, elementwise_affine=true}) -> module; d an integer or a shape
--- table of the trailing dims; weight (d) = 1, bias (d) = 0
function LayerNorm:init(d, opts)
  local o = LayerNorm.options:check(opts, 3)
  local shape = type(d) == "table" and {table.unpack(d)} or {d}
  local n = 1
  for _, s in ipairs(shape) do
    n = n * check.int("nn.LayerNorm", "normalized_shape", s, 1, nil, 3)
  end
  if #shape == 0 then check.fail(3, "nn.LayerNorm: normalized_shape must not be empty") end
  self.normalized_shape, self.numel_normalized = shape, n
  self.eps = o.eps
  if o.elementwise_affine then
    self.weight = glimpse.ones(table.unpack(shape)):requires_grad()
    self.bias = glimpse.zeros(table.unpack(shape)):requires_grad()
  end
end

function LayerNorm:forward(x)
  if not glimpse.is_tensor(x) then
    check.fail(2, "nn.LayerNorm: input must be a tensor (..., normalized shape), got %s", type(x))
  end
  local shape, ns = x.shape, self.normalized_shape
  local lead = #shape - #ns
  local ok = lead >= 0
  for i = 1, #ns do ok = ok and shape[lead + i] == ns[i] end
  if not ok then
    check.fail(2, "nn.LayerNorm: input %s does not end in the normalized shape [%s]",
               check.shape(x), table.concat(ns, ","))
  end
  if #ns == 1 then return glimpse.layer_norm(x, self.weight, self.bias, self.eps) end
  local n = self.numel_normalized
  local w = self.weight and self.weight:reshape(n)
  local b = self.bias and self.bias:reshape(n)
  return glimpse.layer_norm(x:reshape(-1, n), w, b, self.eps):reshape(shape)
end

function LayerNorm:extra_repr()
  local s = #self.normalized_shape == 1 and "(" .. self.normalized_shape[1] .. ",)"
            or "(" .. table.concat(self.normalized_shape, ", ") .. ")"
  return string.format("%s, eps=%g, elementwise_affine=%s", s, self.eps,
                       tostring(self.weight ~= nil))
end

-- ---------------------------------------------------------------------------------------
-- BatchNorm2d: x (B,C,H,W) normalised per channel (Ioffe & Szegedy 2015); BatchNorm1d for
-- (B,C) and (B,C,L).  Training uses the batch's statistics and updates the running ones
-- (unbiased variance, momentum m: r = (1-m) r + m stat; momentum=false: the cumulative
-- average); evaluation uses the running statistics.
--
-- Synchronised (SyncBatchNorm): data-parallel training (glimpse.train, distributed = true)
-- gives each batch norm a `sync` context; in training its statistics are then those of the
-- whole global batch, every rank's shard, so ranks normalise as one process does.  The
-- forward gathers each rank's (count, mean, M2) per channel (one allgather) and merges them
-- (Chan et al.'s parallel variance); its output is a leaf, so the loss's backward stops there,
-- and the backward the context runs after it (sync:backward) allreduces the two per-channel
-- sums of the SyncBN gradient,
--   dx_i = w rs (dy_i - mean(dy) - xhat_i mean(dy xhat))     (means over the global batch)
-- and carries dx on into x's graph.  The sums are weighed by each rank's loss weight (its
-- share of the loss's normaliser), as the gradient bucket weighs the parameters' gradients.

-- the global batch's mean and biased variance per channel, from every rank's shard of x3
-- (B,C,S); updates the running statistics like the engine's kernel (in double)
local function global_stats(self, x3, momentum)
  local B, C, S = x3.shape[1], x3.shape[2], x3.shape[3]
  local n = B * S
  local row = {n}
  glimpse.no_grad(function()
    local mean = x3:sum(3):sum(1) * (1 / n)
    local d = x3 - mean:reshape(1, C, 1)
    local m2 = (d * d):sum(3):sum(1)
    local mt, m2t = mean:totable(), m2:totable()
    for c = 1, C do row[1 + c], row[1 + C + c] = mt[c], m2t[c] end
  end)
  local all = self.sync:gather(glimpse.tensor(row)):totable()
  local N = 0
  for _, r in ipairs(all) do N = N + r[1] end
  local mu, var, unbiased = {}, {}, {}
  for c = 1, C do
    local s = 0
    for _, r in ipairs(all) do s = s + r[1] * r[1 + c] end
    mu[c] = s / N
    local m2 = 0
    for _, r in ipairs(all) do
      local dm = r[1 + c] - mu[c]
      m2 = m2 + r[1 + C + c] + r[1] * dm * dm
    end
    var[c] = m2 / N
    unbiased[c] = N > 1 and m2 / (N - 1) or var[c]     -- for the running variance
  end
  if self.running_mean then
    local rm, rv = self.running_mean:totable(), self.running_var:totable()
    for c = 1, C do
      rm[c] = (1 - momentum) * rm[c] + momentum * mu[c]
      rv[c] = (1 - momentum) * rv[c] + momentum * unbiased[c]
    end
    self.running_mean:copy_(glimpse.tensor(rm))
    self.running_var:copy_(glimpse.tensor(rv))
  end
  return mu, var, N
end

-- training with the global batch's statistics (self.sync set and active)
local function synced_forward(self, x, momentum)
  local shape = x.shape
  local B, C = shape[1], shape[2]
  local x3 = x:detach():reshape(B, C, x:numel() // (B * C))
  local mu, var, N = global_stats(self, x3, momentum)
  local mu_t, var_t = glimpse.tensor(mu), glimpse.tensor(var)
  -- the engine's kernel with these statistics as its "running" ones: the same arithmetic
  -- as one process's batch norm
  local y = glimpse.no_grad(glimpse.batch_norm2d, x:detach(), self.weight, self.bias, mu_t,
                            var_t, false, 0, self.eps)
  if not glimpse.is_grad_enabled() then return y end
  y:requires_grad()
  local weight, bias, eps = self.weight, self.bias, self.eps
  self.sync:defer(function(loss_weight)
    local dy = y.grad
    local rs = (var_t + eps):rsqrt():reshape(1, C, 1)
    local sums, xhat, dy3
    glimpse.no_grad(function()
      xhat = (x3 - mu_t:reshape(1, C, 1)) * rs
      dy3 = dy and dy:reshape(B, C, x3.shape[3]) or glimpse.zeros(B, C, x3.shape[3])
      local sdy, sdyx = dy3:sum(3):sum(1), (dy3 * xhat):sum(3):sum(1)
      if weight then                   -- dw = sum dy xhat, db = sum dy (this rank's share)
        if weight.grad then weight.grad:add_(sdyx) else weight.grad = sdyx:clone() end
        if bias.grad then bias.grad:add_(sdy) else bias.grad = sdy:clone() end
      end
      sums = glimpse.cat({sdy, sdyx}, 1) * loss_weight
    end)
    self.sync:sum(sums)                                   -- over the ranks
    if not x.requires_grad_flag then return end
    if loss_weight == 0 then
      error("SyncBatchNorm: this rank's loss weight is 0 (no examples or tokens in its "
            .. "shard), so its gradient cannot be weighed", 0)
    end
    local seed
    glimpse.no_grad(function()
      local k = 1 / (loss_weight * N)
      local a = sums:narrow(1, 1, C):reshape(1, C, 1) * k
      local b = sums:narrow(1, C + 1, C):reshape(1, C, 1) * k
      local scale = weight and rs * weight:detach():reshape(1, C, 1) or rs
      seed = ((dy3 - a - xhat * b) * scale):reshape(table.unpack(shape))
    end)
    x:backward(seed, true)
  end)
  return y
end

local function batchnorm_class(name, dims)
  local cls = Module:extend(name)
  local owner = "nn." .. name
  cls.options = options.declare(owner, {
    {"momentum", "number|boolean", 0.1, range = {0, 1},
     help = "weight of a batch in the running statistics (false: their cumulative average)"},
    {"eps", "number", 1e-5, range = {0}, help = "added to the variance"},
    {"affine", "boolean", true, help = "learn a scale (weight) and shift (bias) per channel"},
    {"track_running_stats", "boolean", true, help = "keep running statistics for evaluation"},
  })
  --- nn.BatchNorm2d(c, {momentum=0.1, eps=1e-5, affine=true, track_running_stats=true})
  function cls:init(c, opts)
    check.int(owner, "num_features", c, 1, nil, 3)
    local o = cls.options:check(opts, 3)
    self.num_features = c
    self.eps = o.eps
    self.momentum = o.momentum
    if self.momentum == true then
      check.fail(3, "%s: momentum must be a number in [0,1] or false, got true", owner)
    end
    if o.affine then
      self.weight = glimpse.ones(c):requires_grad()
      self.bias = glimpse.zeros(c):requires_grad()
    end
    self.track_running_stats = o.track_running_stats
    if self.track_running_stats then
      self:register_buffer("running_mean", glimpse.zeros(c))
      self:register_buffer("running_var", glimpse.ones(c))
      self:register_buffer("num_batches_tracked", glimpse.zeros())
    end
  end
  function cls:forward(x)
    local nd = is_tensor(x) and x:dim()
    if not dims[nd] then
      check.fail(2, "%s: expected a %s input, got %s", owner, dims.what, check.shape(x))
    end
    local momentum = self.momentum or 0
    if self.training and self.track_running_stats then
      local nbt = self.num_batches_tracked
      local count = nbt:item() + 1
      nbt:fill_(count)
      if self.momentum == false then momentum = 1 / count end
    end
    if self.training and self.sync and self.sync.active then
      return synced_forward(self, x, momentum)
    end
    return glimpse.batch_norm2d(x, self.weight, self.bias, self.running_mean, self.running_var,
                                self.training, momentum, self.eps)
  end
  function cls:extra_repr()
    return string.format("%d, eps=%g, momentum=%s, affine=%s, track_running_stats=%s",
                         self.num_features, self.eps, tostring(self.momentum),
                         tostring(self.weight ~= nil), tostring(self.track_running_stats))
  end
  M[name] = cls
  return cls
end

batchnorm_class("BatchNorm2d", {[4] = true, what = "4-D (B,C,H,W)"})
batchnorm_class("BatchNorm1d", {[2] = true, [3] = true, what = "2-D (B,C) or 3-D (B,C,L)"})

return M
