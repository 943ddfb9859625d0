-- tests/test_autograd.lua -- the tape's semantics and a finite-difference gradient check for
-- every differentiable core op.
local lu = require "luaunit"
local glimpse = require "glimpse"

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

function T.test_gradcheck_catches_a_wrong_gradient()
  local a = leaf(3)
  local ok = glimpse.gradcheck(function(x) return x:exp():detach() * x end, {a}, {raise = false})
  lu.assertFalse(ok)
end

return T
