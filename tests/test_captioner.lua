-- tests/test_captioner.lua -- the Show, Attend and Tell captioner (glimpse.models.captioner):
-- shapes through the loss and the decoder, finite-difference gradients, the doubly
-- stochastic penalty, save/load (the shipped checkpoints' old option names too), the overlays,
-- a short training run, the options (declared once: unknown names, types, aliases, script
-- flags) and bad input.  Hard attention: test_captioner_hard.lua; the caption metrics:
-- test_caption_eval.lua.
local lu = require "luaunit"
local glimpse = require "glimpse"
local H = require "tests.captioner_helpers"
local Captioner = require("glimpse.models.captioner").Captioner
local assert_close = require("tests.helpers").assert_close

local Vocab = glimpse.data.Vocab
local tiny, hard, batch, CAPS, WORDS = H.tiny, H.hard, H.batch, H.CAPS, H.WORDS
local tmpfile, assert_error_matches = H.tmpfile, H.assert_error_matches
local EXACT, FLOAT_TOL = H.EXACT, H.FLOAT_TOL

local T = {}

local GRAD_EPS = 1e-2       -- finite-difference step (float32)
local GRAD_ATOL = 2e-3
local GRAD_RTOL = 3e-2
local OVERFIT_STEPS = 40    -- Adam steps on one batch
local OVERFIT_RATIO = 0.5   -- ... after which the loss is below this share of the first loss

-- ---------------------------------------------------------------------------------------
-- shapes

function T.test_loss_returns_scalar_and_alphas_of_batch_steps_cells()
  glimpse.manual_seed(1)
  local cap = tiny()
  local b = batch(CAPS)
  local loss, info = cap:loss(b.images, b.captions_in, b.captions_out, b.mask)
  lu.assertEquals(loss:numel(), 1)
  lu.assertEquals(info.alphas.shape, {3, 8, 16})
  lu.assertEquals(info.betas.shape, {3, 8})
  lu.assertEquals(info.tokens, 4 + 8 + 3)
  -- every attention row is a distribution over the 16 cells
  local sums = info.alphas:sum(3)
  lu.assertTrue((sums - 1):abs():max():item() < FLOAT_TOL)
  -- an untrained model is close to uniform over the vocabulary: NLL near log V
  lu.assertTrue(math.abs(info.nll - math.log(#WORDS + 4)) < 1.0)
end

function T.test_forward_gives_logits_over_vocabulary_per_step()
  local cap = tiny()
  local b = batch(CAPS)
  local logits, alphas = cap:forward(b.images, b.captions_in)
  lu.assertEquals(logits.shape, {3, 8, #WORDS + 4})
  lu.assertEquals(alphas.shape, {3, 8, 16})
end

function T.test_padded_targets_do_not_change_the_loss()
  glimpse.manual_seed(2)
  local cap = tiny()
  local b = batch(CAPS)
  local l1 = cap:loss(b.images, b.captions_in, b.captions_out, b.mask):item()
  -- garbage in padded positions of captions_out must be ignored under the mask
  local out = b.captions_out:totable()
  local m = b.mask:totable()
  for k = 1, #out do for t = 1, #out[k] do if m[k][t] == 0 then out[k][t] = 5 end end end
  local l2 = cap:loss(b.images, b.captions_in, glimpse.tensor(out), b.mask):item()
  lu.assertAlmostEquals(l2, l1, EXACT)
end

function T.test_caption_of_one_image_gives_string_tokens_and_one_alpha_row_per_word()
  glimpse.manual_seed(3)
  local cap = tiny()
  local words, tokens, alphas = cap:caption_maps(glimpse.rand(1, 16, 16), {beam = 2})
  lu.assertEquals(type(words), "string")
  lu.assertEquals(type(tokens), "table")
  lu.assertTrue(#tokens <= 6)
  local n = 0
  for _ in words:gmatch("%S+") do n = n + 1 end
  lu.assertEquals(n, #tokens)
  lu.assertEquals(alphas.shape, {#tokens, 16})
  for _, id in ipairs(tokens) do
    lu.assertTrue(id ~= Vocab.PAD and id ~= Vocab.START and id ~= Vocab.END)
  end
end

function T.test_caption_of_a_batch_gives_one_caption_per_image()
  local cap = tiny()
  local words, tokens, alphas = cap:caption_maps(glimpse.rand(3, 1, 16, 16), {beam = 1, max_len = 4})
  lu.assertEquals(#words, 3)
  lu.assertEquals(#tokens, 3)
  for b = 1, 3 do
    lu.assertTrue(#tokens[b] <= 4)
    lu.assertEquals(alphas[b].shape[1], #tokens[b])
  end
end

function T.test_greedy_caption_equals_beam_of_one_and_batch_equals_single()
  glimpse.manual_seed(4)
  local cap = tiny()
  local imgs = glimpse.rand(2, 1, 16, 16)
  local w1 = cap:caption(imgs, {beam = 1})
  local single = cap:caption(imgs[2], {beam = 1})
  lu.assertEquals(single, w1[2])
end

function T.test_variants_without_gate_or_deep_output_and_other_scores_run()
  for _, o in ipairs({{gate = false}, {deep_output = false}, {score = "general"},
                      {score = "concat"}, {coords = true}, {output_tanh = true, dropout = 0.3}}) do
    local cap = tiny(o)
    local b = batch(CAPS)
    local loss, info = cap:loss(b.images, b.captions_in, b.captions_out)
    loss:backward()
    lu.assertTrue(loss:item() == loss:item())
    if o.gate == false then lu.assertNil(info.betas) end
    cap:caption(b.images[1], {beam = 2})
  end
end

function T.test_coords_append_two_features_in_minus_one_to_one()
  local cap = tiny({coords = true})
  local a = cap:annotate(glimpse.rand(2, 1, 16, 16))
  lu.assertEquals(a.shape, {2, 16, 6 + 2})
  local xy = a:narrow(3, 7, 2):totable()[1]
  lu.assertAlmostEquals(xy[1][1], -0.75, EXACT)      -- cell (1,1) of 4x4: x centre
  lu.assertAlmostEquals(xy[1][2], -0.75, EXACT)
  lu.assertAlmostEquals(xy[16][1], 0.75, EXACT)
  lu.assertAlmostEquals(xy[2][1], -0.25, EXACT)      -- row-major: cell 2 is one column right
  lu.assertAlmostEquals(xy[2][2], -0.75, EXACT)
end

-- the logits of `with` on annotations a equal, caption by caption, those of a model without
-- the option (tiny(opts), the same weights) whose bias(model) holds gv[k] for caption k
local function assert_a_bias_per_caption(with, a, captions_in, opts, bias, gv)
  local lg = glimpse.no_grad(function() return (with:forward(a, captions_in)) end)
  for k = 1, a.shape[1] do
    local one = tiny(opts)
    one:load_state_dict(with:state_dict(), {strict = false})
    one:train(with.training)
    glimpse.no_grad(function() bias(one):add_(gv[k]) end)
    local lk = glimpse.no_grad(function()
      return (one:forward(a:narrow(1, k, 1), captions_in:narrow(1, k, 1)))
    end)
    assert_close(lk[1], lg[k], {rtol = 1e-5, floor = 1}, "caption " .. k)
  end
end

function T.test_global_feature_adds_w_g_of_the_mean_annotation_to_every_lstm_input()
  -- with W_g = 0 the model is the one without the option (same other weights); with W_g
  -- set, step t's logits follow the LSTM input E-part + W_z z_t + W_g mean_i a_i
  glimpse.manual_seed(25)
  local with = tiny({global_feature = true})
  local without = tiny()
  without:load_state_dict(with:state_dict(), {strict = false})
  local b = batch(CAPS)
  local a = glimpse.no_grad(function() return with:annotate(b.images) end)
  glimpse.no_grad(function() with.global_in.weight:zero_() end)
  local l1 = glimpse.no_grad(function() return (with:forward(a, b.captions_in)) end)
  local l0 = glimpse.no_grad(function() return (without:forward(a, b.captions_in)) end)
  lu.assertEquals((l1 - l0):abs():max():item(), 0)
  -- W_g v is the same as a bias of W_g v on the LSTM input, one per caption
  glimpse.no_grad(function() with.global_in.weight:uniform_(-0.5, 0.5) end)
  local gv = glimpse.no_grad(function() return with.global_in(a:mean(2)) end)    -- (B,4H)
  assert_a_bias_per_caption(with, a, b.captions_in, {}, function(m) return m.lstm.bias_ih end, gv)
  -- beam search carries W_g v along its beams: beam 1 = greedy, batch = single
  local imgs = glimpse.rand(2, 1, 16, 16)
  lu.assertEquals(with:caption(imgs[2], {beam = 1}), with:caption(imgs, {beam = 1})[2])
  lu.assertEquals(type(with:caption(imgs[1], {beam = 3})), "string")
end

function T.test_global_output_adds_l_g_of_the_mean_annotation_to_every_deep_output()
  -- with L_g = 0 the model is the one without the option; with L_g set, the logits are those
  -- of a model whose L_z bias holds L_g mean_i a_i (one per caption, z_t unchanged)
  glimpse.manual_seed(27)
  local with = tiny({global_output = true, attention = "hard", hard_eval = "argmax"})
  local without = tiny({attention = "hard", hard_eval = "argmax"})
  without:load_state_dict(with:state_dict(), {strict = false})
  with:evaluate(); without:evaluate()
  local b = batch(CAPS)
  local a = glimpse.no_grad(function() return with:annotate(b.images) end)
  lu.assertEquals(with.out_g.weight:abs():max():item(), 0)     -- starts at zero
  local l1 = glimpse.no_grad(function() return (with:forward(a, b.captions_in)) end)
  local l0 = glimpse.no_grad(function() return (without:forward(a, b.captions_in)) end)
  lu.assertEquals((l1 - l0):abs():max():item(), 0)
  glimpse.no_grad(function() with.out_g.weight:uniform_(-0.5, 0.5) end)
  local gv = glimpse.no_grad(function() return with.out_g(a:mean(2)) end)         -- (B,E)
  assert_a_bias_per_caption(with, a, b.captions_in, {attention = "hard", hard_eval = "argmax"},
                            function(m) return m.out_z.bias end, gv)
  -- decoding carries it: batch = single, for the step and the marginal decoder; save/load
  local imgs = glimpse.rand(2, 1, 16, 16)
  lu.assertEquals(with:caption(imgs[2], {beam = 1}), with:caption(imgs, {beam = 1})[2])
  lu.assertEquals(with:caption(imgs[2], {beam = 3}), with:caption(imgs, {beam = 3})[2])
  with:set_hard_eval("marginal")
  lu.assertEquals(with:caption(imgs[1], {beam = 2}), with:caption(imgs, {beam = 2})[1])
  local path = os.tmpname()
  with:save(path)
  local back = Captioner.load(path)
  os.remove(path)
  lu.assertTrue(back.config.global_output)
  lu.assertEquals(back:caption(imgs, {beam = 2}), with:caption(imgs, {beam = 2}))
  local ok, err = pcall(tiny, {global_output = true, deep_output = false})
  lu.assertFalse(ok)
  lu.assertStrContains(err, "global_output")
end

-- an option whose weights start at zero leaves the model as it was: `with` and `without`
-- (the same other weights) give the same logits in evaluation; -> the batch and annotations
local function same_as_without(with, without)
  with:evaluate(); without:evaluate()
  local b = batch(CAPS)
  local a = glimpse.no_grad(function() return with:annotate(b.images) end)
  local l1 = glimpse.no_grad(function() return (with:forward(a, b.captions_in)) end)
  local l0 = glimpse.no_grad(function() return (without:forward(a, b.captions_in)) end)
  lu.assertEquals((l1 - l0):abs():max():item(), 0)
  return b, a
end

function T.test_global_output_rank_passes_the_mean_through_a_bottleneck()
  -- L_g = U P: P (r,D) random, U (E,r) from zero (the model without the option at first);
  -- with U set, the deep output gains U P mean_i a_i, a bias per caption of rank r
  glimpse.manual_seed(28)
  local with = tiny({global_output = true, global_output_rank = 2, attention = "hard",
                     hard_eval = "argmax"})
  local without = tiny({attention = "hard", hard_eval = "argmax"})
  without:load_state_dict(with:state_dict(), {strict = false})
  lu.assertEquals(with.out_g_in.weight.shape, {2, with.config.dim_feature})
  lu.assertEquals(with.out_g.weight.shape, {with.config.emb, 2})
  local b, a = same_as_without(with, without)
  glimpse.no_grad(function() with.out_g.weight:uniform_(-0.5, 0.5) end)
  local gv = glimpse.no_grad(function() return with.out_g(with.out_g_in(a:mean(2))) end)
  assert_a_bias_per_caption(with, a, b.captions_in, {attention = "hard", hard_eval = "argmax"},
                            function(m) return m.out_z.bias end, gv)
  with:train()
  local loss = with:loss(a, b.captions_in, b.captions_out, b.mask)
  loss:backward()
  lu.assertTrue(with.out_g_in.weight.grad:abs():sum():item() > 0)
  with:evaluate()
  local imgs = glimpse.rand(2, 1, 16, 16)
  local path = os.tmpname()
  with:save(path)
  local back = Captioner.load(path)
  os.remove(path)
  lu.assertEquals(back.config.global_output_rank, 2)
  lu.assertEquals(back:caption(imgs, {beam = 2}), with:caption(imgs, {beam = 2}))
  local ok, err = pcall(tiny, {global_output_rank = 2})
  lu.assertFalse(ok)
  lu.assertStrContains(err, "'global_output_rank' needs global_output = true")
end

-- mean_i relu(P a_i + b) of the detectors lin (P, b) over each caption's cells of a (B,L,D),
-- cell by cell from the weights, as a Lua table (B,r); checks the ReLU cuts some cells, not all
local function detectors_by_hand(lin, a)
  local P, pb, av = lin.weight:totable(), lin.bias:totable(), a:totable()
  local pooled, clipped, kept = {}, 0, 0
  for bi = 1, #av do
    local row = {}
    for r = 1, #P do
      local sum = 0
      for i = 1, #av[bi] do
        local h = pb[r]
        for d = 1, #P[r] do h = h + P[r][d] * av[bi][i][d] end
        if h < 0 then clipped = clipped + 1 else kept = kept + 1 end
        sum = sum + math.max(0, h)
      end
      row[r] = sum / #av[bi]
    end
    pooled[bi] = row
  end
  lu.assertTrue(clipped > 0 and kept > 0)
  return pooled
end

function T.test_global_output_pool_relu_counts_detectors_over_the_cells()
  -- global_output_pool = "relu": the deep output gains U mean_i relu(P a_i + b), computed here
  -- cell by cell from the weights; U from zero (the model without the option at first)
  glimpse.manual_seed(29)
  local opts = {global_output = true, global_output_rank = 3, global_output_pool = "relu",
                attention = "hard", hard_eval = "argmax"}
  local with = tiny(opts)
  local without = tiny({attention = "hard", hard_eval = "argmax"})
  without:load_state_dict(with:state_dict(), {strict = false})
  lu.assertEquals(with.out_g_in.bias.shape, {3})
  local b, a = same_as_without(with, without)
  glimpse.no_grad(function()
    with.out_g.weight:uniform_(-0.5, 0.5); with.out_g_in.bias:uniform_(-0.5, 0.5)
  end)
  local pooled = detectors_by_hand(with.out_g_in, a)
  local gv = glimpse.no_grad(function() return with.out_g(glimpse.tensor(pooled)) end)
  assert_a_bias_per_caption(with, a, b.captions_in, {attention = "hard", hard_eval = "argmax"},
                            function(m) return m.out_z.bias end, gv)
  with:train()
  with:loss(a, b.captions_in, b.captions_out, b.mask):backward()
  lu.assertTrue(with.out_g_in.bias.grad:abs():sum():item() > 0)
  with:evaluate()
  local imgs = glimpse.rand(2, 1, 16, 16)
  lu.assertEquals(with:caption(imgs[2], {beam = 1}), with:caption(imgs, {beam = 1})[2])
  local path = os.tmpname()
  with:save(path)
  local back = Captioner.load(path)
  os.remove(path)
  lu.assertEquals(back.config.global_output_pool, "relu")
  lu.assertEquals(back:caption(imgs, {beam = 2}), with:caption(imgs, {beam = 2}))
  local ok, err = pcall(tiny, {global_output = true, global_output_pool = "relu"})
  lu.assertFalse(ok)
  lu.assertStrContains(err, "global_output_pool = \"relu\" needs global_output_rank > 0")
  ok, err = pcall(tiny, {global_output = true, global_output_rank = 2, global_output_pool = "max"})
  lu.assertFalse(ok)
  lu.assertStrContains(err, "global_output_pool")
end

function T.test_global_feature_pool_relu_gives_the_lstm_detectors_over_the_cells()
  -- global_feature_pool = "relu": the LSTM input's global share is U mean_i relu(P a_i + b),
  -- computed here cell by cell; U from zero (the model without the global feature at first)
  glimpse.manual_seed(31)
  local opts = {global_feature = true, global_feature_rank = 2, global_feature_pool = "relu",
                attention = "hard", hard_eval = "argmax"}
  local with = tiny(opts)
  local without = tiny({attention = "hard", hard_eval = "argmax"})
  without:load_state_dict(with:state_dict(), {strict = false})
  lu.assertEquals(with.global_in_p.weight.shape, {2, with.config.dim_feature})
  lu.assertEquals(with.global_in.weight.shape, {4 * with.config.hidden, 2})
  local b, a = same_as_without(with, without)
  glimpse.no_grad(function()
    with.global_in.weight:uniform_(-0.5, 0.5); with.global_in_p.bias:uniform_(-0.5, 0.5)
  end)
  local pooled = detectors_by_hand(with.global_in_p, a)
  local got = glimpse.no_grad(function() return with:_global_input(a) end)
  local want = glimpse.no_grad(function() return with.global_in(glimpse.tensor(pooled)) end)
  assert_close(got, want, {atol = FLOAT_TOL}, "U mean_i relu(P a_i + b)")
  with:train()
  with:loss(a, b.captions_in, b.captions_out, b.mask):backward()
  lu.assertTrue(with.global_in_p.bias.grad:abs():sum():item() > 0)
  with:evaluate()
  local imgs = glimpse.rand(2, 1, 16, 16)
  local path = os.tmpname()
  with:save(path)
  local back = Captioner.load(path)
  os.remove(path)
  lu.assertEquals({back.config.global_feature_rank, back.config.global_feature_pool}, {2, "relu"})
  lu.assertEquals(back:caption(imgs, {beam = 2}), with:caption(imgs, {beam = 2}))
  -- the mean pooled through the bottleneck: U P mean_i a_i
  local lin = tiny({global_feature = true, global_feature_rank = 3})
  local g = glimpse.no_grad(function()
    lin.global_in.weight:uniform_(-0.5, 0.5)
    return lin:_global_input(a) - lin.global_in(lin.global_in_p(a:mean(2)))
  end)
  lu.assertEquals(g:abs():max():item(), 0)
  local ok, err = pcall(tiny, {global_feature = true, global_feature_pool = "relu"})
  lu.assertFalse(ok)
  lu.assertStrContains(err, "global_feature_pool = \"relu\" needs global_feature_rank > 0")
  ok, err = pcall(tiny, {global_feature_rank = 2})
  lu.assertFalse(ok)
  lu.assertStrContains(err, "'global_feature_rank' needs global_feature = true")
end

function T.test_whole_image_is_one_more_cell_holding_the_mean_annotation()
  -- the mean of [a; mean a] is mean a, so a whole_image model on annotations a is the plain
  -- model on the L + 1 cells [a; mean a], weight for weight
  glimpse.manual_seed(29)
  local wi = tiny({whole_image = true, global_feature = true})
  local plain = tiny({global_feature = true})
  plain:load_state_dict(wi:state_dict())
  glimpse.no_grad(function()
    wi.global_in.weight:uniform_(-0.3, 0.3)
    plain.global_in.weight:copy_(wi.global_in.weight)
  end)
  local b = batch(CAPS)
  local a = glimpse.no_grad(function() return wi:annotate(b.images) end)     -- (B,16,D)
  local av = glimpse.cat({a, a:mean(2, true)}, 2)                              -- (B,17,D)
  local l1, al1, st1 = glimpse.no_grad(function() return wi:forward(a, b.captions_in) end)
  local l0, al0 = glimpse.no_grad(function() return plain:forward(av, b.captions_in) end)
  assert_close(l1, l0, {rtol = 1e-5, floor = 1}, "logits")
  lu.assertEquals(al1.shape, {b.captions_in.shape[1], b.captions_in.shape[2], 16})   -- the grid's maps
  lu.assertEquals(st1.alphas.shape, {b.captions_in.shape[1], b.captions_in.shape[2], 17})  -- every cell's
  assert_close(st1.alphas, al0, {rtol = 1e-5, floor = 1}, "alphas")
  local _, info = wi:loss(a, b.captions_in, b.captions_out, b.mask)
  lu.assertEquals(info.alphas.shape[3], 16)
  -- decoding: the grid's maps, the same for one image and for a batch, every hard rule
  local hard = tiny({whole_image = true, attention = "hard", hard_eval = "region"})
  glimpse.no_grad(function() hard.attention.v:uniform_(-2, 2) end)
  local imgs = glimpse.rand(2, 1, 16, 16)
  for _, rule in ipairs({"region", "argmax", "soft", "marginal"}) do
    hard:set_hard_eval(rule)
    local w, _, al = hard:caption_maps(imgs[2], {beam = 3})
    lu.assertEquals(hard:caption(imgs, {beam = 3})[2], w, rule)
    lu.assertEquals(al.shape[2], 16, rule)
  end
  -- the attention MLP's gradient through the extra cell
  glimpse.no_grad(function() wi.attention.v:uniform_(-1, 1) end)
  local function f() return (wi:loss(a, b.captions_in, b.captions_out, b.mask)) end
  lu.assertTrue(glimpse.gradcheck(f, {wi.attention.key_proj.weight},
                                  {eps = GRAD_EPS, atol = GRAD_ATOL, rtol = GRAD_RTOL, max_elements = 40}))
end

function T.test_caption_beam_uses_the_models_length_penalty_unless_given()
  glimpse.manual_seed(26)
  local cap = tiny({attention = "hard", hard_eval = "region", length_penalty = 1.5})
  local imgs = glimpse.rand(4, 1, 16, 16)
  local w1 = cap:caption(imgs, {beam = 3})
  lu.assertEquals(w1, cap:caption(imgs, {beam = 3, length_penalty = 1.5}))
  cap.config.length_penalty = 0
  lu.assertEquals(cap:caption(imgs, {beam = 3}), cap:caption(imgs, {beam = 3, length_penalty = 0}))
  local ok, err = pcall(tiny, {length_penalty = -1})
  lu.assertFalse(ok)
  lu.assertStrContains(err, "length_penalty")
end

-- ---------------------------------------------------------------------------------------
-- gradients

function T.test_gradcheck_of_the_loss_through_attention_gate_lstm_and_deep_output()
  glimpse.manual_seed(5)
  local cap = tiny({doubly_stochastic = 0.5, global_feature = true, global_output = true,
                    unseen_feature = true})
  glimpse.no_grad(function() cap.out_g.weight:uniform_(-0.3, 0.3) end)
  glimpse.no_grad(function() cap.unseen_in.weight:uniform_(-0.3, 0.3) end)
  -- v = 0 would make the attention uniform and cut the gradient to W and U
  glimpse.no_grad(function() cap.attention.v:uniform_(-1, 1) end)
  local b = batch({{"a", "red", "circle"}, {"a", "square", "below", "a", "circle"}})
  local a = glimpse.no_grad(function() return cap:annotate(b.images) end)
  local function f() return (cap:loss(a, b.captions_in, b.captions_out, b.mask)) end
  local checks = {cap.attention.v, cap.attention.query_proj.weight, cap.attention.key_proj.weight,
                  cap.gate.weight, cap.lstm.weight_ih, cap.out_z.weight, cap.init_h.weight,
                  cap.embed.weight, cap.global_in.weight, cap.out_g.weight, cap.unseen_in.weight}
  for _, p in ipairs(checks) do
    lu.assertTrue(glimpse.gradcheck(function() return f() end, {p},
                                    {eps = GRAD_EPS, atol = GRAD_ATOL, rtol = GRAD_RTOL,
                                     max_elements = 40}))
  end
end

function T.test_loss_decreases_when_fitting_one_batch()
  glimpse.manual_seed(6)
  local cap = tiny()
  local b = batch(CAPS)
  local opt = glimpse.optim.Adam(cap:parameters(), {lr = 1e-2})
  local first, last
  for i = 1, OVERFIT_STEPS do
    opt:zero_grad()
    local loss, info = cap:loss(b.images, b.captions_in, b.captions_out, b.mask)
    loss:backward()
    opt:step()
    if i == 1 then first = info.nll end
    last = info.nll
  end
  lu.assertTrue(last < OVERFIT_RATIO * first,
                string.format("nll %.3f -> %.3f after %d steps", first, last, OVERFIT_STEPS))
end

-- ---------------------------------------------------------------------------------------
-- the doubly stochastic penalty

function T.test_doubly_stochastic_penalty_matches_hand_value()
  local cap = tiny({doubly_stochastic = 2})
  -- B = 2, T = 3, L = 4; the second caption's last step is padding
  local alphas = {
    {{0.7, 0.1, 0.1, 0.1}, {0.1, 0.7, 0.1, 0.1}, {0.25, 0.25, 0.25, 0.25}},
    {{1, 0, 0, 0}, {0.5, 0.5, 0, 0}, {0, 0, 0, 1}},
  }
  local mask = {{1, 1, 1}, {1, 1, 0}}
  local total = 0
  for b = 1, 2 do
    for i = 1, 4 do
      local s = 0
      for t = 1, 3 do s = s + mask[b][t] * alphas[b][t][i] end
      total = total + (1 - s) ^ 2
    end
  end
  local want = 2 * total / 2                     -- lambda * sum, averaged over captions
  -- by hand: caption 1 sums (1.05, 1.05, 0.45, 0.45) -> 0.0025*2 + 0.3025*2 = 0.61;
  -- caption 2 (1.5, 0.5, 0, 0) -> 0.25 + 0.25 + 1 + 1 = 2.5
  lu.assertAlmostEquals(want, 2 * (0.61 + 2.5) / 2, EXACT)
  local got = cap:penalty(glimpse.tensor(alphas), glimpse.tensor(mask)):item()
  lu.assertAlmostEquals(got, want, FLOAT_TOL)
end

function T.test_loss_reports_the_penalty_of_its_own_alphas()
  glimpse.manual_seed(7)
  local cap = tiny({doubly_stochastic = 1.5})
  local b = batch(CAPS)
  local _, info = cap:loss(b.images, b.captions_in, b.captions_out, b.mask)
  local want = cap:penalty(info.alphas, b.mask):item()
  lu.assertAlmostEquals(info.ds, want, FLOAT_TOL * math.max(1, want))
  local off = tiny({doubly_stochastic = 0})
  local _, info0 = off:loss(b.images, b.captions_in, b.captions_out, b.mask)
  lu.assertEquals(info0.ds, 0)
end

-- ---------------------------------------------------------------------------------------
-- checkpoints and pictures

function T.test_save_load_round_trip_gives_identical_captions()
  glimpse.manual_seed(10)
  local cap = tiny({attention = "hard", score = "general", coords = true, doubly_stochastic = 0.3})
  local b = batch(CAPS)
  local opt = glimpse.optim.Adam(cap:parameters(), {lr = 1e-2})
  for _ = 1, 5 do            -- move away from the initialisation (and set the baseline)
    opt:zero_grad()
    cap:loss(b.images, b.captions_in, b.captions_out, b.mask):backward()
    opt:step()
  end
  local path = tmpfile(".safetensors")
  cap:save(path)
  local back = Captioner.load(path)
  os.remove(path)
  lu.assertEquals(back.config, cap.config)
  lu.assertEquals(back.vocab:totable(), cap.vocab:totable())
  lu.assertAlmostEquals(back.baseline.value, cap.baseline.value, EXACT)
  local imgs = glimpse.rand(3, 1, 16, 16)
  local w1, t1, a1 = cap:caption_maps(imgs, {beam = 3})
  local w2, t2, a2 = back:caption_maps(imgs, {beam = 3})
  lu.assertEquals(w2, w1)
  lu.assertEquals(t2, t1)
  for k = 1, 3 do
    if #t1[k] > 0 then lu.assertEquals((a1[k] - a2[k]):abs():max():item(), 0) end
  end
end

function T.test_caption_accepts_a_file_name_read_in_the_model_channels_resized_on_request()
  glimpse.manual_seed(11)
  local cap = tiny({image = {channels = 1, height = 16, width = 16}})
  local path, big = tmpfile(".png"), tmpfile(".png")
  glimpse.image.save(path, glimpse.rand(3, 16, 16))        -- colour: read as grey
  glimpse.image.save(big, glimpse.rand(3, 40, 40))
  local words = cap:caption(path, {beam = 1})
  local ok, err = pcall(cap.caption, cap, big, {beam = 1})   -- another size: only on request
  local resized = cap:caption(big, {beam = 1, resize = true})
  local by_hand = cap:caption(glimpse.image.resize(glimpse.image.load(big, {channels = 1}), 16, 16),
                              {beam = 1})
  os.remove(path)
  os.remove(big)
  lu.assertEquals(type(words), "string")
  lu.assertFalse(ok)
  lu.assertStrContains(err, "Captioner:caption: " .. big .. ": the image is [1,40,40]")
  lu.assertStrContains(err, "resize = true")
  lu.assertEquals(resized, by_hand)
end

function T.test_overlays_write_a_strip_with_one_panel_per_word()
  glimpse.manual_seed(12)
  local cap = tiny()
  local img = glimpse.rand(1, 16, 16)
  local alphas = glimpse.softmax(glimpse.randn(3, 16), 2)
  local path = tmpfile(".png")
  cap:overlays(img, alphas, "a red circle", path)
  local info = glimpse.image.info(path)
  os.remove(path)
  lu.assertTrue(info.width >= 4 * 32)          -- image + 3 words, each drawn at 2x
  lu.assertTrue(info.height > 32)              -- the picture and a label line
end

-- ---------------------------------------------------------------------------------------
-- a short training run on scenes

function T.test_short_training_on_tiny_scenes_lowers_the_loss()
  glimpse.manual_seed(13)
  local ds = glimpse.data.scenes.generate{split = "train", n = 24, seed = 3, pool = 300,
                                          size = 32, item_size = 14, max_items = 2}
  local cap = Captioner{vocab = ds.vocab, encoder = {in_channels = 1, channels = {8, 16}},
                        emb = 16, hidden = 32, attn_hidden = 16, coords = true}
  local opt = glimpse.optim.Adam(cap:parameters(), {lr = 1e-2})
  local idx = {}
  for i = 1, 24 do idx[i] = i end
  local b = ds:collate(idx)
  local first, last
  for step = 1, 25 do
    opt:zero_grad()
    local loss, info = cap:loss(b.images, b.captions_in, b.captions_out, b.mask)
    loss:backward()
    glimpse.optim.clip_grad_norm(cap:parameters(), 5)
    opt:step()
    if step == 1 then first = info.nll end
    last = info.nll
  end
  lu.assertTrue(last < 0.6 * first, string.format("nll %.3f -> %.3f", first, last))
end

-- ---------------------------------------------------------------------------------------
-- options: declared once (glimpse.captioner.OPTIONS), checked, turned into flags

function T.test_an_unknown_option_is_an_error_naming_the_nearest()
  assert_error_matches({"Captioner", "unknown option 'whole_imag'", "did you mean 'whole_image'"},
                       tiny, {whole_imag = true})
  assert_error_matches({"unknown option 'atention'", "did you mean 'attention'"}, tiny,
                       {atention = "hard"})
end

function T.test_booleans_must_be_booleans_and_bad_values_name_captioner_and_the_option()
  for _, case in ipairs({{{coords = 1}, "coords"}, {{gate = "yes"}, "gate"},
                         {{whole_image = 0}, "whole_image"}, {{emb = 2.5}, "emb"},
                         {{dropout = 1}, "dropout"}, {{samples = "2"}, "samples"},
                         {{image = 3}, "image"}, {{trained_on = {1, 2}}, "trained_on"}}) do
    assert_error_matches({"Captioner", "'" .. case[2] .. "'"}, tiny, case[1])
  end
  local cap = tiny({coords = false, gate = false})
  lu.assertEquals({cap.config.coords, cap.config.gate}, {false, false})
end

function T.test_old_size_names_are_aliases_and_the_config_holds_the_new_ones()
  local cap = Captioner{vocab = Vocab.new(WORDS), encoder = {in_channels = 1, channels = {4, 6}},
                        dim_embed = 6, dim_hidden = 8, dim_att = 5}
  lu.assertEquals({cap.config.emb, cap.config.hidden, cap.config.attn_hidden}, {6, 8, 5})
  lu.assertNil(cap.config.dim_embed)
  lu.assertNil(cap.config.dim_att)
  lu.assertEquals(cap.embed.weight.shape, {#WORDS + 4, 6})
  lu.assertEquals(cap.attention.key_proj.weight.shape, {5, cap.config.dim_feature})
end

function T.test_checkpoints_with_the_old_names_load_under_the_new_ones()
  -- a checkpoint written before emb, hidden and attn_hidden were renamed keeps dim_embed,
  -- dim_hidden and dim_att in its config (the shipped models had them until 29 November 2026)
  local sd, meta = glimpse.load(glimpse.captioner.model_dirs()[#glimpse.captioner.model_dirs()]
                                .. "/scenes-hard.safetensors")
  meta.config = meta.config:gsub('"attn_hidden":', '"dim_att":'):gsub('"emb":', '"dim_embed":')
                           :gsub('"hidden":', '"dim_hidden":')
  local old = tmpfile(".safetensors")
  glimpse.save(old, sd, meta)
  local _, kept = glimpse.load(old)
  lu.assertStrContains(kept.config, '"dim_att":128')
  local cap = Captioner.load(old)
  os.remove(old)
  lu.assertEquals({cap.config.emb, cap.config.hidden, cap.config.attn_hidden}, {64, 256, 128})
  lu.assertNil(cap.config.dim_hidden)
  local path = tmpfile(".safetensors")
  cap:save(path)
  local _, again = glimpse.load(path)
  lu.assertStrContains(again.config, '"attn_hidden":128')
  lu.assertNil(again.config:find("dim_att", 1, true))
  local back = Captioner.load(path)
  os.remove(path)
  lu.assertEquals(back.config, cap.config)
end

function T.test_the_spec_lists_every_option_and_the_recipes_name_real_ones()
  local spec = glimpse.captioner.OPTIONS
  lu.assertIs(Captioner.options, spec)
  local text = table.concat(spec:lines(), "\n")
  for _, name in ipairs({"emb", "hidden", "attn_hidden", "whole_image", "hard_eval", "mix"}) do
    lu.assertStrContains(text, "  " .. name .. " ")
  end
  for rname, r in pairs(glimpse.captioner.RECIPES) do
    for k, v in pairs(r) do spec:check_value(k, v) end   -- every value fits its option
    lu.assertTrue(#rname > 0)
  end
  local o = glimpse.captioner.with_recipe({soft_prob = 0}, "loo")
  lu.assertEquals({o.soft_prob, o.samples, o.baseline}, {0, 2, "loo"})
end

function T.test_add_flags_makes_the_script_flags_and_from_args_maps_them_back()
  local argparse = require "argparse"
  local function parser()
    local p = argparse("t")
    local names = glimpse.captioner.add_flags(p, {"attention", "coords", "gate", "emb",
                                                  "attn_hidden", "doubly_stochastic"},
                                              {coords = {default = true}})
    return p, names
  end
  local p, names = parser()
  local o = glimpse.captioner.OPTIONS:from_args(p:parse({"--att", "16", "--ds", "0.5",
                                                         "--no-gate", "--soft-prob", "0"}), names)
  lu.assertEquals({o.attn_hidden, o.doubly_stochastic, o.gate, o.coords, o.soft_prob, o.emb},
                  {16, 0.5, false, true, 0, 64})
  lu.assertNil(o.entropy)                                -- a recipe option: no default
  p, names = parser()
  o = glimpse.captioner.OPTIONS:from_args(p:parse({"--no-coords", "--embed", "8"}), names)
  lu.assertEquals({o.coords, o.emb, o.gate}, {false, 8, nil})
  p, names = parser()
  local ok, err = pcall(glimpse.captioner.OPTIONS.from_args, glimpse.captioner.OPTIONS,
                        p:parse({"--att", "0"}), names)
  lu.assertFalse(ok)
  lu.assertStrContains(err, "--att")
end

-- ---------------------------------------------------------------------------------------
-- bad input

function T.test_bad_options_give_clear_errors()
  assert_error_matches("option 'vocab'", Captioner, {})
  assert_error_matches("expected an options table", Captioner, 5)
  assert_error_matches({"Captioner", "attention", "'medium'"}, tiny, {attention = "medium"})
  assert_error_matches({"Captioner", "score", "'telepathy'"}, tiny, {score = "telepathy"})
  assert_error_matches("option 'hidden' must be a positive integer", tiny, {hidden = 0})
  assert_error_matches("needs hidden ==", tiny, {score = "dot"})
  assert_error_matches("doubly_stochastic", tiny, {doubly_stochastic = -1})
  assert_error_matches("encoder", tiny, {encoder = {name = "alexnet"}})
  assert_error_matches("encoder", tiny, {encoder = 7})
end

function T.test_bad_loss_inputs_give_clear_errors()
  local cap = tiny()
  local b = batch(CAPS)
  assert_error_matches("images (B,C,H,W) or annotations", cap.loss, cap, glimpse.rand(16, 16),
                       b.captions_in, b.captions_out)
  assert_error_matches("channel", cap.loss, cap, glimpse.rand(3, 3, 16, 16), b.captions_in,
                       b.captions_out)
  assert_error_matches("same shape", cap.loss, cap, b.images, b.captions_in,
                       b.captions_out:narrow(2, 1, 3))
  assert_error_matches("1..11", cap.loss, cap, b.images, b.captions_in + 20, b.captions_out)
  assert_error_matches("mask must be", cap.loss, cap, b.images, b.captions_in, b.captions_out,
                       glimpse.ones(2, 2))
  assert_error_matches("2 images but 3 captions", cap.loss, cap, glimpse.rand(2, 1, 16, 16),
                       b.captions_in, b.captions_out)
  assert_error_matches("too small", cap.loss, cap, glimpse.rand(3, 1, 2, 2), b.captions_in,
                       b.captions_out)
end

function T.test_bad_caption_and_file_inputs_give_clear_errors()
  local cap = tiny()
  assert_error_matches("beam", cap.caption, cap, glimpse.rand(1, 16, 16), {beam = 0})
  assert_error_matches("max_len", cap.caption, cap, glimpse.rand(1, 16, 16), {max_len = 1.5})
  assert_error_matches("image", cap.caption, cap, 42)
  assert_error_matches("/no/such/file.png", cap.caption, cap, "/no/such/file.png")
  assert_error_matches("words but", cap.overlays, cap, glimpse.rand(1, 16, 16),
                       glimpse.rand(2, 16), "one", "/tmp/x.png")
  local path = tmpfile(".safetensors")
  glimpse.save(path, {w = glimpse.zeros(2)})
  assert_error_matches("not a glimpse.captioner checkpoint", Captioner.load, path)
  os.remove(path)
  assert_error_matches("Captioner.load", Captioner.load, "/no/such/model.safetensors")
end

function T.test_load_weights_refuses_another_vocabulary()
  local path = os.tmpname() .. ".safetensors"
  local other = Captioner{vocab = Vocab.new({"x", "y", "z", "w", "v", "u", "t"}),
                          encoder = {in_channels = 1, channels = {4, 6}}, emb = 6,
                          hidden = 8, attn_hidden = 5}
  other:save(path)
  local ok, e = pcall(function() hard():load_weights(path) end)
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(e), "another vocabulary")
  local same = hard()
  same:save(path)
  local cap = hard():load_weights(path)
  lu.assertEquals((cap.embed.weight - same.embed.weight):abs():max():item(), 0)
  os.remove(path)
end

function T.test_overlays_wrap_onto_rows_of_ncol_panels()
  local cap = hard()
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
