-- tests/test_models.lua -- CNN encoders (glimpse/models/encoders.lua): ResNet-18 and VGG-16
-- grids and logits against torchvision on identical weights, state_dict names and shapes of
-- every architecture against torchvision's, grid shapes, SmallCNN training, errors,
-- preprocessing, and the converter (scripts/convert_torchvision.py) round trip.
--
-- torchvision's side lives in tests/fixtures/models_*.safetensors and models_keys.json, made by
-- tests/fixtures/fixtures_models.py; both sides fill their weights from the portable generator
-- documented there (models.fill_deterministic_ here).
local lu = require "luaunit"
local glimpse = require "glimpse"
local assert_close = require("tests.helpers").assert_close
local cjson = require "cjson"

local models, nn = glimpse.models, glimpse.nn

local T = {}

local GRID_RTOL = 1e-3       -- max |glimpse - torchvision| relative to the largest |entry|
local POOL_RTOL = 1e-5       -- adaptive average pooling: a few float32 roundings
local NORM_TOL = 1e-5        -- preprocess of a constant image: (c - mean) / std
local SYS_PYTHON = "/usr/bin/python3"
local FIX = "tests/fixtures/"

-- ---------------------------------------------------------------------------------------
-- helpers

local function max_abs(t)
  return t:abs():max():item()
end

local function assert_error_contains(fn, ...)
  local ok, err = pcall(fn)
  lu.assertFalse(ok, "expected an error")
  for _, s in ipairs({...}) do lu.assertStrContains(tostring(err), s) end
  return tostring(err)
end

local function tmpname(suffix)
  local p = os.tmpname()
  os.remove(p)
  return p .. suffix
end

-- the filled models are built once per run: filling 11.7M / 14.7M weights takes a second each
local cache = {}

local function filled(name)
  if not cache[name] then
    if name == "resnet18" then
      cache[name] = models.fill_deterministic_(models.resnet18{init = false}, 1):evaluate()
    else
      cache[name] = models.fill_deterministic_(models.vgg16{init = false, classifier = false},
                                               2):evaluate()
    end
  end
  return cache[name]
end

-- ---------------------------------------------------------------------------------------
-- torchvision on the same weights

function T.test_generator_gives_the_python_values_bit_for_bit()
  local f = glimpse.load(FIX .. "models_resnet18.safetensors")
  local mine = filled("resnet18").conv1.weight:reshape(-1):narrow(1, 1, 16)
  lu.assertEquals(mine:totable(), f["check.conv1_weight"]:totable())
  local g = glimpse.load(FIX .. "models_vgg16.safetensors")
  local v = filled("vgg16").features[1].weight:reshape(-1):narrow(1, 1, 16)
  lu.assertEquals(v:totable(), g["check.features_0_weight"]:totable())
end

function T.test_resnet18_grid_matches_torchvision_layer4()
  local f = glimpse.load(FIX .. "models_resnet18.safetensors")
  local m = filled("resnet18")
  local g, h, w = m:grid(f["input.x"])
  lu.assertEquals({h, w}, {2, 2})
  assert_close(g, f["output.grid"], GRID_RTOL, "resnet18 grid 48x48")
  local g2, h2, w2 = m:grid(f["input.x_odd"])
  lu.assertEquals({h2, w2}, {2, 2})
  assert_close(g2, f["output.grid_odd"], GRID_RTOL, "resnet18 grid 37x53")
end

function T.test_resnet18_logits_match_torchvision()
  local f = glimpse.load(FIX .. "models_resnet18.safetensors")
  local y = glimpse.no_grad(function() return filled("resnet18")(f["input.x"]) end)
  assert_close(y, f["output.logits"], GRID_RTOL, "resnet18 logits")
end

function T.test_vgg16_grid_matches_torchvision_conv5_3()
  local f = glimpse.load(FIX .. "models_vgg16.safetensors")
  local m = filled("vgg16")
  local g, h, w = m:grid(f["input.x"])
  lu.assertEquals({h, w}, {3, 3})
  assert_close(g, f["output.grid"], GRID_RTOL, "vgg16 grid 48x48")
  local g2, h2, w2 = m:grid(f["input.x_odd"])
  lu.assertEquals({h2, w2}, {2, 3})
  assert_close(g2, f["output.grid_odd"], GRID_RTOL, "vgg16 grid 37x53")
end

function T.test_adaptive_avg_pool_matches_torch_windows()
  local f, meta = glimpse.load(FIX .. "models_adaptive_pool.safetensors")
  local n = 0
  for _, case in ipairs({"equal", "uneven", "upsample", "global", "rect"}) do
    local oh, ow = meta[case]:match("^(%d+),(%d+)$")
    local pool = models.AdaptiveAvgPool2d({tonumber(oh) // 1, tonumber(ow) // 1})
    assert_close(pool(f["input." .. case]), f["output." .. case], POOL_RTOL, case)
    n = n + 1
  end
  lu.assertEquals(n, 5)
end

function T.test_adaptive_avg_pool_gradient_passes_finite_differences()
  local pool = models.AdaptiveAvgPool2d({3, 2})
  local ok = glimpse.gradcheck(function(x) return pool(x):pow(2) end,
                               {glimpse.randn(1, 2, 4, 5):requires_grad()})
  lu.assertTrue(ok)
end

function T.test_state_dict_names_and_shapes_equal_torchvision_for_every_arch()
  local fh = assert(io.open(FIX .. "models_keys.json"))
  local ref = cjson.decode(fh:read("a"))
  fh:close()
  local archs = {}
  for arch in pairs(ref) do archs[#archs + 1] = arch end
  table.sort(archs)
  lu.assertTrue(#archs >= 11)
  for _, arch in ipairs(archs) do
    local m = models[arch]{init = false}
    local sd, want_names, got_names = m:state_dict(), {}, m:state_dict_keys()
    for i, e in ipairs(ref[arch]) do
      want_names[i] = e[1]
      local t = sd[e[1]]
      lu.assertNotNil(t, arch .. ": no " .. e[1])
      -- torchvision's num_batches_tracked is a 0-dim tensor: its shape is {}
      lu.assertEquals(t.shape, e[2], arch .. " " .. e[1])
    end
    lu.assertEquals(got_names, want_names, arch .. ": names or order differ")
  end
end

-- ---------------------------------------------------------------------------------------
-- shapes

function T.test_grid_size_gives_torchvision_grids_at_224()
  lu.assertEquals({models.resnet18{init = false}:grid_size(224, 224)}, {7, 7})
  local vgg = models.vgg16{init = false, classifier = false}
  lu.assertEquals({vgg:grid_size(224, 224)}, {14, 14})
  lu.assertEquals(vgg:num_cells(224, 224), 196)
  lu.assertEquals(vgg.grid_dim, 512)
  lu.assertEquals(models.resnet50{init = false}.grid_dim, 2048)
  lu.assertEquals(models.SmallCNN{in_channels = 1}:num_cells(64, 64), 64)
end

function T.test_grid_shape_follows_grid_size_for_several_inputs()
  local r = models.resnet18():evaluate()
  local v = models.vgg11{classifier = false}:evaluate()
  for _, hw in ipairs({{16, 16}, {33, 47}, {64, 40}, {1, 1}}) do
    local H, W = hw[1], hw[2]
    local x = glimpse.randn(2, 3, H, W)
    local g, h, w = r:grid(x)
    local eh, ew = r:grid_size(H, W)
    lu.assertEquals({h, w}, {eh, ew})
    lu.assertEquals(g.shape, {2, eh * ew, 512})
    if H >= 16 and W >= 16 then
      local gv, vh, vw = v:grid(x)
      lu.assertEquals(gv.shape, {2, vh * vw, 512})
      lu.assertEquals({vh, vw}, {H // 16, W // 16})
    end
  end
end

function T.test_single_image_gives_an_L_by_D_grid()
  local m = models.SmallCNN{in_channels = 3, channels = {8, 16}}:evaluate()
  local x = glimpse.randn(3, 20, 12)
  local g, h, w = m:grid(x)
  lu.assertEquals({h, w}, {5, 3})
  lu.assertEquals(g.shape, {15, 16})
  local gb = m:grid(x:unsqueeze(1))
  lu.assertEquals(max_abs(gb:squeeze(1) - g), 0)
end

function T.test_grid_cells_are_row_major_over_the_feature_map()
  local m = models.SmallCNN{in_channels = 1, channels = {4}}:evaluate()
  local x = glimpse.randn(2, 1, 6, 8)
  local fmap = glimpse.no_grad(function() return m:feature_map(x) end)     -- (2,4,3,4)
  local g = m:grid(x)                                                      -- (2,12,4)
  -- cell (r, c) is grid row (r-1)*w + c
  for _, rc in ipairs({{1, 1}, {2, 3}, {3, 4}}) do
    local r, c = rc[1], rc[2]
    local want = fmap:select(1, 2):select(2, r):select(2, c)              -- (4)
    lu.assertEquals(g[2][(r - 1) * 4 + c]:totable(), want:totable())
  end
end

function T.test_vgg_forward_gives_logits_and_features_only_forward_the_map()
  local v = models.vgg11{init = false, num_classes = 7}:evaluate()
  local y = glimpse.no_grad(function() return v(glimpse.zeros(2, 3, 32, 40)) end)
  lu.assertEquals(y.shape, {2, 7})
  local f = models.vgg11{classifier = false}:evaluate()
  local fm = glimpse.no_grad(function() return f(glimpse.randn(3, 32, 48)) end)
  lu.assertEquals(fm.shape, {512, 2, 3})
  lu.assertNil(f.classifier)
  lu.assertNil(f.avgpool)
end

-- ---------------------------------------------------------------------------------------
-- SmallCNN: the from-scratch encoder

function T.test_smallcnn_64x64_gives_an_8x8_grid_of_128()
  local m = models.SmallCNN{in_channels = 1}
  local g, h, w = m:grid(glimpse.randn(4, 1, 64, 64))
  lu.assertEquals({h, w}, {8, 8})
  lu.assertEquals(g.shape, {4, 64, 128})
  lu.assertEquals(m:state_dict_keys(), {"features.0.weight", "features.0.bias",
                                        "features.3.weight", "features.3.bias",
                                        "features.6.weight", "features.6.bias"})
end

function T.test_smallcnn_grid_gradient_reaches_the_first_conv()
  glimpse.manual_seed(3)
  local m = models.SmallCNN{in_channels = 1, channels = {4, 8}, batch_norm = true}
  local x = glimpse.randn(2, 1, 12, 12)
  local g = m:grid(x)
  lu.assertTrue(g.requires_grad_flag)
  local target = glimpse.randn(2, 9, 8)
  local function loss_of() return ((m:grid(x) - target) ^ 2):mean() end
  local loss = loss_of()
  loss:backward()
  local w = m.features[1].weight
  lu.assertNotNil(w.grad)
  lu.assertTrue(max_abs(w.grad) > 0)
  -- one weight nudged by +-eps: the central difference agrees with the gradient
  local eps = 1e-2
  local flat = w:detach():reshape(-1)
  local k = 5
  local w0 = flat[k]:item()
  glimpse.no_grad(function() flat[k] = w0 + eps end)
  local up = loss_of():item()
  glimpse.no_grad(function() flat[k] = w0 - eps end)
  local down = loss_of():item()
  glimpse.no_grad(function() flat[k] = w0 end)
  local fd, an = (up - down) / (2 * eps), w.grad:reshape(-1)[k]:item()
  lu.assertAlmostEquals(an, fd, 0.05 * math.abs(fd) + 1e-4)
end

function T.test_smallcnn_head_trains_as_a_classifier()
  glimpse.manual_seed(4)
  local m = models.SmallCNN{in_channels = 1, channels = {4, 8}, num_classes = 3}
  -- three classes of pictures: dark, mid-grey and bright noise
  local y = {1, 2, 3, 1, 2, 3}
  local x = glimpse.randn(6, 1, 16, 16) * 0.3 + glimpse.tensor(y):reshape(6, 1, 1, 1) - 2
  local opt = glimpse.optim.Adam(m:parameters(), {lr = 1e-2})
  local first, last
  for step = 1, 30 do
    opt:zero_grad()
    local loss = glimpse.cross_entropy(m(x), y)
    loss:backward()
    opt:step()
    if step == 1 then first = loss:item() end
    last = loss:item()
  end
  lu.assertEquals(m(x).shape, {6, 3})
  lu.assertTrue(last < 0.5 * first, string.format("loss %.3f -> %.3f", first, last))
end

function T.test_evaluation_grid_records_no_tape_unless_asked()
  local m = models.SmallCNN{in_channels = 1, channels = {4}}
  local x = glimpse.randn(1, 1, 8, 8)
  lu.assertTrue(m:grid(x).requires_grad_flag)               -- training: differentiable
  m:evaluate()
  lu.assertFalse(m:grid(x).requires_grad_flag)              -- frozen encoder: no tape
  lu.assertTrue(m:grid(x, {grad = true}).requires_grad_flag)
  lu.assertTrue(m:grid(x:clone():requires_grad()).requires_grad_flag)
end

function T.test_inference_in_place_path_gives_the_same_bits_as_the_tape_path()
  -- without a tape the ResNet's batch norms and ReLUs work in place and VGG releases each
  -- map after the next layer read it; with the tape on neither happens: same numbers
  glimpse.manual_seed(31)
  local x = glimpse.rand(2, 3, 48, 40)
  for _, name in ipairs({"resnet18", "vgg16"}) do
    local m = filled(name)
    local a = m:grid(x)                                     -- evaluation: no tape
    local b = m:grid(x, {grad = true}):detach()
    lu.assertEquals(a:ne(b):sum():item(), 0, name)
  end
  local before = x:clone()
  filled("resnet18"):grid(x)
  filled("vgg16"):grid(x)
  lu.assertEquals(x:ne(before):sum():item(), 0, "the images must not be changed")
end

-- ---------------------------------------------------------------------------------------
-- loading and errors

function T.test_weights_round_trip_through_a_glimpse_checkpoint()
  local p = tmpname(".safetensors")
  local a = models.SmallCNN{in_channels = 3, channels = {4, 8}, num_classes = 5}:evaluate()
  glimpse.save(p, a:state_dict(), {arch = "SmallCNN"})
  local b = models.SmallCNN{in_channels = 3, channels = {4, 8}, num_classes = 5,
                            weights = p}:evaluate()
  local x = glimpse.randn(2, 3, 16, 16)
  lu.assertEquals(max_abs(a:grid(x) - b:grid(x)), 0)
  -- a features-only encoder takes the same file and ignores the head
  local c = models.SmallCNN{in_channels = 3, channels = {4, 8}, weights = p}:evaluate()
  lu.assertEquals(max_abs(a:grid(x) - c:grid(x)), 0)
  os.remove(p)
end

function T.test_bad_images_raise_errors_naming_function_argument_and_shape()
  local m = models.SmallCNN{in_channels = 1}
  assert_error_contains(function() m:grid(glimpse.randn(2, 3, 64, 64)) end,
                        "SmallCNN:grid", "argument #1 (images)", "[2,3,64,64]", "3 channels",
                        "expects 1")
  assert_error_contains(function() m:grid(glimpse.randn(2, 1, 6, 64)) end,
                        "too small", "[2,1,6,64]", "at least 8x8")
  assert_error_contains(function() m:grid(glimpse.randn(64, 64)) end,
                        "(B,1,H,W) or (1,H,W)", "[64,64]")
  assert_error_contains(function() m:grid("cat.jpg") end, "must be a tensor", "string")
  assert_error_contains(function() m:grid(glimpse.randn(1, 1, 8, 8), 3) end,
                        "options must be a table")
  local v = models.vgg16{init = false}
  assert_error_contains(function() v:grid(glimpse.randn(1, 3, 15, 300)) end,
                        "vgg16:grid", "15x300", "4 2x2 max-pools", "at least 16x16")
  assert_error_contains(function() v(glimpse.randn(1, 3, 16, 40)) end,
                        "vgg16:forward", "too small for the classifier")
  local r = models.resnet18{init = false}
  assert_error_contains(function() r:grid(glimpse.randn(1, 1, 32, 32)) end,
                        "resnet18:grid", "1 channel,", "expects 3")
end

function T.test_bad_constructor_options_and_weights_raise_clear_errors()
  assert_error_contains(function() models.resnet18("x") end, "models.resnet18",
                        "expected an options table")
  assert_error_contains(function() models.vgg16{num_classes = 0, init = false} end,
                        "num_classes must be an integer >= 1")
  assert_error_contains(function() models.SmallCNN{channels = {}} end, "channels")
  assert_error_contains(function() models.SmallCNN{kernel_size = 4} end, "odd")
  assert_error_contains(function() models.encoder("alexnet") end, "unknown architecture",
                        "resnet18", "vgg16", "small")
  assert_error_contains(function() models.resnet18{weights = "/nonexistent/r.safetensors"} end,
                        "models.resnet18", "cannot load weights", "/nonexistent/r.safetensors")
  -- a checkpoint of another architecture is refused by its metadata
  local p = tmpname(".safetensors")
  local s = models.SmallCNN{in_channels = 3, channels = {4}}
  glimpse.save(p, s:state_dict(), {arch = "vgg16"})
  local function small(channels, extra)
    local o = {in_channels = 3, channels = channels, weights = p}
    for k, v in pairs(extra or {}) do o[k] = v end
    return function() return models.SmallCNN(o) end
  end
  assert_error_contains(small({4}), "holds weights for arch 'vgg16', not 'SmallCNN'")
  -- wrong names or shapes: load_state_dict's report, with a hint for the head size
  glimpse.save(p, s:state_dict())
  assert_error_contains(small({5}), "SmallCNN", "size mismatch for features.0.weight")
  local r = models.SmallCNN{in_channels = 3, channels = {4}, num_classes = 10}
  glimpse.save(p, r:state_dict())
  assert_error_contains(function()
    models.SmallCNN{in_channels = 3, channels = {4}, num_classes = 3, weights = p}
  end, "head has 10 classes", "num_classes = 10")
  os.remove(p)
end

function T.test_encoder_by_name_builds_each_architecture()
  local names = models.names()
  for _, want in ipairs({"small", "resnet18", "resnet50", "vgg16", "vgg19_bn"}) do
    local found = false
    for _, n in ipairs(names) do found = found or n == want end
    lu.assertTrue(found, want)
  end
  local e = models.encoder("small", {in_channels = 1, channels = {8}})
  lu.assertEquals(e.grid_dim, 8)
  lu.assertEquals(models.encoder("resnet34", {init = false}).arch, "resnet34")
  -- config() rebuilds the same architecture: same names, same shapes
  local function layout(m)
    local out, sd = {}, m:state_dict()
    for _, k in ipairs(m:state_dict_keys()) do out[#out + 1] = k .. table.concat(sd[k].shape, "x") end
    return out
  end
  for _, m in ipairs({models.SmallCNN{in_channels = 1, channels = {4, 6}, kernel_size = 5,
                                      batch_norm = true, num_classes = 3, dropout = 0.2},
                      models.resnet18{init = false, classifier = false},
                      models.vgg11_bn{init = false, num_classes = 4}}) do
    local cfg = m:config()
    local again = models.encoder(cfg)
    lu.assertEquals(layout(again), layout(m), cfg.name)
    lu.assertEquals(again:config(), cfg)
  end
end

-- ---------------------------------------------------------------------------------------
-- preprocessing

function T.test_preprocess_resizes_crops_and_normalises_like_torchvision()
  local img = glimpse.full({3, 300, 400}, 0.5)
  local out = models.preprocess(img)
  lu.assertEquals(out.shape, {3, 224, 224})
  for c = 1, 3 do
    local want = (0.5 - models.IMAGENET_MEAN[c]) / models.IMAGENET_STD[c]
    lu.assertAlmostEquals(out[c]:mean():item(), want, NORM_TOL)
    lu.assertTrue(max_abs(out[c] - want) < NORM_TOL)
  end
  -- grey and RGBA pictures become RGB; other sizes and the plain resize
  lu.assertEquals(models.preprocess(glimpse.rand(1, 50, 80), 32).shape, {3, 32, 32})
  lu.assertEquals(models.preprocess(glimpse.rand(4, 64, 64), 48, {resize = false}).shape,
                  {3, 48, 48})
  local raw = models.preprocess(glimpse.full({1, 40, 40}, 0.25), 32, {normalize = false})
  lu.assertTrue(max_abs(raw - 0.25) < NORM_TOL)
  -- the centre is kept: a bright square in the middle of a wide image survives the crop
  local rows = {}
  for y = 1, 100 do
    rows[y] = {}
    for x = 1, 300 do rows[y][x] = (y > 40 and y <= 60 and x > 140 and x <= 160) and 1 or 0 end
  end
  local wide = glimpse.tensor({rows, rows, rows})               -- (3,100,300)
  local cropped = models.preprocess(wide, 56, {resize = 64, normalize = false})
  lu.assertTrue(cropped[1][28][28]:item() > 0.9)
  lu.assertTrue(cropped[1][2][2]:item() < 0.1)
  assert_error_contains(function() models.preprocess(glimpse.rand(2, 8, 8)) end,
                        "models.preprocess", "2 channels")
  assert_error_contains(function() models.preprocess(glimpse.rand(3, 8, 8), 32, {resize = 16}) end,
                        "resize must be an integer >= 32")
end

-- ---------------------------------------------------------------------------------------
-- the converter, end to end with torchvision's own random weights

-- Python side: a torchvision resnet18 (10 classes) with seeded random weights and running
-- statistics moved by two training-mode batches, saved as a state dict (.pth), with its
-- eval-mode logits on the fixture's input.x written for the comparison.  (Whole pickled models
-- and checkpoint dicts go through the same path in the converter; each Python start costs
-- seconds, so the suite runs the common case only.)
local CONVERT_PY = [[
import sys
try:
    import torch, torchvision
except ImportError:
    print("NO TORCH")
    sys.exit(0)
sys.path.insert(0, "tests/fixtures")
from make_fixtures import st_read, st_write
pth, ref = sys.argv[1:3]
torch.manual_seed(7)
m = torchvision.models.resnet18(num_classes=10)
with torch.no_grad():
    m.train(); m(torch.randn(4, 3, 32, 32) + 0.3); m(torch.randn(4, 3, 32, 32))
m.eval()
torch.save(m.state_dict(), pth)
x = st_read("tests/fixtures/models_resnet18.safetensors")[0]["input.x"]
with torch.no_grad():
    st_write(ref, {"logits": m(x)})
]]

function T.test_converter_round_trip_loads_strictly_and_matches_torchvision()
  local d = tmpname("")
  assert(os.execute("mkdir -p " .. d))
  local pth, ref, out = d .. "/r18.pth", d .. "/ref.safetensors", d .. "/r18.safetensors"
  local script = d .. "/make.py"
  local fh = assert(io.open(script, "w"))
  fh:write(CONVERT_PY)
  fh:close()
  local function run(cmd)
    local p = io.popen(cmd .. " 2>&1")
    local text = p:read("a")
    return p:close(), text
  end
  local ok, text = run(string.format("%s %s %s %s", SYS_PYTHON, script, pth, ref))
  if not ok or text:find("NO TORCH") then
    os.execute("rm -rf " .. d)
    lu.skip("python3-torch / python3-torchvision not usable from " .. SYS_PYTHON .. ": " .. text)
  end
  ok, text = run(string.format("%s scripts/convert_torchvision.py %s %s", SYS_PYTHON, pth, out))
  lu.assertTrue(ok, text)
  lu.assertStrContains(text, "arch resnet18")

  local _, meta = glimpse.load(out)
  lu.assertEquals(meta.arch, "resnet18")
  local x = glimpse.load(FIX .. "models_resnet18.safetensors")["input.x"]
  local want = glimpse.load(ref).logits
  local m = models.resnet18{weights = out, num_classes = 10}:evaluate()
  local y = glimpse.no_grad(function() return m(x) end)
  assert_close(y, want, GRID_RTOL, "logits of the converted resnet18")
  -- a missing input fails with a message and a non-zero status, writing nothing
  ok, text = run(string.format("%s scripts/convert_torchvision.py %s %s", SYS_PYTHON,
                               d .. "/missing.pth", d .. "/bad.safetensors"))
  lu.assertNotEquals(ok, true)
  lu.assertStrContains(text, "no such file")
  lu.assertNil(io.open(d .. "/bad.safetensors"))
  os.execute("rm -rf " .. d)
end

return T
