-- tests/dist/batchnorm.lua -- run by tests/test_dist.lua, alone and under `mpirun -np 2`: a
-- small network with BatchNorm2d (in a residual block too, so that the graph branches around
-- batch norms) and BatchNorm1d trained by the Trainer on a global batch of 16; rank 0 writes the parameters and the running statistics after the run, so the test
-- can compare data-parallel training (synchronised batch norm) with one process.
--   glimpse tests/dist/batchnorm.lua OUT STEPS [--distributed] [--no-sync]
local glimpse = require "glimpse"
local nn = glimpse.nn

local out, steps = arg[1], math.tointeger(tonumber(arg[2]))
local distributed, sync = false, true
for i = 3, #arg do
  if arg[i] == "--distributed" then distributed = true end
  if arg[i] == "--no-sync" then sync = false end
end

glimpse.set_num_threads(1)
-- 64 images 2x4x4, 3 classes
glimpse.manual_seed(2)
local X = glimpse.randn(64, 2, 4, 4) * 2 + 1
local Y = X:reshape(64, 32):narrow(2, 1, 3):argmax(2)
local data = {n = 64, collate = function(_, idx)
  local xs, ys = {}, {}
  for k, i in ipairs(idx) do xs[k], ys[k] = X[i], Y[i]:item() end
  return {x = glimpse.stack(xs, 1), y = ys}
end}

glimpse.manual_seed(1)
local Net = nn.Module:extend("BatchNormTestNet")
function Net:init()
  self.conv = nn.Conv2d(2, 4, 3, {padding = 1})
  self.bn2 = nn.BatchNorm2d(4)
  self.res_conv1 = nn.Conv2d(4, 4, 3, {padding = 1, bias = false})
  self.res_bn1 = nn.BatchNorm2d(4)
  self.res_conv2 = nn.Conv2d(4, 4, 3, {padding = 1, bias = false})
  self.res_bn2 = nn.BatchNorm2d(4)
  self.fc = nn.Linear(64, 32)
  self.bn1 = nn.BatchNorm1d(32)
  self.out = nn.Linear(32, 3)
end
function Net:forward(x)
  local h = self.bn2(self.conv(x)):relu()
  local r = self.res_bn1(self.res_conv1(h)):relu()
  h = (self.res_bn2(self.res_conv2(r)) + h):relu()              -- a residual block
  h = self.bn1(self.fc(h:reshape(x.shape[1], 64))):relu()
  return self.out(h)
end
-- a mean weighted by example (weights 2 to 4), normalised by the stat `tokens` as a loss over
-- tokens is: the ranks' shards then weigh unequally, as they do in a sequence model
function Net:loss(b)
  local ce = glimpse.cross_entropy(self(b.x), b.y, {reduction = "none"})
  local w, total = {}, 0
  for i, y in ipairs(b.y) do w[i] = 1 + y; total = total + w[i] end
  return (ce * glimpse.tensor(w)):sum() / total, {tokens = total}
end
local model = Net()

local h = glimpse.train.Trainer{
  model = model, data = data, batch_size = 16, seed = 1, steps = steps, progress = false,
  optimizer = {"SGD", lr = 0.1, momentum = 0.9}, distributed = distributed,
  sync_batchnorm = sync,
}:fit()
if glimpse.dist.is_root() then glimpse.save(out, model:state_dict()) end
print(string.format("rank %d of %d: %d steps, loss %.6f, %.3f s", glimpse.dist.rank(),
                    glimpse.dist.size(), h.steps, h.losses[#h.losses].loss, h.seconds))
