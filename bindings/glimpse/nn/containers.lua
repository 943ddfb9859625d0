--- glimpse.nn.containers -- nn.Sequential and nn.ModuleList.
local base = require "glimpse.nn.module"

local Module = base.Module
local is_module = base.is_module

local M = {}

-- ---------------------------------------------------------------------------------------
-- containers: children named "0", "1", ... (PyTorch's state_dict names); seq[i] (1-based)
-- is the i-th child, #seq the count, ipairs(seq) walks them

local function add_children(self, list, cls)
  if list == nil then return end
  if type(list) ~= "table" or is_module(list) then
    error(cls .. ": a list of modules expected, as " .. cls .. "{m1, m2, ...}", 3)
  end
  for i, m in ipairs(list) do
    if not is_module(m) then
      error(string.format("%s: entry %d is a %s, not a Module", cls, i, type(m)), 3)
    end
    self:add_module(tostring(#self), m)
  end
end

local Sequential = Module:extend("Sequential")
M.Sequential = Sequential

--- nn.Sequential{m1, m2, ...} -> module; forward(x) = mN(...m2(m1(x)))
function Sequential:init(list)
  add_children(self, list, "Sequential")
end

--- seq:add(m) -> seq; appends a module (named by its 0-based position)
function Sequential:add(m)
  if not is_module(m) then error("Sequential:add: a Module expected, got " .. type(m), 2) end
  self:add_module(tostring(#self), m)
  return self
end

function Sequential:forward(x)
  for _, m in self:named_children() do x = m(x) end
  return x
end

local ModuleList = Module:extend("ModuleList")
M.ModuleList = ModuleList

--- nn.ModuleList{m1, m2, ...} -> a registered list (no forward); list[i], #list, ipairs(list)
function ModuleList:init(list)
  add_children(self, list, "ModuleList")
end

--- list:append(m) -> list
function ModuleList:append(m)
  if not is_module(m) then error("ModuleList:append: a Module expected, got " .. type(m), 2) end
  self:add_module(tostring(#self), m)
  return self
end

return M
