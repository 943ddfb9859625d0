--- glimpse.nn.linear -- nn.Linear, the fully connected layer.
local glimpse = require "glimpse"
local init = require "glimpse.nn.weight_init"
local base = require "glimpse.nn.module"

local Module = base.Module
local check_int, opts_of, param = base.check_int, base.opts_of, base.param

local M = {}

-- ---------------------------------------------------------------------------------------
-- Linear: x (..., in) -> (..., out) = x W^T + b, W (out, in), b (out)
-- init: W, b ~ U(-1/sqrt(in), 1/sqrt(in)) (PyTorch's default)

local Linear = Module:extend("Linear")
M.Linear = Linear

--- nn.Linear(din, dout, {bias=true, init=true}) -> module; y = x W^T + b for x (..., din).
--- init=false leaves the weights uninitialised (glimpse.empty) for weights about to be loaded
--- (PyTorch's torch.nn.utils.skip_init).
function Linear:init(din, dout, opts)
  check_int(din, "in_features", "Linear", 1, 3)
  check_int(dout, "out_features", "Linear", 1, 3)
  opts = opts_of(opts, "Linear")
  self.in_features, self.out_features = din, dout
  local bound = 1 / math.sqrt(din)
  local fill = opts.init ~= false
  self.weight = param(dout, din)
  if fill then init.uniform_(self.weight, -bound, bound) end
  if opts.bias ~= false then
    self.bias = param(dout)
    if fill then init.uniform_(self.bias, -bound, bound) end
  end
end

function Linear:forward(x)
  return glimpse.linear(x, self.weight, self.bias)
end

function Linear:extra_repr()
  return string.format("in_features=%d, out_features=%d, bias=%s", self.in_features,
                       self.out_features, tostring(self.bias ~= nil))
end

return M
