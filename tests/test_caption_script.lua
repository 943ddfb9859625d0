-- tests/test_caption_script.lua -- scripts/caption.lua end to end on tiny settings: a soft
-- run on scenes whose report page headless Chromium renders (every image loads, nothing runs
-- off a 1280 px window), then evaluated again with --load and --steps 0; a hard run with the
-- leave-one-out recipe, and one with the default (gumbel) re-read by another test rule; a real-photograph corpus
-- in Karpathy's JSON format (a few PNGs and a split file the test writes) through a ResNet-18
-- encoder whose weights, in torchvision's names, the test writes too (glimpse.models'
-- deterministic fill); and the shipped captioners (models/scenes-*.safetensors), which must
-- still caption 200 test scenes at BLEU-4 >= 35 with beam 3, with at least twice the chance
-- attention mass inside the named item's box.
local lu = require "luaunit"
local glimpse = require "glimpse"
local util = glimpse.util
local H = require "tests.helpers"

local T = {}

local WINDOW = 1280
-- BLEU-4 (every phrasing of a scene a reference) >= 0.6 on these 200 scenes: scenes-soft
-- reaches 0.684, scenes-hard 0.645, with 2.6 and 3.4 times the chance mass in the box
-- (models/README.md).
local SHIPPED_BLEU4 = {["scenes-soft"] = 0.6, ["scenes-hard"] = 0.6}
local SHIPPED_IN_BOX_OVER_CHANCE = 2
local SHIPPED_SCENES = 200

local function exe() return arg and arg[-1] or "build/glimpse" end

local function tmpdir(tag)
  local d = string.format("/tmp/glimpse-test-caption-%d-%s", util.pid(), tag)
  os.execute("rm -rf " .. util.shell_quote(d))
  util.mkdir_p(d)
  return d
end

local function run(flags)
  local p = assert(io.popen(string.format("%s scripts/caption.lua %s 2>&1",
                                          util.shell_quote(exe()), flags)))
  local out = p:read("a")
  return p:close() == true, out
end

local TINY = "--train 96 --valid 16 --test 16 --steps 4 --eval-every 2 --batch 16 --embed 8 "
             .. "--hidden 16 --att 8 --channels 4,8,8 --overlays 3 --beam 2"

function T.test_soft_run_writes_every_output_and_its_page_fits_1280px_in_chromium()
  local d = tmpdir("soft")
  local ok, out = run(TINY .. " --out " .. d)
  lu.assertTrue(ok, out)
  for _, f in ipairs({"model.safetensors", "metrics.json", "run.json", "samples.txt",
                      "overlay_1.png", "overlay_3.png", "index.html"}) do
    lu.assertTrue(util.exists(d .. "/" .. f), "missing " .. f .. "\n" .. out)
  end
  local m = util.read_json(d .. "/metrics.json")
  lu.assertEquals(math.tointeger(m.steps), 4)
  lu.assertEquals(#m.test_bleu, 4)
  lu.assertEquals(#m.history, 2)
  lu.assertTrue(m.attention_in_box_teacher_forced.chance > 0)
  lu.assertEquals(#m.decoding.tried, 6)                  -- soft: the length penalty alone
  lu.assertNil(m.decoding.chosen.rule)
  lu.assertEquals(m.config.length_penalty, m.decoding.chosen.length_penalty)
  local lines = 0
  for _ in io.lines(d .. "/samples.txt") do lines = lines + 1 end
  lu.assertEquals(lines, 16)
  local strip = glimpse.image.info(d .. "/overlay_1.png")
  lu.assertTrue(strip.width <= 1200, "a strip of " .. strip.width .. " px")
  local r = H.browser_check(d .. "/index.html", WINDOW)   -- skips without chromium (not under CI)
  lu.assertEquals(r.images, 3, r.line)
  lu.assertEquals(r.broken, 0, r.line)
  lu.assertTrue(r.scroll <= WINDOW, r.line)
  lu.assertTrue(r.body <= WINDOW, r.line)
  -- --load with --steps 0: the saved model evaluated again, no training, the same numbers
  local e = tmpdir("soft-eval")
  local data = "--train 96 --valid 16 --test 16 --overlays 0 --beam 2"
  ok, out = run(string.format("%s --load %s/model.safetensors --steps 0 --out %s", data, d, e))
  lu.assertTrue(ok, out)
  local again = util.read_json(e .. "/metrics.json")
  lu.assertEquals(math.tointeger(again.steps), 0)
  lu.assertNil(out:find("train +%d+/"), out)                 -- no progress line: nothing trained
  lu.assertEquals(again.test_bleu, m.test_bleu)
  lu.assertEquals(again.attention_in_box, m.attention_in_box)
  ok, out = run(string.format("%s --dataset shapes --load %s/model.safetensors --steps 0 --out %s",
                              data, d, e))
  lu.assertFalse(ok)
  lu.assertStrContains(out, "Captioner.load: " .. d .. "/model.safetensors was trained with another vocabulary")
end

-- a rule between the model's options is a usage error before any data is made (no output
-- folder, no scenes generated), the recipe's settings included
function T.test_option_rules_fail_before_the_data()
  for flags, msg in pairs({
      ["--unseen-output"] = "Captioner: option 'unseen_output' needs unseen_feature = true",
      ["--global-output-rank 2"] = "Captioner: option 'global_output_rank' needs global_output = true",
      ["--attention hard --recipe loo --samples 1"] =
        "Captioner: baseline = \"loo\" needs samples >= 2, got 1"}) do
    local d = tmpdir("rules")
    local ok, out = run(TINY .. " " .. flags .. " --out " .. d)
    lu.assertFalse(ok, flags)
    lu.assertStrContains(out, msg)
    lu.assertNil(out:find("scenes:"), out)               -- the data was never made
  end
end

function T.test_hard_run_with_the_leave_one_out_recipe_trains_and_records_it()
  local d = tmpdir("hard")
  local ok, out = run(TINY .. " --attention hard --recipe loo --soft-prob 0 --length-penalty 1 --out " .. d)
  lu.assertTrue(ok, out)
  local m = util.read_json(d .. "/metrics.json")
  lu.assertEquals(m.recipe, "loo")
  lu.assertNil(m.decoding)                               -- a length penalty given: nothing tuned
  lu.assertEquals({m.config.hard_eval, m.config.length_penalty}, {"soft", 1})
  lu.assertEquals(math.tointeger(m.config.samples), 2)
  lu.assertEquals(m.config.baseline, "loo")
  lu.assertEquals(m.config.soft_prob, 0)                 -- a flag beats the recipe
  lu.assertStrContains(out, "reinforce")                 -- the REINFORCE term is logged
end

function T.test_hard_default_is_gumbel_read_by_region_and_load_can_change_the_test_rule()
  local d = tmpdir("hard-gumbel")
  local ok, out = run(TINY .. " --attention hard --out " .. d)
  lu.assertTrue(ok, out)
  local m = util.read_json(d .. "/metrics.json")
  lu.assertEquals({m.recipe, m.config.estimator, m.config.global_feature}, {"gumbel", "gumbel", true})
  -- the test rule and length penalty were chosen on the validation set, and kept
  local c = m.decoding.chosen
  lu.assertEquals(#m.decoding.tried, 12)                -- region, argmax x 6 penalties
  lu.assertEquals({m.config.hard_eval, m.config.length_penalty}, {c.rule, c.length_penalty})
  for _, r in ipairs(m.decoding.tried) do lu.assertTrue(r.bleu4 <= c.bleu4) end
  lu.assertStrContains(out, "decoding chosen on 16 validation images by beam BLEU-4: rule ")
  local e = tmpdir("hard-gumbel-eval")
  ok, out = run(string.format("--train 96 --valid 16 --test 16 --overlays 0 --beam 2 --load " ..
                              "%s/model.safetensors --steps 0 --hard-eval soft --length-penalty 0.5 --out %s", d, e))
  lu.assertTrue(ok, out)
  m = util.read_json(e .. "/metrics.json")
  lu.assertEquals({m.attention, m.config.hard_eval, m.config.estimator, m.config.length_penalty},
                  {"hard", "soft", "gumbel", 0.5})
  local back = glimpse.captioner.Captioner.load(e .. "/model.safetensors")
  lu.assertEquals({back.attention.hard_eval, back.config.length_penalty}, {"soft", 0.5})
end

function T.test_self_critical_steps_follow_the_cross_entropy_or_a_loaded_model()
  local d = tmpdir("scst")
  local ok, out = run(TINY .. " --attention hard --scst-steps 2 --scst-samples 3 --scst-cells sample " ..
                      "--scst-meaning 1 --scst-repeats 0.5 --out " .. d)
  lu.assertTrue(ok, out)
  local m = util.read_json(d .. "/metrics.json")
  lu.assertEquals(math.tointeger(m.steps), 4)                    -- the cross-entropy steps
  lu.assertEquals({math.tointeger(m.self_critical.steps), math.tointeger(m.self_critical.samples),
                   m.self_critical.baseline, m.self_critical.cells, m.self_critical.meaning,
                   m.self_critical.repeats},
                  {2, 3, "mean", "sample", 1, 0.5})
  lu.assertEquals(#m.self_critical.history, 1)                   -- evaluated at its end
  lu.assertStrContains(out, "reward")                            -- the samples' CIDEr-D, logged
  -- a loaded model fine-tuned: its decoding is chosen again on validation afterwards
  local e = tmpdir("scst-load")
  ok, out = run(string.format("--train 96 --valid 16 --test 16 --overlays 0 --beam 2 --load " ..
                              "%s/model.safetensors --steps 0 --scst-steps 2 --scst-baseline greedy --scst-xe 0.5 --out %s", d, e))
  lu.assertTrue(ok, out)
  m = util.read_json(e .. "/metrics.json")
  lu.assertEquals({math.tointeger(m.self_critical.steps), m.self_critical.baseline,
                   m.self_critical.xe}, {2, "greedy", 0.5})
  lu.assertNotNil(m.decoding)
  lu.assertStrContains(out, "decoding chosen on 16 validation images")
  ok, out = run(TINY .. " --scst-baseline best --out " .. e)
  lu.assertFalse(ok)
  lu.assertStrContains(out, "scst-baseline")
  ok, out = run(TINY .. " --captions none.tsv --images none --scst-repeats 1 --out " .. e)
  lu.assertFalse(ok)
  lu.assertStrContains(out, "--scst-repeats scores captions against generated scenes")
end

function T.test_help_lists_every_flag_the_script_always_had_with_its_default()
  local ok, out = run("--help")
  lu.assertTrue(ok, out)
  for f in ([[--anneal --att --attention --baseline --batch --beam --channels --clip --clutter
      --config --dataset --distributed --dropout --ds --embed --encoder --encoder-weights
      --entropy --entropy-end --epochs --estimator --eval-every --fine-tune --global-output
      --hard-eval --hidden --image-size --images --init --karpathy --length-aux --length-penalty --load
      --log-every --lr --lr-decay --max-len --min-count --mix --no-batch-norm --no-coords
      --no-deep-output --no-gate --no-global-feature --out --output-tanh --overlays --quick
      --unseen-feature
      --recipe --reward-weight --samples --score --seed --soft-prob --soft-prob-end --steps
      --tau --test --threads --time-limit --train --valid --whole-image]]):gmatch("%S+") do
    lu.assertNotNil(out:find("\n%s+" .. f:gsub("%-", "%%-") .. "[ \n]"), f)   -- a help line
  end
  for _, d in ipairs({{"--embed", 64}, {"--hidden", 256}, {"--att", 128}, {"--ds", 1},
                      {"--max-len", 30}, {"--batch", 32}, {"--lr", 0.003}, {"--beam", 3},
                      {"--recipe {gumbel,loo,paper}", "gumbel"}, {"--attention {soft,hard}", "soft"}}) do
    local esc = function(x) return (tostring(x):gsub("[%-%.%{%}]", "%%%0")) end
    lu.assertNotNil(out:find(esc(d[1]) .. "[^\n]*\n?[^\n]*%(default: " .. esc(d[2]) .. "%)"), d[1])
  end
end

-- a Karpathy-format corpus: 8 pictures (a red or blue square, left or right) with two
-- sentences each, 6 train / 1 val / 1 test
local function write_corpus(d)
  local images = {}
  for i = 1, 8 do
    local colour, side = i % 2 == 1 and "red" or "blue", i % 4 < 2 and "left" or "right"
    local x0 = side == "left" and 4 or 28
    local ch = colour == "red" and 1 or 3
    local pix = {}
    for c = 1, 3 do
      pix[c] = {}
      for y = 1, 40 do
        pix[c][y] = {}
        for x = 1, 48 do
          local inside = y >= 10 and y < 26 and x >= x0 and x < x0 + 16
          pix[c][y][x] = inside and (c == ch and 0.9 or 0.1) or 0.9
        end
      end
    end
    local t = glimpse.tensor(pix)
    local name = string.format("img%d.png", i)
    glimpse.image.save(d .. "/images/" .. name, t)
    local split = i <= 6 and "train" or (i == 7 and "val" or "test")
    images[i] = string.format('{"filename": "%s", "split": "%s", "sentences": ['
      .. '{"tokens": ["a", "%s", "square", "on", "the", "%s"], "raw": "A %s square on the %s."},'
      .. '{"tokens": ["the", "square", "is", "%s"], "raw": "The square is %s."}]}',
      name, split, colour, side, colour, side, colour, colour)
  end
  util.write_text(d .. "/dataset_tiny.json", '{"images": [' .. table.concat(images, ",") .. ']}')
end

function T.test_karpathy_corpus_with_torchvision_resnet18_weights_runs_end_to_end()
  local d = tmpdir("karpathy")
  util.mkdir_p(d .. "/images")
  write_corpus(d)
  local models = glimpse.models
  local enc = models.fill_deterministic_(models.resnet18{init = false, classifier = false}, 1)
  glimpse.save(d .. "/resnet18.safetensors", enc:state_dict())
  local ok, out = run(string.format("--karpathy %s/dataset_tiny.json --images %s/images --encoder "
                                    .. "resnet18 --encoder-weights %s/resnet18.safetensors "
                                    .. "--image-size 64 --min-count 1 --steps 3 --batch 4 "
                                    .. "--embed 8 --hidden 16 --att 8 --overlays 1 --beam 2 "
                                    .. "--out %s/run", d, d, d, d))
  lu.assertTrue(ok, out)
  local m = util.read_json(d .. "/run/metrics.json")
  lu.assertEquals(m.dataset, "karpathy")
  lu.assertEquals(math.tointeger(m.steps), 3)
  lu.assertEquals(m.config.fine_tune, false)             -- given weights: a frozen encoder
  -- the saved model reads a photograph of the corpus and captions it
  local cap = glimpse.captioner.Captioner.load(d .. "/run/model.safetensors")
  local words, tokens, alphas = cap:caption_maps(d .. "/images/img8.png", {beam = 2, resize = true})
  lu.assertEquals(type(words), "string")
  lu.assertEquals(alphas.shape[1], #tokens)
  lu.assertEquals(alphas.shape[2], 4)                    -- ResNet-18 at 64 px: a 2x2 grid
  -- the frozen encoder kept the weights it was given
  local sd = glimpse.load(d .. "/resnet18.safetensors")
  lu.assertEquals((cap.encoder:state_dict()["conv1.weight"] - sd["conv1.weight"]):abs():max():item(), 0)
end

function T.test_shipped_captioners_caption_200_scenes_at_bleu4_60_with_twice_chance_in_box()
  local ce = glimpse.models.caption_eval
  local src = glimpse.data.caption_sources.scenes{train = 1, valid = 1, test = SHIPPED_SCENES, seed = 1}
  for _, name in ipairs({"scenes-soft", "scenes-hard"}) do
    local cap = glimpse.captioner.pretrained(name)
    local words, alphas = ce.captions(cap, src.test, 3)
    local bleu = ce.bleu(src.test, words)
    local box = ce.in_box_generated(cap, src.test, words, alphas)
    local what = string.format("%s: BLEU-4 %.3f, in box %.3f (chance %.3f)", name, bleu[4],
                               box.inside, box.chance)
    lu.assertTrue(bleu[4] >= SHIPPED_BLEU4[name], what)
    lu.assertTrue(box.inside >= SHIPPED_IN_BOX_OVER_CHANCE * box.chance, what)
  end
end

return T
