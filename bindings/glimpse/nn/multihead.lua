--- glimpse.nn.multihead -- nn.MultiheadAttention, with PyTorch's parameter names.
local glimpse = require "glimpse"
local check = require "glimpse.check"
local options = require "glimpse.options"
local att = require "glimpse.attention"
local base = require "glimpse.nn.module"
local Linear = require("glimpse.nn.linear").Linear

local Module, uniform = base.Module, base.uniform

local M = {}

-- ---------------------------------------------------------------------------------------
-- nn.MultiheadAttention

local MultiheadAttention = Module:extend("MultiheadAttention")
M.MultiheadAttention = MultiheadAttention

MultiheadAttention.options = options.declare("nn.MultiheadAttention", {
  {"causal", "boolean", false, help = "query i sees keys j <= i (a forward call may override)"},
  {"dropout", "number", 0, range = {0, 1}, help = "dropout on the attention weights (training)"},
  {"bias", "boolean", true, help = "learn in_proj_bias and out_proj.bias"},
})

MultiheadAttention.forward_options = options.declare("nn.MultiheadAttention:forward", {
  {"causal", "boolean", nil, help = "query i sees keys j <= i (default: the module's)"},
  {"need_weights", "boolean", true, help = "return the weights averaged over heads"},
})

--- nn.MultiheadAttention(d, heads, {causal=false, dropout=0, bias=true}) -> module
-- PyTorch's parameters: in_proj_weight (3d,d) (Xavier uniform), in_proj_bias (3d) (zeros),
-- out_proj.weight (d,d), out_proj.bias (d) (zeros), so its state dict loads unchanged.
-- Forward: out (B,Tq,d), weights (B,Tq,Tk) (averaged over heads) =
--   mha(query (B,Tq,d), key (B,Tk,d) or nil, value (B,Tk,d) or nil, mask (B,Tk) or nil,
--       {causal=, need_weights=true})   -- key/value nil: self-attention; mask: 1 = attend,
--   0 = padding; need_weights = false returns weights nil and skips averaging them.
function MultiheadAttention:init(d, heads, opts)
  local cls = "nn.MultiheadAttention"
  check.int(cls, "embed_dim", d, 1, nil, 3)
  check.int(cls, "num_heads", heads, 1, nil, 3)
  if d % heads ~= 0 then
    check.fail(3, "%s: embed_dim %d is not a multiple of num_heads %d", cls, d, heads)
  end
  local o = MultiheadAttention.options:check(opts, 3)
  self.embed_dim, self.num_heads = d, heads
  self.causal = o.causal
  self.dropout = o.dropout
  local bound = math.sqrt(6 / (d + 3 * d))            -- xavier_uniform_ on (3d, d)
  self.in_proj_weight = uniform({3 * d, d}, bound)
  if o.bias then self.in_proj_bias = glimpse.zeros(3 * d):requires_grad() end
  self.out_proj = Linear(d, d, {bias = o.bias})
  if self.out_proj.bias then glimpse.no_grad(function() self.out_proj.bias:zero_() end) end
end

function MultiheadAttention:forward(query, key, value, mask, opts)
  if not glimpse.is_tensor(query) or query:dim() ~= 3 or query.shape[3] ~= self.embed_dim then
    check.fail(2, "MultiheadAttention: query must be (B,T,%d)", self.embed_dim)
  end
  local o = MultiheadAttention.forward_options:check(opts, 2)
  local causal = self.causal
  if o.causal ~= nil then causal = o.causal end
  return att.multi_head(query, key, value, {
    heads = self.num_heads, in_proj_weight = self.in_proj_weight,
    in_proj_bias = self.in_proj_bias, out_weight = self.out_proj.weight,
    out_bias = self.out_proj.bias, module = self},       -- module: attention.capture's key
    {mask = mask, causal = causal, dropout = self.dropout, training = self.training,
     need_weights = o.need_weights})
end

function MultiheadAttention:extra_repr()
  return string.format("embed_dim=%d, num_heads=%d, causal=%s, dropout=%g", self.embed_dim,
                       self.num_heads, tostring(self.causal), self.dropout)
end

return M
