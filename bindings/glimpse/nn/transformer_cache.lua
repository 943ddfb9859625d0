--- glimpse.nn.transformer_cache -- incremental decoding for nn.TransformerDecoderLayer: a
-- key/value cache, so that decoding one token per step costs the new row, not the prefix.
-- Adds two methods to the layer class (glimpse.nn loads this file; it exports nothing):
--
--   local cache = dec:init_cache(memory)                -- the memory's keys/values, once
--   for t = 1, T do
--     local y_t = pos(emb(ids_t) * math.sqrt(d), t - 1)  -- (B,1,d), position t - 1
--     local out, w
--     out, w, cache = dec:step(y_t, nil, cache, {memory_key_padding_mask = src_mask,
--                                                need_weights = true})
--   end
--
-- The cache is a table {tgt = {k, v, start}, memory = {k, v}} of (B,heads,T,dh) tensors whose
-- rows are the batch (glimpse.decode reorders them with the beams); step never changes it in
-- place.  The self-attention's position scheme and variant (rope, alibi, t5, kv_heads, window,
-- top_k, linear attention: the layer's options) carry over to the step
-- (attention.multi_head_step); the cross-attention is plain.
-- Run on a whole sequence one position at a time, step gives the rows that
-- dec(tgt, memory, {causal = true, ...}) gives (to float rounding).
local glimpse = require "glimpse"
local check = require "glimpse.check"
local options = require "glimpse.options"
local att = require "glimpse.attention"
local Decoder = require("glimpse.nn.transformer").TransformerDecoderLayer

local STEP = options.declare("nn.TransformerDecoderLayer:step", {
  {"memory_key_padding_mask", "tensor|table", nil,
   help = "(B,S): which memory positions are real (1) or padding (0)"},
  {"q_start", "int", nil, range = {0},
   help = "0-based position of tgt's first row (default: the cached length)"},
  {"need_weights", "boolean", false, help = "return the cross-attention weights"},
})
Decoder.step_options = STEP

-- the attention.multi_head parameters of an nn.MultiheadAttention
local function params(mha)
  return {heads = mha.num_heads, kv_heads = mha.kv_heads,
          in_proj_weight = mha.in_proj_weight, in_proj_bias = mha.in_proj_bias,
          q_proj_weight = mha.q_proj_weight, k_proj_weight = mha.k_proj_weight,
          v_proj_weight = mha.v_proj_weight, q_proj_bias = mha.q_proj_bias,
          k_proj_bias = mha.k_proj_bias, v_proj_bias = mha.v_proj_bias,
          relative_attention_bias = mha.relative_attention_bias,
          out_weight = mha.out_proj.weight, out_bias = mha.out_proj.bias,
          module = mha}                                   -- module: attention.capture's key
end

local function check_input(x, d, what, fn, level)
  if not glimpse.is_tensor(x) or x:dim() ~= 3 or x.shape[3] ~= d then
    check.fail(level + 1, "%s: %s must be (B,T,%d), got %s", fn, what, d, check.shape(x))
  end
end

--- dec:init_cache(memory (B,S,d)) -> cache {memory = {k, v}}: the cross-attention's keys and
--- values of the memory (B,heads,S,dh), projected once per sequence; no target positions yet
function Decoder:init_cache(memory)
  local fn = "TransformerDecoderLayer:init_cache"
  check_input(memory, self.d_model, "memory", fn, 2)
  return {memory = att.kv_project(memory, params(self.multihead_attn))}
end

--- dec:step(tgt (B,Tq,d), memory (B,S,d) or nil, cache or nil, {memory_key_padding_mask=,
---   q_start=, need_weights=false}) -> out (B,Tq,d), cross-attention weights (B,Tq,S) averaged
---   over heads (nil unless need_weights), the new cache
-- The layer on Tq new target positions (one per decoding step, or a prefix at once), the
-- self-attention causal over the cached positions and the new ones.  cache: from init_cache
-- or a previous step (nil: a fresh one from memory); memory may be nil when the cache holds
-- its projection.  q_start (0-based) is the position of tgt's first row, by default the
-- number of cached positions.  Dropout acts as in forward (training mode only).
function Decoder:step(tgt, memory, cache, opts)
  local fn = "TransformerDecoderLayer:step"
  check_input(tgt, self.d_model, "tgt", fn, 2)
  if cache ~= nil and type(cache) ~= "table" then
    check.fail(2, "%s: cache must be a table (from init_cache or step) or nil, got %s", fn,
               type(cache))
  end
  local o = STEP:check(opts, 2)
  local mkv = cache and cache.memory
  if mkv == nil then
    if memory == nil then
      check.fail(2, "%s: memory is nil and the cache holds no memory keys (call init_cache)", fn)
    end
    check_input(memory, self.d_model, "memory", fn, 2)
    mkv = att.kv_project(memory, params(self.multihead_attn))
  end
  local B = tgt.shape[1]
  if mkv.k.shape[1] ~= B then
    check.fail(2, "%s: the memory's batch %d and tgt %s differ", fn, mkv.k.shape[1],
               check.shape(tgt))
  end
  local mkpm = o.memory_key_padding_mask
  if type(mkpm) == "table" then mkpm = glimpse.tensor(mkpm) end
  local training, weights = self.training, nil
  local tkv
  local function sa(x)
    local y, _
    local so = {q_start = o.q_start, need_weights = false, dropout = self.self_attn.dropout,
                training = training}
    for k, v in pairs(self.self_attn.variant or {}) do so[k] = v end   -- positions, window...
    y, _, tkv = att.multi_head_step(x, params(self.self_attn), cache and cache.tgt, so)
    return self.dropout1(y)
  end
  local function ca(x)
    local y
    y, weights = att.multi_head_cached(x, params(self.multihead_attn), mkv,
                                       {mask = mkpm, need_weights = o.need_weights,
                                        dropout = self.multihead_attn.dropout,
                                        training = training})
    return self.dropout2(y)
  end
  local function ff(x)
    return self.dropout3(self.linear2(self.dropout(self.activation_fn(self.linear1(x)))))
  end
  local x = tgt
  if self.norm_first then
    x = x + sa(self.norm1(x))
    x = x + ca(self.norm2(x))
    x = x + ff(self.norm3(x))
  else
    x = self.norm1(x + sa(x))
    x = self.norm2(x + ca(x))
    x = self.norm3(x + ff(x))
  end
  return x, weights, {tgt = tkv, memory = mkv}
end

return {}
