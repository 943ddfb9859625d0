--- glimpse.models.encoders.preprocess -- images made ready for a torchvision-trained
-- network (Resize + CenterCrop + Normalize with the ImageNet statistics), and a portable
-- deterministic fill for comparing glimpse and torchvision on identical weights.
local glimpse = require "glimpse"
local check = require "glimpse.check"
local options = require "glimpse.options"
local nn = require "glimpse.nn"
local base = require "glimpse.models.encoders.base"

local M = {}

local check_int = base.check_int

--- ImageNet channel statistics (RGB, images in [0,1]) that torchvision's weights expect
M.IMAGENET_MEAN = {0.485, 0.456, 0.406}
M.IMAGENET_STD = {0.229, 0.224, 0.225}

local PREPROCESS_OPTIONS = options.declare("models.preprocess", {
  {"resize", "int|boolean", nil, help = "the shorter side before the centre crop (default " ..
                                        "round(size*256/224); false: straight to size x size)"},
  {"filter", "string", "bicubic", help = "glimpse.image.resize's filter"},
  {"mean", "table", nil, help = "per-channel mean (default: ImageNet's)"},
  {"std", "table", nil, help = "per-channel std (default: ImageNet's)"},
  {"normalize", "boolean", true, help = "subtract mean and divide by std"},
})
M.preprocess_options = PREPROCESS_OPTIONS

--- models.preprocess(img, size=224, {resize=round(size*256/224), filter="bicubic", mean=,
--- std=, normalize=true}) -> (3, size, size) for a torchvision-trained network.
--- img (C,H,W) or (H,W) in [0,1] as glimpse.image.load gives; grey is repeated to RGB and an
--- alpha channel dropped.  The shorter side is resized to opts.resize and the centre
--- size x size cut out (torchvision's Resize + CenterCrop), then each channel normalised with
--- the ImageNet mean and std.  resize=false resizes straight to size x size instead.
--- The filter is bicubic rather than torchvision's bilinear: image.resize's "bilinear"
--- (stb's triangle filter) trips an assertion inside stb_image_resize when downsampling.
function M.preprocess(img, size, opts)
  local fname = "models.preprocess"
  local o = PREPROCESS_OPTIONS:check(opts, 2)
  size = check_int(size or 224, "size", fname, 1)
  if not glimpse.is_tensor(img) then
    check.fail(2, "%s: argument #1 (img) must be a (C,H,W) or (H,W) tensor, got %s", fname,
               type(img))
  end
  if img:dim() == 2 then img = img:unsqueeze(1) end
  if img:dim() ~= 3 then
    check.fail(2, "%s: argument #1 (img) must be (C,H,W) or (H,W), got %s", fname,
               check.shape(img))
  end
  local C = img:size(1)
  if C == 1 then
    img = glimpse.cat({img, img, img}, 1)
  elseif C == 4 then
    img = img:narrow(1, 1, 3)
  elseif C ~= 3 then
    check.fail(2, "%s: argument #1 (img) %s has %d channels (1, 3 or 4 expected)", fname,
               check.shape(img), C)
  end
  local H, W = img:size(2), img:size(3)
  local out
  if o.resize == false then
    out = glimpse.image.resize(img, size, size, {filter = o.filter})
  else
    if o.resize == true then
      check.fail(2, "%s: resize must be an integer >= %d or false, got true", fname, size)
    end
    local s = o.resize or math.floor(size * 256 / 224 + 0.5)
    check_int(s, "resize", fname, size)
    local h, w
    if H <= W then h, w = s, s * W // H else h, w = s * H // W, s end   -- torchvision's Resize
    out = glimpse.image.center_crop(glimpse.image.resize(img, h, w, {filter = o.filter}), size)
  end
  if o.normalize then
    out = glimpse.image.normalize(out, o.mean or M.IMAGENET_MEAN, o.std or M.IMAGENET_STD)
  end
  return out
end

-- ---------------------------------------------------------------------------------------
-- a portable deterministic fill, for comparing with torchvision on identical weights
--
-- For each state_dict entry `name` of n elements (row-major), with 32-bit unsigned integers:
--   h    = FNV-1a of name's bytes (h = 2166136261; h = ((h xor byte) * 16777619) mod 2^32)
--   x_0  = (h + seed * 2654435761) mod 2^32
--   x_i  = (1664525 * x_{i-1} + 1013904223) mod 2^32,  i = 1..n
--   u_i  = ((x_i >> 8) + 0.5) / 2^24                     (in (0,1), 24 bits)
--   v_i  = lo + (hi - lo) * u_i  in double precision, then rounded to float32
-- with [lo, hi) by entry: tensors of 2+ dims (conv, linear weights) +-sqrt(6 / fan_in)
-- (fan_in = numel / shape[1]: a ReLU network keeps its activations O(1)); running_var
-- [0.5, 1.5); running_mean [-0.1, 0.1); other 1-D weights (batch norm scale) [0.5, 1);
-- biases [-0.1, 0.1); num_batches_tracked 0.  tests/fixtures/fixtures_models.py is the
-- Python twin.

local FILL_CHUNK = 65536

local function fnv1a(s)
  local h = 2166136261
  for i = 1, #s do h = ((h ~ s:byte(i)) * 16777619) & 0xffffffff end
  return h
end

local function fill_range(name, t)
  if name:find("num_batches_tracked$") then return nil end
  if name:find("running_var$") then return 0.5, 1.5 end
  if name:find("running_mean$") then return -0.1, 0.1 end
  if t:dim() >= 2 then
    local b = math.sqrt(6 / (t:numel() // t:size(1)))
    return -b, b
  end
  if name:find("weight$") then return 0.5, 1.0 end
  return -0.1, 0.1
end

--- models.fill_deterministic_(m, seed=0) -> m, every state_dict entry filled from the
--- portable generator described above (the same numbers in Lua and in the Python fixture
--- script), for cross-checks against other frameworks.  Not a training initialisation.
function M.fill_deterministic_(m, seed)
  if not nn.is_module(m) then
    check.fail(2, "models.fill_deterministic_: argument #1 must be a Module, got %s", type(m))
  end
  seed = seed or 0
  if math.type(seed) ~= "integer" or seed < 0 then
    check.fail(2, "models.fill_deterministic_: seed must be an integer >= 0, got %s",
               tostring(seed))
  end
  local sd = m:state_dict()
  glimpse.no_grad(function()
    for _, name in ipairs(m:state_dict_keys()) do
      local t = sd[name]
      local lo, hi = fill_range(name, t)
      if lo == nil then
        t:fill_(0)
      else
        local span = hi - lo
        local x = (fnv1a(name) + seed * 2654435761) & 0xffffffff
        local n = t:numel()
        local flat = t:reshape(n)
        local s = 1
        while s <= n do
          local len = math.min(FILL_CHUNK, n - s + 1)
          local chunk = {}
          for i = 1, len do
            x = (1664525 * x + 1013904223) & 0xffffffff
            chunk[i] = lo + span * (((x >> 8) + 0.5) / 16777216)
          end
          flat:narrow(1, s, len):copy_(glimpse.tensor(chunk))
          s = s + len
        end
      end
    end
  end)
  return m
end

return M
