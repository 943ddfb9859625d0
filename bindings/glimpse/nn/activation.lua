--- glimpse.nn.activation -- elementwise activations (nn.ReLU, nn.Tanh, nn.Sigmoid,
-- nn.Identity) and nn.Flatten.
local glimpse = require "glimpse"
local check = require "glimpse.check"
local options = require "glimpse.options"
local base = require "glimpse.nn.module"

local Module = base.Module

local M = {}

-- ---------------------------------------------------------------------------------------
-- activations and shape layers

local function simple(name, fn)
  local cls = Module:extend(name)
  cls.forward = function(_, x)
    if not glimpse.is_tensor(x) then
      error(string.format("nn.%s: input must be a tensor, got %s", name, type(x)), 2)
    end
    return fn(x)
  end
  M[name] = cls
  return cls
end

--- nn.ReLU(), nn.Tanh(), nn.Sigmoid(), nn.Identity(): elementwise, any shape
local ReLU = simple("ReLU", function(x) return x:relu() end)

ReLU.options = options.declare("nn.ReLU", {
  {"inplace", "boolean", false, help = "overwrite the input when no tape is recorded"},
})

--- nn.ReLU({inplace=false}) (or nn.ReLU(true)): inplace = true overwrites the input with
--- the result (x:relu_()) when no tape is being recorded (glimpse.no_grad), which saves an
--- activation-sized buffer in inference; with the tape on it computes a fresh tensor
function ReLU:init(opts)
  if opts ~= nil and type(opts) ~= "table" and type(opts) ~= "boolean" then
    check.fail(3, "nn.ReLU: the option must be a table {inplace=} or a boolean, got %s",
               type(opts))
  end
  if type(opts) == "boolean" then opts = {inplace = opts} end
  self.inplace = ReLU.options:check(opts, 3).inplace
end

function ReLU:forward(x)
  if not glimpse.is_tensor(x) then
    error("nn.ReLU: input must be a tensor, got " .. type(x), 2)
  end
  if self.inplace and not glimpse.is_grad_enabled() then return x:relu_() end
  return x:relu()
end

function ReLU:extra_repr()
  return self.inplace and "inplace=true" or ""
end
simple("Tanh", function(x) return x:tanh() end)
simple("Sigmoid", function(x) return x:sigmoid() end)
simple("Identity", function(x) return x end)

local Flatten = Module:extend("Flatten")
M.Flatten = Flatten

--- nn.Flatten(start_dim=2, end_dim=-1) -> module; dims start_dim..end_dim merged into one
--- (1-based; the default keeps the batch dim: (B,C,H,W) -> (B,C*H*W))
function Flatten:init(start_dim, end_dim)
  self.start_dim, self.end_dim = start_dim or 2, end_dim or -1
end

function Flatten:forward(x)
  return x:flatten(self.start_dim, self.end_dim)
end

function Flatten:extra_repr()
  return string.format("start_dim=%d, end_dim=%d", self.start_dim, self.end_dim)
end

return M
