--- glimpse.nn.linear -- nn.Linear, the fully connected layer.
local glimpse = require "glimpse"
local check = require "glimpse.check"
local options = require "glimpse.options"
local init = require "glimpse.nn.weight_init"
local base = require "glimpse.nn.module"

local Module, param = base.Module, base.param

local M = {}

-- ---------------------------------------------------------------------------------------
-- Linear: x (..., in) -> (..., out) = x W^T + b, W (out, in), b (out)
-- init: W, b ~ U(-1/sqrt(in), 1/sqrt(in)) (PyTorch's default)

local Linear = Module:extend("Linear")
M.Linear = Linear

Linear.options = options.declare("nn.Linear", {
  {"bias", "boolean", true, help = "learn the bias b"},
  {"init", "boolean", true, help = "draw the weights (false: leave them uninitialised, for " ..
                                   "weights about to be loaded)"},
})

--- nn.Linear(din, dout, {bias=true, init=true}) -> module; y = x W^T + b for x (..., din).
--- init=false leaves the weights uninitialised (glimpse.empty) for weights about to be loaded
--- (PyTorch's torch.nn.utils.skip_init).
function Linear:init(din, dout, opts)
  check.int("nn.Linear", "in_features", din, 1, nil, 3)
  check.int("nn.Linear", "out_features", dout, 1, nil, 3)
  local o = Linear.options:check(opts, 3)
  self.in_features, self.out_features = din, dout
  local bound = 1 / math.sqrt(din)
  self.weight = param(dout, din)
  if o.init then init.uniform_(self.weight, -bound, bound) end
  if o.bias then
    self.bias = param(dout)
    if o.init then init.uniform_(self.bias, -bound, bound) end
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
