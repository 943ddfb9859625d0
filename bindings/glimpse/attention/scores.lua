--- glimpse.attention.scores -- the score registry: every score function by name, with its
-- parameters as plain tensors in a table p, its once-per-sequence precompute and its
-- per-step fused step; and the convolutional score's pieces (Allamanis et al. 2016).
--
--   local cache = attention.precompute("additive", p, keys)          -- once per sequence
--   local ctx, alpha = attention.step("additive", p, cache, q, values, mask, opts)
--
--   dot, scaled_dot  (none; Dq == Dk)
--   general          W (Dq,Dk)                      e = q^T W k
--   additive         W (H,Dq), b (H) or nil, U (H,Dk), v (H)   e = v^T tanh(W q + b + U k)
--   concat           W (H,Dq+Dk), v (H)             e = v^T tanh(W [q; k])
--   location         W (Lmax,Dq), b (Lmax)          e = W q + b (no keys; Luong's location)
--   cosine           W (Dk,Dq) or nil, and beta (a number) or Wb (1,Dq), bb (1):
--                    e = beta cos(W q, k), beta = softplus(Wb q + bb) >= 0
--   conv             F1 (H,R*Dk), b1 (H), Wq (H,Dq), F2 (1,R*H)
local glimpse = require "glimpse"
local check = require "glimpse.check"
local args = require "glimpse.attention.args"

local C = glimpse._attention
local named, as_tensor, check_tensor = args.named, args.as_tensor, args.check_tensor

local M = {}

--- The score function names, in the order the library documents them.
M.SCORES = {"dot", "scaled_dot", "general", "additive", "concat", "location", "cosine", "conv"}

-- ---------------------------------------------------------------------------------------
-- convolutional attention (Allamanis et al. 2016), composed from core ops

--- attention.unfold(x (B,L,D), R odd) -> (B,L,R*D): row l holds x_(l-h) .. x_(l+h),
--- h = (R-1)/2, zeros outside 1..L (the input of a 1-D convolution of width R as one matmul)
function M.unfold(x, R)
  check_tensor(x, "input", 3, 2)
  if math.type(R) ~= "integer" or R < 1 or R % 2 == 0 then
    error("attention.unfold: width must be a positive odd integer, got " .. tostring(R), 2)
  end
  local B, L, D = x.shape[1], x.shape[2], x.shape[3]
  local h = (R - 1) // 2
  if h == 0 then return x end
  local z = glimpse.zeros(B, h, D)
  local padded = glimpse.cat({z, x, z}, 2)
  local cols = {}
  for r = 1, R do cols[r] = padded:narrow(2, r, L) end
  return glimpse.cat(cols, 3)
end

--- attention.conv_features(keys (B,L,Dk), F1 (H,R*Dk), b1 (H)) -> f (B,L,H) =
--- relu(conv(keys) + b1): K_l1 = H filters of width R over the key sequence
function M.conv_features(keys, F1, b1)
  check_tensor(keys, "keys", 3, 2, "attention.conv_features")
  check_tensor(F1, "F1", 2, 2, "attention.conv_features")
  local R = F1.shape[2] // keys.shape[3]
  if R * keys.shape[3] ~= F1.shape[2] then
    check.fail(2, "attention.conv_features: F1 %s does not fit keys of width %d",
               check.shape(F1), keys.shape[3])
  end
  return glimpse.linear(M.unfold(keys, R), F1, b1):relu()
end

--- attention.conv_scores(f (B,L,H), q (B,Dq), Wq (H,Dq), F2 (1,R*H)) -> e (B,L):
--- the features gated by the query (f * Wq q) and convolved down to one score per position
function M.conv_scores(f, q, Wq, F2)
  local fname = "attention.conv_scores"
  check_tensor(f, "features", 3, 2, fname)
  check_tensor(q, "query", 2, 2, fname)
  check_tensor(Wq, "Wq", 2, 2, fname)
  check_tensor(F2, "F2", 2, 2, fname)
  local B, L, H = f.shape[1], f.shape[2], f.shape[3]
  local R = F2.shape[2] // H
  if q.shape[1] ~= B or Wq.shape[1] ~= H or R * H ~= F2.shape[2] or R % 2 == 0 then
    check.fail(2, "%s: features %s, query %s, Wq %s and F2 %s do not fit (f (B,L,H), " ..
               "q (B,Dq), Wq (H,Dq), F2 (1,R*H) with R odd)", fname, check.shape(f),
               check.shape(q), check.shape(Wq), check.shape(F2))
  end
  local g = f * named(fname, glimpse.linear, q, Wq):reshape(B, 1, H)
  return named(fname, glimpse.linear, M.unfold(g, R), F2):reshape(B, L)
end

-- ---------------------------------------------------------------------------------------
-- the registry: precompute(p, keys) runs once per sequence (it projects the keys),
-- step(p, cache, q, values, mask, o) once per decoder step

local SCORE = {}

local function key_dim(keys) return keys.shape[3] end

SCORE.dot = {
  precompute = function(_, keys) return {k = keys} end,
  step = function(_, cache, q, values, mask, o)
    return C.dot(q, cache.k, values, mask, o.prior, 1, o)
  end,
}

SCORE.scaled_dot = {
  precompute = function(_, keys) return {k = keys, scale = 1 / math.sqrt(key_dim(keys))} end,
  step = function(_, cache, q, values, mask, o)
    return C.dot(q, cache.k, values, mask, o.prior, cache.scale, o)
  end,
}

SCORE.general = {
  -- q^T W k = q . (W k): the keys are projected once, then it is a dot score
  precompute = function(p, keys) return {k = glimpse.linear(keys, p.W)} end,
  step = function(_, cache, q, values, mask, o)
    return C.dot(q, cache.k, values, mask, o.prior, 1, o)
  end,
}

SCORE.additive = {
  precompute = function(p, keys) return {uk = glimpse.linear(keys, p.U)} end,
  step = function(p, cache, q, values, mask, o)
    local uk = cache.uk
    if o.extra then uk = uk + o.extra end
    return C.additive(glimpse.linear(q, p.W, p.b), uk, p.v, values, mask, o.prior, o)
  end,
}

-- W_q, the query half of the concat score's W (H, Dq+Dk), checked against the query's width
local function concat_query_weight(p, cache, q)
  local dq = p.W.shape[2] - cache.key_width
  if q.shape[2] ~= dq then
    check.fail(4, "attention: concat W %s with keys of width %d needs queries of width %d, " ..
               "got %d", check.shape(p.W), cache.key_width, dq, q.shape[2])
  end
  return p.W:narrow(2, 1, dq)
end

SCORE.concat = {
  -- W [q; k] = W_q q + W_k k with W = [W_q W_k]: the key half is applied once per sequence;
  -- the query half is cut from W at each step (the cache holds per-sequence values only, so
  -- a decoder can reorder every tensor in it by row)
  precompute = function(p, keys)
    local dk = key_dim(keys)
    local dq = p.W.shape[2] - dk
    if dq < 1 then
      check.fail(3, "attention: concat W %s is too narrow for keys of width %d",
                 check.shape(p.W), dk)
    end
    return {uk = glimpse.linear(keys, p.W:narrow(2, dq + 1, dk)), key_width = dk}
  end,
  step = function(p, cache, q, values, mask, o)
    local uk = cache.uk
    if o.extra then uk = uk + o.extra end
    return C.additive(glimpse.linear(q, concat_query_weight(p, cache, q)), uk, p.v, values,
                      mask, o.prior, o)
  end,
}

SCORE.location = {
  precompute = function(p, keys)
    local L, Lmax = keys.shape[2], p.W.shape[1]
    if L > Lmax then
      check.fail(3, "attention: location score was built for at most %d positions, got %d " ..
                 "(raise max_len)", Lmax, L)
    end
    return {L = L}
  end,
  step = function(p, cache, q, values, mask, o)
    local e = glimpse.linear(q, p.W, p.b)
    if cache.L < p.W.shape[1] then e = e:narrow(2, 1, cache.L) end
    return C.context(e, values, mask, o.prior, o)
  end,
}

SCORE.cosine = {
  precompute = function(_, keys) return {k = keys} end,
  step = function(p, cache, q, values, mask, o)
    local qp = p.W and glimpse.linear(q, p.W) or q
    local beta = p.beta
    if type(beta) == "number" then
      beta = glimpse.full({q.shape[1]}, beta)
    elseif beta == nil and p.Wb then
      beta = glimpse.linear(q, p.Wb, p.bb):softplus():reshape(q.shape[1])
    end
    local e = C.cosine(qp, cache.k, beta)
    return C.context(e, values, mask, o.prior, o)
  end,
}

-- conv: f = relu(conv_F1(keys) + b1) (B,L,H), once per sequence;  e = conv_F2(f * (Wq q))
SCORE.conv = {
  precompute = function(p, keys) return {f = M.conv_features(keys, p.F1, p.b1)} end,
  step = function(p, cache, q, values, mask, o)
    return C.context(M.conv_scores(cache.f, q, p.Wq, p.F2), values, mask, o.prior, o)
  end,
}

local function score_def(name, level)
  local d = SCORE[name]
  if not d then
    check.fail(level + 1, "attention: unknown score %q (one of %s)", tostring(name),
               table.concat(M.SCORES, ", "))
  end
  return d
end

--- attention.precompute(score, p, keys (B,L,Dk)) -> cache (per sequence; reuse at every step)
function M.precompute(score, p, keys)
  check_tensor(keys, "keys", 3, 2)
  local cache = score_def(score, 2).precompute(p, keys)
  cache.score = score
  return cache
end

--- attention.step(score, p, cache, q (B,Dq), values (B,L,Dv), mask (B,L) or nil, opts)
---   -> ctx (B,Dv), alpha (B,L)
-- opts: prior, temperature, normaliser, extra (B,L,H) (additive/concat only: terms added
-- inside the tanh, e.g. location features or coverage).
function M.step(score, p, cache, q, values, mask, opts)
  opts = opts or {}
  if opts.extra and score ~= "additive" and score ~= "concat" then
    error("attention.step: extra terms need the additive or concat score, not " .. score, 2)
  end
  check_tensor(q, "query", 2, 2)
  return score_def(score, 2).step(p, cache, q, values, as_tensor(mask), opts)
end

-- a tensor field of attention.scores' p or cache, or an error naming it
local function scores_field(t, key, what)
  local v = t[key]
  if not glimpse.is_tensor(v) then
    check.fail(3, "attention.scores: %s.%s must be a tensor, got %s", what, key, type(v))
  end
  return v
end

--- attention.scores(score, p, cache, q) -> alpha-free raw scores e (B,L), composed from core
-- ops (a slow reference for tests and for looking at scores before normalisation).
function M.scores(score, p, cache, q)
  score_def(score, 2)
  if type(p) ~= "table" then
    error("attention.scores: p must be a table of parameters, got " .. type(p), 2)
  end
  if type(cache) ~= "table" then
    error("attention.scores: cache must be the table precompute returned, got " .. type(cache), 2)
  end
  check_tensor(q, "q", 2, 2, "attention.scores")
  if score == "dot" or score == "general" or score == "scaled_dot" then
    local ck = scores_field(cache, "k", "cache")
    local B, L, D = ck.shape[1], ck.shape[2], ck.shape[3]
    local e = ck:matmul(q:reshape(B, D, 1)):reshape(B, L)
    return cache.scale and e * cache.scale or e
  elseif score == "additive" or score == "concat" then
    local W, v = scores_field(p, "W", "p"), scores_field(p, "v", "p")
    local uk = scores_field(cache, "uk", "cache")
    local wq = score == "additive" and glimpse.linear(q, W, p.b)
               or glimpse.linear(q, concat_query_weight(p, cache, q))
    local B, L, H = uk.shape[1], uk.shape[2], uk.shape[3]
    local t = (uk + wq:reshape(B, 1, H)):tanh()
    return t:matmul(v:reshape(H, 1)):reshape(B, L)
  elseif score == "location" then
    local W = scores_field(p, "W", "p")
    local e = glimpse.linear(q, W, p.b)
    return (cache.L or W.shape[1]) < W.shape[1] and e:narrow(2, 1, cache.L) or e
  elseif score == "conv" then
    return M.conv_scores(scores_field(cache, "f", "cache"), q, scores_field(p, "Wq", "p"),
                         scores_field(p, "F2", "p"))
  else
    local qp = p.W and glimpse.linear(q, p.W) or q
    local k = scores_field(cache, "k", "cache")
    local B, L = k.shape[1], k.shape[2]
    local kn = (k * k):sum(3):sqrt():clamp(1e-8, math.huge)
    local qn = (qp * qp):sum(2, true):sqrt():clamp(1e-8, math.huge)
    local cos = k:matmul(qp:reshape(B, -1, 1)):reshape(B, L) / kn / qn
    local beta = p.beta
    if type(beta) == "number" then return cos * beta end
    if beta == nil and p.Wb then beta = glimpse.linear(q, p.Wb, p.bb):softplus() end
    return beta and cos * beta:reshape(B, 1) or cos
  end
end

return M
