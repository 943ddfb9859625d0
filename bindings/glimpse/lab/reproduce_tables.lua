--- glimpse.reproduce_tables -- what `make reproduce` runs (glimpse.reproduce is the driver): the
-- papers' tables, each a list of runs of scripts/*.lua with their flags per mode ("full",
-- "quick", "tiny"), step budgets, and a rows(metrics, mode) that reads the script's
-- metrics.json into rows {label=, paper=, glimpse=}.  Papers: Vinyals et al. 2015; Graves et
-- al. 2014; Xu et al. 2015; Bahdanau et al. 2015; Luong et al. 2015.  How each full budget
-- and recipe was chosen, with the speeds they rest on: docs/experiments/reproduce.md.
local M = {}

-- a fraction as a percentage, nil for none (nil, or JSON null in compare's results.json)
local function pct(x) return type(x) == "number" and string.format("%.1f%%", 100 * x) or nil end

-- v = {full=, quick=, tiny=} -> the value of a mode
local function by(mode, v) return v[mode] end

local function cat(...)
  local out = {}
  for _, t in ipairs({...}) do for _, x in ipairs(t) do out[#out + 1] = x end end
  return out
end

-- ---------------------------------------------------------------------------------------
-- pointer networks (scripts/pointer.lua)

-- the model and the decoding per mode.  full: the recipe that did best at equal steps
-- (docs/experiments/reproduce.md), one model per size; the paper's recipe is pointer.lua's
-- --paper
local function pointer_flags(mode)
  return by(mode, {
    full = {"--hidden", 128, "--emb", 128, "--cosine", "--lr", 0.003, "--batch", 64,
            "--valid", 500, "--test", 1000, "--beam", 5, "--time-limit", 10800, "--pictures", 2},
    quick = {"--hidden", 64, "--emb", 64, "--batch", 64,
             "--valid", 200, "--test", 500, "--beam", 3, "--epoch-steps", 500,
             "--time-limit", 600, "--pictures", 0},
    tiny = {"--hidden", 8, "--emb", 8, "--batch", 4, "--valid", 4, "--test", 4, "--beam", 2,
            "--time-limit", 60, "--pictures", 0},
  })
end

local function test_of(m, n)
  for _, t in ipairs(m.tests) do if tostring(t.n) == tostring(n) then return t end end
  error("no test set n=" .. tostring(n) .. " in metrics.json")
end

local function exact_rows(task, paper)
  return function(m)
    local rows = {}
    for _, n in ipairs(paper.sizes) do
      local t = test_of(m, n)
      rows[#rows + 1] = {label = string.format("%s n=%s, exact (greedy)", task, n),
                         paper = paper[n], glimpse = pct(t.greedy.exact)}
      if t.beam then
        rows[#rows + 1] = {label = string.format("%s n=%s, exact (beam)", task, n),
                           paper = paper[n], glimpse = pct(t.beam.exact)}
      end
      if t.greedy.area_coverage then
        rows[#rows + 1] = {label = string.format("%s n=%s, area coverage / invalid (greedy)", task, n),
                           paper = "—", glimpse = pct(t.greedy.area_coverage) .. " / "
                                                 .. pct(t.greedy.invalid)}
      end
    end
    return rows
  end
end

local function tsp_rows(n, paper)
  return function(m)
    local t, rows = test_of(m, n), {}
    for _, kind in ipairs({"greedy", "beam"}) do
      local r = t[kind]
      if r then
        rows[#rows + 1] = {label = string.format("tsp n=%d, tour length (%s)", n, kind), paper = paper,
                           glimpse = r.tour_length and string.format(
                             "%.3f (optimal %.3f, %+.2f%%; %s valid)", r.tour_length,
                             r.optimal_length, 100 * r.gap, pct(r.valid_tours)) or "no valid tour"}
      end
    end
    return rows
  end
end

local POINTER_NOTE = "What was tried toward the paper's numbers (glimpses, hidden size, schedules, "
  .. "logit clipping, augmentation, beam) at equal steps, the budgets' basis and the measured "
  .. "shortfall: [experiments/reproduce.md](experiments/reproduce.md#pointer-networks-toward-the-paper)."

-- the re-evaluate command's flags (--steps 0 --load): no training set (tsp n=20's takes
-- 70 ms a tour to label; the test and validation sets do not depend on it)
local EVAL_SET = {["--train"] = 0}

-- steps: {full=, quick=, tiny=}; task_flags(mode) -> the run's own flags
local function pointer_run(id, steps, task_flags, rows)
  return {id = id, script = "scripts/pointer.lua", steps = steps, checkpoint = "model.safetensors",
          eval_set = EVAL_SET, rows = rows,
          flags = function(mode) return cat(task_flags(mode), pointer_flags(mode)) end}
end

-- a validation every tenth of the full budget
local function every(steps) return function(mode)
  return mode == "full" and {"--epoch-steps", steps.full // 10} or {} end
end

M.TABLES = {}
local T = M.TABLES

-- full budgets (each at most 30 minutes of training on one idle core; the cosine schedule
-- runs over each); hull and tsp n=10 with Bello et al.'s logit clipping (C = 10), tsp n=10
-- with its fixed set augmented
local HULL5_FULL, HULL10_FULL, TSP10_FULL, TSP10_TRAIN = 20000, 100000, 20000, 30000
local HULL_EXTRA = {full = {"--logit-clip", 10}, quick = {}, tiny = {}}
local TSP10_EXTRA = {full = {"--augment", "--logit-clip", 10}, quick = {}, tiny = {}}

local SORT_STEPS = {full = 10000, quick = 1000, tiny = 2}
T[#T + 1] = {name = "pointer_sort", note = POINTER_NOTE, title = "Ptr-Net: sorting points (Vinyals et al. 2015)",
  paper = "no number for sorting points (the paper sorts numbers in section 4.4 only)",
  runs = {pointer_run("n5", SORT_STEPS, function(mode)
                        return cat({"--task", "sort", "--n", 5}, every(SORT_STEPS)(mode)) end,
                      exact_rows("sort", {sizes = {5}}))}}

local HULL_STEPS = {[5] = {full = HULL5_FULL, quick = 1000, tiny = 2},
                    [10] = {full = HULL10_FULL, quick = 1000, tiny = 2}}
local function hull_run(n, paper)
  return pointer_run("n" .. n, HULL_STEPS[n], function(mode)
    return cat({"--task", "hull", "--n", n}, every(HULL_STEPS[n])(mode), by(mode, HULL_EXTRA)) end,
    exact_rows("hull", {sizes = {n}, [n] = paper}))
end
-- the paper's larger rows: one model over mixed sizes (a size drawn per batch), hull at n=50
-- alone, tsp at n=20.  Their flags are pointer_flags(mode) with some values replaced (a flag
-- may be given once); full budgets: 70,000, 60,000 and 40,000 steps, each under 2 hours of
-- one core at the 7-11 steps/s measured (docs/experiments/reproduce.md), with an 8-hour
-- guard for a loaded machine
local function with(flags, values)
  local out = {}
  for i, w in ipairs(flags) do
    out[i] = w
    if i > 1 and values[flags[i - 1]] ~= nil then out[i] = values[flags[i - 1]] end
  end
  return out
end
local HULL_MIXED_STEPS = {full = 70000, quick = 200, tiny = 2}
local function hull_mixed_run()
  return {id = "n5-50", script = "scripts/pointer.lua", steps = HULL_MIXED_STEPS,
          checkpoint = "model.safetensors",
          flags = function(mode)
            return cat({"--task", "hull", "--n-min", 5, "--n-max", 50, "--mix-sizes", "batch",
                        "--test-n", "5,10,50"},
                       every(HULL_MIXED_STEPS)(mode), by(mode, HULL_EXTRA),
                       with(pointer_flags(mode), by(mode, {full = {["--time-limit"] = 28800},
                         quick = {["--valid"] = 100, ["--test"] = 200, ["--epoch-steps"] = 100},
                         tiny = {}})))
          end,
          rows = exact_rows("hull (5-50 model)", {sizes = {5, 10, 50}, [5] = "92.0%", [10] = "87.0%",
                                                  [50] = "69.6%"})}
end
-- the paper's model trained on n=50 alone (its 72.6% exact, 99.9% area)
local HULL50_STEPS = {full = 60000, quick = 200, tiny = 2}
local function hull50_run()
  return {id = "n50", script = "scripts/pointer.lua", steps = HULL50_STEPS,
          checkpoint = "model.safetensors",
          flags = function(mode)
            return cat({"--task", "hull", "--n", 50}, every(HULL50_STEPS)(mode), by(mode, HULL_EXTRA),
                       with(pointer_flags(mode), by(mode, {full = {["--time-limit"] = 28800},
                         quick = {["--valid"] = 100, ["--test"] = 200, ["--epoch-steps"] = 100},
                         tiny = {}})))
          end,
          rows = exact_rows("hull (50 model)", {sizes = {50}, [50] = "72.6%"})}
end
T[#T + 1] = {name = "pointer_hull", note = POINTER_NOTE, title = "Ptr-Net: convex hull (Vinyals et al. 2015, Table 1)",
  paper = "Ptr-Net trained on n=5-50: exact hull n=5 92.0%, n=10 87.0%, n=50 69.6%; trained on "
          .. "50: 72.6% exact, 99.9% area. Here one model per size (the paper's per-size "
          .. "models, trained on fresh examples every step), and one trained on 5 to 50 points "
          .. "(a size drawn per batch) tested at n=5, 10, 50, and one trained on 50 alone.",
  runs = {hull_run(5, "92.0%"), hull_run(10, "87.0%"), hull_mixed_run(), hull50_run()}}

local TSP_STEPS = {[5] = {full = 5000, quick = 1000, tiny = 2},
                   [10] = {full = TSP10_FULL, quick = 1000, tiny = 2}}
-- tsp n=20 on a fixed set of exact tours (engine/tsp.c), kept in out/cache/tsp-labels; full:
-- logit clipping as hull (HULL_EXTRA)
local TSP20_STEPS = {full = 40000, quick = 100, tiny = 2}
local function tsp20_run()
  return {id = "n20", script = "scripts/pointer.lua", steps = TSP20_STEPS, checkpoint = "model.safetensors",
          -- its validation and test tours kept in MODELS/pointer_tsp/n20-cache
          eval_set = EVAL_SET, eval_cache = "--label-cache",
          flags = function(mode)
            return cat({"--task", "tsp", "--n", 20, "--augment", "--label-cache", "out/cache/tsp-labels",
                        "--train", by(mode, {full = 20000, quick = 256, tiny = 8})},
                       every(TSP20_STEPS)(mode), by(mode, HULL_EXTRA),
                       with(pointer_flags(mode), by(mode, {full = {["--time-limit"] = 28800},
                         quick = {["--valid"] = 50, ["--test"] = 100, ["--epoch-steps"] = 50}, tiny = {}})))
          end,
          rows = tsp_rows(20, "3.88 (optimal 3.82)")}
end
T[#T + 1] = {name = "pointer_tsp", note = POINTER_NOTE, title = "Ptr-Net: TSP (Vinyals et al. 2015, Table 2)",
  paper = "average tour length, optimal / Ptr-Net: n=5 2.12 / 2.12, n=10 2.87 / 2.88, "
          .. "n=20 3.82 / 3.88 (constrained beam search). One model per size here.",
  runs = {pointer_run("n5", TSP_STEPS[5], function(mode)
                        return cat({"--task", "tsp", "--n", 5}, every(TSP_STEPS[5])(mode)) end,
                      tsp_rows(5, "2.12 (optimal 2.12)")),
          pointer_run("n10", TSP_STEPS[10], function(mode)
                        return cat({"--task", "tsp", "--n", 10, "--train",
                                    by(mode, {full = TSP10_TRAIN, quick = 2000, tiny = 8})},
                                   every(TSP_STEPS[10])(mode), by(mode, TSP10_EXTRA)) end,
                      tsp_rows(10, "2.88 (optimal 2.87)")),
          tsp20_run()}}

-- ---------------------------------------------------------------------------------------
-- NTM copy (scripts/ntm_copy.lua)

-- full: the paper's NTM (RMSProp 1e-4) and the LSTM with Adam 1e-3 (RMSProp 1e-4 is slow for
-- it), the same 10,000 steps each, tested up to length 120 (memory 128)
local NTM_STEPS = {full = 10000, quick = 1500, tiny = 2}

local function ntm_run(model)
  local function paper_at(t)
    if t.trained_on then return "≈0" end
    if model == "lstm" then return "fails (beyond 20)" end
    return t.length <= 50 and "small (generalises to 30-50)" or "errors appear around 120"
  end
  return {id = model, script = "scripts/ntm_copy.lua", checkpoint = "model.safetensors",
    steps = NTM_STEPS,
    flags = function(mode)
      return cat({"--model", model}, by(mode, {
        full = cat(model == "lstm" and {"--adam"} or {},
                   {"--max-len", 20, "--test-lens", "20,30,50,80,120", "--test", 100,
                    "--eval-every", 1000, "--time-limit", 36000}),
        quick = {"--adam", "--max-len", 5, "--memory", 32, "--test-lens", "5,8,13", "--test", 50,
                 "--eval-every", 500, "--time-limit", 600},
        tiny = {"--max-len", 2, "--memory", 8, "--test-lens", "2,3", "--test", 2, "--hidden", 8,
                "--layers", 1, "--time-limit", 60}}))
    end,
    rows = function(m)
      local rows = {}
      for _, t in ipairs(m.tests) do
        rows[#rows + 1] = {label = string.format("%s, length %d%s: bit errors per sequence", model,
                                                 t.length, t.trained_on and " (trained)" or ""),
                           paper = paper_at(t),
                           glimpse = string.format("%.2f (%s copied perfectly)",
                                                   t.bit_errors_per_sequence, pct(t.perfect))}
      end
      return rows
    end}
end

T[#T + 1] = {name = "ntm_copy", title = "NTM copy vs LSTM (Graves et al. 2014, section 4.1)",
  paper = "trained on lengths 1-20: the NTM copies them nearly without error and generalises to "
          .. "30-50 (errors appear around 120); the LSTM fails beyond 20",
  runs = {ntm_run("ntm"), ntm_run("lstm")}}

-- ---------------------------------------------------------------------------------------
-- Show, Attend and Tell on scenes (scripts/caption.lua, through its command line)

-- full: `scripts/caption.lua --attention soft|hard` with the script's own defaults (20000
-- scenes, 6 epochs of batch 32 = 3750 steps, 500 test scenes, beam 3), one thread, no overlay
-- pictures and a generous time guard (neither changes the numbers)
local function caption_run(kind)
  return {id = kind, script = "scripts/caption.lua", steps = {full = 3750, quick = 200, tiny = 2},
    checkpoint = "model.safetensors",           -- --load it with --steps 0: evaluated again
    flags = function(mode)
      return cat({"--dataset", "scenes", "--attention", kind, "--overlays", 0, "--threads", 1},
                 by(mode, {full = {"--time-limit", 36000},
                           quick = {"--train", 2000, "--valid", 100, "--test", 100, "--epochs", 1000,
                                    "--time-limit", 600},
                           tiny = {"--train", 16, "--valid", 4, "--test", 4, "--channels", "4,4",
                                   "--hidden", 8, "--embed", 8, "--att", 8, "--beam", 1,
                                   "--time-limit", 60}}))
    end,
    rows = function(m)
      local b, box = m.test_bleu, m.attention_in_box
      local rows = {{label = kind .. " attention, test BLEU-1 / BLEU-4 (every phrasing a " ..
                               "reference)", paper = kind == "soft" and
                       "Flickr8k 67 / 19.5" or "Flickr8k 67 / 21.3",
                     glimpse = string.format("%.1f / %.1f", 100 * b[1], 100 * b[4])}}
      if box and box.inside then          -- where the item word looks: mass in its box
        rows[#rows + 1] = {label = kind .. " attention, mass in the named item's box (chance)",
          paper = "—", glimpse = string.format("%s (%s)", pct(box.inside), pct(box.chance))}
      end
      if m.test_cider then                -- every phrasing of the scene is a reference
        rows[#rows + 1] = {label = kind .. " attention, test CIDEr-D / ROUGE-L (greedy)",
          paper = "—", glimpse = string.format("%.3f / %.1f (%.3f / %.1f)", m.test_cider,
            100 * m.test_rouge_l, m.test_cider_greedy, 100 * m.test_rouge_l_greedy)}
      end
      local sem = m.test_semantics
      if sem then                         -- what the captions say about the scene
        rows[#rows + 1] = {label = kind .. " attention, items / relations named right " ..
                                   "(precision, recall), exact scenes", paper = "—",
          glimpse = string.format("%s, %s / %s, %s; %s", pct(sem.items.precision),
            pct(sem.items.recall), pct(sem.relations.precision), pct(sem.relations.recall),
            pct(sem.exact))}
        local four = sem.by_items["4"] or sem.by_items[4]
        if four then
          rows[#rows + 1] = {label = kind .. " attention, four-item scenes: right count, all " ..
                                     "four named, exact", paper = "—",
            glimpse = string.format("%d, %d, %d of %d", four.count, four.all_named, four.exact,
                                    four.n)}
        end
      end
      return rows
    end}
end

T[#T + 1] = {name = "sat_scenes", title = "Show, Attend and Tell: soft vs hard (Xu et al. 2015)",
  paper = "hard >= soft: Flickr8k BLEU-1/4 soft 67 / 19.5, hard 67 / 21.3 (COCO BLEU-4 24.3 / "
          .. "25.0). Here the synthetic scenes of datasets/ (another corpus: compare soft with "
          .. "hard, not with the paper's absolute numbers).",
  runs = {caption_run("soft"), caption_run("hard")}}

-- ---------------------------------------------------------------------------------------
-- the compare harness (scripts/compare.lua, glimpse.compare)

-- full: one worker process (each configuration runs seeded on one BLAS thread, so the numbers
-- do not depend on --jobs)
local function compare_run(id, mechanisms, rows)
  return {id = id, script = "scripts/compare.lua", metrics = "results.json",
    steps = {full = 2000, quick = 300, tiny = 2},
    no_eval = "compare keeps each configuration's result in its runs/ folder, not a checkpoint: "
              .. "re-running the command reuses them",
    flags = function(mode)
      return cat({"--mechanisms", mechanisms, "--tasks", "dates"},
                 by(mode, {full = {"--seeds", 3, "--jobs", 1},
                           quick = {"--seeds", 1, "--train-n", 3000, "--valid-n", 50, "--test-n", 30,
                                    "--test-lengths", "10,20,30,50", "--jobs", 2},
                           tiny = {"--seeds", 1, "--train-n", 20, "--valid-n", 4, "--test-n", 4,
                                   "--test-lengths", "10,20", "--jobs", 1}}))
    end,
    rows = rows}
end

local function by_length(r)
  local t = {}
  for _, e in ipairs(r.accuracy_by_length) do
    t[#t + 1] = string.format("%d: %.0f%%", e.length, 100 * e.token_mean)
  end
  return table.concat(t, ", ")
end

T[#T + 1] = {name = "bahdanau_length",
  title = "Bahdanau et al. 2015: accuracy against sentence length (Fig. 2)",
  paper = "RNNsearch (additive attention) keeps its BLEU as sentences grow to 50+ words; RNNenc "
          .. "(no attention) falls past about 20-30. Here: the dates task of the compare harness "
          .. "(trained on lengths 10-20), token accuracy per test source length.",
  runs = {compare_run("dates", "additive/soft,rnnenc", function(m)
    local rows = {}
    for _, r in ipairs(m.results) do
      rows[#rows + 1] = {label = r.mechanism .. " (" .. (r.mechanism == "rnnenc" and "RNNenc" or
                                 "RNNsearch") .. "), token accuracy by length",
                         paper = r.mechanism == "rnnenc" and "falls with length" or "holds with length",
                         glimpse = by_length(r)}
    end
    return rows
  end)}}

local LUONG = {["general/soft"] = "17.3 BLEU", ["general/local-m"] = "18.6 BLEU",
               ["general/local-p"] = "19.0 BLEU", ["dot/soft"] = "18.6 BLEU",
               ["location/soft"] = "18.1 BLEU"}
T[#T + 1] = {name = "luong_local",
  title = "Luong et al. 2015: global vs local-m vs local-p (Table 4)",
  paper = "WMT'14 En-De BLEU: global general 17.3, local-m general 18.6, local-p general 19.0 "
          .. "(best), global dot 18.6, global location 18.1. Here: the dates task of the compare "
          .. "harness (another task: the order of the mechanisms is what compares).",
  runs = {compare_run("dates", "general/soft,general/local-m,general/local-p,dot/soft,location/soft",
    function(m)
      local rows = {}
      for _, r in ipairs(m.results) do
        rows[#rows + 1] = {label = r.mechanism .. ": token accuracy, all / longer than trained",
                           paper = LUONG[r.mechanism],
                           glimpse = string.format("%s / %s", pct(r.accuracy_mean) or "—",
                                                   pct(r.long_accuracy_mean) or "—")}
      end
      return rows
    end)}}

return M
