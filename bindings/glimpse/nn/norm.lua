--- glimpse.nn.norm -- normalisation layers: nn.LayerNorm, nn.BatchNorm2d, nn.BatchNorm1d.
local glimpse = require "glimpse"
local base = require "glimpse.nn.module"

local Module = base.Module
local check_int, opts_of = base.check_int, base.opts_of
local shape_str, is_tensor = base.shape_str, base.is_tensor

local M = {}

-- ---------------------------------------------------------------------------------------
-- LayerNorm: x (..., *shape) normalised over the trailing dims `shape` (Ba et al. 2016)

local LayerNorm = Module:extend("LayerNorm")
M.LayerNorm = LayerNorm

--- nn.LayerNorm(d, {eps=1e-5, elementwise_affine=true}) -> module; d an integer or a shape
--- table of the trailing dims; weight (d) = 1, bias (d) = 0
function LayerNorm:init(d, opts)
  opts = opts_of(opts, "LayerNorm")
  local shape = type(d) == "table" and {table.unpack(d)} or {d}
  local n = 1
  for _, s in ipairs(shape) do n = n * check_int(s, "normalized_shape", "LayerNorm", 1, 3) end
  if #shape == 0 then error("LayerNorm: normalized_shape must not be empty", 2) end
  self.normalized_shape, self.numel_normalized = shape, n
  self.eps = opts.eps or 1e-5
  if opts.elementwise_affine ~= false then
    self.weight = glimpse.ones(table.unpack(shape)):requires_grad()
    self.bias = glimpse.zeros(table.unpack(shape)):requires_grad()
  end
end

function LayerNorm:forward(x)
  if not glimpse.is_tensor(x) then
    error("LayerNorm: input must be a tensor (..., normalized shape), got " .. type(x), 2)
  end
  local shape, ns = x.shape, self.normalized_shape
  local lead = #shape - #ns
  local ok = lead >= 0
  for i = 1, #ns do ok = ok and shape[lead + i] == ns[i] end
  if not ok then
    error(string.format("LayerNorm: input %s does not end in the normalized shape [%s]",
                        shape_str(x), table.concat(ns, ",")), 2)
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
  --- nn.BatchNorm2d(c, {momentum=0.1, eps=1e-5, affine=true, track_running_stats=true})
  function cls:init(c, opts)
    check_int(c, "num_features", name, 1, 3)
    opts = opts_of(opts, name)
    self.num_features = c
    self.eps = opts.eps or 1e-5
    if opts.momentum == nil then self.momentum = 0.1 else self.momentum = opts.momentum end
    if self.momentum ~= false and (type(self.momentum) ~= "number" or self.momentum < 0
                                   or self.momentum > 1) then
      error(name .. ": momentum must be a number in [0,1] or false, got " ..
            tostring(self.momentum), 2)
    end
    if opts.affine ~= false then
      self.weight = glimpse.ones(c):requires_grad()
      self.bias = glimpse.zeros(c):requires_grad()
    end
    self.track_running_stats = opts.track_running_stats ~= false
    if self.track_running_stats then
      self:register_buffer("running_mean", glimpse.zeros(c))
      self:register_buffer("running_var", glimpse.ones(c))
      self:register_buffer("num_batches_tracked", glimpse.zeros())
    end
  end
  function cls:forward(x)
    local nd = is_tensor(x) and x:dim()
    if not dims[nd] then
      error(string.format("%s: expected a %s input, got %s", name, dims.what,
                          is_tensor(x) and shape_str(x) or type(x)), 2)
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
