--- glimpse.attention.cache -- incremental (cached) multi-head attention for step-by-step
-- decoding, with the parameter layout of attention.multi_head (PyTorch's
-- nn.MultiheadAttention).  A decoder that emits one token per step keeps, per layer, the
-- keys and values of the positions it has already seen, so a step costs the new rows only:
--
--   local kv = attention.kv_project(memory, p)                  -- the memory, projected once
--   local out, w = attention.multi_head_cached(y_t, p, kv, {mask = src_mask})   -- cross
--   local out, _, cache = attention.multi_head_step(y_t, p, cache, {q_start = t - 1})  -- self
--
-- A cache is a table {k = (B,heads,C,dh), v = (B,heads,C,dh), len = T, start} whose rows
-- (dim 1) are the batch, so glimpse.decode's reordering (index_select on dim 1) keeps it
-- aligned with the surviving beams; positions 1..len of dim 3 are the cached keys and values
-- (len absent: all C).  Keys are cached after the projection (and after any transform that
-- depends on their position, which is applied once, when the key is made), so a step never
-- touches a past key again.  A step returns a new table and never changes what an earlier
-- cache holds: outside autograd (glimpse.no_grad, as decoding runs) the buffers have room
-- (their capacity C doubles when full) and a step writes its rows after the last cache's
-- len in place, so the newest cache of a buffer grows without copies; a step from an older
-- cache (a branch) copies its valid rows into new buffers first.  Under autograd a step
-- concatenates (C = len), so the gradient flows through the cache.  p is attention.multi_head's parameter table (heads,
-- in_proj_weight, in_proj_bias, out_weight, out_bias, module, or the separate projections
-- with kv_heads); under attention.capture each call files its per-head weights
-- (B,heads,Tq,Tk) under p.module, as attention.multi_head (linear attention has none).
--
-- The self-attention step takes attention.multi_head's position schemes and variants
-- (glimpse.attention.mh_variants): rope (queries and keys rotated at their positions, the
-- keys once, before they are cached), alibi and t5 (biases from the query and key positions),
-- grouped-query heads (p.kv_heads: the cache holds kv_heads heads), window (the cache keeps
-- only the last window - 1 keys, and cache.start is the position of its first), top_k, and
-- linear attention, whose cache is the running sums {s = sum phi(k) v^T (B,kv,dh,dh),
-- z = sum phi(k) (B,kv,1,dh), len}: a step costs the same at every length.
local glimpse = require "glimpse"
local check = require "glimpse.check"
local options = require "glimpse.options"
local args = require "glimpse.attention.args"
local capture = require "glimpse.attention.capture"
local positions = require "glimpse.attention.positions"
local variants = require "glimpse.attention.mh_variants"

local C = glimpse._attention
local as_tensor, check_tensor = args.as_tensor, args.check_tensor

local M = {}

local STEP_OPTIONS = options.declare("attention.multi_head_step", {
  {"q_start", "int", nil, range = {0},
   help = "0-based position of the first query (default: the cached length)"},
  {"mask", "tensor", nil, help = "(B,Tk) key padding over the cached and new keys (1 = attend)"},
  {"need_weights", "boolean", true, help = "return the weights averaged over heads"},
  {"dropout", "number", 0, range = {0, 1}, help = "dropout on the attention weights (training)"},
  {"training", "boolean", false, help = "apply the dropout"},
  {"positions", "string", "none", choices = variants.POSITIONS,
   help = "rope | alibi | t5 (bias table p.relative_attention_bias) | none"},
  {"rope_base", "number", 10000, range = {1}, finite = true, help = "RoPE's base (> 1)"},
  {"t5_max_distance", "int", 128, range = {1}, help = "T5: distances past this share a bucket"},
  {"window", "int", nil, range = {1}, help = "local attention: keys with p - s < window"},
  {"top_k", "int", nil, range = {1}, help = "keep the top_k scores of each query row"},
  {"attention", "string", "softmax", choices = variants.KINDS,
   help = "softmax | linear (Katharopoulos et al. 2020; the cache holds running sums)"},
})
local CACHED_OPTIONS = options.declare("attention.multi_head_cached", {
  {"mask", "tensor", nil, help = "(B,Tk) key padding (1 = attend, 0 = padding)"},
  {"need_weights", "boolean", true, help = "return the weights averaged over heads"},
  {"dropout", "number", 0, range = {0, 1}, help = "dropout on the attention weights (training)"},
  {"training", "boolean", false, help = "apply the dropout"},
})
M.step_options, M.cached_options = STEP_OPTIONS, CACHED_OPTIONS

-- heads, kv_heads, dh of p, checked: a packed in_proj_weight (3d,d) (kv_heads = heads) or
-- separate q_proj_weight (d,d), k_proj_weight and v_proj_weight (kv_heads*dh,d)
local function check_params(p, d, fname, level)
  if type(p) ~= "table" or math.type(p.heads) ~= "integer" or p.heads < 1 then
    check.fail(level + 1, "%s: p must be a table of parameters with an integer heads >= 1, " ..
               "got %s", fname, type(p) == "table" and "heads " .. tostring(p.heads) or type(p))
  end
  local h = p.heads
  if d % h ~= 0 then
    check.fail(level + 1, "%s: width %d is not a multiple of %d heads", fname, d, h)
  end
  local kv, dh = p.kv_heads or h, d // h
  if math.type(kv) ~= "integer" or kv < 1 or h % kv ~= 0 then
    check.fail(level + 1, "%s: kv_heads must be a positive integer dividing heads = %d, got %s",
               fname, h, tostring(kv))
  end
  local function want(name, rows)
    local w = p[name]
    if not glimpse.is_tensor(w) or w:dim() ~= 2 or w.shape[1] ~= rows or w.shape[2] ~= d then
      check.fail(level + 2, "%s: p.%s must be (%d,%d) (kv_heads = %d), got %s", fname, name,
                 rows, d, kv, check.shape(w))
    end
  end
  if p.in_proj_weight ~= nil and kv == h then
    want("in_proj_weight", 3 * d)
  else
    want("q_proj_weight", d)
    want("k_proj_weight", kv * dh)
    want("v_proj_weight", kv * dh)
  end
  return h, kv, dh
end

-- (B,T,n*dh) -> (B,n,T,dh); one row (T = 1) has the same layout either way
local function heads_first(y, B, T, n, dh)
  if T == 1 then return y:reshape(B, n, 1, dh) end
  return y:reshape(B, T, n, dh):permute(1, 3, 2, 4):reshape(B, n, T, dh)
end

local function packed(p, kv, h) return p.in_proj_weight ~= nil and kv == h end

-- rows i*d+1 .. (i+1)*d of the packed projection of x, or the separate one (i = 0: q, 1: k,
-- 2: v), heads first: (B,heads,T,dh) for q, (B,kv_heads,T,dh) for k and v
local function project(x, p, i, h, kv, dh)
  local B, T, d = x.shape[1], x.shape[2], x.shape[3]
  if packed(p, kv, h) then
    local W, bias = p.in_proj_weight, p.in_proj_bias
    local y = glimpse.linear(x, W:narrow(1, i * d + 1, d), bias and bias:narrow(1, i * d + 1, d))
    return heads_first(y, B, T, h, dh)
  end
  local name = ({[0] = "q", "k", "v"})[i]
  local y = glimpse.linear(x, p[name .. "_proj_weight"], p[name .. "_proj_bias"])
  return heads_first(y, B, T, i == 0 and h or kv, dh)
end

-- q, k, v of x (B,T,d): one product with a packed projection, else three
local function project_qkv(x, p, h, kv, dh)
  if not packed(p, kv, h) then
    return project(x, p, 0, h, kv, dh), project(x, p, 1, h, kv, dh), project(x, p, 2, h, kv, dh)
  end
  local B, T, d = x.shape[1], x.shape[2], x.shape[3]
  local qkv = glimpse.linear(x, p.in_proj_weight, p.in_proj_bias)          -- (B,T,3d)
  if T == 1 then
    local y = qkv:reshape(B, 3, d)
    return y:select(2, 1):reshape(B, h, 1, dh), y:select(2, 2):reshape(B, h, 1, dh),
           y:select(2, 3):reshape(B, h, 1, dh)
  end
  local y = qkv:reshape(B, T, 3, h, dh):permute(3, 1, 4, 2, 5)              -- (3,B,h,T,dh)
  return y:select(1, 1):reshape(B, h, T, dh), y:select(1, 2):reshape(B, h, T, dh),
         y:select(1, 3):reshape(B, h, T, dh)
end

-- the number of valid positions of kv (its len, else all of dim 3), checked
local function check_kv(kv, B, n, dh, what, fname, level)
  if type(kv) ~= "table" or not glimpse.is_tensor(kv.k) or not glimpse.is_tensor(kv.v) then
    check.fail(level + 1, "%s: %s must be a table {k = (B,heads,T,dh), v = ...}, got %s", fname,
               what, type(kv))
  end
  for _, name in ipairs({"k", "v"}) do
    local x = kv[name]
    local s = x.shape
    if x:dim() ~= 4 or s[1] ~= B or s[2] ~= n or s[4] ~= dh or s[3] ~= kv.k.shape[3] then
      check.fail(level + 1, "%s: %s.%s %s should be (B,heads,T,dh) = [%d,%d,T,%d]", fname, what,
                 name, check.shape(x), B, n, dh)
    end
  end
  local len = kv.len
  if len ~= nil and (math.type(len) ~= "integer" or len < 0 or len > kv.k.shape[3]) then
    check.fail(level + 1, "%s: %s.len must be an integer in [0, %d] (the valid positions of " ..
               "its k and v), got %s", fname, what, kv.k.shape[3], tostring(len))
  end
  return len or kv.k.shape[3]
end

-- the first T positions of a cache's k and v as tensors of their own (a copy when the
-- buffers have room past them)
local function valid_kv(kv, T)
  if kv.k.shape[3] == T then return kv.k, kv.v end
  return kv.k:narrow(3, 1, T), kv.v:narrow(3, 1, T)
end

-- the top_k rows' keep mask, as attention.multi_head's top_k
local top_k_keep = variants.top_k_keep

local finish                 -- (below) the heads merged and projected, the averaged weights
local step_in_buffers        -- (below) a decoding step outside autograd

-- q (B,h,Tq,dh) over k, v (B,kv,Tk,dh): out (B,Tq,d), weights (B,Tq,Tk) or nil; under
-- attention.capture the per-head weights are filed under p.module (else who).
-- q_start/k_start (0-based positions of the first query and key) given: causal, key
-- k_start+j visible to query q_start+i iff k_start + j <= q_start + i (and, with o.window,
-- q_start + i - (k_start + j) < window); the positions also place alibi's and t5's biases.
local function attend(who, q, k, v, p, mask, o, q_start, k_start)
  local B, h, Tq, dh = q.shape[1], q.shape[2], q.shape[3], q.shape[4]
  local kv, Tk = k.shape[2], k.shape[3]
  local scale = 1 / math.sqrt(dh)
  local scheme = o.positions or "none"
  local P
  if kv == h and (scheme == "none" or scheme == "rope") and not o.window and not o.top_k then
    local qf, kf = q:reshape(B * h, Tq, dh), k:reshape(B * h, Tk, dh)
    if q_start == nil or (Tq == 1 and k_start + Tk - 1 <= q_start) then
      P = C.mh_probs(qf, kf, mask, h, false, scale)          -- every key visible
    elseif q_start - k_start == 0 and Tq == Tk then
      P = C.mh_probs(qf, kf, mask, h, true, scale)           -- the aligned causal triangle
    end
  end
  if P == nil then
    -- a group's query heads side by side: (B,h,Tq,dh) = (B*kv, g*Tq, dh)
    local g = h // kv
    local qg, kf = q:reshape(B * kv, g * Tq, dh), k:reshape(B * kv, Tk, dh)
    local S = (qg:matmul(kf:transpose(2, 3)) * scale):reshape(B, h, Tq, Tk)
    if scheme == "alibi" then
      S = S + positions.alibi_bias(h, Tq, Tk, q_start or 0, k_start or 0)
    elseif scheme == "t5" then
      local tab = p.relative_attention_bias
      if not glimpse.is_tensor(tab) or tab:dim() ~= 2 or tab.shape[2] ~= h then
        check.fail(4, "attention.multi_head_step: positions = 't5' needs " ..
                   "p.relative_attention_bias (buckets,%d), got %s", h, check.shape(tab))
      end
      S = S + positions.t5_bias(tab, Tq, Tk, q_start or 0, k_start or 0, q_start == nil,
                                o.t5_max_distance)
    end
    local full = positions.visibility(Tq, Tk, {causal = q_start ~= nil, window = o.window,
                                               q_start = q_start, k_start = k_start})
    full = full and full:reshape(1, 1, Tq, Tk)
    if mask then
      local m = mask:reshape(B, 1, 1, Tk)
      full = full and full * m or m
    end
    if o.top_k then full = top_k_keep(S, full, o.top_k) end
    P = glimpse.softmax(S, 4, full)
  end
  if capture.active then       -- per head, as attention.multi_head files them
    capture.record(p.module or who, P:reshape(B, h, Tq, Tk), {heads = h})
  end
  local Pd = P
  if o.dropout > 0 and o.training then Pd = glimpse.dropout(P, o.dropout, true) end
  local g = h // kv
  local ctx = Pd:reshape(B * kv, g * Tq, Tk):matmul(v:reshape(B * kv, Tk, dh))
  return finish(ctx, P, p, o, B, h, Tq, Tk, dh)
end

-- ctx (B*h,Tq,dh) (heads first) and P (B*h,Tq,Tk) -> out (B,Tq,d), weights (B,Tq,Tk) or nil
function finish(ctx, P, p, o, B, h, Tq, Tk, dh)
  if Tq == 1 then
    ctx = ctx:reshape(B, 1, h * dh)                          -- (B,h,1,dh) is (B,1,h,dh)
  else
    ctx = ctx:reshape(B, h, Tq, dh):permute(1, 3, 2, 4):reshape(B, Tq, h * dh)
  end
  local out = glimpse.linear(ctx, p.out_weight, p.out_bias)
  if not o.need_weights then return out, nil end
  return out, P:reshape(B, h, Tq, Tk):mean(2)
end

-- elu(x) + 1 = relu(x) + exp(min(x, 0)), linear attention's feature map (as mh_variants)
local function phi(x)
  return x:relu() + (-(-x):relu()):exp()
end

-- causal linear attention over running sums: q (B,h,Tq,dh), the new k, v (B,kv,Tq,dh),
-- cache {s, z, len} or nil; out (B,Tq,d), the new cache.  Row i sees the sums through key i:
-- out_i = phi(q_i)^T s_i / (phi(q_i)^T z_i + eps), the dense causal path's maths.
local function linear_step(q, k, v, p, cache, newmask)
  local B, h, Tq, dh = q.shape[1], q.shape[2], q.shape[3], q.shape[4]
  local kv = k.shape[2]
  local g = h // kv
  local fq, fk = phi(q), phi(k)
  if newmask then fk = fk * newmask:reshape(B, 1, Tq, 1) end
  local s, z = cache and cache.s, cache and cache.z
  local rows = {}
  for i = 1, Tq do
    local ki = fk:narrow(3, i, 1):reshape(B * kv, dh, 1)
    local vi = v:narrow(3, i, 1):reshape(B * kv, 1, dh)
    local si, zi = ki:matmul(vi), ki:reshape(B * kv, 1, dh)
    s = s and s:reshape(B * kv, dh, dh) + si or si
    z = z and z:reshape(B * kv, 1, dh) + zi or zi
    local qi = fq:narrow(3, i, 1):reshape(B * kv, g, dh)
    local den = qi:matmul(z:transpose(2, 3)) + variants.LINEAR_EPS           -- (B*kv, g, 1)
    rows[i] = (qi:matmul(s) / den):reshape(B, h, 1, dh)
    s, z = s:reshape(B, kv, dh, dh), z:reshape(B, kv, 1, dh)
  end
  local ctx = Tq == 1 and rows[1] or glimpse.cat(rows, 3)
  ctx = ctx:permute(1, 3, 2, 4):reshape(B, Tq, h * dh)
  return glimpse.linear(ctx, p.out_weight, p.out_bias),
         {s = s, z = z, len = (cache and cache.len or 0) + Tq}
end

local function check_mask(mask, B, Tk, fname, level)
  mask = as_tensor(mask, fname)
  if mask and (mask:dim() ~= 2 or mask.shape[1] ~= B or mask.shape[2] ~= Tk) then
    check.fail(level + 1, "%s: mask %s should be (B,Tk) = [%d,%d]", fname, check.shape(mask), B,
               Tk)
  end
  return mask
end

-- the buffers' valid length per buffer (weak keys): a step appends in place only to the
-- newest cache of a buffer, whose len this is
local TIP = setmetatable({}, {__mode = "k"})
local MIN_CAPACITY = 16

-- a step outside autograd: the new keys and values written into buffers with room (the
-- cache's own when it is their newest and they have room, else new ones of double the
-- capacity holding its valid rows), then q's attention over their first Tc + Tq rows
function step_in_buffers(who, q, k, v, p, o, cache, Tc, mask, q_start)
  local B, h, Tq, dh = q.shape[1], q.shape[2], q.shape[3], q.shape[4]
  local n = Tc + Tq
  local bk, bv
  if Tc > 0 and TIP[cache.k] == Tc and cache.k.shape[3] >= n then
    bk, bv = cache.k, cache.v
  else
    local cap = MIN_CAPACITY
    while cap < n do cap = cap * 2 end
    bk, bv = glimpse.zeros(B, h, cap, dh), glimpse.zeros(B, h, cap, dh)
    if Tc > 0 then
      C.kv_copy(bk, 0, cache.k, 0, Tc)
      C.kv_copy(bv, 0, cache.v, 0, Tc)
    end
  end
  C.kv_copy(bk, Tc, k, 0, Tq)
  C.kv_copy(bv, Tc, v, 0, Tq)
  TIP[bk] = n
  local cap = bk.shape[3]
  local ctx, P = C.mh_cached(q:reshape(B * h, Tq, dh), bk:reshape(B * h, cap, dh),
                             bv:reshape(B * h, cap, dh), n, mask, h, Tc, 1 / math.sqrt(dh))
  if capture.active then
    capture.record(p.module or who, P:reshape(B, h, Tq, n), {heads = h})
  end
  local out, w = finish(ctx, P, p, o, B, h, Tq, n, dh)
  return out, w, {k = bk, v = bv, len = n, start = q_start - Tc}
end

--- attention.kv_project(x (B,T,d), p) -> {k = (B,kv_heads,T,dh), v = (B,kv_heads,T,dh)}:
--- the keys and values of x under p's in-projection (rows d+1..2d and 2d+1..3d of a packed
--- in_proj_weight, or k_proj_weight and v_proj_weight), heads first; the cross-attention
--- cache of a memory, computed once per sequence.
function M.kv_project(x, p)
  local fname = "attention.kv_project"
  check_tensor(x, "x", 3, 2, fname)
  local h, kv, dh = check_params(p, x.shape[3], fname, 2)
  return {k = project(x, p, 1, h, kv, dh), v = project(x, p, 2, h, kv, dh)}
end

--- attention.multi_head_cached(query (B,Tq,d), p, kv, {mask=, need_weights=true, dropout=0,
---   training=false}) -> out (B,Tq,d), weights (B,Tq,Tk) averaged over heads (nil when
---   need_weights is false)
-- The query's attention over keys and values projected beforehand (kv from kv_project: a
-- memory the decoder attends to at every step); every key is visible but for mask (B,Tk)
-- padding.  Same maths as attention.multi_head(query, memory, memory, p, {mask = mask}).
function M.multi_head_cached(query, p, kv, opts)
  local fname = "attention.multi_head_cached"
  check_tensor(query, "query", 3, 2, fname)
  local o = CACHED_OPTIONS:check(opts, 2)
  local B = query.shape[1]
  local h, nkv, dh = check_params(p, query.shape[3], fname, 2)
  local Tk = check_kv(kv, B, nkv, dh, "kv", fname, 2)
  local mask = check_mask(o.mask, B, Tk, fname, 2)
  local k, v = valid_kv(kv, Tk)
  return attend(fname, project(query, p, 0, h, nkv, dh), k, v, p, mask, o)
end

--- attention.multi_head_step(query (B,Tq,d), p, cache, {q_start=, mask=, need_weights=true,
---   dropout=0, training=false, positions="none", rope_base=10000, t5_max_distance=128,
---   window=nil, top_k=nil, attention="softmax"}) -> out (B,Tq,d), weights (B,Tq,Tk) or nil,
---   new cache
-- Causal self-attention of Tq new positions (one per decoding step, or a whole prefix at
-- once) over the cached ones and themselves: the query's keys and values are projected
-- (rotated at their positions under rope), appended to cache ({k, v} (B,kv_heads,C,dh) with
-- len = Tc valid positions (default C) and start, the position of the first cached key
-- (default 0); nil for an empty cache; what it holds left unchanged) in the returned cache, and query i (position q_start + i - 1) sees every key up
-- to its own position (within window, among the top_k).  q_start (0-based) defaults to
-- start + Tc; with cached keys it must be that.  mask (B, Tc + Tq): key padding over the
-- cached and new keys.  With window the returned cache keeps the last window - 1 keys.
-- attention = "linear": the cache is {s, z, len} (the running sums), weights nil.  Running a
-- sequence one position at a time gives what attention.multi_head(x, nil, nil, p,
-- {causal = true, ...the same options}) gives on the whole of it.
function M.multi_head_step(query, p, cache, opts)
  local fname = "attention.multi_head_step"
  check_tensor(query, "query", 3, 2, fname)
  local o = STEP_OPTIONS:check(opts, 2)
  local B, Tq = query.shape[1], query.shape[2]
  local h, kv, dh = check_params(p, query.shape[3], fname, 2)
  variants.check(o, h, kv, dh, fname, 2)
  if cache ~= nil and type(cache) ~= "table" then
    check.fail(2, "%s: cache must be a table or nil, got %s", fname, type(cache))
  end
  local linear = o.attention == "linear"
  local Tc, start = 0, cache and cache.start or 0
  if linear then
    if cache ~= nil and cache.s ~= nil then
      Tc = cache.len or 0
      local s, z = cache.s, cache.z
      if not glimpse.is_tensor(s) or not glimpse.is_tensor(z) or s:dim() ~= 4
         or s.shape[1] ~= B or s.shape[2] ~= kv or z:dim() ~= 4 or z.shape[1] ~= B then
        check.fail(2, "%s: a linear attention cache holds s (B,kv_heads,dh,dh) = [%d,%d,%d,%d] " ..
                   "and z (B,kv_heads,1,dh), got s %s, z %s", fname, B, kv, dh, dh,
                   check.shape(s), check.shape(z))
      end
    end
  elseif cache ~= nil and cache.k ~= nil then
    Tc = check_kv(cache, B, kv, dh, "cache", fname, 2)
  end
  local q_start = o.q_start or start + Tc
  if Tc > 0 and not linear and q_start ~= start + Tc then
    check.fail(2, "%s: q_start %d does not follow the cached positions %d..%d", fname, q_start,
               start, start + Tc - 1)
  end
  local mask = check_mask(o.mask, B, Tc + Tq, fname, 2)
  local q, k, v = project_qkv(query, p, h, kv, dh)
  if linear then
    local out, c = linear_step(q, k, v, p, cache and cache.s and cache,
                               mask and mask:narrow(2, Tc + 1, Tq))
    return out, nil, c
  end
  if o.positions == "rope" then
    q = positions.rope(q, q_start, o.rope_base)
    k = positions.rope(k, q_start, o.rope_base)              -- cached rotated
  end
  if kv == h and (o.positions == "none" or o.positions == "rope") and not o.window
     and not o.top_k and not (o.dropout > 0 and o.training) and not glimpse.is_grad_enabled() then
    return step_in_buffers(fname, q, k, v, p, o, cache, Tc, mask, q_start)
  end
  if Tc > 0 then
    local ck, cv = valid_kv(cache, Tc)
    k, v = glimpse.cat({ck, k}, 3), glimpse.cat({cv, v}, 3)
  end
  local k_start = q_start - Tc
  local out, w = attend(fname, q, k, v, p, mask, o, q_start, k_start)
  local Tk = Tc + Tq
  if o.window and Tk > o.window - 1 then          -- only the last window - 1 keys stay visible
    local keep = o.window - 1
    if keep == 0 then return out, w, {start = q_start + Tq} end
    k, v = k:narrow(3, Tk - keep + 1, keep), v:narrow(3, Tk - keep + 1, keep)
    k_start = k_start + Tk - keep
  end
  return out, w, {k = k, v = v, start = k_start}
end

return M
