--- glimpse.attention.modes -- where attention may look: local windows (Luong et al. 2015,
-- sec. 3.2: local-m and local-p), location-aware features of the previous alignment
-- (Chorowski et al. 2015) and monotonic attention (Raffel et al. 2017).
--
--   local prior, window = attention.local_prior(t, B, L, 10, mask)   -- then step's opts.prior
--   local alpha = attention.monotonic(e, prev, mask)                 -- the expected alignment
local glimpse = require "glimpse"
local check = require "glimpse.check"
local args = require "glimpse.attention.args"

local as_tensor, check_tensor = args.as_tensor, args.check_tensor

local M = {}

--- The modes of nn.Attention.
M.MODES = {"soft", "hard", "local-m", "local-p", "location", "monotonic"}

-- ---------------------------------------------------------------------------------------
-- local attention (Luong et al. 2015, section 3.2)

--- attention.local_prior(pos, B, L, D, mask) -> prior (B,L), window_mask (B,L)
-- pos: the window centre p_t, a number (local-m: p_t = t) or a (B) tensor (local-p, may
-- require grad); positions are 1..L.  prior_bl = exp(-(l - p_b)^2 / (2 sigma^2)),
-- sigma = D/2; window_mask is 1 where |l - p_b| <= D (and mask is 1).  Pass both to a
-- step (opts.prior, and the window mask as its mask) and weights outside the window are 0.
function M.local_prior(pos, B, L, D, mask)
  if type(D) ~= "number" or D <= 0 then
    error("attention.local_prior: D must be a positive number", 2)
  end
  if type(pos) ~= "number" then
    check_tensor(pos, "pos (a number or a (B) tensor)", nil, 2, "attention.local_prior")
  end
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
    check.fail(2, "attention.lengths: mask must be (B,L), got shape %s", check.shape(mask))
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
  if R % 2 == 0 then
    error("attention.location_features: filter width must be odd, got " .. R, 2)
  end
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
    check.fail(2, "attention.monotonic: energies %s and previous alignment %s differ",
               check.shape(e), check.shape(prev))
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
        check.fail(2, "%s: %s must be a tensor or table of %d positions (energies %s)", fname,
                   what, B, check.shape(e))
      end
      for b = 1, B do
        if type(v[b]) ~= "number" or v[b] ~= v[b] or v[b] < 1 or v[b] > L then
          check.fail(2, "%s: %s[%d] must be a position in 1..%d, got %s", fname, what, b, L,
                     tostring(v[b]))
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

return M
