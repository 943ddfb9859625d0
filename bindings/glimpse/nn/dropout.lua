--- glimpse.nn.dropout -- nn.Dropout.
local glimpse = require "glimpse"
local options = require "glimpse.options"
local base = require "glimpse.nn.module"

local Module = base.Module

local M = {}

local Dropout = Module:extend("Dropout")
M.Dropout = Dropout

Dropout.options = options.declare("nn.Dropout", {
  {"p", "number", 0.5, range = {0, 1}, help = "probability of zeroing an element"},
})

--- nn.Dropout(p=0.5) (or nn.Dropout{p=}) -> module; in training zeroes each element with
--- probability p and scales the rest by 1/(1-p); the identity in evaluation mode
function Dropout:init(p)
  self.p = Dropout.options:check(type(p) == "table" and p or {p = p}, 3).p
end

function Dropout:forward(x)
  return glimpse.dropout(x, self.p, self.training)
end

function Dropout:extra_repr()
  return "p=" .. self.p
end

return M
