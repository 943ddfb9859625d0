--- glimpse.attention.multihead -- multi-head attention (Vaswani et al. 2017) on plain
-- tensors with PyTorch's parameter layout (nn.MultiheadAttention holds the parameters), and
-- the pointer network's logits (Vinyals et al. 2015).
--
--   local out, w = attention.multi_head(x, nil, nil, p, {mask = pad, causal = true})
local glimpse = require "glimpse"
local check = require "glimpse.check"
local options = require "glimpse.options"
local args = require "glimpse.attention.args"
local variants = require "glimpse.attention.mh_variants"
local capture = require "glimpse.attention.capture"

local C = glimpse._attention
local named, as_tensor = args.named, args.as_tensor
local check_tensor, check_opts = args.check_tensor, args.check_opts

local M = {}

-- what pointer_logits adds to the logits of positions that may not be chosen
local NEG_BIG = 1e9

-- the options the fused and packed paths know; any other one goes through OPTIONS
local PLAIN = {mask = true, causal = true, dropout = true, training = true,
               need_weights = true, fused = true}

local OPTIONS = options.declare("attention.multi_head", {
  {"mask", "tensor|table", nil, help = "(B,Tk) key padding: 1 = attend, 0 = padding"},
  {"attn_mask", "tensor|table", nil, help = "(Tq,Tk) or (B,Tq,Tk): which query may see which key"},
  {"causal", "boolean", false, help = "query at position p sees keys at positions <= p"},
  {"dropout", "number", 0, range = {0, 1}, help = "dropout on the attention weights"},
  {"training", "boolean", false, help = "dropout acts only when true"},
  {"need_weights", "boolean", true, help = "return the weights averaged over heads"},
  {"fused", "boolean", true, help = "false: the general path even where the fused op applies"},
  {"positions", "string", "none", choices = variants.POSITIONS,
   help = "rope | alibi | t5 (bias table p.relative_attention_bias) | none"},
  {"rope_base", "number", 10000, range = {1}, finite = true, help = "RoPE's base (> 1)"},
  {"t5_max_distance", "int", 128, range = {1}, help = "T5: distances past this share a bucket"},
  {"q_start", "int", 0, range = {0}, help = "0-based position of the first query row"},
  {"k_start", "int", 0, range = {0}, help = "0-based position of the first key row"},
  {"window", "int", nil, range = {1}, help = "local attention: keys with |p - s| < window"},
  {"top_k", "int", nil, range = {1}, help = "keep the top_k scores of each query row"},
  {"attention", "string", "softmax", choices = variants.KINDS,
   help = "softmax | linear (Katharopoulos et al. 2020, elu + 1 features)"},
})
M.MULTI_HEAD_OPTIONS = OPTIONS

--- attention.multi_head(query (B,Tq,d), key (B,Tk,d), value (B,Tk,d), p, opts)
---   -> out (B,Tq,d), weights (B,Tq,Tk) averaged over heads (nil when opts.need_weights is false)
-- p: heads, in_proj_weight (3d,d), in_proj_bias (3d) or nil, out_weight (d,d), out_bias (d)
-- or nil, module (the key attention.capture files the per-head weights under; nil: none).
-- Or, for grouped-query heads (p.kv_heads < heads, or any time): q_proj_weight (d,d),
-- k_proj_weight and v_proj_weight (kv_heads*dh,d), q_proj_bias, k_proj_bias, v_proj_bias
-- (or nil); kv_heads (default heads); relative_attention_bias (buckets,heads) for t5.
-- opts: mask (B,Tk) key padding (1 = attend), causal (query i sees keys j <= i),
-- dropout (on the attention weights) and training, need_weights (default true; false skips
-- averaging the weights, as PyTorch's need_weights=False), fused (default true: self-attention
-- without dropout runs as one fused op; false forces the general path, which computes the same).
-- Positions and variants (docs/api/attention.md): attn_mask, positions, rope_base,
-- t5_max_distance, q_start, k_start, window, top_k, attention; with any of them set the
-- attention runs on glimpse.attention.mh_variants' general path.
-- key/value nil: self-attention.
function M.multi_head(query, key, value, p, opts)
  local fname = "attention.multi_head"
  opts = check_opts(opts, fname, 2) or {}
  check_tensor(query, "query", 3, 2, fname)
  key = key or query
  value = value or key
  check_tensor(key, "key", 3, 2, fname)
  check_tensor(value, "value", 3, 2, fname)
  if type(p) ~= "table" or math.type(p.heads) ~= "integer" or p.heads < 1 then
    check.fail(2, "%s: p must be a table of parameters with an integer heads >= 1, got %s",
               fname, type(p) == "table" and "heads " .. tostring(p.heads) or type(p))
  end
  local B, Tq, d = query.shape[1], query.shape[2], query.shape[3]
  local Tk = key.shape[2]
  local h = p.heads
  if d % h ~= 0 then check.fail(2, "%s: width %d is not a multiple of %d heads", fname, d, h) end
  -- positions, variants or separate projections: options checked, then the general path
  local general = (p.kv_heads or h) ~= h or p.in_proj_weight == nil
  if not general then
    for k in pairs(opts) do
      if not PLAIN[k] then general = true; break end
    end
  end
  if general then
    local o = OPTIONS:check(opts, 2)
    variants.check(o, h, p.kv_heads or h, d // h, fname, 2)
    o.mask, o.attn_mask = as_tensor(o.mask, fname), as_tensor(o.attn_mask, fname)
    if variants.any(o, p, h) then return variants.general(query, key, value, p, o, fname) end
    opts = o
  end
  local dh = d // h
  local W, bias = p.in_proj_weight, p.in_proj_bias
  local dropping = (opts.dropout or 0) > 0 and opts.training
  if key == query and value == query and not dropping and opts.fused ~= false then
    -- self-attention without dropout: one fused op reads every head in place from the packed
    -- projection and writes the merged context (no head split/merge copies, either way);
    -- opts.fused = false takes the general path below, the fused op's test oracle
    local qkv = glimpse.linear(query, W, bias)                      -- (B,T,3d)
    local ctx, P = C.mh_packed(qkv, as_tensor(opts.mask), h, opts.causal or false,
                               1 / math.sqrt(dh), opts.need_weights ~= false or capture.active)
    if capture.active then capture.record(p.module or "attention.multi_head", P, {heads = h}) end
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
  if capture.active then
    capture.record(p.module or "attention.multi_head", P:reshape(B, h, Tq, Tk), {heads = h})
  end
  local Pd = P
  if dropping then Pd = glimpse.dropout(P, opts.dropout, true) end
  local ctx = Pd:matmul(v):reshape(B, h, Tq, dh):permute(1, 3, 2, 4):reshape(B, Tq, d)
  local out = glimpse.linear(ctx, p.out_weight, p.out_bias)
  if opts.need_weights == false then return out, nil end
  return out, P:reshape(B, h, Tq, Tk):mean(2)
end

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

return M
