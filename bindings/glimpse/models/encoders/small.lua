--- glimpse.models.encoders.small -- SmallCNN: the from-scratch encoder for the sandbox's small
-- pictures.  Blocks of Conv2d(k x k, pad k//2) [BatchNorm2d] ReLU MaxPool2d(2); each block
-- halves H and W, so a 64x64 image with three blocks gives an 8x8 grid (L = 64) of
-- channels[#channels] features.  With num_classes, a head (global average pool, dropout,
-- Linear) makes it a classifier for pretraining; grid() ignores the head.
local check = require "glimpse.check"
local options = require "glimpse.options"
local nn = require "glimpse.nn"
local base = require "glimpse.models.encoders.base"

local M = {}

local check_int = base.check_int

local SmallCNN = base.Encoder:extend("SmallCNN")
M.SmallCNN = SmallCNN

SmallCNN.options = options.declare("models.SmallCNN", {
  {"in_channels", "int", 3, help = "image channels (>= 1)"},
  {"channels", "table", {32, 64, 128}, help = "output channels of each block"},
  {"kernel_size", "int", 3, help = "odd convolution width"},
  {"batch_norm", "boolean", false, help = "BatchNorm2d after each convolution"},
  {"num_classes", "int", nil, help = "add a classification head with this many classes"},
  {"dropout", "number", 0, range = {0, 1}, help = "dropout before the head"},
  {"weights", "string|table", nil, help = "a safetensors path or a state_dict table"},
  {"init", "boolean", true, help = "torchvision's random init (false: leave it)"},
})

--- models.SmallCNN{in_channels=3, channels={32,64,128}, kernel_size=3, batch_norm=false,
--- num_classes=nil, dropout=0, weights=nil} -> encoder; grid(images (B,C,H,W)) ->
--- (B, (H/2^n)*(W/2^n), channels[n]) for n = #channels blocks
function SmallCNN:init(opts)
  local fname = "SmallCNN"
  local o = SmallCNN.options:check(opts, 3)
  self.arch = "SmallCNN"
  self.in_channels = check_int(o.in_channels, "in_channels", fname, 1, 3)
  local channels = o.channels
  if #channels == 0 then
    check.fail(3, "SmallCNN: channels must be a non-empty list of integers, got %s",
               tostring(channels))
  end
  local k = check_int(o.kernel_size, "kernel_size", fname, 1, 3)
  if k % 2 == 0 then
    check.fail(3, "SmallCNN: kernel_size must be odd (size-preserving padding), got %d", k)
  end
  local layers, c = {}, self.in_channels
  for i, v in ipairs(channels) do
    check_int(v, "channels[" .. i .. "]", fname, 1, 3)
    layers[#layers + 1] = nn.Conv2d(c, v, k, {padding = k // 2})
    if o.batch_norm then layers[#layers + 1] = nn.BatchNorm2d(v) end
    layers[#layers + 1] = nn.ReLU()
    layers[#layers + 1] = nn.MaxPool2d(2)
    c = v
  end
  self.channels = {table.unpack(channels)}
  self.kernel_size, self.batch_norm = k, o.batch_norm
  self.grid_dim = c
  self.head_prefix, self.head_weight = "classifier%.", "classifier.weight"
  self.features = nn.Sequential(layers)
  if o.num_classes ~= nil then
    local n = check_int(o.num_classes, "num_classes", fname, 1, 3)
    self.num_classes = n
    self.dropout = nn.Dropout(o.dropout)
    self.classifier = nn.Linear(c, n)
  end
  if o.weights == nil and o.init then base.torchvision_init(self) end
  if o.weights ~= nil then base.load_weights(self, o.weights, fname, 3) end
end

function SmallCNN:has_head()
  return self.classifier ~= nil
end

--- cnn:grid_size(H, W) -> H and W halved (rounding down) once per block
function SmallCNN:grid_size(H, W)
  local n = #self.channels
  local need = 1 << n
  if H < need or W < need then
    return nil, string.format("%dx%d leaves no cell after %d 2x2 max-pools (at least %dx%d)",
                              H, W, n, need, need)
  end
  return H >> n, W >> n
end

function SmallCNN:feature_map(x)
  return self.features(x)
end

function SmallCNN:head(fmap)
  return self.classifier(self.dropout(fmap:mean(4):mean(3)))
end

return M
