-- tests/test_captioner.lua -- the Show, Attend and Tell captioner (glimpse/models/captioner.lua)
-- and the caption metrics (bindings/glimpse/metrics.lua): shapes through the loss and the
-- decoder, finite-difference gradients, the doubly stochastic and REINFORCE terms, save/load,
-- BLEU and attention-in-box against hand-computed values, a short training run, bad input.
local lu = require "luaunit"
local glimpse = require "glimpse"
local Captioner = require("glimpse.models.captioner").Captioner
local metrics = require "glimpse.metrics"
local att = glimpse.attention
local assert_close = require("tests.helpers").assert_close

local Vocab = glimpse.data.Vocab

local T = {}

local EXACT = 1e-6          -- values computed the same way twice / by hand in double precision
local FLOAT_TOL = 1e-4      -- a float32 sum checked against a double-precision hand value
local GRAD_EPS = 1e-2       -- finite-difference step (float32)
local GRAD_ATOL = 2e-3
local GRAD_RTOL = 3e-2
local OVERFIT_STEPS = 40    -- Adam steps on one batch
local OVERFIT_RATIO = 0.5   -- ... after which the loss is below this share of the first loss

-- ---------------------------------------------------------------------------------------
-- helpers

local WORDS = {"a", "red", "blue", "circle", "square", "above", "below"}

-- a tiny captioner: 16x16 grey images, two conv blocks -> a 4x4 grid (L = 16)
local function tiny(o)
  o = o or {}
  local opts = {vocab = Vocab.new(WORDS), encoder = {in_channels = 1, channels = {4, 6}},
                emb = 6, hidden = 8, attn_hidden = 5, max_len = 6}
  for k, v in pairs(o) do opts[k] = v end
  return Captioner(opts)
end

-- a batch of B random images and captions of the given word lists
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

local CAPS = {{"a", "red", "circle"}, {"a", "blue", "square", "above", "a", "red", "circle"},
              {"a", "square"}}

local function tmpfile(suffix)
  return os.tmpname() .. suffix
end

local function assert_error_matches(pattern, fn, ...)
  local ok, err = pcall(fn, ...)
  lu.assertFalse(ok, "expected an error matching " .. pattern)
  lu.assertStrContains(tostring(err), pattern)
end

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
  local words, tokens, alphas = cap:caption(glimpse.rand(1, 16, 16), {beam = 2})
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
  local words, tokens, alphas = cap:caption(glimpse.rand(3, 1, 16, 16), {beam = 1, max_len = 4})
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
    local w, _, al = hard:caption(imgs[2], {beam = 3})
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
  local cap = tiny({doubly_stochastic = 0.5, global_feature = true, global_output = true})
  glimpse.no_grad(function() cap.out_g.weight:uniform_(-0.3, 0.3) end)
  -- v = 0 would make the attention uniform and cut the gradient to W and U
  glimpse.no_grad(function() cap.attention.v:uniform_(-1, 1) end)
  local b = batch({{"a", "red", "circle"}, {"a", "square", "below", "a", "circle"}})
  local a = glimpse.no_grad(function() return cap:annotate(b.images) end)
  local function f() return (cap:loss(a, b.captions_in, b.captions_out, b.mask)) end
  local checks = {cap.attention.v, cap.attention.query_proj.weight, cap.attention.key_proj.weight,
                  cap.gate.weight, cap.lstm.weight_ih, cap.out_z.weight, cap.init_h.weight,
                  cap.embed.weight, cap.global_in.weight, cap.out_g.weight}
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
    local words, tokens, alphas = cap:caption(glimpse.rand(1, 16, 16), {beam = 2})
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
    local w1, _, a1 = cap:caption(imgs, {beam = beam})
    cap:set_hard_eval("marginal")
    cap.config.marginal_cells = 1
    local w2, _, a2 = cap:caption(imgs, {beam = beam})
    lu.assertEquals(w2, w1)
    for i = 1, 3 do lu.assertEquals(a2[i]:totable(), a1[i]:totable()) end
  end
end

function T.test_region_rule_with_a_one_cell_window_decodes_as_argmax()
  glimpse.manual_seed(23)
  local imgs = glimpse.rand(3, 1, 16, 16)
  local cap = tiny({attention = "hard", hard_eval = "argmax"})
  local w1, _, a1 = cap:caption(imgs, {beam = 2})
  cap.config.region_size = 1
  cap:set_hard_eval("region")
  lu.assertEquals({cap.attention.hard_eval, cap.attention.region}, {"region", 1})
  local w2, _, a2 = cap:caption(imgs, {beam = 2})
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
  local w1, t1, a1 = cap:caption(imgs, {beam = 3})
  local w2, t2, a2 = back:caption(imgs, {beam = 3})
  lu.assertEquals(w2, w1)
  lu.assertEquals(t2, t1)
  for k = 1, 3 do
    if #t1[k] > 0 then lu.assertEquals((a1[k] - a2[k]):abs():max():item(), 0) end
  end
end

function T.test_caption_accepts_a_file_name()
  glimpse.manual_seed(11)
  local cap = tiny({image = {channels = 1, height = 16, width = 16}})
  local img = glimpse.rand(3, 40, 40)
  local path = tmpfile(".png")
  glimpse.image.save(path, img)
  local words = cap:caption(path, {beam = 1})
  os.remove(path)
  lu.assertEquals(type(words), "string")
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
-- BLEU

function T.test_bleu_clips_counts_papineni_example()
  -- Papineni et al.'s example: "the" x7 against "the cat is on the mat": unigram 2/7
  local b = metrics.bleu({"the the the the the the the"},
                         {{"the cat is on the mat", "there is a cat on the mat"}}, {max_n = 1})
  lu.assertAlmostEquals(b.precisions[1], 2 / 7, EXACT)
  lu.assertEquals(b.brevity_penalty, 1)        -- 7 words, closest reference 7 words
  lu.assertAlmostEquals(b[1], 2 / 7, EXACT)
end

function T.test_bleu_hand_value_with_brevity_penalty()
  -- candidate 4 words, references 6 and 9 words: r = 6, BP = exp(1 - 6/4)
  local cand = {"the cat sat down"}
  local refs = {{"the cat sat on the mat", "a cat was sitting down on the mat"}}
  local b = metrics.bleu(cand, refs)
  -- unigrams: the, cat, sat, down all appear in some reference: 4/4
  -- bigrams: "the cat", "cat sat" (ref 1); "sat down" in neither: 2/3
  -- trigrams: "the cat sat" (ref 1); "cat sat down" no: 1/2; 4-grams: none: 0/1
  local bp = math.exp(1 - 6 / 4)
  lu.assertAlmostEquals(b.brevity_penalty, bp, EXACT)
  lu.assertAlmostEquals(b.precisions[2], 2 / 3, EXACT)
  lu.assertAlmostEquals(b[1], bp * 1, EXACT)
  lu.assertAlmostEquals(b[2], bp * math.sqrt(1 * 2 / 3), EXACT)
  lu.assertAlmostEquals(b[3], bp * (1 * 2 / 3 * 1 / 2) ^ (1 / 3), EXACT)
  lu.assertEquals(b[4], 0)
end

function T.test_bleu_is_a_corpus_score_not_a_mean_of_sentence_scores()
  -- counts add up over the corpus before dividing: (3 + 1) / (3 + 2) unigram precision
  local b = metrics.bleu({"a b c", "x y"}, {{"a b c"}, {"x z"}}, {max_n = 1})
  lu.assertAlmostEquals(b.precisions[1], 4 / 5, EXACT)
  lu.assertEquals(b.length, 5)
  lu.assertEquals(b.ref_length, 5)
  lu.assertAlmostEquals(b[1], 4 / 5, EXACT)
  -- a perfect corpus scores 1 at every order
  local p = metrics.bleu({{"a", "b", "c", "d"}}, {{{"a", "b", "c", "d"}}})
  for n = 1, 4 do lu.assertAlmostEquals(p[n], 1, EXACT) end
end

function T.test_bleu_reference_length_prefers_the_shorter_on_a_tie()
  -- a 4-word candidate with references of 3 and 5 words: both 1 away, r = 3, so BP = 1;
  -- with 5 chosen BP would be exp(1 - 5/4)
  local b = metrics.bleu({"a b c d"}, {{"a b c", "a b c d e"}}, {max_n = 1})
  lu.assertEquals(b.ref_length, 3)
  lu.assertEquals(b.brevity_penalty, 1)
end

-- ---------------------------------------------------------------------------------------
-- attention inside boxes

function T.test_items_counts_the_articles_and_the_named_item_words()
  -- scene 1 holds a bag and a shirt; scene 2 a bag, a coat and a dress
  local function scene(tokens, items)
    local boxes = {}
    for k, w in ipairs(tokens) do
      if w ~= "a" and w ~= "the" and w ~= "and" and w ~= "above" and w ~= "below" then
        boxes[k] = {1, 1, 2, 2}
      end
    end
    return {tokens = tokens, boxes = boxes, items = items}
  end
  local scenes = {scene({"a", "bag", "above", "a", "shirt"}, {1, 2}),
                  scene({"a", "bag", "above", "a", "coat", "and", "a", "dress", "below", "the", "bag"},
                        {1, 2, 3})}
  local set = {n = 2, scene = function(i) return scenes[i] end}
  local ce = glimpse.models.caption_eval
  -- caption 1: two items, one right (bag), one wrong (coat: not in scene 1);
  -- caption 2: two items for three, both right (bag twice: the scene names it twice)
  local r = ce.items(set, {"a bag above a coat", "a bag below a bag"})
  lu.assertAlmostEquals(r.count, 0.5, EXACT)
  lu.assertEquals(r.by_items, {[2] = {right = 1, n = 1}, [3] = {right = 0, n = 1}})
  lu.assertAlmostEquals(r.precision, 3 / 4, EXACT)
  lu.assertStrContains(ce.items_line(r), "the right number in 50.0% of the captions (scenes of 2: 1/1, 3: 0/1 items); 75.0%")
  lu.assertNil(ce.items({n = 1}, {"a bag"}))
end

function T.test_tune_keeps_the_setting_with_the_best_validation_bleu4()
  glimpse.manual_seed(28)
  local ce = glimpse.models.caption_eval
  local cap = tiny({attention = "hard", hard_eval = "argmax"})
  local imgs = glimpse.rand(6, 1, 16, 16)
  local refs = {{"a red circle above a blue square"}, {"a blue square"}, {"a red square below a circle"},
                {"a circle"}, {"a blue circle above a red square"}, {"a square below a red circle"}}
  local set = {n = 6, refs = function(i) return refs[i] end,
               batch = function(idx) return {images = imgs:index_select(1, glimpse.tensor(idx))} end}
  local best, rows = ce.tune(cap, set, {beam = 2, length_penalties = {0, 1, 3}, rules = {"region", "argmax"}})
  lu.assertEquals(#rows, 6)
  local first = rows[1]                                 -- the first row with the highest BLEU-4
  for _, r in ipairs(rows) do if r.bleu4 > first.bleu4 then first = r end end
  lu.assertIs(best, first)
  lu.assertEquals({cap.config.hard_eval, cap.attention.hard_eval, cap.config.length_penalty},
                  {best.rule, best.rule, best.length_penalty})
  -- a row is the BLEU-4 of the beam captions under its setting
  cap:set_hard_eval(rows[5].rule)
  local words = ce.captions(cap, set, 2)
  cap.config.length_penalty = rows[5].length_penalty
  lu.assertAlmostEquals(rows[5].bleu4, ce.bleu(set, (ce.captions(cap, set, 2)))[4], EXACT)
  lu.assertEquals(#words, 6)
  lu.assertStrContains(ce.tune_line(best, rows, 6), "decoding chosen on 6 validation images")
  -- soft attention has one rule: only the length penalty is tried
  local soft = tiny()
  local b2, rows2 = ce.tune(soft, set, {beam = 2, length_penalties = {0, 2}})
  lu.assertEquals(#rows2, 2)
  lu.assertNil(b2.rule)
  local ok, err = pcall(ce.tune, soft, set, {length_penalties = {-1}})
  lu.assertFalse(ok)
  lu.assertStrContains(err, "caption_eval.tune: a length penalty must be a number >= 0, got -1")
  ok, err = pcall(ce.tune, soft, {n = 0})
  lu.assertFalse(ok)
  lu.assertStrContains(err, "caption_eval.tune: set must be a non-empty caption set")
end

function T.test_attention_in_box_whole_cells()
  -- a 2x2 grid on a 4x4 image: box {1,1,2,2} is exactly the top-left cell
  local alphas = glimpse.tensor({{0.7, 0.1, 0.1, 0.1}, {0.1, 0.1, 0.1, 0.7}, {0.25, 0.25, 0.25, 0.25}})
  local boxes = {{1, 1, 2, 2}, {3, 3, 4, 4}, nil}
  local inside, chance = metrics.attention_in_box(alphas, boxes, {2, 2}, {4, 4})
  lu.assertAlmostEquals(inside[1], 0.7, FLOAT_TOL)
  lu.assertAlmostEquals(inside[2], 0.7, FLOAT_TOL)
  lu.assertNil(inside[3])
  lu.assertAlmostEquals(chance[1], 0.25, EXACT)
end

function T.test_attention_in_box_partial_cells_count_by_area()
  -- box {1,1,1,2}: pixel column 1, rows 1-2 = half of the top-left cell (columns 1-2)
  local inside = metrics.attention_in_box({{0.7, 0.1, 0.1, 0.1}}, {{1, 1, 1, 2}}, {2, 2}, {4, 4})
  lu.assertAlmostEquals(inside[1], 0.35, EXACT)
  -- a 3x3 grid on a 4x4 image: cells are 4/3 pixels wide; box {1,1,4,4} covers everything
  local all = metrics.attention_in_box({{0.1, 0.1, 0.1, 0.1, 0.2, 0.1, 0.1, 0.1, 0.1}},
                                       {{1, 1, 4, 4}}, {3, 3}, {4, 4})
  lu.assertAlmostEquals(all[1], 1, EXACT)
  -- box {1,1,2,4}: columns 0..2 of 4: cell column 1 fully (0..4/3), column 2 half (4/3..8/3)
  local left, chance = metrics.attention_in_box({{1, 0, 0, 0, 0, 0, 0, 0, 0},
                                                 {0, 1, 0, 0, 0, 0, 0, 0, 0},
                                                 {0, 0, 1, 0, 0, 0, 0, 0, 0}},
                                                {{1, 1, 2, 4}, {1, 1, 2, 4}, {1, 1, 2, 4}},
                                                {3, 3}, {4, 4})
  lu.assertAlmostEquals(left[1], 1, EXACT)
  lu.assertAlmostEquals(left[2], 0.5, EXACT)
  lu.assertAlmostEquals(left[3], 0, EXACT)
  lu.assertAlmostEquals(chance[1], 0.5, EXACT)     -- half the image
end

function T.test_attention_in_box_normalises_rows()
  local inside = metrics.attention_in_box({{2, 0, 0, 2}}, {{1, 1, 2, 2}}, {2, 2}, {4, 4})
  lu.assertAlmostEquals(inside[1], 0.5, EXACT)
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
-- bad input

function T.test_bad_options_give_clear_errors()
  assert_error_matches("option 'vocab'", Captioner, {})
  assert_error_matches("expected an options table", Captioner, 5)
  assert_error_matches("'attention' must be", tiny, {attention = "medium"})
  assert_error_matches("option 'score' must be one of", tiny, {score = "telepathy"})
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

function T.test_bad_metric_inputs_give_clear_errors()
  assert_error_matches("2 candidates but 1 reference", metrics.bleu, {"a", "b"}, {{"a"}})
  assert_error_matches("no references", metrics.bleu, {"a"}, {{}})
  assert_error_matches("alpha row 1 has 3 entries", metrics.attention_in_box, {{1, 0, 0}},
                       {{1, 1, 2, 2}}, {2, 2}, {4, 4})
  assert_error_matches("grid_hw", metrics.attention_in_box, {{1, 0, 0, 0}}, {{1, 1, 2, 2}},
                       {0, 2}, {4, 4})
  assert_error_matches("x2 < x1", metrics.attention_in_box, {{1, 0, 0, 0}}, {{3, 1, 2, 2}},
                       {2, 2}, {4, 4})
end

-- ---------------------------------------------------------------------------------------
-- what makes hard attention learn: K samples with the leave-one-out baseline, per-sample
-- baselines, straight-through Gumbel-softmax, the schedules (set_progress), the recipes

local CAPS2 = {{"a", "red", "circle"}, {"a", "blue", "square", "above", "a", "red", "circle"}}

local function hard(o)
  local opts = {attention = "hard"}
  for k, v in pairs(o or {}) do opts[k] = v end
  return tiny(opts)
end

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
  lu.assertStrContains(tostring(e), "'mix' must be")
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
  local cap = hard()
  local ok, e = pcall(cap.set_progress, cap, "half")
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(e), "set_progress")
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
