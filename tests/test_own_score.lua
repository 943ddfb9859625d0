-- tests/test_own_score.lua -- glimpse.attention.register_score (bindings/glimpse/attention/
-- scores.lua): a score of one's own joins the registry and then works as a built-in one does
-- in nn.Attention, models.Seq2Seq (training, greedy and beam decoding, save/load), the modes
-- that take any score, and attention.gradcheck_score; bad names, specs and shapes are refused
-- with messages that name the score and the shapes.
local lu = require "luaunit"
local glimpse = require "glimpse"
local H = require "tests.helpers"
local nn, att, models = glimpse.nn, glimpse.attention, glimpse.models
local tasks = require "datasets.seq2seq_tasks"

local T = {}

local EXE = arg and arg[-1]
local EXACT = 0            -- the same computation twice (save/load, the same maths)
local SAME_TOL = 1e-5      -- one score written two ways (a registered general vs the built-in)
local TRAIN_STEPS = 40     -- Adam steps on one batch ...
local TRAIN_RATIO = 0.6    -- ... after which the loss is below this share of the first

-- e = v . relu(W q + U k): Bahdanau's score with a ReLU, U k once per sequence
local RELU_ADDITIVE = {
  params = function(dq, dk, h) return {W = {h, dq}, U = {h, dk}, v = {h}} end,
  precompute = function(keys, p) return glimpse.linear(keys, p.U) end,
  score = function(q, uk, p)
    local B, L, Hd = uk.shape[1], uk.shape[2], uk.shape[3]
    local t = (uk + glimpse.linear(q, p.W):reshape(B, 1, Hd)):relu()
    return t:matmul(p.v:reshape(Hd, 1)):reshape(B, L)
  end,
  help = "v . relu(W q + U k)",
}

-- Luong's general score q^T W k, written by hand: the built-in "general" with W (Dq,Dk)
local MY_GENERAL = {
  params = function(dq, dk) return {W = {dq, dk}} end,
  precompute = function(keys, p) return glimpse.linear(keys, p.W) end,
  score = function(q, k)
    local B, L = k.shape[1], k.shape[2]
    return k:matmul(q:reshape(B, -1, 1)):reshape(B, L)
  end,
}

-- a smooth score (tanh) for gradient checks: tanh(q^T W k) * s
local SMOOTH = {
  params = function(dq, dk) return {W = {dq, dk}, s = glimpse.full({1}, 2)} end,
  score = function(q, k, p)
    local B, L = k.shape[1], k.shape[2]
    local wk = glimpse.linear(k, p.W)
    return wk:matmul(q:reshape(B, -1, 1)):reshape(B, L):tanh() * p.s
  end,
}

att.register_score("relu_additive", RELU_ADDITIVE)
att.register_score("my_general", MY_GENERAL)
att.register_score("smooth_bilinear", SMOOTH)

local function has(list, x)
  for _, v in ipairs(list) do if v == x then return true end end
  return false
end

local function err_of(f, ...)
  local ok, e = pcall(f, ...)
  lu.assertFalse(ok, "expected an error")
  return tostring(e)
end

local function tiny_data()
  return tasks.reversal{n = 16, min_len = 3, max_len = 6, seed = 5}
end

local function tiny(score, o)
  local opts = {dataset = tiny_data(), emb = 8, hidden = 16, attn_hidden = 8, score = score}
  for k, v in pairs(o or {}) do opts[k] = v end
  glimpse.manual_seed(11)
  return models.Seq2Seq(opts)
end

local function batch(ds, n)
  local idx = {}
  for i = 1, n do idx[i] = i end
  return ds:collate(idx)
end

local function max_diff(a, b)
  return (a - b):abs():max():item()
end

-- ---------------------------------------------------------------------------------------
-- the registry

function T.test_a_registered_score_joins_SCORES_after_the_built_in_ones()
  lu.assertEquals(att.SCORES[#att.BUILTIN_SCORES + 1], "relu_additive")
  lu.assertTrue(has(att.SCORES, "my_general"))
  lu.assertFalse(has(att.BUILTIN_SCORES, "relu_additive"))
  lu.assertTrue(att.has_score("relu_additive") and att.has_score("dot"))
  lu.assertTrue(att.is_registered_score("relu_additive"))
  lu.assertFalse(att.is_registered_score("dot"))
  lu.assertFalse(att.has_score("nope"))
  lu.assertEquals(att.score_help("relu_additive"), "v . relu(W q + U k)")
  lu.assertNil(att.score_help("additive"))
  -- the option tables whose choices are the scores take it and list it (nn.Attention's,
  -- Seq2Seq's)
  lu.assertEquals(nn.Attention.options:check({score = "relu_additive", query = 3}).score,
                  "relu_additive")
  lu.assertEquals(models.Seq2Seq.options:check({score = "relu_additive"}).score, "relu_additive")
  lu.assertStrContains(err_of(nn.Attention, {score = "zzz", query = 3}), "conv, relu_additive")
  lu.assertStrContains(err_of(models.Seq2Seq.options.check, models.Seq2Seq.options,
                              {score = "zzz"}), "conv, relu_additive")
end

function T.test_registering_a_name_again_replaces_it_without_a_second_entry()
  local n = #att.SCORES
  att.register_score("again", {score = function(q, k) return k:sum(3) end})
  att.register_score("again", {score = function(q, k) return k:sum(3) * 2 end})
  lu.assertEquals(#att.SCORES, n + 1)
  local a = nn.Attention{score = "again", query = 3}
  local keys = glimpse.ones(1, 2, 3)
  local st = a:precompute(keys)
  lu.assertEquals(att.scores("again", a:score_params(), st.cache, glimpse.ones(1, 3)):totable(),
                  {{6, 6}})
end

function T.test_registration_and_gradcheck_leave_the_global_generator_alone()
  glimpse.manual_seed(42)
  local want = glimpse.rand(4):totable()
  glimpse.manual_seed(42)
  att.register_score("quiet", RELU_ADDITIVE)
  att.gradcheck_score("quiet", {query = 3, key = 2, hidden = 2})
  lu.assertEquals(glimpse.rand(4):totable(), want)
end

-- ---------------------------------------------------------------------------------------
-- nn.Attention

function T.test_nn_attention_holds_the_declared_parameters_in_its_state_dict()
  glimpse.manual_seed(1)
  local a = nn.Attention{score = "relu_additive", query = 6, key = 5, hidden = 4}
  local sd = a:state_dict()
  lu.assertEquals(sd["scorer.W"].shape, {4, 6})
  lu.assertEquals(sd["scorer.U"].shape, {4, 5})
  lu.assertEquals(sd["scorer.v"].shape, {4})
  lu.assertStrContains(tostring(a), "relu_additive: U [4,5], W [4,6], v [4]")
  -- a shape starts uniform in +-1/sqrt(last size); a tensor as given
  lu.assertTrue(sd["scorer.W"]:abs():max():item() <= 1 / math.sqrt(6))
  local s = nn.Attention{score = "smooth_bilinear", query = 3, key = 3}
  lu.assertEquals(s:state_dict()["scorer.s"]:totable(), {2})
end

function T.test_nn_attention_trains_a_registered_score_with_masks()
  glimpse.manual_seed(2)
  local a = nn.Attention{score = "relu_additive", query = 6, key = 5, hidden = 4}
  local q, keys = glimpse.randn(2, 6), glimpse.randn(2, 4, 5)
  local mask = glimpse.tensor({{1, 1, 1, 1}, {1, 1, 0, 0}})
  local ctx, alpha = a(q, keys, nil, mask)
  lu.assertEquals(ctx.shape, {2, 5})
  lu.assertEquals(alpha[2][3]:item(), 0)
  lu.assertAlmostEquals(alpha:sum(2):totable()[2], 1, 1e-5)
  ctx:sum():backward()
  for _, n in ipairs({"W", "U", "v"}) do
    lu.assertNotNil(a.scorer[n].grad, n)
  end
end

function T.test_a_registered_general_score_equals_the_built_in_one()
  glimpse.manual_seed(3)
  local ref = nn.Attention{score = "general", query = 6, key = 5}
  local own = nn.Attention{score = "my_general", query = 6, key = 5}
  glimpse.no_grad(function() own.scorer.W:copy_(ref.proj.weight) end)
  local q, keys = glimpse.randn(3, 6), glimpse.randn(3, 7, 5)
  local mask = glimpse.tensor({{1, 1, 1, 1, 1, 1, 1}, {1, 1, 1, 0, 0, 0, 0}, {1, 0, 0, 0, 0, 0, 0}})
  for _, o in ipairs({{}, {temperature = 0.5}, {normaliser = "sigmoid"}}) do
    local r = nn.Attention{score = "general", query = 6, key = 5, temperature = o.temperature,
                           normaliser = o.normaliser}
    local m = nn.Attention{score = "my_general", query = 6, key = 5,
                           temperature = o.temperature, normaliser = o.normaliser}
    glimpse.no_grad(function()
      r.proj.weight:copy_(ref.proj.weight)
      m.scorer.W:copy_(ref.proj.weight)
    end)
    local c1, a1 = r(q, keys, nil, mask)
    local c2, a2 = m(q, keys, nil, mask)
    lu.assertTrue(max_diff(a1, a2) < SAME_TOL)
    lu.assertTrue(max_diff(c1, c2) < SAME_TOL)
  end
  local _, a1 = ref(q, keys)
  local _, a2 = own(q, keys)
  lu.assertTrue(max_diff(a1, a2) < SAME_TOL)
end

function T.test_modes_that_take_any_score_take_a_registered_one()
  local q, keys = glimpse.randn(2, 4), glimpse.randn(2, 5, 4)
  for _, mode in ipairs({"soft", "hard", "local-m", "local-p", "monotonic"}) do
    glimpse.manual_seed(4)
    local a = nn.Attention{score = "relu_additive", mode = mode, query = 4, window = 2}
    local ctx, alpha = a(q, keys)
    lu.assertEquals(ctx.shape, {2, 4}, mode)
    lu.assertEquals(alpha.shape, {2, 5}, mode)
    a:evaluate()
    ctx = a(q, keys)
    lu.assertEquals(ctx.shape, {2, 4}, mode)
  end
  -- location-aware mode and coverage stay with additive/concat
  lu.assertStrContains(err_of(nn.Attention, {score = "relu_additive", mode = "location", query = 4}),
                       "additive or concat")
end

-- ---------------------------------------------------------------------------------------
-- Seq2Seq: training, decoding, checkpoints

function T.test_seq2seq_with_a_registered_score_learns()
  local m = tiny("relu_additive")
  lu.assertEquals(m.config.score, "relu_additive")
  local b = batch(tiny_data(), 8)
  local opt = glimpse.optim.Adam(m:parameters(), {lr = 0.02})
  local first, last
  for i = 1, TRAIN_STEPS do
    opt:zero_grad()
    local loss = m:loss(b)
    loss:backward()
    opt:step()
    if i == 1 then first = loss:item() end
    last = loss:item()
  end
  lu.assertTrue(last < TRAIN_RATIO * first, string.format("%.3f -> %.3f", first, last))
end

function T.test_seq2seq_trains_with_the_trainer_and_decodes_greedy_and_beam()
  local m = tiny("relu_additive")
  local ds = tiny_data()
  glimpse.train.Trainer{model = m, optimizer = {"Adam", lr = 1e-2}, steps = 8, data = ds,
                        batch_size = 8, progress = false}:fit()
  local b = batch(ds, 6)
  local greedy, ex = m:decode(b)
  local beam1 = m:decode(b, {beam = 1})
  local beam3, ex3 = m:decode(b, {beam = 3})
  lu.assertEquals(#greedy, 6)
  lu.assertEquals(beam1, greedy)
  lu.assertEquals(#beam3, 6)
  lu.assertEquals(#ex.alignments[1][1], b.src.shape[2])
  lu.assertNotNil(ex3.scores[1])
  -- each row decoded alone as in the batch (the beam's state reordering is per row)
  for i = 1, 3 do
    lu.assertEquals(m:decode(ds:collate({i}), {beam = 3})[1], beam3[i], "row " .. i)
  end
  local r = models.eval.sequence_accuracy(m, ds)
  lu.assertEquals(r.n, ds.n)
end

function T.test_save_and_load_keep_a_registered_score()
  local m = tiny("relu_additive")
  local path = H.tmpdir() .. "/own.safetensors"
  m:save(path)
  local m2 = models.Seq2Seq.load(path)
  lu.assertEquals(m2.config.score, "relu_additive")
  local b = batch(tiny_data(), 4)
  lu.assertEquals(m2:decode(b, {beam = 2}), m:evaluate():decode(b, {beam = 2}))
  local l1 = m:loss(b):item()
  local l2 = m2:loss(b):item()
  lu.assertTrue(math.abs(l1 - l2) <= EXACT)
end

function T.test_loading_without_the_registration_names_the_score()
  lu.skipIf(not EXE, "needs the glimpse executable as arg[-1]")
  local d = H.tmpdir()
  tiny("relu_additive"):save(d .. "/own.safetensors")
  H.write_file(d .. "/load.lua", string.format(
    "local ok, e = pcall(require('glimpse').models.Seq2Seq.load, %q)\nprint(ok, e)\n",
    d .. "/own.safetensors"))
  local p = io.popen(string.format("%s %s 2>&1", H.sh_quote(EXE), H.sh_quote(d .. "/load.lua")))
  local out = p:read("a")
  p:close()
  lu.assertStrContains(out, "false")
  lu.assertStrContains(out, "the model uses the score 'relu_additive', which is not registered")
  lu.assertStrContains(out, 'register_score("relu_additive", spec)')
end

function T.test_seq2seq_refuses_an_unknown_score_naming_the_choices()
  local e = err_of(tiny, "relu_additiv")
  lu.assertStrContains(e, "did you mean 'relu_additive'")
end

-- ---------------------------------------------------------------------------------------
-- gradcheck_score

function T.test_gradcheck_score_passes_for_a_smooth_score()
  lu.assertTrue(att.gradcheck_score("smooth_bilinear", {query = 3, key = 4}))
  lu.assertTrue(att.gradcheck_score("relu_additive", {query = 3, key = 4, hidden = 3, seed = 2}))
end

function T.test_gradcheck_score_names_the_parameter_whose_gradient_is_wrong()
  att.register_score("broken_grad", {
    params = function() return {s = glimpse.full({1}, 2)} end,
    score = function(q, k, p)
      local B, L = k.shape[1], k.shape[2]
      local e = k:matmul(q:reshape(B, -1, 1)):reshape(B, L)
      return e + k:sum(3) * p.s:detach()           -- s moves the scores, but no gradient
    end,
  })
  local e = err_of(att.gradcheck_score, "broken_grad", {query = 3})
  lu.assertStrContains(e, "attention.gradcheck_score: score 'broken_grad': parameter 's' element 1")
  lu.assertStrContains(e, "analytic")
  lu.assertStrContains(err_of(att.gradcheck_score, "dot"), "'dot' is not a registered score")
  lu.assertStrContains(err_of(att.gradcheck_score, "smooth_bilinear", {query = 0}),
                       "query must be a positive integer")
end

-- ---------------------------------------------------------------------------------------
-- refusals

function T.test_bad_names_and_specs_are_refused()
  local ok_score = function(q, k) return k:sum(3) end
  lu.assertStrContains(err_of(att.register_score, "additive", {score = ok_score}),
                       "'additive' is a built-in score")
  lu.assertStrContains(err_of(att.register_score, "two words", {score = ok_score}),
                       "name must be an identifier")
  lu.assertStrContains(err_of(att.register_score, 5, {score = ok_score}),
                       "name must be an identifier")
  lu.assertStrContains(err_of(att.register_score, "x", ok_score), "spec must be a table")
  lu.assertStrContains(err_of(att.register_score, "x", {scor = ok_score}),
                       "unknown spec field 'scor' (did you mean 'score'?)")
  lu.assertStrContains(err_of(att.register_score, "x", {}), "spec.score must be a function")
  lu.assertStrContains(err_of(att.register_score, "x", {score = ok_score, params = {W = {2}}}),
                       "spec.params must be a function or nil")
  lu.assertStrContains(err_of(att.register_score, "x", {score = ok_score, help = 3}),
                       "spec.help must be a string")
  lu.assertStrContains(err_of(att.register_score, "x", {score = ok_score,
                                                        params = function() return {W = {0, 2}} end}),
                       "parameter 'W' must be a shape")
  lu.assertStrContains(err_of(att.register_score, "x", {score = ok_score,
                                                        params = function() return 3 end}),
                       "params(query, key, hidden) must return a table")
  lu.assertFalse(att.has_score("x"))
end

function T.test_a_score_of_the_wrong_shape_is_refused_at_registration()
  local e = err_of(att.register_score, "wrong", {score = function(q) return q end})
  lu.assertStrContains(e, "score 'wrong' refused")
  lu.assertStrContains(e, "returned [2,4] for query [2,4] and keys [2,3,4]")
  lu.assertStrContains(e, "(B,L) = [2,3]")
  e = err_of(att.register_score, "throws", {score = function() error("no luck") end})
  lu.assertStrContains(e, "score 'throws' refused")
  lu.assertStrContains(e, "no luck")
  e = err_of(att.register_score, "rows", {score = function(q, k) return k:sum(3) end,
                                          precompute = function(keys) return keys[1] end})
  lu.assertStrContains(e, "precompute must return a tensor (or a table of tensors) with one " ..
                          "row per sequence")
  lu.assertFalse(att.has_score("wrong") or att.has_score("throws") or att.has_score("rows"))
end

function T.test_a_wrong_shape_at_work_names_the_score_and_the_shapes()
  -- right for 3 positions (the trial), wrong for more
  att.register_score("first_three", {score = function(q, k) return k:sum(3):narrow(2, 1, 3) end})
  local a = nn.Attention{score = "first_three", query = 4}
  local e = err_of(a, glimpse.randn(2, 4), glimpse.randn(2, 5, 4))
  lu.assertStrContains(e, "score 'first_three' returned [2,3] for query [2,4] and keys " ..
                          "[2,5,4]; it must return scores (B,L) = [2,5]")
  local m = tiny("first_three")      -- built fine; the loss on longer sources says why not
  e = err_of(m.loss, m, batch(tiny_data(), 4))
  lu.assertStrContains(e, "score 'first_three' returned [4,3]")
end

function T.test_params_failing_for_a_model_size_are_an_error_of_the_constructor()
  att.register_score("square_only", {
    params = function(dq, dk) assert(dq == dk, "needs query == key"); return {} end,
    score = function(q, k) return k:sum(3) end,
  })
  local e = err_of(nn.Attention, {score = "square_only", query = 4, key = 3})
  lu.assertStrContains(e, "nn.Attention: score 'square_only': params(4, 3, 3) failed")
  lu.assertStrContains(e, "needs query == key")
end

-- ---------------------------------------------------------------------------------------
-- the compare tool checks its mechanisms against the registry

function T.test_compare_takes_a_registered_score_as_a_mechanism()
  local ok, compare = pcall(require, "glimpse.lab.compare")
  lu.skipIf(not ok or type(compare.parse_mechanism) ~= "function", "no compare.parse_mechanism")
  local m = compare.parse_mechanism("relu_additive/soft")
  lu.assertEquals(m.score, "relu_additive")
  lu.assertEquals(m.mode, "soft")
end

return T
