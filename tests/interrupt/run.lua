-- tests/interrupt/run.lua -- run by tests/test_interrupt.lua, alone and under `mpirun -np 2`:
-- an MLP with batch norm and dropout trained by the Trainer (resuming from its checkpoint),
-- so that a run interrupted by SIGINT at random moments and resumed each time can be
-- compared bit for bit with a straight one.
--   glimpse tests/interrupt/run.lua DIR STEPS [--distributed] [--go STEP MS]
-- DIR/ck.safetensors the checkpoint; DIR/params.safetensors the parameters at the end
-- (rank 0); DIR/pid.RANK this rank's process id; DIR/ready once the model is made and
-- DIR/go after step STEP (rank 0), for the test to time its signal.  From step STEP on,
-- every loss takes MS milliseconds more (a busy loop), so that the signal lands in one of
-- the next steps even when it is slow to come (mpirun passes Ctrl-C on a second later).
-- Prints "RESULT stopped interrupted steps #losses #evals seconds" on rank 0.
local glimpse = require "glimpse"
local nn = glimpse.nn

local dir, steps = arg[1], math.tointeger(tonumber(arg[2]))
local distributed, go, slow_ms = false, nil, 0
for i = 3, #arg do
  if arg[i] == "--distributed" then distributed = true end
  if arg[i] == "--go" then
    go, slow_ms = math.tointeger(tonumber(arg[i + 1])), tonumber(arg[i + 2])
  end
end
local rank = distributed and glimpse.dist.init() or 0

local function write(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end
write(dir .. "/pid." .. rank, io.open("/proc/self/stat"):read("l"):match("^(%d+)"))

glimpse.set_num_threads(1)
-- 45 examples of 8 features, 3 classes; a global batch of 15 (8 and 7 on two ranks), so the
-- last batch of each epoch is full and the shards differ in size
glimpse.manual_seed(5)
local X = glimpse.randn(45, 8)
local Y = X:narrow(2, 1, 3):argmax(2)
local data = {n = 45, collate = function(_, idx)
  local xs, ys = {}, {}
  for k, i in ipairs(idx) do xs[k], ys[k] = X[i], Y[i]:item() end
  return {x = glimpse.stack(xs, 1), y = ys}
end}

glimpse.manual_seed(1)
local net = nn.Sequential{nn.Linear(8, 128), nn.BatchNorm1d(128), nn.ReLU(), nn.Dropout(0.2),
                          nn.Linear(128, 128), nn.BatchNorm1d(128), nn.ReLU(), nn.Linear(128, 3)}
local slow = false
net.loss = function(self, b)
  local loss = glimpse.cross_entropy(self(b.x), b.y)
  local t = os.clock()
  while slow and os.clock() - t < slow_ms / 1000 do end
  return loss
end
if rank == 0 then write(dir .. "/ready", "") end

local h = glimpse.train.Trainer{
  model = net, data = data, batch_size = 15, seed = 3, steps = steps, progress = false,
  optimizer = {"Adam", lr = 3e-3}, schedule = {"CosineAnnealingLR"}, clip = 1, log_every = 7,
  eval_every = 25, evaluate = function(m) return {r = glimpse.rand(1):item()} end,
  checkpoint = dir .. "/ck.safetensors", distributed = distributed,
  on_step = function(_, step)
    if step == go then
      slow = true
      if rank == 0 then write(dir .. "/go", "") end
    end
  end,
}:fit()
if rank == 0 then
  glimpse.save(dir .. "/params.safetensors", net:state_dict())
  print(string.format("RESULT %s %s %d %d %d %.4f", h.stopped, tostring(h.interrupted),
                      h.steps, #h.losses, #h.evals, h.seconds))
end
