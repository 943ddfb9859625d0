-- tests/test_compare.lua -- glimpse.compare: the grid (invalid pairs skipped with the
-- reason, unknown names refused), sharding over ranks, and a tiny grid run twice through the
-- worker processes: the same numbers both times (step budgets and fixed seeds), a re-run
-- resumes (nothing left to run), a failing configuration is reported while the others
-- finish, and the page renders in headless Chromium at 1280 px with every heatmap loaded.
local lu = require "luaunit"
local glimpse = require "glimpse"
local helpers = require "tests.helpers"
local compare = glimpse.compare
local util = glimpse.util

local T = {}

local WINDOW = 1280

local function tiny_settings()
  return compare.settings{steps = 12, eval_every = 6, train_n = 64, valid_n = 8, test_n = 6,
                          test_lengths = {8, 24}, heatmap_length = 8, hidden = 16,
                          attn_hidden = 8, emb = 8, d_model = 16, ff = 16, layers = 1,
                          batch = 8}
end

function T.test_grid_skips_invalid_pairs_with_a_reason()
  local configs, skipped = compare.grid{scores = {"dot", "additive"}, modes = {"soft", "location"},
                                        baselines = {"rnnenc"}, tasks = {"reversal", "lookup"},
                                        seeds = 2, settings = tiny_settings()}
  lu.assertEquals(#skipped, 1)
  lu.assertEquals(skipped[1].mechanism, "dot/location")
  lu.assertStrContains(skipped[1].reason, "additive or concat")
  lu.assertEquals(#configs, 2 * 4 * 2)                 -- tasks x (3 pairs + rnnenc) x seeds
  local hash = compare.settings_hash(tiny_settings())
  lu.assertEquals(configs[1].id, "reversal.dot-soft.s1." .. hash)
  lu.assertEquals(configs[#configs].id, "lookup.rnnenc.s2." .. hash)
  local ids = {}
  for _, c in ipairs(configs) do
    lu.assertNil(ids[c.id], "ids are unique")
    ids[c.id] = true
  end
end

function T.test_mechanism_names_are_checked()
  lu.assertEquals(compare.parse_mechanism("general/local-p+sup").supervise, true)
  lu.assertEquals(compare.parse_mechanism("transformer-learned").positions, "learned")
  lu.assertErrorMsgContains("unknown score 'bilinear'", compare.parse_mechanism, "bilinear/soft")
  lu.assertErrorMsgContains("unknown mode 'sideways'", compare.parse_mechanism, "dot/sideways")
  lu.assertErrorMsgContains("is not score/mode", compare.parse_mechanism, "dot")
  lu.assertErrorMsgContains("unknown task", compare.grid, {mechanisms = {"dot/soft"},
                                                           tasks = {"juggling"}})
  lu.assertErrorMsgContains("compare.settings: unknown option 'stepz' (did you mean 'steps'?",
                            compare.settings, {stepz = 3})
end

function T.test_shards_partition_the_grid()
  local configs = compare.grid{mechanisms = {"dot/soft", "general/soft", "rnnenc"},
                               tasks = {"reversal"}, seeds = 3, settings = tiny_settings()}
  local seen = {}
  for r = 0, 3 do
    for _, c in ipairs(compare.shard(configs, r, 4)) do
      lu.assertNil(seen[c.id])
      seen[c.id] = r
    end
  end
  for i, c in ipairs(configs) do lu.assertEquals(seen[c.id], (i - 1) % 4) end
  lu.assertErrorMsgContains("rank", compare.shard, configs, 4, 4)
end

local function numbers(results)
  local out = {}
  for _, r in ipairs(results.results) do
    out[#out + 1] = {r.mechanism, r.accuracy_by_length, r.curve, r.alignment_accuracy, r.params}
  end
  return out
end

function T.test_same_grid_twice_gives_the_same_table_resumes_and_reports_failures()
  local base = helpers.tmpdir()
  local configs = compare.grid{mechanisms = {"additive/monotonic", "rnnenc", "transformer"},
                               tasks = {"reversal"}, seeds = 1, settings = tiny_settings()}
  local bad = util.json_decode(util.json_encode(configs[1]))
  bad.id, bad.task = "broken", "no-such-task"
  local said = {}
  local function say(s) said[#said + 1] = s end
  local a, b = base .. "/a", base .. "/b"
  local rows, records, failures = compare.run{configs = {configs[1], bad, configs[2], configs[3]},
                                              out = a, jobs = 2, say = say}
  lu.assertEquals(#records, 3)
  lu.assertEquals(#failures, 1)
  lu.assertEquals(failures[1].id, "broken")
  lu.assertStrContains(failures[1].error, "unknown task")
  lu.assertEquals(#rows, 3)
  compare.run{configs = configs, out = b, jobs = 1, say = say}
  local ra, rb = util.read_json(a .. "/results.json"), util.read_json(b .. "/results.json")
  lu.assertEquals(numbers(ra), numbers(rb))
  for _, r in ipairs(ra.results) do
    for _, key in ipairs({"score", "mode", "task", "seeds", "accuracy_mean", "accuracy_std",
                          "accuracy_by_length", "ms_per_step", "params", "config"}) do
      lu.assertNotNil(r[key], r.mechanism .. " has " .. key)
    end
  end
  lu.assertNotNil(ra.results[1].alignment_accuracy)
  lu.assertEquals(ra.results[2].alignment_accuracy, compare.null) -- rnnenc: no attention
  -- a re-run keeps the finished configurations and runs only the failed one again
  said = {}
  compare.run{configs = configs, out = a, jobs = 2, say = say}
  lu.assertStrContains(said[1], "3 finished already, 0 to run")
  local md = util.read_text(a .. "/results.md")
  lu.assertStrContains(md, "| additive/monotonic |")
  -- the page: every heatmap loads and nothing is wider than the window
  local html = util.read_text(a .. "/index.html")
  lu.assertEquals(select(2, html:gsub("<img ", "")), 2)         -- monotonic and transformer
  local c = helpers.browser_check(a .. "/index.html", WINDOW)
  lu.assertEquals(c.images, 2, c.line)
  lu.assertEquals(c.broken, 0, c.line)
  lu.assertTrue(c.scroll <= WINDOW, c.line)
  lu.assertTrue(c.body <= WINDOW, c.line)
  helpers.rmdir(base)
end

function T.test_the_script_runs_a_tiny_grid_and_skips_invalid_pairs()
  local d = helpers.tmpdir() .. "/out"
  local exe = arg and arg[-1] or "build/glimpse"
  local cmd = string.format("%s scripts/compare.lua --mechanisms dot/soft,dot/location,rnnenc "
                            .. "--tasks lookup --seeds 1 --steps 4 --eval-every 2 --train-n 32 "
                            .. "--valid-n 4 --test-n 4 --test-lengths 8,24 --hidden 8 --jobs 2 "
                            .. "--out %s 2>&1", helpers.sh_quote(exe), helpers.sh_quote(d))
  local p = io.popen(cmd)
  local out = p:read("a")
  lu.assertTrue(p:close(), out)
  lu.assertStrContains(out, "skipping dot/location")
  lu.assertStrContains(out, "2 results, 0 failed, 0 not run")
  local r = util.read_json(d .. "/results.json")
  lu.assertEquals(#r.results, 2)
  lu.assertEquals(r.skipped[1].mechanism, "dot/location")
  lu.assertTrue(util.exists(d .. "/index.html") and util.exists(d .. "/results.md"))
  p = io.popen(string.format("%s scripts/compare.lua --mechanisms dot/nowhere --out %s 2>&1",
                             helpers.sh_quote(exe), helpers.sh_quote(d)))
  out = p:read("a")
  lu.assertNotEquals(p:close(), true)
  lu.assertStrContains(out, "unknown mode 'nowhere'")
end

return T
