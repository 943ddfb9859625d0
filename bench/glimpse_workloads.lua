--- bench/glimpse_workloads.lua -- the glimpse side of the side-by-side benchmark.
--
-- One process runs one workload and prints JSON lines on stdout (bench/run.lua reads them):
--   {"side":"glimpse","workload":W,"loss1":<first-step loss>,"ms_per_step":..,"steps":..,
--    "cpu_ms_per_step":..,"vmhwm_kb":..,"threads":..}
-- Usage: glimpse bench/glimpse_workloads.lua W STEPS [--save PATH] [--threads N] [--dist]
--                                               [--profile] [--quick]
--   --save PATH writes the seeded initial weights (the model's state_dict) and the inputs
--   (as "input.<name>") to PATH (safetensors) so the PyTorch side (bench/torch_workloads.py)
--   starts from exactly the same numbers.
--   --threads N sets the BLAS thread count (default: glimpse's own default).
--   --quick: W7 and W8 on a small model (seconds; the other workloads keep their sizes).
--   --profile: after the timed steps, run at least STEPS more (and at least 2 s) with
--   glimpse.cpu_profile sampling every 200 us and glimpse.blas_profile counting, and add
--   "profile" to the JSON line: the share of the samples in each category (blas, memory,
--   engine, lua, other; see bindings/l_profile.c), the glimpse functions seen most, and the
--   BLAS wrapper's own count of calls, seconds and GFLOP/s.
--   --dist (W1, W2; under mpirun, see bench/scaling.lua): data parallel over the ranks; the
--   batch stays the global one, each rank takes its block of rows and the gradients are
--   averaged in one allreduce per step (glimpse.dist.GradBucket); rank 0 prints.
--
-- The models are written the way a user writes them: nn modules (nn.Embedding, nn.LSTM,
-- nn.LSTMCell, nn.Attention, nn.Pointer, nn.Conv2d, nn.MaxPool2d, nn.MultiheadAttention,
-- nn.Linear) and glimpse.optim.Adam, mirroring the torch.nn modules of torch_workloads.py.
-- Module and parameter names are chosen so both state_dicts have the same keys.  Integer
-- inputs are stored 1-based as float32 (the PyTorch side subtracts 1).
local glimpse = require "glimpse"
local nn = glimpse.nn
local cjson = require "cjson"

local W, STEPS = arg[1], tonumber(arg[2] or "10")
local SAVE, THREADS, DIST, PROFILE
local QUICK                      -- --quick: W7, W8 small (the machinery's check)
for i = 3, #arg do
  if arg[i] == "--quick" then QUICK = true end
  if arg[i] == "--save" then SAVE = arg[i + 1] end
  if arg[i] == "--profile" then PROFILE = true end
  if arg[i] == "--threads" then THREADS = tonumber(arg[i + 1]) end
  if arg[i] == "--dist" then DIST = true end
end
if DIST and W ~= "W1" and W ~= "W2" then error("--dist: only W1 and W2 (batch-first inputs)") end
local dist = glimpse.dist
local rank, size = 0, 1
if DIST then rank, size = dist.init() end

local inputs = {}
local shard_rows                 -- --dist: the rows of the global batch this rank takes

-- a workload's input (batch first); with --dist this rank's block of rows of it
local function input(name, t)
  inputs[name] = t
  if not DIST then return t end
  local B = t.shape[1]
  local per, extra = B // size, B % size
  local first = rank * per + math.min(rank, extra)
  shard_rows = per + (rank < extra and 1 or 0)
  return t:narrow(1, first + 1, shard_rows)
end

-- integer tensor 1..n (as floats) of the given shape
local function randint(n, ...)
  return ((glimpse.rand(...) * n):floor() + 1):clamp(1, n)
end

-- overwrite a parameter with U(-k, k) (nn.Attention starts v at 0; a benchmark wants a
-- non-degenerate start so the loss check means something)
local function reinit(p, k)
  glimpse.no_grad(function() p:uniform_(-k, k) end)
end

-- ---------------------------------------------------------------------------------------
-- the attention decoder shared by W1 and W2: an LSTMCell fed [emb; previous context],
-- additive attention over mem (B,L,Dm), an output layer over [h; context]

local AttDecoder = nn.Module:extend("AttDecoder")

function AttDecoder:init(vocab, demb, dmem, hid, att)
  self.tgt_emb = nn.Embedding(vocab, demb)
  self.decoder = nn.LSTMCell(demb + dmem, hid)
  self.att = nn.Attention{score = "additive", query = hid, key = dmem, hidden = att}
  reinit(self.att.v, 1 / math.sqrt(att))
  self.out = nn.Linear(hid + dmem, vocab)
  self.dmem = dmem
end

--- tgt_in (B,T) 1-based ids, mem (B,L,Dm) -> logits (B,T,V)
function AttDecoder:forward(tgt_in, mem)
  local B, T = tgt_in.shape[1], tgt_in.shape[2]
  local e = self.tgt_emb(tgt_in)                       -- (B,T,demb)
  local state = self.att:precompute(mem)               -- keys projected once
  local h, c
  local ctx = glimpse.zeros(B, self.dmem)
  local outs = {}
  for t = 1, T do
    h, c = self.decoder(glimpse.cat({e:select(2, t), ctx}, 2), h, c)
    ctx, _, state = self.att(h, nil, nil, nil, state)
    outs[t] = self.out(glimpse.cat({h, ctx}, 2))
  end
  return glimpse.stack(outs, 2)
end

local workloads = {}

-- ---------------------------------------------------------------------------------------
-- W1: seq2seq, embedding -> bidirectional LSTM encoder -> attention decoder

local Seq2seq = nn.Module:extend("Seq2seq")

function Seq2seq:init(V)
  self.src_emb = nn.Embedding(V, 64)
  self.encoder = nn.LSTM(64, 128, {bidirectional = true})
  self.dec = AttDecoder(V, 64, 256, 256, 256)
end

function Seq2seq:forward(src, tgt_in)
  local mem = self.encoder(self.src_emb(src))
  return self.dec(tgt_in, mem)
end

function workloads.W1()
  local B, T, V = 64, 20, 32
  local model = Seq2seq(V)
  local src = input("src", randint(V, B, T))
  local tgt_in = input("tgt_in", randint(V, B, T))
  local tgt_out = input("tgt_out", randint(V, B, T))
  return model, function()
    return glimpse.cross_entropy(model(src, tgt_in), tgt_out)
  end
end

-- ---------------------------------------------------------------------------------------
-- W2: captioner, three conv3x3 + ReLU + maxpool2 blocks -> 8x8 grid -> attention decoder

local Captioner = nn.Module:extend("Captioner")

function Captioner:init(V)
  self.conv1 = nn.Conv2d(1, 32, 3, {padding = 1})
  self.conv2 = nn.Conv2d(32, 64, 3, {padding = 1})
  self.conv3 = nn.Conv2d(64, 128, 3, {padding = 1})
  self.pool = nn.MaxPool2d(2)
  self.dec = AttDecoder(V, 64, 128, 256, 256)
end

function Captioner:forward(img, tgt_in)
  local x = img
  for _, conv in ipairs({self.conv1, self.conv2, self.conv3}) do
    x = self.pool(conv(x):relu())
  end
  local B = x.shape[1]
  local mem = x:reshape(B, 128, 64):transpose(2, 3)     -- (B,64 cells,128)
  return self.dec(tgt_in, mem)
end

function workloads.W2()
  local B, T, V = 32, 8, 32
  local model = Captioner(V)
  local img = input("images", glimpse.rand(B, 1, 64, 64))
  local tgt_in = input("tgt_in", randint(V, B, T))
  local tgt_out = input("tgt_out", randint(V, B, T))
  return model, function()
    return glimpse.cross_entropy(model(img, tgt_in), tgt_out)
  end
end

-- ---------------------------------------------------------------------------------------
-- W3: pointer network over N points (teacher forcing: the decoder reads the target order)

local PointerNet = nn.Module:extend("PointerNet")

function PointerNet:init(H)
  self.embed = nn.Linear(2, H)
  self.encoder = nn.LSTM(H, H)
  self.decoder = nn.LSTM(H, H)
  self.dec_start = glimpse.empty(1, 1, H):uniform_(-1, 1):requires_grad()
  self.ptr = nn.Pointer{query = H, key = H, hidden = H}
  self.H = H
end

--- pts (B,N,2), dec_in_flat ((B*(N-1)) 1-based rows of the (B*N) embeddings) -> logits (B,N,N)
function PointerNet:forward(pts, dec_in_flat)
  local B, N, H = pts.shape[1], pts.shape[2], self.H
  local e = self.embed(pts)                                  -- (B,N,H)
  local ye, state = self.encoder(e)
  local prev = e:reshape(B * N, H):index_select(1, dec_in_flat):reshape(B, N - 1, H)
  local din = glimpse.cat({self.dec_start:expand(B, 1, H), prev}, 2)
  local yd = self.decoder(din, nil, state)
  local ps = self.ptr:precompute(ye)
  local logits = {}
  for t = 1, N do
    logits[t], _, ps = self.ptr(yd:select(2, t), nil, nil, nil, ps)
  end
  return glimpse.stack(logits, 2)
end

function workloads.W3()
  local B, N, H = 128, 10, 128
  local model = PointerNet(H)
  local pts = input("points", glimpse.rand(B, N, 2))
  -- targets: a random permutation of 1..N per row
  local perm, flat = {}, {}
  for b = 1, B do
    local p = {}
    for i = 1, N do p[i] = i end
    for i = N, 2, -1 do
      local j = math.min(math.floor(glimpse.rand(1):item() * i) + 1, i)
      p[i], p[j] = p[j], p[i]
    end
    perm[b] = p
    for t = 1, N - 1 do flat[#flat + 1] = (b - 1) * N + p[t] end   -- decoder inputs 2..N
  end
  local targets = input("targets", glimpse.tensor(perm))
  local in_idx = input("dec_in_flat", glimpse.tensor(flat))
  return model, function()
    return glimpse.cross_entropy(model(pts, in_idx), targets)
  end
end

-- ---------------------------------------------------------------------------------------
-- W4: one multi-head self-attention layer, MSE against a random target

local SelfAttention = nn.Module:extend("SelfAttention")

function SelfAttention:init(D, heads)
  self.mha = nn.MultiheadAttention(D, heads)
  -- PyTorch starts both biases at zero; random ones make the loss check cover them
  reinit(self.mha.in_proj_bias, 0.1)
  reinit(self.mha.out_proj.bias, 0.1)
end

function SelfAttention:forward(x)
  return (self.mha(x, nil, nil, nil, {need_weights = false}))   -- as the PyTorch side
end

function workloads.W4()
  local B, T, D, Hh = 32, 64, 256, 8
  local model = SelfAttention(D, Hh)
  local x = input("x", glimpse.randn(B, T, D))
  local y = input("y", glimpse.randn(B, T, D))
  return model, function()
    return glimpse.mse_loss(model(x), y)
  end
end

-- ---------------------------------------------------------------------------------------
-- W5: CNN feature extraction, inference: a batch of 8 RGB 224x224 images through VGG-16 or
-- ResNet-18 (glimpse.models, torchvision's layouts and names, classifier left out) to the
-- annotation grid a captioner attends over (VGG-16: conv5_3 after its ReLU, 14x14x512;
-- ResNet-18: layer4, 7x7x512), in evaluation mode under no_grad.  The grid is the check:
-- the PyTorch side compares its own with it (relative to the largest magnitude).

local function cnn_grid(arch)
  return function()
    local enc = glimpse.models[arch]{classifier = false}:evaluate()
    local images = input("images", glimpse.rand(8, 3, 224, 224))
    return enc, function()
      return glimpse.no_grad(function() return (enc:grid(images)) end)
    end, {inference = true, check = function(out) return {output = out:clone()} end}
  end
end
workloads["W5-vgg16"] = cnn_grid("vgg16")
workloads["W5-resnet18"] = cnn_grid("resnet18")

-- ---------------------------------------------------------------------------------------
-- W6: captioning throughput: a Show, Attend and Tell captioner for the scenes set (the small
-- CNN encoder on 64x64 grey scenes, soft additive attention, gate, deep output: the
-- Captioner's defaults) decoding 64 test scenes with beam 3 (max_len 16) in one call.  The
-- weights are the seeded initial ones (no training: the speed is the same for the same
-- caption lengths), with the attention's v drawn at random so the maps are not uniform and
-- <end> made unlikely so that every caption is 16 words long.  The check: the greedy (beam 1)
-- captions, which the PyTorch side must reproduce token for token.

workloads.W6 = function()
  local scenes = require "datasets.scenes"
  local cap = glimpse.models.Captioner{vocab = scenes.vocab(), max_len = 16,
                                       encoder = {name = "small", in_channels = 1}}
  reinit(cap.attention.v, 1 / math.sqrt(cap.config.attn_hidden))
  -- an untrained model says <end> after a word or two; with <end>'s output bias lowered every
  -- caption runs to max_len, 16 words, about a scene caption's length
  glimpse.no_grad(function() cap.out.bias[glimpse.data.Vocab.END] = -20 end)
  cap:evaluate()
  local ds = scenes.generate{split = "test", n = 64, seed = 1}
  local images = input("images", ds.images)
  local max_len = cap.config.max_len
  -- caption_maps: the decoding alone (cap:caption also checks that the images look familiar)
  return cap, function()
    return cap:caption_maps(images, {beam = 3})
  end, {inference = true, check = function()
    local _, toks = cap:caption_maps(images, {beam = 1})
    local rows = {}
    for b, t in ipairs(toks) do
      local r = {}
      for i = 1, max_len do r[i] = t[i] or 0 end         -- 1-based ids, 0 after the end
      rows[b] = r
    end
    return {greedy = glimpse.tensor(rows)}
  end, items = 64}
end

-- ---------------------------------------------------------------------------------------
-- W7, W8: a Transformer encoder-decoder the way torch.nn.Transformer lays it out (batch
-- first, post-norm, relu, dropout 0): source and target embeddings scaled by sqrt(d) plus the
-- sinusoidal positions, 2 encoder layers and a final LayerNorm, 2 decoder layers (causal
-- self-attention, attention over the memory) and a final LayerNorm, an output layer.  The
-- embeddings and the output layer are included on both sides.  Parameter names are
-- torch's (transformer.encoder.layers.0.self_attn.in_proj_weight, ...); the positions are a
-- non-persistent buffer, saved as the input "pe" so both sides add the same numbers.
-- --quick: a small model (d 32, 2 heads, ff 64, length 8, batch 4) for checking the machinery.

local function size_config()
  if QUICK then return {V = 16, d = 32, heads = 2, ff = 64, layers = 2, S = 8, T = 8, B = 4} end
  return {V = 512, d = 256, heads = 8, ff = 1024, layers = 2, S = 64, T = 64, B = 32}
end

local Stack = nn.Module:extend("Stack")          -- torch's TransformerEncoder / Decoder

function Stack:init(layers, d)
  self.layers = nn.ModuleList(layers)
  self.norm = nn.LayerNorm(d)
end

local Core = nn.Module:extend("Core")            -- torch.nn.Transformer's two stacks

function Core:init(c)
  local lo = {dim_feedforward = c.ff, dropout = 0}
  local enc, dec = {}, {}
  for i = 1, c.layers do
    enc[i] = nn.TransformerEncoderLayer(c.d, c.heads, lo)
    dec[i] = nn.TransformerDecoderLayer(c.d, c.heads, lo)
  end
  self.encoder = Stack(enc, c.d)
  self.decoder = Stack(dec, c.d)
end

local Seq2seqTransformer = nn.Module:extend("Seq2seqTransformer")

function Seq2seqTransformer:init(c)
  self.c = c
  self.src_emb = nn.Embedding(c.V, c.d)
  self.tgt_emb = nn.Embedding(c.V, c.d)
  self.pos = nn.PositionalEncoding(c.d, {max_len = math.max(c.S, c.T) + 1})
  self.transformer = Core(c)
  self.out = nn.Linear(c.d, c.V)
end

--- src (B,S) 1-based ids -> memory (B,S,d), after the encoder's final norm
function Seq2seqTransformer:encode(src)
  local x = self.pos(self.src_emb(src) * math.sqrt(self.c.d))
  for _, layer in ipairs(self.transformer.encoder.layers) do x = layer(x) end
  return self.transformer.encoder.norm(x)
end

--- tgt_in (B,T) 1-based ids, src (B,S) -> logits (B,T,V) (teacher forcing, causal)
function Seq2seqTransformer:forward(src, tgt_in)
  local mem = self:encode(src)
  local y = self.pos(self.tgt_emb(tgt_in) * math.sqrt(self.c.d))
  for _, layer in ipairs(self.transformer.decoder.layers) do y = layer(y, mem, {causal = true}) end
  return self.out(self.transformer.decoder.norm(y))
end

--- greedy decoding of T tokens from <start> = id 1 through the decoder layers' key/value
--- caches (nn.TransformerDecoderLayer:init_cache / :step): each step runs one new row per
--- layer.  -> (B,T) the 1-based ids, as floats
function Seq2seqTransformer:greedy(src, T)
  return glimpse.no_grad(function()
    local mem = self:encode(src)
    local layers = self.transformer.decoder.layers
    local caches = {}
    for i, layer in ipairs(layers) do caches[i] = layer:init_cache(mem) end
    local B, V, scale = src.shape[1], self.c.V, math.sqrt(self.c.d)
    local tok = glimpse.zeros(B, 1) + 1
    local out = {}
    for t = 1, T do
      local x = self.pos(self.tgt_emb(tok) * scale, t - 1)
      for i, layer in ipairs(layers) do
        x, _, caches[i] = layer:step(x, nil, caches[i], {q_start = t - 1})
      end
      out[t] = self.out(self.transformer.decoder.norm(x)):reshape(B, V):argmax(2)
      tok = out[t]:reshape(B, 1)
    end
    return glimpse.stack(out, 2)
  end)
end

local function transformer_setup()
  local c = size_config()
  local model = Seq2seqTransformer(c)
  -- the sizes the PyTorch side builds its model from (heads are in no weight's shape)
  inputs.config = glimpse.tensor({c.V, c.d, c.heads, c.ff, c.layers, c.S, c.T, c.B})
  inputs.pe = model.pos.pe:narrow(1, 1, math.max(c.S, c.T)):clone()
  return model, c
end

function workloads.W7()
  local model, c = transformer_setup()
  local src = input("src", randint(c.V, c.B, c.S))
  local tgt_in = input("tgt_in", randint(c.V, c.B, c.T))
  local tgt_out = input("tgt_out", randint(c.V, c.B, c.T))
  return model, function()
    return glimpse.cross_entropy(model(src, tgt_in), tgt_out)
  end
end

-- W8: greedy decoding of T = 64 tokens for a batch of 32 sources (W7's model, evaluation
-- mode, no tape).  The check: the tokens, which the PyTorch side (recomputing the prefix at
-- every step: torch.nn.Transformer has no cache) must reproduce.
function workloads.W8()
  local model, c = transformer_setup()
  model:evaluate()
  local src = input("src", randint(c.V, c.B, c.S))
  return model, function() return model:greedy(src, c.T) end,
    {inference = true, items = c.B, check = function(out) return {greedy = out:clone()} end}
end

-- ---------------------------------------------------------------------------------------
-- S1, S2: one matrix product, no autograd

local function sgemm(m, k, n)
  return function()
    local a = input("a", glimpse.randn(m, k))
    local b = input("b", glimpse.randn(k, n))
    return nil, function() return a:matmul(b) end
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

local comm_s = 0                 -- --dist: seconds in the gradient allreduce (with its wait)
local REPEATS = 20               -- --dist: allreduces of the bucket alone, timed after a barrier

local function main()
  local make = workloads[W]
  if not make then error("unknown workload " .. tostring(W)) end
  if THREADS then glimpse.set_num_threads(THREADS) end
  glimpse.manual_seed(1234)
  local model, step_fn, how = make()
  how = how or {}
  local loss1, one, bucket
  if how.inference then
    one = step_fn
    local out = one()
    loss1 = glimpse.is_tensor(out) and out:sum():item() or 0
    if SAVE then
      local t = model:state_dict()
      for n, x in pairs(inputs) do t["input." .. n] = x end
      for n, x in pairs(how.check(out)) do t["check." .. n] = x end
      glimpse.save(SAVE, t)
    end
  elseif SAVE then
    local t = model and model:state_dict() or {}
    for n, x in pairs(inputs) do t["input." .. n] = x end
    glimpse.save(SAVE, t)
  end
  if how.inference then
    -- one() is the inference call itself; loss1 is the sum of its output
  elseif not model then
    one = step_fn
    loss1 = one():sum():item()
  else
    local opt = glimpse.optim.Adam(model:parameters(), {lr = 1e-3})
    bucket = DIST and dist.GradBucket(model:parameters())
    comm_s = 0
    one = function()
      opt:zero_grad()
      if bucket then bucket:attach() end
      local loss = step_fn()
      loss:backward()
      local value                -- with --dist: the loss of the whole global batch
      if bucket then
        local t = glimpse.clock()
        value = select(2, bucket:average(shard_rows, loss:item()))
        comm_s = comm_s + glimpse.clock() - t
      end
      opt:step()
      return value or loss:item()
    end
    if DIST then for _, p in ipairs(model:parameters()) do dist.broadcast(p, 0) end end
    loss1 = one()
  end
  one()   -- warm-up
  collectgarbage()
  local t0, c0 = glimpse.clock(), os.clock()
  comm_s = 0
  for _ = 1, STEPS do one() end
  local ms = (glimpse.clock() - t0) * 1000 / STEPS
  local cpu_ms = (os.clock() - c0) * 1000 / STEPS     -- CPU time of all threads
  -- --dist: the allreduce of the gradient bucket alone, every rank ready (after a barrier),
  -- so the communication shows apart from the wait for a slower rank
  local bucket_ms
  if bucket then
    local s = 0
    for _ = 1, REPEATS do
      dist.barrier()
      local t = glimpse.clock()
      dist.allreduce(bucket.flat, "sum")
      s = s + glimpse.clock() - t
    end
    bucket_ms = s * 1000 / REPEATS
  end
  if rank ~= 0 then return end
  local prof
  if PROFILE then
    glimpse.blas_profile(true)
    glimpse.cpu_profile(true, 200)
    local t, n = glimpse.clock(), 0
    repeat one(); n = n + 1 until n >= STEPS and glimpse.clock() - t >= 2
    local wall = glimpse.clock() - t
    local p = glimpse.cpu_profile(false)
    local b = glimpse.blas_profile(false)
    local total = math.max(p.samples, 1)
    prof = {steps = n, ms_per_step = wall * 1000 / n, samples = p.samples, top = p.top,
            blas_calls_per_step = b.calls / n, blas_ms_per_step = b.seconds * 1000 / n,
            blas_gflops = b.seconds > 0 and b.flops / b.seconds / 1e9 or nil,
            blas_share_timed = b.seconds / wall}
    for _, c in ipairs({"blas", "memory", "engine", "lua", "other"}) do
      prof[c] = p[c] / total
    end
    for _, f in ipairs(p.top) do f.share = f.samples / total end
  end
  io.write(cjson.encode({side = "glimpse", workload = W, loss1 = loss1, ms_per_step = ms,
                         cpu_ms_per_step = cpu_ms, ranks = size,
                         allreduce_ms_per_step = DIST and comm_s * 1000 / STEPS or nil,
                         bucket_allreduce_ms = bucket_ms,
                         bucket_mb = bucket and bucket.flat:numel() * 4 / 2 ^ 20 or nil,
                         steps = STEPS, vmhwm_kb = vmhwm(), threads = glimpse.get_num_threads(),
                         items = how.items, profile = prof}),
           "\n")
end

main()
