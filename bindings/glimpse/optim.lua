--- glimpse.optim -- optimizers, gradient clipping and learning-rate schedules.
--
-- Optimizers keep PyTorch 1.13's update rules exactly (the arithmetic is engine/optim.c, one
-- fused loop per parameter tensor); this file does the bookkeeping: param groups, lazily
-- created state, step counts, state_dict in a form glimpse.save writes.
--
--   local optim = glimpse.optim
--   local opt = optim.Adam(model:parameters(), {lr = 1e-3})
--   local sched = optim.CosineAnnealingLR(opt, {T_max = 1000})
--   for step = 1, 1000 do
--     opt:zero_grad()
--     local loss = glimpse.cross_entropy(model(x), y)
--     loss:backward()
--     optim.clip_grad_norm(model:parameters(), 1.0)
--     opt:step()
--     sched:step()
--   end
--
-- Checkpoints: opt:state_dict(prefix) returns (tensors, meta): a flat name -> tensor table
-- ("state.<i>.<buffer>", i the 1-based position of the parameter across the groups) and a
-- string -> string table ("optimizer", "param_groups" and "state" as JSON), both ready for
-- glimpse.save(path, tensors, meta).  Numbers are written with as many digits as they need to
-- read back identically, so a resumed run is bit-exact.
local glimpse = require "glimpse"
local cjson = require "cjson"

local M = {}

-- ---------------------------------------------------------------------------------------
-- helpers

local function fail(level, fmt, ...)
  error(string.format(fmt, ...), level + 1)
end

local function copy(v)
  if type(v) ~= "table" then return v end
  local t = {}
  for k, x in pairs(v) do t[k] = copy(x) end
  return t
end

local function same_shape(a, b)
  local sa, sb = a.shape, b.shape
  if #sa ~= #sb then return false end
  for i = 1, #sa do
    if sa[i] ~= sb[i] then return false end
  end
  return true
end

local function shape_str(t)
  return "[" .. table.concat(t.shape, ",") .. "]"
end

-- The shortest decimal form of x that reads back as the same double.
local function number_str(x)
  if math.type(x) == "integer" then return string.format("%d", x) end
  if x ~= x or x == math.huge or x == -math.huge then
    error("optim: cannot store the non-finite number " .. tostring(x) .. " in a state_dict", 0)
  end
  for _, f in ipairs {"%.15g", "%.16g", "%.17g"} do
    local s = string.format(f, x)
    if tonumber(s) == x then return s end
  end
  return string.format("%.17g", x)
end

local function json_string(s)
  return '"' .. s:gsub('[%c"\\]', function(c)
    if c == '"' then return '\\"' end
    if c == "\\" then return "\\\\" end
    return string.format("\\u%04x", c:byte())
  end) .. '"'
end

-- JSON for the small values a state_dict holds: numbers, booleans, strings, arrays and
-- string-keyed objects (keys sorted, so the same state gives the same bytes).  lua-cjson's
-- encoder keeps only 14 digits, too few for an exact resume; its decoder reads all 17.
local function to_json(v)
  local t = type(v)
  if t == "number" then return number_str(v) end
  if t == "boolean" then return v and "true" or "false" end
  if t == "string" then return json_string(v) end
  if t ~= "table" then
    error("optim: cannot store a " .. t .. " in a state_dict", 0)
  end
  if next(v) == nil then return "[]" end
  local n = #v
  local is_array = n > 0
  if is_array then
    for k in pairs(v) do
      if math.type(k) ~= "integer" or k < 1 or k > n then is_array = false break end
    end
  end
  local parts = {}
  if is_array then
    for i = 1, n do parts[i] = to_json(v[i]) end
    return "[" .. table.concat(parts, ",") .. "]"
  end
  local keys = {}
  for k in pairs(v) do keys[#keys + 1] = tostring(k) end
  table.sort(keys)
  for i, k in ipairs(keys) do
    local x = v[k]
    if x == nil then x = v[tonumber(k)] end
    parts[i] = json_string(k) .. ":" .. to_json(x)
  end
  return "{" .. table.concat(parts, ",") .. "}"
end

local function from_json(s, what, level)
  if type(s) ~= "string" then
    fail(level + 1, "load_state_dict: metadata '%s' is missing", what)
  end
  local ok, v = pcall(cjson.decode, s)
  if not ok then fail(level + 1, "load_state_dict: metadata '%s' is not valid JSON (%s)", what, v) end
  return v
end

-- JSON numbers come back as floats: integral ones become integers again.
local function as_int(x)
  return math.tointeger(x) or x
end

-- A tensor or an array of tensors -> array; a helper for the clipping functions.
local function tensor_list(params, fname)
  if glimpse.is_tensor(params) then return {params} end
  if type(params) ~= "table" then
    fail(3, "%s: expected a tensor or an array of tensors, got %s", fname, type(params))
  end
  for i, p in ipairs(params) do
    if not glimpse.is_tensor(p) then
      fail(3, "%s: entry %d is a %s, expected a tensor", fname, i, type(p))
    end
  end
  return params
end

-- ---------------------------------------------------------------------------------------
-- Optimizer: the shared machinery.  A class gives: name, defaults (REQUIRED marks an option
-- without one), limits (ranges of numeric options other than [0, inf)), check(group) (extra
-- validation, optional), buffers (state tensor names, in order), update(p, g, state, group).

local Optimizer = {}
Optimizer.__index = Optimizer
M.Optimizer = Optimizer

local REQUIRED = setmetatable({}, {__tostring = function() return "<required>" end})
local EXTRA_GROUP_KEYS = {params = true, name = true, initial_lr = true}

-- Check a filled group against the class: booleans where the default is one, numbers in
-- cls.limits[key] (default [0, inf)) where it is a number, then the class's own check.
local function validate(cls, g, level)
  for k, def in pairs(cls.defaults) do
    local v = g[k]
    if type(def) == "boolean" then
      if type(v) ~= "boolean" then
        fail(level + 1, "%s: %s must be a boolean, got %s", cls.name, k, type(v))
      end
    elseif type(def) == "number" or def == REQUIRED then
      local lim = cls.limits and cls.limits[k] or {0, math.huge}
      if type(v) ~= "number" then
        fail(level + 1, "%s: %s must be a number, got %s", cls.name, k, type(v))
      end
      if not (v >= lim[1] and v <= lim[2]) then
        fail(level + 1, "%s: invalid %s %s (expected a number in [%s, %s])", cls.name, k,
             tostring(v), tostring(lim[1]), tostring(lim[2]))
      end
    end
  end
  if cls.check then cls.check(g, level + 1) end
end

-- Fill a group from the defaults and validate it; returns a new table (the caller's is not
-- modified).
local function make_group(cls, src, opts, level)
  local group = {}
  for k, v in pairs(src) do
    if cls.defaults[k] == nil and not EXTRA_GROUP_KEYS[k] then
      fail(level + 1, "%s: unknown option '%s' in a param group", cls.name, tostring(k))
    end
    group[k] = k == "params" and v or copy(v)
  end
  for k, v in pairs(cls.defaults) do
    if group[k] == nil then
      if opts[k] ~= nil then group[k] = copy(opts[k]) elseif v ~= REQUIRED then group[k] = copy(v) end
    end
    if group[k] == nil then
      fail(level + 1, "%s: option '%s' is required (e.g. %s(params, {%s = 0.01}))", cls.name, k,
           cls.name, k)
    end
  end
  validate(cls, group, level + 1)
  local params = group.params
  if type(params) ~= "table" then
    fail(level + 1, "%s: a param group's params must be an array of tensors", cls.name)
  end
  local list = {}
  for i, p in ipairs(params) do
    if not glimpse.is_tensor(p) then
      fail(level + 1, "%s: parameter %d is a %s, expected a tensor", cls.name, i, type(p))
    end
    if not p:is_leaf() then
      fail(level + 1, "%s: parameter %d is not a leaf tensor (the result of an op); optimize "
           .. "the leaves, or detach() it and call requires_grad()", cls.name, i)
    end
    list[i] = p
  end
  group.params = list
  return group
end

local function new_optimizer(cls, params, opts, level)
  if type(params) ~= "table" and not glimpse.is_tensor(params) then
    fail(level + 1, "%s: expected an array of tensors or of param groups, got %s", cls.name,
         type(params))
  end
  opts = opts or {}
  if type(opts) ~= "table" then fail(level + 1, "%s: options must be a table", cls.name) end
  for k in pairs(opts) do
    if cls.defaults[k] == nil then
      fail(level + 1, "%s: unknown option '%s'", cls.name, tostring(k))
    end
  end
  local self = setmetatable({param_groups = {}, state = {}, defaults = {}}, cls)
  for k, v in pairs(cls.defaults) do
    if opts[k] ~= nil then self.defaults[k] = copy(opts[k]) else self.defaults[k] = v end
  end
  local groups
  if glimpse.is_tensor(params) then
    groups = {{params = {params}}}
  elseif glimpse.is_tensor(params[1]) then
    groups = {{params = params}}
  else
    groups = params
  end
  if #groups == 0 then fail(level + 1, "%s: got an empty parameter list", cls.name) end
  self._opts = opts
  for i, g in ipairs(groups) do
    if type(g) ~= "table" or g.params == nil then
      fail(level + 1, "%s: entry %d of the parameter list is neither a tensor nor a param group "
           .. "{params = {...}, ...}", cls.name, i)
    end
    self:_add_group(g, level + 1)
  end
  return self
end

function Optimizer:_add_group(src, level)
  local cls = getmetatable(self)
  local group = make_group(cls, src, self._opts, level + 1)
  if #group.params == 0 then fail(level + 1, "%s: a param group has no parameters", cls.name) end
  local seen = {}
  for _, g in ipairs(self.param_groups) do
    for _, p in ipairs(g.params) do seen[p] = true end
  end
  for _, p in ipairs(group.params) do
    if seen[p] then
      fail(level + 1, "%s: some parameters appear in more than one parameter group (or twice "
           .. "in one)", cls.name)
    end
    seen[p] = true
  end
  self.param_groups[#self.param_groups + 1] = group
end

--- opt:add_param_group({params = {...}, lr = ...}): add a group; missing options come from the
--- optimizer's defaults.
function Optimizer:add_param_group(group)
  if type(group) ~= "table" or group.params == nil then
    fail(2, "add_param_group: expected a table {params = {...}, ...}")
  end
  if glimpse.is_tensor(group.params) then
    group = copy(group)
    group.params = {group.params}
  end
  self:_add_group(group, 2)
end

--- opt:step([closure]) -> loss or nil.  Updates every parameter that has a gradient.
--- closure, when given, is called first (it should zero the grads, compute the loss, call
--- backward and return the loss).
function Optimizer:step(closure)
  local loss
  if closure ~= nil then
    if type(closure) ~= "function" then fail(2, "step: closure must be a function") end
    loss = closure()
  end
  local idx = 0
  local state = self.state
  for _, group in ipairs(self.param_groups) do
    for _, p in ipairs(group.params) do
      idx = idx + 1
      local g = p.grad
      if g then
        local st = state[idx]
        if not st then
          st = {step = 0}
          state[idx] = st
        end
        st.step = st.step + 1
        self.update(p, g, st, group)
      end
    end
  end
  return loss
end

--- opt:zero_grad([set_to_none]): zero every parameter's gradient (set_to_none = true drops
--- them instead, so the next backward allocates fresh ones).
function Optimizer:zero_grad(set_to_none)
  for _, group in ipairs(self.param_groups) do
    for _, p in ipairs(group.params) do
      if set_to_none then p.grad = nil else p:zero_grad() end
    end
  end
end

--- opt:parameters() -> every parameter, in group order (the order of state indices).
function Optimizer:parameters()
  local out = {}
  for _, group in ipairs(self.param_groups) do
    for _, p in ipairs(group.params) do out[#out + 1] = p end
  end
  return out
end

--- opt:state_dict([prefix]) -> tensors, meta.
---   tensors: "<prefix>state.<i>.<buffer>" -> the live buffer (not a copy), i the 1-based
---            index of the parameter across groups; buffer names as PyTorch's
---            (exp_avg, exp_avg_sq, max_exp_avg_sq, momentum_buffer, square_avg, grad_avg,
---            acc_delta, sum).
---   meta:    "<prefix>optimizer" = class name, "<prefix>param_groups" = JSON array of the
---            groups' hyper-parameters with "params" = their indices, "<prefix>state" = JSON
---            {"<i>": {"step": n}}.
--- Both go straight to glimpse.save(path, tensors, meta).
function Optimizer:state_dict(prefix)
  prefix = prefix or ""
  if type(prefix) ~= "string" then fail(2, "state_dict: prefix must be a string") end
  local tensors, steps, groups = {}, {}, {}
  local idx = 0
  for _, group in ipairs(self.param_groups) do
    local g = {}
    for k, v in pairs(group) do
      if k ~= "params" then g[k] = copy(v) end
    end
    local ids = {}
    for _ in ipairs(group.params) do
      idx = idx + 1
      ids[#ids + 1] = idx
    end
    g.params = ids
    groups[#groups + 1] = g
  end
  for i = 1, idx do
    local st = self.state[i]
    if st then
      steps[tostring(i)] = {step = st.step}
      for _, b in ipairs(self.buffers) do
        if st[b] then tensors[prefix .. "state." .. i .. "." .. b] = st[b] end
      end
    end
  end
  local ok, pg = pcall(to_json, groups)
  if not ok then fail(2, "state_dict: %s", pg) end
  local meta = {
    [prefix .. "optimizer"] = self.name,
    [prefix .. "param_groups"] = pg,
    [prefix .. "state"] = to_json(steps),
  }
  return tensors, meta
end

--- opt:load_state_dict(tensors, meta [, prefix]): restore what state_dict gave (possibly
--- through glimpse.save / glimpse.load).  The parameters stay this optimizer's own; their
--- number per group and their shapes must match.  Hyper-parameters (lr, betas ...) come from
--- the checkpoint, buffers are copied.  Tensors without "<prefix>state." are ignored, so
--- one file can hold a model and its optimizer.
function Optimizer:load_state_dict(tensors, meta, prefix)
  prefix = prefix or ""
  if type(tensors) ~= "table" or type(meta) ~= "table" then
    fail(2, "load_state_dict: expected (tensors, meta) as returned by state_dict() or "
         .. "glimpse.load()")
  end
  local kind = meta[prefix .. "optimizer"]
  if kind == nil then
    fail(2, "load_state_dict: no '%soptimizer' entry in the metadata (not an optimizer "
         .. "state_dict, or another prefix?)", prefix)
  end
  if kind ~= self.name then
    fail(2, "load_state_dict: the checkpoint is for %s, this optimizer is %s", kind, self.name)
  end
  local groups = from_json(meta[prefix .. "param_groups"], prefix .. "param_groups", 2)
  local steps = from_json(meta[prefix .. "state"], prefix .. "state", 2)
  if type(groups) ~= "table" or #groups ~= #self.param_groups then
    fail(2, "load_state_dict: the checkpoint has %d param groups, this optimizer %d",
         type(groups) == "table" and #groups or 0, #self.param_groups)
  end
  for i, g in ipairs(groups) do
    local n = type(g.params) == "table" and #g.params or -1
    if n ~= #self.param_groups[i].params then
      fail(2, "load_state_dict: param group %d has %d parameters in the checkpoint, %d here",
           i, n, #self.param_groups[i].params)
    end
  end
  local params = self:parameters()
  local state = {}
  for key, info in pairs(steps) do
    local i = math.tointeger(tonumber(key))
    if not i or i < 1 or i > #params or type(info) ~= "table" then
      fail(2, "load_state_dict: state entry '%s' does not name a parameter (1..%d)",
           tostring(key), #params)
    end
    state[i] = {step = as_int(info.step or 0)}
  end
  local known = {}
  for _, b in ipairs(self.buffers) do known[b] = true end
  local head = prefix .. "state."
  for name, t in pairs(tensors) do
    if type(name) == "string" and name:sub(1, #head) == head then
      local i, b = name:sub(#head + 1):match("^(%d+)%.([%w_]+)$")
      i = math.tointeger(tonumber(i))
      if not i or not known[b] then
        fail(2, "load_state_dict: unexpected tensor '%s' (%s keeps %s)", name, self.name,
             table.concat(self.buffers, ", "))
      end
      if not state[i] then
        fail(2, "load_state_dict: tensor '%s' belongs to parameter %d, which has no state "
             .. "entry", name, i)
      end
      if not glimpse.is_tensor(t) then fail(2, "load_state_dict: '%s' is not a tensor", name) end
      if not same_shape(t, params[i]) then
        fail(2, "load_state_dict: '%s' has shape %s, parameter %d has shape %s", name,
             shape_str(t), i, shape_str(params[i]))
      end
      state[i][b] = t:clone()
    end
  end
  for i, g in ipairs(groups) do
    local group = self.param_groups[i]
    for k, v in pairs(g) do
      if k ~= "params" then group[k] = type(v) == "number" and as_int(v) or copy(v) end
    end
  end
  self.state = state
end

function Optimizer:__tostring()
  local lines = {self.name .. " ("}
  for i, group in ipairs(self.param_groups) do
    lines[#lines + 1] = "Parameter Group " .. i
    local keys = {}
    for k in pairs(group) do
      if k ~= "params" then keys[#keys + 1] = k end
    end
    table.sort(keys)
    for _, k in ipairs(keys) do
      local v = group[k]
      if type(v) == "table" then
        local s = {}
        for j, x in ipairs(v) do s[j] = tostring(x) end
        v = "{" .. table.concat(s, ", ") .. "}"
      end
      lines[#lines + 1] = "    " .. k .. ": " .. tostring(v)
    end
  end
  lines[#lines + 1] = ")"
  return table.concat(lines, "\n")
end

-- A class: `cls(params, opts)` builds an optimizer.
local function optimizer_class(spec)
  local cls = setmetatable(spec, {
    __index = Optimizer,
    __call = function(c, params, opts)
      local o = new_optimizer(c, params, opts, 2)   -- not a tail call: error levels count it
      return o
    end,
  })
  cls.__index = cls
  cls.__tostring = Optimizer.__tostring
  return cls
end

local function zeros_like(p)
  return glimpse.zeros(p.shape)
end

-- ---------------------------------------------------------------------------------------
-- SGD

--- optim.SGD(params, {lr=, momentum=0, dampening=0, weight_decay=0, nesterov=false,
--- maximize=false}).  d = g + wd*p; buf = d on the first step, momentum*buf + (1-dampening)*d
--- after; d = nesterov and d + momentum*buf or buf; p -= lr*d.  lr is required.
M.SGD = optimizer_class {
  name = "SGD",
  defaults = {lr = REQUIRED, momentum = 0, dampening = 0, weight_decay = 0, nesterov = false,
              maximize = false},
  buffers = {"momentum_buffer"},
  limits = {dampening = {-math.huge, math.huge}},
  check = function(g, level)
    if g.nesterov and (g.momentum <= 0 or g.dampening ~= 0) then
      fail(level + 1, "SGD: nesterov momentum requires a momentum > 0 and zero dampening")
    end
  end,
  update = function(p, g, st, group)
    local buf, first
    if group.momentum ~= 0 then
      buf = st.momentum_buffer
      if not buf then
        buf = zeros_like(p)
        st.momentum_buffer = buf
        first = true
      end
    end
    glimpse._sgd_update(p, g, buf, first, group.lr, group.momentum, group.dampening,
                        group.weight_decay, group.nesterov, group.maximize)
  end,
}

-- ---------------------------------------------------------------------------------------
-- Adam and AdamW

local function check_adam(c, g, level)
  local b = g.betas
  if type(b) ~= "table" or type(b[1]) ~= "number" or type(b[2]) ~= "number" or #b ~= 2 then
    fail(level + 1, "%s: betas must be a table of two numbers {beta1, beta2}", c.name)
  end
  for i = 1, 2 do
    if not (b[i] >= 0 and b[i] < 1) then
      fail(level + 1, "%s: invalid beta parameter at index %d: %s (expected [0, 1))", c.name,
           i, tostring(b[i]))
    end
  end
end

local function adam_update(decoupled)
  return function(p, g, st, group)
    local m, v, vmax = st.exp_avg, st.exp_avg_sq, st.max_exp_avg_sq
    if not m then
      m, v = zeros_like(p), zeros_like(p)
      st.exp_avg, st.exp_avg_sq = m, v
    end
    if group.amsgrad and not vmax then
      vmax = zeros_like(p)
      st.max_exp_avg_sq = vmax
    end
    glimpse._adam_update(p, g, m, v, group.amsgrad and vmax or nil, st.step, group.lr,
                         group.betas[1], group.betas[2], group.eps, group.weight_decay,
                         decoupled, group.maximize)
  end
end

--- optim.Adam(params, {lr=1e-3, betas={0.9, 0.999}, eps=1e-8, weight_decay=0,
--- amsgrad=false, maximize=false}).  L2 weight decay is added to the gradient.
M.Adam = optimizer_class {
  name = "Adam",
  defaults = {lr = 1e-3, betas = {0.9, 0.999}, eps = 1e-8, weight_decay = 0, amsgrad = false,
              maximize = false},
  buffers = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"},
  check = function(g, level) check_adam(M.Adam, g, level + 1) end,
  update = adam_update(false),
}

--- optim.AdamW(params, {lr=1e-3, betas={0.9, 0.999}, eps=1e-8, weight_decay=1e-2,
--- amsgrad=false, maximize=false}).  Decoupled decay: p *= 1 - lr*weight_decay each step.
M.AdamW = optimizer_class {
  name = "AdamW",
  defaults = {lr = 1e-3, betas = {0.9, 0.999}, eps = 1e-8, weight_decay = 1e-2,
              amsgrad = false, maximize = false},
  buffers = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"},
  check = function(g, level) check_adam(M.AdamW, g, level + 1) end,
  update = adam_update(true),
}

-- ---------------------------------------------------------------------------------------
-- RMSProp, AdaDelta, Adagrad

--- optim.RMSProp(params, {lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0,
--- centered=false, maximize=false}).  Also spelled optim.RMSprop.
M.RMSProp = optimizer_class {
  name = "RMSProp",
  defaults = {lr = 1e-2, alpha = 0.99, eps = 1e-8, weight_decay = 0, momentum = 0,
              centered = false, maximize = false},
  buffers = {"square_avg", "momentum_buffer", "grad_avg"},
  update = function(p, g, st, group)
    if not st.square_avg then st.square_avg = zeros_like(p) end
    if group.momentum > 0 and not st.momentum_buffer then st.momentum_buffer = zeros_like(p) end
    if group.centered and not st.grad_avg then st.grad_avg = zeros_like(p) end
    glimpse._rmsprop_update(p, g, st.square_avg, group.centered and st.grad_avg or nil,
                            group.momentum > 0 and st.momentum_buffer or nil, group.lr,
                            group.alpha, group.eps, group.weight_decay, group.momentum,
                            group.maximize)
  end,
}
M.RMSprop = M.RMSProp

--- optim.AdaDelta(params, {lr=1.0, rho=0.9, eps=1e-6, weight_decay=0, maximize=false}).
--- Also spelled optim.Adadelta.
M.AdaDelta = optimizer_class {
  name = "AdaDelta",
  defaults = {lr = 1.0, rho = 0.9, eps = 1e-6, weight_decay = 0, maximize = false},
  buffers = {"square_avg", "acc_delta"},
  limits = {rho = {0, 1}},
  update = function(p, g, st, group)
    if not st.square_avg then
      st.square_avg, st.acc_delta = zeros_like(p), zeros_like(p)
    end
    glimpse._adadelta_update(p, g, st.square_avg, st.acc_delta, group.lr, group.rho, group.eps,
                             group.weight_decay, group.maximize)
  end,
}
M.Adadelta = M.AdaDelta

--- optim.Adagrad(params, {lr=1e-2, lr_decay=0, weight_decay=0, initial_accumulator_value=0,
--- eps=1e-10, maximize=false}).  clr = lr / (1 + (t-1)*lr_decay).
M.Adagrad = optimizer_class {
  name = "Adagrad",
  defaults = {lr = 1e-2, lr_decay = 0, weight_decay = 0, initial_accumulator_value = 0,
              eps = 1e-10, maximize = false},
  buffers = {"sum"},
  update = function(p, g, st, group)
    if not st.sum then st.sum = glimpse.full(p.shape, group.initial_accumulator_value) end
    glimpse._adagrad_update(p, g, st.sum, st.step, group.lr, group.lr_decay, group.eps,
                            group.weight_decay, group.maximize)
  end,
}
M.AdaGrad = M.Adagrad

-- ---------------------------------------------------------------------------------------
-- gradient clipping

local function grads_of(params)
  local grads = {}
  for _, p in ipairs(params) do
    local g = p.grad
    if g then grads[#grads + 1] = g end
  end
  return grads
end

local function norm_type_of(v)
  if v == nil then return 2 end
  if v == "inf" or v == "Inf" then return math.huge end
  if type(v) ~= "number" then fail(3, "clip_grad_norm: norm_type must be a number or \"inf\"") end
  return v
end

--- optim.clip_grad_norm(params, max_norm [, norm_type=2 | {norm_type=2,
--- error_if_nonfinite=false}]) -> total norm (a number) of all the gradients taken as one
--- vector, before clipping.  When it exceeds max_norm every gradient is scaled by
--- max_norm / (total + 1e-6).  norm_type: a number > 0, or math.huge / "inf" for the max.
--- params: a tensor or an array of tensors; those without a gradient are skipped.
function M.clip_grad_norm(params, max_norm, norm_type)
  params = tensor_list(params, "clip_grad_norm")
  if type(max_norm) ~= "number" then fail(2, "clip_grad_norm: max_norm must be a number") end
  local err_nonfinite = false
  if type(norm_type) == "table" then
    err_nonfinite = norm_type.error_if_nonfinite or false
    norm_type = norm_type.norm_type
  end
  norm_type = norm_type_of(norm_type)
  local grads = grads_of(params)
  if #grads == 0 then return 0.0 end
  if err_nonfinite then
    local ok, total = pcall(glimpse._grads_norm, grads, norm_type)
    if not ok then fail(2, "%s", total) end
    if total ~= total or total == math.huge then
      fail(2, "clip_grad_norm: the total norm of order %s of the gradients is non-finite, so "
           .. "it cannot be clipped", tostring(norm_type))
    end
  end
  local ok, total = pcall(glimpse._clip_grad_norm, grads, max_norm, norm_type)
  if not ok then fail(2, "%s", total) end
  return total
end
M.clip_grad_norm_ = M.clip_grad_norm

--- optim.grad_norm(params [, norm_type=2]) -> the joint norm of the gradients, no clipping.
function M.grad_norm(params, norm_type)
  params = tensor_list(params, "grad_norm")
  local grads = grads_of(params)
  if #grads == 0 then return 0.0 end
  local ok, total = pcall(glimpse._grads_norm, grads, norm_type_of(norm_type))
  if not ok then fail(2, "%s", total) end
  return total
end

--- optim.clip_grad_value(params, clip_value): clamp every gradient entry into
--- [-clip_value, clip_value].
function M.clip_grad_value(params, clip_value)
  params = tensor_list(params, "clip_grad_value")
  if type(clip_value) ~= "number" then fail(2, "clip_grad_value: clip_value must be a number") end
  local ok, err = pcall(glimpse._clip_grad_value, grads_of(params), clip_value)
  if not ok then fail(2, "%s", err) end
end
M.clip_grad_value_ = M.clip_grad_value

--- optim.merge(a, b, ...) -> one table with every entry of a, b, ...; a name present twice is
--- an error.  For putting a model's and an optimizer's state_dict into one file.
function M.merge(...)
  local out = {}
  for i = 1, select("#", ...) do
    local t = select(i, ...)
    if t ~= nil then
      if type(t) ~= "table" then fail(2, "merge: argument %d is a %s, expected a table", i, type(t)) end
      for k, v in pairs(t) do
        if out[k] ~= nil then fail(2, "merge: '%s' appears twice", tostring(k)) end
        out[k] = v
      end
    end
  end
  return out
end

-- ---------------------------------------------------------------------------------------
-- learning-rate schedules
--
-- A schedule sets each group's lr from that group's base lr (group.initial_lr, recorded the
-- first time a schedule sees the optimizer) and the epoch counter last_epoch: closed forms,
-- so the lr at a step depends on nothing but (base, epoch) and a resumed run gets the same
-- doubles.  Construction sets epoch 0 (the lr the first opt:step() uses); sched:step() after
-- opt:step() moves to the next.  The values agree with PyTorch 1.13's schedulers of the same
-- names (which compute them recursively) to float rounding.

local Scheduler = {}
Scheduler.__index = Scheduler
M.Scheduler = Scheduler

local function new_scheduler(cls, opt, opts, level)
  if type(opt) ~= "table" or type(opt.param_groups) ~= "table" then
    fail(level + 1, "%s: the first argument must be an optimizer", cls.name)
  end
  opts = opts or {}
  if type(opts) ~= "table" then fail(level + 1, "%s: options must be a table", cls.name) end
  for k in pairs(opts) do
    if cls.defaults[k] == nil then
      fail(level + 1, "%s: unknown option '%s'", cls.name, tostring(k))
    end
  end
  local self = setmetatable({optimizer = opt, base_lrs = {}, last_epoch = -1}, cls)
  for k, v in pairs(cls.defaults) do
    local x = opts[k]
    if x == nil then x = v end
    if x == REQUIRED then
      fail(level + 1, "%s: option '%s' is required", cls.name, k)
    end
    self[k] = k == "milestones" and copy(x) or x     -- `after` and lr_lambda stay themselves
  end
  cls.check(self, level + 1)
  for i, group in ipairs(opt.param_groups) do
    if group.initial_lr == nil then group.initial_lr = group.lr end
    self.base_lrs[i] = group.initial_lr
  end
  self:step()
  return self
end

local function scheduler_class(spec)
  local cls = setmetatable(spec, {
    __index = Scheduler,
    __call = function(c, opt, opts)
      local s = new_scheduler(c, opt, opts, 2)      -- not a tail call: error levels count it
      return s
    end,
  })
  cls.__index = cls
  return cls
end

-- Set every group's lr for epoch e.
function Scheduler:_set_epoch(e)
  self.last_epoch = e
  local lrs = {}
  for i, group in ipairs(self.optimizer.param_groups) do
    local base = self.base_lrs[i]
    if base == nil then
      error(string.format("%s: param group %d was added after the schedule was made", self.name,
                          i), 0)
    end
    lrs[i] = self:lr_at(base, e, i)
    group.lr = lrs[i]
  end
  self._last_lr = lrs
end

--- sched:step(): advance one epoch (or step) and set the groups' lr.  Call it after
--- opt:step().
function Scheduler:step()
  local ok, err = pcall(self._set_epoch, self, self.last_epoch + 1)
  if not ok then fail(2, "%s", err) end
end

--- sched:get_lr() -> {lr of group 1, ...}: the lrs set by the last step (a fresh table).
function Scheduler:get_lr()
  return copy(self._last_lr)
end
Scheduler.get_last_lr = Scheduler.get_lr

function Scheduler:_state()
  local s = {kind = self.name, last_epoch = self.last_epoch, base_lrs = copy(self.base_lrs)}
  for k in pairs(self.defaults) do
    if k ~= "after" and k ~= "lr_lambda" then s[k] = copy(self[k]) end
  end
  if self.after then s.after = self.after:_state() end
  return s
end

function Scheduler:_load(s, level)
  if type(s) ~= "table" or s.kind ~= self.name then
    fail(level + 1, "load_state_dict: the checkpoint holds a %s schedule, this is %s",
         type(s) == "table" and tostring(s.kind) or "no", self.name)
  end
  if type(s.base_lrs) ~= "table" or #s.base_lrs ~= #self.optimizer.param_groups then
    fail(level + 1, "load_state_dict: the schedule was saved for %d param groups, the "
         .. "optimizer has %d", type(s.base_lrs) == "table" and #s.base_lrs or 0,
         #self.optimizer.param_groups)
  end
  for k, v in pairs(s) do
    if k ~= "kind" and k ~= "after" and k ~= "base_lrs" and k ~= "last_epoch" then
      if self.defaults[k] == nil then
        fail(level + 1, "load_state_dict: unknown %s field '%s'", self.name, tostring(k))
      end
      self[k] = type(v) == "number" and as_int(v) or copy(v)
    end
  end
  if self.after then
    if s.after == nil then fail(level + 1, "load_state_dict: the checkpoint has no 'after' schedule") end
    self.after:_load(s.after, level + 1)
  end
  self.base_lrs = copy(s.base_lrs)
  for i, group in ipairs(self.optimizer.param_groups) do group.initial_lr = self.base_lrs[i] end
  local e = math.tointeger(s.last_epoch)
  if not e then fail(level + 1, "load_state_dict: bad last_epoch %s", tostring(s.last_epoch)) end
  self:_set_epoch(e)
end

--- sched:state_dict([prefix]) -> meta: {["<prefix>scheduler"] = JSON of the kind, last_epoch,
--- base_lrs and options}.  Strings only, for glimpse.save's metadata (merge it with the
--- optimizer's meta: optim.merge(opt_meta, sched:state_dict())).  LambdaLR's functions are
--- not saved: make the schedule with the same functions before loading.
function Scheduler:state_dict(prefix)
  prefix = prefix or ""
  local ok, s = pcall(to_json, self:_state())
  if not ok then fail(2, "state_dict: %s", s) end
  return {[prefix .. "scheduler"] = s}
end

--- sched:load_state_dict(meta [, prefix]): restore the epoch, base lrs and options, and set
--- the groups' lr for that epoch.
function Scheduler:load_state_dict(meta, prefix)
  prefix = prefix or ""
  if type(meta) ~= "table" then fail(2, "load_state_dict: expected the metadata table") end
  local s = meta[prefix .. "scheduler"]
  if s == nil then
    fail(2, "load_state_dict: no '%sscheduler' entry in the metadata", prefix)
  end
  self:_load(from_json(s, prefix .. "scheduler", 2), 2)
end

local function positive_int(c, self, key, level)
  local v = self[key]
  if type(v) ~= "number" or v ~= math.floor(v) or v < 1 or v == math.huge then
    fail(level + 1, "%s: %s must be a positive integer, got %s", c.name, key, tostring(v))
  end
  self[key] = math.tointeger(v)
end

local function number_opt(c, self, key, level)
  if type(self[key]) ~= "number" then
    fail(level + 1, "%s: %s must be a number, got %s", c.name, key, type(self[key]))
  end
end

--- optim.StepLR(opt, {step_size=, gamma=0.1}): lr = base * gamma^floor(epoch / step_size).
M.StepLR = scheduler_class {
  name = "StepLR",
  defaults = {step_size = REQUIRED, gamma = 0.1},
  check = function(self, level)
    positive_int(M.StepLR, self, "step_size", level + 1)
    number_opt(M.StepLR, self, "gamma", level + 1)
  end,
  lr_at = function(self, base, e) return base * self.gamma ^ (e // self.step_size) end,
}

--- optim.MultiStepLR(opt, {milestones={30, 80}, gamma=0.1}): lr = base * gamma^(number of
--- milestones <= epoch).
M.MultiStepLR = scheduler_class {
  name = "MultiStepLR",
  defaults = {milestones = REQUIRED, gamma = 0.1},
  check = function(self, level)
    if type(self.milestones) ~= "table" then
      fail(level + 1, "MultiStepLR: milestones must be an array of epochs")
    end
    for i, m in ipairs(self.milestones) do
      if type(m) ~= "number" then fail(level + 1, "MultiStepLR: milestone %d is not a number", i) end
    end
    table.sort(self.milestones)
    number_opt(M.MultiStepLR, self, "gamma", level + 1)
  end,
  lr_at = function(self, base, e)
    local n = 0
    for _, m in ipairs(self.milestones) do
      if m <= e then n = n + 1 end
    end
    return base * self.gamma ^ n
  end,
}

--- optim.ExponentialLR(opt, {gamma=}): lr = base * gamma^epoch.
M.ExponentialLR = scheduler_class {
  name = "ExponentialLR",
  defaults = {gamma = REQUIRED},
  check = function(self, level) number_opt(M.ExponentialLR, self, "gamma", level + 1) end,
  lr_at = function(self, base, e) return base * self.gamma ^ e end,
}

--- optim.CosineAnnealingLR(opt, {T_max=, eta_min=0}):
--- lr = eta_min + (base - eta_min) * (1 + cos(pi * epoch / T_max)) / 2  (SGDR without restarts;
--- past T_max it rises again, as PyTorch's does).
M.CosineAnnealingLR = scheduler_class {
  name = "CosineAnnealingLR",
  defaults = {T_max = REQUIRED, eta_min = 0},
  check = function(self, level)
    positive_int(M.CosineAnnealingLR, self, "T_max", level + 1)
    number_opt(M.CosineAnnealingLR, self, "eta_min", level + 1)
  end,
  lr_at = function(self, base, e)
    return self.eta_min + (base - self.eta_min) * (1 + math.cos(math.pi * e / self.T_max)) / 2
  end,
}

--- optim.LambdaLR(opt, {lr_lambda=fn or {fn per group}}): lr = base * fn(epoch).
M.LambdaLR = scheduler_class {
  name = "LambdaLR",
  defaults = {lr_lambda = REQUIRED},
  check = function(self, level)
    local f = self.lr_lambda
    if type(f) == "function" then return end
    if type(f) ~= "table" or #f ~= #self.optimizer.param_groups then
      fail(level + 1, "LambdaLR: lr_lambda must be a function or an array of one function per "
           .. "param group (%d)", #self.optimizer.param_groups)
    end
    for i, fi in ipairs(f) do
      if type(fi) ~= "function" then fail(level + 1, "LambdaLR: lr_lambda[%d] is not a function", i) end
    end
  end,
  lr_at = function(self, base, e, i)
    local f = self.lr_lambda
    if type(f) == "table" then f = f[i] end
    local factor = f(e)
    if type(factor) ~= "number" then
      error("LambdaLR: lr_lambda(" .. e .. ") returned a " .. type(factor) .. ", expected a number", 0)
    end
    return base * factor
  end,
}

--- optim.LinearLR(opt, {start_factor=1/3, end_factor=1, total_iters=5}):
--- lr = base * (start + (end - start) * min(epoch, total_iters) / total_iters).
M.LinearLR = scheduler_class {
  name = "LinearLR",
  defaults = {start_factor = 1 / 3, end_factor = 1.0, total_iters = 5},
  check = function(self, level)
    local c = M.LinearLR
    number_opt(c, self, "start_factor", level + 1)
    number_opt(c, self, "end_factor", level + 1)
    if not (self.start_factor > 0 and self.start_factor <= 1) then
      fail(level + 1, "LinearLR: start_factor must be in (0, 1], got %s", tostring(self.start_factor))
    end
    if not (self.end_factor >= 0 and self.end_factor <= 1) then
      fail(level + 1, "LinearLR: end_factor must be in [0, 1], got %s", tostring(self.end_factor))
    end
    positive_int(c, self, "total_iters", level + 1)
  end,
  lr_at = function(self, base, e)
    local t = math.min(e, self.total_iters)
    return base * (self.start_factor + (self.end_factor - self.start_factor) * t / self.total_iters)
  end,
}

--- optim.LinearWarmup(opt, {warmup_steps=, start_factor=0, after=sched or nil}):
--- for epoch < warmup_steps, lr = base * (start + (1 - start) * epoch / warmup_steps); from
--- then on the `after` schedule (made on the same optimizer, e.g. a CosineAnnealingLR whose
--- T_max counts the steps after warm-up) runs from its own epoch 0, or lr stays at base.
--- The same as PyTorch's SequentialLR([LinearLR(start, 1, warmup_steps), after],
--- {warmup_steps}).  Step only the warm-up schedule, not `after`.
M.LinearWarmup = scheduler_class {
  name = "LinearWarmup",
  defaults = {warmup_steps = REQUIRED, start_factor = 0.0, after = false},
  check = function(self, level)
    local c = M.LinearWarmup
    positive_int(c, self, "warmup_steps", level + 1)
    number_opt(c, self, "start_factor", level + 1)
    if not (self.start_factor >= 0 and self.start_factor <= 1) then
      fail(level + 1, "LinearWarmup: start_factor must be in [0, 1], got %s",
           tostring(self.start_factor))
    end
    local a = self.after
    if a == false then
      self.after = nil
    elseif type(a) ~= "table" or getmetatable(a) == nil or a.lr_at == nil then
      fail(level + 1, "LinearWarmup: after must be a schedule (e.g. optim.CosineAnnealingLR(opt, "
           .. "{...}))")
    elseif a.optimizer ~= self.optimizer then
      fail(level + 1, "LinearWarmup: the after schedule drives another optimizer")
    end
  end,
  lr_at = function(self, base, e, i)
    local w = self.warmup_steps
    if e < w then return base * (self.start_factor + (1 - self.start_factor) * e / w) end
    if not self.after then return base end
    if i == 1 then self.after:_set_epoch(e - w) end
    return self.after._last_lr[i]
  end,
}

return M
