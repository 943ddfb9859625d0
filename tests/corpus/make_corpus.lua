-- tests/corpus/make_corpus.lua -- rebuilds the fuzz seeds and the hostile files of issue 13.
--
--   build/glimpse tests/corpus/make_corpus.lua        (from the repository root)
--
-- Writes small files under tests/corpus/{image,safetensors,idx}/: valid seeds the fuzzers of
-- `make fuzz` mutate, and one file per hostile case the regression tests in
-- tests/test_files_hostile.lua load (names say the case).  Valid images come from
-- glimpse.image.save; the hostile ones are those files with a few bytes changed (checksums
-- recomputed where the case needs only one thing wrong), so every file here is reproducible
-- from this script alone.
local glimpse = require "glimpse"
local helpers = require "tests.helpers"
local image = glimpse.image

local M = {}
local ROOT = "tests/corpus"

-- ---------------------------------------------------------------------------------------
-- bytes

local crc_table = {}
for i = 0, 255 do
  local c = i
  for _ = 1, 8 do c = (c & 1) ~= 0 and (0xEDB88320 ~ (c >> 1)) or (c >> 1) end
  crc_table[i] = c
end

--- CRC-32 of a string (the PNG chunk checksum, as zlib's crc32)
function M.crc32(s)
  local c = 0xFFFFFFFF
  for i = 1, #s do c = crc_table[(c ~ s:byte(i)) & 0xFF] ~ (c >> 8) end
  return c ~ 0xFFFFFFFF
end

local write, read = helpers.write_file, helpers.read_file

-- A deterministic test picture: (C,H,W) of smooth gradients plus a disc.
local function picture(C, H, W)
  local t = {}
  for c = 1, C do
    t[c] = {}
    for y = 1, H do
      t[c][y] = {}
      for x = 1, W do
        local disc = ((x - W / 2) ^ 2 + (y - H / 2) ^ 2 < (H / 3) ^ 2) and 0.5 or 0
        t[c][y][x] = ((x * c + y * (4 - c)) % W) / W * 0.5 + disc
      end
    end
  end
  return glimpse.tensor(t)
end

-- Save a picture in a format and return its bytes.
local function saved(C, H, W, ext, opts)
  local p = os.tmpname() .. "." .. ext
  image.save(p, picture(C, H, W), opts)
  local s = read(p)
  os.remove(p)
  return s
end

-- PNG chunks: list of {type, data}; and back to bytes with fresh CRCs.
local function png_chunks(s)
  local out, at = {}, 9
  while at <= #s do
    local len = string.unpack(">I4", s, at)
    out[#out + 1] = {s:sub(at + 4, at + 7), s:sub(at + 8, at + 7 + len)}
    at = at + 12 + len
  end
  return out
end

local function png_chunk(typ, data)
  return string.pack(">I4", #data) .. typ .. data .. string.pack(">I4", M.crc32(typ .. data))
end

local function png_join(chunks)
  local parts = {"\137PNG\r\n\26\n"}
  for _, c in ipairs(chunks) do parts[#parts + 1] = png_chunk(c[1], c[2]) end
  return table.concat(parts)
end

-- JPEG segments: find the first marker `code` (0xC0 SOF0, 0xC4 DHT); its byte position.
local function jpeg_marker(s, code)
  local at = 3
  while at < #s do
    local m, len = s:byte(at + 1), string.unpack(">I2", s, at + 2)
    if m == code then return at end
    at = at + 2 + len
  end
end

-- ---------------------------------------------------------------------------------------
-- the files

--- Every file of the corpus: {dir = {name = bytes}}
function M.files()
  local img, st, idx = {}, {}, {}

  -- valid seeds
  img["seed_rgb.png"] = saved(3, 12, 10, "png")
  img["seed_rgba.png"] = saved(4, 6, 7, "png")
  img["seed_grey.png"] = saved(1, 9, 5, "png")
  img["seed_rgb.jpg"] = saved(3, 16, 16, "jpg", {quality = 80})
  img["seed_grey.jpg"] = saved(1, 8, 24, "jpg", {quality = 60})
  img["seed_rgb.bmp"] = saved(3, 5, 7, "bmp")
  img["seed_rgba.tga"] = saved(4, 4, 6, "tga")
  img["seed_grey.tga"] = saved(1, 6, 3, "tga")
  -- a 2x2 GIF: 4-colour palette, LZW min code size 2, codes CLEAR 0 1 2 (3 bits) 3 EOI (4)
  img["seed.gif"] = "GIF89a" .. string.char(2, 0, 2, 0, 0x91, 0, 0)
    .. string.char(255, 0, 0, 0, 255, 0, 0, 0, 255, 255, 255, 255)
    .. string.char(0x2C, 0, 0, 0, 0, 2, 0, 2, 0, 0) .. string.char(2, 3, 0x44, 0x34, 0x05, 0)
    .. ";"

  -- hostile images (tests/test_files_hostile.lua)
  local png = img["seed_rgb.png"]
  local chunks = png_chunks(png)
  local with_empty = {}
  for _, c in ipairs(chunks) do
    if c[1] == "IDAT" then with_empty[#with_empty + 1] = {"IDAT", ""} end
    with_empty[#with_empty + 1] = c
  end
  img["png_empty_idat.png"] = png_join(with_empty)          -- valid: must load
  do                                                         -- one CRC byte wrong
    local at = png:find("IDAT", 1, true)
    local len = string.unpack(">I4", png, at - 4)
    local crc_at = at + 4 + len
    img["png_bad_crc.png"] = png:sub(1, crc_at - 1) .. string.char(png:byte(crc_at) ~ 1)
      .. png:sub(crc_at + 1)
  end
  do                                                         -- Adler-32 wrong, CRCs right
    local bad = {}
    for _, c in ipairs(chunks) do
      local d = c[2]
      if c[1] == "IDAT" then d = d:sub(1, -2) .. string.char(d:byte(-1) ~ 0x55) end
      bad[#bad + 1] = {c[1], d}
    end
    img["png_bad_adler.png"] = png_join(bad)
  end
  img["png_truncated.png"] = png:sub(1, #png - 30)
  do                                                         -- 8000x8000 declared in IHDR
    local bomb = {}
    for _, c in ipairs(chunks) do
      local d = c[2]
      if c[1] == "IHDR" then d = string.pack(">I4I4", 8000, 8000) .. d:sub(9) end
      bomb[#bomb + 1] = {c[1], d}
    end
    img["bomb.png"] = png_join(bomb)
  end

  local jpg = img["seed_rgb.jpg"]
  do                                                         -- DHT counts summing past 256
    local at = jpeg_marker(jpg, 0xC4)
    local counts = string.rep("\17", 16)                     -- 16 * 17 = 272 codes
    img["jpeg_huffman_over_256.jpg"] = jpg:sub(1, at + 4) .. counts .. jpg:sub(at + 21)
  end
  do                                                         -- 8000x8000 declared in SOF0
    local at = jpeg_marker(jpg, 0xC0)
    img["bomb.jpg"] = jpg:sub(1, at + 4) .. string.pack(">I2I2", 8000, 8000) .. jpg:sub(at + 9)
  end
  img["jpeg_truncated.jpg"] = jpg:sub(1, #jpg * 2 // 3)
  -- an 8x8 grey progressive JPEG (stb_image_write writes only baseline): written once by
  -- PIL 9.4 (Image.save(progressive=True, quality=50)) and kept here as hex
  local prog = ("ffd8ffe000104a46494600010100000100010000ffdb004300100b0c0e0c0a100e0d0e1211101318281a1816"
    .. "16183123251d283a333d3c3933383740485c4e404457453738506d51575f626768673e4d71797064785c6567"
    .. "63ffc2000b080008000801011100ffc40014000100000000000000000000000000000001ffda000801010000"
    .. "00017fffc40017100100030000000000000000000000000001020304ffda0008010100010502ce15c3ffc400"
    .. "1810000203000000000000000000000000000001021231ffda0008010100063f02bcb11fffc4001710010003"
    .. "0000000000000000000000000001001131ffda0008010100013f215b836cffda00080101000000107fffc400"
    .. "1a100002020300000000000000000000000001114161002131ffda0008010100013f10d6a4519a0e4f059cff"
    .. "d9"):gsub("%x%x", function(x) return string.char(tonumber(x, 16)) end)
  img["seed_progressive.jpg"] = prog
  do                   -- then 600 more first-pass AC scans (Ah = Al = 0, so no warning each)
    local last = prog:sub(290, 307)                           -- the final scan: SOS + data
    local again = last:sub(1, 9) .. "\0" .. last:sub(11)
    img["jpeg_many_scans.jpg"] = prog:sub(1, 307) .. again:rep(600) .. prog:sub(308)
  end

  local bmp = img["seed_rgb.bmp"]
  img["bomb.bmp"] = bmp:sub(1, 18) .. string.pack("<i4i4", 8000, 8000) .. bmp:sub(27, 54)
  img["bmp_truncated.bmp"] = bmp:sub(1, #bmp - 20)
  local tga = saved(3, 6, 5, "tga")
  img["bomb.tga"] = tga:sub(1, 12) .. string.pack("<I2I2", 8000, 8000) .. tga:sub(17, 18)
  img["tga_truncated.tga"] = tga:sub(1, #tga * 2 // 3)
  -- RLE TGA 2x1 whose one run packet claims 3 pixels
  img["tga_run_past_end.tga"] = string.char(0, 0, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 1, 0, 24, 0)
    .. string.char(0x82, 1, 2, 3)
  -- the seed GIF with codes CLEAR 0 1 EOI: a complete file whose frame gets 2 of its 4 pixels
  img["gif_short_data.gif"] = img["seed.gif"]:sub(1, 36) .. string.char(2, 0x44, 0x0A, 0)
    .. ";"

  -- safetensors
  local function st_file(header, data) return string.pack("<I8", #header) .. header .. data end
  st["seed.safetensors"] = st_file('{"__metadata__":{"k":"v"},"a":{"dtype":"F32","shape":[2,2],'
    .. '"data_offsets":[0,16]},"b":{"dtype":"F16","shape":[3],"data_offsets":[16,22]}}',
    string.pack("<ffff", 1, 2, 3, 4) .. "\0\60\0\64\0\66")
  st["st_gap.safetensors"] = st_file('{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}',
    "GAP!" .. string.pack("<f", 1))
  st["st_trailing.safetensors"] = st_file('{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}',
    string.pack("<f", 1) .. "TAIL")
  st["st_zero_big_first.safetensors"] = st_file('{"z":{"dtype":"F32","shape":[2147483647,2,0],'
    .. '"data_offsets":[0,0]}}', "")
  st["st_zero_big_last.safetensors"] = st_file('{"z":{"dtype":"F32","shape":[0,2147483647,2],'
    .. '"data_offsets":[0,0]}}', "")

  -- IDX
  idx["seed_u8.idx"] = "\0\0\8\2" .. string.pack(">I4I4", 3, 2) .. "\1\2\3\4\5\6"
  idx["seed_f32.idx"] = "\0\0\13\1" .. string.pack(">I4>f>f", 2, 1.5, -2)
  idx["idx_2g_elements.idx"] = "\0\0\8\1" .. string.pack(">I4", 0x7fffffff)
  return {image = img, safetensors = st, idx = idx}
end

function M.write_all(root)
  root = root or ROOT
  local n = 0
  for dir, files in pairs(M.files()) do
    os.execute("mkdir -p '" .. root .. "/" .. dir .. "'")
    for name, bytes in pairs(files) do
      write(root .. "/" .. dir .. "/" .. name, bytes)
      n = n + 1
    end
  end
  return n
end

if arg and arg[0] and arg[0]:match("make_corpus%.lua$") then
  print(string.format("wrote %d files under %s/", M.write_all(arg[1]), arg[1] or ROOT))
end
return M
