--- glimpse.nn.multihead -- nn.MultiheadAttention, with PyTorch's parameter names.
local glimpse = require "glimpse"
local att = require "glimpse.attention"
local base = require "glimpse.nn.module"
local Linear = require("glimpse.nn.linear").Linear

local Module = base.Module
local uniform, check_dim = base.uniform, base.check_dim

-- A Linear layer without depending on its constructor's argument checks' wording.
local function linear(din, dout, bias)
  return Linear(din, dout, {bias = bias})
end

local M = {}

-- ---------------------------------------------------------------------------------------
-- nn.MultiheadAttention

local MultiheadAttention = Module:extend("MultiheadAttention")
M.MultiheadAttention = MultiheadAttention

--- nn.MultiheadAttention(d, heads, {causal=false, dropout=0, bias=true}) -> module
-- PyTorch's parameters: in_proj_weight (3d,d) (Xavier uniform), in_proj_bias (3d) (zeros),
-- out_proj.weight (d,d), out_proj.bias (d) (zeros), so its state dict loads unchanged.
-- Forward: out (B,Tq,d), weights (B,Tq,Tk) (averaged over heads) =
--   mha(query (B,Tq,d), key (B,Tk,d) or nil, value (B,Tk,d) or nil, mask (B,Tk) or nil,
--       {causal=, need_weights=true})   -- key/value nil: self-attention; mask: 1 = attend,
--   0 = padding; need_weights = false returns weights nil and skips averaging them.
function MultiheadAttention:init(d, heads, opts)
  local cls = "nn.MultiheadAttention"
  check_dim(d, "embed_dim", cls)
  check_dim(heads, "num_heads", cls)
  if d % heads ~= 0 then
    error(string.format("%s: embed_dim %d is not a multiple of num_heads %d", cls, d, heads), 3)
  end
  opts = opts or {}
  self.embed_dim, self.num_heads = d, heads
  self.causal = opts.causal and true or false
  self.dropout = opts.dropout or 0
  local bound = math.sqrt(6 / (d + 3 * d))            -- xavier_uniform_ on (3d, d)
  self.in_proj_weight = uniform({3 * d, d}, bound)
  if opts.bias ~= false then self.in_proj_bias = glimpse.zeros(3 * d):requires_grad() end
  self.out_proj = linear(d, d, opts.bias ~= false)
  if self.out_proj.bias then glimpse.no_grad(function() self.out_proj.bias:zero_() end) end
end

function MultiheadAttention:forward(query, key, value, mask, opts)
  if not glimpse.is_tensor(query) or query:dim() ~= 3 or query.shape[3] ~= self.embed_dim then
    error(string.format("MultiheadAttention: query must be (B,T,%d)", self.embed_dim), 2)
  end
  local causal = self.causal
  if opts and opts.causal ~= nil then causal = opts.causal end
  return att.multi_head(query, key, value, {
    heads = self.num_heads, in_proj_weight = self.in_proj_weight,
    in_proj_bias = self.in_proj_bias, out_weight = self.out_proj.weight,
    out_bias = self.out_proj.bias}, {mask = mask, causal = causal, dropout = self.dropout,
                                     training = self.training,
                                     need_weights = not (opts and opts.need_weights == false)})
end

function MultiheadAttention:extra_repr()
  return string.format("embed_dim=%d, num_heads=%d, causal=%s, dropout=%g", self.embed_dim,
                       self.num_heads, tostring(self.causal), self.dropout)
end

return M
