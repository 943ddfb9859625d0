-- tests/test_captioner_hard.lua -- the Captioner's hard attention: the REINFORCE term and its
-- baselines (moving average, leave-one-out over K samples), straight-through Gumbel-softmax,
-- the mixes of the expected context and samples, the schedules (set_progress), the recipes,
-- and the test-time rules (argmax, region, sample, soft, marginal).
local lu = require "luaunit"
local glimpse = require "glimpse"
local H = require "tests.captioner_helpers"
local att = glimpse.attention

local Vocab = glimpse.data.Vocab
local tiny, hard, batch, CAPS, CAPS2 = H.tiny, H.hard, H.batch, H.CAPS, H.CAPS2
local EXACT, FLOAT_TOL = H.EXACT, H.FLOAT_TOL

local T = {}

-- ---------------------------------------------------------------------------------------
-- hard attention

function T.test_hard_loss_has_reinforce_term_and_baseline_moving_average()
  glimpse.manual_seed(8)
  local cap = tiny({attention = "hard", soft_prob = 0, entropy = 0.01})
  local b = batch(CAPS)
  lu.assertNil(cap.baseline.value)
  local _, i1 = cap:loss(b.images, b.captions_in, b.captions_out, b.mask)
  lu.assertNotNil(i1.reinforce)
  lu.assertTrue(i1.reward < 0)                      -- a log-probability
  lu.assertAlmostEquals(i1.baseline, i1.reward, FLOAT_TOL)   -- the first batch sets b
  local b2 = batch({{"a", "blue", "circle"}, {"a", "red", "square"}})
  local _, i2 = cap:loss(b2.images, b2.captions_in, b2.captions_out, b2.mask)
  lu.assertAlmostEquals(i2.baseline_used, i1.baseline, EXACT)
  lu.assertAlmostEquals(i2.baseline, 0.9 * i1.baseline + 0.1 * i2.reward, FLOAT_TOL)
end

function T.test_hard_attention_parameters_learn_only_through_reinforce()
  local function attention_grad(o)
    glimpse.manual_seed(9)
    local cap = tiny(o)
    glimpse.no_grad(function() cap.attention.v:uniform_(-1, 1) end)
    local b = batch(CAPS)
    local loss = cap:loss(b.images, b.captions_in, b.captions_out, b.mask)
    loss:backward()
    local g = cap.attention.query_proj.weight.grad
    return g and g:abs():sum():item() or 0
  end
  -- the sampled annotation is not differentiable in alpha: with the REINFORCE and entropy
  -- terms off and no penalty, nothing reaches the attention MLP
  local none = attention_grad({attention = "hard", soft_prob = 0, reward_weight = 0, entropy = 0,
                               doubly_stochastic = 0})
  lu.assertEquals(none, 0)
  local some = attention_grad({attention = "hard", soft_prob = 0, doubly_stochastic = 0})
  lu.assertTrue(some > 0)
end

function T.test_hard_with_expected_context_batch_has_no_reinforce_term()
  local cap = tiny({attention = "hard", soft_prob = 1})
  local b = batch(CAPS)
  local _, info = cap:loss(b.images, b.captions_in, b.captions_out, b.mask)
  lu.assertNil(info.reinforce)
  lu.assertNil(cap.baseline.value)
end

function T.test_hard_caption_runs_in_every_eval_mode()
  for _, mode in ipairs({"argmax", "region", "soft", "sample", "marginal"}) do
    local cap = tiny({attention = "hard", hard_eval = mode})
    local words, tokens, alphas = cap:caption_maps(glimpse.rand(1, 16, 16), {beam = 2})
    lu.assertEquals(type(words), "string")
    lu.assertEquals(alphas.shape[1], #tokens)
  end
end

function T.test_marginal_rule_with_one_cell_decodes_as_argmax()
  glimpse.manual_seed(21)
  local cap = tiny({attention = "hard", hard_eval = "argmax"})
  local imgs = glimpse.rand(3, 1, 16, 16)
  for _, beam in ipairs({1, 2}) do
    cap:set_hard_eval("argmax")
    local w1, _, a1 = cap:caption_maps(imgs, {beam = beam})
    cap:set_hard_eval("marginal")
    cap.config.marginal_cells = 1
    local w2, _, a2 = cap:caption_maps(imgs, {beam = beam})
    lu.assertEquals(w2, w1)
    for i = 1, 3 do lu.assertEquals(a2[i]:totable(), a1[i]:totable()) end
  end
end

function T.test_region_rule_with_a_one_cell_window_decodes_as_argmax()
  glimpse.manual_seed(23)
  local imgs = glimpse.rand(3, 1, 16, 16)
  local cap = tiny({attention = "hard", hard_eval = "argmax"})
  local w1, _, a1 = cap:caption_maps(imgs, {beam = 2})
  cap.config.region_size = 1
  cap:set_hard_eval("region")
  lu.assertEquals({cap.attention.hard_eval, cap.attention.region}, {"region", 1})
  local w2, _, a2 = cap:caption_maps(imgs, {beam = 2})
  lu.assertEquals(w2, w1)
  for i = 1, 3 do lu.assertEquals(a2[i]:totable(), a1[i]:totable()) end
  local ok, err = pcall(tiny, {attention = "hard", hard_eval = "region", region_size = 2})
  lu.assertFalse(ok)
  lu.assertStrContains(err, "option 'region_size' must be odd")
end

function T.test_region_rule_reads_the_window_centre_of_the_encoder_grid()
  -- the first decoding step by hand: the cell region_argmax picks on the encoder's grid
  glimpse.manual_seed(24)
  local cap = tiny({attention = "hard", hard_eval = "region"})
  cap:evaluate()
  local img = glimpse.rand(1, 1, 16, 16)
  glimpse.no_grad(function()
    local a, gh, gw = cap:annotate(img)
    local st = cap:_attention_state(a)
    lu.assertEquals(st.grid, {gh, gw})
    local h = cap:initial_state(a)
    local ctx, alpha = cap.attention(h, a, a, nil, st)
    local idx = att.region_argmax(alpha, {grid = {gh, gw}}):item()
    lu.assertEquals((ctx[1] - a[1][math.tointeger(idx)]):abs():max():item(), 0)
  end)
end

function T.test_marginal_rule_first_word_is_the_mixture_over_cells()
  -- every cell kept (M = L): log p(y_1) = log sum_l alpha_l p(y_1 | s_1 = l), each term
  -- computed here one cell at a time through the model's own layers
  glimpse.manual_seed(22)
  local cap = tiny({attention = "hard", hard_eval = "marginal", marginal_cells = 16})
  cap:evaluate()
  local img = glimpse.rand(1, 1, 16, 16)
  local got = glimpse.no_grad(function()
    local a = cap:annotate(img)
    local state, fixed = cap:_decode_state(a)
    return (cap:_decode_step(fixed)(glimpse.tensor({Vocab.START}), state))
  end)
  local want = glimpse.no_grad(function()
    local a = cap:annotate(img)
    local h, c = cap:initial_state(a)
    cap:set_hard_eval("soft")
    local _, alpha = cap.attention(h, a, a, nil, cap:_attention_state(a))
    local ey = cap.embed(glimpse.tensor({Vocab.START}))
    local beta = cap.gate(h):sigmoid()
    local p = 0
    for l = 1, a.shape[2] do
      local z = a:select(2, l) * beta
      local h2 = cap.lstm(glimpse.cat({ey, z}, 2), h, c)
      p = p + glimpse.softmax(cap:_logits(ey, h2, z), 2) * alpha[1][l]:item()
    end
    return p:totable()[1]
  end)
  got = got:totable()[1]
  for v = 1, #want do
    if v ~= Vocab.PAD and v ~= Vocab.START then
      lu.assertAlmostEquals(math.exp(got[v]), want[v], FLOAT_TOL)
    end
  end
end

function T.test_set_hard_eval_checks_the_rule()
  local cap = tiny({attention = "hard"})
  local ok, err = pcall(cap.set_hard_eval, cap, "best")
  lu.assertFalse(ok)
  lu.assertStrContains(err, "Captioner:set_hard_eval: rule must be one of argmax, region, soft, sample, marginal")
  cap:set_hard_eval("soft")
  lu.assertEquals({cap.config.hard_eval, cap.attention.hard_eval}, {"soft", "soft"})
end

-- ---------------------------------------------------------------------------------------
-- what makes hard attention learn: K samples with the leave-one-out baseline, per-sample
-- baselines, straight-through Gumbel-softmax, the schedules (set_progress), the recipes

local function attention_grad(cap)
  glimpse.no_grad(function() cap.attention.v:uniform_(-1, 1) end)
  local b = batch(CAPS2)
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
  local g, info = attention_grad(hard({soft_prob = 0, samples = 3, doubly_stochastic = 0}))
  lu.assertNotNil(info.reinforce)
  lu.assertTrue(g > 0)
  lu.assertEquals(info.alphas.shape[1], 2 * 3)           -- B * K rows
  local cap = hard({samples = 3})
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
  local g, info = attention_grad(hard({soft_prob = 0, estimator = "gumbel", reward_weight = 0,
                                       entropy = 0, doubly_stochastic = 0}))
  lu.assertNil(info.reinforce)
  lu.assertTrue(g > 0)
end

function T.test_gumbel_with_k_samples_decodes_every_caption_k_times()
  glimpse.manual_seed(6)
  local g, info = attention_grad(hard({soft_prob = 0, estimator = "gumbel", samples = 3,
                                       baseline = "average", doubly_stochastic = 0}))
  lu.assertEquals(info.alphas.shape[1], 2 * 3)           -- B * K rows, averaged in the loss
  lu.assertNil(info.reinforce)
  lu.assertTrue(g > 0)
end

-- mix = "expected": each batch reads both the expected context and samples, and the loss
-- is the coin's expectation p L(expected) + (1 - p) L(samples) (the same sample draws as a
-- batch that always samples, since the expected-context pass draws nothing)
function T.test_expected_mix_is_the_coin_weighted_sum_of_both_passes()
  local b = batch(CAPS2)
  local function loss_of(o, p)
    glimpse.manual_seed(7)
    local cap = hard(o)
    glimpse.no_grad(function() cap.attention.v:uniform_(-1, 1) end)
    cap.attention.soft_prob = p
    glimpse.manual_seed(8)
    local loss = cap:loss(b.images, b.captions_in, b.captions_out, b.mask)
    return loss:item()
  end
  for _, est in ipairs({"gumbel", "reinforce"}) do
    local o = {estimator = est, samples = 2, baseline = est == "reinforce" and "loo" or "average"}
    local soft, sampled = loss_of(o, 1), loss_of(o, 0)
    lu.assertTrue(math.abs(soft - sampled) > 1e-4, est)   -- the two passes differ
    o.mix = "expected"
    lu.assertAlmostEquals(loss_of(o, 0.3), 0.3 * soft + 0.7 * sampled, 1e-5)
    lu.assertAlmostEquals(loss_of(o, 1), soft, 1e-6)
    lu.assertAlmostEquals(loss_of(o, 0), sampled, 1e-6)
  end
  local ok, e = pcall(tiny, {attention = "hard", mix = "both"})
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(e), "mix")
  lu.assertStrContains(tostring(e), "'both'")
end

-- mix = "row": a coin per caption; the rows that read the expected context carry no REINFORCE
-- terms, the others do; p = 1 is the expected-context pass for every row
function T.test_row_mix_draws_a_coin_per_caption()
  local b = batch(CAPS2)
  glimpse.manual_seed(7)
  local cap = hard({estimator = "reinforce", mix = "row"})
  glimpse.no_grad(function() cap.attention.v:uniform_(-1, 1) end)
  local a = glimpse.no_grad(function() return cap:annotate(b.images) end)
  local kinds = {}
  for seed = 1, 20 do
    glimpse.manual_seed(seed)
    local _, _, st = cap:forward(a, b.captions_in, {soft_rows = 0.5})
    local logp = cap.attention:reinforce_terms(st)
    for r = 1, a.shape[1] do
      local soft = st.soft_rows[r][1]:item() == 1
      kinds[soft and "soft" or "hard"] = true
      if soft then lu.assertEquals(logp[r]:item(), 0) else lu.assertTrue(logp[r]:item() < 0) end
    end
  end
  lu.assertEquals(kinds, {soft = true, hard = true})     -- both kinds over the draws
  -- every row on the expected context: the loss of a batch that reads it
  cap.attention.soft_prob = 1
  local all = cap:loss(a, b.captions_in, b.captions_out, b.mask):item()
  local _, info = cap:loss(a, b.captions_in, b.captions_out, b.mask)
  lu.assertEquals(info.reinforce, 0)
  cap.config.mix = "sample"
  lu.assertAlmostEquals(cap:loss(a, b.captions_in, b.captions_out, b.mask):item(), all, 1e-5)
end

function T.test_set_progress_moves_soft_prob_and_entropy_over_the_anneal_share()
  local cap = hard({soft_prob = 1, soft_prob_end = 0, entropy = 0.02, entropy_end = 0, anneal = 0.5})
  local want = {{0, 1, 0.02}, {0.25, 0.5, 0.01}, {0.5, 0, 0}, {0.9, 0, 0}}
  for _, w in ipairs(want) do
    cap:set_progress(w[1])
    lu.assertAlmostEquals(cap.attention.soft_prob, w[2], EXACT)
    lu.assertAlmostEquals(cap.entropy_weight, w[3], EXACT)
  end
  local paper = hard(glimpse.captioner.RECIPES.paper)
  paper:set_progress(0.7)
  lu.assertAlmostEquals(paper.attention.soft_prob, 0.5, EXACT)   -- constant: the paper's p
end

function T.test_every_recipe_builds_a_captioner_that_trains_a_step()
  for name, r in pairs(glimpse.captioner.RECIPES) do
    glimpse.manual_seed(5)
    local cap = hard(r)
    cap:set_progress(0.9)
    local b = batch(CAPS2)
    local loss = cap:loss(b.images, b.captions_in, b.captions_out, b.mask)
    lu.assertTrue(loss:item() == loss:item(), name)
    loss:backward()
  end
end

-- cap saved to a file and loaded back
local function reloaded(cap)
  local path = os.tmpname()
  cap:save(path)
  local back = require("glimpse.models.captioner").Captioner.load(path)
  os.remove(path)
  return back
end

-- length_aux: a head on h_t predicts log(words left); the loss adds length_aux times its
-- squared error over real steps, by hand; its gradient reaches the LSTM and W_g; saved, loaded
function T.test_length_aux_adds_the_words_left_regression_of_h_t()
  local b = batch(CAPS)                                       -- 4, 8 and 3 real steps
  glimpse.manual_seed(11)
  local cap = hard({length_aux = 0.5, global_feature = true, hard_eval = "argmax"})
  lu.assertNil(hard().length_head)                            -- off by default
  glimpse.no_grad(function() cap.global_in.weight:uniform_(-0.3, 0.3) end)
  cap.attention.soft_prob = 1
  local a = glimpse.no_grad(function() return cap:annotate(b.images) end)
  glimpse.manual_seed(12)
  local loss, info = cap:loss(a, b.captions_in, b.captions_out, b.mask)
  local _, _, st = glimpse.no_grad(function()
    return cap:forward(a, b.captions_in, {use_soft = true}) end)
  local pred = glimpse.no_grad(function() return cap.length_head(st.hs) end)
  local want, n = 0, 0
  for i, len in ipairs({4, 8, 3}) do
    for t = 1, len do
      want, n = want + (pred[i][t][1]:item() - math.log(len - t + 1)) ^ 2, n + 1
    end
  end
  lu.assertAlmostEquals(info.length_aux, want / n, FLOAT_TOL)
  lu.assertAlmostEquals(loss:item(), info.nll + info.ds * 3 / n + 0.5 * want / n, FLOAT_TOL)
  loss:backward()
  lu.assertTrue(cap.global_in.weight.grad:abs():sum():item() > 0)
  lu.assertTrue(glimpse.gradcheck(function()
    return cap:length_loss(select(3, cap:forward(a, b.captions_in, {use_soft = true})).hs, b.mask)
  end, {cap.length_head.weight, cap.lstm.weight_hh}, {eps = 1e-2, atol = 2e-3, rtol = 3e-2,
                                                      max_elements = 30}))
  local back = reloaded(cap)
  lu.assertEquals(back.config.length_aux, 0.5)
  lu.assertEquals((back.length_head.weight - cap.length_head.weight):abs():max():item(), 0)
  local ok, e = pcall(tiny, {length_aux = -1})
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(e), "length_aux")
end

-- every hard test-time rule decodes an image alone as it does in a batch (beam 3 and greedy)
local function decodes_alone_as_batched(cap, imgs)
  for _, rule in ipairs({"argmax", "region", "marginal"}) do
    cap:set_hard_eval(rule)
    lu.assertEquals(cap:caption(imgs[2], {beam = 3}), cap:caption(imgs, {beam = 3})[2], rule)
    lu.assertEquals(cap:caption(imgs[1], {beam = 1}), cap:caption(imgs, {beam = 1})[1], rule)
  end
end

-- unseen_feature: W_u from zero (the model without it); with W_u set, step t's LSTM input
-- gains W_u u_t, u_t the annotations weighted by max(0, 1 - the attention had before t),
-- averaged (checked against the steps by hand); decoding carries the coverage along its
-- beams (batch = single for every rule); saved and loaded
function T.test_unseen_feature_reads_what_attention_has_not_covered_yet()
  glimpse.manual_seed(21)
  local b = batch(CAPS)
  local with = hard({unseen_feature = true, hard_eval = "argmax"})
  local without = hard({hard_eval = "argmax"})
  without:load_state_dict(with:state_dict(), {strict = false})
  with:evaluate(); without:evaluate()
  local a = glimpse.no_grad(function() return with:annotate(b.images) end)
  lu.assertEquals(with.unseen_in.weight:abs():max():item(), 0)
  local function fwd(m) return glimpse.no_grad(function() return m:forward(a, b.captions_in) end) end
  lu.assertEquals((fwd(with) - fwd(without)):abs():max():item(), 0)
  glimpse.no_grad(function() with.unseen_in.weight:uniform_(-0.5, 0.5) end)
  local logits, alphas = fwd(with)
  -- by hand: the same steps with W_u u_t added to the embedding's share of the LSTM input
  glimpse.no_grad(function()
    local B, T, L = 3, b.captions_in.shape[2], a.shape[2]
    local We, Wz = with:_split_lstm()
    local xe = glimpse.linear(with.embed(b.captions_in), We, with.lstm.bias_ih)
    local h, c = with:initial_state(a)
    local st = with:_attention_state(a)
    local cov = glimpse.zeros(B, L)
    for t = 1, T do
      local u = glimpse.zeros(B, a.shape[3])
      for i = 1, L do
        local w = (1 - cov:select(2, i)):clamp(0, 1):reshape(B, 1)
        u = u + a:select(2, i) * w / L
      end
      local z, alpha
      h, c, z, alpha, st = with:_step(xe:select(2, t) + with.unseen_in(u), h, c, a, st, Wz)
      lu.assertTrue((alpha - alphas:select(2, t)):abs():max():item() < FLOAT_TOL)
      cov = cov + alpha
    end
  end)
  local imgs = glimpse.rand(2, 1, 16, 16)
  decodes_alone_as_batched(with, imgs)
  with:train()
  local loss = with:loss(a, b.captions_in, b.captions_out, b.mask)
  loss:backward()
  lu.assertTrue(with.unseen_in.weight.grad:abs():sum():item() > 0)
  with:evaluate()
  local back = reloaded(with)
  lu.assertTrue(back.config.unseen_feature)
  lu.assertEquals(back:caption(imgs, {beam = 2}), with:caption(imgs, {beam = 2}))
end

-- coverage: the attention score sees the attention each cell has had (nn.Attention's
-- coverage term); decoding carries it along the caption, so the decoder's step fed a
-- caption's words gives teacher forcing's maps (soft, and hard reading its argmax cell);
-- batch = single for every rule; saved and loaded
function T.test_coverage_in_the_score_is_carried_along_decoding()
  glimpse.manual_seed(23)
  local imgs = glimpse.rand(2, 1, 16, 16)
  for _, mode in ipairs({"soft", "hard"}) do
    local cap = tiny({attention = mode, coverage = true, hard_eval = "argmax", max_len = 6})
    cap:evaluate()
    lu.assertTrue(cap.attention.use_coverage)
    glimpse.no_grad(function()                  -- (v starts at zero: every map flat)
      cap.attention.coverage_w:uniform_(-3, 3)
      cap.attention.v:uniform_(-2, 2)
    end)
    -- the decoder's step function fed a caption's words gives teacher forcing's maps
    local ids = {{Vocab.START, 5, 6, 7, 5, 8}, {Vocab.START, 9, 5, 6, 10, 11}}
    local a = glimpse.no_grad(function() return cap:annotate(imgs) end)
    local _, alphas = glimpse.no_grad(function() return cap:forward(a, glimpse.tensor(ids)) end)
    glimpse.no_grad(function()
      local state, fixed = cap:_decode_state(a)
      local step = cap:_decode_step(fixed)
      for t = 1, #ids[1] do
        local _, alpha
        _, state, alpha = step(glimpse.tensor({ids[1][t], ids[2][t]}), state)
        lu.assertTrue((alpha - alphas:select(2, t)):abs():max():item() < FLOAT_TOL,
                      mode .. " step " .. t)
      end
    end)
    if mode == "hard" then decodes_alone_as_batched(cap, imgs) end
    local back = reloaded(cap)
    lu.assertTrue(back.config.coverage)
    lu.assertEquals(back:caption(imgs, {beam = 2}), cap:caption(imgs, {beam = 2}))
  end
  H.assert_error_matches({"Captioner", "coverage"}, tiny, {coverage = true, score = "general"})
end

-- unseen_feature_rank / _pool = "relu" and unseen_output: u_t is the mean over the cells of
-- relu(P a_i + b) weighted by the attention not yet had; the LSTM input gains W_u u_t (the
-- coverage before step t) and the deep output L_u u_t (the coverage after step t's
-- attention), checked step by step by hand; with W_u = L_u = 0 the model is the one without;
-- gradients reach P's bias and L_u; decoding is the same alone and batched for every rule;
-- saved and loaded; the option rules are errors
function T.test_unseen_detectors_reach_the_lstm_and_the_output()
  glimpse.manual_seed(23)
  local b = batch(CAPS)
  local opts = {unseen_feature = true, unseen_feature_rank = 2, unseen_feature_pool = "relu",
                unseen_output = true, hard_eval = "argmax"}
  local with = hard(opts)
  local without = hard({hard_eval = "argmax"})
  without:load_state_dict(with:state_dict(), {strict = false})
  with:evaluate(); without:evaluate()
  local a = glimpse.no_grad(function() return with:annotate(b.images) end)
  local function fwd(m) return glimpse.no_grad(function() return m:forward(a, b.captions_in) end) end
  lu.assertEquals((fwd(with) - fwd(without)):abs():max():item(), 0)
  glimpse.no_grad(function()
    with.unseen_in.weight:uniform_(-0.5, 0.5)
    with.out_u.weight:uniform_(-0.5, 0.5)
    with.unseen_p.bias:uniform_(0, 0.5)
  end)
  local logits = fwd(with)
  lu.assertTrue((logits - fwd(without)):abs():max():item() > 1e-3)
  glimpse.no_grad(function()
    local B, T, L = 3, b.captions_in.shape[2], a.shape[2]
    local P, bias = with.unseen_p.weight:totable(), with.unseen_p.bias:totable()
    local function u_of(cov)                       -- the detectors cell by cell
      local u = {}
      for n = 1, B do
        u[n] = {0, 0}
        for i = 1, L do
          local w = math.max(0, math.min(1, 1 - cov[n][i]))
          for r = 1, 2 do
            local d = bias[r]
            for k = 1, a.shape[3] do d = d + P[r][k] * a[n][i][k]:item() end
            u[n][r] = u[n][r] + w * math.max(0, d) / L
          end
        end
      end
      return glimpse.tensor(u)
    end
    local We, Wz = with:_split_lstm()
    local ey = with.embed(b.captions_in)
    local xe = glimpse.linear(ey, We, with.lstm.bias_ih)
    local h, c = with:initial_state(a)
    local st = with:_attention_state(a)
    local cov = glimpse.zeros(B, L)
    for t = 1, T do
      local z, alpha
      h, c, z, alpha, st = with:_step(xe:select(2, t) + with.unseen_in(u_of(cov:totable())),
                                      h, c, a, st, Wz)
      cov = cov + alpha
      local x = ey:select(2, t) + with.out_h(h) + with.out_z(z) + with.out_u(u_of(cov:totable()))
      lu.assertTrue((with.out(x) - logits:select(2, t)):abs():max():item() < 1e-4, "step " .. t)
    end
  end)
  local imgs = glimpse.rand(2, 1, 16, 16)
  decodes_alone_as_batched(with, imgs)
  with:set_hard_eval("argmax")
  with:train()
  with:loss(a, b.captions_in, b.captions_out, b.mask):backward()
  lu.assertTrue(with.unseen_p.bias.grad:abs():sum():item() > 0)
  lu.assertTrue(with.out_u.weight.grad:abs():sum():item() > 0)
  with:evaluate()
  local back = reloaded(with)
  lu.assertEquals({back.config.unseen_feature_rank, back.config.unseen_feature_pool,
                   back.config.unseen_output}, {2, "relu", true})
  lu.assertEquals(back:caption(imgs, {beam = 2}), with:caption(imgs, {beam = 2}))
  -- the rank with the mean pool: P of the weighted mean annotation
  local lin = hard({unseen_feature = true, unseen_feature_rank = 3})
  lu.assertEquals(lin.unseen_p.weight.shape, {3, a.shape[3]})
  lu.assertNil(lin.unseen_p.bias)
  lu.assertEquals(lin.unseen_in.weight.shape[2], 3)
  for o, msg in pairs({
      [{unseen_feature_rank = 2}] = "option 'unseen_feature_rank' needs unseen_feature = true",
      [{unseen_feature = true, unseen_feature_pool = "relu"}] =
        "unseen_feature_pool = \"relu\" needs unseen_feature_rank > 0",
      [{unseen_output = true}] = "option 'unseen_output' needs unseen_feature = true",
      [{unseen_feature = true, unseen_output = true, deep_output = false}] =
        "option 'unseen_output' needs the deep output layer"}) do
    local ok, e = pcall(hard, o)
    lu.assertFalse(ok)
    lu.assertStrContains(tostring(e), msg)
  end
end

-- unseen_from = "reads": the coverage counts the cells each step read, a hard read's
-- region_size window around the cell (clipped at the grid's edge), an expected context's
-- alpha, a row of mix = "row" that read the expectation its alpha; the captioner trains,
-- decodes the same alone and in a batch, and saves it
function T.test_unseen_from_reads_covers_the_window_around_the_cell_read()
  glimpse.manual_seed(22)
  local cap = hard({unseen_feature = true, unseen_from = "reads", hard_eval = "region"})
  local L = 16
  local alpha = glimpse.rand(2, L):softmax(2)
  -- a 4x4 grid: cell 6 is (2,2), its 3x3 window rows 1-3, columns 1-3; cell 16 the corner
  local st = {read = glimpse.tensor({{6}, {16}}), grid = {4, 4}}
  local w = cap:_coverage_step(alpha, st):totable()
  local function window(r0, c0)
    local want = {}
    for r = 1, 4 do
      for c = 1, 4 do
        want[(r - 1) * 4 + c] = (math.abs(r - r0) <= 1 and math.abs(c - c0) <= 1) and 1 or 0
      end
    end
    return want
  end
  lu.assertEquals(w[1], window(2, 2))
  lu.assertEquals(w[2], window(4, 4))
  -- the expectation read: alpha itself; a row that read it (soft_rows) alike
  lu.assertEquals(cap:_coverage_step(alpha, {grid = {4, 4}}):totable(), alpha:totable())
  st.soft_rows = glimpse.tensor({{1}, {0}})
  local mixed = cap:_coverage_step(alpha, st):totable()
  for i = 1, L do lu.assertAlmostEquals(mixed[1][i], alpha:totable()[1][i], 1e-7) end
  lu.assertEquals(mixed[2], window(4, 4))
  -- region_size 1: the cell alone
  cap.config.region_size = 1
  local one = cap:_coverage_step(alpha, {read = glimpse.tensor({{6}, {1}}), grid = {4, 4}}):totable()
  lu.assertEquals(one[1][6] + one[2][1], 2)
  lu.assertEquals(glimpse.tensor(one):sum():item(), 2)
  cap.config.region_size = 3
  -- end to end: trains (W_u gets a gradient), decodes alike alone and batched, saved
  local b = batch(CAPS)
  glimpse.no_grad(function() cap.unseen_in.weight:uniform_(-0.5, 0.5) end)
  cap:train()
  local loss = cap:loss(b.images, b.captions_in, b.captions_out, b.mask)
  loss:backward()
  lu.assertTrue(cap.unseen_in.weight.grad:abs():sum():item() > 0)
  cap:evaluate()
  local imgs = glimpse.rand(2, 1, 16, 16)
  lu.assertEquals(cap:caption(imgs[2], {beam = 3}), cap:caption(imgs, {beam = 3})[2])
  local back = reloaded(cap)
  lu.assertEquals(back.config.unseen_from, "reads")
  lu.assertEquals(back:caption(imgs, {beam = 2}), cap:caption(imgs, {beam = 2}))
  local ok, e = pcall(hard, {unseen_from = "reads"})
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(e), "unseen_from = \"reads\" needs unseen_feature = true")
end

function T.test_bad_hard_options_give_clear_errors()
  local function err(o, ...)
    local ok, e = pcall(tiny, o)
    lu.assertFalse(ok)
    for _, pat in ipairs({...}) do lu.assertStrContains(tostring(e), pat) end
  end
  err({baseline = "loo"}, "needs samples >= 2")
  err({baseline = "best"}, "baseline", "'best'")             -- a choice: the option and the value
  err({estimator = "straight"}, "estimator", "'straight'")
  err({samples = 0}, "'samples' must be a positive integer")
  err({anneal = 0}, "'anneal' must be a number")
  local cap = hard()
  local ok, e = pcall(cap.set_progress, cap, "half")
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(e), "set_progress")
end

return T
