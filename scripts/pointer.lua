-- scripts/pointer.lua -- pointer networks (Vinyals et al. 2015) on the planar problems of
-- datasets/points.lua: sorting points, their convex hull, and the travelling salesman
-- problem with exact (Held-Karp) tours.  An LSTM encoder reads the points; an LSTM decoder
-- fed with the previously chosen point drives nn.Pointer, whose attention distribution over
-- the input positions is the output (eq. 3: u_j = v^T tanh(W1 e_j + W2 d_i),
-- p(C_i | C_<i, P) = softmax(u)).  Position 1 of the pointer's input is a learned "end"
-- slot (its embedding is also the decoder's first input), so a hull of any size can end.
-- Positions already chosen are masked; for sort and tsp the end slot opens only once every
-- point is chosen, so every decoded tour is valid (the paper's constrained search).
--
--   glimpse scripts/pointer.lua --task sort --n 10 --quick          (about a minute)
--   glimpse scripts/pointer.lua --task hull --n-min 5 --n-max 50 --test-n 5,10,50
--   glimpse scripts/pointer.lua --task tsp --n 10 --beam 5 --time-limit 600
--   glimpse scripts/pointer.lua --task tsp --n 5 --paper              (SGD lr 1, clip 2, U(-0.08,0.08))
--
-- Training is teacher-forced cross-entropy on the target sequences (Adam, or the paper's
-- recipe with --paper), on fresh random batches (or a fixed set with --train N), with a
-- validation after every epoch of --epoch-steps steps.  At the end it evaluates held-out
-- sets with greedy decoding and beam search (glimpse.decode): exact-sequence accuracy
-- (sort, hull), area coverage (hull), average tour length against the optimum (tsp), and
-- writes metrics.json, run.json, pictures of predicted against true tours/hulls
-- (instance_K.png) and the pointer's attention (attention_K.png) to the output folder.
local argparse = require "argparse"
local glimpse = require "glimpse"
local points = require "datasets.points"
local Rng = require "datasets.rng"
local draw = require "glimpse.draw"
local planar = require "glimpse.planar"

local nn, optim, decode, progress, util, viz = glimpse.nn, glimpse.optim, glimpse.decode,
  glimpse.progress, glimpse.util, glimpse.viz

-- ---------------------------------------------------------------------------------------
-- flags

local parser = argparse("pointer.lua", "Train a pointer network on sort / convex hull / TSP.")
parser:option("--task", "sort | hull | tsp", "sort"):choices({"sort", "hull", "tsp"})
parser:option("--n", "points per example", "10"):convert(tonumber)
parser:option("--n-min", "mixed sizes: fewest points (with --n-max)"):convert(tonumber)
parser:option("--n-max", "mixed sizes: most points (with --n-min)"):convert(tonumber)
parser:option("--test-n", "comma-separated sizes of extra test sets (default: none)")
parser:option("--train", "fixed training examples (0: a fresh batch every step; the default, "
              .. "but 30000 for tsp above 8 cities)")
  :convert(tonumber)
parser:option("--valid", "validation examples (every epoch, greedy)", "500"):convert(tonumber)
parser:option("--test", "test examples per test set (greedy and beam)", "1000"):convert(tonumber)
parser:option("--batch", "batch size", "128"):convert(tonumber)
parser:option("--emb", "point embedding size", "128"):convert(tonumber)
parser:option("--hidden", "LSTM size (the paper: 256 or 512)", "128"):convert(tonumber)
parser:option("--attn-hidden", "pointer hidden size (default: --hidden)"):convert(tonumber)
parser:option("--lr", "Adam learning rate (--paper: SGD 1.0)", "0.001"):convert(tonumber)
parser:option("--clip", "gradient-norm clip", "2"):convert(tonumber)
parser:flag("--paper", "the paper's recipe: SGD lr 1.0, clip 2.0, init uniform(-0.08, 0.08)")
parser:option("--steps", "most training steps", "20000"):convert(tonumber)
parser:option("--time-limit", "most training seconds", "300"):convert(tonumber)
parser:option("--epoch-steps", "steps per epoch (a validation after each)", "250")
  :convert(tonumber)
parser:option("--beam", "beam width of the final evaluation (1: greedy only)", "5")
  :convert(tonumber)
parser:option("--pictures", "test instances to draw", "4"):convert(tonumber)
parser:option("--threads", "BLAS threads (0: leave as is)", "1"):convert(tonumber)
parser:option("--seed", "random seed", "1"):convert(tonumber)
parser:option("--load", "start from a model.safetensors this script wrote (--steps 0: evaluate only)")
parser:option("--out", "output folder (default out/pointer-<task>-n<N>)")
parser:flag("--quick", "a short demo: about a minute (small sets, 60 s of training)")
local args = parser:parse(arg)

local function int_flag(name, v, lo) return util.int_flag(parser, name, v, lo) end

local n_lo, n_hi = args.n, args.n
if args.n_min or args.n_max then
  n_lo, n_hi = args.n_min or args.n, args.n_max or args.n
end
n_lo, n_hi = int_flag("n-min", n_lo, 1), int_flag("n-max", n_hi, 1)
if n_hi < n_lo then parser:error("--n-max must be >= --n-min") end
if args.task == "hull" and n_lo < 3 then parser:error("hull needs at least 3 points per example") end
if args.task == "tsp" and n_hi > points.TSP_MAX_N then
  parser:error(string.format("tsp targets are exact (Held-Karp): --n at most %d", points.TSP_MAX_N))
end
for _, k in ipairs({"batch", "emb", "hidden", "epoch-steps", "beam", "valid", "test"}) do
  local key = k:gsub("-", "_")
  args[key] = int_flag(k, args[key], 1)
end
args.steps = int_flag("steps", args.steps, 0)
args.pictures = int_flag("pictures", args.pictures, 0)
args.attn_hidden = int_flag("attn-hidden", args.attn_hidden or args.hidden, 1)
-- fresh data costs nothing for sort and hull and small tsp; Held-Karp above 8 cities is slow
-- enough (about 1 ms per 10-city example) that a fixed set made once is faster
if args.train == nil then args.train = (args.task == "tsp" and n_hi > 8) and 30000 or 0 end
args.train = int_flag("train", args.train, 0)

local test_sizes = {}
if args.test_n then
  for s in tostring(args.test_n):gmatch("[^,%s]+") do
    local v = math.tointeger(tonumber(s))
    if not v or v < (args.task == "hull" and 3 or 1) then
      parser:error("--test-n must list positive integers, got " .. args.test_n)
    end
    if args.task == "tsp" and v > points.TSP_MAX_N then
      parser:error(string.format("--test-n: tsp sizes are at most %d", points.TSP_MAX_N))
    end
    test_sizes[#test_sizes + 1] = v
  end
end

if args.quick then
  args.steps, args.time_limit = math.min(args.steps, 2000), math.min(args.time_limit, 60)
  args.valid, args.test = math.min(args.valid, 200), math.min(args.test, 200)
  args.epoch_steps = math.min(args.epoch_steps, 100)
  if args.task == "tsp" then args.train = math.min(args.train, 3000) end
end
if args.paper then args.lr = 1.0 end
if args.threads > 0 then glimpse.set_num_threads(args.threads) end
local size_tag = n_lo == n_hi and tostring(n_lo) or (n_lo .. "-" .. n_hi)
local out_dir = args.out or string.format("out/pointer-%s-n%s", args.task, size_tag)
glimpse.manual_seed(args.seed)

-- ---------------------------------------------------------------------------------------
-- data: fresh batches from a kept generator, or a fixed training set

local size_arg = n_lo == n_hi and n_lo or {n_lo, n_hi}
local data_rng = Rng.new(args.seed, "pointer.train")
local gen_timer = util.Timer()
local train_set = args.train > 0 and points.make{task = args.task, n = size_arg,
                                                 count = args.train, seed = args.seed} or nil
local valid_set = points.make{task = args.task, n = size_arg, count = args.valid,
                              seed = args.seed + 7919}
local test_sets = {{name = "test n=" .. size_tag, n = size_tag,
                    set = points.make{task = args.task, n = size_arg, count = args.test,
                                      seed = args.seed + 104729}}}
for _, n in ipairs(test_sizes) do
  test_sets[#test_sets + 1] = {name = "test n=" .. n, n = tostring(n),
                               set = points.make{task = args.task, n = n, count = args.test,
                                                 seed = args.seed + 1299709 + n}}
end
local gen_seconds = gen_timer:elapsed()

local train_order, train_pos = nil, 0
local function next_batch()
  if not train_set then return points.batch(args.batch, {task = args.task, n = size_arg, rng = data_rng}) end
  if not train_order or train_pos + args.batch > train_set.n then
    train_order, train_pos = {}, 0
    for i = 1, train_set.n do train_order[i] = i end
    for i = train_set.n, 2, -1 do                      -- Fisher-Yates with the data generator
      local j = data_rng:int(1, i)
      train_order[i], train_order[j] = train_order[j], train_order[i]
    end
  end
  local idx = table.move(train_order, train_pos + 1, math.min(train_pos + args.batch, train_set.n), 1, {})
  train_pos = train_pos + #idx
  return train_set:collate(idx)
end

-- ---------------------------------------------------------------------------------------
-- the model

local END = 1                      -- pointer position 1: the end slot (and the go input)

local PtrNet = nn.Module:extend("PtrNet")

function PtrNet:init(c)
  self.E, self.H = c.emb, c.hidden
  self.embed = nn.Linear(2, c.emb)                          -- a point (x, y) -> its input vector
  local go = glimpse.empty(c.emb)
  go:uniform_(-0.1, 0.1)
  self.go = go:requires_grad()                              -- the end slot / first decoder input
  self.encoder = nn.LSTM(c.emb, c.hidden)
  self.decoder = nn.LSTM(c.emb, c.hidden)
  self.pointer = nn.Pointer{query = c.hidden, key = c.hidden, hidden = c.attn_hidden}
  self.task = c.task
end

-- points (B,L,2) -> the pointer's inputs X (B,L+1,E): the end slot, then the points
function PtrNet:inputs(pts)
  local B = pts.shape[1]
  local go = self.go:reshape(1, 1, self.E) * glimpse.ones(B, 1, 1)
  return glimpse.cat({go, self.embed(pts)}, 2)
end

-- X (B,L+1,E), lengths {B} (points) -> encoder states (B,L+1,H), final state, mask (B,L+1)
function PtrNet:encode(X, point_mask, lengths)
  local B = X.shape[1]
  local lens = {}
  for b = 1, B do lens[b] = lengths[b] + 1 end
  local enc, st = self.encoder(X, lens)
  local mask = glimpse.cat({glimpse.ones(B, 1), point_mask}, 2)
  return enc, st, mask
end

-- (B) counts of chosen points and lengths -> (B,L+1) 0/1 with a 1 on the end slot where it
-- may not be chosen yet: sort/tsp until every point is chosen, hull before 3 points.
function PtrNet:end_block(chosen_count, lengths, L1)
  local B = #lengths
  local col = {}
  for b = 1, B do
    local k = chosen_count[b]
    local blocked
    if self.task == "hull" then blocked = k < math.min(3, lengths[b])
    else blocked = k < lengths[b] end
    col[b] = blocked and 1 or 0
  end
  local first = glimpse.zeros(1, L1)
  first[1][1] = 1
  return glimpse.tensor(col):reshape(B, 1) * first
end

-- Teacher-forced loss of a collated batch: mean cross-entropy per output step (the end
-- step included).  Returns the loss and the mean number of output steps per example
-- (loss * steps is the negative log-likelihood of a whole sequence).
function PtrNet:loss(b)
  local B, L = b.points.shape[1], b.points.shape[2]
  local L1 = L + 1
  local X = self:inputs(b.points)
  local enc, st, mask = self:encode(X, b.point_mask, b.lengths)
  local tg = b.targets:totable()
  local T1 = b.targets.shape[2] + 1
  -- y_out: the positions to point at (+1 for the end slot), then END; y_in: what the
  -- decoder reads at each step (the go vector, then the previous choice)
  local y_out, y_in, dec_lens = {}, {}, {}
  for i = 1, B do
    local n = b.target_lengths[i]
    local yo, yi = {}, {END}
    for t = 1, T1 do
      if t <= n then yo[t] = math.tointeger(tg[i][t]) + 1
      elseif t == n + 1 then yo[t] = END
      else yo[t] = 0 end
      if t > 1 then yi[t] = yo[t - 1] > 0 and yo[t - 1] or END end
    end
    y_out[i], y_in[i], dec_lens[i] = yo, yi, n + 1
  end
  local yin = glimpse.tensor(y_in)
  local dec_in = X:gather(2, yin:reshape(B, T1, 1):expand(B, T1, self.E))
  local dec = self.decoder(dec_in, dec_lens, {h = st.h, c = st.c})
  local pstate = self.pointer:precompute(enc, mask)
  local logits, chosen = {}, glimpse.zeros(B, L1)
  for t = 1, T1 do
    if t > 1 then chosen = nn.Pointer.mark(chosen, yin:narrow(2, t, 1), B, L1) end
    local count = {}
    for i = 1, B do count[i] = math.min(t - 1, b.target_lengths[i]) end
    local blocked = (chosen + self:end_block(count, b.lengths, L1)):clamp(0, 1)
    logits[t] = self.pointer(dec:select(2, t), nil, nil, blocked, pstate)
  end
  local lg = glimpse.stack(logits, 2)                       -- (B,T1,L1)
  local loss = glimpse.cross_entropy(lg, glimpse.tensor(y_out), {ignore_index = 0})
  local steps = 0
  for i = 1, B do steps = steps + dec_lens[i] end
  return loss, steps / B
end

-- The decoding state (one row per example, as glimpse.decode needs) and the step function.
function PtrNet:decode_state(b)
  local X = self:inputs(b.points)
  local enc, st, mask = self:encode(X, b.point_mask, b.lengths)
  local B = X.shape[1]
  return {h = st.h:select(1, 1), c = st.c:select(1, 1), X = X,
          ptr = self.pointer:precompute(enc, mask), chosen = glimpse.zeros(B, X.shape[2]),
          lengths = glimpse.tensor(b.lengths)}
end

-- tokens (N) previous positions -> log p (N,L+1) with -inf where invalid, new state, probs
function PtrNet:decode_step(tokens, st, t)
  local N, L1 = st.X.shape[1], st.X.shape[2]
  local x = st.X:gather(2, tokens:reshape(N, 1, 1):expand(N, 1, self.E)):reshape(N, self.E)
  local d = self.decoder
  local h, c = glimpse.lstm_cell(glimpse.linear(x, d.weight_ih_l0, d.bias_ih_l0), st.h, st.c,
                                 d.weight_hh_l0, d.bias_hh_l0)
  local chosen = st.chosen
  if t > 1 then chosen = nn.Pointer.mark(chosen, tokens:reshape(N, 1), N, L1) end
  local count = chosen:sum(2):totable()
  local lens = st.lengths:totable()
  local blocked = (chosen + self:end_block(count, lens, L1)):clamp(0, 1)
  local logits, probs = self.pointer(h, nil, nil, blocked, st.ptr)
  local valid = (1 - blocked) * st.ptr.mask
  local lp = glimpse.where(valid, glimpse.log_softmax(logits, 2), glimpse.full({N, L1}, -math.huge))
  return lp, {h = h, c = c, X = st.X, ptr = st.ptr, chosen = chosen, lengths = st.lengths}, probs
end

-- Predicted sequences of point indices (end slot removed, 1-based into the example's points)
-- and their attention rows, greedy (beam 1) or beam search.
function PtrNet:predict(b, beam)
  local st = self:decode_state(b)
  local step = function(y, s, t) return self:decode_step(y, s, t) end
  local o = {start = END, stop = END, max_len = b.points.shape[2] + 1}
  local seqs, maps = {}, {}
  if beam <= 1 then
    local toks, _, al = decode.greedy(step, st, o)
    for i = 1, #toks do seqs[i], maps[i] = toks[i], al and al[i] end
  else
    o.beam = beam
    local hyps = decode.beam(step, st, o)
    for i, h in ipairs(hyps) do seqs[i], maps[i] = h[1].tokens, h[1].alignment end
  end
  for i, s in ipairs(seqs) do
    local p = {}
    for k, v in ipairs(s) do p[k] = math.tointeger(v) - 1 end
    seqs[i] = p
  end
  return seqs, maps
end

-- ---------------------------------------------------------------------------------------
-- evaluation

local function same(a, b)
  if #a ~= #b then return false end
  for k = 1, #a do if a[k] ~= b[k] then return false end end
  return true
end

-- Decode every example of ds (greedy, or beam) and measure: exact-sequence accuracy, and
-- for hull the area coverage and failures, for tsp the tour lengths against the optimum.
local function evaluate(model, ds, beam, keep)
  model:evaluate()
  local r = {count = ds.n, correct = 0, coverage = 0, invalid = 0, length = 0, optimal = 0,
             valid_tours = 0}
  local kept = {}
  glimpse.no_grad(function()
    local bs = beam > 1 and 64 or 256
    for s = 1, ds.n, bs do
      local idx = {}
      for i = s, math.min(ds.n, s + bs - 1) do idx[#idx + 1] = i end
      local b = ds:collate(idx)
      local seqs, maps = model:predict(b, beam)
      for k, i in ipairs(idx) do
        local pred, truth, pts = seqs[k], ds.targets[i], ds.points[i]
        -- a tour is right in either direction; sort and hull orders are canonical
        local ok = ds.task == "tsp" and planar.same_cycle(pred, truth) or same(pred, truth)
        if ok then r.correct = r.correct + 1 end
        local info = {index = i, pred = pred, ok = ok, map = maps[k]}
        if ds.task == "hull" then
          local cov, why = planar.hull_coverage(pts, pred, truth)
          r.coverage = r.coverage + cov
          if why then r.invalid = r.invalid + 1 end
          info.coverage, info.why = cov, why
        elseif ds.task == "tsp" then
          if planar.is_tour(pred, #pts) then
            r.valid_tours = r.valid_tours + 1
            local len = planar.tour_length(pts, pred)
            r.length, r.optimal = r.length + len, r.optimal + ds.tour_lengths[i]
            info.length = len
          end
        end
        if keep and #kept < keep then kept[#kept + 1] = info end
      end
    end
  end)
  model:train()
  local out = {examples = r.count, accuracy = r.correct / math.max(1, r.count)}
  if ds.task == "hull" then
    out.area_coverage = r.coverage / math.max(1, r.count)
    out.invalid = r.invalid / math.max(1, r.count)
  elseif ds.task == "tsp" then
    out.valid_tours = r.valid_tours / math.max(1, r.count)
    out.tour_length = r.valid_tours > 0 and r.length / r.valid_tours or nil
    out.optimal_length = r.valid_tours > 0 and r.optimal / r.valid_tours or nil
    out.gap = out.tour_length and (out.tour_length / out.optimal_length - 1) or nil
  end
  return out, kept
end

local function describe(m)
  local s = string.format(m.valid_tours and "optimal tours %.1f%%" or "exact %.1f%%",
                          100 * m.accuracy)
  if m.area_coverage then
    s = s .. string.format(", area coverage %.1f%% (%.1f%% invalid)", 100 * m.area_coverage,
                           100 * m.invalid)
  end
  if m.valid_tours then
    s = s .. string.format(", tour %.3f vs optimal %.3f (gap %.2f%%, %.0f%% valid)",
                           m.tour_length or 0 / 0, m.optimal_length or 0 / 0,
                           100 * (m.gap or 0 / 0), 100 * m.valid_tours)
  end
  return s
end

-- ---------------------------------------------------------------------------------------
-- pictures: the true and the predicted tour / hull / order side by side, and the attention

local PANEL, MARGIN, HEAD = 260, 18, 26

local function draw_panel(cv, ox, pts, seq, closed, title, colour)
  cv:rect(ox, HEAD, PANEL, PANEL, {fill = false, color = {0.75, 0.75, 0.75}})
  cv:text(title, ox + 4, 6, {scale = 1})
  local span = PANEL - 2 * MARGIN
  local function xy(p) return ox + MARGIN + p[1] * span, HEAD + MARGIN + (1 - p[2]) * span end
  local path = {}
  for k, i in ipairs(seq) do path[k] = {xy(pts[i])} end
  if #path >= 2 then cv:polyline(path, {closed = closed, color = colour, width = 2}) end
  for i, p in ipairs(pts) do
    local x, y = xy(p)
    cv:disc(x, y, 3, {color = {0.15, 0.15, 0.15}})
    if #pts <= 20 then cv:text(tostring(i), x + 4, y - 10, {scale = 1, color = {0.3, 0.3, 0.3}}) end
  end
  if seq[1] then
    local x, y = xy(pts[seq[1]])
    cv:disc(x, y, 5, {color = colour})
  end
end

local function draw_instance(path, task, pts, truth, pred, title_truth, title_pred)
  local cv = draw.Canvas(2 * PANEL + 10, PANEL + HEAD + 4)
  local closed = task ~= "sort"
  draw_panel(cv, 0, pts, truth, closed, title_truth, {0.1, 0.55, 0.2})
  draw_panel(cv, PANEL + 10, pts, pred, closed, title_pred, {0.85, 0.2, 0.1})
  cv:save(path)
end

local function draw_attention(path, info, n, title)
  if not info.map or #info.map == 0 then return end
  local end_name = n < 10 and "E" or "end"      -- one-character labels stay horizontal
  local src = {end_name}
  for j = 1, n do src[j + 1] = tostring(j) end
  local tgt, rows = {}, {}
  for t, row in ipairs(info.map) do
    rows[t] = table.move(row, 1, n + 1, 1, {})
    tgt[t] = info.pred[t] and tostring(info.pred[t]) or end_name
  end
  viz.alignment(rows, src, tgt, path, {title = title, cell = n > 20 and 12 or 18,
                                       scale = n > 20 and 1 or 2})
end

-- ---------------------------------------------------------------------------------------
-- training

local cfg = {task = args.task, emb = args.emb, hidden = args.hidden, attn_hidden = args.attn_hidden}
local model = PtrNet(cfg)
local params = model:parameters()
local opt
if args.paper then
  glimpse.no_grad(function()
    for _, p in ipairs(params) do p:uniform_(-0.08, 0.08) end
  end)
  opt = optim.SGD(params, {lr = args.lr})
else
  opt = optim.Adam(params, {lr = args.lr})
end
if args.load then model:load_state_dict(glimpse.load(args.load)) end
local nparams = 0
for _, p in ipairs(params) do nparams = nparams + p:numel() end

print(string.format("pointer: task %s, n %s%s, %s training data, valid %d, test %d (%s), "
                    .. "emb %d, LSTM %d, pointer %d, %d params, batch %d, %s lr %g clip %g%s, "
                    .. "steps <= %d, time <= %ds, beam %d, threads %d, seed %d",
                    args.task, size_tag,
                    #test_sizes > 0 and (" (+ tests at n = " .. table.concat(test_sizes, ",") .. ")") or "",
                    train_set and (train_set.n .. " fixed") or "fresh", valid_set.n, args.test,
                    string.format("made in %.1fs", gen_seconds), args.emb, args.hidden,
                    args.attn_hidden, nparams, args.batch, args.paper and "SGD" or "Adam",
                    args.lr, args.clip, args.paper and ", init U(-0.08,0.08)" or "",
                    args.steps, args.time_limit, args.beam, glimpse.get_num_threads(), args.seed))

local history = {}
local bar = args.steps > 0 and progress.Bar{total = args.steps, label = "train", unit = "step",
                         every = math.max(1, math.min(args.epoch_steps, 50)),
                         time_limit = args.time_limit, fields = {"epoch", "loss"},
                         formats = {loss = "%.4f"}}
local step, epoch, ema = 0, 1, nil
while args.steps > 0 do
  step = step + 1
  local b = next_batch()
  opt:zero_grad()
  local loss, per_seq = model:loss(b)
  -- the paper's SGD minimises -log p(C|P) per sequence: the step losses summed, not averaged
  if args.paper then (loss * per_seq):backward() else loss:backward() end
  optim.clip_grad_norm(params, args.clip)
  opt:step()
  local l = loss:item()
  ema = ema and 0.95 * ema + 0.05 * l or l
  bar:update(step, {epoch = epoch, loss = ema})
  local elapsed = bar:elapsed()
  local last = step >= args.steps or elapsed >= args.time_limit
  if step % args.epoch_steps == 0 or last then
    bar:pause()                                  -- validation time does not count
    local m = evaluate(model, valid_set, 1)
    history[#history + 1] = {epoch = epoch, step = step, seconds = elapsed, loss = ema, valid = m}
    bar:print(string.format("  epoch %d (step %d, %.0fs): valid %s", epoch, step, elapsed,
                            describe(m)))
    epoch = epoch + 1
    bar:resume()
  end
  if last then break end
end
local train_seconds = bar and bar:finish() or 0

-- ---------------------------------------------------------------------------------------
-- final evaluation, pictures, results

util.output_dir(out_dir, {args = args, model = cfg})
glimpse.save(out_dir .. "/model.safetensors", model:state_dict(),
             {script = arg[0], config = util.json_encode(cfg), steps = step})
local results = {}
for ti, ts in ipairs(test_sets) do
  local t0 = util.Timer()
  local g, shown = evaluate(model, ts.set, 1, ti == 1 and args.pictures or 0)
  local gs = t0:elapsed()
  print(string.format("%s (%d examples) greedy: %s  [%.1fs]", ts.name, ts.set.n, describe(g), gs))
  local entry = {n = ts.n, examples = ts.set.n, greedy = g, greedy_seconds = gs}
  if args.beam > 1 then
    local t1 = util.Timer()
    local bm
    bm, shown = evaluate(model, ts.set, args.beam, ti == 1 and args.pictures or 0)
    entry.beam, entry.beam_seconds = bm, t1:elapsed()
    print(string.format("%s (%d examples) beam %d: %s  [%.1fs]", ts.name, ts.set.n, args.beam,
                        describe(bm), entry.beam_seconds))
  end
  results[#results + 1] = entry
  for k, info in ipairs(shown) do
    local ds = ts.set
    local pts, truth = ds.points[info.index], ds.targets[info.index]
    local tt, tp
    if args.task == "tsp" then
      tt = string.format("optimal tour, length %.3f", ds.tour_lengths[info.index])
      tp = string.format("predicted, length %s", info.length and string.format("%.3f", info.length) or "invalid")
    elseif args.task == "hull" then
      tt = string.format("true hull (%d vertices)", #truth)
      tp = string.format("predicted, coverage %.1f%%%s", 100 * info.coverage,
                         info.why and (" (" .. info.why .. ")") or (info.ok and " exact" or ""))
    else
      tt = "sorted by x"
      tp = "predicted" .. (info.ok and " (exact)" or " (wrong)")
    end
    draw_instance(string.format("%s/instance_%d.png", out_dir, k), args.task, pts, truth,
                  info.pred, tt, tp)
    draw_attention(string.format("%s/attention_%d.png", out_dir, k), info, #pts,
                   string.format("pointer attention, %s n=%d", args.task, #pts))
  end
end

local reference = {
  sort = "no number in the paper for sorting points (it sorts numbers in section 4.4 only)",
  hull = "Ptr-Net trained n=5-50: accuracy n=5 92.0%, n=10 87.0%, n=50 69.6%; trained on 50: "
         .. "72.6% exact, 99.9% area (Vinyals et al. 2015, Table 1)",
  tsp = "average tour length optimal / Ptr-Net: n=5 2.12 / 2.12, n=10 2.87 / 2.88, n=20 3.83 / "
        .. "3.88 (Vinyals et al. 2015, Table 2)",
}
util.write_json(out_dir .. "/metrics.json",
                {task = args.task, n = size_tag, steps = step, train_seconds = train_seconds,
                 data_seconds = gen_seconds, params = nparams, history = history,
                 tests = results, config = cfg, optimiser = args.paper and "sgd-paper" or "adam",
                 reference = reference[args.task], threads = glimpse.get_num_threads()},
                {indent = 2})
print(string.format("trained %d steps in %.0fs; wrote metrics.json, run.json%s to %s", step,
                    train_seconds, args.pictures > 0 and ", instance_K.png, attention_K.png" or "",
                    out_dir))
