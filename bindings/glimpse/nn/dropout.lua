--- glimpse.nn.dropout -- nn.Dropout.
local glimpse = require "glimpse"
local base = require "glimpse.nn.module"

local Module = base.Module

local M = {}

local Dropout = Module:extend("Dropout")
M.Dropout = Dropout

--- nn.Dropout(p=0.5) -> module; in training zeroes each element with probability p and
--- scales the rest by 1/(1-p); the identity in evaluation mode
function Dropout:init(p)
  p = p or 0.5
  if type(p) ~= "number" or p < 0 or p > 1 then
    error("Dropout: p must be a number in [0,1], got " .. tostring(p), 2)
  end
  self.p = p
end

function Dropout:forward(x)
  return glimpse.dropout(x, self.p, self.training)
end

function Dropout:extra_repr()
  return "p=" .. self.p
end

return M
