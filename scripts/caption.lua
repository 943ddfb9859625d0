-- scripts/caption.lua -- train a "Show, Attend and Tell" captioner (glimpse.captioner, Xu et
-- al. 2015) with soft or hard attention, and look at where it looks.  docs/experiments/caption.md
--
--   glimpse scripts/caption.lua --quick                    (scenes, soft attention, 1000 steps)
--   glimpse scripts/caption.lua --attention hard           (20000 scenes, 3750 steps, Gumbel ST)
--   glimpse scripts/caption.lua --load MODEL --steps 0     (evaluate a saved captioner)
--   glimpse scripts/caption.lua --load MODEL --steps 0 --scst-steps 500   (self-critical)
--   glimpse scripts/caption.lua --karpathy dataset_flickr8k.json --images DIR --encoder vgg16 ...
--   glimpse scripts/caption.lua --images DIR --captions captions.tsv --min-count 1  (your own)
-- At the end: test BLEU-1..4, CIDEr-D and ROUGE-L (beam and greedy; on scenes every phrasing
-- is a reference) next to two captioners that never look at the image, and (scenes, shapes)
-- the attention inside the named item's box and what the captions say (items, relations,
-- exact scenes: glimpse.data.scene_text.semantics).  Writes
-- model.safetensors, metrics.json, run.json, samples.txt, overlay_<k>.png and index.html.
local glimpse = require "glimpse"
local experiment, captioner = glimpse.experiment, glimpse.captioner
local ce, options = glimpse.models.caption_eval, glimpse.options
local p = experiment.parser("caption", "Train a Show, Attend and Tell captioner.",
  {steps = false, eval_every = 625, out = "out/caption-<dataset>-<attention>",
   quick = {train = 4000, valid = 300, test = 300, epochs = 8, steps = 1000, eval_every = 125}})
experiment.add_flags(p, {load = false, batch = 32, lr = {0.003, "Adam learning rate"},
  clip = {5, "gradient-norm clip (0: none)"}, beam = {3, "beam size for the test captions"}})
ce.SOURCE_OPTIONS:add_flags(p); ce.ENCODER_OPTIONS:add_flags(p); ce.SELF_CRITICAL_OPTIONS:add_flags(p)
-- the Captioner's options as flags (then those a --recipe sets, without defaults)
local MODEL = captioner.add_flags(p, {"attention", "score", "doubly_stochastic", "gate",
  "deep_output", "coords", "output_tanh", "global_feature", "global_output", "unseen_feature",
  "unseen_from", "global_output_rank", "global_output_pool", "global_feature_rank",
  "global_feature_pool", "unseen_feature_rank", "unseen_feature_pool", "unseen_output",
  "whole_image", "coverage", "emb", "hidden", "attn_hidden", "dropout", "length_aux", "max_len"},
  {coords = {default = true}, global_feature = {default = true}, hard_eval = {help = "hard: what test time reads (also with --load)"},
  length_penalty = {help = "beam search's length normalisation alpha (default: chosen on "
                    .. "validation; also with --load)"}})
local FLAGS = options.declare("caption", {
  {"recipe", "string", "gumbel", choices = captioner.recipe_names(),
   help = "hard: the defaults of the flags above (glimpse.captioner.RECIPES)"},
  {"epochs", "int", 6, range = {1},
   help = "training epochs (the step budget unless --steps is given)"},
  {"lr_decay", "string", "cosine", choices = {"cosine", "none"},
   help = "cosine (to 0 over the step budget) | none"},
  {"overlays", "int", 8, range = {0}, help = "test images drawn with per-word attention"},
  {"init", "string", nil,
   help = "start from the weights of a saved captioner (the sizes must match)"},
  {"captions", "string", nil, help = "the captions of the pictures in --images: Karpathy " ..
   "JSON or TSV lines file<TAB>caption[<TAB>train|val|test]"}})
FLAGS:add_flags(p)
local args = experiment.parse(p); FLAGS:from_args(args)   -- the values checked
local o = captioner.OPTIONS:from_args(args, MODEL)
if o.attention == "hard" then captioner.with_recipe(o, args.recipe) end
if not args.load then      -- the rules between the model's options, before any data is made
  local probe = {vocab = {"a"}}                  -- (a copy: config fills in defaults)
  for k, v in pairs(o) do probe[k] = v end
  local ok, err = pcall(require("glimpse.models.captioner.options").config, probe)
  if not ok then p:error(tostring(err)) end
end
if (args.karpathy or args.captions) and (args.scst_meaning > 0 or args.scst_repeats > 0) then
  p:error(string.format("--scst-%s scores captions against generated scenes; a captions file " ..
                        "has none", args.scst_meaning > 0 and "meaning" or "repeats"))
end
if args.captions then args.karpathy = args.captions end   -- one reader takes both formats
local name = args.captions and "own" or args.karpathy and "karpathy" or args.dataset
args.out = args.out:gsub("<dataset>", name):gsub("<attention>", args.load and "eval" or args.attention)

local run, t0 = experiment.start(args, {name = "caption"}), glimpse.clock()   -- seeds, output
local src = ce.source(ce.SOURCE_OPTIONS:from_args(args),
                      {seed = args.seed, max_len = args.max_len, encoder = args.encoder})
o.vocab, o.image = src.vocab, src.image_spec
o.encoder, o.fine_tune = ce.encoder(ce.ENCODER_OPTIONS:from_args(args), src.image_spec.channels)
local cap = args.load and run:check_load(captioner.load(args.load, {vocab = src.vocab,  -- flags set
  hard_eval = args.hard_eval, length_penalty = args.length_penalty}), o) or captioner.Captioner(o)
if args.init then cap:load_weights(args.init) end
if not (args.load and cap.description) then   -- what the model knows, kept in its file
  local H, W = src.image_spec.height, src.image_spec.width
  cap.description = src.description
  cap.familiar_summary = captioner.familiar.summary(src.pictures(math.min(2000, 8192000 // (H * W))))
end
if src.note then run:print("  note: " .. src.note) end
run.config = cap.config
run:print(string.format("  %s: %d train / %d valid / %d test, vocab %d (data %.1fs)", name,
                        src.train.n, src.valid.n, src.test.n, src.vocab:size(), glimpse.clock() - t0))
run:count_params(cap)

local steps = args.steps or args.epochs * ((src.train.n + args.batch - 1) // args.batch)
local loss, evaluate = ce.training(cap, src, {steps = steps, batch = args.batch, seed = args.seed})
local history = glimpse.train.Trainer(run:trainer_options{model = cap, data = src.train,
  batch_size = args.batch, shuffle = true, bucket = 20, steps = steps, loss = loss,
  evaluate = evaluate, clip = args.clip > 0 and args.clip or nil,
  optimizer = glimpse.optim.Adam(cap:trainable_parameters(), {lr = args.lr}),
  schedule = args.lr_decay == "cosine" and {"CosineAnnealingLR"} or nil}):fit()
local sc = ce.SELF_CRITICAL_OPTIONS:from_args(args)
local scst_history
if sc.scst_steps > 0 then  -- then the captions it writes, scored by CIDEr-D (Rennie et al.)
  local data, scst_loss = ce.self_critical(cap, src, {samples = sc.scst_samples,
                                                     baseline = sc.scst_baseline, cells = sc.scst_cells,
                                                     meaning = sc.scst_meaning, xe = sc.scst_xe,
                                                     repeats = sc.scst_repeats})
  scst_history = glimpse.train.Trainer(run:trainer_options{model = cap, data = data,
    batch_size = args.batch, shuffle = true, steps = sc.scst_steps, loss = scst_loss,
    evaluate = evaluate, clip = args.clip > 0 and args.clip or nil,
    optimizer = glimpse.optim.Adam(cap:trainable_parameters(), {lr = sc.scst_lr})}):fit()
end
if not run:is_root() then return end  -- data parallel: rank 0 alone tests and writes
local tuned, tried   -- how to decode: chosen on the validation set unless given or loaded
if not ((args.load and sc.scst_steps == 0) or args.length_penalty) then
  tuned, tried = ce.tune(cap, src.valid, {beam = args.beam, rules = args.hard_eval and {args.hard_eval}})
  print(ce.tune_line(tuned, tried, src.valid.n))
end
cap:save(run:path("model.safetensors"))
local r = ce.test(cap, src, {beam = args.beam, seed = args.seed})
for _, l in ipairs(r.lines) do print(l) end
glimpse.util.write_lines(run:path("samples.txt"), r.samples)
run:write_run_json()
run:write_metrics(ce.metrics(r, history, {dataset = name, attention = cap.config.attention,
  recipe = cap.config.attention == "hard" and not args.load and args.recipe or nil, load = args.load,
  beam = args.beam, decoding = tried and {chosen = tuned, tried = tried} or nil, config = cap.config,
  self_critical = scst_history and {steps = scst_history.steps, seconds = scst_history.seconds,
                                    lr = sc.scst_lr, samples = sc.scst_samples,
                                    baseline = sc.scst_baseline, cells = sc.scst_cells,
                                    meaning = sc.scst_meaning, xe = sc.scst_xe,
                                    repeats = sc.scst_repeats, history = scst_history.evals}}))
local page = ce.page(glimpse.report.Page{title = "glimpse captioner"}, cap, src.test, r, run.dir,
                     {overlays = args.overlays, name = name, history = history})
require("glimpse.lab.viewer_data").add_captions(page, cap, src.test, r, run.dir, args.overlays)
page:write(run:path("index.html"))
print("wrote model.safetensors, metrics.json, samples.txt, overlay_*.png and index.html to " .. run.dir)
