--- glimpse.models.ntm -- a Neural Turing Machine (Graves et al. 2014) for the copy task of
-- datasets/copy_task.lua, and its LSTM baseline, as one nn.Module class:
--
--   local b = glimpse.data.copy_task.batch(8, {min_len = 1, max_len = 5, seed = 1})
--   local model = glimpse.models.NTM{memory = 16, width = 8, hidden = 32}
--   local loss, stats = model:loss(b)                 -- stats.bit_errors per sequence
--   local bits, extras = model:decode(b)              -- extras.write, extras.read (NTM)
--   local lstm = glimpse.models.NTM{model = "lstm", hidden = 64, layers = 2}   -- the baseline
--
-- model = "ntm" (scripts/ntm_copy.lua's): controller h_t, c_t = LSTMCell([x_t; r_{t-1}]);
-- from h_t a write head and a read head emit key k, strength beta = softplus, gate g =
-- sigmoid, shift weights s = softmax over shifts -1, 0, +1, sharpening gamma = 1 + softplus
-- (eqs. 5-9), the write head also erase e = sigmoid and add a = tanh (eqs. 3-4).  Each step
-- writes, then reads (eq. 2), and predicts y_t = W [h_t; r_t] (logits).  Memory starts at
-- 1e-6, the weightings at slot 1, the read vector at a learned value.
-- model = "lstm": the baseline, a stacked nn.LSTM and a linear read-out (no memory).
-- Loss: binary cross-entropy from logits over the copy steps, summed over bits and steps,
-- averaged over the batch (the script's).
local glimpse = require "glimpse"
local nn = require "glimpse.nn"
local att = require "glimpse.attention"
local capture = require "glimpse.attention.capture"
local C = require "glimpse.models.common"
local check = require "glimpse.check"
local options = require "glimpse.options"

local ntm = att.ntm

local M = {}

local CLS = "NTM"
local FORMAT = "glimpse.ntm"
local SHIFTS = 3

local OPTIONS = options.declare(CLS, {
  {"model", "string", "ntm", choices = {"ntm", "lstm"}, help = "ntm (memory-augmented) | lstm (the baseline)"},
  {"bits", "int", 8, range = {1}, help = "bits per vector"},
  {"channels", "int", nil, range = {1}, help = "input width (default bits + 1: the delimiter)"},
  {"memory", "int", 128, range = {1}, help = "ntm: memory slots N"},
  {"width", "int", 20, range = {1}, help = "ntm: numbers per slot M"},
  {"hidden", "int", nil, range = {1}, help = "controller (ntm, default 100) or LSTM layer size (lstm, default 256)"},
  {"layers", "int", 3, range = {1}, help = "lstm: layers"},
})

local NTM = nn.Module:extend("NTM")
NTM.options = OPTIONS
local DECODE = C.decode_spec("NTM:decode", {"beam", "max_len"})
M.NTM = NTM

--- NTM{model="ntm", bits=8, channels=bits+1, memory=128, width=20, hidden=100 (ntm) | 256
---     (lstm), layers=3 (lstm)} -> model
-- model: "ntm" (memory-augmented) | "lstm" (the baseline).  channels: input width (bits + 1
-- for the delimiter; bits + 2 with copy_task's start_marker).  memory, width: N slots of M
-- numbers (ntm).  hidden: the controller's (ntm) or each LSTM layer's (lstm) size.
function NTM:init(o)
  local c = OPTIONS:check(o, 3)
  local kind, bits = c.model, c.bits
  c.channels = c.channels or bits + 1
  c.hidden = c.hidden or (kind == "ntm" and 100 or 256)
  rawset(self, "config", c)
  if kind == "ntm" then
    self.controller = nn.LSTMCell(c.channels + c.width, c.hidden)
    self.read_head = nn.Linear(c.hidden, c.width + 3 + SHIFTS)
    self.write_head = nn.Linear(c.hidden, 3 * c.width + 3 + SHIFTS)
    self.out = nn.Linear(c.hidden + c.width, bits)
    local r0 = glimpse.empty(c.width)
    r0:uniform_(-0.1, 0.1)
    self.read0 = r0:requires_grad()                         -- the read vector before step 1
  else
    self.lstm = nn.LSTM(c.channels, c.hidden, {layers = c.layers})
    self.out = nn.Linear(c.hidden, bits)
  end
end

-- split a head's raw output (B, M+3+SHIFTS [+2M]) into addressing parameters (eqs. 5-9)
local function head_params(raw, M_, with_vectors)
  local B = raw.shape[1]
  local p = {key = raw:narrow(2, 1, M_),
             beta = raw:narrow(2, M_ + 1, 1):softplus():reshape(B),
             g = raw:narrow(2, M_ + 2, 1):sigmoid():reshape(B),
             s = glimpse.softmax(raw:narrow(2, M_ + 3, SHIFTS), 2),
             gamma = raw:narrow(2, M_ + 3 + SHIFTS, 1):softplus():reshape(B) + 1}
  if with_vectors then
    local off = M_ + 4 + SHIFTS
    p.erase = raw:narrow(2, off, M_):sigmoid()
    p.add = raw:narrow(2, off + M_, M_):tanh()
  end
  return p
end

--- model:forward(inputs (B,S,channels), trace) -> logits (B,S,bits).  trace (a table, NTM
--- only): trace.write[t], trace.read[t] receive the head weightings (B,N) of step t.
function NTM:forward(x, trace)
  local c = self.config
  if not glimpse.is_tensor(x) or x:dim() ~= 3 or x.shape[3] ~= c.channels then
    C.fail(2, "NTM: inputs must be (B,S,%d), got %s", c.channels, check.shape(x))
  end
  if c.model == "lstm" then return self.out((self.lstm(x))) end
  local B, S = x.shape[1], x.shape[2]
  local N, W = c.memory, c.width
  local memory = glimpse.full({B, N, W}, 1e-6)
  local first = glimpse.cat({glimpse.ones(B, 1), glimpse.zeros(B, N - 1)}, 2)
  local w_read, w_write = first, first
  local r = self.read0:reshape(1, W) * glimpse.ones(B, 1)
  local h, cc
  local ys = {}
  if capture.active then
    capture.new_sequence(self.write_head)
    capture.new_sequence(self.read_head)
  end
  for t = 1, S do
    h, cc = self.controller(glimpse.cat({x:select(2, t), r}, 2), h, cc)
    local pw = head_params(self.write_head(h), W, true)
    w_write = ntm.address(pw, memory, w_write)
    memory = ntm.write(memory, w_write, pw.erase, pw.add)
    local pr = head_params(self.read_head(h), W, false)
    w_read = ntm.address(pr, memory, w_read)
    r = ntm.read(w_read, memory)
    ys[t] = self.out(glimpse.cat({h, r}, 2))
    if trace then trace.write[t], trace.read[t] = w_write:detach(), w_read:detach() end
    if capture.active then                   -- keyed by the heads' paths: write_head, read_head
      capture.record_step(self.write_head, w_write)
      capture.record_step(self.read_head, w_read)
    end
  end
  return glimpse.stack(ys, 2)
end

local function check_batch(b, fname, c, level)
  if type(b) ~= "table" or not glimpse.is_tensor(b.inputs) then
    C.fail(level + 1, "%s: batch must be a copy_task batch {inputs=, targets=, output_mask=}",
           fname)
  end
  local B, S = b.inputs.shape[1], b.inputs.shape[2]
  if not glimpse.is_tensor(b.targets) or b.targets:dim() ~= 3 or b.targets.shape[1] ~= B
     or b.targets.shape[2] ~= S or b.targets.shape[3] ~= c.bits then
    C.fail(level + 1, "%s: batch.targets must be (%d,%d,%d), got %s", fname, B, S, c.bits,
           check.shape(b.targets))
  end
  if not glimpse.is_tensor(b.output_mask) or b.output_mask:dim() ~= 2 then
    C.fail(level + 1, "%s: batch.output_mask must be (%d,%d), got %s", fname, B, S,
           check.shape(b.output_mask))
  end
end

-- sum over bits and copy steps of BCE(sigmoid(z), y), per sequence: softplus(z) - y z
local function seq_loss(logits, b)
  local bce = logits:softplus() - b.targets * logits
  return (bce:sum(3) * b.output_mask):sum(2)                -- (B)
end

-- bit errors per sequence: outputs above 0.5 (logits above 0) against the targets
local function bit_errors(logits, b)
  local wrong = ((logits:gt(0) - b.targets):abs():sum(3) * b.output_mask):sum(2):totable()
  for i, e in ipairs(wrong) do wrong[i] = math.tointeger(math.floor(e + 0.5)) end
  return wrong                                              -- {B} integers
end

--- model:loss(batch) -> loss (scalar: BCE summed over bits and copy steps, mean over the
--- batch), stats {loss=, bit_errors= (mean per sequence), bit_accuracy= (share of copied
--- bits right)}.  batch: copy_task's {inputs (B,S,C), targets (B,S,bits), output_mask (B,S)}.
function NTM:loss(b)
  check_batch(b, "NTM:loss", self.config, 2)
  local logits = self:forward(b.inputs)
  local loss = seq_loss(logits, b):mean()
  local stats = {loss = loss:item()}
  glimpse.no_grad(function()
    local errs, s = bit_errors(logits, b), 0
    for _, e in ipairs(errs) do s = s + e end
    local total = b.output_mask:sum():item() * self.config.bits
    stats.bit_errors = s / #errs
    stats.bit_accuracy = 1 - s / math.max(total, 1)
  end)
  return loss, stats
end

--- model:decode(batch, {beam=1}) -> outputs, extras
-- outputs[b]: the copied sequence of row b: a list of T lists of `bits` 0/1 numbers (T: its
-- copy steps, where output_mask is 1); extras: {errors = {b -> bit errors}, logits (B,S,bits),
-- write = {t -> (B,N)}, read = {...} (ntm)}.  The outputs are thresholded sigmoids; there is
-- nothing to search, so beam must be 1.  Evaluation mode, no tape.
function NTM:decode(b, opts)
  check_batch(b, "NTM:decode", self.config, 2)
  local beam = DECODE:check(opts, 2).beam
  if beam ~= 1 then
    C.fail(2, "NTM:decode: opts.beam must be 1 (each output bit is thresholded on its own), got %d",
           beam)
  end
  local was_training = self.training
  self:evaluate()
  local trace = self.config.model == "ntm" and {write = {}, read = {}} or nil
  local ok, logits = pcall(glimpse.no_grad, function() return self:forward(b.inputs, trace) end)
  if was_training then self:train() end
  if not ok then error(logits, 0) end
  local pred = logits:gt(0):totable()
  local om = b.output_mask:totable()
  local outs = {}
  for i = 1, #pred do
    local seq = {}
    for t = 1, #om[i] do
      if om[i][t] > 0 then
        local v = {}
        for k = 1, self.config.bits do v[k] = math.tointeger(pred[i][t][k]) end
        seq[#seq + 1] = v
      end
    end
    outs[i] = seq
  end
  local ex = {errors = bit_errors(logits, b), logits = logits}
  if trace then ex.write, ex.read = trace.write, trace.read end
  return outs, ex
end

--- model:save(path, meta) -> path: the state_dict and the configuration (atomic)

--- NTM.load(path) -> model (evaluation mode), meta
C.checkpoints(NTM, M, CLS, FORMAT, false)

function NTM:extra_repr()
  local c = self.config
  if c.model == "lstm" then
    return string.format("lstm baseline, %d x %d, bits=%d", c.layers, c.hidden, c.bits)
  end
  return string.format("controller=%d, memory=%dx%d, bits=%d", c.hidden, c.memory, c.width, c.bits)
end

return M
