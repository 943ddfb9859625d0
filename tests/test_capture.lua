-- tests/test_capture.lua -- glimpse.attention.capture (bindings/glimpse/attention/capture.lua):
-- every attention map computed inside a function, keyed by module path, checked against the
-- models' own computation: Seq2Seq in every score and mode, the Transformer (every layer and
-- head; the fused, unfused and masked multi-head paths agree), PointerNet, NTM, Captioner
-- (soft and hard), beam search's per-hypothesis maps; capture off keeps nothing, errors in
-- fn propagate and leave it off.
local lu = require "luaunit"
local glimpse = require "glimpse"
local cjson = require "cjson"
local tasks = require "datasets.seq2seq_tasks"
local copy = require "datasets.copy_task"
local H = require "tests.captioner_helpers"

local A = glimpse.attention
local capture = A.capture
local nn, models = glimpse.nn, glimpse.models

local T = {}

local EXACT = 0          -- the same tensor recorded, or the same computation twice
local PATH_TOL = 1e-5    -- two kernels for the same maths (fused / unfused multi-head)
local SUM_TOL = 1e-5     -- a float32 softmax row summing to 1

local function reversal()
  return tasks.reversal{n = 16, min_len = 3, max_len = 6, seed = 5}
end

local function max_diff(a, b)
  return (a - b):abs():max():item()
end

local function sorted_keys(maps)
  local ks = {}
  for k in pairs(maps) do ks[#ks + 1] = k end
  table.sort(ks)
  return ks
end

-- every row (last dim) of t sums to 1 where its mask row (B,S) is not all zero
local function assert_rows_sum_to_one(t, what)
  local sums = t:sum(-1):reshape(-1):totable()
  for i, s in ipairs(sums) do
    lu.assertAlmostEquals(s, 1, SUM_TOL, string.format("%s: row %d sums to %g", what, i, s))
  end
end

-- ---------------------------------------------------------------------------------------
-- off, errors, arguments

function T.test_capture_is_off_outside_and_keeps_nothing()
  lu.assertFalse(capture.active)
  lu.assertNil(capture.mark())
  local att = nn.Attention{score = "dot", query = 4}
  local maps = capture(function() att(glimpse.randn(2, 4), glimpse.randn(2, 3, 4)) end)
  lu.assertEquals(sorted_keys(maps), {"Attention"})
  lu.assertFalse(capture.active)
  lu.assertNil(capture.mark())
  -- a forward after the capture records nowhere: a new capture sees only its own calls
  att(glimpse.randn(2, 4), glimpse.randn(2, 3, 4))
  local maps2 = capture(function() end)
  lu.assertEquals(sorted_keys(maps2), {})
end

function T.test_errors_in_fn_propagate_and_leave_capture_off()
  local mha = nn.MultiheadAttention(4, 2)
  local ok, err = pcall(capture, function()
    mha(glimpse.randn(1, 3, 4))
    error("boom in fn")
  end, mha)
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(err), "boom in fn")
  lu.assertFalse(capture.active)
  lu.assertNil(capture.mark())
end

function T.test_bad_arguments_name_the_function_and_argument()
  local ok, err = pcall(capture, 42)
  lu.assertFalse(ok)
  lu.assertStrContains(err, "attention.capture: argument #1 must be a function, got number")
  ok, err = pcall(function() capture(function() end, "model") end)
  lu.assertFalse(ok)
  lu.assertStrContains(err, "argument #2 (root) must be an nn.Module or nil, got string")
  lu.assertStrContains(err, "test_capture.lua")      -- reported at the caller's line
end

function T.test_results_of_fn_come_after_the_maps()
  local maps, a, b, c = capture(function() return 1, nil, "x" end)
  lu.assertEquals(sorted_keys(maps), {})
  lu.assertEquals({a, b, c}, {1, nil, "x"})
end

-- ---------------------------------------------------------------------------------------
-- Seq2Seq: every score and mode of nn.Attention

function T.test_seq2seq_every_score_and_mode_maps_equal_the_alignments()
  local ds = reversal()
  local b = ds:collate({1, 2, 3})
  local B, S, Tt = b.src.shape[1], b.src.shape[2], b.tgt_in.shape[2]
  local tried = 0
  for _, score in ipairs(A.SCORES) do       -- this process registers none of its own
    for _, mode in ipairs(A.MODES) do
      glimpse.manual_seed(3)
      local ok, m = pcall(models.Seq2Seq, {dataset = ds, emb = 8, hidden = 8, attn_hidden = 8,
                                           score = score, mode = mode})
      if ok then                    -- location mode takes only additive and concat
        tried = tried + 1
        local what = score .. "/" .. mode
        local maps, alpha, centres = capture(function() return m:alignments(b) end, m)
        lu.assertEquals(maps.attention.shape, {B, Tt, S}, what)
        lu.assertEquals(max_diff(maps.attention, alpha), EXACT, what)
        local info = capture.info(maps, "attention")
        lu.assertEquals(info.path, "attention", what)
        lu.assertEquals(info.module, "Attention", what)
        lu.assertEquals(info.steps, Tt, what)
        if mode == "soft" or mode == "hard" or mode == "location" then
          assert_rows_sum_to_one(maps.attention, what)
        else                        -- local windows, monotonic: at most 1
          lu.assertTrue(maps.attention:sum(3):max():item() <= 1 + SUM_TOL, what)
        end
        if mode == "hard" then      -- evaluation: the argmax cell, as a one-hot
          local sample = maps["attention:sample"]
          lu.assertEquals(sample.shape, {B, Tt, S}, what)
          assert_rows_sum_to_one(sample, what)
          lu.assertEquals(max_diff(sample:argmax(3), alpha:argmax(3)), EXACT, what)
        else
          lu.assertNil(maps["attention:sample"], what)
        end
        if mode == "local-p" then   -- the window at its true positions: 0 beyond D of p_t
          local pos = glimpse.arange(S):reshape(1, 1, S)
          local outside = (pos - centres:reshape(B, Tt, 1)):abs():gt(m.config.window)
          lu.assertEquals((maps.attention * outside):abs():max():item(), 0, what)
        end
      end
    end
  end
  lu.assertTrue(#A.SCORES >= 8 and tried >= #A.SCORES * (#A.MODES - 1),
                "combinations tried: " .. tried)
end

function T.test_hard_attention_in_training_records_the_sampled_cells()
  local att = nn.Attention{score = "general", query = 4, mode = "hard"}
  local keys = glimpse.randn(3, 5, 4)
  glimpse.manual_seed(7)
  local alphas = {}
  local maps = capture(function()
    local st
    for t = 1, 4 do
      local _, a
      _, a, st = att(glimpse.randn(3, 4), keys, nil, nil, st)
      alphas[t] = a
    end
  end, att)
  local key = "Attention"
  lu.assertEquals(max_diff(maps[key], glimpse.stack(alphas, 2)), EXACT)
  local sample = maps[key .. ":sample"]
  assert_rows_sum_to_one(sample, "one-hot samples")
  lu.assertEquals(sample:max():item(), 1)
  -- a sampled cell always had weight: alpha > 0 where the one-hot is 1
  lu.assertTrue(((maps[key] * sample):sum(3)):min():item() > 0)
  lu.assertEquals(capture.info(maps, key .. ":sample").field, "sample")
end

function T.test_a_second_batch_is_a_second_call_with_its_own_key()
  local att = nn.Attention{score = "dot", query = 4}
  local maps = capture(function()
    for _, B in ipairs({2, 2}) do
      local st = att:precompute(glimpse.randn(B, 3, 4))
      for _ = 1, 5 do _, _, st = att(glimpse.randn(B, 4), nil, nil, nil, st) end
    end
  end)
  lu.assertEquals(sorted_keys(maps), {"Attention", "Attention#2"})
  lu.assertEquals(maps.Attention.shape, {2, 5, 3})
  lu.assertEquals(maps["Attention#2"].shape, {2, 5, 3})
  lu.assertEquals(capture.info(maps, "Attention#2").call, 2)
  lu.assertEquals(capture.keys(maps), {"Attention", "Attention#2"})
end

-- ---------------------------------------------------------------------------------------
-- multi-head attention and the Transformer

function T.test_transformer_every_layer_and_head_self_and_cross()
  local ds = reversal()
  local b = ds:collate({1, 2, 3})
  glimpse.manual_seed(4)
  local m = models.Transformer{dataset = ds, d = 8, heads = 2, layers = 2, ff = 16}
  local maps, w = capture(function() return m:alignments(b) end, m)
  local B, S, Tt = b.src.shape[1], b.src.shape[2], b.tgt_in.shape[2]
  lu.assertEquals(capture.keys(maps), {"encoder.0.self_attn", "encoder.1.self_attn",
                                       "decoder.0.self_attn", "decoder.0.multihead_attn",
                                       "decoder.1.self_attn", "decoder.1.multihead_attn"})
  local sd = m:state_dict()
  for key, t in pairs(maps) do
    lu.assertNotNil(sd[key .. ".in_proj_weight"], key .. " is a state_dict prefix")
    lu.assertEquals(capture.info(maps, key).heads, 2)
    assert_rows_sum_to_one(t, key)
  end
  lu.assertEquals(maps["encoder.0.self_attn"].shape, {B, 2, S, S})
  lu.assertEquals(maps["decoder.1.self_attn"].shape, {B, 2, Tt, Tt})
  lu.assertEquals(maps["decoder.1.multihead_attn"].shape, {B, 2, Tt, S})
  -- the heads averaged are what the model itself reports
  lu.assertTrue(max_diff(maps["decoder.1.multihead_attn"]:mean(2), w) <= PATH_TOL)
  -- causal self-attention: nothing above the diagonal
  local upper = glimpse.tensor((function()
    local r = {}
    for i = 1, Tt do r[i] = {} for j = 1, Tt do r[i][j] = j > i and 1 or 0 end end
    return r
  end)())
  lu.assertEquals((maps["decoder.0.self_attn"] * upper):abs():max():item(), 0)
  -- source padding gets no weight
  local pad = (1 - b.src_mask):reshape(B, 1, 1, S)
  lu.assertEquals((maps["decoder.0.multihead_attn"] * pad):abs():max():item(), 0)
end

function T.test_fused_unfused_and_masked_multihead_paths_give_the_same_maps()
  glimpse.manual_seed(5)
  local enc = nn.TransformerEncoderLayer(8, 4, {dim_feedforward = 16, dropout = 0})
  local x = glimpse.randn(2, 5, 8)
  local kpm = glimpse.tensor({{1, 1, 1, 1, 1}, {1, 1, 1, 0, 0}})
  local mha = enc.self_attn
  local fused = capture(function() enc(x, {key_padding_mask = kpm}) end, enc)
  local masked = capture(function()        -- an all-ones attention mask: the masked path
    enc(x, {key_padding_mask = kpm, mask = glimpse.ones(5, 5)})
  end, enc)
  local p = {heads = 4, in_proj_weight = mha.in_proj_weight, in_proj_bias = mha.in_proj_bias,
             out_weight = mha.out_proj.weight, out_bias = mha.out_proj.bias, module = mha}
  local unfused = capture(function() A.multi_head(x, nil, nil, p, {mask = kpm, fused = false}) end,
                          enc)
  local bare = capture(function() A.multi_head(x, nil, nil, p, {mask = kpm}) end)
  local P = fused.self_attn
  lu.assertEquals(P.shape, {2, 4, 5, 5})
  lu.assertTrue(max_diff(P, unfused.self_attn) <= PATH_TOL)
  lu.assertTrue(max_diff(P, masked.self_attn) <= PATH_TOL)
  lu.assertTrue(max_diff(P, bare.MultiheadAttention) <= PATH_TOL)   -- no root: the class
  -- the function without a module goes by its own name
  local p2 = {}
  for k, v in pairs(p) do p2[k] = v end
  p2.module = nil
  local anon = capture(function() A.multi_head(x, nil, nil, p2, {fused = false}) end)
  lu.assertEquals(sorted_keys(anon), {"attention.multi_head"})
end

function T.test_multihead_need_weights_false_is_still_captured_and_not_returned()
  local mha = nn.MultiheadAttention(8, 2)
  local x = glimpse.randn(2, 4, 8)
  local maps, out, w = capture(function() return mha(x, nil, nil, nil, {need_weights = false}) end)
  lu.assertNil(w)
  lu.assertEquals(maps.MultiheadAttention.shape, {2, 2, 4, 4})
  local _, w2 = mha(x)
  lu.assertTrue(max_diff(maps.MultiheadAttention:mean(2), w2) <= PATH_TOL)
  lu.assertTrue(max_diff(out, (mha(x))) <= PATH_TOL)
end

-- ---------------------------------------------------------------------------------------
-- PointerNet, NTM, Captioner

function T.test_pointer_net_maps_are_the_pointer_distributions()
  glimpse.manual_seed(6)
  local m = models.PointerNet{input_dim = 1, outputs = 2, emb = 8, hidden = 8}
  local b = models.PointerNet.batch({{0.3, 0.9, 0.1, 0.5}}, {{2, 4}})
  local maps = capture(function() return m:loss(b) end, m)
  lu.assertEquals(maps.pointer.shape, {1, 3, 5})          -- 2 outputs + the end step, L+1
  assert_rows_sum_to_one(maps.pointer, "pointer")
  -- decoding: the pointer's rows are the steps' distributions that decode reports
  local dmaps, _, ex = capture(function() return m:decode(b) end, m)
  local rows = glimpse.tensor(ex.alignments[1])
  lu.assertEquals(max_diff(dmaps.pointer:reshape(rows.shape[1], rows.shape[2]), rows), EXACT)
  -- glimpses (Bello et al.): the glimpse attention's rows, one per glimpse, beside the pointer
  local g = models.PointerNet{input_dim = 1, outputs = 2, emb = 8, hidden = 8, glimpses = 2}
  local gmaps = capture(function() return g:loss(b) end, g)
  lu.assertEquals(capture.keys(gmaps), {"glimpse", "pointer"})
  lu.assertEquals(gmaps.glimpse.shape, {1, 6, 5})
  assert_rows_sum_to_one(gmaps.glimpse, "glimpse")
end

function T.test_ntm_read_and_write_heads_equal_the_decode_traces()
  glimpse.manual_seed(8)
  local m = models.NTM{memory = 6, width = 4, hidden = 8, bits = 3}
  local b = copy.batch(2, {min_len = 2, max_len = 3, seed = 1, bits = 3})
  local maps, _, ex = capture(function() return m:decode(b) end, m)
  local S = b.inputs.shape[2]
  lu.assertEquals(maps.write_head.shape, {2, S, 6})
  lu.assertEquals(max_diff(maps.write_head, glimpse.stack(ex.write, 2)), EXACT)
  lu.assertEquals(max_diff(maps.read_head, glimpse.stack(ex.read, 2)), EXACT)
  assert_rows_sum_to_one(maps.read_head, "read head")
  assert_rows_sum_to_one(maps.write_head, "write head")
end

function T.test_captioner_soft_maps_equal_the_forward_alphas_on_the_grid()
  glimpse.manual_seed(9)
  local cap = H.tiny()
  cap:evaluate()
  local b = H.batch(H.CAPS2)
  local maps, _, alphas = capture(function() return cap:forward(b.images, b.captions_in) end, cap)
  lu.assertEquals(max_diff(maps.attention, alphas), EXACT)
  assert_rows_sum_to_one(maps.attention, "captioner")
  local info = capture.info(maps, "attention")
  lu.assertEquals(info.grid, {4, 4})
  lu.assertEquals(info.extra, 0)
  -- caption: the maps of the kept hypothesis are its alphas (<end> step beyond them)
  local img = b.images[1]
  local cmaps, _, _, calphas = capture(function() return cap:caption_maps(img, {beam = 1}) end, cap)
  local T_ = calphas.shape[1]
  if T_ > 0 then
    lu.assertEquals(max_diff(cmaps.attention:reshape(-1, 16):narrow(1, 1, T_), calphas), EXACT)
  end
end

function T.test_captioner_hard_records_soft_weights_and_the_sampled_cell()
  glimpse.manual_seed(10)
  local cap = H.hard()
  cap:train()
  local b = H.batch(H.CAPS2)
  local maps, _, alphas = capture(function()
    return cap:forward(b.images, b.captions_in, {use_soft = false})
  end, cap)
  lu.assertEquals(max_diff(maps.attention, alphas), EXACT)
  local sample = maps["attention:sample"]
  lu.assertEquals(sample.shape, alphas.shape)
  assert_rows_sum_to_one(sample, "sampled cells")
  lu.assertTrue((alphas * sample):sum(3):min():item() > 0)
  -- evaluation with hard_eval = argmax: the argmax cell
  cap:evaluate()
  local emaps, _, ealphas = capture(function() return cap:forward(b.images, b.captions_in) end, cap)
  lu.assertEquals(max_diff(emaps["attention:sample"]:argmax(3), ealphas:argmax(3)), EXACT)
end

-- ---------------------------------------------------------------------------------------
-- beam search: the maps of each kept hypothesis

function T.test_beam_search_gives_each_hypothesis_its_captured_maps()
  local ds = reversal()
  glimpse.manual_seed(12)
  local m = models.Seq2Seq{dataset = ds, emb = 8, hidden = 16, attn_hidden = 8}
  m:evaluate()
  local b = ds:collate({1, 2, 3})
  local _, hyps = capture(function()
    return glimpse.no_grad(function()
      return glimpse.decode.beam(function(y, s) return m:_decode_step(y, s) end,
                                 m:_decode_state(b), {beam = 3, n_best = 2, max_len = 8})
    end)
  end, m)
  local n = 0
  for _, list in ipairs(hyps) do
    for _, h in ipairs(list) do
      n = n + 1
      local rows = glimpse.tensor(h.alignment)
      lu.assertEquals(h.maps.attention.shape, rows.shape)
      lu.assertEquals(max_diff(h.maps.attention, rows), EXACT)
    end
  end
  lu.assertTrue(n >= 3)
  -- outside a capture, no maps
  local plain = glimpse.no_grad(function()
    return glimpse.decode.beam(function(y, s) return m:_decode_step(y, s) end,
                               m:_decode_state(b), {beam = 3, max_len = 8})
  end)
  lu.assertNil(plain[1][1].maps)
end

function T.test_model_decode_with_beam_returns_the_best_hypothesis_maps()
  local ds = reversal()
  glimpse.manual_seed(14)
  local models_list = {
    models.Seq2Seq{dataset = ds, emb = 8, hidden = 16, attn_hidden = 8},
    models.Transformer{dataset = ds, d = 16, heads = 2, layers = 1, ff = 16},
  }
  for _, m in ipairs(models_list) do
    local b = ds:collate({1, 2})
    local _, _, ex = capture(function() return m:decode(b, {beam = 3, max_len = 8}) end, m)
    lu.assertNotNil(ex.maps, tostring(m))
    for i = 1, 2 do
      local rows = glimpse.tensor(ex.alignments[i])
      local key = ex.maps[i].attention and "attention" or "decoder.0.multihead_attn"
      local got = ex.maps[i][key]
      if got:dim() == 4 then                       -- (T, heads, 1, S): the heads' mean
        got = got:mean(2):reshape(got.shape[1], got.shape[4])
      end
      lu.assertEquals(got.shape, rows.shape)
      lu.assertTrue(max_diff(got, rows) < 1e-5, tostring(m))
    end
    local _, plain = m:decode(b, {beam = 3, max_len = 8})
    lu.assertNil(plain.maps)
  end
end

-- ---------------------------------------------------------------------------------------
-- the serialisable form, nesting

function T.test_to_table_is_plain_and_json_encodes()
  glimpse.manual_seed(13)
  local mha = nn.MultiheadAttention(4, 2)
  local att = nn.Attention{score = "dot", query = 4, mode = "hard"}
  local maps = capture(function()
    mha(glimpse.randn(1, 2, 4))
    att(glimpse.randn(1, 4), glimpse.randn(1, 3, 4))
  end)
  local t = capture.to_table(maps)
  lu.assertEquals(t.format, "glimpse.attention.capture")
  lu.assertEquals(t.version, 1)
  lu.assertEquals(#t.maps, 3)
  local first = t.maps[1]
  lu.assertEquals(first.key, "MultiheadAttention")
  lu.assertEquals(first.shape, {1, 2, 2, 2})
  lu.assertEquals(first.heads, 2)
  lu.assertEquals(#first.data[1], 2)
  lu.assertEquals(t.maps[3].key, "Attention:sample")
  lu.assertEquals(t.maps[3].field, "sample")
  local back = cjson.decode(cjson.encode(t))
  lu.assertEquals(back.maps[2].shape, {1, 1, 3})
  lu.assertAlmostEquals(back.maps[2].data[1][1][1], t.maps[2].data[1][1][1], 1e-6)
end

function T.test_captures_nest_and_both_see_the_inner_maps()
  local att = nn.Attention{score = "dot", query = 4}
  local inner
  local outer = capture(function()
    inner = capture(function() att(glimpse.randn(1, 4), glimpse.randn(1, 3, 4)) end)
    lu.assertTrue(capture.active)
  end)
  lu.assertFalse(capture.active)
  lu.assertEquals(sorted_keys(inner), {"Attention"})
  lu.assertEquals(sorted_keys(outer), {"Attention"})
  lu.assertEquals(max_diff(inner.Attention, outer.Attention), EXACT)
end

return T
