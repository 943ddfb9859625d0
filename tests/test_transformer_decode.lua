-- tests/test_transformer_decode.lua -- incremental decoding for the Transformer: the cached
-- attention (bindings/glimpse/attention/cache.lua), nn.TransformerDecoderLayer:step
-- (bindings/glimpse/nn/transformer_cache.lua) and models.Transformer:decode through
-- glimpse.decode (greedy, beam search), each against the recomputing route as the oracle,
-- also under the self-attention's position schemes (rope, alibi, t5) and variants (kv_heads,
-- window, top_k, linear attention).
local lu = require "luaunit"
local H = require "tests.helpers"
local glimpse = require "glimpse"
local ct = require "datasets.compare_tasks"

local nn, att = glimpse.nn, glimpse.attention

local T = {}

local SAME_TOL = 1e-5          -- two routes to the same float32 maths

local function close(a, b, what) H.assert_close(a, b, {atol = SAME_TOL}, what) end

local function params(mha)
  return {heads = mha.num_heads, in_proj_weight = mha.in_proj_weight,
          in_proj_bias = mha.in_proj_bias, out_weight = mha.out_proj.weight,
          out_bias = mha.out_proj.bias}
end

-- a model trained for a few steps on reversal (so some rows stop early, some run on), in
-- evaluation mode; the batch has padding in the source
local function trained_model(positions)
  local ds = ct.task("reversal"):train_set(24, 1)
  glimpse.manual_seed(8)
  local m = glimpse.models.Transformer{dataset = ds, d = 16, heads = 2, layers = 2, ff = 32,
                                       positions = positions or "sinusoidal", max_len = 64}
  local b = ds:collate({1, 2, 3, 4, 5, 6, 7, 8})
  local opt = glimpse.optim.Adam(m:parameters(), {lr = 1e-2})
  for _ = 1, 30 do
    opt:zero_grad()
    m:loss(b):backward()
    opt:step()
  end
  m:evaluate()
  return m, b
end

-- ---------------------------------------------------------------------------------------
-- the attention and the layer

function T.test_multi_head_step_one_position_at_a_time_equals_causal_attention()
  glimpse.manual_seed(1)
  local B, L, d = 3, 6, 12
  local p = params(nn.MultiheadAttention(d, 3))
  local x = glimpse.randn(B, L, d)
  local pad = glimpse.tensor{{1, 1, 1, 1, 1, 1}, {0, 1, 1, 1, 1, 1}, {0, 0, 1, 1, 1, 1}}
  local full, wfull = att.multi_head(x, nil, nil, p, {causal = true, mask = pad,
                                                      fused = false})
  local cache, outs = nil, {}
  for t = 1, L do
    local out, w
    local before = cache and cache.k.shape[3] or 0
    out, w, cache = att.multi_head_step(x:narrow(2, t, 1), p, cache,
                                        {mask = pad:narrow(2, 1, t)})
    lu.assertEquals(cache.k.shape, {B, 3, t, d // 3})
    lu.assertEquals(before, t - 1)
    close(w, wfull:narrow(2, t, 1):narrow(3, 1, t), "weights of step " .. t)
    outs[t] = out
  end
  close(glimpse.cat(outs, 2), full, "outputs")
  -- a prefix at once, then the rest: the causal triangle is offset by the cached length
  local out1, _, c1 = att.multi_head_step(x:narrow(2, 1, 2), p, nil, {mask = pad:narrow(2, 1, 2)})
  local out2, _, c2 = att.multi_head_step(x:narrow(2, 3, 4), p, c1, {mask = pad, q_start = 2})
  close(glimpse.cat({out1, out2}, 2), full, "two chunks")
  lu.assertEquals(c1.k.shape[3], 2, "the old cache is left as it was")
  lu.assertEquals(c2.k.shape[3], 6)
end

-- fn() with autograd on (inside glimpse.no_grad)
local function with_grad(fn)
  local prev = glimpse.set_grad_enabled(true)
  local r = table.pack(pcall(fn))
  glimpse.set_grad_enabled(prev)
  if not r[1] then error(r[2], 0) end
  return table.unpack(r, 2, r.n)
end

-- outside autograd the cache's buffers have room: a step writes its rows in place
function T.test_decoding_steps_write_into_buffers_with_room_and_agree_with_the_causal_attention()
  glimpse.manual_seed(11)
  local B, L, d = 2, 20, 12
  local p = params(nn.MultiheadAttention(d, 3))
  local x = glimpse.randn(B, L, d)
  local pad = glimpse.ones(B, L)
  pad[2][1] = 0
  local full, wfull = att.multi_head(x, nil, nil, p, {causal = true, mask = pad, fused = false})
  glimpse.no_grad(function()
    local cache, outs, buffers = nil, {}, {}
    for t = 1, L do
      local out, w
      out, w, cache = att.multi_head_step(x:narrow(2, t, 1), p, cache,
                                          {mask = pad:narrow(2, 1, t)})
      lu.assertEquals(cache.len, t)
      lu.assertEquals(cache.start, 0)
      close(w, wfull:narrow(2, t, 1):narrow(3, 1, t), "weights of step " .. t)
      outs[t] = out
      buffers[cache.k.shape[3]] = true
    end
    close(glimpse.cat(outs, 2), full, "outputs")
    lu.assertEquals(buffers, {[16] = true, [32] = true}, "capacity 16, doubled once at 17")
    lu.assertEquals(cache.k.shape, {B, 3, 32, d // 3})
    -- a prefix at once, then the rest (the causal triangle offset by the cached length)
    local out1, _, c1 = att.multi_head_step(x:narrow(2, 1, 5), p, nil,
                                            {mask = pad:narrow(2, 1, 5)})
    local out2, _, c2 = att.multi_head_step(x:narrow(2, 6, 15), p, c1, {mask = pad})
    close(glimpse.cat({out1, out2}, 2), full, "two chunks")
    lu.assertEquals({c1.len, c2.len}, {5, 20})
    close(c2.k:narrow(3, 1, 5), c1.k:narrow(3, 1, 5), "the valid rows carried over")
  end)
end

function T.test_a_step_from_an_older_cache_branches_without_touching_the_newer_one()
  glimpse.manual_seed(12)
  local p = params(nn.MultiheadAttention(8, 2))
  local x, y = glimpse.randn(1, 4, 8), glimpse.randn(1, 2, 8)
  local ref = att.multi_head(x, nil, nil, p, {causal = true, fused = false})
  local alt = att.multi_head(glimpse.cat({x:narrow(2, 1, 3), y:narrow(2, 1, 1)}, 2), nil, nil,
                             p, {causal = true, fused = false})
  glimpse.no_grad(function()
    local _, _, c3 = att.multi_head_step(x:narrow(2, 1, 3), p, nil)
    local a, _, c4 = att.multi_head_step(x:narrow(2, 4, 1), p, c3)      -- the newest: in place
    lu.assertTrue(rawequal(c4.k, c3.k), "the newest cache's step appends in place")
    local b, _, c4b = att.multi_head_step(y:narrow(2, 1, 1), p, c3)     -- a branch: a copy
    lu.assertFalse(rawequal(c4b.k, c3.k), "a branch gets buffers of its own")
    close(a, ref:narrow(2, 4, 1), "the first continuation")
    close(b, alt:narrow(2, 4, 1), "the branch")
    -- the first continuation's cache still holds its own fourth key: its next step agrees
    local z = y:narrow(2, 2, 1)
    local after = att.multi_head(glimpse.cat({x, z}, 2), nil, nil, p, {causal = true,
                                                                       fused = false})
    local e = att.multi_head_step(z, p, c4)
    close(e, after:narrow(2, 5, 1), "the first continuation after the branch")
    -- a cache made under autograd (exact size) and one with room both feed the other path
    local _, _, exact = with_grad(function()
      return att.multi_head_step(x:narrow(2, 1, 3), p, nil)
    end)
    lu.assertNil(exact.len)
    close(att.multi_head_step(x:narrow(2, 4, 1), p, exact), ref:narrow(2, 4, 1), "from exact")
    local g = with_grad(function() return att.multi_head_step(x:narrow(2, 4, 1), p, c3) end)
    close(g, ref:narrow(2, 4, 1), "under autograd from a cache with room")
  end)
end

function T.test_cache_buffers_keep_the_allocator_small_over_a_long_decode()
  glimpse.manual_seed(13)
  local B, d, L = 8, 64, 96
  local p = params(nn.MultiheadAttention(d, 4))
  local x = glimpse.randn(B, 1, d)
  local function decode()
    collectgarbage()
    glimpse.empty_cache()
    local cache
    for _ = 1, L do _, _, cache = att.multi_head_step(x, p, cache) end
    cache = nil
    collectgarbage()
    return glimpse.memory().cached
  end
  local with_room = glimpse.no_grad(decode)
  local concatenated = with_grad(decode)   -- grad on: the concatenating path
  -- buffers of 16, 32, 64, 128 positions (and each step's small temporaries) against a
  -- block of every length up to 96 for each layer of the tape (measured: 2.2 MB, 22 MB)
  local final = B * d * 128 * 4 * 2
  lu.assertTrue(with_room <= 8 * final, ("cached %d bytes after a decode with room, final " ..
                "buffers %d"):format(with_room, final))
  lu.assertTrue(concatenated > 4 * with_room, ("concatenating left %d cached, buffers %d")
                :format(concatenated, with_room))
end

function T.test_multi_head_cached_equals_attention_over_the_memory()
  glimpse.manual_seed(2)
  local p = params(nn.MultiheadAttention(8, 2))
  local q, mem = glimpse.randn(2, 3, 8), glimpse.randn(2, 5, 8)
  local mask = glimpse.tensor{{1, 1, 1, 1, 1}, {1, 1, 0, 0, 0}}
  local want, ww = att.multi_head(q, mem, mem, p, {mask = mask})
  local kv = att.kv_project(mem, p)
  lu.assertEquals(kv.k.shape, {2, 2, 5, 4})
  local got, w = att.multi_head_cached(q, p, kv, {mask = mask})
  close(got, want, "outputs")
  close(w, ww, "weights")
  lu.assertEquals(w[2]:totable()[1][4], 0.0, "padding gets no weight")
end

function T.test_decoder_layer_step_equals_the_causal_forward()
  for _, norm_first in ipairs({false, true}) do
    glimpse.manual_seed(3)
    local dec = nn.TransformerDecoderLayer(16, 4, {dim_feedforward = 24, dropout = 0.1,
                                                   norm_first = norm_first,
                                                   activation = "gelu"})
    dec:evaluate()
    local tgt, mem = glimpse.randn(3, 5, 16), glimpse.randn(3, 4, 16)
    local m = glimpse.tensor{{1, 1, 1, 1}, {1, 1, 1, 0}, {1, 0, 0, 0}}
    local full, wfull = dec(tgt, mem, {causal = true, memory_key_padding_mask = m,
                                       need_weights = true})
    local cache, outs = dec:init_cache(mem), {}
    for t = 1, 5 do
      local out, w
      out, w, cache = dec:step(tgt:narrow(2, t, 1), nil, cache,
                               {memory_key_padding_mask = m, need_weights = true})
      close(w, wfull:narrow(2, t, 1), "cross-attention of step " .. t)
      outs[t] = out
    end
    close(glimpse.cat(outs, 2), full, "norm_first=" .. tostring(norm_first))
    -- no cache: projected from the memory; the whole prefix at once
    local all = dec:step(tgt, mem, nil, {memory_key_padding_mask = m})
    close(all, full, "prefix at once")
  end
end

-- the position schemes and variants of the self-attention (nn.MultiheadAttention's options)
local VARIANTS = {
  {positions = "rope"}, {positions = "alibi"}, {positions = "t5"}, {kv_heads = 1},
  {kv_heads = 2, positions = "rope"}, {window = 3}, {window = 1}, {top_k = 2},
  {attention = "linear"}, {attention = "linear", kv_heads = 2},
  {positions = "rope", kv_heads = 2, window = 2, top_k = 2},
}

local function describe(c)
  local ks = {}
  for k, v in pairs(c) do ks[#ks + 1] = k .. "=" .. tostring(v) end
  table.sort(ks)
  return table.concat(ks, ",")
end

-- every variant, one position at a time and in two chunks, against the forward
local function check_variants(mode)
  for _, c in ipairs(VARIANTS) do
    glimpse.manual_seed(3)
    local o = {dim_feedforward = 32, dropout = 0}
    for k, v in pairs(c) do o[k] = v end
    local dec = nn.TransformerDecoderLayer(16, 4, o)
    dec:evaluate()
    local tgt, mem = glimpse.randn(3, 6, 16), glimpse.randn(3, 5, 16)
    local m = glimpse.tensor{{1, 1, 1, 1, 1}, {1, 1, 1, 0, 0}, {1, 1, 0, 0, 0}}
    local full = dec(tgt, mem, {causal = true, memory_key_padding_mask = m})
    local cache, outs, _ = dec:init_cache(mem), {}, nil
    for t = 1, 6 do
      outs[t], _, cache = dec:step(tgt:narrow(2, t, 1), nil, cache, {memory_key_padding_mask = m})
    end
    close(glimpse.cat(outs, 2), full, mode .. describe(c) .. ": one position at a time")
    local c2 = dec:init_cache(mem)
    local a, b
    a, _, c2 = dec:step(tgt:narrow(2, 1, 3), nil, c2, {memory_key_padding_mask = m})
    b, _, c2 = dec:step(tgt:narrow(2, 4, 3), nil, c2, {memory_key_padding_mask = m})
    close(glimpse.cat({a, b}, 2), full, mode .. describe(c) .. ": two chunks")
    local tc = cache.tgt
    if c.attention == "linear" then              -- running sums: the same size at every length
      lu.assertEquals(tc.s.shape, {3, c.kv_heads or 4, 4, 4})
      lu.assertEquals(tc.len, 6)
    elseif c.window then                         -- the last window - 1 keys
      lu.assertEquals(tc.k and tc.k.shape[3] or 0, c.window - 1)
      lu.assertEquals(tc.start, 6 - (c.window - 1))
    else
      local sh = tc.k.shape
      lu.assertEquals({sh[1], sh[2], sh[4], tc.len or sh[3]}, {3, c.kv_heads or 4, 4, 6})
    end
  end
end

function T.test_layer_step_with_every_position_scheme_and_variant_equals_the_forward()
  check_variants("")
  -- outside autograd: buffers with room where the variant allows
  glimpse.no_grad(check_variants, "no_grad: ")
end

-- ---------------------------------------------------------------------------------------
-- the model

function T.test_cached_greedy_decoding_equals_recomputing()
  for _, positions in ipairs({"sinusoidal", "learned"}) do
    local m, b = trained_model(positions)
    lu.assertTrue(b.src_mask:sum():item() < b.src:numel(), "the source has padding")
    local outs, ex = m:decode(b)
    local ref, rex = m:decode(b, {cache = false})
    local lengths, any_finished, any_cut = {}, false, false
    for i = 1, #ref do
      lu.assertEquals(outs[i], ref[i], positions .. ": row " .. i .. " tokens")
      lu.assertEquals(ex.finished[i], rex.finished[i])
      lu.assertEquals(#ex.alignments[i], #rex.alignments[i])
      close(glimpse.tensor(ex.alignments[i]), glimpse.tensor(rex.alignments[i]),
            positions .. ": row " .. i .. " alignments")
      lu.assertAlmostEquals(ex.scores[i], rex.scores[i], 1e-4)
      lengths[#outs[i]] = true
      any_finished = any_finished or ex.finished[i]
      any_cut = any_cut or not ex.finished[i]
      -- one row of S weights per step, the <end> step included
      lu.assertEquals(#ex.alignments[i], #outs[i] + (ex.finished[i] and 1 or 0))
      lu.assertEquals(#ex.alignments[i][1], b.src.shape[2])
    end
    local distinct = 0
    for _ in pairs(lengths) do distinct = distinct + 1 end
    lu.assertTrue(distinct >= 3 and any_finished and any_cut,
                  "rows finish at different steps (and some run to max_len)")
    lu.assertFalse(m.training)
  end
end

function T.test_cached_decoding_with_position_schemes_and_variants_equals_recomputing()
  local ds = ct.task("reversal"):train_set(24, 1)
  local b = ds:collate({1, 2, 3, 4, 5, 6})
  for _, c in ipairs({{positions = "rope"}, {positions = "alibi"}, {positions = "t5"},
                      {positions = "none", kv_heads = 1}, {window = 3}, {top_k = 2},
                      {attention = "linear"},
                      {positions = "rope", kv_heads = 1, window = 4, top_k = 3}}) do
    glimpse.manual_seed(8)
    local o = {dataset = ds, d = 16, heads = 2, layers = 2, ff = 32, max_len = 64}
    for k, v in pairs(c) do o[k] = v end
    local m = glimpse.models.Transformer(o)
    local opt = glimpse.optim.Adam(m:parameters(), {lr = 1e-2})
    for _ = 1, 20 do
      opt:zero_grad()
      m:loss(b):backward()
      opt:step()
    end
    local what = describe(c)
    local outs, ex = m:decode(b, {max_len = 16})
    local ref, rex = m:decode(b, {max_len = 16, cache = false})
    for i = 1, #ref do
      lu.assertEquals(outs[i], ref[i], what .. ": greedy row " .. i)
      close(glimpse.tensor(ex.alignments[i]), glimpse.tensor(rex.alignments[i]),
            what .. ": alignments of row " .. i)
    end
    local bo = m:decode(b, {beam = 3, max_len = 16})
    local br = m:decode(b, {beam = 3, max_len = 16, cache = false})
    lu.assertEquals(bo, br, what .. ": beam search")
  end
end

function T.test_alignments_put_no_weight_on_source_padding()
  local m, b = trained_model()
  local _, ex = m:decode(b, {beam = 3})
  local mask = b.src_mask:totable()
  for i, rows in ipairs(ex.alignments) do
    for _, row in ipairs(rows) do
      local sum = 0
      for s, w in ipairs(row) do
        if mask[i][s] == 0 then lu.assertEquals(w, 0.0) end
        sum = sum + w
      end
      lu.assertAlmostEquals(sum, 1, 1e-5)
    end
  end
end

function T.test_beam_one_is_greedy_and_a_wider_beam_scores_at_least_as_well()
  local m, b = trained_model()
  local greedy, gex = m:decode(b, {max_len = 20})
  -- decode.beam with one beam over the model's cached step: exactly greedy decoding
  local hyps = glimpse.no_grad(function()
    return glimpse.decode.beam(function(y, s, t) return m:_decode_step(y, s, t) end,
                               m:_decode_state(b), {beam = 1, max_len = 20})
  end)
  for i = 1, #greedy do
    lu.assertEquals(hyps[i][1].tokens, greedy[i], "beam 1, row " .. i)
    lu.assertAlmostEquals(hyps[i][1].log_prob, gex.scores[i], 1e-4)
  end
  local outs, ex = m:decode(b, {beam = 4, n_best = 3, max_len = 20})
  local ref, rex = m:decode(b, {beam = 4, n_best = 3, max_len = 20, cache = false})
  for i = 1, #outs do
    lu.assertTrue(ex.scores[i] >= gex.scores[i] - 1e-4,
                  string.format("row %d: beam %.5f < greedy %.5f", i, ex.scores[i],
                                gex.scores[i]))
    lu.assertEquals(outs[i], ref[i], "beam, cached and recomputed, row " .. i)
    lu.assertEquals(#ex.n_best[i], 3)
    for j, h in ipairs(ex.n_best[i]) do
      lu.assertEquals(h.tokens, rex.n_best[i][j].tokens)
      lu.assertEquals(#h.alignment, h.length, "one alignment row per step")
      lu.assertEquals(#h.alignment, #h.tokens + (h.finished and 1 or 0))
      close(glimpse.tensor(h.alignment), glimpse.tensor(rex.n_best[i][j].alignment),
            "beam alignment")
      if j > 1 then lu.assertTrue(h.score <= ex.n_best[i][j - 1].score) end
    end
    lu.assertEquals(ex.alignments[i], ex.n_best[i][1].alignment)
  end
end

function T.test_capture_records_the_cached_steps_per_head()
  local m, b = trained_model()
  local capture = att.capture
  local maps, outs, ex = capture(function() return m:decode(b, {max_len = 6}) end, m)
  local first = maps["decoder.1.multihead_attn"]         -- step 1, every row: (B,heads,1,S)
  lu.assertEquals(first.shape, {b.src.shape[1], 2, 1, b.src.shape[2]})
  for i = 1, #outs do
    close(first:mean(2):select(1, i):reshape(b.src.shape[2]), glimpse.tensor(ex.alignments[i][1]),
          "the capture's heads average to the alignment, row " .. i)
  end
  lu.assertEquals(maps["decoder.0.self_attn#3"].shape[4], 3, "step 3 sees 3 target keys")
  -- beam search: each hypothesis carries its own rows of every step's maps
  local _, _, bex = capture(function() return m:decode(b, {beam = 3, max_len = 6}) end, m)
  for i = 1, #bex.n_best do
    local h = bex.n_best[i][1]
    local cross = h.maps["decoder.1.multihead_attn"]     -- (steps, heads, 1, S)
    lu.assertEquals(cross.shape[1], #h.alignment)
    close(cross:mean(2):reshape(#h.alignment, b.src.shape[2]), glimpse.tensor(h.alignment),
          "beam maps, row " .. i)
  end
end

function T.test_decoding_restores_training_mode_and_caps_max_len()
  local ds = ct.task("reversal"):train_set(4, 1)
  glimpse.manual_seed(4)
  local m = glimpse.models.Transformer{dataset = ds, d = 8, heads = 2, layers = 1, ff = 8,
                                       positions = "learned", max_len = 30}
  m:train()
  local b = ds:collate({1, 2})
  lu.assertTrue(b.src.shape[2] < 30)
  local outs, ex = m:decode(b, {max_len = 50, beam = 2})
  lu.assertTrue(m.training)
  for i = 1, #outs do lu.assertTrue(#ex.alignments[i] <= 30) end
end

function T.test_bad_options_and_arguments_are_errors()
  local ds = ct.task("reversal"):train_set(4, 1)
  local m = glimpse.models.Transformer{dataset = ds, d = 8, heads = 2, layers = 1, ff = 8}
  local b = ds:collate({1})
  lu.assertErrorMsgContains("did you mean 'beam'", m.decode, m, b, {beem = 2})
  lu.assertErrorMsgContains("beam", m.decode, m, b, {beam = 0})
  lu.assertErrorMsgContains("cannot exceed", m.decode, m, b, {beam = 2, n_best = 3})
  lu.assertErrorMsgContains("cache", m.decode, m, b, {cache = "yes"})
  lu.assertErrorMsgContains("Transformer:decode: batch", m.decode, m, {src = 3})
  local dec = m.decoder[1]
  local y = glimpse.randn(1, 1, 8)
  lu.assertErrorMsgContains("memory is nil", dec.step, dec, y, nil, nil)
  lu.assertErrorMsgContains("tgt must be (B,T,8)", dec.step, dec, glimpse.randn(1, 4),
                            glimpse.randn(1, 3, 8))
  lu.assertErrorMsgContains("did you mean", dec.step, dec, y, glimpse.randn(1, 3, 8), nil,
                            {need_weight = true})
  lu.assertErrorMsgContains("differ", dec.step, dec, y, glimpse.randn(2, 3, 8))
  local p = params(dec.self_attn)
  local _, _, c = att.multi_head_step(glimpse.randn(1, 3, 8), p, nil)
  lu.assertErrorMsgContains("q_start 1 does not follow", att.multi_head_step, y, p, c, {q_start = 1})
  lu.assertErrorMsgContains("mask [1,3] should be (B,Tk) = [1,4]", att.multi_head_step, y, p, c,
                            {mask = glimpse.ones(1, 3)})
  lu.assertErrorMsgContains("cache.k", att.multi_head_step, glimpse.randn(2, 1, 8), p, c)
  lu.assertErrorMsgContains("cache.len must be an integer in [0, 3]", att.multi_head_step, y, p,
                            {k = c.k, v = c.v, len = 4})
  lu.assertErrorMsgContains("kv_copy_rows: rows [0, 2) of src [1,2,3,4] into rows [3, 5) of " ..
                            "dst [1,2,4,4] are out of range", glimpse._attention.kv_copy,
                            glimpse.zeros(1, 2, 4, 4), 3, glimpse.zeros(1, 2, 3, 4), 0, 2)
  lu.assertErrorMsgContains("attn_mh_cached: 5 valid rows in buffers of 4",
                            glimpse._attention.mh_cached, glimpse.zeros(2, 1, 4),
                            glimpse.zeros(2, 4, 4), glimpse.zeros(2, 4, 4), 5, nil, 2, -1, 1)
  lu.assertErrorMsgContains("kv must be a table", att.multi_head_cached, y, p, 5)
  lu.assertErrorMsgContains("needs attention = 'softmax'", att.multi_head_step, y, p, nil,
                            {attention = "linear", window = 2})
  lu.assertErrorMsgContains("did you mean 'positions'", att.multi_head_step, y, p, nil,
                            {position = "rope"})
  lu.assertErrorMsgContains("kv_heads must be a positive integer dividing heads",
                            att.multi_head_step, y, {heads = 2, kv_heads = 3,
                                                     in_proj_weight = p.in_proj_weight}, nil)
end

return T
