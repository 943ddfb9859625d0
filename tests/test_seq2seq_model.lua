-- tests/test_seq2seq_model.lua -- glimpse.models.Seq2Seq (bindings/glimpse/models/seq2seq.lua)
-- and the sequence measures (glimpse.metrics.exact_match / token_accuracy,
-- glimpse.models.eval.sequence_accuracy): training on a tiny task, decode shapes, beam 1 =
-- greedy, save/load, named configuration errors, every score x mode.
local lu = require "luaunit"
local glimpse = require "glimpse"
local models = require "glimpse.models"
local metrics = require "glimpse.metrics"
local decode = require "glimpse.decode"
local tasks = require "datasets.seq2seq_tasks"
local Vocab = require "glimpse.data.vocab"

local Seq2Seq = models.Seq2Seq
local T = {}

local EXACT = 0                 -- the same computation twice (save/load)
local TRAIN_STEPS = 40          -- Adam steps on one batch ...
local TRAIN_RATIO = 0.5         -- ... after which the loss is below this share of the first

local function tiny_data()
  return tasks.reversal{n = 16, min_len = 3, max_len = 6, seed = 5}
end

local function tiny(o)
  local opts = {dataset = tiny_data(), emb = 8, hidden = 16, attn_hidden = 8}
  for k, v in pairs(o or {}) do opts[k] = v end
  glimpse.manual_seed(11)
  return Seq2Seq(opts)
end

local function batch(ds, n)
  local idx = {}
  for i = 1, n do idx[i] = i end
  return ds:collate(idx)
end

-- does precompute leave a tensor that is not per row (shared weights) in the state?
local function state_has_shared_tensor(model, b)
  local enc = model:encode(b.src, b.src_lengths)
  local st = model.attention:precompute(enc, nil, b.src_mask)
  local B = b.src.shape[1]
  for _, v in pairs(st.cache) do
    if glimpse.is_tensor(v) and (v:dim() == 0 or v.shape[1] ~= B) then return true end
  end
  return false
end

function T.test_loss_decreases_on_reversal_with_a_fixed_seed()
  local m = tiny()
  local b = batch(tiny_data(), 8)
  local opt = glimpse.optim.Adam(m:parameters(), {lr = 0.02})
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
  lu.assertTrue(stats.token_accuracy > 0.5)
  lu.assertEquals(stats.tokens, b.tgt_mask:sum():item())
end

function T.test_loss_stats_are_numbers_and_match_the_loss_without_extra_terms()
  local m = tiny()
  local loss, stats = m:loss(batch(tiny_data(), 4))
  lu.assertEquals(loss:dim(), 0)
  lu.assertAlmostEquals(stats.nll, loss:item(), 1e-6)
  lu.assertTrue(stats.token_accuracy >= 0 and stats.token_accuracy <= 1)
  lu.assertNil(stats.reward)
end

function T.test_decode_gives_one_id_list_and_alignment_rows_per_example()
  local m = tiny()
  local ds = tiny_data()
  local b = batch(ds, 5)
  for _, K in ipairs({1, 3}) do
    local outs, ex = m:decode(b, {beam = K, max_len = 7})
    lu.assertEquals(#outs, 5)
    for i = 1, 5 do
      lu.assertTrue(#outs[i] <= 7)
      for _, id in ipairs(outs[i]) do
        lu.assertTrue(math.type(id) == "integer" and id >= 1 and id <= ds.tgt_vocab:size())
        lu.assertNotEquals(id, Vocab.END)
      end
      lu.assertTrue(#ex.alignments[i] >= #outs[i])
      lu.assertEquals(#ex.alignments[i][1], b.src.shape[2])
      lu.assertEquals(type(ex.scores[i]), "number")
    end
  end
  lu.assertTrue(m.training, "decode puts the model back in training mode")
end

function T.test_beam_search_of_width_1_equals_greedy_decoding()
  local m = tiny()
  local b = batch(tiny_data(), 6)
  local greedy, gex = m:decode(b, {max_len = 8})
  m:evaluate()
  local hyps = glimpse.no_grad(function()
    return decode.beam(function(y, s) return m:_decode_step(y, s) end, m:_decode_state(b),
                       {beam = 1, max_len = 8, start = Vocab.START, stop = Vocab.END})
  end)
  for i = 1, 6 do
    lu.assertEquals(hyps[i][1].tokens, greedy[i])
    lu.assertAlmostEquals(hyps[i][1].log_prob, gex.scores[i], 1e-5)
  end
end

function T.test_save_and_load_give_the_same_outputs()
  local m = tiny{score = "general", mode = "local-p"}
  local ds = tiny_data()
  local b = batch(ds, 4)
  local path = os.tmpname()
  m:save(path, {note = "hello"})
  local m2, meta = Seq2Seq.load(path)
  os.remove(path)
  lu.assertEquals(meta.note, "hello")
  lu.assertEquals(m2.config, m.config)
  lu.assertEquals(m2.src_vocab:totable(), ds.src_vocab:totable())
  m:evaluate()
  lu.assertAlmostEquals(m2:loss(b):item(), m:loss(b):item(), EXACT)
  lu.assertEquals(m2:decode(b, {beam = 2}), m:decode(b, {beam = 2}))
  lu.assertEquals(m2:translate(b), m:translate(b))
end

function T.test_load_rejects_a_file_of_another_kind()
  local path = os.tmpname()
  glimpse.save(path, {w = glimpse.zeros(2)}, {format = "other"})
  lu.assertErrorMsgContains("Seq2Seq.load: " .. path .. " is not a glimpse.seq2seq checkpoint",
                            Seq2Seq.load, path)
  os.remove(path)
end

function T.test_configuration_errors_name_the_option()
  local ds = tiny_data()
  lu.assertErrorMsgContains("Seq2Seq: unknown score 'foo'", Seq2Seq, {dataset = ds, score = "foo"})
  lu.assertErrorMsgContains("Seq2Seq: unknown mode 'bar'", Seq2Seq, {dataset = ds, mode = "bar"})
  lu.assertErrorMsgContains("Seq2Seq: unknown option 'hiden'", Seq2Seq, {dataset = ds, hiden = 3})
  lu.assertErrorMsgContains("Seq2Seq: option 'hidden' must be a positive integer", Seq2Seq,
                            {dataset = ds, hidden = 0})
  lu.assertErrorMsgContains("needs an even hidden size", Seq2Seq, {dataset = ds, hidden = 15})
  lu.assertErrorMsgContains("Seq2Seq: mode 'location' needs the additive or concat score",
                            Seq2Seq, {dataset = ds, score = "dot", mode = "location"})
  lu.assertErrorMsgContains("Seq2Seq: option 'src_vocab'", Seq2Seq, {})
  lu.assertErrorMsgContains("Seq2Seq:loss: batch.tgt_in", function()
    local m = tiny()
    local b = batch(ds, 2)
    b.tgt_in = nil
    m:loss(b)
  end)
  lu.assertErrorMsgContains("Seq2Seq:decode: option 'beam' must be a positive integer", function()
    tiny():decode(batch(ds, 2), {beam = 0})
  end)
end

-- every score with every mode it allows: a loss with gradients and both decoders
function T.test_every_score_and_valid_mode_builds_trains_and_decodes()
  local ds = tiny_data()
  local b = batch(ds, 3)
  local att = glimpse.attention
  local built = 0
  for _, score in ipairs(att.SCORES) do
    for _, mode in ipairs(att.MODES) do
      local ok_mode = mode ~= "location" or score == "additive" or score == "concat"
      if ok_mode then
        local m = tiny{score = score, mode = mode}
        local loss = m:loss(b)
        loss:backward()
        lu.assertTrue(loss:item() == loss:item(), score .. "/" .. mode .. ": loss is NaN")
        if not state_has_shared_tensor(m, b) then
          lu.assertEquals(#m:decode(b), 3)
          lu.assertEquals(#m:decode(b, {beam = 2}), 3)
        end
        built = built + 1
      else
        lu.assertErrorMsgContains("needs the additive or concat score", tiny,
                                  {score = score, mode = mode})
      end
    end
  end
  lu.assertEquals(built, #att.SCORES * (#att.MODES - 1) + 2)
end

-- The concat score's precompute state holds a shared weight until nn.Attention keeps it
-- out of the per-row cache; glimpse.decode rejects such a state.
function T.test_concat_score_decodes()
  local m = tiny{score = "concat"}
  local b = batch(tiny_data(), 3)
  lu.skipIf(state_has_shared_tensor(m, b),
            "nn.Attention's concat precompute still keeps a shared weight in the per-row state")
  lu.assertEquals(#m:decode(b, {beam = 2}), 3)
end

function T.test_gru_unidirectional_two_layers_and_regularisers()
  local m = tiny{rnn = "gru", bidirectional = false, layers = 2, input_feeding = false}
  local b = batch(tiny_data(), 4)
  local loss = m:loss(b)
  loss:backward()
  lu.assertEquals(#m:decode(b), 4)
  local r = tiny{ds = 1, coverage = true, coverage_penalty = 0.5}
  local _, stats = r:loss(b)
  lu.assertTrue(stats.ds >= 0 and stats.coverage >= 0)
end

function T.test_hard_attention_reports_the_reward_in_training_only()
  local m = tiny{mode = "hard", soft_prob = 0}
  local b = batch(tiny_data(), 4)
  local loss, stats = m:loss(b)
  loss:backward()
  lu.assertTrue(stats.reward < 0)
  lu.assertAlmostEquals(stats.reward, -stats.nll * stats.tokens / 4, 1e-4)
  m:evaluate()
  local _, s2 = m:loss(b)
  lu.assertNil(s2.reward)
  local path = os.tmpname()
  m:save(path)
  local m2 = Seq2Seq.load(path)
  os.remove(path)
  lu.assertNotNil(m.baseline.value)
  lu.assertAlmostEquals(m2.baseline.value, m.baseline.value, 1e-12)
end

-- ---------------------------------------------------------------------------------------
-- measures

function T.test_exact_match_and_token_accuracy_by_hand()
  local preds = {{5, 6, 7}, {5, 6}, {}}
  local refs = {{5, 6, 7}, {5, 7, 8}, {9}}
  local e, right = metrics.exact_match(preds, refs)
  lu.assertAlmostEquals(e, 1 / 3, 1e-12)
  lu.assertEquals(right, 1)
  local t, r, n = metrics.token_accuracy(preds, refs)
  lu.assertEquals({r, n}, {4, 7})
  lu.assertAlmostEquals(t, 4 / 7, 1e-12)
  lu.assertErrorMsgContains("metrics.exact_match: 2 predictions for 1 references",
                            metrics.exact_match, {{1}, {2}}, {{1}})
end

-- a stand-in model whose decoder returns the references (or a corrupted copy of them)
local function oracle(ds, wrong_every)
  return {decode = function(_, b)
    local outs = {}
    for k, i in ipairs(b.indices) do
      local y = table.move(ds.tgt_ids[i], 1, #ds.tgt_ids[i], 1, {})
      if wrong_every and i % wrong_every == 0 then y[1] = Vocab.UNK end
      outs[k] = y
    end
    return outs, {}
  end}
end

function T.test_sequence_accuracy_of_a_perfect_and_a_flawed_decoder()
  local ds = tasks.reversal{n = 10, min_len = 4, max_len = 4, seed = 2}
  local r = models.eval.sequence_accuracy(oracle(ds), ds, {batch_size = 3})
  lu.assertEquals({r.exact, r.token, r.n}, {1, 1, 10})
  lu.assertAlmostEquals(r.bleu, 1, 1e-9)
  local w = models.eval.sequence_accuracy(oracle(ds, 2), ds, {batch_size = 4})
  lu.assertAlmostEquals(w.exact, 0.5, 1e-12)
  lu.assertAlmostEquals(w.token, 1 - 5 / 40, 1e-12)
  lu.assertTrue(w.bleu < 1)
end

function T.test_sequence_accuracy_of_a_trained_model_is_a_share()
  local m = tiny()
  local ds = tiny_data()
  local g = models.eval.sequence_accuracy(m, ds, {beam = 1})
  local k = models.eval.sequence_accuracy(m, ds, {beam = 2, batch_size = 5})
  for _, r in ipairs({g, k}) do
    lu.assertEquals(r.n, ds.n)
    lu.assertTrue(r.exact >= 0 and r.exact <= 1 and r.token >= 0 and r.token <= 1)
    lu.assertTrue(r.bleu >= 0 and r.bleu <= 1)
  end
end

return T
