-- tests/test_pointer_any.lua -- glimpse.models.PointerNet on pointing problems of one's own
-- (bindings/glimpse/models/pointer.lua): inputs of any width (scalars (B,L) or (B,L,1),
-- vectors (B,L,D)), the stop rules (outputs = k, min_outputs / max_outputs with the end slot
-- open from the first step, repeats), the batch layout (PointerNet.batch, by fields), old
-- checkpoints without the new options, and eval.pointer on any dataset in the layout.
-- Two problems train to >= 90% exact on held-out inputs on a small budget: the 3 largest
-- numbers of a list in order (docs/api/models/pointer.md's example, same settings) and the
-- positions of the duplicates in a list of one-hot symbols (a variable number of outputs,
-- none at all included).
local lu = require "luaunit"
local glimpse = require "glimpse"
local Rng = glimpse.data.Rng
local models = glimpse.models
local PointerNet, eval = models.PointerNet, models.eval

local T = {}

local HELD_OUT_EXACT = 0.9      -- the issue's bar: exact sequences on held-out inputs
local TOP3_STEPS = 300          -- docs/api/models/pointer.md's budget (about 1.5 s here)
local TOP3_SECONDS = 120        -- the issue's bound on training time (two cores)
local DUP_STEPS = 600           -- the duplicates reach ~98% by then (about 5 s here)
local DUP_SYMBOLS = 6           -- one-hot vectors: input_dim
local LOSS_EPS = 1e-5

local function tiny(o)
  local opts = {emb = 8, hidden = 8}
  for k, v in pairs(o or {}) do opts[k] = v end
  glimpse.manual_seed(3)
  return PointerNet(opts)
end

-- a fixed set of (inputs, targets) examples from example(rng), with the layout's collate
local function dataset(example, n, seed, name)
  local rng, ds = Rng.new(seed, name), {n = n, lists = {}, targets = {}}
  for i = 1, n do ds.lists[i], ds.targets[i] = example(rng) end
  function ds:collate(idx)
    local xs, ys = {}, {}
    for k, i in ipairs(idx) do xs[k], ys[k] = self.lists[i], self.targets[i] end
    return PointerNet.batch(xs, ys)
  end
  return ds
end

local function train(model, example, steps)
  return glimpse.train.Trainer{
    model = model, optimizer = {"Adam", lr = 0.003}, schedule = {"CosineAnnealingLR"},
    clip = 2, steps = steps, seed = 1, progress = false,
    data = function(_, rng)
      local xs, ys = {}, {}
      for k = 1, 64 do xs[k], ys[k] = example(rng) end
      return PointerNet.batch(xs, ys)
    end,
  }:fit()
end

-- the 3 largest of 5 to 8 numbers, largest first (the doc's example)
local function top3(rng)
  local xs, order = {}, {}
  for i = 1, rng:int(5, 8) do xs[i], order[i] = rng:random(), i end
  table.sort(order, function(a, b) return xs[a] > xs[b] end)
  return xs, {order[1], order[2], order[3]}
end

-- 4 to 7 symbols (one-hot of DUP_SYMBOLS); the targets: the positions whose symbol came
-- before, in order (none when every symbol differs)
local function duplicates(rng)
  local xs, seen, ys = {}, {}, {}
  for i = 1, rng:int(4, 7) do
    local v = rng:int(1, DUP_SYMBOLS)
    local onehot = {}
    for d = 1, DUP_SYMBOLS do onehot[d] = d == v and 1 or 0 end
    xs[i] = onehot
    if seen[v] then ys[#ys + 1] = i end
    seen[v] = true
  end
  return xs, ys
end

-- ---------------------------------------------------------------------------------------
-- problems of one's own, trained

function T.test_three_largest_numbers_reach_90_percent_exact_on_held_out_lists()
  glimpse.manual_seed(1)
  local model = PointerNet{input_dim = 1, outputs = 3, emb = 32, hidden = 64}
  local held_out = dataset(top3, 500, 2, "top3")
  local history = train(model, top3, TOP3_STEPS)
  local r = eval.pointer(model, held_out)
  lu.assertTrue(r.exact >= HELD_OUT_EXACT, string.format("exact %.3f after %d steps", r.exact,
                                                         history.steps))
  lu.assertTrue(r.token >= r.exact)
  lu.assertTrue(history.seconds < TOP3_SECONDS, string.format("%.1f s", history.seconds))
  for _, out in ipairs((eval.decode_all(model, held_out))) do lu.assertEquals(#out, 3) end
end

function T.test_positions_of_the_duplicates_a_variable_number_of_outputs()
  glimpse.manual_seed(1)
  local model = PointerNet{input_dim = DUP_SYMBOLS, min_outputs = 0, emb = 32, hidden = 64}
  local held_out = dataset(duplicates, 300, 2, "dups")
  local none = 0
  for i = 1, held_out.n do if #held_out.targets[i] == 0 then none = none + 1 end end
  lu.assertTrue(none > 0, "some lists have no duplicate: the end slot comes first")
  train(model, duplicates, DUP_STEPS)
  local r = eval.pointer(model, held_out)
  lu.assertTrue(r.exact >= HELD_OUT_EXACT, string.format("exact %.3f", r.exact))
  local outs = eval.decode_all(model, held_out)
  local empty = 0
  for _, out in ipairs(outs) do
    if #out == 0 then empty = empty + 1 end
    local seen = {}
    for _, p in ipairs(out) do
      lu.assertNil(seen[p])
      seen[p] = true
    end
  end
  lu.assertTrue(empty > 0, "the model answers 'none' where there is no duplicate")
end

-- ---------------------------------------------------------------------------------------
-- the stop rules, untrained

function T.test_exactly_k_outputs_greedy_and_beam_capped_at_the_row()
  local m = tiny{input_dim = 1, outputs = 3}
  local b = PointerNet.batch({{0.1, 0.2, 0.3, 0.4, 0.5}, {0.5, 0.4}, {0.9, 0.1, 0.7}})
  for _, K in ipairs({1, 3}) do
    local outs, ex = m:decode(b, {beam = K})
    lu.assertEquals({#outs[1], #outs[2], #outs[3]}, {3, 2, 3})   -- a row of 2 gives 2
    for i, out in ipairs(outs) do
      lu.assertTrue(ex.finished[i])
      local seen = {}
      for _, p in ipairs(out) do
        lu.assertTrue(p >= 1 and p <= b.lengths[i] and not seen[p])
        seen[p] = true
      end
    end
  end
end

function T.test_the_end_slot_opens_at_min_outputs_and_is_forced_at_max_outputs()
  local b = PointerNet.batch({{1, 2, 3, 4, 5, 6}, {3, 1, 2, 5, 4, 6}})
  -- the log-probabilities of row 1 at step t, after the outputs prev[1..t-1]
  local function end_logp(m, t, prev)
    local st, lp = m:_decode_state(b), nil
    local tokens = glimpse.tensor({1, 1})              -- the go input (the end slot)
    for s = 1, t do
      lp, st = m:_decode_step(tokens, st, s)
      tokens = glimpse.tensor({prev[s] + 1, prev[s] + 1})
    end
    return lp:totable()[1]
  end
  local m = tiny{input_dim = 1, min_outputs = 0}
  m:evaluate()
  lu.assertTrue(end_logp(m, 1, {1})[1] > -math.huge, "min_outputs = 0: the end at step 1")
  m = tiny{input_dim = 1, min_outputs = 2, max_outputs = 4}
  m:evaluate()
  lu.assertEquals(end_logp(m, 2, {1, 2})[1], -math.huge)            -- 1 output so far
  lu.assertTrue(end_logp(m, 3, {1, 2, 3})[1] > -math.huge)          -- 2 outputs: may end
  local row = end_logp(m, 5, {1, 2, 3, 4, 5})                        -- 4 outputs: must end
  lu.assertEquals(row[1], 0)
  for j = 2, #row do lu.assertEquals(row[j], -math.huge) end
  for _, out in ipairs(m:decode(b, {beam = 2})) do lu.assertTrue(#out >= 2 and #out <= 4) end
end

function T.test_repeats_let_a_position_be_chosen_again()
  local b = PointerNet.batch({{0.2, 0.8, 0.5}}, {{2, 2, 1, 2}})
  local m = tiny{input_dim = 1, repeats = true, max_outputs = 5}
  local loss = m:loss(b)                   -- a target that repeats a position is fine
  lu.assertTrue(loss:item() > 0 and loss:item() < math.huge)
  m:evaluate()
  local st = m:_decode_state(b)
  local _, st2 = m:_decode_step(glimpse.tensor({1}), st, 1)
  local lp = m:_decode_step(glimpse.tensor({3}), st2, 2)        -- position 2 was chosen
  lu.assertTrue(lp:totable()[1][3] > -math.huge)
  lu.assertTrue(#m:decode(b)[1] <= 5)
  local strict = tiny{input_dim = 1, max_outputs = 5}
  lu.assertErrorMsgContains("PointerNet:loss: batch.targets[1] chooses position 2 twice",
                            strict.loss, strict, b)
  local lp2 = strict:_decode_step(glimpse.tensor({3}), select(2, strict:_decode_step(
    glimpse.tensor({1}), strict:_decode_state(b), 1)), 2)
  lu.assertEquals(lp2:totable()[1][3], -math.huge)
end

-- ---------------------------------------------------------------------------------------
-- inputs and the batch layout

function T.test_scalars_as_BL_or_BL1_and_vectors_of_any_width()
  local b = PointerNet.batch({{0.3, 0.1, 0.2}, {0.5, 0.4}}, {{1, 3, 2}, {1, 2}})
  lu.assertEquals(b.inputs.shape, {2, 3, 1})
  lu.assertEquals(b.lengths, {3, 2})
  lu.assertEquals(b.input_mask:totable(), {{1, 1, 1}, {1, 1, 0}})
  lu.assertEquals(b.targets:totable(), {{1, 3, 2}, {1, 2, 0}})
  lu.assertEquals(b.target_lengths, {3, 2})
  local m = tiny{input_dim = 1}            -- sort's stop rule: every position once
  local flat = {inputs = b.inputs:reshape(2, 3), lengths = b.lengths, targets = b.targets}
  lu.assertAlmostEquals(m:loss(flat):item(), m:loss(b):item(), LOSS_EPS)
  lu.assertEquals(m:decode(flat), m:decode(b))
  local v = PointerNet.batch({{{1, 0, 0}, {0, 1, 0}}, {{0, 0, 1}, {1, 1, 1}}}, {{2}, {}})
  lu.assertEquals(v.inputs.shape, {2, 2, 3})
  lu.assertEquals(v.target_lengths, {1, 0})
  local m3 = tiny{input_dim = 3, min_outputs = 0}
  lu.assertEquals(m3.embed.weight.shape, {8, 3})
  local loss, stats = m3:loss(v)
  lu.assertTrue(loss:item() > 0)
  lu.assertEquals(stats.steps, 1.5)        -- (1 + end) and (end) steps
end

function T.test_the_layout_is_read_by_fields_with_defaults()
  local m = tiny{input_dim = 2, min_outputs = 1}
  local x = glimpse.rand(2, 4, 2)
  -- no lengths and no mask: every row has L positions; no target_lengths: up to the first 0
  local lean = {inputs = x, targets = glimpse.tensor({{2, 1, 0}, {4, 0, 0}})}
  local full = {inputs = x, lengths = {4, 4}, input_mask = glimpse.ones(2, 4),
                targets = lean.targets, target_lengths = {2, 1}}
  lu.assertEquals(m:loss(lean):item(), m:loss(full):item())
  -- datasets/points.lua's names for the same fields
  local pts = {points = x, point_mask = glimpse.ones(2, 4), lengths = {4, 4},
               targets = lean.targets, target_lengths = {2, 1}}
  lu.assertEquals(m:loss(pts):item(), m:loss(full):item())
  lu.assertErrorMsgContains("PointerNet:loss: batch.inputs must be a (B,L,2) tensor, got [2,4,3]",
                            m.loss, m, {inputs = glimpse.rand(2, 4, 3)})
  lu.assertErrorMsgContains("PointerNet:loss: batch.lengths[2] must be an integer in [0, 4]",
                            m.loss, m, {inputs = x, lengths = {4, 5}})
  lu.assertErrorMsgContains("batch.targets must be a (B,T) tensor of 1-based positions",
                            m.loss, m, {inputs = x})
  lu.assertErrorMsgContains("PointerNet:loss: batch.targets[2][1] = 5 is not a position of row 2",
                            m.loss, m, {inputs = x, lengths = {4, 4},
                                        targets = glimpse.tensor({{1}, {5}})})
  lu.assertErrorMsgContains("PointerNet:loss: batch.targets[2] has 0 outputs; the stop rule "
                            .. "allows at least 1", m.loss, m,
                            {inputs = x, targets = glimpse.tensor({{1}, {0}})})
  lu.assertErrorMsgContains("PointerNet.batch: inputs[2][1] must be a number or a list of 2 numbers",
                            PointerNet.batch, {{{1, 2}}, {{1, 2, 3}}})
end

function T.test_options_errors_and_the_sort_default()
  lu.assertErrorMsgContains("PointerNet: task = 'hull' is a preset of the stop rule",
                            PointerNet, {task = "hull", outputs = 3})
  lu.assertErrorMsgContains("PointerNet: min_outputs = 4 is above max_outputs = 3", PointerNet,
                            {min_outputs = 4, max_outputs = 3})
  lu.assertErrorMsgContains("PointerNet: outputs = 2 is exact", PointerNet,
                            {outputs = 2, min_outputs = 1})
  lu.assertErrorMsgContains("PointerNet: option 'input_dim' must be a positive integer",
                            PointerNet, {input_dim = 0})
  lu.assertErrorMsgContains("did you mean 'repeats'?", PointerNet, {["repeat"] = true})
  local default, sort = tiny(), tiny{task = "sort"}
  lu.assertEquals(default.config, sort.config)
  lu.assertEquals(default.config.task, "sort")
  lu.assertEquals(tiny{outputs = 2}.config.task, nil)
  local text = table.concat(PointerNet.options:lines(), "\n")
  for _, name in ipairs({"input_dim", "outputs", "min_outputs", "max_outputs", "repeats"}) do
    lu.assertStrContains(text, name)
  end
end

-- ---------------------------------------------------------------------------------------
-- checkpoints

function T.test_save_and_load_keep_the_stop_rule_and_the_input_width()
  local m = tiny{input_dim = 3, min_outputs = 1, max_outputs = 2, repeats = true}
  local b = PointerNet.batch({{{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}}, {{3, 3}})
  local path = os.tmpname()
  m:save(path)
  local m2 = PointerNet.load(path)
  os.remove(path)
  lu.assertEquals(m2.config, m.config)
  m:evaluate()
  lu.assertEquals(m2:loss(b):item(), m:loss(b):item())
  lu.assertEquals(m2:decode(b, {beam = 2}), m:decode(b, {beam = 2}))
end

function T.test_a_checkpoint_without_the_new_options_loads_as_before()
  local m = tiny{task = "hull"}
  local path = os.tmpname()
  m:save(path)
  local sd = glimpse.load(path)
  -- the metadata a PointerNet wrote before input_dim, outputs, min/max_outputs and repeats
  glimpse.save(path, sd, {format = "glimpse.pointer", version = "1", config =
    '{"attn_hidden":8,"emb":8,"glimpses":0,"hidden":8,"init":"default","logit_clip":0,"task":"hull"}'})
  local old = PointerNet.load(path)
  os.remove(path)
  lu.assertEquals(old.config.input_dim, 2)
  lu.assertEquals(old.config.repeats, false)
  lu.assertEquals(old.config, m.config)
  local points = require "datasets.points"
  local ds = points.make{task = "hull", n = {4, 7}, count = 6, seed = 2}
  local b = ds:collate({1, 2, 3, 4, 5, 6})
  m:evaluate()
  lu.assertEquals(old:decode(b, {beam = 2}), m:decode(b, {beam = 2}))
end

-- ---------------------------------------------------------------------------------------
-- eval.pointer on any dataset

-- a stand-in model that answers answers[i] for example i (batch row order = ds order)
local function answering(answers)
  local next_i = 0
  return {decode = function(_, b)
    local outs = {}
    for k = 1, b.inputs.shape[1] do outs[k] = answers[next_i + k] end
    next_i = next_i + b.inputs.shape[1]
    return outs, {}
  end}
end

function T.test_eval_pointer_measures_any_dataset_in_the_layout()
  local ds = dataset(duplicates, 7, 5, "dups")
  local r = eval.pointer(answering(ds.targets), ds, {batch_size = 3})
  lu.assertEquals({r.exact, r.token, r.n}, {1, 1, 7})
  lu.assertNil(r.area_coverage)
  lu.assertNil(r.valid_tours)
  local wrong = {}
  for i = 1, ds.n do wrong[i] = {} end      -- "no duplicate" everywhere
  local none, positions = 0, 0
  for i = 1, ds.n do
    if #ds.targets[i] == 0 then none = none + 1 end
    positions = positions + #ds.targets[i]
  end
  local w = eval.pointer(answering(wrong), ds, {batch_size = 4})
  lu.assertAlmostEquals(w.exact, none / ds.n, 1e-12)
  lu.assertEquals(w.token, 0)
  lu.assertTrue(positions > 0)
  lu.assertStrContains(eval.describe(r), "exact 100.0%")
end

function T.test_eval_pointer_names_the_missing_field()
  local m = tiny{input_dim = 1, outputs = 1}
  local ds = {n = 2, collate = function(_, idx) return {inputs = glimpse.rand(#idx, 3)} end}
  lu.assertErrorMsgContains("eval.pointer: ds:collate's batch: batch.targets must be a (B,T) tensor",
                            eval.pointer, m, ds)
  ds.collate = function() return "batch" end
  lu.assertErrorMsgContains("eval.pointer: ds:collate must return a batch table", eval.pointer, m, ds)
  lu.assertErrorMsgContains("eval.pointer: argument #2 must be a dataset with n and :collate",
                            eval.pointer, m, {points = {}})
end

return T
