--- glimpse.models.captioner.decode -- the Captioner's captions: the decoder as a step function
-- for glimpse.decode (beam search, greedy, sampling), hard attention's test-time rules
-- (config.hard_eval; "marginal" sums the attended cell out), cap:caption, which takes
-- file names, tensors, batches and lists, and cap:overlays, the picture of where each word
-- looked (glimpse.plot.caption).  Methods of the Captioner (model.lua mixes them into the
-- class).
--
--   local words = cap:caption(image, {beam = 3})                       -- "a bag above a coat"
--   local words, info = cap:caption(image, {maps = true})   -- info.alphas, .tokens, .familiar
--   local words, tokens, alphas = cap:caption_maps(image)              -- the three at once
--   cap:overlays(info.image, info.alphas, words, "strip.png")
local glimpse = require "glimpse"
local search = require "glimpse.decode"
local check = require "glimpse.check"
local Vocab = require "glimpse.data.vocab"
local caption_plot = require "glimpse.plot.caption"

local Captioner = {}   -- methods

-- cap:caption's options, declared once (checked in full where they are read)
local CAPTION_OPTIONS = require("glimpse.options").declare("Captioner:caption", {
  {"beam", "int", 3, range = {1}, help = "beam width (1: greedy)"},
  {"max_len", "int", nil, range = {1}, help = "most words (default: config.max_len)"},
  {"length_penalty", "number", nil, help = "beam search's length normalisation alpha"},
  {"sample", "boolean", false, help = "draw words instead of searching"},
  {"temperature", "number", 1, range = {0}, help = "sampling temperature"},
  {"resize", "boolean", false, help = "resize an image of another size to the model's"},
  {"list", "boolean", false, help = "a batch of one still gives lists"},
  {"maps", "boolean", false,
   help = "also return info {tokens=, alphas=, image=, familiar=, reasons=}"},
  {"warn", "boolean", true,
   help = "a note on stderr when an image is unlike the model's training images"},
})
Captioner.caption_options = CAPTION_OPTIONS

-- the decoder state for decode.*: every tensor has one row per image (the attention's
-- per-image cache included); weights stay out
function Captioner:_decode_state(a)
  local h, c = self:initial_state(a)
  local av = self:_attendable(a)
  local st = self:_attention_state(av)
  local cache, fixed = {}, {}
  for k, v in pairs(st.cache) do
    if glimpse.is_tensor(v) and v:dim() >= 1 and v.shape[1] == a.shape[1] then cache[k] = v
    else fixed[k] = v end
  end
  return {h = h, c = c, a = av, cache = cache, g = self:_global_input(a),
          go = self:_global_output(a), cov = self:_first_coverage(av)}, fixed
end

-- the attention cache of one step: the fixed (weight) entries and the state's per-row ones
local function step_cache(fixed, s)
  local cache = {}
  for k, v in pairs(fixed) do cache[k] = v end
  for k, v in pairs(s.cache) do cache[k] = v end
  return cache
end

-- hard_eval = "marginal": decode's step for hard attention with the attended cell summed
-- out.  The word distribution is the hard model's own, p(y_t) = sum_m w_m p(y_t | s_t = m)
-- over the M = config.marginal_cells likeliest cells (w: alpha_t renormalised over them),
-- not the distribution given one cell; the state then follows the cell that best explains
-- the word chosen, argmax_m w_m p(y_t | m) (read at the next step, when y_t comes in).
function Captioner:_marginal_step(fixed, ban)
  local We, Wz = self:_split_lstm()
  local E, H, D, V = self.config.emb, self.config.hidden, self.config.dim_feature,
                     self.vocab:size()
  local attn = self.attention
  return function(tokens, s)
    local N = tokens.shape[1]
    local h, c = s.h, s.c
    if s.hs then                                  -- the cell that explains y_{t-1} best
      local M = s.lw.shape[2]
      local post = s.lw + s.lp:gather(3, tokens:reshape(N, 1, 1):expand(N, M, 1)):reshape(N, M)
      local pick = post:argmax(2):reshape(N, 1, 1):expand(N, 1, H)
      h, c = s.hs:gather(2, pick):reshape(N, H), s.cs:gather(2, pick):reshape(N, H)
    end
    local ey = self.embed(tokens)                               -- (N,E)
    local xe = glimpse.linear(ey, We, self.lstm.bias_ih)        -- (N,4H)
    if s.g then xe = xe + s.g end
    local uc = s.cov and self:_unseen_cells(s.a)
    if s.cov then xe = xe + self:_unseen_input(uc, s.cov) end
    local st = {cache = step_cache(fixed, s), keys = s.a, values = s.a, t = 0, logps = {},
                entropies = {}, coverage = s.att_cov}
    local rule = attn.hard_eval
    attn.hard_eval = "soft"                                     -- only alpha_t is needed
    local ok, _, alpha = pcall(attn, h, s.a, s.a, nil, st)
    attn.hard_eval = rule
    if not ok then error(_, 0) end
    local L = alpha.shape[2]
    local M = math.min(self.config.marginal_cells, L)
    local rest, idx = alpha, {}
    for m = 1, M do                                             -- the M likeliest cells
      idx[m] = rest:argmax(2):reshape(N, 1)
      rest = rest - glimpse.zeros(N, L):scatter_add(2, idx[m], glimpse.ones(N, 1) * 2)
    end
    local cells = glimpse.cat(idx, 2)                           -- (N,M)
    local w = alpha:gather(2, cells)
    local lw = (w / w:sum(2, true) + 1e-30):log()               -- (N,M)
    local z = s.a:gather(2, cells:reshape(N, M, 1):expand(N, M, D))
    if self.gate then z = z * self.gate(h):sigmoid():reshape(N, 1, 1) end
    z = z:reshape(N * M, D)
    local function rep(x, d) return x:reshape(N, 1, d):expand(N, M, d):reshape(N * M, d) end
    local h2, c2 = glimpse.lstm_cell(rep(xe, 4 * H) + glimpse.linear(z, Wz), rep(h, H), rep(c, H),
                                     self.lstm.weight_hh, self.lstm.bias_hh)
    local go = s.cov and self:_with_unseen_output(s.go, uc, s.cov + alpha) or s.go
    local lp = glimpse.log_softmax(self:_logits(rep(ey, E), h2, z, go and rep(go, E)), 2)
    lp = lp:reshape(N, M, V)
    local mix = (lp + lw:reshape(N, M, 1)):logsumexp(2)          -- (N,V)
    return mix:reshape(N, V) + ban, {hs = h2:reshape(N, M, H), cs = c2:reshape(N, M, H),
                                     lw = lw, g = s.g, go = s.go, lp = lp, a = s.a,
                                     cache = s.cache, cov = s.cov and s.cov + alpha,
                                     att_cov = attn.use_coverage and st.coverage or nil}, alpha
  end
end

-- decode's step function: tokens (N) = y_{t-1} -> log p(y_t) (N,V), state, alpha_t (N,L);
-- reads = true: the state also holds the hard cell read, state.read (N,1)
function Captioner:_decode_step(fixed, reads)
  local We, Wz = self:_split_lstm()
  -- a caption never contains <pad> or <start>
  local ban = glimpse.zeros(1, self.vocab:size())
  ban[1][Vocab.PAD], ban[1][Vocab.START] = -math.huge, -math.huge
  if self.config.attention == "hard" and self.config.hard_eval == "marginal" then
    return self:_marginal_step(fixed, ban)
  end
  return function(tokens, s)
    local ey = self.embed(tokens)                               -- (N,E)
    local xe = glimpse.linear(ey, We, self.lstm.bias_ih)
    if s.g then xe = xe + s.g end
    local uc = s.cov and self:_unseen_cells(s.a)
    if s.cov then xe = xe + self:_unseen_input(uc, s.cov) end
    local st = {cache = step_cache(fixed, s), keys = s.a, values = s.a, t = 0, logps = {},
                entropies = {}, grid = self:_grid_of(s.a), extra = self:_extra_cells(),
                coverage = s.att_cov}
    local h, c, z, alpha, st2 = self:_step(xe, s.h, s.c, s.a, st, Wz)
    local cov = s.cov and s.cov + self:_coverage_step(alpha, st2)
    local go = cov and self:_with_unseen_output(s.go, uc, cov) or s.go
    local lp = glimpse.log_softmax(self:_logits(ey, h, z, go), 2) + ban
    return lp, {h = h, c = c, a = s.a, cache = s.cache, g = s.g, go = s.go, cov = cov,
                read = reads and st2.sample or nil,
                att_cov = self.attention.use_coverage and st2.coverage or nil}, alpha
  end
end

-- the images of cap:caption as one batch (B,C,H,W), whether one image was given, and per
-- image {seen (C,H,W) in [0,1], colour} for the familiarity check (cap:_judge)
function Captioner:_caption_batch(images, opts, fname)
  local looks = {}
  local function checked(im, i)
    local seen, colour = self:_seen(im, opts, fname, 4)
    looks[i] = {seen, colour}
    return self:prepare(seen)
  end
  if type(images) == "table" and not glimpse.is_tensor(images) then
    if #images == 0 then check.fail(3, "%s: an empty list of images", fname) end
    local list = {}
    for i, im in ipairs(images) do list[i] = checked(im, i) end
    local ok, st = pcall(glimpse.stack, list, 1)
    if not ok then check.fail(3, "%s: the images differ in size: %s", fname, check.strip(st)) end
    return st, false, looks
  elseif glimpse.is_tensor(images) and images:dim() == 4 then
    local batch = self:_check_input(images, opts, fname, 3)
    local spec = self.config.image or {}
    for b = 1, batch.shape[1] do        -- a batch comes prepared: undo the normalisation
      local im = batch[b]
      if spec.mean and spec.std then
        local C = im.shape[1]
        im = im * glimpse.tensor(spec.std):reshape(C, 1, 1) + glimpse.tensor(spec.mean):reshape(C, 1, 1)
      end
      looks[b] = {im}
    end
    return batch, images.shape[1] == 1 and opts.list ~= true, looks
  end
  return checked(images, 1):unsqueeze(1), true, looks
end

-- the captions of a prepared batch (B,C,H,W): lists of words, tokens and alphas
function Captioner:_captions(batch, opts, fname)
  local K = opts.beam or 3
  check.int(fname, "opts.beam", K, 1, nil, 3)
  local max_len = check.int(fname, "opts.max_len", opts.max_len or self.config.max_len, 1, nil, 3)
  local was_training = self.training
  self:evaluate()
  local ok, res = pcall(function()
    return glimpse.no_grad(function()
      local a = self:annotate(batch)
      local state, fixed = self:_decode_state(a)
      local step = self:_decode_step(fixed)
      local B = a.shape[1]
      local toks, aligns = {}, {}
      if opts.sample then
        local t, _, al = search.sample(step, state, {max_len = max_len + 1,
                                                     temperature = opts.temperature})
        toks, aligns = t, al
      else
        local hyps = search.beam(step, state, {beam = K, max_len = max_len + 1,
                                               length_penalty = opts.length_penalty or
                                                                self.config.length_penalty})
        for b = 1, B do
          toks[b] = hyps[b][1].tokens
          aligns[b] = hyps[b][1].alignment
        end
      end
      local words, alphas = {}, {}
      for b = 1, B do
        while #toks[b] > max_len do table.remove(toks[b]) end   -- cut off: no <end> in time
        words[b] = self.vocab:decode_string(toks[b])
        local rows = {}
        for t = 1, #toks[b] do rows[t] = aligns[b][t] end
        alphas[b] = #rows > 0 and glimpse.tensor(rows) or glimpse.zeros(0, a.shape[2])
        if alphas[b].shape[2] > a.shape[2] then alphas[b] = alphas[b]:narrow(2, 1, a.shape[2]) end
      end
      return {words, toks, alphas}
    end)
  end)
  if was_training then self:train() end
  if not ok then error(res, 0) end
  return res[1], res[2], res[3]
end

--- cap:caption(image or images, {beam=3, max_len=config.max_len,
---             length_penalty=config.length_penalty, sample=false, temperature=1,
---             resize=false, maps=false, warn=true}) -> caption [, info]
-- The caption (a string) of one image: a file name (read in the model's channel count),
-- (C,H,W) or (1,C,H,W); for a batch (B,C,H,W) or a list of images, a list of captions (a
-- batch of one gives the single caption unless opts.list is true).
-- An image whose size (or a tensor whose channels) differs from cap:input_shape() is an
-- error naming both shapes; resize=true converts it (cap:check_input).
-- maps=true also returns info: tokens (the caption's ids, <end> excluded), alphas (T,L)
-- (row t: where word t looked; the <end> step left out), image (the (C,H,W) picture as the
-- model saw it, before normalisation: what cap:overlays draws on), familiar (false when the
-- image is unlike the model's training images, cap:familiar; nil when the model carries no
-- summary of them) and reasons (why not, a list of strings); for several images each field
-- is a list.  An unfamiliar image also gets a note on stderr unless warn=false.
-- cap:caption_maps returns words, tokens, alphas as cap:caption did before.
-- beam=1 is greedy decoding; sample=true draws words instead (decode.sample).  Runs in
-- evaluation mode and records no graph.
function Captioner:caption(images, opts)
  local fname = "Captioner:caption"
  CAPTION_OPTIONS:known(opts, 2)
  opts = opts or {}
  local batch, single, looks = self:_caption_batch(images, opts, fname)
  local words, toks, alphas = self:_captions(batch, opts, fname)
  local fam, reasons, seen = {}, {}, {}
  local known = self.familiar_summary ~= nil
  for b = 1, #words do
    seen[b] = looks[b][1]
    if known then
      fam[b], reasons[b] = self:_judge(looks[b][1], looks[b][2])
      if not fam[b] and opts.warn ~= false then
        io.stderr:write("Captioner:caption: note: ", self:unfamiliar_note(reasons[b],
                        #words > 1 and ("image " .. b) or nil), "\n")
        io.stderr:flush()
      end
    end
  end
  if single then
    if not opts.maps then return words[1] end
    return words[1], {tokens = toks[1], alphas = alphas[1], image = seen[1],
                      familiar = fam[1], reasons = reasons[1] or {}}
  end
  if not opts.maps then return words end
  return words, {tokens = toks, alphas = alphas, image = seen, familiar = known and fam or nil,
                 reasons = reasons}
end

--- cap:caption_maps(image or images, opts) -> words, tokens, alphas: what cap:caption
--- returned before it returned the caption alone (the options are cap:caption's; no
--- familiarity check).  One image: the caption string, its token ids, alphas (T,L); several:
--- lists of those.
function Captioner:caption_maps(images, opts)
  local fname = "Captioner:caption_maps"
  CAPTION_OPTIONS:known(opts, 2)
  opts = opts or {}
  local batch, single = self:_caption_batch(images, opts, fname)
  local words, toks, alphas = self:_captions(batch, opts, fname)
  if single then return words[1], toks[1], alphas[1] end
  return words, toks, alphas
end

--- cap:unfamiliar_note(reasons [, subject="the image"]) -> the sentence that says an image
--- is unlike the model's training images, why (reasons: cap:familiar's), and what the model
--- knows (the first line of cap.description)
function Captioner:unfamiliar_note(reasons, subject)
  local C, H, W = self:input_shape()
  local what = self.description and self.description:match("^[^\n]+") or
               string.format("%s-channel %sx%s images", tostring(C), tostring(H or "?"),
                             tostring(W or "?"))
  local shown = table.move(reasons or {}, 1, 3, 1, {})
  if #(reasons or {}) > 3 then shown[4] = string.format("%d more", #reasons - 3) end
  return string.format("%s is unlike the images this model was trained on (%s); it knows " ..
                       "only %s, so its caption says little about it", subject or "the image",
                       table.concat(shown, "; "), what)
end

--- cap:overlays(image, alphas (T,L), words, path, {scale=2, alpha=0.6, colormap="jet",
---              normalise="shared", title="image", ncol=all}) -> path
-- A PNG strip: the image, then one attention overlay per word with the word printed under
-- it, on the model's annotation grid (glimpse.plot.caption.overlays says more).
-- image: (C,H,W) in [0,1] (the picture as seen, before normalisation) or a file name;
-- words: a string or a list with one entry per row of alphas.
function Captioner:overlays(img, alphas, words, path, opts)
  if opts ~= nil and type(opts) ~= "table" then
    check.fail(2, "Captioner:overlays: opts must be a table, got %s", type(opts))
  end
  local o = {}
  for k, v in pairs(opts or {}) do o[k] = v end
  -- the maps are on the grid of the image the encoder saw: prepare resizes a picture to the
  -- configured size, so that size (not the picture's) gives the grid
  local spec = self.config.image or {}
  o.grid = function(H, W) return self:grid_size(spec.height or H, spec.width or W) end
  return caption_plot.overlays(img, alphas, words, path, o, "Captioner:overlays")
end

return Captioner
