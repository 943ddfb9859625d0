--- glimpse.nn -- the Module system and the standard layers.
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
-- Registration order is kept: named_parameters() and state_dict() list a module's own
-- parameters, then its buffers, then each submodule's entries under "<child>.", the way
-- PyTorch does, so names and order match PyTorch's state_dict (Sequential children are named
-- "0", "1", ... like PyTorch's, while seq[1] is the first child from Lua).
--
-- Other engineers' modules live in glimpse/nn_rnn.lua and glimpse/nn_attention.lua; when
-- present they are merged into this table at the end of the file.
local glimpse = require "glimpse"
local init = require "glimpse.nn_init"

local M = {}

local is_tensor = glimpse.is_tensor

local function shape_str(t)
  return "[" .. table.concat(t.shape, ",") .. "]"
end

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

-- the state entries in PyTorch order: per module its parameters then its buffers
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
                                              shape_str(v), shape_str(t))
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

--- m:zero_grad({set_to_none=false}): zero every parameter's .grad (or drop it)
function Module:zero_grad(opts)
  local none = opts and opts.set_to_none
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
-- argument helpers for the layers

local function check_int(v, what, cls, lo, level)
  if math.type(v) ~= "integer" or v < (lo or 1) then
    error(string.format("%s: %s must be an integer >= %d, got %s", cls, what, lo or 1,
                        tostring(v)), (level or 2) + 1)
  end
  return v
end

-- an int or {h, w} -> {h, w}
local function pair(v, what, cls, lo)
  if math.type(v) == "integer" then v = {v, v} end
  if type(v) ~= "table" or #v ~= 2 or math.type(v[1]) ~= "integer" or math.type(v[2]) ~= "integer"
     or v[1] < lo or v[2] < lo then
    error(string.format("%s: %s must be an integer >= %d or {h, w} of them, got %s", cls, what,
                        lo, tostring(v)), 3)
  end
  return {v[1], v[2]}
end

local function opts_of(opts, cls)
  if opts ~= nil and type(opts) ~= "table" then
    error(cls .. ": options must be a table, got " .. type(opts), 3)
  end
  return opts or {}
end

local function pair_str(p)
  return "(" .. p[1] .. ", " .. p[2] .. ")"
end

local function param(...)
  return glimpse.empty(...):requires_grad()
end

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

-- ---------------------------------------------------------------------------------------
-- Embedding: ids (...) of 1-based ids -> (..., d); weight (n, d) ~ N(0, 1)

local Embedding = Module:extend("Embedding")
M.Embedding = Embedding

--- nn.Embedding(n, d, {padding_idx=nil}) -> module; ids (...) 1-based (tensor or table)
--- -> (..., d).  padding_idx (1-based; negative counts from the end) names a row that starts
--- at zero and never gets a gradient.
function Embedding:init(n, d, opts)
  check_int(n, "num_embeddings", "Embedding", 1, 3)
  check_int(d, "embedding_dim", "Embedding", 1, 3)
  opts = opts_of(opts, "Embedding")
  self.num_embeddings, self.embedding_dim = n, d
  local pad = opts.padding_idx
  if pad ~= nil then
    if math.type(pad) ~= "integer" or pad == 0 or pad > n or pad < -n then
      error(string.format("Embedding: padding_idx must be an integer in 1..%d (or -%d..-1), " ..
                          "got %s", n, n, tostring(pad)), 2)
    end
    if pad < 0 then pad = n + pad + 1 end
  end
  self.padding_idx = pad
  self.weight = init.normal_(param(n, d), 0, 1)
  if pad then glimpse.no_grad(function() self.weight[pad] = 0 end) end
end

function Embedding:forward(ids)
  return glimpse.embedding(self.weight, ids, self.padding_idx)
end

function Embedding:extra_repr()
  local s = string.format("%d, %d", self.num_embeddings, self.embedding_dim)
  if self.padding_idx then s = s .. ", padding_idx=" .. self.padding_idx end
  return s
end

-- ---------------------------------------------------------------------------------------
-- Conv2d: x (B,C,H,W) or (C,H,W) -> (B,O,Ho,Wo); weight (O,C,kh,kw), bias (O)
-- init: weight, bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = C*kh*kw (PyTorch's)

local Conv2d = Module:extend("Conv2d")
M.Conv2d = Conv2d

--- nn.Conv2d(cin, cout, k, {stride=1, padding=0, bias=true}) -> module; k, stride, padding:
--- an integer or {h, w}.  x (B,cin,H,W) -> (B,cout,Ho,Wo), Ho = (H + 2 padding - kh)//stride + 1
function Conv2d:init(cin, cout, k, opts)
  check_int(cin, "in_channels", "Conv2d", 1, 3)
  check_int(cout, "out_channels", "Conv2d", 1, 3)
  opts = opts_of(opts, "Conv2d")
  self.in_channels, self.out_channels = cin, cout
  self.kernel_size = pair(k, "kernel_size", "Conv2d", 1)
  self.stride = pair(opts.stride or 1, "stride", "Conv2d", 1)
  self.padding = pair(opts.padding or 0, "padding", "Conv2d", 0)
  local kh, kw = self.kernel_size[1], self.kernel_size[2]
  local bound = 1 / math.sqrt(cin * kh * kw)
  self.weight = init.uniform_(param(cout, cin, kh, kw), -bound, bound)
  if opts.bias ~= false then self.bias = init.uniform_(param(cout), -bound, bound) end
end

function Conv2d:forward(x)
  local opts = {stride = self.stride, padding = self.padding}
  if is_tensor(x) and x:dim() == 3 then
    return glimpse.conv2d(x:unsqueeze(1), self.weight, self.bias, opts):squeeze(1)
  end
  return glimpse.conv2d(x, self.weight, self.bias, opts)
end

function Conv2d:extra_repr()
  local s = string.format("%d, %d, kernel_size=%s, stride=%s", self.in_channels,
                          self.out_channels, pair_str(self.kernel_size), pair_str(self.stride))
  if self.padding[1] ~= 0 or self.padding[2] ~= 0 then
    s = s .. ", padding=" .. pair_str(self.padding)
  end
  if self.bias == nil then s = s .. ", bias=false" end
  return s
end

-- ---------------------------------------------------------------------------------------
-- pooling: x (B,C,H,W) or (C,H,W) -> (B,C,Ho,Wo)

local function pool_class(name, fn)
  local cls = Module:extend(name)
  --- nn.MaxPool2d(k, stride=k, padding=0) / nn.AvgPool2d(...): each an integer or {h, w}
  function cls:init(k, stride, padding)
    self.kernel_size = pair(k, "kernel_size", name, 1)
    self.stride = stride == nil and {self.kernel_size[1], self.kernel_size[2]}
                  or pair(stride, "stride", name, 1)
    self.padding = pair(padding or 0, "padding", name, 0)
  end
  function cls:forward(x)
    if is_tensor(x) and x:dim() == 3 then
      return fn(x:unsqueeze(1), self.kernel_size, self.stride, self.padding):squeeze(1)
    end
    return fn(x, self.kernel_size, self.stride, self.padding)
  end
  function cls:extra_repr()
    local function s(p) return p[1] == p[2] and tostring(p[1]) or pair_str(p) end
    return string.format("kernel_size=%s, stride=%s, padding=%s", s(self.kernel_size),
                         s(self.stride), s(self.padding))
  end
  return cls
end

M.MaxPool2d = pool_class("MaxPool2d", glimpse.max_pool2d)
M.AvgPool2d = pool_class("AvgPool2d", glimpse.avg_pool2d)

-- ---------------------------------------------------------------------------------------
-- AdaptiveAvgPool2d: x (B,C,H,W) or (C,H,W) -> (B,C,oh,ow); cell (i,j) averages rows
-- floor(i*H/oh) .. ceil((i+1)*H/oh)-1 and the same for columns (PyTorch's windows, which
-- overlap or repeat when H is not a multiple of oh, or smaller than it).

local AdaptiveAvgPool2d = Module:extend("AdaptiveAvgPool2d")
M.AdaptiveAvgPool2d = AdaptiveAvgPool2d

--- nn.AdaptiveAvgPool2d(size) -> module; size an integer or {oh, ow}
function AdaptiveAvgPool2d:init(size)
  if math.type(size) == "integer" then size = {size, size} end
  if type(size) ~= "table" or math.type(size[1]) ~= "integer" or math.type(size[2]) ~= "integer"
     or size[1] < 1 or size[2] < 1 then
    error("AdaptiveAvgPool2d: output size must be an integer >= 1 or {oh, ow} of them, got " ..
          tostring(size), 3)
  end
  self.output_size = {size[1], size[2]}
  self._pool_mats = {}            -- (H*W, oh*ow) averaging matrices by input size
end

-- The (H*W, oh*ow) matrix whose column (i,j) holds 1/count on the cells of window (i,j).
local function pool_matrix(H, W, oh, ow)
  local rows = {}
  for p = 1, H * W do
    local r = {}
    for q = 1, oh * ow do r[q] = 0 end
    rows[p] = r
  end
  for i = 0, oh - 1 do
    local y0, y1 = (i * H) // oh, ((i + 1) * H + oh - 1) // oh
    for j = 0, ow - 1 do
      local x0, x1 = (j * W) // ow, ((j + 1) * W + ow - 1) // ow
      local v = 1 / ((y1 - y0) * (x1 - x0))
      for y = y0, y1 - 1 do
        for x = x0, x1 - 1 do rows[y * W + x + 1][i * ow + j + 1] = v end
      end
    end
  end
  return glimpse.tensor(rows)
end

function AdaptiveAvgPool2d:forward(x)
  if not is_tensor(x) or (x:dim() ~= 3 and x:dim() ~= 4) then
    error("AdaptiveAvgPool2d: expected a (B,C,H,W) or (C,H,W) tensor, got " ..
          (is_tensor(x) and shape_str(x) or type(x)), 2)
  end
  local single = x:dim() == 3
  if single then x = x:unsqueeze(1) end
  local B, C, H, W = table.unpack(x.shape)
  local oh, ow = self.output_size[1], self.output_size[2]
  local y
  if H == oh and W == ow then
    y = x
  elseif H % oh == 0 and W % ow == 0 then      -- equal, disjoint windows: plain pooling
    y = glimpse.avg_pool2d(x, {H // oh, W // ow})
  else
    local key = H .. "x" .. W
    local P = self._pool_mats[key]
    if not P then
      P = pool_matrix(H, W, oh, ow)
      self._pool_mats[key] = P
    end
    y = x:reshape(B * C, H * W):matmul(P):reshape(B, C, oh, ow)
  end
  if single then y = y:squeeze(1) end
  return y
end

function AdaptiveAvgPool2d:extra_repr()
  return string.format("output_size=(%d, %d)", self.output_size[1], self.output_size[2])
end

-- ---------------------------------------------------------------------------------------
-- activations and shape layers

local function simple(name, fn)
  local cls = Module:extend(name)
  cls.forward = function(_, x) return fn(x) end
  M[name] = cls
  return cls
end

--- nn.ReLU(), nn.Tanh(), nn.Sigmoid(), nn.Identity(): elementwise, any shape
simple("ReLU", function(x) return x:relu() end)
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

-- ---------------------------------------------------------------------------------------
-- the other families' modules, when their files exist

-- They require "glimpse.nn" themselves (for nn.Module): publish this table first so that
-- require returns it instead of loading this file again.  When a user required one of them
-- first, it is still loading (it is below us on the stack): requiring it again would make a
-- second copy of its classes, so it is merged on first use instead, from package.loaded.
package.loaded["glimpse.nn"] = M

local SIBLINGS = {"glimpse.nn_rnn", "glimpse.nn_attention"}

local function on_stack(path)
  local src = "@" .. path
  for level = 2, 200 do
    local info = debug.getinfo(level, "S")
    if not info then return false end
    if info.source == src then return true end
  end
  return false
end

local pending = {}
for _, name in ipairs(SIBLINGS) do
  local path = package.searchpath(name, package.path)
  if path then
    if on_stack(path) then
      pending[#pending + 1] = name
    else
      for k, v in pairs(require(name)) do M[k] = v end
    end
  end
end

-- the Transformer layers (glimpse/nn/transformer.lua), built on this file's Module
for k, v in pairs(require("glimpse.nn.transformer").classes(M)) do M[k] = v end

if #pending > 0 then
  setmetatable(M, {__index = function(t, k)
    for i = #pending, 1, -1 do
      local mod = package.loaded[pending[i]]
      if type(mod) == "table" then
        table.remove(pending, i)
        for name, v in pairs(mod) do
          if rawget(t, name) == nil then rawset(t, name, v) end
        end
      end
    end
    if #pending == 0 then setmetatable(t, nil) end
    return rawget(t, k)
  end})
end

return M
