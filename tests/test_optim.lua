-- tests/test_optim.lua -- glimpse.optim's optimizers (engine/optim.c, bindings/l_optim.c,
-- bindings/glimpse/optim/init.lua) and state_dict; clipping and schedules are
-- tests/test_optim_sched.lua.
--
-- Three kinds of evidence:
--   * each optimizer against a naive double-precision reference of its update rule written
--     here from the formulas (the "hand-computed" updates), on tiny tensors, several steps;
--   * agreement with PyTorch 1.13 (tests/fixtures/fixtures_optim.py): 20-step trajectories on
--     loss = sum((x W^T + b - y)^2), both closed loop (glimpse computes the gradients) and
--     open loop (PyTorch's recorded gradients are fed in, isolating the update rule);
--   * resume exactness: N steps straight == k steps, glimpse.save, glimpse.load into fresh
--     params/optimizer/schedule, N-k steps (bit for bit).
local lu = require "luaunit"
local glimpse = require "glimpse"
local assert_close = require("tests.helpers").assert_close
local optim = glimpse.optim

local T = {}

local HAND_TOL = 2e-6         -- float32 kernel vs double reference, relative (+ same absolute)
local TORCH_CLOSED_TOL = 1e-5 -- relative to the tensor's largest entry, glimpse-computed grads
local TORCH_OPEN_TOL = 5e-6   -- same, with PyTorch's own gradients fed in
local FIXTURES = "tests/fixtures/"
local STEPS = 20

-- ---------------------------------------------------------------------------------------
-- helpers

local O = require "tests.optim_helpers"
local flat, param, within, set_grad = O.flat, O.param, O.within, O.set_grad

local function assert_bits_equal(a, b, msg)
  local x, y = flat(a), flat(b)
  lu.assertEquals(#x, #y, msg)
  for i = 1, #y do
    if x[i] ~= y[i] then
      lu.fail(string.format("%s: entry %d differs: %.17g vs %.17g", msg or "", i, x[i], y[i]))
    end
  end
end

local function tmpfile()
  return os.tmpname() .. ".safetensors"
end

-- f() must raise an error whose message contains pat; returns the message
local function assert_error(pat, f)
  local ok, e = pcall(f)
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(e), pat)
  return tostring(e)
end

-- Run `steps` updates of opt on params with the gradient sequence grads[t][k] (tables);
-- returns the params as flat tables.
local function run(opt, params, grads)
  for t = 1, #grads do
    for k, p in ipairs(params) do set_grad(p, grads[t][k]) end
    opt:step()
  end
  local out = {}
  for k, p in ipairs(params) do out[k] = flat(p) end
  return out
end

-- ---------------------------------------------------------------------------------------
-- naive references: one parameter (a flat array), doubles, written from the formulas

local ref = {}

function ref.sgd(p, grads, o)
  p = {table.unpack(p)}
  local buf
  for t, g in ipairs(grads) do
    for i = 1, #p do
      local d = g[i] + (o.weight_decay or 0) * p[i]
      if (o.momentum or 0) ~= 0 then
        buf = buf or {}
        if t == 1 then buf[i] = d else buf[i] = o.momentum * buf[i] + (1 - (o.dampening or 0)) * d end
        if o.nesterov then d = d + o.momentum * buf[i] else d = buf[i] end
      end
      p[i] = p[i] - o.lr * d
    end
  end
  return p
end

function ref.adam(p, grads, o, decoupled)
  p = {table.unpack(p)}
  local b1, b2 = o.betas and o.betas[1] or 0.9, o.betas and o.betas[2] or 0.999
  local eps, wd = o.eps or 1e-8, o.weight_decay or (decoupled and 1e-2 or 0)
  local m, v, vmax = {}, {}, {}
  for i = 1, #p do m[i], v[i], vmax[i] = 0, 0, 0 end
  for t, g in ipairs(grads) do
    for i = 1, #p do
      local gi = g[i]
      if decoupled then p[i] = p[i] * (1 - o.lr * wd) else gi = gi + wd * p[i] end
      m[i] = b1 * m[i] + (1 - b1) * gi
      v[i] = b2 * v[i] + (1 - b2) * gi * gi
      vmax[i] = math.max(vmax[i], v[i])
      local vv = o.amsgrad and vmax[i] or v[i]
      local mhat = m[i] / (1 - b1 ^ t)
      p[i] = p[i] - o.lr * mhat / (math.sqrt(vv) / math.sqrt(1 - b2 ^ t) + eps)
    end
  end
  return p
end

function ref.rmsprop(p, grads, o)
  p = {table.unpack(p)}
  local a, eps, wd, mom = o.alpha or 0.99, o.eps or 1e-8, o.weight_decay or 0, o.momentum or 0
  local s, ga, buf = {}, {}, {}
  for i = 1, #p do s[i], ga[i], buf[i] = 0, 0, 0 end
  for _, g in ipairs(grads) do
    for i = 1, #p do
      local gi = g[i] + wd * p[i]
      s[i] = a * s[i] + (1 - a) * gi * gi
      local avg
      if o.centered then
        ga[i] = a * ga[i] + (1 - a) * gi
        avg = math.sqrt(s[i] - ga[i] * ga[i]) + eps
      else
        avg = math.sqrt(s[i]) + eps
      end
      if mom > 0 then
        buf[i] = mom * buf[i] + gi / avg
        p[i] = p[i] - o.lr * buf[i]
      else
        p[i] = p[i] - o.lr * gi / avg
      end
    end
  end
  return p
end

function ref.adadelta(p, grads, o)
  p = {table.unpack(p)}
  local rho, eps, wd, lr = o.rho or 0.9, o.eps or 1e-6, o.weight_decay or 0, o.lr or 1.0
  local s, u = {}, {}
  for i = 1, #p do s[i], u[i] = 0, 0 end
  for _, g in ipairs(grads) do
    for i = 1, #p do
      local gi = g[i] + wd * p[i]
      s[i] = rho * s[i] + (1 - rho) * gi * gi
      local delta = math.sqrt(u[i] + eps) / math.sqrt(s[i] + eps) * gi
      u[i] = rho * u[i] + (1 - rho) * delta * delta
      p[i] = p[i] - lr * delta
    end
  end
  return p
end

function ref.adagrad(p, grads, o)
  p = {table.unpack(p)}
  local lr, decay, eps, wd = o.lr or 1e-2, o.lr_decay or 0, o.eps or 1e-10, o.weight_decay or 0
  local s = {}
  for i = 1, #p do s[i] = o.initial_accumulator_value or 0 end
  for t, g in ipairs(grads) do
    local clr = lr / (1 + (t - 1) * decay)
    for i = 1, #p do
      local gi = g[i] + wd * p[i]
      s[i] = s[i] + gi * gi
      p[i] = p[i] - clr * gi / (math.sqrt(s[i]) + eps)
    end
  end
  return p
end

local P0 = {0.5, -1.25, 2.0, 0.0}
local GRADS = {{0.3, -0.7, 1.5, -0.2}, {0.1, -0.4, 2.0, 0.5}, {-0.6, 0.2, 0.9, 0.05},
               {0.25, -0.1, -1.0, 0.4}}

local function check_against_ref(cls, opts, reference, msg)
  local p = param(P0)
  local grads = {}
  for t, g in ipairs(GRADS) do grads[t] = {g} end
  local got = run(cls({p}, opts), {p}, grads)[1]
  assert_close(got, reference(P0, GRADS, opts), within(HAND_TOL), msg)
end

-- ---------------------------------------------------------------------------------------
-- hand-computed updates

function T.test_sgd_plain_step_is_p_minus_lr_g()
  local p = param({1, -2, 3})
  set_grad(p, {0.5, 0.25, -1})
  optim.SGD({p}, {lr = 0.1}):step()
  assert_close(flat(p), {0.95, -2.025, 3.1}, within(HAND_TOL), "sgd")
end

function T.test_sgd_dampening_applies_only_after_the_first_step()
  local p = param({1})
  local opt = optim.SGD({p}, {lr = 1, momentum = 0.5, dampening = 0.5})
  set_grad(p, {1})
  opt:step()            -- buf = g = 1 (no dampening), p = 1 - 1 = 0
  assert_close(flat(p), {0}, within(HAND_TOL), "first step")
  set_grad(p, {1})
  opt:step()            -- buf = 0.5*1 + 0.5*1 = 1, p = -1
  assert_close(flat(p), {-1}, within(HAND_TOL), "second step")
end

function T.test_sgd_variants_match_reference()
  check_against_ref(optim.SGD, {lr = 0.1}, ref.sgd, "plain")
  check_against_ref(optim.SGD, {lr = 0.1, momentum = 0.9, dampening = 0.3, weight_decay = 0.05},
                    ref.sgd, "momentum")
  check_against_ref(optim.SGD, {lr = 0.1, momentum = 0.9, nesterov = true, weight_decay = 0.1},
                    ref.sgd, "nesterov")
end

function T.test_adam_first_step_moves_each_entry_by_lr()
  local p = param({1, 2, -3})
  set_grad(p, {0.01, -5, 100})
  optim.Adam({p}, {lr = 0.1}):step()
  assert_close(flat(p), {0.9, 2.1, -3.1}, within(1e-6), "adam step 1 = lr * sign(g)")
end

function T.test_adam_variants_match_reference()
  check_against_ref(optim.Adam, {lr = 0.1}, ref.adam, "adam")
  check_against_ref(optim.Adam, {lr = 0.1, betas = {0.8, 0.95}, eps = 1e-3, weight_decay = 0.2},
                    ref.adam, "adam l2")
  check_against_ref(optim.Adam, {lr = 0.1, amsgrad = true}, ref.adam, "amsgrad")
  local function adamw(p, g, o) return ref.adam(p, g, o, true) end
  check_against_ref(optim.AdamW, {lr = 0.1}, adamw, "adamw default decay")
  check_against_ref(optim.AdamW, {lr = 0.1, weight_decay = 0.5, amsgrad = true}, adamw,
                    "adamw amsgrad")
end

function T.test_adamw_decay_is_decoupled_from_the_gradient()
  local p = param({2, -4})
  set_grad(p, {0, 0})   -- zero moments: the only change is p *= 1 - lr*wd
  optim.AdamW({p}, {lr = 0.1, weight_decay = 0.5}):step()
  assert_close(flat(p), {2 * 0.95, -4 * 0.95}, within(HAND_TOL), "adamw")
end

function T.test_amsgrad_keeps_the_largest_second_moment()
  local grads = {{{10}}, {{0.1}}, {{0.1}}}
  local a, b = param({0}), param({0})
  local plain = run(optim.Adam({a}, {lr = 0.1}), {a}, grads)[1][1]
  local ams = run(optim.Adam({b}, {lr = 0.1, amsgrad = true}), {b}, grads)[1][1]
  -- the max keeps the denominator large, so the later small gradients move p less
  lu.assertTrue(math.abs(ams) < math.abs(plain))
  assert_close({ams}, ref.adam({0}, {{10}, {0.1}, {0.1}}, {lr = 0.1, amsgrad = true}),
               within(HAND_TOL))
end

function T.test_rmsprop_variants_match_reference()
  check_against_ref(optim.RMSProp, {lr = 0.01}, ref.rmsprop, "plain")
  check_against_ref(optim.RMSProp, {lr = 0.01, centered = true}, ref.rmsprop, "centered")
  check_against_ref(optim.RMSProp, {lr = 0.01, alpha = 0.9, momentum = 0.7, centered = true,
                                    weight_decay = 0.1}, ref.rmsprop, "centered momentum")
  check_against_ref(optim.RMSprop, {lr = 0.02, momentum = 0.5}, ref.rmsprop, "momentum")
end

function T.test_adadelta_matches_reference()
  check_against_ref(optim.AdaDelta, {}, ref.adadelta, "defaults")
  check_against_ref(optim.Adadelta, {lr = 0.5, rho = 0.8, eps = 1e-4, weight_decay = 0.1},
                    ref.adadelta, "options")
end

function T.test_adagrad_matches_reference()
  check_against_ref(optim.Adagrad, {lr = 0.1}, ref.adagrad, "plain")
  check_against_ref(optim.Adagrad, {lr = 0.1, lr_decay = 0.5, weight_decay = 0.1,
                                    initial_accumulator_value = 0.3, eps = 1e-6},
                    ref.adagrad, "options")
end

function T.test_maximize_equals_descending_the_negated_gradient()
  local cases = {
    {optim.SGD, {lr = 0.1, momentum = 0.9}}, {optim.Adam, {lr = 0.1, weight_decay = 0.1}},
    {optim.AdamW, {lr = 0.1}}, {optim.RMSProp, {lr = 0.01, centered = true, momentum = 0.5}},
    {optim.AdaDelta, {}}, {optim.Adagrad, {lr = 0.1}},
  }
  for _, c in ipairs(cases) do
    local a, b = param(P0), param(P0)
    local pos, neg = {}, {}
    for t, g in ipairs(GRADS) do
      pos[t] = {g}
      local n = {}
      for i, x in ipairs(g) do n[i] = -x end
      neg[t] = {n}
    end
    local opts = {}
    for k, v in pairs(c[2]) do opts[k] = v end
    local ga = run(c[1]({a}, c[2]), {a}, pos)[1]
    opts.maximize = true
    local gb = run(c[1]({b}, opts), {b}, neg)[1]
    lu.assertEquals(gb, ga, c[1].name)
  end
end

-- ---------------------------------------------------------------------------------------
-- optimizer mechanics

function T.test_step_skips_parameters_without_gradient()
  local a, b = param({1, 2}), param({3})
  local opt = optim.Adam({a, b}, {lr = 0.1})
  set_grad(a, {1, 1})
  opt:step()
  lu.assertEquals(flat(b), {3})
  lu.assertNil(opt.state[2])
  lu.assertEquals(opt.state[1].step, 1)
end

function T.test_zero_grad_zeroes_or_drops_gradients()
  local a = param({1, 2})
  local opt = optim.SGD({a}, {lr = 0.1})
  set_grad(a, {3, 4})
  opt:zero_grad()
  lu.assertEquals(flat(a.grad), {0, 0})
  opt:zero_grad(true)
  lu.assertNil(a.grad)
end

function T.test_step_calls_the_closure_and_returns_its_loss()
  local w = param({3})
  local opt = optim.SGD({w}, {lr = 0.25})
  local loss = opt:step(function()
    opt:zero_grad()
    local l = (w * w):sum()
    l:backward()
    return l
  end)
  lu.assertEquals(loss:item(), 9)
  assert_close(flat(w), {3 - 0.25 * 6}, within(HAND_TOL))
end

function T.test_param_groups_use_their_own_options()
  local a, b = param({1}), param({1})
  local opt = optim.SGD({{params = {a}, lr = 0.5}, {params = {b}}}, {lr = 0.1})
  lu.assertEquals(opt.param_groups[2].lr, 0.1)
  set_grad(a, {1})
  set_grad(b, {1})
  opt:step()
  assert_close(flat(a), {0.5}, within(HAND_TOL))
  assert_close(flat(b), {0.9}, within(HAND_TOL))
  local c = param({1})
  opt:add_param_group({params = {c}, lr = 1})
  set_grad(c, {1})
  opt:step()
  assert_close(flat(c), {0}, within(HAND_TOL))
end

function T.test_bad_options_are_refused_with_clear_errors()
  local p = param({1})
  local function err(pat, f)
    -- raised at the caller's line (this file), not inside optim.lua
    lu.assertStrContains(assert_error(pat, f), "test_optim.lua")
  end
  err("lr' is required", function() optim.SGD({p}) end)
  err("unknown option 'learning_rate'", function() optim.Adam({p}, {learning_rate = 1}) end)
  err("nesterov", function() optim.SGD({p}, {lr = 0.1, nesterov = true}) end)
  err("beta", function() optim.Adam({p}, {betas = {0.9, 1.0}}) end)
  err("option 'lr' must be a number >= 0", function() optim.Adam({p}, {lr = -1}) end)
  err("empty parameter list", function() optim.Adam({}) end)
  err("more than one parameter group", function() optim.Adam({p, p}) end)
  err("not a leaf", function() optim.Adam({p * 2}) end)
  err("T_max", function() optim.CosineAnnealingLR(optim.SGD({p}, {lr = 1}), {}) end)
end

function T.test_tostring_lists_the_groups()
  local s = tostring(optim.AdamW({param({1})}))
  lu.assertStrContains(s, "AdamW (")
  lu.assertStrContains(s, "weight_decay: 0.01")
end

-- ---------------------------------------------------------------------------------------
-- PyTorch agreement

-- the configurations of fixtures_optim.py's CONFIGS
local CONFIGS = {
  adam = {"Adam", {lr = 0.05}},
  adam_wd_amsgrad = {"Adam", {lr = 0.05, betas = {0.8, 0.99}, weight_decay = 0.1, amsgrad = true}},
  adamw = {"AdamW", {lr = 0.05, weight_decay = 0.1}},
  sgd_momentum = {"SGD", {lr = 0.01, momentum = 0.9, dampening = 0.1, weight_decay = 0.01}},
  sgd_nesterov = {"SGD", {lr = 0.01, momentum = 0.9, nesterov = true}},
  rmsprop = {"RMSProp", {lr = 0.01}},
  rmsprop_centered_momentum = {"RMSProp", {lr = 0.01, alpha = 0.9, momentum = 0.5,
                                           centered = true, weight_decay = 0.01}},
  adadelta = {"AdaDelta", {lr = 1.0, rho = 0.9}},
  adagrad = {"Adagrad", {lr = 0.1, lr_decay = 0.01, weight_decay = 0.01,
                         initial_accumulator_value = 0.1}},
  sgd_groups = {"SGD", nil, {{lr = 0.01, momentum = 0.9}, {lr = 0.05}}},
}

local fixture_cache = {}
local function fixture(name)
  if not fixture_cache[name] then
    fixture_cache[name] = glimpse.load(FIXTURES .. name .. ".safetensors")
  end
  return fixture_cache[name]
end

local function make_opt(cfg, W, b)
  local cls = optim[cfg[1]]
  if cfg[3] then
    local g1, g2 = {params = {W}}, {params = {b}}
    for k, v in pairs(cfg[3][1]) do g1[k] = v end
    for k, v in pairs(cfg[3][2]) do g2[k] = v end
    return cls({g1, g2})
  end
  return cls({W, b}, cfg[2])
end

-- loss = sum((x W^T + b - y)^2), its gradients into W.grad and b.grad
local function problem_grads(fx, W, b)
  local r = glimpse.linear(fx["input.x"], W, b) - fx["input.y"]
  local loss = (r * r):sum()
  loss:backward()
  return loss
end

local function fresh_params(fx)
  return fx["init.W"]:clone():requires_grad(), fx["init.b"]:clone():requires_grad()
end

-- Every configuration, STEPS steps from the fixture's start: set_grads(fx, name, t, W, b, opt)
-- fills W.grad and b.grad before step t; W and b must follow PyTorch's trajectory.
local function check_trajectories(set_grads, tol)
  local fx = fixture("optim_torch")
  for name, cfg in pairs(CONFIGS) do
    local W, b = fresh_params(fx)
    local opt = make_opt(cfg, W, b)
    for t = 1, STEPS do
      set_grads(fx, name, t, W, b, opt)
      opt:step()
      assert_close(W, fx[name .. ".W"]:select(1, t + 1), tol, name .. " W step " .. t)
      assert_close(b, fx[name .. ".b"]:select(1, t + 1), tol, name .. " b step " .. t)
    end
  end
end

function T.test_optimizers_track_pytorch_with_own_gradients()
  check_trajectories(function(fx, _, _, W, b, opt)
    opt:zero_grad()
    problem_grads(fx, W, b)
  end, TORCH_CLOSED_TOL)
end

function T.test_optimizers_match_pytorch_given_its_gradients()
  check_trajectories(function(fx, name, t, W, b)
    W.grad = fx[name .. ".gW"]:select(1, t):clone()
    b.grad = fx[name .. ".gb"]:select(1, t):clone()
  end, TORCH_OPEN_TOL)
end

function T.test_glimpse_gradients_of_the_problem_match_pytorch()
  local fx = fixture("optim_torch")
  local W, b = fresh_params(fx)
  problem_grads(fx, W, b)
  assert_close(W.grad, fx["adam.gW"]:select(1, 1), 1e-6, "dW")
  assert_close(b.grad, fx["adam.gb"]:select(1, 1), 1e-6, "db")
end

-- ---------------------------------------------------------------------------------------
-- state_dict: resuming is exact

local RESUME_CASES = {
  {"Adam", {lr = 0.05, amsgrad = true, weight_decay = 0.1}},
  {"AdamW", {lr = 0.05}},
  {"SGD", {lr = 0.01, momentum = 0.9, nesterov = true}},
  {"RMSProp", {lr = 0.01, momentum = 0.5, centered = true}},
  {"AdaDelta", {}},
  {"Adagrad", {lr = 0.1, lr_decay = 0.01, initial_accumulator_value = 0.1}},
}
local RESUME_N, RESUME_K = 9, 4

local function train(fx, opt, sched, W, b, n)
  for _ = 1, n do
    opt:zero_grad()
    problem_grads(fx, W, b)
    opt:step()
    sched:step()
  end
end

-- the case's optimizer on {W, b}, and a warm-up + cosine schedule driving it
local function make_opt_sched(case, W, b)
  local opt = optim[case[1]]({W, b}, case[2])
  local after = optim.CosineAnnealingLR(opt, {T_max = 6, eta_min = 1e-4})
  return opt, optim.LinearWarmup(opt, {warmup_steps = 3, start_factor = 0.2, after = after})
end

function T.test_resume_from_a_checkpoint_is_bit_exact()
  local fx = fixture("optim_torch")
  for _, case in ipairs(RESUME_CASES) do
    -- straight through
    local W, b = fresh_params(fx)
    local opt, sched = make_opt_sched(case, W, b)
    train(fx, opt, sched, W, b, RESUME_N)

    -- k steps, save everything to one file
    local W1, b1 = fresh_params(fx)
    local opt1, s1 = make_opt_sched(case, W1, b1)
    train(fx, opt1, s1, W1, b1, RESUME_K)
    local ot, om = opt1:state_dict("optim.")
    local path = tmpfile()
    glimpse.save(path, optim.merge({W = W1, b = b1}, ot), optim.merge(om, s1:state_dict()))

    -- fresh everything, load, finish
    local t, meta = glimpse.load(path)
    os.remove(path)
    local W2, b2 = t.W:requires_grad(), t.b:requires_grad()
    local opt2, s2 = make_opt_sched(case, W2, b2)
    opt2:load_state_dict(t, meta, "optim.")
    s2:load_state_dict(meta)
    train(fx, opt2, s2, W2, b2, RESUME_N - RESUME_K)

    assert_bits_equal(W2, W, case[1] .. " W")
    assert_bits_equal(b2, b, case[1] .. " b")
    lu.assertEquals(opt2.state[1].step, RESUME_N)
  end
end

function T.test_state_dict_names_buffers_like_pytorch()
  local a, b = param({1, 2}), param({3})
  local opt = optim.Adam({a, b}, {lr = 0.1, amsgrad = true})
  set_grad(b, {1})
  opt:step()
  local t, meta = opt:state_dict()
  local names = {}
  for k in pairs(t) do names[#names + 1] = k end
  table.sort(names)
  lu.assertEquals(names, {"state.2.exp_avg", "state.2.exp_avg_sq", "state.2.max_exp_avg_sq"})
  lu.assertEquals(meta.optimizer, "Adam")
  lu.assertEquals(meta.state, '{"2":{"step":1}}')
  local groups = require("cjson").decode(meta.param_groups)
  lu.assertEquals(groups[1].params, {1, 2})
  lu.assertEquals(groups[1].lr, 0.1)
end

function T.test_load_state_dict_restores_hyper_parameters_exactly()
  local a = param({1})
  local opt = optim.SGD({a}, {lr = 0.1 + 0.2, momentum = 1 / 3})
  local t, m = opt:state_dict()
  local opt2 = optim.SGD({param({1})}, {lr = 1})
  opt2:load_state_dict(t, m)
  lu.assertEquals(opt2.param_groups[1].lr, 0.1 + 0.2)
  lu.assertEquals(opt2.param_groups[1].momentum, 1 / 3)
end

function T.test_load_state_dict_refuses_mismatches()
  local a = param({1, 2})
  local opt = optim.Adam({a})
  set_grad(a, {1, 1})
  opt:step()
  local t, m = opt:state_dict()
  local err = assert_error
  err("checkpoint is for Adam", function() optim.SGD({param({1, 2})}, {lr = 1}):load_state_dict(t, m) end)
  err("shape [2]", function() optim.Adam({param({1, 2, 3})}):load_state_dict(t, m) end)
  err("has 1 parameters in the checkpoint, 2 here",
      function() optim.Adam({param({1, 2}), param({1})}):load_state_dict(t, m) end)
  err("no 'x.optimizer'", function() optim.Adam({param({1, 2})}):load_state_dict(t, m, "x.") end)
  local bad = {["state.1.velocity"] = glimpse.zeros(2)}
  err("unexpected tensor", function() optim.Adam({param({1, 2})}):load_state_dict(bad, m) end)
end

return T
