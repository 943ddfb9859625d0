-- tests/test_caption_familiar.lua -- what cap:caption returns (the caption; its maps on
-- request; cap:caption_maps the three values), what a captioner knows (cap.description,
-- cap:about, pretrained's second value, `?` at the REPL) and the familiarity check
-- (glimpse.captioner.familiar, cap:familiar): the shipped models pass test scenes and flag
-- noise, a colour picture, blank and inverted images.
local lu = require "luaunit"
local glimpse = require "glimpse"
local H = require "tests.captioner_helpers"
local helpers = require "tests.helpers"

local T = {}

local familiar = glimpse.captioner.familiar

-- the shipped soft model, read once
local soft
local function shipped()
  soft = soft or glimpse.captioner.pretrained("scenes-soft")
  return soft
end

-- ---------------------------------------------------------------------------------------
-- what caption returns

function T.test_caption_returns_the_caption_alone_and_its_maps_on_request()
  glimpse.manual_seed(3)
  local cap = H.tiny()
  local img = glimpse.rand(1, 16, 16)
  lu.assertEquals(select("#", cap:caption(img, {beam = 2})), 1)
  local words = cap:caption(img, {beam = 2})
  lu.assertEquals(type(words), "string")
  local w2, info = cap:caption(img, {beam = 2, maps = true})
  local w3, tokens, alphas = cap:caption_maps(img, {beam = 2})
  lu.assertEquals(w2, words)
  lu.assertEquals(w3, words)
  lu.assertEquals(info.tokens, tokens)
  lu.assertEquals(info.alphas.shape, alphas.shape)
  lu.assertEquals(info.alphas:totable(), alphas:totable())
  lu.assertEquals(info.image.shape, {1, 16, 16})
  lu.assertNil(info.familiar)                  -- an untrained model keeps no summary
  -- a batch: a list of captions, and info's fields are lists
  local ws, binfo = cap:caption(glimpse.rand(3, 1, 16, 16), {beam = 1, maps = true})
  lu.assertEquals(#ws, 3)
  lu.assertEquals(#binfo.tokens, 3)
  lu.assertEquals(#binfo.alphas, 3)
end

-- ---------------------------------------------------------------------------------------
-- what a model knows

function T.test_the_shipped_models_say_what_they_were_trained_on()
  for _, name in ipairs({"scenes-soft", "scenes-hard"}) do
    local cap, about = glimpse.captioner.pretrained(name)
    lu.assertStrContains(cap.description, "64x64 grey scenes of 2-4 Fashion-MNIST items")
    lu.assertStrContains(cap.description, "glimpse.data.scenes.generate")
    lu.assertStrContains(about, "vocabulary (19 words): a the and above")
    lu.assertStrContains(about, "statistics of 2000 training images")
    lu.assertEquals(cap.familiar_summary.n, 2000)
    lu.assertEquals(cap.familiar_summary.size, {64, 64})
  end
  lu.assertStrContains(glimpse.captioner.about(), "scenes-hard: 64x64 grey scenes")
  -- the REPL's ?name shows it for a captioner and for the module
  rawset(_G, "test_familiar_cap", shipped())
  local text = glimpse.repl.doc("test_familiar_cap")
  rawset(_G, "test_familiar_cap", nil)
  lu.assertEquals(text:sub(1, 50), "-- what it knows\n64x64 grey scenes of 2-4 Fashion-")
  lu.assertStrContains(glimpse.repl.doc("glimpse.captioner"), "scenes-soft: 64x64 grey scenes")
end

function T.test_description_and_summary_survive_save_and_load()
  local cap = H.tiny()
  cap.description = "16x16 noise\nsecond line"
  cap.familiar_summary = familiar.summary(glimpse.rand(5, 1, 16, 16))
  local path = helpers.tmpdir() .. "/m.safetensors"
  cap:save(path)
  local back = glimpse.captioner.load(path)
  lu.assertEquals(back.description, cap.description)
  lu.assertEquals(back.familiar_summary.n, 5)
  lu.assertStrContains(back:about(), "16x16 noise")
  -- a damaged summary is an error naming the file
  local sd, meta = glimpse.load(path)
  meta.familiar = "[1, 2]"
  glimpse.save(path, sd, meta)
  local ok, err = pcall(glimpse.captioner.load, path)
  lu.assertFalse(ok)
  lu.assertStrContains(err, path)
  lu.assertStrContains(err, "'familiar'")
end

-- ---------------------------------------------------------------------------------------
-- the familiarity check

function T.test_test_scenes_are_familiar()
  local cap = shipped()
  local ds = glimpse.data.scenes.generate{split = "test", n = 20, seed = 3}
  for i = 1, ds.n do
    local ok, reasons = cap:familiar(ds:image(i))
    lu.assertTrue(ok, table.concat(reasons, "; "))
  end
  local _, info = cap:caption(ds:image(1), {maps = true})
  lu.assertTrue(info.familiar)
  lu.assertEquals(info.reasons, {})
end

function T.test_noise_a_colour_picture_blank_and_inverted_images_are_not()
  local cap = shipped()
  glimpse.manual_seed(11)
  local d = helpers.tmpdir()
  -- a "photo": smooth colour gradients with a bright disc, 90x120, as a PNG file
  local y = glimpse.arange(90):reshape(90, 1):expand(90, 120) / 90
  local x = glimpse.arange(120):reshape(1, 120):expand(90, 120) / 120
  local disc = (((x - 0.6) * (x - 0.6) + (y - 0.4) * (y - 0.4)) * -40):exp()
  local photo = glimpse.stack({x * 0.8 + disc * 0.2, y * 0.6 + 0.2, (x + y) * 0.3 + disc * 0.4}, 1)
  glimpse.image.save(d .. "/photo.png", photo:clamp(0, 1))
  local scene = glimpse.data.scenes.generate{split = "test", n = 1, seed = 7}:image(1)
  local cases = {{d .. "/photo.png", "colour"}, {glimpse.rand(1, 64, 64), "background"},
                 {glimpse.rand(1, 128, 128), "background"}, {glimpse.zeros(1, 64, 64), "ink"},
                 {glimpse.zeros(1, 64, 64) + 1, "background"}, {1 - scene, "background"}}
  for k, c in ipairs(cases) do
    local ok, reasons = cap:familiar(c[1], {resize = true})
    lu.assertFalse(ok, "case " .. k)
    lu.assertStrContains(table.concat(reasons, "; "), c[2])
  end
  local words, info = cap:caption(d .. "/photo.png", {resize = true, maps = true, warn = false})
  lu.assertEquals(type(words), "string")
  lu.assertFalse(info.familiar)
  lu.assertStrContains(cap:unfamiliar_note(info.reasons), "knows only 64x64 grey scenes")
  helpers.rmdir(d)
end

function T.test_summary_and_stats_check_their_arguments()
  lu.assertFalse(pcall(familiar.summary, 42))
  local ok, err = pcall(familiar.stats, glimpse.rand(4))
  lu.assertFalse(ok)
  lu.assertStrContains(err, "familiar.stats: img must be a (C,H,W) tensor")
  local s = familiar.stats(glimpse.zeros(1, 8, 8))
  lu.assertEquals({s.ink, s.blobs, s.colour}, {0, 0, 0})
  lu.assertEquals(familiar.colour(glimpse.zeros(3, 4, 4) + 0.5), 0)
end

return T
