--- glimpse.models.captioner.decode -- the Captioner's captions: the decoder as a step function
-- for glimpse.decode (beam search, greedy, sampling), hard attention's test-time rules
-- (config.hard_eval; "marginal" sums the attended cell out), cap:caption, which takes
-- file names, tensors, batches and lists, and cap:overlays, the picture of where each word
-- looked (glimpse.plot.caption).  Methods of the Captioner (model.lua mixes them into the
-- class).
--
--   local words, tokens, alphas = cap:caption(image, {beam = 3})   -- "a bag above a coat"
--   cap:overlays(image, alphas, words, "/tmp/strip.png")
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
          go = self:_global_output(a)}, fixed
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
    local st = {cache = step_cache(fixed, s), keys = s.a, values = s.a, t = 0, logps = {},
                entropies = {}}
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
    local lp = glimpse.log_softmax(self:_logits(rep(ey, E), h2, z, s.go and rep(s.go, E)), 2)
    lp = lp:reshape(N, M, V)
    local mix = (lp + lw:reshape(N, M, 1)):logsumexp(2)          -- (N,V)
    return mix:reshape(N, V) + ban, {hs = h2:reshape(N, M, H), cs = c2:reshape(N, M, H),
                                     lw = lw, g = s.g, go = s.go, lp = lp, a = s.a,
                                     cache = s.cache}, alpha
  end
end

-- decode's step function: tokens (N) = y_{t-1} -> log p(y_t) (N,V), state, alpha_t (N,L)
function Captioner:_decode_step(fixed)
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
    local st = {cache = step_cache(fixed, s), keys = s.a, values = s.a, t = 0, logps = {},
                entropies = {}, grid = self:_grid_of(s.a), extra = self:_extra_cells()}
    local h, c, z, alpha = self:_step(xe, s.h, s.c, s.a, st, Wz)
    local lp = glimpse.log_softmax(self:_logits(ey, h, z, s.go), 2) + ban
    return lp, {h = h, c = c, a = s.a, cache = s.cache, g = s.g, go = s.go}, alpha
  end
end

-- the images of cap:caption as one batch (B,C,H,W), and whether one image was given
function Captioner:_caption_batch(images, opts, fname)
  -- a tensor is checked as given, a file once read (prepare converts a file's channels)
  local function checked(im)
    if type(im) == "string" then return self:_check_input(self:prepare(im), opts, fname, 4) end
    return self:prepare(self:_check_input(im, opts, fname, 4))
  end
  if type(images) == "table" and not glimpse.is_tensor(images) then
    if #images == 0 then check.fail(3, "%s: an empty list of images", fname) end
    local list = {}
    for i, im in ipairs(images) do list[i] = checked(im) end
    local ok, st = pcall(glimpse.stack, list, 1)
    if not ok then check.fail(3, "%s: the images differ in size: %s", fname, check.strip(st)) end
    return st, false
  elseif glimpse.is_tensor(images) and images:dim() == 4 then
    return self:_check_input(images, opts, fname, 3), images.shape[1] == 1 and opts.list ~= true
  end
  return checked(images):unsqueeze(1), true
end

--- cap:caption(image or images, {beam=3, max_len=config.max_len,
---             length_penalty=config.length_penalty, sample=false, temperature=1,
---             resize=false}) -> words, tokens, alphas
-- Images whose channels or size differ from cap:input_shape() are an error naming both
-- shapes; resize=true converts them (cap:check_input).
-- One image (a file name, (C,H,W) or (1,C,H,W)): words (the caption string), tokens (its
-- ids, <end> excluded), alphas (T,L) (row t: where word t looked; the <end> step left out).
-- A batch (B,C,H,W) or a list of images: lists of those, one per image (a batch of one
-- gives the single results unless opts.list is true).
-- beam=1 is greedy decoding; sample=true draws words instead (decode.sample).  Runs in
-- evaluation mode and records no graph.
function Captioner:caption(images, opts)
  local fname = "Captioner:caption"
  CAPTION_OPTIONS:known(opts, 2)
  opts = opts or {}
  local batch, single = self:_caption_batch(images, opts, fname)
  local K = opts.beam or 3
  check.int(fname, "opts.beam", K, 1, nil, 2)
  local max_len = check.int(fname, "opts.max_len", opts.max_len or self.config.max_len, 1, nil, 2)
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
  if single then return res[1][1], res[2][1], res[3][1] end
  return res[1], res[2], res[3]
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
