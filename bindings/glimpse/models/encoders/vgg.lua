--- glimpse.models.encoders.vgg -- VGG (Simonyan & Zisserman 2015) in torchvision's layout:
--   features    Sequential: per cfg entry Conv2d(3x3, pad 1) [BatchNorm2d] ReLU, or MaxPool2d(2)
--   avgpool     AdaptiveAvgPool2d(7)
--   classifier  Linear(512*7*7, 4096) ReLU Dropout Linear(4096, 4096) ReLU Dropout Linear(4096, n)
-- grid: the features up to the last max-pool, i.e. the last conv block after its ReLU
-- (conv5_3 for VGG-16, conv5_4 for VGG-19): 14x14x512 at 224x224.
-- Builders models.vgg11/13/16/19 and their _bn variants.
local glimpse = require "glimpse"
local check = require "glimpse.check"
local options = require "glimpse.options"
local nn = require "glimpse.nn"
local base = require "glimpse.models.encoders.base"

local M = {}

local CFGS = {
  vgg11 = {64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"},
  vgg13 = {64, 64, "M", 128, 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"},
  vgg16 = {64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M",
           512, 512, 512, "M"},
  vgg19 = {64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M",
           512, 512, 512, 512, "M"},
}

local ENTRIES = {}
for i, e in ipairs(base.TORCHVISION_ENTRIES) do ENTRIES[i] = e end
ENTRIES[#ENTRIES + 1] = {"dropout", "number", 0.5, range = {0, 1},
                         help = "dropout in the classifier"}

local VGG = base.Encoder:extend("VGG")
M.VGG = VGG
VGG.options = options.declare("models.VGG", ENTRIES)

function VGG:init(arch, cfg, batch_norm, opts)
  if type(arch) ~= "string" or type(cfg) ~= "table" or type(opts) ~= "table" then
    check.fail(3, "models.VGG(arch, cfg, batch_norm, opts): a name, a layer list and an " ..
               "options table expected (models.vgg16{...} and the like build the named networks)")
  end
  local o = VGG.options:check(opts, 3)
  self.arch, self.in_channels, self.grid_dim = arch, 3, 512
  self.head_prefix, self.head_weight = "classifier%.", "classifier.6.weight"
  local fill = o.weights == nil and o.init
  local layers, c = {}, 3
  local pools = 0
  for _, v in ipairs(cfg) do
    if v == "M" then
      layers[#layers + 1] = nn.MaxPool2d(2, 2)
      pools = pools + 1
    else
      layers[#layers + 1] = nn.Conv2d(c, v, 3, {padding = 1})
      if batch_norm then layers[#layers + 1] = nn.BatchNorm2d(v) end
      layers[#layers + 1] = nn.ReLU{inplace = true}   -- in place only without a tape
      c = v
    end
  end
  self.features = nn.Sequential(layers)
  self._grid_layers = #layers - 1          -- everything before the last max-pool
  self._grid_pools = pools - 1
  if o.classifier then
    local n = base.num_classes(o, arch, 4)
    local p = o.dropout
    self.num_classes = n
    self.avgpool = nn.AdaptiveAvgPool2d(7)
    self.classifier = nn.Sequential{
      base.linear(512 * 7 * 7, 4096, fill), nn.ReLU(), nn.Dropout(p),
      base.linear(4096, 4096, fill), nn.ReLU(), nn.Dropout(p),
      base.linear(4096, n, fill),
    }
  end
end

function VGG:has_head()
  return self.classifier ~= nil
end

--- vgg:grid_size(H, W) -> h, w of the last conv block (H and W halve, rounding down, at
--- each max-pool before it); nil and a reason when the image is too small
function VGG:grid_size(H, W)
  local n = self._grid_pools
  local need = 1 << n
  if H < need or W < need then
    return nil, string.format("%dx%d leaves no cell after %d 2x2 max-pools (at least %dx%d)",
                              H, W, n, need, need)
  end
  return H >> n, W >> n
end

-- the classifier path has one more max-pool after the grid
VGG._head_min_cells = 2

function VGG:feature_map(x)
  local f = self.features
  if glimpse.is_grad_enabled() then
    for i = 1, self._grid_layers do x = f[i](x) end
    return x
  end
  -- no tape: each map is released as soon as the next layer has read it (and the ReLUs
  -- work in place), so at most two maps of the widest layer are alive at once, not as many
  -- as the garbage collector has yet to reach
  local input = x
  for i = 1, self._grid_layers do
    local y = f[i](x)
    if not rawequal(x, input) and not rawequal(x, y) then x:close() end
    x = y
  end
  return x
end

function VGG:head(fmap)
  local x = self.features[self._grid_layers + 1](fmap)     -- the last max-pool
  x = self.avgpool(x)
  return self.classifier(x:flatten(2))
end

-- name -> builder, and name -> its options (owner "models.<name>")
M.builders, M.options = {}, {}

local function vgg_builder(arch, cfg, batch_norm)
  local spec = options.declare("models." .. arch, ENTRIES)
  M.options[arch] = spec
  --- models.vggNN(opts) / models.vggNN_bn(opts) -> VGG; opts: weights (safetensors path or
  --- state_dict), classifier=true (false: features only), num_classes=1000, dropout=0.5,
  --- init=true (false: leave weights uninitialised, for loading them yourself)
  return function(opts)
    local fname = "models." .. arch
    local o = spec:check(opts, 2)
    local m = base.finish(VGG(arch, cfg, batch_norm, o), o, fname, 0.01, 2)
    return m
  end
end

for name, cfg in pairs(CFGS) do
  M.builders[name] = vgg_builder(name, cfg, false)
  M.builders[name .. "_bn"] = vgg_builder(name .. "_bn", cfg, true)
end

return M
