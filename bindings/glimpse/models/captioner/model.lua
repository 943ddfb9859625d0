--- glimpse.models.captioner.model -- the Captioner class: its modules, the encoder's
-- annotation grid and the teacher-forced decoder (Xu et al. 2015, section 3):
--   a = encoder:grid(image)                     annotations a_1..a_L (B,L,D)
--   h_0 = tanh(f_init,h(mean_i a_i)), c_0 = tanh(f_init,c(mean_i a_i))         (sec. 3.1.2)
--   e_ti = f_att(a_i, h_{t-1}), alpha_t = softmax(e_t)                        (eq. 4, 5)
--   soft: z_t = beta_t sum_i alpha_ti a_i, beta_t = sigmoid(f_beta(h_{t-1}))  (eq. 13, 4.2.1)
--   hard: z_t = beta_t a_{s_t}, s_t ~ Multinoulli(alpha_t)                    (sec. 4.1)
--   i,f,o,g / c_t / h_t: an LSTM step on [E y_{t-1}; z_t]                     (eq. 1-3)
--   p(y_t) = softmax(L_o(E y_{t-1} + L_h h_t + L_z z_t))                       (eq. 7)
-- The class's other methods come from loss.lua, decode.lua (captions and overlays),
-- images.lua and checkpoint.lua, mixed in at the end of this file; init.lua makes the
-- public table (glimpse.captioner).
local glimpse = require "glimpse"
local nn = require "glimpse.nn"
local att = require "glimpse.attention"
local check = require "glimpse.check"
local encoders = require "glimpse.models.encoders"
local common = require "glimpse.models.common"
local copts = require "glimpse.models.captioner.options"

local M = {}

local Captioner = nn.Module:extend("Captioner")
M.Captioner = Captioner

-- hard_eval = "marginal" decodes through cap:_marginal_step, its attention reading the argmax
local function attention_rule(rule) return rule == "marginal" and "argmax" or rule end

-- the models.encoder(name, opts) spec that rebuilds an encoder module (for the checkpoint)
local function encoder_spec(enc)
  if enc.arch == "SmallCNN" then
    local bn, k = false, 3
    for _, m in ipairs(enc:modules()) do
      if m.__name == "BatchNorm2d" then bn = true end
    end
    for _, m in ipairs(enc:modules()) do
      if m.__name == "Conv2d" then k = m.weight.shape[3] break end
    end
    return {name = "small", in_channels = enc.in_channels, channels = enc.channels,
            batch_norm = bn, kernel_size = k}
  end
  return {name = enc.arch, classifier = enc:has_head()}
end

-- the encoder module and its spec from option 'encoder' (a module or models.encoder options)
local function make_encoder(e, level)
  if type(e.grid) == "function" then
    if type(e.grid_dim) ~= "number" or type(e.grid_size) ~= "function" then
      check.fail(level + 1, "Captioner: the encoder module needs grid_dim and grid_size(H, W) " ..
                            "(glimpse.models' encoders have them)")
    end
    return e, encoder_spec(e)
  end
  local name, opts = e.name or "small", {}
  for k, v in pairs(e) do if k ~= "name" then opts[k] = v end end
  if name ~= "small" and opts.classifier == nil then opts.classifier = false end
  local ok, enc = pcall(encoders.encoder, name, opts)
  if not ok then check.fail(level + 1, "Captioner: encoder: %s", check.strip(enc)) end
  return enc, encoder_spec(enc)
end

--- Captioner{vocab=, encoder=, attention="soft", score="additive", emb=64, hidden=256,
---           attn_hidden=128, ...} -> captioner
-- The options are glimpse.captioner.OPTIONS (`?Captioner` lists them; an unknown one is an
-- error naming the nearest).  vocab: a glimpse.data.Vocab or a word list.  encoder: a
-- module with :grid (glimpse.models' encoders) or models.encoder's options.  fine_tune =
-- false freezes the encoder (no tape; trainable_parameters leaves it out).  Hard attention:
-- soft_prob, entropy (lambda_e), reward_weight (lambda_r), samples (K decodings per
-- caption), baseline ("average" | "loo"), estimator ("reinforce" | "gumbel", at
-- temperature tau), mix ("sample": a coin per batch | "row": per caption | "expected":
-- both passes weighted by the coin's odds), soft_prob_end / entropy_end / anneal
-- (cap:set_progress), hard_eval (test time: "argmax" | "region" | "soft" | "sample" |
-- "marginal").  coords appends each cell's (x, y) in [-1,1]; global_feature adds W_g mean_i
-- a_i to the LSTM input and global_output L_g mean_i a_i to the deep output (through a
-- bottleneck of global_output_rank dimensions when > 0, pooled after a ReLU with
-- global_output_pool = "relu"; global_feature_rank and global_feature_pool the same for W_g);
-- whole_image
-- makes the mean annotation one more cell (the maps returned stay the grid's L columns).
-- unseen_feature adds W_u u_t to the LSTM input, u_t the mean of the annotations weighted by
-- the attention they have not had yet (W_u from 0, as W_g; unseen_feature_rank and
-- unseen_feature_pool as global_feature's; unseen_output: L_u u_t in the deep output, with
-- the coverage after step t); unseen_from = "reads" counts
-- as had the cells each step read (hard: the read cell's region_size window) instead.
-- length_aux > 0 adds a head on h_t trained to predict log(words left), see cap:loss.
-- length_penalty: GNMT's alpha for cap:caption.  image: what cap:prepare does to an image.
function Captioner:init(o)
  local c = copts.config(o, 3)
  local vocab = common.vocab("Captioner", c.vocab, "vocab", 3)
  local encoder, spec = make_encoder(c.encoder or {}, 3)
  local D = encoder.grid_dim + (c.coords and 2 or 0)
  c.vocab, c.encoder, c.dim_feature = nil, spec, D
  if (c.score == "dot" or c.score == "scaled_dot" or c.score == "cosine") and c.hidden ~= D then
    check.fail(3, "Captioner: the %s score needs hidden == the encoder's grid_dim (%d), got %d " ..
                  "(use additive or general)", c.score, D, c.hidden)
  end
  local V, E, H = vocab:size(), c.emb, c.hidden
  rawset(self, "config", c)
  rawset(self, "vocab", vocab)
  self.encoder = encoder
  self.embed = nn.Embedding(V, E)                               -- E
  self.init_h = nn.Linear(D, H)                                 -- f_init,h
  self.init_c = nn.Linear(D, H)                                 -- f_init,c
  self.attention = nn.Attention{score = c.score, mode = c.attention, query = H, key = D,
                                hidden = c.attn_hidden, soft_prob = c.soft_prob,
                                hard_eval = attention_rule(c.hard_eval), region = c.region_size,
                                estimator = c.estimator, tau = c.tau, coverage = c.coverage}
  if c.gate then self.gate = nn.Linear(H, 1) end                -- f_beta
  self.lstm = nn.LSTMCell(E + D, H)                             -- input [E y_{t-1}; z_t]
  if c.global_feature then                                      -- ... and W_g mean_i a_i
    -- W_g = 0 at first: the model starts as Xu et al.'s and takes the whole-image pathway
    -- only as far as it helps (with a random W_g, hard attention learnt to look nowhere)
    -- (with global_feature_rank r > 0: W_g = U P, U (4H,r) from 0, P (r,D) the detectors)
    local r = c.global_feature_rank
    if r > 0 then self.global_in_p = nn.Linear(D, r, {bias = c.global_feature_pool == "relu"}) end
    self.global_in = nn.Linear(r > 0 and r or D, 4 * H, {bias = false})
    glimpse.no_grad(function() self.global_in.weight:zero_() end)
  end
  if c.unseen_feature then                                      -- ... and W_u u_t, from 0
    local r = c.unseen_feature_rank                             -- (W_u = U P with rank r)
    if r > 0 then self.unseen_p = nn.Linear(D, r, {bias = c.unseen_feature_pool == "relu"}) end
    self.unseen_in = nn.Linear(r > 0 and r or D, 4 * H, {bias = false})
    glimpse.no_grad(function() self.unseen_in.weight:zero_() end)
  end
  if c.deep_output then
    self.out_h = nn.Linear(H, E)                                -- L_h
    self.out_z = nn.Linear(D, E)                                -- L_z
    self.out = nn.Linear(E, V)                                  -- L_o
    if c.global_output and c.global_output_rank > 0 then        -- L_g = U P, U from 0
      self.out_g_in = nn.Linear(D, c.global_output_rank, {bias = c.global_output_pool == "relu"})
      self.out_g = nn.Linear(c.global_output_rank, E, {bias = false})
      glimpse.no_grad(function() self.out_g.weight:zero_() end)
    elseif c.global_output then                                 -- L_g, from 0 as W_g
      self.out_g = nn.Linear(D, E, {bias = false})
      glimpse.no_grad(function() self.out_g.weight:zero_() end)
    end
    if c.unseen_output then                                     -- L_u u_t, from 0
      self.out_u = nn.Linear(c.unseen_feature_rank > 0 and c.unseen_feature_rank or D, E,
                             {bias = false})
      glimpse.no_grad(function() self.out_u.weight:zero_() end)
    end
  else
    self.out = nn.Linear(H, V)
  end
  if c.length_aux > 0 then self.length_head = nn.Linear(H, 1) end   -- log words left, from h_t
  rawset(self, "baseline", att.baseline(c.baseline_decay))
  rawset(self, "entropy_weight", c.entropy)
  if not c.fine_tune then self.encoder:evaluate() end
end

--- cap:train(mode) -- as Module:train, but a frozen encoder (fine_tune=false) stays in
--- evaluation mode.
function Captioner:train(mode)
  nn.Module.train(self, mode)
  if not self.config.fine_tune then self.encoder:evaluate() end
  return self
end

--- cap:trainable_parameters() -> the parameters to optimise (without the encoder's when it
--- is frozen).
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
--- training: soft_prob and the entropy weight move linearly from their start values to
--- soft_prob_end and entropy_end over the first `anneal` share, then stay there.
function Captioner:set_progress(done)
  check.number("Captioner:set_progress", "done", done, nil, nil, 2)
  local c = self.config
  local f = math.max(0, math.min(1, done / c.anneal))
  self.attention.soft_prob = c.soft_prob + (c.soft_prob_end - c.soft_prob) * f
  rawset(self, "entropy_weight", c.entropy + (c.entropy_end - c.entropy) * f)
end

--- cap:set_hard_eval(rule) -- what a hard-attention model reads at test time from now on:
--- "argmax" | "region" | "soft" | "sample" | "marginal" (see Captioner's hard_eval); kept in
--- the config (and so in a checkpoint saved afterwards).
function Captioner:set_hard_eval(rule)
  local known = false
  for _, r in ipairs(copts.HARD_EVAL) do known = known or r == rule end
  if not known then
    check.fail(2, "Captioner:set_hard_eval: rule must be one of %s, got %s",
               table.concat(copts.HARD_EVAL, ", "), check.value(rule))
  end
  self.config.hard_eval = rule
  self.attention.hard_eval = attention_rule(rule)
  self.attention.region = self.config.region_size or 3
end

--- cap:annotate(images (B,C,H,W)) -> a (B,L,D), h, w: the encoder's annotation grid (no
--- tape through a frozen encoder).
function Captioner:annotate(images)
  if not glimpse.is_tensor(images) or images:dim() ~= 4 then
    check.fail(2, "Captioner:annotate: images must be a (B,C,H,W) tensor, got %s",
               check.shape(images))
  end
  local grad = nil
  if not self.config.fine_tune then grad = false end
  local ok, a, h, w = pcall(self.encoder.grid, self.encoder, images, {grad = grad})
  if not ok then check.fail(2, "Captioner: %s", check.strip(a)) end
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
-- an error at `level` unless every id of the (B,T) captions lies in the vocabulary 1..V
function Captioner:_check_ids(ids, fname, level)
  local V = self.vocab:size()
  local mx, mn = ids:max():item(), ids:min():item()
  if mn < 1 or mx > V then
    check.fail(level, "%s: caption ids must lie in 1..%d (the vocabulary), got %g..%g", fname,
               V, mn, mx)
  end
end

function Captioner:_annotations(x, fname, level)
  if glimpse.is_tensor(x) and x:dim() == 4 then return (self:annotate(x)) end
  if glimpse.is_tensor(x) and x:dim() == 3 then
    if x.shape[3] ~= self.config.dim_feature then
      check.fail(level + 1, "%s: annotations %s must be (B,L,%d)", fname, check.shape(x),
                 self.config.dim_feature)
    end
    return x
  end
  check.fail(level + 1, "%s: argument #1 must be images (B,C,H,W) or annotations (B,L,%d), " ..
             "got %s", fname, self.config.dim_feature, check.shape(x))
end

-- h_0, c_0 from the mean annotation (sec. 3.1.2)
function Captioner:initial_state(a)
  local mean = a:mean(2)                                        -- (B,D)
  return self.init_h(mean):tanh(), self.init_c(mean):tanh()
end

-- global_feature: W_g v (B,4H), v = mean_i a_i, the LSTM input's share that is constant over
-- a caption (computed once; W_g = U P with global_feature_rank, and with global_feature_pool
-- "relu" U mean_i relu(P a_i + b)); nil without it
function Captioner:_global_input(a)
  local c = self.config
  if not c.global_feature then return nil end
  if c.global_feature_pool == "relu" then
    return self.global_in(self.global_in_p(a):relu():mean(2))
  end
  local v = a:mean(2)
  if self.global_in_p then v = self.global_in_p(v) end
  return self.global_in(v)
end

-- what unseen_feature weights, per cell of av (B,L',D): the annotations, or with
-- unseen_feature_pool "relu" the detectors relu(P a_i + b) (B,L',r)
function Captioner:_unseen_cells(av)
  if self.config.unseen_feature_pool == "relu" then return self.unseen_p(av):relu() end
  return av
end

-- u_t (B,D or r) = 1/L sum_i max(0, 1 - cov_i) x_i with x (B,L',.) cap:_unseen_cells' and cov
-- (B,L') the attention each cell has had (detached); P u_t with a rank and the mean pool
function Captioner:_unseen_vector(cells, cov)
  local B, L = cov.shape[1], cov.shape[2]
  local w = (1 - cov):clamp(0, 1):reshape(B, 1, L)
  local u = w:matmul(cells):reshape(B, cells.shape[3]) / L
  if self.unseen_p and self.config.unseen_feature_pool ~= "relu" then u = self.unseen_p(u) end
  return u
end

-- unseen_feature: W_u u_t (B,4H) for the coverage cov before step t; nil without it
function Captioner:_unseen_input(cells, cov)
  if not cov then return nil end
  return self.unseen_in(self:_unseen_vector(cells, cov))
end

-- unseen_output: go (B,E or nil, the global output) plus L_u u_t for the coverage cov after
-- step t's attention; go itself without it
function Captioner:_with_unseen_output(go, cells, cov)
  if not self.out_u then return go end
  local lu = self.out_u(self:_unseen_vector(cells, cov))
  return go and go + lu or lu
end

-- what step t adds to the coverage (detached, (B,L')): alpha_t, or with unseen_from =
-- "reads" the cells the step read: for a hard read the region_size x region_size window of
-- grid cells around the cell read (1 inside; a cell after the grid, whole_image's, alone),
-- for an expected context (a soft model, a soft batch or row) alpha_t
function Captioner:_coverage_step(alpha, st)
  local idx = st.read
  if self.config.unseen_from ~= "reads" or not idx then return alpha:detach() end
  return glimpse.no_grad(function()
    local B, L = alpha.shape[1], alpha.shape[2]
    local w = glimpse.zeros(B, L):scatter_add(2, idx, glimpse.ones(B, 1))
    local g, k = st.grid, self.config.region_size
    local cells = g[1] * g[2]
    if k > 1 then
      local grid = w:narrow(2, 1, cells):reshape(B, 1, g[1], g[2])
      local win = glimpse.max_pool2d(grid, k, 1, k // 2):reshape(B, cells)
      w = cells < L and glimpse.cat({win, w:narrow(2, cells + 1, L - cells)}, 2) or win
    end
    if st.soft_rows then w = w + st.soft_rows * (alpha - w) end
    return w
  end)
end

-- the coverage at the first step: zeros (B,L') with unseen_feature, else nil
function Captioner:_first_coverage(av)
  if not self.config.unseen_feature then return nil end
  return glimpse.zeros(av.shape[1], av.shape[2])
end

-- global_output: the mean annotation's share of the deep output, L_g v (B,E) (L_g = U P with
-- global_output_rank; with global_output_pool "relu", U mean_i relu(P a_i + b)); nil without it
function Captioner:_global_output(a)
  if not self.config.global_output then return nil end
  if self.config.global_output_pool == "relu" then
    return self.out_g(self.out_g_in(a):relu():mean(2))
  end
  local v = a:mean(2)
  if self.out_g_in then v = self.out_g_in(v) end
  return self.out_g(v)
end

-- the cells attention reads after the grid's: 1 with whole_image, else 0
function Captioner:_extra_cells() return self.config.whole_image and 1 or 0 end

-- what attention reads: a (B,L,D), and with whole_image their mean as one more cell (B,L+1,D)
function Captioner:_attendable(a)
  if not self.config.whole_image then return a end
  return glimpse.cat({a, a:mean(2, true)}, 2)
end

-- the nn.Attention state for a new image (av: cap:_attendable's cells), with the per-image
-- cache, the grid and the count of cells after it
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
  local E, D = self.config.emb, self.config.dim_feature
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

--- cap:forward(images (B,C,H,W) or annotations (B,L,D), captions_in (B,T))
---   -> logits (B,T,V), alphas (B,T,L), state
-- Teacher forcing: step t reads captions_in[:,t] (<start> w_1 .. w_{T-1}).  state: the
-- attention state (hard mode: the samples' log-probabilities), betas (B,T) when gated,
-- alphas (B,T,L[+1]) over every cell attention read.
function Captioner:forward(x, captions_in, opts)
  local fname = "Captioner:forward"
  local a = self:_annotations(x, fname, 2)
  captions_in = common.ids(captions_in, "captions_in", fname, 2)
  local B, T = captions_in.shape[1], captions_in.shape[2]
  if a.shape[1] ~= B then
    check.fail(2, "%s: %d images but %d captions", fname, a.shape[1], B)
  end
  self:_check_ids(captions_in, fname, 3)
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
  local cov = self:_first_coverage(av)
  local uc = cov and self:_unseen_cells(av)
  local uo = {}                                                -- L_u u_t (unseen_output)
  for t = 1, T do
    local z, alpha, beta
    local xt = xe:select(2, t)
    if cov then xt = xt + self:_unseen_input(uc, cov) end
    h, c, z, alpha, st, beta = self:_step(xt, h, c, av, st, Wz)
    if cov then cov = cov + self:_coverage_step(alpha, st) end
    if self.out_u then uo[t] = self:_with_unseen_output(nil, uc, cov) end
    hs[t], zs[t], alphas[t] = h, z, alpha
    if beta then betas[t] = beta:reshape(B) end
  end
  local go = self:_global_output(a)
  if go then go = go:reshape(B, 1, go.shape[2]) end
  if self.out_u then go = go and go + glimpse.stack(uo, 2) or glimpse.stack(uo, 2) end
  local hstack = glimpse.stack(hs, 2)
  local logits = self:_logits(ey, hstack, glimpse.stack(zs, 2), go)
  st.hs = hstack                                               -- (B,T,H): h_t (length_aux)
  st.betas = self.gate and glimpse.stack(betas, 2):detach() or nil
  st.alphas = glimpse.stack(alphas, 2)                         -- every cell's (the penalty's)
  local L = a.shape[2]
  return logits, av.shape[2] > L and st.alphas:narrow(3, 1, L) or st.alphas, st
end

--- cap:grid_size(H, W) -> h, w of the annotation grid for an H x W image
function Captioner:grid_size(H, W)
  return self.encoder:grid_size(H, W)
end

--- cap:extra_repr()
function Captioner:extra_repr()
  local c = self.config
  return string.format("attention=%s, score=%s, vocab=%d, emb=%d, hidden=%d, attn_hidden=%d, " ..
                       "feature=%d, ds=%g, gate=%s, deep_output=%s", c.attention, c.score,
                       self.vocab:size(), c.emb, c.hidden, c.attn_hidden, c.dim_feature,
                       c.doubly_stochastic, tostring(c.gate), tostring(c.deep_output))
end

-- the methods of the other files (none of them requires this one)
for _, methods in ipairs({require "glimpse.models.captioner.loss",
                          require "glimpse.models.captioner.images",
                          require "glimpse.models.captioner.decode",
                          require("glimpse.models.captioner.checkpoint").methods}) do
  for k, f in pairs(methods) do Captioner[k] = f end
end

return M
