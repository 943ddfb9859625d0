-- tests/test_mechanisms.lua -- the mechanisms glimpse.compare added: monotonic attention
-- (Raffel et al. 2017), the convolutional score (Allamanis et al. 2016), supervised attention,
-- the RNNenc baseline (Seq2Seq without attention) and models.Transformer.  Finite-difference
-- gradient checks for the new composites (PyTorch has none of these layers, so no fixtures;
-- the Transformer's layers have theirs in test_transformer.lua), the monotonic recurrence
-- against a plain loop, and the hard decoding's monotonicity.
local lu = require "luaunit"
local glimpse = require "glimpse"
local helpers = require "tests.helpers"
local nn, att = glimpse.nn, glimpse.attention
local ct = require "datasets.compare_tasks"

local T = {}

local GC = {eps = 1e-2, atol = 2e-2, rtol = 3e-2}      -- float32 finite differences
local TOL = 1e-5

local function sigmoid(x) return 1 / (1 + math.exp(-x)) end

function T.test_monotonic_and_conv_are_listed()
  local function has(list, x)
    for _, v in ipairs(list) do if v == x then return true end end
    return false
  end
  lu.assertTrue(has(att.MODES, "monotonic"))
  lu.assertTrue(has(att.SCORES, "conv"))
end

function T.test_monotonic_expected_alignment_matches_the_recurrence()
  glimpse.manual_seed(3)
  local e = glimpse.randn(3, 7) * 2
  local prev = glimpse.softmax(glimpse.randn(3, 7), 2)
  local a = att.monotonic(e, prev):totable()
  local ev, pv = e:totable(), prev:totable()
  for b = 1, 3 do
    local q = 0
    for j = 1, 7 do
      -- q_j = (1 - p_{j-1}) q_{j-1} + alpha_{i-1,j};  alpha_ij = p_j q_j
      q = (j > 1 and (1 - sigmoid(ev[b][j - 1])) or 0) * q + pv[b][j]
      lu.assertAlmostEquals(a[b][j], sigmoid(ev[b][j]) * q, TOL)
    end
  end
end

function T.test_monotonic_masked_positions_get_zero_and_rows_sum_to_at_most_one()
  local e = glimpse.tensor{{2, -1, 0, 3}, {0, 0, 0, 0}}
  local prev = glimpse.tensor{{1, 0, 0, 0}, {0.5, 0.5, 0, 0}}
  local a = att.monotonic(e, prev, glimpse.tensor{{1, 1, 1, 1}, {1, 1, 0, 0}}):totable()
  lu.assertEquals(a[2][3], 0)
  lu.assertEquals(a[2][4], 0)
  for b = 1, 2 do
    local s = 0
    for j = 1, 4 do s = s + a[b][j] end
    lu.assertTrue(s <= 1 + TOL)
  end
end

function T.test_monotonic_gradcheck()
  glimpse.manual_seed(4)
  local e = glimpse.randn(2, 6):requires_grad()
  local prev = glimpse.softmax(glimpse.randn(2, 6), 2):detach():requires_grad()
  local mask = glimpse.tensor{{1, 1, 1, 1, 1, 1}, {1, 1, 1, 1, 0, 0}}
  helpers.gradcheck(function(x, p) return att.monotonic(x, p, mask) end, {e, prev}, GC,
                    "attention.monotonic")
end

function T.test_monotonic_hard_decoding_never_moves_back()
  local e = glimpse.tensor{{-1, 2, -1, 3}, {-1, -1, -1, -1}}
  local alpha, pos = att.monotonic_hard(e, glimpse.tensor{3, 1}, glimpse.tensor{4, 4})
  lu.assertEquals(alpha:totable(), {{0, 0, 0, 1}, {0, 0, 0, 0}})   -- from 3: position 2 is behind
  lu.assertEquals(pos:totable(), {4, 1})                          -- none found: stays
end

function T.test_monotonic_module_trains_soft_and_decodes_hard()
  glimpse.manual_seed(5)
  local a = nn.Attention{score = "additive", mode = "monotonic", query = 6, key = 4, hidden = 5}
  local keys = glimpse.randn(2, 5, 4)
  local st
  local ctx, alpha
  for _ = 1, 2 do ctx, alpha, st = a(glimpse.randn(2, 6), keys, nil, nil, st) end
  lu.assertEquals(ctx.shape, {2, 4})
  local loss = (ctx * ctx):sum()
  loss:backward()
  lu.assertNotNil(a.monotonic_r.grad)
  a:evaluate()
  st = nil
  local last = {1, 1}
  for _ = 1, 4 do
    ctx, alpha, st = a(glimpse.randn(2, 6), keys, nil, nil, st)
    for b, row in ipairs(alpha:totable()) do
      local s = 0
      for _, v in ipairs(row) do
        lu.assertTrue(v == 0 or v == 1)
        s = s + v
      end
      lu.assertTrue(s <= 1)
    end
    for b, p in ipairs(st.mono_pos:totable()) do
      lu.assertTrue(p >= last[b])
      last[b] = p
    end
  end
end

function T.test_conv_unfold_is_a_window_with_zero_padding()
  local x = glimpse.tensor{{{1, 10}, {2, 20}, {3, 30}}}                -- (1,3,2)
  lu.assertEquals(att.unfold(x, 3):totable(), {{{0, 0, 1, 10, 2, 20}, {1, 10, 2, 20, 3, 30},
                                                {2, 20, 3, 30, 0, 0}}})
  lu.assertErrorMsgContains("odd", att.unfold, x, 2)
end

function T.test_conv_score_gradcheck()
  glimpse.manual_seed(6)
  local keys = glimpse.randn(2, 5, 3):requires_grad()
  local q = glimpse.randn(2, 4):requires_grad()
  local F1 = (glimpse.randn(4, 9) * 0.5):requires_grad()
  local b1 = (glimpse.randn(4) * 0.5):requires_grad()
  local Wq = (glimpse.randn(4, 4) * 0.5):requires_grad()
  local F2 = (glimpse.randn(1, 12) * 0.5):requires_grad()
  helpers.gradcheck(function(k, qq, f1, bb, wq, f2)
    return att.conv_scores(att.conv_features(k, f1, bb), qq, wq, f2)
  end, {keys, q, F1, b1, Wq, F2}, GC, "conv score")
  -- the module's step agrees with the reference scores + softmax
  local a = nn.Attention{score = "conv", query = 4, key = 3, hidden = 4, kernel = 3}
  local k2 = keys:detach()
  local _, alpha = a(q:detach(), k2)
  local st = a:precompute(k2)
  local ref = glimpse.softmax(att.scores("conv", a:score_params(), st.cache, q:detach()), 2)
  helpers.assert_close(alpha, ref, 1e-5)
end

local function tiny_set(name)
  return ct.task(name):train_set(24, 1)
end

function T.test_supervised_attention_adds_the_alignment_nll()
  local ds = tiny_set("reversal")
  local b = ds:collate({1, 2, 3, 4})
  glimpse.manual_seed(7)
  local m0 = glimpse.models.Seq2Seq{dataset = ds, hidden = 8, emb = 4, attn_hidden = 4}
  glimpse.manual_seed(7)
  local m1 = glimpse.models.Seq2Seq{dataset = ds, hidden = 8, emb = 4, attn_hidden = 4,
                                    supervise = 0.5}
  local l0 = m0:loss(b)
  local l1, st = m1:loss(b)
  lu.assertTrue(st.supervision > 0)
  lu.assertAlmostEquals(l1:item(), l0:item() + 0.5 * st.supervision, 1e-4)
  -- the term by hand from the teacher-forced alignments
  local alpha = m1:alignments(b):totable()
  local al = b.align:totable()
  local sum, n = 0, 0
  for i = 1, #al do
    for t = 1, #al[i] do
      if al[i][t] > 0 then sum, n = sum - math.log(alpha[i][t][math.tointeger(al[i][t])] + 1e-9), n + 1 end
    end
  end
  lu.assertAlmostEquals(st.supervision, sum / n, 1e-4)
  l1:backward()
  lu.assertNotNil(m1.attention.v.grad)
end

function T.test_rnnenc_has_no_attention_and_decodes()
  local ds = tiny_set("sorting")
  local m = glimpse.models.Seq2Seq{dataset = ds, hidden = 8, emb = 4, attention = false}
  lu.assertNil(m.attention)
  local b = ds:collate({1, 2})
  local loss = m:loss(b)
  loss:backward()
  lu.assertNil(m:alignments(b))
  local outs = m:decode(b)
  lu.assertEquals(#outs, 2)
  lu.assertStrContains(tostring(m), "no attention")
end

function T.test_transformer_model_learns_saves_and_gives_alignments()
  local ds = tiny_set("reversal")
  local dir = helpers.tmpdir()
  for _, pos in ipairs({"sinusoidal", "learned"}) do
    glimpse.manual_seed(8)
    local m = glimpse.models.Transformer{dataset = ds, d = 16, heads = 2, layers = 1, ff = 16,
                                         positions = pos, max_len = 64}
    local b = ds:collate({1, 2, 3, 4})
    local opt = glimpse.optim.Adam(m:parameters(), {lr = 1e-2})
    local first, last
    for i = 1, 15 do
      opt:zero_grad()
      local loss = m:loss(b)
      loss:backward()
      opt:step()
      first = first or loss:item()
      last = loss:item()
    end
    lu.assertTrue(last < first, pos .. ": the loss goes down")
    local alpha = m:alignments(b)
    lu.assertEquals(alpha.shape, {4, b.tgt_in.shape[2], b.src.shape[2]})
    local outs, ex = m:decode(b)
    lu.assertEquals(#outs, 4)
    lu.assertEquals(#ex.alignments[1][1], b.src.shape[2])
    local path = dir .. "/t-" .. pos .. ".safetensors"
    m:save(path)
    local m2 = glimpse.models.Transformer.load(path)
    helpers.assert_close(m2:alignments(b), alpha, 1e-6)
  end
  lu.assertErrorMsgContains("multiple of heads", glimpse.models.Transformer,
                            {dataset = ds, d = 10, heads = 4})
  lu.assertErrorMsgContains("cannot exceed", function()
    glimpse.models.Transformer{dataset = ds, d = 8, heads = 2}:decode(ds:collate({1}),
                                                                      {beam = 2, n_best = 3})
  end)
end

return T
