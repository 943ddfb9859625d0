-- tests/test_rnn.lua -- the recurrent family: fused cells and sequences (engine/ops_rnn.c,
-- bindings/l_rnn.c) and the modules nn.RNNCell/LSTMCell/GRUCell, nn.RNN/LSTM/GRU
-- (bindings/glimpse/nn/rnn.lua).
--
-- Oracles: a double-precision Lua implementation of the three recurrences (forward, and
-- gradients by central differences in double precision), PyTorch fixtures made by
-- tests/fixtures/fixtures_rnn.py (cells; 2-layer bidirectional LSTM/GRU over padded
-- sequences), and properties: padding never leaks, a sequence op equals a loop of cells,
-- the reverse direction starts at each sample's own last step.
local lu = require "luaunit"
local glimpse = require "glimpse"
local assert_close = require("tests.helpers").assert_close
local nn = glimpse.nn

local T = {}

local FWD_TOL = 2e-6        -- float32 op vs double reference (values are O(1))
local GRAD_RTOL = 1e-4      -- analytic (float32) vs double central differences
local GRAD_ATOL = 2e-5
local FD_EPS = 1e-6         -- double-precision finite-difference step
local TORCH_RTOL = 1e-4     -- agreement with the PyTorch fixtures (relative)
local TORCH_ATOL = 1e-6
local MATH_RTOL = 1e-6      -- the engine's fast exp/tanh/sigmoid against libm-grade doubles
local FIXTURES = "tests/fixtures/"

-- ---------------------------------------------------------------------------------------
-- helpers

local function flat(t) return t:reshape(t:numel()):totable() end

local function tensor_of(data, shape, grad)
  local t = glimpse.tensor(data):reshape(table.unpack(shape))
  if grad then t:requires_grad() end
  return t
end

local function randn_flat(n)
  return flat(glimpse.randn(n))
end

-- assert_close's tolerance here: |a_i - b_i| <= rtol |b_i| + atol for every element
local function within(rtol, atol) return {rtol = rtol, atol = atol, per_element = true} end
local TORCH_CLOSE = within(TORCH_RTOL, TORCH_ATOL)

local function assert_equal_exactly(a, b, what)
  assert_close(a, b, within(0, 0), what)
end

local function sigmoid(x) return 1 / (1 + math.exp(-x)) end

local function tanh(x)
  if x > 20 then return 1 elseif x < -20 then return -1 end
  local e = math.exp(2 * x)
  return (e - 1) / (e + 1)
end

-- ---------------------------------------------------------------------------------------
-- the double-precision reference: one layer, one direction, flat 1-based arrays
--   p = {kind = "lstm"|"gru"|"tanh"|"relu", B, T, H, xp (B*T*G), h0, c0 (B*H or nil),
--        w (G*H), b (G or nil), mask (B*T or nil), reverse}
-- returns y (B*T*H, 0 where masked), hn, cn (B*H)

local GATES = {lstm = 4, gru = 3, tanh = 1, relu = 1}

local function ref_seq(p)
  local B, Tn, H, kind = p.B, p.T, p.H, p.kind
  local G = GATES[kind] * H
  local h, c = {}, {}
  for i = 1, B * H do
    h[i] = p.h0 and p.h0[i] or 0
    c[i] = p.c0 and p.c0[i] or 0
  end
  local y = {}
  for i = 1, B * Tn * H do y[i] = 0 end
  for s = 0, Tn - 1 do
    local t = p.reverse and Tn - 1 - s or s
    for b = 0, B - 1 do
      if not p.mask or p.mask[b * Tn + t + 1] ~= 0 then
        -- hp[g] = (h W_hh^T + b_hh)[g],  xg[g] = xp[b, t, g]
        local hp, xg = {}, {}
        for g = 0, G - 1 do
          local acc = p.b and p.b[g + 1] or 0
          for k = 0, H - 1 do acc = acc + p.w[g * H + k + 1] * h[b * H + k + 1] end
          hp[g] = acc
          xg[g] = p.xp[(b * Tn + t) * G + g + 1]
        end
        local nh, nc = {}, {}
        for j = 0, H - 1 do
          local hj, cj = h[b * H + j + 1], c[b * H + j + 1]
          if kind == "lstm" then
            local i = sigmoid(xg[j] + hp[j])
            local f = sigmoid(xg[H + j] + hp[H + j])
            local g = tanh(xg[2 * H + j] + hp[2 * H + j])
            local o = sigmoid(xg[3 * H + j] + hp[3 * H + j])
            nc[j] = f * cj + i * g
            nh[j] = o * tanh(nc[j])
          elseif kind == "gru" then
            local r = sigmoid(xg[j] + hp[j])
            local z = sigmoid(xg[H + j] + hp[H + j])
            local n = tanh(xg[2 * H + j] + r * hp[2 * H + j])
            nh[j] = (1 - z) * n + z * hj
          else
            local a = xg[j] + hp[j]
            nh[j] = kind == "tanh" and tanh(a) or math.max(a, 0)
          end
        end
        for j = 0, H - 1 do
          h[b * H + j + 1] = nh[j]
          if nc[j] then c[b * H + j + 1] = nc[j] end
          y[(b * Tn + t) * H + j + 1] = nh[j]
        end
      end
    end
  end
  return y, h, c
end

-- Build the problem: random flat inputs for one kind; shapes for the tensors
local function make_problem(kind, B, Tn, H, opts)
  opts = opts or {}
  local G = GATES[kind] * H
  local p = {kind = kind, B = B, T = Tn, H = H, reverse = opts.reverse}
  p.xp = randn_flat(B * Tn * G)
  p.w = flat(glimpse.randn(G * H) * 0.6)
  if opts.bias ~= false then p.b = randn_flat(G) end
  if opts.h0 ~= false then p.h0 = randn_flat(B * H) end
  if kind == "lstm" and opts.c0 ~= false then p.c0 = randn_flat(B * H) end
  if opts.lengths then
    p.mask = {}
    for b = 0, B - 1 do
      for t = 0, Tn - 1 do p.mask[b * Tn + t + 1] = t < opts.lengths[b + 1] and 1 or 0 end
    end
  end
  return p
end

-- the names of the differentiable inputs of a problem, with their shapes
local function inputs_of(p, seq)
  local G = GATES[p.kind] * p.H
  local list = {{"xp", seq and {p.B, p.T, G} or {p.B, G}}}
  if p.h0 then list[#list + 1] = {"h0", {p.B, p.H}} end
  if p.c0 then list[#list + 1] = {"c0", {p.B, p.H}} end
  list[#list + 1] = {"w", {G, p.H}}
  if p.b then list[#list + 1] = {"b", {G}} end
  return list
end

-- run glimpse's op on tensors made from p; returns outputs {y=, h=, c=} (y only for seq)
local function run_glimpse(p, tens, seq)
  local mask
  if p.mask then
    mask = seq and tensor_of(p.mask, {p.B, p.T}) or tensor_of(p.mask, {p.B})
  end
  local k = p.kind
  if seq then
    if k == "lstm" then
      local y, h, c = glimpse.lstm_seq(tens.xp, tens.h0, tens.c0, tens.w, tens.b, mask, p.reverse)
      return {y = y, h = h, c = c}
    elseif k == "gru" then
      local y, h = glimpse.gru_seq(tens.xp, tens.h0, tens.w, tens.b, mask, p.reverse)
      return {y = y, h = h}
    end
    local y, h = glimpse.rnn_seq(tens.xp, tens.h0, tens.w, tens.b, mask, p.reverse, k)
    return {y = y, h = h}
  end
  if k == "lstm" then
    local h, c = glimpse.lstm_cell(tens.xp, tens.h0, tens.c0, tens.w, tens.b, mask)
    return {h = h, c = c}
  elseif k == "gru" then
    return {h = glimpse.gru_cell(tens.xp, tens.h0, tens.w, tens.b, mask)}
  end
  return {h = glimpse.rnn_cell(tens.xp, tens.h0, tens.w, tens.b, mask, k)}
end

-- Compare forward values and every input's gradient with the double reference.
local function check_against_reference(p, seq)
  local list = inputs_of(p, seq)
  local tens = {}
  for _, e in ipairs(list) do tens[e[1]] = tensor_of(p[e[1]], e[2], true) end
  local out = run_glimpse(p, tens, seq)
  local y, h, c = ref_seq(p)
  if seq then assert_close(out.y, y, within(0, FWD_TOL), p.kind .. " y") end
  assert_close(out.h, h, within(0, FWD_TOL), p.kind .. " h")
  if out.c then assert_close(out.c, c, within(0, FWD_TOL), p.kind .. " c") end

  -- loss = sum(out * proj) over the outputs, the same projection on both sides
  local proj = {}
  for _, k in ipairs({"y", "h", "c"}) do
    if out[k] then proj[k] = randn_flat(out[k]:numel()) end
  end
  local loss
  for k, pr in pairs(proj) do
    local term = (out[k] * tensor_of(pr, out[k].shape)):sum()
    loss = loss and loss + term or term
  end
  loss:backward()
  local function ref_loss()
    local ry, rh, rc = ref_seq(p)
    local r = {y = ry, h = rh, c = rc}
    local s = 0
    for k, pr in pairs(proj) do
      for i = 1, #pr do s = s + pr[i] * r[k][i] end
    end
    return s
  end
  for _, e in ipairs(list) do
    local name, arr = e[1], p[e[1]]
    local g = tens[name].grad
    lu.assertNotNil(g, p.kind .. ": no gradient for " .. name)
    local numeric = {}
    for i = 1, #arr do
      local v = arr[i]
      arr[i] = v + FD_EPS
      local fp = ref_loss()
      arr[i] = v - FD_EPS
      local fm = ref_loss()
      arr[i] = v
      numeric[i] = (fp - fm) / (2 * FD_EPS)
    end
    assert_close(g, numeric, within(GRAD_RTOL, GRAD_ATOL),
                 string.format("%s%s d/d%s", p.kind, seq and " seq" or " cell", name))
  end
end

local function load_fixture(name)
  local sd = glimpse.load(FIXTURES .. name .. ".safetensors")
  local weights = {}
  for k, v in pairs(sd) do
    local w = k:match("^weight%.(.*)$")
    if w then weights[w] = v end
  end
  return sd, weights
end

-- ---------------------------------------------------------------------------------------
-- the fused kernels' float maths

function T.test_fast_tanh_and_sigmoid_match_double_precision()
  -- rnn_cell with W_hh = 0, no bias, h = 0 gives tanh(xp); relu cell gives max(xp, 0);
  -- an LSTM cell with g saturated and c = 0 gives c' = sigmoid(xp_i)
  local n = 4001
  local xs = {}
  for i = 1, n do xs[i] = -20 + 40 * (i - 1) / (n - 1) end
  for _, v in ipairs({1e-7, -1e-7, 1e-3, 0.3, 0.6249, 0.6251, -0.62, 9.5, 50, -90}) do
    xs[#xs + 1] = v
  end
  n = #xs
  local xp = glimpse.tensor(xs):reshape(n, 1)
  xs = flat(xp)   -- the float32 inputs the kernels see
  local th = flat(glimpse.rnn_cell(xp, nil, glimpse.zeros(1, 1), nil, nil, "tanh"))
  local worst = 0
  for i = 1, n do
    local ref = tanh(xs[i])
    local err = math.abs(th[i] - ref) / math.max(math.abs(ref), 1e-30)
    worst = math.max(worst, err)
  end
  lu.assertTrue(worst < MATH_RTOL, "tanh relative error " .. worst)

  local gates = {}
  for i = 1, n do
    gates[#gates + 1] = {xs[i], 0, 30, 0}   -- i = s(x), f, g = tanh(30) = 1, o
  end
  local _, c = glimpse.lstm_cell(glimpse.tensor(gates), nil, nil, glimpse.zeros(4, 1), nil)
  local cs = flat(c)
  worst = 0
  for i = 1, n do
    local ref = sigmoid(xs[i])   -- below ~1e-37 float has no relative precision left
    worst = math.max(worst, math.abs(cs[i] - ref) / math.max(ref, 1e-30))
  end
  lu.assertTrue(worst < MATH_RTOL, "sigmoid relative error " .. worst)
end

function T.test_nan_inputs_propagate_instead_of_vanishing()
  local xp = glimpse.tensor({{0 / 0, 0, 0, 0}, {0, 0, 0, 0}})
  local h, c = glimpse.lstm_cell(xp, nil, nil, glimpse.zeros(4, 1), nil)
  local hv, cv = flat(h), flat(c)
  lu.assertTrue(hv[1] ~= hv[1] and cv[1] ~= cv[1], "NaN row")
  lu.assertEquals(hv[2], 0)
  local g = flat(glimpse.gru_cell(glimpse.tensor({{0, 0, 1 / 0}}), nil, glimpse.zeros(3, 1)))
  lu.assertEquals(g[1], 0.5)   -- n = tanh(inf) = 1, z = 1/2: h' = 1/2
end

-- ---------------------------------------------------------------------------------------
-- cells and sequences against the double reference (forward and all gradients)

function T.test_lstm_cell_matches_double_reference_with_all_gradients()
  glimpse.manual_seed(11)
  check_against_reference(make_problem("lstm", 3, 1, 4), false)
end

function T.test_gru_cell_matches_double_reference_with_all_gradients()
  glimpse.manual_seed(12)
  check_against_reference(make_problem("gru", 3, 1, 4), false)
end

function T.test_rnn_cells_tanh_and_relu_match_double_reference_with_all_gradients()
  glimpse.manual_seed(13)
  check_against_reference(make_problem("tanh", 3, 1, 4), false)
  check_against_reference(make_problem("relu", 3, 1, 4), false)
end

function T.test_cells_with_mask_copy_masked_rows_and_pass_their_gradient()
  glimpse.manual_seed(14)
  for _, kind in ipairs({"lstm", "gru", "tanh"}) do
    local p = make_problem(kind, 3, 1, 3, {lengths = {1, 0, 1}})
    check_against_reference(p, false)
  end
  -- the masked row's state is copied exactly
  local h0, c0 = glimpse.randn(2, 3), glimpse.randn(2, 3)
  local h, c = glimpse.lstm_cell(glimpse.randn(2, 12), h0, c0, glimpse.randn(12, 3), nil,
                                 glimpse.tensor({0, 1}))
  assert_equal_exactly(h[1], h0[1], "masked h")
  assert_equal_exactly(c[1], c0[1], "masked c")
end

function T.test_cells_without_state_or_bias_use_zeros()
  glimpse.manual_seed(15)
  check_against_reference(make_problem("lstm", 2, 1, 3, {h0 = false, c0 = false, bias = false}),
                          false)
  check_against_reference(make_problem("gru", 2, 1, 3, {h0 = false, bias = false}), false)
end

function T.test_sequences_match_double_reference_forward_and_reverse_with_lengths()
  glimpse.manual_seed(16)
  for _, kind in ipairs({"lstm", "gru", "tanh", "relu"}) do
    for _, rev in ipairs({false, true}) do
      local p = make_problem(kind, 3, 4, 3, {lengths = {4, 2, 1}, reverse = rev})
      check_against_reference(p, true)
    end
  end
  check_against_reference(make_problem("lstm", 2, 3, 2, {h0 = false, c0 = false}), true)
end

function T.test_sequence_op_equals_a_loop_of_masked_cells()
  glimpse.manual_seed(17)
  local B, Tn, H = 3, 5, 4
  local lengths = {5, 2, 3}
  local mask = glimpse.arange(Tn):reshape(1, Tn):le(glimpse.tensor(lengths):reshape(B, 1))
  for _, kind in ipairs({"lstm", "gru", "tanh"}) do
    for _, rev in ipairs({false, true}) do
      local G = GATES[kind] * H
      local xp, w, b = glimpse.randn(B, Tn, G), glimpse.randn(G, H) * 0.5, glimpse.randn(G)
      local h0, c0 = glimpse.randn(B, H), kind == "lstm" and glimpse.randn(B, H) or nil
      local y, hn, cn
      if kind == "lstm" then y, hn, cn = glimpse.lstm_seq(xp, h0, c0, w, b, mask, rev)
      elseif kind == "gru" then y, hn = glimpse.gru_seq(xp, h0, w, b, mask, rev)
      else y, hn = glimpse.rnn_seq(xp, h0, w, b, mask, rev, kind) end
      local h, c = h0, c0
      for s = 1, Tn do
        local t = rev and Tn + 1 - s or s
        local xt, mt = xp:select(2, t), mask:select(2, t)
        if kind == "lstm" then h, c = glimpse.lstm_cell(xt, h, c, w, b, mt)
        elseif kind == "gru" then h = glimpse.gru_cell(xt, h, w, b, mt)
        else h = glimpse.rnn_cell(xt, h, w, b, mt, kind) end
        assert_close(y:select(2, t), h * mt:reshape(B, 1), within(0, 1e-6), kind .. " step " .. t)
      end
      assert_close(hn, h, within(0, 1e-6), kind .. " h_n")
      if c then assert_close(cn, c, within(0, 1e-6), kind .. " c_n") end
    end
  end
end

function T.test_no_grad_forward_equals_recording_forward()
  glimpse.manual_seed(18)
  local xp, w = glimpse.randn(2, 3, 8), glimpse.randn(8, 2):requires_grad()
  local mask = glimpse.tensor({{1, 1, 1}, {1, 0, 0}})
  local y1, h1, c1 = glimpse.lstm_seq(xp, nil, nil, w, nil, mask, true)
  local y2, h2, c2 = glimpse.no_grad(function()
    return glimpse.lstm_seq(xp, nil, nil, w, nil, mask, true)
  end)
  lu.assertTrue(y1.requires_grad_flag)
  lu.assertFalse(y2.requires_grad_flag)
  assert_equal_exactly(y1, y2, "y")
  assert_equal_exactly(h1, h2, "h")
  assert_equal_exactly(c1, c2, "c")
end

function T.test_shape_errors_name_the_op_and_shapes()
  local w = glimpse.randn(8, 2)
  local ok, err = pcall(glimpse.lstm_cell, glimpse.randn(3, 7), nil, nil, w)
  lu.assertFalse(ok)
  lu.assertStrContains(err, "lstm_cell")
  lu.assertStrContains(err, "[3,7]")
  ok, err = pcall(glimpse.gru_seq, glimpse.randn(3, 4, 6), glimpse.randn(2, 2), glimpse.randn(6, 2))
  lu.assertFalse(ok)
  lu.assertStrContains(err, "gru_seq")
  ok, err = pcall(glimpse.lstm_seq, glimpse.randn(3, 4, 8), nil, nil, w, nil, glimpse.ones(3, 5))
  lu.assertFalse(ok)
  lu.assertStrContains(err, "mask")
  ok, err = pcall(glimpse.rnn_cell, glimpse.randn(3, 2), nil, glimpse.randn(2, 2), nil, nil, "sigmoid")
  lu.assertFalse(ok)
  lu.assertStrContains(err, "invalid option")
end

-- ---------------------------------------------------------------------------------------
-- modules: PyTorch agreement

local function check_cell_fixture(name, cls)
  local sd, weights = load_fixture(name)
  local cell = cls(5, 4)
  cell:load_state_dict(weights)
  local x = sd["input.x"]:clone():requires_grad()
  local h = sd["input.h"]:clone():requires_grad()
  local c = sd["input.c"] and sd["input.c"]:clone():requires_grad()
  local outs = {}
  if c then outs.h, outs.c = cell(x, h, c) else outs.h = cell(x, h) end
  local loss
  for k, v in pairs(outs) do
    assert_close(v, sd["output." .. k], TORCH_CLOSE, name .. " output " .. k)
    local term = (v * sd["upstream." .. k]):sum()
    loss = loss and loss + term or term
  end
  loss:backward()
  assert_close(x.grad, sd["grad.x"], TORCH_CLOSE, name .. " grad x")
  assert_close(h.grad, sd["grad.h"], TORCH_CLOSE, name .. " grad h")
  if c then assert_close(c.grad, sd["grad.c"], TORCH_CLOSE, name .. " grad c") end
  local n = 0
  for pname, p in cell:named_parameters() do
    assert_close(p.grad, sd["grad." .. pname], TORCH_CLOSE, name .. " grad " .. pname)
    n = n + 1
  end
  lu.assertEquals(n, 4)
end

function T.test_lstm_cell_matches_pytorch()
  check_cell_fixture("rnn_lstm_cell", nn.LSTMCell)
end

function T.test_gru_cell_matches_pytorch()
  check_cell_fixture("rnn_gru_cell", nn.GRUCell)
end

function T.test_rnn_cell_matches_pytorch()
  check_cell_fixture("rnn_rnn_cell", nn.RNNCell)
end

local function check_bidir_fixture(name, cls)
  local sd, weights = load_fixture(name)
  local net = cls(5, 4, {layers = 2, bidirectional = true})
  net:load_state_dict(weights)
  local x = sd["input.x"]:clone():requires_grad()
  local h0 = sd["input.h0"]:clone():requires_grad()
  local c0 = sd["input.c0"] and sd["input.c0"]:clone():requires_grad()
  local lengths = flat(sd["input.lengths"])
  local out, state = net(x, lengths, {h = h0, c = c0})
  local outs = {out = out, h = state.h, c = state.c}
  local loss
  for k, v in pairs(outs) do
    assert_close(v, sd["output." .. k], TORCH_CLOSE, name .. " output " .. k)
    local term = (v * sd["upstream." .. k]):sum()
    loss = loss and loss + term or term
  end
  loss:backward()
  assert_close(x.grad, sd["grad.x"], TORCH_CLOSE, name .. " grad x")
  assert_close(h0.grad, sd["grad.h0"], TORCH_CLOSE, name .. " grad h0")
  if c0 then assert_close(c0.grad, sd["grad.c0"], TORCH_CLOSE, name .. " grad c0") end
  local n = 0
  for pname, p in net:named_parameters() do
    assert_close(p.grad, sd["grad." .. pname], TORCH_CLOSE, name .. " grad " .. pname)
    n = n + 1
  end
  lu.assertEquals(n, 16)
end

function T.test_two_layer_bidirectional_lstm_with_lengths_matches_pytorch()
  check_bidir_fixture("rnn_lstm_bidir", nn.LSTM)
end

function T.test_two_layer_bidirectional_gru_with_lengths_matches_pytorch()
  check_bidir_fixture("rnn_gru_bidir", nn.GRU)
end

-- ---------------------------------------------------------------------------------------
-- modules: properties

function T.test_parameter_names_and_order_match_pytorch()
  local net = nn.LSTM(3, 2, {layers = 2, bidirectional = true})
  local names = {}
  for name, p in net:named_parameters() do names[#names + 1] = name .. ":" .. table.concat(p.shape, "x") end
  lu.assertEquals(names, {
    "weight_ih_l0:8x3", "weight_hh_l0:8x2", "bias_ih_l0:8", "bias_hh_l0:8",
    "weight_ih_l0_reverse:8x3", "weight_hh_l0_reverse:8x2", "bias_ih_l0_reverse:8",
    "bias_hh_l0_reverse:8",
    "weight_ih_l1:8x4", "weight_hh_l1:8x2", "bias_ih_l1:8", "bias_hh_l1:8",
    "weight_ih_l1_reverse:8x4", "weight_hh_l1_reverse:8x2", "bias_ih_l1_reverse:8",
    "bias_hh_l1_reverse:8"})
  local cell = nn.GRUCell(3, 2, {bias = false})
  names = {}
  for name in cell:named_parameters() do names[#names + 1] = name end
  lu.assertEquals(names, {"weight_ih", "weight_hh"})
  lu.assertEquals(tostring(net), "LSTM(3, 2, num_layers=2, bidirectional=true)")
end

function T.test_init_is_uniform_within_one_over_sqrt_hidden()
  glimpse.manual_seed(3)
  local net = nn.GRU(10, 16)
  local k = 1 / math.sqrt(16)
  for name, p in net:named_parameters() do
    local lo, hi = p:min():item(), p:max():item()
    lu.assertTrue(lo >= -k and hi <= k, name)
    lu.assertTrue(hi - lo > k, name .. " spread")   -- not all equal
  end
end

function T.test_padding_never_leaks_into_outputs_states_or_gradients()
  glimpse.manual_seed(21)
  local lengths = {4, 1, 3}
  for _, cls in ipairs({nn.LSTM, nn.GRU, nn.RNN}) do
    local net = cls(3, 4, {layers = 2, bidirectional = true})
    local x1 = glimpse.randn(3, 4, 3)
    local x2 = x1:clone()
    for b, n in ipairs(lengths) do
      for t = n + 1, 4 do x2[b][t] = glimpse.randn(3) * 100 end
    end
    local results = {}
    for i, x in ipairs({x1, x2}) do
      x = x:requires_grad()
      net:zero_grad()
      local out, st = net(x, lengths)
      local loss = (out * out):sum() + st.h:sum()
      if st.c then loss = loss + st.c:sum() end
      loss:backward()
      results[i] = {out = out, h = st.h, c = st.c, gx = x.grad,
                    gwg = net.weight_ih_l1.grad:clone()}
    end
    local a, b = results[1], results[2]
    assert_equal_exactly(a.out, b.out, cls.__name .. " out")
    assert_equal_exactly(a.h, b.h, cls.__name .. " h")
    if a.c then assert_equal_exactly(a.c, b.c, cls.__name .. " c") end
    assert_equal_exactly(a.gwg, b.gwg, cls.__name .. " weight grad")
    for bi, n in ipairs(lengths) do
      for t = n + 1, 4 do
        lu.assertEquals(a.out[bi][t]:abs():max():item(), 0, "padded output is not 0")
        lu.assertEquals(a.gx[bi][t]:abs():max():item(), 0, "padded input got a gradient")
      end
    end
  end
end

function T.test_reverse_direction_starts_at_each_samples_last_valid_step()
  glimpse.manual_seed(22)
  local net = nn.LSTM(3, 4, {bidirectional = true, layers = 2})
  local x = glimpse.randn(3, 5, 3)
  local lengths = {5, 2, 4}
  local out, st = net(x, lengths)
  for b, n in ipairs(lengths) do
    -- the same sample alone, cut to its length, with no padding at all
    local xb = x:narrow(1, b, 1):narrow(2, 1, n)
    local ob, sb = net(xb)
    assert_close(out:narrow(1, b, 1):narrow(2, 1, n), ob, within(0, 1e-5), "out of sample " .. b)
    assert_close(st.h:narrow(2, b, 1), sb.h, within(0, 1e-5), "h of sample " .. b)
    assert_close(st.c:narrow(2, b, 1), sb.c, within(0, 1e-5), "c of sample " .. b)
  end
end

function T.test_lengths_as_tensor_equal_lengths_as_table_and_full_lengths_equal_none()
  glimpse.manual_seed(23)
  local net = nn.GRU(3, 2)
  local x = glimpse.randn(2, 4, 3)
  local o1 = net(x, {4, 2})
  local o2 = net(x, glimpse.tensor({4, 2}))
  assert_equal_exactly(o1, o2, "tensor lengths")
  local o3, s3 = net(x, {4, 4})
  local o4, s4 = net(x)
  assert_equal_exactly(o3, o4, "full lengths")
  assert_equal_exactly(s3.h, s4.h, "full lengths h")
end

function T.test_initial_state_is_used_and_gets_gradients()
  glimpse.manual_seed(24)
  local net = nn.LSTM(3, 2, {layers = 2})
  local x = glimpse.randn(2, 3, 3)
  local h0 = glimpse.randn(2, 2, 2):requires_grad()
  local c0 = glimpse.randn(2, 2, 2):requires_grad()
  local out0 = net(x)
  local out1, st = net(x, nil, {h = h0, c = c0})
  lu.assertTrue((out0 - out1):abs():max():item() > 1e-4)
  ;(out1:sum() + st.h:sum() + st.c:sum()):backward()
  lu.assertTrue(h0.grad:abs():max():item() > 0)
  lu.assertTrue(c0.grad:abs():max():item() > 0)
end

function T.test_cell_modules_pass_gradcheck_for_inputs_states_and_weights()
  glimpse.manual_seed(25)
  local x, h, c = glimpse.randn(2, 3):requires_grad(), glimpse.randn(2, 2):requires_grad(),
                  glimpse.randn(2, 2):requires_grad()
  local lstm = nn.LSTMCell(3, 2)
  local inputs = {x, h, c}
  for _, p in ipairs(lstm:parameters()) do inputs[#inputs + 1] = p end
  lu.assertTrue(glimpse.gradcheck(function(x_, h_, c_)
    local h2, c2 = lstm(x_, h_, c_)
    return glimpse.cat({h2, c2}, 2)
  end, inputs))
  for _, cls in ipairs({nn.GRUCell, nn.RNNCell}) do
    local cell = cls(3, 2)
    inputs = {x, h}
    for _, p in ipairs(cell:parameters()) do inputs[#inputs + 1] = p end
    lu.assertTrue(glimpse.gradcheck(function(x_, h_) return cell(x_, h_) end, inputs))
  end
end

function T.test_bidirectional_modules_with_lengths_pass_gradcheck()
  glimpse.manual_seed(26)
  for _, cls in ipairs({nn.LSTM, nn.GRU}) do
    local net = cls(2, 2, {layers = 2, bidirectional = true})
    local x = glimpse.randn(3, 3, 2):requires_grad()
    local inputs = {x}
    for _, p in ipairs(net:parameters()) do inputs[#inputs + 1] = p end
    lu.assertTrue(glimpse.gradcheck(function(x_)
      local out, st = net(x_, {3, 1, 2})
      return glimpse.cat({out:reshape(-1), st.h:reshape(-1)}, 1)
    end, inputs))
  end
end

function T.test_unbatched_input_works_like_a_batch_of_one()
  glimpse.manual_seed(27)
  local net = nn.LSTM(3, 2, {bidirectional = true})
  local x = glimpse.randn(4, 3)
  local o1, s1 = net(x)
  local o2, s2 = net(x:unsqueeze(1))
  lu.assertEquals(o1.shape, {4, 4})
  lu.assertEquals(s1.h.shape, {2, 2})
  assert_equal_exactly(o1, o2:squeeze(1), "out")
  assert_equal_exactly(s1.c, s2.c:squeeze(2), "c")
  local cell = nn.GRUCell(3, 2)
  lu.assertEquals(cell(glimpse.randn(3)).shape, {2})
end

function T.test_dropout_between_layers_only_in_training()
  glimpse.manual_seed(28)
  local net = nn.LSTM(3, 4, {layers = 2, dropout = 0.5})
  local x = glimpse.randn(2, 3, 3)
  net:evaluate()
  local a = net(x)
  local b = net(x)
  assert_equal_exactly(a, b, "eval is deterministic")
  net:train()
  local c = net(x)
  lu.assertTrue((a - c):abs():max():item() > 0)
end

function T.test_module_argument_errors_are_clear()
  local net = nn.LSTM(3, 2)
  local ok, err = pcall(net, glimpse.randn(2, 4, 5))
  lu.assertFalse(ok)
  lu.assertStrContains(err, "LSTM: input [2,4,5] should be (B,T,3)")
  ok, err = pcall(net, glimpse.randn(2, 4, 3), {4, 5})
  lu.assertFalse(ok)
  lu.assertStrContains(err, "length 5 of sample 2")
  ok, err = pcall(net, glimpse.randn(2, 4, 3), {4})
  lu.assertFalse(ok)
  lu.assertStrContains(err, "1 lengths for a batch of 2")
  ok, err = pcall(net, glimpse.randn(2, 4, 3), nil, {h = glimpse.zeros(2, 2, 2)})
  lu.assertFalse(ok)
  lu.assertStrContains(err, "state.h [2,2,2] should be (1,2,2)")
  ok, err = pcall(nn.GRU, 3, 0)
  lu.assertFalse(ok)
  lu.assertStrContains(err, "hidden size")
end

-- ---------------------------------------------------------------------------------------
-- step: one decoding step with a sequence layer's own weights

local function step_through(m, x, state)
  local outs, s = {}, state
  for t = 1, x:size(2) do
    local o
    o, s = m:step(x:select(2, t), s)
    outs[t] = o
  end
  return glimpse.stack(outs, 2), s
end

function T.test_step_t_times_equals_forward_over_t_steps()
  glimpse.manual_seed(11)
  for _, kind in ipairs({"LSTM", "GRU", "RNN"}) do
    for _, layers in ipairs({1, 3}) do
      local m = nn[kind](5, 6, {layers = layers})
      local x = glimpse.randn(4, 7, 5)
      local h0 = {h = glimpse.randn(layers, 4, 6)}
      if kind == "LSTM" then h0.c = glimpse.randn(layers, 4, 6) end
      for _, st in ipairs({false, h0}) do
        local out, state = m(x, nil, st or nil)
        local sout, sstate = step_through(m, x, st or nil)
        local what = string.format("%s layers=%d state=%s", kind, layers, tostring(st ~= false))
        lu.assertEquals(sout.shape, {4, 7, 6}, what)
        lu.assertEquals(sout:totable(), out:totable(), what .. ": outputs")
        lu.assertEquals(sstate.h:totable(), state.h:totable(), what .. ": h")
        if kind == "LSTM" then
          lu.assertEquals(sstate.c:totable(), state.c:totable(), what .. ": c")
        else
          lu.assertNil(sstate.c, what)
        end
      end
      -- a length-1 sequence: the step's output is forward's only output
      local x1 = glimpse.randn(3, 1, 5)
      local out1, st1 = m(x1)
      local o, s = m:step(x1:select(2, 1))
      lu.assertEquals(o:totable(), out1:select(2, 1):totable(), kind .. ": T = 1")
      lu.assertEquals(s.h:totable(), st1.h:totable(), kind .. ": T = 1 state")
    end
  end
end

function T.test_step_is_differentiable_like_forward()
  glimpse.manual_seed(12)
  for _, kind in ipairs({"LSTM", "GRU", "RNN"}) do
    local m = nn[kind](3, 4, {layers = 2})
    local x = glimpse.randn(2, 3, 3)
    local out = m(x)
    out:sum():backward()
    local want = {}
    for name, p in m:named_parameters() do want[name] = p.grad:totable() end
    m:zero_grad()
    local xs = x:detach():requires_grad()
    local sout = step_through(m, xs)
    lu.assertTrue(sout.requires_grad_flag, kind)
    sout:sum():backward()
    for name, p in m:named_parameters() do
      assert_close(p.grad, glimpse.tensor(want[name]), within(1e-5, 1e-6),
                   kind .. " grad " .. name)
    end
    lu.assertNotNil(xs.grad, kind .. ": no gradient reached the input")
  end
end

function T.test_step_errors()
  local bi = nn.LSTM(3, 4, {bidirectional = true})
  local ok, err = pcall(bi.step, bi, glimpse.randn(2, 3))
  lu.assertFalse(ok)
  lu.assertStrContains(err, "LSTM:step: a bidirectional layer has no single step")
  local m = nn.GRU(3, 4, {layers = 2})
  ok, err = pcall(m.step, m, glimpse.randn(2, 5))
  lu.assertFalse(ok)
  lu.assertStrContains(err, "GRU:step: input [2,5] should be (B,3)")
  ok, err = pcall(m.step, m, glimpse.randn(2, 3), {h = glimpse.zeros(1, 2, 4)})
  lu.assertFalse(ok)
  lu.assertStrContains(err, "state.h [1,2,4] should be (2,2,4)")
end

return T
