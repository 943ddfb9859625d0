-- tests/test_attention.lua -- the attention library: engine/ops_attention.c,
-- engine/ops_attention_mh.c, engine/ops_attention_ntm.c, bindings/l_attention.c, glimpse.attention, the nn attention
-- modules and glimpse.viz.
--
-- Three kinds of checks: agreement with PyTorch (tests/fixtures/attn_*.safetensors, made by
-- tests/fixtures/fixtures_attention.py), finite-difference gradient checks of every score,
-- mode, normaliser and regulariser, and properties (weights sum to 1, masked and out-of-window
-- positions get exactly 0, NTM shifts move a weighting by one slot, pointers never choose a
-- position twice, REINFORCE's gradient is unbiased).
local lu = require "luaunit"
local glimpse = require "glimpse"
local helpers = require "tests.helpers"
local assert_close = helpers.assert_close

local att = glimpse.attention
local nn = glimpse.nn

local T = {}

local FIXTURE_RTOL = 1e-4      -- agreement with PyTorch, relative to the tensor's scale
local SUM_TOL = 1e-5           -- weights summing to 1 in float32
local REF_TOL = 1e-5           -- fused op vs the same maths composed from core ops
local MC_SAMPLES = 40000       -- Monte-Carlo samples for the REINFORCE check
local MC_TOL = 0.02            -- its tolerance (the estimate's std is about 0.004)
local GC = {eps = 1e-2, atol = 2e-2, rtol = 3e-2}   -- gradcheck settings (float32)

-- ---------------------------------------------------------------------------------------
-- helpers

local function shape(t) return table.concat(t.shape, "x") end

-- assert_close's tolerance here: max |a - b| <= rtol * max(1, max |b|)
local function scaled(rtol) return {rtol = rtol, floor = 1} end

local function leaf(...) return glimpse.randn(...):requires_grad() end

local function mask3x6()
  return glimpse.tensor{{1, 1, 1, 1, 1, 1}, {1, 1, 1, 0, 0, 0}, {1, 1, 1, 1, 1, 0}}
end

local function gradcheck(fn, inputs, what) return helpers.gradcheck(fn, inputs, GC, what) end

-- score parameters for every score function, Dq=5, Dk=4, H=6
local function score_params(s, dq, dk, H)
  if s == "general" then return {W = leaf(dq, dk)}
  elseif s == "additive" then return {W = leaf(H, dq), b = leaf(H), U = leaf(H, dk), v = leaf(H)}
  elseif s == "concat" then return {W = leaf(H, dq + dk), v = leaf(H)}
  elseif s == "location" then return {W = leaf(8, dq), b = leaf(8)}
  elseif s == "cosine" then return {W = leaf(dk, dq), Wb = leaf(1, dq), bb = leaf(1)}
  elseif s == "conv" then      -- width 3: F1 (H, 3 dk), gate Wq (H, dq), F2 (1, 3 H); small,
    local function small(...)  -- as the products of three layers would saturate the sigmoid
      return (glimpse.randn(...) * 0.3):requires_grad()
    end
    return {F1 = small(H, 3 * dk), b1 = small(H), Wq = small(H, dq), F2 = small(1, 3 * H)}
  end
  return {}
end

local function qdim(s, dq, dk) return (s == "dot" or s == "scaled_dot") and dk or dq end

local function param_list(p)
  local out = {}
  for _, k in ipairs({"W", "b", "U", "v", "Wb", "bb", "F1", "b1", "Wq", "F2"}) do
    if glimpse.is_tensor(p[k]) then out[#out + 1] = p[k] end
  end
  return out
end

-- ---------------------------------------------------------------------------------------
-- PyTorch fixtures: one decoder step of each fused score

local function check_step_fixture(name, run)
  local f = glimpse.load("tests/fixtures/" .. name .. ".safetensors")
  local inputs = {}
  for k, v in pairs(f) do
    local role, n = k:match("^(%a+)%.(.+)$")
    if (role == "input" or role == "weight") and n ~= "mask" then inputs[n] = v:requires_grad() end
  end
  local ctx, alpha = run(inputs, f["input.mask"])
  assert_close(ctx, f["output.ctx"], scaled(FIXTURE_RTOL), name .. " ctx")
  assert_close(alpha, f["output.alpha"], scaled(FIXTURE_RTOL), name .. " alpha")
  local loss = (ctx * f["dout.ctx"]):sum() + (alpha * f["dout.alpha"]):sum()
  loss:backward()
  for n, t in pairs(inputs) do
    assert_close(t.grad, f["grad." .. n], scaled(FIXTURE_RTOL), name .. " grad of " .. n)
  end
end

function T.test_additive_step_matches_pytorch()
  check_step_fixture("attn_additive", function(x, mask)
    local p = {W = x.W, b = x.b, U = x.U, v = x.v}
    return att.step("additive", p, att.precompute("additive", p, x.keys), x.q, x.values, mask)
  end)
end

function T.test_general_step_matches_pytorch()
  check_step_fixture("attn_general", function(x, mask)
    local p = {W = x.W}
    return att.step("general", p, att.precompute("general", p, x.keys), x.q, x.values, mask)
  end)
end

function T.test_dot_step_matches_pytorch()
  check_step_fixture("attn_dot", function(x, mask)
    return att.dot(x.q, x.keys, x.values, mask)
  end)
end

function T.test_scaled_dot_step_matches_pytorch()
  check_step_fixture("attn_scaled_dot", function(x, mask)
    return att.scaled_dot(x.q, x.keys, x.values, mask)
  end)
end

local function check_mha_fixture(name, causal, self_attn)
  local f = glimpse.load("tests/fixtures/" .. name .. ".safetensors")
  local d = f["input.query"].shape[3]
  local mha = nn.MultiheadAttention(d, 2, {causal = causal})
  mha:load_state_dict({in_proj_weight = f["weight.in_proj_weight"],
                       in_proj_bias = f["weight.in_proj_bias"],
                       ["out_proj.weight"] = f["weight.out_proj.weight"],
                       ["out_proj.bias"] = f["weight.out_proj.bias"]})
  local q = f["input.query"]:requires_grad()
  local k, v
  if not self_attn then k, v = f["input.key"]:requires_grad(), f["input.value"]:requires_grad() end
  local out, w = mha(q, k, v, f["input.mask"])
  assert_close(out, f["output.out"], scaled(FIXTURE_RTOL), name .. " out")
  assert_close(w, f["output.weights"], scaled(FIXTURE_RTOL), name .. " weights")
  ;(out * f["dout.out"]):sum():backward()
  assert_close(q.grad, f["grad.query"], scaled(FIXTURE_RTOL), name .. " grad query")
  if k then
    assert_close(k.grad, f["grad.key"], scaled(FIXTURE_RTOL), name .. " grad key")
    assert_close(v.grad, f["grad.value"], scaled(FIXTURE_RTOL), name .. " grad value")
  end
  for pname, p in mha:named_parameters() do
    assert_close(p.grad, f["grad." .. pname], scaled(FIXTURE_RTOL), name .. " grad " .. pname)
  end
end

function T.test_multihead_cross_attention_with_padding_matches_pytorch()
  check_mha_fixture("attn_mha_cross", false, false)
end

function T.test_multihead_causal_self_attention_matches_pytorch()
  check_mha_fixture("attn_mha_causal", true, true)
end

function T.test_multihead_self_attention_with_padding_matches_pytorch()
  check_mha_fixture("attn_mha_self", false, true)
end

function T.test_multihead_parameter_names_are_pytorchs()
  local names = {}
  for n, p in nn.MultiheadAttention(8, 2):named_parameters() do names[#names + 1] = n .. ":" .. shape(p) end
  lu.assertEquals(names, {"in_proj_weight:24x8", "in_proj_bias:24", "out_proj.weight:8x8",
                          "out_proj.bias:8"})
end

-- ---------------------------------------------------------------------------------------
-- every score function: fused step == composed reference, gradients, sums, masks

function T.test_every_score_fused_step_matches_composed_reference()
  glimpse.manual_seed(5)
  local B, L, dq, dk, dv = 3, 6, 5, 4, 3
  local keys, values, mask = glimpse.randn(B, L, dk), glimpse.randn(B, L, dv), mask3x6()
  for _, s in ipairs(att.SCORES) do
    local p = score_params(s, dq, dk, 6)
    local q = glimpse.randn(B, qdim(s, dq, dk))
    local cache = att.precompute(s, p, keys)
    local ctx, alpha = att.step(s, p, cache, q, values, mask)
    local ref = att.masked_softmax(att.scores(s, p, cache, q), mask)
    assert_close(alpha, ref, scaled(REF_TOL), s .. " alpha")
    assert_close(ctx, att.context(ref, values), scaled(REF_TOL), s .. " ctx")
  end
end

function T.test_every_score_gradients_match_finite_differences()
  glimpse.manual_seed(6)
  local B, L, dq, dk, dv = 2, 5, 4, 3, 3
  local mask = glimpse.tensor{{1, 1, 1, 1, 1}, {1, 1, 1, 0, 0}}
  for _, s in ipairs(att.SCORES) do
    local p = score_params(s, dq, dk, 5)
    local q, keys, values = leaf(B, qdim(s, dq, dk)), leaf(B, L, dk), leaf(B, L, dv)
    local inputs = {q, keys, values}
    for _, t in ipairs(param_list(p)) do inputs[#inputs + 1] = t end
    gradcheck(function()
      local ctx, alpha = att.step(s, p, att.precompute(s, p, keys), q, values, mask)
      return glimpse.cat({ctx, alpha}, 2)
    end, inputs, s)
  end
end

function T.test_weights_sum_to_one_and_masked_positions_get_exact_zero()
  glimpse.manual_seed(7)
  local B, L, dq, dk = 3, 6, 5, 4
  local keys, mask = glimpse.randn(B, L, dk) * 3, mask3x6()
  local m = mask:totable()
  for _, s in ipairs(att.SCORES) do
    for _, norm in ipairs({"softmax", "sigmoid"}) do
      local p = score_params(s, dq, dk, 6)
      local q = glimpse.randn(B, qdim(s, dq, dk)) * 3
      local _, alpha = att.step(s, p, att.precompute(s, p, keys), q, keys, mask,
                                {normaliser = norm, temperature = 0.5})
      local a = alpha:totable()
      for b = 1, B do
        local sum = 0
        for l = 1, L do
          if m[b][l] == 0 then lu.assertEquals(a[b][l], 0, s .. "/" .. norm .. ": masked weight") end
          sum = sum + a[b][l]
        end
        lu.assertAlmostEquals(sum, 1, SUM_TOL, s .. "/" .. norm .. ": weights sum")
      end
    end
  end
end

function T.test_fully_masked_row_is_all_zeros_not_nan()
  local keys = glimpse.randn(2, 3, 4)
  local ctx, alpha = att.dot(glimpse.randn(2, 4), keys, keys, {{0, 0, 0}, {1, 1, 0}})
  lu.assertEquals(alpha:totable()[1], {0, 0, 0})
  lu.assertEquals(ctx:totable()[1], {0, 0, 0, 0})
  lu.assertFalse(alpha:has_nan())
end

function T.test_temperature_and_sigmoid_normaliser_gradients()
  glimpse.manual_seed(8)
  local B, L, H, dv = 2, 5, 4, 3
  local wq, uk, v, values = leaf(B, H), leaf(B, L, H), leaf(H), leaf(B, L, dv)
  local mask = glimpse.tensor{{1, 1, 1, 1, 0}, {1, 1, 1, 1, 1}}
  for _, o in ipairs({{temperature = 0.5}, {normaliser = "sigmoid"},
                      {normaliser = "sigmoid", temperature = 2}}) do
    gradcheck(function()
      local ctx, alpha = att.additive(wq, uk, v, values, mask, o)
      return glimpse.cat({ctx, alpha}, 2)
    end, {wq, uk, v, values}, "additive " .. (o.normaliser or "softmax") .. " T=" .. (o.temperature or 1))
    local _, alpha = att.additive(wq, uk, v, values, mask, o)
    local ref = att.masked_softmax(att.additive_scores(wq, uk, v), mask, o)
    assert_close(alpha, ref, scaled(REF_TOL), "normaliser reference")
  end
end

function T.test_lower_temperature_sharpens()
  glimpse.manual_seed(9)
  local q, keys = glimpse.randn(1, 4), glimpse.randn(1, 6, 4)
  local _, a1 = att.dot(q, keys, keys, nil, {temperature = 1})
  local _, a2 = att.dot(q, keys, keys, nil, {temperature = 0.25})
  lu.assertTrue(a2:max():item() > a1:max():item())
end

function T.test_sharpen_gradients_and_exactness()
  glimpse.manual_seed(10)
  local w = glimpse.softmax(glimpse.randn(2, 5), 2):detach():requires_grad()
  local gamma = glimpse.tensor{1.5, 3}:requires_grad()
  gradcheck(function(a, g) return att.sharpen(a, g) end, {w, gamma}, "sharpen")
  local s = att.sharpen(glimpse.tensor{{0.5, 0.25, 0.25, 0}}, 2):totable()[1]
  lu.assertAlmostEquals(s[1], 0.25 / 0.375, SUM_TOL)
  lu.assertEquals(s[4], 0)
end

-- ---------------------------------------------------------------------------------------
-- modes through nn.Attention

local MODE_SCORES = {soft = "additive", hard = "general", ["local-m"] = "general",
                     ["local-p"] = "dot", location = "additive", monotonic = "general"}

function T.test_every_mode_gradients_match_finite_differences()
  glimpse.manual_seed(11)
  local B, L, dq, dk = 2, 6, 4, 4
  local mask = glimpse.tensor{{1, 1, 1, 1, 1, 1}, {1, 1, 1, 1, 0, 0}}
  for _, mode in ipairs(att.MODES) do
    if mode ~= "hard" then   -- hard: the sampled path is checked by the REINFORCE tests
      local a = nn.Attention{score = MODE_SCORES[mode], mode = mode, query = dq, key = dk,
                             hidden = 5, window = 2, coverage = mode == "location",
                             noise = 0}            -- monotonic: no training noise here
      if a.v then glimpse.no_grad(function() a.v:normal_(0, 1) end) end
      local q1, q2, keys = leaf(B, dq), leaf(B, dq), leaf(B, L, dk)
      local inputs = {q1, q2, keys}
      for _, p in ipairs(a:parameters()) do inputs[#inputs + 1] = p end
      gradcheck(function()
        local c1, a1, st = a(q1, keys, nil, mask)
        local c2, a2 = a(q2, keys, nil, mask, st)   -- second step: uses t, prev alpha, coverage
        return glimpse.cat({c1, a1, c2, a2}, 2)
      end, inputs, "mode " .. mode)
    end
  end
end

function T.test_local_weights_are_zero_outside_the_window()
  glimpse.manual_seed(12)
  local B, L, D = 2, 12, 2
  local keys = glimpse.randn(B, L, 4)
  for _, mode in ipairs({"local-m", "local-p"}) do
    local a = nn.Attention{score = "dot", mode = mode, query = 4, key = 4, window = D}
    local st
    for t = 1, 5 do
      local _, alpha
      _, alpha, st = a(glimpse.randn(B, 4), keys, nil, nil, st)
      local pos = st.position
      local p = type(pos) == "number" and {pos, pos} or pos:totable()
      for b, row in ipairs(alpha:totable()) do
        for l, w in ipairs(row) do
          if math.abs(l - p[b]) > D then
            lu.assertEquals(w, 0, string.format("%s step %d: weight at %d, p=%.2f", mode, t, l, p[b]))
          end
        end
      end
      if mode == "local-m" then lu.assertEquals(pos, t) end
    end
  end
end

function T.test_local_prior_is_the_gaussian_with_sigma_half_the_window()
  local prior, window = att.local_prior(glimpse.tensor{3.5}, 1, 8, 4)
  local p = prior:totable()[1]
  for l = 1, 8 do
    lu.assertAlmostEquals(p[l], math.exp(-(l - 3.5) ^ 2 / (2 * 2 ^ 2)), 1e-6)
  end
  lu.assertEquals(window:totable()[1], {1, 1, 1, 1, 1, 1, 1, 0})
end

function T.test_local_p_position_is_differentiable()
  glimpse.manual_seed(13)
  local q, Wp, vp = leaf(2, 3), leaf(4, 3), leaf(4)
  local lengths = glimpse.tensor{7, 5}
  gradcheck(function()
    local p = att.predict_position(q, Wp, vp, lengths)
    local prior = att.local_prior(p, 2, 7, 2)
    return prior
  end, {q, Wp, vp}, "local-p position")
end

function T.test_location_features_are_a_zero_padded_convolution()
  local prev = glimpse.tensor{{0, 1, 0, 0}}
  local F = glimpse.tensor{{1, 2, 3}}          -- one filter of width 3
  local f = att.location_features(prev, F):reshape(1, 4):totable()[1]
  -- f_l = F1 prev_(l-1) + F2 prev_l + F3 prev_(l+1)
  lu.assertEquals(f, {3, 2, 1, 0})
  local p2, F2 = leaf(2, 5), leaf(3, 3)
  gradcheck(function(a, b) return att.location_features(a, b) end, {p2, F2}, "location features")
end

function T.test_state_caches_projected_keys_across_steps()
  local a = nn.Attention{score = "additive", query = 3, key = 4, hidden = 5}
  local keys = glimpse.randn(2, 6, 4)
  local st = a:precompute(keys)
  local cache = st.cache
  local _, _, st2 = a(glimpse.randn(2, 3), keys, nil, nil, st)
  local _, _, st3 = a(glimpse.randn(2, 3), nil, nil, nil, st2)
  lu.assertIs(st3.cache, cache)
  lu.assertEquals(st3.t, 2)
  lu.assertEquals(shape(st3.coverage), "2x6")
  local _, _, fresh = a(glimpse.randn(2, 3), glimpse.randn(2, 6, 4))
  lu.assertEquals(fresh.t, 1)
end

function T.test_location_score_refuses_too_long_inputs()
  local a = nn.Attention{score = "location", query = 3, key = 4, max_len = 5}
  lu.assertErrorMsgContains("at most 5 positions", function() a(glimpse.randn(1, 3), glimpse.randn(1, 6, 4)) end)
end

function T.test_bad_configuration_errors_name_the_problem()
  lu.assertErrorMsgContains("nn.Attention: unknown score 'bogus' (one of dot,", function()
    nn.Attention{score = "bogus", query = 2}
  end)
  lu.assertErrorMsgContains("nn.Attention: unknown mode 'bogus' (one of soft,", function()
    nn.Attention{mode = "bogus", query = 2}
  end)
  lu.assertErrorMsgContains("query == key", function() nn.Attention{score = "dot", query = 2, key = 3} end)
  lu.assertErrorMsgContains("additive or concat", function()
    nn.Attention{score = "dot", mode = "location", query = 2}
  end)
  lu.assertErrorMsgContains("attn_dot", function()
    att.dot(glimpse.randn(2, 3), glimpse.randn(2, 4, 5), glimpse.randn(2, 4, 1))
  end)
  lu.assertErrorMsgContains("mask", function()
    att.dot(glimpse.randn(2, 3), glimpse.randn(2, 4, 3), glimpse.randn(2, 4, 1), glimpse.ones(2, 5))
  end)
end

-- ---------------------------------------------------------------------------------------
-- hard attention and REINFORCE

function T.test_reinforce_surrogate_gradient_is_unbiased()
  -- alpha = softmax(theta) over 4 positions; reward r(s) fixed per position.  The surrogate's
  -- gradient, averaged over MC_SAMPLES samples, must match -d/dtheta E[r] = -d/dtheta sum a r.
  glimpse.manual_seed(14)
  local r = {1.0, -0.5, 2.0, 0.25}
  local theta = glimpse.tensor{{0.3, -0.2, 0.1, 0.5}}:requires_grad()
  local N = MC_SAMPLES
  local alpha = glimpse.softmax(theta, 2):expand(N, 4)
  local values = glimpse.zeros(N, 4, 1)
  local _, idx, logp = att.sample(alpha, values)
  local rt = glimpse.tensor(r)
  local reward = rt:index_select(1, idx:reshape(N))
  local loss = att.reinforce_loss(reward, logp, {baseline = 0.5})
  loss:backward()
  local mc = theta.grad:totable()[1]
  local th = glimpse.tensor{{0.3, -0.2, 0.1, 0.5}}:requires_grad()
  ;(-(glimpse.softmax(th, 2) * rt):sum()):backward()
  local exact = th.grad:totable()[1]
  for j = 1, 4 do lu.assertAlmostEquals(mc[j], exact[j], MC_TOL, "component " .. j) end
end

function T.test_sample_never_picks_masked_positions_and_logp_is_differentiable()
  glimpse.manual_seed(15)
  local alpha = glimpse.softmax(glimpse.randn(500, 5), 2, glimpse.tensor{{1, 0, 1, 0, 1}})
  local values = glimpse.arange(5):reshape(1, 5, 1):expand(500, 5, 1)
  local ctx, idx = att.sample(alpha, values)
  for _, i in ipairs(idx:reshape(500):totable()) do lu.assertTrue(i == 1 or i == 3 or i == 5) end
  lu.assertEquals(ctx:reshape(500):totable(), idx:reshape(500):totable())
  local theta = leaf(3, 4)
  gradcheck(function(t)
    glimpse.manual_seed(99)
    local a = glimpse.softmax(t, 2)
    local _, _, logp, H = att.sample(a, glimpse.zeros(3, 4, 1))
    return glimpse.cat({logp, H}, 1)
  end, {theta}, "log-probability and entropy of a sample")
end

function T.test_baseline_is_a_moving_average_and_entropy_bonus_lowers_loss()
  local b = att.baseline(0.9)
  lu.assertEquals(b:update(2), 2)
  lu.assertAlmostEquals(b:update(1), 1.9, 1e-12)
  local logp, H = glimpse.zeros(3), glimpse.ones(3)
  local l0 = att.reinforce_loss(glimpse.ones(3), logp, {entropy = H, entropy_weight = 0})
  local l1 = att.reinforce_loss(glimpse.ones(3), logp, {entropy = H, entropy_weight = 0.1})
  lu.assertAlmostEquals(l1:item(), l0:item() - 0.1, 1e-6)
end

function T.test_hard_mode_samples_and_can_use_the_expected_context()
  glimpse.manual_seed(16)
  local keys = glimpse.randn(4, 5, 3)
  local a = nn.Attention{score = "dot", mode = "hard", query = 3, key = 3}
  local ctx, alpha, st = a(glimpse.randn(4, 3), keys)
  local idx = st.sample:reshape(4):totable()
  for b = 1, 4 do
    assert_close(ctx[b], keys[b][math.tointeger(idx[b])], scaled(0), "sampled annotation")
  end
  lu.assertEquals(shape(st.logps[1]), "4")
  local logp, H = a:reinforce_terms(st)
  lu.assertTrue(logp:max():item() <= 0)
  lu.assertTrue(H:min():item() >= 0)
  local soft = nn.Attention{score = "dot", mode = "hard", query = 3, key = 3, soft_prob = 1}
  local q = glimpse.randn(4, 3)
  local c2, a2 = soft(q, keys)
  assert_close(c2, att.context(a2, keys), scaled(REF_TOL), "expected context")
  soft:evaluate()
  local c3, a3 = soft(q, keys)
  local am = a3:argmax(2):totable()
  for b = 1, 4 do
    assert_close(c3[b], keys[b][math.tointeger(am[b])], scaled(0),
                 "argmax annotation in evaluate()")
  end
  lu.assertNotNil(c2 and a2 and ctx and alpha)
end

function T.test_region_argmax_picks_the_densest_window_not_the_peak_cell()
  -- a 4x4 grid: one peaked cell (0.2) at row 1, column 4, and a 3x3 block of 0.08 around
  -- row 3, column 2 (0.72 in all): the argmax is the peak, the 3x3 window the block's centre
  local rows = {}
  for l = 1, 16 do rows[l] = 0.005 end
  rows[4] = 0.2
  for r = 2, 4 do for c = 1, 3 do rows[(r - 1) * 4 + c] = 0.08 end end
  local alpha = glimpse.tensor({rows, rows})
  lu.assertEquals(alpha:argmax(2):totable(), {4, 4})
  lu.assertEquals(att.region_argmax(alpha, {grid = {4, 4}}):totable(), {{10}, {10}})
  lu.assertEquals(att.region_argmax(alpha, {grid = {4, 4}, size = 1}):totable(), {{4}, {4}})
  -- the default grid is a row: windows of 3 positions along it
  local seq = glimpse.tensor({{0.3, 0, 0, 0.25, 0.25, 0.2}})
  lu.assertEquals(att.region_argmax(seq):totable(), {{5}})
  lu.assertEquals(att.region_argmax(seq, {size = 1}):totable(), {{1}})
end

function T.test_region_argmax_extra_cells_compete_with_the_windows_mass()
  -- a 3x3 grid and one cell after it: the 3x3 window at the centre holds all the grid's mass
  local function row(grid_each, extra)
    local r = {}
    for l = 1, 9 do r[l] = grid_each end
    r[10] = extra
    return r
  end
  local alpha = glimpse.tensor({row(0.09, 0.19), row(0.05, 0.55), row(0.1, 0.1)})
  -- 0.81 in the window against 0.19; 0.45 against 0.55; 0.9 against 0.1
  lu.assertEquals(att.region_argmax(alpha, {grid = {3, 3}, extra = 1}):totable(), {{5}, {10}, {5}})
  -- size 1: the extra cell against single cells (the plain argmax of the row)
  lu.assertEquals(att.region_argmax(alpha, {grid = {3, 3}, size = 1, extra = 1}):totable(),
                  {{10}, {10}, {1}})
  local ok, err = pcall(att.region_argmax, alpha, {grid = {3, 3}, extra = 10})
  lu.assertFalse(ok)
  lu.assertStrContains(err, "attention.region_argmax: extra must be an integer in [0, 10) (alpha [3,10]), got 10")
  ok, err = pcall(att.region_argmax, alpha, {grid = {3, 3}})
  lu.assertFalse(ok)
  lu.assertStrContains(err, "h * w = L = 10 (alpha [3,10]), got {3,3}")
end

function T.test_region_argmax_checks_the_grid_and_the_window()
  local alpha = glimpse.softmax(glimpse.randn(2, 6), 2)
  local ok, err = pcall(att.region_argmax, alpha, {grid = {2, 2}})
  lu.assertFalse(ok)
  lu.assertStrContains(err, "attention.region_argmax: grid must be {h, w} with h * w = L = 6 (alpha [2,6]), got {2,2}")
  ok, err = pcall(att.region_argmax, alpha, {grid = {2, 3}, size = 2})
  lu.assertFalse(ok)
  lu.assertStrContains(err, "size must be a positive odd integer, got 2")
end

function T.test_hard_mode_region_rule_reads_the_window_centre_in_evaluate()
  glimpse.manual_seed(18)
  local keys = glimpse.randn(3, 9, 4)
  local a = nn.Attention{score = "dot", mode = "hard", query = 4, key = 4, hard_eval = "region"}
  a:evaluate()
  local q = glimpse.randn(3, 4)
  local st = a:precompute(keys, keys, nil)
  st.grid = {3, 3}
  local ctx, alpha = a(q, keys, keys, nil, st)
  local idx = att.region_argmax(alpha, {grid = {3, 3}}):reshape(3):totable()
  for b = 1, 3 do
    assert_close(ctx[b], keys[b][math.tointeger(idx[b])], scaled(0), "the window's centre")
  end
end

-- ---------------------------------------------------------------------------------------
-- regularisers

function T.test_doubly_stochastic_penalty_value_and_gradient()
  -- two steps over three positions: sums over t are {1, 0.5, 0.5}
  local alphas = glimpse.tensor{{{1, 0, 0}, {0, 0.5, 0.5}}}
  lu.assertAlmostEquals(att.doubly_stochastic(alphas):item(), 0.5, 1e-6)
  lu.assertAlmostEquals(att.doubly_stochastic(alphas, {mask = {{1, 1, 0}}}):item(), 0.25, 1e-6)
  glimpse.manual_seed(17)
  local e = leaf(2, 3, 4)
  gradcheck(function(x)
    return att.doubly_stochastic(glimpse.softmax(x, 3), {mask = {{1, 1, 1, 0}, {1, 1, 1, 1}},
                                                         tgt_mask = {{1, 1, 0}, {1, 1, 1}}})
  end, {e}, "doubly stochastic")
end

function T.test_coverage_vector_and_penalty()
  local alphas = {glimpse.tensor{{0.5, 0.5, 0}}, glimpse.tensor{{0.5, 0, 0.5}}}
  lu.assertEquals(att.coverage(alphas):totable(), {{{0, 0, 0}, {0.5, 0.5, 0}}})
  -- step 2: min(0.5, 0.5) + min(0, 0.5) + min(0.5, 0) = 0.5
  lu.assertAlmostEquals(att.coverage_penalty(alphas):item(), 0.5, 1e-6)
  glimpse.manual_seed(18)
  local e = leaf(2, 3, 4)
  gradcheck(function(x) return att.coverage_penalty(glimpse.softmax(x, 3)) end, {e}, "coverage")
end

-- ---------------------------------------------------------------------------------------
-- multi-head

function T.test_multihead_causal_weights_are_zero_above_the_diagonal()
  glimpse.manual_seed(19)
  local mha = nn.MultiheadAttention(8, 4, {causal = true})
  local _, w = mha(glimpse.randn(2, 5, 8), nil, nil, {{1, 1, 1, 1, 1}, {1, 1, 1, 0, 0}})
  for b, rows in ipairs(w:totable()) do
    for i, row in ipairs(rows) do
      local sum = 0
      for j, x in ipairs(row) do
        if j > i or (b == 2 and j > 3) then lu.assertEquals(x, 0) end
        sum = sum + x
      end
      lu.assertAlmostEquals(sum, 1, SUM_TOL)
    end
  end
end

function T.test_multihead_gradients_match_finite_differences()
  glimpse.manual_seed(20)
  local mha = nn.MultiheadAttention(4, 2)
  local q, kv = leaf(2, 3, 4), leaf(2, 4, 4)
  local inputs = {q, kv}
  for _, p in ipairs(mha:parameters()) do inputs[#inputs + 1] = p end
  gradcheck(function()
    local out, w = mha(q, kv, kv, {{1, 1, 1, 1}, {1, 1, 0, 0}})
    return glimpse.cat({out:reshape(2, 12), w:reshape(2, 12)}, 2)
  end, inputs, "multi-head")
end

function T.test_multihead_self_attention_gradients_match_finite_differences()
  -- the self-attention path: one projection, one permute for q, k and v together
  glimpse.manual_seed(22)
  local mha = nn.MultiheadAttention(4, 2, {causal = true})
  local x = leaf(2, 3, 4)
  local inputs = {x}
  for _, p in ipairs(mha:parameters()) do inputs[#inputs + 1] = p end
  gradcheck(function() return (mha(x)) end, inputs, "self-attention")
end

function T.test_multihead_need_weights_false_skips_the_weights_only()
  glimpse.manual_seed(23)
  local mha = nn.MultiheadAttention(8, 2)
  local x = glimpse.randn(2, 5, 8)
  local out, w = mha(x)
  local out2, w2 = mha(x, nil, nil, nil, {need_weights = false})
  lu.assertNotNil(w)
  lu.assertNil(w2)
  assert_close(out2, out, scaled(0), "output")
end

function T.test_multihead_fused_self_attention_matches_the_unfused_path()
  -- the fused op (heads read in place from the packed projection) against the general path
  -- (heads permuted into copies, gl_attn_mh_probs, a batched matmul): outputs, weights and
  -- every gradient, with and without causal and padding masks and the weights
  local B, Tn, d, h = 3, 5, 12, 3
  local mask = {{1, 1, 1, 1, 1}, {1, 1, 0, 0, 0}, {1, 1, 1, 1, 0}}
  for _, causal in ipairs({false, true}) do
    for _, m in ipairs({false, true}) do
      for _, need in ipairs({true, false}) do
        glimpse.manual_seed(31)
        local mha = nn.MultiheadAttention(d, h, {causal = causal})
        glimpse.no_grad(function() mha.in_proj_bias:uniform_(-0.1, 0.1) end)
        local x = glimpse.randn(B, Tn, d)
        local dout, dw = glimpse.randn(B, Tn, d), glimpse.randn(B, Tn, Tn)
        local res = {}
        for i, fused in ipairs({true, false}) do
          mha:zero_grad()
          local xi = x:clone():requires_grad()
          local out, w = att.multi_head(xi, nil, nil, {
            heads = h, in_proj_weight = mha.in_proj_weight, in_proj_bias = mha.in_proj_bias,
            out_weight = mha.out_proj.weight, out_bias = mha.out_proj.bias},
            {mask = m and mask or nil, causal = causal, need_weights = need, fused = fused})
          local loss = (out * dout):sum()
          if need then loss = loss + (w * dw):sum() end
          loss:backward()
          res[i] = {out = out:detach(), w = w and w:detach(), gx = xi.grad,
                    gW = mha.in_proj_weight.grad:clone(), gb = mha.in_proj_bias.grad:clone(),
                    gO = mha.out_proj.weight.grad:clone()}
        end
        local what = string.format("causal %s mask %s weights %s", causal, m, need)
        for _, k in ipairs({"out", "w", "gx", "gW", "gb", "gO"}) do
          if res[2][k] then assert_close(res[1][k], res[2][k], scaled(REF_TOL), what .. " " .. k) end
        end
        if not need then lu.assertNil(res[1].w) end
      end
    end
  end
end

function T.test_multihead_fused_op_gradients_match_finite_differences()
  -- the raw op, both outputs (the context and the per-head probabilities) differentiated
  glimpse.manual_seed(32)
  local qkv = leaf(2, 4, 12)       -- d = 4, 2 heads of 2
  local mask = glimpse.tensor{{1, 1, 1, 1}, {1, 1, 1, 0}}
  for _, causal in ipairs({false, true}) do
    gradcheck(function()
      local ctx, p = glimpse._attention.mh_packed(qkv, mask, 2, causal, 0.7, true)
      return glimpse.cat({ctx:reshape(2, 16), p:reshape(2, 32)}, 2)
    end, {qkv}, "mh_packed causal " .. tostring(causal))
  end
end

function T.test_multihead_fused_op_rejects_bad_shapes()
  local ap = glimpse._attention
  local ok, msg = pcall(ap.mh_packed, glimpse.randn(2, 3, 10), nil, 2, false, 1, false)
  lu.assertFalse(ok)
  lu.assertStrContains(msg, "should be (B,T,3d)")
  ok, msg = pcall(ap.mh_packed, glimpse.randn(2, 3, 12), nil, 3, false, 1, false)
  lu.assertFalse(ok)
  lu.assertStrContains(msg, "not a multiple of 3 heads")
  ok, msg = pcall(ap.mh_packed, glimpse.randn(2, 3, 12), glimpse.ones(2, 4), 2, false, 1, false)
  lu.assertFalse(ok)
  lu.assertStrContains(msg, "key padding mask")
end

-- ---------------------------------------------------------------------------------------
-- pointer networks

function T.test_pointer_never_selects_a_chosen_or_padded_position()
  glimpse.manual_seed(21)
  local B, L = 3, 6
  local ptr = nn.Pointer{query = 4, key = 5, hidden = 6}
  local keys = glimpse.randn(B, L, 5)
  local mask = mask3x6()
  local st = ptr:precompute(keys, mask)
  local chosen
  local lens = {6, 3, 5}
  for step = 1, 3 do
    local logits, probs
    logits, probs, st = ptr(glimpse.randn(B, 4), nil, nil, chosen, st)
    local pick = probs:multinomial(1)
    local ch = chosen and chosen:totable() or nil
    local pr = probs:totable()
    for b = 1, B do
      for l = 1, L do
        if (ch and ch[b][l] == 1) or l > lens[b] then lu.assertEquals(pr[b][l], 0) end
      end
      local i = pick:totable()[b][1]
      lu.assertTrue(i <= lens[b] and not (ch and ch[b][i] == 1), "picked a forbidden position")
    end
    local greedy = logits:argmax(2):reshape(B, 1)
    chosen = nn.Pointer.mark(chosen, greedy, B, L)
  end
  lu.assertEquals(chosen:sum(2):totable(), {3, 3, 3})
end

function T.test_pointer_gradients_match_finite_differences()
  glimpse.manual_seed(22)
  local ptr = nn.Pointer{query = 3, key = 3, hidden = 4}
  local q, keys = leaf(2, 3), leaf(2, 4, 3)
  local inputs = {q, keys}
  for _, p in ipairs(ptr:parameters()) do inputs[#inputs + 1] = p end
  gradcheck(function()
    local _, probs = ptr(q, keys, {{1, 1, 1, 1}, {1, 1, 1, 0}}, {{0, 1, 0, 0}, {0, 0, 0, 0}})
    return probs
  end, inputs, "pointer")
end

-- ---------------------------------------------------------------------------------------
-- NTM addressing

function T.test_ntm_shift_by_one_with_large_gamma_moves_a_one_hot_weighting()
  local N = 5
  for start = 1, N do
    local w = {0, 0, 0, 0, 0}
    w[start] = 1
    local s = glimpse.tensor{{0, 0, 1}}            -- shifts -1, 0, +1: all weight on +1
    local shifted = att.ntm.shift(glimpse.tensor{w}, s)
    local out = att.ntm.sharpen(shifted + 1e-3, 50):totable()[1]
    local want = start % N + 1                     -- wraps from N to 1
    for i = 1, N do
      lu.assertAlmostEquals(out[i], i == want and 1 or 0, 1e-6, "slot " .. i .. " from " .. start)
    end
  end
end

function T.test_ntm_addressing_steps_gradients()
  glimpse.manual_seed(23)
  local B, N, D = 2, 5, 3
  local key, mem, beta = leaf(B, D), leaf(B, N, D), glimpse.tensor{1.5, 0.7}:requires_grad()
  local g = glimpse.tensor{0.3, 0.8}:requires_grad()
  local s = glimpse.softmax(glimpse.randn(B, 3), 2):detach():requires_grad()
  local gamma = glimpse.tensor{1.5, 2.5}:requires_grad()
  local wprev = glimpse.softmax(glimpse.randn(B, N), 2):detach():requires_grad()
  gradcheck(function()
    return att.ntm.address({key = key, beta = beta, g = g, s = s, gamma = gamma}, mem, wprev)
  end, {key, mem, beta, g, s, gamma, wprev}, "NTM address")
  local w = glimpse.softmax(glimpse.randn(B, N), 2):detach():requires_grad()
  local e = glimpse.rand(B, D):requires_grad()
  local a = leaf(B, D)
  gradcheck(function()
    local m2 = att.ntm.write(mem, w, e, a)
    return glimpse.cat({m2:reshape(B, N * D), att.ntm.read(w, m2)}, 2)
  end, {mem, w, e, a}, "NTM read/write")
end

function T.test_ntm_content_weighting_prefers_the_matching_row_and_write_erases()
  local mem = glimpse.tensor{{{1, 0}, {0, 1}, {-1, 0}}}
  local w = att.ntm.content(glimpse.tensor{{0, 2}}, mem, 20):totable()[1]
  lu.assertTrue(w[2] > 0.99)
  local m2 = att.ntm.write(mem, glimpse.tensor{{0, 1, 0}}, glimpse.tensor{{1, 1}},
                           glimpse.tensor{{5, 6}})
  lu.assertEquals(m2:totable()[1], {{1, 0}, {5, 6}, {-1, 0}})
  lu.assertEquals(att.ntm.read(glimpse.tensor{{0, 1, 0}}, m2):totable(), {{5, 6}})
end

-- ---------------------------------------------------------------------------------------
-- pictures

function T.test_alignment_png_and_svg_have_labels_and_the_right_size()
  local dir = os.tmpname()
  os.remove(dir)
  os.execute("mkdir -p '" .. dir .. "'")
  local a = glimpse.softmax(glimpse.randn(4, 3), 2)
  local viz = glimpse.viz
  local img = viz.alignment_image(a, "123", {"3", "2", "1", "<end>"}, {cell = 20})
  lu.assertEquals(img.shape[1], 3)
  lu.assertTrue(img.shape[2] >= 4 * 20 and img.shape[3] >= 3 * 20)
  local png = viz.alignment(a, "123", {"3", "2", "1", "<end>"}, dir .. "/a.png", {cell = 20})
  local back = glimpse.image.load(png)
  lu.assertEquals(back.shape, img.shape)
  local svg = viz.alignment(a, {"1", "2", "3"}, {"3", "2", "1", "<end>"}, dir .. "/a.svg")
  local f = assert(io.open(svg))
  local text = f:read("a")
  f:close()
  lu.assertStrContains(text, "<svg")
  lu.assertStrContains(text, "&lt;end&gt;")
  lu.assertEquals(select(2, text:gsub("<title>", "")), 12)   -- one rect per cell
  lu.assertErrorMsgContains("source tokens", function() viz.alignment_image(a, "12", "abcd") end)
  os.execute("rm -rf '" .. dir .. "'")
end

function T.test_draw_text_puts_ink_where_the_text_is()
  local img = glimpse.viz.draw_text(glimpse.ones(3, 12, 40), "A", 1, 1, {scale = 1})
  -- "A" is 5x8 at (1,1): the rest of the image stays white
  lu.assertEquals(img:narrow(3, 8, 33):min():item(), 1)
  lu.assertEquals(img:narrow(2, 1, 8):narrow(3, 2, 5):min():item(), 0)
end

return T
