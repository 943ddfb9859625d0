--- glimpse.models.eval -- held-out measures of the whole models, computed from what their
-- :decode gives (greedy, or beam search with opts.beam > 1):
--
--   local eval = glimpse.models.eval
--   eval.sequence_accuracy(s2s, valid, {beam = 5})  --> {exact=, token=, bleu=, n=}
--   eval.pointer(ptr, test, {beam = 3})             --> {exact=, token=, n=} and for hull
--                                                       {area_coverage=, invalid=}, for tsp
--                                                       {valid_tours=, tour_length=,
--                                                       optimal_length=, gap=}
--   eval.copy(ntm, batch)                           --> {bit_errors=, exact=, n=}
--
-- Datasets are the ones the models train on: datasets/seq2seq_tasks.lua (references
-- ds.tgt_ids), any dataset whose batches are in PointerNet's layout (datasets/points.lua's,
-- with ds.points and ds.tour_lengths for the hull and tsp measures), and a copy_task batch
-- or dataset.  The models run in evaluation mode without a tape.
local glimpse = require "glimpse"
local metrics = require "glimpse.metrics"
local planar = require "glimpse.planar"
local pointer_targets = require("glimpse.models.pointer").targets

local M = {}

local function check(fname, model, ds, opts, level)
  if type(model) ~= "table" or type(model.decode) ~= "function" then
    error(fname .. ": argument #1 must be a model with :decode (glimpse.models.*)", level + 1)
  end
  if type(ds) ~= "table" or type(ds.collate) ~= "function" or type(ds.n) ~= "number" then
    error(fname .. ": argument #2 must be a dataset with n and :collate(indices)", level + 1)
  end
  if opts ~= nil and type(opts) ~= "table" then
    error(fname .. ": opts must be a table {beam=, batch_size=, max_len=}, got " .. type(opts),
          level + 1)
  end
  opts = opts or {}
  local bs = opts.batch_size or 200
  if math.type(bs) ~= "integer" or bs < 1 then
    error(fname .. ": opts.batch_size must be a positive integer, got " .. tostring(bs), level + 1)
  end
  return opts, bs
end

--- eval.decode_all(model, ds, {beam=1, batch_size=200, max_len=}) -> outputs, extras:
--- model:decode over the whole dataset in order, batch by batch; outputs[i] for example i,
--- extras.alignments[i] and extras.scores[i] where the model gives them
function M.decode_all(model, ds, opts)
  local bs
  opts, bs = check("eval.decode_all", model, ds, opts, 2)
  local outs, ex = {}, {alignments = {}, scores = {}}
  local dopts = {beam = opts.beam, max_len = opts.max_len}
  for s = 1, ds.n, bs do
    local idx = {}
    for i = s, math.min(ds.n, s + bs - 1) do idx[#idx + 1] = i end
    local o, e = model:decode(ds:collate(idx), dopts)
    for k, i in ipairs(idx) do
      outs[i] = o[k]
      if e and e.alignments then ex.alignments[i] = e.alignments[k] end
      if e and e.scores then ex.scores[i] = e.scores[k] end
    end
  end
  return outs, ex
end

-- exact-sequence accuracy against refs (default: the dataset's); a tour (ds.task == "tsp")
-- counts in either direction and from any start
function M._exact(preds, ds, refs)
  refs = refs or ds.tgt_ids or ds.targets
  if ds.task ~= "tsp" then return (metrics.exact_match(preds, refs)) end
  local right = 0
  for i = 1, #refs do if planar.same_cycle(preds[i], refs[i]) then right = right + 1 end end
  return #refs > 0 and right / #refs or 0
end

--- eval.sequence_accuracy(model, ds, {beam=1, batch_size=200, max_len=, bleu=true}) ->
---   {exact=, token=, bleu= (corpus BLEU-4 over target ids; seq2seq datasets), n=}
-- exact: share of examples decoded exactly (tsp: the same tour in either direction, from
-- any start); token: share of reference positions predicted right (metrics.token_accuracy).
-- References: ds.tgt_ids (seq2seq tasks) or ds.targets (points).
function M.sequence_accuracy(model, ds, opts)
  local o = check("eval.sequence_accuracy", model, ds, opts, 2)
  local refs = ds.tgt_ids or ds.targets
  if type(refs) ~= "table" then
    error("eval.sequence_accuracy: the dataset has no references (tgt_ids or targets)", 2)
  end
  local preds = M.decode_all(model, ds, o)
  local r = {n = ds.n, exact = M._exact(preds, ds)}
  r.token = metrics.token_accuracy(preds, refs)
  if ds.tgt_ids and o.bleu ~= false and ds.n > 0 then
    r.bleu = metrics.bleu(preds, refs)[4]
  end
  return r
end

--- eval.pointer(model, ds, {beam=1, batch_size=200, max_len=}) -> {exact=, token=, n=, ...}
-- Any dataset whose ds:collate(indices) gives a batch in PointerNet's layout (inputs or
-- points, lengths, targets (B,T) of 1-based positions padded with 0, target_lengths;
-- docs/api/models/pointer.md): model:decode on each batch, the references from its
-- targets.  exact: share of examples whose output is the target sequence (ds.task ==
-- "tsp": the same tour in either direction, from any start); token: per-position accuracy
-- (share of target positions t where the output's t-th position is the target's).  Where
-- the dataset provides them (datasets/points.lua: ds.task and ds.points): for hull
-- area_coverage (mean |area(pred)| / area(hull), 0 for an invalid polygon) and invalid
-- (share of non-simple polygons), for tsp valid_tours (share of permutations), tour_length
-- and optimal_length (means over the valid tours) and gap (tour_length / optimal_length - 1).
function M.pointer(model, ds, opts)
  local o, bs = check("eval.pointer", model, ds, opts, 2)
  local preds, refs = {}, {}
  local dopts = {beam = o.beam, max_len = o.max_len}
  for s = 1, ds.n, bs do
    local idx = {}
    for i = s, math.min(ds.n, s + bs - 1) do idx[#idx + 1] = i end
    local b = ds:collate(idx)
    if type(b) ~= "table" then
      error("eval.pointer: ds:collate must return a batch table {inputs=, lengths=, targets=, "
            .. "target_lengths=} (docs/api/models/pointer.md), got " .. type(b), 2)
    end
    local y = pointer_targets(b, "eval.pointer: ds:collate's batch", 2)
    if #y ~= #idx then
      error(string.format("eval.pointer: ds:collate gave %d targets for %d indices", #y, #idx), 2)
    end
    local outs = model:decode(b, dopts)
    for k, i in ipairs(idx) do preds[i], refs[i] = outs[k], y[k] end
  end
  local out = {exact = M._exact(preds, ds, refs), token = metrics.token_accuracy(preds, refs),
               n = ds.n}
  local pts = type(ds.points) == "table" and ds.points or nil
  if ds.task == "hull" and pts then
    local cov, bad = 0, 0
    for i = 1, ds.n do
      local c, why = planar.hull_coverage(pts[i], preds[i], refs[i])
      cov = cov + c
      if why then bad = bad + 1 end
    end
    out.area_coverage = cov / math.max(1, ds.n)
    out.invalid = bad / math.max(1, ds.n)
  elseif ds.task == "tsp" and pts then
    local valid, len, opt = 0, 0, 0
    for i = 1, ds.n do
      local p = pts[i]
      if planar.is_tour(preds[i], #p) then
        valid = valid + 1
        len = len + planar.tour_length(p, preds[i])
        opt = opt + (ds.tour_lengths and ds.tour_lengths[i] or planar.tour_length(p, refs[i]))
      end
    end
    out.valid_tours = valid / math.max(1, ds.n)
    if valid > 0 then
      out.tour_length, out.optimal_length = len / valid, opt / valid
      out.gap = out.tour_length / out.optimal_length - 1
    end
  end
  return out
end

--- eval.describe(r) -> one line of text for a result of eval.pointer or
--- eval.sequence_accuracy: "exact 93.0%" (tsp: "optimal tours ..."), with the area coverage
--- (hull) and the tour length against the optimum (tsp) where r has them.
function M.describe(r)
  if type(r) ~= "table" or type(r.exact) ~= "number" then
    error("eval.describe: expected a result table with exact= (eval.pointer, eval.sequence_accuracy)", 2)
  end
  local s = string.format(r.valid_tours and "optimal tours %.1f%%" or "exact %.1f%%", 100 * r.exact)
  if r.area_coverage then
    s = s .. string.format(", area coverage %.1f%% (%.1f%% invalid)", 100 * r.area_coverage,
                           100 * r.invalid)
  end
  if r.valid_tours then
    s = s .. string.format(", tour %.3f vs optimal %.3f (gap %.2f%%, %.0f%% valid)",
                           r.tour_length or 0 / 0, r.optimal_length or 0 / 0,
                           100 * (r.gap or 0 / 0), 100 * r.valid_tours)
  end
  return s
end

--- eval.copy(model, data, {batch_size=200}) -> {bit_errors= (mean per sequence), exact=
--- (share of sequences copied without error), n=}.  data: a copy_task batch (inputs,
--- targets, output_mask) or a copy_task dataset (copy.make).
function M.copy(model, data, opts)
  if type(model) ~= "table" or type(model.decode) ~= "function" then
    error("eval.copy: argument #1 must be a model with :decode (glimpse.models.NTM)", 2)
  end
  if type(data) ~= "table" then error("eval.copy: argument #2 must be a batch or a dataset", 2) end
  local batches = {}
  if glimpse.is_tensor(data.inputs) then
    batches[1] = data
  else
    local bs
    opts, bs = check("eval.copy", model, data, opts, 2)
    for s = 1, data.n, bs do
      local idx = {}
      for i = s, math.min(data.n, s + bs - 1) do idx[#idx + 1] = i end
      batches[#batches + 1] = data:collate(idx)
    end
  end
  local errs, exact, n = 0, 0, 0
  for _, b in ipairs(batches) do
    local _, ex = model:decode(b)
    for _, e in ipairs(ex.errors) do
      errs, n = errs + e, n + 1
      if e == 0 then exact = exact + 1 end
    end
  end
  return {bit_errors = errs / math.max(1, n), exact = exact / math.max(1, n), n = n}
end

return M
