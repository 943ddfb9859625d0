--- glimpse.models.captioner.loss -- the Captioner's training objective, per real token:
--   the cross-entropy over real (non-pad) words
--   + lambda sum_i (1 - sum_t alpha_ti)^2 per caption            (doubly stochastic, eq. 14)
--   + hard attention: the REINFORCE surrogate of eq. 12, lambda_r (log p(y|s,a) - b n)
--     log p(s|a) - lambda_e H[s], with a per-word baseline b (moving average, or with K > 1
--     samples per caption the mean of the other K-1: baseline = "loo"); estimator = "gumbel"
--     leaves REINFORCE out (the straight-through gradient flows through nn.Attention).
--   + length_aux > 0: length_aux times cap:length_loss (h_t predicts log(words left)).
-- Sentence-level terms are divided by the number of real tokens in the batch, as the
-- cross-entropy is, which keeps the paper's ratio between them.  Methods of the Captioner
-- (model.lua mixes them into the class).
local glimpse = require "glimpse"
local att = require "glimpse.attention"
local check = require "glimpse.check"
local Vocab = require "glimpse.data.vocab"
local as_ids = require("glimpse.models.common").ids

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

return Captioner
