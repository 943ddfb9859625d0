--- scripts/fashion_mnist.lua -- a small CNN classifier on Fashion-MNIST (Xiao et al. 2017),
-- the end-to-end check of glimpse's conv, pooling, batch norm and Linear layers.
--
--   glimpse scripts/fashion_mnist.lua                      # 3 epochs, about 2-4 minutes on 2 cores
--   glimpse scripts/fashion_mnist.lua --epochs 1 --limit 5000 --test-limit 1000   # a quick look
--
-- Model: conv3x3(1->c1)-BN-ReLU-maxpool2 -> conv3x3(c1->c2)-BN-ReLU-maxpool2 -> flatten ->
-- Linear(c2*7*7 -> hidden)-ReLU-Dropout -> Linear(hidden -> 10), trained with Adam on
-- cross-entropy.  Prints a one-line configuration header, progress (glimpse.progress: one
-- redrawn line on a terminal, a line every --log-every steps in a log) with the rate and the
-- ETA of the training steps, the test accuracy after each epoch, and writes results.json
-- (configuration, per-epoch numbers, timing, machine load), model.safetensors (the
-- state_dict, loadable by PyTorch under the same names) and run.json (the command) to the
-- --out folder, named at the end.
local glimpse = require "glimpse"
local argparse = require "argparse"
local fm = require "datasets.fashion_mnist"

local nn, progress, util = glimpse.nn, glimpse.progress, glimpse.util

local parser = argparse("fashion_mnist", "Train a small CNN on Fashion-MNIST.")
parser:option("--epochs", "Training epochs.", "3"):convert(tonumber)
parser:option("--batch", "Batch size.", "64"):convert(tonumber)
parser:option("--lr", "Adam learning rate.", "2e-3"):convert(tonumber)
parser:option("--lr-decay", "Learning rate factor per epoch.", "0.5"):convert(tonumber)
parser:option("--channels", "Conv channels c1,c2.", "16,32")
parser:option("--hidden", "Hidden units of the classifier.", "128"):convert(tonumber)
parser:option("--dropout", "Dropout before the last layer.", "0.25"):convert(tonumber)
parser:option("--limit", "Use only the first N training images.", nil):convert(tonumber)
parser:option("--test-limit", "Use only the first N test images.", nil):convert(tonumber)
parser:option("--threads", "BLAS threads.", "2"):convert(tonumber)
parser:option("--seed", "Random seed.", "1"):convert(tonumber)
parser:option("--time-limit", "Stop training after this many seconds.", "290"):convert(tonumber)
parser:option("--log-every", "Steps between progress lines.", "100"):convert(tonumber)
parser:option("--out", "Output folder.", "out/fashion_mnist")
local args = parser:parse()

local c1, c2 = args.channels:match("^(%d+),(%d+)$")
if not c1 then parser:error("--channels must be two integers like 16,32") end
c1, c2 = math.tointeger(tonumber(c1)), math.tointeger(tonumber(c2))

glimpse.manual_seed(args.seed)
math.randomseed(args.seed)
glimpse.set_num_threads(args.threads)

-- the optimizer: glimpse.optim when it is there, a small local Adam otherwise
local function local_adam(params, lr)
  local m, v, t = {}, {}, 0
  local opt = {lr = lr}
  for i, p in ipairs(params) do m[i], v[i] = glimpse.zeros(table.unpack(p.shape)), glimpse.zeros(table.unpack(p.shape)) end
  function opt:zero_grad()
    for _, p in ipairs(params) do p:zero_grad() end
  end
  function opt:step()
    t = t + 1
    local b1, b2, eps = 0.9, 0.999, 1e-8
    local c1c, c2c = 1 - b1 ^ t, 1 - b2 ^ t
    glimpse.no_grad(function()
      for i, p in ipairs(params) do
        local g = p.grad
        if g then
          m[i] = m[i] * b1 + g * (1 - b1)
          v[i] = v[i] * b2 + g * g * (1 - b2)
          p:add_((m[i] / c1c) / ((v[i] / c2c):sqrt() + eps), -self.lr)
        end
      end
    end)
  end
  function opt:set_lr(x) self.lr = x end
  return opt, "local Adam (glimpse.optim not found)"
end

local function make_optimizer(params, lr)
  if package.searchpath("glimpse.optim", package.path) then
    local opt = glimpse.optim.Adam(params, {lr = lr})
    return opt, "glimpse.optim.Adam"
  end
  return local_adam(params, lr)
end

local function set_lr(opt, lr)
  if opt.param_groups then
    for _, g in ipairs(opt.param_groups) do g.lr = lr end
  else
    opt:set_lr(lr)
  end
end

-- ---------------------------------------------------------------------------------------
-- data

local MEAN, STD = 0.2860, 0.3530          -- Fashion-MNIST training-set pixel statistics
local t_load = glimpse.clock()
local train_x, train_y = fm.load("train", {limit = args.limit})
local test_x, test_y = fm.load("test", {limit = args.test_limit})
train_x = (train_x - MEAN) / STD
test_x = (test_x - MEAN) / STD
local n_train, n_test = train_x:size(1), test_x:size(1)
t_load = glimpse.clock() - t_load

-- ---------------------------------------------------------------------------------------
-- model

local model = nn.Sequential{
  nn.Conv2d(1, c1, 3, {padding = 1}), nn.BatchNorm2d(c1), nn.ReLU(), nn.MaxPool2d(2),
  nn.Conv2d(c1, c2, 3, {padding = 1}), nn.BatchNorm2d(c2), nn.ReLU(), nn.MaxPool2d(2),
  nn.Flatten(),
  nn.Linear(c2 * 7 * 7, args.hidden), nn.ReLU(), nn.Dropout(args.dropout),
  nn.Linear(args.hidden, 10),
}
local opt, opt_name = make_optimizer(model:parameters(), args.lr)

local steps_per_epoch = (n_train + args.batch - 1) // args.batch
local total_steps = steps_per_epoch * args.epochs
print(string.format("fashion_mnist: train %d, test %d, epochs %d, batch %d, Adam lr %g (x%g/epoch), " ..
                    "channels %d,%d, hidden %d, dropout %g, %d params, threads %d, seed %d, %s, " ..
                    "time limit %ds", n_train, n_test, args.epochs, args.batch, args.lr,
                    args.lr_decay, c1, c2, args.hidden, args.dropout, model:num_parameters(),
                    args.threads, args.seed, opt_name, args.time_limit))

-- accuracy (and mean loss) over a set, in evaluation mode, without a graph
local function evaluate(x, y)
  model:evaluate()
  local correct, loss_sum, n = 0, 0, x:size(1)
  glimpse.no_grad(function()
    for i = 1, n, 500 do
      local len = math.min(500, n - i + 1)
      local logits = model(x:narrow(1, i, len))
      local yy = y:narrow(1, i, len)
      loss_sum = loss_sum + glimpse.cross_entropy(logits, yy, {reduction = "sum"}):item()
      correct = correct + logits:argmax(2):eq(yy):sum():item()
    end
  end)
  model:train()
  return correct / n, loss_sum / n
end

local function permutation(n)
  local p = {}
  for i = 1, n do p[i] = i end
  for i = n, 2, -1 do
    local j = math.random(i)
    p[i], p[j] = p[j], p[i]
  end
  return p
end

-- ---------------------------------------------------------------------------------------
-- training

local history = {}
local clock = util.Timer()                -- everything after loading (the time limit)
local step, stopped_early = 0, false
local train_seconds = 0                   -- training steps only (the rate and the ETA)
local load_before = util.loadavg()
local bar = progress.Bar{total = total_steps, label = "train", every = args.log_every,
                        unit = "img", unit_scale = args.batch,
                        fields = {"epoch", "loss", "train acc"},
                        formats = {loss = "%.4f", ["train acc"] = "%5.1f%%"}}
for epoch = 1, args.epochs do
  set_lr(opt, args.lr * args.lr_decay ^ (epoch - 1))
  model:train()
  local order = permutation(n_train)
  local loss_sum, correct, seen = 0, 0, 0
  local t_epoch = glimpse.clock()
  for b = 1, steps_per_epoch do
    local first = (b - 1) * args.batch + 1
    local len = math.min(args.batch, n_train - first + 1)
    local idx = table.move(order, first, first + len - 1, 1, {})
    local x, y = train_x:index_select(1, idx), train_y:index_select(1, idx)
    opt:zero_grad()
    local logits = model(x)
    local loss = glimpse.cross_entropy(logits, y)
    loss:backward()
    opt:step()
    step = step + 1
    local l = loss:item()
    loss_sum = loss_sum + l * len
    seen = seen + len
    correct = correct + glimpse.no_grad(function() return logits:argmax(2):eq(y):sum():item() end)
    bar:update(step, {epoch = string.format("%d/%d", epoch, args.epochs), loss = loss_sum / seen,
                      ["train acc"] = 100 * correct / seen})
    if clock:elapsed() > args.time_limit then
      stopped_early = true
      break
    end
  end
  local train_time = glimpse.clock() - t_epoch
  train_seconds = train_seconds + train_time
  bar:show()                              -- the epoch's last step, whatever --log-every says
  bar:pause()                             -- the rate and ETA count training steps only
  local acc, test_loss = evaluate(test_x, test_y)
  bar:resume()
  history[#history + 1] = {epoch = epoch, train_loss = loss_sum / seen, train_acc = correct / seen,
                           test_acc = acc, test_loss = test_loss, seconds = train_time,
                           images = seen}
  bar:print(string.format("epoch %d: test accuracy %.2f%% (loss %.4f), train %.2f%%, %.1fs",
                          epoch, 100 * acc, test_loss, 100 * correct / seen, train_time))
  if stopped_early then
    bar:print(string.format("stopped: time limit of %ds reached", args.time_limit))
    break
  end
end
bar:finish()
local total = clock:elapsed()
local final = history[#history]

-- ---------------------------------------------------------------------------------------
-- results

local blas = glimpse.blas_info()
local results = {
  config = {epochs = args.epochs, batch = args.batch, lr = args.lr, lr_decay = args.lr_decay,
            channels = {c1, c2}, hidden = args.hidden, dropout = args.dropout,
            train_images = n_train, test_images = n_test, threads = args.threads,
            seed = args.seed, optimizer = opt_name, parameters = model:num_parameters()},
  model = tostring(model),
  history = history,
  test_accuracy = final.test_acc,
  seconds_training_and_eval = total,
  seconds_loading = t_load,
  steps = step,
  seconds_training = train_seconds,
  training_images_per_second = step * args.batch / train_seconds,
  stopped_early = stopped_early,
  machine = {blas_core = blas.core, blas_threads = blas.threads,
             loadavg_before = load_before, loadavg_after = util.loadavg(),
             peak_rss_kb = util.peak_rss_kb()},
}
util.output_dir(args.out, results.config)
util.write_json(args.out .. "/results.json", results, {indent = 2})
glimpse.save(args.out .. "/model.safetensors", model:state_dict(),
             {config = util.json_encode(results.config),
              test_accuracy = string.format("%.4f", final.test_acc)})
print(string.format("final test accuracy %.2f%% after %.0fs (%.0fs loading); results in %s/ " ..
                    "(results.json, model.safetensors, run.json)", 100 * final.test_acc, total, t_load, args.out))
