--- glimpse.models.captioner.loss -- the Captioner's training objective, per real token:
--   the cross-entropy over real (non-pad) words
--   + lambda sum_i (1 - sum_t alpha_ti)^2 per caption            (doubly stochastic, eq. 14)
--   + hard attention: the REINFORCE surrogate of eq. 12, lambda_r (log p(y|s,a) - b n)
--     log p(s|a) - lambda_e H[s], with a per-word baseline b (moving average, or with K > 1
--     samples per caption the mean of the other K-1: baseline = "loo"); estimator = "gumbel"
--     leaves REINFORCE out (the straight-through gradient flows through nn.Attention).
--   + length_aux > 0: length_aux times cap:length_loss (h_t predicts log(words left)).
-- cap:self_critical_loss is the other objective: the captions the model writes, sampled as
-- test time reads the image, scored against the references (self-critical training).
-- Sentence-level terms are divided by the number of real tokens in the batch, as the
-- cross-entropy is, which keeps the paper's ratio between them.  Methods of the Captioner
-- (model.lua mixes them into the class).
local glimpse = require "glimpse"
local att = require "glimpse.attention"
local check = require "glimpse.check"
local Vocab = require "glimpse.data.vocab"
local as_ids = require("glimpse.models.common").ids
local search = require "glimpse.decode"

local Captioner = {}   -- methods

--- cap:penalty(alphas (B,T,L), mask (B,T) or nil) -> the doubly stochastic penalty averaged
--- over captions: lambda sum_i (1 - sum_t alpha_ti)^2 (steps where mask is 0 do not count).
function Captioner:penalty(alphas, mask)
  return att.doubly_stochastic(alphas, {tgt_mask = mask, weight = self.config.doubly_stochastic})
end

--- cap:length_loss(hs (B,T,H), mask (B,T)) -> the squared error of length_head(h_t) against
--- log(n_t), n_t = the real words from step t to the caption's end (<end> included), summed
--- over real steps and divided by their number: the decoder's state must say how much is left
--- to write, which for captions that name every item is how many items are left to name.
function Captioner:length_loss(hs, mask)
  local B, T = mask.shape[1], mask.shape[2]
  local U = {}                                                  -- U[s][t] = 1 for s >= t
  for s = 1, T do
    U[s] = {}
    for t = 1, T do U[s][t] = s >= t and 1 or 0 end
  end
  local left = mask:matmul(glimpse.tensor(U))                   -- (B,T): words left at t
  local err = (self.length_head(hs):reshape(B, T) - left:clamp(1, math.huge):log()) * mask
  return (err * err):sum() / math.max(mask:sum():item(), 1)
end

-- t (B,...) with every row repeated K times, rows b*K+1 .. b*K+K
local function repeat_rows(t, K)
  local shape = t.shape
  local big, flat = {shape[1], K}, {shape[1] * K}
  for d = 2, #shape do big[d + 1], flat[d] = shape[d], shape[d] end
  return t:unsqueeze(2):expand(table.unpack(big)):reshape(table.unpack(flat))
end

-- one pass of the objective over annotations a (B,L,D): loss per real token and info (see
-- cap:loss).  use_soft: hard attention reads the expected context (nil: soft attention or
-- evaluation).  Sampled hard passes decode every caption config.samples times.
function Captioner:_pass(a, captions_in, captions_out, mask, use_soft, soft_rows)
  local B, T = captions_out.shape[1], captions_out.shape[2]
  local V = self.vocab:size()
  local hard = self.config.attention == "hard" and self.training
  local K = 1
  if hard and not use_soft then K = self.config.samples end
  if K > 1 then
    a, captions_in = repeat_rows(a, K), repeat_rows(captions_in, K)
    captions_out, mask = repeat_rows(captions_out, K), repeat_rows(mask, K)
    B = B * K
  end
  local logits, alphas, st = self:forward(a, captions_in,
                                          {use_soft = use_soft, soft_rows = soft_rows})
  local all_alphas = st.alphas
  -- padded targets become <pad> so cross_entropy ignores them whatever the caller's mask says
  local targets = captions_out * mask + (1 - mask) * Vocab.PAD
  local nll = glimpse.cross_entropy(logits:reshape(B * T, V), targets:reshape(B * T),
                                    {ignore_index = Vocab.PAD, reduction = "none"})
  local nll_seq = nll:reshape(B, T):sum(2)                      -- -log p(y | s, a) per caption
  local ntok = math.max(mask:sum():item(), 1)
  local loss = nll_seq:sum() / ntok
  local info = {tokens = ntok, nll = loss:item(), alphas = alphas:detach(), betas = st.betas}
  if self.config.doubly_stochastic > 0 then
    local ds = self:penalty(all_alphas, mask)                   -- per caption
    info.ds = ds:item()
    loss = loss + ds * (B / ntok)
  else
    info.ds = 0
  end
  if self.config.length_aux > 0 then                          -- h_t predicts log(words left)
    local la = self:length_loss(st.hs, mask)
    info.length_aux = la:item()
    loss = loss + la * self.config.length_aux
  end
  if hard and not st.use_soft and self.config.estimator == "reinforce" then
    local logp, H = self.attention:reinforce_terms(st, mask)
    -- The baseline is kept per word: captions of 8 and of 26 words would otherwise differ
    -- in log p(y|s,a) by their length alone, and that difference (not where the model
    -- looked) would dominate the advantage.  With r_b = log p(y_b|s,a) / n_b and n_b the
    -- caption's length, (r_b - b) n_b log p(s_b|a) = (log p(y_b|s,a) - b n_b) log p(s_b|a).
    local len = mask:sum(2)                                     -- (B) words per caption
    local per_word = -nll_seq / len
    local baseline = self.baseline
    if self.config.baseline == "loo" then
      baseline = att.leave_one_out(per_word:reshape(B // K, K)):reshape(B)
      self.baseline:update(per_word:mean():item())               -- kept for info only
    end
    local surrogate, rinfo = att.reinforce_loss(per_word, logp * len, {
      baseline = baseline, entropy = H, entropy_weight = self.entropy_weight,
      reward_weight = self.config.reward_weight})
    info.reinforce = surrogate:item()
    info.baseline_used = rinfo.baseline
    info.reward = per_word:mean():item()                        -- mean log p(y|s,a) per word
    loss = loss + surrogate * (B / ntok)
  end
  return loss, info
end

--- cap:loss(images (B,C,H,W) or annotations (B,L,D), captions_in (B,T), captions_out (B,T),
---          mask (B,T) or nil, {resize=false}) -> loss (scalar tensor), info
-- Images must have the channels and size of those the model was first trained on
-- (cap:input_shape()); opts.resize=true converts them instead (cap:check_input).
-- mask defaults to captions_out ~= <pad>.  info: nll (mean token NLL), ds (penalty per
-- caption, lambda included), reinforce (hard mode: the surrogate's value, or nil when the
-- batch used the expected context), reward (hard: the batch's mean log p(y|s,a) per word,
-- what the baseline tracks), baseline_used (the b this batch was compared with), baseline
-- (after the update), tokens, alphas (B,T,L) and betas (B,T) (detached).
function Captioner:loss(x, captions_in, captions_out, mask, opts)
  local fname = "Captioner:loss"
  if glimpse.is_tensor(x) and x:dim() == 4 then x = self:_check_input(x, opts, fname, 2) end
  captions_in = as_ids(captions_in, "captions_in", fname, 2)
  captions_out = as_ids(captions_out, "captions_out", fname, 2)
  local si, so = captions_in.shape, captions_out.shape
  if si[1] ~= so[1] or si[2] ~= so[2] then
    check.fail(2, "%s: captions_in %s and captions_out %s must have the same shape", fname,
               check.shape(captions_in), check.shape(captions_out))
  end
  local B, T = captions_out.shape[1], captions_out.shape[2]
  if mask == nil then
    mask = captions_out:ne(Vocab.PAD)
  elseif type(mask) == "table" then
    mask = glimpse.tensor(mask)
  end
  if not glimpse.is_tensor(mask) or mask:dim() ~= 2 or mask.shape[1] ~= B or mask.shape[2] ~= T then
    check.fail(2, "%s: mask must be (B,T) = [%d,%d] like the captions, got %s", fname, B, T,
               check.shape(mask))
  end
  self:_check_ids(captions_out, fname, 3)
  local a = self:_annotations(x, fname, 2)
  if a.shape[1] ~= B then check.fail(2, "%s: %d images but %d captions", fname, a.shape[1], B) end
  local hard = self.config.attention == "hard" and self.training
  local loss, info
  if hard and self.config.mix == "expected" then
    -- the coin's expectation instead of one draw: p L(expected context) + (1 - p) L(sample)
    local p = self.attention.soft_prob
    local ls, is = nil, nil
    if p > 0 then ls, is = self:_pass(a, captions_in, captions_out, mask, true) end
    if p < 1 then
      loss, info = self:_pass(a, captions_in, captions_out, mask, false)
      if ls then
        loss = ls * p + loss * (1 - p)
        info.nll, info.ds = is.nll * p + info.nll * (1 - p), is.ds * p + info.ds * (1 - p)
      end
    else
      loss, info = ls, is
    end
  else
    local use_soft, rows = nil, nil
    if hard and self.config.mix == "row" then
      rows = self.attention.soft_prob                            -- one draw per caption
    elseif hard then
      local p = self.attention.soft_prob
      use_soft = p > 0 and glimpse.rand(1):item() < p            -- one draw per batch
    end
    loss, info = self:_pass(a, captions_in, captions_out, mask, use_soft, rows)
  end
  info.baseline = self.baseline.value
  if x:dim() == 4 and not self.config.trained_on then            -- what caption will expect
    self.config.trained_on = {x.shape[2], x.shape[3], x.shape[4]}
  end
  return loss, info
end

-- the options of cap:self_critical_loss, declared once
local SCST_OPTIONS = require("glimpse.options").declare("Captioner:self_critical_loss", {
  {"reward", "function", nil, required = true,
   help = "function(captions, references) -> mean, scores: a caption's score against its " ..
          "references (metrics.cider_scorer(corpus))"},
  {"samples", "int", 5, range = {1}, help = "captions sampled per image"},
  {"baseline", "string", "mean", choices = {"mean", "greedy"},
   help = "what a sample's reward is compared with: the mean of the image's other samples " ..
          "(mean) or the reward of its greedy caption (greedy, Rennie et al.)"},
  {"cells", "string", "rule", choices = {"rule", "sample"},
   help = "hard attention: each step reads the cell of the test-time rule (rule: only the " ..
          "words are sampled) or a cell drawn from alpha_t, whose log-probability joins the " ..
          "words' (sample: the reward trains where the model looks too)"},
  {"temperature", "number", 1, range = {0}, help = "sampling temperature"},
  {"max_len", "int", nil, range = {1}, help = "most words (default: config.max_len)"},
})
Captioner.self_critical_options = SCST_OPTIONS

-- the greedy captions of annotations a (no tape), as strings, cut at max_len
function Captioner:_greedy_words(a, max_len)
  local toks = glimpse.no_grad(function()
    local state, fixed = self:_decode_state(a:detach())
    return (search.greedy(self:_decode_step(fixed), state, {max_len = max_len + 1}))
  end)
  local words = {}
  for i, t in ipairs(toks) do
    while #t > max_len do table.remove(t) end
    words[i] = self.vocab:decode_string(t)
  end
  return words
end

-- N captions drawn word by word from annotations a (N,L,D) on the tape: their words (lists
-- of ids), log p of each caption (N), when cells are drawn of the cells read (N), and
-- whether each caption ended (false: cut off at max_len words)
function Captioner:_sample_on_tape(a, max_len, temperature, draw_cells)
  local N = a.shape[1]
  local state, fixed = self:_decode_state(a)
  local step = self:_decode_step(fixed, draw_cells)
  local tokens = glimpse.full({N}, Vocab.START)
  local alive = glimpse.ones(N, 1)
  local ids, logp_words, logp_cells, finished = {}, {}, {}, {}
  for i = 1, N do ids[i], finished[i] = {}, false end
  for t = 1, max_len + 1 do
    local lp, s, alpha = step(tokens, state)
    state = s
    local y = glimpse.no_grad(function()
      local scaled = temperature == 1 and lp or lp / temperature
      return glimpse.multinomial(glimpse.softmax(scaled, 2), 1)       -- (N,1)
    end)
    local is_end = y:eq(Vocab.END)
    -- a caption still going at max_len + 1 words without <end> is cut: that word is not its
    local keep = t <= max_len and alive or alive * is_end
    logp_words[t] = lp:gather(2, y) * keep
    if draw_cells and s.read then
      logp_cells[t] = (alpha:gather(2, s.read) + 1e-30):log() * keep
    end
    local yl, al = y:reshape(N):totable(), alive:reshape(N):totable()
    for i = 1, N do
      if al[i] > 0 and yl[i] == Vocab.END then finished[i] = true end
      if al[i] > 0 and yl[i] ~= Vocab.END and t <= max_len then ids[i][#ids[i] + 1] = yl[i] end
    end
    alive = alive * (1 - is_end)
    if alive:sum():item() == 0 then break end
    tokens = y:reshape(N)
  end
  local lw = glimpse.cat(logp_words, 2):sum(2):reshape(N)
  local lc = #logp_cells > 0 and glimpse.cat(logp_cells, 2):sum(2):reshape(N) or nil
  return ids, lw, lc, finished
end

--- cap:self_critical_loss(images (B,C,H,W) or annotations (B,L,D), references,
---                        {reward=, samples=5, baseline="mean", cells="rule", temperature=1,
---                         max_len})
---   -> loss (scalar tensor), info
-- Self-critical sequence training (Rennie et al. 2017): the model writes `samples` captions
-- of each image, drawn word by word in evaluation mode (no dropout), each is scored against
-- the image's references by reward(captions, references) (e.g. metrics.cider_scorer's
-- CIDEr-D), and the loss is -(r - b) log p(caption | image) averaged over the captions, with
-- b the mean reward of the image's other samples (baseline "mean", with samples >= 2) or the
-- reward of its greedy caption (baseline "greedy", as Rennie et al.).  Hard attention reads,
-- at each step, the cell its test-time rule picks (cells = "rule": config.hard_eval) or a
-- cell drawn from alpha_t (cells = "sample"), in which case log p(caption) also holds the
-- cells' log-probabilities, as in Xu et al.'s eq. 12 with the caption's reward in place of
-- log p(y|s,a): the reward then trains the attention too.  The log-probabilities are those
-- of the sampling pass itself (recorded on the tape).  references: a list of B reference
-- lists (strings).  info: reward (the samples' mean), baseline (the mean b), greedy (the
-- greedy captions' mean reward, baseline "greedy"), tokens, captions (the first sample of
-- each image), samples (all B * samples captions, image by image), finished (false for a
-- sample cut off at max_len words), rewards and advantages (r - b) of each.
function Captioner:self_critical_loss(x, references, opts)
  local fname = "Captioner:self_critical_loss"
  opts = SCST_OPTIONS:check(opts, 2)
  if glimpse.is_tensor(x) and x:dim() == 4 then x = self:_check_input(x, nil, fname, 2) end
  local K, baseline = opts.samples, opts.baseline
  if baseline == "mean" and K < 2 then
    check.fail(2, "%s: baseline \"mean\" compares each sample with the others: samples must " ..
               "be at least 2, got %d", fname, K)
  end
  local max_len = opts.max_len or self.config.max_len
  local draw_cells = opts.cells == "sample" and self.config.attention == "hard"
  local was_training, rule = self.training, self.attention.hard_eval
  self:evaluate()
  if draw_cells then self.attention.hard_eval = "sample" end
  local ok, loss, info = pcall(function()
    local a = self:_annotations(x, fname, 3)
    local B = a.shape[1]
    if type(references) ~= "table" or #references ~= B then
      check.fail(3, "%s: references must be a list of %d reference lists (one per image), got %s",
                 fname, B, type(references) == "table" and #references .. " entries" or type(references))
    end
    local toks, logp_words, logp_cells, finished = self:_sample_on_tape(repeat_rows(a, K), max_len,
                                                              opts.temperature, draw_cells)
    local words, refs = {}, {}
    for i, t in ipairs(toks) do
      words[i], refs[i] = self.vocab:decode_string(t), references[(i - 1) // K + 1]
    end
    local _, r = opts.reward(words, refs)
    local b, greedy_mean = {}, nil
    if baseline == "greedy" then
      self.attention.hard_eval = rule
      local g
      greedy_mean, g = opts.reward(self:_greedy_words(a, max_len), references)
      for i = 1, B * K do b[i] = g[(i - 1) // K + 1] end
    else
      for i0 = 0, B - 1 do                                       -- leave one out
        local sum = 0
        for k = 1, K do sum = sum + r[i0 * K + k] end
        for k = 1, K do b[i0 * K + k] = (sum - r[i0 * K + k]) / (K - 1) end
      end
    end
    local adv, rsum, bsum, ntok = {}, 0, 0, 0
    for i = 1, B * K do
      adv[i] = r[i] - b[i]
      rsum, bsum, ntok = rsum + r[i], bsum + b[i], ntok + #toks[i] + 1
    end
    local logp = logp_cells and logp_words + logp_cells or logp_words
    local l = -(logp * glimpse.tensor(adv)):sum() / (B * K)
    local first = {}
    for i = 1, B do first[i] = words[(i - 1) * K + 1] end
    return l, {reward = rsum / (B * K), baseline = bsum / (B * K), greedy = greedy_mean,
               tokens = ntok, captions = first, samples = words, finished = finished,
               rewards = r, advantages = adv}
  end)
  self.attention.hard_eval = rule
  if was_training then self:train() end
  if not ok then error(loss, 0) end
  return loss, info
end

return Captioner
