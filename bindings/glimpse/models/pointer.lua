--- glimpse.models.pointer -- a pointer network (Vinyals et al. 2015) for the planar problems
-- of datasets/points.lua (sort, convex hull, TSP), as one nn.Module:
--
--   local ds = glimpse.data.points.make{task = "hull", n = 8, count = 100}
--   local model = glimpse.models.PointerNet{task = "hull", emb = 32, hidden = 32}
--   local loss, stats = model:loss(ds:collate({1, 2, 3}))
--   local seqs, extras = model:decode(ds:collate({1, 2}), {beam = 3})   -- positions, 1-based
--
-- The model (scripts/pointer.lua's): an LSTM encoder reads the embedded points, preceded by
-- a learned "end" slot (position 1 of the pointer's input, also the decoder's first input);
-- an LSTM decoder reads the previously chosen point's embedding; nn.Pointer turns the
-- decoder state into a distribution over the input positions (eq. 3: u_j = v^T tanh(W1 e_j +
-- W2 d_i), p(C_i | C_<i, P) = softmax(u)).  Positions already chosen are masked; the end
-- slot opens for sort and tsp only once every point is chosen, for hull after 3 points, so
-- greedy and beam decoding only ever produce valid outputs (the paper's constrained search).
-- glimpses = G > 0 refines the query G times with an additive attention over the encoder
-- states before pointing (Bello et al. 2016, "glimpse": q <- sum_j softmax(u^g)_j e_j).
local glimpse = require "glimpse"
local nn = require "glimpse.nn"
local C = require "glimpse.models.common"
local check = require "glimpse.check"
local options = require "glimpse.options"

local M = {}

local CLS = "PointerNet"
local FORMAT = "glimpse.pointer"
local END = 1                      -- pointer position 1: the end slot (and the go input)

local OPTIONS = options.declare(CLS, {
  {"task", "string", "sort", choices = {"sort", "hull", "tsp"}, help = "the problem (when the end slot opens)"},
  {"emb", "int", 128, range = {1}, help = "embedding size of a point"},
  {"hidden", "int", 128, range = {1}, help = "LSTM size"},
  {"attn_hidden", "int", nil, range = {1}, help = "pointer (and glimpse) hidden size (default: hidden)"},
  {"glimpses", "int", 0, range = {0}, help = "glimpses over the inputs before pointing (Bello et al.)"},
  {"init", "string", "default", choices = {"default", "paper"}, help = "paper: every parameter uniform in [-0.08, 0.08]"},
  {"logit_clip", "number", 0, range = {0}, finite = true, help = "C > 0: scores become C tanh(u) (0: off)"},
})

local PointerNet = nn.Module:extend("PointerNet")
PointerNet.options = OPTIONS
local DECODE = C.decode_spec("PointerNet:decode", {"beam", "max_len"})
M.PointerNet = PointerNet

--- PointerNet{task="sort", emb=128, hidden=128, attn_hidden=hidden, glimpses=0,
---            init="default", logit_clip=0} -> model
-- task: "sort" | "hull" | "tsp" (when the end slot opens).  init="paper": every parameter
-- uniform in [-0.08, 0.08] (the paper's initialisation); "default": each module's own.
-- logit_clip = C > 0: the pointer's scores become C tanh(u) (Bello et al. 2016: C = 10).
function PointerNet:init(o)
  local c = OPTIONS:check(o, 3)
  c.attn_hidden = c.attn_hidden or c.hidden
  rawset(self, "config", c)
  rawset(self, "E", c.emb)
  rawset(self, "H", c.hidden)
  self.embed = nn.Linear(2, c.emb)                          -- a point (x, y) -> its input
  local go = glimpse.empty(c.emb)
  go:uniform_(-0.1, 0.1)
  self.go = go:requires_grad()                              -- the end slot / first input
  self.encoder = nn.LSTM(c.emb, c.hidden)
  self.decoder = nn.LSTMCell(c.emb, c.hidden)
  self.pointer = nn.Pointer{query = c.hidden, key = c.hidden, hidden = c.attn_hidden,
                            logit_clip = c.logit_clip}
  if c.glimpses > 0 then
    self.glimpse = nn.Attention{score = "additive", query = c.hidden, key = c.hidden,
                                hidden = c.attn_hidden}
  end
  if c.init == "paper" then
    glimpse.no_grad(function()
      for _, p in ipairs(self:parameters()) do p:uniform_(-0.08, 0.08) end
    end)
  end
end

local function check_batch(b, fname, need_target, level)
  if type(b) ~= "table" then
    C.fail(level + 1, "%s: batch must be a table {points=, point_mask=, lengths=, ...} " ..
                      "(ds:collate), got %s", fname, type(b))
  end
  if not glimpse.is_tensor(b.points) or b.points:dim() ~= 3 or b.points.shape[3] ~= 2 then
    C.fail(level + 1, "%s: batch.points must be a (B,L,2) tensor, got %s", fname, check.shape(b.points))
  end
  local B = b.points.shape[1]
  if type(b.lengths) ~= "table" or #b.lengths ~= B then
    C.fail(level + 1, "%s: batch.lengths must list %d point counts", fname, B)
  end
  if not glimpse.is_tensor(b.point_mask) then
    C.fail(level + 1, "%s: batch.point_mask must be a (B,L) tensor", fname)
  end
  if need_target then
    if not glimpse.is_tensor(b.targets) or b.targets:dim() ~= 2 or b.targets.shape[1] ~= B
       or type(b.target_lengths) ~= "table" then
      C.fail(level + 1, "%s: batch.targets must be a (B,T) tensor with target_lengths, got %s",
             fname, check.shape(b.targets))
    end
  end
end

--- model:inputs(points (B,L,2)) -> X (B,L+1,E): the end slot, then the embedded points
function PointerNet:inputs(pts)
  local B = pts.shape[1]
  local go = self.go:reshape(1, 1, self.E) * glimpse.ones(B, 1, 1)
  return glimpse.cat({go, self.embed(pts)}, 2)
end

--- model:encode(X, point_mask (B,L), lengths {B}) -> states (B,L+1,H), final state, mask (B,L+1)
function PointerNet:encode(X, point_mask, lengths)
  local B = X.shape[1]
  local lens = {}
  for b = 1, B do lens[b] = lengths[b] + 1 end
  local enc, st = self.encoder(X, lens)
  local mask = glimpse.cat({glimpse.ones(B, 1), point_mask}, 2)
  return enc, st, mask
end

-- (B) counts of chosen points and lengths -> (B,L+1) 0/1 with a 1 on the end slot where it
-- may not be chosen yet: sort/tsp until every point is chosen, hull before 3 points.
function PointerNet:_end_block(count, lengths, L1)
  local B = #lengths
  local col = {}
  for b = 1, B do
    local blocked
    if self.config.task == "hull" then blocked = count[b] < math.min(3, lengths[b])
    else blocked = count[b] < lengths[b] end
    col[b] = blocked and 1 or 0
  end
  local first = glimpse.zeros(1, L1)
  first[1][1] = 1
  return glimpse.tensor(col):reshape(B, 1) * first
end

-- the pointer's query: the decoder state, refined by the glimpses (Bello et al. 2016)
function PointerNet:_query(h, blocked, gstate)
  if not self.glimpse then return h end
  local valid = (1 - blocked) * gstate.mask
  local q = h
  for _ = 1, self.config.glimpses do q = self.glimpse(q, nil, nil, valid, gstate) end
  return q
end

--- model:loss(batch) -> loss (scalar: mean cross-entropy per output step, the end step
--- included), stats {nll=, token_accuracy= (argmax = target per step), steps= (mean output
--- steps per example)}.  batch: points.make's ds:collate or points.batch.
function PointerNet:loss(b)
  check_batch(b, "PointerNet:loss", true, 2)
  local B, L = b.points.shape[1], b.points.shape[2]
  local L1 = L + 1
  local X = self:inputs(b.points)
  local enc, st, mask = self:encode(X, b.point_mask, b.lengths)
  local tg = b.targets:totable()
  local T1 = b.targets.shape[2] + 1
  -- y_out: the positions to point at (+1 for the end slot), then END; y_in: what the
  -- decoder reads at each step (the go vector, then the previous choice)
  local y_out, y_in, steps = {}, {}, 0
  for i = 1, B do
    local n = b.target_lengths[i]
    local yo, yi = {}, {END}
    for t = 1, T1 do
      if t <= n then yo[t] = math.tointeger(tg[i][t]) + 1
      elseif t == n + 1 then yo[t] = END
      else yo[t] = 0 end
      if t > 1 then yi[t] = yo[t - 1] > 0 and yo[t - 1] or END end
    end
    y_out[i], y_in[i] = yo, yi
    steps = steps + n + 1
  end
  local yin = glimpse.tensor(y_in)
  local dec_in = X:gather(2, yin:reshape(B, T1, 1):expand(B, T1, self.E))
  local h, c = st.h:select(1, 1), st.c:select(1, 1)
  local pstate = self.pointer:precompute(enc, mask)
  local gstate = self.glimpse and self.glimpse:precompute(enc, nil, mask)
  local logits, chosen = {}, glimpse.zeros(B, L1)
  for t = 1, T1 do
    if t > 1 then chosen = nn.Pointer.mark(chosen, yin:narrow(2, t, 1), B, L1) end
    local count = {}
    for i = 1, B do count[i] = math.min(t - 1, b.target_lengths[i]) end
    local blocked = (chosen + self:_end_block(count, b.lengths, L1)):clamp(0, 1)
    h, c = self.decoder(dec_in:select(2, t), h, c)
    logits[t] = self.pointer(self:_query(h, blocked, gstate), nil, nil, blocked, pstate)
  end
  local lg = glimpse.stack(logits, 2)                       -- (B,T1,L1)
  local yout = glimpse.tensor(y_out)
  local loss = glimpse.cross_entropy(lg, yout, {ignore_index = 0})
  local stats = {nll = loss:item(), steps = steps / B}
  glimpse.no_grad(function()
    local right = lg:argmax(3):eq(yout) * yout:gt(0)
    stats.token_accuracy = right:sum():item() / steps
  end)
  return loss, stats
end

-- the decoding state: one row per example, as glimpse.decode needs
function PointerNet:_decode_state(b)
  local X = self:inputs(b.points)
  local enc, st, mask = self:encode(X, b.point_mask, b.lengths)
  local B = X.shape[1]
  return {h = st.h:select(1, 1), c = st.c:select(1, 1), X = X,
          ptr = self.pointer:precompute(enc, mask), chosen = glimpse.zeros(B, X.shape[2]),
          lengths = glimpse.tensor(b.lengths),
          gl = self.glimpse and self.glimpse:precompute(enc, nil, mask) or nil}
end

-- tokens (N) previous positions -> log p (N,L+1) with -inf where invalid, new state, probs
function PointerNet:_decode_step(tokens, st, t)
  local N, L1 = st.X.shape[1], st.X.shape[2]
  local x = st.X:gather(2, tokens:reshape(N, 1, 1):expand(N, 1, self.E)):reshape(N, self.E)
  local h, c = self.decoder(x, st.h, st.c)
  local chosen = st.chosen
  if t > 1 then chosen = nn.Pointer.mark(chosen, tokens:reshape(N, 1), N, L1) end
  local count = chosen:sum(2):totable()
  local lens = st.lengths:totable()
  local blocked = (chosen + self:_end_block(count, lens, L1)):clamp(0, 1)
  local logits, probs = self.pointer(self:_query(h, blocked, st.gl), nil, nil, blocked, st.ptr)
  local valid = (1 - blocked) * st.ptr.mask
  local lp = glimpse.where(valid, glimpse.log_softmax(logits, 2), glimpse.full({N, L1}, -math.huge))
  return lp, {h = h, c = c, X = st.X, ptr = st.ptr, chosen = chosen, lengths = st.lengths,
              gl = st.gl}, probs
end

--- model:decode(batch, {beam=1, max_len=L+1}) -> outputs, extras
-- outputs[b]: the chosen points of row b in order (1-based positions into its points, the
-- end slot removed); extras: {alignments = {b -> pointer distributions per step, each a list
-- of L+1 numbers (column 1: the end slot), the end step included}, scores = {b -> log-prob},
-- finished = {b -> boolean}}.  beam=1: greedy (glimpse.decode.greedy); beam > 1: beam
-- search, both limited to valid outputs.  Evaluation mode, no tape.
function PointerNet:decode(b, opts)
  check_batch(b, "PointerNet:decode", false, 2)
  local o = DECODE:check(opts, 2)
  local beam, max_len = o.beam, o.max_len or b.points.shape[2] + 1
  local seqs, ex = C.decode(self, function() return self:_decode_state(b) end,
                            function(y, s, t) return self:_decode_step(y, s, t) end,
                            {start = END, stop = END, max_len = max_len, beam = beam})
  for i, s in ipairs(seqs) do                -- positions into the points: the end slot off
    local p = {}
    for k, v in ipairs(s) do p[k] = math.tointeger(v) - 1 end
    seqs[i] = p
  end
  return seqs, ex
end

-- the weights come from the file: no "paper" initialisation on load (the config keeps it)
function PointerNet.from_checkpoint(o)
  o.init = nil
  return o
end
function PointerNet.after_load(model, _, config)
  rawget(model, "config").init = config.init
end

--- model:save(path, meta) -> path: the state_dict and the configuration (atomic)

--- PointerNet.load(path) -> model (evaluation mode), meta
C.checkpoints(PointerNet, M, CLS, FORMAT, false)

--- the paper's numbers per task, for metrics.json (Vinyals et al. 2015)
M.REFERENCE = {
  sort = "no number in the paper for sorting points (it sorts numbers in section 4.4 only)",
  hull = "Ptr-Net trained n=5-50: accuracy n=5 92.0%, n=10 87.0%, n=50 69.6%; trained on 50: "
         .. "72.6% exact, 99.9% area (Vinyals et al. 2015, Table 1)",
  tsp = "average tour length optimal / Ptr-Net: n=5 2.12 / 2.12, n=10 2.87 / 2.88, n=20 3.83 / "
        .. "3.88 (Vinyals et al. 2015, Table 2)",
}

function PointerNet:extra_repr()
  local c = self.config
  return string.format("task=%s, emb=%d, hidden=%d, attn_hidden=%d, glimpses=%d%s", c.task, c.emb,
                       c.hidden, c.attn_hidden, c.glimpses,
                       c.logit_clip > 0 and (", logit_clip=" .. c.logit_clip) or "")
end

return M
