-- tests/test_caption_cli.lua -- `glimpse caption IMAGE... [--model NAME|PATH] [--beam K]
-- [--overlay DIR] [--resize]` (bindings/glimpse/caption_cli.lua), captioner.pretrained, and
-- the captioner's input checks (cap:check_input, caption and loss refusing other shapes).
--
-- The executable runs as a subprocess (arg[-1], as in test_repl.lua) on PNGs and a tiny
-- captioner this suite writes to a temporary folder: it need not caption well, the
-- command's output is compared with what the same model says in this process.
local lu = require "luaunit"
local glimpse = require "glimpse"
local Vocab = glimpse.data.Vocab
local Captioner = glimpse.captioner.Captioner
local H = require "tests.helpers"

local T = {}

local WORDS = {"a", "red", "blue", "circle", "square", "above"}
local SIZE = 16

-- the shared file helpers (tests/helpers.lua): H.tmpdir's folders go at the end of the suite
local sh_quote, tmpdir, rmdir = H.sh_quote, H.tmpdir, H.rmdir
local read_file, write_file = H.read_file, H.write_file

local EXE = arg and arg[-1]

-- run the executable with args (and an environment prefix); stdout, stderr, exit code
local function run(args, env)
  local d = tmpdir()
  local cmd = {env or "", sh_quote(EXE)}
  for _, a in ipairs(args) do cmd[#cmd + 1] = sh_quote(a) end
  local line = string.format("%s < /dev/null > %s 2> %s", table.concat(cmd, " "),
                             sh_quote(d .. "/out"), sh_quote(d .. "/err"))
  local ok, how, code = os.execute(line)
  local out, err = read_file(d .. "/out"), read_file(d .. "/err")
  rmdir(d)
  if how == "exit" then return out, err, code end
  return out, err, ok and 0 or 128 + (code or 0)
end

-- a tiny grey 16x16 captioner trained for a few steps on one caption
local function tiny_trained(seed)
  glimpse.manual_seed(seed or 1)
  local v = Vocab.new(WORDS)
  local cap = Captioner{vocab = v, encoder = {in_channels = 1, channels = {4, 6}},
                        emb = 6, hidden = 8, attn_hidden = 5, max_len = 5}
  local ids = v:encode({"a", "red", "circle"})
  local cin = glimpse.tensor({{Vocab.START, ids[1], ids[2], ids[3]}, {Vocab.START, ids[1], ids[2], ids[3]}})
  local cout = glimpse.tensor({{ids[1], ids[2], ids[3], Vocab.END}, {ids[1], ids[2], ids[3], Vocab.END}})
  local opt = glimpse.optim.Adam(cap:parameters(), {lr = 3e-2})
  for _ = 1, 30 do
    opt:zero_grad()
    cap:loss(glimpse.rand(2, 1, SIZE, SIZE), cin, cout):backward()
    opt:step()
  end
  cap:evaluate()
  return cap
end

local function setup()
  local d = tmpdir()
  local cap = tiny_trained(1)
  cap:save(d .. "/tiny.safetensors")
  glimpse.manual_seed(2)
  glimpse.image.save(d .. "/grey.png", glimpse.rand(1, SIZE, SIZE))
  glimpse.image.save(d .. "/rgb.png", glimpse.rand(3, SIZE, SIZE))
  glimpse.image.save(d .. "/big.png", glimpse.rand(3, 2 * SIZE, SIZE + 8))
  write_file(d .. "/text.png", "this is not a picture\n")
  return d, cap
end

local function lines(s)
  local out = {}
  for l in s:gmatch("([^\n]*)\n") do out[#out + 1] = l end
  return out
end

-- ---------------------------------------------------------------------------------------
-- the command

function T.test_caption_prints_path_tab_caption_as_the_model_does_in_process()
  lu.skipIf(not EXE, "needs the glimpse executable as arg[-1]")
  local d, cap = setup()
  local out, err, code = run({"caption", d .. "/grey.png", d .. "/rgb.png", "--model",
                              d .. "/tiny.safetensors", "--beam", "2"})
  local want = {}
  for i, name in ipairs({"grey.png", "rgb.png"}) do
    local img = glimpse.image.load(d .. "/" .. name, {channels = 1})
    want[i] = d .. "/" .. name .. "\t" .. cap:caption(img, {beam = 2})
  end
  rmdir(d)
  lu.assertEquals(code, 0, err)
  lu.assertEquals(err, "")
  lu.assertEquals(lines(out), want)
  -- the tiny model learnt its one caption: the command shows a real caption, not a blank
  lu.assertStrContains(want[1], "\ta red circle")
end

function T.test_overlay_writes_one_strip_per_image_with_a_panel_per_word()
  lu.skipIf(not EXE, "needs the glimpse executable as arg[-1]")
  local d, cap = setup()
  local ov = d .. "/strips/deeper"
  local out, err, code = run({"caption", "--overlay", ov, "--model", d .. "/tiny.safetensors",
                              d .. "/grey.png", d .. "/rgb.png"})
  lu.assertEquals(code, 0, err)
  local words = cap:caption(glimpse.image.load(d .. "/grey.png", {channels = 1}))
  local n = #lines(out)
  local info = glimpse.image.info(ov .. "/grey.png")
  local info2 = glimpse.image.info(ov .. "/rgb.png")
  -- the strip Captioner:overlays draws for the same image and words has the same size
  local ref = cap:overlays(glimpse.image.load(d .. "/grey.png", {channels = 1}),
                           select(3, cap:caption_maps(glimpse.image.load(d .. "/grey.png",
                                                                    {channels = 1}))),
                           words, d .. "/ref.png")
  local rinfo = glimpse.image.info(ref)
  rmdir(d)
  lu.assertEquals(n, 2)
  lu.assertEquals({info.width, info.height}, {rinfo.width, rinfo.height})
  lu.assertTrue(info2.width > info2.height)
end

function T.test_bad_images_are_named_with_their_problem_and_the_rest_still_captioned()
  lu.skipIf(not EXE, "needs the glimpse executable as arg[-1]")
  local d = setup()
  local out, err, code = run({"caption", "--model", d .. "/tiny.safetensors",
                              d .. "/nosuch.png", d .. "/text.png", d .. "/big.png",
                              d .. "/grey.png"})
  rmdir(d)
  lu.assertEquals(code, 1)
  lu.assertStrContains(err, d .. "/nosuch.png: no such file")
  lu.assertStrContains(err, d .. "/text.png: not an image")
  lu.assertStrContains(err, d .. "/big.png: the image is 32x24 pixels")
  lu.assertStrContains(err, "the model takes 16x16")
  lu.assertStrContains(err, "--resize")
  local got = lines(out)
  lu.assertEquals(#got, 1)
  lu.assertStrContains(got[1], d .. "/grey.png\t")
end

function T.test_resize_converts_an_image_of_another_size()
  lu.skipIf(not EXE, "needs the glimpse executable as arg[-1]")
  local d, cap = setup()
  local out, err, code = run({"caption", "--resize", "--model", d .. "/tiny.safetensors",
                              d .. "/big.png"})
  local img = glimpse.image.resize(glimpse.image.load(d .. "/big.png", {channels = 1}), SIZE, SIZE)
  local want = cap:caption(img)
  rmdir(d)
  lu.assertEquals(code, 0, err)
  lu.assertEquals(out, d .. "/big.png\t" .. want .. "\n")
end

function T.test_overlay_of_a_one_pixel_or_one_pixel_wide_image_is_drawn_on_the_model_grid()
  lu.skipIf(not EXE, "needs the glimpse executable as arg[-1]")
  local d = setup()
  local ov = d .. "/ov"
  for _, size in ipairs({{1, 1}, {40, 1}}) do
    local p = string.format("%s/px%dx%d.png", d, size[1], size[2])
    glimpse.image.save(p, glimpse.rand(3, size[1], size[2]))
    local out, err, code = run({"caption", "--resize", "--overlay", ov, "--model",
                                d .. "/tiny.safetensors", p})
    lu.assertEquals(code, 0, err)
    lu.assertStrContains(out, p .. "\t")
    lu.assertTrue(glimpse._file_kind(string.format("%s/px%dx%d.png", ov, size[1], size[2])) == "file")
  end
  rmdir(d)
end

-- a colour "photo" of another size than the scenes: smooth gradients with a bright disc
local function photo(path)
  local y = glimpse.arange(90):reshape(90, 1):expand(90, 120) / 90
  local x = glimpse.arange(120):reshape(1, 120):expand(90, 120) / 120
  local disc = (((x - 0.6) * (x - 0.6) + (y - 0.4) * (y - 0.4)) * -40):exp()
  glimpse.image.save(path, glimpse.stack({x * 0.8 + disc * 0.2, y * 0.6 + 0.2,
                                          (x + y) * 0.3 + disc * 0.4}, 1):clamp(0, 1))
end

function T.test_a_scene_is_captioned_without_warning_and_a_photo_with_one()
  lu.skipIf(not EXE, "needs the glimpse executable as arg[-1]")
  local d = tmpdir()
  local scene = glimpse.data.scenes.generate{split = "test", n = 1, seed = 7}:image(1)
  glimpse.image.save(d .. "/scene.png", scene)
  photo(d .. "/photo.png")
  local out, err, code = run({"caption", d .. "/scene.png"})
  local want = glimpse.captioner.pretrained("scenes-soft"):caption(d .. "/scene.png")
  lu.assertEquals(code, 0, err)
  lu.assertEquals(err, "")
  lu.assertEquals(out, d .. "/scene.png\t" .. want .. "\n")
  -- the photo: refused without --resize, as the REPL refuses it
  local out2, err2, code2 = run({"caption", d .. "/photo.png"})
  lu.assertEquals({out2, code2}, {"", 1})
  lu.assertStrContains(err2, "the image is 90x120 pixels")
  lu.assertStrContains(err2, "--resize")
  -- with --resize and --overlay: the caption first, a warning, the strip on the 64x64 picture
  local ov = d .. "/ov"
  local out3, err3, code3 = run({"caption", "--resize", "--overlay", ov, d .. "/photo.png"})
  rmdir(d)
  lu.assertEquals(code3, 0, err3)
  lu.assertStrContains(out3, d .. "/photo.png\t")
  lu.assertStrContains(err3, "glimpse caption: warning: " .. d .. "/photo.png is unlike the " ..
                             "images this model was trained on (colour")
  lu.assertStrContains(err3, "knows only 64x64 grey scenes")
end

function T.test_the_caption_is_printed_even_when_the_overlay_cannot_be_written()
  lu.skipIf(not EXE, "needs the glimpse executable as arg[-1]")
  local d = setup()
  local ov = d .. "/ov"
  assert(os.execute("mkdir -p " .. sh_quote(ov .. "/grey.png")))   -- a folder takes its path
  local out, err, code = run({"caption", "--overlay", ov, "--model", d .. "/tiny.safetensors",
                              d .. "/grey.png"})
  rmdir(d)
  lu.assertEquals(code, 1)
  lu.assertStrContains(out, d .. "/grey.png\ta red circle")
  lu.assertStrContains(err, d .. "/grey.png: writing the overlay")
end

function T.test_help_says_what_the_model_knows()
  lu.skipIf(not EXE, "needs the glimpse executable as arg[-1]")
  local out, _, code = run({"caption", "--help"})
  lu.assertEquals(code, 0)
  lu.assertStrContains(out, "otherwise such an image is an error")
  lu.assertStrContains(out, "What the model scenes-soft knows:\n  64x64 grey scenes of 2-4 Fashion-MNIST items")
  lu.assertStrContains(out, "vocabulary (19 words)")
  local out2 = run({"caption", "--help", "--model", "scenes-hard"})
  lu.assertStrContains(out2, "What the model scenes-hard knows:")
end

function T.test_caption_refuses_an_unknown_option()
  local _, cap = setup()
  local ok, err = pcall(cap.caption, cap, glimpse.rand(1, SIZE, SIZE), {beem = 2})
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(err), "Captioner:caption: unknown option 'beem' (did you mean 'beam'?")
end

function T.test_bad_command_lines_exit_2_with_the_usage()
  lu.skipIf(not EXE, "needs the glimpse executable as arg[-1]")
  for _, case in ipairs({{{"caption"}, "no images given"},
                         {{"caption", "a.png", "--beam", "0"}, "--beam must be a positive"},
                         {{"caption", "a.png", "--beam"}, "--beam needs a value"},
                         {{"caption", "--frobnicate", "a.png"}, "unknown option --frobnicate"}}) do
    local out, err, code = run(case[1])
    lu.assertEquals(code, 2, table.concat(case[1], " "))
    lu.assertEquals(out, "")
    lu.assertStrContains(err, case[2])
    lu.assertStrContains(err, "usage: glimpse caption IMAGE...")
  end
  local out, _, code = run({"caption", "--help"})
  lu.assertEquals(code, 0)
  lu.assertStrContains(out, "--overlay DIR")
end

function T.test_model_problems_name_the_model_and_exit_1()
  lu.skipIf(not EXE, "needs the glimpse executable as arg[-1]")
  local d = setup()
  local _, err1, code1 = run({"caption", "--model", d .. "/none.safetensors", d .. "/grey.png"})
  local _, err2, code2 = run({"caption", "--model", d .. "/grey.png", d .. "/grey.png"})
  local _, err3, code3 = run({"caption", "--model", "no-such-model", d .. "/grey.png"},
                             "GLIMPSE_MODELS=" .. sh_quote(d))
  rmdir(d)
  lu.assertEquals({code1, code2, code3}, {1, 1, 1})
  lu.assertStrContains(err1, d .. "/none.safetensors: no such file")
  lu.assertStrContains(err2, "model " .. d .. "/grey.png: ")
  lu.assertStrContains(err3, 'no model named "no-such-model"')
  lu.assertStrContains(err3, "available: ")
  lu.assertStrContains(err3, "tiny")                 -- tiny.safetensors sits in GLIMPSE_MODELS
end

function T.test_a_model_by_name_is_found_in_glimpse_models()
  lu.skipIf(not EXE, "needs the glimpse executable as arg[-1]")
  local d, cap = setup()
  local out, err, code = run({"caption", "--model", "tiny", d .. "/grey.png"},
                             "GLIMPSE_MODELS=/nonexistent:" .. sh_quote(d))
  local want = cap:caption(glimpse.image.load(d .. "/grey.png", {channels = 1}))
  rmdir(d)
  lu.assertEquals(code, 0, err)
  lu.assertEquals(out, d .. "/grey.png\t" .. want .. "\n")
end

function T.test_help_mentions_the_caption_mode()
  lu.skipIf(not EXE, "needs the glimpse executable as arg[-1]")
  local out, _, code = run({"--help"})
  lu.assertEquals(code, 0)
  lu.assertStrContains(out, "caption IMAGE... [--model NAME|PATH] [--beam K] [--overlay DIR]")
end

-- ---------------------------------------------------------------------------------------
-- captioner.pretrained

function T.test_pretrained_rejects_bad_names_and_lists_where_it_looked()
  local ok, err = pcall(glimpse.captioner.pretrained, "../../etc/passwd")
  lu.assertFalse(ok)
  lu.assertStrContains(err, "name must be a model name")
  ok, err = pcall(glimpse.captioner.pretrained, "surely-not-a-shipped-model")
  lu.assertFalse(ok)
  lu.assertStrContains(err, 'no model named "surely-not-a-shipped-model"')
  lu.assertStrContains(err, "/models")
  lu.assertStrContains(err, "available: ")
  -- the source tree's models/ folder is searched
  local dirs = glimpse.captioner.model_dirs()
  local root = debug.getinfo(1, "S").source:match("^@(.*)/tests/[^/]*$")
  if root and root:sub(1, 1) == "/" then
    lu.assertEquals(dirs[#dirs], root .. "/models")
  end
end

-- ---------------------------------------------------------------------------------------
-- input checks

function T.test_caption_refuses_other_channels_or_sizes_naming_both_shapes()
  local cap = tiny_trained(3)
  lu.assertEquals({cap:input_shape()}, {1, SIZE, SIZE})
  for _, bad in ipairs({glimpse.rand(1, 32, 32), glimpse.rand(3, SIZE, SIZE),
                        glimpse.rand(2, 1, 8, 8)}) do
    local ok, err = pcall(cap.caption, cap, bad)
    lu.assertFalse(ok)
    lu.assertStrContains(err, "[" .. table.concat(bad.shape, ",") .. "]")
    lu.assertStrContains(err, "the model takes 1x16x16")
    lu.assertStrContains(err, "resize = true")
  end
  local ok, err = pcall(cap.caption, cap, {glimpse.rand(1, SIZE, SIZE), glimpse.rand(1, 9, 9)})
  lu.assertFalse(ok)
  lu.assertStrContains(err, "[1,9,9]")
end

function T.test_resize_true_converts_and_gives_the_caption_of_the_converted_image()
  local cap = tiny_trained(4)
  glimpse.manual_seed(5)
  local rgb = glimpse.rand(3, 32, 24)
  local by_hand = glimpse.image.resize(glimpse.image.to_grey(rgb):reshape(1, 32, 24), SIZE, SIZE)
  local w1, t1 = cap:caption_maps(rgb, {resize = true, beam = 2})
  local w2, t2 = cap:caption_maps(by_hand, {beam = 2})
  lu.assertEquals(w1, w2)
  lu.assertEquals(t1, t2)
  local batch = cap:check_input(glimpse.rand(2, 1, 8, 8), {resize = true})
  lu.assertEquals(batch.shape, {2, 1, SIZE, SIZE})
  local same = glimpse.rand(1, SIZE, SIZE)
  lu.assertIs(cap:check_input(same), same)
end

function T.test_loss_refuses_other_sizes_after_training_unless_resize()
  local cap = tiny_trained(6)
  local v = cap.vocab
  local ids = v:encode({"a", "square"})
  local cin = glimpse.tensor({{Vocab.START, ids[1], ids[2]}})
  local cout = glimpse.tensor({{ids[1], ids[2], Vocab.END}})
  local ok, err = pcall(cap.loss, cap, glimpse.rand(1, 1, 24, 24), cin, cout)
  lu.assertFalse(ok)
  lu.assertStrContains(err, "Captioner:loss: the image is [1,1,24,24]")
  lu.assertStrContains(err, "1x16x16")
  local loss = cap:loss(glimpse.rand(1, 1, 24, 24), cin, cout, nil, {resize = true})
  lu.assertTrue(loss:item() > 0)
end

function T.test_the_trained_size_survives_save_and_load()
  local cap = tiny_trained(7)
  local path = os.tmpname() .. ".safetensors"
  cap:save(path)
  local back = Captioner.load(path)
  os.remove(path)
  lu.assertEquals({back:input_shape()}, {1, SIZE, SIZE})
  lu.assertFalse(pcall(back.caption, back, glimpse.rand(1, 20, 20)))
end

function T.test_an_untrained_model_checks_channels_only()
  glimpse.manual_seed(8)
  local cap = Captioner{vocab = Vocab.new(WORDS), encoder = {in_channels = 1, channels = {4, 6}},
                        emb = 6, hidden = 8, attn_hidden = 5, max_len = 3}
  lu.assertEquals({cap:input_shape()}, {1})
  lu.assertEquals(type((cap:caption(glimpse.rand(1, 24, 20)))), "string")
  local ok, err = pcall(cap.caption, cap, glimpse.rand(3, 24, 20))
  lu.assertFalse(ok)
  lu.assertStrContains(err, "the model takes 1xHxW")
end

return T
