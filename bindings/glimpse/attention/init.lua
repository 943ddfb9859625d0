--- glimpse.attention -- the functional attention library.
--
-- Everything here works on plain tensors (no modules): the nn modules in glimpse/nn/
-- (attention.lua, multihead.lua, pointer.lua) hold the parameters and call these functions.
-- Notation follows
-- /work/shared/REFERENCES.md: query q (B,Dq), keys k (B,L,Dk), values (B,L,Dv), mask (B,L)
-- with 1 = a real position and 0 = padding; alpha (B,L); context ctx (B,Dv).
--
--   fused steps     additive, dot, scaled_dot, attend         (one engine op per decoder step)
--   score registry  SCORES, precompute(score, p, keys), step(score, p, cache, q, values, mask, o)
--   normalisers     masked_softmax, sharpen
--   modes           local_prior, predict_position (local-p), sample (hard), location_features
--   REINFORCE       baseline, reinforce_loss                  (Show, Attend and Tell)
--   regularisers    doubly_stochastic, coverage, coverage_penalty
--   multi-head      multi_head (PyTorch's nn.MultiheadAttention maths, batch first)
--   pointer         pointer_logits
--   NTM addressing  ntm.content, ntm.interpolate, ntm.shift, ntm.sharpen, ntm.address,
--                   ntm.read, ntm.write
local glimpse = require "glimpse"

local C = glimpse._attention
local M = {}

--- The score function names, in the order the library documents them.
M.SCORES = {"dot", "scaled_dot", "general", "additive", "concat", "location", "cosine", "conv"}
--- The modes of nn.Attention.
M.MODES = {"soft", "hard", "local-m", "local-p", "location", "monotonic"}

-- masked softmax tails are exact zeros; this keeps logs of those zeros finite
local LOG_EPS = 1e-12
-- what pointer_logits adds to the logits of positions that may not be chosen
local NEG_BIG = 1e9

-- Call f (a C primitive or a core op) on behalf of the public function fname: an error it
-- raises is re-raised at fname's caller, prefixed with fname ("attention.attend: bad argument
-- #1 to 'context' ..."), so the message names what the user called.  Two results at most.
local function named(fname, f, ...)
  local ok, a, b = pcall(f, ...)
  if ok then return a, b end
  local msg = tostring(a):gsub("^[^\n]-%.lua:%d+: ", "")
  if msg:find("to '?'", 1, true) then   -- an argument error: the C function has no name here
    msg = msg:gsub("to '%?'", "to '" .. fname .. "'", 1)
  else
    msg = fname .. ": " .. msg
  end
  error(msg, 3)
end

-- a mask (or prior) given as a tensor, a nested table or nil
local function as_tensor(x, fname)
  if x == nil or glimpse.is_tensor(x) then return x end
  if type(x) ~= "table" then
    error(string.format("%s: a mask must be a tensor, a table or nil, got %s",
                        fname or "attention", type(x)), 3)
  end
  return named(fname or "attention", glimpse.tensor, x)
end

-- x must be a tensor (of `dims` dims when given); fname names the public function
local function check_tensor(x, what, dims, level, fname)
  fname = fname or "attention"
  if not glimpse.is_tensor(x) then
    error(string.format("%s: %s must be a tensor, got %s", fname, what, type(x)), level + 1)
  end
  if dims and x:dim() ~= dims then
    error(string.format("%s: %s must have %d dims, got shape {%s}", fname, what, dims,
                        table.concat(x.shape, ",")), level + 1)
  end
  return x
end

-- opts must be a table or nil
local function check_opts(opts, fname, level)
  if opts ~= nil and type(opts) ~= "table" then
    error(string.format("%s: opts must be a table or nil, got %s", fname, type(opts)), level + 1)
  end
  return opts
end

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
-- fused steps: score + mask + normalise (+ prior) + context in one engine op.
-- opts for all: prior (B,L) multiplies the normalised weights (local attention), temperature,
-- normaliser ("softmax" | "sigmoid").  Each returns ctx (B,Dv), alpha (B,L).

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

-- ---------------------------------------------------------------------------------------
-- the score registry.  Parameters are plain tensors in a table p:
--   dot, scaled_dot  (none; Dq == Dk)
--   general          W (Dq,Dk)                      e = q^T W k
--   additive         W (H,Dq), b (H) or nil, U (H,Dk), v (H)   e = v^T tanh(W q + b + U k)
--   concat           W (H,Dq+Dk), v (H)             e = v^T tanh(W [q; k])
--   location         W (Lmax,Dq), b (Lmax)          e = W q + b (no keys; Luong's location)
--   cosine           W (Dk,Dq) or nil, and beta (a number) or Wb (1,Dq), bb (1):
--                    e = beta cos(W q, k), beta = softplus(Wb q + bb) >= 0
-- precompute(score, p, keys) runs once per sequence (it projects the keys);
-- step(...) runs once per decoder step.

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
    error(string.format("attention: concat W {%s} with keys of width %d needs queries of " ..
                        "width %d, got %d", table.concat(p.W.shape, ","), cache.key_width, dq,
                        q.shape[2]), 4)
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
      error(string.format("attention: concat W {%s} is too narrow for keys of width %d",
                          table.concat(p.W.shape, ","), dk), 3)
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
      error(string.format("attention: location score was built for at most %d positions, "
                          .. "got %d (raise max_len)", Lmax, L), 3)
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

-- conv (Allamanis et al. 2016): features from a 1-D convolution over the keys, gated by the
-- query, and a second convolution down to one score per position:
--   f = relu(conv_F1(keys) + b1) (B,L,H), once per sequence;  e = conv_F2(f * (Wq q)) (B,L)
SCORE.conv = {
  precompute = function(p, keys) return {f = M.conv_features(keys, p.F1, p.b1)} end,
  step = function(p, cache, q, values, mask, o)
    return C.context(M.conv_scores(cache.f, q, p.Wq, p.F2), values, mask, o.prior, o)
  end,
}

local function score_def(name, level)
  local d = SCORE[name]
  if not d then
    error(string.format("attention: unknown score %q (one of %s)", tostring(name),
                        table.concat(M.SCORES, ", ")), level + 1)
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

--- attention.scores(score, p, cache, q) -> alpha-free raw scores e (B,L), composed from core
-- ops (a slow reference for tests and for looking at scores before normalisation).
-- a tensor field of attention.scores' p or cache, or an error naming it
local function scores_field(t, key, what)
  local v = t[key]
  if not glimpse.is_tensor(v) then
    error(string.format("attention.scores: %s.%s must be a tensor, got %s", what, key, type(v)), 3)
  end
  return v
end

function M.scores(score, p, cache, q)
  score_def(score, 2)
  if type(p) ~= "table" then error("attention.scores: p must be a table of parameters, got " .. type(p), 2) end
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
    local W, v, uk = scores_field(p, "W", "p"), scores_field(p, "v", "p"), scores_field(cache, "uk", "cache")
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

-- ---------------------------------------------------------------------------------------
-- local attention (Luong et al. 2015, section 3.2)

--- attention.local_prior(pos, B, L, D, mask) -> prior (B,L), window_mask (B,L)
-- pos: the window centre p_t, a number (local-m: p_t = t) or a (B) tensor (local-p, may
-- require grad); positions are 1..L.  prior_bl = exp(-(l - p_b)^2 / (2 sigma^2)),
-- sigma = D/2; window_mask is 1 where |l - p_b| <= D (and mask is 1).  Pass both to a
-- step (opts.prior, and the window mask as its mask) and weights outside the window are 0.
function M.local_prior(pos, B, L, D, mask)
  if type(D) ~= "number" or D <= 0 then error("attention.local_prior: D must be a positive number", 2) end
  if type(pos) ~= "number" then check_tensor(pos, "pos (a number or a (B) tensor)", nil, 2, "attention.local_prior") end
  local positions = glimpse.arange(L):reshape(1, L)
  local centre = type(pos) == "number" and glimpse.full({B, 1}, pos) or pos:reshape(B, 1)
  local diff = positions - centre
  local sigma = D / 2
  local prior = (diff * diff * (-1 / (2 * sigma * sigma))):exp()
  local window = glimpse.no_grad(function() return diff:detach():abs():le(D) end)
  mask = as_tensor(mask)
  if mask then window = window * mask end
  return prior, window
end

--- attention.predict_position(q (B,Dq), Wp (H,Dq), vp (H), lengths (B) tensor) -> p (B)
-- local-p: p_t = S * sigmoid(vp^T tanh(Wp q)), S the source length of each row.
function M.predict_position(q, Wp, vp, lengths)
  local fname = "attention.predict_position"
  check_tensor(q, "q (B,Dq)", 2, 2, fname)
  check_tensor(Wp, "Wp (H,Dq)", 2, 2, fname)
  check_tensor(vp, "vp (H)", 1, 2, fname)
  check_tensor(lengths, "lengths (B)", nil, 2, fname)
  local H = vp.shape[1]
  local s = glimpse.linear(glimpse.linear(q, Wp):tanh(), vp:reshape(1, H)):sigmoid()
  return s:reshape(q.shape[1]) * lengths
end

--- attention.lengths(mask (B,L) or nil, B, L) -> (B) tensor of row lengths
function M.lengths(mask, B, L)
  mask = as_tensor(mask, "attention.lengths")
  if mask and mask:dim() ~= 2 then
    error("attention.lengths: mask must be (B,L), got shape [" .. table.concat(mask.shape, ",")
          .. "]", 2)
  end
  if not mask then
    if math.type(B) ~= "integer" or B < 0 or type(L) ~= "number" then
      error("attention.lengths: without a mask, B (an integer) and L (a number) are needed", 2)
    end
    return glimpse.full({B}, L)
  end
  return glimpse.no_grad(function() return mask:detach():sum(2) end)
end

-- ---------------------------------------------------------------------------------------
-- location-aware attention (Chorowski et al. 2015): f = F * alpha_{t-1}

--- attention.location_features(prev (B,L), F (K,R), R odd) -> f (B,L,K)
-- f_blk = sum_r F_kr prev_b(l + r - (R+1)/2), zero outside 1..L: K learned 1-D filters of
-- width R over the previous step's alignment.  Add U f (B,L,H) inside the additive score
-- (step's opts.extra).
function M.location_features(prev, F)
  check_tensor(prev, "previous alignment", 2, 2)
  check_tensor(F, "filters", 2, 2)
  local B, L, R = prev.shape[1], prev.shape[2], F.shape[2]
  if R % 2 == 0 then error("attention.location_features: filter width must be odd, got " .. R, 2) end
  local h = (R - 1) // 2
  local padded = prev
  if h > 0 then
    local z = glimpse.zeros(B, h)
    padded = glimpse.cat({z, prev, z}, 2)
  end
  local cols = {}
  for r = 1, R do cols[r] = padded:narrow(2, r, L) end
  return glimpse.linear(glimpse.stack(cols, 3), F)
end

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
    error(string.format("attention.conv_features: F1 {%s} does not fit keys of width %d",
                        table.concat(F1.shape, ","), keys.shape[3]), 2)
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
    error(string.format("%s: features {%s}, query {%s}, Wq {%s} and F2 {%s} do not fit "
                        .. "(f (B,L,H), q (B,Dq), Wq (H,Dq), F2 (1,R*H) with R odd)", fname,
                        table.concat(f.shape, ","), table.concat(q.shape, ","),
                        table.concat(Wq.shape, ","), table.concat(F2.shape, ",")), 2)
  end
  local g = f * named(fname, glimpse.linear, q, Wq):reshape(B, 1, H)
  return named(fname, glimpse.linear, M.unfold(g, R), F2):reshape(B, L)
end

-- ---------------------------------------------------------------------------------------
-- monotonic attention (Raffel et al. 2017)

--- attention.monotonic(e (B,L), prev (B,L), mask (B,L) or nil) -> alpha (B,L)
-- The expected alignment of the hard monotonic process: p_ij = sigmoid(e_ij) is the
-- probability of stopping at j; alpha_ij = p_ij q_ij with
-- q_ij = (1 - p_i,j-1) q_i,j-1 + alpha_i-1,j, i.e. q_ij = sum_k<=j alpha_i-1,k prod_k<=m<j (1 - p_im).
-- The products are computed as exp of differences of an exclusive cumulative sum of
-- log(1 - p) = -softplus(e), masked to k <= j before the exp: no division and no overflow
-- (the paper's cumprod form divides by cumprod(1 - p), which underflows).  Rows of alpha sum
-- to at most 1 (the rest is the probability of attending nowhere).  Differentiable in e and prev.
function M.monotonic(e, prev, mask)
  check_tensor(e, "energies", 2, 2)
  check_tensor(prev, "previous alignment", 2, 2)
  local B, L = e.shape[1], e.shape[2]
  if prev.shape[1] ~= B or prev.shape[2] ~= L then
    error(string.format("attention.monotonic: energies {%d,%d} and previous alignment {%s} differ",
                        B, L, table.concat(prev.shape, ",")), 2)
  end
  mask = as_tensor(mask)
  local p = e:sigmoid()
  if mask then p = p * mask end
  local lq = -e:softplus()                                   -- log(1 - p)
  local tri, strict = M._triangles(L)
  local c = lq:matmul(strict)                                -- c_j = sum_m<j log(1 - p_m)
  local d = c:reshape(B, 1, L) - c:reshape(B, L, 1)          -- d_kj = c_j - c_k
  local prod = (d * tri):exp() * tri                         -- prod_k<=m<j (1 - p_m), k <= j
  local q = prev:reshape(B, 1, L):matmul(prod):reshape(B, L)
  return p * q
end

-- (L,L) upper triangles: tri_kj = 1 for k <= j, strict_mj = 1 for m < j (cached per L)
local triangles = {}
function M._triangles(L)
  local t = triangles[L]
  if not t then
    local a, b = {}, {}
    for k = 1, L do
      a[k], b[k] = {}, {}
      for j = 1, L do a[k][j], b[k][j] = k <= j and 1 or 0, k < j and 1 or 0 end
    end
    t = {glimpse.tensor(a), glimpse.tensor(b)}
    triangles[L] = t
  end
  return t[1], t[2]
end

--- attention.monotonic_hard(e (B,L), pos (B) 1-based start positions, lengths (B)) ->
---   alpha (B,L) one-hot or zero rows, new positions (B)
-- Test-time decoding: from each row's last attended position scan forward and attend the
-- first j with sigmoid(e_j) >= 0.5; a row that finds none attends nowhere (alpha 0) and
-- keeps its position.  No gradient.
function M.monotonic_hard(e, pos, lengths)
  local fname = "attention.monotonic_hard"
  check_tensor(e, "energies", 2, 2, fname)
  local B, L = e.shape[1], e.shape[2]
  local ev = e:detach():totable()
  local pv = glimpse.is_tensor(pos) and pos:totable() or pos
  local lv = glimpse.is_tensor(lengths) and lengths:totable() or lengths
  for _, what in ipairs({"pos", "lengths"}) do
    local v = what == "pos" and pv or lv
    if v ~= nil or what == "pos" then
      if type(v) ~= "table" or #v ~= B then
        error(string.format("%s: %s must be a tensor or table of %d positions (energies {%s})",
                            fname, what, B, table.concat(e.shape, ",")), 2)
      end
      for b = 1, B do
        if type(v[b]) ~= "number" or v[b] ~= v[b] or v[b] < 1 or v[b] > L then
          error(string.format("%s: %s[%d] must be a position in 1..%d, got %s", fname, what, b,
                              L, tostring(v[b])), 2)
        end
      end
    end
  end
  local rows, newpos = {}, {}
  for b = 1, B do
    local r = {}
    for j = 1, L do r[j] = 0 end
    local start, stop = math.tointeger(pv[b]) or math.floor(pv[b]), lv and lv[b] or L
    newpos[b] = start
    for j = start, stop do
      if ev[b][j] >= 0 then r[j], newpos[b] = 1, j break end   -- sigmoid(e) >= 0.5
    end
    rows[b] = r
  end
  return glimpse.tensor(rows), glimpse.tensor(newpos)
end

-- ---------------------------------------------------------------------------------------
-- hard attention and REINFORCE (Xu et al. 2015, section 4.1)

--- attention.entropy(alpha (B,L)) -> H (B) = -sum_l alpha_l log alpha_l (differentiable)
function M.entropy(alpha)
  check_tensor(alpha, "alpha (B,L)", 2, 2, "attention.entropy")
  return -(alpha * (alpha + LOG_EPS):log()):sum(2)
end

--- attention.sample(alpha (B,L), values (B,L,Dv), opts) -> ctx (B,Dv), idx (B,1), logp (B), H (B)
-- Draws s_b ~ Multinoulli(alpha_b) (opts.greedy: the argmax) and returns the sampled
-- annotation values_(b,s_b), the 1-based positions, log alpha_(b,s_b) (differentiable: the
-- REINFORCE term's d log p(s)) and the entropy of alpha (for the entropy bonus).
function M.sample(alpha, values, opts)
  check_tensor(alpha, "alpha", 2, 2, "attention.sample")
  check_tensor(values, "values (B,L,Dv)", 3, 2, "attention.sample")
  check_opts(opts, "attention.sample", 2)
  local B, Dv = alpha.shape[1], values.shape[3]
  local idx = glimpse.no_grad(function()
    local a = alpha:detach()
    if opts and opts.greedy then return a:argmax(2):reshape(B, 1) end
    return a:multinomial(1)
  end)
  local logp = (alpha:gather(2, idx) + LOG_EPS):log():reshape(B)
  return M.read(values, idx), idx, logp, M.entropy(alpha)
end

--- attention.read(values (B,L,Dv), idx (B,1)) -> ctx (B,Dv): the annotation values_(b,idx_b)
-- of each row (1-based positions); differentiable in values.
function M.read(values, idx)
  check_tensor(values, "values (B,L,Dv)", 3, 2, "attention.read")
  check_tensor(idx, "idx (B,1)", 2, 2, "attention.read")
  local B, Dv = values.shape[1], values.shape[3]
  if idx.shape[1] ~= B or idx.shape[2] ~= 1 then
    error(string.format("attention.read: idx {%s} must be (B,1) with B = %d (values {%s})",
                        table.concat(idx.shape, ","), B, table.concat(values.shape, ",")), 2)
  end
  return values:gather(2, idx:reshape(B, 1, 1):expand(B, 1, Dv)):reshape(B, Dv)
end

--- attention.region_argmax(alpha (B,L), {grid = {h, w}, size = k, extra = 0}) -> idx (B,1)
-- Hard attention's test-time location read as the mode of the map smoothed over a region:
-- the cell at the centre of the k x k window (k odd, default 3) that holds the most
-- attention, windows clipped at the grid's edge.  An object covers several cells of a
-- grid, so its probability is spread over them; the single likeliest cell can belong to a
-- smaller, more peaked region, while the window finds where most of the mass lies.  grid
-- gives the (h, w) layout of the L positions, row-major (default {1, L}: a sequence, and
-- the window is k positions long).  k = 1 is the argmax.  extra = n: the last n of the L
-- positions are not on the grid (a whole-image cell, a sentinel); each competes with its own
-- weight against the windows' mass (the sum over the window), and the first L - n are the grid.
function M.region_argmax(alpha, opts)
  local fname = "attention.region_argmax"
  check_tensor(alpha, "alpha (B,L)", 2, 2, fname)
  check_opts(opts, fname, 2)
  local B, n = alpha.shape[1], alpha.shape[2]
  local extra = opts and opts.extra or 0
  if math.type(extra) ~= "integer" or extra < 0 or extra >= n then
    error(string.format("%s: extra must be an integer in [0, %d) (alpha {%d,%d}), got %s", fname,
                        n, B, n, tostring(extra)), 2)
  end
  local L = n - extra
  local grid = opts and opts.grid or {1, L}
  if type(grid) ~= "table" or math.type(grid[1]) ~= "integer" or math.type(grid[2]) ~= "integer"
     or grid[1] * grid[2] ~= L then
    error(string.format("%s: grid must be {h, w} with h * w = L = %d (alpha {%d,%d}%s), got %s",
                        fname, L, B, n, extra > 0 and string.format(", %d extra", extra) or "",
                        type(grid) == "table" and
                        "{" .. tostring(grid[1]) .. "," .. tostring(grid[2]) .. "}" or tostring(grid)), 2)
  end
  local k = opts and opts.size or 3
  if math.type(k) ~= "integer" or k < 1 or k % 2 == 0 then
    error(string.format("%s: size must be a positive odd integer, got %s", fname, tostring(k)), 2)
  end
  return glimpse.no_grad(function()
    local a = alpha:detach()
    local cells = extra > 0 and a:narrow(2, 1, L) or a
    if k > 1 then   -- the window's mass (its mean times k^2, zeros outside the grid)
      cells = glimpse.avg_pool2d(cells:reshape(B, 1, grid[1], grid[2]), k, 1, k // 2):reshape(B, L)
      if extra > 0 then cells = cells * (k * k) end
    end
    if extra > 0 then cells = glimpse.cat({cells, a:narrow(2, L + 1, extra)}, 2) end
    return cells:argmax(2):reshape(B, 1)
  end)
end

--- attention.gumbel_sample(alpha (B,L), values (B,L,Dv), tau) -> ctx (B,Dv), idx (B,1)
-- Straight-through Gumbel-softmax (Jang et al. 2017; Maddison et al. 2017): the forward
-- pass reads one annotation, s_b = argmax_l (log alpha_bl + g_bl) with g ~ Gumbel(0,1) (a
-- draw from Multinoulli(alpha_b)); the backward pass differentiates the relaxed weights
-- y = softmax((log alpha + g) / tau) in its place, so no REINFORCE term is needed.
function M.gumbel_sample(alpha, values, tau)
  local fname = "attention.gumbel_sample"
  check_tensor(alpha, "alpha", 2, 2, fname)
  check_tensor(values, "values (B,L,Dv)", 3, 2, fname)
  local B, L, Dv = alpha.shape[1], alpha.shape[2], values.shape[3]
  if values.shape[1] ~= B or values.shape[2] ~= L then
    error(string.format("%s: alpha {%d,%d} and values {%s} must agree on B and L", fname, B, L,
                        table.concat(values.shape, ",")), 2)
  end
  if tau ~= nil and (type(tau) ~= "number" or not (tau > 0)) then
    error(string.format("%s: tau must be a positive number, got %s", fname, tostring(tau)), 2)
  end
  local g = -(-(glimpse.rand(B, L) + LOG_EPS):log() + LOG_EPS):log()
  local y = glimpse.softmax(((alpha + LOG_EPS):log() + g) / (tau or 1), 2)
  local idx = y:detach():argmax(2):reshape(B, 1)
  local onehot = glimpse.zeros(B, L):scatter_add(2, idx, glimpse.ones(B, 1))
  local w = onehot + y - y:detach()                    -- value: one-hot; gradient: y's
  return w:reshape(B, 1, L):matmul(values):reshape(B, Dv), idx
end

local Baseline = {}
Baseline.__index = Baseline

--- attention.baseline(decay) -> a moving-average baseline b <- decay b + (1 - decay) r.
-- b.value is nil until the first update, which sets it to the first mean reward.
function M.baseline(decay)
  decay = decay or 0.9
  if type(decay) ~= "number" or not (decay >= 0 and decay < 1) then error("attention.baseline: decay must be in [0,1)", 2) end
  return setmetatable({decay = decay, value = nil}, Baseline)
end

--- b:update(r) with r a number (the mean reward of a batch); returns the new value.
function Baseline:update(r)
  if self.value == nil then self.value = r
  else self.value = self.decay * self.value + (1 - self.decay) * r end
  return self.value
end

--- attention.reinforce_loss(reward (B), logp (B), opts) -> surrogate loss (scalar), info
-- The REINFORCE surrogate whose gradient is the score-function estimate of
-- -d E[reward] / d theta:
--   loss = -reward_weight * mean_b((r_b - b) logp_b) - entropy_weight * mean_b(H_b)
-- reward is treated as a constant (detached); logp is the summed log-probability of the
-- sampled positions (attention.sample's logp, summed over steps).  opts:
--   baseline        an attention.baseline (updated with mean(r) after use), a number, a
--                   tensor (B) of per-sample baselines (e.g. leave-one-out), or nil (0)
--   entropy (B)     entropies to reward (an entropy bonus), with entropy_weight (default 0)
--   reward_weight   lambda_r (default 1)
-- For Show, Attend and Tell: reward = log p(y | s, a) per sequence (i.e. -nll:detach()), and
-- the total loss is mean(nll) + this surrogate.  info = {baseline = b used, advantage}.
function M.reinforce_loss(reward, logp, opts)
  opts = check_opts(opts, "attention.reinforce_loss", 2) or {}
  check_tensor(reward, "reward", nil, 2, "attention.reinforce_loss")
  check_tensor(logp, "logp", nil, 2, "attention.reinforce_loss")
  if reward:numel() ~= logp:numel() then
    error(string.format("attention.reinforce_loss: reward [%s] and logp [%s] need the same "
                        .. "number of elements", table.concat(reward.shape, ","),
                        table.concat(logp.shape, ",")), 2)
  end
  local r = reward:detach():reshape(logp:numel())
  local bl = opts.baseline
  local b = 0
  if type(bl) == "number" then b = bl
  elseif glimpse.is_tensor(bl) then b = bl:detach():reshape(logp:numel())
  elseif type(bl) == "table" then b = bl.value or r:mean():item() end
  local adv = r - b
  local loss = (adv * logp:reshape(logp:numel())):mean() * -(opts.reward_weight or 1)
  if opts.entropy and (opts.entropy_weight or 0) ~= 0 then
    loss = loss - opts.entropy:mean() * opts.entropy_weight
  end
  if type(bl) == "table" then bl:update(r:mean():item()) end
  return loss, {baseline = glimpse.is_tensor(b) and b:mean():item() or b, advantage = adv}
end

--- attention.leave_one_out(reward (B,K)) -> baseline (B,K): for sample k of row b the mean
-- reward of the row's other K-1 samples (K >= 2), the multi-sample baseline of VIMCO (Mnih
-- and Rezende 2016) and of REINFORCE with K samples (Kool et al. 2019): it depends on the
-- input but not on the sample it is compared with, so the estimate stays unbiased.
function M.leave_one_out(reward)
  check_tensor(reward, "reward (B,K)", 2, 2, "attention.leave_one_out")
  local K = reward.shape[2]
  if K < 2 then error("attention.leave_one_out: needs K >= 2 samples per row, got " .. K, 2) end
  local r = reward:detach()
  return (r:sum(2, true) - r) / (K - 1)
end

-- ---------------------------------------------------------------------------------------
-- regularisers

local function stack_alphas(alphas, fname, opts)
  if opts ~= nil and type(opts) ~= "table" then
    error(string.format("%s: opts must be a table or nil, got %s", fname, type(opts)), 3)
  end
  if glimpse.is_tensor(alphas) and alphas:dim() == 3 then return alphas end
  if type(alphas) ~= "table" or glimpse.is_tensor(alphas) or #alphas == 0 then
    error(string.format("%s: alphas must be a (B,T,L) tensor or a non-empty list of (B,L) "
                        .. "tensors, got %s", fname, glimpse.is_tensor(alphas) and
                        ("shape [" .. table.concat(alphas.shape, ",") .. "]") or type(alphas)), 3)
  end
  return named(fname, glimpse.stack, alphas, 2)   -- list of T (B,L) -> (B,T,L)
end

--- attention.doubly_stochastic(alphas, opts) -> scalar
-- Xu et al.'s penalty sum_i (target - sum_t alpha_ti)^2, averaged over the batch.
-- alphas: (B,T,L) or a list of T (B,L).  opts.mask (B,L): source positions that count;
-- opts.tgt_mask (B,T): target steps that count; opts.target (default 1); opts.weight
-- (lambda, default 1).
function M.doubly_stochastic(alphas, opts)
  opts = opts or {}
  local a = stack_alphas(alphas, "attention.doubly_stochastic", opts)
  local B, T, L = a.shape[1], a.shape[2], a.shape[3]
  local tm = as_tensor(opts.tgt_mask)
  if tm then a = a * tm:reshape(B, T, 1) end
  local d = (a:sum(2) - (opts.target or 1))   -- (B,L)
  d = d * d
  local m = as_tensor(opts.mask)
  if m then d = d * m end
  return d:sum() * ((opts.weight or 1) / B)
end

--- attention.coverage(alphas) -> (B,T,L): c_t = sum_{t' < t} alpha_t' (zeros at t = 1)
function M.coverage(alphas)
  local a = stack_alphas(alphas, "attention.coverage", nil)
  local B, T, L = a.shape[1], a.shape[2], a.shape[3]
  local covs, c = {}, glimpse.zeros(B, L)
  for t = 1, T do
    covs[t] = c
    c = c + a:select(2, t)
  end
  return glimpse.stack(covs, 2)
end

--- attention.coverage_penalty(alphas, opts) -> scalar
-- See et al. 2017: sum_t sum_l min(alpha_tl, c_tl) with c the coverage, averaged over the
-- batch; opts.tgt_mask (B,T) drops padded steps, opts.weight scales it.
function M.coverage_penalty(alphas, opts)
  opts = opts or {}
  local a = stack_alphas(alphas, "attention.coverage_penalty", opts)
  local B, T = a.shape[1], a.shape[2]
  local tm = as_tensor(opts.tgt_mask)
  if tm then a = a * tm:reshape(B, T, 1) end
  return a:minimum(M.coverage(a)):sum() * ((opts.weight or 1) / B)
end

-- ---------------------------------------------------------------------------------------
-- multi-head attention (Vaswani et al. 2017) with PyTorch's parameter layout

--- attention.multi_head(query (B,Tq,d), key (B,Tk,d), value (B,Tk,d), p, opts)
---   -> out (B,Tq,d), weights (B,Tq,Tk) averaged over heads (nil when opts.need_weights is false)
-- p: heads, in_proj_weight (3d,d), in_proj_bias (3d) or nil, out_weight (d,d), out_bias (d)
-- or nil.  opts: mask (B,Tk) key padding (1 = attend), causal (query i sees keys j <= i),
-- dropout (on the attention weights) and training, need_weights (default true; false skips
-- averaging the weights, as PyTorch's need_weights=False), fused (default true: self-attention
-- without dropout runs as one fused op; false forces the general path, which computes the same).
-- key/value nil: self-attention.
function M.multi_head(query, key, value, p, opts)
  opts = check_opts(opts, "attention.multi_head", 2) or {}
  check_tensor(query, "query", 3, 2, "attention.multi_head")
  key = key or query
  value = value or key
  check_tensor(key, "key", 3, 2, "attention.multi_head")
  check_tensor(value, "value", 3, 2, "attention.multi_head")
  if type(p) ~= "table" or math.type(p.heads) ~= "integer" or p.heads < 1 then
    error("attention.multi_head: p must be a table of parameters with an integer heads >= 1, got "
          .. (type(p) == "table" and "heads " .. tostring(p.heads) or type(p)), 2)
  end
  local B, Tq, d = query.shape[1], query.shape[2], query.shape[3]
  local Tk = key.shape[2]
  local h = p.heads
  if d % h ~= 0 then error(string.format("attention.multi_head: width %d is not a multiple of %d heads", d, h), 2) end
  local dh = d // h
  local W, bias = p.in_proj_weight, p.in_proj_bias
  local dropping = (opts.dropout or 0) > 0 and opts.training
  if key == query and value == query and not dropping and opts.fused ~= false then
    -- self-attention without dropout: one fused op reads every head in place from the packed
    -- projection and writes the merged context (no head split/merge copies, either way);
    -- opts.fused = false takes the general path below, the fused op's test oracle
    local qkv = glimpse.linear(query, W, bias)                      -- (B,T,3d)
    local ctx, P = C.mh_packed(qkv, as_tensor(opts.mask), h, opts.causal or false,
                               1 / math.sqrt(dh), opts.need_weights ~= false)
    local out = glimpse.linear(ctx, p.out_weight, p.out_bias)
    if opts.need_weights == false then return out, nil end
    return out, P:mean(2)
  end
  local q, k, v
  if key == query and value == query then
    -- one sgemm for q, k and v, then one copy that puts heads first for all three:
    -- (B,T,3,h,dh) -> (3,B,h,T,dh); select on the leading dim shares storage
    local qkv = glimpse.linear(query, W, bias):reshape(B, Tq, 3, h, dh):permute(3, 1, 4, 2, 5)
    q = qkv:select(1, 1):reshape(B * h, Tq, dh)
    k = qkv:select(1, 2):reshape(B * h, Tk, dh)
    v = qkv:select(1, 3):reshape(B * h, Tk, dh)
  else
    local function part(i, x, T)
      local y = glimpse.linear(x, W:narrow(1, i * d + 1, d), bias and bias:narrow(1, i * d + 1, d))
      return y:reshape(B, T, h, dh):permute(1, 3, 2, 4):reshape(B * h, T, dh)
    end
    q, k, v = part(0, query, Tq), part(1, key, Tk), part(2, value, Tk)
  end
  local P = C.mh_probs(q, k, as_tensor(opts.mask), h, opts.causal or false, 1 / math.sqrt(dh))
  local Pd = P
  if dropping then Pd = glimpse.dropout(P, opts.dropout, true) end
  local ctx = Pd:matmul(v):reshape(B, h, Tq, dh):permute(1, 3, 2, 4):reshape(B, Tq, d)
  local out = glimpse.linear(ctx, p.out_weight, p.out_bias)
  if opts.need_weights == false then return out, nil end
  return out, P:reshape(B, h, Tq, Tk):mean(2)
end

-- ---------------------------------------------------------------------------------------
-- pointer networks (Vinyals et al. 2015)

--- attention.pointer_logits(e (B,L), mask (B,L) or nil, chosen (B,L) or nil) -> logits (B,L)
-- Positions that are padding or already chosen get e - 1e9, so a softmax gives them exactly
-- 0 and argmax/multinomial never picks them; feed the logits to glimpse.cross_entropy.
function M.pointer_logits(e, mask, chosen)
  local fname = "attention.pointer_logits"
  check_tensor(e, "e (B,L)", 2, 2, fname)
  mask, chosen = as_tensor(mask, fname), as_tensor(chosen, fname)
  if not mask and not chosen then return e end
  local valid = mask or 1
  if chosen then valid = named(fname, glimpse.mul, chosen * -1 + 1, valid) end
  return named(fname, glimpse.add, e, (valid - 1) * NEG_BIG)
end

-- ---------------------------------------------------------------------------------------
-- Neural Turing Machine addressing (Graves et al. 2014, section 3)

local ntm = {}
M.ntm = ntm

--- ntm.content(key (B,D), memory (B,N,D), beta (B) tensor or number) -> w^c (B,N)
-- w^c_i = softmax_i(beta K[key, M_i]), K the cosine similarity (eq. 5-6).
function ntm.content(key, memory, beta)
  return glimpse.softmax(M.cosine_scores(key, memory, beta), 2)
end

--- ntm.interpolate(wc (B,N), w_prev (B,N), g (B) or (B,1) in [0,1]) -> g wc + (1 - g) w_prev
function ntm.interpolate(wc, w_prev, g)
  check_tensor(wc, "wc (B,N)", 2, 2, "attention.ntm.interpolate")
  check_tensor(w_prev, "w_prev (B,N)", 2, 2, "attention.ntm.interpolate")
  if type(g) ~= "number" then check_tensor(g, "g (B) or a number", nil, 2, "attention.ntm.interpolate") end
  if type(g) ~= "number" then g = g:reshape(wc.shape[1], 1) end
  return wc * g + w_prev * (1 - g)
end

--- ntm.shift(w (B,N), s (B,2K+1)) -> w~ (B,N), w~_i = sum_j w_j s(i - j mod N) (eq. 8)
-- s's entries are the weights of shifts -K..K; a one-hot s at +1 moves w up one slot.
function ntm.shift(w, s) return C.circular_shift(w, s) end

--- ntm.sharpen(w (B,N), gamma (B) tensor or number >= 1) -> w^gamma / sum w^gamma (eq. 9)
ntm.sharpen = M.sharpen

--- ntm.address(p, memory, w_prev) -> w (B,N): content, interpolation, shift, sharpening
-- p = {key (B,D), beta (B), g (B), s (B,S), gamma (B)}, usually produced by the controller.
function ntm.address(p, memory, w_prev)
  if type(p) ~= "table" then
    error("attention.ntm.address: p must be a table {key, beta, g, s, gamma}, got " .. type(p), 2)
  end
  local w = ntm.content(p.key, memory, p.beta)
  if w_prev then w = ntm.interpolate(w, w_prev, p.g) end
  if p.s then w = ntm.shift(w, p.s) end
  if p.gamma then w = ntm.sharpen(w, p.gamma) end
  return w
end

--- ntm.read(w (B,N), memory (B,N,D)) -> r (B,D) = sum_i w_i M_i (eq. 2)
ntm.read = M.context

--- ntm.write(memory (B,N,D), w (B,N), erase (B,D) in [0,1], add (B,D)) -> memory' (B,N,D)
-- M~_i = M_i * (1 - w_i e) (eq. 3), M'_i = M~_i + w_i a (eq. 4).
function ntm.write(memory, w, erase, add)
  check_tensor(memory, "memory (B,N,D)", 3, 2, "attention.ntm.write")
  check_tensor(w, "w (B,N)", 2, 2, "attention.ntm.write")
  if erase ~= nil then check_tensor(erase, "erase (B,D)", 2, 2, "attention.ntm.write") end
  if add ~= nil then check_tensor(add, "add (B,D)", 2, 2, "attention.ntm.write") end
  local B, N, D = memory.shape[1], memory.shape[2], memory.shape[3]
  local wc = w:reshape(B, N, 1)
  local m = memory
  if erase then m = m * (1 - wc * erase:reshape(B, 1, D)) end
  if add then m = m + wc * add:reshape(B, 1, D) end
  return m
end

return M
