--- glimpse.nn.transformer -- the Transformer's layers (Vaswani et al. 2017) with PyTorch's
-- parameter names and outputs: nn.TransformerEncoderLayer, nn.TransformerDecoderLayer and
-- nn.PositionalEncoding (sinusoidal or learned).  glimpse.nn merges them in.
--
--   local enc = nn.TransformerEncoderLayer(32, 4, {dim_feedforward = 64, dropout = 0.1})
--   local h = enc(x, {key_padding_mask = src_mask})                   -- x (B,S,32)
--   local dec = nn.TransformerDecoderLayer(32, 4, {dim_feedforward = 64})
--   local y, w = dec(t, h, {causal = true, memory_key_padding_mask = src_mask,
--                           need_weights = true})                      -- w (B,T,S)
--
-- Masks are glimpse's: 1 = may attend (a real token), 0 = blocked (padding).  PyTorch's
-- boolean masks mean the opposite (True = blocked): pass `1 - torch_mask`.
--   key_padding_mask (B,S): which keys are real;  mask (T,S) or (B,T,S): which query may see
--   which key (PyTorch's attn_mask / src_mask / tgt_mask);  causal = true: query i sees keys
--   j <= i (PyTorch's generate_square_subsequent_mask).  The three combine (all must allow).
-- A query row with no visible key gets all-zero weights (PyTorch gives NaN there).
-- The self-attention (not the decoder's cross-attention) takes nn.MultiheadAttention's
-- position schemes and variants: positions = "rope" | "alibi" | "t5" | "none", rope_base,
-- t5_buckets, t5_max_distance, kv_heads, window, top_k, attention = "softmax" | "linear"
-- (docs/api/transformer.md).  T5 buckets are bidirectional unless the call is causal.
local glimpse = require "glimpse"
local check = require "glimpse.check"
local options = require "glimpse.options"
local variants = require "glimpse.attention.mh_variants"

-- the layers these are made of, from their own family files (not glimpse.nn: no cycle)
local nn = {
  Module = require("glimpse.nn.module").Module,
  Linear = require("glimpse.nn.linear").Linear,
  LayerNorm = require("glimpse.nn.norm").LayerNorm,
  Dropout = require("glimpse.nn.dropout").Dropout,
  MultiheadAttention = require("glimpse.nn.multihead").MultiheadAttention,
}

local M = {}

local is_tensor = glimpse.is_tensor

local function as_mask(m, what, fn)
  if m == nil or is_tensor(m) then return m end
  if type(m) == "table" then return glimpse.tensor(m) end
  error(string.format("%s: %s must be a tensor or a nested table of 0/1, got %s", fn, what,
                      type(m)), 3)
end

-- one attention block: query (B,T,d) over kv (B,S,d) (nil: self-attention); an attention
-- mask (T,S) or (B,T,S) takes multi_head's general path (the same maths with a full
-- (B,heads,T,S) mask), none the fused one
local function attend(mha, query, kv, mask, kpm, causal, need_weights, fn)
  if kpm ~= nil then
    local S = (kv or query).shape[2]
    if kpm:dim() ~= 2 or kpm.shape[1] ~= query.shape[1] or kpm.shape[2] ~= S then
      error(string.format("%s: key padding mask %s should be (B,S) = [%d,%d]", fn,
                          check.shape(kpm), query.shape[1], S), 4)
    end
  end
  if mask ~= nil then
    local Tq, Tk = query.shape[2], (kv or query).shape[2]
    local ms, md = mask.shape, mask:dim()
    if not ((md == 2 and ms[1] == Tq and ms[2] == Tk) or
            (md == 3 and ms[2] == Tq and ms[3] == Tk and (ms[1] == 1 or ms[1] == query.shape[1]))) then
      error(string.format("%s: attention mask %s should be (T,S) = [%d,%d] or (B,T,S)", fn,
                          check.shape(mask), Tq, Tk), 4)
    end
  end
  return mha(query, kv, kv, kpm, {causal = causal, need_weights = need_weights, attn_mask = mask})
end

local ACTIVATIONS = {
  relu = function(x) return x:relu() end,
  gelu = function(x) return x:gelu() end,      -- the exact (erf) form, PyTorch's default
}

local function check_input(x, d, what, fn)
  if not is_tensor(x) or x:dim() ~= 3 or x.shape[3] ~= d then
    check.fail(3, "%s: %s must be (B,T,%d), got %s", fn, what, d, check.shape(x))
  end
end

local LAYER_ENTRIES = {
  {"dim_feedforward", "int", 2048, range = {1}, help = "width of the feed-forward block"},
  {"dropout", "number", 0.1, range = {0, 1}, help = "dropout in [0, 1) after each block and " ..
                                                  "on the attention weights"},
  {"activation", "string|function", "relu", choices = {"relu", "gelu"},
   help = "the feed-forward activation: relu, gelu (exact) or a function"},
  {"norm_first", "boolean", false, help = "pre-norm (x + f(norm(x))) instead of post-norm"},
  {"layer_norm_eps", "number", 1e-5, range = {0}, help = "the layer norms' eps"},
}
-- the self-attention's position scheme and variant (nn.MultiheadAttention's own options)
for _, e in ipairs(require("glimpse.nn.multihead").VARIANT_ENTRIES) do
  LAYER_ENTRIES[#LAYER_ENTRIES + 1] = e
end

-- what the self-attention gets of the layer's options
local function self_attention_options(o)
  return {dropout = o.dropout, positions = o.positions, rope_base = o.rope_base,
          t5_buckets = o.t5_buckets, t5_max_distance = o.t5_max_distance,
          kv_heads = o.kv_heads, window = o.window, top_k = o.top_k, attention = o.attention}
end

local MASK = "tensor|table"
local ENCODER_FORWARD = options.declare("nn.TransformerEncoderLayer:forward", {
  {"mask", MASK, nil, help = "(S,S) or (B,S,S): which query may see which key (1 = may)"},
  {"key_padding_mask", MASK, nil, help = "(B,S): which keys are real (1) or padding (0)"},
  {"causal", "boolean", false, help = "query i sees keys j <= i"},
  {"need_weights", "boolean", false, help = "return the weights averaged over heads"},
})
local DECODER_FORWARD = options.declare("nn.TransformerDecoderLayer:forward", {
  {"tgt_mask", MASK, nil, help = "(T,T) or (B,T,T): the self-attention's visibility"},
  {"memory_mask", MASK, nil, help = "(T,S) or (B,T,S): the cross-attention's visibility"},
  {"tgt_key_padding_mask", MASK, nil, help = "(B,T): which target positions are real"},
  {"memory_key_padding_mask", MASK, nil, help = "(B,S): which memory positions are real"},
  {"causal", "boolean", false, help = "the self-attention's query i sees keys j <= i"},
  {"need_weights", "boolean", false, help = "return the cross-attention weights"},
})

-- the options both layers take, checked; level 4 is the user's line calling the constructor
local function layer_options(spec, d, heads, opts)
  local cls = spec.owner
  check.int(cls, "d_model", d, 1, nil, 4)
  if math.type(heads) ~= "integer" or heads < 1 or d % heads ~= 0 then
    check.fail(4, "%s: nhead must be a positive integer dividing d_model %d, got %s", cls, d,
               tostring(heads))
  end
  local o = spec:check(opts, 4)
  variants.check(o, heads, o.kv_heads or heads, d // heads, cls, 4)
  if o.dropout >= 1 then
    check.fail(4, "%s: dropout must be a number in [0,1), got %s", cls, tostring(o.dropout))
  end
  if type(o.activation) == "function" then
    o.activation_fn, o.activation = o.activation, "custom"
  else
    o.activation_fn = ACTIVATIONS[o.activation]
  end
  return o
end

-- the feed-forward block's modules, registered in PyTorch's order
local function feed_forward(self, nn, d, o)
  self.linear1 = nn.Linear(d, o.dim_feedforward)
  self.dropout = nn.Dropout(o.dropout)
  self.linear2 = nn.Linear(o.dim_feedforward, d)
end

local function setup(self, d, heads, o)
  self.d_model, self.nhead = d, heads
  self.dim_feedforward, self.norm_first = o.dim_feedforward, o.norm_first
  self.layer_norm_eps, self.activation, self.activation_fn = o.layer_norm_eps, o.activation,
                                                             o.activation_fn
  self.dropout_p = o.dropout
end

local function ff_block(self, x, drop)
  return drop(self.linear2(self.dropout(self.activation_fn(self.linear1(x)))))
end

local function layer_repr(self)
  local sa = self.self_attn
  local pos = sa.positions ~= "none" and ", positions=" .. sa.positions or ""
  return string.format("d_model=%d, nhead=%d, dim_feedforward=%d, dropout=%g, " ..
                       "activation=%s, norm_first=%s%s", self.d_model, self.nhead,
                       self.dim_feedforward, self.dropout_p, self.activation,
                       tostring(self.norm_first), pos)
end

--- nn.PositionalEncoding.sinusoid(L, d) -> (L, d) tensor: row p (1-based) holds the encoding of
--- position p - 1: sin(pos / 10000^(2i/d)) in column 2i+1, cos(...) in column 2i+2.
local function sinusoid(L, d)
  local rows = {}
  for p = 1, L do
    local r = {}
    for c = 0, d - 1 do
      local i2 = c - c % 2
      local angle = (p - 1) / 10000 ^ (i2 / d)
      r[c + 1] = c % 2 == 0 and math.sin(angle) or math.cos(angle)
    end
    rows[p] = r
  end
  return glimpse.tensor(rows)
end

-- ---------------------------------------------------------------------------------------
-- the classes

local function build(nn)
  local Encoder = nn.Module:extend("TransformerEncoderLayer")
  local Decoder = nn.Module:extend("TransformerDecoderLayer")
  local PosEnc = nn.Module:extend("PositionalEncoding")
  Encoder.options = options.declare("nn.TransformerEncoderLayer", LAYER_ENTRIES)
  Decoder.options = options.declare("nn.TransformerDecoderLayer", LAYER_ENTRIES)
  Encoder.forward_options, Decoder.forward_options = ENCODER_FORWARD, DECODER_FORWARD
  PosEnc.options = options.declare("nn.PositionalEncoding", {
    {"max_len", "int", 1024, range = {1}, help = "the most positions"},
    {"learned", "boolean", false, help = "a learned table instead of the sinusoids"},
    {"dropout", "number", 0, range = {0, 1}, help = "dropout on x + PE (training)"},
    {"init_std", "number", 0.02, range = {0}, help = "learned: the table's N(0, std^2) init"},
  })

  --- nn.TransformerEncoderLayer(d_model, nhead, {dim_feedforward=2048, dropout=0.1,
  ---   activation="relu"|"gelu"|function, norm_first=false, layer_norm_eps=1e-5,
  ---   positions="none", rope_base=10000, t5_buckets=32, t5_max_distance=128,
  ---   kv_heads=nhead, window=nil, top_k=nil, attention="softmax"}) -> module
  --- Parameters as PyTorch's: self_attn.{in_proj_weight,in_proj_bias,out_proj.weight,
  --- out_proj.bias}, linear1.*, linear2.*, norm1.*, norm2.* (dropout is also applied to the
  --- attention weights, as in PyTorch).
  function Encoder:init(d, heads, opts)
    local o = layer_options(Encoder.options, d, heads, opts)
    setup(self, d, heads, o)
    self.self_attn = nn.MultiheadAttention(d, heads, self_attention_options(o))
    feed_forward(self, nn, d, o)
    self.norm1 = nn.LayerNorm(d, {eps = o.layer_norm_eps})
    self.norm2 = nn.LayerNorm(d, {eps = o.layer_norm_eps})
    self.dropout1 = nn.Dropout(o.dropout)
    self.dropout2 = nn.Dropout(o.dropout)
  end

  --- enc(src (B,S,d), {mask=(S,S)|(B,S,S), key_padding_mask=(B,S), causal=false,
  ---   need_weights=false}) -> out (B,S,d), weights (B,S,S) averaged over heads (nil unless
  ---   need_weights).  Post-norm: x = norm1(x + SA(x)), x = norm2(x + FF(x)); norm_first:
  ---   x = x + SA(norm1(x)), x = x + FF(norm2(x)).
  function Encoder:forward(src, opts)
    local fn = "TransformerEncoderLayer"
    check_input(src, self.d_model, "src", fn)
    opts = ENCODER_FORWARD:check(opts, 2)
    local mask = as_mask(opts.mask, "mask", fn)
    local kpm = as_mask(opts.key_padding_mask, "key_padding_mask", fn)
    local causal, need = opts.causal, opts.need_weights
    local weights
    local function sa(x)
      local y
      y, weights = attend(self.self_attn, x, nil, mask, kpm, causal, need, fn)
      return self.dropout1(y)
    end
    local x = src
    if self.norm_first then
      x = x + sa(self.norm1(x))
      x = x + ff_block(self, self.norm2(x), self.dropout2)
    else
      x = self.norm1(x + sa(x))
      x = self.norm2(x + ff_block(self, x, self.dropout2))
    end
    return x, weights
  end

  Encoder.extra_repr = layer_repr

  --- nn.TransformerDecoderLayer(d_model, nhead, {same options as the encoder layer})
  --- Parameters as PyTorch's: self_attn.*, multihead_attn.* (the attention over the
  --- memory), linear1.*, linear2.*, norm1.*, norm2.*, norm3.*.  The position scheme and
  --- variant options act on self_attn only; multihead_attn stays plain attention.
  function Decoder:init(d, heads, opts)
    local o = layer_options(Decoder.options, d, heads, opts)
    setup(self, d, heads, o)
    self.self_attn = nn.MultiheadAttention(d, heads, self_attention_options(o))
    self.multihead_attn = nn.MultiheadAttention(d, heads, {dropout = o.dropout})
    feed_forward(self, nn, d, o)
    self.norm1 = nn.LayerNorm(d, {eps = o.layer_norm_eps})
    self.norm2 = nn.LayerNorm(d, {eps = o.layer_norm_eps})
    self.norm3 = nn.LayerNorm(d, {eps = o.layer_norm_eps})
    self.dropout1 = nn.Dropout(o.dropout)
    self.dropout2 = nn.Dropout(o.dropout)
    self.dropout3 = nn.Dropout(o.dropout)
  end

  --- dec(tgt (B,T,d), memory (B,S,d), {tgt_mask=(T,T)|(B,T,T), memory_mask=(T,S)|(B,T,S),
  ---   tgt_key_padding_mask=(B,T), memory_key_padding_mask=(B,S), causal=false,
  ---   need_weights=false}) -> out (B,T,d), cross-attention weights (B,T,S) averaged over
  ---   heads (nil unless need_weights).  causal is PyTorch's tgt_is_causal with the causal
  ---   tgt_mask: as in PyTorch, nothing is causal unless asked.  Post-norm:
  ---   x = norm1(x + SA(x)), x = norm2(x + MHA(x, memory)), x = norm3(x + FF(x));
  ---   norm_first: x = x + SA(norm1(x)), x = x + MHA(norm2(x), memory), x = x + FF(norm3(x)).
  function Decoder:forward(tgt, memory, opts)
    local fn = "TransformerDecoderLayer"
    check_input(tgt, self.d_model, "tgt", fn)
    check_input(memory, self.d_model, "memory", fn)
    if memory.shape[1] ~= tgt.shape[1] then
      check.fail(2, "%s: memory %s and tgt %s differ in batch size", fn, check.shape(memory),
                 check.shape(tgt))
    end
    opts = DECODER_FORWARD:check(opts, 2)
    local tmask = as_mask(opts.tgt_mask, "tgt_mask", fn)
    local mmask = as_mask(opts.memory_mask, "memory_mask", fn)
    local tkpm = as_mask(opts.tgt_key_padding_mask, "tgt_key_padding_mask", fn)
    local mkpm = as_mask(opts.memory_key_padding_mask, "memory_key_padding_mask", fn)
    local causal, need = opts.causal, opts.need_weights
    local weights
    local function sa(x)
      return self.dropout1((attend(self.self_attn, x, nil, tmask, tkpm, causal, false, fn)))
    end
    local function ca(x)
      local y
      y, weights = attend(self.multihead_attn, x, memory, mmask, mkpm, false, need, fn)
      return self.dropout2(y)
    end
    local x = tgt
    if self.norm_first then
      x = x + sa(self.norm1(x))
      x = x + ca(self.norm2(x))
      x = x + ff_block(self, self.norm3(x), self.dropout3)
    else
      x = self.norm1(x + sa(x))
      x = self.norm2(x + ca(x))
      x = self.norm3(x + ff_block(self, x, self.dropout3))
    end
    return x, weights
  end

  Decoder.extra_repr = layer_repr

  --- nn.PositionalEncoding(d, {max_len=1024, learned=false, dropout=0, init_std=0.02})
  --- Sinusoidal (Vaswani et al. 2017, sec. 3.5): PE(pos, 2i) = sin(pos / 10000^(2i/d)),
  --- PE(pos, 2i+1) = cos(pos / 10000^(2i/d)), pos = 0 for the first position, in a
  --- non-persistent buffer `pe` (max_len, d) (not in state_dict: it is made from d).
  --- learned = true: a parameter `weight` (max_len, d) ~ N(0, init_std^2), in state_dict.
  function PosEnc:init(d, opts)
    local cls = "nn.PositionalEncoding"
    check.int(cls, "d", d, 1, nil, 3)
    local o = PosEnc.options:check(opts, 3)
    local L = o.max_len
    self.d_model, self.max_len, self.learned = d, L, o.learned
    if self.learned then
      local w = glimpse.randn(L, d) * o.init_std
      self.weight = w:detach():requires_grad()
    else
      self:register_buffer("pe", sinusoid(L, d), false)
    end
    self.dropout_p = o.dropout
    self.dropout = nn.Dropout(self.dropout_p)
  end

  --- pe(x (B,T,d) [, offset=0]) -> dropout(x + PE[offset+1 .. offset+T]); the offset places
  --- one decoding step (T = 1) at position offset + 1.
  function PosEnc:forward(x, offset)
    local fn = "PositionalEncoding"
    check_input(x, self.d_model, "x", fn)
    offset = offset or 0
    local T = x.shape[2]
    if math.type(offset) ~= "integer" or offset < 0 or offset + T > self.max_len then
      error(string.format("%s: positions %s..%s outside 1..max_len=%d (x %s)", fn,
                          tostring(offset + 1), tostring(offset + T), self.max_len,
                          check.shape(x)), 2)
    end
    local pos = self.learned and self.weight or self.pe
    return self.dropout(x + pos:narrow(1, offset + 1, T))
  end

  function PosEnc:extra_repr()
    return string.format("d=%d, max_len=%d, learned=%s, dropout=%g", self.d_model,
                         self.max_len, tostring(self.learned), self.dropout_p)
  end

  return {TransformerEncoderLayer = Encoder, TransformerDecoderLayer = Decoder,
          PositionalEncoding = PosEnc}
end


local classes = build(nn)
M.TransformerEncoderLayer = classes.TransformerEncoderLayer
M.TransformerDecoderLayer = classes.TransformerDecoderLayer
M.PositionalEncoding = classes.PositionalEncoding
M.PositionalEncoding.sinusoid = sinusoid

return M
