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
--
-- The module is four files: this one (the Optimizer machinery, the optimizers, merge),
-- optim_sched.lua (schedules), optim_clip.lua (clipping) and optim_base.lua (what they share:
-- errors, copies, exact JSON, option checks, the class factory).  Every public name is
-- glimpse.optim's.
local glimpse = require "glimpse"
local base = require "glimpse.optim.base"

local fail, copy, REQUIRED = base.fail, base.copy, base.REQUIRED
local to_json, from_json, as_int = base.to_json, base.from_json, base.as_int

local M = {}

-- ---------------------------------------------------------------------------------------
-- helpers

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

-- ---------------------------------------------------------------------------------------
-- Optimizer: the shared machinery.  A class gives: name, defaults (REQUIRED marks an option
-- without one), limits (ranges of numeric options other than [0, inf)), check(group) (extra
-- validation, optional), buffers (state tensor names, in order), update(p, g, state, group).

local Optimizer = {}
Optimizer.__index = Optimizer
M.Optimizer = Optimizer

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
  opts = base.check_options(cls, opts, level + 1)
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
  local cls = base.class(spec, Optimizer, new_optimizer)
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
-- checkpoints holding several state_dicts

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
-- the other parts: schedules and clipping

for _, part in ipairs {"glimpse.optim.sched", "glimpse.optim.clip"} do
  for k, v in pairs(require(part)) do
    assert(M[k] == nil, "glimpse.optim: two parts define " .. k)
    M[k] = v
  end
end

return M
