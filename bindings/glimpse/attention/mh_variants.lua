--- glimpse.attention.mh_variants -- the general path of attention.multi_head, taken when a
-- position scheme or a self-attention variant is asked for (the fused op serves plain
-- attention).  Built from differentiable core ops; positions from glimpse.attention.positions.
--
--   q, k, v  per head, heads first: q (B,h,Tq,dh), k and v (B,kv,Tk,dh), kv = kv_heads
--   grouped-query (Ainslie et al. 2023; multi-query, Shazeer 2019, is kv = 1): query head
--     i uses key/value head ceil(i / (h/kv)), so q viewed as (B*kv, (h/kv)*Tq, dh) meets its
--     group's keys in one batched matmul, no repeated copies of k or v
--   rope     q and k rotated at their positions (q_start.., k_start..)
--   S = q k^T / sqrt(dh) (+ alibi or t5 bias), masked by key padding, attn_mask, causal,
--     window (|p - s| < window) and top_k (the k largest visible scores of each row)
--   P = softmax(S) over the visible keys;  out = concat_h(P v) W_o^T + b_o
--   (general's one local P (B,h,Tq,Tk) holds the per-head probabilities, recorded for
--   attention.capture; nil where linear attention runs on sums and no weights are wanted)
--   linear (Katharopoulos et al. 2020, eq. 6-9): phi(x) = elu(x) + 1,
--     out_i = phi(q_i)^T (sum_j phi(k_j) v_j^T) / (phi(q_i)^T sum_j phi(k_j) + eps);
--     non-causal through the (dh,dh) sums, O(T dh^2); causal through running sums (cumsum)
--     of phi(k_j) v_j^T and phi(k_j), O(T dh^2) time and memory; where the weights are
--     asked for (need_weights), with an attn_mask or with unequal position offsets, through
--     the masked (Tq,Tk) product A = phi(Q) phi(K)^T, P = A / rowsum(A), O(T^2 dh)
local glimpse = require "glimpse"
local check = require "glimpse.check"
local positions = require "glimpse.attention.positions"
local capture = require "glimpse.attention.capture"

local M = {}

M.POSITIONS = {"none", "rope", "alibi", "t5"}
M.KINDS = {"softmax", "linear"}

-- the denominator's guard in linear attention (the paper's code uses the same 1e-6)
M.LINEAR_EPS = 1e-6
-- top_k: what removes a score from the running maxima
local BIG = 1e9

--- mh_variants.check(o, heads, kv_heads, dh, owner, level): the combinations that make no
--- sense are errors naming owner and the options
function M.check(o, h, kv, dh, owner, level)
  level = level + 1
  if math.type(kv) ~= "integer" or kv < 1 or h % kv ~= 0 then
    check.fail(level, "%s: kv_heads must be a positive integer dividing heads = %d, got %s",
               owner, h, tostring(kv))
  end
  if o.positions == "rope" and dh % 2 ~= 0 then
    check.fail(level, "%s: positions = 'rope' needs an even head width, got %d", owner, dh)
  end
  if o.attention == "linear" then
    for _, bad in ipairs({"window", "top_k"}) do
      if o[bad] then
        check.fail(level, "%s: %s needs attention = 'softmax' (linear attention has no " ..
                   "score matrix to cut), got %s = %s with attention = 'linear'", owner, bad,
                   bad, tostring(o[bad]))
      end
    end
    if o.positions ~= "none" then
      check.fail(level, "%s: positions = '%s' needs attention = 'softmax' (linear attention " ..
                 "takes positions = 'none'; add sinusoidal or learned ones to the inputs)",
                 owner, o.positions)
    end
  end
end

--- mh_variants.any(o, p, heads) -> true when the plain paths cannot serve o and p
function M.any(o, p, h)
  return o.positions ~= "none" or o.window ~= nil or o.top_k ~= nil
    or o.attention ~= "softmax" or o.attn_mask ~= nil or o.q_start ~= o.k_start
    or (p.kv_heads or h) ~= h or p.in_proj_weight == nil
end

-- q (B,h,Tq,dh), k and v (B,kv,Tk,dh) from the packed or the separate projections
local function project(query, key, value, p, B, Tq, Tk, h, kv, dh, fname)
  local d = h * dh
  local function heads_first(y, T, n) return y:reshape(B, T, n, dh):permute(1, 3, 2, 4) end
  local W = p.in_proj_weight
  if W then
    if kv ~= h then
      check.fail(4, "%s: a packed in_proj_weight needs kv_heads = heads; give q_proj_weight, " ..
                 "k_proj_weight, v_proj_weight for kv_heads = %d", fname, kv)
    end
    local bias = p.in_proj_bias
    if key == query and value == query then    -- one sgemm, one copy (as the packed path)
      local qkv = glimpse.linear(query, W, bias):reshape(B, Tq, 3, h, dh):permute(3, 1, 4, 2, 5)
      return qkv:select(1, 1), qkv:select(1, 2), qkv:select(1, 3)
    end
    local function part(i, x, T)
      local y = glimpse.linear(x, W:narrow(1, i * d + 1, d), bias and bias:narrow(1, i * d + 1, d))
      return heads_first(y, T, h)
    end
    return part(0, query, Tq), part(1, key, Tk), part(2, value, Tk)
  end
  for _, n in ipairs({"q_proj_weight", "k_proj_weight", "v_proj_weight"}) do
    local want = n == "q_proj_weight" and d or kv * dh
    local w = p[n]
    if not glimpse.is_tensor(w) or w:dim() ~= 2 or w.shape[1] ~= want or w.shape[2] ~= d then
      check.fail(4, "%s: p.%s must be (%d,%d) (kv_heads = %d), got %s", fname, n, want, d, kv,
                 check.shape(w))
    end
  end
  return heads_first(glimpse.linear(query, p.q_proj_weight, p.q_proj_bias), Tq, h),
         heads_first(glimpse.linear(key, p.k_proj_weight, p.k_proj_bias), Tk, kv),
         heads_first(glimpse.linear(value, p.v_proj_weight, p.v_proj_bias), Tk, kv)
end

-- the 0/1 visibility (1 or B, 1, Tq, Tk) from key padding, attn_mask, causal and window
local function visible(o, B, Tq, Tk, fname)
  local full
  local am = o.attn_mask
  if am then
    local ms, md = am.shape, am:dim()
    if not ((md == 2 and ms[1] == Tq and ms[2] == Tk) or
            (md == 3 and ms[2] == Tq and ms[3] == Tk and (ms[1] == 1 or ms[1] == B))) then
      check.fail(4, "%s: attention mask %s should be (T,S) = [%d,%d] or (B,T,S)", fname,
                 check.shape(am), Tq, Tk)
    end
    full = am:reshape(md == 2 and 1 or ms[1], 1, Tq, Tk)
  end
  local kpm = o.mask
  if kpm then
    if kpm:dim() ~= 2 or kpm.shape[1] ~= B or kpm.shape[2] ~= Tk then
      check.fail(4, "%s: key padding mask %s should be (B,S) = [%d,%d]", fname,
                 check.shape(kpm), B, Tk)
    end
    local m = kpm:reshape(B, 1, 1, Tk)
    full = full and full * m or m
  end
  local vis = positions.visibility(Tq, Tk, o)
  if vis then
    vis = vis:reshape(1, 1, Tq, Tk)
    full = full and full * vis or vis
  end
  return full
end

--- mh_variants.top_k_keep(S (B,h,Tq,Tk), full 0/1 or nil, k) -> (B,h,Tq,Tk) 0/1: the top_k
--- largest scores among the visible keys of each row (ties at the k-th value are all kept);
--- k passes of a row max, outside the tape (the cached step uses it too)
local function top_k_keep(S, full, k)
  if k >= S.shape[4] then return full end
  return glimpse.no_grad(function()
    local cur = S:detach()
    if full then cur = cur + (full - 1) * BIG end
    for _ = 1, k - 1 do cur = cur - cur:ge(cur:max(4, true)) * BIG end
    local keep = S:detach():ge(cur:max(4, true))
    return full and keep * full or keep
  end)
end

M.top_k_keep = top_k_keep

-- elu(x) + 1 = relu(x) + exp(min(x, 0)), positive everywhere
local function phi(x)
  return x:relu() + (-(-x):relu()):exp()
end

--- mh_variants.general(query, key, value, p, o, fname) -> out (B,Tq,d), weights or nil
--- o: attention.multi_head's options, checked (mask and attn_mask tensors or nil)
function M.general(query, key, value, p, o, fname)
  local B, Tq, d = query.shape[1], query.shape[2], query.shape[3]
  local Tk = key.shape[2]
  local h = p.heads
  local kv, dh = p.kv_heads or h, d // h
  local g = h // kv
  local q, k, v = project(query, key, value, p, B, Tq, Tk, h, kv, dh, fname)
  if o.positions == "rope" then
    q = positions.rope(q, o.q_start, o.rope_base)
    k = positions.rope(k, o.k_start, o.rope_base)
  end
  -- a group's query heads side by side: (B,h,Tq,dh) = (B*kv, g*Tq, dh)
  local qg = q:reshape(B * kv, g * Tq, dh)
  k, v = k:reshape(B * kv, Tk, dh), v:reshape(B * kv, Tk, dh)
  local full = visible(o, B, Tq, Tk, fname)
  local P, ctx
  if o.attention == "linear" then
    local fq, fk = phi(qg), phi(k)
    if o.mask then   -- padded keys add nothing to the sums
      fk = (fk:reshape(B, kv, Tk, dh) * o.mask:reshape(B, 1, Tk, 1)):reshape(B * kv, Tk, dh)
    end
    local N = B * kv
    local want = o.need_weights or capture.active          -- the weights, (B,h,Tq,Tk)
    local running = o.causal and not want and o.attn_mask == nil and Tq == Tk
                    and o.q_start == o.k_start
    if running then
      -- causal, eq. 8-9: running sums S_i = sum_j<=i phi(k_j) v_j^T, z_i = sum_j<=i phi(k_j)
      local kvs = fk:reshape(N * Tk, dh, 1):matmul(v:reshape(N * Tk, 1, dh))   -- outer products
                    :reshape(N, Tk, dh * dh):cumsum(2)
      local zs = fk:cumsum(2)
      local fqt = fq:reshape(N, g, Tq, dh):permute(1, 3, 2, 4):reshape(N * Tq, g, dh)
      local num = fqt:matmul(kvs:reshape(N * Tq, dh, dh))                  -- (N*T, g, dh)
      local den = fqt:matmul(zs:reshape(N * Tq, dh, 1)) + M.LINEAR_EPS      -- (N*T, g, 1)
      ctx = (num / den):reshape(N, Tq, g, dh):permute(1, 3, 2, 4)
    elseif full == nil or not (o.causal or o.attn_mask) then
      -- sum_j phi(k_j) v_j^T (dh,dh) and sum_j phi(k_j) (1,dh) per kv head (eq. 6)
      local kvsum = fk:transpose(2, 3):matmul(v)
      local z = fk:sum(2, true)
      local den = fq:matmul(z:transpose(2, 3)) + M.LINEAR_EPS           -- (N, g*Tq, 1)
      ctx = fq:matmul(kvsum) / den
      if want then
        P = (fq:matmul(fk:transpose(2, 3)) / den):reshape(B, h, Tq, Tk)
      end
    else
      -- the weights asked for, offsets or an attention mask: the masked (Tq,Tk) product
      local A = fq:matmul(fk:transpose(2, 3)):reshape(B, h, Tq, Tk) * full
      P = A / (A:sum(4, true) + M.LINEAR_EPS)
      ctx = P:reshape(N, g * Tq, Tk):matmul(v)
    end
  else
    local S = (qg:matmul(k:transpose(2, 3)) * (1 / math.sqrt(dh))):reshape(B, h, Tq, Tk)
    if o.positions == "alibi" then
      S = S + positions.alibi_bias(h, Tq, Tk, o.q_start, o.k_start)
    elseif o.positions == "t5" then
      local tab = p.relative_attention_bias
      if not glimpse.is_tensor(tab) or tab:dim() ~= 2 or tab.shape[2] ~= h then
        check.fail(3, "%s: positions = 't5' needs p.relative_attention_bias (buckets,%d), got %s",
                   fname, h, check.shape(tab))
      end
      S = S + positions.t5_bias(tab, Tq, Tk, o.q_start, o.k_start, not o.causal,
                                o.t5_max_distance)
    end
    if o.top_k then full = top_k_keep(S, full, o.top_k) end
    P = glimpse.softmax(S, 4, full)                                      -- (B,h,Tq,Tk)
    local Pd = P
    if o.dropout > 0 and o.training then Pd = glimpse.dropout(P, o.dropout, true) end
    ctx = Pd:reshape(B * kv, g * Tq, Tk):matmul(v)
  end
  if capture.active then capture.record(p.module or "attention.multi_head", P, {heads = h}) end
  ctx = ctx:reshape(B, h, Tq, dh):permute(1, 3, 2, 4):reshape(B, Tq, d)
  local out = glimpse.linear(ctx, p.out_weight, p.out_bias)
  if not o.need_weights then return out, nil end
  return out, P:mean(2)
end

return M
