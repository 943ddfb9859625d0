-- tests/test_image.lua -- glimpse.image (engine/image.c, bindings/l_image.c): file round
-- trips through stb_image/stb_image_write for every promised format, error messages for
-- missing, corrupt and oversized files, and the geometry, colour and overlay helpers.
-- Every picture a test needs is made here (a hand-assembled GIF included); nothing is read
-- from fixtures.

local lu = require "luaunit"
local glimpse = require "glimpse"
local image = glimpse.image

local EXACT = 0              -- 8-bit formats store k/255 exactly
local JPEG_MEAN_ABS = 0.01   -- quality 95 on a smooth gradient: mean |error| per value
local JPEG_MAX_ABS = 0.06    -- ... and no single value far off
local RESIZE_TOL = 1e-5      -- a resized constant image stays constant up to rounding
local SMOOTH_STEP = 0.2      -- overlay: largest jump of the upsampled heat between
                             -- neighbouring pixels (bilinear over 8-pixel cells: 1/8,
                             -- bicubic a little steeper; blocky nearest: 1)

local M = {}

-- temporary files, removed after each test
local made = {}
local function tmp(ext)
  local base = os.tmpname()
  local p = base .. ext
  made[#made + 1] = base
  made[#made + 1] = p
  return p
end

function M.tearDown()
  for _, p in ipairs(made) do os.remove(p) end
  made = {}
end

local helpers = require "tests.helpers"
local write_bytes, read_bytes = helpers.write_file, helpers.read_file

-- a (C,H,W) image whose values are k/255 for a deterministic pattern of bytes k
local function byte_image(C, H, W, seed)
  local t = {}
  local k = seed or 7
  for c = 1, C do
    t[c] = {}
    for y = 1, H do
      t[c][y] = {}
      for x = 1, W do
        k = (k * 73 + 41) % 256
        t[c][y][x] = k / 255
      end
    end
  end
  return glimpse.tensor(t), t
end

local function flat(t)
  local out = {}
  local function walk(v)
    if type(v) == "table" then
      for _, e in ipairs(v) do walk(e) end
    else
      out[#out + 1] = v
    end
  end
  walk(t:totable())
  return out
end

local function max_abs_diff(a, b)
  local fa, fb = flat(a), flat(b)
  lu.assertEquals(#fa, #fb)
  local m = 0
  for i = 1, #fa do m = math.max(m, math.abs(fa[i] - fb[i])) end
  return m
end

local function assert_error_matches(pattern, fn, ...)
  local ok, err = pcall(fn, ...)
  lu.assertFalse(ok, "expected an error matching " .. pattern)
  lu.assertStrContains(tostring(err), pattern)
  return err
end

-- ---------------------------------------------------------------------------
-- files

function M.test_png_roundtrip_is_exact()
  local img = byte_image(3, 6, 5)
  local p = tmp(".png")
  image.save(p, img)
  local back = image.load(p)
  lu.assertEquals(back.shape, {3, 6, 5})
  lu.assertEquals(max_abs_diff(img, back), EXACT)
end

function M.test_png_keeps_grey_and_rgba_when_asked()
  local grey = byte_image(1, 4, 3, 11)
  local p = tmp(".png")
  image.save(p, grey)
  local back = image.load(p)
  lu.assertEquals(back.shape, {1, 4, 3})
  lu.assertEquals(max_abs_diff(grey, back), EXACT)

  local rgba = byte_image(4, 3, 4, 5)
  local q = tmp(".png")
  image.save(q, rgba)
  lu.assertEquals(image.load(q).shape, {3, 3, 4})            -- alpha dropped by default
  local back4 = image.load(q, {channels = 4})
  lu.assertEquals(max_abs_diff(rgba, back4), EXACT)
  lu.assertEquals(image.load(q, {channels = 1}).shape, {1, 3, 4})
end

function M.test_save_accepts_hw_and_clamps_to_unit_range()
  local p = tmp(".png")
  image.save(p, glimpse.tensor({{-1, 0.5}, {2, 1}}))
  local back = image.load(p)
  lu.assertEquals(back.shape, {1, 2, 2})
  local t = back:totable()[1]
  lu.assertEquals({t[1][1], t[2][1], t[2][2]}, {0, 1, 1})
  lu.assertAlmostEquals(t[1][2], 128 / 255, 1e-7)
end

function M.test_jpeg_quality95_is_close_to_the_original()
  -- stb_image_write's JPEG bit writer shifts a signed int past its width (harmless with
  -- every real compiler, undefined by the letter), which UBSan in `make asan` stops on
  lu.skipIf(os.getenv("GLIMPSE_SANITIZED") ~= nil,
            "stb_image_write's JPEG encoder trips UBSan's shift check")
  local H, W = 32, 48
  local t = {{}, {}, {}}
  for y = 1, H do
    t[1][y], t[2][y], t[3][y] = {}, {}, {}
    for x = 1, W do
      t[1][y][x] = (x - 1) / (W - 1)
      t[2][y][x] = (y - 1) / (H - 1)
      t[3][y][x] = 0.5 + 0.25 * math.sin(x / 9 + y / 13)
    end
  end
  local img = glimpse.tensor(t)
  local p = tmp(".jpg")
  image.save(p, img, {quality = 95})
  local back = image.load(p)
  lu.assertEquals(back.shape, {3, H, W})
  local fa, fb = flat(img), flat(back)
  local sum, worst = 0, 0
  for i = 1, #fa do
    local d = math.abs(fa[i] - fb[i])
    sum = sum + d
    worst = math.max(worst, d)
  end
  lu.assertTrue(sum / #fa < JPEG_MEAN_ABS, "mean abs error " .. sum / #fa)
  lu.assertTrue(worst < JPEG_MAX_ABS, "max abs error " .. worst)
  -- lower quality loses more
  local q = tmp(".jpeg")
  image.save(q, img, {quality = 10})
  lu.assertTrue(max_abs_diff(img, image.load(q)) > worst)
end

function M.test_bmp_roundtrip_is_exact()
  local img = byte_image(3, 5, 7, 3)      -- odd width: BMP rows are padded
  local p = tmp(".bmp")
  image.save(p, img)
  lu.assertEquals(max_abs_diff(img, image.load(p)), EXACT)
end

function M.test_tga_roundtrip_is_exact()
  local img = byte_image(3, 6, 4, 9)
  local p = tmp(".tga")
  image.save(p, img)
  lu.assertEquals(max_abs_diff(img, image.load(p)), EXACT)
  -- the format option overrides the extension
  local q = tmp(".img")
  image.save(q, img, {format = "tga"})
  lu.assertEquals(max_abs_diff(img, image.load(q)), EXACT)
end

-- A 2x2 GIF89a assembled byte by byte: a 4-colour global palette (red, green, blue, white)
-- and one image whose pixels are palette entries 0,1 / 2,3, LZW-coded with minimum code
-- size 2: codes CLEAR(4) 0 1 2 at 3 bits, then 3 EOI(5) at 4 bits (the code width grows
-- once the decoder's next free code reaches 8).
local function tiny_gif()
  local bits, nbits = 0, 0
  local data = {}
  local function put(code, width)
    bits = bits | (code << nbits)
    nbits = nbits + width
    while nbits >= 8 do
      data[#data + 1] = string.char(bits & 0xff)
      bits = bits >> 8
      nbits = nbits - 8
    end
  end
  put(4, 3); put(0, 3); put(1, 3); put(2, 3); put(3, 4); put(5, 4)
  if nbits > 0 then data[#data + 1] = string.char(bits & 0xff) end
  local lzw = table.concat(data)
  return "GIF89a"
      .. string.char(2, 0, 2, 0, 0x91, 0, 0)                       -- screen 2x2, 4-colour GCT
      .. string.char(255, 0, 0, 0, 255, 0, 0, 0, 255, 255, 255, 255) -- palette
      .. string.char(0x2C, 0, 0, 0, 0, 2, 0, 2, 0, 0)              -- image descriptor
      .. string.char(2, #lzw) .. lzw .. string.char(0)             -- min code size, data
      .. ";"                                                        -- trailer
end

function M.test_hand_assembled_gif_loads()
  local p = tmp(".gif")
  local bytes = tiny_gif()
  lu.assertTrue(#bytes < 50)
  write_bytes(p, bytes)
  local img = image.load(p)
  lu.assertEquals(img.shape, {3, 2, 2})
  lu.assertEquals(img:totable(), {
    {{1, 0}, {0, 1}},   -- red plane: red pixel, white pixel
    {{0, 1}, {0, 1}},   -- green
    {{0, 0}, {1, 1}},   -- blue
  })
  lu.assertEquals(image.info(p), {width = 2, height = 2, channels = 4})
end

-- A 16-bit greyscale PNG assembled byte by byte (stb_image_write only writes 8 bits): the
-- pixel data goes into one stored (uncompressed) deflate block, with CRC-32 and Adler-32
-- computed here.
local function crc32(s)
  local crc = 0xffffffff
  for i = 1, #s do
    crc = crc ~ s:byte(i)
    for _ = 1, 8 do
      crc = (crc & 1) ~= 0 and ((crc >> 1) ~ 0xedb88320) or (crc >> 1)
    end
  end
  return crc ~ 0xffffffff
end

local function png16_grey(rows)
  local H, W = #rows, #rows[1]
  local raw = {}
  for y = 1, H do
    raw[#raw + 1] = "\0"                                   -- filter: none
    for x = 1, W do raw[#raw + 1] = string.pack(">I2", rows[y][x]) end
  end
  raw = table.concat(raw)
  local a, b = 1, 0
  for i = 1, #raw do
    a = (a + raw:byte(i)) % 65521
    b = (b + a) % 65521
  end
  local zlib = "\x78\x01" .. string.pack("<BI2I2", 1, #raw, (~#raw) & 0xffff) .. raw
      .. string.pack(">I4", (b << 16) | a)
  local function chunk(kind, data)
    return string.pack(">I4", #data) .. kind .. data .. string.pack(">I4", crc32(kind .. data))
  end
  return "\x89PNG\r\n\x1a\n"
      .. chunk("IHDR", string.pack(">I4I4BBBBB", W, H, 16, 0, 0, 0, 0))
      .. chunk("IDAT", zlib) .. chunk("IEND", "")
end

function M.test_16_bit_png_keeps_its_precision()
  local p = tmp(".png")
  write_bytes(p, png16_grey({{0, 1, 256}, {32768, 65534, 65535}}))
  local img = image.load(p)
  lu.assertEquals(img.shape, {1, 2, 3})
  local t = img:totable()[1]
  lu.assertEquals(t[1][1], 0)
  lu.assertAlmostEquals(t[1][2], 1 / 65535, 1e-9)       -- below one 8-bit step
  lu.assertAlmostEquals(t[1][3], 256 / 65535, 1e-9)
  lu.assertAlmostEquals(t[2][1], 32768 / 65535, 1e-7)
  lu.assertAlmostEquals(t[2][2], 65534 / 65535, 1e-7)
  lu.assertEquals(t[2][3], 1)
  lu.assertEquals(image.load(p, {channels = 3}).shape, {3, 2, 3})
end

function M.test_missing_file_error_names_path_and_reason()
  local p = "/nonexistent/dir/x.png"
  assert_error_matches("image.load: " .. p .. ": No such file", image.load, p)
end

function M.test_random_bytes_are_rejected()
  local p = tmp(".png")
  local b, x = {}, 12345
  for i = 1, 200 do
    x = (x * 1103515245 + 12345) % 2147483648
    b[i] = string.char((x >> 16) & 0xff)
  end
  write_bytes(p, table.concat(b))
  assert_error_matches("image.load: " .. p .. ": not a PNG, JPEG, BMP, TGA or GIF image",
                       image.load, p)
  write_bytes(p, "")
  assert_error_matches("image.load: " .. p .. ":", image.load, p)
end

function M.test_truncated_png_is_rejected()
  local p = tmp(".png")
  image.save(p, byte_image(3, 32, 32))
  local s = read_bytes(p)
  write_bytes(p, s:sub(1, #s // 2))
  assert_error_matches("image.load: " .. p .. ": file is truncated or damaged", image.load, p)
end

function M.test_directory_and_empty_file_are_named()
  assert_error_matches("image.load: /tmp: is a directory", image.load, "/tmp")
  local p = tmp(".png")
  write_bytes(p, "")
  assert_error_matches("image.load: " .. p .. ": empty file", image.load, p)
  assert_error_matches("image.load: bad argument #1 (path): string expected", image.load, 42)
end

function M.test_pixel_cap_rejects_large_images_before_decoding()
  local p = tmp(".png")
  image.save(p, byte_image(1, 16, 16))
  local old = image.set_max_pixels(100)
  local ok, err = pcall(image.load, p)
  image.set_max_pixels(old)
  lu.assertFalse(ok)
  lu.assertStrContains(err, "image.load: " .. p .. ": 16x16 image (256 pixels) exceeds the cap")
  lu.assertEquals(image.max_pixels(), old)
  assert_error_matches("exceeds the cap of 255", image.load, p, {max_pixels = 255})
  lu.assertEquals(image.load(p, {max_pixels = 256}).shape, {1, 16, 16})
end

function M.test_save_rejects_bad_shapes_and_names()
  local p = tmp(".png")
  assert_error_matches("image.save: img has shape [2,3,4,5]", image.save, p, glimpse.zeros(2, 3, 4, 5))
  assert_error_matches("channels must be 1, 3 or 4", image.save, p, glimpse.zeros(2, 3, 4))
  assert_error_matches("unknown extension", image.save, tmp(".xyz"), glimpse.zeros(3, 2, 2))
  assert_error_matches("quality", image.save, tmp(".jpg"), glimpse.zeros(3, 2, 2), {quality = 0})
  assert_error_matches("image.load: " .. p .. ": option 'channels' must be 1, 3 or 4",
                       image.load, p, {channels = 2})
end

-- ---------------------------------------------------------------------------
-- geometry

function M.test_resize_of_a_constant_image_stays_constant()
  local img = glimpse.full({3, 10, 12}, 0.3)
  for _, f in ipairs({"auto", "nearest", "box", "bilinear", "bicubic", "mitchell"}) do
    for _, hw in ipairs({{17, 23}, {4, 5}, {10, 12}}) do
      local r = image.resize(img, hw[1], hw[2], {filter = f})
      lu.assertEquals(r.shape, {3, hw[1], hw[2]})
      for _, v in ipairs(flat(r)) do
        lu.assertAlmostEquals(v, 0.3, RESIZE_TOL, f)
      end
    end
  end
end

function M.test_bilinear_downsampling_at_awkward_ratios_stays_a_weighted_average()
  -- stb's triangle filter used to trip an internal assert (and abort) on ratios like 300 -> 256
  glimpse.manual_seed(3)
  local img = glimpse.rand(1, 300, 400)
  for _, hw in ipairs({{256, 341}, {224, 299}, {97, 131}, {255, 399}}) do
    local r = image.resize(img, hw[1], hw[2], {filter = "bilinear"})
    lu.assertEquals(r.shape, {1, hw[1], hw[2]})
    lu.assertTrue(r:min():item() >= -RESIZE_TOL and r:max():item() <= 1 + RESIZE_TOL)
    lu.assertAlmostEquals(r:mean():item(), img:mean():item(), 0.01)
  end
  local flat_img = glimpse.full({3, 300, 400}, 0.7)
  local r = image.resize(flat_img, 256, 341, {filter = "bilinear"})
  lu.assertAlmostEquals(r:min():item(), 0.7, RESIZE_TOL)
  lu.assertAlmostEquals(r:max():item(), 0.7, RESIZE_TOL)
end

function M.test_resize_keeps_batch_and_channel_planes_apart()
  local t = {}
  for b = 1, 2 do
    t[b] = {}
    for c = 1, 3 do
      t[b][c] = {}
      for y = 1, 4 do
        t[b][c][y] = {}
        for x = 1, 4 do t[b][c][y][x] = (b - 1) * 3 + c end
      end
    end
  end
  local r = image.resize(glimpse.tensor(t), 7, 9)
  lu.assertEquals(r.shape, {2, 3, 7, 9})
  local rt = r:totable()
  for b = 1, 2 do
    for c = 1, 3 do
      lu.assertAlmostEquals(rt[b][c][4][5], (b - 1) * 3 + c, RESIZE_TOL)
    end
  end
  lu.assertEquals(image.resize(glimpse.zeros(5, 6), 2, 3).shape, {2, 3})
end

function M.test_resize_rejects_bad_arguments()
  local img = glimpse.zeros(3, 4, 4)
  assert_error_matches("image.resize: bad argument #2 (h)", image.resize, img, -1, 4)
  assert_error_matches("image.resize: bad argument #3 (w)", image.resize, img, 4, 0)
  assert_error_matches("image.resize: img has shape [4]", image.resize, glimpse.zeros(4), 2, 2)
  assert_error_matches("unknown filter 'lanczos'", image.resize, img, 2, 2, {filter = "lanczos"})
  assert_error_matches("image.resize: bad argument #1 (img): tensor expected", image.resize, {}, 2, 2)
end

-- a (1,H,W) image whose pixel (y,x) holds 100*y + x
local function coord_image(H, W)
  local t = {{}}
  for y = 1, H do
    t[1][y] = {}
    for x = 1, W do t[1][y][x] = 100 * y + x end
  end
  return glimpse.tensor(t)
end

function M.test_crop_corner_is_one_based()
  local c = image.crop(coord_image(5, 6), 2, 3, 2, 3)
  lu.assertEquals(c:totable(), {{{203, 204, 205}, {303, 304, 305}}})
  lu.assertEquals(image.crop(coord_image(5, 6), 1, 1, 5, 6).shape, {1, 5, 6})
end

function M.test_crop_rejects_boxes_outside_the_image()
  local img = coord_image(5, 6)
  assert_error_matches("image.crop: bad argument #2 (top): row 0 outside 1..5", image.crop, img, 0, 1, 2, 2)
  assert_error_matches("runs past img [1,5,6]", image.crop, img, 4, 1, 3, 2)
  assert_error_matches("image.crop: bad argument #4 (h)", image.crop, img, 1, 1, -2, 2)
  assert_error_matches("image.crop: bad argument #1 (img): shape [6]", image.crop, glimpse.zeros(6), 1, 1, 1, 1)
end

function M.test_center_crop_takes_the_middle()
  local c = image.center_crop(coord_image(5, 6), 3, 2)
  lu.assertEquals(c:totable(), {{{203, 204}, {303, 304}, {403, 404}}})
  lu.assertEquals(image.center_crop(glimpse.zeros(2, 3, 8, 8), 4).shape, {2, 3, 4, 4})
  assert_error_matches("image.center_crop: a 6x2 crop is larger than img [1,5,6]",
                       image.center_crop, coord_image(5, 6), 6, 2)
end

function M.test_flips_mirror_columns_and_rows()
  local img = coord_image(2, 3)
  lu.assertEquals(image.hflip(img):totable(), {{{103, 102, 101}, {203, 202, 201}}})
  lu.assertEquals(image.vflip(img):totable(), {{{201, 202, 203}, {101, 102, 103}}})
end

-- ---------------------------------------------------------------------------
-- colour

function M.test_normalize_is_per_channel()
  local img = glimpse.tensor({{{1, 3}}, {{2, 6}}})        -- (2,1,2)
  local n = image.normalize(img, {1, 2}, {2, 4})
  lu.assertEquals(n:totable(), {{{0, 1}}, {{0, 1}}})
  lu.assertEquals(image.normalize(img, 1, 2):totable(), {{{0, 1}}, {{0.5, 2.5}}})
  assert_error_matches("image.normalize: img [2,1,2] has 2 channels but mean/std have 3",
                       image.normalize, img, {0, 0, 0}, {1, 1, 1})
  assert_error_matches("std must be finite and non-zero", image.normalize, img, {0, 0}, {1, 0})
end

function M.test_to_grey_uses_luma_weights()
  local img = glimpse.tensor({{{1}}, {{0}}, {{0}}})
  lu.assertAlmostEquals(image.to_grey(img):totable()[1][1][1], 0.299, 1e-6)
  local white = glimpse.ones(2, 3, 2, 2)
  local g = image.to_grey(white)
  lu.assertEquals(g.shape, {2, 1, 2, 2})
  for _, v in ipairs(flat(g)) do lu.assertAlmostEquals(v, 1, 1e-6) end
  assert_error_matches("image.to_grey: img has shape [2,2,2]", image.to_grey, glimpse.zeros(2, 2, 2))
end

-- ---------------------------------------------------------------------------
-- grids, heatmaps, overlays

function M.test_grid_shape_and_placement()
  local imgs = {}
  for i = 1, 5 do imgs[i] = glimpse.full({3, 4, 6}, i / 10) end
  local g = image.grid(imgs, {ncol = 3, padding = 2})
  lu.assertEquals(g.shape, {3, 2 * (4 + 2) + 2, 3 * (6 + 2) + 2})
  local t = g:totable()
  lu.assertEquals(t[1][1][1], 0)                                 -- padding
  lu.assertAlmostEquals(t[2][3][3], 0.1, 1e-6)                   -- image 1 top-left
  lu.assertAlmostEquals(t[2][3 + 6][3 + 8], 0.5, 1e-6)           -- image 5: row 2, col 2
  lu.assertEquals(t[1][3 + 6][3 + 16], 0)                        -- empty sixth cell
  -- a batch tensor, grey images next to colour ones, default ncol
  lu.assertEquals(image.grid(glimpse.zeros(10, 1, 4, 4), {padding = 0}).shape, {1, 8, 32})
  lu.assertEquals(image.grid({glimpse.zeros(4, 4), glimpse.zeros(3, 4, 4)}).shape, {3, 8, 14})
  assert_error_matches("image.grid: image 2 has shape [3,5,4], image 1 is 4x4",
                       image.grid, {glimpse.zeros(3, 4, 4), glimpse.zeros(3, 5, 4)})
  assert_error_matches("image.grid: bad argument #1 (images): entry 2 is a number",
                       image.grid, {glimpse.zeros(3, 4, 4), 5})
end

function M.test_heatmap_upscales_with_blocks()
  local m = glimpse.tensor({{0, 1, 2}, {3, 4, 5}})
  local h = image.heatmap(m, {scale = 4, colormap = "grey"})
  lu.assertEquals(h.shape, {3, 8, 12})
  local t = h:totable()
  lu.assertEquals(t[1][1][1], 0)
  lu.assertAlmostEquals(t[1][8][12], 1, 1e-6)
  lu.assertAlmostEquals(t[2][5][5], 0.8, 1e-6)   -- entry (2,2) = 4 -> (4-0)/5
  lu.assertAlmostEquals(t[2][8][8], 0.8, 1e-6)
  lu.assertEquals(image.heatmap({{1, 2}}, {colormap = "viridis"}).shape, {3, 1, 2})
  assert_error_matches("image.heatmap: bad argument #1 (m): shape [2,2,2]", image.heatmap, glimpse.zeros(2, 2, 2))
  assert_error_matches("unknown colormap 'rainbow'", image.heatmap, m, {colormap = "rainbow"})
end

-- mean redness (r - b) of each 8x8 block of a (3,32,32) picture
local function block_redness(t, cells, size)
  local r = {}
  for i = 1, cells do
    r[i] = {}
    for j = 1, cells do
      local s = 0
      for y = (i - 1) * size + 1, i * size do
        for x = (j - 1) * size + 1, j * size do s = s + t[1][y][x] - t[3][y][x] end
      end
      r[i][j] = s / (size * size)
    end
  end
  return r
end

function M.test_overlay_hottest_cell_is_reddest_and_smooth()
  local img = glimpse.full({1, 32, 32}, 0.5)                     -- grey becomes RGB
  local heat = glimpse.zeros(4, 4)
  local ht = heat:totable()
  ht[2][3] = 1
  heat = glimpse.tensor(ht)
  local o = image.overlay(img, heat, {alpha = 0.6, colormap = "jet"})
  lu.assertEquals(o.shape, {3, 32, 32})
  local t = o:totable()
  local red = block_redness(t, 4, 8)
  local best, bi, bj = -math.huge, 0, 0
  for i = 1, 4 do
    for j = 1, 4 do
      if red[i][j] > best then best, bi, bj = red[i][j], i, j end
    end
  end
  lu.assertEquals({bi, bj}, {2, 3})
  -- smooth, not blocky: with the grey colormap at alpha 1 the output is the normalised
  -- upsampled heat itself, and neighbouring pixels never jump by much
  local function largest_jump(pic)
    local jump = 0
    for y = 1, 32 do
      for x = 2, 32 do jump = math.max(jump, math.abs(pic[1][y][x] - pic[1][y][x - 1])) end
    end
    for y = 2, 32 do
      for x = 1, 32 do jump = math.max(jump, math.abs(pic[1][y][x] - pic[1][y - 1][x])) end
    end
    return jump
  end
  for _, mode in ipairs({"bilinear", "bicubic"}) do
    local g = image.overlay(img, heat, {alpha = 1, colormap = "grey", upsample = mode}):totable()
    local jump = largest_jump(g)
    lu.assertTrue(jump < SMOOTH_STEP, mode .. ": largest neighbour jump " .. jump)
  end
  -- the blocky mode jumps from 0 to 1 at the hot cell's edge
  local n = image.overlay(img, heat, {alpha = 1, colormap = "grey", upsample = "nearest"})
  lu.assertAlmostEquals(largest_jump(n:totable()), 1, 1e-6)
end

function M.test_overlay_accepts_vectors_tables_and_colormaps()
  local img = glimpse.rand(3, 16, 24)
  local vec = glimpse.tensor({1, 2, 3, 4, 5, 6, 7, 8, 9})
  lu.assertEquals(image.overlay(img, vec).shape, {3, 16, 24})
  lu.assertEquals(image.overlay(img, {1, 2, 3, 4, 5, 6}, {grid = {2, 3}, colormap = "hot"}).shape,
                  {3, 16, 24})
  lu.assertEquals(image.overlay(glimpse.rand(16, 24), {{0, 1}, {1, 0}}, {colormap = "viridis",
                  upsample = "bicubic"}).shape, {3, 16, 24})
  lu.assertEquals(image.overlay(glimpse.rand(4, 16, 24), glimpse.rand(1, 2, 2)).shape, {3, 16, 24})
  -- alpha 0 gives the image back
  lu.assertTrue(max_abs_diff(image.overlay(img, vec, {alpha = 0}), img) < 1e-6)
  assert_error_matches("image.overlay: bad argument #2 (heat): a vector of 6 entries is not a square",
                       image.overlay, img, {1, 2, 3, 4, 5, 6})
  assert_error_matches("image.overlay: img has shape [2,16,24]: channels must be 1, 3 or 4",
                       image.overlay, glimpse.zeros(2, 16, 24), vec)
  assert_error_matches("grid {2, 2} needs 4", image.overlay, img, vec, {grid = {2, 2}})
  assert_error_matches("option 'alpha' must be in [0,1]", image.overlay, img, vec, {alpha = 2})
end

function M.test_colormap_endpoints()
  local r, g, b = image.colormap("jet", 1)
  lu.assertTrue(r > 0.4 and g == 0 and b == 0)
  r, g, b = image.colormap("jet", 0)
  lu.assertTrue(r == 0 and g == 0 and b > 0.4)
  r, g, b = image.colormap("hot", 1)
  lu.assertEquals({r, g, b}, {1, 1, 1})
  r, g, b = image.colormap("viridis", 0)
  lu.assertAlmostEquals(r, 68 / 255, 1e-6)
end

return M
