-- scripts/pointer.lua -- pointer networks (Vinyals et al. 2015) on the planar problems of
-- datasets/points.lua: sorting points, their convex hull, and the travelling salesman
-- problem with exact tours (Held-Karp in the engine, n <= 20).  The model is glimpse.models.PointerNet: an LSTM
-- encoder over the points after a learned "end" slot, an LSTM decoder fed with the chosen
-- point, nn.Pointer's distribution over the input positions as the output (eq. 3); chosen
-- positions are masked, so every decoded tour is valid (the paper's constrained search).
--
--   glimpse scripts/pointer.lua --task sort --n 10 --quick          (about a minute)
--   glimpse scripts/pointer.lua --task hull --n-min 5 --n-max 50 --test-n 5,10,50
--   glimpse scripts/pointer.lua --task tsp --n 10 --beam 5 --time-limit 600
--   glimpse scripts/pointer.lua --task tsp --n 20 --train 10000 --label-cache out/cache/tsp
--   glimpse scripts/pointer.lua --task tsp --n 5 --paper              (SGD lr 1, clip 2, U(-0.08,0.08))
--   glimpse scripts/pointer.lua --task hull --n 10 --glimpses 1 --cosine  (since the paper)
-- Validation every --epoch-steps steps; at the end greedy and beam decoding of the test sets
-- (exact sequences, hull area coverage, tsp tour length against the optimum).  Writes
-- metrics.json, run.json, model.safetensors, index.html, instance_K.png, attention_K.png.
local glimpse = require "glimpse"
local figures, viewer_data = require "glimpse.plot.figures", require "glimpse.lab.viewer_data"
local experiment, util = glimpse.experiment, glimpse.util
local points, Rng, eval = glimpse.data.points, glimpse.data.Rng, glimpse.models.eval

local parser = experiment.parser("pointer", "Train a pointer network on sort / convex hull / TSP.",
  {steps = 20000, time_limit = 300, out = false,
   quick = {steps = 2000, time_limit = 60, valid = 200, test = 200, eval_every = 100}})
-- the model's options as flags (--task, --emb, --hidden, --attn-hidden, --glimpses, --logit-clip)
local Ptr = glimpse.models.PointerNet
local MODEL_FLAGS = {"task", "emb", "hidden", "attn_hidden", "glimpses", "logit_clip"}
experiment.add_flags(parser, Ptr.options, MODEL_FLAGS, {
  task = {default = "sort", help = "the problem (when the end slot opens)"},
  emb = {help = "point embedding size"}, hidden = {help = "LSTM size (the paper: 256 or 512)"},
  attn_hidden = {help = "pointer hidden size (default: --hidden)"},
  glimpses = {help = "attention reads before pointing (Bello et al. 2016)"},
  logit_clip = {help = "pointer scores C tanh(u) (Bello et al. 2016: 10; 0 off)"}})
parser:option("--n", "points per example", "10"):convert(tonumber)
parser:option("--n-min", "mixed sizes: fewest points (with --n-max)"):convert(tonumber)
parser:option("--n-max", "mixed sizes: most points (with --n-min)"):convert(tonumber)
parser:option("--mix-sizes", "mixed sizes, fresh batches: a size per example (padded to the "
              .. "largest) or per batch", "example"):choices({"example", "batch"})
parser:option("--test-n", "comma-separated sizes of extra test sets (default: none)")
parser:option("--train", "fixed training examples (0: a fresh batch every step; the default, "
              .. "but 30000 for tsp above 12 cities, whose exact tours take ms each)"):convert(tonumber)
parser:option("--label-cache", "tsp: a folder keeping the sets' exact tours (read back when they match)")
parser:option("--valid", "validation examples (every epoch, greedy)", "500"):convert(tonumber)
parser:option("--test", "test examples per test set (greedy and beam)", "1000"):convert(tonumber)
experiment.add_flags(parser, {batch = 128, load = false, clip = {2, "gradient-norm clip"},
  lr = {0.001, "Adam learning rate (--paper: SGD 1.0)"}, beam = 5})
parser:flag("--paper", "the paper's recipe: SGD lr 1.0, clip 2.0, init uniform(-0.08, 0.08)")
parser:flag("--cosine", "cosine learning-rate schedule down to 0 over --steps")
parser:flag("--augment", "fixed --train set: each example turned/mirrored and its points reordered")
parser:option("--epoch-steps", "steps per epoch, a validation after each (as --eval-every)"):convert(tonumber)
parser:option("--pictures", "test instances to draw", "4"):convert(tonumber)
experiment.int_flags(parser, {n = 1, n_min = 1, n_max = 1, train = 0, valid = 1, test = 1,
                              epoch_steps = 1, pictures = 0})
local args = experiment.parse(parser)

local n_lo, n_hi = args.n_min or args.n, args.n_max or args.n
if n_hi < n_lo then parser:error("--n-max must be >= --n-min") end
if args.task == "hull" and n_lo < 3 then parser:error("hull needs at least 3 points per example") end
local test_sizes = experiment.int_list(parser, "--test-n", args.test_n, args.task == "hull" and 3 or 1)
if args.task == "tsp" and math.max(n_hi, table.unpack(test_sizes)) > points.TSP_MAX_N then
  parser:error(string.format("tsp targets are exact (Held-Karp): sizes at most %d", points.TSP_MAX_N))
elseif args.label_cache and args.task ~= "tsp" then parser:error("--label-cache is for --task tsp") end
args.train = args.train or ((args.task == "tsp" and n_hi > 12) and (args.quick and 3000 or 30000) or 0)
if args.mix_sizes == "batch" and (n_lo == n_hi or args.train > 0) then
  parser:error("--mix-sizes batch needs mixed sizes (--n-min < --n-max) in fresh batches (--train 0)")
end
if args.paper then args.lr = 1.0 end
args.epoch_steps = args.epoch_steps or args.eval_every
local size_tag = n_lo == n_hi and tostring(n_lo) or (n_lo .. "-" .. n_hi)
args.out = args.out or string.format("out/pointer-%s-n%s", args.task, size_tag)

local cfg = Ptr.options:from_args(args, MODEL_FLAGS)
cfg.attn_hidden, cfg.init = args.attn_hidden or args.hidden, args.paper and "paper" or nil
local run = experiment.start(args, {name = "pointer", config = cfg})
local size_arg = n_lo == n_hi and n_lo or {n_lo, n_hi}
local function make(n, count, seed)
  return points.make{task = args.task, n = n, count = count, seed = seed, cache = args.label_cache} end
local gen_timer = util.Timer()     -- making tsp targets takes time
local train_set = args.train > 0 and make(size_arg, args.train, args.seed) or nil
local fixed = train_set and not args.augment and train_set  -- else a batch made every step
local valid_set = make(size_arg, args.valid, args.seed + 7919)
local tests = {{n = size_tag, set = make(size_arg, args.test, args.seed + 104729)}}
for _, n in ipairs(test_sizes) do   -- extra test sets of other sizes
  tests[#tests + 1] = {n = tostring(n), set = make(n, args.test, args.seed + 1299709 + n)}
end
local gen_seconds = gen_timer:elapsed()

local model = args.load and run:check_load(glimpse.models.PointerNet.load(args.load), cfg) or glimpse.models.PointerNet(cfg)
run:count_params(model)
run:print(string.format("pointer: %s training data, %s lr %g%s clip %g%s, data made in %.1fs%s",
                        train_set and (train_set.n .. (fixed and " fixed" or " augmented")) or "fresh", args.paper and "SGD"
                        or "Adam", args.lr, args.cosine and " (cosine)" or "", args.clip,
                        args.paper and ", init U(-0.08,0.08)" or "", gen_seconds,
                        args.label_cache and (" (tours " .. (train_set or valid_set).cache_status .. ")") or ""))

local function measure(m, ds, beam)   -- eval.pointer, with the Trainer's accuracy and examples
  local r = eval.pointer(m, ds, {beam = beam, batch_size = beam > 1 and 64 or 256})
  r.accuracy, r.examples = r.exact, r.n; return r
end
local history = glimpse.train.Trainer(run:trainer_options{
  model = model, optimizer = {args.paper and "SGD" or "Adam", lr = args.lr}, clip = args.clip,
  schedule = args.cosine and {"CosineAnnealingLR"} or nil,
  data = fixed or function(_, rng)
    if train_set then return points.augmented_batch(train_set, args.batch, rng) end
    return points.batch(args.batch, {task = args.task, n = size_arg, rng = rng, mix_sizes = args.mix_sizes}) end,
  batch_size = fixed and args.batch or nil, rng = not fixed and Rng.new(args.seed, "pointer.train") or nil,
  -- the paper's SGD minimises -log p(C|P) per sequence: the step losses summed, not averaged
  loss = args.paper and function(m, b) local l, st = m:loss(b) return l * st.steps, st end or nil,
  eval_every = args.epoch_steps, evaluate = function(m) return measure(m, valid_set, 1) end,
  format_eval = function(m) return "valid " .. eval.describe(m) end,
}):fit()
if not run:is_root() then return end  -- data parallel: rank 0 alone tests and writes
model:save(run:path("model.safetensors"), {script = arg[0], steps = history.steps})
local results, images, summary, views = {}, {}, {}, {}
for ti, ts in ipairs(tests) do
  local entry = {n = ts.n, examples = ts.set.n}
  for _, kind in ipairs(args.beam > 1 and {"greedy", "beam"} or {"greedy"}) do
    local t0, beam = util.Timer(), kind == "beam" and args.beam or 1
    entry[kind] = measure(model, ts.set, beam)
    entry[kind .. "_seconds"] = t0:elapsed()
    local name = string.format("test n=%s (%d examples) %s", ts.n, ts.set.n,
                               beam > 1 and ("beam " .. beam) or "greedy")
    summary[name] = eval.describe(entry[kind])
    run:print(string.format("%s: %s  [%.1fs]", name, summary[name], entry[kind .. "_seconds"]))
  end
  results[#results + 1] = entry
  local ds, idx = ts.set, {}
  for i = 1, ti == 1 and math.min(args.pictures, ds.n) or 0 do idx[i] = i end
  local preds, ex = {}, nil
  if #idx > 0 then preds, ex = model:decode(ds:collate(idx), {beam = args.beam}) end
  for k, i in ipairs(idx) do
    local n, a = #ds.points[i], string.format("attention_%d.png", k)
    images[#images + 1] = string.format("instance_%d.png", k)
    figures.points_instance(run:path(images[#images]), ds, i, preds[k])
    local title = string.format("pointer attention, %s n=%d", args.task, n)
    if figures.pointer_attention(run:path(a), ex.alignments[k], preds[k], n, title) then
      images[#images + 1] = a
      views[#views + 1] = viewer_data.pointer(ex.alignments[k], preds[k], n, title .. ", example " .. k)
    end
  end
end

run:write_run_json(); run:write_metrics{task = args.task, n = size_tag, steps = history.steps,
                  train_seconds = history.seconds, data_seconds = gen_seconds,
                  history = history.evals, tests = results, config = model.config,
                  optimiser = args.paper and "sgd-paper" or "adam", reference = require("glimpse.models.pointer").REFERENCE[args.task]}
run:write_report{title = "pointer network: " .. args.task .. " n=" .. size_tag, history = history,
                 charts = {"accuracy"}, summary = summary, images = images, attention = views}
print(string.format("trained %d steps in %.0fs; wrote metrics.json, run.json, model.safetensors, "
                    .. "index.html and %d pictures to %s", history.steps, history.seconds, #images, run.dir))
