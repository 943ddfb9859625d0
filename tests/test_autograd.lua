-- tests/test_autograd.lua -- the tape's semantics and a finite-difference gradient check for
-- every differentiable core op.
local lu = require "luaunit"
local glimpse = require "glimpse"
local assert_close = require("tests.helpers").assert_close

local gradcheck = glimpse.gradcheck

local function leaf(...)
  return glimpse.randn(...):requires_grad()
end

local function positive(...)
  return (glimpse.rand(...) + 0.5):requires_grad()
end

local T = {}

-- semantics ---------------------------------------------------------------

function T.test_backward_accumulates_into_leaf_grads()
  local w = glimpse.tensor({1, 2, 3}):requires_grad();
  (w * 2):sum():backward();
  (w * 3):sum():backward()
  lu.assertEquals(w.grad:totable(), {5, 5, 5})
  w:zero_grad()
  lu.assertEquals(w.grad:totable(), {0, 0, 0})
end

function T.test_diamond_graph_sums_both_paths()
  local x = glimpse.tensor({2}):requires_grad()
  local y = x * x
  local z = y + y * 3   -- 4 x^2
  z:sum():backward()
  lu.assertEquals(x.grad:totable(), {16})
end

function T.test_no_grad_records_nothing()
  local w = leaf(3)
  local y = glimpse.no_grad(function() return (w * 2):sum() end)
  lu.assertFalse(y.requires_grad_flag)
  lu.assertErrorMsgContains("does not require grad", function() y:backward() end)
  lu.assertTrue(glimpse.is_grad_enabled())
end

function T.test_no_grad_restores_mode_after_an_error()
  lu.assertError(function() glimpse.no_grad(function() error("inside") end) end)
  lu.assertTrue(glimpse.is_grad_enabled())
end

function T.test_detach_cuts_the_graph()
  local w = glimpse.tensor({3}):requires_grad()
  local y = w:detach() * w
  y:sum():backward()
  lu.assertEquals(w.grad:totable(), {3})
end

function T.test_backward_twice_needs_retain_graph()
  local w = leaf(2)
  local y = (w * w):sum()
  y:backward(nil, {retain_graph = true})
  y:backward()
  lu.assertErrorMsgContains("already freed", function() y:backward() end)
end

function T.test_backward_of_non_scalar_needs_a_gradient()
  local w = leaf(2)
  local y = w * 2
  lu.assertErrorMsgContains("scalar", function() y:backward() end)
  y:backward(glimpse.tensor({1, 10}))
  lu.assertEquals(w.grad:totable(), {2, 20})
end

function T.test_gradient_flows_through_views()
  local w = glimpse.tensor({{1, 2}, {3, 4}}):requires_grad()
  local y = w[2] * 5 + w:reshape(4):narrow(1, 1, 2)
  y:sum():backward()
  lu.assertEquals(w.grad:totable(), {{1, 1}, {5, 5}})
end

function T.test_inplace_change_of_a_grad_tensor_is_refused()
  local w = leaf(3)
  lu.assertErrorMsgContains("in-place", function() w:fill_(0) end)
  glimpse.no_grad(function() w:fill_(1) end)
  lu.assertEquals(w:totable(), {1, 1, 1})
end

function T.test_relu_inplace_is_refused_on_a_grad_tensor_and_clamps_under_no_grad()
  local w = glimpse.tensor({-1, 2, -3}):requires_grad()
  lu.assertErrorMsgContains("relu_: in-place", function() w:relu_() end)
  local r = glimpse.no_grad(function() return w:relu_() end)
  lu.assertTrue(rawequal(r, w))
  lu.assertEquals(w:totable(), {0, 2, 0})
end

function T.test_long_chains_backpropagate_without_recursion_limits()
  local x = glimpse.tensor({1}):requires_grad()
  local y = x
  for _ = 1, 20000 do y = y * 1 end
  y:sum():backward()
  lu.assertEquals(x.grad:totable(), {1})
end

-- gradient checks -----------------------------------------------------------

function T.test_gradcheck_binary_ops_with_broadcasting()
  glimpse.manual_seed(1)
  local a, b = leaf(3, 4), leaf(4)
  local p = positive(3, 1)
  for _, f in ipairs({
    function(x, y) return x + y end, function(x, y) return x - y end,
    function(x, y) return x * y end, function(x, y) return x / (y:abs() + 1) end,
    function(x, y) return glimpse.maximum(x, y) end, function(x, y) return glimpse.minimum(x, y) end,
  }) do
    lu.assertTrue(gradcheck(f, {a, b}))
  end
  lu.assertTrue(gradcheck(function(x, e) return x ^ e end, {p, leaf(1, 4)}))
end

function T.test_gradcheck_scalar_ops()
  glimpse.manual_seed(2)
  local a, p = leaf(5), positive(5)
  lu.assertTrue(gradcheck(function(x) return x + 3 end, {a}))
  lu.assertTrue(gradcheck(function(x) return 2 - x * 3 end, {a}))
  lu.assertTrue(gradcheck(function(x) return x ^ 2 end, {a}))
  lu.assertTrue(gradcheck(function(x) return x ^ 1.5 end, {p}))
  lu.assertTrue(gradcheck(function(x) return 2 / x end, {p}))
  lu.assertTrue(gradcheck(function(x) return -x end, {a}))
end

function T.test_gradcheck_unary_maths()
  glimpse.manual_seed(3)
  local a, p = leaf(6), positive(6)
  for _, name in ipairs({"exp", "tanh", "sigmoid", "sin", "cos", "softplus", "gelu", "abs", "relu"}) do
    lu.assertTrue(gradcheck(function(x) return x[name](x) end, {a}), name)
  end
  for _, name in ipairs({"log", "sqrt", "log1p", "rsqrt"}) do
    lu.assertTrue(gradcheck(function(x) return x[name](x) end, {p}), name)
  end
  lu.assertTrue(gradcheck(function(x) return x:clamp(-0.5, 0.5) end, {a}))
  lu.assertTrue(gradcheck(function(x) return x:leaky_relu(0.1) end, {a}))
end

function T.test_gradcheck_where()
  glimpse.manual_seed(4)
  local c = glimpse.tensor({1, 0, 1, 0})
  lu.assertTrue(gradcheck(function(x, y) return glimpse.where(c, x, y) end, {leaf(4), leaf(1)}))
end

function T.test_gradcheck_reductions()
  glimpse.manual_seed(5)
  local a = leaf(3, 4, 2)
  lu.assertTrue(gradcheck(function(x) return x:sum() end, {a}))
  lu.assertTrue(gradcheck(function(x) return x:sum(2) end, {a}))
  lu.assertTrue(gradcheck(function(x) return x:mean(-1, true) end, {a}))
  -- max/min need values further apart than eps, or the difference quotient jumps
  local perm = {7, 19, 2, 23, 11, 5, 16, 1, 21, 9, 14, 3, 24, 8, 18, 12, 4, 22, 10, 15, 6, 20, 13, 17}
  local spread = (glimpse.tensor(perm) * 0.1):reshape(3, 4, 2):requires_grad()
  lu.assertTrue(gradcheck(function(x) return (x:max(2)) end, {spread}))
  lu.assertTrue(gradcheck(function(x) return (x:min(1)) end, {spread}))
  lu.assertTrue(gradcheck(function(x) return (x:max()) end, {spread}))
  lu.assertTrue(gradcheck(function(x) return x:logsumexp(3) end, {a}))
  lu.assertTrue(gradcheck(function(x) return x:var(2) end, {a}))
  lu.assertTrue(gradcheck(function(x) return x:norm() end, {a}))
end

function T.test_gradcheck_matmul_every_layout()
  glimpse.manual_seed(6)
  local a, b = leaf(3, 4), leaf(4, 5)
  lu.assertTrue(gradcheck(function(x, y) return x:matmul(y) end, {a, b}))
  lu.assertTrue(gradcheck(function(x, y) return x:matmul(y, true) end, {leaf(4, 3), b}))
  lu.assertTrue(gradcheck(function(x, y) return x:matmul(y, false, true) end, {a, leaf(5, 4)}))
  lu.assertTrue(gradcheck(function(x, y) return x:matmul(y, true, true) end, {leaf(4, 3), leaf(5, 4)}))
  lu.assertTrue(gradcheck(function(x, y) return x:matmul(y) end, {leaf(2, 3, 4), leaf(2, 4, 5)}))
  lu.assertTrue(gradcheck(function(x, y) return x:matmul(y, false, true) end, {leaf(2, 3, 4), leaf(2, 5, 4)}))
  lu.assertTrue(gradcheck(function(x, y) return x:matmul(y) end, {leaf(2, 3, 4), b}))
  lu.assertTrue(gradcheck(function(x, w, bias) return glimpse.linear(x, w, bias) end,
                          {leaf(2, 3, 4), leaf(5, 4), leaf(5)}))
end

function T.test_gradcheck_shape_ops()
  glimpse.manual_seed(7)
  local a = leaf(2, 3, 4)
  lu.assertTrue(gradcheck(function(x) return x:reshape(4, 6) * glimpse.arange(6) end, {a}))
  lu.assertTrue(gradcheck(function(x) return x:transpose(1, 3) end, {a}))
  lu.assertTrue(gradcheck(function(x) return x:permute(2, 3, 1) end, {a}))
  lu.assertTrue(gradcheck(function(x) return x:unsqueeze(2):squeeze(2) end, {a}))
  lu.assertTrue(gradcheck(function(x) return x:narrow(3, 2, 2) end, {a}))
  lu.assertTrue(gradcheck(function(x) return x:narrow(1, 2, 1) end, {a}))
  lu.assertTrue(gradcheck(function(x) return x:select(2, 3) end, {a}))
  lu.assertTrue(gradcheck(function(x) return x[2] end, {a}))
  lu.assertTrue(gradcheck(function(x) return x:index_select(3, {4, 1, 4}) end, {a}))
  lu.assertTrue(gradcheck(function(x) return x:gather(3, glimpse.tensor({{{1}, {2}, {4}}, {{3}, {3}, {1}}})) end, {a}))
  lu.assertTrue(gradcheck(function(x, s)
    return x:scatter_add(2, glimpse.tensor({{{1, 2, 3, 1}}, {{3, 3, 2, 1}}}), s)
  end, {a, leaf(2, 1, 4)}))
  lu.assertTrue(gradcheck(function(x) return x:expand(3, 2, 3, 4) end, {a}))
  lu.assertTrue(gradcheck(function(x) return x:clone() end, {a}))
  lu.assertTrue(gradcheck(function(x, y) return glimpse.cat({x, y, x}, 2) end, {a, leaf(2, 1, 4)}))
  lu.assertTrue(gradcheck(function(x, y) return glimpse.stack({x, y}, 3) end, {a, leaf(2, 3, 4)}))
end

function T.test_gradcheck_cat_of_many_tensors()
  glimpse.manual_seed(8)
  local xs = {}
  for i = 1, 20 do xs[i] = leaf(1, 2) end
  lu.assertTrue(gradcheck(function(...) return glimpse.cat({...}, 1) end, xs))
end

function T.test_gradcheck_embedding_skips_padding_row()
  glimpse.manual_seed(9)
  local w = leaf(5, 3)
  lu.assertTrue(gradcheck(function(x) return glimpse.embedding(x, glimpse.tensor({{1, 2}, {5, 2}})) end, {w}))
  w.grad = nil
  local y = glimpse.embedding(w, glimpse.tensor({1, 2, 2}), 2)
  y:sum():backward()
  lu.assertEquals(w.grad[2]:totable(), {0, 0, 0})
  lu.assertEquals(w.grad[1]:totable(), {1, 1, 1})
end

function T.test_gradcheck_softmax_family_and_losses()
  glimpse.manual_seed(10)
  local a = leaf(3, 5)
  local mask = glimpse.tensor({{1, 1, 1, 0, 0}, {1, 0, 1, 0, 1}, {1, 1, 1, 1, 1}})
  lu.assertTrue(gradcheck(function(x) return glimpse.softmax(x, 2) end, {a}))
  lu.assertTrue(gradcheck(function(x) return glimpse.softmax(x, 1) end, {a}))
  lu.assertTrue(gradcheck(function(x) return glimpse.softmax(x, 2, mask) end, {a}))
  lu.assertTrue(gradcheck(function(x) return glimpse.log_softmax(x, 2) end, {a}))
  lu.assertTrue(gradcheck(function(x) return glimpse.cross_entropy(x, {1, 5, 2}) end, {a}))
  lu.assertTrue(gradcheck(function(x) return glimpse.cross_entropy(x, {1, 0, 2}, {ignore_index = 0}) end, {a}))
  lu.assertTrue(gradcheck(function(x) return glimpse.cross_entropy(x, {1, 5, 2}, {reduction = "none"}) end, {a}))
  lu.assertTrue(gradcheck(function(x) return glimpse.cross_entropy(x, {1, 5, 2}, {label_smoothing = 0.1, reduction = "sum"}) end, {a}))
  lu.assertTrue(gradcheck(function(x) return glimpse.nll_loss(glimpse.log_softmax(x, 2), {3, 3, 1}) end, {a}))
  lu.assertTrue(gradcheck(function(x, y) return glimpse.mse_loss(x, y) end, {a, leaf(3, 5)}))
  local p = (glimpse.rand(4) * 0.8 + 0.1):requires_grad()
  lu.assertTrue(gradcheck(function(x, t) return glimpse.bce_loss(x, t) end, {p, glimpse.rand(4):requires_grad()}, {eps = 1e-3}))
end

function T.test_gradcheck_dropout_with_a_fixed_mask()
  local a = leaf(20)
  lu.assertTrue(gradcheck(function(x)
    glimpse.manual_seed(11)    -- the same mask at every evaluation
    return glimpse.dropout(x, 0.3, true)
  end, {a}))
end

-- the vectorising exp/tanh/sigmoid (engine/vmath.h) against libm --------------------

local VMATH_RTOL = 1e-6   -- relative error of the float kernels against Lua's double libm

local function vmath_inputs()
  local xs = {}
  for i = 0, 4000 do xs[#xs + 1] = -30 + 60 * i / 4000 end
  for i = 0, 200 do xs[#xs + 1] = -1e-3 + 2e-3 * i / 200 end         -- around 0
  for i = 0, 100 do xs[#xs + 1] = -103 + 191 * i / 100 end           -- exp's whole range
  for _, v in ipairs({0.625, -0.625, 0.6249, 0.6251, 1e-30, -1e-30, 88.5, -87.5, -95}) do
    xs[#xs + 1] = v
  end
  local t = glimpse.tensor(xs)
  return t, t:totable()   -- the float32 values the kernels see
end

local function worst_relative(got, f, xs, floor)
  local worst, at = 0, nil
  for i, x in ipairs(xs) do
    local ref = f(x)
    local err = math.abs(got[i] - ref) / math.max(math.abs(ref), floor)
    if err > worst then worst, at = err, x end
  end
  return worst, at
end

function T.test_fast_exp_tanh_sigmoid_match_libm()
  local t, xs = vmath_inputs()
  local FLT_MIN = 2.0 ^ -126   -- below it float32 has no relative precision to speak of
  local w, at = worst_relative(t:exp():totable(), math.exp, xs, FLT_MIN)
  lu.assertTrue(w < VMATH_RTOL, string.format("exp: relative error %.3g at %.9g", w, at))
  w, at = worst_relative(t:tanh():totable(), function(x)   -- Lua has no math.tanh
    if math.abs(x) > 20 then return x > 0 and 1 or -1 end
    if math.abs(x) < 1e-4 then return x - x ^ 3 / 3 end     -- (e - 1)/(e + 1) cancels there
    local e = math.exp(2 * x)
    return (e - 1) / (e + 1)
  end, xs, FLT_MIN)
  lu.assertTrue(w < VMATH_RTOL, string.format("tanh: relative error %.3g at %.9g", w, at))
  w, at = worst_relative(t:sigmoid():totable(), function(x) return 1 / (1 + math.exp(-x)) end,
                         xs, FLT_MIN)
  lu.assertTrue(w < VMATH_RTOL, string.format("sigmoid: relative error %.3g at %.9g", w, at))
end

function T.test_fast_exp_tanh_sigmoid_edge_values()
  local inf, nan = math.huge, 0 / 0
  local e = glimpse.tensor({89, 1000, inf, -104, -1000, -inf, nan, 0}):exp():totable()
  lu.assertEquals({e[1], e[2], e[3], e[4], e[5], e[6], e[8]}, {inf, inf, inf, 0, 0, 0, 1})
  lu.assertTrue(e[7] ~= e[7], "exp(NaN) is NaN")
  local sub = glimpse.tensor({-100}):exp():item()   -- a subnormal float: not flushed to zero
  lu.assertTrue(sub > 0 and math.abs(sub - math.exp(-100)) < 2.0 ^ -149, "exp(-100) " .. sub)
  local th = glimpse.tensor({inf, -inf, 50, -50, nan, 0}):tanh():totable()
  lu.assertEquals({th[1], th[2], th[3], th[4], th[6]}, {1, -1, 1, -1, 0})
  lu.assertTrue(th[5] ~= th[5], "tanh(NaN) is NaN")
  local sg = glimpse.tensor({inf, -inf, 100, -200, nan}):sigmoid():totable()
  lu.assertEquals({sg[1], sg[2], sg[3], sg[4]}, {1, 0, 1, 0})
  lu.assertTrue(sg[5] ~= sg[5], "sigmoid(NaN) is NaN")
end

-- gradient buffers: a backward writes a new buffer outright and adds into an existing one;
-- both must give the same gradients ------------------------------------------------------

local FRESH_RTOL = 1e-5   -- the same sums, possibly in another order

-- f(x, p) for x a leaf or an intermediate, once and twice: the gradient of
-- sum(f(x) * c1) + sum(f(x) * c2) must equal the two single gradients summed
local FRESH_CASES = {
  {"relu", {4, 5}, function(x) return x:relu() end},
  {"tanh", {4, 5}, function(x) return x:tanh() end},
  {"sigmoid", {4, 5}, function(x) return x:sigmoid() end},
  {"exp", {4, 5}, function(x) return x:exp() end},
  {"linear", {3, 4}, function(x, p) return glimpse.linear(x, p.w, p.b) end},
  {"matmul", {2, 3, 4}, function(x, p) return x:matmul(p.m) end},
  {"matmul_shared_b", {3, 4}, function(x, p) return p.bt:matmul(x, true) end},  -- per batch
  {"conv2d", {2, 3, 16, 16}, function(x, p) return glimpse.conv2d(x, p.k, p.kb, {padding = 1}) end},
  {"conv2d_chunked", {3, 2, 5, 5}, function(x, p) return glimpse.conv2d(x, p.k2, nil) end},
  {"max_pool2d", {2, 3, 6, 6}, function(x) return glimpse.max_pool2d(x, 2) end},
  {"lstm_seq", {2, 3, 8}, function(x, p) return (glimpse.lstm_seq(x, nil, nil, p.whh, p.bhh)) end},
}

function T.test_fresh_and_accumulated_gradient_buffers_agree()
  glimpse.manual_seed(21)
  local p = {w = leaf(6, 4), b = leaf(6), m = leaf(4, 5), bt = leaf(2, 3, 3),
             k = leaf(4, 3, 3, 3), kb = leaf(4), k2 = leaf(3, 2, 2, 2), whh = leaf(8, 2),
             bhh = leaf(8)}
  for _, case in ipairs(FRESH_CASES) do
    local name, shape, f = case[1], case[2], case[3]
    local x0 = glimpse.randn(table.unpack(shape))
    local probe = f(x0, p)
    local c1, c2 = glimpse.randn(table.unpack(probe.shape)), glimpse.randn(table.unpack(probe.shape))
    for _, via in ipairs({"leaf", "intermediate"}) do
      local function grads(use1, use2)
        local x = x0:clone():requires_grad()
        local xin = via == "leaf" and x or x * 1   -- an op output: its gradient slot is a node's
        local loss
        if use1 then loss = (f(xin, p) * c1):sum() end
        if use2 then
          local l2 = (f(xin, p) * c2):sum()
          loss = loss and loss + l2 or l2
        end
        loss:backward()
        return x.grad
      end
      local g1, g2, g12 = grads(true, false), grads(false, true), grads(true, true)
      assert_close(g12, g1 + g2, FRESH_RTOL, name .. " (" .. via .. ")")
    end
  end
end

function T.test_backward_twice_adds_to_existing_leaf_grads_of_every_fast_op()
  glimpse.manual_seed(22)
  local x = glimpse.randn(2, 3, 16, 16):requires_grad()
  local k, kb = leaf(4, 3, 3, 3), leaf(4)
  local function loss()
    local y = glimpse.max_pool2d(glimpse.conv2d(x, k, kb, {padding = 1}):relu(), 2)
    return glimpse.linear(y:reshape(2, 4 * 64), glimpse.ones(5, 4 * 64)):tanh():sum()
  end
  loss():backward()
  local gx, gk, gb = x.grad:clone(), k.grad:clone(), kb.grad:clone()
  loss():backward()
  assert_close(x.grad, gx * 2, FRESH_RTOL, "x")
  assert_close(k.grad, gk * 2, FRESH_RTOL, "weight")
  assert_close(kb.grad, gb * 2, FRESH_RTOL, "bias")
end

function T.test_gradcheck_one_tensor_as_two_inputs_of_an_op()
  glimpse.manual_seed(23)
  local a = leaf(3, 3)
  lu.assertTrue(gradcheck(function(x) return x:matmul(x) end, {a}))
  lu.assertTrue(gradcheck(function(x) return glimpse.linear(x, x) end, {a}))
  lu.assertTrue(gradcheck(function(x) return glimpse.linear(x, x, x:select(1, 1)) end, {a}))
end

function T.test_gradcheck_catches_a_wrong_gradient()
  local a = leaf(3)
  local ok = glimpse.gradcheck(function(x) return x:exp():detach() * x end, {a}, {raise = false})
  lu.assertFalse(ok)
end

return T
