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
