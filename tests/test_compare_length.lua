-- tests/test_compare_length.lua -- glimpse.compare's Transformer names and the length
-- extrapolation grid: transformer[-positions][+variant...] parsed into the model's options
-- (and refused with a did-you-mean), two of them through the worker processes on a tiny
-- budget (records carry the options and the peak memory), and the named grid "length" (its
-- settings, and scripts/compare.lua --grid length with flags that override it).
local lu = require "luaunit"
local glimpse = require "glimpse"
local helpers = require "tests.helpers"
local compare = glimpse.compare
local util = glimpse.util

local T = {}

function T.test_transformer_names_give_the_model_options()
  local function opts(name, settings) return compare.parse_mechanism(name, settings).transformer end
  -- the two names of before keep their meaning
  lu.assertEquals(compare.parse_mechanism("transformer").positions, "sinusoidal")
  lu.assertEquals(opts("transformer"), {positions = "sinusoidal"})
  lu.assertEquals(opts("transformer-learned"), {positions = "learned"})
  lu.assertEquals(opts("transformer-rope"), {positions = "rope"})
  lu.assertEquals(opts("transformer-alibi"), {positions = "alibi"})
  lu.assertEquals(opts("transformer-t5"), {positions = "t5"})
  lu.assertEquals(opts("transformer-nope"), {positions = "none"})
  lu.assertEquals(compare.parse_mechanism("transformer-nope").kind, "transformer")
  lu.assertEquals(opts("transformer-rope+gqa"), {positions = "rope", kv_heads = 2})
  lu.assertEquals(opts("transformer+gqa", {heads = 8}), {positions = "sinusoidal", kv_heads = 4})
  lu.assertEquals(opts("transformer-t5+gqa2+window3"), {positions = "t5", kv_heads = 2, window = 3})
  lu.assertEquals(opts("transformer+mqa"), {positions = "sinusoidal", kv_heads = 1})
  lu.assertEquals(opts("transformer-alibi+window8"), {positions = "alibi", window = 8})
  lu.assertEquals(opts("transformer-sinusoidal+topk4"), {positions = "sinusoidal", top_k = 4})
  lu.assertEquals(opts("transformer-nope+linear"), {positions = "none", attention = "linear"})
  lu.assertEquals(opts("transformer+linear+mqa"),
                  {positions = "sinusoidal", attention = "linear", kv_heads = 1})
end

function T.test_bad_transformer_names_are_refused_with_a_did_you_mean()
  local function refused(name, ...)
    for _, part in ipairs({...}) do
      lu.assertErrorMsgContains(part, compare.parse_mechanism, name)
    end
  end
  refused("transformer-rop", "unknown Transformer positions 'rop'", "did you mean 'rope'?",
          "have sinusoidal, learned, rope, alibi, t5, nope")
  refused("transformer-none", "unknown Transformer positions 'none'", "did you mean 'nope'?")
  refused("transformer-rope+windw8", "unknown Transformer variant '+windw8'",
          "did you mean 'window'?")
  refused("transformer+gqq", "did you mean 'gqa'?")
  refused("transformer+topk", "'+topk'", "needs a positive number")
  refused("transformer+window0", "needs a positive number")
  refused("transformer+linear2", "needs no number")
  refused("transformer+gqa+mqa", "sets kv_heads twice")
  refused("transformer-rope+", "is not transformer[-positions][+variant...]")
  refused("transformr", "did you mean 'transformer'?")
  refused("transformer-nope+linear+linear", "sets attention twice")
  -- a name the model refuses is skipped with the model's reason, like dot/location
  local configs, skipped = compare.grid{mechanisms = {"transformer+gqa3", "transformer-rope"},
                                        tasks = {"reversal"}, seeds = 1}
  lu.assertEquals(#configs, 1)
  lu.assertEquals(skipped[1].mechanism, "transformer+gqa3")
  lu.assertStrContains(skipped[1].reason, "kv_heads")
end

function T.test_two_transformer_variants_run_through_the_workers()
  local s = compare.settings{steps = 6, eval_every = 3, train_n = 48, valid_n = 6, test_n = 4,
                             test_lengths = {8, 30}, heatmap_length = 8, d_model = 16, ff = 16,
                             layers = 1, batch = 8}
  local configs, skipped = compare.grid{mechanisms = {"transformer-alibi", "transformer-rope+mqa"},
                                        tasks = {"reversal"}, seeds = 1, settings = s}
  lu.assertEquals(#skipped, 0)
  lu.assertEquals(configs[2].id, "reversal.transformer-rope-mqa.s1." .. compare.settings_hash(s))
  lu.assertEquals(configs[2].transformer, {positions = "rope", kv_heads = 1})
  local dir = helpers.tmpdir()
  local rows, records, failures = compare.run{configs = configs, out = dir, jobs = 2,
                                              say = function() end}
  lu.assertEquals(#failures, 0)
  lu.assertEquals(#records, 2)
  lu.assertEquals(#rows, 2)
  for _, r in ipairs(records) do
    lu.assertEquals(#r.accuracy_by_length, 2)
    lu.assertEquals(r.accuracy_by_length[2].length, 30)     -- past the training lengths
    lu.assertTrue(r.peak_rss_kb > 0, r.id)
  end
  lu.assertEquals(records[2].config.transformer, {positions = "rope", kv_heads = 1})
  lu.assertNotEquals(records[1].params, records[2].params)  -- one key/value head: fewer weights
  lu.assertTrue(rows[1].peak_rss_kb > 0)
  -- the same names with another option are another configuration, never a finished one
  local other = util.json_decode(util.json_encode(configs[2]))
  other.transformer.kv_heads = 2
  lu.assertFalse(compare.same_config(configs[2], other))
  lu.assertTrue(compare.same_config(configs[2], util.json_decode(util.json_encode(configs[2]))))
  helpers.rmdir(dir)
end

function T.test_the_length_grid()
  local g = compare.named_grid("length")
  local s = g.settings
  lu.assertEquals(s.test_lengths, {10, 20, 40, 60, 80, 100})
  lu.assertEquals(s.steps, 800)
  lu.assertEquals(s.test_n, 50)
  lu.assertEquals(g.seeds, 2)
  lu.assertEquals(g.tasks, {"reversal", "dates"})
  for _, t in ipairs(g.tasks) do
    lu.assertTrue(glimpse.data.compare.task(t):can_make(100), t .. " makes sources of 100")
  end
  local have = {}
  for _, m in ipairs(g.mechanisms) do have[m] = compare.parse_mechanism(m) end
  for _, pos in ipairs({"sinusoidal", "learned", "rope", "alibi", "t5", "none"}) do
    local found = false
    for _, m in pairs(have) do found = found or (m.kind == "transformer" and m.positions == pos) end
    lu.assertTrue(found, "a Transformer with positions " .. pos)
  end
  lu.assertNotNil(have["conv/soft"])
  -- every mechanism of the grid is one the model builds: none skipped
  local configs, skipped = compare.grid(g)
  lu.assertEquals(#skipped, 0)
  lu.assertEquals(#configs, #g.mechanisms * 2 * 2)
  lu.assertEquals(compare.grid_flags("length").test_lengths, "10,20,40,60,80,100")
  lu.assertErrorMsgContains("did you mean 'length'?", compare.named_grid, "lenght")
  -- a caller's copy does not change the grid
  g.mechanisms[1] = "dot/soft"
  lu.assertEquals(compare.named_grid("length").mechanisms[1], compare.GRIDS.length.mechanisms[1])
end

-- scripts/compare.lua --grid length: the grid's flags where the command line gives none
function T.test_the_script_takes_the_length_grid_and_flags_over_it()
  local exe = arg and arg[-1] or "build/glimpse"
  local dir = helpers.tmpdir()
  local function run(flags)
    local p = io.popen(string.format("%s scripts/compare.lua --grid length --report-only " ..
                                     "--out %s %s 2>&1", helpers.sh_quote(exe),
                                     helpers.sh_quote(dir), flags))
    local out = p:read("a")
    return p:close(), out
  end
  local ok, out = run("")
  lu.assertTrue(ok, out)
  local n = #compare.GRIDS.length.mechanisms * 2 * 2
  lu.assertStrContains(out, string.format("compare: %d configurations (tasks reversal,dates, " ..
                                          "seeds 1..2), 800 steps each", n))
  local cfg = util.read_json(dir .. "/run.json").config.model
  lu.assertEquals(cfg.test_lengths, {10, 20, 40, 60, 80, 100})
  lu.assertEquals(cfg.test_n, 50)
  ok, out = run("--seeds 1 --tasks dates --steps 300 --test-lengths 10,100 --mechanisms " ..
                "transformer-alibi,transformer-nope")
  lu.assertTrue(ok, out)
  lu.assertStrContains(out, "compare: 2 configurations (tasks dates, seeds 1..1), 300 steps each")
  cfg = util.read_json(dir .. "/run.json").config.model
  lu.assertEquals(cfg.test_lengths, {10, 100})
  ok, out = run("--grid lenght")
  lu.assertTrue(not ok, out)
  lu.assertStrContains(out, "length")
  helpers.rmdir(dir)
end

return T
