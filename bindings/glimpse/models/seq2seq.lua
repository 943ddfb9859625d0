--- glimpse.models.seq2seq -- an attentional encoder-decoder (Luong et al. 2015) for the
-- synthetic tasks of datasets/seq2seq_tasks.lua, as one nn.Module:
--
--   local ds = glimpse.data.seq2seq.reversal{n = 1000, max_len = 10}
--   local model = glimpse.models.Seq2Seq{dataset = ds, score = "general", mode = "soft"}
--   local loss, stats = model:loss(ds:collate({1, 2, 3}))     -- stats.nll, stats.token_accuracy
--   local ids, extras = model:decode(ds:collate({1, 2}), {beam = 3})   -- extras.alignments
--   model:save("s2s.safetensors");  model = glimpse.models.Seq2Seq.load("s2s.safetensors")
--
-- The model (scripts/seq2seq.lua's, built in the same order so the same seed gives the same
-- parameters):
--   e_s = RNN_enc(E_src x)               bidirectional LSTM (or GRU) of hidden/2 per direction
--   h_0 = tanh(W_b [h_fwd; h_bwd])       the last layer's final states, bridged to the decoder
--   h_t = Cell([E_tgt y_{t-1}; h~_{t-1}])  input feeding (h~_0 = 0)
--   c_t, alpha_t = attend(h_t, e)        any nn.Attention score and mode
--   h~_t = tanh(W_c [c_t; h_t]),  p(y_t) = softmax(W_s h~_t)                   (eq. 5, 6)
-- Loss: the mean token cross-entropy; hard attention adds the REINFORCE surrogate of Xu et
-- al. 2015 (reward log p(y|x,s) per sequence, a moving-average baseline, an entropy bonus);
-- ds > 0 adds the doubly stochastic penalty, coverage_penalty > 0 the coverage penalty (See et
-- al. 2017); sentence-level terms are scaled by B / tokens to sit on the per-token scale.
local glimpse = require "glimpse"
local nn = require "glimpse.nn"
local att = require "glimpse.attention"
local Vocab = require "glimpse.data.vocab"
local C = require "glimpse.models.common"
local check = require "glimpse.check"
local options = require "glimpse.options"

local M = {}

local CLS = "Seq2Seq"
local FORMAT = "glimpse.seq2seq"

local OPTIONS = options.declare(CLS, C.with_vocabs {
  {"emb", "int", 32, range = {1}, help = "embedding size"},
  {"hidden", "int", 128, range = {1}, help = "decoder size (a bidirectional encoder: hidden/2 per direction)"},
  {"attn_hidden", "int", 64, range = {1}, help = "attention hidden size"},
  {"rnn", "string", "lstm", choices = {"lstm", "gru"}, help = "recurrent cell of encoder and decoder"},
  {"bidirectional", "boolean", true, help = "bidirectional encoder"},
  {"layers", "int", 1, range = {1}, help = "encoder layers"},
  {"input_feeding", "boolean", true, help = "feed h~_{t-1} into the decoder (Luong et al.)"},
  {"score", "string", "additive", choices = function() return att.SCORES end, help = "attention score"},
  {"mode", "string", "soft", choices = function() return att.MODES end, help = "attention mode"},
  {"window", "int", 3, range = {1}, help = "local attention: half window D"},
  {"temperature", "number", 1, range = {1e-6}, help = "softmax temperature of the scores"},
  {"normaliser", "string", "softmax", choices = {"softmax", "sigmoid"}, help = "score normaliser"},
  {"soft_prob", "number", 0.5, range = {0, 1}, help = "hard: probability of the expected context"},
  {"entropy", "number", 0.01, range = {0}, help = "hard: entropy bonus"},
  {"baseline_decay", "number", 0.9, range = {0, 0.999999}, help = "hard: moving-average baseline decay"},
  {"ds", "number", 0, range = {0}, help = "doubly stochastic penalty"},
  {"coverage", "boolean", false, help = "coverage features in the score (See et al. 2017)"},
  {"coverage_penalty", "number", 0, range = {0}, help = "coverage penalty weight"},
  {"max_src", "int", 42, range = {1}, help = "most source positions (the location score's size)"},
  {"hard_eval", "string", "argmax", choices = {"argmax", "sample", "soft"}, help = "hard: what test time reads"},
  {"filters", "int", 8, range = {1}, help = "location-aware: convolution filters"},
  {"kernel", "int", 7, range = {1}, help = "location-aware: convolution width (odd)"},
  {"length_penalty", "number", 0, help = "beam search length normalisation alpha"},
  {"attention", "boolean", true, help = "false: no attention (the RNNenc baseline)"},
  {"supervise", "number", 0, range = {0}, help = "weight of supervised attention on batches with align"},
})

local Seq2Seq = nn.Module:extend("Seq2Seq")
Seq2Seq.options = OPTIONS
local DECODE = C.decode_spec("Seq2Seq:decode", {"beam", "max_len", "length_penalty"})
M.Seq2Seq = Seq2Seq

--- Seq2Seq{dataset= | src_vocab=, tgt_vocab=, emb=32, hidden=128, attn_hidden=64, rnn="lstm",
---         bidirectional=true, layers=1, input_feeding=true, score="additive", mode="soft",
---         window=3, temperature=1, normaliser="softmax", soft_prob=0.5, entropy=0.01,
---         baseline_decay=0.9, ds=0, coverage=false, coverage_penalty=0, max_src=42,
---         hard_eval="argmax", filters=8, kernel=7, length_penalty=0, attention=true,
---         supervise=0, task=nil} -> model
-- dataset: a datasets/seq2seq_tasks.lua dataset (its src_vocab, tgt_vocab and task are
-- used).  hidden: the decoder's size; a bidirectional encoder has hidden/2 per direction.
-- rnn: "lstm" | "gru" (encoder and decoder).  score/mode: any of glimpse.attention.SCORES /
-- MODES (a score registered with attention.register_score too).  max_src: the most source
-- positions (the location score's output size).
-- attention=false: no attention, the encoder's last states are the context of every step
-- (Bahdanau et al.'s RNNenc baseline).  supervise > 0: add supervise * the mean -log alpha
-- of the true source position (supervised attention) on batches with `align` (B,T)
-- (datasets/compare_tasks.lua; positions 0 are left out).
function Seq2Seq:init(o)
  local c = OPTIONS:check(o, 3)
  local src_vocab, tgt_vocab, ds = C.vocabs(CLS, c, 3)
  c.task = c.task or (ds and ds.task) or nil
  c.dataset, c.src_vocab, c.tgt_vocab = nil, nil, nil   -- the config keeps sizes, not data
  if c.bidirectional and c.hidden % 2 ~= 0 then
    C.fail(3, "%s: a bidirectional encoder needs an even hidden size (hidden/2 per direction), " ..
              "got %d", CLS, c.hidden)
  end
  if (c.mode == "location" or c.coverage) and c.score ~= "additive" and c.score ~= "concat" then
    C.fail(3, "%s: mode '%s'%s needs the additive or concat score, got '%s'", CLS, c.mode,
           c.coverage and " with coverage" or "", c.score)
  end
  if c.kernel % 2 == 0 then C.fail(3, "%s: option 'kernel' must be odd, got %d", CLS, c.kernel) end
  local H = c.hidden
  local He = c.bidirectional and H // 2 or H
  local dirs = c.bidirectional and 2 or 1
  local K = dirs * He                                          -- key width (= H)
  rawset(self, "config", c)
  rawset(self, "src_vocab", src_vocab)
  rawset(self, "tgt_vocab", tgt_vocab)
  rawset(self, "H", H)
  rawset(self, "baseline", att.baseline(c.baseline_decay))
  local Rnn, Cell = nn.LSTM, nn.LSTMCell
  if c.rnn == "gru" then Rnn, Cell = nn.GRU, nn.GRUCell end
  self.src_emb = nn.Embedding(src_vocab:size(), c.emb)
  self.tgt_emb = nn.Embedding(tgt_vocab:size(), c.emb)
  self.encoder = Rnn(c.emb, He, {bidirectional = c.bidirectional, layers = c.layers})
  self.bridge = nn.Linear(K, H)                                -- h_0 = tanh(W [h_fwd; h_bwd])
  self.decoder = Cell(c.emb + (c.input_feeding and H or 0), H) -- [y_{t-1}; h~_{t-1}]
  if not c.attention then                                      -- RNNenc (Cho et al.): c = the
    self.combine = nn.Linear(K + H, H)                         -- encoder's last states
    self.out = nn.Linear(H, tgt_vocab:size())
    return
  end
  local ok, a = pcall(nn.Attention, {score = c.score, mode = c.mode, query = H, key = K,
                                     hidden = c.attn_hidden, window = c.window,
                                     temperature = c.temperature, normaliser = c.normaliser,
                                     soft_prob = c.soft_prob, coverage = c.coverage,
                                     max_len = c.max_src, hard_eval = c.hard_eval,
                                     filters = c.filters, kernel = c.kernel})
  if not ok then C.fail(3, "%s: %s", CLS, C.strip(a)) end
  self.attention = a
  self.combine = nn.Linear(K + H, H)                           -- h~_t = tanh(W_c [c_t; h_t])
  self.out = nn.Linear(H, tgt_vocab:size())                    -- p(y_t) = softmax(W_s h~_t)
end

-- the batch fields a method needs, checked
local function check_batch(b, fname, need_target, level)
  if type(b) ~= "table" then
    C.fail(level + 1, "%s: batch must be a table {src=, src_lengths=, ...} (ds:collate), got %s",
           fname, type(b))
  end
  if not glimpse.is_tensor(b.src) or b.src:dim() ~= 2 then
    C.fail(level + 1, "%s: batch.src must be a (B,S) tensor of ids, got %s", fname, check.shape(b.src))
  end
  if type(b.src_lengths) ~= "table" or #b.src_lengths ~= b.src.shape[1] then
    C.fail(level + 1, "%s: batch.src_lengths must list %d lengths", fname, b.src.shape[1])
  end
  if need_target then
    for _, k in ipairs({"tgt_in", "tgt_out", "tgt_mask"}) do
      if not glimpse.is_tensor(b[k]) or b[k]:dim() ~= 2 or b[k].shape[1] ~= b.src.shape[1] then
        C.fail(level + 1, "%s: batch.%s must be a (B,T) tensor with B = %d, got %s", fname, k,
               b.src.shape[1], check.shape(b[k]))
      end
    end
  end
end

--- model:encode(src (B,S), lengths {B}) -> encoder states (B,S,H), h_0 (B,H), c_0 (B,H) or nil
function Seq2Seq:encode(src, lengths)
  local enc, st = self.encoder(self.src_emb(src), lengths)
  local c = self.config
  local dirs = c.bidirectional and 2 or 1
  local last = {}
  for d = 1, dirs do last[d] = st.h:select(1, (c.layers - 1) * dirs + d) end
  local h = self.bridge(dirs == 2 and glimpse.cat(last, 2) or last[1]):tanh()
  local c0 = c.rnn == "lstm" and glimpse.zeros(h.shape[1], self.H) or nil
  return enc, h, c0, last
end

-- the attention state of a new batch; without attention, the encoder's last states (B,K)
-- stand in as the one fixed context of every step (Bahdanau et al.'s RNNenc baseline)
function Seq2Seq:_attention_state(enc, last, mask)
  if not self.attention then return {summary = #last == 2 and glimpse.cat(last, 2) or last[1]} end
  return self.attention:precompute(enc, nil, mask)
end

--- model:step(y_emb (B,E), feed (B,H), h, c, enc, mask, astate) -> h~_t, h_t, c_t, alpha_t,
--- astate: one decoder step (enc and mask may be nil when astate holds them)
function Seq2Seq:step(y_emb, feed, h, c, enc, mask, astate)
  local x = self.config.input_feeding and glimpse.cat({y_emb, feed}, 2) or y_emb
  if self.config.rnn == "lstm" then h, c = self.decoder(x, h, c) else h = self.decoder(x, h) end
  local ctx, alpha
  if self.attention then
    ctx, alpha, astate = self.attention(h, enc, nil, mask, astate)
  else
    ctx = astate.summary
  end
  local ht = self.combine(glimpse.cat({ctx, h}, 2)):tanh()
  return ht, h, c, alpha, astate
end

--- model:loss(batch) -> loss (scalar tensor), stats {nll=, token_accuracy=, tokens=,
---   reward= (hard), ds= , coverage= (when on)}
-- batch: ds:collate's table (src, src_lengths, src_mask, tgt_in, tgt_out, tgt_mask).
-- Teacher forcing; the REINFORCE surrogate is added in training mode only.
-- teacher forcing over the batch: h~_t (list of T (B,H)), alpha_t (list), the attention
-- state, local-p's predicted centres p_t (list of T (B), or empty)
function Seq2Seq:_forced(b)
  local B, T = b.tgt_in.shape[1], b.tgt_in.shape[2]
  local enc, h, c, last = self:encode(b.src, b.src_lengths)
  local astate = self:_attention_state(enc, last, b.src_mask)
  local yemb = self.tgt_emb(b.tgt_in)                          -- (B,T,E)
  local feed = glimpse.zeros(B, self.H)
  local hts, alphas, centres = {}, {}, {}
  for t = 1, T do
    feed, h, c, alphas[t], astate = self:step(yemb:select(2, t), feed, h, c, enc, b.src_mask,
                                              astate)
    hts[t] = feed
    if astate.position ~= nil and type(astate.position) ~= "number" then
      centres[t] = astate.position
    end
  end
  return hts, alphas, astate, centres
end

--- model:alignments(batch) -> alpha (B,T,S) under teacher forcing (nil without attention),
--- centres (B,T) local-p's predicted window centres (nil in other modes); evaluation mode,
--- no tape.  batch needs tgt_in (ds:collate).
function Seq2Seq:alignments(b)
  check_batch(b, "Seq2Seq:alignments", true, 2)
  if not self.attention then return nil end
  local was_training = self.training
  self:evaluate()
  local ok, alpha, centres = pcall(glimpse.no_grad, function()
    local _, alphas, _, cs = self:_forced(b)
    return glimpse.stack(alphas, 2), #cs > 0 and glimpse.stack(cs, 2) or nil
  end)
  if was_training then self:train() end
  if not ok then error(alpha, 0) end
  return alpha, centres
end

-- supervised attention: the mean over target steps with a true source position (align > 0)
-- of -log alpha_t[align_t]
local function supervision(alphas, align)
  local a = glimpse.stack(alphas, 2)                           -- (B,T,S)
  local B, T = a.shape[1], a.shape[2]
  local known = align:gt(0)
  local idx = align:clamp(1, a.shape[3]):reshape(B, T, 1)
  local nll = -(a:gather(3, idx):reshape(B, T) + 1e-9):log() * known
  return nll:sum() / math.max(1, known:sum():item())
end

function Seq2Seq:loss(b)
  check_batch(b, "Seq2Seq:loss", true, 2)
  local Vt = self.tgt_vocab:size()
  local B, T = b.tgt_in.shape[1], b.tgt_in.shape[2]
  local hts, alphas, astate = self:_forced(b)
  local logits = self.out(glimpse.stack(hts, 2)):reshape(B * T, Vt)
  local targets = b.tgt_out:reshape(B * T)
  local nll = glimpse.cross_entropy(logits, targets, {ignore_index = Vocab.PAD, reduction = "none"})
  local ntok = b.tgt_mask:sum():item()
  local nll_seq = nll:reshape(B, T):sum(2)                     -- -log p(y | x, s) per sequence
  local token_nll = nll_seq:sum() / ntok
  local loss = token_nll
  local cfg = self.config
  local stats = {nll = token_nll:item(), tokens = ntok}
  glimpse.no_grad(function()
    local right = logits:argmax(2):eq(targets):reshape(B, T) * b.tgt_mask
    stats.token_accuracy = right:sum():item() / math.max(ntok, 1)
  end)
  if cfg.mode == "hard" and self.attention and self.training then
    local logp, Hs = self.attention:reinforce_terms(astate, b.tgt_mask)
    local surrogate = att.reinforce_loss(-nll_seq, logp, {baseline = self.baseline, entropy = Hs,
                                                          entropy_weight = cfg.entropy})
    loss = loss + surrogate * (B / ntok)
    stats.reward = -nll_seq:mean():item()
  end
  if cfg.supervise > 0 and self.attention and glimpse.is_tensor(b.align) then
    local sup = supervision(alphas, b.align)
    stats.supervision = sup:item()
    loss = loss + sup * cfg.supervise
  end
  if cfg.ds > 0 and self.attention then
    local pen = att.doubly_stochastic(alphas, {mask = b.src_mask, tgt_mask = b.tgt_mask,
                                               weight = cfg.ds})
    stats.ds = pen:item()
    loss = loss + pen * (B / ntok)
  end
  if cfg.coverage_penalty > 0 and self.attention then
    local pen = att.coverage_penalty(alphas, {tgt_mask = b.tgt_mask, weight = cfg.coverage_penalty})
    stats.coverage = pen:item()
    loss = loss + pen * (B / ntok)
  end
  return loss, stats
end

-- The decoding state: everything with one row per sequence (glimpse.decode reorders it).
function Seq2Seq:_decode_state(b)
  local enc, h, c, last = self:encode(b.src, b.src_lengths)
  local astate = self:_attention_state(enc, last, b.src_mask)
  return {h = h, c = c, feed = glimpse.zeros(h.shape[1], self.H), att = astate}
end

-- glimpse.decode's step: y (N) previous ids -> log p(y_t) (N,V), the new state, alpha (N,S)
function Seq2Seq:_decode_step(y, st)
  local feed, h, c, alpha, astate = self:step(self.tgt_emb(y), st.feed, st.h, st.c, nil, nil,
                                              st.att)
  return glimpse.log_softmax(self.out(feed), 2), {h = h, c = c, feed = feed, att = astate}, alpha
end

--- model:decode(batch, {beam=1, max_len=T+5, length_penalty=config.length_penalty}) ->
---   outputs, extras
-- outputs[b]: the predicted target ids of row b (a Lua list, <end> excluded); extras:
-- {alignments = {b -> {alpha_t as lists of S numbers}, the <end> step included},
--  scores = {b -> log-probability}, finished = {b -> boolean}}.  beam=1 is greedy
-- decoding (glimpse.decode.greedy), beam > 1 beam search.  max_len defaults to the width of
-- batch.tgt_in + 5 when the batch has targets, else 2 S + 5.  Runs in evaluation mode
-- without a tape.
function Seq2Seq:decode(b, opts)
  check_batch(b, "Seq2Seq:decode", false, 2)
  local o = DECODE:check(opts, 2)
  local beam = o.beam
  local max_len = o.max_len or
    (glimpse.is_tensor(b.tgt_in) and b.tgt_in.shape[2] + 5 or 2 * b.src.shape[2] + 5)
  local lp = o.length_penalty or self.config.length_penalty
  return C.decode(self, function() return self:_decode_state(b) end,
                  function(y, s) return self:_decode_step(y, s) end,
                  {max_len = max_len, start = Vocab.START, stop = Vocab.END, beam = beam,
                   length_penalty = lp})
end

--- model:translate(batch, opts) -> list of B strings: model:decode's ids through the target
--- vocabulary (characters joined without a separator, as the tasks' targets are written)
function Seq2Seq:translate(b, opts)
  local outs = self:decode(b, opts)
  local s = {}
  for i, ids in ipairs(outs) do s[i] = table.concat(self.tgt_vocab:decode(ids)) end
  return s
end

-- a checkpoint whose score was registered (attention.register_score) needs the same
-- registration in the loading process: say so before the options refuse the name
function Seq2Seq.from_checkpoint(o)
  if o.attention ~= false and type(o.score) == "string" and not att.has_score(o.score) then
    C.fail(3, "%s.load: the model uses the score '%s', which is not registered in this " ..
              "process: call glimpse.attention.register_score(\"%s\", spec) with the spec it " ..
              "was trained with before loading", CLS, o.score, o.score)
  end
  return o
end

-- hard attention's moving-average baseline is kept in the checkpoint, so training can go on
function Seq2Seq:checkpoint_extra(extra)
  if self.baseline.value then extra.baseline = self.baseline.value end
end
function Seq2Seq.after_load(model, meta)
  if meta.baseline then model.baseline.value = tonumber(meta.baseline) end
end

--- model:save(path, meta) -> path: one safetensors file (atomic) with the state_dict and, in
--- its metadata, the configuration and both vocabularies; meta: extra name -> string entries.

--- Seq2Seq.load(path) -> model (in evaluation mode), meta (the file's metadata strings)
C.checkpoints(Seq2Seq, M, CLS, FORMAT, true)

function Seq2Seq:extra_repr()
  local c = self.config
  if not c.attention then
    return string.format("%s%s x%d, no attention (RNNenc), emb=%d, hidden=%d, src=%d, tgt=%d",
                         c.bidirectional and "bi-" or "", c.rnn, c.layers, c.emb, c.hidden,
                         self.src_vocab:size(), self.tgt_vocab:size())
  end
  return string.format("%s%s x%d, score=%s, mode=%s, emb=%d, hidden=%d, src=%d, tgt=%d",
                       c.bidirectional and "bi-" or "", c.rnn, c.layers, c.score, c.mode, c.emb,
                       c.hidden, self.src_vocab:size(), self.tgt_vocab:size())
end

return M
