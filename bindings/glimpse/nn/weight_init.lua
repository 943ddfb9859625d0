--- glimpse.init -- parameter initialisers, in place, PyTorch's torch.nn.init under the same
-- names and formulas (Glorot & Bengio 2010; He et al. 2015; Saxe et al. 2014).
--
--   local init = glimpse.init
--   init.xavier_uniform_(layer.weight)
--   init.kaiming_normal_(conv.weight, {mode = "fan_out", nonlinearity = "relu"})
--   init.orthogonal_(lstm.weight_hh_l0)
--   model:apply(function(m) if m.__name == "Linear" then init.zeros_(m.bias) end end)
--
-- Every function fills its tensor outside the graph (parameters that require grad are
-- fine), draws from glimpse's seeded generator, and returns the tensor.  Fans follow
-- PyTorch: for a weight (out, in, k...) fan_in = in * prod(k), fan_out = out * prod(k).
-- glimpse.init and the older name glimpse.nn_init both give this module.
local glimpse = require "glimpse"
local check = require "glimpse.check"

local M = {}

local function check_tensor(t, fname)
  if not glimpse.is_tensor(t) then
    check.fail(3, "%s: argument #1 must be a tensor, got %s", fname, type(t))
  end
end

local function fill(t, fn)
  glimpse.no_grad(fn)
  return t
end

--- fan_in, fan_out = init.calculate_fan_in_and_fan_out(t)   t (out, in, k...) with >= 2 dims
function M.calculate_fan_in_and_fan_out(t)
  check_tensor(t, "calculate_fan_in_and_fan_out")
  if t:dim() < 2 then
    check.fail(2, "calculate_fan_in_and_fan_out: fan in and fan out can not be computed for " ..
               "a tensor with fewer than 2 dims (shape %s)", check.shape(t))
  end
  local s = t.shape
  local receptive = 1
  for i = 3, #s do receptive = receptive * s[i] end
  return s[2] * receptive, s[1] * receptive
end

local GAINS = {linear = 1, identity = 1, conv1d = 1, conv2d = 1, conv3d = 1, sigmoid = 1,
               conv_transpose1d = 1, conv_transpose2d = 1, conv_transpose3d = 1,
               tanh = 5 / 3, relu = math.sqrt(2), selu = 3 / 4}

--- init.calculate_gain(nonlinearity, param) -> the recommended gain: linear/conv/sigmoid 1,
--- tanh 5/3, relu sqrt(2), leaky_relu sqrt(2 / (1 + slope^2)) (slope = param or 0.01), selu 3/4
function M.calculate_gain(nonlinearity, param)
  if nonlinearity == "leaky_relu" then
    local slope = param
    if slope == nil then slope = 0.01 end
    if type(slope) ~= "number" then
      error("calculate_gain: negative slope " .. tostring(slope) .. " is not a number", 2)
    end
    return math.sqrt(2 / (1 + slope * slope))
  end
  local g = GAINS[nonlinearity]
  if not g then error("calculate_gain: unsupported nonlinearity " .. tostring(nonlinearity), 2) end
  return g
end

--- init.uniform_(t, a=0, b=1): t ~ U(a, b)
function M.uniform_(t, a, b)
  check_tensor(t, "uniform_")
  a, b = a or 0, b or 1
  return fill(t, function() t:uniform_(a, b) end)
end

--- init.normal_(t, mean=0, std=1): t ~ N(mean, std^2)
function M.normal_(t, mean, std)
  check_tensor(t, "normal_")
  return fill(t, function() t:normal_(mean or 0, std or 1) end)
end

--- init.constant_(t, v): every element v
function M.constant_(t, v)
  check_tensor(t, "constant_")
  if type(v) ~= "number" then error("constant_: argument #2 must be a number", 2) end
  return fill(t, function() t:fill_(v) end)
end

--- init.zeros_(t), init.ones_(t)
function M.zeros_(t)
  check_tensor(t, "zeros_")
  return fill(t, function() t:fill_(0) end)
end

function M.ones_(t)
  check_tensor(t, "ones_")
  return fill(t, function() t:fill_(1) end)
end

-- gain: a finite number or nil
local function check_gain(gain, fname)
  if gain ~= nil and (type(gain) ~= "number" or gain ~= gain or math.abs(gain) == math.huge) then
    error(string.format("init.%s: gain must be a finite number, got %s", fname, tostring(gain)), 3)
  end
end

--- init.xavier_uniform_(t, gain=1): U(-a, a), a = gain * sqrt(6 / (fan_in + fan_out))
function M.xavier_uniform_(t, gain)
  check_tensor(t, "xavier_uniform_")
  local fin, fout = M.calculate_fan_in_and_fan_out(t)
  check_gain(gain, "xavier_uniform_")
  local a = (gain or 1) * math.sqrt(6 / (fin + fout))
  return fill(t, function() t:uniform_(-a, a) end)
end

--- init.xavier_normal_(t, gain=1): N(0, std^2), std = gain * sqrt(2 / (fan_in + fan_out))
function M.xavier_normal_(t, gain)
  check_tensor(t, "xavier_normal_")
  local fin, fout = M.calculate_fan_in_and_fan_out(t)
  check_gain(gain, "xavier_normal_")
  local std = (gain or 1) * math.sqrt(2 / (fin + fout))
  return fill(t, function() t:normal_(0, std) end)
end

-- kaiming_*_(t, a, mode, nonlinearity) or kaiming_*_(t, {a=, mode=, nonlinearity=})
local function kaiming_std(t, a, mode, nonlinearity, fname)
  if type(a) == "table" then
    a, mode, nonlinearity = a.a, a.mode, a.nonlinearity
  end
  a, mode, nonlinearity = a or 0, mode or "fan_in", nonlinearity or "leaky_relu"
  if mode ~= "fan_in" and mode ~= "fan_out" then
    error(fname .. ": mode must be 'fan_in' or 'fan_out', got " .. tostring(mode), 3)
  end
  local fin, fout = M.calculate_fan_in_and_fan_out(t)
  local fan = mode == "fan_in" and fin or fout
  if fan == 0 then error(fname .. ": cannot initialise a tensor with no elements", 3) end
  return M.calculate_gain(nonlinearity, a) / math.sqrt(fan)
end

--- init.kaiming_uniform_(t, a=0, mode="fan_in", nonlinearity="leaky_relu"):
--- U(-b, b), b = gain * sqrt(3 / fan).  (Options may come as a table instead.)
--- nn.Linear's default is kaiming_uniform_(w, math.sqrt(5)) = U(-1/sqrt(in), 1/sqrt(in)).
function M.kaiming_uniform_(t, a, mode, nonlinearity)
  check_tensor(t, "kaiming_uniform_")
  local b = math.sqrt(3) * kaiming_std(t, a, mode, nonlinearity, "kaiming_uniform_")
  return fill(t, function() t:uniform_(-b, b) end)
end

--- init.kaiming_normal_(t, a=0, mode="fan_in", nonlinearity="leaky_relu"): N(0, std^2),
--- std = gain / sqrt(fan)
function M.kaiming_normal_(t, a, mode, nonlinearity)
  check_tensor(t, "kaiming_normal_")
  local std = kaiming_std(t, a, mode, nonlinearity, "kaiming_normal_")
  return fill(t, function() t:normal_(0, std) end)
end

--- init.orthogonal_(t, gain=1): t (rows, ...) viewed as (rows, cols) becomes gain times a
--- (semi-)orthogonal matrix: orthonormal rows when rows <= cols, orthonormal columns
--- otherwise (Saxe et al. 2014).  Made by Gram-Schmidt (each vector orthogonalised twice,
--- which keeps float32 orthogonality near 1e-6) over rows drawn from N(0, 1).
function M.orthogonal_(t, gain)
  check_tensor(t, "orthogonal_")
  if t:dim() < 2 then error("orthogonal_: only tensors with 2 or more dims are supported", 2) end
  gain = gain or 1
  local rows = t:size(1)
  local cols = rows > 0 and t:numel() // rows or 0
  if rows == 0 or cols == 0 then return t end
  local m, n = math.min(rows, cols), math.max(rows, cols)
  return fill(t, function()
    local a = glimpse.randn(m, n)
    local q = glimpse.zeros(m, n)
    for i = 1, m do
      local v = a[i]:reshape(n, 1)
      if i > 1 then
        local p = q:narrow(1, 1, i - 1)                 -- (i-1, n), orthonormal rows
        for _ = 1, 2 do v = v - p:matmul(p:matmul(v), true, false) end   -- v - P^T P v
      end
      local norm = v:norm():item()
      if norm < 1e-6 then
        error("orthogonal_: the random draw was degenerate (try again)", 3)
      end
      q[i] = v:reshape(n) / norm
    end
    local r = rows <= cols and q or q:t()
    t:copy_((r * gain):reshape(t.shape))
  end)
end

return M
