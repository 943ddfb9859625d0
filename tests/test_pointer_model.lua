-- tests/test_pointer_model.lua -- glimpse.models.PointerNet (bindings/glimpse/models/pointer.lua)
-- and glimpse.models.eval.pointer: training on a tiny sort task, constrained decoding (valid
-- permutations for sort and tsp, at least 3 points for hull), beam 1 = greedy, glimpses,
-- save/load, named configuration errors, the measures against a perfect decoder.
local lu = require "luaunit"
local glimpse = require "glimpse"
local models = require "glimpse.models"
local decode = require "glimpse.decode"
local planar = require "glimpse.planar"
local points = require "datasets.points"

local PointerNet = models.PointerNet
local T = {}

local TRAIN_STEPS = 30          -- Adam steps on one batch ...
local TRAIN_RATIO = 0.5         -- ... after which the loss is below this share of the first
local PAPER_BOUND = 0.08        -- init="paper": U(-0.08, 0.08)

local function tiny(o)
  local opts = {task = "sort", emb = 16, hidden = 16}
  for k, v in pairs(o or {}) do opts[k] = v end
  glimpse.manual_seed(3)
  return PointerNet(opts)
end

local function data(task, n, count)
  return points.make{task = task, n = n or {4, 6}, count = count or 12, seed = 9}
end

local function all(ds)
  local idx = {}
  for i = 1, ds.n do idx[i] = i end
  return ds:collate(idx)
end

function T.test_loss_decreases_on_sorting_with_a_fixed_seed()
  local m = tiny()
  local b = all(data("sort", 5, 8))
  local opt = glimpse.optim.Adam(m:parameters(), {lr = 0.01})
  local first, last, stats
  for i = 1, TRAIN_STEPS do
    opt:zero_grad()
    local loss
    loss, stats = m:loss(b)
    loss:backward()
    opt:step()
    if i == 1 then first = loss:item() end
    last = loss:item()
  end
  lu.assertTrue(last < TRAIN_RATIO * first, string.format("loss %g -> %g", first, last))
  lu.assertEquals(stats.steps, 6)               -- 5 points and the end step
  lu.assertTrue(stats.token_accuracy > 0.5)
end

function T.test_decoding_gives_valid_outputs_for_every_task_greedy_and_beam()
  for _, task in ipairs({"sort", "hull", "tsp"}) do
    local ds = data(task)
    local m = tiny{task = task}
    local b = all(ds)
    for _, K in ipairs({1, 3}) do
      local outs, ex = m:decode(b, {beam = K})
      lu.assertEquals(#outs, ds.n)
      for i = 1, ds.n do
        local n = #ds.points[i]
        if task == "hull" then
          lu.assertTrue(#outs[i] >= 3, "a hull has at least 3 points")
          local seen = {}
          for _, p in ipairs(outs[i]) do
            lu.assertTrue(p >= 1 and p <= n and not seen[p])
            seen[p] = true
          end
        else
          lu.assertTrue(planar.is_tour(outs[i], n), task .. ": a permutation of 1.." .. n)
        end
        lu.assertEquals(#ex.alignments[i], #outs[i] + 1)         -- the end step included
        lu.assertEquals(#ex.alignments[i][1], b.points.shape[2] + 1)
      end
    end
  end
end

function T.test_beam_search_of_width_1_equals_greedy_decoding()
  local m = tiny{task = "tsp"}
  local b = all(data("tsp"))
  local greedy, gex = m:decode(b)
  m:evaluate()
  local hyps = glimpse.no_grad(function()
    return decode.beam(function(y, s, t) return m:_decode_step(y, s, t) end, m:_decode_state(b),
                       {beam = 1, start = 1, stop = 1, max_len = b.points.shape[2] + 1})
  end)
  for i = 1, #greedy do
    local p = {}
    for k, v in ipairs(hyps[i][1].tokens) do p[k] = v - 1 end
    lu.assertEquals(p, greedy[i])
    lu.assertAlmostEquals(hyps[i][1].log_prob, gex.scores[i], 1e-5)
  end
end

function T.test_glimpses_and_paper_initialisation()
  local m = tiny{glimpses = 2, init = "paper"}
  lu.assertNotNil(m.glimpse)
  for _, p in ipairs(m:parameters()) do
    lu.assertTrue(p:abs():max():item() <= PAPER_BOUND)
  end
  local b = all(data("sort"))
  m:loss(b):backward()
  lu.assertNotNil(m.glimpse.query_proj.weight.grad)
  lu.assertEquals(#m:decode(b, {beam = 2}), 12)
end

function T.test_logit_clipping_bounds_the_pointer_scores()
  local b = all(data("tsp"))
  local C = 0.01                             -- below the untrained scores' scale (~0.04)
  local m, plain = tiny{task = "tsp", logit_clip = C}, tiny{task = "tsp"}   -- same weights
  local st, st0 = m:_decode_state(b), plain:_decode_state(b)
  local logits = m.pointer(st.h, nil, nil, nil, st.ptr)
  local u = plain.pointer(st0.h, nil, nil, nil, st0.ptr)
  -- valid positions (padding is at -1e9): C tanh(u)
  local valid = u:gt(-1)
  lu.assertTrue((u:abs() * valid):max():item() > 2 * C)
  lu.assertTrue(((logits - u:tanh() * C) * valid):abs():max():item() < 1e-6)
  lu.assertTrue((logits:abs() * valid):max():item() <= C + 1e-7)
  m:loss(b):backward()
  lu.assertNotNil(m.pointer.v.grad)
  local path = os.tmpname()
  m:save(path, {steps = 0})
  local m2 = PointerNet.load(path)
  os.remove(path)
  lu.assertEquals(m2.config.logit_clip, C)
  m:evaluate()
  lu.assertEquals(m2:decode(b, {beam = 2}), m:decode(b, {beam = 2}))
  lu.assertErrorMsgContains("PointerNet: option 'logit_clip' must be a finite number >= 0",
                            PointerNet, {logit_clip = -1})
  lu.assertErrorMsgContains("nn.Pointer: option 'logit_clip'", glimpse.nn.Pointer,
                            {query = 4, key = 4, logit_clip = "x"})
end

function T.test_save_and_load_give_the_same_outputs()
  local m = tiny{task = "hull", glimpses = 1}
  local b = all(data("hull"))
  local path = os.tmpname()
  m:save(path, {steps = 0})
  local m2, meta = PointerNet.load(path)
  os.remove(path)
  lu.assertEquals(meta.steps, "0")
  lu.assertEquals(m2.config, m.config)
  m:evaluate()
  lu.assertEquals(m2:loss(b):item(), m:loss(b):item())
  lu.assertEquals(m2:decode(b, {beam = 3}), m:decode(b, {beam = 3}))
end

function T.test_configuration_errors_name_the_option()
  lu.assertErrorMsgContains("PointerNet: unknown task 'knapsack'", PointerNet, {task = "knapsack"})
  lu.assertErrorMsgContains("PointerNet: unknown init 'zeros'", PointerNet, {init = "zeros"})
  lu.assertErrorMsgContains("PointerNet: option 'glimpses' must be an integer >= 0", PointerNet,
                            {glimpses = -1})
  lu.assertErrorMsgContains("PointerNet: unknown option 'hiden'", PointerNet, {hiden = 4})
  lu.assertErrorMsgContains("PointerNet:loss: batch.points must be a (B,L,2) tensor", function()
    tiny():loss({points = glimpse.zeros(2, 3)})
  end)
end

-- mixed sizes (points.make's n = {lo, hi}): a padded batch decodes each example as it would
-- alone, the pointer puts no mass on padding, the loss counts no padded step
function T.test_mixed_sizes_padding_is_never_chosen_and_changes_nothing()
  local MIXED_TOL = 1e-5
  local ds = points.make{task = "hull", n = {3, 12}, count = 10, seed = 4}
  local sizes = {}
  for i = 1, ds.n do sizes[#ds.points[i]] = true end
  lu.assertTrue(next(sizes, next(sizes)) ~= nil, "several sizes in the set")
  local m = tiny{task = "hull"}
  m:evaluate()
  local b = all(ds)
  local N = b.points.shape[2]
  for i = 1, ds.n do
    local n = #ds.points[i]
    lu.assertEquals(b.point_mask:totable()[i], (function()
      local r = {}
      for k = 1, N do r[k] = k <= n and 1 or 0 end
      return r end)())
  end
  for _, K in ipairs({1, 3}) do
    local outs, ex = m:decode(b, {beam = K})
    for i = 1, ds.n do
      local n = #ds.points[i]
      for _, p in ipairs(outs[i]) do lu.assertTrue(p >= 1 and p <= n, "a padded position chosen") end
      for _, dist in ipairs(ex.alignments[i]) do
        for k = n + 2, N + 1 do lu.assertEquals(dist[k], 0, "mass on padding") end
      end
      -- the same example alone, without padding
      local one, ex1 = m:decode(ds:collate({i}), {beam = K})
      lu.assertEquals(outs[i], one[1])
      lu.assertAlmostEquals(ex.scores[i], ex1.scores[1], MIXED_TOL)
      for t, dist in ipairs(ex1.alignments[1]) do
        for k = 1, n + 1 do lu.assertAlmostEquals(ex.alignments[i][t][k], dist[k], MIXED_TOL) end
      end
    end
  end
  -- the loss's steps are the targets' own (each hull and its end), none of the padding
  local _, st = m:loss(b)
  local steps = 0
  for i = 1, ds.n do steps = steps + #ds.targets[i] + 1 end
  lu.assertAlmostEquals(st.steps, steps / ds.n, 1e-9)
end

-- per-size evaluation of one model: a test set per size, each measured on its own
function T.test_one_model_measured_per_size()
  local m = tiny{task = "tsp"}
  for _, n in ipairs({5, 8, 12}) do
    local ds = points.make{task = "tsp", n = n, count = 6, seed = n}
    local r = models.eval.pointer(m, ds, {beam = 2})
    lu.assertEquals(r.n, 6)
    lu.assertEquals(r.valid_tours, 1)
    local opt = 0
    for i = 1, ds.n do opt = opt + ds.tour_lengths[i] end
    lu.assertAlmostEquals(r.optimal_length, opt / ds.n, 1e-6)
    lu.assertTrue(r.tour_length >= r.optimal_length - 1e-6)
  end
end

-- ---------------------------------------------------------------------------------------
-- measures

-- a stand-in model whose decoder returns the true targets (optionally reversed)
local function oracle(ds, reverse)
  return {decode = function(_, b)
    local outs = {}
    for k, i in ipairs(b.indices) do
      local y = ds.targets[i]
      local o = {}
      for t = 1, #y do o[t] = reverse and y[#y + 1 - t] or y[t] end
      outs[k] = o
    end
    return outs, {}
  end}
end

function T.test_pointer_measures_of_a_perfect_decoder()
  local hull = data("hull")
  local r = models.eval.pointer(oracle(hull), hull, {batch_size = 5})
  lu.assertEquals({r.exact, r.invalid, r.n}, {1, 0, hull.n})
  lu.assertAlmostEquals(r.area_coverage, 1, 1e-12)
  local tsp = data("tsp")
  local t = models.eval.pointer(oracle(tsp, true), tsp)
  lu.assertEquals({t.exact, t.valid_tours}, {1, 1})          -- a reversed tour is the same tour
  lu.assertAlmostEquals(t.gap, 0, 1e-9)
  lu.assertAlmostEquals(t.tour_length, t.optimal_length, 1e-9)
end

function T.test_pointer_measures_of_an_untrained_model_are_in_range()
  local tsp = data("tsp")
  local r = models.eval.pointer(tiny{task = "tsp"}, tsp, {beam = 2})
  lu.assertEquals(r.valid_tours, 1)                          -- decoding is constrained
  lu.assertTrue(r.gap >= -1e-9)
  lu.assertTrue(r.exact >= 0 and r.exact <= 1)
end

return T
