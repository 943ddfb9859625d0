--- glimpse.attention.positions -- position schemes that act inside attention, on plain
-- tensors, callable on their own (a key/value cache calls them with its own offsets):
--
--   rope(x, start, base)           rotary embeddings (Su et al. 2021, RoFormer), rotate-half
--   alibi_slopes(heads)            ALiBi's head slopes (Press et al. 2022, sec. 3)
--   alibi_bias(heads, Tq, Tk, q_start, k_start) -> (1,heads,Tq,Tk)
--   t5_bucket(rel, bidirectional, num_buckets, max_distance) -> 0-based bucket
--   t5_bias(table (buckets,heads), Tq, Tk, q_start, k_start, bidirectional, ...) -> (1,h,Tq,Tk)
--   visibility(Tq, Tk, {causal=, window=, q_start=, k_start=}) -> (Tq,Tk) 0/1 or nil
--
-- Positions are 0-based integers: query row i (1-based in the tensor) sits at position
-- q_start + i - 1 and key row j at k_start + j - 1.  A cache that attends one new row at
-- position t over t+1 cached keys passes Tq = 1, q_start = t, k_start = 0.
local glimpse = require "glimpse"
local check = require "glimpse.check"

local M = {}

-- constant tables (cos/sin, biases' distance patterns, masks) are small and made in Lua;
-- the last few are kept so a training loop does not rebuild them every step
local CACHE_MAX = 64
local cache, cache_n = {}, 0

local function cached(key, make)
  local t = cache[key]
  if t then return t end
  if cache_n >= CACHE_MAX then cache, cache_n = {}, 0 end
  t = make()
  cache[key], cache_n = t, cache_n + 1
  return t
end

local function check_start(fn, what, v, level)
  if math.type(v) ~= "integer" or v < 0 then
    check.fail(level + 1, "%s: %s must be an integer >= 0, got %s", fn, what, tostring(v))
  end
end

-- ---------------------------------------------------------------------------------------
-- rotary embeddings (RoFormer, eq. 34): the pair (x_a, x_b) of a head's vector at position m
-- turns by the angle m * theta_a, theta_a = base^(-2a/dh), a = 0 .. dh/2-1.  glimpse pairs
-- column a with column a + dh/2 ("rotate half", GPT-NeoX/LLaMA's layout, not the
-- interleaved (2a, 2a+1) of the paper): x' = x * cos + rotate_half(x) * sin with
-- rotate_half(x) = [-x_second_half, x_first_half] and cos/sin (T,dh) = [cos m theta, cos m theta].
-- q_m . k_n then depends on m - n only (the relative property the scheme exists for).

local function rope_tables(T, dh, start, base)
  return cached(string.format("rope %d %d %d %.17g", T, dh, start, base), function()
    local half = dh // 2
    local cs, sn = {}, {}
    for i = 1, T do
      local m = start + i - 1
      local rc, rs = {}, {}
      for a = 0, half - 1 do
        local angle = m * base ^ (-2 * a / dh)
        rc[a + 1], rc[a + 1 + half] = math.cos(angle), math.cos(angle)
        rs[a + 1], rs[a + 1 + half] = math.sin(angle), math.sin(angle)
      end
      cs[i], sn[i] = rc, rs
    end
    return {glimpse.tensor(cs), glimpse.tensor(sn)}
  end)
end

--- positions.rope(x (..., T, dh), start=0, base=10000) -> x rotated (same shape):
--- row i of the T rows (1-based) is the vector at position start + i - 1; dh must be even.
--- Differentiable in x.  Apply it to queries and keys (not values), per head.
function M.rope(x, start, base)
  local fn = "attention.positions.rope"
  if not glimpse.is_tensor(x) or x:dim() < 2 then
    check.fail(2, "%s: x must be a tensor (..., T, dh), got %s", fn, check.shape(x))
  end
  start, base = start or 0, base or 10000
  check_start(fn, "start", start, 2)
  if type(base) ~= "number" or base <= 1 then
    check.fail(2, "%s: base must be a number > 1, got %s", fn, tostring(base))
  end
  local nd = x:dim()
  local T, dh = x.shape[nd - 1], x.shape[nd]
  if dh % 2 ~= 0 then
    check.fail(2, "%s: the head width must be even, got x %s", fn, check.shape(x))
  end
  local tabs = rope_tables(T, dh, start, base)
  local half = dh // 2
  local rot = glimpse.cat({-x:narrow(nd, half + 1, half), x:narrow(nd, 1, half)}, nd)
  return x * tabs[1] + rot * tabs[2]
end

-- ---------------------------------------------------------------------------------------
-- ALiBi (Press et al. 2022): score_ij += -m_h * (i - j), with the head slopes m_h a geometric
-- sequence starting at 2^(-8/n) with that ratio; for n not a power of two, the slopes of the
-- closest power of two below n, then every other slope of the sequence for twice that power
-- (the paper's rule, its reference code's get_slopes).

local function pow2_slopes(n)
  local start = 2 ^ (-8 / n)
  local s = {}
  for i = 1, n do s[i] = start ^ i end
  return s
end

--- positions.alibi_slopes(heads) -> a Lua table of the heads' slopes (head 1 first)
function M.alibi_slopes(n)
  check.int("attention.positions.alibi_slopes", "heads", n, 1, nil, 2)
  local p = 2 ^ math.floor(math.log(n, 2))
  if p == n then return pow2_slopes(n) end
  local s = pow2_slopes(math.tointeger(p))
  local extra = pow2_slopes(math.tointeger(2 * p))
  for i = 1, n - p do s[#s + 1] = extra[2 * i - 1] end
  return s
end

--- positions.alibi_bias(heads, Tq, Tk, q_start=0, k_start=0) -> (1,heads,Tq,Tk):
--- -m_h * |(q_start + i) - (k_start + j)|.  Under a causal mask the visible keys have
--- j <= i, where this is the paper's -m_h (i - j); without one (an encoder's self-attention)
--- the distance is symmetric, |i - j|.
function M.alibi_bias(h, Tq, Tk, q_start, k_start)
  local fn = "attention.positions.alibi_bias"
  check.int(fn, "heads", h, 1, nil, 2)
  check.int(fn, "Tq", Tq, 1, nil, 2)
  check.int(fn, "Tk", Tk, 1, nil, 2)
  q_start, k_start = q_start or 0, k_start or 0
  check_start(fn, "q_start", q_start, 2)
  check_start(fn, "k_start", k_start, 2)
  return cached(string.format("alibi %d %d %d %d %d", h, Tq, Tk, q_start, k_start), function()
    local slopes = M.alibi_slopes(h)
    local rows = {}
    for hh = 1, h do
      local plane = {}
      for i = 1, Tq do
        local r = {}
        for j = 1, Tk do r[j] = -slopes[hh] * math.abs((q_start + i) - (k_start + j)) end
        plane[i] = r
      end
      rows[hh] = plane
    end
    return glimpse.tensor(rows):reshape(1, h, Tq, Tk)
  end)
end

-- ---------------------------------------------------------------------------------------
-- T5's relative position bias (Raffel et al. 2020, sec. 2.1; the reference code's
-- _relative_position_bucket): rel = key position - query position; bidirectional (an
-- encoder) gives half the buckets to rel > 0; unidirectional (causal) sees only rel <= 0.
-- Half of the remaining buckets are exact distances, the rest grow logarithmically up to
-- max_distance, past which all share the last bucket.  Computed in double precision.

--- positions.t5_bucket(rel, bidirectional, num_buckets=32, max_distance=128) -> 0-based bucket
function M.t5_bucket(rel, bidirectional, num_buckets, max_distance)
  num_buckets, max_distance = num_buckets or 32, max_distance or 128
  local bucket = 0
  local n = rel
  if bidirectional then
    num_buckets = num_buckets // 2
    if n > 0 then bucket = num_buckets end
    n = math.abs(n)
  else
    n = -math.min(n, 0)
  end
  local max_exact = num_buckets // 2
  if n < max_exact then return bucket + n end
  local large = max_exact + math.floor(math.log(n / max_exact) / math.log(max_distance / max_exact)
                                       * (num_buckets - max_exact))
  return bucket + math.min(math.tointeger(large), num_buckets - 1)
end

local function t5_index(Tq, Tk, q_start, k_start, bidirectional, nb, md)
  local key = string.format("t5 %d %d %d %d %s %d %d", Tq, Tk, q_start, k_start,
                            tostring(bidirectional), nb, md)
  return cached(key, function()
    local idx = {}
    for i = 1, Tq do
      for j = 1, Tk do
        idx[#idx + 1] = M.t5_bucket((k_start + j) - (q_start + i), bidirectional, nb, md) + 1
      end
    end
    return glimpse.tensor(idx)
  end)
end

--- positions.t5_bias(table (num_buckets,heads), Tq, Tk, q_start=0, k_start=0,
---   bidirectional=true, max_distance=128) -> (1,heads,Tq,Tk): table[bucket(k - q), h],
--- differentiable in the table (num_buckets is the table's row count).
function M.t5_bias(tab, Tq, Tk, q_start, k_start, bidirectional, max_distance)
  local fn = "attention.positions.t5_bias"
  if not glimpse.is_tensor(tab) or tab:dim() ~= 2 then
    check.fail(2, "%s: table must be a (num_buckets,heads) tensor, got %s", fn,
               check.shape(tab))
  end
  check.int(fn, "Tq", Tq, 1, nil, 2)
  check.int(fn, "Tk", Tk, 1, nil, 2)
  q_start, k_start = q_start or 0, k_start or 0
  check_start(fn, "q_start", q_start, 2)
  check_start(fn, "k_start", k_start, 2)
  if bidirectional == nil then bidirectional = true end
  local nb, h = tab.shape[1], tab.shape[2]
  local idx = t5_index(Tq, Tk, q_start, k_start, bidirectional, nb, max_distance or 128)
  return tab:index_select(1, idx):transpose(1, 2):reshape(1, h, Tq, Tk)
end

-- ---------------------------------------------------------------------------------------
-- which key each query may see, from positions alone

--- positions.visibility(Tq, Tk, {causal=false, window=nil, q_start=0, k_start=0})
---   -> (Tq,Tk) of 0/1, or nil when every key is visible.  With p = q_start + i - 1 and
---   s = k_start + j - 1: causal keeps s <= p; window w keeps |p - s| < w (causal: p - w < s <= p).
function M.visibility(Tq, Tk, o)
  local causal, window = o.causal or false, o.window
  local q_start, k_start = o.q_start or 0, o.k_start or 0
  if not causal and not window then return nil end
  local key = string.format("vis %d %d %s %s %d %d", Tq, Tk, tostring(causal),
                            tostring(window), q_start, k_start)
  return cached(key, function()
    local rows = {}
    for i = 1, Tq do
      local r, p = {}, q_start + i - 1
      for j = 1, Tk do
        local s = k_start + j - 1
        local ok = (not causal or s <= p) and (not window or math.abs(p - s) < window)
        r[j] = ok and 1 or 0
      end
      rows[i] = r
    end
    return glimpse.tensor(rows)
  end)
end

return M
