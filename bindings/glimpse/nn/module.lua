--- glimpse.nn.module -- the class system and nn.Module, the base of every layer.
--
--   local nn = glimpse.nn
--   local Net = nn.Module:extend("Net")
--   function Net:init(d)                 -- the constructor body: Net(d) calls it
--     self.fc = nn.Linear(d, 10)         -- a Module: registered as a submodule
--     self.scale = glimpse.ones(10):requires_grad()   -- a leaf requiring grad: a parameter
--     self:register_buffer("count", glimpse.zeros(1)) -- a buffer (state_dict, no grad)
--   end
--   function Net:forward(x) return self.fc(x) * self.scale end
--   local net = Net(784); local y = net(x)           -- calling an instance calls forward
--
-- This file returns {Module=, is_module=} and the few helpers the layer files share (pair,
-- pair_str, param, uniform, is_tensor); glimpse.nn (nn/init.lua) publishes Module and
-- is_module.  Argument checks and option tables come from glimpse.check and glimpse.options.
local glimpse = require "glimpse"
local check = require "glimpse.check"

local M = {}
local is_tensor = glimpse.is_tensor

local function is_module(v)
  return type(v) == "table" and rawget(v, "_modules") ~= nil and getmetatable(v) ~= nil
end
M.is_module = is_module

-- ---------------------------------------------------------------------------------------
-- the class system
--
-- A class is a table that is the metatable of its instances.  Lua looks metamethods up
-- raw, so every class carries its own __index/__newindex/__call/__tostring/__len; method
-- lookup walks the class chain through each class's own metatable (__index = parent).
-- An instance keeps parameters, buffers and submodules in side tables so that assigning to
-- a registered name always goes through __newindex (a raw field would bypass it).

local Module = {__name = "Module"}   -- completed into a class below (make_class)
M.Module = Module

local function remove_name(order, name)
  for i = #order, 1, -1 do
    if order[i] == name then table.remove(order, i) end
  end
end

local function instance_index(cls)
  return function(self, k)
    local v = rawget(self, "_parameters")[k]
    if v ~= nil then return v end
    v = rawget(self, "_buffers")[k]
    if v ~= nil then return v end
    local mods = rawget(self, "_modules")
    v = mods[k]
    if v ~= nil then return v end
    if math.type(k) == "integer" then           -- m[i]: the i-th child (1-based)
      local name = rawget(self, "_module_order")[k]
      return name and mods[name]
    end
    return cls[k]
  end
end

local function instance_newindex(self, k, v)
  local params, bufs, mods = rawget(self, "_parameters"), rawget(self, "_buffers"),
                             rawget(self, "_modules")
  if rawget(self, "_buffer_names")[k] then       -- a registered buffer: tensor or nil
    if v ~= nil and not is_tensor(v) then
      error(string.format("cannot assign a %s to buffer '%s' of %s (a tensor or nil expected)",
                          type(v), tostring(k), self.__name), 2)
    end
    bufs[k] = v
    return
  end
  if is_module(v) then
    if params[k] ~= nil then params[k] = nil; remove_name(rawget(self, "_param_order"), k) end
    if mods[k] == nil then table.insert(rawget(self, "_module_order"), k) end
    mods[k] = v
    return
  end
  if is_tensor(v) and v.requires_grad_flag and v:is_leaf() then
    if mods[k] ~= nil then mods[k] = nil; remove_name(rawget(self, "_module_order"), k) end
    if params[k] == nil then table.insert(rawget(self, "_param_order"), k) end
    params[k] = v
    return
  end
  if params[k] ~= nil then
    if v == nil then
      params[k] = nil
      remove_name(rawget(self, "_param_order"), k)
      return
    end
    error(string.format("cannot assign %s to parameter '%s' of %s (a leaf tensor that " ..
                        "requires grad, or nil, expected)",
                        is_tensor(v) and "a tensor that is not a leaf requiring grad" or
                        ("a " .. type(v)), tostring(k), self.__name), 2)
  end
  if mods[k] ~= nil then
    if v == nil then
      mods[k] = nil
      remove_name(rawget(self, "_module_order"), k)
      return
    end
    error(string.format("cannot assign a %s to child module '%s' of %s (a Module or nil " ..
                        "expected)", type(v), tostring(k), self.__name), 2)
  end
  rawset(self, k, v)
end

local function instance_call(self, ...)
  return self:forward(...)
end

local function instance_len(self)
  return #rawget(self, "_module_order")
end

local function construct(cls, ...)
  local self = setmetatable({
    _parameters = {}, _param_order = {},
    _buffers = {}, _buffer_order = {}, _buffer_names = {}, _non_persistent = {},
    _modules = {}, _module_order = {},
  }, cls)
  rawset(self, "training", true)
  local ctor = cls.init
  if ctor then ctor(self, ...) end
  return self
end

local function make_class(name, parent)
  local cls = {
    __name = name,
    __newindex = instance_newindex,
    __call = rawget(parent, "__call") or instance_call,
    __len = rawget(parent, "__len") or instance_len,
    __tostring = rawget(parent, "__tostring"),
    __parent = parent,
  }
  cls.__index = instance_index(cls)
  return setmetatable(cls, {__index = parent, __call = construct,
                            __tostring = function() return "class " .. name end})
end

-- Module itself is a class too: nn.Module() is a bare container
Module.__newindex = instance_newindex
Module.__call = instance_call
Module.__len = instance_len
Module.__index = instance_index(Module)
setmetatable(Module, {__call = construct, __tostring = function() return "class Module" end})

--- Module:extend(name) -> a new class deriving from this one (Module or any layer class).
--- Define cls:init(...) (the constructor body) and cls:forward(...); cls(...) makes an
--- instance; instance(...) calls forward.  A subclass's init may call Parent.init(self, ...).
function Module:extend(name)
  if type(name) ~= "string" then error("extend: the class needs a name (a string)", 2) end
  if is_module(self) then error("extend: call it on a class, not an instance", 2) end
  return make_class(name, self)
end

--- m:is_a(cls) -> true when m is an instance of cls or of a class derived from it
function Module:is_a(cls)
  local c = getmetatable(self)
  while c do
    if c == cls then return true end
    c = rawget(c, "__parent")
  end
  return false
end

function Module:forward()
  error(self.__name .. ": forward is not defined (define " .. self.__name .. ":forward)", 2)
end

--- m:extra_repr() -> the text inside "Name(...)" for tostring (layers override it)
function Module:extra_repr()
  return ""
end

-- ---------------------------------------------------------------------------------------
-- registration

--- m:register_parameter(name, t): t becomes a parameter (requires grad is switched on);
--- t == nil removes the parameter name.
function Module:register_parameter(name, t)
  if type(name) ~= "string" or name == "" or name:find(".", 1, true) then
    error("register_parameter: the name must be a non-empty string without '.'", 2)
  end
  if t ~= nil and not is_tensor(t) then
    error("register_parameter: a tensor or nil expected for '" .. name .. "', got " .. type(t), 2)
  end
  if t ~= nil and not t:is_leaf() then
    error("register_parameter: '" .. name .. "' is not a leaf tensor (detach() it first)", 2)
  end
  if t ~= nil then t:requires_grad() end
  if rawget(self, name) ~= nil then rawset(self, name, nil) end
  instance_newindex(self, name, t)
end

--- m:register_buffer(name, t, persistent=true): a tensor saved in state_dict but not
--- trained (running statistics); t may be nil.  Non-persistent buffers stay out of state_dict.
function Module:register_buffer(name, t, persistent)
  if type(name) ~= "string" or name == "" or name:find(".", 1, true) then
    error("register_buffer: the name must be a non-empty string without '.'", 2)
  end
  if t ~= nil and not is_tensor(t) then
    error("register_buffer: a tensor or nil expected for '" .. name .. "', got " .. type(t), 2)
  end
  local params, mods = rawget(self, "_parameters"), rawget(self, "_modules")
  if params[name] ~= nil or mods[name] ~= nil then
    error("register_buffer: '" .. name .. "' is already a parameter or submodule", 2)
  end
  rawset(self, name, nil)
  if not rawget(self, "_buffer_names")[name] then
    rawget(self, "_buffer_names")[name] = true
    table.insert(rawget(self, "_buffer_order"), name)
  end
  rawget(self, "_buffers")[name] = t
  rawget(self, "_non_persistent")[name] = persistent == false or nil
end

--- m:add_module(name, child): register a submodule under any name (even "0" or "a-b")
function Module:add_module(name, child)
  if type(name) ~= "string" or name == "" or name:find(".", 1, true) then
    error("add_module: the name must be a non-empty string without '.'", 2)
  end
  if child ~= nil and not is_module(child) then
    error("add_module: a Module expected for '" .. name .. "', got " .. type(child), 2)
  end
  if rawget(self, name) ~= nil then rawset(self, name, nil) end
  instance_newindex(self, name, child)
end

-- ---------------------------------------------------------------------------------------
-- traversal

local function walk_modules(m, prefix, out, seen)
  if seen[m] then return end
  seen[m] = true
  out[#out + 1] = {prefix, m}
  local mods = rawget(m, "_modules")
  for _, name in ipairs(rawget(m, "_module_order")) do
    local c = mods[name]
    if c then walk_modules(c, prefix == "" and name or prefix .. "." .. name, out, seen) end
  end
end

local function list_iter(list)
  local i = 0
  return function()
    i = i + 1
    local e = list[i]
    if e then return e[1], e[2] end
  end
end

--- for name, m in m:named_modules() do  -- every module, this one first (name ""), depth first
function Module:named_modules()
  local out = {}
  walk_modules(self, "", out, {})
  return list_iter(out)
end

--- m:modules() -> array of every module, this one first
function Module:modules()
  local out = {}
  for _, m in self:named_modules() do out[#out + 1] = m end
  return out
end

--- for name, child in m:named_children() do   -- immediate submodules, in order
function Module:named_children()
  local out, mods = {}, rawget(self, "_modules")
  for _, name in ipairs(rawget(self, "_module_order")) do
    if mods[name] then out[#out + 1] = {name, mods[name]} end
  end
  return list_iter(out)
end

--- m:children() -> array of the immediate submodules
function Module:children()
  local out = {}
  for _, c in self:named_children() do out[#out + 1] = c end
  return out
end

-- (name, tensor) of a kind ("_parameters"/"_buffers") over the tree; shared tensors once
local function collect(self, kind, order_key, dedup, persistent_only)
  local out, seen = {}, {}
  for prefix, m in self:named_modules() do
    local store, skip = rawget(m, kind), rawget(m, "_non_persistent")
    for _, name in ipairs(rawget(m, order_key)) do
      local t = store[name]
      if t ~= nil and not (dedup and seen[t]) and not (persistent_only and skip[name]) then
        seen[t] = true
        out[#out + 1] = {prefix == "" and name or prefix .. "." .. name, t}
      end
    end
  end
  return out
end

--- for name, p in m:named_parameters() do  -- dotted names ("encoder.weight_ih_l0"), in
--- registration order (own parameters first, then each child's); a shared tensor once
function Module:named_parameters()
  return list_iter(collect(self, "_parameters", "_param_order", true))
end

--- m:parameters() -> array of the parameter tensors (what optimizers take)
function Module:parameters()
  local out = {}
  for _, e in ipairs(collect(self, "_parameters", "_param_order", true)) do out[#out + 1] = e[2] end
  return out
end

--- for name, b in m:named_buffers() do
function Module:named_buffers()
  return list_iter(collect(self, "_buffers", "_buffer_order", true))
end

--- m:buffers() -> array of the buffer tensors
function Module:buffers()
  local out = {}
  for _, e in ipairs(collect(self, "_buffers", "_buffer_order", true)) do out[#out + 1] = e[2] end
  return out
end

--- m:num_parameters() -> the number of trainable scalars
function Module:num_parameters()
  local n = 0
  for _, p in ipairs(self:parameters()) do n = n + p:numel() end
  return n
end

-- The state entries in PyTorch order.  Registration order is kept: a module's own
-- parameters, then its buffers, then each submodule's entries under "<child>.", so names and
-- order match PyTorch's state_dict (Sequential children are named "0", "1", ... like
-- PyTorch's, while seq[1] is the first child from Lua).
local function state_entries(self)
  local out = {}
  for prefix, m in self:named_modules() do
    local pre = prefix == "" and "" or prefix .. "."
    local params, bufs, skip = rawget(m, "_parameters"), rawget(m, "_buffers"),
                               rawget(m, "_non_persistent")
    for _, name in ipairs(rawget(m, "_param_order")) do
      if params[name] ~= nil then out[#out + 1] = {pre .. name, params[name], true} end
    end
    for _, name in ipairs(rawget(m, "_buffer_order")) do
      if bufs[name] ~= nil and not skip[name] then out[#out + 1] = {pre .. name, bufs[name], false} end
    end
  end
  return out
end

--- m:state_dict() -> sd: PyTorch-style names -> tensors (parameters detached but sharing
--- storage, persistent buffers as they are).  One return value, so
--- glimpse.save(path, m:state_dict()) writes a checkpoint PyTorch can load.
function Module:state_dict()
  local sd = {}
  for _, e in ipairs(state_entries(self)) do sd[e[1]] = e[3] and e[2]:detach() or e[2] end
  return sd
end

--- m:state_dict_keys() -> the state_dict's names in PyTorch's order (per module: its
--- parameters, then its buffers, then each child's entries)
function Module:state_dict_keys()
  local names = {}
  for _, e in ipairs(state_entries(self)) do names[#names + 1] = e[1] end
  return names
end

local function shapes_fit(a, b)
  local sa, sb = a.shape, b.shape
  if #sa == #sb then
    for i = 1, #sa do
      if sa[i] ~= sb[i] then return false end
    end
    return true
  end
  -- a scalar stored as () by one side and (1) by the other (num_batches_tracked)
  return #sa <= 1 and #sb <= 1 and a:numel() == 1 and b:numel() == 1
end

--- m:load_state_dict(sd, {strict=true}) -> {missing_keys=, unexpected_keys=}
--- Copies sd's tensors into the parameters and buffers in place.  Every problem is found
--- before anything is copied, and reported in one error: missing and unexpected names (when
--- strict) and shape mismatches (always).
function Module:load_state_dict(sd, opts)
  if type(sd) ~= "table" then
    error("load_state_dict: argument #1 must be a table name -> tensor, got " .. type(sd), 2)
  end
  local strict = not (opts and opts.strict == false)
  local own = {}
  local missing, unexpected, problems = {}, {}, {}
  for _, e in ipairs(state_entries(self)) do
    local name, t = e[1], e[2]
    own[name] = t
    local v = sd[name]
    if v == nil then
      missing[#missing + 1] = name
    elseif not is_tensor(v) then
      problems[#problems + 1] = string.format("entry '%s' is a %s, not a tensor", name, type(v))
    elseif not shapes_fit(v, t) then
      problems[#problems + 1] = string.format("size mismatch for %s: the checkpoint has " ..
                                              "shape %s, the model has %s", name,
                                              check.shape(v), check.shape(t))
    end
  end
  for k in pairs(sd) do
    if own[k] == nil then unexpected[#unexpected + 1] = tostring(k) end
  end
  table.sort(unexpected)
  local msgs = {}
  if strict and #missing > 0 then
    msgs[#msgs + 1] = "missing keys: " .. table.concat(missing, ", ")
  end
  if strict and #unexpected > 0 then
    msgs[#msgs + 1] = "unexpected keys: " .. table.concat(unexpected, ", ")
  end
  for _, p in ipairs(problems) do msgs[#msgs + 1] = p end
  if #msgs > 0 then
    error("load_state_dict: error(s) loading the state_dict of " .. self.__name .. ":\n  " ..
          table.concat(msgs, "\n  "), 2)
  end
  glimpse.no_grad(function()
    for name, t in pairs(own) do
      local v = sd[name]
      if v ~= nil and v ~= t then
        if #v.shape == #t.shape then t:copy_(v) else t:fill_(v:reshape(1)[1]:item()) end
      end
    end
  end)
  return {missing_keys = missing, unexpected_keys = unexpected}
end

-- ---------------------------------------------------------------------------------------
-- modes, gradients, apply

--- m:train(mode=true) -> m; sets training on this module and every submodule
function Module:train(mode)
  if mode == nil then mode = true end
  for _, m in ipairs(self:modules()) do rawset(m, "training", mode and true or false) end
  return self
end

--- m:evaluate() -> m; evaluation mode (dropout off, batch norm uses running statistics).
--- m:eval() is the same.
function Module:evaluate()
  return self:train(false)
end
Module.eval = Module.evaluate

--- m:zero_grad({set_to_none=false}): zero every parameter's .grad (or drop it); a boolean
--- is set_to_none itself, as PyTorch's zero_grad(True)
function Module:zero_grad(opts)
  local none
  if type(opts) == "boolean" or opts == nil then none = opts
  elseif type(opts) == "table" then none = opts.set_to_none
  else
    error(string.format("%s:zero_grad: opts must be a table {set_to_none = bool} or a boolean, "
                        .. "got %s", self.__name or "Module", type(opts)), 2)
  end
  for _, p in ipairs(self:parameters()) do
    if none then p.grad = nil else p:zero_grad() end
  end
end

--- m:apply(fn) -> m; calls fn(module) on every submodule (children first) and then on m,
--- as PyTorch does; use it for custom initialisation.
function Module:apply(fn)
  if type(fn) ~= "function" then error("apply: argument #1 must be a function", 2) end
  for _, c in ipairs(self:children()) do c:apply(fn) end
  fn(self)
  return self
end

-- ---------------------------------------------------------------------------------------
-- printing, like PyTorch: Name(extra) or Name(\n  (child): ...\n)

local function repr(m)
  local extra = m:extra_repr()
  local lines = {}
  if extra ~= "" then
    for line in (extra .. "\n"):gmatch("(.-)\n") do lines[#lines + 1] = line end
  end
  for name, c in m:named_children() do
    lines[#lines + 1] = "(" .. name .. "): " .. repr(c)
  end
  if #lines == 0 then return m.__name .. "()" end
  if #lines == 1 and extra ~= "" and not extra:find("\n") then
    return m.__name .. "(" .. extra .. ")"
  end
  for i, l in ipairs(lines) do lines[i] = "  " .. l:gsub("\n", "\n  ") end
  return m.__name .. "(\n" .. table.concat(lines, "\n") .. "\n)"
end

function Module:__tostring()
  return repr(self)
end

-- ---------------------------------------------------------------------------------------
-- helpers for the layers

-- an int or {h, w} -> {h, w}; an error names cls and the line that called its constructor
local function pair(v, what, cls, lo)
  local given = v
  if math.type(v) == "integer" then v = {v, v} end
  if type(v) ~= "table" or #v ~= 2 or math.type(v[1]) ~= "integer" or math.type(v[2]) ~= "integer"
     or v[1] < lo or v[2] < lo then
    local shown = check.value(given)
    if type(given) == "table" then
      local parts = {}
      for i, x in ipairs(given) do parts[i] = tostring(x) end
      shown = "{" .. table.concat(parts, ",") .. "}"
    end
    check.fail(4, "%s: %s must be an integer >= %d or {h, w} of them, got %s", cls, what, lo,
               shown)
  end
  return {v[1], v[2]}
end

local function pair_str(p)
  return "(" .. p[1] .. ", " .. p[2] .. ")"
end

local function param(...)
  return glimpse.empty(...):requires_grad()
end

-- a parameter of the given shape drawn from U(-bound, bound)
local function uniform(shape, bound)
  local t = glimpse.empty(table.unpack(shape))
  t:uniform_(-bound, bound)
  return t:requires_grad()
end

M.pair, M.pair_str, M.param, M.uniform, M.is_tensor = pair, pair_str, param, uniform, is_tensor

return M
