-- scripts/seq2seq.lua -- an attention seq2seq model on the synthetic tasks of
-- datasets/seq2seq_tasks.lua (reversal / sorting of digit strings, date normalisation):
-- a bidirectional-LSTM encoder, an LSTM decoder with input feeding and one nn.Attention whose
-- score function and mode are flags (Luong et al. 2015's attentional decoder:
-- h_t = LSTM([y_{t-1}; h~_{t-1}]), c_t = attend(h_t, encoder states), h~_t = tanh(W_c [c_t; h_t]),
-- p(y_t) = softmax(W_s h~_t)).  Hard attention trains with REINFORCE (Xu et al. 2015).
--
--   glimpse scripts/seq2seq.lua --score additive --mode soft          (reversal, lengths 5-20)
--   glimpse scripts/seq2seq.lua --task dates --score general --mode local-p
--   glimpse scripts/seq2seq.lua --quick                               (a demo, under a minute)
--   glimpse scripts/seq2seq.lua --quick --beam 5                      (+ beam search at the end)
--
-- Prints a configuration header, progress (glimpse.progress: loss, rate, ETA), the
-- exact-sequence accuracy of greedy decoding on a held-out set (and of beam search with
-- --beam K > 1; both through glimpse.decode), and writes alignment heatmaps (PNG and one
-- SVG), metrics.json, samples.txt and run.json (the command and configuration) to the
-- output folder it names at the end.
local argparse = require "argparse"
local glimpse = require "glimpse"
local tasks = require "datasets.seq2seq_tasks"
local batches = require "datasets.batches"
local Vocab = require "datasets.vocab"

local nn, optim, att, viz = glimpse.nn, glimpse.optim, glimpse.attention, glimpse.viz
local decode, progress, util = glimpse.decode, glimpse.progress, glimpse.util

-- ---------------------------------------------------------------------------------------
-- flags

local parser = argparse("seq2seq.lua", "Train an attention seq2seq model on a synthetic task.")
parser:option("--task", "reversal | sorting | dates", "reversal")
  :choices({"reversal", "sorting", "dates"})
parser:option("--score", "score function: " .. table.concat(att.SCORES, " | "), "additive")
  :choices(att.SCORES)
parser:option("--mode", "attention mode: " .. table.concat(att.MODES, " | "), "soft")
  :choices(att.MODES)
parser:option("--min-len", "shortest digit string", "5"):convert(tonumber)
parser:option("--max-len", "longest digit string", "20"):convert(tonumber)
parser:option("--train", "training examples", "50000"):convert(tonumber)
parser:option("--valid", "held-out examples", "1000"):convert(tonumber)
parser:option("--batch", "batch size", "64"):convert(tonumber)
parser:option("--emb", "embedding size", "32"):convert(tonumber)
parser:option("--hidden", "decoder size (the encoder has hidden/2 per direction)", "128")
  :convert(tonumber)
parser:option("--attn-hidden", "attention hidden size (additive, concat, local-p)", "64")
  :convert(tonumber)
parser:option("--lr", "Adam learning rate", "0.003"):convert(tonumber)
parser:option("--clip", "gradient-norm clip", "5"):convert(tonumber)
parser:option("--steps", "most training steps", "4000"):convert(tonumber)
parser:option("--time-limit", "most training seconds", "300"):convert(tonumber)
parser:option("--target", "stop once validation accuracy reaches this", "1.01"):convert(tonumber)
parser:option("--eval-every", "steps between validations", "250"):convert(tonumber)
parser:option("--log-every", "steps between progress lines", "50"):convert(tonumber)
parser:option("--window", "local attention half-width D", "3"):convert(tonumber)
parser:option("--temperature", "softmax temperature", "1"):convert(tonumber)
parser:option("--normaliser", "softmax | sigmoid", "softmax"):choices({"softmax", "sigmoid"})
parser:option("--soft-prob", "hard mode: probability of the expected context per sequence", "0.5")
  :convert(tonumber)
parser:option("--entropy", "hard mode: entropy bonus weight", "0.01"):convert(tonumber)
parser:option("--ds", "doubly stochastic penalty weight (0: off)", "0"):convert(tonumber)
parser:flag("--coverage", "add a coverage term inside the additive/concat score")
parser:option("--maps", "alignment heatmaps to write", "4"):convert(tonumber)
parser:option("--beam", "beam width for the final held-out decoding (1: greedy only)", "1")
  :convert(tonumber)
parser:option("--length-penalty", "beam search: GNMT length penalty alpha", "0"):convert(tonumber)
parser:option("--threads", "BLAS threads (0: leave as is; these small matrices run best on 1)",
              "1"):convert(tonumber)
parser:option("--seed", "random seed", "1"):convert(tonumber)
parser:option("--out", "output folder (default out/seq2seq-<task>-<score>-<mode>)")
parser:flag("--quick", "a short demo: lengths 5-10, about 40 seconds")
local args = parser:parse(arg)
if args.beam < 1 or args.beam % 1 ~= 0 then parser:error("--beam must be a positive integer") end

if args.quick then
  args.max_len = math.min(args.max_len, 10)
  args.train, args.valid = math.min(args.train, 6000), math.min(args.valid, 300)
  args.steps, args.time_limit = math.min(args.steps, 400), math.min(args.time_limit, 40)
  args.eval_every, args.log_every = 100, 25
end
if args.threads > 0 then glimpse.set_num_threads(args.threads) end
local out_dir = args.out or string.format("out/seq2seq-%s-%s-%s", args.task, args.score, args.mode)
glimpse.manual_seed(args.seed)

-- ---------------------------------------------------------------------------------------
-- data

local function make_set(n, seed)
  if args.task == "dates" then return tasks.dates{n = n, seed = seed} end
  return tasks.make(args.task, {n = n, min_len = args.min_len, max_len = args.max_len, seed = seed})
end
local train = make_set(args.train, args.seed)
local valid = make_set(args.valid, args.seed + 7919)
local Vs, Vt = train.src_vocab:size(), train.tgt_vocab:size()

-- ---------------------------------------------------------------------------------------
-- the model

local Seq2Seq = nn.Module:extend("Seq2Seq")

function Seq2Seq:init(c)
  local H, He = c.hidden, c.hidden // 2
  self.src_emb = nn.Embedding(Vs, c.emb)
  self.tgt_emb = nn.Embedding(Vt, c.emb)
  self.encoder = nn.LSTM(c.emb, He, {bidirectional = true})
  self.bridge = nn.Linear(2 * He, H)                      -- h_0 = tanh(W [h_fwd; h_bwd])
  self.decoder = nn.LSTMCell(c.emb + H, H)                -- input feeding: [y_{t-1}; h~_{t-1}]
  self.attention = nn.Attention{score = c.score, mode = c.mode, query = H, key = 2 * He,
                                hidden = c.attn_hidden, window = c.window,
                                temperature = c.temperature, normaliser = c.normaliser,
                                soft_prob = c.soft_prob, coverage = c.coverage,
                                max_len = c.max_src}
  self.combine = nn.Linear(2 * He + H, H)                 -- h~_t = tanh(W_c [c_t; h_t])
  self.out = nn.Linear(H, Vt)                             -- p(y_t) = softmax(W_s h~_t)
  self.H = H
end

-- src (B,S) ids, lengths {B} -> encoder states (B,S,H), h_0, c_0
function Seq2Seq:encode(src, lengths)
  local enc, st = self.encoder(self.src_emb(src), lengths)
  local hfin = glimpse.cat({st.h:select(1, 1), st.h:select(1, 2)}, 2)
  local h = self.bridge(hfin):tanh()
  return enc, h, glimpse.zeros(h.shape[1], self.H)
end

-- one decoder step; returns h~_t, the new (h, c), alpha and the attention state
function Seq2Seq:step(y_emb, feed, h, c, enc, mask, astate)
  h, c = self.decoder(glimpse.cat({y_emb, feed}, 2), h, c)
  local ctx, alpha
  ctx, alpha, astate = self.attention(h, enc, nil, mask, astate)
  local ht = self.combine(glimpse.cat({ctx, h}, 2)):tanh()
  return ht, h, c, alpha, astate
end

-- Teacher-forced loss of a batch: mean token NLL (+ REINFORCE surrogate for hard attention,
-- + doubly stochastic penalty).  Returns loss, mean token NLL (a number).
function Seq2Seq:loss(b, baseline)
  local B, T = b.tgt_in.shape[1], b.tgt_in.shape[2]
  local enc, h, c = self:encode(b.src, b.src_lengths)
  local astate = self.attention:precompute(enc, nil, b.src_mask)
  local yemb = self.tgt_emb(b.tgt_in)                     -- (B,T,E)
  local feed = glimpse.zeros(B, self.H)
  local hts, alphas = {}, {}
  for t = 1, T do
    feed, h, c, alphas[t], astate = self:step(yemb:select(2, t), feed, h, c, enc, b.src_mask, astate)
    hts[t] = feed
  end
  local logits = self.out(glimpse.stack(hts, 2)):reshape(B * T, Vt)
  local targets = b.tgt_out:reshape(B * T)
  local nll = glimpse.cross_entropy(logits, targets, {ignore_index = Vocab.PAD, reduction = "none"})
  local ntok = b.tgt_mask:sum():item()
  local nll_seq = nll:reshape(B, T):sum(2)                -- -log p(y | s, a) per sequence
  local token_nll = nll_seq:sum() / ntok
  local loss = token_nll
  if self.attention.mode == "hard" then
    local logp, H = self.attention:reinforce_terms(astate, b.tgt_mask)
    local surrogate = att.reinforce_loss(-nll_seq, logp, {baseline = baseline, entropy = H,
                                                          entropy_weight = args.entropy})
    loss = loss + surrogate * (B / ntok)                  -- on the same per-token scale
  end
  if args.ds > 0 then
    loss = loss + att.doubly_stochastic(alphas, {mask = b.src_mask, tgt_mask = b.tgt_mask,
                                                 weight = args.ds}) * (B / ntok)
  end
  return loss, token_nll:item()
end

-- Decoding (no teacher forcing) goes through glimpse.decode, which needs everything with one
-- row per sequence in the state it reorders: the LSTM state, the fed-back h~, and the
-- attention state (projected keys, mask, previous alignment...).
function Seq2Seq:decode_state(b)
  local enc, h, c = self:encode(b.src, b.src_lengths)
  local astate = self.attention:precompute(enc, nil, b.src_mask)
  return {h = h, c = c, feed = glimpse.zeros(h.shape[1], self.H), att = astate}
end

-- one step in glimpse.decode's convention: y (N) previous ids -> log p(y_t) (N,V), the new
-- state, alpha (N,S)
function Seq2Seq:decode_step(y, st)
  local feed, h, c, alpha, astate = self:step(self.tgt_emb(y), st.feed, st.h, st.c, nil, nil,
                                              st.att)
  return glimpse.log_softmax(self.out(feed), 2), {h = h, c = c, feed = feed, att = astate}, alpha
end

-- Predicted ids (up to <end>) and alignment rows {alpha_t (S)} for each row of a batch:
-- greedy, or beam search with beam > 1.
function Seq2Seq:predict(b, max_steps, beam)
  local st = self:decode_state(b)
  local step = function(y, s) return self:decode_step(y, s) end
  local o = {max_len = max_steps, start = Vocab.START, stop = Vocab.END}
  if beam <= 1 then
    local preds, _, maps = decode.greedy(step, st, o)
    return preds, maps
  end
  o.beam, o.length_penalty = beam, args.length_penalty
  local hyps = decode.beam(step, st, o)
  local preds, maps = {}, {}
  for i, h in ipairs(hyps) do preds[i], maps[i] = h[1].tokens, h[1].alignment end
  return preds, maps
end

-- ---------------------------------------------------------------------------------------
-- evaluation

local function evaluate(model, ds, want_maps, beam)
  model:evaluate()
  local correct, total, shown = 0, 0, {}
  glimpse.no_grad(function()
    for b, idx in batches.iterate(ds, {batch_size = 200, shuffle = false}) do
      local preds, maps = model:predict(b, b.tgt_in.shape[2] + 5, beam or 1)
      for k, i in ipairs(idx) do
        local pred = ds:decode_tgt(preds[k])
        local ok = pred == ds.tgt[i]
        if ok then correct = correct + 1 end
        total = total + 1
        if want_maps and #shown < want_maps then
          shown[#shown + 1] = {src = ds.src[i], tgt = ds.tgt[i], pred = pred, ok = ok,
                               ids = preds[k], map = maps[k], len = #ds.src_ids[i]}
        end
      end
    end
  end)
  model:train()
  return correct / math.max(1, total), shown
end

-- ---------------------------------------------------------------------------------------
-- training

local cfg = {emb = args.emb, hidden = args.hidden, attn_hidden = args.attn_hidden,
             score = args.score, mode = args.mode, window = args.window,
             temperature = args.temperature, normaliser = args.normaliser,
             soft_prob = args.soft_prob, coverage = args.coverage,
             max_src = math.max(args.max_len, 40) + 2}
local model = Seq2Seq(cfg)
local params = model:parameters()
local opt = optim.Adam(params, {lr = args.lr})
local baseline = att.baseline(0.9)

local nparams = 0
for _, p in ipairs(params) do nparams = nparams + p:numel() end
print(string.format("seq2seq: task %s (lengths %d-%d, %d train / %d valid), score %s, mode %s, "
                    .. "emb %d, hidden %d, attn %d, %d params, batch %d, Adam lr %g, "
                    .. "steps <= %d, time <= %ds, BLAS threads %d, seed %d, final decoding %s",
                    args.task, args.min_len, args.max_len, train.n, valid.n, args.score,
                    args.mode, args.emb, args.hidden, args.attn_hidden, nparams, args.batch,
                    args.lr, args.steps, args.time_limit, glimpse.get_num_threads(), args.seed,
                    args.beam > 1 and string.format("greedy + beam %d (alpha %g)", args.beam,
                                                    args.length_penalty) or "greedy"))

local history = {}
local bar = progress.Bar{total = args.steps, label = "train", every = args.log_every,
                        unit = "step", time_limit = args.time_limit,
                        fields = {"epoch", "loss"}, formats = {loss = "%.4f"}}
local step, epoch, best, reached = 0, 0, 0, nil
local ema
local stop = false
while not stop do
  epoch = epoch + 1
  for b in batches.iterate(train, {batch_size = args.batch, shuffle = true, seed = args.seed,
                                   epoch = epoch, bucket = 20}) do
    step = step + 1
    opt:zero_grad()
    local loss, nll = model:loss(b, baseline)
    loss:backward()
    optim.clip_grad_norm(params, args.clip)
    opt:step()
    ema = ema and 0.95 * ema + 0.05 * nll or nll
    bar:update(step, {epoch = epoch, loss = ema})
    local elapsed = bar:elapsed()
    local last = step >= args.steps or elapsed >= args.time_limit
    if step % args.eval_every == 0 or last then
      bar:pause()                                -- evaluation time does not count as training
      local acc = evaluate(model, valid)
      history[#history + 1] = {step = step, seconds = elapsed, accuracy = acc, loss = ema}
      best = math.max(best, acc)
      bar:print(string.format("  valid: exact-sequence accuracy %.2f%% at step %d (%.0fs of training)",
                              100 * acc, step, elapsed))
      if acc >= args.target and not reached then
        reached = {step = step, seconds = elapsed}
        stop = true
      end
      bar:resume()
    end
    if last then stop = true end
    if stop then break end
  end
end
local train_seconds = bar:finish()

-- ---------------------------------------------------------------------------------------
-- results

util.output_dir(out_dir, {args = args, model = cfg})
local acc, shown = evaluate(model, valid, args.beam > 1 and 0 or args.maps)
print(string.format("final: exact-sequence accuracy %.2f%% on %d held-out examples after %d steps "
                    .. "(%.0fs of training)", 100 * acc, valid.n, step, train_seconds))
local acc_beam
if args.beam > 1 then
  local t_beam = util.Timer()
  acc_beam, shown = evaluate(model, valid, args.maps, args.beam)
  print(string.format("final: beam search (beam %d, length penalty %g): exact-sequence accuracy "
                      .. "%.2f%% (%.1fs)", args.beam, args.length_penalty, 100 * acc_beam,
                      t_beam:elapsed()))
end

local samples = {}
for k, s in ipairs(shown) do
  local src_tokens = {}
  for ch in s.src:gmatch(".") do src_tokens[#src_tokens + 1] = ch == " " and "_" or ch end
  local tgt_tokens = {}
  for _, id in ipairs(s.ids) do tgt_tokens[#tgt_tokens + 1] = valid.tgt_vocab:token(id) end
  local rows = {}
  for t = 1, math.min(#s.map, #tgt_tokens + 1) do
    rows[t] = table.move(s.map[t], 1, s.len, 1, {})
  end
  if #rows == #tgt_tokens + 1 then tgt_tokens[#tgt_tokens + 1] = "<end>" end
  while #tgt_tokens > #rows do table.remove(tgt_tokens) end
  local title = string.format("%s %s/%s %s", args.task, args.score, args.mode,
                              s.ok and "(correct)" or "(wrong)")
  local png = string.format("%s/alignment_%d.png", out_dir, k)
  viz.alignment(rows, src_tokens, tgt_tokens, png, {title = title})
  if k == 1 then viz.alignment(rows, src_tokens, tgt_tokens, out_dir .. "/alignment_1.svg", {title = title}) end
  samples[#samples + 1] = string.format("%s -> %s (target %s)%s", s.src, s.pred, s.tgt,
                                        s.ok and "" or "  WRONG")
end
util.write_lines(out_dir .. "/samples.txt", samples)
util.write_json(out_dir .. "/metrics.json",
                {task = args.task, score = args.score, mode = args.mode,
                 accuracy = acc, accuracy_beam = acc_beam,
                 beam = args.beam > 1 and args.beam or nil,
                 length_penalty = args.beam > 1 and args.length_penalty or nil,
                 steps = step, train_seconds = train_seconds,
                 reached_target = reached, history = history, config = cfg,
                 threads = glimpse.get_num_threads()}, {indent = 2})
for _, s in ipairs(samples) do print("  " .. s) end
print("wrote alignment heatmaps, samples.txt, metrics.json and run.json to " .. out_dir)
