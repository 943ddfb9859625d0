--- glimpse.optim's learning-rate schedules (this file is glimpse/optim_sched.lua; optim.lua
-- puts them into glimpse.optim, so use them as optim.StepLR etc.).
--
--   local sched = optim.CosineAnnealingLR(opt, {T_max = 1000})
--   for step = 1, 1000 do ... opt:step(); sched:step() end
--
-- A schedule sets each group's lr from that group's base lr (group.initial_lr, recorded the
-- first time a schedule sees the optimizer) and the epoch counter last_epoch: closed forms,
-- so the lr at a step depends on nothing but (base, epoch) and a resumed run gets the same
-- doubles.  Construction sets epoch 0 (the lr the first opt:step() uses); sched:step() after
-- opt:step() moves to the next.  The values agree with PyTorch 1.13's schedulers of the same
-- names (which compute them recursively) to float rounding.
local optim_base = require "glimpse.optim.base"

local fail, copy, REQUIRED = optim_base.fail, optim_base.copy, optim_base.REQUIRED
local to_json, from_json, as_int = optim_base.to_json, optim_base.from_json, optim_base.as_int

local S = {}

local Scheduler = {}
Scheduler.__index = Scheduler
S.Scheduler = Scheduler

local function new_scheduler(cls, opt, opts, level)
  if type(opt) ~= "table" or type(opt.param_groups) ~= "table" then
    fail(level + 1, "%s: the first argument must be an optimizer", cls.name)
  end
  opts = optim_base.check_options(cls, opts, level + 1)
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
S.StepLR = scheduler_class {
  name = "StepLR",
  defaults = {step_size = REQUIRED, gamma = 0.1},
  check = function(self, level)
    positive_int(S.StepLR, self, "step_size", level + 1)
    number_opt(S.StepLR, self, "gamma", level + 1)
  end,
  lr_at = function(self, base, e) return base * self.gamma ^ (e // self.step_size) end,
}

--- optim.MultiStepLR(opt, {milestones={30, 80}, gamma=0.1}): lr = base * gamma^(number of
--- milestones <= epoch).
S.MultiStepLR = scheduler_class {
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
    number_opt(S.MultiStepLR, self, "gamma", level + 1)
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
  defaults = {gamma = REQUIRED},
  check = function(self, level) number_opt(S.ExponentialLR, self, "gamma", level + 1) end,
  lr_at = function(self, base, e) return base * self.gamma ^ e end,
}

--- optim.CosineAnnealingLR(opt, {T_max=, eta_min=0}):
--- lr = eta_min + (base - eta_min) * (1 + cos(pi * epoch / T_max)) / 2  (SGDR without restarts;
--- past T_max it rises again, as PyTorch's does).
S.CosineAnnealingLR = scheduler_class {
  name = "CosineAnnealingLR",
  defaults = {T_max = REQUIRED, eta_min = 0},
  check = function(self, level)
    positive_int(S.CosineAnnealingLR, self, "T_max", level + 1)
    number_opt(S.CosineAnnealingLR, self, "eta_min", level + 1)
  end,
  lr_at = function(self, base, e)
    return self.eta_min + (base - self.eta_min) * (1 + math.cos(math.pi * e / self.T_max)) / 2
  end,
}

--- optim.LambdaLR(opt, {lr_lambda=fn or {fn per group}}): lr = base * fn(epoch).
S.LambdaLR = scheduler_class {
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
S.LinearLR = scheduler_class {
  name = "LinearLR",
  defaults = {start_factor = 1 / 3, end_factor = 1.0, total_iters = 5},
  check = function(self, level)
    local c = S.LinearLR
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
S.LinearWarmup = scheduler_class {
  name = "LinearWarmup",
  defaults = {warmup_steps = REQUIRED, start_factor = 0.0, after = false},
  check = function(self, level)
    local c = S.LinearWarmup
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

return S
