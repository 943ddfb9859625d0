--- glimpse.optim -- optimizers, gradient clipping and learning-rate schedules.
--
--   local opt = optim.Adam(model:parameters(), {lr = 1e-3})
--   local sched = optim.CosineAnnealingLR(opt, {T_max = 1000})
--   for step = 1, 1000 do
--     opt:zero_grad(); loss(model):backward(); optim.clip_grad_norm(model:parameters(), 1.0)
--     opt:step(); sched:step()
--   end
--
-- PyTorch 1.13's update rules (the arithmetic is engine/optim.c); here the books: param
-- groups, lazily made state, a state_dict that resumes bit for bit.  Each class's options
-- are a glimpse.options spec (optim.Adam.options).  Schedules: optim/sched.lua; clipping:
-- optim/clip.lua.
local glimpse = require "glimpse"
local check = require "glimpse.check"
local options = require "glimpse.options"
local base = require "glimpse.optim.base"

local fail, copy = check.fail, base.copy
local to_json, from_json, as_int = base.to_json, base.from_json, base.as_int

local M = {}

local function same_shape(a, b)
  local sa, sb = a.shape, b.shape
  if #sa ~= #sb then return false end
  for i = 1, #sa do
    if sa[i] ~= sb[i] then return false end
  end
  return true
end

-- ---------------------------------------------------------------------------------------
-- Optimizer: the shared machinery.  A class gives: name, options (a glimpse.options spec;
-- a group takes each option from itself, the constructor's options or the default),
-- check(group) (extra validation, optional), buffers (state tensor names, in order),
-- update(p, g, state, group).

local Optimizer = {}
Optimizer.__index = Optimizer
M.Optimizer = Optimizer

local EXTRA_GROUP_KEYS = {params = true, name = true, initial_lr = true}

-- Fill a group from the constructor's options and the defaults and check it; returns a new
-- table (the caller's is not modified).
local function make_group(cls, src, opts, level)
  local spec = cls.options
  local group = {}
  for k, v in pairs(src) do
    if not spec.by_name[k] and not EXTRA_GROUP_KEYS[k] then
      fail(level + 1, "%s: unknown option '%s' in a param group%s", cls.name, tostring(k),
           check.did_you_mean(tostring(k), spec.names))
    end
    group[k] = k == "params" and v or copy(v)
  end
  for _, e in ipairs(spec.entries) do
    local k = e.name
    if group[k] == nil then
      if opts[k] ~= nil then group[k] = copy(opts[k]) else group[k] = copy(e.default) end
    end
    if group[k] == nil then
      fail(level + 1, "%s: option '%s' is required (e.g. %s(params, {%s = 0.01}))", cls.name, k,
           cls.name, k)
    end
    spec:check_value(k, group[k], level + 1)
  end
  if cls.check then cls.check(group, level + 1) end
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
  local spec = cls.options
  spec:known(opts, level + 1)
  opts = opts or {}
  for _, e in ipairs(spec.entries) do
    if opts[e.name] ~= nil then spec:check_value(e.name, opts[e.name], level + 1) end
  end
  local self = setmetatable({param_groups = {}, state = {}, defaults = {}}, cls)
  for _, e in ipairs(spec.entries) do
    local v = opts[e.name]
    if v == nil then v = e.default end
    self.defaults[e.name] = copy(v)
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
             check.shape(t), i, check.shape(params[i]))
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
  options = options.declare("SGD", {
    {"lr", "number", nil, range = {0}, required = true, help = "learning rate"},
    {"momentum", "number", 0, range = {0}, help = "momentum factor"},
    {"dampening", "number", 0, help = "dampening of the momentum"},
    {"weight_decay", "number", 0, range = {0}, help = "L2 penalty, added to the gradient"},
    {"nesterov", "boolean", false, help = "Nesterov momentum (momentum > 0, no dampening)"},
    {"maximize", "boolean", false, help = "maximise the objective instead"},
  }),
  buffers = {"momentum_buffer"},
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

local function adam_options(owner, weight_decay, decay_help)
  return options.declare(owner, {
    {"lr", "number", 1e-3, range = {0}, help = "learning rate"},
    {"betas", "table", {0.9, 0.999}, help = "{beta1, beta2}, each in [0, 1): the averages' decay"},
    {"eps", "number", 1e-8, range = {0}, help = "added to the denominator"},
    {"weight_decay", "number", weight_decay, range = {0}, help = decay_help},
    {"amsgrad", "boolean", false, help = "the maximum of the squared averages (AMSGrad)"},
    {"maximize", "boolean", false, help = "maximise the objective instead"},
  })
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
  options = adam_options("Adam", 0, "L2 penalty, added to the gradient"),
  buffers = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"},
  check = function(g, level) check_adam(M.Adam, g, level + 1) end,
  update = adam_update(false),
}

--- optim.AdamW(params, {lr=1e-3, betas={0.9, 0.999}, eps=1e-8, weight_decay=1e-2,
--- amsgrad=false, maximize=false}).  Decoupled decay: p *= 1 - lr*weight_decay each step.
M.AdamW = optimizer_class {
  name = "AdamW",
  options = adam_options("AdamW", 1e-2, "decoupled decay: p *= 1 - lr*weight_decay"),
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
  options = options.declare("RMSProp", {
    {"lr", "number", 1e-2, range = {0}, help = "learning rate"},
    {"alpha", "number", 0.99, range = {0}, help = "smoothing of the squared gradient's average"},
    {"eps", "number", 1e-8, range = {0}, help = "added to the denominator"},
    {"weight_decay", "number", 0, range = {0}, help = "L2 penalty, added to the gradient"},
    {"momentum", "number", 0, range = {0}, help = "momentum factor"},
    {"centered", "boolean", false, help = "divide by the gradient's estimated variance"},
    {"maximize", "boolean", false, help = "maximise the objective instead"},
  }),
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
  options = options.declare("AdaDelta", {
    {"lr", "number", 1.0, range = {0}, help = "scale of the update"},
    {"rho", "number", 0.9, range = {0, 1}, help = "smoothing of the running averages"},
    {"eps", "number", 1e-6, range = {0}, help = "added inside the square roots"},
    {"weight_decay", "number", 0, range = {0}, help = "L2 penalty, added to the gradient"},
    {"maximize", "boolean", false, help = "maximise the objective instead"},
  }),
  buffers = {"square_avg", "acc_delta"},
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
  options = options.declare("Adagrad", {
    {"lr", "number", 1e-2, range = {0}, help = "learning rate"},
    {"lr_decay", "number", 0, range = {0}, help = "lr / (1 + (t-1)*lr_decay)"},
    {"weight_decay", "number", 0, range = {0}, help = "L2 penalty, added to the gradient"},
    {"initial_accumulator_value", "number", 0, range = {0}, help = "start of the sum of squares"},
    {"eps", "number", 1e-10, range = {0}, help = "added to the denominator"},
    {"maximize", "boolean", false, help = "maximise the objective instead"},
  }),
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
