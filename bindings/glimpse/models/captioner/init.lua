--- glimpse.models.captioner (also glimpse.captioner and glimpse.models.Captioner) -- "Show,
-- Attend and Tell" (Xu et al. 2015): an image captioner with soft or hard attention over a
-- CNN's annotation grid, trained with teacher forcing, decoded with beam search, saved as one
-- self-contained safetensors file.
--
--   local Captioner = require("glimpse.models.captioner").Captioner
--   local cap = Captioner{vocab = ds.vocab, encoder = {name = "small", in_channels = 1},
--                         attention = "soft", doubly_stochastic = 1}
--   local loss, info = cap:loss(b.images, b.captions_in, b.captions_out, b.mask)
--   local words, tokens, alphas = cap:caption(image, {beam = 3})   -- "a bag above a coat"
--   cap:overlays(image, alphas, words, "/tmp/strip.png")           -- where each word looked
--   cap:save("model.safetensors");  cap = Captioner.load("model.safetensors")
--
-- The model (the paper's section 3, with its equation numbers):
--   a = encoder:grid(image)                     annotations a_1..a_L (B,L,D)
--   h_0 = tanh(f_init,h(mean_i a_i)), c_0 = tanh(f_init,c(mean_i a_i))         (sec. 3.1.2)
--   e_ti = f_att(a_i, h_{t-1}), alpha_t = softmax(e_t)                        (eq. 4, 5)
--     f_att is any nn.Attention score (additive = the paper's MLP, the default); keys are
--     projected once per image
--   soft: z_t = beta_t sum_i alpha_ti a_i, beta_t = sigmoid(f_beta(h_{t-1}))  (eq. 13, 4.2.1)
--   hard: z_t = beta_t a_{s_t}, s_t ~ Multinoulli(alpha_t) (training), the expected context
--     for a whole batch with probability soft_prob (0.5); argmax (or the expected context,
--     hard_eval="soft") at test time                                       (sec. 4.1)
--   i,f,o,g / c_t / h_t: an LSTM step on [E y_{t-1}; z_t]                     (eq. 1-3)
--   p(y_t) = softmax(L_o(E y_{t-1} + L_h h_t + L_z z_t))    (deep output, eq. 7; dropout on
--     the sum; output_tanh=true puts a tanh there, as the authors' code does)
-- Loss per token: the cross-entropy over real (non-pad) words
--   + lambda sum_i (1 - sum_t alpha_ti)^2 per caption (doubly stochastic, eq. 14)
--   + hard: the REINFORCE surrogate of eq. 12: lambda_r (log p(y|s,a) - b n) log p(s|a)
--     - lambda_e H[s], with the moving average b <- 0.9 b + 0.1 log p(y|s,a) / n kept per
--     word (n: the caption's length), so that long and short captions compare fairly.
--     samples=K > 1: each caption is decoded K times with independent samples and each
--     sample's baseline is the mean reward of the other K-1 (baseline="loo", VIMCO-style);
--     estimator="gumbel" replaces REINFORCE by straight-through Gumbel-softmax (K samples:
--     their mean).  mix="expected" weighs both passes by the coin's odds.  soft_prob
--     and entropy may move linearly to soft_prob_end / entropy_end over the first `anneal`
--     share of training (cap:set_progress).
-- Sentence-level terms are divided by the number of real tokens in the batch (as the
-- cross-entropy is), which keeps the paper's ratio between them.
local glimpse = require "glimpse"
local nn = glimpse.nn
local att = glimpse.attention
local decode = glimpse.decode
local Vocab = glimpse.data.Vocab
local encoders = require "glimpse.models.encoders"

local M = {}

local FORMAT = "glimpse.captioner"
local FORMAT_VERSION = "1"
local DEFAULT_MAX_LEN = 30

local function shape_str(t)
  return glimpse.is_tensor(t) and "{" .. table.concat(t.shape, ",") .. "}" or type(t)
end

local function fail(level, fmt, ...)
  error(string.format(fmt, ...), level + 1)
end

local function json()
  return require "glimpse.util"
end


-- ---------------------------------------------------------------------------------------
-- the vocabulary and the encoder from options

-- a Vocab object, a full id list (specials first, as vocab:totable() gives) or a token list
local function make_vocab(v, level)
  if type(v) ~= "table" then
    fail(level, "Captioner: option 'vocab' must be a vocabulary (datasets/vocab.lua) or a list " ..
                "of words, got %s", type(v))
  end
  if v.itos and v.stoi then return v end
  if v[1] == Vocab.SPECIALS[1] then return Vocab.from_list(v) end
  return Vocab.new(v)
end

-- the models.encoder(name, opts) spec that rebuilds an encoder module (for the checkpoint)
local function encoder_spec(enc)
  local arch = enc.arch
  if arch == "SmallCNN" then
    local bn = false
    for _, m in ipairs(enc:modules()) do
      if m.__name == "BatchNorm2d" then bn = true end
    end
    local k = 3
    for _, m in ipairs(enc:modules()) do
      if m.__name == "Conv2d" then k = m.weight.shape[3] break end
    end
    return {name = "small", in_channels = enc.in_channels, channels = enc.channels,
            batch_norm = bn, kernel_size = k}
  end
  return {name = arch, classifier = enc:has_head()}
end

local function make_encoder(e, level)
  if type(e) == "table" and type(e.grid) == "function" then
    if type(e.grid_dim) ~= "number" or type(e.grid_size) ~= "function" then
      fail(level, "Captioner: the encoder module needs grid_dim and grid_size(H, W) " ..
                  "(glimpse.models' encoders have them)")
    end
    return e, encoder_spec(e)
  end
  if e ~= nil and type(e) ~= "table" then
    fail(level, "Captioner: option 'encoder' must be an encoder module with :grid or a table " ..
                "of glimpse.models options {name=\"small\", in_channels=, channels=}, got %s",
         type(e))
  end
  local spec = {}
  for k, v in pairs(e or {}) do spec[k] = v end
  spec.name = spec.name or "small"
  local opts = {}
  for k, v in pairs(spec) do if k ~= "name" then opts[k] = v end end
  if spec.name ~= "small" and opts.classifier == nil then opts.classifier = false end
  local ok, enc = pcall(encoders.encoder, spec.name, opts)
  if not ok then fail(level, "Captioner: encoder: %s", tostring(enc):gsub("^[^:]*:%d+: ", "")) end
  return enc, encoder_spec(enc)
end

local function positive_int(o, key, default, level)
  local v = o[key]
  if v == nil then return default end
  if math.type(v) ~= "integer" or v < 1 then
    fail(level, "Captioner: option '%s' must be a positive integer, got %s", key, tostring(v))
  end
  return v
end

local function number_in(o, key, default, lo, hi, level)
  local v = o[key]
  if v == nil then return default end
  if type(v) ~= "number" or v ~= v or v < lo or v > hi then
    fail(level, "Captioner: option '%s' must be a number in [%g, %g], got %s", key, lo, hi,
         tostring(v))
  end
  return v
end

local function bool(o, key, default)
  local v = o[key]
  if v == nil then return default end
  return v and true or false
end

-- ---------------------------------------------------------------------------------------
-- the model

local Captioner = nn.Module:extend("Captioner")
M.Captioner = Captioner

-- hard attention's test-time rules (Captioner's hard_eval); "marginal" decodes through
-- cap:_marginal_step, its attention module reading the argmax cell
local HARD_EVAL = {argmax = true, region = true, sample = true, soft = true, marginal = true}
local HARD_EVAL_LIST = "argmax, region, sample, soft or marginal"
local function attention_rule(rule) return rule == "marginal" and "argmax" or rule end

--- glimpse.captioner.RECIPES -- named settings of hard attention's training (the Captioner
-- options soft_prob, soft_prob_end, entropy, entropy_end, anneal, samples, baseline,
-- estimator, tau, reward_weight, and the test-time hard_eval and length_penalty);
-- docs/experiments/caption.md compares them.
--   paper   Xu et al.: one sample, moving-average baseline, entropy bonus 0.01, the
--           expected context for half the batches throughout
--   loo     2 samples per caption with the leave-one-out baseline; the expected context for
--           every batch at first, falling linearly to the paper's half of the batches over
--           the first half of the steps; the entropy bonus falls from 0.01 to 0 on the same
--           schedule; test time reads the expected context (hard_eval = "soft")
--   gumbel  straight-through Gumbel-softmax instead of REINFORCE (the forward pass reads one
--           sampled cell, the gradient flows through the relaxed weights); soft_prob falls
--           from 1 to 0.5 over all the steps (anneal = 1: three batches in four read the
--           expected context on average); test time reads the centre of the 3 x 3 window
--           with the most attention (hard_eval = "region") and beam search normalises for
--           length (length_penalty = 2), both chosen on validation scenes
--           (scripts/caption.lua's default: the sharpest maps and the best BLEU of the three;
--           the script then chooses the rule and penalty again, caption_eval.tune)
M.RECIPES = {
  paper = {soft_prob = 0.5, soft_prob_end = 0.5, entropy = 0.01, entropy_end = 0.01, anneal = 1,
           samples = 1, baseline = "average", estimator = "reinforce", tau = 1,
           reward_weight = 1, hard_eval = "argmax", mix = "sample"},
  loo = {soft_prob = 1, soft_prob_end = 0.5, entropy = 0.01, entropy_end = 0, anneal = 0.5,
         samples = 2, baseline = "loo", estimator = "reinforce", tau = 1, reward_weight = 1,
         hard_eval = "soft", mix = "sample"},
  gumbel = {soft_prob = 1, soft_prob_end = 0.5, entropy = 0, entropy_end = 0, anneal = 1,
            samples = 1, baseline = "average", estimator = "gumbel", tau = 1, reward_weight = 1,
            hard_eval = "region", length_penalty = 2, mix = "sample"},
}

--- Captioner{vocab=, encoder=, dim_embed=64, dim_hidden=256, dim_att=128,
---           attention="soft"|"hard", score="additive", doubly_stochastic=1, gate=true,
---           deep_output=true, output_tanh=false, dropout=0, fine_tune=true,
---           soft_prob=0.5, entropy=0.01, reward_weight=1, baseline_decay=0.9,
---           hard_eval="argmax", marginal_cells=8, region_size=3, samples=1, baseline="average"|"loo", estimator="reinforce",
---           tau=1, soft_prob_end=soft_prob, entropy_end=entropy, anneal=1, mix="sample",
---           coords=false, global_feature=false, global_output=false, whole_image=false,
---           length_penalty=0,
---           image={channels=, height=, width=, mean=, std=}, max_len=30} -> captioner
-- vocab: a datasets/vocab.lua vocabulary (ids: 1 <pad> 2 <start> 3 <end> 4 <unk>) or a word
-- list.  encoder: a module with :grid (glimpse.models' encoders) or the options of
-- models.encoder {name="small" (default) | "vgg16" | "resnet18" ..., in_channels=,
-- channels=, ...}.  score: any nn.Attention score.  doubly_stochastic: lambda (0: off).
-- gate: the beta_t gating scalar.  deep_output=false: p(y_t) = softmax(W h_t).
-- fine_tune=false: the encoder is frozen (no gradients; cap:trainable_parameters() leaves it
-- out).  Hard attention: soft_prob, entropy (lambda_e), reward_weight (lambda_r),
-- baseline_decay, hard_eval ("argmax" | "region": the centre of the region_size x
-- region_size window holding the most attention, attention.region_argmax | "sample" |
-- "soft" | "marginal": each word's distribution with the cell summed out over the
-- marginal_cells likeliest), samples (K decodings per
-- caption), baseline ("average": the paper's moving average; "loo": leave-one-out over the K
-- samples, the default when K > 1), estimator ("reinforce" | "gumbel": straight-through
-- Gumbel-softmax at temperature tau; K > 1 averages K samples), soft_prob_end / entropy_end /
-- anneal (schedules, see cap:set_progress), mix ("sample": one coin per batch picks the
-- expected context with probability soft_prob; "expected": the coin's expectation, every
-- batch decoded both ways, soft_prob L(expected) + (1 - soft_prob) L(samples); "row": one
-- coin per caption, so every batch holds captions of both kinds).  coords=true appends each
-- cell's (x, y) centre in [-1,1] to its annotation (D + 2 features; not in the paper: the CNN
-- grid alone says little about where a cell is, which captions of spatial relations need).
-- global_feature=true adds the mean annotation to the LSTM input at every step, W_g mean_i a_i
-- (Anderson et al. 2018's top-down LSTM; not in Xu et al., whose decoder sees the whole
-- image only through h_0, c_0): a decoder that reads one cell per word (hard attention)
-- then still knows what the rest of the image holds, e.g. how many items there are.
-- global_output=true (deep output only) adds it to the deep output layer as well, L_g mean_i
-- a_i next to L_z z_t: where the expected context tells the output layer what the image
-- holds, one hard-attention cell does not.
-- whole_image=true adds one more cell to attend to, the mean annotation, after the grid's L
-- (Lu et al. 2017's visual sentinel is such an extra cell): hard attention can then read
-- the whole image at a word that needs it (is there one more item?) and one item's cell at
-- a word that names it.  The attention weights are then (.., L + 1); the maps that
-- cap:forward, cap:loss (info.alphas) and cap:caption return are the grid's L columns.
-- length_penalty: GNMT's alpha for cap:caption's beam search (score = log p / ((5 +
-- len) / 6)^alpha), kept with the model: hard attention's decoder is less sure that one
-- more item follows, and beam search without it prefers captions that stop early.
-- image: what cap:prepare does to
-- an image or a file before encoding (channel count, size, normalisation).
function Captioner:init(o)
  if type(o) ~= "table" then
    fail(3, "Captioner: expected an options table {vocab=, encoder=, ...}, got %s", type(o))
  end
  local vocab = make_vocab(o.vocab, 4)
  local encoder, spec = make_encoder(o.encoder, 4)
  local mode = o.attention or "soft"
  if mode ~= "soft" and mode ~= "hard" then
    fail(3, "Captioner: option 'attention' must be \"soft\" or \"hard\", got %s", tostring(mode))
  end
  local score = o.score or "additive"
  local known = false
  for _, s in ipairs(att.SCORES) do known = known or s == score end
  if not known then
    fail(3, "Captioner: unknown score %q (one of %s)", tostring(score), table.concat(att.SCORES, ", "))
  end
  local hard_eval = o.hard_eval or "argmax"
  if not HARD_EVAL[hard_eval] then
    fail(3, "Captioner: option 'hard_eval' must be %s, got %s", HARD_EVAL_LIST, tostring(hard_eval))
  end
  local coords = bool(o, "coords", false)
  local D = encoder.grid_dim + (coords and 2 or 0)
  local c = {
    coords = coords,
    global_feature = bool(o, "global_feature", false),
    global_output = bool(o, "global_output", false),
    whole_image = bool(o, "whole_image", false),
    dim_embed = positive_int(o, "dim_embed", 64, 4),
    dim_hidden = positive_int(o, "dim_hidden", 256, 4),
    dim_att = positive_int(o, "dim_att", 128, 4),
    dim_feature = D,
    attention = mode, score = score,
    doubly_stochastic = number_in(o, "doubly_stochastic", 1, 0, math.huge, 4),
    gate = bool(o, "gate", true),
    deep_output = bool(o, "deep_output", true),
    output_tanh = bool(o, "output_tanh", false),
    dropout = number_in(o, "dropout", 0, 0, 0.99, 4),
    fine_tune = bool(o, "fine_tune", true),
    soft_prob = number_in(o, "soft_prob", 0.5, 0, 1, 4),
    entropy = number_in(o, "entropy", 0.01, 0, math.huge, 4),
    reward_weight = number_in(o, "reward_weight", 1, 0, math.huge, 4),
    baseline_decay = number_in(o, "baseline_decay", 0.9, 0, 0.999999, 4),
    hard_eval = hard_eval,
    marginal_cells = positive_int(o, "marginal_cells", 8, 4),
    region_size = positive_int(o, "region_size", 3, 4),
    length_penalty = number_in(o, "length_penalty", 0, 0, math.huge, 4),
    samples = positive_int(o, "samples", 1, 4),
    estimator = o.estimator or "reinforce",
    tau = number_in(o, "tau", 1, 1e-3, math.huge, 4),
    anneal = number_in(o, "anneal", 1, 1e-6, 1, 4),
    max_len = positive_int(o, "max_len", DEFAULT_MAX_LEN, 4),
    encoder = spec,
    image = o.image,
    trained_on = o.trained_on,
  }
  if c.global_output and not c.deep_output then
    fail(3, "Captioner: option 'global_output' needs the deep output layer (deep_output = true)")
  end
  if c.region_size % 2 == 0 then
    fail(3, "Captioner: option 'region_size' must be odd (a window centred on a cell), got %d",
         c.region_size)
  end
  c.soft_prob_end = number_in(o, "soft_prob_end", c.soft_prob, 0, 1, 4)
  c.entropy_end = number_in(o, "entropy_end", c.entropy, 0, math.huge, 4)
  c.baseline = o.baseline or (c.samples > 1 and "loo" or "average")
  if c.baseline ~= "average" and c.baseline ~= "loo" then
    fail(3, "Captioner: option 'baseline' must be \"average\" or \"loo\", got %s", tostring(c.baseline))
  end
  if c.baseline == "loo" and c.samples < 2 then
    fail(3, "Captioner: baseline = \"loo\" needs samples >= 2, got %d", c.samples)
  end
  c.mix = o.mix or "sample"
  if c.mix ~= "sample" and c.mix ~= "expected" and c.mix ~= "row" then
    fail(3, "Captioner: option 'mix' must be \"sample\", \"expected\" or \"row\", got %s", tostring(c.mix))
  end
  if c.estimator ~= "reinforce" and c.estimator ~= "gumbel" then
    fail(3, "Captioner: option 'estimator' must be \"reinforce\" or \"gumbel\", got %s",
         tostring(c.estimator))
  end
  local seen = c.trained_on
  if seen ~= nil and (type(seen) ~= "table" or #seen ~= 3 or math.type(seen[1]) ~= "integer" or
                      math.type(seen[2]) ~= "integer" or math.type(seen[3]) ~= "integer") then
    fail(3, "Captioner: option 'trained_on' must be {C, H, W} (integers), got %s", tostring(seen))
  end
  if c.image ~= nil and type(c.image) ~= "table" then
    fail(3, "Captioner: option 'image' must be a table {channels=, height=, width=, mean=, std=}")
  end
  if score == "location" then
    fail(3, "Captioner: the location score has no keys to look at; use a content score " ..
            "(additive, general, dot, ...)")
  end
  if (score == "dot" or score == "scaled_dot" or score == "cosine") and c.dim_hidden ~= D then
    fail(3, "Captioner: the %s score needs dim_hidden == the encoder's grid_dim (%d), got %d " ..
            "(use additive or general)", score, D, c.dim_hidden)
  end
  local V, E, H = vocab:size(), c.dim_embed, c.dim_hidden
  rawset(self, "config", c)
  rawset(self, "vocab", vocab)
  self.encoder = encoder
  self.embed = nn.Embedding(V, E)                               -- E
  self.init_h = nn.Linear(D, H)                                 -- f_init,h
  self.init_c = nn.Linear(D, H)                                 -- f_init,c
  self.attention = nn.Attention{score = score, mode = mode, query = H, key = D,
                                hidden = c.dim_att, soft_prob = c.soft_prob,
                                hard_eval = attention_rule(hard_eval), region = c.region_size,
                                estimator = c.estimator, tau = c.tau}
  if c.gate then self.gate = nn.Linear(H, 1) end                -- f_beta
  self.lstm = nn.LSTMCell(E + D, H)                             -- input [E y_{t-1}; z_t]
  if c.global_feature then                                      -- ... and W_g mean_i a_i
    -- W_g = 0 at first: the model starts as Xu et al.'s and takes the whole-image pathway as
    -- far as it helps.  With a random W_g the decoder has the image's gist from the first
    -- step, and hard attention, whose gradient is the noisier, learnt to look nowhere in
    -- 1000 steps (--quick: 10.9% of the mass in the named item's box, chance 11.8%)
    self.global_in = nn.Linear(D, 4 * H, {bias = false})
    glimpse.no_grad(function() self.global_in.weight:zero_() end)
  end
  if c.deep_output then
    self.out_h = nn.Linear(H, E)                                -- L_h
    self.out_z = nn.Linear(D, E)                                -- L_z
    self.out = nn.Linear(E, V)                                  -- L_o
    if c.global_output then                                     -- L_g, from 0 as W_g
      self.out_g = nn.Linear(D, E, {bias = false})
      glimpse.no_grad(function() self.out_g.weight:zero_() end)
    end
  else
    self.out = nn.Linear(H, V)
  end
  rawset(self, "baseline", att.baseline(c.baseline_decay))
  rawset(self, "entropy_weight", c.entropy)
  if not c.fine_tune then self.encoder:evaluate() end
end

--- cap:train(mode) -- as Module:train, but a frozen encoder (fine_tune=false) stays in
-- evaluation mode.
function Captioner:train(mode)
  nn.Module.train(self, mode)
  if not self.config.fine_tune then self.encoder:evaluate() end
  return self
end

--- cap:trainable_parameters() -> the parameters to optimise (without the encoder's when it
-- is frozen).
function Captioner:trainable_parameters()
  if self.config.fine_tune then return self:parameters() end
  local frozen = {}
  for _, p in ipairs(self.encoder:parameters()) do frozen[p] = true end
  local out = {}
  for _, p in ipairs(self:parameters()) do
    if not frozen[p] then out[#out + 1] = p end
  end
  return out
end

--- cap:set_progress(done) -- hard attention's schedules at the share `done` (0..1) of
-- training: soft_prob and the entropy weight move linearly from their start values to
-- soft_prob_end and entropy_end over the first `anneal` share, then stay there.
function Captioner:set_progress(done)
  if type(done) ~= "number" or done ~= done then
    fail(2, "Captioner:set_progress: done must be a number in [0,1], got %s", tostring(done))
  end
  local c = self.config
  local f = math.max(0, math.min(1, done / c.anneal))
  self.attention.soft_prob = c.soft_prob + (c.soft_prob_end - c.soft_prob) * f
  rawset(self, "entropy_weight", c.entropy + (c.entropy_end - c.entropy) * f)
end

--- cap:set_hard_eval(rule) -- what a hard-attention model reads at test time from now on:
-- "argmax" | "region" | "sample" | "soft" | "marginal" (see Captioner's hard_eval); kept in
-- the config (and so in a checkpoint saved afterwards).
function Captioner:set_hard_eval(rule)
  if not HARD_EVAL[rule] then
    fail(2, "Captioner:set_hard_eval: rule must be %s, got %s", HARD_EVAL_LIST, tostring(rule))
  end
  self.config.hard_eval = rule
  self.attention.hard_eval = attention_rule(rule)
  self.attention.region = self.config.region_size or 3
end

--- cap:annotate(images (B,C,H,W)) -> a (B,L,D), h, w: the encoder's annotation grid (no
-- tape through a frozen encoder).
function Captioner:annotate(images)
  if not glimpse.is_tensor(images) or images:dim() ~= 4 then
    fail(2, "Captioner:annotate: images must be a (B,C,H,W) tensor, got %s", shape_str(images))
  end
  local grad = nil
  if not self.config.fine_tune then grad = false end
  local ok, a, h, w = pcall(self.encoder.grid, self.encoder, images, {grad = grad})
  if not ok then fail(2, "Captioner: %s", tostring(a):gsub("^[^:]*:%d+: ", "")) end
  if self.config.coords then
    local B, L = a.shape[1], a.shape[2]
    a = glimpse.cat({a, self:_coords(h, w):reshape(1, L, 2):expand(B, L, 2)}, 3)
  end
  rawset(self, "_grid", {h, w})                                 -- for the region rule
  return a, h, w
end

-- (L,2) cell centres (x, y) in [-1,1], row-major, cached per grid size
function Captioner:_coords(h, w)
  local key = h .. "x" .. w
  local cache = rawget(self, "_coord_cache") or {}
  rawset(self, "_coord_cache", cache)
  if not cache[key] then
    local rows = {}
    for r = 1, h do
      for c = 1, w do rows[(r - 1) * w + c] = {(2 * c - 1) / w - 1, (2 * r - 1) / h - 1} end
    end
    cache[key] = glimpse.tensor(rows)
  end
  return cache[key]
end

-- annotations from images (B,C,H,W) or given directly as (B,L,D)
function Captioner:_annotations(x, fname, level)
  if glimpse.is_tensor(x) and x:dim() == 4 then return (self:annotate(x)) end
  if glimpse.is_tensor(x) and x:dim() == 3 then
    if x.shape[3] ~= self.config.dim_feature then
      fail(level + 1, "%s: annotations %s must be (B,L,%d)", fname, shape_str(x),
           self.config.dim_feature)
    end
    return x
  end
  fail(level + 1, "%s: argument #1 must be images (B,C,H,W) or annotations (B,L,%d), got %s",
       fname, self.config.dim_feature, shape_str(x))
end

-- h_0, c_0 from the mean annotation (sec. 3.1.2)
function Captioner:initial_state(a)
  local mean = a:mean(2)                                        -- (B,D)
  return self.init_h(mean):tanh(), self.init_c(mean):tanh()
end

-- global_feature: the mean annotation's share of the LSTM input at every step, W_g v (B,4H)
-- with v = mean_i a_i (Anderson et al. 2018's top-down LSTM reads the mean-pooled image
-- feature at every step); nil without it.  Constant over a caption, so it is computed once.
function Captioner:_global_input(a)
  if not self.config.global_feature then return nil end
  return self.global_in(a:mean(2))
end

-- global_output: the mean annotation's share of the deep output, L_g v (B,E); nil without it
function Captioner:_global_output(a)
  if not self.config.global_output then return nil end
  return self.out_g(a:mean(2))
end

-- the cells attention reads after the grid's: 1 with whole_image, else 0
function Captioner:_extra_cells() return self.config.whole_image and 1 or 0 end

-- what attention reads: the annotations a (B,L,D), and with whole_image their mean as one
-- more cell (B,L+1,D)
function Captioner:_attendable(a)
  if not self.config.whole_image then return a end
  return glimpse.cat({a, a:mean(2, true)}, 2)
end

-- the attention state for a new image (av: cap:_attendable's cells): the nn.Attention
-- state, with the per-image cache, the grid and the count of cells after it
function Captioner:_attention_state(av)
  local st = self.attention:precompute(av, av, nil)
  st.grid = self:_grid_of(av)
  st.extra = self:_extra_cells()
  return st
end

-- the (h, w) layout of the grid cells of av (B,L[+1],D): the last grid the encoder made, or
-- for annotations given directly a square grid if L is one, else a row
function Captioner:_grid_of(av)
  local g, L = rawget(self, "_grid"), av.shape[2] - self:_extra_cells()
  if g and g[1] * g[2] == L then return g end
  local side = math.floor(math.sqrt(L) + 0.5)
  return side * side == L and {side, side} or {1, L}
end

-- One decoder step from h_{t-1}: attention, gate, LSTM.  xe: the embedding's share of the
-- LSTM input projection, W_e E y_{t-1} + b (B,4H).  Returns h_t, c_t, z_t, alpha_t, state,
-- beta_t (B,1) or nil.
function Captioner:_step(xe, h, c, a, st, Wz)
  local ctx, alpha
  ctx, alpha, st = self.attention(h, a, a, nil, st)             -- e_ti = f_att(a_i, h_{t-1})
  local z, beta = ctx, nil
  if self.gate then
    beta = self.gate(h):sigmoid()                               -- beta_t = sigmoid(f_beta(h_{t-1}))
    z = ctx * beta                                              -- z_t = beta_t * context
  end
  local xp = xe + glimpse.linear(z, Wz)
  local h2, c2 = glimpse.lstm_cell(xp, h, c, self.lstm.weight_hh, self.lstm.bias_hh)
  return h2, c2, z, alpha, st, beta
end

-- the LSTM input weights split into the embedding's and the context's columns
function Captioner:_split_lstm()
  local E, D = self.config.dim_embed, self.config.dim_feature
  local W = self.lstm.weight_ih
  return W:narrow(2, 1, E), W:narrow(2, E + 1, D)
end

-- logits from E y_{t-1} (...,E), h_t (...,H), z_t (...,D): the deep output layer (eq. 7);
-- go: L_g v with global_output, (B,E) for one step or (B,1,E) over the steps (nil: none)
function Captioner:_logits(ey, h, z, go)
  local x
  if self.config.deep_output then
    x = ey + self.out_h(h) + self.out_z(z)
    if go then x = x + go end
  else
    x = h
  end
  if self.config.dropout > 0 then x = glimpse.dropout(x, self.config.dropout, self.training) end
  if self.config.deep_output and self.config.output_tanh then x = x:tanh() end
  return self.out(x)
end

local function as_ids(x, what, fname, level)
  if type(x) == "table" then
    local ok, t = pcall(glimpse.tensor, x)
    if not ok then fail(level + 1, "%s: %s must be a (B,T) table of ids: %s", fname, what, t) end
    x = t
  end
  if not glimpse.is_tensor(x) or x:dim() ~= 2 then
    fail(level + 1, "%s: %s must be a (B,T) tensor of 1-based ids, got %s", fname, what,
         shape_str(x))
  end
  return x
end

--- cap:forward(images (B,C,H,W) or annotations (B,L,D), captions_in (B,T))
---   -> logits (B,T,V), alphas (B,T,L), state
-- Teacher forcing: step t reads captions_in[:,t] (<start> w_1 .. w_{T-1}).  state: the
-- attention state (hard mode: the samples' log-probabilities), betas (B,T) when gated.
function Captioner:forward(x, captions_in, opts)
  local fname = "Captioner:forward"
  local a = self:_annotations(x, fname, 2)
  captions_in = as_ids(captions_in, "captions_in", fname, 2)
  local B, T = captions_in.shape[1], captions_in.shape[2]
  if a.shape[1] ~= B then
    fail(2, "%s: %d images but %d captions", fname, a.shape[1], B)
  end
  local V = self.vocab:size()
  local mx = captions_in:max():item()
  local mn = captions_in:min():item()
  if mn < 1 or mx > V then
    fail(2, "%s: caption ids must lie in 1..%d (the vocabulary), got %g..%g", fname, V, mn, mx)
  end
  local ey = self.embed(captions_in)                            -- (B,T,E)
  local We, Wz = self:_split_lstm()
  local xe = glimpse.linear(ey, We, self.lstm.bias_ih)          -- one sgemm for all steps
  local g = self:_global_input(a)
  if g then xe = xe + g:reshape(B, 1, g.shape[2]) end
  local h, c = self:initial_state(a)
  local av = self:_attendable(a)
  local st = self:_attention_state(av)
  if opts and opts.use_soft ~= nil then st.use_soft = opts.use_soft end
  if opts and opts.soft_rows then                               -- mix = "row": a coin per caption
    st.use_soft = false
    st.soft_rows = glimpse.rand(B, 1):lt(opts.soft_rows)
  end
  local hs, zs, alphas, betas = {}, {}, {}, {}
  for t = 1, T do
    local z, alpha, beta
    h, c, z, alpha, st, beta = self:_step(xe:select(2, t), h, c, av, st, Wz)
    hs[t], zs[t], alphas[t] = h, z, alpha
    if beta then betas[t] = beta:reshape(B) end
  end
  local go = self:_global_output(a)
  if go then go = go:reshape(B, 1, go.shape[2]) end
  local logits = self:_logits(ey, glimpse.stack(hs, 2), glimpse.stack(zs, 2), go)
  st.betas = self.gate and glimpse.stack(betas, 2):detach() or nil
  st.alphas = glimpse.stack(alphas, 2)                         -- every cell's (the penalty's)
  local L = a.shape[2]
  return logits, av.shape[2] > L and st.alphas:narrow(3, 1, L) or st.alphas, st
end

--- cap:penalty(alphas (B,T,L), mask (B,T) or nil) -> the doubly stochastic penalty averaged
-- over captions: lambda sum_i (1 - sum_t alpha_ti)^2 (steps where mask is 0 do not count).
function Captioner:penalty(alphas, mask)
  return att.doubly_stochastic(alphas, {tgt_mask = mask, weight = self.config.doubly_stochastic})
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
  if K > 1 then                         -- K copies of every caption, rows b*K+1 .. b*K+K
    local function rep(t)
      local shape = t.shape
      local big = {shape[1], K}
      for d = 2, #shape do big[d + 1] = shape[d] end
      local flat = {shape[1] * K}
      for d = 2, #shape do flat[d] = shape[d] end
      return t:unsqueeze(2):expand(table.unpack(big)):reshape(table.unpack(flat))
    end
    a, captions_in, captions_out, mask = rep(a), rep(captions_in), rep(captions_out), rep(mask)
    B = B * K
  end
  local logits, alphas, st = self:forward(a, captions_in, {use_soft = use_soft, soft_rows = soft_rows})
  local all_alphas = st.alphas
  -- padded targets become <pad> so cross_entropy ignores them whatever the caller's mask says
  local targets = captions_out * mask + (1 - mask) * Vocab.PAD
  local nll = glimpse.cross_entropy(logits:reshape(B * T, V), targets:reshape(B * T),
                                    {ignore_index = Vocab.PAD, reduction = "none"})
  local nll_seq = nll:reshape(B, T):sum(2)                      -- -log p(y | s, a) per caption
  local ntok = math.max(mask:sum():item(), 1)
  local loss = nll_seq:sum() / ntok
  local info = {tokens = ntok, nll = loss:item(), alphas = alphas:detach(), betas = st.betas}
  local lambda = self.config.doubly_stochastic
  if lambda > 0 then
    local ds = self:penalty(all_alphas, mask)                   -- per caption
    info.ds = ds:item()
    loss = loss + ds * (B / ntok)
  else
    info.ds = 0
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
-- The training objective per real token (see the file's header).  mask defaults to
-- captions_out ~= <pad>.  info: nll (mean token NLL), ds (penalty per caption, lambda
-- included), reinforce (hard mode: the surrogate's value, or nil when the batch used the
-- expected context), reward (hard: the batch's mean log p(y|s,a) per word, what the
-- baseline tracks), baseline_used (the b this batch was compared with), baseline (after the update),
-- tokens, alphas (B,T,L) and betas (B,T) (detached).
function Captioner:loss(x, captions_in, captions_out, mask, opts)
  local fname = "Captioner:loss"
  if glimpse.is_tensor(x) and x:dim() == 4 then x = self:_check_input(x, opts, fname, 2) end
  captions_in = as_ids(captions_in, "captions_in", fname, 2)
  captions_out = as_ids(captions_out, "captions_out", fname, 2)
  if captions_in.shape[1] ~= captions_out.shape[1] or captions_in.shape[2] ~= captions_out.shape[2] then
    fail(2, "%s: captions_in %s and captions_out %s must have the same shape", fname,
         shape_str(captions_in), shape_str(captions_out))
  end
  local B, T = captions_out.shape[1], captions_out.shape[2]
  if mask == nil then
    mask = captions_out:ne(Vocab.PAD)
  elseif type(mask) == "table" then
    mask = glimpse.tensor(mask)
  end
  if not glimpse.is_tensor(mask) or mask:dim() ~= 2 or mask.shape[1] ~= B or mask.shape[2] ~= T then
    fail(2, "%s: mask must be (B,T) = {%d,%d} like the captions, got %s", fname, B, T,
         shape_str(mask))
  end
  local V = self.vocab:size()
  local mx, mn = captions_out:max():item(), captions_out:min():item()
  if mn < 1 or mx > V then
    fail(2, "%s: caption ids must lie in 1..%d (the vocabulary), got %g..%g", fname, V, mn, mx)
  end
  local a = self:_annotations(x, fname, 2)
  if a.shape[1] ~= B then fail(2, "%s: %d images but %d captions", fname, a.shape[1], B) end
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

-- ---------------------------------------------------------------------------------------
-- captioning

--- cap:input_shape() -> C, H, W: the images the model takes.  C: config.image.channels or
-- the encoder's; H, W: config.image's size, else the size of the images of the first
-- cap:loss (kept in config.trained_on and in the checkpoint); nil while unknown.
function Captioner:input_shape()
  local spec, seen = self.config.image or {}, self.config.trained_on or {}
  return spec.channels or self.encoder.in_channels or seen[1], spec.height or seen[2],
         spec.width or seen[3]
end

--- cap:check_input(images (C,H,W), (H,W) or (B,C,H,W), {resize=false}) -> images
-- The images unchanged when their channels and size are cap:input_shape()'s; with
-- resize=true converted to them (grey <-> RGB, RGBA -> RGB, bilinear resize); else an error
-- naming both shapes.  A model with config.image size resizes by itself (cap:prepare).
function Captioner:check_input(x, opts)
  return self:_check_input(x, opts, "Captioner:check_input", 2)
end

function Captioner:_check_input(x, opts, fname, level)
  opts = opts or {}
  if type(opts) ~= "table" then fail(level + 1, "%s: opts must be a table, got %s", fname, type(opts)) end
  if not glimpse.is_tensor(x) or x:dim() < 2 or x:dim() > 4 then
    fail(level + 1, "%s: images must be (C,H,W), (H,W) or (B,C,H,W) tensors, got %s", fname,
         shape_str(x))
  end
  local C, H, W = self:input_shape()
  local spec = self.config.image or {}
  if spec.height then H, W = nil, nil end   -- prepare resizes to the configured size
  local batched = x:dim() == 4
  local im = x:dim() == 2 and x:unsqueeze(1) or x
  local d = batched and 1 or 0
  local c, h, w = im.shape[d + 1], im.shape[d + 2], im.shape[d + 3]
  if c == C and (not H or (h == H and w == W)) then return x end
  local want = string.format("%sx%s", C, H and (H .. "x" .. W) or "HxW")
  if not opts.resize then
    fail(level + 1, "%s: the image is %s (%dx%dx%d), the model takes %s (channels x height " ..
         "x width); pass resize = true to convert", fname, shape_str(x), c, h, w, want)
  end
  local function convert(one)
    if c ~= C then
      if C == 1 and c >= 3 then one = glimpse.image.to_grey(one:narrow(1, 1, 3))
      elseif C == 3 and c == 1 then one = glimpse.cat({one, one, one}, 1)
      elseif C == 3 and c == 4 then one = one:narrow(1, 1, 3)
      else fail(level + 2, "%s: cannot convert a %d-channel image to %d channels", fname, c, C) end
      if one:dim() == 2 then one = one:unsqueeze(1) end
    end
    if H and (h ~= H or w ~= W) then one = glimpse.image.resize(one, H, W) end
    return one
  end
  if not batched then return convert(im) end
  local list = {}
  for b = 1, im.shape[1] do list[b] = convert(im[b]) end
  return glimpse.stack(list, 1)
end

--- cap:prepare(image) -> (C,H,W) ready for the encoder.  image: a file name (read with
-- glimpse.image.load) or a (C,H,W) / (H,W) tensor in [0,1]; converted to the configured
-- channel count, resized to the configured size and normalised with the configured mean/std
-- (config.image; nothing is done where it says nothing).
function Captioner:prepare(img)
  local spec = self.config.image or {}
  if type(img) == "string" then
    local ok, t = pcall(glimpse.image.load, img, {channels = spec.channels})
    if not ok then fail(2, "Captioner: %s", tostring(t):gsub("^[^:]*:%d+: ", "")) end
    img = t
  end
  if not glimpse.is_tensor(img) or img:dim() < 2 or img:dim() > 3 then
    fail(2, "Captioner: an image must be a file name or a (C,H,W) tensor, got %s", shape_str(img))
  end
  if img:dim() == 2 then img = img:unsqueeze(1) end
  local C = img.shape[1]
  local want = spec.channels or self.encoder.in_channels
  if C ~= want then
    if want == 1 and C >= 3 then img = glimpse.image.to_grey(img:narrow(1, 1, 3))
    elseif want == 3 and C == 1 then img = glimpse.cat({img, img, img}, 1)
    elseif want == 3 and C == 4 then img = img:narrow(1, 1, 3)
    else fail(2, "Captioner: the image has %d channels, the encoder expects %d", C, want) end
    if img:dim() == 2 then img = img:unsqueeze(1) end
  end
  if spec.height and spec.width and (img.shape[2] ~= spec.height or img.shape[3] ~= spec.width) then
    img = glimpse.image.resize(img, spec.height, spec.width)
  end
  if spec.mean and spec.std then img = glimpse.image.normalize(img, spec.mean, spec.std) end
  return img
end

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

-- hard_eval = "marginal": decode's step for hard attention with the attended cell summed
-- out.  The word distribution is the hard model's own, p(y_t) = sum_m w_m p(y_t | s_t = m)
-- over the M = config.marginal_cells likeliest cells (w: alpha_t renormalised over them),
-- not the distribution given one cell; the state then follows the cell that best explains
-- the word chosen, argmax_m w_m p(y_t | m) (read at the next step, when y_t comes in).
function Captioner:_marginal_step(fixed, ban)
  local We, Wz = self:_split_lstm()
  local E, H, D, V = self.config.dim_embed, self.config.dim_hidden, self.config.dim_feature,
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
    local cache = {}
    for k, v in pairs(fixed) do cache[k] = v end
    for k, v in pairs(s.cache) do cache[k] = v end
    local st = {cache = cache, keys = s.a, values = s.a, t = 0, logps = {}, entropies = {}}
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
    return mix:reshape(N, V) + ban, {hs = h2:reshape(N, M, H), cs = c2:reshape(N, M, H), lw = lw, g = s.g,
                                     go = s.go, lp = lp, a = s.a, cache = s.cache}, alpha
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
    local cache = {}
    for k, v in pairs(fixed) do cache[k] = v end
    for k, v in pairs(s.cache) do cache[k] = v end
    local st = {cache = cache, keys = s.a, values = s.a, t = 0, logps = {}, entropies = {},
                grid = self:_grid_of(s.a), extra = self:_extra_cells()}
    local h, c, z, alpha = self:_step(xe, s.h, s.c, s.a, st, Wz)
    local lp = glimpse.log_softmax(self:_logits(ey, h, z, s.go), 2) + ban
    return lp, {h = h, c = c, a = s.a, cache = s.cache, g = s.g, go = s.go}, alpha
  end
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
  opts = opts or {}
  if type(opts) ~= "table" then fail(2, "Captioner:caption: opts must be a table, got %s", type(opts)) end
  local single = true
  local batch
  local fname = "Captioner:caption"
  -- a tensor is checked as given, a file once read (prepare converts a file's channels)
  local function checked(im)
    if type(im) == "string" then return self:_check_input(self:prepare(im), opts, fname, 4) end
    return self:prepare(self:_check_input(im, opts, fname, 4))
  end
  if type(images) == "table" and not glimpse.is_tensor(images) then
    if #images == 0 then fail(2, "Captioner:caption: an empty list of images") end
    local list = {}
    for i, im in ipairs(images) do list[i] = checked(im) end
    local ok, st = pcall(glimpse.stack, list, 1)
    if not ok then fail(2, "Captioner:caption: the images differ in size: %s", st) end
    batch, single = st, false
  elseif glimpse.is_tensor(images) and images:dim() == 4 then
    batch, single = self:_check_input(images, opts, fname, 2), images.shape[1] == 1 and opts.list ~= true
  else
    batch = checked(images):unsqueeze(1)
  end
  local K = opts.beam or 3
  if math.type(K) ~= "integer" or K < 1 then
    fail(2, "Captioner:caption: opts.beam must be a positive integer, got %s", tostring(K))
  end
  local max_len = opts.max_len or self.config.max_len
  if math.type(max_len) ~= "integer" or max_len < 1 then
    fail(2, "Captioner:caption: opts.max_len must be a positive integer, got %s", tostring(max_len))
  end
  local was_training = self.training
  self:evaluate()
  local ok, err = pcall(function()
    return glimpse.no_grad(function()
      local a = self:annotate(batch)
      local state, fixed = self:_decode_state(a)
      local step = self:_decode_step(fixed)
      local B = a.shape[1]
      local toks, aligns = {}, {}
      if opts.sample then
        local t, _, al = decode.sample(step, state, {max_len = max_len + 1,
                                                     temperature = opts.temperature})
        toks, aligns = t, al
      else
        local hyps = decode.beam(step, state, {beam = K, max_len = max_len + 1,
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
  if not ok then error(err, 0) end
  local words, toks, alphas = err[1], err[2], err[3]
  if single then return words[1], toks[1], alphas[1] end
  return words, toks, alphas
end

--- cap:grid_size(H, W) -> h, w of the annotation grid for an H x W image
function Captioner:grid_size(H, W)
  return self.encoder:grid_size(H, W)
end

-- ---------------------------------------------------------------------------------------
-- pictures

local OVERLAY_SCALE = 2          -- images are drawn at twice their size (64 -> 128 pixels)

--- cap:overlays(image, alphas (T,L), words, path, {scale=2, alpha=0.6, colormap="jet",
---              normalise="shared", title="image", ncol=all}) -> path
-- A PNG strip: the image, then one attention overlay per word with the word printed under
-- it.  image: (C,H,W) in [0,1] (the picture as seen, before normalisation) or a file name;
-- words: a string (split on spaces) or a list with one entry per row of alphas.
-- normalise="shared": every map is coloured on one scale, 0 .. the largest weight of the
-- caption, so a sharp map looks sharp and a flat one flat; "each": every map stretched to
-- its own min..max (glimpse.image.overlay's own normalisation).  ncol: panels per row
-- (a long caption wraps onto more rows instead of making one very wide picture).
function Captioner:overlays(img, alphas, words, path, opts)
  opts = opts or {}
  local image, viz = glimpse.image, glimpse.viz
  if type(img) == "string" then img = image.load(img) end
  if not glimpse.is_tensor(img) or img:dim() ~= 3 then
    fail(2, "Captioner:overlays: image must be a (C,H,W) tensor or a file name, got %s",
         shape_str(img))
  end
  if type(words) == "string" then
    local list = {}
    for w in words:gmatch("%S+") do list[#list + 1] = w end
    words = list
  end
  if type(words) ~= "table" then fail(2, "Captioner:overlays: words must be a string or a list") end
  if glimpse.is_tensor(alphas) and alphas:dim() == 2 and alphas.shape[1] == 0 then alphas = {} end
  if type(alphas) == "table" and #alphas > 0 then alphas = glimpse.tensor(alphas) end
  local T = glimpse.is_tensor(alphas) and alphas.shape[1] or 0
  if glimpse.is_tensor(alphas) and alphas:dim() ~= 2 then
    fail(2, "Captioner:overlays: alphas must be (T,L), got %s", shape_str(alphas))
  end
  if T ~= #words then
    fail(2, "Captioner:overlays: %d words but %d attention rows", #words, T)
  end
  if type(path) ~= "string" then fail(2, "Captioner:overlays: path must be a string") end
  local norm = opts.normalise or "shared"
  if norm ~= "shared" and norm ~= "each" then
    fail(2, "Captioner:overlays: opts.normalise must be \"shared\" or \"each\", got %s",
         tostring(norm))
  end
  local H, W = img.shape[2], img.shape[3]
  local gh, gw = self:grid_size(H, W)
  if T > 0 and gh * gw ~= alphas.shape[2] then
    fail(2, "Captioner:overlays: alphas have %d columns, a %dx%d image gives a %dx%d grid",
         alphas.shape[2], H, W, gh or 0, gw or 0)
  end
  local scale = opts.scale or OVERLAY_SCALE
  local blend = opts.alpha or 0.6
  local cmap = opts.colormap or "jet"
  local rgb = img
  if img.shape[1] == 1 then rgb = glimpse.cat({img, img, img}, 1) end
  if img.shape[1] == 4 then rgb = img:narrow(1, 1, 3) end
  local big = image.resize(rgb, H * scale, W * scale, {filter = "nearest"})
  local label_h = viz.text_height(1) + 6
  local function labelled(pic, text)
    local strip = glimpse.ones(3, label_h, W * scale)
    local panel = glimpse.cat({pic, strip}, 2)
    local tw = viz.text_width(text, 1)
    local x = math.max(0, (W * scale - tw) // 2)
    return viz.draw_text(panel, text, x, H * scale + 3, {scale = 1})
  end
  local vmax = T > 0 and math.max(alphas:max():item(), 1e-12) or 1
  local panels = {labelled(big, opts.title or "image")}
  for t = 1, T do
    local heat = alphas[t]:reshape(gh, gw)
    local over
    if norm == "each" then
      over = image.overlay(big, heat, {alpha = blend, colormap = cmap})
    else
      local colour = image.heatmap(heat, {colormap = cmap, vmin = 0, vmax = vmax})   -- (3,gh,gw)
      colour = image.resize(colour, H * scale, W * scale, {filter = "bilinear"})
      over = big * (1 - blend) + colour * blend
    end
    panels[#panels + 1] = labelled(over, words[t])
  end
  local ncol = opts.ncol or #panels
  if math.type(ncol) ~= "integer" or ncol < 1 then
    fail(2, "Captioner:overlays: opts.ncol must be a positive integer, got %s", tostring(opts.ncol))
  end
  local strip = image.grid(panels, {ncol = math.min(ncol, #panels), padding = 2, pad_value = 1})
  image.save(path, strip)
  return path
end

-- ---------------------------------------------------------------------------------------
-- checkpoints

--- cap:save(path) -> path.  One safetensors file: the state_dict, and in the metadata the
-- configuration and the vocabulary as JSON (so Captioner.load needs nothing else) and the
-- REINFORCE baseline.  The write is atomic (glimpse.save).
function Captioner:save(path)
  if type(path) ~= "string" then fail(2, "Captioner:save: path must be a string, got %s", type(path)) end
  local util = json()
  local meta = {format = FORMAT, version = FORMAT_VERSION,
                config = util.json_encode(self.config),
                vocab = util.json_encode(self.vocab:totable())}
  if self.baseline.value then meta.baseline = string.format("%.17g", self.baseline.value) end
  local ok, err = pcall(glimpse.save, path, self:state_dict(), meta)
  if not ok then fail(2, "Captioner:save: %s", tostring(err):gsub("^[^:]*:%d+: ", "")) end
  return path
end

-- JSON numbers come back as floats: integral ones become integers again (sizes, channels)
local function integers(v)
  if type(v) == "number" then return math.tointeger(v) or v end
  if type(v) ~= "table" then return v end
  for k, x in pairs(v) do v[k] = integers(x) end
  return v
end

-- an error (at level) unless the vocabularies mine and theirs (word lists) are the same
local function same_vocab(mine, theirs, fname, path, level)
  for k = 1, math.max(#mine, #theirs) do
    if mine[k] ~= theirs[k] then
      fail(level + 1, "%s: %s was trained with another vocabulary (word %d: %s, here %s)",
           fname, path, k, tostring(theirs[k]), tostring(mine[k]))
    end
  end
end

--- Captioner.load(path [, {vocab=}]) -> captioner (in evaluation mode) from a file cap:save
-- wrote.  vocab: the vocabulary of the data it will see (a datasets/vocab.lua vocabulary); an
-- error unless the saved one is the same (word ids would mean other words).
function M.load(path, opts)
  if type(path) ~= "string" then fail(2, "Captioner.load: path must be a string, got %s", type(path)) end
  if opts ~= nil and type(opts) ~= "table" then
    fail(2, "Captioner.load: opts must be a table, got %s", type(opts))
  end
  local ok, sd, meta = pcall(glimpse.load, path)
  if not ok then fail(2, "Captioner.load: %s", tostring(sd):gsub("^[^:]*:%d+: ", "")) end
  if meta.format ~= FORMAT or not meta.config or not meta.vocab then
    fail(2, "Captioner.load: %s is not a captioner checkpoint (no %s metadata)", path, FORMAT)
  end
  local util = json()
  local cfg = integers(util.json_decode(meta.config))
  local itos = util.json_decode(meta.vocab)
  local o = {}
  for k, v in pairs(cfg) do o[k] = v end
  o.vocab = Vocab.from_list(itos)
  if opts and opts.vocab then same_vocab(opts.vocab:totable(), itos, "Captioner.load", path, 2) end
  local spec = {}
  for k, v in pairs(cfg.encoder) do spec[k] = v end
  spec.init = false                                             -- the weights come next
  o.encoder = spec
  if o.image == require("cjson").null then o.image = nil end
  local cap = Captioner(o)
  local lok, err = pcall(cap.load_state_dict, cap, sd)
  if not lok then fail(2, "Captioner.load: %s: %s", path, tostring(err):gsub("^[^:]*:%d+: ", "")) end
  if meta.baseline then cap.baseline.value = tonumber(meta.baseline) end
  cap:evaluate()
  return cap
end
Captioner.load = M.load

--- cap:load_weights(path) -> cap: the weights of a saved captioner (Captioner.load's file),
-- e.g. a soft model to start hard attention from.  The sizes and the vocabulary must match.
function Captioner:load_weights(path)
  local src = M.load(path)
  same_vocab(self.vocab:totable(), src.vocab:totable(), "Captioner:load_weights", path, 2)
  local ok, err = pcall(self.load_state_dict, self, src:state_dict())
  if not ok then
    fail(2, "Captioner:load_weights: %s does not fit this model: %s", path,
         tostring(err):gsub("^[^:]*:%d+: ", ""))
  end
  return self
end

-- ---------------------------------------------------------------------------------------
-- shipped models, by name

local function dir_of(path)
  return path:match("^(.*)/[^/]*$")
end

local function file_exists(path)
  local f = io.open(path, "rb")
  if f then f:close() end
  return f ~= nil
end

--- glimpse.captioner.model_dirs() -> the folders pretrained(name) looks in, in order: those
-- in $GLIMPSE_MODELS (':'-separated), then models/ beside the library's tree (the source
-- tree's models/, or $(PREFIX)/share/glimpse/models where `make install` puts them).
function M.model_dirs()
  local dirs = {}
  for d in (os.getenv("GLIMPSE_MODELS") or ""):gmatch("[^:]+") do dirs[#dirs + 1] = d end
  local src = debug.getinfo(1, "S").source
  local here = src:sub(1, 1) == "@" and dir_of(src:sub(2)) or ""
  local root = here:match("^(.*)/bindings/glimpse$") or here:match("^(.*)/bindings/glimpse/")
  if root then dirs[#dirs + 1] = root .. "/models" end
  local prefix = here:match("^(.*)/share/lua/[%d%.]+/glimpse")
  if prefix then dirs[#dirs + 1] = prefix .. "/share/glimpse/models" end
  return dirs
end

--- glimpse.captioner.available() -> the sorted names of the models pretrained() can load
-- (the NAME of every NAME.safetensors in model_dirs()).
function M.available()
  local names, seen = {}, {}
  for _, d in ipairs(M.model_dirs()) do
    local p = io.popen("ls -1 " .. require("glimpse.util").shell_quote(d) .. " 2>/dev/null")
    for f in p:lines() do
      local n = f:match("^(.+)%.safetensors$")
      if n and not seen[n] then
        seen[n] = true
        names[#names + 1] = n
      end
    end
    p:close()
  end
  table.sort(names)
  return names
end

--- glimpse.captioner.pretrained(name) -> captioner (in evaluation mode): a shipped model by
-- name ("scenes-soft", "scenes-hard"), read from NAME.safetensors in the first of
-- model_dirs() that has it.  An unknown name is an error listing the available ones.
function M.pretrained(name)
  if type(name) ~= "string" or not name:match("^[%w_%-%.]+$") then
    fail(2, "captioner.pretrained: name must be a model name such as \"scenes-soft\", got %s",
         type(name) == "string" and string.format("%q", name) or type(name))
  end
  local dirs = M.model_dirs()
  for _, d in ipairs(dirs) do
    local path = d .. "/" .. name .. ".safetensors"
    if file_exists(path) then
      local ok, cap = pcall(M.load, path)
      if not ok then fail(2, "captioner.pretrained: %s", tostring(cap):gsub("^[^:]*:%d+: ", "")) end
      return cap
    end
  end
  local avail = M.available()
  fail(2, "captioner.pretrained: no model named %q (looked in %s); available: %s", name,
       #dirs > 0 and table.concat(dirs, ", ") or "no models/ folder found",
       #avail > 0 and table.concat(avail, ", ") or "none")
end

--- cap:extra_repr()
function Captioner:extra_repr()
  local c = self.config
  return string.format("attention=%s, score=%s, vocab=%d, embed=%d, hidden=%d, att=%d, " ..
                       "feature=%d, ds=%g, gate=%s, deep_output=%s", c.attention, c.score,
                       self.vocab:size(), c.dim_embed, c.dim_hidden, c.dim_att, c.dim_feature,
                       c.doubly_stochastic, tostring(c.gate), tostring(c.deep_output))
end

return M
