-- scripts/demo.lua -- what `make demo` runs: the main job in miniature, straight on the
-- library.  glimpse.models.Seq2Seq with additive attention learns to reverse digit strings
-- of 5-10 digits in 400 steps (glimpse.train.Trainer: progress, a validation every 100
-- steps), then prints its held-out accuracy with greedy decoding and beam search of width 3
-- (glimpse.models.eval) and writes alignment heatmaps (glimpse.figures), metrics.json,
-- run.json and index.html to out/demo.  The same run as
-- `glimpse scripts/seq2seq.lua --quick --beam 3 --out out/demo`, which has every flag.
local glimpse = require "glimpse"
local figures = require "glimpse.plot.figures"
local experiment, eval = glimpse.experiment, glimpse.models.eval

local args = experiment.parse(experiment.parser("demo", "Reverse digit strings with attention.",
  {steps = 400, eval_every = 100, log_every = 25, time_limit = 40}))
local reversal = function(n, seed)
  return glimpse.data.seq2seq.reversal{n = n, min_len = 5, max_len = 10, seed = seed}
end
local train, valid = reversal(6000, args.seed), reversal(300, args.seed + 7919)
local run = experiment.start(args, {name = "demo", config = {task = "reversal", score = "additive"}})
local model = glimpse.models.Seq2Seq{dataset = train, score = "additive", mode = "soft"}
run:count_params(model)

local history = glimpse.train.Trainer(run:trainer_options{
  model = model, optimizer = {"Adam", lr = 0.003}, clip = 5, data = train, batch_size = 64,
  bucket = 20,
  evaluate = function(m) return {accuracy = eval.sequence_accuracy(m, valid, {bleu = false}).exact} end,
  format_eval = function(r) return string.format("held-out exact-sequence accuracy %.2f%%", 100 * r.accuracy) end,
}):fit()
if not run:is_root() then return end  -- data parallel: rank 0 alone tests and writes
local result = {steps = history.steps, train_seconds = history.seconds}
for _, beam in ipairs({1, 3}) do
  local key = beam == 1 and "accuracy" or "accuracy_beam"
  result[key] = eval.sequence_accuracy(model, valid, {beam = beam, bleu = false}).exact
  print(string.format("final: %s: exact-sequence accuracy %.2f%% on %d held-out examples",
                      beam == 1 and "greedy" or "beam search (beam 3)", 100 * result[key], valid.n))
end
local idx = {1, 2, 3, 4}
local preds, extras = model:decode(valid:collate(idx), {beam = 3})
local items = {}
for k, i in ipairs(idx) do
  local pred = valid:decode_tgt(preds[k])
  items[k] = {index = i, ids = preds[k], alignment = extras.alignments[k], ok = pred == valid.tgt[i]}
  print(string.format("  %s -> %s (target %s)", valid.src[i], pred, valid.tgt[i]))
end
local images = figures.seq2seq_alignments(run.dir, valid, items, {title = "reversal additive/soft"})
run:write_run_json()
run:write_metrics(result)
run:write_report{title = "demo: reversing digit strings", summary = result, history = history,
                 charts = {"accuracy"}, images = images}
print("wrote alignment heatmaps, metrics.json, run.json and index.html to " .. run.dir)
