-- tests/test_scripts.lua -- the experiment scripts (seq2seq, pointer, ntm_copy,
-- fashion_mnist, demo) run end to end on tiny settings (a few training steps, tiny models)
-- and write their results JSON, run.json, index.html and pictures; and the helpers they
-- rely on:
-- glimpse.planar (tour validity, polygon areas, simple polygons, hull area coverage) and
-- glimpse.draw (line, disc and rectangle drawing).  The scripts run in a fresh process of
-- the executable running this suite, from the repository root.
local lu = require "luaunit"
local glimpse = require "glimpse"
local planar = require "glimpse.planar"
local draw = require "glimpse.plot.draw"
local points = require "datasets.points"
local util = glimpse.util
local H = require "tests.helpers"

local T = {}

local AREA_TOL = 1e-12
local PIXEL_TOL = 1e-6
local DISC_AREA_TOL = 0.03      -- relative: anti-aliased coverage against pi r^2

-- ---------------------------------------------------------------------------------------
-- running a script

local function exe() return arg and arg[-1] or "build/glimpse" end

local function tmpdir(tag)
  return H.tmpdir() .. "/" .. tag
end

-- run a script with flags; returns ok (exit status 0), the output
local function run(script, flags)
  local cmd = string.format("%s %s %s 2>&1", util.shell_quote(exe()), script, flags)
  local p = assert(io.popen(cmd))
  local out = p:read("a")
  local ok = p:close()
  return ok == true, out
end

local function assert_png(path)
  lu.assertTrue(util.exists(path), "missing " .. path)
  local info = glimpse.image.info(path)
  lu.assertTrue(info.width > 20 and info.height > 20, path .. " is too small")
end

-- a script run that must fail (a bad flag) with a message containing `text`
local function assert_rejects(script, flags, text)
  local ok, out = run(script, flags)
  lu.assertFalse(ok, script .. " " .. flags .. " should fail")
  lu.assertStrContains(out, text)
end

-- the files every experiment writes beside its own
local function assert_run_files(d)
  local r = util.read_json(d .. "/run.json")
  lu.assertTrue(type(r.command) == "string" and r.machine ~= nil, "run.json lacks command/machine")
  local html = H.read_file(d .. "/index.html")
  lu.assertNotNil(html, "missing " .. d .. "/index.html")
  lu.assertStrContains(html, "</html>")
end

function T.test_seq2seq_smoke_run_writes_accuracy_maps_and_samples()
  local d = tmpdir("s2s")
  local ok, out = run("scripts/seq2seq.lua", "--steps 4 --eval-every 2 --train 64 --valid 8 "
                      .. "--max-len 6 --batch 8 --emb 8 --hidden 16 --attn-hidden 8 --beam 2 "
                      .. "--maps 2 --score general --out " .. d)
  lu.assertTrue(ok, out)
  local m = util.read_json(d .. "/metrics.json")
  lu.assertEquals(m.score, "general")
  lu.assertEquals(math.tointeger(m.steps), 4)
  lu.assertEquals(#m.history, 2)                      -- validations at steps 2 and 4
  lu.assertTrue(m.accuracy >= 0 and m.accuracy <= 1)
  lu.assertTrue(m.accuracy_beam >= 0 and m.accuracy_beam <= 1)
  lu.assertEquals(math.tointeger(m.beam), 2)
  lu.assertStrContains(out, "final: exact-sequence accuracy")
  assert_png(d .. "/alignment_1.png")
  assert_png(d .. "/alignment_2.png")
  lu.assertTrue(util.exists(d .. "/alignment_1.svg"))
  local samples = H.read_file(d .. "/samples.txt")
  lu.assertEquals(select(2, samples:gsub("\n", "")), 2)
  lu.assertStrContains(samples, " -> ")
  assert_run_files(d)
end

function T.test_seq2seq_rejects_an_unknown_score()
  assert_rejects("scripts/seq2seq.lua", "--score nope --steps 1", "'--score' must be one of")
end

function T.test_fashion_mnist_smoke_run_writes_results_and_a_model()
  local d = tmpdir("fm")
  local ok, out = run("scripts/fashion_mnist.lua", "--epochs 2 --limit 64 --test-limit 50 --batch 32 "
                      .. "--channels 2,4 --hidden 8 --threads 1 --out " .. d)
  lu.assertTrue(ok, out)
  local r = util.read_json(d .. "/results.json")
  lu.assertEquals(math.tointeger(r.steps), 4)          -- 2 epochs of 2 batches
  lu.assertEquals(#r.history, 2)                      -- a test after each epoch
  lu.assertTrue(r.test_accuracy >= 0 and r.test_accuracy <= 1)
  lu.assertEquals(r.config.channels, {2, 4})
  local sd = glimpse.load(d .. "/model.safetensors")
  lu.assertNotNil(sd["1.weight"])
  lu.assertStrContains(out, "final test accuracy")
  assert_run_files(d)
end

function T.test_demo_writes_its_maps_and_a_page_that_loads_them_within_1280px()
  local d = tmpdir("demo")
  local ok, out = run("scripts/demo.lua", "--steps 3 --eval-every 3 --out " .. d)
  lu.assertTrue(ok, out)
  lu.assertStrContains(out, "beam search (beam 3)")
  local m = util.read_json(d .. "/metrics.json")
  lu.assertEquals(math.tointeger(m.steps), 3)
  lu.assertTrue(m.accuracy >= 0 and m.accuracy_beam <= 1)
  assert_png(d .. "/alignment_4.png")
  assert_run_files(d)
  local r = H.browser_check(d .. "/index.html", 1280)   -- skipped without chromium
  lu.assertEquals(r.images, 4, r.line)
  lu.assertEquals(r.broken, 0, r.line)
  lu.assertTrue(r.scroll <= 1280 and r.body <= 1280, r.line)
end

local TINY = "--steps 6 --epoch-steps 3 --batch 16 --emb 16 --hidden 16 --valid 8 --test 8 "
             .. "--beam 2 --pictures 1 --threads 1"

function T.test_pointer_tsp_smoke_run_writes_metrics_and_valid_tours()
  local d = tmpdir("tsp")
  local ok, out = run("scripts/pointer.lua", TINY .. " --task tsp --n 5 --train 64 --out " .. d)
  lu.assertTrue(ok, out)
  local m = util.read_json(d .. "/metrics.json")
  lu.assertEquals(m.task, "tsp")
  lu.assertEquals(math.tointeger(m.steps), 6)
  lu.assertEquals(#m.history, 2)                      -- a validation after each of 2 epochs
  local t = m.tests[1]
  -- decoding masks chosen cities and the end slot, so every tour is a permutation
  lu.assertEquals(t.greedy.valid_tours, 1)
  lu.assertEquals(t.beam.valid_tours, 1)
  lu.assertTrue(t.greedy.tour_length >= t.greedy.optimal_length - 1e-6)
  lu.assertTrue(t.beam.tour_length >= t.beam.optimal_length - 1e-6)
  assert_png(d .. "/instance_1.png")
  assert_png(d .. "/attention_1.png")
  assert_run_files(d)
  -- the saved model, reloaded without training, decodes the same test set the same way
  local d2 = d .. "-reload"
  ok, out = run("scripts/pointer.lua", TINY .. " --task tsp --n 5 --train 64 --steps 0 --load "
                .. d .. "/model.safetensors --out " .. d2)
  lu.assertTrue(ok, out)
  local m2 = util.read_json(d2 .. "/metrics.json")
  lu.assertEquals(math.tointeger(m2.steps), 0)
  lu.assertAlmostEquals(m2.tests[1].greedy.tour_length, t.greedy.tour_length, 1e-12)
  lu.assertAlmostEquals(m2.tests[1].beam.tour_length, t.beam.tour_length, 1e-12)
end

function T.test_pointer_hull_mixed_sizes_reports_coverage_per_test_size()
  local d = tmpdir("hull")
  local ok, out = run("scripts/pointer.lua",
                      TINY .. " --task hull --n-min 4 --n-max 8 --mix-sizes batch --test-n 5,12 --out " .. d)
  lu.assertTrue(ok, out)
  local m = util.read_json(d .. "/metrics.json")
  lu.assertEquals(#m.tests, 3)                        -- the training sizes, then n=5 and n=12
  lu.assertEquals(m.tests[2].n, "5")
  lu.assertEquals(m.tests[3].n, "12")
  for _, t in ipairs(m.tests) do
    for _, r in ipairs({t.greedy, t.beam}) do
      lu.assertTrue(r.area_coverage >= 0 and r.area_coverage <= 1 + 1e-9)
      lu.assertTrue(r.invalid >= 0 and r.invalid <= 1)
      lu.assertTrue(r.accuracy >= 0 and r.accuracy <= 1)
    end
  end
  assert_png(d .. "/instance_1.png")
end

function T.test_pointer_sort_paper_recipe_runs()
  local d = tmpdir("sort")
  local ok, out = run("scripts/pointer.lua", TINY .. " --task sort --n 6 --paper --out " .. d)
  lu.assertTrue(ok, out)
  local m = util.read_json(d .. "/metrics.json")
  lu.assertEquals(m.optimiser, "sgd-paper")
  lu.assertTrue(out:find("SGD lr 1", 1, true) ~= nil, out)
end

function T.test_pointer_glimpses_and_cosine_schedule_train_and_reload()
  local d = tmpdir("sort-glimpse")
  local ok, out = run("scripts/pointer.lua", TINY .. " --task sort --n 5 --glimpses 2 --cosine --out " .. d)
  lu.assertTrue(ok, out)
  lu.assertStrContains(out, "lr 0.001 (cosine)")
  local m = util.read_json(d .. "/metrics.json")
  lu.assertEquals(math.tointeger(m.config.glimpses), 2)
  -- the checkpoint carries the glimpses: reloaded without the flag it decodes the same way
  ok, out = run("scripts/pointer.lua", TINY .. " --task sort --n 5 --steps 0 --load " .. d
                .. "/model.safetensors --out " .. d .. "-reload")
  lu.assertTrue(ok, out)
  local m2 = util.read_json(d .. "-reload/metrics.json")
  lu.assertEquals(math.tointeger(m2.config.glimpses), 2)
  lu.assertEquals(m2.tests[1].greedy.token, m.tests[1].greedy.token)
  lu.assertEquals(m2.tests[1].beam.exact, m.tests[1].beam.exact)
end

function T.test_pointer_augmented_tsp_and_logit_clip_train_and_reload()
  local d = tmpdir("tsp-augment")
  local ok, out = run("scripts/pointer.lua", TINY .. " --task tsp --n 6 --train 20 --augment "
                      .. "--logit-clip 10 --out " .. d)
  lu.assertTrue(ok, out)
  lu.assertStrContains(out, "20 augmented training data")
  local m = util.read_json(d .. "/metrics.json")
  lu.assertEquals(m.config.logit_clip, 10)
  ok, out = run("scripts/pointer.lua", TINY .. " --task tsp --n 6 --train 20 --steps 0 --load "
                .. d .. "/model.safetensors --out " .. d .. "-reload")
  lu.assertTrue(ok, out)
  local m2 = util.read_json(d .. "-reload/metrics.json")
  lu.assertEquals(m2.config.logit_clip, 10)
  lu.assertEquals(m2.tests[1].beam.tour_length, m.tests[1].beam.tour_length)
end

function T.test_pointer_bad_flags_give_a_clear_error()
  assert_rejects("scripts/pointer.lua", "--glimpses -1", "--glimpses")
  assert_rejects("scripts/pointer.lua", "--logit-clip=-2", "--logit-clip: PointerNet: option 'logit_clip' must be a finite number >= 0")
  assert_rejects("scripts/pointer.lua", "--task tsp --n 21", "Held-Karp")
  assert_rejects("scripts/pointer.lua", "--task hull --label-cache x", "--label-cache is for --task tsp")
  assert_rejects("scripts/pointer.lua", "--task tsp --n-min 5 --n-max 21", "sizes at most 20")
  assert_rejects("scripts/pointer.lua", "--task tsp --n 10 --test-n 5,25", "sizes at most 20")
  assert_rejects("scripts/pointer.lua", "--task hull --n-min 50 --n-max 5", "--n-max must be >= --n-min")
  assert_rejects("scripts/pointer.lua", "--task hull --n-min 0 --n-max 5", "--n-min")
  assert_rejects("scripts/pointer.lua", "--task hull --n 2", "at least 3 points")
  assert_rejects("scripts/pointer.lua", "--task hull --n 10 --mix-sizes batch", "needs mixed sizes")
  assert_rejects("scripts/pointer.lua", "--task hull --n-min 5 --n-max 9 --mix-sizes batch --train 50",
                 "in fresh batches (--train 0)")
  assert_rejects("scripts/pointer.lua", "--mix-sizes sometimes", "'example', 'batch'")
  assert_rejects("scripts/pointer.lua", "--test-n 5,x", "--test-n must list integers")
end

function T.test_ntm_copy_smoke_run_writes_metrics_and_weightings()
  local d = tmpdir("ntm")
  local ok, out = run("scripts/ntm_copy.lua",
                      "--steps 5 --eval-every 5 --batch 4 --max-len 3 --test-lens 3,6 --test 4 "
                      .. "--memory 8 --width 6 --hidden 12 --threads 1 --out " .. d)
  lu.assertTrue(ok, out)
  local m = util.read_json(d .. "/metrics.json")
  lu.assertEquals(m.model, "ntm")
  lu.assertEquals(#m.tests, 2)
  lu.assertEquals(math.tointeger(m.tests[2].length), 6)
  -- bit errors are counted over the copy steps only: at most length * bits
  for _, t in ipairs(m.tests) do
    lu.assertTrue(t.bit_errors_per_sequence >= 0 and t.bit_errors_per_sequence <= t.length * 8)
  end
  assert_png(d .. "/copy_len6.png")
  assert_png(d .. "/write_weights_len6.png")
  assert_png(d .. "/read_weights_len6.png")
  assert_run_files(d)
  -- reloading the saved model and evaluating only gives the same bit errors
  local d2 = d .. "-reload"
  ok, out = run("scripts/ntm_copy.lua",
                "--steps 0 --max-len 3 --test-lens 3,6 --test 4 --memory 8 --width 6 --hidden 12 "
                .. "--threads 1 --load " .. d .. "/model.safetensors --out " .. d2)
  lu.assertTrue(ok, out)
  local m2 = util.read_json(d2 .. "/metrics.json")
  for k = 1, 2 do
    lu.assertEquals(m2.tests[k].bit_errors_per_sequence, m.tests[k].bit_errors_per_sequence)
  end
end

function T.test_ntm_copy_lstm_baseline_runs()
  local d = tmpdir("lstm")
  local ok, out = run("scripts/ntm_copy.lua",
                      "--model lstm --adam --steps 4 --eval-every 4 --batch 4 --max-len 3 "
                      .. "--test-lens 3,5 --test 4 --hidden 12 --layers 2 --threads 1 --out " .. d)
  lu.assertTrue(ok, out)
  local m = util.read_json(d .. "/metrics.json")
  lu.assertEquals(m.model, "lstm")
  lu.assertEquals(m.optimiser, "adam")
  assert_png(d .. "/copy_len5.png")
  lu.assertFalse(util.exists(d .. "/write_weights_len5.png"))
end

function T.test_ntm_copy_rejects_tests_longer_than_memory()
  assert_rejects("scripts/ntm_copy.lua", "--memory 10 --test-lens 20 --steps 1",
                 "does not fit 10 memory slots")
end

-- ---------------------------------------------------------------------------------------
-- glimpse.planar

local SQUARE = {{0, 0}, {1, 0}, {1, 1}, {0, 1}, {0.5, 0.75}, {0.5, 0.5}}

function T.test_is_tour_accepts_permutations_only()
  lu.assertTrue(planar.is_tour({3, 1, 2}, 3))
  lu.assertFalse(planar.is_tour({1, 1, 2}, 3))       -- a repeat
  lu.assertFalse(planar.is_tour({1, 2}, 3))          -- too short
  lu.assertFalse(planar.is_tour({1, 2, 4}, 3))       -- out of range
  lu.assertFalse(planar.is_tour({1, 2.5, 3}, 3))     -- not an index
end

function T.test_tour_length_closes_the_loop_and_matches_the_dataset()
  lu.assertAlmostEquals(planar.tour_length(SQUARE, {1, 2, 3, 4}), 4, AREA_TOL)
  lu.assertAlmostEquals(planar.tour_length(SQUARE, {1, 3, 2, 4}), 2 + 2 * math.sqrt(2), AREA_TOL)
  local ds = points.make{task = "tsp", n = 7, count = 5, seed = 3}
  for i = 1, 5 do
    lu.assertAlmostEquals(planar.tour_length(ds.points[i], ds.targets[i]), ds.tour_lengths[i], 1e-9)
  end
end

function T.test_polygon_area_sign_follows_orientation()
  lu.assertAlmostEquals(planar.polygon_area(SQUARE, {1, 2, 3, 4}), 1, AREA_TOL)
  lu.assertAlmostEquals(planar.polygon_area(SQUARE, {4, 3, 2, 1}), -1, AREA_TOL)
  lu.assertAlmostEquals(planar.polygon_area(SQUARE, {1, 2, 6}), 0.25, AREA_TOL)
end

function T.test_simple_polygon_detects_self_intersection_and_degenerate_cases()
  lu.assertTrue(planar.is_simple_polygon(SQUARE, {1, 2, 3, 4}))
  lu.assertTrue(planar.is_simple_polygon(SQUARE, {1, 2, 3, 5}))     -- concave is simple
  local ok, why = planar.is_simple_polygon(SQUARE, {1, 3, 2, 4})    -- a bow tie
  lu.assertFalse(ok)
  lu.assertEquals(why, "self-intersecting")
  ok, why = planar.is_simple_polygon(SQUARE, {1, 2})
  lu.assertFalse(ok)
  lu.assertEquals(why, "fewer than 3 vertices")
  ok, why = planar.is_simple_polygon(SQUARE, {1, 6, 3})              -- collinear
  lu.assertFalse(ok)
  lu.assertEquals(why, "zero area")
end

function T.test_hull_coverage_is_one_for_the_hull_and_a_fraction_inside_it()
  lu.assertAlmostEquals(planar.hull_coverage(SQUARE, {1, 2, 3, 4}, {1, 2, 3, 4}), 1, AREA_TOL)
  lu.assertAlmostEquals(planar.hull_coverage(SQUARE, {2, 3, 4, 1}, {1, 2, 3, 4}), 1, AREA_TOL)
  -- clockwise is the same region
  lu.assertAlmostEquals(planar.hull_coverage(SQUARE, {4, 3, 2, 1}, {1, 2, 3, 4}), 1, AREA_TOL)
  -- the square minus the quadrilateral 3-4-1-5: (1 + 0.25) / 2 by the shoelace formula
  lu.assertAlmostEquals(planar.hull_coverage(SQUARE, {1, 2, 3, 5}, {1, 2, 3, 4}), 0.625, AREA_TOL)
  local cov, why = planar.hull_coverage(SQUARE, {1, 3, 2, 4}, {1, 2, 3, 4})
  lu.assertEquals(cov, 0)
  lu.assertEquals(why, "self-intersecting")
  -- the dataset's hulls cover themselves, and any of their sub-polygons covers less
  local ds = points.make{task = "hull", n = 12, count = 5, seed = 2}
  for i = 1, 5 do
    local h = ds.targets[i]
    lu.assertAlmostEquals(planar.hull_coverage(ds.points[i], h, h), 1, 1e-9)
    local sub = table.move(h, 1, #h - 1, 1, {})
    if #sub >= 3 then lu.assertTrue(planar.hull_coverage(ds.points[i], sub, h) < 1) end
  end
end

function T.test_same_cycle_ignores_start_and_direction()
  lu.assertTrue(planar.same_cycle({1, 2, 3, 4}, {3, 4, 1, 2}))
  lu.assertTrue(planar.same_cycle({1, 2, 3, 4}, {1, 4, 3, 2}))
  lu.assertFalse(planar.same_cycle({1, 2, 3, 4}, {1, 3, 2, 4}))
  lu.assertFalse(planar.same_cycle({1, 2, 3}, {1, 2, 3, 4}))
end

function T.test_planar_bad_index_names_the_function()
  local ok, err = pcall(planar.tour_length, SQUARE, {1, 9})
  lu.assertFalse(ok)
  lu.assertStrContains(err, "planar.tour_length: index 9 at position 2 is outside 1..6")
end

-- ---------------------------------------------------------------------------------------
-- glimpse.draw

local function is_white(c, x, y)
  local r, g, b = c:get(x, y)
  return math.abs(r - 1) < PIXEL_TOL and math.abs(g - 1) < PIXEL_TOL and math.abs(b - 1) < PIXEL_TOL
end

function T.test_line_paints_its_pixels_and_nothing_far_from_it()
  local c = draw.Canvas(40, 30)
  c:line(5, 5, 35, 25, {color = {1, 0, 0}, width = 1})
  -- pixels whose centres lie on the line are fully red
  for _, x in ipairs({5, 11, 20, 29}) do
    local cx = x + 0.5
    local cy = 5 + (cx - 5) * 20 / 30
    local r, g, b = c:get(x, math.floor(cy))
    lu.assertAlmostEquals(r, 1, PIXEL_TOL)
    lu.assertTrue(g < 0.6 and b < 0.6, string.format("pixel %d: %g %g %g", x, r, g, b))
  end
  -- a pixel 3 px off the line and pixels beyond the end caps are untouched
  for y = 0, 29 do
    for x = 0, 39 do
      local px, py = x + 0.5, y + 0.5
      local dx, dy = 30, 20
      local t = math.max(0, math.min(1, ((px - 5) * dx + (py - 5) * dy) / (dx * dx + dy * dy)))
      local ex, ey = 5 + t * dx - px, 5 + t * dy - py
      if math.sqrt(ex * ex + ey * ey) > 1.5 then
        lu.assertTrue(is_white(c, x, y), string.format("pixel (%d,%d) was painted", x, y))
      end
    end
  end
end

function T.test_vertical_and_horizontal_lines_of_width_3_cover_a_band()
  local c = draw.Canvas(20, 20)
  c:line(10, 2, 10, 18, {color = {0, 0, 0}, width = 3})
  c:line(2, 15, 18, 15, {color = {0, 0, 1}, width = 1})
  for y = 3, 12 do                                   -- x = 10 +- 1.5 covers columns 9..10 fully
    lu.assertAlmostEquals(select(1, c:get(9, y)), 0, PIXEL_TOL)
    lu.assertAlmostEquals(select(1, c:get(10, y)), 0, PIXEL_TOL)
    lu.assertTrue(is_white(c, 5, y) and is_white(c, 14, y))
  end
  local r, g, b = c:get(4, 14)
  lu.assertAlmostEquals(b, 1, PIXEL_TOL)
  lu.assertTrue(r < 1 and g < 1)
end

function T.test_disc_coverage_matches_its_area()
  local c = draw.Canvas(40, 40)
  local radius = 8
  c:disc(20, 20, radius, {color = {0, 0, 0}})
  local ink = 0
  for y = 0, 39 do for x = 0, 39 do ink = ink + (1 - select(1, c:get(x, y))) end end
  local area = math.pi * radius * radius
  lu.assertTrue(math.abs(ink - area) / area < DISC_AREA_TOL, string.format("ink %g, area %g", ink, area))
end

function T.test_canvas_tensor_and_png_round_trip_with_text()
  local c = draw.Canvas(30, 16, {0, 0, 0})
  c:rect(0, 0, 30, 16, {fill = false, color = {1, 1, 1}})
  c:text("ok", 8, 4, {scale = 1, color = {0, 1, 0}})
  local img = c:tensor()
  lu.assertEquals(img.shape, {3, 16, 30})
  lu.assertAlmostEquals(img[1][1][1]:item(), 1, PIXEL_TOL)          -- the outline
  lu.assertTrue(img[2]:narrow(1, 4, 8):narrow(2, 8, 12):max():item() > 0.99)   -- green text
  local path = string.format("/tmp/glimpse-test-draw-%d.png", util.pid())
  c:save(path)
  local back = glimpse.image.load(path)
  lu.assertTrue((back - img):abs():max():item() < 1 / 255 + 1e-6)
  os.remove(path)
end

function T.test_draw_bad_arguments_raise_clear_errors()
  local ok, err = pcall(draw.Canvas, 0, 10)
  lu.assertFalse(ok)
  lu.assertStrContains(err, "draw.Canvas: width and height must be positive integers")
  local c = draw.Canvas(4, 4)
  ok, err = pcall(c.line, c, 0, 0, 0 / 0, 1)
  lu.assertFalse(ok)
  lu.assertStrContains(err, "canvas:line: x1 must be a finite number")
  ok, err = pcall(c.disc, c, 1, 1, 1, {color = "red"})
  lu.assertFalse(ok)
  lu.assertStrContains(err, "color must be a table")
end

return T
