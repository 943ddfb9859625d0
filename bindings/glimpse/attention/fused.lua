--- glimpse.attention.fused -- the normalisers and the fused steps: score + mask + normalise
-- (+ prior) + context in one engine op per decoder step.
--
--   local ctx, alpha = attention.additive(wq, uk, v, values, mask, {temperature = 0.5})
--
-- opts of every step: prior (B,L) multiplies the normalised weights (local attention),
-- temperature, normaliser ("softmax" | "sigmoid").  Each returns ctx (B,Dv), alpha (B,L).
local glimpse = require "glimpse"
local args = require "glimpse.attention.args"

local C = glimpse._attention
local named, as_tensor = args.named, args.as_tensor
local check_tensor, check_opts = args.check_tensor, args.check_opts

local M = {}

-- ---------------------------------------------------------------------------------------
-- normalisers

--- attention.masked_softmax(e (...,L), mask (...,L) or nil, opts) -> alpha (...,L)
-- opts.temperature (divides e; < 1 sharpens), opts.normaliser "softmax" (default) or
-- "sigmoid" (alpha = sig(e) / sum sig(e), the smoothing of Chorowski et al. 2015).
-- Masked positions get exactly 0; a fully masked row is all zeros.
function M.masked_softmax(e, mask, opts)
  check_tensor(e, "scores", nil, 2, "attention.masked_softmax")
  check_opts(opts, "attention.masked_softmax", 2)
  mask = as_tensor(mask, "attention.masked_softmax")
  local T = opts and opts.temperature or 1
  if T ~= 1 then e = e / T end
  local norm = opts and opts.normaliser or "softmax"
  if norm == "sigmoid" then
    local s = e:sigmoid()
    if mask then s = named("attention.masked_softmax", glimpse.mul, s, mask) end
    return s / (s:sum(-1, true) + 1e-30)
  elseif norm ~= "softmax" then
    error("attention.masked_softmax: normaliser must be \"softmax\" or \"sigmoid\", got " ..
          tostring(norm), 2)
  end
  return named("attention.masked_softmax", glimpse.softmax, e, -1, mask)
end

--- attention.sharpen(w (B,N) >= 0, gamma (B) tensor or number >= 1) -> w^gamma / sum w^gamma
function M.sharpen(w, gamma)
  check_tensor(w, "weights", 2, 2)
  if type(gamma) == "number" then gamma = glimpse.full({w.shape[1]}, gamma) end
  return C.sharpen(w, gamma)
end

--- attention.context(alpha (B,L), values (B,L,Dv)) -> ctx (B,Dv) = sum_l alpha_l values_l
function M.context(alpha, values)
  check_tensor(alpha, "alpha (B,L)", 2, 2, "attention.context")
  check_tensor(values, "values (B,L,Dv)", 3, 2, "attention.context")
  local B, L = alpha.shape[1], alpha.shape[2]
  return alpha:reshape(B, 1, L):matmul(values):reshape(B, values.shape[3])
end

-- ---------------------------------------------------------------------------------------
-- fused steps

--- attention.additive(wq (B,H), uk (B,L,H), v (H), values (B,L,Dv), mask, opts) -> ctx, alpha
-- e_bl = v . tanh(wq_b + uk_bl): Bahdanau's score with the query (wq = W q + b) and the keys
-- (uk = U k, once per sequence) already projected.
function M.additive(wq, uk, v, values, mask, opts)
  check_opts(opts, "attention.additive", 2)
  return named("attention.additive", C.additive, wq, uk, v, values,
               as_tensor(mask, "attention.additive"), opts and opts.prior, opts)
end

--- attention.dot(q (B,D), keys (B,L,D), values (B,L,Dv), mask, opts) -> ctx, alpha
-- e_bl = scale * q_b . k_bl with opts.scale (default 1).
function M.dot(q, keys, values, mask, opts)
  check_opts(opts, "attention.dot", 2)
  return named("attention.dot", C.dot, q, keys, values, as_tensor(mask, "attention.dot"),
               opts and opts.prior, opts and opts.scale or 1, opts)
end

--- attention.scaled_dot(q (B,D), keys (B,L,D), values, mask, opts) -> ctx, alpha
-- e_bl = q_b . k_bl / sqrt(D) (Vaswani et al. 2017).
function M.scaled_dot(q, keys, values, mask, opts)
  check_tensor(keys, "keys (B,L,D)", 3, 2, "attention.scaled_dot")
  check_opts(opts, "attention.scaled_dot", 2)
  return named("attention.scaled_dot", C.dot, q, keys, values,
               as_tensor(mask, "attention.scaled_dot"), opts and opts.prior,
               1 / math.sqrt(keys.shape[3]), opts)
end

--- attention.attend(e (B,L), values (B,L,Dv), mask, opts) -> ctx, alpha
-- The normalise-and-read tail alone, for scores computed any other way.
function M.attend(e, values, mask, opts)
  check_opts(opts, "attention.attend", 2)
  return named("attention.attend", C.context, e, values, as_tensor(mask, "attention.attend"),
               opts and opts.prior, opts)
end

--- attention.additive_scores(wq (B,H), uk (B,L,H), v (H)) -> e (B,L), fused, unnormalised.
function M.additive_scores(wq, uk, v)
  return named("attention.additive_scores", C.additive_scores, wq, uk, v)
end

--- attention.cosine_scores(k (B,D), mem (B,N,D), beta (B) tensor, number or nil) -> (B,N)
-- e_bn = beta_b cos(k_b, mem_bn) (NTM content addressing before its softmax).
function M.cosine_scores(k, mem, beta)
  check_tensor(k, "k (B,D)", 2, 2, "attention.cosine_scores")
  if type(beta) == "number" then beta = glimpse.full({k.shape[1]}, beta) end
  return named("attention.cosine_scores", C.cosine, k, mem, beta)
end

return M
