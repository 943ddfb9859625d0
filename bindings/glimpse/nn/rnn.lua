--- glimpse.nn.rnn -- the recurrent modules:
-- nn.RNNCell, nn.LSTMCell, nn.GRUCell (one step) and nn.RNN, nn.LSTM, nn.GRU (batch-first
-- sequences, several layers, bidirectional, per-sample lengths).
--
--   local lstm = nn.LSTM(32, 64, {layers = 2, bidirectional = true})
--   local out, state = lstm(x, {5, 3, 7})      -- x (B,T,32) -> out (B,T,128), state.h (4,B,64)
--
-- Equations, gate layouts and parameter names are PyTorch's (weight_ih_l0, weight_hh_l0,
-- bias_ih_l0, bias_hh_l0, ..._reverse), so a PyTorch state dict loads unchanged.  Each step
-- is a fused engine op (engine/ops_rnn.c); a sequence runs one input projection (one sgemm)
-- and one fused recurrence node per layer and direction.
local glimpse = require "glimpse"
local check = require "glimpse.check"
local options = require "glimpse.options"

local Module = require("glimpse.nn.module").Module

local M = {}

local GATES = {RNN = 1, LSTM = 4, GRU = 3}

local BIAS = {"bias", "boolean", true, help = "learn the biases b_ih and b_hh"}
local NONLINEARITY = {"nonlinearity", "string", "tanh", choices = {"tanh", "relu"},
                      help = "the activation of the recurrence"}

-- the options of the cells and of the sequence layers, by kind
local CELL_OPTIONS = {
  LSTM = options.declare("nn.LSTMCell", {BIAS}),
  GRU = options.declare("nn.GRUCell", {BIAS}),
  RNN = options.declare("nn.RNNCell", {BIAS, NONLINEARITY}),
}

local SEQ_ENTRIES = {
  {"layers", "int", 1, range = {1}, aliases = {"num_layers"}, help = "stacked layers"},
  {"bidirectional", "boolean", false, help = "also run a layer over the reversed sequence"},
  {"dropout", "number", 0, range = {0, 1},
   help = "dropout on every layer's output but the last (training mode)"},
  BIAS,
  {"batch_first", "boolean", true, help = "inputs are (B,T,D) (the only layout supported)"},
}
local SEQ_OPTIONS = {
  LSTM = options.declare("nn.LSTM", SEQ_ENTRIES),
  GRU = options.declare("nn.GRU", SEQ_ENTRIES),
}
SEQ_OPTIONS.RNN = SEQ_OPTIONS.GRU:extend("nn.RNN", {NONLINEARITY})

-- A parameter drawn from U(-k, k), k = 1/sqrt(hidden), PyTorch's default for recurrent layers.
local function uniform_param(rows, cols, k)
  local t = cols and glimpse.empty(rows, cols) or glimpse.empty(rows)
  t:uniform_(-k, k)
  return t:requires_grad()
end

-- ------------------------------------------------------------------------------------------
-- cells: one step, h' (and c') from x (B,D) and the previous state

local function cell_init(self, kind, din, hidden, opts)
  local spec = CELL_OPTIONS[kind]
  check.int(spec.owner, "input size", din, 1, nil, 4)
  check.int(spec.owner, "hidden size", hidden, 1, nil, 4)
  local o = spec:check(opts, 4)
  self.kind = kind
  self.input_size, self.hidden_size = din, hidden
  self.use_bias = o.bias
  if kind == "RNN" then self.nonlinearity = o.nonlinearity end
  local G, k = GATES[kind] * hidden, 1 / math.sqrt(hidden)
  self.weight_ih = uniform_param(G, din, k)
  self.weight_hh = uniform_param(G, hidden, k)
  if self.use_bias then
    self.bias_ih = uniform_param(G, nil, k)
    self.bias_hh = uniform_param(G, nil, k)
  end
end

-- x (B,D) or (D); returns x as (B,D) and whether it was unbatched
local function cell_input(self, x, fname)
  if not glimpse.is_tensor(x) then
    error(fname .. ": input must be a tensor (B," .. self.input_size .. "), got " .. type(x), 3)
  end
  local unbatched = x:dim() == 1
  if unbatched then x = x:unsqueeze(1) end
  if x:dim() ~= 2 or x:size(2) ~= self.input_size then
    error(string.format("%s: input %s should be (B,%d) or (%d)", fname, check.shape(x),
                        self.input_size, self.input_size), 3)
  end
  return x, unbatched
end

-- a state argument: nil, or a tensor (B,H) / (H) when the input is unbatched
local function cell_state(self, s, B, unbatched, what, fname)
  if s == nil then return nil end
  if not glimpse.is_tensor(s) then
    error(string.format("%s: %s must be a tensor or nil, got %s", fname, what, type(s)), 3)
  end
  if unbatched and s:dim() == 1 then s = s:unsqueeze(1) end
  if s:dim() ~= 2 or s:size(1) ~= B or s:size(2) ~= self.hidden_size then
    error(string.format("%s: %s %s should be (%d,%d)", fname, what, check.shape(s), B,
                        self.hidden_size), 3)
  end
  return s
end

local function cell_extra_repr(self)
  local s = string.format("%d, %d", self.input_size, self.hidden_size)
  if not self.use_bias then s = s .. ", bias=false" end
  if self.nonlinearity and self.nonlinearity ~= "tanh" then
    s = s .. ", nonlinearity=" .. self.nonlinearity
  end
  return s
end

local LSTMCell = Module:extend("LSTMCell")
M.LSTMCell = LSTMCell
LSTMCell.options = CELL_OPTIONS.LSTM

--- nn.LSTMCell(din, hidden, {bias=true}): i, f, g, o gates (PyTorch's layout).
-- Parameters weight_ih (4H,D), weight_hh (4H,H), bias_ih (4H), bias_hh (4H), U(-1/sqrt(H), 1/sqrt(H)).
function LSTMCell:init(din, hidden, opts)
  cell_init(self, "LSTM", din, hidden, opts)
end

--- h, c = cell(x (B,D), h (B,H) or nil, c (B,H) or nil, mask (B) or nil)
-- nil states are zeros; also cell(x, {h, c}).  Rows whose mask is 0 keep h and c unchanged.
function LSTMCell:forward(x, h, c, mask)
  if type(h) == "table" and not glimpse.is_tensor(h) then
    h, c, mask = h[1] or h.h, h[2] or h.c, c
  end
  local unbatched
  x, unbatched = cell_input(self, x, "LSTMCell")
  h = cell_state(self, h, x:size(1), unbatched, "h", "LSTMCell")
  c = cell_state(self, c, x:size(1), unbatched, "c", "LSTMCell")
  local xp = glimpse.linear(x, self.weight_ih, self.bias_ih)
  local h2, c2 = glimpse.lstm_cell(xp, h, c, self.weight_hh, self.bias_hh, mask)
  if unbatched then return h2:squeeze(1), c2:squeeze(1) end
  return h2, c2
end

LSTMCell.extra_repr = cell_extra_repr

local GRUCell = Module:extend("GRUCell")
M.GRUCell = GRUCell
GRUCell.options = CELL_OPTIONS.GRU

--- nn.GRUCell(din, hidden, {bias=true}): r, z, n gates (PyTorch's layout),
-- n = tanh(W_in x + b_in + r * (W_hn h + b_hn)), h' = (1 - z) * n + z * h.
function GRUCell:init(din, hidden, opts)
  cell_init(self, "GRU", din, hidden, opts)
end

--- h = cell(x (B,D), h (B,H) or nil, mask (B) or nil)
function GRUCell:forward(x, h, mask)
  local unbatched
  x, unbatched = cell_input(self, x, "GRUCell")
  h = cell_state(self, h, x:size(1), unbatched, "h", "GRUCell")
  local xp = glimpse.linear(x, self.weight_ih, self.bias_ih)
  local h2 = glimpse.gru_cell(xp, h, self.weight_hh, self.bias_hh, mask)
  return unbatched and h2:squeeze(1) or h2
end

GRUCell.extra_repr = cell_extra_repr

local RNNCell = Module:extend("RNNCell")
M.RNNCell = RNNCell
RNNCell.options = CELL_OPTIONS.RNN

--- nn.RNNCell(din, hidden, {bias=true, nonlinearity="tanh"|"relu"}):
-- h' = tanh(W_ih x + b_ih + W_hh h + b_hh).
function RNNCell:init(din, hidden, opts)
  cell_init(self, "RNN", din, hidden, opts)
end

--- h = cell(x (B,D), h (B,H) or nil, mask (B) or nil)
function RNNCell:forward(x, h, mask)
  local unbatched
  x, unbatched = cell_input(self, x, "RNNCell")
  h = cell_state(self, h, x:size(1), unbatched, "h", "RNNCell")
  local xp = glimpse.linear(x, self.weight_ih, self.bias_ih)
  local h2 = glimpse.rnn_cell(xp, h, self.weight_hh, self.bias_hh, mask, self.nonlinearity)
  return unbatched and h2:squeeze(1) or h2
end

RNNCell.extra_repr = cell_extra_repr

-- ------------------------------------------------------------------------------------------
-- sequences: batch-first (B,T,D), layers, directions, per-sample lengths

local function seq_init(self, kind, din, hidden, opts)
  local spec = SEQ_OPTIONS[kind]
  check.int(spec.owner, "input size", din, 1, nil, 4)
  check.int(spec.owner, "hidden size", hidden, 1, nil, 4)
  local o = spec:check(opts, 4)
  if not o.batch_first then
    check.fail(4, "%s: only batch-first (B,T,D) input is supported", spec.owner)
  end
  local layers = o.layers
  self.kind = kind
  self.input_size, self.hidden_size = din, hidden
  self.num_layers = layers
  self.bidirectional = o.bidirectional
  self.dropout = o.dropout
  self.use_bias = o.bias
  if kind == "RNN" then self.nonlinearity = o.nonlinearity end
  local dirs = self.bidirectional and 2 or 1
  local G, k = GATES[kind] * hidden, 1 / math.sqrt(hidden)
  -- PyTorch's order: per layer, per direction: weight_ih, weight_hh, bias_ih, bias_hh
  for l = 0, layers - 1 do
    local lin = l == 0 and din or hidden * dirs
    for d = 1, dirs do
      local sfx = l .. (d == 2 and "_reverse" or "")
      self["weight_ih_l" .. sfx] = uniform_param(G, lin, k)
      self["weight_hh_l" .. sfx] = uniform_param(G, hidden, k)
      if self.use_bias then
        self["bias_ih_l" .. sfx] = uniform_param(G, nil, k)
        self["bias_hh_l" .. sfx] = uniform_param(G, nil, k)
      end
    end
  end
end

-- lengths (a table or a (B) tensor of integers 0..T) -> mask (B,T) of 0/1, or nil when every
-- sample has length T
local function length_mask(lengths, B, T, fname)
  if lengths == nil then return nil end
  local lt
  if glimpse.is_tensor(lengths) then
    if lengths:numel() ~= B then
      error(string.format("%s: lengths %s should hold one length per sample (%d)", fname,
                          check.shape(lengths), B), 3)
    end
    lt = lengths:reshape(B):totable()
  elseif type(lengths) == "table" then
    lt = lengths
    if #lt ~= B then
      error(string.format("%s: %d lengths for a batch of %d", fname, #lt, B), 3)
    end
  else
    error(fname .. ": lengths must be a table, a tensor or nil, got " .. type(lengths), 3)
  end
  local full = true
  for i = 1, B do
    local n = lt[i]
    if type(n) ~= "number" or n ~= math.floor(n) or n < 0 or n > T then
      error(string.format("%s: length %s of sample %d is not an integer in 0..%d", fname,
                          tostring(n), i, T), 3)
    end
    if n ~= T then full = false end
  end
  if full then return nil end
  local len = glimpse.tensor(lt):reshape(B, 1)
  return glimpse.arange(T):reshape(1, T):le(len)
end

-- the initial state: nil, or {h = (layers*dirs, B, H), c = ...} (also {h, c}) -> lists of
-- (B,H) slices (or nil)
local function initial_state(self, state, B, unbatched, fname)
  if state == nil then return nil, nil end
  if glimpse.is_tensor(state) then state = {h = state} end
  if type(state) ~= "table" then
    error(fname .. ": the initial state must be a table {h=, c=}, got " .. type(state), 3)
  end
  local n = self.num_layers * (self.bidirectional and 2 or 1)
  local function split(t, what)
    if t == nil then return nil end
    if not glimpse.is_tensor(t) then
      error(string.format("%s: state.%s must be a tensor, got %s", fname, what, type(t)), 4)
    end
    if unbatched and t:dim() == 2 then t = t:unsqueeze(2) end
    if t:dim() ~= 3 or t:size(1) ~= n or t:size(2) ~= B or t:size(3) ~= self.hidden_size then
      error(string.format("%s: state.%s %s should be (%d,%d,%d) (layers*directions, B, H)",
                          fname, what, check.shape(t), n, B, self.hidden_size), 4)
    end
    local parts = {}
    for k = 1, n do parts[k] = t:select(1, k) end
    return parts
  end
  local h = split(state.h or state[1], "h")
  local c = self.kind == "LSTM" and split(state.c or state[2], "c") or nil
  return h, c
end

-- out, state = m(x, lengths, state): the shared forward of RNN, LSTM and GRU
local function seq_forward(self, x, lengths, state)
  local fname = self.kind
  if not glimpse.is_tensor(x) then
    error(fname .. ": input must be a tensor (B,T," .. self.input_size .. "), got " .. type(x), 3)
  end
  local unbatched = x:dim() == 2
  if unbatched then x = x:unsqueeze(1) end
  if x:dim() ~= 3 or x:size(3) ~= self.input_size then
    error(string.format("%s: input %s should be (B,T,%d)", fname, check.shape(x),
                        self.input_size), 3)
  end
  local B, T = x:size(1), x:size(2)
  if unbatched and lengths ~= nil and type(lengths) == "number" then lengths = {lengths} end
  local mask = length_mask(lengths, B, T, fname)
  local h0, c0 = initial_state(self, state, B, unbatched, fname)
  local dirs = self.bidirectional and 2 or 1
  local hn, cn = {}, {}
  local input = x
  for l = 0, self.num_layers - 1 do
    local outs = {}
    for d = 1, dirs do
      local sfx = l .. (d == 2 and "_reverse" or "")
      local k = l * dirs + d
      -- the input projection of the whole sequence: one sgemm
      local xp = glimpse.linear(input, self["weight_ih_l" .. sfx], self["bias_ih_l" .. sfx])
      local w, b = self["weight_hh_l" .. sfx], self["bias_hh_l" .. sfx]
      local hs = h0 and h0[k]
      if self.kind == "LSTM" then
        outs[d], hn[k], cn[k] = glimpse.lstm_seq(xp, hs, c0 and c0[k], w, b, mask, d == 2)
      elseif self.kind == "GRU" then
        outs[d], hn[k] = glimpse.gru_seq(xp, hs, w, b, mask, d == 2)
      else
        outs[d], hn[k] = glimpse.rnn_seq(xp, hs, w, b, mask, d == 2, self.nonlinearity)
      end
    end
    input = dirs == 2 and glimpse.cat(outs, 3) or outs[1]
    if self.dropout > 0 and self.training and l < self.num_layers - 1 then
      input = glimpse.dropout(input, self.dropout, true)
    end
  end
  local out = {h = glimpse.stack(hn, 1)}
  if self.kind == "LSTM" then out.c = glimpse.stack(cn, 1) end
  if unbatched then
    input = input:squeeze(1)
    out.h = out.h:squeeze(2)
    if out.c then out.c = out.c:squeeze(2) end
  end
  return input, out
end

-- out, state = m:step(x, state): one time step of RNN, LSTM and GRU with the layer's weights
local function seq_step(self, x, state)
  local fname = self.kind .. ":step"
  if self.bidirectional then
    error(fname .. ": a bidirectional layer has no single step (its reverse direction " ..
          "reads the sequence from the end); run forward on the whole sequence", 3)
  end
  if not glimpse.is_tensor(x) or x:dim() ~= 2 or x:size(2) ~= self.input_size then
    error(string.format("%s: input %s should be (B,%d)", fname,
                        check.shape(x), self.input_size), 3)
  end
  local h0, c0 = initial_state(self, state, x:size(1), false, fname)
  local hn, cn = {}, {}
  local input = x
  for l = 0, self.num_layers - 1 do
    local k = l + 1
    -- the same input projection and fused cell as one step of forward's recurrence
    local xp = glimpse.linear(input, self["weight_ih_l" .. l], self["bias_ih_l" .. l])
    local w, b = self["weight_hh_l" .. l], self["bias_hh_l" .. l]
    local hs = h0 and h0[k]
    if self.kind == "LSTM" then
      hn[k], cn[k] = glimpse.lstm_cell(xp, hs, c0 and c0[k], w, b)
    elseif self.kind == "GRU" then
      hn[k] = glimpse.gru_cell(xp, hs, w, b)
    else
      hn[k] = glimpse.rnn_cell(xp, hs, w, b, nil, self.nonlinearity)
    end
    input = hn[k]
    if self.dropout > 0 and self.training and l < self.num_layers - 1 then
      input = glimpse.dropout(input, self.dropout, true)
    end
  end
  local out = {h = glimpse.stack(hn, 1)}
  if self.kind == "LSTM" then out.c = glimpse.stack(cn, 1) end
  return input, out
end

local function seq_extra_repr(self)
  local s = string.format("%d, %d", self.input_size, self.hidden_size)
  if self.num_layers ~= 1 then s = s .. ", num_layers=" .. self.num_layers end
  if not self.use_bias then s = s .. ", bias=false" end
  if self.dropout ~= 0 then s = s .. ", dropout=" .. self.dropout end
  if self.bidirectional then s = s .. ", bidirectional=true" end
  if self.nonlinearity and self.nonlinearity ~= "tanh" then
    s = s .. ", nonlinearity=" .. self.nonlinearity
  end
  return s
end

local LSTM = Module:extend("LSTM")
M.LSTM = LSTM
LSTM.options = SEQ_OPTIONS.LSTM

--- nn.LSTM(din, hidden, {layers=1, bidirectional=false, dropout=0, bias=true})
-- Parameters per layer l and direction: weight_ih_l<l>[_reverse] (4H, D or H*dirs),
-- weight_hh_l<l>[_reverse] (4H,H), bias_ih_l<l>[_reverse], bias_hh_l<l>[_reverse] (4H).
-- dropout applies to the outputs of every layer but the last, in training mode.
function LSTM:init(din, hidden, opts)
  seq_init(self, "LSTM", din, hidden, opts)
end

--- out, state = lstm(x (B,T,D), lengths, {h=, c=})
-- lengths: nil (all T) or a table/tensor of B integers; steps t > length[b] leave sample b's
-- state untouched and its output 0.  The initial state (layers*dirs, B, H) defaults to zeros.
-- out (B,T,H*dirs); state.h, state.c (layers*dirs, B, H): each sample's state after its last
-- valid step (for the reverse direction: after t = 1).  Unbatched x (T,D) works too.
function LSTM:forward(x, lengths, state)
  return seq_forward(self, x, lengths, state)
end

--- out, state = lstm:step(x (B,D), state) -- one time step with the layer's own weights, for
-- decoding one token at a time: out (B,H) is the last layer's h, state {h=, c=}
-- (layers, B, H) is what forward returns and takes (nil: zeros).  Differentiable; the
-- numbers are those of forward over a sequence, one step at a time (dropout between layers
-- is drawn afresh in training mode).  A bidirectional layer has no step (an error).
function LSTM:step(x, state)
  return seq_step(self, x, state)
end

LSTM.extra_repr = seq_extra_repr

local GRU = Module:extend("GRU")
M.GRU = GRU
GRU.options = SEQ_OPTIONS.GRU

--- nn.GRU(din, hidden, {layers=1, bidirectional=false, dropout=0, bias=true})
-- Same parameters as nn.LSTM with 3H gate rows (r, z, n).
function GRU:init(din, hidden, opts)
  seq_init(self, "GRU", din, hidden, opts)
end

--- out, state = gru(x (B,T,D), lengths, {h=}) -> out (B,T,H*dirs), state.h (layers*dirs,B,H)
function GRU:forward(x, lengths, state)
  return seq_forward(self, x, lengths, state)
end

--- out, state = gru:step(x (B,D), state) -> out (B,H), state.h (layers,B,H): one time step,
-- as LSTM:step
function GRU:step(x, state)
  return seq_step(self, x, state)
end

GRU.extra_repr = seq_extra_repr

local RNN = Module:extend("RNN")
M.RNN = RNN
RNN.options = SEQ_OPTIONS.RNN

--- nn.RNN(din, hidden, {layers=1, bidirectional=false, dropout=0, bias=true,
-- nonlinearity="tanh"|"relu"}): h_t = tanh(W_ih x_t + b_ih + W_hh h_(t-1) + b_hh).
function RNN:init(din, hidden, opts)
  seq_init(self, "RNN", din, hidden, opts)
end

--- out, state = rnn(x (B,T,D), lengths, {h=}) -> out (B,T,H*dirs), state.h (layers*dirs,B,H)
function RNN:forward(x, lengths, state)
  return seq_forward(self, x, lengths, state)
end

--- out, state = rnn:step(x (B,D), state) -> out (B,H), state.h (layers,B,H): one time step,
-- as LSTM:step
function RNN:step(x, state)
  return seq_step(self, x, state)
end

RNN.extra_repr = seq_extra_repr

return M
