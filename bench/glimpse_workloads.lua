--- bench/glimpse_workloads.lua -- the glimpse side of the side-by-side benchmark.
--
-- One process runs one workload and prints JSON lines on stdout (bench/run.lua reads them):
--   {"side":"glimpse","workload":W,"loss1":<first-step loss>,"ms_per_step":..,"steps":..,
--    "vmhwm_kb":..}
-- Usage: glimpse bench/glimpse_workloads.lua W STEPS [--save PATH]
--   --save PATH writes the seeded initial weights and the inputs to PATH (safetensors) so the
--   PyTorch side (bench/torch_workloads.py) starts from exactly the same numbers.
--
-- The models are written with core ops and the fused engine ops (glimpse.linear,
-- glimpse.embedding, glimpse.lstm_seq / lstm_cell, glimpse._attention.additive, glimpse.conv2d,
-- glimpse.max_pool2d) so the benchmark does not depend on the nn modules; parameter names are
-- the PyTorch state_dict names of the reference modules in torch_workloads.py.  Integer inputs
-- are stored 1-based as float32 (the PyTorch side subtracts 1).
local glimpse = require "glimpse"
local cjson = require "cjson"

local W, STEPS = arg[1], tonumber(arg[2] or "10")
local SAVE
for i = 3, #arg do
  if arg[i] == "--save" then SAVE = arg[i + 1] end
end



local params, names, inputs = {}, {}, {}

-- uniform(-k, k) parameter, registered under a PyTorch name
local function param(name, k, ...)
  local t = ((glimpse.rand(...) * 2 - 1) * k):detach():requires_grad()
  params[#params + 1] = t
  names[#names + 1] = name
  return t
end

local function input(name, t)
  inputs[name] = t
  return t
end

-- integer tensor 1..n (as floats) of the given shape
local function randint(n, ...)
  return (glimpse.rand(...) * n - 0.5):clamp(0, n - 1) + 1
end

local function floor_t(t)
  local tab = t:totable()
  local function f(x)
    if type(x) == "table" then
      local r = {}
      for i = 1, #x do r[i] = f(x[i]) end
      return r
    end
    return math.floor(x + 0.5)
  end
  return glimpse.tensor(f(tab))
end

local function lstm_params(prefix, din, h, suffix)
  suffix = suffix or ""
  local k = 1 / math.sqrt(h)
  return {
    w_ih = param(prefix .. ".weight_ih" .. suffix, k, 4 * h, din),
    w_hh = param(prefix .. ".weight_hh" .. suffix, k, 4 * h, h),
    b_ih = param(prefix .. ".bias_ih" .. suffix, k, 4 * h),
    b_hh = param(prefix .. ".bias_hh" .. suffix, k, 4 * h),
  }
end

local function linear_params(prefix, din, dout, bias)
  local k = 1 / math.sqrt(din)
  local w = param(prefix .. ".weight", k, dout, din)
  local b = bias ~= false and param(prefix .. ".bias", k, dout) or nil
  return {w = w, b = b}
end

local function lin(p, x) return glimpse.linear(x, p.w, p.b) end

-- one layer, one direction over x (B,T,D): y (B,T,H), h_n, c_n
local function lstm_layer(p, x, h0, c0, reverse)
  local xp = glimpse.linear(x, p.w_ih, p.b_ih)
  return glimpse.lstm_seq(xp, h0, c0, p.w_hh, p.b_hh, nil, reverse)
end

-- attention decoder shared by W1 and W2: LSTMCell fed [emb; previous ctx], additive
-- attention over mem (B,L,Dm), output layer over [h; ctx].  Returns logits (B,T,V).
local function make_att_decoder(vocab, demb, dmem, hid, att)
  local d = {}
  d.emb = param("tgt_emb.weight", 1, vocab, demb)
  d.cell = lstm_params("decoder", demb + dmem, hid)
  d.q = linear_params("att_query", hid, att, false)
  d.k = linear_params("att_key", dmem, att)
  d.v = param("att_v", 1 / math.sqrt(att), att)
  d.out = linear_params("out", hid + dmem, vocab)
  function d.run(tgt_in, mem)
    local B, T = tgt_in.shape[1], tgt_in.shape[2]
    local e = glimpse.embedding(d.emb, tgt_in)          -- (B,T,demb)
    local uk = lin(d.k, mem)                             -- (B,L,att)
    local h, c
    local ctx = glimpse.zeros(B, dmem)
    local outs = {}
    for t = 1, T do
      local x = glimpse.cat({e:select(2, t), ctx}, 2)
      local xp = glimpse.linear(x, d.cell.w_ih, d.cell.b_ih)
      h, c = glimpse.lstm_cell(xp, h, c, d.cell.w_hh, d.cell.b_hh)
      ctx = glimpse._attention.additive(lin(d.q, h), uk, d.v, mem)
      outs[t] = lin(d.out, glimpse.cat({h, ctx}, 2))
    end
    return glimpse.stack(outs, 2)
  end
  return d
end

local workloads = {}

function workloads.W1()
  local B, T, V = 64, 20, 32
  local src_emb = param("src_emb.weight", 1, V, 64)
  local fwd = lstm_params("encoder", 64, 128, "_l0")
  local bwd = lstm_params("encoder", 64, 128, "_l0_reverse")
  local dec = make_att_decoder(V, 64, 256, 256, 256)
  local src = input("src", floor_t(randint(V, B, T)))
  local tgt_in = input("tgt_in", floor_t(randint(V, B, T)))
  local tgt_out = input("tgt_out", floor_t(randint(V, B, T)))
  return function()
    local x = glimpse.embedding(src_emb, src)
    local yf = lstm_layer(fwd, x, nil, nil, false)
    local yb = lstm_layer(bwd, x, nil, nil, true)
    local mem = glimpse.cat({yf, yb}, 3)
    local logits = dec.run(tgt_in, mem)
    return glimpse.cross_entropy(logits, tgt_out)
  end
end

function workloads.W2()
  local B, T, V = 32, 8, 32
  local c1 = {w = param("conv1.weight", 1 / 3, 32, 1, 3, 3), b = param("conv1.bias", 1 / 3, 32)}
  local k2 = 1 / math.sqrt(32 * 9)
  local c2 = {w = param("conv2.weight", k2, 64, 32, 3, 3), b = param("conv2.bias", k2, 64)}
  local k3 = 1 / math.sqrt(64 * 9)
  local c3 = {w = param("conv3.weight", k3, 128, 64, 3, 3), b = param("conv3.bias", k3, 128)}
  local dec = make_att_decoder(V, 64, 128, 256, 256)
  local img = input("images", glimpse.rand(B, 1, 64, 64))
  local tgt_in = input("tgt_in", floor_t(randint(V, B, T)))
  local tgt_out = input("tgt_out", floor_t(randint(V, B, T)))
  local function block(c, x)
    return glimpse.max_pool2d(glimpse.conv2d(x, c.w, c.b, {padding = 1}):relu(), 2)
  end
  return function()
    local f = block(c3, block(c2, block(c1, img)))           -- (B,128,8,8)
    local mem = f:reshape(B, 128, 64):transpose(2, 3)         -- (B,64,128)
    local logits = dec.run(tgt_in, mem)
    return glimpse.cross_entropy(logits, tgt_out)
  end
end

function workloads.W3()
  local B, N, H = 128, 10, 128
  local emb = linear_params("embed", 2, H)
  local enc = lstm_params("encoder", H, H, "_l0")
  local dec = lstm_params("decoder", H, H, "_l0")
  local start = param("dec_start", 1, 1, 1, H)
  local q = linear_params("ptr_query", H, H, false)
  local k = linear_params("ptr_key", H, H)
  local v = param("ptr_v", 1 / math.sqrt(H), H)
  local pts = input("points", glimpse.rand(B, N, 2))
  -- targets: a random permutation of 1..N per row
  local perm, flat = {}, {}
  for b = 1, B do
    local p = {}
    for i = 1, N do p[i] = i end
    for i = N, 2, -1 do
      local j = math.floor(glimpse.rand(1):item() * i) + 1
      if j > i then j = i end
      p[i], p[j] = p[j], p[i]
    end
    perm[b] = p
    for t = 1, N - 1 do flat[#flat + 1] = (b - 1) * N + p[t] end   -- decoder inputs 2..N
  end
  local targets = input("targets", glimpse.tensor(perm))
  local in_idx = input("dec_in_flat", glimpse.tensor(flat))   -- 1-based into (B*N)
  return function()
    local e = lin(emb, pts)                                   -- (B,N,H)
    local ye, hn, cn = lstm_layer(enc, e, nil, nil, false)
    local prev = e:reshape(B * N, H):index_select(1, in_idx):reshape(B, N - 1, H)
    local din = glimpse.cat({start:expand(B, 1, H), prev}, 2)  -- (B,N,H)
    local yd = lstm_layer(dec, din, hn, cn, false)
    local uk = lin(k, ye)
    local wq = lin(q, yd)                                     -- (B,N,H)
    local scores = {}
    for t = 1, N do
      scores[t] = glimpse._attention.additive_scores(wq:select(2, t), uk, v)
    end
    return glimpse.cross_entropy(glimpse.stack(scores, 2), targets)
  end
end

function workloads.W4()
  local B, T, D, Hh = 32, 64, 256, 8
  local dh = D // Hh
  local kin = math.sqrt(6 / (D + 3 * D))
  local in_w = param("mha.in_proj_weight", kin, 3 * D, D)
  local in_b = param("mha.in_proj_bias", 0.1, 3 * D)
  local out = linear_params("mha.out_proj", D, D)
  local x = input("x", glimpse.randn(B, T, D))
  local y = input("y", glimpse.randn(B, T, D))
  local scale = 1 / math.sqrt(dh)
  return function()
    local qkv = glimpse.linear(x, in_w, in_b):reshape(B, T, 3, Hh, dh):permute(3, 1, 4, 2, 5)
    local q = qkv:select(1, 1):reshape(B * Hh, T, dh)
    local k = qkv:select(1, 2):reshape(B * Hh, T, dh)
    local vv = qkv:select(1, 3):reshape(B * Hh, T, dh)
    local p
    if glimpse._attention and glimpse._attention.mh_probs then
      p = glimpse._attention.mh_probs(q, k, nil, Hh, false, scale)
    else
      p = glimpse.softmax(q:matmul(k, false, true) * scale, 3)
    end
    local o = p:matmul(vv):reshape(B, Hh, T, dh):permute(1, 3, 2, 4):reshape(B, T, D)
    return glimpse.mse_loss(lin(out, o), y)
  end
end

local function sgemm(m, k, n)
  return function()
    local a = input("a", glimpse.randn(m, k))
    local b = input("b", glimpse.randn(k, n))
    return function() return a:matmul(b) end, true
  end
end
workloads.S1 = sgemm(512, 512, 512)
workloads.S2 = sgemm(64, 512, 128)

local function vmhwm()
  local f = io.open("/proc/self/status")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return tonumber(s:match("VmHWM:%s*(%d+)"))
end

local function main()
  local make = workloads[W]
  if not make then error("unknown workload " .. tostring(W)) end
  glimpse.manual_seed(1234)
  local step_fn, plain = make()
  if SAVE then
    local t = {}
    for i, p in ipairs(params) do t[names[i]] = p:detach() end
    for n, x in pairs(inputs) do t["input." .. n] = x end
    glimpse.save(SAVE, t)
  end
  local loss1
  local one
  if plain then
    one = function() local c = step_fn(); return c end
    local c = one()
    loss1 = c:sum():item()
  else
    local opt = glimpse.optim.Adam(params, {lr = 1e-3})
    one = function()
      opt:zero_grad()
      local loss = step_fn()
      loss:backward()
      opt:step()
      return loss
    end
    loss1 = one():item()
    one()   -- warm-up
  end
  collectgarbage()
  local t0 = glimpse.clock()
  for _ = 1, STEPS do one() end
  local ms = (glimpse.clock() - t0) * 1000 / STEPS
  io.write(cjson.encode({side = "glimpse", workload = W, loss1 = loss1, ms_per_step = ms,
                         steps = STEPS, vmhwm_kb = vmhwm(), threads = glimpse.get_num_threads()}),
           "\n")
end

main()

