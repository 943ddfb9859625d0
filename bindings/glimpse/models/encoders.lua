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
-- ReLU, 14x14x512 at 224x224).  Every encoder here is an nn.Module with
--   enc:grid(images)       -> (B, L, D), h, w   the annotation vectors, row-major over cells
--   enc:feature_map(x)     -> (B, D, h, w)      the same before flattening
--   enc:grid_size(H, W)    -> h, w              arithmetic only (no forward pass)
--   enc.grid_dim, enc.in_channels, enc.arch
-- and forward(x) gives class logits when the model has a classification head, the feature
-- map otherwise.
--
-- The torchvision architectures (vgg11/13/16/19 with or without batch norm, resnet18/34/50)
-- are built with torchvision's module names, so their state_dict keys are torchvision's and a
-- state dict converted by scripts/convert_torchvision.py loads with strict checking.  Their
-- random initialisation follows torchvision's (kaiming normal, fan_out, for convolutions).
--
-- models.fill_deterministic_(m, seed) fills a model from a portable integer generator that
-- tests/fixtures/fixtures_models.py reproduces in Python, so glimpse and torchvision can be
-- compared on the same weights without shipping hundreds of megabytes of them.
local glimpse = require "glimpse"
local nn = require "glimpse.nn"
local init = require "glimpse.nn.weight_init"

local M = {}

local is_tensor = glimpse.is_tensor

--- ImageNet channel statistics (RGB, images in [0,1]) that torchvision's weights expect
M.IMAGENET_MEAN = {0.485, 0.456, 0.406}
M.IMAGENET_STD = {0.229, 0.224, 0.225}

local function shape_str(t)
  return "[" .. table.concat(t.shape, ",") .. "]"
end

local function opts_of(opts, fname, level)
  if opts ~= nil and type(opts) ~= "table" then
    error(fname .. ": options must be a table, got " .. type(opts), (level or 2) + 1)
  end
  return opts or {}
end

local function check_int(v, what, fname, lo, level)
  if math.type(v) ~= "integer" or v < lo then
    error(string.format("%s: %s must be an integer >= %d, got %s", fname, what, lo,
                        tostring(v)), (level or 2) + 1)
  end
  return v
end

-- AdaptiveAvgPool2d lives in glimpse.nn (torchvision's heads use it)
local AdaptiveAvgPool2d = nn.AdaptiveAvgPool2d
M.AdaptiveAvgPool2d = AdaptiveAvgPool2d

-- ---------------------------------------------------------------------------------------
-- the encoder base class: argument checks and grid() shared by every architecture.
-- A subclass sets arch, in_channels, grid_dim and defines feature_map(x4) (the last block's
-- output for a checked 4-D input) and grid_size(H, W) (nil, reason when too small).

local Encoder = nn.Module:extend("Encoder")
M.Encoder = Encoder

-- Check images against the encoder: a (B,C,H,W) or (C,H,W) tensor with the right channel
-- count, big enough to leave at least one cell.  Returns the 4-D tensor, whether the input
-- was a single image, and the grid size.
function Encoder:_check_images(images, method, level)
  local fname = self.arch .. ":" .. method
  level = (level or 2) + 1
  if not is_tensor(images) then
    error(string.format("%s: argument #1 (images) must be a tensor (B,%d,H,W) or (%d,H,W), " ..
                        "got %s", fname, self.in_channels, self.in_channels, type(images)), level)
  end
  local nd = images:dim()
  if nd ~= 3 and nd ~= 4 then
    error(string.format("%s: argument #1 (images) must be (B,%d,H,W) or (%d,H,W), got %s " ..
                        "(%d dims)", fname, self.in_channels, self.in_channels, shape_str(images),
                        nd), level)
  end
  local C = images:size(-3)
  if C ~= self.in_channels then
    error(string.format("%s: argument #1 (images) %s has %d channel%s, the encoder expects %d",
                        fname, shape_str(images), C, C == 1 and "" or "s", self.in_channels),
          level)
  end
  local H, W = images:size(-2), images:size(-1)
  local h, w = self:grid_size(H, W)
  if not h then
    error(string.format("%s: argument #1 (images) %s is too small: %s", fname,
                        shape_str(images), w), level)
  end
  local m = method == "forward" and self:has_head() and self._head_min_cells
  if m and (h < m or w < m) then
    error(string.format("%s: argument #1 (images) %s is too small for the classifier: its " ..
                        "%dx%d grid must be at least %dx%d for the next max-pool", fname,
                        shape_str(images), h, w, m, m), level)
  end
  if nd == 3 then return images:unsqueeze(1), true, h, w end
  return images, false, h, w
end

--- enc:grid(images, {grad=nil}) -> a (B, L, D), h, w
--- images (B,C,H,W) or one (C,H,W) image (then a is (L, D)); L = h * w cells in row-major
--- order (cell l = (r-1)*w + c), D = enc.grid_dim.  The tape is recorded when opts.grad is
--- true, or (by default) when the encoder is in training mode or the images require grad;
--- a frozen encoder in evaluation mode therefore records nothing.
function Encoder:grid(images, opts)
  opts = opts_of(opts, self.arch .. ":grid")
  local x, single = self:_check_images(images, "grid")
  local grad = opts.grad
  if grad == nil then grad = self.training or images.requires_grad_flag end
  local fmap
  if grad then
    fmap = self:feature_map(x)
  else
    fmap = glimpse.no_grad(function() return self:feature_map(x) end)
  end
  local B, D, h, w = table.unpack(fmap.shape)
  local a = fmap:reshape(B, D, h * w):transpose(2, 3)     -- (B, L, D)
  if single then a = a:squeeze(1) end
  return a, h, w
end

--- enc:num_cells(H, W) -> L, the number of annotation vectors for an H x W image
function Encoder:num_cells(H, W)
  local h, w = self:grid_size(H, W)
  if not h then error(self.arch .. ":num_cells: " .. w, 2) end
  return h * w
end

--- enc:config() -> the options that rebuild this architecture with models.encoder(config)
--- (no weights): {name=, classifier=, num_classes=, ...}; for a checkpoint's metadata
function Encoder:config()
  local c = {name = self.arch == "SmallCNN" and "small" or self.arch,
             classifier = self:has_head(), num_classes = self.num_classes}
  if self.arch == "SmallCNN" then
    c.classifier = nil
    c.in_channels, c.channels = self.in_channels, {table.unpack(self.channels)}
    c.kernel_size, c.batch_norm = self.kernel_size, self.batch_norm
    if self.num_classes then c.dropout = self.dropout.p end
  end
  return c
end

-- forward for every encoder: logits with a head, the feature map without one
function Encoder:forward(x)
  local x4, single = self:_check_images(x, "forward", 3)
  local y
  if self:has_head() then
    y = self:head(self:feature_map(x4))
  else
    y = self:feature_map(x4)
  end
  if single then y = y:squeeze(1) end
  return y
end

-- ---------------------------------------------------------------------------------------
-- weights: initialisation like torchvision, loading, and skipping the random init

-- A Linear whose weights are left uninitialised when they are about to be loaded: VGG's first
-- classifier layer has 102M weights, and drawing them only to overwrite them costs seconds.
local function linear(din, dout, fill)
  return nn.Linear(din, dout, {init = fill and true or false})
end

-- torchvision's initialisation: kaiming normal (fan_out, ReLU) convolutions with zero bias,
-- batch norm scale 1 and shift 0; Linear layers N(0, linear_std) with zero bias when
-- linear_std is given (VGG), nn's default otherwise (ResNet's fc, as torchvision).
local function torchvision_init(model, linear_std)
  for _, m in ipairs(model:modules()) do
    if m:is_a(nn.Conv2d) then
      init.kaiming_normal_(m.weight, {mode = "fan_out", nonlinearity = "relu"})
      if m.bias then init.zeros_(m.bias) end
    elseif m:is_a(nn.BatchNorm2d) then
      init.ones_(m.weight)
      init.zeros_(m.bias)
    elseif m:is_a(nn.Linear) and linear_std then
      init.normal_(m.weight, 0, linear_std)
      init.zeros_(m.bias)
    end
  end
end

-- Load opts.weights (a safetensors path or a name -> tensor table) into model.  Keys of the
-- classification head are ignored when the model was built without one; everything else
-- must match exactly (names and shapes).
local function load_weights(model, weights, fname, level)
  local sd, meta
  if type(weights) == "string" then
    local ok, a, b = pcall(glimpse.load, weights)
    if not ok then error(fname .. ": cannot load weights: " .. tostring(a), level + 1) end
    sd, meta = a, b
  elseif type(weights) == "table" then
    sd = weights
  else
    error(fname .. ": weights must be a safetensors path or a state_dict table, got " ..
          type(weights), level + 1)
  end
  if meta and meta.arch and meta.arch ~= "" and meta.arch ~= "unknown"
     and meta.arch ~= model.arch then
    error(string.format("%s: %s holds weights for arch '%s', not '%s'", fname, weights,
                        meta.arch, model.arch), level + 1)
  end
  if not model:has_head() then
    local kept = {}
    for k, v in pairs(sd) do
      if not k:find("^" .. model.head_prefix) then kept[k] = v end
    end
    sd = kept
  end
  local ok, err = pcall(model.load_state_dict, model, sd, {strict = true})
  if not ok then
    local msg = tostring(err):gsub("^[^:]*:%d+: ", "")
    local hw = model:has_head() and sd[model.head_weight]
    local own = model:state_dict()[model.head_weight]
    if is_tensor(hw) and hw:dim() == 2 and own and hw:size(1) ~= own:size(1) then
      msg = msg .. string.format("\n  (the checkpoint's head has %d classes: pass " ..
                                 "num_classes = %d, or classifier = false)", hw:size(1),
                                 hw:size(1))
    end
    error(fname .. ": " .. msg, level + 1)
  end
end

-- common construction tail: initialise (or not) and load
local function finish(model, opts, fname, linear_std, level)
  if opts.weights == nil and opts.init ~= false then torchvision_init(model, linear_std) end
  if opts.weights ~= nil then load_weights(model, opts.weights, fname, level + 1) end
  return model
end

-- ---------------------------------------------------------------------------------------
-- VGG (Simonyan & Zisserman 2015), torchvision's layout:
--   features    Sequential: per cfg entry Conv2d(3x3, pad 1) [BatchNorm2d] ReLU, or MaxPool2d(2)
--   avgpool     AdaptiveAvgPool2d(7)
--   classifier  Linear(512*7*7, 4096) ReLU Dropout Linear(4096, 4096) ReLU Dropout Linear(4096, n)
-- grid: the features up to the last max-pool, i.e. the last conv block after its ReLU
-- (conv5_3 for VGG-16, conv5_4 for VGG-19): 14x14x512 at 224x224.

local VGG_CFGS = {
  vgg11 = {64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"},
  vgg13 = {64, 64, "M", 128, 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"},
  vgg16 = {64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M",
           512, 512, 512, "M"},
  vgg19 = {64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M",
           512, 512, 512, 512, "M"},
}

local VGG = Encoder:extend("VGG")
M.VGG = VGG

function VGG:init(arch, cfg, batch_norm, opts)
  if type(arch) ~= "string" or type(cfg) ~= "table" or type(opts) ~= "table" then
    error("models.VGG(arch, cfg, batch_norm, opts): a name, a layer list and an options table "
          .. "expected (models.vgg16{...} and the like build the named networks)", 3)
  end
  self.arch, self.in_channels, self.grid_dim = arch, 3, 512
  self.head_prefix, self.head_weight = "classifier%.", "classifier.6.weight"
  local fill = opts.weights == nil and opts.init ~= false
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
  if opts.classifier ~= false then
    local n = check_int(opts.num_classes or 1000, "num_classes", arch, 1, 4)
    local p = opts.dropout == nil and 0.5 or opts.dropout
    self.num_classes = n
    self.avgpool = AdaptiveAvgPool2d(7)
    self.classifier = nn.Sequential{
      linear(512 * 7 * 7, 4096, fill), nn.ReLU(), nn.Dropout(p),
      linear(4096, 4096, fill), nn.ReLU(), nn.Dropout(p),
      linear(4096, n, fill),
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
  -- as the garbage collector has yet to reach (8 images at 224x224: 103 MB each)
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

local function vgg_builder(arch, cfg, batch_norm)
  --- models.vggNN(opts) / models.vggNN_bn(opts) -> VGG; opts: weights (safetensors path or
  --- state_dict), classifier=true (false: features only), num_classes=1000, dropout=0.5,
  --- init=true (false: leave weights uninitialised, for loading them yourself)
  return function(opts)
    local fname = "models." .. arch
    opts = opts_of(opts, fname)
    local m = VGG(arch, cfg, batch_norm, opts)
    return finish(m, opts, fname, 0.01, 2)
  end
end

for name, cfg in pairs(VGG_CFGS) do
  M[name] = vgg_builder(name, cfg, false)
  M[name .. "_bn"] = vgg_builder(name .. "_bn", cfg, true)
end

-- ---------------------------------------------------------------------------------------
-- ResNet (He et al. 2016), torchvision's layout (v1.5: the stride sits on the 3x3 conv):
--   conv1 (7x7/2, pad 3) bn1 relu maxpool (3x3/2, pad 1) layer1..layer4 avgpool fc
-- BasicBlock: conv1 (3x3/s) bn1 relu conv2 (3x3) bn2 [downsample = Sequential{1x1/s conv, bn}]
-- Bottleneck: conv1 (1x1) bn1 conv2 (3x3/s) bn2 conv3 (1x1, 4x wider) bn3 relu [downsample]
-- grid: layer4's output, 7x7x512 (x4 for Bottleneck) at 224x224.

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

local ResNet = Encoder:extend("ResNet")
M.ResNet = ResNet

function ResNet:init(arch, block, counts, opts)
  if type(arch) ~= "string" or (block ~= BasicBlock and block ~= Bottleneck)
     or type(counts) ~= "table" or type(opts) ~= "table" then
    error("models.ResNet(arch, block, counts, opts): a name, models.BasicBlock or "
          .. "models.Bottleneck, a list of block counts and an options table expected "
          .. "(models.resnet18{...} and the like build the named networks)", 3)
  end
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
  if opts.classifier ~= false then
    local n = check_int(opts.num_classes or 1000, "num_classes", arch, 1, 4)
    self.num_classes = n
    self.avgpool = AdaptiveAvgPool2d(1)
    self.fc = linear(cin, n, true)
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

local RESNETS = {
  resnet18 = {BasicBlock, {2, 2, 2, 2}},
  resnet34 = {BasicBlock, {3, 4, 6, 3}},
  resnet50 = {Bottleneck, {3, 4, 6, 3}},
}

for arch, spec in pairs(RESNETS) do
  --- models.resnet18/34/50(opts) -> ResNet; opts: weights (safetensors path or state_dict),
  --- classifier=true (false: no avgpool/fc, features only), num_classes=1000,
  --- zero_init_residual=false, init=true (false: skip the random initialisation)
  M[arch] = function(opts)
    local fname = "models." .. arch
    opts = opts_of(opts, fname)
    local m = ResNet(arch, spec[1], spec[2], opts)
    finish(m, opts, fname, nil, 2)
    if opts.zero_init_residual and opts.weights == nil and opts.init ~= false then
      -- each block starts as the identity (Goyal et al. 2017): its last BN scale is 0
      for _, b in ipairs(m:modules()) do
        if b:is_a(Bottleneck) then init.zeros_(b.bn3.weight)
        elseif b:is_a(BasicBlock) then init.zeros_(b.bn2.weight) end
      end
    end
    return m
  end
end

-- ---------------------------------------------------------------------------------------
-- SmallCNN: the from-scratch encoder for the sandbox's small pictures.  Blocks of
-- Conv2d(k x k, pad k//2) [BatchNorm2d] ReLU MaxPool2d(2); each block halves H and W, so a
-- 64x64 image with three blocks gives an 8x8 grid (L = 64) of channels[#channels] features.
-- With num_classes, a head (global average pool, dropout, Linear) makes it a classifier for
-- pretraining; grid() ignores the head.

local SmallCNN = Encoder:extend("SmallCNN")
M.SmallCNN = SmallCNN

--- models.SmallCNN{in_channels=3, channels={32,64,128}, kernel_size=3, batch_norm=false,
--- num_classes=nil, dropout=0, weights=nil} -> encoder; grid(images (B,C,H,W)) ->
--- (B, (H/2^n)*(W/2^n), channels[n]) for n = #channels blocks
function SmallCNN:init(opts)
  local fname = "SmallCNN"
  opts = opts_of(opts, fname, 3)
  self.arch = "SmallCNN"
  self.in_channels = check_int(opts.in_channels or 3, "in_channels", fname, 1, 3)
  local channels = opts.channels or {32, 64, 128}
  if type(channels) ~= "table" or #channels == 0 then
    error("SmallCNN: channels must be a non-empty list of integers, got " .. tostring(channels),
          3)
  end
  local k = check_int(opts.kernel_size or 3, "kernel_size", fname, 1, 3)
  if k % 2 == 0 then error("SmallCNN: kernel_size must be odd (size-preserving padding), got " ..
                           k, 3) end
  local layers, c = {}, self.in_channels
  for i, v in ipairs(channels) do
    check_int(v, "channels[" .. i .. "]", fname, 1, 3)
    layers[#layers + 1] = nn.Conv2d(c, v, k, {padding = k // 2})
    if opts.batch_norm then layers[#layers + 1] = nn.BatchNorm2d(v) end
    layers[#layers + 1] = nn.ReLU()
    layers[#layers + 1] = nn.MaxPool2d(2)
    c = v
  end
  self.channels = {table.unpack(channels)}
  self.kernel_size, self.batch_norm = k, opts.batch_norm and true or false
  self.grid_dim = c
  self.head_prefix, self.head_weight = "classifier%.", "classifier.weight"
  self.features = nn.Sequential(layers)
  if opts.num_classes ~= nil then
    local n = check_int(opts.num_classes, "num_classes", fname, 1, 3)
    self.num_classes = n
    self.dropout = nn.Dropout(opts.dropout or 0)
    self.classifier = nn.Linear(c, n)
  end
  if opts.weights == nil and opts.init ~= false then torchvision_init(self) end
  if opts.weights ~= nil then load_weights(self, opts.weights, fname, 3) end
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

-- ---------------------------------------------------------------------------------------
-- by name

local BUILDERS = {small = function(opts) return SmallCNN(opts) end}
for name in pairs(VGG_CFGS) do
  BUILDERS[name], BUILDERS[name .. "_bn"] = M[name], M[name .. "_bn"]
end
for name in pairs(RESNETS) do BUILDERS[name] = M[name] end

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

-- ---------------------------------------------------------------------------------------
-- preprocessing

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
  opts = opts_of(opts, fname)
  size = check_int(size or 224, "size", fname, 1)
  if not is_tensor(img) then
    error(fname .. ": argument #1 (img) must be a (C,H,W) or (H,W) tensor, got " .. type(img), 2)
  end
  if img:dim() == 2 then img = img:unsqueeze(1) end
  if img:dim() ~= 3 then
    error(fname .. ": argument #1 (img) must be (C,H,W) or (H,W), got " .. shape_str(img), 2)
  end
  local C = img:size(1)
  if C == 1 then
    img = glimpse.cat({img, img, img}, 1)
  elseif C == 4 then
    img = img:narrow(1, 1, 3)
  elseif C ~= 3 then
    error(string.format("%s: argument #1 (img) %s has %d channels (1, 3 or 4 expected)", fname,
                        shape_str(img), C), 2)
  end
  local H, W = img:size(2), img:size(3)
  local filter = opts.filter or "bicubic"
  local out
  if opts.resize == false then
    out = glimpse.image.resize(img, size, size, {filter = filter})
  else
    local s = opts.resize or math.floor(size * 256 / 224 + 0.5)
    check_int(s, "resize", fname, size)
    local h, w
    if H <= W then h, w = s, s * W // H else h, w = s * H // W, s end   -- torchvision's Resize
    out = glimpse.image.center_crop(glimpse.image.resize(img, h, w, {filter = filter}), size)
  end
  if opts.normalize ~= false then
    out = glimpse.image.normalize(out, opts.mean or M.IMAGENET_MEAN, opts.std or M.IMAGENET_STD)
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
    error("models.fill_deterministic_: argument #1 must be a Module, got " .. type(m), 2)
  end
  seed = seed or 0
  if math.type(seed) ~= "integer" or seed < 0 then
    error("models.fill_deterministic_: seed must be an integer >= 0, got " .. tostring(seed), 2)
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
