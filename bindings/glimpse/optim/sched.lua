--- glimpse.optim's learning-rate schedules (optim/init.lua publishes them: optim.StepLR ...).
--
--   local sched = optim.CosineAnnealingLR(opt, {T_max = 1000})
--   for step = 1, 1000 do ... opt:step(); sched:step() end
--
-- A schedule sets each group's lr from that group's base lr (group.initial_lr, recorded the
-- first time a schedule sees the optimizer) and the epoch counter last_epoch: closed forms,
-- so the lr at a step depends on nothing but (base, epoch) and a resumed run gets the same
-- doubles.  Construction sets epoch 0; sched:step() after opt:step() moves to the next.  The
-- values agree with PyTorch 1.13's schedulers of the same names to float rounding.  Each
-- class's options are one glimpse.options spec, `optim.StepLR.options`.
local check = require "glimpse.check"
local options = require "glimpse.options"
local optim_base = require "glimpse.optim.base"

local fail, copy = check.fail, optim_base.copy
local to_json, from_json, as_int = optim_base.to_json, optim_base.from_json, optim_base.as_int

local S = {}

local Scheduler = {}
Scheduler.__index = Scheduler
S.Scheduler = Scheduler

local function new_scheduler(cls, opt, opts, level)
  if type(opt) ~= "table" or type(opt.param_groups) ~= "table" then
    fail(level + 1, "%s: the first argument must be an optimizer", cls.name)
  end
  local o = cls.options:check(optim_base.whole(cls.options, opts), level + 1)
  local self = setmetatable({optimizer = opt, base_lrs = {}, last_epoch = -1}, cls)
  for _, name in ipairs(cls.options.names) do
    -- milestones are sorted in place: a copy; `after` and lr_lambda stay themselves
    self[name] = name == "milestones" and copy(o[name]) or o[name]
  end
  if cls.check then cls.check(self, level + 1) end
  for i, group in ipairs(opt.param_groups) do
    if group.initial_lr == nil then group.initial_lr = group.lr end
    self.base_lrs[i] = group.initial_lr
  end
  self:step()
  return self
end

-- A class: `cls(opt, opts)` builds a schedule.
local function scheduler_class(spec)
  return optim_base.class(spec, Scheduler, new_scheduler)
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
  for _, k in ipairs(self.options.names) do
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
      if not self.options.by_name[k] then
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

--- optim.StepLR(opt, {step_size=, gamma=0.1}): lr = base * gamma^floor(epoch / step_size).
S.StepLR = scheduler_class {
  name = "StepLR",
  options = options.declare("StepLR", {
    {"step_size", "int", nil, range = {1}, required = true, help = "epochs between decays"},
    {"gamma", "number", 0.1, help = "the factor of each decay"},
  }),
  lr_at = function(self, base, e) return base * self.gamma ^ (e // self.step_size) end,
}

--- optim.MultiStepLR(opt, {milestones={30, 80}, gamma=0.1}): lr = base * gamma^(number of
--- milestones <= epoch).
S.MultiStepLR = scheduler_class {
  name = "MultiStepLR",
  options = options.declare("MultiStepLR", {
    {"milestones", "table", nil, required = true, help = "the epochs of the decays"},
    {"gamma", "number", 0.1, help = "the factor of each decay"},
  }),
  check = function(self, level)
    for i, m in ipairs(self.milestones) do
      if type(m) ~= "number" then
        fail(level + 1, "MultiStepLR: milestone %d is not a number", i)
      end
    end
    table.sort(self.milestones)
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
S.ExponentialLR = scheduler_class {
  name = "ExponentialLR",
  options = options.declare("ExponentialLR", {
    {"gamma", "number", nil, required = true, help = "the factor per epoch"},
  }),
  lr_at = function(self, base, e) return base * self.gamma ^ e end,
}

--- optim.CosineAnnealingLR(opt, {T_max=, eta_min=0}):
--- lr = eta_min + (base - eta_min) * (1 + cos(pi * epoch / T_max)) / 2  (SGDR without restarts;
--- past T_max it rises again, as PyTorch's does).
S.CosineAnnealingLR = scheduler_class {
  name = "CosineAnnealingLR",
  options = options.declare("CosineAnnealingLR", {
    {"T_max", "int", nil, range = {1}, required = true, help = "epochs of the half cosine"},
    {"eta_min", "number", 0, help = "the lowest lr"},
  }),
  lr_at = function(self, base, e)
    return self.eta_min + (base - self.eta_min) * (1 + math.cos(math.pi * e / self.T_max)) / 2
  end,
}

--- optim.LambdaLR(opt, {lr_lambda=fn or {fn per group}}): lr = base * fn(epoch).
S.LambdaLR = scheduler_class {
  name = "LambdaLR",
  options = options.declare("LambdaLR", {
    {"lr_lambda", "function|table", nil, required = true,
     help = "fn(epoch) -> factor, or one fn per param group"},
  }),
  check = function(self, level)
    local f = self.lr_lambda
    if type(f) == "function" then return end
    if #f ~= #self.optimizer.param_groups then
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
S.LinearLR = scheduler_class {
  name = "LinearLR",
  options = options.declare("LinearLR", {
    {"start_factor", "number", 1 / 3, range = {0, 1}, help = "the factor at epoch 0, in (0, 1]"},
    {"end_factor", "number", 1.0, range = {0, 1}, help = "the factor from total_iters on"},
    {"total_iters", "int", 5, range = {1}, help = "epochs of the linear change"},
  }),
  check = function(self, level)
    if not (self.start_factor > 0) then
      fail(level + 1, "LinearLR: start_factor must be in (0, 1], got %s",
           tostring(self.start_factor))
    end
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
S.LinearWarmup = scheduler_class {
  name = "LinearWarmup",
  options = options.declare("LinearWarmup", {
    {"warmup_steps", "int", nil, range = {1}, required = true, help = "epochs of the warm-up"},
    {"start_factor", "number", 0.0, range = {0, 1}, help = "the factor at epoch 0"},
    {"after", "table|boolean", false,
     help = "the schedule after the warm-up, on the same optimizer (false: none)"},
  }),
  check = function(self, level)
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

return S
