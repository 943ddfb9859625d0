--- scripts/fashion_mnist.lua -- a small CNN classifier on Fashion-MNIST (Xiao et al. 2017),
-- the end-to-end check of glimpse's conv, pooling, batch norm and Linear layers.
--
--   glimpse scripts/fashion_mnist.lua                      # 3 epochs, about 2-4 minutes on 2 cores
--   glimpse scripts/fashion_mnist.lua --epochs 1 --limit 5000 --test-limit 1000   # a quick look
--
-- Model: conv3x3(1->c1)-BN-ReLU-maxpool2 -> conv3x3(c1->c2)-BN-ReLU-maxpool2 -> flatten ->
-- Linear(c2*7*7 -> hidden)-ReLU-Dropout -> Linear(hidden -> 10), trained by glimpse.train's
-- Trainer with Adam on cross-entropy, the learning rate times --lr-decay after each epoch.
-- Prints the configuration, progress, the test accuracy after each epoch, and writes
-- results.json (configuration, per-epoch numbers, timing, machine load), model.safetensors
-- (the state_dict, loadable by PyTorch under the same names), run.json and index.html to the
-- --out folder, named at the end.
local glimpse = require "glimpse"
local fm = require("glimpse").data.fashion_mnist
local nn, experiment, util = glimpse.nn, glimpse.experiment, glimpse.util

local parser = experiment.parser("fashion_mnist", "Train a small CNN on Fashion-MNIST.",
  {threads = 2, time_limit = 290, log_every = 100, steps = 0,
   quick = {epochs = 1, limit = 5000, test_limit = 1000}})
parser:option("--epochs", "training epochs (--steps 0: all of them)", "3"):convert(tonumber)
experiment.add_flags(parser, {batch = 64, hidden = {128, "hidden units of the classifier"},
                              lr = {2e-3, "Adam learning rate"}})
parser:option("--lr-decay", "learning rate factor per epoch", "0.5"):convert(tonumber)
parser:option("--channels", "conv channels c1,c2", "16,32")
parser:option("--dropout", "dropout before the last layer", "0.25"):convert(tonumber)
parser:option("--limit", "use only the first N training images"):convert(tonumber)
parser:option("--test-limit", "use only the first N test images"):convert(tonumber)
experiment.int_flags(parser, {epochs = 1, limit = 1, test_limit = 1})
local args = experiment.parse(parser)
local channels = experiment.int_list(parser, "--channels", args.channels, 1)
if #channels ~= 2 then parser:error("--channels must be two integers like 16,32") end
local c1, c2 = channels[1], channels[2]

-- data: pixels standardised with the training set's statistics
local MEAN, STD = 0.2860, 0.3530
local load_timer = util.Timer()
local train_x, train_y = fm.load("train", {limit = args.limit})
local test_x, test_y = fm.load("test", {limit = args.test_limit})
train_x, test_x = (train_x - MEAN) / STD, (test_x - MEAN) / STD
local t_load = load_timer:elapsed()
local train = {n = train_x:size(1), collate = function(_, idx)
  return {x = train_x:index_select(1, idx), y = train_y:index_select(1, idx)}
end}
local steps_per_epoch = (train.n + args.batch - 1) // args.batch
args.steps = args.steps > 0 and args.steps or steps_per_epoch * args.epochs

local config = {epochs = args.epochs, batch = args.batch, lr = args.lr, lr_decay = args.lr_decay,
                channels = {c1, c2}, hidden = args.hidden, dropout = args.dropout,
                train_images = train.n, test_images = test_x:size(1), threads = args.threads,
                seed = args.seed, optimizer = "glimpse.optim.Adam"}
local run = experiment.start(args, {name = "fashion_mnist", config = config})
local model = nn.Sequential{
  nn.Conv2d(1, c1, 3, {padding = 1}), nn.BatchNorm2d(c1), nn.ReLU(), nn.MaxPool2d(2),
  nn.Conv2d(c1, c2, 3, {padding = 1}), nn.BatchNorm2d(c2), nn.ReLU(), nn.MaxPool2d(2),
  nn.Flatten(),
  nn.Linear(c2 * 7 * 7, args.hidden), nn.ReLU(), nn.Dropout(args.dropout),
  nn.Linear(args.hidden, 10),
}
config.parameters = run:count_params(model)

-- accuracy and mean loss over the test set, in batches of 500
local function test_set(m)
  local correct, loss_sum, n = 0, 0, test_x:size(1)
  for i = 1, n, 500 do
    local len = math.min(500, n - i + 1)
    local logits, y = m(test_x:narrow(1, i, len)), test_y:narrow(1, i, len)
    loss_sum = loss_sum + glimpse.cross_entropy(logits, y, {reduction = "sum"}):item()
    correct = correct + logits:argmax(2):eq(y):sum():item()
  end
  return correct / n, loss_sum / n
end

local load_before, trainer = util.loadavg(), nil
trainer = glimpse.train.Trainer(run:trainer_options{
  model = model, optimizer = {"Adam", lr = args.lr}, data = train, batch_size = args.batch,
  schedule = {"StepLR", step_size = steps_per_epoch, gamma = args.lr_decay},
  progress = {unit = "img", unit_scale = args.batch, fields = {"epoch", "loss", "acc"},
              formats = {loss = "%.4f", acc = "%.3f"}},
  loss = function(m, b)
    local logits = m(b.x)
    local acc = glimpse.no_grad(function() return logits:argmax(2):eq(b.y):mean():item() end)
    return glimpse.cross_entropy(logits, b.y), {acc = acc}
  end,
  eval_every = steps_per_epoch,
  evaluate = function(m, step)
    local acc, loss = test_set(m)
    return {epoch = step / steps_per_epoch, test_acc = acc, test_loss = loss,
            train_acc = trainer.ema_stats.acc}
  end,
  format_eval = function(e)
    return string.format("epoch %.4g: test accuracy %.2f%% (loss %.4f), train %.2f%%", e.epoch,
                         100 * e.test_acc, e.test_loss, 100 * e.train_acc)
  end,
})
local history = trainer:fit()
if not run:is_root() then return end  -- data parallel: rank 0 alone tests and writes
local final = history.evals[#history.evals]

local results = {
  config = config, model = tostring(model), history = history.evals,
  test_accuracy = final.test_acc, seconds_training_and_eval = run:seconds() - t_load,
  seconds_loading = t_load, steps = history.steps, seconds_training = history.seconds,
  training_images_per_second = history.steps * args.batch / history.seconds,
  stopped_early = history.stopped ~= "steps",
  machine = {blas_core = glimpse.blas_info().core, blas_threads = glimpse.blas_info().threads,
             loadavg_before = load_before, loadavg_after = util.loadavg(),
             peak_rss_kb = util.peak_rss_kb()},
}
run:write_run_json()
run:write_metrics(results, "results.json")
glimpse.save(run:path("model.safetensors"), model:state_dict(),
             {config = util.json_encode(config), test_accuracy = string.format("%.4f", final.test_acc)})
run:write_report{title = "Fashion-MNIST CNN", history = history, charts = {"test_acc"},
                 summary = {test_accuracy = final.test_acc, steps = history.steps,
                            seconds_training = history.seconds}}
print(string.format("final test accuracy %.2f%% after %.0fs (%.0fs loading); results in %s/ " ..
                    "(results.json, model.safetensors, run.json, index.html)",
                    100 * final.test_acc, run:seconds(), t_load, run.dir))
