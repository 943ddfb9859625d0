-- tests/test_optim_sched.lua -- glimpse.optim's gradient clipping (optim/clip.lua) and
-- learning-rate schedules (optim/sched.lua) against PyTorch 1.13
-- (tests/fixtures/fixtures_optim.py): clip_grad_norm_ per norm type, the schedulers' lr
-- sequences over two param groups, and a schedule's state_dict resuming the same sequence.
local lu = require "luaunit"
local glimpse = require "glimpse"
local assert_close = require("tests.helpers").assert_close
local optim = glimpse.optim

local T = {}

local LR_TOL = 1e-6           -- schedules: relative (the fixture went through float32)
local CLIP_TOL = 1e-5
local FIXTURES = "tests/fixtures/"

local O = require "tests.optim_helpers"
local flat, param, within, set_grad = O.flat, O.param, O.within, O.set_grad

local function fixture(name)
  return glimpse.load(FIXTURES .. name .. ".safetensors")
end

-- ---------------------------------------------------------------------------------------
-- gradient clipping

local function clip_params(fx)
  local ps = {}
  for i, k in ipairs {"g1", "g2", "g3"} do
    local g = fx["grad." .. k]
    ps[i] = glimpse.zeros(g.shape):requires_grad()
    ps[i].grad = g:clone()
  end
  return ps
end

function T.test_clip_grad_norm_matches_pytorch()
  local fx = fixture("optim_clip")
  for _, c in ipairs {{"2", 2}, {"1", 1}, {"3", 3}, {"inf", math.huge}} do
    local ps = clip_params(fx)
    local total = optim.clip_grad_norm(ps, 1.0, c[2])
    local want = fx["clip." .. c[1] .. ".total"]:item()
    assert_close({total}, {want}, within(CLIP_TOL), "total norm " .. c[1])
    for i, k in ipairs {"g1", "g2", "g3"} do
      assert_close(ps[i].grad, fx["clip." .. c[1] .. "." .. k], CLIP_TOL,
                   "clipped " .. k .. " norm " .. c[1])
    end
    -- after clipping, the norm is max_norm
    assert_close({optim.grad_norm(ps, c[2])}, {1.0}, within(1e-5), "norm after " .. c[1])
  end
end

function T.test_clip_grad_norm_leaves_small_gradients_alone()
  local p, q = param({0, 0}), param({5})
  set_grad(p, {0.3, 0.4})
  local total = optim.clip_grad_norm({p, q}, 1.0, {norm_type = 2})
  assert_close({total}, {0.5}, within(1e-7))
  lu.assertEquals(flat(p.grad), flat(glimpse.tensor({0.3, 0.4})))
  lu.assertEquals(optim.clip_grad_norm({q}, 1.0), 0.0)   -- no gradients at all
end

function T.test_clip_grad_norm_can_refuse_nonfinite_norms()
  local p = param({0, 0})
  set_grad(p, {math.huge, 1})
  local ok, e = pcall(optim.clip_grad_norm, {p}, 1.0, {error_if_nonfinite = true})
  lu.assertFalse(ok)
  lu.assertStrContains(e, "non-finite")
end

function T.test_clip_grad_value_clamps_each_entry()
  local p, q = param({0, 0, 0}), param({0})
  set_grad(p, {-3, 0.5, 2})
  set_grad(q, {-0.1})
  optim.clip_grad_value({p, q}, 1)
  lu.assertEquals(flat(p.grad), {-1, 0.5, 1})
  assert_close(flat(q.grad), {-0.1}, within(1e-7))
end

-- ---------------------------------------------------------------------------------------
-- schedules

local function two_group_sgd()
  return optim.SGD({{params = {param({0})}, lr = 0.1}, {params = {param({0})}, lr = 0.01}},
                   {lr = 0.1})
end

local SCHEDULES = {
  steplr = function(o) return optim.StepLR(o, {step_size = 3, gamma = 0.5}) end,
  multisteplr = function(o) return optim.MultiStepLR(o, {milestones = {2, 5, 5, 9}, gamma = 0.3}) end,
  exponentiallr = function(o) return optim.ExponentialLR(o, {gamma = 0.9}) end,
  cosine = function(o) return optim.CosineAnnealingLR(o, {T_max = 10, eta_min = 0.001}) end,
  linearlr = function(o)
    return optim.LinearLR(o, {start_factor = 0.25, end_factor = 1.0, total_iters = 4})
  end,
  lambdalr = function(o)
    return optim.LambdaLR(o, {lr_lambda = function(e) return 1.0 / (1.0 + 0.5 * e) end})
  end,
  warmup = function(o)
    local after = optim.CosineAnnealingLR(o, {T_max = 10})
    return optim.LinearWarmup(o, {warmup_steps = 5, start_factor = 0.1, after = after})
  end,
}

local function lr_sequence(sched, opt, n)
  local seq = {{opt.param_groups[1].lr, opt.param_groups[2].lr}}
  for e = 1, n do
    sched:step()
    seq[e + 1] = {opt.param_groups[1].lr, opt.param_groups[2].lr}
  end
  return seq
end

function T.test_schedules_match_pytorch_lr_sequences()
  local fx = fixture("optim_sched")
  for name, make in pairs(SCHEDULES) do
    local want = fx["lr." .. name]:totable()
    local opt = two_group_sgd()
    local sched = make(opt)
    local got = lr_sequence(sched, opt, #want - 1)
    for e = 1, #want do
      for g = 1, 2 do
        local d = math.abs(got[e][g] - want[e][g])
        if not (d <= LR_TOL * math.abs(want[e][g]) + 1e-12) then
          lu.fail(string.format("%s epoch %d group %d: lr %.10g, PyTorch %.10g", name, e - 1, g,
                                got[e][g], want[e][g]))
        end
      end
    end
    lu.assertEquals(sched:get_lr(), got[#got], name)
  end
end

function T.test_linear_warmup_without_after_holds_the_base_lr()
  local p = param({0})
  local opt = optim.SGD({p}, {lr = 1.0})
  local s = optim.LinearWarmup(opt, {warmup_steps = 4})
  local seq = {}
  for e = 1, 6 do
    seq[e] = s:get_lr()[1]
    s:step()
  end
  assert_close(seq, {0, 0.25, 0.5, 0.75, 1, 1}, within(1e-12))
end

function T.test_schedule_state_resumes_the_same_lr_sequence()
  for name, make in pairs(SCHEDULES) do
    local opt = two_group_sgd()
    local full = lr_sequence(make(opt), opt, 12)
    local opt1 = two_group_sgd()
    local s1 = make(opt1)
    lr_sequence(s1, opt1, 7)
    local meta = s1:state_dict("sched.")
    local opt2 = two_group_sgd()
    local s2 = make(opt2)
    s2:load_state_dict(meta, "sched.")
    local rest = lr_sequence(s2, opt2, 5)
    for e = 1, 6 do lu.assertEquals(rest[e], full[7 + e], name .. " epoch " .. (6 + e)) end
  end
end


return T
