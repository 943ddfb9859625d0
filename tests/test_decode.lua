-- tests/test_decode.lua -- glimpse.decode (bindings/glimpse/decode/): greedy decoding,
-- beam search and sampling, on hand-made step functions whose distributions are known.
--
-- The main oracle is exhaustive enumeration: on a 4-token vocabulary and sequences of at
-- most 4 tokens there are 121 possible outputs, scored here independently of the decoder;
-- a beam wide enough never to prune must return exactly the best of them.  The toy model's
-- next-token distribution depends on the whole prefix, and the prefix lives only in the
-- decoder state (a tensor), so a wrong state reordering gives wrong answers.
local lu = require "luaunit"
local glimpse = require "glimpse"
local decode = glimpse.decode

local T = {}

local SCORE_TOL = 1e-9        -- the decoder and the enumeration add the same float32 values
local FREQ_TOL = 0.035        -- sampled frequencies, 4000 draws (about 4 standard deviations)
local V, START, STOP = 4, 2, 3

-- ---------------------------------------------------------------------------------------
-- toy models

local function f32(x) return (string.unpack("f", string.pack("f", x))) end

-- log-probabilities over V tokens after `prefix` for batch item `item`: pseudo-random
-- logits from a hash of (item, prefix), the end token favoured as the prefix grows
local function toy_logp(item, prefix)
  local h = 2166136261 ~ (item * 16777619)
  for _, tok in ipairs(prefix) do h = ((h ~ tok) * 16777619) % 4294967296 end
  local logits, mx = {}, -math.huge
  for v = 1, V do
    h = (h * 1103515245 + 12345) % 2147483648
    logits[v] = (h / 2147483648) * 4 - 2
    if v == STOP then logits[v] = logits[v] + 0.6 * #prefix - 0.5 end
    mx = math.max(mx, logits[v])
  end
  local z = 0
  for v = 1, V do z = z + math.exp(logits[v] - mx) end
  local row = {}
  for v = 1, V do row[v] = f32(logits[v] - mx - math.log(z)) end
  return row
end

-- a fake attention row over 3 source positions, also a function of (item, prefix)
local function toy_attention(item, prefix)
  local a = {1 + item, 1 + #prefix, 1}
  for _, tok in ipairs(prefix) do a[(tok % 3) + 1] = a[(tok % 3) + 1] + tok end
  local s = a[1] + a[2] + a[3]
  return {f32(a[1] / s), f32(a[2] / s), f32(a[3] / s)}
end

-- the step function: state.hist (N,max_len) holds each row's prefix (0 = empty),
-- state.item (N,1) its batch item; the previous token is appended at each step
local function toy_step(max_len, calls)
  return function(tokens, state, t)
    if calls then calls[1] = calls[1] + 1 end
    local hist, items, toks = state.hist:totable(), state.item:totable(), tokens:totable()
    local rows, attn = {}, {}
    for r = 1, #hist do
      if t > 1 then hist[r][t - 1] = toks[r] end
      local prefix = {}
      for j = 1, t - 1 do prefix[j] = math.tointeger(hist[r][j]) end
      local item = math.tointeger(items[r][1])
      rows[r] = toy_logp(item, prefix)
      attn[r] = toy_attention(item, prefix)
    end
    local new = {hist = glimpse.tensor(hist), item = state.item, meta = state.meta}
    return glimpse.tensor(rows), new, glimpse.tensor(attn)
  end
end

local function toy_state(items, max_len)
  local hist, it = {}, {}
  for i, item in ipairs(items) do
    hist[i] = {}
    for j = 1, max_len do hist[i][j] = 0 end
    it[i] = {item}
  end
  return {hist = glimpse.tensor(hist), item = glimpse.tensor(it), meta = {name = "toy", n = 7}}
end

-- every output of at most max_len tokens (ending in STOP, or max_len tokens without it),
-- with its log-probability, GNMT-normalised score, and per-step attention rows
local function enumerate(item, max_len, alpha)
  local out = {}
  local function lp(len) return ((5 + len) / 6) ^ alpha end
  local function walk(prefix, score, align)
    local row = toy_logp(item, prefix)
    local arow = toy_attention(item, prefix)
    local t = #prefix + 1
    local a2 = table.move(align, 1, #align, 1, {})
    a2[#a2 + 1] = arow
    local s = score + row[STOP]
    out[#out + 1] = {tokens = table.move(prefix, 1, #prefix, 1, {}), log_prob = s,
                     score = s / lp(t), finished = true, alignment = a2}
    for v = 1, V do
      if v ~= STOP then
        local p = table.move(prefix, 1, #prefix, 1, {})
        p[#p + 1] = v
        local sv = score + row[v]
        if t == max_len then
          out[#out + 1] = {tokens = p, log_prob = sv, score = sv / lp(t), finished = false,
                           alignment = a2}
        else
          walk(p, sv, a2)
        end
      end
    end
  end
  walk({}, 0, {})
  table.sort(out, function(a, b) return a.score > b.score end)
  return out
end

-- a step function from a table of prefix -> {token = probability} (missing: end for sure)
local function table_step(dist, names)
  local ids = {}
  for id, n in pairs(names) do ids[n] = id end
  return function(tokens, state, t)
    local hist, toks = state.hist:totable(), tokens:totable()
    local rows = {}
    for r = 1, #hist do
      if t > 1 then hist[r][t - 1] = toks[r] end
      local key = ""
      for j = 1, t - 1 do key = key .. names[math.tointeger(hist[r][j])] end
      local d = dist[key] or {stop = 1}
      local row = {}
      for v = 1, 6 do row[v] = -math.huge end
      for n, p in pairs(d) do row[ids[n]] = math.log(p) end
      rows[r] = row
    end
    return glimpse.tensor(rows), {hist = glimpse.tensor(hist)}
  end
end

local NAMES = {[3] = "stop", [4] = "A", [5] = "B", [6] = "C"}

local function empty_hist(B, L)
  local h = {}
  for b = 1, B do h[b] = {} for j = 1, L do h[b][j] = 0 end end
  return {hist = glimpse.tensor(h)}
end

local function seq_str(tokens)
  local s = {}
  for i, id in ipairs(tokens) do s[i] = NAMES[id] or tostring(id) end
  return table.concat(s, " ")
end

-- ---------------------------------------------------------------------------------------
-- beam search against exhaustive enumeration

local function check_exhaustive(alpha)
  local max_len, n_best = 4, 5
  local items = {1, 2, 3}
  local hyps = decode.beam(toy_step(max_len), toy_state(items, max_len),
                           {beam = 108, n_best = n_best, max_len = max_len,
                            length_penalty = alpha})
  lu.assertEquals(#hyps, #items)
  for b, item in ipairs(items) do
    local truth = enumerate(item, max_len, alpha)
    lu.assertEquals(#truth, 121)
    lu.assertEquals(#hyps[b], n_best)
    for j = 1, n_best do
      local h, w = hyps[b][j], truth[j]
      lu.assertEquals(h.tokens, w.tokens, string.format("item %d rank %d", item, j))
      lu.assertAlmostEquals(h.score, w.score, SCORE_TOL)
      lu.assertAlmostEquals(h.log_prob, w.log_prob, SCORE_TOL)
      lu.assertEquals(h.finished, w.finished)
      lu.assertEquals(h.length, #w.alignment)
      lu.assertEquals(h.alignment, w.alignment)
    end
  end
end

function T.test_wide_beam_equals_exhaustive_enumeration()
  check_exhaustive(0)
end

function T.test_wide_beam_equals_exhaustive_enumeration_with_length_penalty()
  check_exhaustive(1.0)
end

function T.test_beam_stops_early_when_no_live_hypothesis_can_win()
  -- a model that ends almost surely after the first token: the search must stop long
  -- before max_len and still return the exhaustive answer
  local dist = {[""] = {A = 0.6, B = 0.4}, A = {stop = 0.99, C = 0.01},
                B = {stop = 0.98, C = 0.02}}
  local calls = 0
  local step = table_step(dist, NAMES)
  local counted = function(tok, st, t) calls = calls + 1 return step(tok, st, t) end
  local hyps = decode.beam(counted, empty_hist(1, 50), {beam = 2, max_len = 50})
  lu.assertEquals(seq_str(hyps[1][1].tokens), "A")
  lu.assertAlmostEquals(hyps[1][1].log_prob, math.log(0.6 * 0.99), 1e-6)
  lu.assertTrue(calls <= 3, "took " .. calls .. " steps")
end

-- ---------------------------------------------------------------------------------------
-- greedy and beam

function T.test_beam_finds_better_sequence_than_greedy()
  -- greedy takes A (0.5), then A (0.36), then must end: 0.18; B then end has 0.36
  local dist = {[""] = {A = 0.5, B = 0.4, stop = 0.1},
                A = {stop = 0.3, A = 0.36, B = 0.34},
                B = {stop = 0.9, A = 0.05, B = 0.05}}
  local step = table_step(dist, NAMES)
  local g_tok, g_score = decode.greedy(step, empty_hist(1, 10), {max_len = 10})
  lu.assertEquals(seq_str(g_tok[1]), "A A")
  lu.assertAlmostEquals(g_score[1], math.log(0.5 * 0.36), 1e-6)
  local hyps = decode.beam(step, empty_hist(1, 10), {beam = 2, n_best = 2, max_len = 10})
  lu.assertEquals(seq_str(hyps[1][1].tokens), "B")
  lu.assertAlmostEquals(hyps[1][1].log_prob, math.log(0.4 * 0.9), 1e-6)
  lu.assertTrue(hyps[1][1].score > g_score[1])
  lu.assertEquals(#hyps[1], 2)
  lu.assertTrue(hyps[1][2].score <= hyps[1][1].score)
end

function T.test_beam_of_one_equals_greedy()
  local max_len = 6
  local items = {1, 2, 3, 4, 5, 6, 7}
  local tok, scores, aligns, fin = decode.greedy(toy_step(max_len), toy_state(items, max_len),
                                                 {max_len = max_len})
  local hyps = decode.beam(toy_step(max_len), toy_state(items, max_len),
                           {beam = 1, max_len = max_len})
  for b = 1, #items do
    lu.assertEquals(hyps[b][1].tokens, tok[b])
    lu.assertAlmostEquals(hyps[b][1].log_prob, scores[b], SCORE_TOL)
    lu.assertEquals(hyps[b][1].alignment, aligns[b])
    lu.assertEquals(hyps[b][1].finished, fin[b])
  end
end

function T.test_greedy_matches_stepwise_argmax_of_the_model()
  local max_len = 5
  local tok, scores, aligns = decode.greedy(toy_step(max_len), toy_state({9}, max_len),
                                            {max_len = max_len})
  local prefix, score, rows = {}, 0, {}
  for _ = 1, max_len do
    local row = toy_logp(9, prefix)
    rows[#rows + 1] = toy_attention(9, prefix)
    local best = 1
    for v = 2, V do if row[v] > row[best] then best = v end end
    score = score + row[best]
    if best == STOP then break end
    prefix[#prefix + 1] = best
  end
  lu.assertEquals(tok[1], prefix)
  lu.assertAlmostEquals(scores[1], score, SCORE_TOL)
  lu.assertEquals(aligns[1], rows)
end

function T.test_length_penalty_changes_the_winner()
  -- "end now" has p = 0.45 (len 1); "A A A end" has p = 0.55*0.9^3 = 0.401 (len 4):
  -- raw log-probs prefer the short one, GNMT's penalty with alpha = 1 the long one
  local dist = {[""] = {stop = 0.45, A = 0.55}, A = {A = 0.9, stop = 0.1},
                AA = {A = 0.9, stop = 0.1}, AAA = {stop = 1}}
  local step = table_step(dist, NAMES)
  local h0 = decode.beam(step, empty_hist(1, 8), {beam = 3, max_len = 8, length_penalty = 0})
  lu.assertEquals(seq_str(h0[1][1].tokens), "")
  local h1 = decode.beam(step, empty_hist(1, 8), {beam = 3, max_len = 8, length_penalty = 1})
  lu.assertEquals(seq_str(h1[1][1].tokens), "A A A")
  local lp = math.log(0.55 * 0.9 * 0.9)
  lu.assertAlmostEquals(h1[1][1].log_prob, lp, 1e-6)
  lu.assertAlmostEquals(h1[1][1].score, lp / ((5 + 4) / 6), 1e-6)
  lu.assertEquals(h1[1][1].length, 4)
end

function T.test_length_penalty_search_keeps_going_while_a_longer_output_can_win()
  -- "end now" (p 0.6) is finished at step 1; "A" (p 0.4) then 19 more A's at p 0.999 and an
  -- end scores log(0.4 * 0.999^19) / (26/6) with alpha = 1, which beats log(0.6) / 1: the
  -- search may stop only when even a max_len output from the live beam could not win
  local dist = {[""] = {stop = 0.6, A = 0.4}}
  local key = "A"
  for _ = 1, 19 do dist[key] = {A = 0.999, stop = 0.001}; key = key .. "A" end
  dist[key] = {stop = 1}
  local step = table_step(dist, NAMES)
  local h = decode.beam(step, empty_hist(1, 30), {beam = 2, max_len = 30, length_penalty = 1})
  lu.assertEquals(#h[1][1].tokens, 20)
  lu.assertAlmostEquals(h[1][1].score, (math.log(0.4) + 19 * math.log(0.999)) / (26 / 6), 1e-5)
  local h0 = decode.beam(step, empty_hist(1, 30), {beam = 2, max_len = 30})
  lu.assertEquals(#h0[1][1].tokens, 0)
end

function T.test_wide_vocabulary_pruning_keeps_each_rows_best_tokens()
  -- beam search looks only at each row's 2*beam best tokens; on a wide vocabulary those come
  -- from repeated max passes: compare with a full sort, with many ties (values on a grid)
  glimpse.manual_seed(3)
  for _, V in ipairs({200, 15}) do
    local N, n = 6, 6
    local lp = (glimpse.randn(N, V) * 2):round() / 2 - 10
    local rows = lp:totable()
    local vals, ids = decode._row_best(lp, n)
    for r = 1, N do
      local order = {}
      for v = 1, V do order[v] = v end
      table.sort(order, function(a, b)
        if rows[r][a] ~= rows[r][b] then return rows[r][a] > rows[r][b] end
        return a < b
      end)
      local got = {}
      for j = 1, #ids[r] do got[math.tointeger(ids[r][j])] = vals[r][j] end
      for j = 1, n do
        lu.assertEquals(got[order[j]], rows[r][order[j]], string.format("V %d row %d rank %d", V, r, j))
      end
    end
  end
  -- and a beam over a wide vocabulary agrees with one where every token is looked at
  local W = glimpse.randn(8, 300)
  local function step(y, st)
    local h = (st.h + y:reshape(-1, 1) * 0.01):tanh()
    return glimpse.log_softmax(h:matmul(W) * 3, 2), {h = h}
  end
  local st = {h = glimpse.randn(3, 8)}
  local wide = decode.beam(step, st, {beam = 3, n_best = 3, max_len = 6})
  -- (the reference ranks in Lua over rows where every token is kept)
  local saved, saved_c = decode._row_best, decode._candidates
  local full = function(lp) local r, a = lp:totable(), {} for v = 1, lp.shape[2] do a[v] = v end
    local ids = {} for i = 1, #r do ids[i] = a end return r, ids end
  decode._set_row_best(full)
  decode._set_candidates(decode._candidates_lua)
  local ref = decode.beam(step, st, {beam = 3, n_best = 3, max_len = 6})
  decode._set_row_best(saved)
  decode._set_candidates(saved_c)
  for b = 1, 3 do
    for j = 1, 3 do
      lu.assertEquals(wide[b][j].tokens, ref[b][j].tokens)
      lu.assertAlmostEquals(wide[b][j].score, ref[b][j].score, SCORE_TOL)
    end
  end
end

function T.test_engine_ranking_matches_the_lua_reference()
  -- the engine's ranking step against the same in Lua: ties on a coarse grid (broken towards
  -- the lower beam, then the lower token), dead beams, -inf and NaN entries, positive ones
  glimpse.manual_seed(5)
  for _, case in ipairs({{K = 3, V = 40, A = 5}, {K = 1, V = 7, A = 4}, {K = 4, V = 300, A = 2},
                         {K = 2, V = 3, A = 3}}) do
    local K, V, A = case.K, case.V, case.A
    local lp = (glimpse.randn(A * K, V) * 2):round() / 2 - 3
    lp[1][2] = -math.huge
    if V > 5 then lp[2 % (A * K) + 1][5] = 0.5 end
    local scores = {}
    for r = 1, A * K do scores[r] = (r % 3 == 0) and -math.huge or -((r * 7) % 4) / 2 end
    scores[1] = 0
    for _, n in ipairs({2 * K, 1, K * V + 3}) do
      local s1, k1, v1, c1, p1 = decode._candidates(lp, scores, K, n)
      local s2, k2, v2, c2, p2 = decode._candidates_lua(lp, scores, K, n)
      local where = string.format("K %d V %d A %d n %d", K, V, A, n)
      lu.assertEquals(c1, c2, where)
      lu.assertEquals(k1, k2, where)
      lu.assertEquals(v1, v2, where)
      lu.assertEquals(p1, p2, where)
      for j, s in pairs(s2) do lu.assertEquals(s1[j], s, where) end
      for a = 1, A do
        for i = 2, c1[a] do       -- best first
          lu.assertTrue(s1[(a - 1) * n + i - 1] >= s1[(a - 1) * n + i], where)
        end
      end
    end
  end
  -- a NaN is skipped and the row's other tokens still rank (the Lua cut by repeated max
  -- passes would lose the row where NaN is its max, hence not compared above)
  local lp = glimpse.tensor({{0 / 0, -1, -2}, {-0.5, 0 / 0, -3}})
  local s, k, v, c = decode._candidates(lp, {0, -1}, 2, 4)
  lu.assertEquals(c, {4})
  lu.assertEquals(k, {1, 2, 1, 2})
  lu.assertEquals(v, {2, 1, 3, 3})
  lu.assertEquals(s, {-1, -1.5, -2, -4})
  -- a row count that is not a whole number of beams is an error, not a read past the end
  lu.assertErrorMsgContains("_beam_candidates", decode._candidates, glimpse.zeros(5, 3),
                            {0, 0, 0, 0, 0}, 2, 4)
end

function T.test_batch_items_are_decoded_independently()
  local max_len = 5
  local items = {4, 11, 2, 8}
  local batch = decode.beam(toy_step(max_len), toy_state(items, max_len),
                            {beam = 3, n_best = 3, max_len = max_len, length_penalty = 0.6})
  local gt = decode.greedy(toy_step(max_len), toy_state(items, max_len), {max_len = max_len})
  for b, item in ipairs(items) do
    local alone = decode.beam(toy_step(max_len), toy_state({item}, max_len),
                              {beam = 3, n_best = 3, max_len = max_len, length_penalty = 0.6})
    lu.assertEquals(#batch[b], #alone[1])
    for j = 1, #alone[1] do
      lu.assertEquals(batch[b][j].tokens, alone[1][j].tokens)
      lu.assertAlmostEquals(batch[b][j].score, alone[1][j].score, SCORE_TOL)
    end
    local g1 = decode.greedy(toy_step(max_len), toy_state({item}, max_len), {max_len = max_len})
    lu.assertEquals(gt[b], g1[1])
  end
end

function T.test_beam_passes_unchanged_per_item_state_through_until_an_item_finishes()
  -- toy_step hands state.item back as it got it: a tensor whose K rows per item are equal,
  -- so reordering beams (always within an item) needs no copy of it until rows are dropped;
  -- the hypotheses must be those of a step that hands back a fresh copy every time
  local max_len, items = 5, {4, 11, 2, 8}
  local inner, seen = toy_step(max_len), {}
  local function step(tokens, state, t)
    seen[t] = {item = state.item, rows = state.item.shape[1]}
    return inner(tokens, state, t)
  end
  local function copying(tokens, state, t)
    local lp, new, attn = inner(tokens, state, t)
    new.item = new.item:clone()
    return lp, new, attn
  end
  local opts = {beam = 3, n_best = 3, max_len = max_len, length_penalty = 0.6}
  local a = decode.beam(step, toy_state(items, max_len), opts)
  local b = decode.beam(copying, toy_state(items, max_len), opts)
  for i = 1, #items do
    lu.assertEquals(#a[i], #b[i])
    for j = 1, #a[i] do
      lu.assertEquals(a[i][j].tokens, b[i][j].tokens)
      lu.assertEquals(a[i][j].score, b[i][j].score)
      lu.assertEquals(a[i][j].alignment, b[i][j].alignment)
    end
  end
  local passed, copied = 0, 0
  for t = 2, #seen do
    if seen[t].rows == seen[t - 1].rows then
      lu.assertTrue(seen[t].item == seen[t - 1].item, "step " .. t .. ": copied with no item finished")
      passed = passed + 1
    else
      lu.assertFalse(seen[t].item == seen[t - 1].item)
      copied = copied + 1
    end
  end
  lu.assertTrue(passed > 0 and copied > 0, string.format("passed %d, copied %d", passed, copied))
end

function T.test_state_reorder_follows_the_surviving_beams()
  -- the model checks, from its state alone, that each row's recorded prefix is exactly the
  -- prefix the decoder is extending (the token it feeds is the prefix's last one)
  local max_len, seen = 5, 0
  local inner = toy_step(max_len)
  local function step(tokens, state, t)
    local lp, new, attn = inner(tokens, state, t)
    local hist, toks = new.hist:totable(), tokens:totable()
    for r = 1, #hist do
      if t > 1 then lu.assertEquals(hist[r][t - 1], toks[r]) end
      lu.assertEquals(hist[r][t], 0)
    end
    lu.assertEquals(new.meta.name, "toy")                -- non-tensor leaves pass through
    seen = seen + 1
    return lp, new, attn
  end
  decode.beam(step, toy_state({1, 2}, max_len), {beam = 4, max_len = max_len})
  lu.assertTrue(seen >= 2)
  -- and the public helper: rows picked, tables copied, shared tensors stay shared
  local x = glimpse.tensor({{1, 1}, {2, 2}, {3, 3}})
  local st = {a = x, b = {c = x, n = 5}, s = "keep"}
  local r = decode.reorder(st, {3, 1})
  lu.assertEquals(r.a:totable(), {{3, 3}, {1, 1}})
  lu.assertTrue(r.a == r.b.c)
  lu.assertEquals(r.b.n, 5)
  lu.assertEquals(r.s, "keep")
  lu.assertEquals(st.a:totable(), {{1, 1}, {2, 2}, {3, 3}})   -- the input is untouched
  -- a weight cached in the state is not per row: refused, unless listed in keep
  local w = glimpse.randn(5, 2)
  local cached = {h = x, cache = {W = w}}
  local ok, msg = pcall(decode.reorder, cached, {2, 3}, {rows = 3})
  lu.assertFalse(ok)
  lu.assertStrContains(msg, "state tensor state.cache.W has shape [5,2]")
  local kept = decode.reorder(cached, {2, 3}, {rows = 3, keep = {w}})
  lu.assertTrue(kept.cache.W == w)
  lu.assertEquals(kept.h:totable(), {{2, 2}, {3, 3}})
end

function T.test_keep_passes_a_weight_through_every_decoder()
  -- a weight with as many rows as the batch would be silently "reordered" without keep
  local w = glimpse.tensor({{1, 0, 0, 0}, {0, 1, 0, 0}})
  local function step(tokens, state)
    lu.assertTrue(state.w == w)
    return glimpse.log_softmax(state.x:matmul(w), 2), state
  end
  local st = {x = glimpse.tensor({{0, 3}, {3, 0}}), w = w}
  local tok = decode.greedy(step, st, {max_len = 2, keep = {w}})
  lu.assertEquals(tok, {{2, 2}, {1, 1}})
  local hyps = decode.beam(step, st, {beam = 2, max_len = 2, keep = {w}})
  lu.assertEquals(hyps[2][1].tokens, {1, 1})
  tok = decode.sample(step, st, {max_len = 2, keep = {w}, top_k = 1})
  lu.assertEquals(tok, {{2, 2}, {1, 1}})
end

function T.test_max_len_cuts_off_unfinished_sequences()
  local dist = {[""] = {A = 1}, A = {A = 1}, AA = {A = 1}, AAA = {A = 1}}
  local step = table_step(dist, NAMES)
  local tok, _, _, fin = decode.greedy(step, empty_hist(1, 3), {max_len = 3})
  lu.assertEquals(seq_str(tok[1]), "A A A")
  lu.assertFalse(fin[1])
  local hyps = decode.beam(step, empty_hist(1, 3), {beam = 2, max_len = 3})
  lu.assertEquals(seq_str(hyps[1][1].tokens), "A A A")
  lu.assertFalse(hyps[1][1].finished)
end

function T.test_min_len_forbids_an_early_end()
  local max_len = 6
  local tok = decode.greedy(toy_step(max_len), toy_state({1, 2, 3, 4, 5}, max_len),
                            {max_len = max_len, min_len = 3})
  local hyps = decode.beam(toy_step(max_len), toy_state({1, 2, 3, 4, 5}, max_len),
                           {beam = 3, max_len = max_len, min_len = 3})
  glimpse.manual_seed(2)
  local drawn = decode.sample(toy_step(max_len), toy_state({1, 2, 3, 4, 5}, max_len),
                              {max_len = max_len, min_len = 3, temperature = 3})
  for b = 1, 5 do
    lu.assertTrue(#tok[b] >= 3)
    lu.assertTrue(#hyps[b][1].tokens >= 3)
    lu.assertTrue(#drawn[b] >= 3)
  end
  -- without min_len some of these end sooner (the test is not vacuous)
  local free = decode.greedy(toy_step(max_len), toy_state({1, 2, 3, 4, 5}, max_len),
                             {max_len = max_len})
  local short = 0
  for b = 1, 5 do if #free[b] < 3 then short = short + 1 end end
  lu.assertTrue(short > 0)
end

function T.test_logits_option_applies_log_softmax()
  local step = function(tokens, state)
    local n = tokens:size(1)
    return glimpse.tensor({{1, 2, 0, 5}}):expand(n, 4) + 0, state
  end
  local _, scores = decode.greedy(step, nil, {batch = 2, max_len = 1, logits = true})
  local z = math.log(math.exp(1) + math.exp(2) + math.exp(0) + math.exp(5))
  lu.assertAlmostEquals(scores[1], 5 - z, 1e-5)
  lu.assertAlmostEquals(scores[2], 5 - z, 1e-5)
end

function T.test_positive_scores_turn_off_early_stopping()
  -- raw scores above 0 (not log-probabilities) can grow, so no bound holds: the search
  -- must run to max_len, where A A A A then end (4 * 0.4 + 0.5) beats ending at once (0.5)
  local step = function(tokens, state)
    local rows = {}
    for r = 1, tokens:size(1) do rows[r] = {-5, -5, 0.5, 0.4} end
    return glimpse.tensor(rows), state
  end
  local h = decode.beam(step, nil, {batch = 1, beam = 2, max_len = 5})
  lu.assertEquals(h[1][1].tokens, {4, 4, 4, 4})
  lu.assertAlmostEquals(h[1][1].log_prob, f32(0.4) * 4 + 0.5, 1e-6)
end

function T.test_decoding_records_no_graph()
  local w = glimpse.randn(4, 4):requires_grad()
  local step = function(tokens, state)
    local lp = glimpse.log_softmax(glimpse.zeros(tokens:size(1), 4):matmul(w), 2)
    lu.assertFalse(glimpse.is_grad_enabled())
    return lp, state
  end
  decode.greedy(step, nil, {batch = 2, max_len = 2})
  decode.beam(step, nil, {batch = 2, beam = 2, max_len = 2})
  lu.assertTrue(glimpse.is_grad_enabled())
end

-- ---------------------------------------------------------------------------------------
-- sampling

local P = {0.1, 0.2, 0.3, 0.4}       -- end token 3 has 0.3

local function fixed_step(tokens, state)
  local row = {}
  for v = 1, 4 do row[v] = math.log(P[v]) end
  local rows = {}
  for r = 1, tokens:size(1) do rows[r] = row end
  return glimpse.tensor(rows), state
end

local function first_token_freq(opts)
  local n = 4000
  opts.batch, opts.max_len = n, 1
  local tok, _, _, fin = decode.sample(fixed_step, nil, opts)
  local count = {0, 0, 0, 0}
  for b = 1, n do
    local id = fin[b] and STOP or tok[b][1]
    count[id] = count[id] + 1
  end
  for v = 1, 4 do count[v] = count[v] / n end
  return count
end

function T.test_sample_frequencies_follow_the_tempered_distribution()
  glimpse.manual_seed(11)
  local f = first_token_freq({})
  for v = 1, 4 do lu.assertAlmostEquals(f[v], P[v], FREQ_TOL) end
  local z = 0
  for v = 1, 4 do z = z + P[v] ^ 0.5 end
  f = first_token_freq({temperature = 2})
  for v = 1, 4 do lu.assertAlmostEquals(f[v], P[v] ^ 0.5 / z, FREQ_TOL) end
end

function T.test_sample_top_k_and_top_p_restrict_the_support()
  glimpse.manual_seed(12)
  local f = first_token_freq({top_k = 2})           -- tokens 4 (0.4) and 3 (0.3)
  lu.assertEquals(f[1] + f[2], 0)
  lu.assertAlmostEquals(f[4], 0.4 / 0.7, FREQ_TOL)
  f = first_token_freq({top_p = 0.65})               -- 0.4 + 0.3 reaches 0.65
  lu.assertEquals(f[1] + f[2], 0)
  f = first_token_freq({top_p = 0.35})               -- token 4 alone
  lu.assertEquals(f[4], 1)
end

function T.test_sample_filters_on_a_wide_vocabulary()
  glimpse.manual_seed(21)
  local V = 300
  local lp = glimpse.log_softmax(glimpse.randn(1, V) * 3, 2)
  local row = lp:totable()[1]
  local order = {}
  for v = 1, V do order[v] = v end
  table.sort(order, function(a, b) return row[a] > row[b] end)
  local step = function(tokens, state) return lp:expand(tokens:size(1), V) + 0, state end
  local function drawn(opts)
    opts.batch, opts.max_len, opts.stop = 2000, 1, 1
    local tok, _, _, fin = decode.sample(step, nil, opts)
    local seen = {}
    for b = 1, 2000 do seen[fin[b] and 1 or tok[b][1]] = true end
    return seen
  end
  local rank = {}
  for j, v in ipairs(order) do rank[v] = j end
  for v in pairs(drawn({top_k = 3})) do lu.assertTrue(rank[v] <= 3, "rank " .. rank[v]) end
  local cum, nucleus = 0, 0
  for j = 1, V do
    cum = cum + math.exp(row[order[j]])
    if cum >= 0.5 then nucleus = j break end
  end
  local seen = drawn({top_k = 50, top_p = 0.5})
  local count = 0
  for v in pairs(seen) do
    lu.assertTrue(rank[v] <= nucleus, "rank " .. rank[v] .. " outside the nucleus of " .. nucleus)
    count = count + 1
  end
  lu.assertTrue(count >= math.min(nucleus, 2))
end

function T.test_sample_repeats_with_the_seed_and_top_k_1_is_greedy()
  local max_len = 6
  glimpse.manual_seed(5)
  local a, sa = decode.sample(toy_step(max_len), toy_state({1, 2, 3}, max_len), {max_len = max_len})
  glimpse.manual_seed(5)
  local b, sb = decode.sample(toy_step(max_len), toy_state({1, 2, 3}, max_len), {max_len = max_len})
  lu.assertEquals(a, b)
  lu.assertEquals(sa, sb)
  local g, gs = decode.greedy(toy_step(max_len), toy_state({1, 2, 3}, max_len), {max_len = max_len})
  local k1, ks = decode.sample(toy_step(max_len), toy_state({1, 2, 3}, max_len),
                               {max_len = max_len, top_k = 1, temperature = 0.7})
  lu.assertEquals(k1, g)
  for i = 1, 3 do lu.assertAlmostEquals(ks[i], gs[i], SCORE_TOL) end
end

-- ---------------------------------------------------------------------------------------
-- bad input

local function err_contains(pattern, fn, ...)
  local ok, msg = pcall(fn, ...)
  lu.assertFalse(ok, "expected an error containing: " .. pattern)
  lu.assertStrContains(tostring(msg), pattern)
end

function T.test_bad_arguments_give_clear_errors()
  local step = toy_step(4)
  local st = toy_state({1, 2}, 4)
  err_contains("decode.greedy: step must be a function", decode.greedy, 42, st, {})
  err_contains("decode.beam: option 'beam' must be a positive integer, got 0", decode.beam, step, st,
               {beam = 0})
  err_contains("decode.beam: option 'n_best' (3) cannot exceed option 'beam' (2)", decode.beam, step, st,
               {beam = 2, n_best = 3})
  err_contains("decode.greedy: option 'batch' is 3 but the state's tensors have 2 rows", decode.greedy,
               step, st, {batch = 3})
  err_contains("option 'batch' is needed", decode.greedy, step, nil, {})
  err_contains("decode.beam: option 'max_len' must be a positive integer", decode.beam, step, st,
               {max_len = 2.5})
  err_contains("option 'min_len' (4) must be below option 'max_len' (4)", decode.greedy, step, st,
               {max_len = 4, min_len = 4})
  err_contains("decode.sample: option 'temperature' must be a positive number", decode.sample, step,
               st, {temperature = 0})
  err_contains("decode.sample: option 'top_p' must be a number in [0, 1]", decode.sample, step, st,
               {top_p = 1.5})
  err_contains("option 'start' has 1 ids for a batch of 2", decode.greedy, step, st, {start = {2}})
  err_contains("option 'start'[2] must be a positive integer id, got 0", decode.greedy, step, st,
               {start = {2, 0}})
  err_contains("decode.beam: option 'length_penalty' must be a number", decode.beam, step, st,
               {length_penalty = "big"})
  err_contains("decode.reorder: idx must be a table", decode.reorder, st, 3)
end

function T.test_bad_step_results_and_states_give_clear_errors()
  local st = toy_state({1, 2}, 4)
  err_contains("decode.greedy: step 1 must return log_probs of shape (N,V) with N = 2 rows, got [3,4]",
               decode.greedy, function(_, s) return glimpse.zeros(3, 4), s end, st, {max_len = 4})
  err_contains("step 1 must return log_probs", decode.beam,
               function() return "nope" end, st, {max_len = 4, beam = 2})
  err_contains("option 'stop' is 3 but step returns only 2 classes", decode.greedy,
               function(_, s) return glimpse.zeros(2, 2), s end, st, {max_len = 4})
  err_contains("the attention it returns must be a tensor with N = 2 rows", decode.greedy,
               function(_, s) return glimpse.zeros(2, 4), s, glimpse.zeros(5, 3) end, st,
               {max_len = 4})
  local bad = {a = glimpse.zeros(2, 3), b = {c = glimpse.tensor(7)}}
  err_contains("state tensor state.b.c has shape []", decode.beam,
               function(_, s) return glimpse.zeros(4, 4), s end, bad, {beam = 2, batch = 2})
  -- the step function's own error comes through unchanged
  err_contains("my model broke", decode.greedy, function() error("my model broke") end, st, {})
  -- the error points at the caller's line
  local ok, msg = pcall(function() decode.beam(toy_step(4), st, {beam = -1}) end)
  lu.assertFalse(ok)
  lu.assertStrContains(msg, "test_decode.lua")
end

-- a model gone wrong (NaN or -inf log-probabilities everywhere) still gets one hypothesis
-- per item, flagged, instead of none (which callers would index)
function T.test_beam_with_no_finite_score_returns_a_flagged_hypothesis()
  for _, bad in ipairs({0 / 0, -math.huge}) do
    local function step(y, st) return glimpse.full({#y, 5}, bad), st end
    local hyps = decode.beam(step, {}, {beam = 3, max_len = 4, start = {2, 2}, stop = 3, batch = 2})
    lu.assertEquals(#hyps, 2)
    for b = 1, 2 do
      lu.assertEquals(#hyps[b], 1)
      lu.assertTrue(hyps[b][1].no_finite_score)
      lu.assertEquals(hyps[b][1].tokens, {})
      lu.assertFalse(hyps[b][1].finished)
    end
  end
end

function T.test_model_decode_flags_rows_with_no_finite_score()
  local ds = glimpse.data.seq2seq.reversal{n = 4, max_len = 6, seed = 1}
  local m = glimpse.models.Seq2Seq{dataset = ds, emb = 4, hidden = 8, attn_hidden = 4}
  glimpse.no_grad(function() m.out.bias:fill_(0 / 0) end)
  for _, beam in ipairs({1, 3}) do
    local outs, ex = m:decode(ds:collate({1, 2}), {beam = beam, max_len = 3})
    lu.assertEquals(#outs, 2)
    lu.assertEquals(ex.no_finite_score, {true, true})
  end
end

return T
