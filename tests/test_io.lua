-- tests/test_io.lua -- glimpse.save / glimpse.load (engine/io.c, bindings/l_io.c).
--
-- Round trips must be bit-exact; writes must be atomic; a file written by an independent
-- writer (tests/fixtures/make_fixtures.py, PyTorch) must load; and every malformed file --
-- truncated, lying about lengths, bad JSON, bad shapes or offsets, randomly corrupted --
-- must raise a "load: <path>: ..." error, never crash or over-read (run this suite under
-- AddressSanitizer to see the latter).
local lu = require "luaunit"
local glimpse = require "glimpse"
local helpers = require "tests.helpers"
local tmpdir, rmdir = helpers.tmpdir, helpers.rmdir
local read_file, write_file = helpers.read_file, helpers.write_file

local T = {}

local FIXTURE = "tests/fixtures/st_torch.safetensors"
local MAKE_FIXTURES = "tests/fixtures/make_fixtures.py"
local SYS_PYTHON = "/usr/bin/python3"
local FUZZ_ROUNDS = 200
local FUZZ_SEED = 20240611
local F32_TOL = 0       -- every value here is exact: compare bit for bit

-- ---------------------------------------------------------------------------------------
-- helpers

-- fn(path, dir): dir a fresh temporary directory and path the file `name` in it; the
-- directory is removed afterwards, also when fn fails.
local function in_tmpdir(name, fn)
  local d = tmpdir()
  local ok, err = pcall(fn, d .. "/" .. name, d)
  rmdir(d)
  if not ok then error(err, 0) end
end

local ls = helpers.ls

-- float32 rounding of a Lua number
local function f32(x) return (string.unpack("<f", string.pack("<f", x))) end

-- flat list of a tensor's values
local function flat(t)
  local out = {}
  local function walk(v)
    if type(v) == "table" then for _, w in ipairs(v) do walk(w) end else out[#out + 1] = v end
  end
  walk(t:totable())
  return out
end

-- bit patterns, so -0.0 and NaN compare exactly
local function bits(t)
  local out = {}
  for i, v in ipairs(flat(t)) do out[i] = string.pack("<f", v) end
  return out
end

local function assert_same_tensor(got, want, name)
  lu.assertEquals(got.shape, want.shape, name .. ": shape")
  lu.assertEquals(bits(got), bits(want), name .. ": values")
end

local function assert_values(t, shape, want, name)
  lu.assertEquals(t.shape, shape, name .. ": shape")
  local got = flat(t)
  lu.assertEquals(#got, #want, name .. ": numel")
  for i = 1, #want do
    local w = want[i]
    if w ~= w then
      lu.assertTrue(got[i] ~= got[i], name .. "[" .. i .. "] should be NaN")
    else
      lu.assertTrue(math.abs(got[i] - w) <= F32_TOL or got[i] == w,
                    string.format("%s[%d]: got %.17g, want %.17g", name, i, got[i], w))
      if w == 0 then   -- the sign of zero too
        lu.assertEquals(string.pack("<f", got[i]), string.pack("<f", w), name .. "[" .. i .. "]")
      end
    end
  end
end

-- A safetensors file from a header string and raw data.
local function st_bytes(header, data)
  return string.pack("<I8", #header) .. header .. (data or "")
end

-- The error of glimpse.save(path, tbl, meta), or a test failure if it saved.
local function save_error(path, tbl, meta)
  local ok, err = pcall(glimpse.save, path, tbl, meta)
  lu.assertFalse(ok, "saving " .. path .. " should fail")
  err = tostring(err)
  lu.assertStrContains(err, "save:")
  return err
end

-- An error from glimpse.load, or a test failure if it loaded.
local function load_error(path)
  local ok, err = pcall(glimpse.load, path)
  lu.assertFalse(ok, "loading " .. path .. " should fail")
  err = tostring(err)
  lu.assertStrContains(err, "load: " .. path .. ":")
  return err
end

-- ---------------------------------------------------------------------------------------
-- round trips

function T.test_roundtrip_is_bit_exact_with_shapes_and_metadata()
  in_tmpdir("m.safetensors", function(p)
    glimpse.manual_seed(7)
    local sd = {
      ["enc.weight"] = glimpse.randn(3, 4, 5),
      ["enc.bias"] = glimpse.randn(5),
      scalar = glimpse.tensor(2.5),                        -- 0-dim
      empty = glimpse.zeros(0),
      empty_mid = glimpse.zeros(3, 0, 2),                  -- a zero-size dim in the middle
      eight = glimpse.randn(1, 2, 1, 2, 1, 2, 1, 2),       -- GL_MAX_DIMS dims
      special = glimpse.tensor({-0.0, math.huge, -math.huge, 0 / 0, 1e-45, 3.4e38, 1e-3}),
    }
    lu.assertEquals(sd.scalar:dim(), 0)
    local meta = {model = "encoder", layers = 3, lr = 0.5, note = "\"quoted\"\nline\ttab \\ ünï ✓"}
    glimpse.save(p, sd, meta)
    local back, m = glimpse.load(p)
    local n = 0
    for k, t in pairs(sd) do
      n = n + 1
      lu.assertNotNil(back[k], k)
      assert_same_tensor(back[k], t, k)
    end
    local nb = 0
    for _ in pairs(back) do nb = nb + 1 end
    lu.assertEquals(nb, n)
    lu.assertEquals(back.scalar:dim(), 0)
    lu.assertEquals(back.empty_mid.shape, {3, 0, 2})
    lu.assertEquals(m, {model = "encoder", layers = "3", lr = "0.5", note = meta.note})
  end)
end

function T.test_metadata_absent_gives_empty_table()
  in_tmpdir("x.safetensors", function(p)
    glimpse.save(p, {w = glimpse.ones(2)})
    local sd, meta = glimpse.load(p)
    lu.assertEquals(meta, {})
    assert_values(sd.w, {2}, {1, 1}, "w")
    glimpse.save(p, {}, {})
    sd, meta = glimpse.load(p)
    lu.assertEquals(sd, {})
    lu.assertEquals(meta, {})
  end)
end

function T.test_save_is_deterministic_and_sorted_and_aligned()
  in_tmpdir("a.safetensors", function(a, d)
    local b = d .. "/b.safetensors"
    local sd = {zeta = glimpse.arange(3), alpha = glimpse.ones(2, 2), mid = glimpse.tensor(1)}
    glimpse.save(a, sd, {k2 = "2", k1 = "1"})
    glimpse.save(b, sd, {k1 = "1", k2 = "2"})
    local sa = read_file(a)
    lu.assertEquals(sa, read_file(b))
    local n = string.unpack("<I8", sa)
    lu.assertEquals(n % 8, 0, "header padded to a multiple of 8")
    local header = sa:sub(9, 8 + n)
    local ia, im, iz = header:find('"alpha"', 1, true), header:find('"mid"', 1, true),
                       header:find('"zeta"', 1, true)
    lu.assertTrue(ia < im and im < iz, "names sorted in the header")
    lu.assertStrContains(header, '"alpha":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}')
    lu.assertStrContains(header, '"mid":{"dtype":"F32","shape":[],"data_offsets":[16,20]}')
    lu.assertStrContains(header, '"zeta":{"dtype":"F32","shape":[3],"data_offsets":[20,32]}')
    lu.assertEquals(#sa, 8 + n + 32, "data packed with nothing after it")
    -- an independent JSON parser agrees
    local ok, cjson = pcall(require, "cjson")
    if ok then
      local h = cjson.decode(header)
      lu.assertEquals(h.__metadata__, {k1 = "1", k2 = "2"})
      lu.assertEquals(h.zeta.data_offsets, {20, 32})
    end
  end)
end

function T.test_saved_tensor_requiring_grad_loads_as_plain_leaf()
  in_tmpdir("g.safetensors", function(p)
    local w = glimpse.tensor({{1, 2}, {3, 4}}):requires_grad()
    glimpse.save(p, {w = w})
    local sd = glimpse.load(p)
    assert_values(sd.w, {2, 2}, {1, 2, 3, 4}, "w")
    lu.assertFalse(sd.w.requires_grad_flag)
    lu.assertNil(sd.w.grad)
  end)
end

-- ---------------------------------------------------------------------------------------
-- atomic writes and save errors

function T.test_failed_save_leaves_existing_file_and_no_temp()
  in_tmpdir("keep.safetensors", function(p, d)
    glimpse.save(p, {w = glimpse.arange(4)}, {v = "1"})
    local before = read_file(p)
    local bad = {
      {{w = glimpse.ones(2), oops = 3}, nil, "value of 'oops' is number, expected a tensor"},
      {{w = glimpse.ones(2), [1] = glimpse.ones(1)}, nil, "tensor names must be strings"},
      {{w = glimpse.ones(2)}, {flag = true}, "metadata value of 'flag' is a boolean"},
      {{w = glimpse.ones(2)}, {[1] = "x"}, "metadata keys must be strings"},
      {{__metadata__ = glimpse.ones(2)}, nil, "'__metadata__' is reserved"},
      {{["bad\xff"] = glimpse.ones(2)}, nil, "not valid UTF-8"},
      {{["nul\0name"] = glimpse.ones(2)}, nil, "contains a NUL byte"},
      {{w = glimpse.ones(2)}, {k = "\xc3"}, "not valid UTF-8"},
    }
    for i, case in ipairs(bad) do
      lu.assertStrContains(save_error(p, case[1], case[2]), case[3])
      lu.assertEquals(read_file(p), before, "case " .. i .. ": existing file changed")
      lu.assertEquals(ls(d), {"keep.safetensors"}, "case " .. i .. ": temp file left behind")
    end
    local sd, meta = glimpse.load(p)
    assert_values(sd.w, {4}, {1, 2, 3, 4}, "w")
    lu.assertEquals(meta, {v = "1"})
  end)
end

function T.test_closed_tensor_is_refused()
  in_tmpdir("c.safetensors", function(p, d)
    local t = glimpse.ones(2)
    local mt = getmetatable(t)
    if not mt.__close then lu.skip("tensors have no __close") end
    mt.__close(t)
    lu.assertStrContains(save_error(p, {t = t}), "save: tensor 't' was closed")
    lu.assertEquals(ls(d), {})
  end)
end

function T.test_failed_rename_removes_temp_file()
  in_tmpdir("adir", function(target, d)
    assert(os.execute("mkdir '" .. target .. "'"))
    write_file(target .. "/inside", "x")        -- a non-empty directory cannot be replaced
    lu.assertStrContains(save_error(target, {w = glimpse.ones(3)}), "save: " .. target .. ":")
    lu.assertEquals(ls(d), {"adir"}, "temp file left behind")
    lu.assertEquals(ls(target), {"inside"})
  end)
end

function T.test_save_into_missing_directory_fails_cleanly()
  in_tmpdir("no/such/dir/m.safetensors", function(p)
    lu.assertStrContains(save_error(p, {w = glimpse.ones(1)}), "save: " .. p .. ": cannot create")
  end)
end

function T.test_save_argument_errors()
  lu.assertErrorMsgContains("bad argument #2", glimpse.save, "/tmp/x", 5)
  lu.assertErrorMsgContains("bad argument #3", glimpse.save, "/tmp/x", {}, 5)
  lu.assertErrorMsgContains("bad argument #1", glimpse.save, nil, {})
  lu.assertErrorMsgContains("bad argument #1", glimpse.load, nil)
end

-- ---------------------------------------------------------------------------------------
-- files from elsewhere

function T.test_loads_python_written_fixture_of_every_dtype()
  local sd, meta = glimpse.load(FIXTURE)
  lu.assertEquals(meta.format, "pt")
  lu.assertEquals(meta.source, "tests/fixtures/make_fixtures.py st_torch")
  -- written with \uXXXX escapes, a surrogate pair among them
  lu.assertEquals(meta.note, "ünïcödé \"q\" \\ \t\n ✓ 😀")
  assert_values(sd["lin.weight"], {2, 3}, {-0.5, -0.25, 0, 0.25, 0.5, 0.75}, "lin.weight")
  assert_values(sd["lin.bias"], {2}, {0.125, -0.125}, "lin.bias")
  local emb = {}
  for i = 0, 11 do emb[#emb + 1] = i / 8 - 1 end
  assert_values(sd["emb.weight"], {4, 3}, emb, "emb.weight")
  assert_values(sd.f64, {4}, {1.5, -2.25, f32(0.1), math.huge}, "f64")
  assert_values(sd.i64, {4}, {0, -1, f32(123456789), 2 ^ 40}, "i64")
  assert_values(sd.f16, {6}, {1, -2.5, 65504, 2 ^ -24, math.huge, -0.0}, "f16")
  assert_values(sd.bf16, {4}, {1, -3, 2 ^ -7, 2 ^ 100}, "bf16")
  assert_values(sd.i32, {2}, {-2147483648, 7}, "i32")
  assert_values(sd.u8, {3}, {0, 255, 7}, "u8")
  assert_values(sd.flag, {3}, {1, 0, 1}, "flag")
end

-- The dtype conversions, from bytes written here (independent of the Python fixture).
function T.test_loads_handwritten_dtypes()
  in_tmpdir("dt.safetensors", function(p, d)
    local cases = {
      {"F16", "<" .. ("I2"):rep(7), {0x3C00, 0xC000, 0x0001, 0x03FF, 0x7C00, 0x8000, 0x7E00},
       {1, -2, 2 ^ -24, 1023 * 2 ^ -24, math.huge, -0.0, 0 / 0}, 2},
      {"BF16", "<I2I2I2", {0x3F80, 0xC040, 0xFF80}, {1, -3, -math.huge}, 2},
      {"F64", "<ddd", {0.5, -1e300, 1 / 3}, {0.5, -math.huge, f32(1 / 3)}, 8},
      {"I64", "<i8i8", {-5, math.maxinteger}, {-5, 2 ^ 63}, 8},
      {"I32", "<i4i4", {-7, 100000}, {-7, 100000}, 4},
      {"I16", "<i2i2", {-32768, 5}, {-32768, 5}, 2},
      {"I8", "<i1i1", {-128, 127}, {-128, 127}, 1},
      {"U8", "<BB", {200, 1}, {200, 1}, 1},
      {"BOOL", "<BB", {0, 2}, {0, 1}, 1},
    }
    for _, c in ipairs(cases) do
      local dtype, fmt, raw, want, size = c[1], c[2], c[3], c[4], c[5]
      local data = string.pack(fmt, table.unpack(raw))
      local h = string.format('{"x":{"dtype":"%s","shape":[%d],"data_offsets":[0,%d]}}', dtype,
                              #raw, #raw * size)
      write_file(p, st_bytes(h, data))
      local sd = glimpse.load(p)
      assert_values(sd.x, {#raw}, want, dtype)
    end
  end)
end

function T.test_accepts_json_whitespace_and_escapes()
  in_tmpdir("ws.safetensors", function(p)
    local h = ' \n{ "__metadata__" : { "k\\u00e9" : "v\\/\\"\\\\\\b\\f\\n\\r\\t\\ud83d\\ude00" } ,\r\n'
      .. '\t"a\\u0041" : { "shape" : [ 2 ] , "data_offsets" : [ 0 , 8 ] , "dtype" : "F32" } ,'
      .. ' "z" : {"dtype":"F32","shape":[0,3],"data_offsets":[8,8]} }\n   '
    -- the data is covered exactly (gaps and trailing bytes: tests/test_files_hostile.lua)
    write_file(p, st_bytes(h, string.pack("<ff", 1.5, -2)))
    local sd, meta = glimpse.load(p)
    assert_values(sd.aA, {2}, {1.5, -2}, "aA")
    lu.assertEquals(sd.z.shape, {0, 3})
    lu.assertEquals(meta["ké"], "v/\"\\\b\f\n\r\t😀")
  end)
end

function T.test_glimpse_file_passes_python_reader_check()
  local has_torch = os.execute(SYS_PYTHON .. " -c 'import torch' >/dev/null 2>&1")
  if not has_torch then lu.skip("python3-torch not installed for " .. SYS_PYTHON) end
  in_tmpdir("check.safetensors", function(p, d)
    -- keep in step with check_expected() in tests/fixtures/make_fixtures.py
    local big = {}
    for i = 0, 2 do
      big[i + 1] = {}
      for j = 0, 3 do
        big[i + 1][j + 1] = {}
        for k = 0, 4 do big[i + 1][j + 1][k + 1] = (i * 20 + j * 5 + k) * 0.5 - 7 end
      end
    end
    glimpse.save(p, {
      ["a.weight"] = glimpse.tensor({{-0.5, 0.25, 1.0}, {2.0, -4.5, 1e-3}}),
      ["b.scalar"] = glimpse.tensor(3.25),
      ["c.empty"] = glimpse.zeros(0, 4),
      ["d.special"] = glimpse.tensor({-0.0, math.huge, -math.huge, 3.4028234663852886e38,
                                      1.401298464324817e-45, 0 / 0}),
      ["e.big"] = glimpse.tensor(big),
      ["f.ünïcödé"] = glimpse.tensor({1}),
    }, {format = "glimpse-check", n = 42,
        note = "ünïcödé \"quoted\" back\\slash tab\t newline\n ✓"})
    local pipe = io.popen(string.format("%s %s --check '%s' 2>&1", SYS_PYTHON, MAKE_FIXTURES, p))
    local out = pipe:read("a")
    local ok = pipe:close()
    lu.assertTrue(ok, "make_fixtures.py --check failed: " .. out)
    lu.assertStrContains(out, "OK")
    -- and the checker does reject a file that differs
    glimpse.save(p, {["a.weight"] = glimpse.zeros(2, 3)}, {format = "glimpse-check"})
    pipe = io.popen(string.format("%s %s --check '%s' 2>&1", SYS_PYTHON, MAKE_FIXTURES, p))
    out = pipe:read("a")
    lu.assertTrue(not pipe:close(), "the checker accepted a wrong file: " .. out)
  end)
end

-- ---------------------------------------------------------------------------------------
-- malformed files: each one must give a clear error

local GOOD_HEADER = '{"__metadata__":{"m":"v"},'
  .. '"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
  .. '"b":{"dtype":"F32","shape":[],"data_offsets":[8,12]}}'
local GOOD_DATA = string.pack("<fff", 1, 2, 3)

local function entry(fields) return '{"x":{' .. fields .. '}}' end
-- the header of one tensor "x": a dtype name, and the JSON texts of its shape and offsets
local function x_entry(dtype, shape, offsets)
  return entry('"dtype":"' .. dtype .. '","shape":' .. shape .. ',"data_offsets":' .. offsets)
end
local X_OK = '"dtype":"F32","shape":[2],"data_offsets":[0,8]'

-- {name, header, data or nil (8 bytes of data), expected message fragment}
local MALFORMED = {
  {"header is not an object (array)", "[]", nil, "the header must be an object"},
  {"header is a string", '"x"', nil, "must be an object"},
  {"header is a number", "1", nil, "must be an object"},
  {"header is empty", "", nil, "must be an object"},
  {"header is only spaces", "        ", nil, "must be an object"},
  {"unclosed header object", '{"x":{' .. X_OK .. '}', nil, "expected ',' or '}'"},
  {"missing colon", '{"x" {' .. X_OK .. '}}', nil, "expected ':'"},
  {"single quotes", "{'x':{" .. X_OK .. "}}", nil, "expected a string"},
  {"trailing comma in object", entry(X_OK .. ","), nil, "expected a string"},
  {"trailing comma in array", x_entry("F32", "[2,]", "[0,8]"), nil, "expected an integer"},
  {"trailing garbage", '{"x":{' .. X_OK .. '}} x', nil, "trailing 'x'"},
  {"two objects", '{"x":{' .. X_OK .. '}}{}', nil, "trailing '{'"},
  {"NUL padding", '{"x":{' .. X_OK .. '}}\0\0\0', nil, "trailing byte 0x00"},
  {"unterminated string", '{"x', nil, "unterminated string"},
  {"bad escape", '{"x\\q":{' .. X_OK .. '}}', nil, "bad escape"},
  {"short unicode escape", '{"x\\u12":{' .. X_OK .. '}}', nil, "bad escape"},
  {"control character in a string", '{"x\n":{' .. X_OK .. '}}', nil, "control character"},
  {"invalid UTF-8 in a name", '{"x\xff":{' .. X_OK .. '}}', nil, "not valid UTF-8"},
  {"overlong UTF-8", '{"x\xc0\xaf":{' .. X_OK .. '}}', nil, "not valid UTF-8"},
  {"lone high surrogate", '{"x\\ud800":{' .. X_OK .. '}}', nil, "unpaired surrogate"},
  {"lone low surrogate", '{"x\\udc00":{' .. X_OK .. '}}', nil, "unpaired surrogate"},
  {"escaped NUL", '{"x\\u0000":{' .. X_OK .. '}}', nil, "NUL character"},
  {"unknown dtype", x_entry("F17", "[2]", "[0,8]"), nil, "unsupported dtype 'F17'"},
  {"fp8 dtype", x_entry("F8_E4M3", "[8]", "[0,8]"), nil, "unsupported dtype"},
  {"dtype is a number", entry('"dtype":1,"shape":[2],"data_offsets":[0,8]'), nil,
   "expected a string"},
  {"negative shape", x_entry("F32", "[-2]", "[0,8]"), nil, "shape entry -2 is negative"},
  {"huge shape entry", x_entry("F32", "[4294967296]", "[0,8]"), nil, "too large"},
  {"huge shape product", x_entry("F32", "[65536,65536]", "[0,8]"), nil, "more than"},
  {"shape past int64", x_entry("F32", "[99999999999999999999]", "[0,8]"),
   nil, "integer out of range"},
  {"nine dims", x_entry("F32", "[1,1,1,1,1,1,1,1,2]", "[0,8]"), nil, "more than 8 dims"},
  {"float in shape", x_entry("F32", "[2.0]", "[0,8]"), nil, "must be integers"},
  {"exponent in shape", x_entry("F32", "[2e0]", "[0,8]"), nil, "must be integers"},
  {"leading zero", x_entry("F32", "[02]", "[0,8]"), nil, "leading zero"},
  {"shape is a string", entry('"dtype":"F32","shape":"2","data_offsets":[0,8]'), nil,
   "'shape' must be an array"},
  {"shape nested deeply", entry('"dtype":"F32","shape":' .. ("["):rep(10000)), nil,
   "expected an integer"},
  {"header nested deeply", '{"x":' .. ("{"):rep(10000), nil, "expected a string"},
  {"offsets past the data", x_entry("F32", "[2]", "[4,12]"), nil, "run past the 8 bytes of data"},
  {"huge offsets", x_entry("U8", "[1]", "[9223372036854775806,9223372036854775807]"), nil,
   "run past"},
  {"offsets backwards", x_entry("F32", "[2]", "[8,0]"), nil, "run backwards"},
  {"negative offset", x_entry("F32", "[2]", "[-4,4]"), nil, "negative"},
  {"one offset", x_entry("F32", "[2]", "[8]"), nil, "exactly 2"},
  {"three offsets", x_entry("F32", "[2]", "[0,4,8]"), nil, "exactly 2"},
  {"size mismatch", x_entry("F32", "[3]", "[0,8]"), nil, "hold 8 bytes, but F32 [3] needs 12"},
  {"size mismatch for F64", x_entry("F64", "[2]", "[0,8]"), nil, "needs 16"},
  {"overlapping tensors", '{"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
                          .. '"y":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', nil,
   "overlap"},
  {"same bytes twice", '{"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
                       .. '"y":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', nil,
   "overlap"},
  {"missing dtype", entry('"shape":[2],"data_offsets":[0,8]'), nil, "has no 'dtype'"},
  {"missing shape", entry('"dtype":"F32","data_offsets":[0,8]'), nil, "has no 'shape'"},
  {"missing offsets", entry('"dtype":"F32","shape":[2]'), nil, "has no 'data_offsets'"},
  {"empty entry", entry(""), nil, "has no 'dtype'"},
  {"entry is not an object", '{"x":[1,2]}', nil, "a tensor entry must be an object"},
  {"unknown field", entry(X_OK .. ',"extra":1'), nil, "unknown field 'extra'"},
  {"duplicate field", entry(X_OK .. ',"dtype":"F32"'), nil, "duplicate field 'dtype'"},
  {"duplicate tensor", '{"x":{' .. X_OK .. '},"x":{' .. X_OK .. '}}', nil,
   "duplicate tensor name 'x'"},
  {"duplicate metadata", '{"__metadata__":{},"__metadata__":{}}', nil,
   "duplicate key '__metadata__'"},
  {"duplicate metadata key", '{"__metadata__":{"k":"1","k":"2"}}', nil,
   "duplicate metadata key 'k'"},
  {"metadata value not a string", '{"__metadata__":{"k":1}}', nil,
   "metadata value of 'k' is not a string"},
  {"metadata not an object", '{"__metadata__":"k"}', nil, "'__metadata__' must be an object"},
  {"true literal", '{"__metadata__":{"k":true}}', nil, "not a string"},
}

function T.test_malformed_headers_give_clear_errors()
  in_tmpdir("bad.safetensors", function(p)
    lu.assertTrue(#MALFORMED >= 20)
    for _, case in ipairs(MALFORMED) do
      local name, header, data, want = case[1], case[2], case[3], case[4]
      write_file(p, st_bytes(header, data or ("\0"):rep(8)))
      local ok, err = pcall(glimpse.load, p)
      lu.assertFalse(ok, name .. ": loaded without error")
      err = tostring(err)
      if not err:find("load: " .. p .. ":", 1, true) or not err:find(want, 1, true) then
        lu.fail(string.format("%s: error %q does not contain %q", name, err, want))
      end
    end
  end)
end

function T.test_every_truncation_of_a_valid_file_fails()
  in_tmpdir("t.safetensors", function(p)
    local good = st_bytes(GOOD_HEADER, GOOD_DATA)
    write_file(p, good)
    glimpse.load(p)                                  -- the untruncated file is fine
    for cut = 0, #good - 1 do
      write_file(p, good:sub(1, cut))
      local err = load_error(p)
      if cut < 8 then lu.assertStrContains(err, "too short") end
    end
  end)
end

function T.test_header_length_lies_are_caught_before_allocating()
  in_tmpdir("len.safetensors", function(p)
    write_file(p, string.pack("<I8", 1000) .. "{}")
    lu.assertStrContains(load_error(p), "header length 1000 runs past the end of the file")
    write_file(p, string.pack("<i8", -1) .. "{}")
    lu.assertStrContains(load_error(p), "runs past the end")
    write_file(p, string.pack("<I8", 1 << 62) .. GOOD_HEADER)
    lu.assertStrContains(load_error(p), "runs past the end")
    -- a length inside the file but over the 100 MB limit: a sparse 120 MB file
    local f = assert(io.open(p, "wb"))
    f:write(string.pack("<I8", 110 * 1024 * 1024))
    f:seek("set", 120 * 1024 * 1024)
    f:write("x")
    f:close()
    lu.assertStrContains(load_error(p), "exceeds the 104857600-byte limit")
  end)
end

function T.test_missing_and_non_regular_files()
  in_tmpdir("nope.safetensors", function(p, d)
    lu.assertStrContains(load_error(p), "No such file")
    lu.assertStrContains(load_error(d), "not a regular file")
  end)
end

-- Random corruption of the header.  Bytes from BREAKERS can never appear in valid JSON
-- (control characters, not whitespace), so those files must fail; arbitrary bytes may by
-- chance still make a valid file, so those must only fail cleanly or load consistently.
local BREAKERS = {0, 1, 2, 7, 8, 11, 12, 14, 27, 31}

function T.test_fuzzed_headers_never_crash()
  in_tmpdir("fuzz.safetensors", function(p)
    local good = st_bytes(GOOD_HEADER, GOOD_DATA)
    local hlen = #GOOD_HEADER
    math.randomseed(FUZZ_SEED)
    for _ = 1, FUZZ_ROUNDS do
      local bytes = {good:byte(1, -1)}
      local pos = 8 + math.random(hlen)
      bytes[pos] = BREAKERS[math.random(#BREAKERS)]
      write_file(p, string.char(table.unpack(bytes)))
      load_error(p)
    end
    local loaded = 0
    for _ = 1, FUZZ_ROUNDS do
      local bytes = {good:byte(1, -1)}
      for _ = 1, math.random(4) do
        bytes[math.random(8 + hlen)] = math.random(0, 255)   -- the length field too
      end
      write_file(p, string.char(table.unpack(bytes)))
      local ok, sd = pcall(glimpse.load, p)
      if ok then
        loaded = loaded + 1
        for _, t in pairs(sd) do lu.assertTrue(t:numel() <= 3) end
      else
        lu.assertStrContains(tostring(sd), "load: " .. p .. ":")
      end
    end
    lu.assertTrue(loaded < FUZZ_ROUNDS / 2, "most random corruptions must be caught")
  end)
end

return T
