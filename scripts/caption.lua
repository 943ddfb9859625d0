-- scripts/caption.lua -- train a "Show, Attend and Tell" captioner (glimpse.captioner, Xu et
-- al. 2015) with soft or hard attention, and look at where it looks.  docs/experiments/caption.md
--
--   glimpse scripts/caption.lua --quick                    (scenes, soft attention, 1000 steps)
--   glimpse scripts/caption.lua --attention hard           (20000 scenes, 3750 steps, Gumbel ST)
--   glimpse scripts/caption.lua --load MODEL --steps 0     (evaluate a saved captioner)
--   glimpse scripts/caption.lua --karpathy dataset_flickr8k.json --images DIR --encoder vgg16 ...
-- At the end: test BLEU-1..4 (beam and greedy) next to two captioners that never look at the
-- image, and (scenes, shapes) the attention inside the named item's box.  Writes
-- model.safetensors, metrics.json, run.json, samples.txt, overlay_<k>.png and index.html.
local glimpse = require "glimpse"
local experiment = glimpse.experiment
local Captioner, RECIPES = glimpse.captioner.Captioner, glimpse.captioner.RECIPES
local recipes = {}; for k in pairs(RECIPES) do recipes[#recipes + 1] = k end
local ce, sources = glimpse.models.caption_eval, glimpse.data.caption_sources
local p = experiment.parser("caption", "Train a Show, Attend and Tell captioner.",
  {steps = false, eval_every = 625, out = "out/caption-<dataset>-<attention>",
   quick = {train = 4000, valid = 300, test = 300, epochs = 8, steps = 1000, eval_every = 125}})
experiment.add_flags(p, {load = false})
local function num(name, help, default) p:option(name, help, default):convert(tonumber) end
local function flag(name, help) p:flag(name, help) end
local function choice(name, help, list, default) p:option(name, help, default):choices(list) end
choice("--dataset", "scenes | shapes (ignored with --karpathy)", {"scenes", "shapes"}, "scenes")
p:option("--karpathy", "a Karpathy split JSON (dataset_flickr8k.json, ...)")
p:option("--images", "the folder holding the corpus's image files (with --karpathy)")
choice("--attention", "soft | hard", {"soft", "hard"}, "soft")
choice("--score", "attention score (f_att)", {"additive", "general", "concat", "dot", "scaled_dot", "cosine"}, "additive")
num("--ds", "doubly stochastic penalty lambda (0: off)", "1")
flag("--no-gate", "no beta_t gating scalar")
flag("--no-deep-output", "p(y_t) = softmax(W h_t) instead of the deep output layer")
flag("--no-coords", "no (x, y) cell coordinates appended to the annotations")
flag("--output-tanh", "a tanh inside the deep output layer (the authors' code)")
flag("--no-global-feature", "no mean annotation in the LSTM input at every step (Anderson et al. 2018)")
flag("--global-output", "the mean annotation in the deep output layer too")
flag("--whole-image", "the mean annotation as one more cell to attend to (hard: can read the whole image)")
p:option("--encoder", "small | vgg16 | resnet18 | ... (glimpse.models)", "small")
p:option("--encoder-weights", "safetensors weights for a torchvision encoder")
flag("--fine-tune", "train a pretrained encoder too (default: frozen when weights are given)")
p:option("--channels", "small CNN: channels per conv block", "16,32,64")
flag("--no-batch-norm", "small CNN without batch normalisation")
num("--image-size", "images are resized to this (karpathy; small CNN default 64)")
num("--embed", "word embedding size m", "64")
num("--hidden", "LSTM size n", "256")
num("--att", "attention MLP size", "128")
num("--dropout", "dropout on the deep output", "0")
choice("--recipe", "hard: the defaults of the flags below (glimpse.captioner.RECIPES)", recipes, "gumbel")
num("--soft-prob", "hard: probability of the expected context per batch (at the start)")
num("--soft-prob-end", "hard: soft-prob at the end of the schedule")
num("--entropy", "hard: entropy bonus lambda_e (at the start)")
num("--entropy-end", "hard: entropy weight at the end of the schedule")
choice("--mix", "hard: sample (one coin per batch: the expected context or samples) | row (one coin per caption) | expected (both, weighted by soft-prob)", {"sample", "row", "expected"})
num("--anneal", "hard: share of training over which the schedules move")
num("--samples", "hard: samples K per caption (K > 1: leave-one-out baseline)")
choice("--baseline", "hard: average (moving average) | loo (leave-one-out, K > 1)", {"average", "loo"})
choice("--estimator", "hard: reinforce | gumbel (straight-through Gumbel-softmax)", {"reinforce", "gumbel"})
num("--tau", "hard, gumbel: temperature")
num("--reward-weight", "hard: REINFORCE weight lambda_r")
choice("--hard-eval", "hard: what test time reads (also with --load)", {"argmax", "region", "soft", "sample", "marginal"})
num("--train", "training scenes", "20000")
num("--valid", "validation scenes", "500")
num("--test", "test scenes", "500")
num("--clutter", "scenes: clutter fragments per scene", "0")
num("--min-count", "karpathy: least count of a vocabulary word", "5")
num("--max-len", "longest caption (words)", "30")
num("--epochs", "training epochs (the step budget unless --steps is given)", "6")
num("--batch", "batch size", "32")
num("--lr", "Adam learning rate", "0.003")
num("--clip", "gradient-norm clip (0: none)", "5")
choice("--lr-decay", "cosine (to 0 over the step budget) | none", {"cosine", "none"}, "cosine")
num("--beam", "beam size for the test captions", "3")
num("--length-penalty", "beam search's length normalisation alpha (default: chosen on validation; also with --load)")
num("--overlays", "test images drawn with per-word attention", "8")
p:option("--init", "start from the weights of a saved captioner (the sizes must match)")
local args = experiment.parse(p)
local name = args.karpathy and "karpathy" or args.dataset
args.out = args.out:gsub("<dataset>", name):gsub("<attention>", args.load and "eval" or args.attention)

local run = experiment.start(args, {name = "caption"})   -- seeds, threads, the output folder
local t0, pretrained = glimpse.clock(), args.encoder ~= "small"
local src = args.karpathy and sources.karpathy{file = args.karpathy, images = args.images,
  size = args.image_size or (pretrained and 224 or 64), min_count = args.min_count,
  max_len = args.max_len, mean = pretrained and glimpse.models.IMAGENET_MEAN or nil,
  std = pretrained and glimpse.models.IMAGENET_STD or nil}
  or sources.scenes{dataset = args.dataset, train = args.train, valid = args.valid,
                    test = args.test, clutter = args.clutter, seed = args.seed}
local channels = {}
for c in args.channels:gmatch("%d+") do channels[#channels + 1] = math.tointeger(tonumber(c)) end
local cfg = {vocab = src.vocab, image = src.image_spec, attention = args.attention,
  encoder = pretrained and {name = args.encoder, weights = args.encoder_weights} or
            {name = "small", in_channels = src.image_spec.channels, channels = channels,
             batch_norm = not args.no_batch_norm},
  fine_tune = args.fine_tune or not pretrained or not args.encoder_weights,
  score = args.score, doubly_stochastic = args.ds, gate = not args.no_gate, max_len = args.max_len,
  deep_output = not args.no_deep_output, output_tanh = args.output_tanh, coords = not args.no_coords,
  dim_embed = args.embed, dim_hidden = args.hidden, dim_att = args.att, dropout = args.dropout,
  global_feature = not args.no_global_feature, global_output = args.global_output, whole_image = args.whole_image,
  length_penalty = args.length_penalty}
for k, v in pairs(args.attention == "hard" and RECIPES[args.recipe] or {}) do cfg[k] = args[k] == nil and v or args[k] end
local cap = args.load and run:check_load(Captioner.load(args.load, {vocab = src.vocab}), cfg, {attention = "attention", score = "score", dim_hidden = "hidden", dim_embed = "embed", dim_att = "att"}) or Captioner(cfg)
if args.init then cap:load_weights(args.init) end
if args.load and args.hard_eval then cap:set_hard_eval(args.hard_eval) end  -- another test rule
if args.length_penalty then cap.config.length_penalty = args.length_penalty end
run.config = cap.config
run:print(string.format("  %s: %d train / %d valid / %d test, vocab %d (data %.1fs)", name,
                        src.train.n, src.valid.n, src.test.n, src.vocab:size(), glimpse.clock() - t0))
run:count_params(cap)

local per_epoch = (src.train.n + args.batch - 1) // args.batch
local steps = args.steps or args.epochs * per_epoch
local recalibrate = ce.recalibrator(cap, src, {batch = args.batch, seed = args.seed})
local trainer = glimpse.train.Trainer(run:trainer_options{
  model = cap, data = src.train, batch_size = args.batch, shuffle = true, bucket = 20,
  steps = steps, clip = args.clip > 0 and args.clip or nil,
  optimizer = glimpse.optim.Adam(cap:trainable_parameters(), {lr = args.lr}),
  schedule = args.lr_decay == "cosine" and {"CosineAnnealingLR"} or nil,
  loss = function(m, b, step)
    m:set_progress((step - 1) / steps)            -- the step budget drives the schedules
    local loss, info = m:loss(b.images, b.captions_in, b.captions_out, b.mask)
    return loss, {nll = info.nll, ds = info.ds, reinforce = info.reinforce}
  end,
  evaluate = function(m)
    recalibrate()
    local words = ce.captions(m, src.valid, 1)
    local b = ce.bleu(src.valid, words)
    return {valid_nll = ce.loss(m, src.valid), bleu1 = b[1], bleu2 = b[2], bleu3 = b[3],
            bleu4 = b[4], example = words[1]}
  end})
local history = trainer:fit()
if not run:is_root() then return end  -- data parallel: rank 0 alone tests and writes
local tuned, tried   -- how to decode: chosen on the validation set unless given or loaded
if not (args.load or args.length_penalty) then tuned, tried = ce.tune(cap, src.valid, {beam = args.beam, rules = args.hard_eval and {args.hard_eval}}) end
if tuned then print(ce.tune_line(tuned, tried, src.valid.n)) end
cap:save(run:path("model.safetensors"))
local r = ce.test(cap, src, {beam = args.beam, seed = args.seed})
for _, l in ipairs(r.lines) do print(l) end
glimpse.util.write_lines(run:path("samples.txt"), r.samples)
run:write_run_json()
run:write_metrics{dataset = name, attention = cap.config.attention, steps = history.steps,
  recipe = cap.config.attention == "hard" and not args.load and args.recipe or nil,
  load = args.load, train_seconds = history.seconds,
  test_bleu = r.bleu, test_bleu_greedy = r.bleu_greedy, test_loss = r.loss, beam = args.beam,
  baseline_bleu = {bag_of_words = r.baselines.bag_of_words, random_caption = r.baselines.random_caption},
  attention_in_box = r.in_box, attention_in_box_teacher_forced = r.in_box_teacher_forced, items = r.items,
  decoding = tried and {chosen = tuned, tried = tried} or nil,
  history = history.evals, config = cap.config}

ce.page(cap, src.test, r, run.dir, {overlays = args.overlays, intro = string.format(
  "%d steps, %.0f s of training.", history.steps, history.seconds), title = string.format(
  "Show, Attend and Tell: %s, %s attention (%s score)", name, cap.config.attention, cap.config.score)})
print("wrote model.safetensors, metrics.json, samples.txt, overlay_*.png and index.html to " .. run.dir)
