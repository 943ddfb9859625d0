-- tests/test_caption_hard.lua -- what makes hard attention learn: the leave-one-out baseline
-- over K samples per caption, per-sample baselines in attention.reinforce_loss, the
-- straight-through Gumbel-softmax sample, the schedules of the soft mixing probability and
-- the entropy weight (Captioner:set_progress), the recipes, and the errors of their options.
local lu = require "luaunit"
local glimpse = require "glimpse"
local att = glimpse.attention
local Captioner = glimpse.captioner.Captioner
local Vocab = glimpse.data.Vocab

local T = {}

local EXACT = 1e-6
local FLOAT_TOL = 1e-5

local WORDS = {"a", "red", "blue", "circle", "square", "above", "below"}

local function tiny(o)
  local opts = {vocab = Vocab.new(WORDS), encoder = {in_channels = 1, channels = {4, 6}},
                dim_embed = 6, dim_hidden = 8, dim_att = 5, max_len = 6, attention = "hard"}
  for k, v in pairs(o or {}) do opts[k] = v end
  return Captioner(opts)
end

local function batch(captions)
  local v = Vocab.new(WORDS)
  local cin, cout = {}, {}
  for k, words in ipairs(captions) do
    local ids = v:encode(words)
    cin[k] = {Vocab.START, table.unpack(ids)}
    cout[k] = {table.unpack(ids)}
    cout[k][#ids + 1] = Vocab.END
  end
  local pad = glimpse.data.batches.pad
  local b = {images = glimpse.rand(#captions, 1, 16, 16)}
  b.captions_in = pad(cin, {pad = Vocab.PAD})
  b.captions_out, b.lengths, b.mask = pad(cout, {pad = Vocab.PAD})
  return b
end

local CAPS = {{"a", "red", "circle"}, {"a", "blue", "square", "above", "a", "red", "circle"}}

local function attention_grad(cap)
  glimpse.no_grad(function() cap.attention.v:uniform_(-1, 1) end)
  local b = batch(CAPS)
  local loss, info = cap:loss(b.images, b.captions_in, b.captions_out, b.mask)
  loss:backward()
  local g = cap.attention.query_proj.weight.grad
  return g and g:abs():sum():item() or 0, info
end

function T.test_leave_one_out_baseline_is_the_mean_of_the_other_samples()
  local b = att.leave_one_out(glimpse.tensor({{1, 2, 3}, {4, 4, 10}})):totable()
  lu.assertAlmostEquals(b[1][1], 2.5, EXACT)
  lu.assertAlmostEquals(b[1][2], 2, EXACT)
  lu.assertAlmostEquals(b[1][3], 1.5, EXACT)
  lu.assertAlmostEquals(b[2][3], 4, EXACT)
  -- the advantages of a row sum to zero: the estimate only compares samples of one input
  local r = glimpse.randn(5, 4)
  local adv = (r - att.leave_one_out(r)):sum(2)
  lu.assertTrue(adv:abs():max():item() < FLOAT_TOL)
end

function T.test_reinforce_loss_takes_a_baseline_per_sample()
  local reward, logp = glimpse.tensor({1, 3}), glimpse.tensor({-2, -4})
  local loss = att.reinforce_loss(reward, logp, {baseline = glimpse.tensor({2, 1})})
  -- -mean((1 - 2) * -2, (3 - 1) * -4) = -mean(2, -8) = 3
  lu.assertAlmostEquals(loss:item(), 3, EXACT)
end

function T.test_k_samples_decode_every_caption_k_times_with_a_reinforce_term()
  glimpse.manual_seed(3)
  local g, info = attention_grad(tiny({soft_prob = 0, samples = 3, doubly_stochastic = 0}))
  lu.assertNotNil(info.reinforce)
  lu.assertTrue(g > 0)
  lu.assertEquals(info.alphas.shape[1], 2 * 3)           -- B * K rows
  local cap = tiny({samples = 3})
  lu.assertEquals(cap.config.baseline, "loo")              -- the default with K > 1
end

function T.test_gumbel_straight_through_reads_one_cell_and_trains_the_attention()
  glimpse.manual_seed(4)
  local alpha = glimpse.softmax(glimpse.randn(3, 5), 2):requires_grad()
  local values = glimpse.randn(3, 5, 2)
  local ctx, idx = att.gumbel_sample(alpha, values, 0.5)
  local v, ids = values:totable(), idx:totable()
  for b = 1, 3 do
    for d = 1, 2 do lu.assertAlmostEquals(ctx:totable()[b][d], v[b][ids[b][1]][d], FLOAT_TOL) end
  end
  ctx:sum():backward()
  lu.assertTrue(alpha.grad:abs():sum():item() > 0)
  -- in the captioner the attention MLP learns with no REINFORCE term at all
  local g, info = attention_grad(tiny({soft_prob = 0, estimator = "gumbel", reward_weight = 0,
                                       entropy = 0, doubly_stochastic = 0}))
  lu.assertNil(info.reinforce)
  lu.assertTrue(g > 0)
end

function T.test_set_progress_moves_soft_prob_and_entropy_over_the_anneal_share()
  local cap = tiny({soft_prob = 1, soft_prob_end = 0, entropy = 0.02, entropy_end = 0, anneal = 0.5})
  local want = {{0, 1, 0.02}, {0.25, 0.5, 0.01}, {0.5, 0, 0}, {0.9, 0, 0}}
  for _, w in ipairs(want) do
    cap:set_progress(w[1])
    lu.assertAlmostEquals(cap.attention.soft_prob, w[2], EXACT)
    lu.assertAlmostEquals(cap.entropy_weight, w[3], EXACT)
  end
  local paper = tiny(glimpse.captioner.RECIPES.paper)
  paper:set_progress(0.7)
  lu.assertAlmostEquals(paper.attention.soft_prob, 0.5, EXACT)   -- constant: the paper's p
end

function T.test_every_recipe_builds_a_captioner_that_trains_a_step()
  for name, r in pairs(glimpse.captioner.RECIPES) do
    glimpse.manual_seed(5)
    local cap = tiny(r)
    cap:set_progress(0.9)
    local b = batch(CAPS)
    local loss = cap:loss(b.images, b.captions_in, b.captions_out, b.mask)
    lu.assertTrue(loss:item() == loss:item(), name)
    loss:backward()
  end
end

function T.test_bad_hard_options_give_clear_errors()
  local function err(o, pat)
    local ok, e = pcall(tiny, o)
    lu.assertFalse(ok)
    lu.assertStrContains(tostring(e), pat)
  end
  err({baseline = "loo"}, "needs samples >= 2")
  err({baseline = "best"}, "'baseline' must be")
  err({estimator = "straight"}, "'estimator' must be")
  err({samples = 0}, "'samples' must be a positive integer")
  err({anneal = 0}, "'anneal' must be a number")
  local cap = tiny()
  local ok, e = pcall(cap.set_progress, cap, "half")
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(e), "set_progress")
end

function T.test_load_weights_refuses_another_vocabulary()
  local path = os.tmpname() .. ".safetensors"
  local other = Captioner{vocab = Vocab.new({"x", "y", "z", "w", "v", "u", "t"}),
                          encoder = {in_channels = 1, channels = {4, 6}}, dim_embed = 6,
                          dim_hidden = 8, dim_att = 5}
  other:save(path)
  local ok, e = pcall(function() tiny():load_weights(path) end)
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(e), "another vocabulary")
  local same = tiny()
  same:save(path)
  local cap = tiny():load_weights(path)
  lu.assertEquals((cap.embed.weight - same.embed.weight):abs():max():item(), 0)
  os.remove(path)
end

function T.test_overlays_wrap_onto_rows_of_ncol_panels()
  local cap = tiny()
  local path = os.tmpname() .. ".png"
  local alphas = glimpse.softmax(glimpse.randn(5, 16), 2)
  local words = {"a", "red", "circle", "above", "a"}
  cap:overlays(glimpse.rand(1, 16, 16), alphas, words, path)
  local one = glimpse.image.info(path)
  cap:overlays(glimpse.rand(1, 16, 16), alphas, words, path, {ncol = 3})
  local wrapped = glimpse.image.info(path)
  lu.assertTrue(wrapped.width < one.width)
  lu.assertTrue(wrapped.height > one.height)
  os.remove(path)
end

return T
