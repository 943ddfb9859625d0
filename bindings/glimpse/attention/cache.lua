--- glimpse.attention.cache -- incremental (cached) multi-head attention for step-by-step
-- decoding, with the parameter layout of attention.multi_head (PyTorch's
-- nn.MultiheadAttention).  A decoder that emits one token per step keeps, per layer, the
-- keys and values of the positions it has already seen, so a step costs the new rows only:
--
--   local kv = attention.kv_project(memory, p)                  -- the memory, projected once
--   local out, w = attention.multi_head_cached(y_t, p, kv, {mask = src_mask})   -- cross
--   local out, _, cache = attention.multi_head_step(y_t, p, cache, {q_start = t - 1})  -- self
--
-- A cache is a table {k = (B,heads,T,dh), v = (B,heads,T,dh)} whose rows (dim 1) are the
-- batch, so glimpse.decode's reordering (index_select on dim 1) keeps it aligned with the
-- surviving beams.  Keys are cached after the projection (and after any transform that
-- depends on their position, which is applied once, when the key is made), so a step never
-- touches a past key again.  The functions never change a cache in place: a step returns a
-- new table with the new rows appended.  p is attention.multi_head's parameter table (heads,
-- in_proj_weight, in_proj_bias, out_weight, out_bias, module); under attention.capture each
-- call files its per-head weights (B,heads,Tq,Tk) under p.module, as attention.multi_head.
local glimpse = require "glimpse"
local check = require "glimpse.check"
local options = require "glimpse.options"
local args = require "glimpse.attention.args"
local capture = require "glimpse.attention.capture"

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
})
local CACHED_OPTIONS = options.declare("attention.multi_head_cached", {
  {"mask", "tensor", nil, help = "(B,Tk) key padding (1 = attend, 0 = padding)"},
  {"need_weights", "boolean", true, help = "return the weights averaged over heads"},
  {"dropout", "number", 0, range = {0, 1}, help = "dropout on the attention weights (training)"},
  {"training", "boolean", false, help = "apply the dropout"},
})
M.step_options, M.cached_options = STEP_OPTIONS, CACHED_OPTIONS

local function check_params(p, d, fname, level)
  if type(p) ~= "table" or math.type(p.heads) ~= "integer" or p.heads < 1 then
    check.fail(level + 1, "%s: p must be a table of parameters with an integer heads >= 1, " ..
               "got %s", fname, type(p) == "table" and "heads " .. tostring(p.heads) or type(p))
  end
  if d % p.heads ~= 0 then
    check.fail(level + 1, "%s: width %d is not a multiple of %d heads", fname, d, p.heads)
  end
  if not glimpse.is_tensor(p.in_proj_weight) or p.in_proj_weight:dim() ~= 2
     or p.in_proj_weight.shape[1] ~= 3 * d or p.in_proj_weight.shape[2] ~= d then
    check.fail(level + 1, "%s: p.in_proj_weight must be (3d,d) = [%d,%d], got %s", fname,
               3 * d, d, check.shape(p.in_proj_weight))
  end
  return p.heads, d // p.heads
end

-- (B,T,h*dh) -> (B,h,T,dh); one row (T = 1) has the same layout either way
local function heads_first(y, B, T, h, dh)
  if T == 1 then return y:reshape(B, h, 1, dh) end
  return y:reshape(B, T, h, dh):permute(1, 3, 2, 4):reshape(B, h, T, dh)
end

-- rows i*d+1 .. (i+1)*d of the packed projection of x (B,T,d) -> (B,heads,T,dh)
local function project(x, p, i, h, dh)
  local B, T, d = x.shape[1], x.shape[2], x.shape[3]
  local W, bias = p.in_proj_weight, p.in_proj_bias
  local y = glimpse.linear(x, W:narrow(1, i * d + 1, d), bias and bias:narrow(1, i * d + 1, d))
  return heads_first(y, B, T, h, dh)
end

-- q, k, v (B,heads,T,dh) of x (B,T,d) from one product with the packed projection
local function project_qkv(x, p, h, dh)
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

local function check_kv(kv, B, h, dh, what, fname, level)
  if type(kv) ~= "table" or not glimpse.is_tensor(kv.k) or not glimpse.is_tensor(kv.v) then
    check.fail(level + 1, "%s: %s must be a table {k = (B,heads,T,dh), v = ...}, got %s", fname,
               what, type(kv))
  end
  for _, name in ipairs({"k", "v"}) do
    local x = kv[name]
    local s = x.shape
    if x:dim() ~= 4 or s[1] ~= B or s[2] ~= h or s[4] ~= dh or s[3] ~= kv.k.shape[3] then
      check.fail(level + 1, "%s: %s.%s %s should be (B,heads,T,dh) = [%d,%d,T,%d]", fname, what,
                 name, check.shape(x), B, h, dh)
    end
  end
  return kv.k.shape[3]
end

-- q (B,h,Tq,dh) over k, v (B,h,Tk,dh): out (B,Tq,d), weights (B,Tq,Tk) or nil; under
-- attention.capture the per-head weights are filed under p.module (else who).
-- q_start/k_start (0-based positions of the first query and key) given: causal, key
-- k_start+j visible to query q_start+i iff k_start + j <= q_start + i.
local function attend(who, q, k, v, p, mask, o, q_start, k_start)
  local B, h, Tq, dh = q.shape[1], q.shape[2], q.shape[3], q.shape[4]
  local Tk = k.shape[3]
  local scale = 1 / math.sqrt(dh)
  local qf, kf = q:reshape(B * h, Tq, dh), k:reshape(B * h, Tk, dh)
  local P
  local last_sees_all = q_start == nil or k_start + Tk - 1 <= q_start
  if last_sees_all and (q_start == nil or Tq == 1) then
    P = C.mh_probs(qf, kf, mask, h, false, scale)            -- every key visible
  elseif q_start - k_start == 0 and Tq == Tk then
    P = C.mh_probs(qf, kf, mask, h, true, scale)             -- the aligned causal triangle
  else
    local rows = {}
    for i = 1, Tq do
      local r = {}
      for j = 1, Tk do r[j] = (k_start + j <= q_start + i) and 1 or 0 end
      rows[i] = r
    end
    local full = glimpse.tensor(rows):reshape(1, 1, Tq, Tk)
    if mask then full = full * mask:reshape(B, 1, 1, Tk) end
    local S = (qf:matmul(kf:transpose(2, 3)) * scale):reshape(B, h, Tq, Tk)
    P = glimpse.softmax(S, 4, full):reshape(B * h, Tq, Tk)
  end
  if capture.active then       -- per head, as attention.multi_head files them
    capture.record(p.module or who, P:reshape(B, h, Tq, Tk), {heads = h})
  end
  local Pd = P
  if o.dropout > 0 and o.training then Pd = glimpse.dropout(P, o.dropout, true) end
  local d = h * dh
  local ctx = Pd:matmul(v:reshape(B * h, Tk, dh)):reshape(B, h, Tq, dh):permute(1, 3, 2, 4)
  local out = glimpse.linear(ctx:reshape(B, Tq, d), p.out_weight, p.out_bias)
  if not o.need_weights then return out, nil end
  return out, P:reshape(B, h, Tq, Tk):mean(2)
end

local function check_mask(mask, B, Tk, fname, level)
  mask = as_tensor(mask, fname)
  if mask and (mask:dim() ~= 2 or mask.shape[1] ~= B or mask.shape[2] ~= Tk) then
    check.fail(level + 1, "%s: mask %s should be (B,Tk) = [%d,%d]", fname, check.shape(mask), B,
               Tk)
  end
  return mask
end

--- attention.kv_project(x (B,T,d), p) -> {k = (B,heads,T,dh), v = (B,heads,T,dh)}: the keys
--- and values of x under p's packed in-projection (rows d+1..2d and 2d+1..3d), heads first;
--- the cross-attention cache of a memory, computed once per sequence.
function M.kv_project(x, p)
  local fname = "attention.kv_project"
  check_tensor(x, "x", 3, 2, fname)
  local h, dh = check_params(p, x.shape[3], fname, 2)
  return {k = project(x, p, 1, h, dh), v = project(x, p, 2, h, dh)}
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
  local h, dh = check_params(p, query.shape[3], fname, 2)
  local Tk = check_kv(kv, B, h, dh, "kv", fname, 2)
  local mask = check_mask(o.mask, B, Tk, fname, 2)
  return attend(fname, project(query, p, 0, h, dh), kv.k, kv.v, p, mask, o)
end

--- attention.multi_head_step(query (B,Tq,d), p, cache, {q_start=, mask=, need_weights=true,
---   dropout=0, training=false}) -> out (B,Tq,d), weights (B,Tq,Tk) or nil, new cache
-- Causal self-attention of Tq new positions (one per decoding step, or a whole prefix at
-- once) over the cached ones and themselves: the query's keys and values are projected,
-- appended to cache ({k, v} (B,heads,Tc,dh), or nil for an empty cache; left unchanged) in
-- the returned cache, and query i (position q_start + i - 1) sees every key up to its own
-- position.  q_start (0-based) defaults to the cached length Tc: the keys are positions
-- q_start - Tc .. q_start + Tq - 1.  mask (B, Tc + Tq): key padding over all of them.  Running
-- a sequence one position at a time gives what attention.multi_head(x, nil, nil, p,
-- {causal = true}) gives on the whole of it.
function M.multi_head_step(query, p, cache, opts)
  local fname = "attention.multi_head_step"
  check_tensor(query, "query", 3, 2, fname)
  local o = STEP_OPTIONS:check(opts, 2)
  local B, Tq = query.shape[1], query.shape[2]
  local h, dh = check_params(p, query.shape[3], fname, 2)
  local Tc = 0
  if cache ~= nil then Tc = check_kv(cache, B, h, dh, "cache", fname, 2) end
  local q_start = o.q_start or Tc
  if q_start < Tc then
    check.fail(2, "%s: q_start %d is before the end of the %d cached positions", fname,
               q_start, Tc)
  end
  local mask = check_mask(o.mask, B, Tc + Tq, fname, 2)
  local q, k, v = project_qkv(query, p, h, dh)
  if cache ~= nil then
    k, v = glimpse.cat({cache.k, k}, 3), glimpse.cat({cache.v, v}, 3)
  end
  local out, w = attend(fname, q, k, v, p, mask, o, q_start, q_start - Tc)
  return out, w, {k = k, v = v}
end

return M
