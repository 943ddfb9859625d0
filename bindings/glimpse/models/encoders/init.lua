--- glimpse.models.encoders -- CNN encoders that turn images into attention annotation grids
-- (published as glimpse.models, with the models built on them).
--
--   local models = glimpse.models
--   local enc = models.SmallCNN{in_channels = 1}            -- trained from scratch (64x64 -> 8x8)
--   local a, h, w = enc:grid(images)                         -- (B,3|1,H,W) -> (B, L=h*w, D)
--   local vgg = models.vgg16{weights = "vgg16.safetensors"}:evaluate()
--   local feats = vgg:grid(models.preprocess(glimpse.image.load("cat.jpg")))   -- (196, 512)
--
-- An attention model looks at L annotation vectors a_1..a_L of width D, one per cell of the
-- last convolutional block's h x w output (Show, Attend and Tell: VGG's conv5 block after its
-- ReLU, 14x14x512 at 224x224).  Every encoder is an nn.Module with grid(images), feature_map,
-- grid_size(H, W), grid_dim, in_channels, arch (base.lua).  The torchvision architectures
-- (vgg.lua, resnet.lua) use torchvision's module names, so a state dict converted by
-- scripts/convert_torchvision.py loads with strict checking; small.lua is SmallCNN;
-- preprocess.lua holds models.preprocess and models.fill_deterministic_.
local nn = require "glimpse.nn"
local base = require "glimpse.models.encoders.base"
local vgg = require "glimpse.models.encoders.vgg"
local resnet = require "glimpse.models.encoders.resnet"
local small = require "glimpse.models.encoders.small"
local prep = require "glimpse.models.encoders.preprocess"

local M = {}

M.IMAGENET_MEAN, M.IMAGENET_STD = prep.IMAGENET_MEAN, prep.IMAGENET_STD
M.preprocess, M.fill_deterministic_ = prep.preprocess, prep.fill_deterministic_
-- AdaptiveAvgPool2d lives in glimpse.nn (torchvision's heads use it)
M.AdaptiveAvgPool2d = nn.AdaptiveAvgPool2d
M.Encoder, M.VGG, M.ResNet, M.SmallCNN = base.Encoder, vgg.VGG, resnet.ResNet, small.SmallCNN
M.BasicBlock, M.Bottleneck = resnet.BasicBlock, resnet.Bottleneck

-- ---------------------------------------------------------------------------------------
-- by name

local BUILDERS = {small = function(opts) return small.SmallCNN(opts) end}

--- models.encoder_options[name]: the options of each architecture models.encoder knows
M.encoder_options = {small = small.SmallCNN.options}

for _, family in ipairs({vgg, resnet}) do
  for name, b in pairs(family.builders) do
    M[name], BUILDERS[name] = b, b
    M.encoder_options[name] = family.options[name]
  end
end

--- models.names() -> the sorted architecture names models.encoder accepts
function M.names()
  local out = {}
  for k in pairs(BUILDERS) do out[#out + 1] = k end
  table.sort(out)
  return out
end

--- models.encoder(name, opts) -> an encoder by name ("small", "vgg16", "resnet18", ...):
--- the constructor's opts pass through, so scripts can take the architecture as a flag.
--- models.encoder{name=..., <opts>} (what enc:config() returns) works too.
function M.encoder(name, opts)
  if type(name) == "table" and opts == nil then
    opts = {}
    for k, v in pairs(name) do if k ~= "name" then opts[k] = v end end
    name = name.name or "small"
  end
  local b = BUILDERS[name]
  if not b then
    error(string.format("models.encoder: unknown architecture %s (have: %s)", tostring(name),
                        table.concat(M.names(), ", ")), 2)
  end
  return b(opts)
end

return M
