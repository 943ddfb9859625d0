--- glimpse.nn.attention -- nn.Attention: every score and mode of glimpse.attention behind one
-- calling convention.
--
--   local att = nn.Attention{score = "additive", query = 128, key = 64, hidden = 64}
--   local state = att:precompute(keys, values, mask)     -- keys projected once per sequence
--   for t = 1, T do
--     local ctx, alpha
--     ctx, alpha, state = att(h, keys, values, mask, state)   -- or att(h, nil, nil, nil, state)
--   end
--
-- `state` is a table that carries what the next step needs: the per-sequence cache (projected
-- keys), keys/values/mask, the step t (local-m), the previous alignment (location-aware), the
-- coverage vector, and for hard attention the per-step log-probabilities and entropies of the
-- samples.  Passing no state (or new keys) starts a new sequence.
local glimpse = require "glimpse"
local check = require "glimpse.check"
local options = require "glimpse.options"
local att = require "glimpse.attention"
local capture = require "glimpse.attention.capture"
local base = require "glimpse.nn.module"
local Linear = require("glimpse.nn.linear").Linear

local Module, uniform = base.Module, base.uniform

local function linear(din, dout, bias)
  return Linear(din, dout, {bias = bias})
end

local M = {}

-- ---------------------------------------------------------------------------------------
-- the parameters of a score registered with attention.register_score: a child module, so
-- they sit in state_dict as attention.scorer.<name>

local Score = Module:extend("Score")

function Score:init(name, p, names)
  rawset(self, "score_name", name)
  rawset(self, "names", names)
  for _, n in ipairs(names) do self:register_parameter(n, p[n]) end
end

function Score:extra_repr()
  local parts = {}
  for _, n in ipairs(self.names) do
    parts[#parts + 1] = n .. " " .. check.shape(self[n])
  end
  return self.score_name .. (#parts > 0 and ": " .. table.concat(parts, ", ") or "")
end

-- ---------------------------------------------------------------------------------------
-- nn.Attention

local Attention = Module:extend("Attention")
M.Attention = Attention

Attention.options = options.declare("nn.Attention", {
  {"score", "string", "additive", choices = att.SCORES, help = "the score function"},
  {"mode", "string", "soft", choices = att.MODES, help = "where and how it looks"},
  {"query", "int", nil, range = {1}, required = true, help = "query width Dq"},
  {"key", "int", nil, range = {1}, help = "key width Dk (default: query)"},
  {"hidden", "int", nil, range = {1}, help = "hidden width H of the score (default: key)"},
  {"window", "number", 10, range = {0}, help = "local-m/-p: the window's half-width D " ..
                                             "(sigma = D/2)"},
  {"temperature", "number", 1, range = {0}, help = "divides the scores (< 1 sharpens)"},
  {"normaliser", "string", "softmax", choices = {"softmax", "sigmoid"},
   help = "softmax, or sigmoid (Chorowski et al.'s smoothing)"},
  {"coverage", "boolean", false, help = "additive/concat: add w_c * coverage inside the score"},
  {"max_len", "int", 100, range = {1}, help = "location score: the most positions"},
  {"kernel", "int", nil, range = {1},
   help = "odd filter width: conv score (default 5), location mode (default 7)"},
  {"filters", "int", 8, range = {1}, help = "location mode: 1-D filters over the last alignment"},
  {"project", "boolean", false, help = "cosine: project the query even when Dq == Dk"},
  {"beta", "number", nil, help = "cosine: a fixed key strength (nil: learned, " ..
                                 "softplus(w^T q + b))"},
  {"soft_prob", "number", 0, range = {0, 1},
   help = "hard mode: probability of the expected context for a sequence"},
  {"hard_eval", "string", "argmax", choices = {"argmax", "sample", "soft", "region"},
   help = "hard/monotonic modes in evaluate(): argmax, sample, soft or region"},
  {"region", "int", 3, range = {1}, help = "hard_eval = region: the window's width (odd)"},
  {"estimator", "string", "reinforce", choices = {"reinforce", "gumbel"},
   help = "hard mode's gradient: REINFORCE terms, or straight-through Gumbel-softmax"},
  {"tau", "number", 1, range = {0}, help = "gumbel estimator: the temperature"},
  {"monotonic_r", "number", -1, help = "monotonic mode: r's start value in sigmoid(e + r)"},
  {"noise", "number", 1, range = {0}, help = "monotonic mode: std of the noise on the " ..
                                          "energies in training"},
})

--- nn.Attention{score=, query=Dq, key=Dk, hidden=H, mode="soft", ...} -> module
-- score: one of attention.SCORES (a name given to attention.register_score too); mode: "soft" (global), "hard" (sampled, REINFORCE or
-- Gumbel), "local-m", "local-p" (Gaussian window of half-width `window`), "location"
-- (location-aware, Chorowski et al.; additive/concat only), "monotonic" (Raffel et al. 2017:
-- the expected alignment with noisy energies in training, hard monotonic choices in
-- evaluate()).  nn.Attention.options lists every option with its default (`?nn.Attention`).
-- Forward: ctx (B,Dv), alpha (B,L), state = att(query (B,Dq), keys (B,L,Dk), values
-- (B,L,Dv) or nil (= keys), mask (B,L) or nil, state or nil).
function Attention:init(opts)
  local cls = "nn.Attention"
  if type(opts) ~= "table" then
    check.fail(3, "%s: expected an options table {score=, query=, key=, ...}", cls)
  end
  local o = Attention.options:check(opts, 3)
  self.score, self.mode = o.score, o.mode
  local dq = o.query
  local dk = o.key or dq
  local dh = o.hidden or dk
  self.query_size, self.key_size, self.hidden_size = dq, dk, dh
  self.window = o.window
  self.temperature = o.temperature
  self.normaliser = o.normaliser
  self.soft_prob = o.soft_prob
  self.hard_eval = o.hard_eval
  self.region = o.region
  self.estimator = o.estimator
  self.tau = o.tau
  self.use_coverage = o.coverage
  local s = self.score
  if (s == "dot" or s == "scaled_dot") and dq ~= dk then
    check.fail(3, "%s: the %s score needs query == key sizes, got %d and %d (use general)",
               cls, s, dq, dk)
  end
  if self.mode == "monotonic" and self.use_coverage then
    check.fail(3, "%s: monotonic mode does not take coverage", cls)
  end
  if (self.mode == "location" or self.use_coverage) and s ~= "additive" and s ~= "concat" then
    check.fail(3, "%s: location-aware mode and coverage need the additive or concat score", cls)
  end
  local bh = 1 / math.sqrt(dh)
  if s == "general" then
    self.proj = linear(dk, dq, false)                 -- W (Dq,Dk): e = q^T W k
  elseif s == "additive" then
    self.query_proj = linear(dq, dh, true)            -- W q + b
    self.key_proj = linear(dk, dh, false)             -- U k
    self.v = glimpse.zeros(dh):requires_grad()        -- v = 0: uniform attention at start
  elseif s == "concat" then
    self.proj = linear(dq + dk, dh, false)            -- W [q; k]
    self.v = uniform({dh}, bh)
  elseif s == "location" then
    self.max_len = o.max_len
    self.proj = linear(dq, self.max_len, true)        -- a = softmax(W q)
  elseif s == "conv" then                            -- Allamanis et al. 2016
    local R = o.kernel or 5
    if R % 2 == 0 then
      check.fail(3, "%s: the conv score's kernel must be a positive odd integer, got %d", cls, R)
    end
    self.conv_width = R
    self.conv1 = linear(R * dk, dh, true)              -- F1, b1: H filters over the keys
    self.gate = linear(dq, dh, false)                  -- Wq: the query's gate on the features
    self.conv2 = linear(R * dh, 1, false)              -- F2: one score per position
  elseif s == "cosine" then
    if dq ~= dk or o.project then self.query_proj = linear(dq, dk, false) end
    if o.beta ~= nil then
      self.beta = o.beta
    else
      self.beta_proj = linear(dq, 1, true)            -- beta = softplus(w^T q + b)
      glimpse.no_grad(function() self.beta_proj.bias:fill_(5) end)
    end
  elseif att.is_registered_score(s) then              -- a score of one's own
    local ok, p, names = pcall(att.score_parameters, s, dq, dk, dh)
    if not ok then
      check.fail(3, "%s: %s", cls, (check.strip(p):gsub("^attention%.score_parameters: ", "")))
    end
    self.scorer = Score(s, p, names)
  end
  if self.mode == "monotonic" then
    -- p = sigmoid(e + r + noise): r < 0 starts with small stopping probabilities (Raffel
    -- et al. use r = -4 with long training; -1 suits short budgets); noise (std) in training
    self.monotonic_r = glimpse.full({1}, o.monotonic_r):requires_grad()
    self.noise = o.noise
  end
  if self.mode == "local-p" then
    self.pos_proj = linear(dq, dh, false)             -- p_t = S sigmoid(v_p^T tanh(W_p q))
    self.pos_v = uniform({dh}, bh)
  elseif self.mode == "location" then
    self.filters = o.filters
    self.kernel = o.kernel or 7
    if self.kernel % 2 == 0 then check.fail(3, "%s: kernel must be odd", cls) end
    self.location_filters = uniform({self.filters, self.kernel}, 1 / math.sqrt(self.kernel))
    self.location_proj = linear(self.filters, dh, false)
  end
  if self.use_coverage then self.coverage_w = uniform({dh}, bh) end
end

-- The score's parameters in glimpse.attention's naming.
function Attention:score_params()
  local s = self.score
  if s == "general" then return {W = self.proj.weight}
  elseif s == "additive" then
    return {W = self.query_proj.weight, b = self.query_proj.bias, U = self.key_proj.weight,
            v = self.v}
  elseif s == "concat" then return {W = self.proj.weight, v = self.v}
  elseif s == "location" then return {W = self.proj.weight, b = self.proj.bias}
  elseif s == "conv" then
    return {F1 = self.conv1.weight, b1 = self.conv1.bias, Wq = self.gate.weight,
            F2 = self.conv2.weight}
  elseif s == "cosine" then
    return {W = self.query_proj and self.query_proj.weight, beta = self.beta,
            Wb = self.beta_proj and self.beta_proj.weight,
            bb = self.beta_proj and self.beta_proj.bias}
  elseif self.scorer then
    local p = {}
    for _, n in ipairs(self.scorer.names) do p[n] = self.scorer[n] end
    return p
  end
  return {}
end

--- att:precompute(keys (B,L,Dk), values or nil, mask or nil) -> state for a new sequence
-- (the keys are projected here, once).
function Attention:precompute(keys, values, mask)
  if not glimpse.is_tensor(keys) or keys:dim() ~= 3 then
    check.fail(2, "Attention:precompute: keys must be a (B,L,Dk) tensor, got %s",
               check.shape(keys))
  end
  if keys.shape[3] ~= self.key_size then
    check.fail(2, "Attention:precompute: keys have width %d, the module was built for %d",
               keys.shape[3], self.key_size)
  end
  if mask ~= nil and not glimpse.is_tensor(mask) then mask = glimpse.tensor(mask) end
  if capture.active then capture.new_sequence(self) end
  return {cache = att.precompute(self.score, self:score_params(), keys), keys = keys,
          values = values or keys, mask = mask, t = 0, logps = {}, entropies = {}}
end

function Attention:forward(q, keys, values, mask, state)
  if keys == nil and state and state.keys then
    keys, values, mask = state.keys, values or state.values, mask or state.mask
  end
  if not glimpse.is_tensor(q) or q:dim() ~= 2 or q.shape[2] ~= self.query_size then
    check.fail(2, "Attention: query must be (B,%d), got %s", self.query_size, check.shape(q))
  end
  if not state or state.keys ~= keys or not state.cache then
    state = self:precompute(keys, values, mask)
  end
  values = values or state.values
  if mask ~= nil and not glimpse.is_tensor(mask) then mask = glimpse.tensor(mask) end
  local B, L = keys.shape[1], keys.shape[2]
  state.t = state.t + 1
  local o = {temperature = self.temperature, normaliser = self.normaliser}
  local m = mask
  local mode = self.mode
  if mode == "local-m" or mode == "local-p" then
    local pos = state.t                                   -- local-m: p_t = t
    if mode == "local-p" then
      pos = att.predict_position(q, self.pos_proj.weight, self.pos_v, att.lengths(mask, B, L))
    end
    o.prior, m = att.local_prior(pos, B, L, self.window, mask)
    state.position = pos
  end
  local extra
  if mode == "location" then
    local prev = state.prev_alpha or glimpse.zeros(B, L)
    extra = glimpse.linear(att.location_features(prev, self.location_filters),
                           self.location_proj.weight)
  end
  if self.use_coverage then
    local cov = state.coverage or glimpse.zeros(B, L)
    local term = cov:reshape(B, L, 1) * self.coverage_w
    extra = extra and extra + term or term
  end
  o.extra = extra
  if mode == "monotonic" then return self:monotonic_step(q, values, mask, state) end
  local ctx, alpha = att.step(self.score, self:score_params(), state.cache, q, values, m, o)
  local idx
  if mode == "hard" then ctx, idx = self:hard_context(ctx, alpha, values, state) end
  state.read = idx                   -- hard mode: the cell this step read (nil: the expectation)
  state.prev_alpha = alpha
  state.coverage = state.coverage and state.coverage + alpha or alpha
  if capture.active then self:_capture(alpha, idx, state) end
  return ctx, alpha, state
end

-- attention.capture's records of one step: alpha (B,L) (local modes: over every source
-- position, 0 outside the window), and in hard mode "sample", the cell read as a one-hot
-- (all zeros where the step read the expected context)
function Attention:_capture(alpha, idx, state)
  local info = {grid = state.grid, extra = state.extra}
  capture.record_step(self, alpha, nil, info)
  if self.mode ~= "hard" then return end
  local B, L = alpha.shape[1], alpha.shape[2]
  capture.record_step(self, glimpse.no_grad(function()
    local z = glimpse.zeros(B, L)
    if not idx then return z end
    z = z:scatter_add(2, idx, glimpse.ones(B, 1))
    return state.soft_rows and z * (1 - state.soft_rows) or z
  end), "sample", info)
end

-- monotonic mode (Raffel et al. 2017): training (and hard_eval = "soft") uses the expected
-- alignment with noisy energies; evaluation makes the hard monotonic choice.  The state keeps
-- the previous alignment (B,L), starting as a one-hot at position 1, and the hard position.
function Attention:monotonic_step(q, values, mask, state)
  local B, L = state.keys.shape[1], state.keys.shape[2]
  local e = att.scores(self.score, self:score_params(), state.cache, q) + self.monotonic_r
  local alpha
  if self.training or self.hard_eval == "soft" then
    if self.training and self.noise > 0 then e = e + glimpse.randn(B, L) * self.noise end
    local prev = state.mono_prev
    if not prev then                                      -- alpha_0 = one-hot at 1
      prev = L > 1 and glimpse.cat({glimpse.ones(B, 1), glimpse.zeros(B, L - 1)}, 2)
             or glimpse.ones(B, 1)
    end
    alpha = att.monotonic(e, prev, mask)
    state.mono_prev = alpha
  else
    alpha, state.mono_pos = att.monotonic_hard(e, state.mono_pos or glimpse.ones(B),
                                               att.lengths(mask, B, L))
  end
  state.prev_alpha = alpha
  state.coverage = state.coverage and state.coverage + alpha or alpha
  if capture.active then self:_capture(alpha, nil, state) end
  return att.context(alpha, values), alpha, state
end

-- hard mode: replace the expected context by a sampled annotation (training), keep the
-- sample's log-probability and the entropy for attention.reinforce_loss.  Returns the
-- context and the cell read, idx (B,1) (nil when it is the expected context).
function Attention:hard_context(soft_ctx, alpha, values, state)
  if not self.training then
    if self.hard_eval == "soft" then return soft_ctx end
    if self.hard_eval == "region" then
      local idx = att.region_argmax(alpha, {grid = state.grid, size = self.region, extra = state.extra})
      state.sample = idx
      return att.read(values, idx), idx
    end
    local ctx, idx = att.sample(alpha, values, {greedy = self.hard_eval == "argmax"})
    state.sample = idx
    return ctx, idx
  end
  if state.use_soft == nil then   -- one decision per sequence (Xu et al.: p = 0.5)
    state.use_soft = self.soft_prob > 0 and glimpse.rand(1):item() < self.soft_prob
  end
  if state.use_soft then return soft_ctx end
  -- state.soft_rows (B,1) of 0/1: the rows that read the expected context (a coin per row)
  local rows = state.soft_rows
  local function mixed(ctx) return rows and ctx + rows * (soft_ctx - ctx) or ctx end
  if self.estimator == "gumbel" then       -- straight-through: no REINFORCE terms
    local ctx, idx = att.gumbel_sample(alpha, values, self.tau)
    state.sample = idx
    return mixed(ctx), idx
  end
  local ctx, idx, logp, H = att.sample(alpha, values)
  state.sample = idx
  state.logps[state.t] = logp
  state.entropies[state.t] = H
  return mixed(ctx), idx
end

--- att:reinforce_terms(state, tgt_mask (B,T) or nil) -> logp (B), entropy (B)
-- Sums of the hard samples' log-probabilities and entropies over the (unpadded) steps of a
-- sequence; zeros when the sequence used the expected context.  Feed them to
-- glimpse.attention.reinforce_loss.
function Attention:reinforce_terms(state, tgt_mask)
  local B = state.keys.shape[1]
  local logp, H = glimpse.zeros(B), glimpse.zeros(B)
  if tgt_mask ~= nil and not glimpse.is_tensor(tgt_mask) then tgt_mask = glimpse.tensor(tgt_mask) end
  for t = 1, state.t do
    local lp, h = state.logps[t], state.entropies[t]
    if lp then
      if tgt_mask then
        local mt = tgt_mask:select(2, t)
        lp, h = lp * mt, h * mt
      end
      if state.soft_rows then                  -- rows that read the expected context: no terms
        local keep = 1 - state.soft_rows:reshape(B)
        lp, h = lp * keep, h * keep
      end
      logp, H = logp + lp, H + h
    end
  end
  return logp, H
end

function Attention:extra_repr()
  local s = string.format("score=%s, mode=%s, query=%d, key=%d, hidden=%d", self.score,
                          self.mode, self.query_size, self.key_size, self.hidden_size)
  if self.mode == "local-m" or self.mode == "local-p" then s = s .. ", window=" .. self.window end
  if self.normaliser ~= "softmax" then s = s .. ", normaliser=" .. self.normaliser end
  if self.temperature ~= 1 then s = s .. ", temperature=" .. self.temperature end
  if self.use_coverage then s = s .. ", coverage=true" end
  return s
end

return M
