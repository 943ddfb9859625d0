-- tests/test_hardening.lua -- regression tests for the fuzz campaign's findings (issue 13) in
-- the bindings and the engine: leaks on error paths, integers that overflowed or were
-- truncated, a beam that never returned, NaN passing for a masked row, and the tape's
-- silent failures.  (Hostile calls' messages: tests/test_hostile.lua; files: test_io,
-- test_image.)
local lu = require "luaunit"
local glimpse = require "glimpse"

local T = {}

local function live()
  collectgarbage()
  collectgarbage()
  return glimpse.memory().live
end

-- run body, then check that every tensor it made is gone once its handles are
local function assert_no_leak(what, body)
  local before = live()
  body()
  local after = live()
  lu.assertEquals(after, before, what .. ": " .. (after - before) .. " bytes still live")
end

local function raises(pattern, fn, ...)
  local ok, err = pcall(fn, ...)
  lu.assertFalse(ok, "expected an error matching " .. pattern)
  lu.assertStrContains(tostring(err), pattern)
  lu.assertNotStrContains(tostring(err), "attempt to")
  return err
end

-- ---------------------------------------------------------------------------------------
-- leaks on error paths: every temporary lives in a Lua-owned box

function T.test_failed_arithmetic_leaks_nothing()
  assert_no_leak("sub with a ragged table", function()
    local a = glimpse.randn(100, 100)
    for _ = 1, 20 do raises("ragged table", glimpse.sub, a, {{1}, 2}) end
    for _ = 1, 20 do raises("sub", glimpse.sub, a, glimpse.zeros(7)) end
  end)
end

function T.test_failed_maximum_minimum_where_leak_nothing()
  assert_no_leak("maximum/minimum/where", function()
    local a = glimpse.randn(50, 50)
    for _ = 1, 10 do
      raises("maximum", glimpse.maximum, a, {{1}, 2})
      raises("minimum", glimpse.minimum, a, glimpse.zeros(3))
      raises("where", glimpse.where, a, a, {{1}, 2})
      raises("where", glimpse.where, {1, 0}, a, a)
    end
  end)
end

function T.test_failed_in_place_and_embedding_leak_nothing()
  assert_no_leak("add_/embedding", function()
    local a, b = glimpse.zeros(50, 50), glimpse.ones(50, 50)
    local w = glimpse.randn(10, 4)
    for _ = 1, 10 do
      raises("bad argument #2", function() a:add_(b, "x") end)
      raises("add_", function() a:add_({{1, 2}}) end)
      raises("bad argument #3", glimpse.embedding, w, {1, 2}, "x")
      raises("out of range", glimpse.embedding, w, {1, 11})
    end
  end)
end

function T.test_failed_losses_leak_nothing()
  assert_no_leak("mse_loss/bce_loss", function()
    local p, t = glimpse.rand(30, 30), glimpse.rand(30, 30)
    for _ = 1, 10 do
      raises("reduction 'avg' is not one of", glimpse.mse_loss, p, t, {reduction = "avg"})
      raises("reduction", glimpse.bce_loss, p, t, {reduction = 1})
      raises("options table expected", glimpse.mse_loss, p, t, "sum")
      raises("ignore_index", glimpse.cross_entropy, p, {1}, {ignore_index = 2.5})
    end
  end)
end

function T.test_grad_set_to_itself_is_freed()
  assert_no_leak("x.grad = x", function()
    local x = glimpse.randn(64, 64)
    x.grad = x
    lu.assertEquals(x.grad:totable(), x:totable())
    local y = glimpse.randn(64, 64):requires_grad()
    local z = y * 2
    y.grad = z          -- z's graph holds y; y's .grad must not hold z's graph
    z.grad = y
  end)
end

function T.test_grad_assignment_shares_the_storage()
  local x, g = glimpse.zeros(3), glimpse.ones(3)
  x.grad = g
  g:add_(1)
  lu.assertEquals(x.grad:totable(), {2, 2, 2})
  raises("grad: a gradient of shape [2] for a tensor of shape [3]", function() x.grad = glimpse.zeros(2) end)
end

-- ---------------------------------------------------------------------------------------
-- integers: range checked, never truncated

function T.test_flat_access_refuses_extreme_positions()
  local t = glimpse.zeros(4)
  raises("data.get_flat", glimpse.data.get_flat, t, math.mininteger)
  raises("out of range", glimpse.data.get_flat, t, math.maxinteger)
  raises("out of range", glimpse.data.get_flat, t, 2, math.maxinteger)
  raises("out of range", glimpse.data.get_flat, t, 2, -1)
  raises("data.set_flat", glimpse.data.set_flat, t, math.maxinteger, {1})
  raises("data.set_flat", glimpse.data.set_flat, t, math.mininteger, {1})
  raises("out of range", glimpse.data.set_flat, t, 4, {1, 2})
  glimpse.data.set_flat(t, 3, {5, 6})
  lu.assertEquals(glimpse.data.get_flat(t, 3), {5, 6})
  lu.assertEquals(glimpse.data.get_flat(t, 5), {})
end

function T.test_ignore_index_out_of_int_range_is_refused()
  local logits = glimpse.randn(2, 3)
  raises("option 'ignore_index' must be an integer in", glimpse.cross_entropy, logits, {1, 2},
         {ignore_index = -2147483648})
  -- 2^32 + 1 once wrapped to 1 and silently ignored class 1
  raises("got 4294967297", glimpse.cross_entropy, logits, {1, 2}, {ignore_index = 4294967297})
  raises("ignore_index", glimpse.nll_loss, logits, {1, 2}, {ignore_index = 2 ^ 40})
  local full = glimpse.cross_entropy(logits, {1, 2}):item()
  lu.assertAlmostEquals(glimpse.cross_entropy(logits, {1, 2}, {ignore_index = -100}):item(), full, 1e-6)
end

function T.test_sample_counts_are_not_truncated()
  local p = glimpse.ones(3)
  raises("out of range", glimpse.multinomial, p, 2 ^ 32 + 1)
  raises("out of range", glimpse.multinomial, p, 0)
  raises("integer expected", glimpse.multinomial, p, 1.5)
  lu.assertEquals(glimpse.multinomial(p, 2, true).shape, {2})
end

function T.test_huge_beam_is_refused_at_once()
  local t0 = glimpse.clock()
  local step = function(tokens) return glimpse.zeros(#tokens, 5), nil end
  raises("decode.MAX_BEAM", glimpse.decode.beam, step, {}, {beam = 1e7, batch = 1})
  lu.assertTrue(glimpse.clock() - t0 < 1)
end

function T.test_random_fills_refuse_bad_ranges()
  local t = glimpse.zeros(3)
  raises("uniform_", function() t:uniform_(1, 0) end)
  raises("uniform_", function() t:uniform_(0, math.huge) end)
  raises("normal_", function() t:normal_(0, -1) end)
  raises("normal_", function() t:normal_(0 / 0, 1) end)
  t:uniform_(2, 2)
  lu.assertEquals(t:totable(), {2, 2, 2})
  t:normal_(1, 0)
  lu.assertEquals(t:totable(), {1, 1, 1})
end

-- ---------------------------------------------------------------------------------------
-- NaN propagates as in PyTorch; a fully masked row is zeros everywhere

local NAN, INF = 0 / 0, math.huge

local function all_nan(t)
  for _, v in ipairs(t:reshape(-1):totable()) do if v == v then return false end end
  return true
end

function T.test_softmax_of_a_nan_row_is_all_nan()
  lu.assertTrue(all_nan(glimpse.softmax(glimpse.tensor({NAN, 0, 1}))))
  lu.assertTrue(all_nan(glimpse.softmax(glimpse.tensor({INF, 0, 1}))))
  -- a masked NaN is not seen; masked positions stay exactly 0
  local s = glimpse.softmax(glimpse.tensor({{NAN, 0, 0}}), 2, glimpse.tensor({{0, 1, 1}}))
  lu.assertEquals(s:totable(), {{0, 0.5, 0.5}})
  local r = glimpse.softmax(glimpse.tensor({{NAN, 0}, {1, 1}}), 2):totable()
  lu.assertEquals(r[2], {0.5, 0.5})     -- other rows untouched
end

function T.test_fully_masked_rows_are_consistent()
  local x = glimpse.tensor({{-INF, -INF}, {0, 0}}):requires_grad()
  lu.assertEquals(glimpse.softmax(x, 2):totable(), {{0, 0}, {0.5, 0.5}})
  local ls = glimpse.log_softmax(x, 2):totable()
  lu.assertEquals(ls[1], {-INF, -INF})
  lu.assertAlmostEquals(ls[2][1], -math.log(2), 1e-6)
  -- no gradient flows into a fully masked row, from either function
  local y = glimpse.log_softmax(x, 2):narrow(1, 1, 1):clamp(-1, 0):sum()
    + glimpse.softmax(x, 2):narrow(1, 1, 1):sum()
  y:backward()
  lu.assertEquals(x.grad:narrow(1, 1, 1):totable(), {{0, 0}})
  -- attention: every position masked gives zero weights and a zero context
  local ctx, alpha = glimpse.attention.dot(glimpse.rand(1, 3), glimpse.rand(1, 2, 3),
                                           glimpse.rand(1, 2, 4), {{0, 0}})
  lu.assertEquals(alpha:totable(), {{0, 0}})
  lu.assertEquals(ctx:totable(), {{0, 0, 0, 0}})
end

function T.test_fused_attention_propagates_nan()
  local q = glimpse.tensor({{NAN, 0, 0}, {1, 0, 0}})
  local keys, values = glimpse.rand(2, 4, 3), glimpse.rand(2, 4, 5)
  local att = glimpse.attention
  local function check(ctx, alpha, name)
    lu.assertTrue(all_nan(ctx:narrow(1, 1, 1)), name .. ": ctx of the NaN row")
    lu.assertTrue(all_nan(alpha:narrow(1, 1, 1)), name .. ": weights of the NaN row")
    lu.assertFalse(ctx:narrow(1, 2, 1):has_nan(), name .. ": the other row")
  end
  local c, a = att.scaled_dot(q, keys, values)
  check(c, a, "scaled_dot")
  c, a = att.dot(q, keys, values)
  check(c, a, "dot")
  local wq = glimpse.tensor({{NAN, 0}, {0, 0}})
  c, a = att.additive(wq, glimpse.rand(2, 4, 2), glimpse.rand(2), values)
  check(c, a, "additive")
  c, a = att.attend(glimpse.tensor({{NAN, 0, 0, 0}, {1, 2, 3, 4}}), values)
  check(c, a, "attend")
  c, a = att.attend(glimpse.tensor({{NAN, 0, 0, 0}, {1, 2, 3, 4}}), values, nil,
                    {normaliser = "sigmoid"})
  check(c, a, "attend sigmoid")
  -- multi-head: a NaN query row gives NaN probabilities
  local p = glimpse._attention.mh_probs(glimpse.tensor({{{NAN, 0}}}), glimpse.rand(1, 3, 2), nil,
                                        1, false, 1)
  lu.assertTrue(all_nan(p))
end

-- ---------------------------------------------------------------------------------------
-- the tape's failures are errors

local function with_fault(kind, nth, body)
  glimpse._fault(kind, nth)
  local ok, err = pcall(body)
  glimpse._fault(kind, 0)
  if not ok then error(err, 0) end
end

function T.test_lost_graph_node_fails_backward()
  local x = glimpse.randn(3):requires_grad()
  local y
  with_fault("node", 1, function() y = x * 2 end)
  lu.assertEquals(y:totable()[1], x:totable()[1] * 2)    -- the values are right
  raises("out of memory while recording op", function() y:sum():backward() end)
  raises("graph of this tensor was lost", function() y:backward(glimpse.ones(3)) end)
  lu.assertNil(x.grad)
end

function T.test_unsaved_tensor_fails_backward()
  local x = glimpse.randn(3):requires_grad()
  local y
  with_fault("save", 1, function() y = x:exp() end)
  raises("could not be saved", function() y:sum():backward() end)
  lu.assertNil(x.grad)
end

function T.test_failed_gradient_buffer_fails_backward()
  local x = glimpse.randn(3):requires_grad()
  local y = (x * 3):sum()
  local err
  with_fault("grad", 1, function()
    err = raises("out of memory for a gradient buffer", function() y:backward() end)
  end)
  -- and a later backward works again
  local z = (x * 3):sum()
  z:backward()
  lu.assertEquals(x.grad:totable(), {3, 3, 3})
end

return T
