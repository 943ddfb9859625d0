--- glimpse.nn.multihead -- nn.MultiheadAttention, with PyTorch's parameter names.
local glimpse = require "glimpse"
local check = require "glimpse.check"
local options = require "glimpse.options"
local att = require "glimpse.attention"
local variants = require "glimpse.attention.mh_variants"
local base = require "glimpse.nn.module"
local Linear = require("glimpse.nn.linear").Linear

local Module, uniform = base.Module, base.uniform

local M = {}

-- ---------------------------------------------------------------------------------------
-- nn.MultiheadAttention

local MultiheadAttention = Module:extend("MultiheadAttention")
M.MultiheadAttention = MultiheadAttention

-- the entries the Transformer layers and models.Transformer pass on to their self-attention
M.VARIANT_ENTRIES = {
  {"positions", "string", "none", choices = variants.POSITIONS,
   help = "inside attention: rope (Su et al. 2021), alibi (Press et al. 2022), t5 (Raffel " ..
          "et al. 2020) or none"},
  {"rope_base", "number", 10000, range = {1}, finite = true, help = "RoPE's base (> 1)"},
  {"t5_buckets", "int", 32, range = {2}, help = "T5: relative position buckets"},
  {"t5_max_distance", "int", 128, range = {1}, help = "T5: distances past this share a bucket"},
  {"kv_heads", "int", nil, range = {1}, help = "key/value heads (default heads; 1 = " ..
                                                "multi-query, a divisor of heads = grouped)"},
  {"window", "int", nil, range = {1}, help = "local attention: keys with |i - j| < window"},
  {"top_k", "int", nil, range = {1}, help = "keep the top_k scores of each query row"},
  {"attention", "string", "softmax", choices = variants.KINDS,
   help = "softmax or linear (Katharopoulos et al. 2020)"},
}

local ENTRIES = {
  {"causal", "boolean", false, help = "query i sees keys j <= i (a forward call may override)"},
  {"dropout", "number", 0, range = {0, 1}, help = "dropout on the attention weights (training)"},
  {"bias", "boolean", true, help = "learn in_proj_bias and out_proj.bias"},
}
for _, e in ipairs(M.VARIANT_ENTRIES) do ENTRIES[#ENTRIES + 1] = e end
MultiheadAttention.options = options.declare("nn.MultiheadAttention", ENTRIES)

MultiheadAttention.forward_options = options.declare("nn.MultiheadAttention:forward", {
  {"causal", "boolean", nil, help = "query i sees keys j <= i (default: the module's)"},
  {"need_weights", "boolean", true, help = "return the weights averaged over heads"},
  {"attn_mask", "tensor|table", nil, help = "(Tq,Tk) or (B,Tq,Tk): which query may see which key"},
  {"q_start", "int", 0, range = {0}, help = "0-based position of the first query row"},
  {"k_start", "int", 0, range = {0}, help = "0-based position of the first key row"},
})

-- the forward options when none are given (read only)
local FORWARD_DEFAULTS = MultiheadAttention.forward_options:check(nil, 1)

-- the forward's options, checked; the common call (causal and need_weights, booleans) is
-- read directly: the module's cost stays that of the attention on small inputs
local function forward_options(opts)
  if opts == nil then return FORWARD_DEFAULTS end
  for k, v in pairs(opts) do
    if (k ~= "causal" and k ~= "need_weights") or type(v) ~= "boolean" then
      return MultiheadAttention.forward_options:check(opts, 3)
    end
  end
  return {causal = opts.causal, need_weights = opts.need_weights ~= false, q_start = 0,
          k_start = 0}
end

--- nn.MultiheadAttention(d, heads, {causal=false, dropout=0, bias=true, positions="none",
---   rope_base=10000, t5_buckets=32, t5_max_distance=128, kv_heads=heads, window=nil,
---   top_k=nil, attention="softmax"}) -> module
-- PyTorch's parameters: in_proj_weight (3d,d) (Xavier uniform), in_proj_bias (3d) (zeros),
-- out_proj.weight (d,d), out_proj.bias (d) (zeros), so its state dict loads unchanged.
-- With kv_heads < heads the projections are separate (PyTorch's names where it has them):
-- q_proj_weight (d,d), k_proj_weight and v_proj_weight (kv_heads*dh,d), each Xavier uniform,
-- and q_proj_bias, k_proj_bias, v_proj_bias (zeros).  positions = "t5" adds
-- relative_attention_bias (t5_buckets, heads) ~ N(0, 1/d) (T5's init).
-- Forward: out (B,Tq,d), weights (B,Tq,Tk) (averaged over heads) =
--   mha(query (B,Tq,d), key (B,Tk,d) or nil, value (B,Tk,d) or nil, mask (B,Tk) or nil,
--       {causal=, need_weights=true, attn_mask=, q_start=0, k_start=0})
--   -- key/value nil: self-attention; mask: 1 = attend, 0 = padding; need_weights = false
--   returns weights nil and skips averaging them; q_start/k_start: the 0-based positions of
--   the first query and key rows (positions, causal and window read them).
function MultiheadAttention:init(d, heads, opts)
  local cls = "nn.MultiheadAttention"
  check.int(cls, "embed_dim", d, 1, nil, 3)
  check.int(cls, "num_heads", heads, 1, nil, 3)
  if d % heads ~= 0 then
    check.fail(3, "%s: embed_dim %d is not a multiple of num_heads %d", cls, d, heads)
  end
  local o = MultiheadAttention.options:check(opts, 3)
  local kv = o.kv_heads or heads
  variants.check(o, heads, kv, d // heads, cls, 3)
  self.embed_dim, self.num_heads, self.kv_heads = d, heads, kv
  self.causal = o.causal
  self.dropout = o.dropout
  -- the options attention.multi_head takes beyond the plain ones (none: the fused path)
  local var = {}
  for _, e in ipairs(M.VARIANT_ENTRIES) do
    local n = e[1]
    if n ~= "kv_heads" and n ~= "t5_buckets" and o[n] ~= e[3] then var[n] = o[n] end
  end
  if o.positions ~= "t5" then var.t5_max_distance = nil end
  if o.positions ~= "rope" then var.rope_base = nil end
  self.positions, self.window, self.top_k, self.attention = o.positions, o.window, o.top_k,
                                                            o.attention
  rawset(self, "variant", next(var) and var or nil)
  if kv == heads then
    local bound = math.sqrt(6 / (d + 3 * d))            -- xavier_uniform_ on (3d, d)
    self.in_proj_weight = uniform({3 * d, d}, bound)
    if o.bias then self.in_proj_bias = glimpse.zeros(3 * d):requires_grad() end
  else
    local dkv = kv * (d // heads)
    self.q_proj_weight = uniform({d, d}, math.sqrt(6 / (2 * d)))
    self.k_proj_weight = uniform({dkv, d}, math.sqrt(6 / (d + dkv)))
    self.v_proj_weight = uniform({dkv, d}, math.sqrt(6 / (d + dkv)))
    if o.bias then
      self.q_proj_bias = glimpse.zeros(d):requires_grad()
      self.k_proj_bias = glimpse.zeros(dkv):requires_grad()
      self.v_proj_bias = glimpse.zeros(dkv):requires_grad()
    end
  end
  if o.positions == "t5" then
    self.relative_attention_bias = (glimpse.randn(o.t5_buckets, heads) * (1 / math.sqrt(d)))
                                   :detach():requires_grad()
  end
  self.out_proj = Linear(d, d, {bias = o.bias})
  if self.out_proj.bias then glimpse.no_grad(function() self.out_proj.bias:zero_() end) end
end

function MultiheadAttention:forward(query, key, value, mask, opts)
  if not glimpse.is_tensor(query) or query:dim() ~= 3 or query.shape[3] ~= self.embed_dim then
    check.fail(2, "MultiheadAttention: query must be (B,T,%d)", self.embed_dim)
  end
  local o = forward_options(opts)
  local causal = self.causal
  if o.causal ~= nil then causal = o.causal end
  local ao = {mask = mask, causal = causal, dropout = self.dropout, training = self.training,
              need_weights = o.need_weights}
  if self.variant or o.attn_mask ~= nil or o.q_start ~= o.k_start then
    for k, v in pairs(self.variant or {}) do ao[k] = v end
    ao.attn_mask, ao.q_start, ao.k_start = o.attn_mask, o.q_start, o.k_start
  end
  local p
  if self.in_proj_weight then   -- the packed projection (the fused op's)
    p = {heads = self.num_heads, in_proj_weight = self.in_proj_weight,
         in_proj_bias = self.in_proj_bias, out_weight = self.out_proj.weight,
         out_bias = self.out_proj.bias, relative_attention_bias = self.relative_attention_bias,
         module = self}                                  -- module: attention.capture's key
  else
    p = {heads = self.num_heads, kv_heads = self.kv_heads,
         q_proj_weight = self.q_proj_weight, k_proj_weight = self.k_proj_weight,
         v_proj_weight = self.v_proj_weight, q_proj_bias = self.q_proj_bias,
         k_proj_bias = self.k_proj_bias, v_proj_bias = self.v_proj_bias,
         relative_attention_bias = self.relative_attention_bias,
         out_weight = self.out_proj.weight, out_bias = self.out_proj.bias, module = self}
  end
  return att.multi_head(query, key, value, p, ao)
end

function MultiheadAttention:extra_repr()
  local s = string.format("embed_dim=%d, num_heads=%d, causal=%s, dropout=%g", self.embed_dim,
                          self.num_heads, tostring(self.causal), self.dropout)
  if self.kv_heads ~= self.num_heads then s = s .. ", kv_heads=" .. self.kv_heads end
  if self.positions ~= "none" then s = s .. ", positions=" .. self.positions end
  if self.window then s = s .. ", window=" .. self.window end
  if self.top_k then s = s .. ", top_k=" .. self.top_k end
  if self.attention ~= "softmax" then s = s .. ", attention=" .. self.attention end
  return s
end

return M
