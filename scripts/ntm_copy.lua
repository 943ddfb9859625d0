-- scripts/ntm_copy.lua -- the copy task of Neural Turing Machines (Graves et al. 2014,
-- section 4.1) with an LSTM controller and NTM addressing (glimpse.attention.ntm), against
-- an LSTM baseline.  The model sees a sequence of random 8-bit vectors, a delimiter, then
-- must write the sequence back (datasets/copy_task.lua).  Generalisation is the point: an
-- NTM trained on lengths 1-20 keeps copying at 30-50, an LSTM fails beyond 20.
--
--   glimpse scripts/ntm_copy.lua --quick                     (about a minute: short sequences)
--   glimpse scripts/ntm_copy.lua --model ntm --time-limit 600
--   glimpse scripts/ntm_copy.lua --model lstm --hidden 256 --layers 3
--   glimpse scripts/ntm_copy.lua --adam --lr 1e-3            (instead of the paper's RMSProp)
--
-- The NTM: controller h_t, c_t = LSTM([x_t; r_{t-1}]); from h_t a write head and a read head
-- emit key k, strength beta = softplus, gate g = sigmoid, shift weights s = softmax over
-- shifts -1, 0, +1 and sharpening gamma = 1 + softplus (eqs. 5-9: content addressing,
-- interpolation, circular shift, sharpening); the write head also an erase vector e =
-- sigmoid and an add vector a = tanh (eqs. 3-4).  Each step writes, then reads (eq. 2), and
-- predicts y_t = sigmoid(W [h_t; r_t]).  Memory starts at 1e-6 everywhere, the head
-- weightings at slot 1, the read vector at a learned value.
--
-- Loss: binary cross-entropy (from logits) over the copy steps, summed over bits and steps,
-- averaged over the batch.  Metric: bit errors per sequence (outputs thresholded at 0.5),
-- on the training lengths and on longer ones.  Writes metrics.json, run.json and pictures:
-- targets against outputs, and (NTM) the write and read weightings over time.
local argparse = require "argparse"
local glimpse = require "glimpse"
local copy = require "datasets.copy_task"
local Rng = require "datasets.rng"

local nn, optim, A, progress, util, viz = glimpse.nn, glimpse.optim, glimpse.attention,
  glimpse.progress, glimpse.util, glimpse.viz
local ntm = A.ntm

-- ---------------------------------------------------------------------------------------
-- flags

local parser = argparse("ntm_copy.lua", "Train an NTM (or an LSTM) on the copy task.")
parser:option("--model", "ntm | lstm", "ntm"):choices({"ntm", "lstm"})
parser:option("--bits", "bits per vector", "8"):convert(tonumber)
parser:option("--min-len", "shortest training sequence", "1"):convert(tonumber)
parser:option("--max-len", "longest training sequence", "20"):convert(tonumber)
parser:option("--test-lens", "comma-separated lengths to test (default: max-len and longer)")
parser:option("--test", "test sequences per length", "100"):convert(tonumber)
parser:option("--memory", "NTM memory slots N", "128"):convert(tonumber)
parser:option("--width", "NTM memory width M", "20"):convert(tonumber)
parser:option("--hidden", "controller (NTM) / LSTM size (default: ntm 100, lstm 256)")
  :convert(tonumber)
parser:option("--layers", "LSTM baseline layers (the paper: 3)", "3"):convert(tonumber)
parser:option("--batch", "batch size", "16"):convert(tonumber)
parser:flag("--adam", "Adam instead of the paper's RMSProp (momentum 0.9, decay 0.95)")
parser:option("--lr", "learning rate (default: RMSProp 1e-4 as the paper, Adam 1e-3)")
  :convert(tonumber)
parser:option("--clip", "clip each gradient entry to [-clip, clip] (the paper: 10)", "10")
  :convert(tonumber)
parser:option("--steps", "most training steps", "100000"):convert(tonumber)
parser:option("--time-limit", "most training seconds", "300"):convert(tonumber)
parser:option("--eval-every", "steps between validations", "200"):convert(tonumber)
parser:option("--threads", "BLAS threads (0: leave as is)", "1"):convert(tonumber)
parser:option("--seed", "random seed", "1"):convert(tonumber)
parser:option("--load", "start from a model.safetensors this script wrote (--steps 0: evaluate only)")
parser:option("--out", "output folder (default out/ntm_copy-<model>)")
parser:flag("--quick", "a short demo: lengths 1-5, memory 32, about a minute")
local args = parser:parse(arg)

local function int_flag(name, lo)
  local key = name:gsub("-", "_")
  args[key] = util.int_flag(parser, name, args[key], lo)
end

if args.quick then
  args.max_len = math.min(args.max_len, 5)
  args.memory = math.min(args.memory, 32)
  args.steps, args.time_limit = math.min(args.steps, 8000), math.min(args.time_limit, 50)
  args.test, args.eval_every = math.min(args.test, 50), math.min(args.eval_every, 100)
end
args.hidden = args.hidden or (args.model == "ntm" and 100 or 256)
for _, k in ipairs({"bits", "min-len", "max-len", "test", "memory", "width", "hidden", "layers",
                    "batch", "eval-every"}) do
  int_flag(k, 1)
end
int_flag("steps", 0)
if args.max_len < args.min_len then parser:error("--max-len must be >= --min-len") end
local test_lens = {}
if args.test_lens then
  for s in args.test_lens:gmatch("[^,%s]+") do
    local v = math.tointeger(tonumber(s))
    if not v or v < 1 then parser:error("--test-lens must list positive integers, got " .. args.test_lens) end
    test_lens[#test_lens + 1] = v
  end
else
  local m = args.max_len
  test_lens = {m, math.floor(1.5 * m + 0.5), math.floor(2.5 * m + 0.5)}   -- 20, 30, 50
end
if args.model == "ntm" then
  for _, T in ipairs(test_lens) do
    if T > args.memory then
      parser:error(string.format("--test-lens: a sequence of %d vectors does not fit %d memory slots",
                                 T, args.memory))
    end
  end
end
args.lr = args.lr or (args.adam and 1e-3 or 1e-4)
if args.threads > 0 then glimpse.set_num_threads(args.threads) end
local out_dir = args.out or ("out/ntm_copy-" .. args.model)
glimpse.manual_seed(args.seed)

local BITS = args.bits
local C = BITS + 1                          -- input channels: bits + the delimiter

-- ---------------------------------------------------------------------------------------
-- the models: forward(inputs (B,S,C)) -> logits (B,S,bits), and for the NTM a trace of the
-- head weightings {write = {(B,N) per step}, read = {...}}

local NTM = nn.Module:extend("NTM")

-- head outputs: key M, beta 1, g 1, shift 3, gamma 1 (+ erase M, add M for the write head)
local SHIFTS = 3

function NTM:init(c)
  self.N, self.M, self.H = c.memory, c.width, c.hidden
  self.controller = nn.LSTMCell(C + c.width, c.hidden)
  self.read_head = nn.Linear(c.hidden, c.width + 3 + SHIFTS)
  self.write_head = nn.Linear(c.hidden, 3 * c.width + 3 + SHIFTS)
  self.out = nn.Linear(c.hidden + c.width, BITS)
  local r0 = glimpse.empty(c.width)
  r0:uniform_(-0.1, 0.1)
  self.read0 = r0:requires_grad()           -- the read vector before the first step
end

-- split a head's raw output (B, M+3+SHIFTS [+2M]) into addressing parameters (eqs. 5-9)
local function head_params(raw, M, with_vectors)
  local B = raw.shape[1]
  local p = {key = raw:narrow(2, 1, M),
             beta = raw:narrow(2, M + 1, 1):softplus():reshape(B),
             g = raw:narrow(2, M + 2, 1):sigmoid():reshape(B),
             s = glimpse.softmax(raw:narrow(2, M + 3, SHIFTS), 2),
             gamma = raw:narrow(2, M + 3 + SHIFTS, 1):softplus():reshape(B) + 1}
  if with_vectors then
    local o = M + 4 + SHIFTS
    p.erase = raw:narrow(2, o, M):sigmoid()
    p.add = raw:narrow(2, o + M, M):tanh()
  end
  return p
end

function NTM:forward(x, trace)
  local B, S = x.shape[1], x.shape[2]
  local N, M = self.N, self.M
  local memory = glimpse.full({B, N, M}, 1e-6)
  local first = glimpse.cat({glimpse.ones(B, 1), glimpse.zeros(B, N - 1)}, 2)
  local w_read, w_write = first, first
  local r = self.read0:reshape(1, M) * glimpse.ones(B, 1)
  local h, c
  local ys = {}
  for t = 1, S do
    h, c = self.controller(glimpse.cat({x:select(2, t), r}, 2), h, c)
    local pw = head_params(self.write_head(h), M, true)
    w_write = ntm.address(pw, memory, w_write)
    memory = ntm.write(memory, w_write, pw.erase, pw.add)
    local pr = head_params(self.read_head(h), M, false)
    w_read = ntm.address(pr, memory, w_read)
    r = ntm.read(w_read, memory)
    ys[t] = self.out(glimpse.cat({h, r}, 2))
    if trace then
      trace.write[t], trace.read[t] = w_write:detach(), w_read:detach()
    end
  end
  return glimpse.stack(ys, 2)
end

local LSTMNet = nn.Module:extend("LSTMNet")

function LSTMNet:init(c)
  self.lstm = nn.LSTM(C, c.hidden, {layers = c.layers})
  self.out = nn.Linear(c.hidden, BITS)
end

function LSTMNet:forward(x)
  local y = self.lstm(x)
  return self.out(y)
end

-- ---------------------------------------------------------------------------------------
-- loss and bit errors

-- sum over bits and copy steps of BCE(sigmoid(z), y), per sequence: softplus(z) - y z
local function seq_loss(logits, b)
  local bce = logits:softplus() - b.targets * logits
  return (bce:sum(3) * b.output_mask):sum(2)             -- (B)
end

-- bit errors per sequence: outputs above 0.5 (logits above 0) against the targets
local function bit_errors(logits, b)
  local pred = logits:gt(0)
  local wrong = (pred - b.targets):abs():sum(3) * b.output_mask
  return wrong:sum(2):totable()                           -- {B}
end

-- ---------------------------------------------------------------------------------------
-- training

local cfg = {model = args.model, bits = BITS, memory = args.memory, width = args.width,
             hidden = args.hidden, layers = args.layers}
local model = args.model == "ntm" and NTM(cfg) or LSTMNet(cfg)
local params = model:parameters()
local opt
if args.adam then
  opt = optim.Adam(params, {lr = args.lr})
else
  opt = optim.RMSProp(params, {lr = args.lr, alpha = 0.95, momentum = 0.9})
end
if args.load then model:load_state_dict(glimpse.load(args.load)) end
local nparams = 0
for _, p in ipairs(params) do nparams = nparams + p:numel() end

-- fixed validation and test sets, made from their own seeds
local valid = copy.batch(args.test, {min_len = args.min_len, max_len = args.max_len, bits = BITS,
                                     rng = Rng.new(args.seed + 7919, "ntm.valid")})
local tests = {}
for _, T in ipairs(test_lens) do
  tests[#tests + 1] = {len = T, batch = copy.batch(args.test, {min_len = T, max_len = T, bits = BITS,
                                                               rng = Rng.new(args.seed + T, "ntm.test")})}
end

print(string.format("ntm_copy: model %s (%s), %d params, %d-bit vectors, train lengths %d-%d, "
                    .. "tests at %s, batch %d, %s lr %g, clip +-%g, steps <= %d, time <= %ds, "
                    .. "threads %d, seed %d",
                    args.model, args.model == "ntm"
                      and string.format("LSTM controller %d, memory %dx%d, 1 read + 1 write head",
                                        args.hidden, args.memory, args.width)
                      or string.format("%d x %d", args.layers, args.hidden),
                    nparams, BITS, args.min_len, args.max_len, table.concat(test_lens, ","),
                    args.batch, args.adam and "Adam" or "RMSProp (momentum 0.9)", args.lr,
                    args.clip, args.steps, args.time_limit, glimpse.get_num_threads(), args.seed))

local function evaluate(b, trace)
  model:evaluate()
  local logits = glimpse.no_grad(function() return model(b.inputs, trace) end)
  model:train()
  local errs = bit_errors(logits, b)
  local s = 0
  for _, e in ipairs(errs) do s = s + e end
  local loss = glimpse.no_grad(function() return seq_loss(logits, b):mean():item() end)
  return s / #errs, loss, logits, errs
end

local rng = Rng.new(args.seed, "ntm.train")
local history = {}
local bar = args.steps > 0 and progress.Bar{total = args.steps, label = "train", unit = "step",
                         every = math.max(1, math.min(args.eval_every, 50)),
                         time_limit = args.time_limit, fields = {"loss", "bits"},
                         formats = {loss = "%.3f", bits = "%.2f"}}
local step, ema, ema_bits = 0, nil, nil
local seen = 0
while args.steps > 0 do
  step = step + 1
  local b = copy.batch(args.batch, {min_len = args.min_len, max_len = args.max_len, bits = BITS,
                                    rng = rng})
  opt:zero_grad()
  local logits = model(b.inputs)
  local loss = seq_loss(logits, b):mean()
  loss:backward()
  optim.clip_grad_value(params, args.clip)
  opt:step()
  seen = seen + args.batch
  local l = loss:item()
  local errs = bit_errors(logits:detach(), b)
  local e = 0
  for _, v in ipairs(errs) do e = e + v end
  e = e / #errs
  ema = ema and 0.95 * ema + 0.05 * l or l
  ema_bits = ema_bits and 0.95 * ema_bits + 0.05 * e or e
  bar:update(step, {loss = ema, bits = ema_bits})
  local elapsed = bar:elapsed()
  local last = step >= args.steps or elapsed >= args.time_limit
  if step % args.eval_every == 0 or last then
    bar:pause()
    local vb, vl = evaluate(valid)
    history[#history + 1] = {step = step, sequences = seen, seconds = elapsed, loss = ema,
                             valid_bits = vb, valid_loss = vl}
    bar:print(string.format("  step %d (%d sequences, %.0fs): valid lengths %d-%d: %.2f bit "
                            .. "errors per sequence, loss %.2f", step, seen, elapsed, args.min_len,
                            args.max_len, vb, vl))
    bar:resume()
  end
  if last then break end
end
local train_seconds = bar and bar:finish() or 0

-- ---------------------------------------------------------------------------------------
-- tests, pictures, results

util.output_dir(out_dir, {args = args, model = cfg})
glimpse.save(out_dir .. "/model.safetensors", model:state_dict(),
             {script = arg[0], config = util.json_encode(cfg), steps = step})

-- one sequence's targets and outputs as (bits, steps) rows, restricted to the copy steps
local function copy_rows(logits, b, i)
  local T = b.lengths[i]
  local first = T + 2
  local tg = b.targets[i]:narrow(1, first, T):transpose(1, 2):totable()
  local pr = glimpse.no_grad(function()
    return logits[i]:narrow(1, first, T):sigmoid():transpose(1, 2):totable()
  end)
  return tg, pr, T
end

local function labels(n, prefix)
  local t = {}
  for k = 1, n do t[k] = (k == 1 or k % 5 == 0) and tostring(k) or "" end
  if prefix then for k = 1, n do t[k] = t[k] ~= "" and prefix .. t[k] or "" end end
  return t
end

-- rows of a weighting trace (steps, N) cut to the slots any step uses.  The heads move
-- circularly, so the window starts after the longest run of unused slots (wrapping round).
local function weight_rows(list, i)
  local rows, used = {}, {}
  for t, w in ipairs(list) do
    rows[t] = w[i]:totable()
    for j, v in ipairs(rows[t]) do if v > 0.05 then used[j] = true end end
  end
  local N = #rows[1]
  local gap_end, best, run = 0, -1, 0              -- the longest circular run of unused slots
  for k = 1, 2 * N do
    local j = (k - 1) % N + 1
    if used[j] then run = 0 else
      run = run + 1
      if run > best and run <= N then best, gap_end = run, j end
    end
  end
  local first, count = 1, N
  if best > 0 and best < N then
    local margin = math.min(2, (best - 1) // 2)
    first = (gap_end - margin) % N + 1              -- a couple of unused slots on each side
    count = N - best + 2 * margin
  end
  local cut, slots = {}, {}
  for t, r in ipairs(rows) do
    local row = {}
    for k = 1, count do row[k] = r[(first + k - 2) % N + 1] end
    cut[t] = row
  end
  for k = 1, count do
    local j = (first + k - 2) % N + 1
    slots[k] = (k == 1 or k == count or j % 5 == 0) and tostring(j) or ""
  end
  return cut, slots
end

local results = {}
for k, ts in ipairs(tests) do
  local trace = args.model == "ntm" and {write = {}, read = {}} or nil
  local bits, loss, logits, errs = evaluate(ts.batch, trace)
  local perfect = 0
  for _, e in ipairs(errs) do if e == 0 then perfect = perfect + 1 end end
  results[#results + 1] = {length = ts.len, bit_errors_per_sequence = bits, loss = loss,
                           perfect = perfect / #errs, sequences = #errs,
                           trained_on = ts.len >= args.min_len and ts.len <= args.max_len}
  print(string.format("length %3d: %.2f bit errors per sequence (%d bits), %.0f%% copied "
                      .. "perfectly, loss %.2f%s", ts.len, bits, ts.len * BITS,
                      100 * perfect / #errs, loss,
                      (ts.len > args.max_len) and "  (longer than any training sequence)" or ""))
  -- pictures of the first sequence of this length
  local tg, pr, T = copy_rows(logits, ts.batch, 1)
  local rows, names = {}, {}
  for k2 = 1, BITS do rows[k2], names[k2] = tg[k2], "target " .. k2 end
  local blank = {}
  for t = 1, T do blank[t] = 0 end
  rows[BITS + 1], names[BITS + 1] = blank, ""
  for k2 = 1, BITS do rows[BITS + 1 + k2], names[BITS + 1 + k2] = pr[k2], "output " .. k2 end
  viz.alignment(rows, labels(T), names, string.format("%s/copy_len%d.png", out_dir, T),
                {title = string.format("%s, length %d: %d bit errors", args.model, T,
                                       math.floor(errs[1])), cell = 10, scale = 1})
  if trace then
    local S = #trace.write
    local step_names = {}
    for t = 1, S do
      step_names[t] = (t == 1 or t == T or t == T + 1 or t == T + 2 or t == S) and
                      (t <= T and "in" .. t or (t == T + 1 and "delim" or "out" .. (t - T - 1))) or ""
    end
    local wr, wslots = weight_rows(trace.write, 1)
    local rr, rslots = weight_rows(trace.read, 1)
    viz.alignment(wr, wslots, step_names, string.format("%s/write_weights_len%d.png", out_dir, T),
                  {title = string.format("write weighting (slot) per step, length %d", T),
                   cell = 8, scale = 1})
    viz.alignment(rr, rslots, step_names, string.format("%s/read_weights_len%d.png", out_dir, T),
                  {title = string.format("read weighting (slot) per step, length %d", T),
                   cell = 8, scale = 1})
  end
end

util.write_json(out_dir .. "/metrics.json",
                {model = args.model, config = cfg, params = nparams, steps = step,
                 sequences = seen, train_seconds = train_seconds,
                 optimiser = args.adam and "adam" or "rmsprop", lr = args.lr,
                 train_lengths = {args.min_len, args.max_len}, tests = results,
                 history = history, threads = glimpse.get_num_threads(),
                 reference = "Graves et al. 2014: the NTM (LSTM controller) learns to copy "
                   .. "lengths 1-20 to near 0 bits per sequence and generalises to 30-50 "
                   .. "(errors appear around 120); the LSTM fails beyond 20"}, {indent = 2})
print(string.format("trained %d steps (%d sequences) in %.0fs; wrote metrics.json, run.json, "
                    .. "copy_len*.png%s to %s", step, seen, train_seconds,
                    args.model == "ntm" and ", write/read_weights_len*.png" or "", out_dir))
