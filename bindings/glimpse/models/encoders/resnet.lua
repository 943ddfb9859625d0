--- glimpse.models.encoders.resnet -- ResNet (He et al. 2016) in torchvision's layout (v1.5:
-- the stride sits on the 3x3 conv):
--   conv1 (7x7/2, pad 3) bn1 relu maxpool (3x3/2, pad 1) layer1..layer4 avgpool fc
-- BasicBlock: conv1 (3x3/s) bn1 relu conv2 (3x3) bn2 [downsample = Sequential{1x1/s conv, bn}]
-- Bottleneck: conv1 (1x1) bn1 conv2 (3x3/s) bn2 conv3 (1x1, 4x wider) bn3 relu [downsample]
-- grid: layer4's output, 7x7x512 (x4 for Bottleneck) at 224x224.
-- Builders models.resnet18/34/50.
local glimpse = require "glimpse"
local check = require "glimpse.check"
local options = require "glimpse.options"
local nn = require "glimpse.nn"
local init = require "glimpse.nn.weight_init"
local base = require "glimpse.models.encoders.base"

local M = {}

local check_int = base.check_int

local ENTRIES = {}
for i, e in ipairs(base.TORCHVISION_ENTRIES) do ENTRIES[i] = e end
ENTRIES[#ENTRIES + 1] = {"zero_init_residual", "boolean", false,
                         help = "start each block as the identity (its last BN scale 0)"}

local BasicBlock = nn.Module:extend("BasicBlock")
M.BasicBlock = BasicBlock
BasicBlock.expansion = 1

function BasicBlock:init(cin, planes, stride)
  check_int(cin, "cin", "models.BasicBlock", 1, 3)
  check_int(planes, "planes", "models.BasicBlock", 1, 3)
  check_int(stride, "stride", "models.BasicBlock", 1, 3)
  self.conv1 = nn.Conv2d(cin, planes, 3, {stride = stride, padding = 1, bias = false})
  self.bn1 = nn.BatchNorm2d(planes)
  self.relu = nn.ReLU()
  self.conv2 = nn.Conv2d(planes, planes, 3, {padding = 1, bias = false})
  self.bn2 = nn.BatchNorm2d(planes)
  if stride ~= 1 or cin ~= planes then
    self.downsample = nn.Sequential{
      nn.Conv2d(cin, planes, 1, {stride = stride, bias = false}), nn.BatchNorm2d(planes)}
  end
end

-- relu of a fresh map: in place when no tape is recorded (inference), saving a map's memory
local function relu(x)
  if glimpse.is_grad_enabled() then return x:relu() end
  return x:relu_()
end

-- bn(conv(x)), then the ReLU when relu_after.  Inference (no tape, bn in evaluation mode):
-- the norm and the ReLU work in place on the convolution's fresh output, in one pass
local function conv_bn(conv, bn, x, relu_after)
  if not glimpse.is_grad_enabled() and not bn.training and bn.running_mean then
    return glimpse.batch_norm_eval_(conv(x), bn.weight, bn.bias, bn.running_mean,
                                    bn.running_var, bn.eps, relu_after)
  end
  local y = bn(conv(x))
  if relu_after then return relu(y) end
  return y
end

-- relu(out + identity); without a tape out is a fresh map and takes both in place
local function add_relu(out, identity)
  if glimpse.is_grad_enabled() then return (out + identity):relu() end
  return out:add_(identity):relu_()
end

function BasicBlock:forward(x)
  local out = conv_bn(self.conv1, self.bn1, x, true)
  out = conv_bn(self.conv2, self.bn2, out, false)
  local identity = self.downsample and self.downsample(x) or x
  return add_relu(out, identity)
end

local Bottleneck = nn.Module:extend("Bottleneck")
M.Bottleneck = Bottleneck
Bottleneck.expansion = 4

function Bottleneck:init(cin, planes, stride)
  check_int(cin, "cin", "models.Bottleneck", 1, 3)
  check_int(planes, "planes", "models.Bottleneck", 1, 3)
  check_int(stride, "stride", "models.Bottleneck", 1, 3)
  local out = planes * 4
  self.conv1 = nn.Conv2d(cin, planes, 1, {bias = false})
  self.bn1 = nn.BatchNorm2d(planes)
  self.conv2 = nn.Conv2d(planes, planes, 3, {stride = stride, padding = 1, bias = false})
  self.bn2 = nn.BatchNorm2d(planes)
  self.conv3 = nn.Conv2d(planes, out, 1, {bias = false})
  self.bn3 = nn.BatchNorm2d(out)
  self.relu = nn.ReLU()
  if stride ~= 1 or cin ~= out then
    self.downsample = nn.Sequential{
      nn.Conv2d(cin, out, 1, {stride = stride, bias = false}), nn.BatchNorm2d(out)}
  end
end

function Bottleneck:forward(x)
  local out = conv_bn(self.conv1, self.bn1, x, true)
  out = conv_bn(self.conv2, self.bn2, out, true)
  out = conv_bn(self.conv3, self.bn3, out, false)
  local identity = self.downsample and self.downsample(x) or x
  return add_relu(out, identity)
end

local ResNet = base.Encoder:extend("ResNet")
M.ResNet = ResNet
ResNet.options = options.declare("models.ResNet", ENTRIES)

function ResNet:init(arch, block, counts, opts)
  if type(arch) ~= "string" or (block ~= BasicBlock and block ~= Bottleneck)
     or type(counts) ~= "table" or type(opts) ~= "table" then
    check.fail(3, "models.ResNet(arch, block, counts, opts): a name, models.BasicBlock or " ..
               "models.Bottleneck, a list of block counts and an options table expected " ..
               "(models.resnet18{...} and the like build the named networks)")
  end
  local o = ResNet.options:check(opts, 3)
  for i, n in ipairs(counts) do check_int(n, "counts[" .. i .. "]", "models.ResNet", 1, 3) end
  self.arch, self.in_channels = arch, 3
  self.grid_dim = 512 * block.expansion
  self.head_prefix, self.head_weight = "fc%.", "fc.weight"
  self.conv1 = nn.Conv2d(3, 64, 7, {stride = 2, padding = 3, bias = false})
  self.bn1 = nn.BatchNorm2d(64)
  self.relu = nn.ReLU()
  self.maxpool = nn.MaxPool2d(3, 2, 1)
  local cin = 64
  for i, n in ipairs(counts) do
    local planes = 64 * (1 << (i - 1))
    local blocks = {}
    for j = 1, n do
      blocks[j] = block(cin, planes, (j == 1 and i > 1) and 2 or 1)
      cin = planes * block.expansion
    end
    self["layer" .. i] = nn.Sequential(blocks)
  end
  if o.classifier then
    local n = base.num_classes(o, arch, 4)
    self.num_classes = n
    self.avgpool = nn.AdaptiveAvgPool2d(1)
    self.fc = base.linear(cin, n, true)
  end
end

function ResNet:has_head()
  return self.fc ~= nil
end

-- one 3x3 window with stride 2 and padding 1 (also the 7x7 pad 3 stem: the same formula)
local function halve(n)
  return (n - 1) // 2 + 1
end

--- resnet:grid_size(H, W) -> h, w of layer4: five stride-2 steps, each n -> floor((n-1)/2)+1
function ResNet:grid_size(H, W)
  if H < 1 or W < 1 then return nil, "an empty image" end
  for _ = 1, 5 do H, W = halve(H), halve(W) end
  return H, W
end

function ResNet:feature_map(x)
  x = self.maxpool(conv_bn(self.conv1, self.bn1, x, true))
  return self.layer4(self.layer3(self.layer2(self.layer1(x))))
end

function ResNet:head(fmap)
  return self.fc(self.avgpool(fmap):flatten(2))
end

local ARCHS = {
  resnet18 = {BasicBlock, {2, 2, 2, 2}},
  resnet34 = {BasicBlock, {3, 4, 6, 3}},
  resnet50 = {Bottleneck, {3, 4, 6, 3}},
}

-- name -> builder, and name -> its options (owner "models.<name>")
M.builders, M.options = {}, {}

for arch, a in pairs(ARCHS) do
  local spec = options.declare("models." .. arch, ENTRIES)
  M.options[arch] = spec
  --- models.resnet18/34/50(opts) -> ResNet; opts: weights (safetensors path or state_dict),
  --- classifier=true (false: no avgpool/fc, features only), num_classes=1000,
  --- zero_init_residual=false, init=true (false: skip the random initialisation)
  M.builders[arch] = function(opts)
    local fname = "models." .. arch
    local o = spec:check(opts, 2)
    local m = base.finish(ResNet(arch, a[1], a[2], o), o, fname, nil, 2)
    if o.zero_init_residual and o.weights == nil and o.init then
      -- each block starts as the identity (Goyal et al. 2017): its last BN scale is 0
      for _, b in ipairs(m:modules()) do
        if b:is_a(Bottleneck) then init.zeros_(b.bn3.weight)
        elseif b:is_a(BasicBlock) then init.zeros_(b.bn2.weight) end
      end
    end
    return m
  end
end

return M
