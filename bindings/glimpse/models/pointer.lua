--- glimpse.models.pointer -- a pointer network (Vinyals et al. 2015) for any pointing
-- problem: the output is a sequence of positions of the input, as one nn.Module.
--
--   local model = glimpse.models.PointerNet{input_dim = 1, outputs = 3, emb = 32, hidden = 64}
--   local b = glimpse.models.PointerNet.batch({{0.3, 0.9, 0.1, 0.5}}, {{2, 4, 1}})
--   local loss, stats = model:loss(b)
--   local seqs, extras = model:decode(b, {beam = 3})   -- positions, 1-based
--
-- The inputs are L positions of input_dim features each (scalars, 2-D points, vectors); the
-- planar problems of datasets/points.lua (sort, convex hull, TSP) are the presets task =
-- "sort" | "hull" | "tsp" of the stop rule.  The batch layout is documented in
-- docs/api/models/pointer.md ("Batches"): inputs (B,L,D), lengths, input_mask, targets as
-- 1-based positions padded with 0 (the end is not written: it follows the last position).
--
-- The model (scripts/pointer.lua's): an LSTM encoder reads the embedded inputs, preceded by
-- a learned "end" slot (position 1 of the pointer's input, also the decoder's first input);
-- an LSTM decoder reads the previously chosen position's embedding; nn.Pointer turns the
-- decoder state into a distribution over the input positions (eq. 3: u_j = v^T tanh(W1 e_j +
-- W2 d_i), p(C_i | C_<i, P) = softmax(u)).  Positions already chosen are masked (unless
-- repeats = true); the end slot opens once the stop rule allows it (sort and tsp: every
-- position chosen; hull: 3; min_outputs) and is the only choice once it demands it
-- (outputs, max_outputs), so greedy and beam decoding only ever produce valid outputs (the
-- paper's constrained search).  glimpses = G > 0 refines the query G times with an additive
-- attention over the encoder states before pointing (Bello et al. 2016, "glimpse": q <-
-- sum_j softmax(u^g)_j e_j).
local glimpse = require "glimpse"
local nn = require "glimpse.nn"
local C = require "glimpse.models.common"
local check = require "glimpse.check"
local options = require "glimpse.options"
local batches = require "glimpse.data.batches"

local M = {}

local CLS = "PointerNet"
local FORMAT = "glimpse.pointer"
local END = 1                      -- pointer position 1: the end slot (and the go input)
local ALL = "all"                  -- a stop bound: every position of the row

local OPTIONS = options.declare(CLS, {
  {"task", "string", nil, choices = {"sort", "hull", "tsp"},
   help = "a preset stop rule: sort, tsp = every position once; hull = at least 3 "
          .. "(none of task, outputs, min_outputs, max_outputs: sort)"},
  {"emb", "int", 128, range = {1}, help = "embedding size of an input position"},
  {"hidden", "int", 128, range = {1}, help = "LSTM size"},
  {"attn_hidden", "int", nil, range = {1}, help = "pointer (and glimpse) hidden size (default: hidden)"},
  {"glimpses", "int", 0, range = {0}, help = "glimpses over the inputs before pointing (Bello et al.)"},
  {"init", "string", "default", choices = {"default", "paper"}, help = "paper: every parameter uniform in [-0.08, 0.08]"},
  {"logit_clip", "number", 0, range = {0}, finite = true, help = "C > 0: scores become C tanh(u) (0: off)"},
  {"input_dim", "int", 2, range = {1}, help = "features per input position (1: scalars, 2: points)"},
  {"outputs", "int", nil, range = {1}, help = "exactly this many outputs, then the end"},
  {"min_outputs", "int", nil, range = {0}, help = "the end slot opens after this many outputs (default 0)"},
  {"max_outputs", "int", nil, range = {1}, help = "the end slot is the only choice after this many outputs"},
  {"repeats", "boolean", false, help = "a position may be chosen again (false: chosen positions are masked)"},
})

local PointerNet = nn.Module:extend("PointerNet")
PointerNet.options = OPTIONS
local DECODE = C.decode_spec("PointerNet:decode", {"beam", "max_len"})
M.PointerNet = PointerNet

-- the stop rule of a checked configuration: {min =, max =} outputs, each a count, ALL (the
-- row's positions) or nil (no bound)
local function stop_rule(c, level)
  local stops = c.outputs ~= nil or c.min_outputs ~= nil or c.max_outputs ~= nil
  if c.task and stops then
    check.fail(level + 1, "%s: task = '%s' is a preset of the stop rule: give either task or "
               .. "outputs/min_outputs/max_outputs", CLS, c.task)
  end
  if c.outputs and (c.min_outputs or c.max_outputs) then
    check.fail(level + 1, "%s: outputs = %d is exact: give either outputs or min_outputs/max_outputs",
               CLS, c.outputs)
  end
  if c.min_outputs and c.max_outputs and c.min_outputs > c.max_outputs then
    check.fail(level + 1, "%s: min_outputs = %d is above max_outputs = %d", CLS, c.min_outputs,
               c.max_outputs)
  end
  if not c.task and not stops then c.task = "sort" end       -- the default problem
  if c.task == "sort" or c.task == "tsp" then return {min = ALL, max = ALL} end
  if c.task == "hull" then return {min = 3} end
  if c.outputs then return {min = c.outputs, max = c.outputs} end
  return {min = c.min_outputs or 0, max = c.max_outputs}
end

--- PointerNet{task=, input_dim=2, outputs=, min_outputs=, max_outputs=, repeats=false,
---            emb=128, hidden=128, attn_hidden=hidden, glimpses=0, init="default",
---            logit_clip=0} -> model
-- input_dim: features per input position (1: scalars, 2: points, D: vectors).  The stop
-- rule: task = "sort" | "tsp" (every position once), "hull" (at least 3 positions), or
-- outputs = k (exactly k), or min_outputs / max_outputs (the end slot opens after min
-- outputs, from the first step when 0; it is the only choice after max); without any of
-- them, sort's.  Without repeats the bounds are capped at a row's positions.  repeats =
-- true: a chosen position may be chosen again.  init="paper": every parameter uniform in
-- [-0.08, 0.08] (the paper's initialisation); "default": each module's own.  logit_clip =
-- C > 0: the pointer's scores become C tanh(u) (Bello et al. 2016: C = 10).
function PointerNet:init(o)
  local c = OPTIONS:check(o, 3)
  c.attn_hidden = c.attn_hidden or c.hidden
  rawset(self, "rule", stop_rule(c, 3))
  rawset(self, "config", c)
  rawset(self, "E", c.emb)
  rawset(self, "H", c.hidden)
  self.embed = nn.Linear(c.input_dim, c.emb)                -- a position's features -> its input
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

local LAYOUT = "{inputs=, lengths=, input_mask=, targets=, target_lengths=} (docs/api/models/pointer.md)"

-- the batch's inputs as (B,L,D), its lengths {B} and its mask (B,L), checked; batch.points
-- and batch.point_mask (datasets/points.lua's names) stand for inputs and input_mask
function PointerNet:_read_batch(b, fname, level)
  if type(b) ~= "table" then
    C.fail(level + 1, "%s: batch must be a table %s, got %s", fname, LAYOUT, type(b))
  end
  local D = self.config.input_dim
  local x, name = b.inputs, "inputs"
  if x == nil and b.points ~= nil then x, name = b.points, "points" end
  local ok = glimpse.is_tensor(x) and ((x:dim() == 3 and x.shape[3] == D) or (x:dim() == 2 and D == 1))
  if not ok then
    C.fail(level + 1, "%s: batch.%s must be a (B,L,%d) tensor%s, got %s", fname, name, D,
           D == 1 and " or (B,L)" or "", check.shape(x))
  end
  local B, L = x.shape[1], x.shape[2]
  if x:dim() == 2 then x = x:reshape(B, L, 1) end
  local lengths = b.lengths
  if lengths == nil and b.input_mask == nil and b.point_mask == nil then
    lengths = {}
    for i = 1, B do lengths[i] = L end
  end
  if type(lengths) ~= "table" or #lengths ~= B then
    C.fail(level + 1, "%s: batch.lengths must list %d counts of positions", fname, B)
  end
  for i = 1, B do
    local n = lengths[i]
    if math.type(n) ~= "integer" or n < 0 or n > L then
      C.fail(level + 1, "%s: batch.lengths[%d] must be an integer in [0, %d], got %s", fname, i,
             L, tostring(n))
    end
  end
  local mask = b.input_mask
  if mask == nil then mask = b.point_mask end
  if mask == nil then
    mask = batches.lengths_mask(lengths, L)
  elseif not glimpse.is_tensor(mask) or mask:dim() ~= 2 or mask.shape[1] ~= B or mask.shape[2] ~= L then
    C.fail(level + 1, "%s: batch.%s must be a (B,L) = (%d,%d) tensor, got %s", fname,
           b.input_mask ~= nil and "input_mask" or "point_mask", B, L, check.shape(mask))
  end
  return x, lengths, mask
end

-- the stop rule's bounds for a row of n positions: lo, hi (hi nil: no bound)
function PointerNet:_bounds(n)
  local r, cap = self.rule, not self.config.repeats
  local function bound(v)
    if v == ALL then return n end
    if v and cap then return math.min(v, n) end
    return v
  end
  return bound(r.min), bound(r.max)
end

--- PointerNet.targets(batch) -> list of B lists of positions: batch.targets (B,T) read up to
--- batch.target_lengths (default: each row's positions before its first 0)
function M.targets(b, fname, level)
  fname, level = fname or "PointerNet.targets", level or 1
  if type(b) ~= "table" then
    C.fail(level + 1, "%s: batch must be a table %s, got %s", fname, LAYOUT, type(b))
  end
  local tg = b.targets
  if not glimpse.is_tensor(tg) or tg:dim() ~= 2 then
    C.fail(level + 1, "%s: batch.targets must be a (B,T) tensor of 1-based positions padded "
           .. "with 0, got %s", fname, check.shape(tg))
  end
  local B, rows = tg.shape[1], tg:totable()
  local tl = b.target_lengths
  if tl ~= nil and (type(tl) ~= "table" or #tl ~= B) then
    C.fail(level + 1, "%s: batch.target_lengths must list %d counts of outputs", fname, B)
  end
  local out = {}
  for i = 1, B do
    local row, n = rows[i], tl and tl[i]
    if n == nil then
      n = 0
      while row[n + 1] and row[n + 1] > 0 do n = n + 1 end
    elseif math.type(n) ~= "integer" or n < 0 or n > #row then
      C.fail(level + 1, "%s: batch.target_lengths[%d] must be an integer in [0, %d], got %s",
             fname, i, #row, tostring(n))
    end
    local y = {}
    for t = 1, n do y[t] = math.tointeger(row[t]) or row[t] end
    out[i] = y
  end
  return out
end
PointerNet.targets = M.targets

-- each target fits its row and the stop rule (else the loss would be infinite)
function PointerNet:_check_targets(y, lengths, fname, level)
  for i, yi in ipairs(y) do
    local n, seen = lengths[i], {}
    for t, p in ipairs(yi) do
      if math.type(p) ~= "integer" or p < 1 or p > n then
        C.fail(level + 1, "%s: batch.targets[%d][%d] = %s is not a position of row %d (1..%d)",
               fname, i, t, tostring(p), i, n)
      end
      if seen[p] and not self.config.repeats then
        C.fail(level + 1, "%s: batch.targets[%d] chooses position %d twice (repeats = false)",
               fname, i, p)
      end
      seen[p] = true
    end
    local lo, hi = self:_bounds(n)
    if #yi < lo or (hi and #yi > hi) then
      C.fail(level + 1, "%s: batch.targets[%d] has %d outputs; the stop rule allows %s", fname,
             i, #yi, hi == lo and tostring(lo) or hi and (lo .. " to " .. hi)
             or ("at least " .. lo))
    end
  end
end

--- PointerNet.batch(inputs, targets) -> a batch in the documented layout from Lua lists:
--- inputs[b] a list of positions, each a number (input_dim 1) or a list of D numbers;
--- targets[b] (optional) a list of 1-based positions.  -> {inputs (B,L,D) zero-padded,
--- input_mask (B,L), lengths {B}, targets (B,T) padded with 0, target_lengths {B}}
function M.batch(inputs, targets)
  if type(inputs) ~= "table" or #inputs == 0 then
    C.fail(2, "PointerNet.batch: inputs must be a non-empty list of examples (lists of positions)")
  end
  if targets ~= nil and (type(targets) ~= "table" or #targets ~= #inputs) then
    C.fail(2, "PointerNet.batch: targets must list %d examples' positions", #inputs)
  end
  local B, L, D = #inputs, 0, nil
  for i, xs in ipairs(inputs) do
    if type(xs) ~= "table" then C.fail(2, "PointerNet.batch: inputs[%d] must be a list of positions", i) end
    L = math.max(L, #xs)
    for k, v in ipairs(xs) do
      local d = type(v) == "number" and 0 or type(v) == "table" and #v or -1
      if d < 0 or (D and d ~= D) then
        C.fail(2, "PointerNet.batch: inputs[%d][%d] must be a number or a list of %s numbers "
               .. "like the others", i, k, D and tostring(math.max(D, 1)) or "D")
      end
      D = d
    end
  end
  local X, mask, lengths = {}, {}, {}
  for i, xs in ipairs(inputs) do
    local row, mrow = {}, {}
    for k = 1, L do
      local v = xs[k]
      if D == 0 or D == nil then row[k] = {v or 0}
      else
        local f = {}
        for d = 1, D do f[d] = v and v[d] or 0 end
        row[k] = f
      end
      mrow[k] = v ~= nil and 1 or 0
    end
    X[i], mask[i], lengths[i] = row, mrow, #xs
  end
  local b = {inputs = glimpse.tensor(X), input_mask = glimpse.tensor(mask), lengths = lengths}
  if targets then
    local T, Y, TL = 1, {}, {}
    for i = 1, B do T = math.max(T, #targets[i]) end
    for i = 1, B do
      local row = {}
      for t = 1, T do row[t] = targets[i][t] or 0 end
      Y[i], TL[i] = row, #targets[i]
    end
    b.targets, b.target_lengths = glimpse.tensor(Y), TL
  end
  return b
end
PointerNet.batch = M.batch

--- model:inputs(x (B,L,D)) -> X (B,L+1,E): the end slot, then the embedded positions
function PointerNet:inputs(pts)
  local B = pts.shape[1]
  if pts:dim() == 2 then pts = pts:reshape(B, pts.shape[2], 1) end
  local go = self.go:reshape(1, 1, self.E) * glimpse.ones(B, 1, 1)
  return glimpse.cat({go, self.embed(pts)}, 2)
end

--- model:encode(X, input_mask (B,L), lengths {B}) -> states (B,L+1,H), final state, mask (B,L+1)
function PointerNet:encode(X, point_mask, lengths)
  local B = X.shape[1]
  local lens = {}
  for b = 1, B do lens[b] = lengths[b] + 1 end
  local enc, st = self.encoder(X, lens)
  local mask = glimpse.cat({glimpse.ones(B, 1), point_mask}, 2)
  return enc, st, mask
end

-- (B) counts of outputs so far and lengths -> (B,L+1) 0/1 with a 1 where the stop rule
-- forbids a choice: the end slot before the rule's minimum, every other position once its
-- maximum is reached (a maximum that masking alone enforces adds nothing)
function PointerNet:_end_block(count, lengths, L1)
  local B = #lengths
  local col, full, any_full = {}, {}, false
  local explicit_max = self.rule.max ~= nil and self.rule.max ~= ALL
  for b = 1, B do
    local lo, hi = self:_bounds(lengths[b])
    col[b] = count[b] < lo and 1 or 0
    full[b] = explicit_max and count[b] >= hi and 1 or 0
    any_full = any_full or full[b] == 1
  end
  local first = glimpse.zeros(1, L1)
  first[1][1] = 1
  local blocked = glimpse.tensor(col):reshape(B, 1) * first
  if any_full then
    blocked = blocked + glimpse.tensor(full):reshape(B, 1) * (1 - first)
  end
  return blocked
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
--- steps per example)}.  batch: the documented layout (inputs, lengths, targets; also
--- datasets/points.lua's ds:collate or points.batch).  A target that its row or the stop
--- rule does not allow is an error naming the example.
function PointerNet:loss(b)
  local x, lengths, point_mask = self:_read_batch(b, "PointerNet:loss", 2)
  local y = M.targets(b, "PointerNet:loss", 2)
  self:_check_targets(y, lengths, "PointerNet:loss", 2)
  local B, L = x.shape[1], x.shape[2]
  local L1 = L + 1
  local X = self:inputs(x)
  local enc, st, mask = self:encode(X, point_mask, lengths)
  local T1 = b.targets.shape[2] + 1
  -- y_out: the positions to point at (+1 for the end slot), then END; y_in: what the
  -- decoder reads at each step (the go vector, then the previous choice)
  local y_out, y_in, steps, tlen = {}, {}, 0, {}
  for i = 1, B do
    local n = #y[i]
    local yo, yi = {}, {END}
    for t = 1, T1 do
      if t <= n then yo[t] = y[i][t] + 1
      elseif t == n + 1 then yo[t] = END
      else yo[t] = 0 end
      if t > 1 then yi[t] = yo[t - 1] > 0 and yo[t - 1] or END end
    end
    y_out[i], y_in[i], tlen[i] = yo, yi, n
    steps = steps + n + 1
  end
  local repeats = self.config.repeats
  local yin = glimpse.tensor(y_in)
  local dec_in = X:gather(2, yin:reshape(B, T1, 1):expand(B, T1, self.E))
  local h, c = st.h:select(1, 1), st.c:select(1, 1)
  local pstate = self.pointer:precompute(enc, mask)
  local gstate = self.glimpse and self.glimpse:precompute(enc, nil, mask)
  local logits, chosen = {}, glimpse.zeros(B, L1)
  for t = 1, T1 do
    if t > 1 and not repeats then chosen = nn.Pointer.mark(chosen, yin:narrow(2, t, 1), B, L1) end
    local count = {}
    for i = 1, B do count[i] = math.min(t - 1, tlen[i]) end
    local blocked = (chosen + self:_end_block(count, lengths, L1)):clamp(0, 1)
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
  local x, lengths, point_mask = self:_read_batch(b, "PointerNet:decode", 3)
  local X = self:inputs(x)
  local enc, st, mask = self:encode(X, point_mask, lengths)
  local B = X.shape[1]
  return {h = st.h:select(1, 1), c = st.c:select(1, 1), X = X,
          ptr = self.pointer:precompute(enc, mask), chosen = glimpse.zeros(B, X.shape[2]),
          lengths = glimpse.tensor(lengths),
          gl = self.glimpse and self.glimpse:precompute(enc, nil, mask) or nil}
end

-- tokens (N) previous positions -> log p (N,L+1) with -inf where invalid, new state, probs.
-- Every row of a step has t - 1 outputs (finished rows leave the search).
function PointerNet:_decode_step(tokens, st, t)
  local N, L1 = st.X.shape[1], st.X.shape[2]
  local x = st.X:gather(2, tokens:reshape(N, 1, 1):expand(N, 1, self.E)):reshape(N, self.E)
  local h, c = self.decoder(x, st.h, st.c)
  local chosen, count = st.chosen, nil
  if self.config.repeats then
    count = {}
    for i = 1, N do count[i] = t - 1 end
  else
    if t > 1 then chosen = nn.Pointer.mark(chosen, tokens:reshape(N, 1), N, L1) end
    count = chosen:sum(2):totable()
  end
  local lens = st.lengths:totable()
  local blocked = (chosen + self:_end_block(count, lens, L1)):clamp(0, 1)
  local logits, probs = self.pointer(self:_query(h, blocked, st.gl), nil, nil, blocked, st.ptr)
  local valid = (1 - blocked) * st.ptr.mask
  local lp = glimpse.where(valid, glimpse.log_softmax(logits, 2), glimpse.full({N, L1}, -math.huge))
  return lp, {h = h, c = c, X = st.X, ptr = st.ptr, chosen = chosen, lengths = st.lengths,
              gl = st.gl}, probs
end

--- model:decode(batch, {beam=1, max_len=}) -> outputs, extras
-- outputs[b]: the chosen positions of row b in order (1-based positions into its inputs,
-- the end slot removed); extras: {alignments = {b -> pointer distributions per step, each
-- a list of L+1 numbers (column 1: the end slot), the end step included}, scores = {b ->
-- log-prob}, finished = {b -> boolean}}.  max_len (output steps, the end's included)
-- defaults to outputs + 1 or max_outputs + 1, else L + 1.  beam=1: greedy
-- (glimpse.decode.greedy); beam > 1: beam search, both limited to valid outputs.
-- Evaluation mode, no tape.
function PointerNet:decode(b, opts)
  local x = self:_read_batch(b, "PointerNet:decode", 2)
  local o = DECODE:check(opts, 2)
  local hi = self.rule.max ~= ALL and self.rule.max or nil
  local beam, max_len = o.beam, o.max_len or (hi and hi + 1) or x.shape[2] + 1
  local seqs, ex = C.decode(self, function() return self:_decode_state(b) end,
                            function(y, s, t) return self:_decode_step(y, s, t) end,
                            {start = END, stop = END, max_len = max_len, beam = beam})
  for i, s in ipairs(seqs) do                -- positions into the inputs: the end slot off
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
  local rule
  if c.task then rule = "task=" .. c.task
  elseif c.outputs then rule = "outputs=" .. c.outputs
  else
    rule = "min_outputs=" .. (c.min_outputs or 0)
    if c.max_outputs then rule = rule .. ", max_outputs=" .. c.max_outputs end
  end
  return string.format("%s, emb=%d, hidden=%d, attn_hidden=%d, glimpses=%d%s%s%s", rule, c.emb,
                       c.hidden, c.attn_hidden, c.glimpses,
                       c.logit_clip > 0 and (", logit_clip=" .. c.logit_clip) or "",
                       c.input_dim ~= 2 and (", input_dim=" .. c.input_dim) or "",
                       c.repeats and ", repeats=true" or "")
end

return M
