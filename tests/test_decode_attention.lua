-- tests/test_decode_attention.lua -- glimpse.decode over a decoder that attends with
-- nn.Attention, for every score and mode: the attention state that precompute returns holds
-- one row per sequence only (no weights), so greedy decoding and beam search reorder it
-- without any `keep` option.  The batch size equals the hidden size, so a (H,H) weight left
-- in the state would pass decode's row check and be silently "reordered"; beam search with
-- beam = 1 must equal greedy decoding, and each row decoded alone must equal the same row
-- decoded in the batch.
local lu = require "luaunit"
local glimpse = require "glimpse"
local nn, att, decode = glimpse.nn, glimpse.attention, glimpse.decode

local T = {}

local H, L, V = 8, 5, 7          -- hidden = query = key size, source length, vocabulary
local B = H                      -- batch size == hidden size
local LENGTHS = {5, 3, 4, 2, 5, 1, 4, 3}
local MAX_LEN = 6
local SCORE_TOL = 1e-4

-- the valid (score, mode) pairs: location-aware mode needs the additive or concat score
local function pairs_to_test()
  local out = {}
  for _, score in ipairs(att.SCORES) do
    for _, mode in ipairs(att.MODES) do
      if mode ~= "location" or score == "additive" or score == "concat" then
        out[#out + 1] = {score, mode}
      end
    end
  end
  return out
end

-- a tiny attentional decoder: h_t = tanh(W [E y_{t-1}; ctx_t] + U h_{t-1}), the query is
-- h_{t-1}, log p(y_t) = log_softmax(O h_t)
local Decoder = nn.Module:extend("TinyAttentionDecoder")

function Decoder:init(score, mode)
  self.emb = nn.Embedding(V, H)
  self.att = nn.Attention{score = score, mode = mode, query = H, key = H, hidden = H,
                          window = 1, max_len = L}
  self.inp = nn.Linear(2 * H, H)
  self.rec = nn.Linear(H, H, {bias = false})
  self.out = nn.Linear(H, V)
end

-- the decode state of a batch: every tensor in it has one row per sequence
function Decoder:start(keys, mask)
  return {h = glimpse.zeros(keys.shape[1], H), att = self.att:precompute(keys, nil, mask)}
end

function Decoder:step(tokens, st)
  local ctx, alpha, astate = self.att(st.h, nil, nil, nil, st.att)
  local x = glimpse.cat({self.emb(tokens), ctx}, 2)
  local h = (self.inp(x) + self.rec(st.h)):tanh()
  return glimpse.log_softmax(self.out(h), 2), {h = h, att = astate}, alpha
end

local function source()
  glimpse.manual_seed(5)
  local keys = glimpse.randn(B, L, H)
  local rows = {}
  for b = 1, B do
    rows[b] = {}
    for l = 1, L do rows[b][l] = l <= LENGTHS[b] and 1 or 0 end
  end
  return keys, glimpse.tensor(rows)
end

local function row(t, b)
  return t:narrow(1, b, 1)
end

function T.test_every_score_and_mode_decodes_greedy_and_beam_without_keep()
  local keys, mask = source()
  for _, sm in ipairs(pairs_to_test()) do
    local score, mode = sm[1], sm[2]
    local what = score .. "/" .. mode
    glimpse.manual_seed(7)
    local dec = Decoder(score, mode):evaluate()
    -- the state holds no weight: every tensor has one row per sequence
    local st = dec:start(keys, mask)
    local r = decode.reorder(st, glimpse.arange(B), {rows = B})
    lu.assertEquals(r.h.shape, {B, H}, what)
    local step = function(y, s) return dec:step(y, s) end
    local o = {max_len = MAX_LEN}
    local tok, scores = decode.greedy(step, dec:start(keys, mask), o)
    local hyps1 = decode.beam(step, dec:start(keys, mask), {max_len = MAX_LEN, beam = 1})
    local hyps3 = decode.beam(step, dec:start(keys, mask), {max_len = MAX_LEN, beam = 3})
    lu.assertEquals(#tok, B, what)
    for b = 1, B do
      local wb = what .. " row " .. b
      lu.assertEquals(hyps1[b][1].tokens, tok[b], wb .. ": beam 1 vs greedy")
      lu.assertAlmostEquals(hyps1[b][1].log_prob, scores[b], SCORE_TOL, wb)
      local kb, mb = row(keys, b), row(mask, b)
      local alone = decode.greedy(step, dec:start(kb, mb), o)
      lu.assertEquals(alone[1], tok[b], wb .. ": greedy alone vs in the batch")
      local alone3 = decode.beam(step, dec:start(kb, mb), {max_len = MAX_LEN, beam = 3})
      lu.assertEquals(#alone3[1], #hyps3[b], wb)
      lu.assertEquals(alone3[1][1].tokens, hyps3[b][1].tokens, wb .. ": beam alone vs batch")
      lu.assertAlmostEquals(alone3[1][1].score, hyps3[b][1].score, SCORE_TOL, wb)
    end
  end
end

function T.test_concat_state_keeps_its_weight_on_the_module()
  local keys, mask = source()
  local a = nn.Attention{score = "concat", query = H, key = H, hidden = H}
  local st = a:precompute(keys, nil, mask)
  for k, v in pairs(st.cache) do
    if glimpse.is_tensor(v) then
      lu.assertEquals(v.shape[1], B, "cache." .. k .. " is not per row")
    end
  end
  -- the step reads W from the module: a new W changes the scores of an existing state
  local q = glimpse.randn(B, H)
  local _, a1 = a(q, nil, nil, nil, a:precompute(keys, nil, mask))
  local w = a.proj.weight
  glimpse.no_grad(function()
    w:copy_(glimpse.cat({w:narrow(2, 1, H) * 2, w:narrow(2, H + 1, H)}, 2))
  end)
  local _, a2 = a(q, nil, nil, nil, st)
  lu.assertTrue((a1 - a2):abs():max():item() > 1e-6)
end

return T
