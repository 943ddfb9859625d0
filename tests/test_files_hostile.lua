-- tests/test_files_hostile.lua -- every hostile-file case of issue 13, one test each: the
-- image bombs and damaged images, safetensors gaps and zero-element shapes, an IDX header
-- promising 2 G elements, and saves killed with SIGKILL.  The files live in tests/corpus/
-- (made by tests/corpus/make_corpus.lua, which the first test checks); `make asan` runs this
-- suite under AddressSanitizer and UBSan, where a decoder overrun would stop it.
local lu = require "luaunit"
local glimpse = require "glimpse"
local helpers = require "tests.helpers"
local corpus = require "tests.corpus.make_corpus"

local image = glimpse.image
local T = {}

local DIR = "tests/corpus"
local BIG_CAP = 100000000        -- above 8000 x 8000, so the size checks, not the cap, refuse
local KILL_TRIALS = 3
local SAVE_FLOATS = 4000000      -- 16 MB a save: long enough to be killed in the middle

local function path(dir, name) return DIR .. "/" .. dir .. "/" .. name end

-- The error of fn(...), failing the test when it succeeds; checked to contain every pattern
-- (plain text).
local function refused(fn, ...)
  local ok, err = pcall(fn, ...)
  lu.assertFalse(ok, "expected an error")
  return tostring(err)
end

local function image_refused(name, want)
  local p = path("image", name)
  local err = refused(image.load, p, {max_pixels = BIG_CAP})
  lu.assertStrContains(err, "image.load: " .. p .. ": ")
  lu.assertStrContains(err, want)
  return err
end

function T.test_corpus_files_are_what_the_script_makes()
  for dir, files in pairs(corpus.files()) do
    for name, bytes in pairs(files) do
      local got = helpers.read_file(path(dir, name))
      lu.assertNotNil(got, path(dir, name) .. " is missing: run tests/corpus/make_corpus.lua")
      lu.assertTrue(got == bytes, path(dir, name) .. " differs from make_corpus.lua's")
    end
  end
end

-- ---------------------------------------------------------------------------------------
-- images

function T.test_jpeg_huffman_counts_past_256_are_refused()
  image_refused("jpeg_huffman_over_256.jpg", "Bogus Huffman table")
end

function T.test_jpeg_with_endless_scans_stops_at_the_scan_limit()
  image_refused("jpeg_many_scans.jpg", "more than 500 scans")
  lu.assertEquals(image.load(path("image", "seed_progressive.jpg")).shape, {1, 8, 8})
end

function T.test_png_with_an_empty_idat_chunk_loads()
  local img = image.load(path("image", "png_empty_idat.png"))
  local ref = image.load(path("image", "seed_rgb.png"))
  lu.assertEquals(img.shape, {3, 12, 10})
  lu.assertEquals(img:totable(), ref:totable())
end

function T.test_decompression_bombs_fail_on_file_size_before_decoding()
  for _, name in ipairs({"bomb.bmp", "bomb.tga", "bomb.jpg", "bomb.png"}) do
    local err = image_refused(name, "file is truncated or damaged: its header declares 8000x8000")
    lu.assertStrContains(err, "bytes")
    -- and the default cap alone refuses 64 Mpixel
    lu.assertStrContains(refused(image.load, path("image", name)), "exceeds the cap")
  end
end

function T.test_truncated_images_are_errors()
  image_refused("bmp_truncated.bmp", "cannot hold its pixel rows")
  image_refused("tga_truncated.tga", "end inside its run-length packets")
  image_refused("jpeg_truncated.jpg", "Premature end of JPEG file")
  image_refused("png_truncated.png", "file is truncated or damaged")
  image_refused("tga_run_past_end.tga", "run-length packets running past its last pixel")
  image_refused("gif_short_data.gif", "hold fewer pixels than its first image needs")
end

function T.test_uncompressed_tga_cut_short_is_an_error()
  -- an 18-byte header (type 2: uncompressed true colour), 4x4 at 24 bits, half the pixels
  local d = helpers.tmpdir()
  local p = d .. "/raw.tga"
  helpers.write_file(p, string.char(0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 4, 0, 24, 0)
    .. string.rep("\1\2\3", 8))
  local err = refused(image.load, p)
  lu.assertStrContains(err, "its header declares 4x4 but 42 bytes cannot hold its pixels")
  helpers.write_file(p, string.char(0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 4, 0, 24, 0)
    .. string.rep("\1\2\3", 16))
  lu.assertEquals(image.load(p).shape, {3, 4, 4})
  helpers.rmdir(d)
end

function T.test_png_checksums_are_checked()
  image_refused("png_bad_crc.png", "CRC error")
  image_refused("png_bad_adler.png", "incorrect data check")
end

function T.test_max_pixels_default_and_option()
  lu.assertEquals(image.max_pixels(), 1 << 25)
  local p = path("image", "seed_rgb.png")
  lu.assertStrContains(refused(image.load, p, {max_pixels = 100}), "exceeds the cap of 100")
  lu.assertEquals(image.load(p, {max_pixels = 120}).shape, {3, 12, 10})
end

function T.test_valid_seeds_of_every_format_load()
  local want = {
    ["seed_rgb.png"] = {3, 12, 10}, ["seed_rgba.png"] = {3, 6, 7}, ["seed_grey.png"] = {1, 9, 5},
    ["seed_rgb.jpg"] = {3, 16, 16}, ["seed_grey.jpg"] = {3, 8, 24}, ["seed_rgb.bmp"] = {3, 5, 7},
    ["seed_rgba.tga"] = {3, 4, 6}, ["seed_grey.tga"] = {1, 6, 3}, ["seed.gif"] = {3, 2, 2},
    ["seed_progressive.jpg"] = {1, 8, 8},
  }
  for name, shape in pairs(want) do
    lu.assertEquals(image.load(path("image", name)).shape, shape, name)
    local info = image.info(path("image", name))
    lu.assertEquals({info.height, info.width}, {shape[2], shape[3]}, name)
  end
  -- (stb_image_write stores grey JPEGs as colour.)  A grey file forced to RGB repeats its
  -- plane, forced to RGBA gets an opaque alpha; colour forced to grey is one plane
  local g = image.load(path("image", "seed_grey.png"), {channels = 4})
  lu.assertEquals(g.shape, {4, 9, 5})
  lu.assertEquals(g[1]:totable(), g[3]:totable())
  lu.assertEquals(g[4]:min():item(), 1)
  lu.assertEquals(image.load(path("image", "seed_rgb.jpg"), {channels = 1}).shape, {1, 16, 16})
end

-- ---------------------------------------------------------------------------------------
-- safetensors and IDX

function T.test_safetensors_gap_and_trailing_bytes_are_refused()
  local p = path("safetensors", "st_gap.safetensors")
  lu.assertStrContains(refused(glimpse.load, p), "load: " .. p .. ": tensor 'a': data_offsets "
    .. "[4,8] leave a gap of 4 unindexed bytes before it")
  p = path("safetensors", "st_trailing.safetensors")
  lu.assertStrContains(refused(glimpse.load, p), "load: " .. p .. ": 4 unindexed bytes follow "
    .. "the last tensor's data")
end

function T.test_zero_element_shapes_load_in_any_dim_order()
  for _, name in ipairs({"st_zero_big_first.safetensors", "st_zero_big_last.safetensors"}) do
    local sd = glimpse.load(path("safetensors", name))
    lu.assertEquals(sd.z:numel(), 0, name)
  end
  lu.assertEquals(glimpse.load(path("safetensors", "st_zero_big_first.safetensors")).z.shape,
                  {2147483647, 2, 0})
  lu.assertEquals(glimpse.zeros(2147483647, 2, 0):numel(), 0)
end

function T.test_idx_header_promising_2g_elements_fails_before_allocating()
  local p = path("idx", "idx_2g_elements.idx")
  local err = refused(glimpse.data.read_idx, p)
  lu.assertStrContains(err, "is truncated: its header promises 2147483647 data bytes")
  -- the same header gzipped: bounded by DEFLATE's ratio
  local d = helpers.tmpdir()
  os.execute("gzip -c " .. helpers.sh_quote(p) .. " > " .. helpers.sh_quote(d .. "/h.idx.gz"))
  lu.assertStrContains(refused(glimpse.data.read_idx, d .. "/h.idx.gz"), "a gzip file of")
  helpers.rmdir(d)
  lu.assertEquals(glimpse.data.read_idx(path("idx", "seed_u8.idx")):totable(),
                  {{1, 2}, {3, 4}, {5, 6}})
end

-- ---------------------------------------------------------------------------------------
-- saves killed with SIGKILL

local function exists(p)
  local f = io.open(p, "rb")
  if f then f:close() end
  return f ~= nil
end

-- Start a child that saves to target in a loop; return its pid, its temp file's name once
-- that exists, and the pipe whose close reaps the child (this process is its parent, so a
-- killed child is gone, not a zombie, once the pipe is closed).
local function start_saver(target, script)
  helpers.write_file(script, string.format([[
local glimpse = require "glimpse"
local t = glimpse.rand(%d)
while true do glimpse.save(%q, {w = t}) end
]], SAVE_FLOATS, target))
  local exe = arg and arg[-1] or "build/glimpse"
  local p = io.popen("echo $$; exec " .. helpers.sh_quote(exe) .. " " .. helpers.sh_quote(script)
                     .. " >/dev/null 2>&1")
  local pid = tonumber(p:read("l"))
  lu.assertNotNil(pid)
  local tmp = target .. ".tmp." .. pid
  for _ = 1, 400 do
    if exists(tmp) then return pid, tmp, p end
    os.execute("sleep 0.025")
  end
  os.execute("kill -9 " .. pid)
  p:close()
  lu.fail("the saving child never wrote " .. tmp)
end

function T.test_next_save_removes_temps_of_saves_killed_with_sigkill()
  local d = helpers.tmpdir()
  local target = d .. "/m.safetensors"
  local orphans = 0
  for trial = 1, KILL_TRIALS do
    local pid, tmp, pipe = start_saver(target, d .. "/saver.lua")
    os.execute("kill -9 " .. pid)
    pipe:close()                   -- waits for the child, so its pid is free
    if exists(tmp) then orphans = orphans + 1 end
    glimpse.save(target, {x = glimpse.ones(trial)})
    lu.assertEquals(helpers.ls(d), {"m.safetensors", "saver.lua"})
    lu.assertEquals(glimpse.load(target).x:numel(), trial)
  end
  lu.assertTrue(orphans > 0, "no kill landed inside a save")
  -- a temp of a live process (a concurrent save) is left alone
  local live = target .. ".tmp.1"
  helpers.write_file(live, "partial")
  glimpse.save(target, {x = glimpse.ones(1)})
  lu.assertTrue(exists(live))
  helpers.rmdir(d)
end

-- a FIFO with no writer: every reader refuses it at once instead of waiting in open()
function T.test_a_fifo_is_refused_at_once_by_every_reader()
  local dir = helpers.tmpdir()
  local fifo = dir .. "/pipe"
  lu.assertTrue(os.execute("mkfifo " .. fifo))
  local cases = {
    {image.load, "image.load: " .. fifo .. ": not a regular file"},
    {image.info, "image.info: " .. fifo .. ": not a regular file"},
    {glimpse.load, "load: " .. fifo .. ": not a regular file"},
    {glimpse.data.read_gz, "read_gz: cannot open '" .. fifo .. "': not a regular file"},
    {glimpse.data.read_idx, "read_idx: cannot open '" .. fifo .. "': not a regular file"},
  }
  for _, c in ipairs(cases) do lu.assertStrContains(refused(c[1], fifo), c[2]) end
  lu.assertEquals(glimpse._file_kind(fifo), "fifo")
  lu.assertFalse(glimpse.util.is_dir(fifo))
  local exe = arg and arg[-1] or "build/glimpse"
  for _, args in ipairs({fifo, "--model " .. fifo .. " " .. fifo}) do
    local p = io.popen("timeout 20 " .. exe .. " caption " .. args .. " 2>&1; echo rc=$?")
    local out = p:read("a")
    p:close()
    lu.assertStrContains(out, "not a regular file")
    lu.assertStrContains(out, "rc=1")
  end
  os.remove(fifo)
end

-- a checkpoint whose metadata is damaged (not JSON, null, the wrong shape, a refused
-- option) is an error that names the file, for the captioner and the sequence models alike
function T.test_damaged_checkpoint_metadata_errors_name_the_file()
  local dir = helpers.tmpdir()
  local sd, meta = glimpse.load("models/scenes-soft.safetensors")
  local function with(key, value)
    local m = {}
    for k, v in pairs(meta) do m[k] = v end
    m[key] = value
    local p = dir .. "/bad.safetensors"
    glimpse.save(p, sd, m)
    return p
  end
  local cases = {
    {"config", "{junk", "metadata 'config' is not JSON"},
    {"config", "null", "metadata 'config' must be a JSON object or list, got null"},
    {"config", "[1]", "damaged metadata"},
    {"vocab", "null", "metadata 'vocab' must be a JSON object or list"},
    {"vocab", "[1]", "damaged metadata: vocab.from_list"},
    {"config", meta.config:gsub("^{", '{"bogus":1,'), "Captioner: unknown option 'bogus'"},
  }
  for _, c in ipairs(cases) do
    local p = with(c[1], c[2])
    local err = refused(glimpse.captioner.Captioner.load, p)
    lu.assertStrContains(err, "Captioner.load: " .. p)
    lu.assertStrContains(err, c[3])
  end
  local ds = glimpse.data.seq2seq.reversal{n = 4, max_len = 6, seed = 1}
  local m = glimpse.models.Seq2Seq{dataset = ds, emb = 4, hidden = 8, attn_hidden = 4}
  local p = dir .. "/s2s.safetensors"
  m:save(p)
  local ssd, smeta = glimpse.load(p)
  smeta.config = smeta.config:gsub('"hidden":8', '"hidden":"x"')
  glimpse.save(p, ssd, smeta)
  lu.assertStrContains(refused(glimpse.models.Seq2Seq.load, p),
                       "Seq2Seq.load: " .. p .. ": Seq2Seq: option 'hidden' must be a positive integer")
end

return T
