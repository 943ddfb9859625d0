--- glimpse.models.captioner.images -- what the Captioner takes as an image: the channels and
-- size it was trained on (cap:input_shape), a check that names both shapes or converts
-- (cap:check_input), the picture as the model sees it (cap:seen: a file read in the model's
-- channels, the size checked), and the preparation before the encoder (cap:prepare:
-- channels, size and normalisation from config.image).  Methods of the Captioner (model.lua
-- mixes them into the class).
--
-- One rule for the size, the same in cap:caption, the REPL and `glimpse caption`: an image
-- whose size differs from the model's (config.image, else the size it was trained on) is an
-- error naming both unless resize is asked; so is a tensor with other channels.  A file is
-- read in the model's channel count (a colour file becomes grey for a grey model).
local glimpse = require "glimpse"
local check = require "glimpse.check"

local Captioner = {}   -- methods

--- cap:input_shape() -> C, H, W: the images the model takes.  C: config.image.channels or
--- the encoder's; H, W: config.image's size, else the size of the images of the first
--- cap:loss (kept in config.trained_on and in the checkpoint); nil while unknown.
function Captioner:input_shape()
  local spec, seen = self.config.image or {}, self.config.trained_on or {}
  return spec.channels or self.encoder.in_channels or seen[1], spec.height or seen[2],
         spec.width or seen[3]
end

--- cap:check_input(images (C,H,W), (H,W) or (B,C,H,W), {resize=false}) -> images
-- The images unchanged when their channels and size are cap:input_shape()'s; with
-- resize=true converted to them (grey <-> RGB, RGBA -> RGB, bilinear resize); else an error
-- naming both shapes.
function Captioner:check_input(x, opts)
  return self:_check_input(x, opts, "Captioner:check_input", 2)
end

-- one image (C,H,W) with c channels converted to C (grey <-> RGB, RGBA -> RGB); nil if it
-- cannot be
local function convert_channels(img, c, C)
  if C == 1 and c >= 3 then img = glimpse.image.to_grey(img:narrow(1, 1, 3))
  elseif C == 3 and c == 1 then img = glimpse.cat({img, img, img}, 1)
  elseif C == 3 and c == 4 then img = img:narrow(1, 1, 3)
  else return nil end
  if img:dim() == 2 then img = img:unsqueeze(1) end
  return img
end

function Captioner:_check_input(x, opts, fname, level)
  opts = opts or {}
  if type(opts) ~= "table" then
    check.fail(level + 1, "%s: opts must be a table, got %s", fname, type(opts))
  end
  if not glimpse.is_tensor(x) or x:dim() < 2 or x:dim() > 4 then
    check.fail(level + 1, "%s: images must be (C,H,W), (H,W) or (B,C,H,W) tensors, got %s",
               fname, check.shape(x))
  end
  local C, H, W = self:input_shape()
  local batched = x:dim() == 4
  local im = x:dim() == 2 and x:unsqueeze(1) or x
  local d = batched and 1 or 0
  local c, h, w = im.shape[d + 1], im.shape[d + 2], im.shape[d + 3]
  if c == C and (not H or (h == H and w == W)) then return x end
  local want = string.format("%sx%s", C, H and (H .. "x" .. W) or "HxW")
  if not opts.resize then
    check.fail(level + 1, "%s: the image is %s (%dx%dx%d), the model takes %s (channels x " ..
               "height x width); pass resize = true to convert", fname, check.shape(x), c, h,
               w, want)
  end
  local function convert(one)
    if c ~= C then
      one = convert_channels(one, c, C)
      if not one then
        check.fail(level + 2, "%s: cannot convert a %d-channel image to %d channels", fname, c, C)
      end
    end
    if H and (h ~= H or w ~= W) then one = glimpse.image.resize(one, H, W) end
    return one
  end
  if not batched then return convert(im) end
  local list = {}
  for b = 1, im.shape[1] do list[b] = convert(im[b]) end
  return glimpse.stack(list, 1)
end

--- cap:seen(image, {resize=false}) -> (C,H,W) in [0,1], colour: the picture as the model
--- sees it, before normalisation.  image: a file name (read in the model's channel count) or
--- a (C,H,W) / (H,W) tensor; its size (and a tensor's channels) must be the model's unless
--- resize = true (cap:check_input).  colour: the colour spread of the picture as given
--- (glimpse.captioner.familiar.colour; 0 for grey), before it was made grey.
function Captioner:seen(img, opts)
  return self:_seen(img, opts, "Captioner:seen", 2)
end

function Captioner:_seen(img, opts, fname, level)
  local familiar = require "glimpse.models.captioner.familiar"
  local C = self:input_shape()
  local name
  if type(img) == "string" then
    name = img
    local ok, t = pcall(glimpse.image.load, img)
    if not ok then check.fail(level + 1, "%s: %s", fname, check.strip(t)) end
    img = t
    local colour = familiar.colour(img)
    if img.shape[1] ~= C then       -- read again in the model's channels (as image.load does)
      local okc, t2 = pcall(glimpse.image.load, name, {channels = C})
      if not okc then check.fail(level + 1, "%s: %s", fname, check.strip(t2)) end
      img = t2
    end
    local ok2, out = pcall(self._check_input, self, img, opts, fname, 1)
    if not ok2 then
      local msg = check.strip(out)
      if msg:sub(1, #fname + 2) == fname .. ": " then msg = msg:sub(#fname + 3) end
      check.fail(level + 1, "%s: %s: %s", fname, name, msg)
    end
    return out, colour
  end
  if glimpse.is_tensor(img) and img:dim() == 2 then img = img:unsqueeze(1) end
  if not glimpse.is_tensor(img) or img:dim() ~= 3 then
    check.fail(level + 1, "%s: an image must be a file name or a (C,H,W) tensor, got %s",
               fname, check.shape(img))
  end
  local colour = familiar.colour(img)
  return self:_check_input(img, opts, fname, level + 1), colour
end

--- cap:familiar(image, {resize=false}) -> familiar, reasons: whether the image (a file name
--- or a tensor, as cap:seen takes it) is like the model's training images, by the statistics
--- of glimpse.captioner.familiar against the summary of them the checkpoint keeps
--- (cap.familiar_summary); reasons: the statistics out of their training range.  nil, {}
--- when the model keeps no summary.
function Captioner:familiar(img, opts)
  local seen, colour = self:_seen(img, opts, "Captioner:familiar", 2)
  return self:_judge(seen, colour)
end

function Captioner:_judge(seen, colour)
  if not self.familiar_summary then return nil, {} end
  local familiar = require "glimpse.models.captioner.familiar"
  return familiar.judge(self.familiar_summary, familiar.stats(seen, colour))
end

--- cap:about() -> text: what the model knows (its checkpoint's description of the training
--- images and captions, cap.description), its input shape and its vocabulary
function Captioner:about()
  local C, H, W = self:input_shape()
  local words = {}
  for i, w in ipairs(self.vocab:totable()) do
    if i > 4 then words[#words + 1] = w end       -- after <pad> <start> <end> <unk>
  end
  local lines = {self.description or "(the checkpoint does not say what it was trained on)",
                 string.format("input: %s channel%s, %sx%s pixels; vocabulary: %d words%s",
                               tostring(C), C == 1 and "" or "s", tostring(H or "any"),
                               tostring(W or "any"), #words, self.description and "" or
                               ": " .. table.concat(words, " ")),
                 self.familiar_summary and string.format("unfamiliar images are flagged " ..
                   "against statistics of %d training images (cap:familiar)",
                   self.familiar_summary.n) or "no summary of the training images: no " ..
                   "familiarity check"}
  return table.concat(lines, "\n")
end

--- cap:prepare(image) -> (C,H,W) ready for the encoder.  image: a file name (read with
--- glimpse.image.load) or a (C,H,W) / (H,W) tensor in [0,1]; converted to the configured
--- channel count, resized to the configured size and normalised with the configured mean/std
--- (config.image; nothing is done where it says nothing).
function Captioner:prepare(img)
  local spec = self.config.image or {}
  if type(img) == "string" then
    local ok, t = pcall(glimpse.image.load, img, {channels = spec.channels})
    if not ok then check.fail(2, "Captioner: %s", check.strip(t)) end
    img = t
  end
  if not glimpse.is_tensor(img) or img:dim() < 2 or img:dim() > 3 then
    check.fail(2, "Captioner: an image must be a file name or a (C,H,W) tensor, got %s",
               check.shape(img))
  end
  if img:dim() == 2 then img = img:unsqueeze(1) end
  local C = img.shape[1]
  local want = spec.channels or self.encoder.in_channels
  if C ~= want then
    img = convert_channels(img, C, want)
    if not img then
      check.fail(2, "Captioner: the image has %d channels, the encoder expects %d", C, want)
    end
  end
  if spec.height and spec.width and (img.shape[2] ~= spec.height or img.shape[3] ~= spec.width) then
    img = glimpse.image.resize(img, spec.height, spec.width)
  end
  if spec.mean and spec.std then img = glimpse.image.normalize(img, spec.mean, spec.std) end
  return img
end

return Captioner
