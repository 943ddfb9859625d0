-- scripts/seq2seq.lua -- an attention seq2seq model on the synthetic tasks of
-- datasets/seq2seq_tasks.lua (reversal / sorting of digit strings, date normalisation):
-- glimpse.models.Seq2Seq, a bidirectional-LSTM encoder and an LSTM decoder with input feeding
-- and one nn.Attention whose score function and mode are flags (Luong et al. 2015; hard
-- attention trains with REINFORCE as in Xu et al. 2015), trained by glimpse.train.Trainer;
-- or, with --model transformer, glimpse.models.Transformer (its position scheme and attention
-- variants are flags too: --positions rope, --kv-heads 1, ...).
--
--   glimpse scripts/seq2seq.lua --score additive --mode soft          (reversal, lengths 5-20)
--   glimpse scripts/seq2seq.lua --task dates --score general --mode local-p
--   glimpse scripts/seq2seq.lua --quick                               (a demo, under a minute)
--   glimpse scripts/seq2seq.lua --quick --beam 5                      (+ beam search at the end)
--   glimpse scripts/seq2seq.lua --quick --model transformer --positions alibi
--
-- Prints the configuration, progress, the exact-sequence accuracy of greedy decoding on a
-- held-out set after each evaluation and at the end (and of beam search with --beam K > 1),
-- and writes alignment heatmaps (PNG and one SVG), samples.txt, metrics.json, run.json and
-- index.html to the output folder it names at the end.
local glimpse = require "glimpse"
local figures, viewer_data = require "glimpse.plot.figures", require "glimpse.lab.viewer_data"
local experiment, util = glimpse.experiment, glimpse.util
local tasks, eval = glimpse.data.seq2seq, glimpse.models.eval

local parser = experiment.parser("seq2seq", "Train an attention seq2seq model on a synthetic task.",
  {steps = 4000, time_limit = 300, eval_every = 250, log_every = 50, out = false,
   quick = {max_len = 10, train = 6000, valid = 300, steps = 400, time_limit = 40,
            eval_every = 100, log_every = 25}})
parser:option("--task", "reversal | sorting | dates", "reversal")
  :choices({"reversal", "sorting", "dates"})
parser:option("--min-len", "shortest digit string", "5"):convert(tonumber)
parser:option("--max-len", "longest digit string", "20"):convert(tonumber)
parser:option("--train", "training examples", "50000"):convert(tonumber)
parser:option("--valid", "held-out examples", "1000"):convert(tonumber)
experiment.add_flags(parser, {batch = 64, lr = 0.003, clip = 5,
  beam = {1, "beam width for the final held-out decoding (1: greedy only)"}})
-- the model's own options become flags (--emb, --hidden, --score, --mode, ...: `?Seq2Seq`)
local MODEL_FLAGS = {"emb", "hidden", "attn_hidden", "score", "mode", "window", "temperature",
                     "normaliser", "soft_prob", "entropy", "ds", "coverage", "length_penalty"}
experiment.add_flags(parser, glimpse.models.Seq2Seq.options, MODEL_FLAGS)
parser:option("--model", "seq2seq (an RNN with one attention) | transformer", "seq2seq")
  :choices({"seq2seq", "transformer"})
local TF_FLAGS = {"d", "heads", "layers", "ff", "positions", "kv_heads", "top_k", "attention"}
experiment.add_flags(parser, glimpse.models.Transformer.options, TF_FLAGS)
parser:option("--target", "stop once validation accuracy reaches this", "1.01"):convert(tonumber)
parser:option("--maps", "alignment heatmaps to write", "4"):convert(tonumber)
experiment.int_flags(parser, {min_len = 1, max_len = 1, train = 1, valid = 1, maps = 0})
local args = experiment.parse(parser)
local transformer = args.model == "transformer"
args.out = args.out or (transformer and string.format("out/seq2seq-%s-transformer-%s", args.task,
  args.positions) or string.format("out/seq2seq-%s-%s-%s", args.task, args.score, args.mode))

-- data: training and held-out sets made from the seed
local function make_set(n, seed)
  if args.task == "dates" then return tasks.dates{n = n, seed = seed} end
  return tasks.make(args.task, {n = n, min_len = args.min_len, max_len = args.max_len, seed = seed})
end
local train, valid = make_set(args.train, args.seed), make_set(args.valid, args.seed + 7919)

local Model = transformer and glimpse.models.Transformer or glimpse.models.Seq2Seq
local cfg = Model.options:from_args(args, transformer and TF_FLAGS or MODEL_FLAGS)
if not transformer then cfg.max_src = math.max(args.max_len, 40) + 2 end
local run = experiment.start(args, {name = "seq2seq", config = cfg})
local o = {dataset = train}
for k, v in pairs(cfg) do o[k] = v end
local model = Model(o)
run:count_params(model)

local function accuracy(m, beam)
  return eval.sequence_accuracy(m, valid, {beam = beam, bleu = false}).exact
end
local history = glimpse.train.Trainer(run:trainer_options{
  model = model, optimizer = {"Adam", lr = args.lr}, clip = args.clip,
  data = train, batch_size = args.batch, bucket = 20,
  evaluate = function(m) return {accuracy = accuracy(m, 1)} end,
  target = {metric = "accuracy", value = args.target},
  format_eval = function(m) return string.format("valid: exact-sequence accuracy %.2f%%",
                                                 100 * m.accuracy) end,
}):fit()
if not run:is_root() then return end  -- data parallel: rank 0 alone tests and writes
-- results: greedy (and beam) accuracy, samples and their alignment maps
local acc = accuracy(model, 1)
run:print(string.format("final: exact-sequence accuracy %.2f%% on %d held-out examples after %d "
                        .. "steps (%.0fs of training)", 100 * acc, valid.n, history.steps,
                        history.seconds))
local acc_beam
if args.beam > 1 then
  local t_beam = util.Timer()
  acc_beam = accuracy(model, args.beam)
  run:print(string.format("final: beam search (beam %d, length penalty %g): exact-sequence "
                          .. "accuracy %.2f%% (%.1fs)", args.beam, args.length_penalty,
                          100 * acc_beam, t_beam:elapsed()))
end
local idx, items, samples = {}, {}, {}
for i = 1, math.min(args.maps, valid.n) do idx[i] = i end
if #idx > 0 then
  local preds, extras = model:decode(valid:collate(idx), {beam = args.beam})
  for k, i in ipairs(idx) do
    local pred = valid:decode_tgt(preds[k])
    local ok = pred == valid.tgt[i]
    items[k] = {index = i, ids = preds[k], alignment = extras.alignments[k], ok = ok}
    samples[k] = string.format("%s -> %s (target %s)%s", valid.src[i], pred, valid.tgt[i],
                               ok and "" or "  WRONG")
  end
end
local title = transformer and string.format("%s Transformer (%s positions)", args.task, args.positions)
  or string.format("%s %s/%s", args.task, args.score, args.mode)
local images = figures.seq2seq_alignments(run.dir, valid, items, {title = title})
util.write_lines(run:path("samples.txt"), samples)
local summary = {task = args.task, model = args.model, score = not transformer and args.score or nil,
                 mode = not transformer and args.mode or nil, accuracy = acc,
                 positions = transformer and args.positions or nil,
                 accuracy_beam = acc_beam, beam = args.beam > 1 and args.beam or nil,
                 length_penalty = args.beam > 1 and args.length_penalty or nil,
                 steps = history.steps, train_seconds = history.seconds}
run:write_run_json()
local m = {}
for k, v in pairs(summary) do m[k] = v end
m.reached_target, m.history, m.config = history.reached, history.evals, cfg
run:write_metrics(m)
run:write_report{title = "seq2seq: " .. args.task, summary = summary, history = history,
                 charts = {"accuracy"}, images = images, attention = function(page)
                   viewer_data.add_seq2seq(page, valid, items, {title = title, pictures = images})
                   if transformer and #idx > 0 then  -- every layer and head, teacher-forced
                     for _, v in ipairs(viewer_data.transformer(model, valid, idx[1])) do
                       page:attention(v.data, {title = "example 1: " .. v.title}) end end end}
for _, s in ipairs(samples) do print("  " .. s) end
print("wrote alignment heatmaps, samples.txt, metrics.json, run.json and index.html to " .. run.dir)
