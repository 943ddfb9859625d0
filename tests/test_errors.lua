-- tests/test_errors.lua -- bad input raises a Lua error that names the function, the argument
-- and the shapes; nothing crashes.  One test per class of bad input.
local lu = require "luaunit"
local glimpse = require "glimpse"

local T = {}

local function raises(pattern, fn)
  local ok, err = pcall(fn)
  lu.assertFalse(ok, "expected an error matching " .. pattern)
  lu.assertStrContains(tostring(err), pattern)
  return err
end

function T.test_wrong_types_name_the_argument()
  raises("bad argument #1 to 'zeros'", function() glimpse.zeros("a") end)
  raises("tensor expected, got string", function() glimpse.zeros(2):matmul("x") end)
  raises("bad argument #2", function() glimpse.softmax(glimpse.zeros(2), "x") end)
  raises("tensor, number or table expected, got boolean", function() glimpse.tensor(true) end)
  raises("expected a number", function() glimpse.tensor({1, "two"}) end)
  raises("integer expected", function() glimpse.zeros(2):sum(1.5) end)
end

function T.test_nil_arguments_are_reported()
  raises("bad argument #1", function() glimpse.tensor() end)
  -- a method call counts arguments after self, as Lua's own string methods do
  raises("bad argument #1 to 'matmul' (tensor expected, got nil)", function() glimpse.zeros(2):matmul(nil) end)
  raises("bad argument #2 to 'matmul' (tensor expected, got nil)", function() glimpse.matmul(glimpse.zeros(2), nil) end)
  raises("targets expected", function() glimpse.cross_entropy(glimpse.zeros(2, 3), nil) end)
  raises("got no value", function() glimpse.maximum(glimpse.zeros(2)) end)
end

function T.test_mismatched_shapes_show_both_shapes()
  local err = raises("matmul: [3,4] x [5,6]: inner dims 4 != 5", function()
    glimpse.zeros(3, 4):matmul(glimpse.zeros(5, 6))
  end)
  lu.assertStrContains(err, "[3,4]")
  raises("do not broadcast", function() return glimpse.zeros(2, 3) + glimpse.zeros(4) end)
  raises("[2,3]", function() return glimpse.zeros(2, 3) * glimpse.zeros(3, 2) end)
  raises("cannot become", function() glimpse.zeros(2, 3):reshape(4, 2) end)
  raises("does not fit", function() glimpse.cat({glimpse.zeros(2, 2), glimpse.zeros(3, 3)}, 1) end)
  raises("do not fit logits", function() glimpse.cross_entropy(glimpse.zeros(2, 3), {1, 2, 3}) end)
  raises("differ in shape", function() glimpse.mse_loss(glimpse.zeros(2), glimpse.zeros(3)) end)
  raises("do not broadcast", function() glimpse.softmax(glimpse.zeros(2, 3), 2, glimpse.ones(3, 3)) end)
  raises("batch dim", function() glimpse.zeros(2, 3, 4):matmul(glimpse.zeros(3, 4, 5)) end)
end

function T.test_out_of_range_dims_and_indices()
  local x = glimpse.zeros(2, 3)
  raises("dim 3 out of range for a 2-dim tensor", function() x:sum(3) end)
  raises("not 0", function() x:sum(0) end)
  raises("dim -3 out of range", function() x:sum(-3) end)
  raises("index 3 out of range", function() return x[3] end)
  raises("out of range", function() return x[0] end)
  raises("index 4 out of range (valid 1..3)", function() x:index_select(2, {1, 4}) end)
  raises("out of range", function() x:gather(2, glimpse.tensor({{0}, {1}})) end)
  raises("target 4 out of range (valid 1..3)", function() glimpse.cross_entropy(x, {1, 4}) end)
  raises("out of range", function() x:narrow(2, 3, 2) end)
  raises("out of range", function() glimpse.embedding(glimpse.zeros(3, 2), {4}) end)
  raises("not a permutation", function() glimpse.zeros(2, 3, 4):permute(1, 1, 2) end)
end

function T.test_nan_and_invalid_values_are_refused_where_they_matter()
  raises("invalid probability", function() glimpse.multinomial(glimpse.tensor({0.5, 0 / 0}), 1) end)
  raises("sums to 0", function() glimpse.multinomial(glimpse.tensor({0, 0}), 1) end)
  raises("not in [0,1]", function() glimpse.bernoulli(glimpse.tensor({1.5})) end)
  raises("bad bounds", function() glimpse.zeros(2):clamp(0 / 0, 1) end)
  raises("out of range", function() glimpse.cross_entropy(glimpse.zeros(1, 3), glimpse.tensor({0 / 0})) end)
  raises("not in [0,1]", function() glimpse.dropout(glimpse.zeros(2), 1.5) end)
  raises("not a probability", function() glimpse.bce_loss(glimpse.tensor({2}), glimpse.tensor({1})) end)
  -- NaN flows through arithmetic as IEEE says, and can be detected
  lu.assertTrue((glimpse.zeros(2) / 0 * 0):has_nan())
end

function T.test_zero_size_dims_are_handled()
  local e = glimpse.zeros(0, 3)
  lu.assertEquals(e:numel(), 0)
  lu.assertEquals((e + 1).shape, {0, 3})
  lu.assertEquals(e:sum(1):totable(), {0, 0, 0})
  lu.assertEquals(e:matmul(glimpse.zeros(3, 2)).shape, {0, 2})
  lu.assertEquals(glimpse.zeros(2, 0):matmul(glimpse.zeros(0, 3)):totable(), {{0, 0, 0}, {0, 0, 0}})
  raises("empty dim", function() e:max(1) end)
  raises("mean over an empty dim", function() e:mean(1) end)
  lu.assertStrContains(tostring(e), "no elements")
end

function T.test_huge_allocations_fail_cleanly()
  raises("too large", function() glimpse.zeros(100000, 100000) end)
  raises("too large", function() glimpse.zeros(2147483647, 2, 2) end)
  raises("negative", function() glimpse.zeros(-1) end)
  raises("too many", function() glimpse.arange(0, 1e12) end)
  raises("at most 8", function() glimpse.zeros(1, 1, 1, 1, 1, 1, 1, 1, 1) end)
end

function T.test_autograd_misuse_is_explained()
  raises("does not require grad", function() glimpse.zeros(2):sum():backward() end)
  raises("scalar", function() (glimpse.zeros(2):requires_grad() * 2):backward() end)
  raises("closed", function()
    local x = glimpse.zeros(2)
    x:close()
    return x + 1
  end)
  raises("in-place", function() glimpse.zeros(2):requires_grad():zero_() end)
end

function T.test_ragged_tables_are_refused()
  raises("ragged", function() glimpse.tensor({{1, 2}, {3}}) end)
  raises("ragged", function() glimpse.tensor({{1, 2}, 3}) end)
end

function T.test_errors_leave_the_state_usable()
  for _ = 1, 100 do pcall(function() glimpse.zeros(3, 4):matmul(glimpse.zeros(5, 6)) end) end
  local x = glimpse.ones(2, 2)
  lu.assertEquals(x:matmul(x):totable(), {{2, 2}, {2, 2}})
end

return T
