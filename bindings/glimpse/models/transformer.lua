--- glimpse.models.transformer -- a Transformer encoder-decoder (Vaswani et al. 2017) for the
-- synthetic sequence tasks, with the same calling convention as models.Seq2Seq, so
-- self-attention stands in the same table as the RNN decoders (glimpse.compare):
--
--   local model = glimpse.models.Transformer{dataset = ds, d = 64, heads = 4, layers = 2}
--   local loss, stats = model:loss(ds:collate({1, 2, 3}))     -- stats.nll, stats.token_accuracy
--   local ids, extras = model:decode(ds:collate({1, 2}), {beam = 4})  -- extras.alignments
--   local alpha = model:alignments(batch)                      -- (B,T,S) cross-attention
--   model:save("t.safetensors");  model = glimpse.models.Transformer.load("t.safetensors")
--
-- The model, from glimpse.nn's layers (PyTorch's maths and parameter names):
--   x = PE(E_src src * sqrt(d)),  memory = EncoderLayer^N(x, key padding mask)
--   y = PE(E_tgt y_<t * sqrt(d)), h = DecoderLayer^N(y, memory, causal), p(y_t) = softmax(W h_t)
-- positions: "sinusoidal" (fixed, defined at every length) or "learned" (a table of
-- max_len rows; rows past the training lengths stay near their random start), both added to
-- the embeddings (PE above); "rope", "alibi", "t5" inside each self-attention (PE is then
-- the identity); "none" nowhere.
-- The alignment a glimpse table shows for it is the last decoder layer's attention over the
-- memory, averaged over the heads.
local glimpse = require "glimpse"
local nn = require "glimpse.nn"
local Vocab = require "glimpse.data.vocab"
local C = require "glimpse.models.common"
local check = require "glimpse.check"
local options = require "glimpse.options"
local variants = require "glimpse.attention.mh_variants"

local M = {}

local CLS = "Transformer"
-- the first two are added to the embeddings; the others act inside self-attention
local POSITIONS = {"sinusoidal", "learned", "rope", "alibi", "t5", "none"}
local ADDED = {sinusoidal = true, learned = true}
local FORMAT = "glimpse.transformer"
local OPTIONS = options.declare(CLS, C.with_vocabs {
  {"d", "int", 64, range = {1}, help = "model width (a multiple of heads)"},
  {"heads", "int", 4, range = {1}, help = "attention heads"},
  {"layers", "int", 2, range = {1}, help = "encoder and decoder layers each"},
  {"ff", "int", 128, range = {1}, help = "feed-forward width"},
  {"dropout", "number", 0, range = {0, 0.99}, help = "dropout"},
  {"positions", "string", "sinusoidal", choices = POSITIONS,
   help = "sinusoidal | learned (added to the embeddings) | rope | alibi | t5 (inside " ..
          "self-attention) | none"},
  {"kv_heads", "int", nil, range = {1}, help = "self-attention key/value heads (default " ..
                                                "heads; 1 = multi-query)"},
  {"window", "int", nil, range = {1}, help = "self-attention sees keys with |i - j| < window"},
  {"top_k", "int", nil, range = {1}, help = "self-attention keeps each row's top_k scores"},
  {"attention", "string", "softmax", choices = {"softmax", "linear"},
   help = "self-attention: softmax or linear (Katharopoulos et al. 2020)"},
  {"max_len", "int", 256, range = {1}, help = "longest source or target (+1)"},
  {"norm_first", "boolean", false, help = "pre-norm layers"},
})

local Transformer = nn.Module:extend("Transformer")
Transformer.options = OPTIONS
M.Transformer = Transformer

--- Transformer{dataset= | src_vocab=, tgt_vocab=, d=64, heads=4, layers=2, ff=128,
---             dropout=0, positions="sinusoidal", max_len=256, norm_first=false,
---             kv_heads=heads, window=nil, top_k=nil, attention="softmax"} -> model
-- d: the model width (a multiple of heads); layers: encoder and decoder layers each; ff: the
-- feed-forward width; max_len: the longest source or target (+1) it can take.
-- positions "rope", "alibi", "t5" go to every self-attention (encoder bidirectional, decoder
-- causal), not to the cross-attention; "none" uses no positions at all.  kv_heads, window,
-- top_k and attention are the self-attentions' variants (nn.MultiheadAttention's options).
function Transformer:init(o)
  local c = OPTIONS:check(o, 3)
  local src_vocab, tgt_vocab, ds = C.vocabs(CLS, c, 3)
  c.task = c.task or (ds and ds.task) or nil
  c.dataset, c.src_vocab, c.tgt_vocab = nil, nil, nil   -- the config keeps sizes, not data
  if c.d % c.heads ~= 0 then
    C.fail(3, "%s: d = %d is not a multiple of heads = %d", CLS, c.d, c.heads)
  end
  rawset(self, "config", c)
  rawset(self, "src_vocab", src_vocab)
  rawset(self, "tgt_vocab", tgt_vocab)
  self.src_emb = nn.Embedding(src_vocab:size(), c.d)
  self.tgt_emb = nn.Embedding(tgt_vocab:size(), c.d)
  if ADDED[c.positions] then
    self.pos = nn.PositionalEncoding(c.d, {max_len = c.max_len, learned = c.positions == "learned"})
  else   -- rope, alibi, t5 act inside the self-attention; none is NoPE
    self.pos = nn.Identity()
  end
  local lo = {dim_feedforward = c.ff, dropout = c.dropout, norm_first = c.norm_first,
              positions = ADDED[c.positions] and "none" or c.positions,
              kv_heads = c.kv_heads, window = c.window, top_k = c.top_k,
              attention = c.attention}
  variants.check(lo, c.heads, c.kv_heads or c.heads, c.d // c.heads, CLS, 3)
  self.encoder = nn.Sequential{}
  self.decoder = nn.Sequential{}
  for _ = 1, c.layers do
    self.encoder:add(nn.TransformerEncoderLayer(c.d, c.heads, lo))
  end
  for _ = 1, c.layers do
    self.decoder:add(nn.TransformerDecoderLayer(c.d, c.heads, lo))
  end
  self.out = nn.Linear(c.d, tgt_vocab:size())
end

local function check_batch(b, fname, need_target, level)
  if type(b) ~= "table" or not glimpse.is_tensor(b.src) or b.src:dim() ~= 2 then
    C.fail(level + 1, "%s: batch must be a table with src (B,S) (ds:collate), got %s", fname,
           type(b) == "table" and check.shape(b.src) or type(b))
  end
  if need_target and (not glimpse.is_tensor(b.tgt_in) or b.tgt_in:dim() ~= 2
                      or b.tgt_in.shape[1] ~= b.src.shape[1]) then
    C.fail(level + 1, "%s: batch.tgt_in must be a (B,T) tensor with B = %d, got %s", fname,
           b.src.shape[1], check.shape(b.tgt_in))
  end
end

local function src_mask(b)
  return b.src_mask or b.src:ne(Vocab.PAD)
end

--- model:encode(src (B,S), mask (B,S)) -> memory (B,S,d)
function Transformer:encode(src, mask)
  local d = self.config.d
  if src.shape[2] > self.config.max_len then
    C.fail(2, "%s:encode: source length %d > max_len %d", CLS, src.shape[2], self.config.max_len)
  end
  local x = self.pos(self.src_emb(src) * math.sqrt(d))
  for _, layer in self.encoder:named_children() do x = layer(x, {key_padding_mask = mask}) end
  return x
end

--- model:decode_logits(tgt_in (B,T), memory (B,S,d), mask (B,S)) -> logits (B,T,V),
--- cross-attention weights of the last layer (B,T,S)
function Transformer:decode_logits(tgt_in, memory, mask)
  local y = self.pos(self.tgt_emb(tgt_in) * math.sqrt(self.config.d))
  local w
  local n, i = #self.decoder, 0
  for _, layer in self.decoder:named_children() do
    i = i + 1
    y, w = layer(y, memory, {causal = true, memory_key_padding_mask = mask,
                             need_weights = i == n})
  end
  return self.out(y), w
end

--- model:loss(batch) -> loss (mean token cross-entropy), stats {nll=, token_accuracy=, tokens=}
function Transformer:loss(b)
  check_batch(b, "Transformer:loss", true, 2)
  local mask = src_mask(b)
  local logits = self:decode_logits(b.tgt_in, self:encode(b.src, mask), mask)
  local B, T, V = logits.shape[1], logits.shape[2], logits.shape[3]
  local flat = logits:reshape(B * T, V)
  local targets = b.tgt_out:reshape(B * T)
  local loss = glimpse.cross_entropy(flat, targets, {ignore_index = Vocab.PAD})
  local ntok = b.tgt_mask:sum():item()
  local stats = {nll = loss:item(), tokens = ntok}
  glimpse.no_grad(function()
    local right = flat:argmax(2):eq(targets):reshape(B, T) * b.tgt_mask
    stats.token_accuracy = right:sum():item() / math.max(ntok, 1)
  end)
  return loss, stats
end

--- model:alignments(batch) -> (B,T,S) the last decoder layer's attention over the source
--- under teacher forcing (heads averaged); evaluation mode, no tape
function Transformer:alignments(b)
  check_batch(b, "Transformer:alignments", true, 2)
  local was_training = self.training
  self:evaluate()
  local ok, w = pcall(glimpse.no_grad, function()
    local mask = src_mask(b)
    local _, w = self:decode_logits(b.tgt_in, self:encode(b.src, mask), mask)
    return w
  end)
  if was_training then self:train() end
  if not ok then error(w, 0) end
  return w
end

-- ---------------------------------------------------------------------------------------
-- decoding through glimpse.decode: a step over the decoder layers' key/value caches, or
-- (cache = false) one that runs the decoder over the whole prefix, the cached one's oracle

local DECODE_OPTIONS = options.declare("Transformer:decode", {
  {"beam", "int", 1, range = {1}, help = "beam width (1: greedy decoding)"},
  {"max_len", "int", nil, range = {1},
   help = "most output steps (default: the targets' width + 5, else 2 S + 5; at most max_len)"},
  {"length_penalty", "number", 0, help = "beam search's GNMT length normalisation alpha"},
  {"n_best", "int", 1, range = {1}, help = "hypotheses kept per row (extras.n_best; <= beam)"},
  {"cache", "boolean", true,
   help = "keep the decoder's keys/values (false: recompute the prefix at every step)"},
})
Transformer.decode_options = DECODE_OPTIONS

-- the cached state: the memory's padding mask and one cache per decoder layer (the memory's
-- keys/values projected once; the target's appended step by step), all with a row per sequence
function Transformer:_decode_state(b)
  local mask = src_mask(b)
  local memory = self:encode(b.src, mask)
  local layers = {}
  for _, layer in self.decoder:named_children() do layers[#layers + 1] = layer:init_cache(memory) end
  return {mask = mask, layers = layers}
end

-- glimpse.decode's step over the caches: y (N) the previous ids, t the step (position t - 1)
function Transformer:_decode_step(y, st, t)
  local N = y.shape[1]
  local x = self.pos(self.tgt_emb(y:reshape(N, 1)) * math.sqrt(self.config.d), t - 1)
  local layers, w = {}, nil
  local n = #st.layers
  local i = 0
  for _, layer in self.decoder:named_children() do
    i = i + 1
    x, w, layers[i] = layer:step(x, nil, st.layers[i], {memory_key_padding_mask = st.mask,
                                                         q_start = t - 1, need_weights = i == n})
  end
  local V = self.tgt_vocab:size()
  return glimpse.log_softmax(self.out(x):reshape(N, V), 2), {mask = st.mask, layers = layers},
         w:reshape(N, w.shape[3])
end

-- the recomputing state and step: the prefix of ids so far (N,t) is the state, and every step
-- runs the decoder over all of it (decode_logits), reading the last position
function Transformer:_recompute_state(b)
  local mask = src_mask(b)
  return {mask = mask, memory = self:encode(b.src, mask)}
end

function Transformer:_recompute_step(y, st, t)
  local N = y.shape[1]
  local prefix = y:reshape(N, 1)
  if st.prefix then prefix = glimpse.cat({st.prefix, prefix}, 2) end
  local logits, w = self:decode_logits(prefix, st.memory, st.mask)
  return glimpse.log_softmax(logits:select(2, t), 2),
         {mask = st.mask, memory = st.memory, prefix = prefix}, w:select(2, t)
end

--- model:decode(batch, {beam=1, max_len=T+5, length_penalty=0, n_best=1, cache=true}) ->
---   outputs, extras
-- Greedy decoding (beam = 1, glimpse.decode.greedy) or beam search (glimpse.decode.beam,
-- GNMT length penalty) through the decoder layers' key/value caches, so a step costs one new
-- row per layer (cache = false: the decoder runs over the whole prefix at every step, the
-- same maths, kept as the reference).  outputs[b]: the predicted ids of row b (a Lua list,
-- <end> excluded); extras: {alignments = {b -> one attention row (S numbers) per step, the
-- <end> step included: the last decoder layer's cross-attention averaged over heads},
-- scores = {b -> log-probability}, finished = {b -> boolean}, no_finite_score = {b -> boolean},
-- n_best = {b -> beam search's n_best hypotheses {tokens, score, log_prob, length, finished,
-- alignment}} (beam > 1 only)}.  max_len defaults to the width of batch.tgt_in + 5 when the
-- batch has targets, else 2 S + 5, and is at most the model's max_len.  Runs in evaluation
-- mode without a tape.
function Transformer:decode(b, opts)
  check_batch(b, "Transformer:decode", false, 2)
  local o = DECODE_OPTIONS:check(opts, 2)
  if o.n_best > o.beam then
    C.fail(2, "Transformer:decode: option 'n_best' (%d) cannot exceed option 'beam' (%d)",
           o.n_best, o.beam)
  end
  local max_len = o.max_len or
    (glimpse.is_tensor(b.tgt_in) and b.tgt_in.shape[2] + 5 or 2 * b.src.shape[2] + 5)
  max_len = math.min(max_len, self.config.max_len)
  local make, step = self._decode_state, self._decode_step
  if not o.cache then make, step = self._recompute_state, self._recompute_step end
  local d = {max_len = max_len, start = Vocab.START, stop = Vocab.END, beam = o.beam}
  if o.beam > 1 then d.length_penalty, d.n_best = o.length_penalty, o.n_best end
  return C.decode(self, function() return make(self, b) end,
                  function(y, s, t) return step(self, y, s, t) end, d)
end

--- model:save(path, meta) -> path (safetensors with the configuration and vocabularies)

--- Transformer.load(path) -> model (evaluation mode), meta
C.checkpoints(Transformer, M, CLS, FORMAT, true)

function Transformer:extra_repr()
  local c = self.config
  local extra = ""
  if c.kv_heads then extra = extra .. ", kv_heads=" .. c.kv_heads end
  if c.window then extra = extra .. ", window=" .. c.window end
  if c.top_k then extra = extra .. ", top_k=" .. c.top_k end
  if c.attention ~= "softmax" then extra = extra .. ", attention=" .. c.attention end
  return string.format("d=%d, heads=%d, layers=%d, ff=%d, positions=%s%s, src=%d, tgt=%d",
                       c.d, c.heads, c.layers, c.ff, c.positions, extra, self.src_vocab:size(),
                       self.tgt_vocab:size())
end

return M
