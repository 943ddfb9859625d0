--- glimpse.models.encoders.base -- what every image encoder shares: the Encoder base class
-- (argument checks, grid, num_cells, config, forward), torchvision's initialisation, loading
-- weights with strict checking, and the options every torchvision builder takes.
--
-- A subclass sets arch, in_channels, grid_dim, head_prefix, head_weight and defines
-- feature_map(x4) (the last block's output for a checked 4-D input), grid_size(H, W) (nil,
-- reason when too small), has_head() and head(fmap).
local glimpse = require "glimpse"
local check = require "glimpse.check"
local options = require "glimpse.options"
local nn = require "glimpse.nn"
local init = require "glimpse.nn.weight_init"

local M = {}

local is_tensor = glimpse.is_tensor

-- v, an integer >= lo, or an error "fname: what must be an integer >= lo" at `level`
function M.check_int(v, what, fname, lo, level)
  if math.type(v) ~= "integer" or v < lo then
    check.fail((level or 2) + 1, "%s: %s must be an integer >= %d, got %s", fname, what, lo,
               tostring(v))
  end
  return v
end
local check_int = M.check_int

--- The options of the torchvision builders (models.vgg16{...}, models.resnet18{...}).
M.TORCHVISION_ENTRIES = {
  {"weights", "string|table", nil, help = "a safetensors path or a state_dict table"},
  {"classifier", "boolean", true, help = "keep the classification head (false: features only)"},
  {"num_classes", "int", 1000, help = "classes of the head (>= 1)"},
  {"init", "boolean", true, help = "torchvision's random init (false: leave the weights " ..
                                   "uninitialised, for loading them yourself)"},
}

-- ---------------------------------------------------------------------------------------
-- the encoder base class

local Encoder = nn.Module:extend("Encoder")
M.Encoder = Encoder

local GRID_OPTIONS = options.declare("enc:grid", {
  {"grad", "boolean", nil, help = "record the tape (default: in training mode or when the " ..
                                  "images require grad)"},
})

-- Check images against the encoder: a (B,C,H,W) or (C,H,W) tensor with the right channel
-- count, big enough to leave at least one cell.  Returns the 4-D tensor, whether the input
-- was a single image, and the grid size.
function Encoder:_check_images(images, method, level)
  local fname = self.arch .. ":" .. method
  level = (level or 2) + 1
  if not is_tensor(images) then
    check.fail(level, "%s: argument #1 (images) must be a tensor (B,%d,H,W) or (%d,H,W), got %s",
               fname, self.in_channels, self.in_channels, type(images))
  end
  local nd = images:dim()
  if nd ~= 3 and nd ~= 4 then
    check.fail(level, "%s: argument #1 (images) must be (B,%d,H,W) or (%d,H,W), got %s " ..
               "(%d dims)", fname, self.in_channels, self.in_channels, check.shape(images), nd)
  end
  local C = images:size(-3)
  if C ~= self.in_channels then
    check.fail(level, "%s: argument #1 (images) %s has %d channel%s, the encoder expects %d",
               fname, check.shape(images), C, C == 1 and "" or "s", self.in_channels)
  end
  local H, W = images:size(-2), images:size(-1)
  local h, w = self:grid_size(H, W)
  if not h then
    check.fail(level, "%s: argument #1 (images) %s is too small: %s", fname,
               check.shape(images), w)
  end
  local m = method == "forward" and self:has_head() and self._head_min_cells
  if m and (h < m or w < m) then
    check.fail(level, "%s: argument #1 (images) %s is too small for the classifier: its " ..
               "%dx%d grid must be at least %dx%d for the next max-pool", fname,
               check.shape(images), h, w, m, m)
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
  if opts ~= nil and type(opts) ~= "table" then
    check.fail(2, "%s:grid: options must be a table, got %s", self.arch, type(opts))
  end
  local o = GRID_OPTIONS:check(opts, 2)
  local x, single = self:_check_images(images, "grid")
  local grad = o.grad
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
function M.linear(din, dout, fill)
  return nn.Linear(din, dout, {init = fill and true or false})
end

-- torchvision's initialisation: kaiming normal (fan_out, ReLU) convolutions with zero bias,
-- batch norm scale 1 and shift 0; Linear layers N(0, linear_std) with zero bias when
-- linear_std is given (VGG), nn's default otherwise (ResNet's fc, as torchvision).
function M.torchvision_init(model, linear_std)
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

-- Load weights (a safetensors path or a name -> tensor table) into model.  Keys of the
-- classification head are ignored when the model was built without one; everything else
-- must match exactly (names and shapes).
function M.load_weights(model, weights, fname, level)
  local sd, meta
  if type(weights) == "string" then
    local ok, a, b = pcall(glimpse.load, weights)
    if not ok then check.fail(level + 1, "%s: cannot load weights: %s", fname, tostring(a)) end
    sd, meta = a, b
  elseif type(weights) == "table" then
    sd = weights
  else
    check.fail(level + 1, "%s: weights must be a safetensors path or a state_dict table, got %s",
               fname, type(weights))
  end
  if meta and meta.arch and meta.arch ~= "" and meta.arch ~= "unknown"
     and meta.arch ~= model.arch then
    check.fail(level + 1, "%s: %s holds weights for arch '%s', not '%s'", fname, weights,
               meta.arch, model.arch)
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
    local msg = check.strip(err)
    local hw = model:has_head() and sd[model.head_weight]
    local own = model:state_dict()[model.head_weight]
    if is_tensor(hw) and hw:dim() == 2 and own and hw:size(1) ~= own:size(1) then
      msg = msg .. string.format("\n  (the checkpoint's head has %d classes: pass " ..
                                 "num_classes = %d, or classifier = false)", hw:size(1),
                                 hw:size(1))
    end
    check.fail(level + 1, "%s: %s", fname, msg)
  end
end

-- the construction tail of the torchvision builders: initialise (or not) and load
function M.finish(model, o, fname, linear_std, level)
  if o.weights == nil and o.init then M.torchvision_init(model, linear_std) end
  if o.weights ~= nil then M.load_weights(model, o.weights, fname, level + 1) end
  return model
end

-- o.num_classes checked as the heads have always checked it
function M.num_classes(o, fname, level)
  return check_int(o.num_classes, "num_classes", fname, 1, level + 1)
end

return M
