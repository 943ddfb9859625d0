--- glimpse.models.captioner.options -- the Captioner's options, declared once (name, type,
-- default, range or choices, help): Captioner{...} checks its table against them (an
-- unknown option names the nearest real one), `?Captioner` lists them, and
-- scripts/caption.lua makes its flags from them (`flag` is the script's name for one).
-- Also RECIPES, the named settings of hard attention's training.
--
--   local copts = require "glimpse.models.captioner.options"
--   local config = copts.config(o, 2)     -- checked, defaults filled in (vocab, encoder kept)
--   copts.OPTIONS:add_flags(parser, {"attention", "emb"})
local glimpse = require "glimpse"
local options = require "glimpse.options"
local check = require "glimpse.check"

local M = {}

-- hard attention's test-time rules (cap:set_hard_eval)
M.HARD_EVAL = {"argmax", "region", "soft", "sample", "marginal"}

-- the content scores: every registered score but location, which has no keys to look at
local function scores()
  local out = {}
  for _, s in ipairs(glimpse.attention.SCORES) do
    if s ~= "location" then out[#out + 1] = s end
  end
  return out
end

--- glimpse.captioner.OPTIONS -- the spec of Captioner{...} (glimpse.options); the old names
--- dim_embed, dim_hidden, dim_att are aliases of emb, hidden, attn_hidden.
M.OPTIONS = options.declare("Captioner", {
  {"vocab", "table", nil, required = true,
   help = "a glimpse.data.Vocab (ids: 1 <pad> 2 <start> 3 <end> 4 <unk>) or a word list"},
  {"encoder", "table", nil, help = "a module with :grid, or models.encoder options " ..
   "{name=\"small\" | \"vgg16\" | \"resnet18\" ..., in_channels=, channels=}"},
  {"attention", "string", "soft", choices = {"soft", "hard"}, help = "soft | hard"},
  {"score", "string", "additive", choices = scores, help = "attention score (f_att)"},
  {"emb", "int", 64, range = {1}, flag = "--embed", aliases = {"dim_embed"},
   help = "word embedding size m"},
  {"hidden", "int", 256, range = {1}, aliases = {"dim_hidden"}, help = "LSTM size n"},
  {"attn_hidden", "int", 128, range = {1}, flag = "--att", aliases = {"dim_att"},
   help = "attention MLP size"},
  {"doubly_stochastic", "number", 1, range = {0}, flag = "--ds",
   help = "doubly stochastic penalty lambda (0: off)"},
  {"gate", "boolean", true, help = "the beta_t gating scalar"},
  {"deep_output", "boolean", true,
   help = "the deep output layer (false: p(y_t) = softmax(W h_t))"},
  {"output_tanh", "boolean", false,
   help = "a tanh inside the deep output layer (the authors' code)"},
  {"coords", "boolean", false,
   help = "(x, y) cell coordinates appended to the annotations"},
  {"global_feature", "boolean", false,
   help = "the mean annotation in the LSTM input at every step (Anderson et al. 2018)"},
  {"global_feature_rank", "int", 0, range = {0},
   help = "global_feature through a bottleneck of this many dimensions, W_g = U P (0: full " ..
          "rank)"},
  {"global_feature_pool", "string", "mean", choices = {"mean", "relu"},
   help = "global_feature's pooling: mean_i P a_i, or mean_i relu(P a_i + b), r detectors " ..
          "averaged over the cells, so the state can hold how many items the image has " ..
          "(needs global_feature_rank > 0)"},
  {"global_output_rank", "int", 0, range = {0},
   help = "global_output through a bottleneck of this many dimensions, L_g = U P (0: full " ..
          "rank): room for how much the image holds, not for which items"},
  {"global_output", "boolean", false,
   help = "the mean annotation in the deep output layer too"},
  {"global_output_pool", "string", "mean", choices = {"mean", "relu"},
   help = "global_output's pooling: mean_i P a_i, or mean_i relu(P a_i + b), r detectors " ..
          "averaged over the cells (needs global_output_rank > 0)"},
  {"unseen_feature", "boolean", false, help = "the annotations weighted by the attention " ..
   "they have not had yet, max(0, 1 - sum_{s<t} alpha_si), averaged, in the LSTM input at " ..
   "every step (coverage: what is left to describe)"},
  {"unseen_feature_rank", "int", 0, range = {0},
   help = "unseen_feature through a bottleneck of this many dimensions, W_u = U P (0: full " ..
          "rank)"},
  {"unseen_feature_pool", "string", "mean", choices = {"mean", "relu"},
   help = "unseen_feature's pooling: P of the weighted mean annotation, or the weighted mean " ..
          "of relu(P a_i + b), r detectors over the cells not yet attended, so the state can " ..
          "hold how many items are left to name (needs unseen_feature_rank > 0)"},
  {"unseen_output", "boolean", false,
   help = "unseen_feature's pooled vector, after step t's attention, in the deep output " ..
          "layer too (L_u from 0): the word, <end> included, sees what is left"},
  {"unseen_from", "string", "attention", choices = {"attention", "reads"},
   help = "unseen_feature's coverage: the attention distributions (attention) or what each " ..
          "step read (reads: a hard read's region_size window, an expected context's alpha)"},
  {"coverage", "boolean", false, help = "the attention score sees the coverage, the " ..
   "attention each cell has had so far, e_ti = w^T tanh(W a_i + U h + w_c c_ti) (Tu et al. " ..
   "2016; additive or concat score): it can tell the cells looked at from those not yet"},
  {"whole_image", "boolean", false, help = "the mean annotation as one more cell to attend " ..
   "to (hard: can read the whole image)"},
  {"length_aux", "number", 0, range = {0}, help = "weight of an auxiliary loss: h_t " ..
   "predicts log(words left in the caption), so the state must know how much is left to " ..
   "name (0: off)"},
  {"dropout", "number", 0, range = {0, 0.99}, help = "dropout on the deep output"},
  {"fine_tune", "boolean", true, help = "train the encoder too (false: frozen, no tape)"},
  {"max_len", "int", 30, range = {1}, help = "longest caption (words)"},
  {"length_penalty", "number", 0, range = {0},
   help = "beam search's length normalisation alpha (GNMT)"},
  {"image", "table", nil,
   help = "what cap:prepare does to an image {channels=, height=, width=, mean=, std=}"},
  {"trained_on", "table", nil,
   help = "{C, H, W}: the images of the first cap:loss (kept in the checkpoint)"},
  {"soft_prob", "number", 0.5, range = {0, 1},
   help = "hard: probability of the expected context per batch (at the start)"},
  {"soft_prob_end", "number", nil, range = {0, 1},
   help = "hard: soft_prob at the end of the schedule (default: soft_prob)"},
  {"entropy", "number", 0.01, range = {0}, help = "hard: entropy bonus lambda_e (at the start)"},
  {"entropy_end", "number", nil, range = {0},
   help = "hard: entropy weight at the end of the schedule (default: entropy)"},
  {"mix", "string", "sample", choices = {"sample", "row", "expected"},
   help = "hard: sample (one coin per batch: the expected context or samples) | row (one " ..
          "coin per caption) | expected (both, weighted by soft-prob)"},
  {"anneal", "number", 1, range = {1e-6, 1},
   help = "hard: share of training over which the schedules move"},
  {"samples", "int", 1, range = {1},
   help = "hard: samples K per caption (K > 1: leave-one-out baseline)"},
  {"baseline", "string", nil, choices = {"average", "loo"},
   help = "hard: average (moving average) | loo (leave-one-out, K > 1; the default then)"},
  {"estimator", "string", "reinforce", choices = {"reinforce", "gumbel"},
   help = "hard: reinforce | gumbel (straight-through Gumbel-softmax)"},
  {"tau", "number", 1, range = {1e-3}, help = "hard, gumbel: temperature"},
  {"reward_weight", "number", 1, range = {0}, help = "hard: REINFORCE weight lambda_r"},
  {"baseline_decay", "number", 0.9, range = {0, 0.999999},
   help = "hard: the moving average's decay"},
  {"hard_eval", "string", "argmax", choices = M.HARD_EVAL,
   help = "hard: what test time reads (the argmax cell, the centre of the region_size " ..
          "window with the most attention, the expected context, a sample, or the cell " ..
          "summed out over the marginal_cells likeliest)"},
  {"region_size", "int", 3, range = {1}, help = "hard_eval = region: the window (odd)"},
  {"marginal_cells", "int", 8, range = {1}, help = "hard_eval = marginal: cells summed over"},
})

--- glimpse.captioner.RECIPES -- named settings of hard attention's training (soft_prob,
--- soft_prob_end, entropy, entropy_end, anneal, samples, baseline, estimator, tau,
--- reward_weight, mix, and the test-time hard_eval and length_penalty):
---   paper   Xu et al.: one sample, moving-average baseline, entropy bonus 0.01, the
---           expected context for half the batches throughout
---   loo     2 samples per caption with the leave-one-out baseline; the expected context for
---           every batch at first, falling to half over the first half of the steps; the
---           entropy bonus falls from 0.01 to 0 alike; test time reads the expected context
---   gumbel  straight-through Gumbel-softmax; soft_prob falls from 1 to 0.5 over all the
---           steps; test time reads the region rule with length penalty 2
---           (scripts/caption.lua's default; docs/experiments/caption.md compares them)
M.RECIPES = {
  paper = {soft_prob = 0.5, soft_prob_end = 0.5, entropy = 0.01, entropy_end = 0.01, anneal = 1,
           samples = 1, baseline = "average", estimator = "reinforce", tau = 1,
           reward_weight = 1, hard_eval = "argmax", mix = "sample"},
  loo = {soft_prob = 1, soft_prob_end = 0.5, entropy = 0.01, entropy_end = 0, anneal = 0.5,
         samples = 2, baseline = "loo", estimator = "reinforce", tau = 1, reward_weight = 1,
         hard_eval = "soft", mix = "sample"},
  gumbel = {soft_prob = 1, soft_prob_end = 0.5, entropy = 0, entropy_end = 0, anneal = 1,
            samples = 1, baseline = "average", estimator = "gumbel", tau = 1, reward_weight = 1,
            hard_eval = "region", length_penalty = 2, mix = "sample"},
}

--- glimpse.captioner.recipe_names() -> the sorted names of RECIPES
function M.recipe_names()
  local out = {}
  for k in pairs(M.RECIPES) do out[#out + 1] = k end
  table.sort(out)
  return out
end

--- glimpse.captioner.recipe_options() -> the sorted names of the options some recipe sets
function M.recipe_options()
  local seen, out = {}, {}
  for _, r in pairs(M.RECIPES) do
    for k in pairs(r) do
      if not seen[k] then seen[k], out[#out + 1] = true, k end
    end
  end
  table.sort(out)
  return out
end

--- glimpse.captioner.with_recipe(o, name) -> o, with RECIPES[name]'s values where o has none
function M.with_recipe(o, name)
  local r = M.RECIPES[name]
  if not r then
    check.fail(2, "captioner.with_recipe: unknown recipe %s (one of %s)", check.value(name),
               table.concat(M.recipe_names(), ", "))
  end
  for k, v in pairs(r) do
    if o[k] == nil then o[k] = v end
  end
  return o
end

--- glimpse.captioner.add_flags(parser, names, overrides) -> the names of the options made
--- flags: OPTIONS:add_flags for names, then for the options a recipe sets, which get no
--- default (a script fills them in with captioner.with_recipe); overrides as add_flags'
function M.add_flags(parser, names, overrides)
  local all, seen, o = {}, {}, {}
  for _, k in ipairs(names) do all[#all + 1], seen[k] = k, true end
  for k, v in pairs(overrides or {}) do o[k] = v end
  for _, k in ipairs(M.recipe_options()) do
    if not seen[k] then all[#all + 1] = k end
    o[k] = o[k] or {}
    if o[k].default == nil then o[k] = {default = false, help = o[k].help} end
  end
  M.OPTIONS:add_flags(parser, all, o)
  return all
end

--- copts.config(o, level) -> the checked options with the defaults filled in, and the rules
--- between options: unseen_from "reads" needs unseen_feature, global_output_rank needs
--- global_output, global_output_pool "relu" needs global_output_rank (and the same for
--- global_feature's and unseen_feature's), global_output and unseen_output need
--- deep_output, unseen_output needs unseen_feature, region_size is odd, baseline "loo"
--- needs samples >= 2; soft_prob_end, entropy_end and baseline follow their defaults.
--- level: as error's, counted from copts.config's caller.
function M.config(o, level)
  level = (level or 1) + 1
  if type(o) ~= "table" then
    check.fail(level, "Captioner: expected an options table {vocab=, encoder=, ...}, got %s",
               type(o))
  end
  local c = M.OPTIONS:check(o, level)
  if c.unseen_from ~= "attention" and not c.unseen_feature then
    check.fail(level, "Captioner: unseen_from = %q needs unseen_feature = true", c.unseen_from)
  end
  for _, g in ipairs({"global_output", "global_feature", "unseen_feature"}) do -- bottlenecks
    local rank, pool = c[g .. "_rank"], c[g .. "_pool"]
    if rank > 0 and not c[g] then
      check.fail(level, "Captioner: option '%s_rank' needs %s = true", g, g)
    end
    if pool ~= "mean" and rank == 0 then
      check.fail(level, "Captioner: %s_pool = %q needs %s_rank > 0 (the detectors P a_i + b)",
                 g, pool, g)
    end
  end
  for _, o in ipairs({"global_output", "unseen_output"}) do
    if c[o] and not c.deep_output then
      check.fail(level, "Captioner: option '%s' needs the deep output layer " ..
                        "(deep_output = true)", o)
    end
  end
  if c.unseen_output and not c.unseen_feature then
    check.fail(level, "Captioner: option 'unseen_output' needs unseen_feature = true")
  end
  if c.coverage and c.score ~= "additive" and c.score ~= "concat" then
    check.fail(level, "Captioner: option 'coverage' needs the additive or concat score, got " ..
               "score = %q", c.score)
  end
  if c.region_size % 2 == 0 then
    check.fail(level, "Captioner: option 'region_size' must be odd (a window centred on a " ..
                      "cell), got %d", c.region_size)
  end
  if c.soft_prob_end == nil then c.soft_prob_end = c.soft_prob end
  if c.entropy_end == nil then c.entropy_end = c.entropy end
  if c.baseline == nil then c.baseline = c.samples > 1 and "loo" or "average" end
  if c.baseline == "loo" and c.samples < 2 then
    check.fail(level, "Captioner: baseline = \"loo\" needs samples >= 2, got %d", c.samples)
  end
  local seen = c.trained_on
  if seen ~= nil and (#seen ~= 3 or math.type(seen[1]) ~= "integer" or
                      math.type(seen[2]) ~= "integer" or math.type(seen[3]) ~= "integer") then
    check.fail(level, "Captioner: option 'trained_on' must be {C, H, W} (integers)")
  end
  return c
end

-- the names of a checkpoint's config that are not options: derived from the others
local DERIVED = {dim_feature = true}

--- copts.from_checkpoint(cfg) -> the options of a saved config (old names kept: the spec
--- takes them as aliases), without what the model derives itself
function M.from_checkpoint(cfg)
  local o = {}
  for k, v in pairs(cfg) do
    if not DERIVED[k] then o[k] = v end
  end
  return o
end

return M
