--- glimpse.attention -- the functional attention library: everything works on plain tensors
-- (no modules); nn.Attention, nn.MultiheadAttention and nn.Pointer hold the parameters and
-- call these functions.  Notation: query q (B,Dq), keys k (B,L,Dk), values (B,L,Dv), mask
-- (B,L) with 1 = a real position and 0 = padding; alpha (B,L); context ctx (B,Dv).
--
--   fused.lua        fused steps additive, dot, scaled_dot, attend; masked_softmax, sharpen
--   scores.lua       SCORES, precompute(score, p, keys), step(...), scores(...); conv score;
--                    register_score (a score of one's own), gradcheck_score
--   modes.lua        MODES, local_prior, predict_position (local-p), location_features, monotonic
--   hard.lua         sample, region_argmax, gumbel_sample; baseline, reinforce_loss (Xu et al.)
--   regularisers.lua doubly_stochastic, coverage, coverage_penalty
--   multihead.lua    multi_head (PyTorch's nn.MultiheadAttention maths), pointer_logits
--   mh_variants.lua  multi_head's general path: grouped-query heads, window, top_k, linear
--   positions.lua    attention.positions: rope, alibi_slopes/alibi_bias, t5_bucket/t5_bias,
--                    visibility (causal and window masks at position offsets)
--   ntm.lua          attention.ntm: content, interpolate, shift, sharpen, address, read, write
--   cache.lua        kv_project, multi_head_cached, multi_head_step (incremental decoding)
--   capture.lua      attention.capture(fn, root): every attention map computed inside fn
local M = {}

local PARTS = {
  "glimpse.attention.fused",
  "glimpse.attention.scores",
  "glimpse.attention.modes",
  "glimpse.attention.hard",
  "glimpse.attention.regularisers",
  "glimpse.attention.multihead",
  "glimpse.attention.cache",
}

for _, name in ipairs(PARTS) do
  for k, v in pairs(require(name)) do
    if M[k] ~= nil then error("glimpse.attention: " .. name .. " redefines attention." .. k) end
    M[k] = v
  end
end

M.ntm = require "glimpse.attention.ntm"
M.positions = require "glimpse.attention.positions"
M.capture = require "glimpse.attention.capture"

return M
